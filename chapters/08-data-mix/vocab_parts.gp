# vocab_parts.gp: what the vocabulary costs and what it does to the router -> PNG.
# gnuplot -e "data='X.dat'; out='X.png'" chapters/08-data-mix/vocab_parts.gp
#   X.dat: a row an arm: name, embedding + head % of the parameters, the head's % of the
#   training FLOPs a token, the time a token against the bytes arm's, MaxVio
#   (chapters/08-data-mix/vocab.sh)
W = 1200
H = 460
load 'plots/style.gp'
set style fill solid 0.85 border rgb "#555555"
set boxwidth 0.6
set grid noxtics
set xtics scale 0
set yrange [0:*]
unset key
set multiplot layout 1, 4 title "Chapter 8: what the vocabulary costs, and the router"
set title "embedding + head\n% of the parameters"
plot data using 0:2:xtic(1) with boxes lt 1
set title "the head\n% of the training FLOPs"
plot data using 0:3:xtic(1) with boxes lt 2
set title "time a token\nx the bytes arm's"
plot data using 0:4:xtic(1) with boxes lt 3
set title "MaxVio\n(training batches, last 20%)"
plot data using 0:5:xtic(1) with boxes lt 4
unset multiplot
