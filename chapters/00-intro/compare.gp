# Validation loss of the dense baseline and the MoE over training steps.
# gnuplot -e "dense='...train.csv'; moe='...train.csv'; out='....png'" compare.gp
load 'plots/style.gp'
set output out
set datafile separator ','
set title 'Dense baseline vs MoE (equal active compute per token)'
set xlabel 'optimizer step'
set ylabel 'validation loss (nats/byte)'
set key top right
plot dense using 1:8 with linespoints lw 2 title 'dense: SwiGLU hidden 512', \
     moe   using 1:8 with linespoints lw 2 title 'MoE: 8 experts of hidden 256, top-2'
