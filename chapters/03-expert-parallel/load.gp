# Each process's load: the rows its experts computed per step, with and without balancing.
# gnuplot -e "data='summary.csv'; out='X.png'" load.gp   (columns: see time.gp)
W = 1100
H = 520
load 'plots/style.gp'
set output out
set datafile separator ','
set title 'Chapter 3: rows each process''s experts computed per step (mean of the second half)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set key off
set ylabel 'rows per step'
set yrange [0:*]
set xtics rotate by -35 scale 0 font ",9"
plot data every ::1 using 7:xtic(sprintf('%s r%d', strcol(1), column(4))) lc rgb '#009e73'
