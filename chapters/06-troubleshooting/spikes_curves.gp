# Acting on a spike (chapters/06-troubleshooting/spikes.sh): one seed's validation loss around the
# corrupted stretch under none, skip and rollback; the damage of none, beta2 0.95, clip 1 and
# eps 1e-5.
# gnuplot -e "dir='D'; out='X.png'; from=125; ncor=15; steps=300; seed=1; n=8" spikes_curves.gp
#   D/NAME.val: "step val_loss" of an arm's kept steps (seed `seed`); D/NAME.delta: "step delta",
#   the arm's validation loss minus its clean run's, mean over the n seeds (none, beta2-0.95,
#   clip-1, eps-1e-5)
W = 1100
H = 860
load 'plots/style.gp'
load 'chapters/series.gp'
lo = from - 25 > 0 ? from - 25 : 0
# the stretch: steps from + 1 .. from + ncor train on random tokens
set object 1 rect from from + 0.5, graph 0 to from + ncor + 0.5, graph 1 behind \
    fc rgb "#f2e0c9" fs solid 1.0 noborder
set multiplot title sprintf("Chapter 6: a stretch of %d batches of random tokens at steps %d-%d", \
    ncor, from + 1, from + ncor) font ",12"
set size 1, 0.52
set origin 0, 0.44
set title sprintf('what the run does at a loss spike: nothing, skip the update, roll back (seed %d; beta2 0.999, no clipping)', seed)
set xlabel 'optimizer step'
set ylabel 'validation loss (nats a byte)'
set xrange [lo:steps]
set key top right
plot dir.'/clean.val' using 1:2 with lines lt 15 lw 2.5 title 'clean (no stretch)', \
     dir.'/none.val' using 1:2 with lines lt 2 lw 2 title 'none', \
     dir.'/skip.val' using 1:2 with lines lt 9 lw 2 title 'skip', \
     dir.'/rollback.val' using 1:2 with lines lt 3 lw 2.5 title 'rollback'
set size 0.5, 0.44
set origin 0, 0
set title sprintf('AdamW beta2, eps and clipping, mean over %d seeds: during the stretch', n)
set ylabel 'validation loss minus its clean run'
set xrange [from - 5:from + ncor + 15]
set key top right
plot 0 with lines lc rgb "#888888" dt 3 notitle, \
     dir.'/none.delta' using 1:2 with linespoints lt 2 lw 2 pt 7 ps 0.7 title 'none (beta2 0.999)', \
     dir.'/beta2-0.95.delta' using 1:2 with linespoints lt 13 lw 2 pt 12 ps 0.9 title 'beta2 0.95', \
     dir.'/clip-1.delta' using 1:2 with linespoints lt 14 lw 2 pt 14 ps 0.9 title 'clip 1', \
     dir.'/eps-1e-5.delta' using 1:2 with linespoints lt 4 lw 2 dt 4 pt 4 ps 0.9 title 'eps 1e-5'
set origin 0.5, 0
set title sprintf('and after it: the damage that lasts (mean over %d seeds)', n)
set ylabel ''
set xrange [from + ncor + 10:steps]
plot 0 with lines lc rgb "#888888" dt 3 notitle, \
     dir.'/none.delta' using 1:2 with lines lt 2 lw 2 title 'none (beta2 0.999)', \
     dir.'/beta2-0.95.delta' using 1:2 with lines lt 13 lw 2 title 'beta2 0.95', \
     dir.'/clip-1.delta' using 1:2 with lines lt 14 lw 2 title 'clip 1', \
     dir.'/eps-1e-5.delta' using 1:2 with lines lt 4 lw 2 dt 4 title 'eps 1e-5'
unset multiplot
