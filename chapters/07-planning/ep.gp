# ep.gp: the expert-parallel size against memory and time -> PNG (chapter 7).
#
# In:  data  plots/07-planning/ep.csv (chapters/07-planning/plan.sh): moe plan's CSV, a row
#            an expert-parallel size, the rest of the layout fixed
#      out   PNG path
#   gnuplot -e "data='plots/07-planning/ep.csv'; out='x.png'" chapters/07-planning/ep.gp
#
# Left: the busiest GPU's memory, stacked, against the GPU's 80 GB: the experts' weights and
# optimizer state fall as ep grows. Right: the step, stacked: the expert exchange appears at
# ep 2 and jumps once the group leaves the node of 8 GPUs (ep 16: a group is consecutive GPUs).

W = 1180
H = 500
load 'plots/style.gp'
set datafile separator comma
set datafile columnheaders
set style data histograms
set style histogram rowstacked
set style fill solid 0.9 border rgb "#555555"
set boxwidth 0.7
set grid noxtics
set key top right font ",9" opaque
set xlabel "expert-parallel GPUs (ep); tp 2, pp 8, vpp 4, micro-batch 1, selective recomputation"
set multiplot layout 1, 2 title "Qwen3-235B on 256 H100 (moe plan): the expert-parallel size" font ",12"

set title "memory of the busiest GPU"
set ylabel "GB"
set yrange [0:*]
set arrow 1 from graph 0, first 80 to graph 1, first 80 nohead lc rgb "#c00000" dt 2 lw 1.5
set label 1 "80 GB" at graph 0.98, first 84 right textcolor rgb "#c00000"
plot data using (column("mem_weights_gb")):xtic(sprintf("%d", column("ep"))) lt 1 title "weights", \
     '' using (column("mem_grads_gb")) lt 2 title "gradients", \
     '' using (column("mem_optim_gb")) lt 3 title "optimizer", \
     '' using (column("mem_acts_gb")) lt 6 title "activations"

unset arrow 1
unset label 1
set title "time of a step"
set ylabel "seconds"
set key top left
plot data using (column("compute_s")):xtic(sprintf("%d", column("ep"))) lt 1 title "compute", \
     '' using (column("tp_s")) lt 4 title "tensor parallel", \
     '' using (column("ep_exposed_s")) lt 2 title "expert exchange", \
     '' using (column("pp_s")) lt 5 title "pipeline traffic", \
     '' using (column("bubble_s")) lt 6 title "bubble", \
     '' using (column("dp_exposed_s")) lt 3 title "gradient sums", \
     '' using (column("optim_s")) lt 7 title "optimizer"
unset multiplot
