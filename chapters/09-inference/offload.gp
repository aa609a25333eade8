# offload.gp: the expert cache's hit rate against its size -> PNG (chapter 9).
# gnuplot -e "data='plots/09-inference/offload.csv'; out='x.png'" chapters/09-inference/offload.gp
#   data: build/chapters/09-inference/serve --out (chapters/09-inference/ablate.sh): a row a
#   cache size (slots, of `experts` in all)
# The cache's own hit rate (warmed by each prompt's prefill), and the decoded tokens' routing
# replayed through an empty LRU cache of the same size: in their order, and with the tokens
# shuffled (locality removed). The gap between the two replays is what routing locality buys.
W = 820
H = 500
load 'plots/style.gp'
set datafile separator comma
set datafile columnheaders
set grid
set key top left font ",9" opaque
set xlabel "experts resident in the cache (slots)"
set ylabel "hit rate (%)"
set yrange [0:105]
set xrange [0:*]
set title "Chapter 9: experts off the chip, a bounded cache of them (LRU, batch 1)"
plot data using 1:(100 * $3) with points lt 1 pt 6 ps 2.2 lw 2 title "the cache, decoding", \
     data using 1:(100 * $4) with linespoints lt 3 lw 2 pt 5 title "replayed, tokens in order", \
     data using 1:(100 * $5) with linespoints lt 8 lw 2 dt 2 pt 4 title "replayed, tokens shuffled"
