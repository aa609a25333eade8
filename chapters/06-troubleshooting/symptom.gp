# One gallery arm's symptom against the healthy run's (chapters/06-troubleshooting/gallery.sh).
# gnuplot -e "dir='DIR'; name='NAME'; label='Y LABEL'; healthy=1; out='X.png'" symptom.gp
#   DIR/NAME.dat and (healthy=1) DIR/NAME.healthy.dat: step value (symptoms.sh); healthy=0 when
#   the healthy run has no such series (one process: no dist.csv)
# An arm that stops early (a divergence ends the run) would be a few steps squeezed against the
# axis of the healthy run's whole length: its figure gets a second panel on the steps it ran.
W = 720
H = 400
stats sprintf('%s/%s.dat', dir, name) using 1 nooutput
last = STATS_max
short = 0
if (healthy) {
    stats sprintf('%s/%s.healthy.dat', dir, name) using 1 nooutput
    short = last < STATS_max / 2
}
if (short) { W = 1200 }
load 'plots/style.gp'
load 'chapters/series.gp'
set xlabel 'optimizer step'
set ylabel label
set key top right
if (short) {
    set multiplot layout 1, 2 title sprintf("Chapter 6 gallery: %s (the run ends at step %d)", name, last) font ",12"
    set title sprintf('the whole run: %d steps of the healthy run', STATS_max)
    set arrow 1 from last, graph 0 to last, graph 1 nohead lc rgb "#999999" dt 3
    set label 1 sprintf(' %s ends: step %d', name, last) at last, graph 0.5 left textcolor rgb "#666666"
    plot sprintf('%s/%s.dat', dir, name) using 1:2 with lines lt 2 lw 2 title name, \
         sprintf('%s/%s.healthy.dat', dir, name) using 1:2 with lines lt 9 lw 2 title 'healthy'
    unset arrow 1
    unset label 1
    set title sprintf('steps 1-%d, the steps %s ran', last, name)
    set xrange [1:last]
    set xtics 1
    set offsets 0.2, 0.2, graph 0.05, graph 0.05
    set key top left
    plot sprintf('%s/%s.dat', dir, name) using 1:2 with linespoints lt 2 lw 2 pt 7 ps 1 title name, \
         sprintf('%s/%s.healthy.dat', dir, name) using 1:2 with linespoints lt 9 lw 2 title 'healthy'
    unset multiplot
} else {
    set title sprintf("Chapter 6 gallery: %s", name)
    if (healthy) {
        plot sprintf('%s/%s.dat', dir, name) using 1:2 with lines lt 2 lw 2 title name, \
             sprintf('%s/%s.healthy.dat', dir, name) using 1:2 with lines lt 9 lw 2 title 'healthy'
    } else {
        plot sprintf('%s/%s.dat', dir, name) using 1:2 with lines lt 2 lw 2 title name
    }
}
