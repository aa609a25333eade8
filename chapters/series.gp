# series.gp: line types for figures with many series (an ablation's arms), loaded after
# plots/style.gp. Types 1-8 are style.gp's eight colours, solid, with filled points; 9-16 the
# same colours again, each with its own dash pattern and an open point, so that no two of the
# sixteen look alike in colour, dash and point together (and a grey print still tells them
# apart by dash and point). The key's samples are long enough to show the dashes.
set linetype cycle 16
# (written out: gnuplot takes a dash type as a constant, not an expression)
set linetype 9  lc rgb "#0072b2" lw 1.6 dt 2 pt 6  ps 0.9
set linetype 10 lc rgb "#d55e00" lw 1.6 dt 4 pt 4  ps 0.9
set linetype 11 lc rgb "#009e73" lw 1.6 dt 5 pt 8  ps 0.9
set linetype 12 lc rgb "#cc79a7" lw 1.6 dt 3 pt 10 ps 0.9
set linetype 13 lc rgb "#e69f00" lw 1.6 dt 2 pt 12 ps 0.9
set linetype 14 lc rgb "#56b4e9" lw 1.6 dt 4 pt 14 ps 0.9
set linetype 15 lc rgb "#000000" lw 1.6 dt 5 pt 2  ps 0.9
set linetype 16 lc rgb "#8c564b" lw 1.6 dt 3 pt 1  ps 0.9
set key samplen 5
