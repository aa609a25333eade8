# One step of a pipeline of 2 stages under each schedule, from the engine's timestamps
# (pipe.csv): a box for each forward (light) and backward (dark) of a micro-batch, on its
# stage's row, labelled with the micro-batch; the white between them is the bubble.
# gnuplot -e "csv='timeline.csv'; out='timeline.png'; micro='4'" timeline.gp
#   csv: schedule,stage,op,micro,start_s,end_s (chapters/11-parallelism/ablate.sh)
W = 900
H = 620
load 'plots/style.gp'
set datafile separator ','
set multiplot layout 2, 1 title sprintf('Chapter 11: one step of dist.pp=2 with %s micro-batches', micro)
set xlabel 'milliseconds from the step''s start'
set ytics ('stage 0' 0, 'stage 1' 1)
set yrange [1.6:-0.6]
set grid noytics
set style fill solid 0.9 border rgb '#222222'
set key outside right top
do for [s in 'gpipe 1f1b'] {
    set title (s eq 'gpipe' ? 'GPipe: every forward, then every backward' : '1F1B: a backward after each forward once the pipeline is full')
    plot csv every ::1 using (stringcolumn(1) eq s && stringcolumn(3) eq 'F' ? 500 * ($5 + $6) : NaN):2:(500 * ($6 - $5)):(0.35) \
             with boxxyerror lc rgb '#9ecae1' title 'forward', \
         csv every ::1 using (stringcolumn(1) eq s && stringcolumn(3) eq 'B' ? 500 * ($5 + $6) : NaN):2:(500 * ($6 - $5)):(0.35) \
             with boxxyerror lc rgb '#08519c' title 'backward', \
         csv every ::1 using (stringcolumn(1) eq s ? 500 * ($5 + $6) : NaN):2:(sprintf('%s%d', stringcolumn(3), $4)) \
             with labels tc rgb '#d55e00' font ',9' notitle
}
unset multiplot
