# Part 1 of chapter 5's ablation: per arm, the share of the seeds that diverged, and the spikes of
# the runs that did not.
# gnuplot -e "data='F'; out='X.png'; n=10; steps=300; H=500" stability.gp
#   F: one row per arm, "y name diverged_frac grad_spikes loss_spikes" (y 1 at the top)
if (!exists("W")) W = 1000
load 'plots/style.gp'
set output out
set multiplot layout 1, 2 title sprintf('Chapter 5: the fragile model under each method, %d seeds per arm, %d steps', n, steps)
set yrange [0.3:*] reverse
set offsets 0, 0, 0.7, 0
set ytics scale 0 font ",9"
set grid xtics
set style fill solid 0.7 border -1
set key outside top center horizontal font ",9"
set xlabel 'share of the seeds whose loss went above 7 nats'
set xrange [0:1]
plot data using ($3 / 2):1:(0):($3):($1 - 0.35):($1 + 0.35):ytic(2) with boxxyerror \
       lc rgb "#d55e00" title 'diverged'
set xlabel 'spikes per run that did not diverge'
set autoscale x
set xrange [0:*]
plot data using (0):1:ytic(2) with dots notitle, \
     data using ($4 / 2):($1 - 0.18):($4 / 2):(0.16) with boxxyerror lc rgb "#0072b2" \
       title 'gradient norm', \
     data using ($5 / 2):($1 + 0.18):($5 / 2):(0.16) with boxxyerror lc rgb "#009e73" \
       title 'loss'
unset multiplot
