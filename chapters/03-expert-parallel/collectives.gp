# Seconds of one sum of n floats a process against n: the hand-built collective (teach, dashed)
# against MPI's own (solid), one colour per process count.
# gnuplot -e "dir='D'; out='X.png'; procs='2 4 8'" collectives.gp
#   D/ENGINE-P.dat (collectives.sh): floats seconds, one line per size
W = 900
H = 560
load 'plots/style.gp'
set output out
set title 'Chapter 3: one sum over the processes (median of 7 calls)'
set logscale xy
set xtics ('1 K' 1024, '64 K' 65536, '1 M' 1048576, '4 M' 4194304)
set xrange [700:6e6]
set xlabel 'floats a process (4 bytes each; K = 1024, M = 1024 K)'
set ylabel 'seconds'
set key outside bottom center horizontal
colour(i) = word('#0072b2 #d55e00 #009e73 #cc79a7', i)
plot for [i = 1:words(procs)] sprintf('%s/teach-%s.dat', dir, word(procs, i)) using 1:2 \
         with linespoints dt 2 pt 6 lw 2 lc rgb colour(i) \
         title sprintf('teach, %s processes', word(procs, i)), \
     for [i = 1:words(procs)] sprintf('%s/mpi-%s.dat', dir, word(procs, i)) using 1:2 \
         with linespoints dt 1 pt 7 lw 2 lc rgb colour(i) \
         title sprintf('mpi, %s processes', word(procs, i))
