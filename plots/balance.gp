# balance.gp: how evenly each MoE layer spreads its tokens over the experts -> balance.png.
#
# Two panels over the optimizer steps, one line per MoE layer:
#   maxvio = (max_e load_e - mean load) / mean load   0 when balanced; 1 means the busiest
#                                                     expert gets twice its fair share
#   cv     = std(load) / mean(load)                   0 when balanced
# where load_e is the share of the routed (token, expert) assignments that went to expert e.
#
# Long runs are noisy step to step: then every layer's raw values are drawn thin and grey and
# its centred moving average (bal_span steps) in the layer's colour on top.
#
# Run by plots/plot_run.sh, which writes data/bal_L.dat (step maxvio cv maxvio_avg cv_avg)
# for every MoE layer L and data/meta.gp (title_run, title_model, router_layers = "1 3 ...",
# bal_span), and calls:
#   gnuplot -e "set loadpath 'plots'; run='RUN'; data='TMP'; out='RUN/balance.png'" balance.gp

load data.'/meta.gp'
load 'style.gp'

nl = words(router_layers)
bal(i) = sprintf("%s/bal_%s.dat", data, word(router_layers, i))
raw = "lc rgb '#c8c8c8' lw 0.6 notitle"

# Shared left/right margins keep the two step axes aligned; the legend has the right margin
# to itself, so it never covers a curve.
set lmargin at screen 0.10
set rmargin at screen 0.86
set key at screen 0.875, 0.89 left top vertical Left reverse nobox noopaque samplen 2.5

smooth_note = (bal_span > 0) ? sprintf("\nlines: moving average over %d steps; grey: every step", bal_span) : ""
set multiplot title sprintf("%s: expert load balance%s%s", title_run, \
                            title_model eq "" ? "" : "  (".title_model.")", smooth_note) font ",12"

set tmargin at screen (bal_span > 0 ? 0.86 : 0.89)
set bmargin at screen 0.52
set format x ""
set ylabel "maxvio\n(max load / mean - 1)"
set yrange [0:*]
if (bal_span > 0) {
    plot for [i = 1:nl] bal(i) using 1:2 with lines @raw, \
         for [i = 1:nl] bal(i) using 1:4 with lines lt i title "layer ".word(router_layers, i)
} else {
    plot for [i = 1:nl] bal(i) using 1:2 with lines lt i title "layer ".word(router_layers, i)
}

set tmargin at screen 0.46
set bmargin at screen 0.10
set format x "%g"
set xlabel "optimizer step"
set ylabel "cv\n(std / mean of load)"
set key off
if (bal_span > 0) {
    plot for [i = 1:nl] bal(i) using 1:3 with lines @raw, \
         for [i = 1:nl] bal(i) using 1:5 with lines lt i notitle
} else {
    plot for [i = 1:nl] bal(i) using 1:3 with lines lt i notitle
}

unset multiplot
