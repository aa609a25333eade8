# domains.gp: which experts each kind of text is routed to, at the last evaluation
# -> domains.png. One panel per MoE layer: x is the expert, y the data domain (en, de, code,
# ...), the colour the share of that domain's (token, expert) assignments in the layer that
# went to the expert (each row sums to 1). Rows that differ mean the experts specialise by
# domain; identical rows mean the router ignores the language.
#
# Run by plots/plot_run.sh, which writes data/dom_L.dat ("expert domain_index fraction") and
# data/meta.gp (title_run, title_model, dom_layers, dom_n, dom_E, dom_step, dom_max,
# dom_ytics: the command that names the rows), and calls:
#   gnuplot -e "set loadpath 'plots'; run='RUN'; data='TMP'; out='RUN/domains.png'" domains.gp

load data.'/meta.gp'

nl = words(dom_layers)
cols = (nl <= 4) ? nl : 4
rows = (nl + cols - 1) / cols
# A panel is its plot plus about 150 px of tics and colour box; cells get ~34 px while the
# whole figure stays under 1800 px wide.
pw = 150 + 34 * dom_E
pw = (pw > 1800 / cols) ? 1800 / cols : pw
pw = (pw < 380) ? 380 : pw
W = (cols * pw < 900) ? 900 : cols * pw
H = 120 + rows * (110 + 36 * dom_n)
H = (H < 540) ? 540 : H
load 'style.gp'

# Cells are drawn as boxes (not `with image`) so a single domain or a single expert still
# makes a valid picture; they overlap their neighbours by a hair so no seams show. The value
# is printed in each cell when the cells are wide enough to hold it, in white on the dark end
# of the palette and black on the light end.
cellw = (W / cols - 150.0) / dom_E # pixels per expert column
show_values = (cellw >= 32 && dom_n <= 12)
cell = "using 1:2:(0.51):(0.51):3 with boxxyerror fs solid 1.0 noborder lc palette notitle"
vals = "using 1:2:(sprintf('%.2f', $3)):($3 < 0.6 * dom_max ? 0xffffff : 0x000000) " \
     . "with labels font ',9' tc rgb variable notitle"

set xlabel "expert"
set xrange [-0.5 : dom_E - 0.5]
set xtics 0, (cellw >= 22 ? 1 : cellw >= 11 ? 2 : ceil(dom_E / 8.0)) out
set yrange [dom_n - 0.5 : -0.5]
eval dom_ytics
set cbrange [0 : dom_max]
set cbtics out
set grid noxtics noytics
set border 15
set tics front

set multiplot layout rows, cols \
    title sprintf("%s: share of each domain's top-k assignments by expert at step %d%s", title_run, \
                  dom_step, title_model eq "" ? "" : "  (".title_model.")") font ",12"
do for [i = 1:nl] {
    f = sprintf("%s/dom_%s.dat", data, word(dom_layers, i))
    set title "MoE layer ".word(dom_layers, i)
    if (show_values) {
        eval "plot f ".cell.", f ".vals
    } else {
        eval "plot f ".cell
    }
}
unset multiplot
