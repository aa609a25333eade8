# Where training from scratch catches up: the final loss of the upcycled copies and of the same
# MoE from scratch, at several budgets of total training compute (each a run of its own).
# gnuplot -e "data='budgets.dat'; out='X.png'" budgets.gp
#   budgets.dat (ablate.sh): total_tflops copy_final_loss scratch_final_loss
W = 800
H = 520
load 'plots/style.gp'
set output out
set title 'Chapter 4: final validation loss at equal training compute'
set xlabel 'total training compute (TFLOPs, dense pre-training included)'
set ylabel 'validation loss at the end of the run (nats/byte)'
set key top right
plot data using 1:2 with linespoints lt 2 lw 2 pt 5 title 'upcycled (exact copies)', \
     '' using 1:3 with linespoints lt 7 lw 2 pt 7 title 'the same MoE from scratch'
