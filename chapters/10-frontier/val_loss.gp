# val_loss.gp: chapter 10's validation loss over training, one line an arm -> PNG.
# gnuplot -e "dir='DIR'; names='a b c'; out='X.png'" chapters/10-frontier/val_loss.gp
#   DIR/NAME.val: step loss at each evaluation (chapters/10-frontier/ablate.sh)
load 'plots/style.gp'
load 'chapters/series.gp'
set title 'Chapter 10: validation loss per arm'
set xlabel 'optimizer step'
set ylabel 'validation loss (nats/byte)'
set key outside right top
plot for [i = 1:words(names)] sprintf('%s/%s.val', dir, word(names, i)) \
     using 1:2 with linespoints lt distinct(i) lw 2 title word(names, i)
