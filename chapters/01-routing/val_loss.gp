# Validation loss over training, one line per variant.
# gnuplot -e "dir='DIR'; names='a b c'; out='X.png'" val_loss.gp   (DIR/NAME.val: step loss)
load 'plots/style.gp'
# more than 8 variants: 9 to 16 repeat the 8 colours, dashed
set linetype cycle 16
do for [i = 9:16] { set linetype i lc rgb word("#0072b2 #d55e00 #009e73 #cc79a7 #e69f00 #56b4e9 #000000 #8c564b", i - 8) lw 1.6 dt 2 pt 7 ps 0.6 }
set output out
set title 'Chapter 1: validation loss per routing / balancing variant'
set xlabel 'optimizer step'
set ylabel 'validation loss (nats/byte)'
set key outside right top
plot for [i = 1:words(names)] sprintf('%s/%s.val', dir, word(names, i)) \
     using 1:2 with linespoints lw 2 title word(names, i)
