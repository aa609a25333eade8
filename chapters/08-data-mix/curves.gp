# curves.gp: the validation loss over training, one line a mix -> PNG.
# gnuplot -e "dir='DIR'; names='a b c'; out='X.png'" chapters/08-data-mix/curves.gp
#   DIR/NAME.val: step loss at each evaluation (chapters/08-data-mix/ablate.sh)
load 'plots/style.gp'
load 'chapters/series.gp'
set title 'Chapter 8: validation loss (the balanced validation set) per mix, equal tokens'
set xlabel 'optimizer step'
set ylabel 'validation loss (nats/byte)'
set key outside right top
plot for [i = 1:words(names)] sprintf('%s/%s.val', dir, word(names, i)) \
     using 1:2 with linespoints lt i lw 2 title word(names, i)
