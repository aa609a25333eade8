# loss.gp: training and validation loss against the optimizer step -> loss.png.
#
# Run by plots/plot_run.sh, which reshapes train.csv into
#   data/train.dat  step loss avg   (avg: centred moving average over loss_span steps)
#   data/val.dat    step val_loss   (evaluation steps only)
#   data/meta.gp    title_run, title_model, loss_span (0: no average line), n_val
# and calls: gnuplot -e "set loadpath 'plots'; run='RUN'; data='TMP'; out='RUN/loss.png'" loss.gp
# Loss is the mean cross-entropy per byte in nats; ln(256) = 5.55 is a uniform guess.

load data.'/meta.gp'
load 'style.gp'

set title sprintf("%s: loss%s", title_run, title_model eq "" ? "" : "  (".title_model.")")
set xlabel "optimizer step"
set ylabel "cross-entropy loss (nats per byte)"
set key top right reverse Left noopaque nobox

# The command is assembled so that a run without evaluations, or one too short to smooth,
# leaves those curves (and their legend lines) out.
cmd = sprintf("plot data.'/train.dat' using 1:2 with lines ls %d title 'train loss'", loss_span > 0 ? 11 : 14)
if (loss_span > 0) {
    cmd = cmd.sprintf(", data.'/train.dat' using 1:3 with lines ls 12 title 'train loss, moving average (%d steps)'", loss_span)
}
if (n_val > 0) {
    cmd = cmd.", data.'/val.dat' using 1:2 with linespoints ls 13 title 'validation loss'"
}
eval cmd
