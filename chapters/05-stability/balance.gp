# Part 2 of chapter 5's ablation: the balance of the step's batch against how much the experts
# specialise in the domains, one point per run, one colour and point type per arm.
# gnuplot -e "dir='DIR'; names='a b'; out='X.png'" balance.gp
#   DIR/NAME.bal: arm,seed,maxvio,maxvio_group,domain_mi,val_loss (csv)
load 'plots/style.gp'
load 'chapters/series.gp'
set datafile separator ','
set output out
set title "Chapter 5: where the aux loss counts its fractions (micro-batches of 2 sequences)"
set xlabel "MaxVio of each step's whole batch (last 20% of the steps, mean over blocks)"
set ylabel 'domain-expert mutual information (nats)'
set key outside right top
set offsets graph 0.1, graph 0.1, graph 0.1, graph 0.1
plot for [i = 1:words(names)] sprintf('%s/%s.bal', dir, word(names, i)) \
     using 3:5 with points lt i pt (4 + 2 * i) ps 2 title word(names, i)
