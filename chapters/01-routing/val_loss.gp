# Validation loss over training, one line per variant (unsmoothed: each point an evaluation).
# gnuplot -e "dir='DIR'; names='a b c'; out='X.png'" val_loss.gp   (DIR/NAME.val: step loss)
load 'plots/style.gp'
load 'chapters/series.gp'
set output out
set title 'Chapter 1: validation loss per routing / balancing variant'
set xlabel 'optimizer step'
set ylabel 'validation loss (nats/byte)'
set key outside right top
plot for [i = 1:words(names)] sprintf('%s/%s.val', dir, word(names, i)) \
     using 1:2 with linespoints lt distinct(i) lw 2 title word(names, i)
