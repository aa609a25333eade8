# How the experts of each MoE arm move apart and share the load over training.
# gnuplot -e "dir='DIR'; names='copy noise ...'; types='1 2 ...'; out='X.png'" experts.gp
#   DIR/NAME.exp: step expert_sim maxvio maxvio_avg10 (means over the MoE blocks, router.csv;
#   the last a moving average over 10 steps)
W = 1250
H = 560
load 'plots/style.gp'
# types: one line type per name (chapters/series.gp): an -lr1e-3 arm has its base arm's
# colour, dashed, with an open point
load 'chapters/series.gp'
set output out
set multiplot layout 1, 2 title 'Chapter 4: the experts of each MoE arm (mean over MoE blocks)' font ",13"
set xlabel 'optimizer step (of the run)'
set key top right
set title 'expert similarity: mean pairwise cosine of the experts'' weights'
set ylabel 'cosine similarity'
set yrange [-0.05:1.05]
plot for [i = 1:words(names)] sprintf('%s/%s.exp', dir, word(names, i)) \
       using 1:2 with lines lt word(types, i) + 0 lw 2 title word(names, i)
set title 'load imbalance: MaxVio (moving average of 10 steps)'
set ylabel 'MaxVio'
set yrange [0:*]
plot for [i = 1:words(names)] sprintf('%s/%s.exp', dir, word(names, i)) \
       using 1:4 with lines lt word(types, i) + 0 lw 2 title word(names, i)
unset multiplot
