# The largest |router logit| over training, mean over the MoE blocks and the seeds that did not
# diverge, one line per arm.
# gnuplot -e "dir='DIR'; names='a b'; out='X.png'" logits.gp
#   DIR/NAME.logit: step max_logit
load 'plots/style.gp'
load 'chapters/series.gp'
set output out
set title 'Chapter 5: the largest router logit (mean over blocks and surviving seeds)'
set xlabel 'optimizer step'
set ylabel 'max |router logit|'
set yrange [0:*]
set key outside right top
plot for [i = 1:words(names)] sprintf('%s/%s.logit', dir, word(names, i)) \
     using 1:2 with lines lt i lw 2 title word(names, i)
