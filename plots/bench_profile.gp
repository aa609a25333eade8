# bench_profile.gp: where the time of a training step goes, op by op -> PNG.
#
# In:  data  the CSV of `moe bench --profile --profile-out FILE.csv`, columns
#            config,op,fwd_ms,bwd_ms,total_ms,percent (ms per step; every config lists the
#            same ops in the same order)
#      out   PNG path
# Run from the repository root (`make bench` does):
#   gnuplot -e "data='build/bench_profile.csv'; out='build/bench_profile.png'" plots/bench_profile.gp
#
# One panel per config, one horizontal bar per op: forward time, then backward time, then
# the time spent outside both passes (the optimizer, and zero_grad in "other"), stacked, with
# the op's share of the step at the end of the bar. Panels have their own time axis: compare
# shares across configs, and read the step time in each panel's title.

if (!exists("data")) data = 'build/bench_profile.csv'
q = ' "'.data.'"' # the path as a shell word
if (system("test -r".q." && echo 1 || echo 0") + 0 == 0) {
    print "bench_profile.gp: cannot read ".data.": run build/moe bench --profile --profile-out ".data
    exit status 2
}
# configs in file order, ops per config, and each config's step time (the sum of its rows)
configs = system("awk -F, 'NR > 1 && !($1 in s) { s[$1]; printf \"%s \", $1 }'".q)
nops = int(system("awk -F, 'NR == 2 { c = $1 } NR > 1 && $1 == c { n++ } END { print n + 0 }'".q))
steps = system("awk -F, 'NR > 1 { t[$1] += $5; if (!($1 in o)) { o[$1]; k[n++] = $1 } } END { for (i = 0; i < n; i++) printf \"%.1f \", t[k[i]] }'".q)
n = words(configs)
if (n == 0 || nops == 0) {
    print "bench_profile.gp: no profile rows in ".data.": run build/moe bench --profile --profile-out ".data
    exit status 2
}

cols = (n > 1) ? 2 : 1
rows = int((n + cols - 1) / cols)
W = 720 * cols
H = 60 + 28 * nops * rows + 100 * rows
load 'plots/style.gp'

set datafile separator comma
set style fill solid 0.85 border rgb "#555555"
set grid noytics
unset xlabel
set yrange [-0.7:nops - 0.3]
set ytics scale 0
set xrange [0:*]
set offsets 0, graph 0.12, 0, 0
set key below horizontal noopaque

# op index within its config, first op at the top
y(r) = nops - 1 - (int(r) % nops)
is(c) = strcol(1) eq c
# x where the row belongs to config c and its segment has width w, NaN elsewhere (every
# x column of other configs' rows must be NaN, or they would stretch the autoscaled axis; a
# segment of zero width would still draw its border)
on(c, w, x) = (is(c) && w > 0.0005) ? x : NaN

set multiplot layout rows, cols title "moe bench: time per op, forward + backward + outside the passes" font ",13"
do for [i = 1:n] {
    c = word(configs, i)
    set title sprintf("%s: ms per step by op (step %s ms, mean)", c, word(steps, i))
    plot data skip 1 using (on(c, $3, $3 / 2)):(y($0)):(on(c, $3, 0)):(on(c, $3, $3)):(y($0) - 0.38):(y($0) + 0.38):ytic(2) \
             with boxxyerror lc rgb "#0072b2" title "forward", \
         '' skip 1 using (on(c, $4, $3 + $4 / 2)):(y($0)):(on(c, $4, $3)):(on(c, $4, $3 + $4)):(y($0) - 0.38):(y($0) + 0.38) \
             with boxxyerror lc rgb "#d55e00" title "backward", \
         '' skip 1 using (on(c, $5 - $3 - $4, ($3 + $4 + $5) / 2)):(y($0)):(on(c, $5 - $3 - $4, $3 + $4)):(on(c, $5 - $3 - $4, $5)):(y($0) - 0.38):(y($0) + 0.38) \
             with boxxyerror lc rgb "#999999" title "outside the passes", \
         '' skip 1 using (is(c) ? $5 : NaN):(y($0)):(sprintf(" %.1f%%", $6)) \
             with labels left font ",8" notitle
}
unset multiplot
