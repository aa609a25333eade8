# Acting on a spike (chapters/06-troubleshooting/spikes.sh): every seed's damage, per arm; the arms
# of the stretch above, those of one corrupted batch below (on their own scale).
# gnuplot -e "dir='D'; out='X.png'; n=8; steps=300; in_step=130; ncor=15; nlone=2; H=600" spikes_damage.gp
#   D/seeds, D/lone_seeds: "y arm d_in d_final" a run; D/means, D/lone_means: the arm's means
#   (y 1 at the top)
if (!exists("W")) W = 1100
load 'plots/style.gp'
stats dir.'/means' using 1 nooutput
ns = STATS_max
top = (ns + 2.0) / (ns + nlone + 5.5)
set multiplot title sprintf("Chapter 6: validation loss minus the clean run of the same seed and optimizer, %d seeds per arm", n) font ",12"
set ytics scale 0 font ",10"
set grid xtics noytics
set key outside top center horizontal font ",9"
set arrow 1 from 0, graph 0 to 0, graph 1 nohead lc rgb "#444444" dt 3
do for [part = 1:2] {
    f = part == 1 ? '' : 'lone_'
    set yrange [0.3:*] reverse
    set offsets 0, 0, 0.7, 0
    set size 0.5, (part == 1 ? top : 1 - top) - 0.03
    set title (part == 1 ? sprintf('a stretch of %d corrupted batches', ncor) : 'one corrupted batch') font ",10"
    do for [col = 3:4] {
        set origin (col - 3) * 0.5, (part == 1 ? 1 - top - 0.0 : 0)
        set xlabel (col == 3 ? sprintf('at step %d, 5 steps after the first corrupted batch', in_step) : \
                    sprintf('at step %d, the end of the run', steps))
        if (part == 2) { unset key }
        plot dir.'/'.f.'seeds' using col:1 with points pt 6 ps 1.1 lc rgb "#0072b2" title 'a seed', \
             dir.'/'.f.'means' using col:1:ytic(2) with points pt 7 ps 2 lc rgb "#d55e00" title 'mean'
    }
}
unset multiplot
