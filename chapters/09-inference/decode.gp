# decode.gp: decoding speed against the batch, an MoE and its dense twin -> PNG (chapter 9).
# gnuplot -e "data='plots/09-inference/decode.csv'; big='small'; little='tiny'; out='x.png'" chapters/09-inference/decode.gp
#   data: moe bench --decode --csv (chapters/09-inference/ablate.sh): a row a model and batch;
#   big, little: the two MoE configs drawn, each with its dense twin (NAME-dense)
# Left: decode tokens/s against the batch (log scales): each MoE (solid) and its dense twin of
# the same active parameters (dashed). Right: the weight bytes read a token, the same series:
# the dense twin's fall as 1 / batch; the MoE's fall more slowly, as a batch touches more experts.
W = 1150
H = 480
load 'plots/style.gp'
set datafile separator comma
set datafile columnheaders
set logscale x 2
set logscale y
set grid
set key top left font ",9" opaque
set xlabel "sequences decoded together (batch)"
# rows of one model: its name is column 1
sel(name, col) = (strcol(1) eq name) ? column(col) : NaN
set multiplot layout 1, 2 title "Chapter 9: decoding an MoE and its dense twin (moe bench --decode)" font ",12"
set title "decode speed"
set ylabel "tokens/s"
plot data using 5:(sel(big, 11)) with linespoints lt 1 lw 2 pt 7 title big . " MoE (8 experts, top-2)", \
     data using 5:(sel(big . "-dense", 11)) with linespoints lt 1 lw 2 dt 2 pt 6 title big . " dense twin", \
     data using 5:(sel(little, 11)) with linespoints lt 3 lw 2 pt 5 title little . " MoE", \
     data using 5:(sel(little . "-dense", 11)) with linespoints lt 3 lw 2 dt 2 pt 4 title little . " dense twin"
set title "weights read a token"
set ylabel "MB a token"
plot data using 5:(sel(big, 16) / 1e6) with linespoints lt 1 lw 2 pt 7 title big . " MoE", \
     data using 5:(sel(big . "-dense", 16) / 1e6) with linespoints lt 1 lw 2 dt 2 pt 6 title big . " dense twin", \
     data using 5:(sel(little, 16) / 1e6) with linespoints lt 3 lw 2 pt 5 title little . " MoE", \
     data using 5:(sel(little . "-dense", 16) / 1e6) with linespoints lt 3 lw 2 dt 2 pt 4 title little . " dense twin"
unset multiplot
