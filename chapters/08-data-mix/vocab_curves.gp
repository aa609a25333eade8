# vocab_curves.gp: the validation loss in bits a byte against the training FLOPs, one line a
# vocabulary -> PNG.
# gnuplot -e "dir='DIR'; names='a b c'; types='1 2 3'; out='X.png'" chapters/08-data-mix/vocab_curves.gp
#   DIR/NAME.val: training PFLOPs, bits a byte, nats a token at each evaluation
#   types: each name's line type (chapters/series.gp: a second seed dashed in its arm's colour)
#   (chapters/08-data-mix/vocab.sh)
# Left: bits a byte, which every vocabulary shares; right: the loss a token as train.csv has it,
# which does not compare across vocabularies (a token of BPE holds several bytes).
W = 1100
H = 460
load 'plots/style.gp'
load 'chapters/series.gp'
set multiplot layout 1, 2 title 'Chapter 8: bytes and BPE vocabularies of the same text at equal training FLOPs'
set xlabel 'training FLOPs (PFLOP)'
set key top right
set title 'validation loss in bits a byte (comparable)'
set ylabel 'bits a byte'
plot for [i = 1:words(names)] sprintf('%s/%s.val', dir, word(names, i)) \
     using 1:2 with linespoints lt int(word(types, i)) lw 2 title word(names, i)
set title 'validation loss a token, as trained (not comparable)'
# (the key between the bytes curve, low, and the BPE ones, high)
set key right top at graph 0.98, graph 0.45
set ylabel 'nats a token'
plot for [i = 1:words(names)] sprintf('%s/%s.val', dir, word(names, i)) \
     using 1:3 with linespoints lt int(word(types, i)) lw 2 title word(names, i)
unset multiplot
