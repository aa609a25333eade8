# Bytes each process sends per step in its MoE blocks' exchanges, measured (mean over the
# processes of a run) against the cost model of uniform routing.
# gnuplot -e "data='bytes.dat'; out='X.png'" bytes.gp
#   bytes.dat (ablate.sh): run measured_bytes model_bytes, one line per run with dist.ep > 1
W = 900
H = 520
load 'plots/style.gp'
set output out
set title 'Chapter 3: bytes sent per step and process (MoE exchanges, forward + backward)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set key outside bottom center horizontal
set ylabel 'MB per step'
set yrange [0:*]
set xtics scale 0
plot data using ($2 / 1e6):xtic(1) lc rgb '#0072b2' title 'measured (mean over processes)', \
     '' using ($3 / 1e6) lc rgb '#999999' title 'cost model, uniform routing'
