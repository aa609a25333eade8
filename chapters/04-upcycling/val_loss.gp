# Validation loss of every arm against the total training FLOPs spent to get there, the dense
# pre-training included; left the whole runs, right the continuation after the conversion.
# gnuplot -e "dir='DIR'; names='dense copy ...'; out='X.png'; dense_tflops=X" val_loss.gp
#   DIR/NAME.val: total_flops val_loss step
W = 1250
H = 560
load 'plots/style.gp'
# more than 8 lines: 9 to 16 repeat the 8 colours, dashed
set linetype cycle 16
do for [i = 9:16] { set linetype i lc rgb word("#0072b2 #d55e00 #009e73 #cc79a7 #e69f00 #56b4e9 #000000 #8c564b", i - 8) lw 1.6 dt 2 pt 7 ps 0.6 }
set output out
set multiplot layout 1, 2 title 'Chapter 4: upcycled, dense and from-scratch runs at equal training compute' font ",13"
set xlabel 'total training compute (TFLOPs, dense pre-training included)'
set ylabel 'validation loss (nats/byte)'
set key top right
set style line 20 lc rgb "#888888" lw 2 dt 2 pt 7 ps 0.6
set arrow 1 from dense_tflops, graph 0 to dense_tflops, graph 1 nohead lc rgb "#999999" dt 3
set label 1 'conversion' at dense_tflops, graph 0.97 offset 0.5, 0 textcolor rgb "#666666"
set title 'whole runs'
set yrange [*:3.2]
plot sprintf('%s/dense.val', dir) using ($1 / 1e12):2 with linespoints ls 20 title 'dense (pre-training)', \
     for [i = 2:words(names)] sprintf('%s/%s.val', dir, word(names, i)) \
       using ($1 / 1e12):2 with linespoints lt (i - 1) lw 2 title word(names, i)
set title 'after the conversion (drop-1.0 starts off the scale)'
set xrange [dense_tflops:*]
set yrange [*:2.5]
unset label 1
plot for [i = 2:words(names)] sprintf('%s/%s.val', dir, word(names, i)) \
       using ($1 / 1e12):2 with linespoints lt (i - 1) lw 2 title word(names, i)
unset multiplot
