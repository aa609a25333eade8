# MaxVio and CV over training (mean over MoE blocks), one line per variant, two panels.
# gnuplot -e "dir='DIR'; names='a b'; out='X.png'; steps=600" balance.gp  (DIR/NAME.bal: step maxvio cv)
W = 1000
H = 720
load 'plots/style.gp'
# more than 8 variants: 9 to 16 repeat the 8 colours, dashed
set linetype cycle 16
do for [i = 9:16] { set linetype i lc rgb word("#0072b2 #d55e00 #009e73 #cc79a7 #e69f00 #56b4e9 #000000 #8c564b", i - 8) lw 1.6 dt 2 pt 7 ps 0.6 }
set output out
set multiplot layout 2, 1 title 'Chapter 1: router balance per variant (mean over MoE blocks)'
set key outside right top
set ylabel 'MaxVio'
set yrange [0:*]
plot for [i = 1:words(names)] sprintf('%s/%s.bal', dir, word(names, i)) \
     using 1:2 smooth bezier lw 2 title word(names, i)
set ylabel 'CV of expert loads'
set xlabel 'optimizer step'
plot for [i = 1:words(names)] sprintf('%s/%s.bal', dir, word(names, i)) \
     using 1:3 smooth bezier lw 2 title word(names, i)
unset multiplot
