# What a fixed buffer costs: padding waste and speed against the capacity factor.
# gnuplot -e "dir='DIR'; out='X.png'" padding.gp
#   DIR/pad-POLICY-BALANCE: factor pad_frac median_tok_per_s   (padded capacity runs)
#   DIR/dropless-BALANCE.tok: median_tok_per_s of the dropless run
# The keys go under the panels, where no line can run through them.
W = 1280
H = 600
load 'plots/style.gp'
set key samplen 5
set output out
set multiplot layout 1, 2 title 'Chapter 2: the cost of a fixed expert buffer (moe.padded=1)' font ",13"
set key outside below center horizontal maxrows 2
set bmargin 7
set rmargin 4
set xlabel 'capacity factor'
set xrange [0.4:2.1]
set xtics (0.5, 1.0, 1.25, 2.0)
set title 'padding: share of the computed expert rows that are zeros (last 20% of steps)'
set ylabel 'padding fraction'
set yrange [0:*]
# four lines: colour = balance (blue aux, orange none), dash = policy (solid position, dashed score)
combos = "position-aux score-aux position-none score-none"
plot for [i = 1:4] sprintf('%s/pad-%s', dir, word(combos, i)) using 1:2 with linespoints \
     lt 1 + (i > 2) lw 2 dt 2 - i % 2 title word(combos, i)
set title 'speed: median tokens/s (dashed black: dropless, unpadded)'
set ylabel 'tokens / s'
set yrange [*:*]
dl_aux = system(sprintf('cat %s/dropless-aux.tok', dir)) + 0
dl_none = system(sprintf('cat %s/dropless-none.tok', dir)) + 0
plot for [i = 1:4] sprintf('%s/pad-%s', dir, word(combos, i)) using 1:3 with linespoints \
     lt 1 + (i > 2) lw 2 dt 2 - i % 2 title word(combos, i), \
     dl_aux with lines lc rgb "#000000" lw 1.5 dt 2 title 'dropless, aux', \
     dl_none with lines lc rgb "#777777" lw 1.5 dt 3 title 'dropless, none'
unset multiplot
