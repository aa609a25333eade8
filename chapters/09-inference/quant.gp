# quant.gp: each expert's quantization error -> PNG (chapter 9).
# gnuplot -e "data='plots/09-inference/quant_experts.csv'; out='x.png'" chapters/09-inference/quant.gp
#   data: build/chapters/09-inference/serve --out: a row an expert (MoE layer, expert, its share
#   of the validation assignments, its relative error in int8 and in int4)
# The relative error ||W - W'|| / ||W|| of each expert's three matrices against the share of the
# tokens it serves (log scale): int4 is about 16 times int8's, and both are nearly the same for
# every expert, busy or idle.
W = 820
H = 500
load 'plots/style.gp'
set datafile separator comma
set datafile columnheaders
set logscale y
set grid
set key center right font ",9" opaque
set xlabel "the expert's share of its layer's assignments (validation text)"
set ylabel "relative error of its weights"
set title "Chapter 9: the experts quantized (one point an expert)"
plot data using 3:4 with points lt 1 pt 7 ps 1.3 title "int8, a scale per output channel", \
     data using 3:5 with points lt 3 pt 5 ps 1.3 title "int4, a scale per 32 inputs"
