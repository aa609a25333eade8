# Dropped fraction of the routed assignments over training.
# gnuplot -e "dir='DIR'; factors='0.5 1.0'; variant='cf1.0-position-aux'; layers=4; out='X.png'" drops.gp
#   DIR/NAME.drop: step mean_over_blocks block_0 ... block_{layers-1}
# Top: one line per MoE block for one variant. Bottom: the mean over blocks for every factor,
# aux loss on, position policy solid and score policy dashed (the policy decides which tokens
# drop, not how many, so the pairs should nearly coincide).
W = 1100
H = 860
load 'plots/style.gp'
set key samplen 5
set output out
set multiplot layout 2, 1 title 'Chapter 2: dropped fraction of the routed assignments' font ",13"
set key outside right top
set rmargin at screen 0.82
set ylabel 'dropped fraction'
set yrange [0:*]
set title sprintf('%s, per MoE block (moving average of 5 steps)', variant)
# moving average over 5 steps: a small ring of the last values, restarted per column
ma(x) = (b5 = b4, b4 = b3, b3 = b2, b2 = b1, b1 = x, (b1 + b2 + b3 + b4 + b5) / 5.0)
init(x) = (b1 = b2 = b3 = b4 = b5 = x)
f = sprintf('%s/%s.drop', dir, variant)
plot for [l = 0:layers - 1] f using 1:(($0 == 0 ? init(column(l + 3)) : 0), ma(column(l + 3))) \
     with lines lt l + 1 lw 2 title sprintf('block %d', l)
set title 'mean over MoE blocks, moving average of 5 steps, balance aux (solid: position policy, dashed: score)'
set xlabel 'optimizer step'
plot for [i = 1:words(factors)] sprintf('%s/cf%s-position-aux.drop', dir, word(factors, i)) \
       using 1:(($0 == 0 ? init($2) : 0), ma($2)) with lines lt i lw 2 title sprintf('factor %s, position', word(factors, i)), \
     for [i = 1:words(factors)] sprintf('%s/cf%s-score-aux.drop', dir, word(factors, i)) \
       using 1:(($0 == 0 ? init($2) : 0), ma($2)) with lines lt i lw 2 dt 2 title sprintf('factor %s, score', word(factors, i))
unset multiplot
