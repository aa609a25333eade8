# Final validation loss of every arm of an ablation as a dot, with the seed spread as an error bar.
# gnuplot -e "data='F'; seeds='S'; out='X.png'; ttl='...'; note='...'; H=600" chapters/final_loss.gp
#   F: one row per arm, "y label val lo hi ref": y the row (1 at the top), lo..hi the error bar,
#      ref 1 for the arm whose seeds were trained (its own min..max), 0 for the others (its
#      value +- half the reference arm's min-max spread: the spread is measured on one arm only)
#   S: the reference arm's runs, one per seed: "val y"
# The differences these ablations discuss are 0.01-0.05 nats; a curve figure cannot show them,
# a dot per arm with a bar of what another seed could move can.
if (!exists("W")) W = 1000
load 'plots/style.gp'
set output out
set title ttl
set xlabel "validation loss at the end of the run (nats/byte)\n".note
set ylabel ''
set yrange [0.3:*] reverse
set autoscale x
set offsets graph 0.03, graph 0.03, 0.7, 0
set ytics scale 0 font ",9"
set grid xtics ytics
set key outside top center horizontal samplen 2 font ",9"
plot data using 3:1:4:5:ytic(2) with xerrorbars lc rgb "#0072b2" pt 7 ps 1.1 lw 1.5 \
       title 'final val loss, bar: the reference arm''s seed spread (min-max), centred on each arm', \
     data using ($6 > 0 ? $3 : 1/0):1:4:5 with xerrorbars lc rgb "#d55e00" pt 7 ps 1.3 lw 2 \
       title 'reference arm: its own seeds'' min-max', \
     seeds using 1:2 with points lc rgb "#d55e00" pt 6 ps 1.4 title 'one seed'
