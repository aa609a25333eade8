# Where each process's step time goes, one stacked bar per run and process.
# gnuplot -e "data='summary.csv'; out='X.png'" time.gp
#   summary.csv (ablate.sh): run,ep,balance,rank,bytes_per_step,model_bytes_per_step,
#   rows_per_step,exchange_s,expert_s,other_collectives_s,step_s,loss (for dist.ep = 1,
#   expert_s comes from the run's step_profile/, the other seconds are 0)
W = 1250
H = 560
load 'plots/style.gp'
set output out
set datafile separator ','
set title "Chapter 3: one training step per process (mean of the second half of the steps)\nep1 runs (one process, no exchanges): their experts' share measured in a profiled rerun of the same model"
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.75
set key outside right top
set ylabel 'seconds per step'
set yrange [0:*]
set xtics rotate by -35 scale 0 font ",9"
# rest of the step: attention, router, dense parts, optimizer (the step time minus the rest)
rest(s, a, b, c) = (s - a - b - c) > 0 ? s - a - b - c : 0
plot data every ::1 using 9:xtic(sprintf('%s r%d', strcol(1), column(4))) lc rgb '#0072b2' title 'its experts', \
     '' every ::1 using 8 lc rgb '#d55e00' title 'expert exchanges (incl. waiting)', \
     '' every ::1 using 10 lc rgb '#e69f00' title 'gradient sums, statistics', \
     '' every ::1 using (rest($11, $8, $9, $10)) lc rgb '#bbbbbb' title 'everything else'
