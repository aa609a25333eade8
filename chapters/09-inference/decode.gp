# decode.gp: decoding speed against the batch, an MoE and its dense twin -> PNG (chapter 9).
# gnuplot -e "dir='D'; big='small'; little='tiny'; out='x.png'" chapters/09-inference/decode.gp
#   D/NAME.dat: one model's rows of moe bench --decode --csv (chapters/09-inference/ablate.sh
#   writes them from plots/09-inference/decode.csv): batch, decode tokens/s, weight bytes a
#   token; big, little: the two MoE configs drawn, each with its dense twin (NAME-dense)
# Left: decode tokens/s against the batch (log scales): each MoE (solid) and its dense twin of
# the same active parameters (dashed). Right: the weight bytes read a token, the same series:
# the dense twin's fall as 1 / batch; the MoE's fall more slowly, as a batch touches more experts.
W = 1150
H = 480
load 'plots/style.gp'
set logscale x 2
set logscale y
set grid
set key top left font ",9" opaque
set xlabel "sequences decoded together (batch)"
f(name) = dir . '/' . name . '.dat'
set multiplot layout 1, 2 title "Chapter 9: decoding an MoE and its dense twin (moe bench --decode)" font ",12"
set title "decode speed"
set ylabel "tokens/s"
plot f(big) using 1:2 with linespoints lt 1 lw 2 pt 7 title big . " MoE (8 experts, top-2)", \
     f(big . "-dense") using 1:2 with linespoints lt 1 lw 2 dt 2 pt 6 title big . " dense twin", \
     f(little) using 1:2 with linespoints lt 3 lw 2 pt 5 title little . " MoE", \
     f(little . "-dense") using 1:2 with linespoints lt 3 lw 2 dt 2 pt 4 title little . " dense twin"
set title "weights read a token"
set ylabel "MB a token"
set key top right
plot f(big) using 1:($3 / 1e6) with linespoints lt 1 lw 2 pt 7 title big . " MoE", \
     f(big . "-dense") using 1:($3 / 1e6) with linespoints lt 1 lw 2 dt 2 pt 6 title big . " dense twin", \
     f(little) using 1:($3 / 1e6) with linespoints lt 3 lw 2 pt 5 title little . " MoE", \
     f(little . "-dense") using 1:($3 / 1e6) with linespoints lt 3 lw 2 dt 2 pt 4 title little . " dense twin"
unset multiplot
