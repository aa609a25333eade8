# MaxVio and CV over training (mean over MoE blocks), one line per variant, two panels.
# gnuplot -e "dir='DIR'; names='a b'; out='X.png'; steps=600" balance.gp
#   DIR/NAME.bal: step maxvio cv maxvio_avg10 cv_avg10 (the last two: moving averages of the
#   last 10 steps, what is drawn; one step's MaxVio jumps too much to compare 11 lines)
W = 1000
H = 720
load 'plots/style.gp'
load 'chapters/series.gp'
set output out
set multiplot layout 2, 1 title 'Chapter 1: router balance per variant (mean over MoE blocks, moving average of 10 steps)'
set key outside right top
set ylabel 'MaxVio (10-step average)'
set yrange [0:*]
plot for [i = 1:words(names)] sprintf('%s/%s.bal', dir, word(names, i)) \
     using 1:4 with lines lt distinct(i) lw 2 title word(names, i)
set ylabel 'CV of expert loads (10-step average)'
set xlabel 'optimizer step'
plot for [i = 1:words(names)] sprintf('%s/%s.bal', dir, word(names, i)) \
     using 1:5 with lines lt distinct(i) lw 2 title word(names, i)
unset multiplot
