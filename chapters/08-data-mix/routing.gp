# routing.gp: what each mix does to the router -> PNG.
# gnuplot -e "data='X.dat'; out='X.png'" chapters/08-data-mix/routing.gp
#   X.dat: a row an arm: name maxvio domain_mi (chapters/08-data-mix/ablate.sh)
# Left: MaxVio of the training batches (the last 20% of the steps): how unbalanced the experts'
# loads are. Right: the mutual information of domain and expert at the last evaluation: how much
# the experts specialise by domain.
W = 1100
H = 460
load 'plots/style.gp'
set style fill solid 0.85 border rgb "#555555"
set boxwidth 0.7
set grid noxtics
set xtics rotate by -30 scale 0
set yrange [0:*]
unset key
set multiplot layout 1, 2 title "Chapter 8: the router under each mix"
set title 'MaxVio (training batches, last 20% of the steps)'
plot data using 0:2:xtic(1) with boxes lt 1
set title 'domain-expert information (nats, last evaluation)'
plot data using 0:3:xtic(1) with boxes lt 3
unset multiplot
