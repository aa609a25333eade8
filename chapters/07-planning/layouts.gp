# layouts.gp: memory a GPU and time a step against the layout -> PNG (chapter 7).
#
# In:  data  plots/07-planning/layouts.csv (chapters/07-planning/plan.sh): a row a layout,
#            its label, the published step time (empty for the planner's own layouts) and
#            moe plan's CSV columns
#      out   PNG path
#   gnuplot -e "data='plots/07-planning/layouts.csv'; out='x.png'" chapters/07-planning/layouts.gp
#
# Top: the memory of the busiest GPU, stacked (weights, gradients, optimizer state,
# activations), against the GPU's 80 GB. Bottom: the step, stacked by where its time goes, with
# the published step time of the layouts measured side by side as a black diamond. The panels
# are stacked, each the canvas's width, so that every bar's four-line label fits under it
# unrotated; the keys stand right of the bars, clear of them.

W = 1200
H = 900
load 'plots/style.gp'
set datafile separator comma
set datafile columnheaders
set style data histograms
set style histogram rowstacked
set style fill solid 0.9 border rgb "#555555"
set boxwidth 0.7
set grid noxtics
set xtics scale 0 font ",9"
set key outside right top font ",9"
set lmargin at screen 0.07
set rmargin at screen 0.85
stats data using 0 nooutput
set xrange [-0.6:STATS_records - 0.4]
tic = 'sprintf("%s\ntp%d pp%d\nvpp%d ep%d\nmb%d %s", strcol("label"), column("tp"), column("pp"), column("vpp"), column("ep"), column("micro_batch"), strcol("recompute"))'
set multiplot title "Qwen3-235B on 256 H100 (moe plan): four layouts measured side by side, and the planner's four best" font ",12"

set tmargin at screen 0.91
set bmargin at screen 0.6
set title "memory of the busiest GPU"
set ylabel "GB"
set yrange [0:110]
set arrow 1 from graph 0, first 80 to graph 1, first 80 nohead lc rgb "#c00000" dt 2 lw 1.5
set label 1 "80 GB" at graph 0.02, first 83 left textcolor rgb "#c00000"
plot data using (column("mem_weights_gb")):xtic(@tic) lt 1 title "weights", \
     '' using (column("mem_grads_gb")) lt 2 title "gradients", \
     '' using (column("mem_optim_gb")) lt 3 title "optimizer", \
     '' using (column("mem_acts_gb")) lt 6 title "activations"

unset arrow 1
unset label 1
set tmargin at screen 0.44
set bmargin at screen 0.13
set title "time of a step"
set ylabel "seconds"
set yrange [0:40]
plot data using (column("compute_s")):xtic(@tic) lt 1 title "compute", \
     '' using (column("recompute_s")) lt 8 title "recomputation", \
     '' using (column("tp_s")) lt 4 title "tensor parallel", \
     '' using (column("ep_exposed_s")) lt 2 title "expert exchange", \
     '' using (column("pp_s")) lt 5 title "pipeline traffic", \
     '' using (column("bubble_s")) lt 6 title "bubble", \
     '' using (column("dp_exposed_s")) lt 3 title "gradient sums", \
     '' using (column("optim_s")) lt 7 title "optimizer", \
     '' using 0:(column("published_step_s")) with points pt 13 ps 2 lc rgb "#000000" title "published step"
unset multiplot
