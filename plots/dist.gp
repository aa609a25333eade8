# dist.png: a run over several processes (dist.csv), one line per process over the steps.
# In: data (folder with dist_R.dat: step MB_sent comm_s expert_s rows), dist_ranks, out;
# meta.gp (title_run, title_model).
W = 1100
H = 900
load 'style.gp'
load data.'/meta.gp'
set multiplot layout 3, 1 title sprintf('%s: %s, %d processes (dist.csv)', title_run, title_model, dist_ranks)
set key outside right top
set xlabel ''
set title 'bytes sent per step (MoE exchanges and the step''s other collectives)'
set ylabel 'MB'
plot for [r = 0:dist_ranks - 1] sprintf('%s/dist_%d.dat', data, r) using 1:2 with lines lt r + 1 lw 1.5 title sprintf('process %d', r)
set title 'seconds per step: in collectives, waiting included (solid), in its experts (dashed)'
set ylabel 'seconds'
plot for [r = 0:dist_ranks - 1] sprintf('%s/dist_%d.dat', data, r) using 1:3 with lines lt r + 1 lw 1.5 title sprintf('process %d', r), \
     for [r = 0:dist_ranks - 1] sprintf('%s/dist_%d.dat', data, r) using 1:4 with lines lt r + 1 lw 1.2 dt 2 notitle
set title 'rows its experts computed per step (its load)'
set ylabel 'rows'
set xlabel 'optimizer step'
plot for [r = 0:dist_ranks - 1] sprintf('%s/dist_%d.dat', data, r) using 1:5 with lines lt r + 1 lw 1.5 title sprintf('process %d', r)
unset multiplot
