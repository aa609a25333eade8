# MaxVio and CV over training (mean over MoE blocks), one line per variant, two panels.
# gnuplot -e "dir='DIR'; names='a b'; out='X.png'; steps=600" balance.gp  (DIR/NAME.bal: step maxvio cv)
W = 1000
H = 720
load 'plots/style.gp'
set output out
set multiplot layout 2, 1 title 'Chapter 1: router balance per variant (mean over MoE blocks)'
set key outside right top
set ylabel 'MaxVio'
set logscale y
plot for [i = 1:words(names)] sprintf('%s/%s.bal', dir, word(names, i)) \
     using 1:2 smooth bezier lw 2 title word(names, i)
set ylabel 'CV of expert loads'
set xlabel 'optimizer step'
plot for [i = 1:words(names)] sprintf('%s/%s.bal', dir, word(names, i)) \
     using 1:3 smooth bezier lw 2 title word(names, i)
unset multiplot
