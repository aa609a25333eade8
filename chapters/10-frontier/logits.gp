# logits.gp: chapter 10's logits as training goes, one line an arm -> PNG, two panels: the
# largest attention logit and the largest |router logit| over the blocks (frontier.c on each
# leg's checkpoint; the router's beside it, as chapter 5 draws it).
# gnuplot -e "dir='DIR'; names='a b c'; out='X.png'" chapters/10-frontier/logits.gp
#   DIR/NAME.logits: step, largest attention logit, largest |router logit| (ablate.sh)
W = 1100
H = 480
load 'plots/style.gp'
load 'chapters/series.gp'
set multiplot layout 1, 2 title 'Chapter 10: the logits as training goes (one validation batch, largest over the blocks)'
set xlabel 'optimizer step'
set key top left
# a log scale: the hot run's logits are tens of times the others'
set logscale y
set ylabel 'largest attention logit q.k/sqrt(D) (log scale)'
plot for [i = 1:words(names)] sprintf('%s/%s.logits', dir, word(names, i)) \
     using 1:2 with linespoints lt distinct(i) lw 2 title word(names, i)
unset logscale y
set ylabel 'largest |router logit|'
plot for [i = 1:words(names)] sprintf('%s/%s.logits', dir, word(names, i)) \
     using 1:3 with linespoints lt distinct(i) lw 2 title word(names, i)
unset multiplot
