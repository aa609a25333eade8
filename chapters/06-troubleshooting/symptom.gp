# One gallery arm's symptom against the healthy run's (chapters/06-troubleshooting/gallery.sh).
# gnuplot -e "dir='DIR'; name='NAME'; label='Y LABEL'; out='X.png'" symptom.gp
#   DIR/NAME.dat and DIR/NAME.healthy.dat: step value (symptoms.sh)
W = 720
H = 400
load 'plots/style.gp'
load 'chapters/series.gp'
set title sprintf("Chapter 6 gallery: %s", name)
set xlabel 'optimizer step'
set ylabel label
set key top right
plot sprintf('%s/%s.dat', dir, name) using 1:2 with lines lt 2 lw 2 title name, \
     sprintf('%s/%s.healthy.dat', dir, name) using 1:2 with lines lt 9 lw 2 title 'healthy'
