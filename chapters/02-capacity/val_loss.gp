# Validation loss per capacity factor, one panel per drop policy x balance, one line per factor
# (and the dropless model with the same balance, dashed black).
# gnuplot -e "dir='DIR'; factors='0.5 1.0'; out='X.png'; xcol=1; xlab='optimizer step'" val_loss.gp
#   DIR/NAME.val: step cumulative_training_seconds val_loss; NAME = cfF-POLICY-BALANCE or
#   dropless-BALANCE. xcol 1 plots against the step, 2 against the training time (the
#   speed/quality trade of a capacity: a smaller buffer is cheaper per step but drops more).
W = 1200
H = 860
load 'plots/style.gp'
set output out
what = (xcol == 1) ? 'over training' : 'against training time (padded buffers)'
set multiplot layout 2, 2 title sprintf('Chapter 2: validation loss per capacity factor, %s', what) font ",13"
set key top right
set xlabel xlab
set ylabel 'validation loss (nats/byte)'
set yrange [*:*]
set style line 20 lc rgb "#000000" lw 2 dt 2 pt 6 ps 0.8
do for [aux in "aux none"] {
  do for [policy in "position score"] {
    set title sprintf('drop policy %s, balance %s', policy, aux)
    plot for [i = 1:words(factors)] sprintf('%s/cf%s-%s-%s.val', dir, word(factors, i), policy, aux) \
           using xcol:3 with linespoints lt i lw 2 title sprintf('factor %s', word(factors, i)), \
         sprintf('%s/dropless-%s.val', dir, aux) using xcol:3 with linespoints ls 20 title 'dropless'
  }
}
unset multiplot
