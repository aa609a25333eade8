# Acting on a spike (chapters/06-troubleshooting/spikes.sh): every seed's damage, per arm.
# gnuplot -e "seeds='S'; means='M'; out='X.png'; n=8; steps=300; in_step=130; H=470" spikes_damage.gp
#   S: "y arm d_in d_final" a run; M: "y arm d_in d_final" the arm's means (y 1 at the top)
if (!exists("W")) W = 1100
load 'plots/style.gp'
set multiplot layout 1, 2 title sprintf("Chapter 6: validation loss minus the clean run of the same seed and optimizer, %d seeds per arm", n) font ",12"
set yrange [0.3:*] reverse
set offsets 0, 0, 0.7, 0
set ytics scale 0 font ",10"
set grid xtics noytics
set key outside top center horizontal font ",9"
set arrow 1 from 0, graph 0 to 0, graph 1 nohead lc rgb "#444444" dt 3
set xlabel sprintf('at step %d, 5 steps into the stretch', in_step)
plot seeds using 3:1 with points pt 6 ps 1.1 lc rgb "#0072b2" title 'a seed', \
     means using 3:1:ytic(2) with points pt 7 ps 2 lc rgb "#d55e00" title 'mean'
set xlabel sprintf('at step %d, the end of the run', steps)
plot seeds using 4:1 with points pt 6 ps 1.1 lc rgb "#0072b2" title 'a seed', \
     means using 4:1:ytic(2) with points pt 7 ps 2 lc rgb "#d55e00" title 'mean'
unset multiplot
