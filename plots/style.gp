# style.gp: the look shared by every plot of a run; loss.gp, balance.gp, load_heatmap.gp and
# domains.gp load it after setting their own variables.
#
# In:  out   PNG path to write (set with gnuplot -e "out='...'")
#      W, H  canvas size in pixels (optional; a multi-panel script sets them before loading
#            this file so every panel keeps a readable size)
#
# pngcairo draws antialiased lines and text; the libgd png terminal is the fallback for a
# gnuplot built without cairo. Text is noenhanced so run names like "my_run" keep their
# underscores instead of turning them into subscripts.

if (!exists("W")) W = 900
if (!exists("H")) H = 540
if (strstrt(" ".GPVAL_TERMINALS." ", " pngcairo ") > 0) {
    set terminal pngcairo size W, H noenhanced font "DejaVu Sans,10" linewidth 1.2
} else {
    set terminal png size W, H noenhanced truecolor font "DejaVuSans,10"
}
if (exists("out")) set output out

set encoding utf8
set border 3 lc rgb "#444444"
set tics nomirror out scale 0.6 textcolor rgb "#222222"
set grid xtics ytics lc rgb "#dddddd" lw 1 dt 1
set key nobox samplen 2.5 spacing 1.1
set title font ",12"
set autoscale xfix
set datafile missing "nan"

# One colour per MoE layer (lines 1..8, then they repeat): a colour-blind-safe qualitative set.
set linetype 1 lc rgb "#0072b2" lw 1.6 pt 7 ps 0.6
set linetype 2 lc rgb "#d55e00" lw 1.6 pt 5 ps 0.6
set linetype 3 lc rgb "#009e73" lw 1.6 pt 9 ps 0.7
set linetype 4 lc rgb "#cc79a7" lw 1.6 pt 11 ps 0.7
set linetype 5 lc rgb "#e69f00" lw 1.6 pt 13 ps 0.7
set linetype 6 lc rgb "#56b4e9" lw 1.6 pt 15 ps 0.7
set linetype 7 lc rgb "#000000" lw 1.6 pt 3 ps 0.7
set linetype 8 lc rgb "#8c564b" lw 1.6 pt 1 ps 0.7
set linetype cycle 8

# Named styles of the loss plot: raw training loss thin and light under its moving average
# (bold), or thin and darker when it is drawn alone; validation loss as points on a line.
set style line 11 lc rgb "#9ecae1" lw 0.8
set style line 12 lc rgb "#08519c" lw 2.2
set style line 13 lc rgb "#d55e00" lw 2.0 pt 7 ps 1.0
set style line 14 lc rgb "#3182bd" lw 1.0

# Heatmaps: a perceptually uniform dark-to-light ramp (viridis-like), so equal steps in
# load look like equal steps in colour and the map stays readable in grey.
set palette defined (0 "#440154", 0.15 "#482878", 0.3 "#3e4989", 0.45 "#31688e", \
                     0.6 "#26828e", 0.7 "#1f9e89", 0.8 "#35b779", 0.9 "#6ece58", 1 "#fde725")
set palette maxcolors 0
