# load_heatmap.gp: where the router sends the tokens, expert by expert, over the whole run
# -> load_heatmap.png. One panel per MoE layer: x is the optimizer step, y the expert, the
# colour load_e = share of the layer's routed (token, expert) assignments that expert e got.
# A balanced layer is one flat colour at 1/E; a collapsed router shows one bright row.
#
# Run by plots/plot_run.sh, which writes data/load_L.dat ("step expert load" on a regular
# grid: a column is one logged step, or the mean of heat_bin logged steps in a long run) and
# data/meta.gp (title_run, title_model, router_layers, E, heat_bin, load_max), and calls:
#   gnuplot -e "set loadpath 'plots'; run='RUN'; data='TMP'; out='RUN/load_heatmap.png'" load_heatmap.gp

load data.'/meta.gp'

nl = words(router_layers)
cols = (nl <= 3) ? 1 : 2
rows = (nl + cols - 1) / cols
W = (cols == 1) ? 900 : 1300
H = (nl == 1) ? 540 : 110 + rows * 230
load 'style.gp'

# A tic step of 1, 2 or 5 times a power of ten giving about n tics up to x.
nicestep(x, n) = (m_ = 10**floor(log10(x / n)), r_ = x / n / m_, \
                  (r_ < 1.5 ? 1 : r_ < 3.5 ? 2 : r_ < 7.5 ? 5 : 10) * m_)

set ylabel "expert"
set ytics 0, (E <= 8 ? 1 : ceil(E / 8.0)) out
set yrange [-0.5 : E - 0.5]
set cbrange [0 : load_max]
set cbtics 0, nicestep(load_max, 4) out
set cblabel "load"
set grid noxtics noytics
set border 15
set tics front

stepnote = (heat_bin > 1) ? sprintf(", each column the mean of %d logged steps", heat_bin) : ""
set multiplot layout rows, cols \
    title sprintf("%s: share of the routed assignments per expert%s\nfair share 1/E = %.3g%s", \
                  title_run, title_model eq "" ? "" : "  (".title_model.")", 1.0 / E, stepnote) font ",12"
do for [i = 1:nl] {
    # only the bottom row names the step axis, which leaves the panels more height
    if (i > (rows - 1) * cols) { set xlabel "optimizer step" } else { unset xlabel }
    set title "MoE layer ".word(router_layers, i)
    plot sprintf("%s/load_%s.dat", data, word(router_layers, i)) using 1:2:3 with image notitle
}
unset multiplot
