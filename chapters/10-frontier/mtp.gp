# mtp.gp: chapter 10's multi-token prediction arm: the main head's validation loss against the
# training FLOPs spent, one line a run -> PNG.
# gnuplot -e "dir='DIR'; names='a b c'; out='X.png'" chapters/10-frontier/mtp.gp
#   DIR/NAME.flops: total training TFLOPs and validation loss at each evaluation
#   (chapters/10-frontier/ablate.sh, part 4)
load 'plots/style.gp'
load 'chapters/series.gp'
set title 'Chapter 10: multi-token prediction, the main loss at equal compute'
set xlabel 'training TFLOPs spent (moe info: FLOPs a token x tokens)'
set ylabel 'validation loss (nats/byte)'
set key top right
plot for [i = 1:words(names)] sprintf('%s/%s.flops', dir, word(names, i)) \
     using 1:2 with linespoints lt distinct(i) lw 2 title word(names, i)
