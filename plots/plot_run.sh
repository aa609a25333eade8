#!/usr/bin/env bash
# plot_run.sh RUN_DIR: draw the PNGs of one training run of `moe train --out RUN_DIR`.
#
#   loss.png          training loss per step (and its moving average), validation loss
#   balance.png       maxvio and cv of the expert load per step, one line per MoE layer
#   load_heatmap.png  share of the routed assignments per expert over the steps, per MoE layer
#   domains.png       which experts each data domain is routed to at the last evaluation
#   dist.png          (runs over several processes, dist.csv) per process and step: bytes sent,
#                     seconds in collectives and in its experts, rows its experts computed
#
# The CSVs are reshaped with awk into small whitespace-separated files in a temporary folder
# inside RUN_DIR (removed on exit); the gnuplot scripts next to this file read only those, so
# columns are found by their header names, not by position. A dense run (router.csv and
# domains.csv with a header and no rows) gets loss.png only.
#
# Exit status: 0 plots written, 2 missing input or missing gnuplot, 1 a gnuplot script failed.
# MOE_PLOT_KEEP=1 keeps the temporary folder (its path is printed) for inspection.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MAX_PANELS=8 # a figure stays readable with up to 8 layer panels; more are subsampled

die() { echo "plot_run: $*" >&2; exit 2; }
note() { echo "plot_run: $*"; }

[ $# -eq 1 ] || die "usage: plots/plot_run.sh RUN_DIR (a directory written by build/moe train --out RUN_DIR)"
run=${1%/}
[ -n "$run" ] || run=/
hint="train a run first with build/moe train --out $run"
[ -d "$run" ] || die "no train.csv in $run: $hint (the directory does not exist)"
[ -f "$run/train.csv" ] || die "no train.csv in $run: $hint"
command -v gnuplot >/dev/null 2>&1 ||
    die "gnuplot is not installed: run \`make deps\` (or: sudo apt-get install gnuplot-nox)"

# Data rows of a CSV: non-empty lines after the header; 0 for a missing file.
rows() { [ -f "$1" ] && awk 'NR > 1 && NF > 0 { n++ } END { print n + 0 }' "$1" || echo 0; }
# A gnuplot single-quoted string literal ('' stands for one quote inside it).
gq() { local s=${1//\'/\'\'}; printf "'%s'" "$s"; }

[ "$(rows "$run/train.csv")" -gt 0 ] ||
    die "train.csv in $run has a header and no rows yet: let the run log at least one step"

tmp=$(mktemp -d "$run/.plotdata.XXXXXX") || die "cannot create a temporary folder in $run: is it writable?"
trap 'rm -rf "$tmp"' EXIT
if [ "${MOE_PLOT_KEEP:-0}" = 1 ]; then # for tests and for debugging a script: keep the data
    trap - EXIT
    note "keeping the reshaped data in $tmp"
fi
meta=$tmp/meta.gp

# ---- titles from config.txt (key = value; keys absent in older runs are simply left out) ----
model=""
if [ -f "$run/config.txt" ]; then
    model=$(awk -F= '
        { k = $1; v = $2; gsub(/^[ \t]+|[ \t\r]+$/, "", k); gsub(/^[ \t]+|[ \t\r]+$/, "", v); c[k] = v }
        END {
            s = ("model.n_layer" in c) ? c["model.n_layer"] " layers" : ""
            if (("moe.num_experts" in c) && c["moe.num_experts"] + 0 > 0) {
                s = s (s == "" ? "" : ", ") c["moe.num_experts"] " experts"
                if ("moe.top_k" in c) s = s ", top-" c["moe.top_k"]
            } else if ("moe.num_experts" in c) s = s (s == "" ? "" : ", ") "dense"
            print s
        }' "$run/config.txt")
fi
{
    echo "title_run = $(gq "$(basename "$(cd "$run" && pwd)")")"
    echo "title_model = $(gq "$model")"
} > "$meta"

# Centred moving average for long runs: y_i = mean of x over [i - h_i, i + h_i] with
# h_i = min(h, i - 1, n - i), so the curve neither lags the data nor bends at the ends.
# Prefix sums keep it O(n). Pasted in front of the awk programs that need it.
AWK_SMOOTH='
function smooth(x, n, h, y,    p, i, k) {
    p[0] = 0
    for (i = 1; i <= n; i++) p[i] = p[i - 1] + x[i]
    for (i = 1; i <= n; i++) {
        k = h; if (i - 1 < k) k = i - 1; if (n - i < k) k = n - i
        y[i] = (p[i + k] - p[i - k - 1]) / (2 * k + 1)
    }
}'

# ---- train.csv -> train.dat (step loss smoothed), val.dat (step val_loss) ------------------
# The smoothing window spans about 1/40 of the run; runs under 80 steps get none
# (loss_span = 0) and show the raw curve alone.
awk -F, -v dir="$tmp" "$AWK_SMOOTH"'
    function num(x) { return x ~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/ }
    BEGIN { n = 0; nval = 0; bad = 0 }
    { sub(/\r$/, "") }
    NR == 1 {
        for (i = 1; i <= NF; i++) c[$i] = i
        if (!("step" in c) || !("loss" in c)) {
            print "plot_run: train.csv header lacks step or loss: " $0 > "/dev/stderr"; exit 2
        }
        next
    }
    NF == 0 { next }
    {
        if (!num($c["step"]) || !num($c["loss"])) { bad++; next }
        n++; st[n] = $c["step"]; l[n] = $c["loss"]
        if ("val_loss" in c && num($c["val_loss"])) { print $c["step"], $c["val_loss"] > (dir "/val.dat"); nval++ }
    }
    END {
        if (n == 0) { print "plot_run: train.csv has no numeric step,loss rows" > "/dev/stderr"; exit 2 }
        h = int(n / 80)
        smooth(l, n, h, y)
        for (i = 1; i <= n; i++) print st[i], l[i], y[i] > (dir "/train.dat")
        print "loss_span = " (h > 0 ? 2 * h + 1 : 0)
        print "n_val = " nval
        if (bad) print "plot_run: " bad " rows with a non-numeric loss (nan/inf) are not drawn" > "/dev/stderr"
    }' "$run/train.csv" >> "$meta" || exit 2

pngs=()
failed=0
draw() { # draw SCRIPT PNG: run one gnuplot script with the shared variables
    if gnuplot -e "set loadpath $(gq "$here"); run=$(gq "$run"); data=$(gq "$tmp"); out=$(gq "$2")" \
        "$here/$1"; then
        pngs+=("$2")
    else
        echo "plot_run: gnuplot failed on plots/$1 (messages above)" >&2
        failed=1
    fi
}

draw loss.gp "$run/loss.png"

# ---- router.csv -> bal_L.dat, load_L.dat -------------------------------------------------
# bal_L.dat: step maxvio cv and their moving averages (window bal_span steps, 0 = none).
# load_L.dat: "step expert load" on a step-bin x expert grid.
# Runs with more than MAX_PANELS MoE layers show that many, evenly spaced from first to last.
# The heatmap is drawn `with image`, which needs a regular grid: rows are averaged into at
# most 400 equal step bins (one per logged step in short runs, `per` logged steps in long
# ones), and a bin that got no row repeats the previous bin.
if [ "$(rows "$run/router.csv")" -eq 0 ]; then
    note "router.csv has no rows (dense run): skipping balance.png and load_heatmap.png"
else
    awk -F, -v dir="$tmp" -v maxp="$MAX_PANELS" "$AWK_SMOOTH"'
        BEGIN { nd = 0; nl = 0; E = 0 } # numeric: they become array subscripts
        { sub(/\r$/, "") }
        FNR == 1 {
            if (NR > 1) next
            for (i = 1; i <= NF; i++) { c[$i] = i; if ($i ~ /^load_/) le[E++] = i }
            if (!("step" in c) || !("layer" in c) || !("maxvio" in c) || !("cv" in c)) {
                print "plot_run: router.csv header lacks step, layer, maxvio or cv: " $0 > "/dev/stderr"
                exit 2
            }
            next
        }
        NF == 0 { next }
        NR == FNR {
            s = $c["step"] + 0; L = $c["layer"] + 0
            if (!(s in seen)) {
                seen[s] = 1
                if (nd == 0 || s < smin) smin = s
                if (nd == 0 || s > smax) smax = s
                nd++
            }
            if (!(L in have)) { have[L] = 1; lay[nl++] = L }
            next
        }
        {
            if (!ready) { # per logged steps per column, w steps between column centres
                per = (nd > 400) ? int((nd - 2) / 399) + 1 : 1
                w = (smax > smin) ? per * (smax - smin) / (nd - 1) : 1
                nb = int((smax - smin) / w + 0.5) + 1
                if (nb < 2) nb = 2 # with image needs two columns at least
                ready = 1
            }
            s = $c["step"] + 0; L = $c["layer"] + 0
            k = ++nr[L]; bs[L, k] = s; bm[L, k] = $c["maxvio"] + 0; bc[L, k] = $c["cv"] + 0
            b = int((s - smin) / w + 0.5)
            cnt[L, b]++
            for (e = 0; e < E; e++) sum[L, b, e] += $le[e]
        }
        END {
            for (i = 1; i < nl; i++) # layers in ascending order
                for (j = i; j > 0 && lay[j - 1] > lay[j]; j--) { t = lay[j]; lay[j] = lay[j - 1]; lay[j - 1] = t }
            np = (nl > maxp) ? maxp : nl
            heat = ""
            h = int(nd / 80)
            for (p = 0; p < np; p++) {
                L = lay[(np > 1) ? int(p * (nl - 1) / (np - 1) + 0.5) : 0]
                heat = heat (p ? " " : "") L
                n = nr[L]
                for (k = 1; k <= n; k++) { xm[k] = bm[L, k]; xc[k] = bc[L, k] }
                smooth(xm, n, h, ym); smooth(xc, n, h, yc)
                f = dir "/bal_" L ".dat"
                for (k = 1; k <= n; k++) print bs[L, k], xm[k], xc[k], ym[k], yc[k] > f
                close(f)
                f = dir "/load_" L ".dat"
                for (e = 0; e < E; e++) {
                    v = 0
                    for (b = 0; b < nb; b++) {
                        if ((L, b) in cnt) v = sum[L, b, e] / cnt[L, b]
                        if (v > vmax) vmax = v
                        print smin + b * w, e, v > f
                    }
                    print "" > f
                }
                close(f)
            }
            print "router_layers = \"" heat "\""
            print "bal_span = " (h > 0 ? 2 * h + 1 : 0)
            print "E = " E
            print "heat_bin = " per
            print "load_max = " (vmax > 0 ? vmax : 1)
            if (nl > np)
                print "plot_run: " nl " MoE layers: balance.png and load_heatmap.png show " \
                      np " of them (" heat ")" > "/dev/stderr"
        }' "$run/router.csv" "$run/router.csv" >> "$meta" || exit 2
    draw balance.gp "$run/balance.png"
    if [ "$(awk '/^E = / { print $3 }' "$meta")" -ge 2 ]; then
        draw load_heatmap.gp "$run/load_heatmap.png"
    else
        note "router.csv has fewer than 2 load_ columns: skipping load_heatmap.png"
    fi
fi

# ---- domains.csv -> dom_L.dat (expert domain fraction) at the last evaluated step --------
if [ "$(rows "$run/domains.csv")" -eq 0 ]; then
    note "domains.csv has no rows (dense run or no evaluation yet): skipping domains.png"
else
    awk -F, -v dir="$tmp" -v maxp="$MAX_PANELS" -v q="'" '
        BEGIN { nd = 0; nl = 0; E = 0 } # numeric: they become array subscripts
        { sub(/\r$/, "") }
        FNR == 1 {
            if (NR > 1) next
            for (i = 1; i <= NF; i++) c[$i] = i
            if (!("step" in c) || !("layer" in c) || !("domain" in c) || !("expert" in c) || !("fraction" in c)) {
                print "plot_run: domains.csv header lacks step, layer, domain, expert or fraction: " $0 > "/dev/stderr"
                exit 2
            }
            next
        }
        NF == 0 { next }
        NR == FNR { s = $c["step"] + 0; if (!any || s > last) last = s; any = 1; next }
        $c["step"] + 0 == last {
            L = $c["layer"] + 0; d = $c["domain"]; e = $c["expert"] + 0
            gsub(/["\\]/, "", d); gsub(q, "", d) # the names end up inside gnuplot string literals
            if (!(d in di)) { di[d] = nd; dn[nd++] = d }
            if (!(L in have)) { have[L] = 1; lay[nl++] = L }
            if (e + 1 > E) E = e + 1
            frac[L, di[d], e] = $c["fraction"] + 0
        }
        END {
            for (i = 1; i < nl; i++)
                for (j = i; j > 0 && lay[j - 1] > lay[j]; j--) { t = lay[j]; lay[j] = lay[j - 1]; lay[j - 1] = t }
            np = (nl > maxp) ? maxp : nl
            layers = ""
            for (p = 0; p < np; p++) {
                L = lay[(np > 1) ? int(p * (nl - 1) / (np - 1) + 0.5) : 0]
                layers = layers (p ? " " : "") L
                f = dir "/dom_" L ".dat"
                for (d = 0; d < nd; d++)
                    for (e = 0; e < E; e++) {
                        v = ((L, d, e) in frac) ? frac[L, d, e] : 0
                        if (v > vmax) vmax = v
                        print e, d, v > f
                    }
                close(f)
            }
            tics = ""
            for (d = 0; d < nd; d++) tics = tics (d ? ", " : "") "\"" dn[d] "\" " d
            if (nl > np)
                print "plot_run: " nl " MoE layers: domains.png shows " np " of them (" layers ")" \
                      > "/dev/stderr"
            print "dom_layers = \"" layers "\""
            print "dom_n = " nd
            print "dom_E = " E
            print "dom_step = " last
            print "dom_max = " (vmax > 0 ? vmax : 1)
            print "dom_ytics = " q "set ytics (" tics ")" q
        }' "$run/domains.csv" "$run/domains.csv" >> "$meta" || exit 2
    draw domains.gp "$run/domains.png"
fi

# ---- dist.csv -> dist_R.dat: step MB_sent comm_s expert_s rows (sums over the step's rows) --
if [ "$(rows "$run/dist.csv")" -gt 0 ]; then
    awk -F, -v dir="$tmp" '
        { sub(/\r$/, "") }
        NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i
                  if (!("rank" in c) || !("bytes_sent" in c) || !("comm_s" in c)) {
                      print "plot_run: dist.csv header lacks rank, bytes_sent or comm_s: " $0 > "/dev/stderr"; exit 2 }
                  next }
        NF == 0 { next }
        { s = $c["step"] + 0; r = $c["rank"] + 0
          if (!((s, r) in have)) { have[s, r] = 1; order[++n] = s SUBSEP r }
          if (r + 1 > R) R = r + 1
          b[s, r] += $c["bytes_sent"]; x[s, r] += $c["comm_s"]; e[s, r] += $c["expert_s"]
          w[s, r] += $c["rows_in"] }
        END { for (i = 1; i <= n; i++) { split(order[i], k, SUBSEP); s = k[1]; r = k[2]
                print s, b[s, r] / 1e6, x[s, r], e[s, r], w[s, r] > (dir "/dist_" r ".dat") }
              print "dist_ranks = " R }' "$run/dist.csv" >> "$meta" || exit 2
    draw dist.gp "$run/dist.png"
fi

for p in "${pngs[@]}"; do echo "wrote $p"; done
exit "$failed"
