# experts.gp: the distinct experts a decoding step touches, against the batch -> PNG (chapter 9).
# gnuplot -e "random='plots/09-inference/decode.csv'; model='small'; trained='plots/09-inference/decode_trained.csv'; out='x.png'" chapters/09-inference/experts.gp
#   both: moe bench --decode --csv; random: the reference configs (random weights and prompts),
#   of which the MoE config named model is drawn;
#   trained: the chapter's trained MoE on its validation text
# The curve is E (1 - (1 - k/E)^B) for E = 8, k = 2: what independent, uniform routing touches.
W = 820
H = 500
load 'plots/style.gp'
set datafile separator comma
set datafile columnheaders
set logscale x 2
set grid
set key bottom right font ",9" opaque
set xlabel "sequences decoded together (batch)"
set ylabel "experts touched by a step (of 8, per MoE layer)"
set yrange [0:8.5]
set xrange [0.8:80]
set samples 200
sel(name, col) = (strcol(1) eq name) ? column(col) : NaN
set title "Chapter 9: a batch of tokens reads more of the experts"
plot 8 * (1 - (1 - 2.0 / 8) ** x) with lines lt 8 lw 2 dt 2 title "8 (1 - (1 - 2/8)^B), uniform routing", \
     random using 5:(sel(model, 12)) with points lt 1 pt 7 ps 1.4 title model . ", random weights and prompts", \
     trained using 5:12 with linespoints lt 3 lw 2 pt 5 ps 1.2 title "the trained MoE, validation text"
