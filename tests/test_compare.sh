#!/usr/bin/env bash
# test_compare.sh: moe compare, runs side by side (run by `make test`).
#
#   1. two 12-step runs of a tiny MoE on synthetic data, differing in moe.top_k alone: the
#      table names both, their steps, and moe.top_k as the one setting that differs; the CSV's
#      figures are those of the runs' own files (train loss: the mean of the last 10 steps of
#      train.csv; the last val_loss; maxvio, cv, drop_frac: router.csv's mean over the same
#      steps and both blocks; the median tok_per_s); a dense run has no balance figures
#   2. --plot FILE.png draws a PNG (with gnuplot)
#   3. bad input, exit 2 with a message and nothing on stdout: no run, one run, a missing run
#      directory, a damaged router.csv, --plot of a name that is not .png or into a folder that
#      does not exist, an unknown option

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1

data="$tmp/data"
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.d_expert=32 --set train.batch=4
      --set train.steps=12 --set train.warmup=2 --set train.eval_every=4
      --set "data.train=$data/train.bin" --set "data.val=$data/val.bin" --quiet)
"$moe" synth --out "$data" --tokens 20000 > /dev/null &&
    "$moe" train --out "$tmp/top2" "${tiny[@]}" > /dev/null &&
    "$moe" train --out "$tmp/top1" "${tiny[@]}" --set moe.top_k=1 > /dev/null &&
    "$moe" train --out "$tmp/dense" "${tiny[@]}" --set moe.num_experts=0 > /dev/null
check "synthetic data and three 12-step runs" $?

# ---- 1. the table and the CSV ----------------------------------------------------------------
echo "test_compare: the table"
out=$("$moe" compare "$tmp/top2" "$tmp/top1" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -Eq "^run +$tmp/top2 +$tmp/top1\$" <<< "$out" &&
    grep -Eq '^steps +12 +12$' <<< "$out" && grep -Eq '^N \(final window\) +10 +10$' <<< "$out" &&
    sed -n '/^settings that differ:/,$p' <<< "$out" | tail -n +2 |
        awk 'END { exit !(NR == 1 && ok) } { ok = $1 == "moe.top_k" && $2 == 2 && $3 == 1 }'
check "two runs side by side: steps 12, a window of 10, moe.top_k (2, 1) the one setting that differs" \
    $? "exit $rc: $out"

# the figures, recomputed from the run's files
expect() { # RUN: "train_loss val_loss maxvio cv drop_frac tok_per_s" of its files
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             { loss[NR - 1] = $c["loss"]; n = NR - 1; if ($c["val_loss"] != "") val = $c["val_loss"]
               tok[n] = $c["tok_per_s"] }
             END { for (i = n - 9; i <= n; i++) s += loss[i]
                   for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
                       if (tok[j] + 0 < tok[i] + 0) { t = tok[i]; tok[i] = tok[j]; tok[j] = t }
                   printf "%.6f %.6f ", s / 10, val; m = n % 2 ? tok[(n + 1) / 2] : (tok[n / 2] + tok[n / 2 + 1]) / 2
                   printf "%s\n", m }' "$1/train.csv" > "$tmp/t.txt"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { r[NR - 1] = $0; n = NR - 1 }
             END { for (i = n - 19; i <= n; i++) { split(r[i], f, ","); a += f[c["maxvio"]]
                       b += f[c["cv"]]; d += f[c["drop_frac"]] }
                   printf "%.6f %.6f %.6f\n", a / 20, b / 20, d / 20 }' "$1/router.csv" > "$tmp/r.txt"
    read -r l v t < "$tmp/t.txt"
    read -r a b d < "$tmp/r.txt"
    echo "$l $v $a $b $d $t"
}
csv=$("$moe" compare "$tmp/top2" "$tmp/top1" "$tmp/dense" --csv 2>&1)
rc=$?
got2=$(awk -F, -v r="$tmp/top2" '$1 == r { print $4, $5, $6, $7, $8, $9 }' <<< "$csv")
got1=$(awk -F, -v r="$tmp/top1" '$1 == r { print $4, $5, $6, $7, $8, $9 }' <<< "$csv")
close() { # GOT WANT: the same six figures, to 1e-5 (tok/s: the median's rounding)
    awk -v g="$1" -v w="$2" 'BEGIN { n = split(g, a, " "); split(w, b, " "); if (n != 6) exit 1
        for (i = 1; i <= 6; i++) { d = a[i] - b[i]; if (d < 0) d = -d; if (d > (i == 6 ? 0.5 : 1e-5)) exit 1 } }'
}
[ $rc -eq 0 ] && [ "$(head -n 1 <<< "$csv")" = \
    "run,steps,window,train_loss,val_loss,maxvio,cv,drop_frac,tok_per_s,moe.num_experts,moe.top_k" ] &&
    close "$got2" "$(expect "$tmp/top2")" && close "$got1" "$(expect "$tmp/top1")"
check "--csv: the figures of train.csv and router.csv (top-2: $got2)" $? \
    "exit $rc: $csv; want $(expect "$tmp/top2") and $(expect "$tmp/top1")"
grep -Eq "^$tmp/dense,12,10,[0-9.]+,[0-9.]+,,,,[0-9]+,0,2\$" <<< "$csv"
check "--csv: a dense run has no maxvio, cv or drop_frac (empty fields)" $? "$csv"

# ---- 2. --plot ---------------------------------------------------------------------------------
if command -v gnuplot > /dev/null 2>&1; then
    echo "test_compare: --plot"
    out=$("$moe" compare "$tmp/top2" "$tmp/top1" --plot "$tmp/loss.png" 2>&1)
    rc=$?
    [ $rc -eq 0 ] && [ -s "$tmp/loss.png" ] &&
        [ "$(head -c 8 "$tmp/loss.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
        grep -q "^wrote $tmp/loss.png" <<< "$out"
    check "--plot FILE.png: their loss curves as a PNG" $? "exit $rc: $out"
else
    ok "--plot: not checked (no gnuplot; make deps installs it)"
fi

# ---- 3. bad input ------------------------------------------------------------------------------
echo "test_compare: bad input"
refused() { # LABEL PATTERN ARGS...: exit 2, the pattern on stderr, nothing on stdout
    local label=$1 pattern=$2
    shift 2
    "$moe" compare "$@" > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    [ $rc -eq 2 ] && grep -q -- "$pattern" "$tmp/err" && [ ! -s "$tmp/out" ]
    check "$label: exit 2" $? "exit $rc: $(cat "$tmp/err" "$tmp/out")"
}
refused "no run" "name the run directories to compare"
refused "one run" "one run has nothing to be compared with" "$tmp/top2"
refused "a missing run directory" "no run directory '$tmp/nope'" "$tmp/top2" "$tmp/nope"
cp -r "$tmp/top1" "$tmp/damaged"
sed -i '3s/^[0-9]*,/x,/' "$tmp/damaged/router.csv"
refused "a damaged router.csv, named" "$tmp/damaged/router.csv:3" "$tmp/top2" "$tmp/damaged"
refused "--plot of a name that is not .png" "name it FILE.png" "$tmp/top2" "$tmp/top1" --plot "$tmp/x.svg"
refused "--plot into a folder that does not exist" "no folder there" "$tmp/top2" "$tmp/top1" \
    --plot "$tmp/no/such/loss.png"
refused "an unknown option" "unknown option '--json'" "$tmp/top2" "$tmp/top1" --json

finish
