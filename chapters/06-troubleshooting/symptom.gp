# One gallery arm's symptom against the healthy run's (chapters/06-troubleshooting/gallery.sh).
# gnuplot -e "dir='DIR'; name='NAME'; label='Y LABEL'; healthy=1; out='X.png'" symptom.gp
#   DIR/NAME.dat and (healthy=1) DIR/NAME.healthy.dat: step value (symptoms.sh); healthy=0 when
#   the healthy run has no such series (one process: no dist.csv)
W = 720
H = 400
load 'plots/style.gp'
load 'chapters/series.gp'
set title sprintf("Chapter 6 gallery: %s", name)
set xlabel 'optimizer step'
set ylabel label
set key top right
if (healthy) {
    plot sprintf('%s/%s.dat', dir, name) using 1:2 with lines lt 2 lw 2 title name, \
         sprintf('%s/%s.healthy.dat', dir, name) using 1:2 with lines lt 9 lw 2 title 'healthy'
} else {
    plot sprintf('%s/%s.dat', dir, name) using 1:2 with lines lt 2 lw 2 title name
}
