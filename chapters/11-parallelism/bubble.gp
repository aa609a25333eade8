# The bubble of a pipeline of 2 stages against the micro-batches a step: each schedule's
# measured idle share of a step (points) beside (P - 1) / (M + P - 1) (the line).
# gnuplot -e "csv='bubble.csv'; out='bubble.png'" bubble.gp
#   csv: run,schedule,micro_batches,planned,measured,predicted (chapters/11-parallelism/ablate.sh)
# The crosses: the bubble the stages' own measured times predict (unequal stages).
W = 900
H = 520
load 'plots/style.gp'
set datafile separator ','
set title 'Chapter 11: the bubble of dist.pp=2 (2 processes, a core each)'
set logscale x 2
set xrange [0.8:10]
set yrange [0:0.6]
set xlabel 'micro-batches a step (train.accum, M)'
set ylabel 'idle share of a step'
set key top right
plot 1.0 / (x + 1) with lines lw 2 lc rgb '#444444' dt 2 title '(P - 1) / (M + P - 1)', \
     csv every ::1 using (stringcolumn(2) eq 'gpipe' ? $3 : NaN):5 with points pt 7 ps 1.6 \
         lc rgb '#0072b2' title 'GPipe, measured', \
     csv every ::1 using (stringcolumn(2) eq '1f1b' ? $3 : NaN):5 with points pt 5 ps 1.3 \
         lc rgb '#d55e00' title '1F1B, measured', \
     csv every ::1 using (stringcolumn(2) eq 'gpipe' ? $3 : NaN):6 with points pt 2 ps 2 lw 2 \
         lc rgb '#009e73' title 'from the stages'' own times'
