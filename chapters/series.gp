# series.gp: line types for figures with many series (an ablation's arms), loaded after
# plots/style.gp. Types 1-8 are style.gp's eight colours, solid, with filled points; 9-16 the
# same colours again, each with its own dash pattern and an open point, so that no two of the
# sixteen look alike in colour, dash and point together (and a grey print still tells them
# apart by dash and point); 9-16 are for a series drawn beside its kin of 1-8 (chapter 4: an
# arm's restart in its colour). Unrelated series past eight take distinct(i): types 1-8, then
# 17-24, eight more colours, dashed, with open points, so that each series has a colour of its
# own. The key's samples are long enough to show the dashes.
set linetype cycle 24
distinct(i) = i <= 8 ? i : i + 8
# (written out: gnuplot takes a dash type as a constant, not an expression)
set linetype 9  lc rgb "#0072b2" lw 1.6 dt 2 pt 6  ps 0.9
set linetype 10 lc rgb "#d55e00" lw 1.6 dt 4 pt 4  ps 0.9
set linetype 11 lc rgb "#009e73" lw 1.6 dt 5 pt 8  ps 0.9
set linetype 12 lc rgb "#cc79a7" lw 1.6 dt 3 pt 10 ps 0.9
set linetype 13 lc rgb "#e69f00" lw 1.6 dt 2 pt 12 ps 0.9
set linetype 14 lc rgb "#56b4e9" lw 1.6 dt 4 pt 14 ps 0.9
set linetype 15 lc rgb "#000000" lw 1.6 dt 5 pt 2  ps 0.9
set linetype 16 lc rgb "#8c564b" lw 1.6 dt 3 pt 1  ps 0.9
set linetype 17 lc rgb "#332288" lw 1.6 dt 2 pt 6  ps 0.9
set linetype 18 lc rgb "#882255" lw 1.6 dt 4 pt 4  ps 0.9
set linetype 19 lc rgb "#999933" lw 1.6 dt 5 pt 8  ps 0.9
set linetype 20 lc rgb "#44aa99" lw 1.6 dt 3 pt 10 ps 0.9
set linetype 21 lc rgb "#aa4499" lw 1.6 dt 2 pt 12 ps 0.9
set linetype 22 lc rgb "#117733" lw 1.6 dt 4 pt 14 ps 0.9
set linetype 23 lc rgb "#777777" lw 1.6 dt 5 pt 2  ps 0.9
set linetype 24 lc rgb "#cc6677" lw 1.6 dt 3 pt 1  ps 0.9
set key samplen 5
