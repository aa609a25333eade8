#!/usr/bin/env bash
# test_plots.sh: plots/plot_run.sh on synthetic run directories (run by `make test`).
#
#   1. an MoE run (50 steps, MoE layers 1 and 3, 4 experts, 3 domains, an eval every 10
#      steps): all four PNGs are written, are real PNG files and hold a real picture
#      and the reshaped data the scripts read holds the right numbers
#   2. a long run (3000 steps, 10 MoE layers, 16 experts, 6 domains) is plotted in a few
#      seconds, its figures limited to 8 layer panels
#   3. a dense run (router.csv and domains.csv with a header only): loss.png, exit 0; a run over
#      2 processes (dist.csv): dist.png, and its data sums each step's rows per process
#   4. a missing run directory, or one without train.csv: exit status 2 and a message that
#      says how to make one
#   5. gnuplot not on PATH: exit status 2 and a hint to run `make deps`
#   6. the temporary data folder is removed from the run directory afterwards
# Prints one line per check; exits non-zero when any check fails.
set -u

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
plot="$root/plots/plot_run.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moe_test_plots.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fails=0
ok() { echo "  ok   $*"; }
bad() { echo "  FAIL $*"; fails=$((fails + 1)); }

if ! command -v gnuplot >/dev/null 2>&1; then
    echo "test_plots: skipped: gnuplot is not installed; install it with: make deps"
    exit 77
fi

# make_run DIR STEPS LAYERS E DOMAINS EVAL_EVERY: a run directory with the CSV layout of
# `moe train`. LAYERS is a space-separated list of MoE layer indices ("" = dense run).
# The loss decays like a training curve; expert l % E starts overloaded and the router
# evens out over the run; domain d prefers expert d % E more and more.
make_run() {
    local d=$1
    mkdir -p "$d"
    awk -v d="$d" -v n="$2" -v layers="$3" -v E="$4" -v doms="$5" -v every="$6" 'BEGIN {
        srand(7)
        nl = split(layers, L, " "); nd = split(doms, D, " ")
        tr = d "/train.csv"; ro = d "/router.csv"; dm = d "/domains.csv"
        print "step,loss,aux_loss,z_loss,lr,grad_norm,tok_per_s,val_loss" > tr
        h = "step,layer,maxvio,cv,entropy,drop_frac"
        for (e = 0; e < E; e++) h = h ",load_" e
        print h > ro
        print "step,layer,domain,expert,fraction" > dm
        for (s = 1; s <= n; s++) {
            loss = 1.4 + 4.1 / (1 + s / 12) + 0.15 * rand()
            val = (s % every == 0) ? sprintf("%.4f", loss + 0.08) : ""
            printf "%d,%.4f,1.02,3.1,0.003,0.8,5000,%s\n", s, loss, val > tr
            for (i = 1; i <= nl; i++) {
                tot = 0
                for (e = 0; e < E; e++) {
                    w[e] = 1 + (e == L[i] % E) * 3 * exp(-s / (n / 3)) + 0.3 * rand(); tot += w[e]
                }
                mx = 0; sd = 0
                for (e = 0; e < E; e++) { w[e] /= tot; if (w[e] > mx) mx = w[e] }
                for (e = 0; e < E; e++) sd += (w[e] - 1 / E) ^ 2
                line = sprintf("%d,%d,%.4f,%.4f,1.2,0", s, L[i], mx * E - 1, sqrt(sd / E) * E)
                for (e = 0; e < E; e++) line = line sprintf(",%.4f", w[e])
                print line > ro
            }
            if (s % every == 0)
                for (i = 1; i <= nl; i++)
                    for (k = 1; k <= nd; k++) {
                        tot = 0
                        for (e = 0; e < E; e++) { w[e] = 0.2 + (e == k % E) * 2 * s / n + 0.3 * rand(); tot += w[e] }
                        for (e = 0; e < E; e++) printf "%d,%d,%s,%d,%.4f\n", s, L[i], D[k], e, w[e] / tot > dm
                    }
        }
        printf "model.n_layer = %d\nmoe.num_experts = %d\nmoe.top_k = 2\n", \
            nl ? 2 * nl : 4, nl ? E : 0 > (d "/config.txt")
    }'
}

# is_png FILE: exists, starts with the 8-byte PNG signature, is at least 900 x 540 pixels
# (the IHDR chunk right after the signature holds width and height, big-endian) and is
# bigger than 5 KB (an empty or failed canvas compresses to less).
is_png() {
    [ -f "$1" ] || { echo "missing"; return 1; }
    local magic w h size
    magic=$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')
    [ "$magic" = 89504e470d0a1a0a ] || { echo "not a PNG (starts with $magic)"; return 1; }
    read -r w h < <(od -An -j16 -N8 -tu1 "$1" |
        awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4, $5 * 16777216 + $6 * 65536 + $7 * 256 + $8 }')
    if [ "$w" -lt 900 ] || [ "$h" -lt 540 ]; then echo "only ${w}x${h} pixels"; return 1; fi
    size=$(wc -c < "$1")
    [ "$size" -gt 5000 ] || { echo "only $size bytes"; return 1; }
    echo "${w}x${h}, $size bytes"
}

echo "test_plots: MoE run"
moe="$tmp/moe run"  # a space in the path must not break the gnuplot command lines
make_run "$moe" 50 "1 3" 4 "en de code" 10
if out=$(bash "$plot" "$moe" 2>&1); then ok "plot_run.sh exits 0"; else bad "plot_run.sh exits $?: $out"; fi
for p in loss balance load_heatmap domains; do
    if msg=$(is_png "$moe/$p.png"); then ok "$p.png is a PNG ($msg)"; else bad "$p.png: $msg"; fi
    case $out in *"wrote $moe/$p.png"*) ok "prints the path of $p.png" ;;
        *) bad "output does not name $p.png: $out" ;; esac
done
left=$(find "$moe" -maxdepth 1 -name '.plotdata*')
if [ -n "$left" ]; then bad "temporary data folder left in the run directory: $left"
else ok "temporary data folder removed"; fi

# The reshaped data: domains at the LAST evaluation (step 50), the load grid one column per
# step with the values of router.csv, the validation points only on eval steps.
out=$(MOE_PLOT_KEEP=1 bash "$plot" "$moe" 2>&1)
data=$(find "$moe" -maxdepth 1 -name '.plotdata*' | head -n 1)
if [ -z "$data" ]; then bad "MOE_PLOT_KEEP=1 kept no data folder: $out"; else
    want=$(awk -F, '$1 == 50 && $2 == 3 && $3 == "de" && $4 == 2 { print $5 + 0 }' "$moe/domains.csv")
    got=$(awk '$1 == 2 && $2 == 1 { print $3 + 0 }' "$data/dom_3.dat")
    if [ -n "$want" ] && [ "$want" = "$got" ]; then ok "domains: layer 3, de, expert 2 = $got (step 50)"
    else bad "domains: layer 3, de, expert 2 is '$got', domains.csv at step 50 says '$want'"; fi
    want=$(awk -F, '$1 == 7 && $2 == 1 { print $8 + 0 }' "$moe/router.csv")
    got=$(awk '$1 == 7 && $2 == 1 { print $3 + 0 }' "$data/load_1.dat")
    cells=$(awk 'NF == 3 { n++ } END { print n + 0 }' "$data/load_1.dat")
    if [ -n "$want" ] && [ "$want" = "$got" ] && [ "$cells" = 200 ]; then
        ok "load grid: 4 experts x 50 steps, layer 1 step 7 expert 1 = $got"
    else bad "load grid: $cells cells (want 200), step 7 expert 1 = '$got' (router.csv: '$want')"; fi
    got=$(awk '{ printf "%s ", $1 }' "$data/val.dat")
    if [ "$got" = "10 20 30 40 50 " ]; then ok "validation points at steps $got"
    else bad "validation points at steps '$got', want 10 20 30 40 50"; fi
    rm -rf "$data"
fi

echo "test_plots: a run over 2 processes (dist.csv)"
multi="$tmp/multi"
make_run "$multi" 20 "0 1" 4 "en de" 10
{ echo "step,layer,rank,bytes_sent,bytes_recv,comm_s,expert_s,rows_in,rows_out_remote,rows_in_remote,sync_wait_s"
  for s in $(seq 1 20); do for r in 0 1; do for l in -1 0 1; do
    echo "$s,$l,$r,$((1000 * (s + r + 2))),$((1000 * (s + r + 2))),0.01,0.02,$((100 + 7 * r)),10,12,0.001"
  done; done; done; } > "$multi/dist.csv"
out=$(MOE_PLOT_KEEP=1 bash "$plot" "$multi" 2>&1)
if msg=$(is_png "$multi/dist.png"); then ok "dist.png is a PNG ($msg)"; else bad "dist.png: $msg: $out"; fi
data=$(find "$multi" -maxdepth 1 -name '.plotdata*' | head -n 1)
# process 1 at step 5: 3 rows of 8000 bytes = 0.024 MB, rows 2 x 107 (layer -1 carries none
# in a real file; here every row has them, so 3 x 107)
got=$(awk '$1 == 5 { print $2, $5 }' "$data/dist_1.dat" 2>/dev/null)
if [ "$got" = "0.024 321" ]; then ok "dist_1.dat sums the step's rows of process 1 ($got)"
else bad "dist_1.dat at step 5: '$got', want '0.024 321'"; fi
rm -rf "$data"

echo "test_plots: long run"
long="$tmp/long"
make_run "$long" 3000 "0 1 2 3 4 5 6 7 8 9" 16 "en de es it ru code" 100
start=$(date +%s%N)
if out=$(bash "$plot" "$long" 2>&1); then ok "plot_run.sh exits 0"; else bad "plot_run.sh exits $?: $out"; fi
ms=$((($(date +%s%N) - start) / 1000000))
# a guard against a plot script that scales badly with the run's length (it takes a few
# seconds), not a speed test: the bound is loose enough for a loaded machine
if [ "$ms" -lt 60000 ]; then ok "3000 steps x 10 layers plotted in $ms ms"; else bad "took $ms ms (limit 60000)"; fi
for p in loss balance load_heatmap domains; do
    if msg=$(is_png "$long/$p.png"); then ok "$p.png is a PNG ($msg)"; else bad "$p.png: $msg"; fi
done
case $out in *"show 8 of them"*) ok "10 MoE layers: says it shows 8 of them" ;;
    *) bad "no note about showing 8 of 10 layers: $out" ;; esac

echo "test_plots: dense run"
dense="$tmp/dense"
make_run "$dense" 50 "" 4 "en de" 10
if out=$(bash "$plot" "$dense" 2>&1); then ok "plot_run.sh exits 0"; else bad "plot_run.sh exits $?: $out"; fi
if msg=$(is_png "$dense/loss.png"); then ok "loss.png is a PNG ($msg)"; else bad "loss.png: $msg"; fi
for p in balance load_heatmap domains; do
    if [ -e "$dense/$p.png" ]; then bad "$p.png drawn for a dense run"; else ok "no $p.png"; fi
done
case $out in *"skipping"*) ok "says which plots it skipped" ;; *) bad "no skip note: $out" ;; esac

echo "test_plots: missing run directory"
out=$(bash "$plot" "$tmp/nope" 2>&1); rc=$?
if [ $rc -eq 2 ]; then ok "exit status 2"; else bad "exit status $rc, expected 2"; fi
want="no train.csv in $tmp/nope: train a run first with build/moe train --out $tmp/nope"
case $out in *"$want"*) ok "message: $out" ;; *) bad "message '$out' lacks '$want'" ;; esac
mkdir "$tmp/empty"
out=$(bash "$plot" "$tmp/empty" 2>&1); rc=$?
if [ $rc -eq 2 ] && [[ $out == *"no train.csv in $tmp/empty: "* ]]; then ok "a directory without train.csv: exit 2"
else bad "a directory without train.csv: exit $rc, '$out'"; fi

echo "test_plots: gnuplot missing"
mkdir "$tmp/bin"  # a PATH with the tools plot_run.sh needs, except gnuplot
for t in dirname awk mktemp rm; do ln -s "$(command -v "$t")" "$tmp/bin/$t"; done
bash_bin=$(command -v bash)
out=$(PATH="$tmp/bin" "$bash_bin" "$plot" "$moe" 2>&1); rc=$?
if [ $rc -eq 2 ] && [[ $out == *"make deps"* ]]; then ok "exit 2 and a hint to run make deps"
else bad "without gnuplot: exit $rc, '$out'"; fi

if [ $fails -eq 0 ]; then echo "test_plots: all checks passed"; else echo "test_plots: $fails checks failed"; fi
[ $fails -eq 0 ]
