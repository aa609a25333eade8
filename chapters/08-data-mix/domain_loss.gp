# domain_loss.gp: each domain's validation loss at the last step, one bar an arm -> PNG.
# gnuplot -e "data='X.dat'; out='X.png'; steps=600" chapters/08-data-mix/domain_loss.gp
#   X.dat: a header "domain ARM...", then a row a domain with each arm's loss
# (chapters/08-data-mix/ablate.sh writes it from summary.csv)
W = 1100
H = 520
load 'plots/style.gp'
set title sprintf("Chapter 8: validation loss of each domain at step %d, one bar a mix", steps)
set ylabel 'validation loss (nats/byte)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border rgb "#555555"
set boxwidth 0.9
set grid noxtics
set key outside right top
set yrange [0:*]
n = int(system(sprintf("awk 'NR == 1 { print NF - 1 }' '%s'", data)))
plot for [i = 2:n + 1] data using i:xtic(1) lt (i - 1) title columnhead(i)
