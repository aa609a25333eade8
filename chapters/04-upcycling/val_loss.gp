# Validation loss of every arm against the total training FLOPs spent to get there, the dense
# pre-training included; left the whole runs, right the continuation after the conversion.
# gnuplot -e "dir='DIR'; names='dense copy ...'; types='1 2 ...'; out='X.png'; dense_tflops=X" val_loss.gp
#   (types: one per name after dense)
#   DIR/NAME.val: total_flops val_loss step
W = 1250
H = 560
load 'plots/style.gp'
# types: one line type per name (chapters/series.gp): an -lr1e-3 arm has its base arm's
# colour, dashed, with an open point
load 'chapters/series.gp'
set output out
set multiplot layout 1, 2 title 'Chapter 4: upcycled, dense and from-scratch runs at equal training compute' font ",13"
set xlabel 'total training compute (TFLOPs, dense pre-training included)'
set ylabel 'validation loss (nats/byte)'
set key top right
set style line 20 lc rgb "#888888" lw 2 dt 2 pt 7 ps 0.6
set arrow 1 from dense_tflops, graph 0 to dense_tflops, graph 1 nohead lc rgb "#999999" dt 3
set label 1 'conversion' at dense_tflops, graph 0.97 offset 0.5, 0 textcolor rgb "#666666"
set title 'whole runs'
# the full and quick runs cut off drop-1.0's start (6.6); a smoke run's losses are all higher
if (exists("nocap")) { set yrange [*:*] } else { set yrange [*:3.2] }
plot sprintf('%s/dense.val', dir) using ($1 / 1e12):2 with linespoints ls 20 title 'dense (pre-training)', \
     for [i = 2:words(names)] sprintf('%s/%s.val', dir, word(names, i)) \
       using ($1 / 1e12):2 with linespoints lt word(types, i - 1) + 0 lw 2 title word(names, i)
set title 'after the conversion (drop-1.0 starts off the scale)'
set xrange [dense_tflops:*]
if (!exists("nocap")) set yrange [*:2.5]
unset label 1
plot for [i = 2:words(names)] sprintf('%s/%s.val', dir, word(names, i)) \
       using ($1 / 1e12):2 with linespoints lt word(types, i - 1) + 0 lw 2 title word(names, i)
unset multiplot
