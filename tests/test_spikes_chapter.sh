#!/usr/bin/env bash
# test_spikes_chapter.sh: chapter 6's "Acting on a spike" (chapters/06-troubleshooting/spikes.sh),
# run by `make test`.
#
#   1. spikes.sh --smoke exits 0 and writes runs.csv (every arm, every seed), summary.csv,
#      summary.md, curves.csv, provenance.txt and the two figures; what holds by construction
#      holds in it: a clean arm is its own reference and trains on no corrupted batch, `none`
#      keeps every update of the stretch, a skip run's skips are its train.csv's column
#      `skipped`, a rollback run's rollbacks its rollbacks.csv's rows
#   2. the command the handbook shows, at a tiny size: moe train with spike_action=rollback on
#      loss spikes rolls back over a corrupted stretch and writes rollbacks.csv, rolled_back.csv
#      and its provenance.txt line
#   3. the committed plots/06-spikes/ (the handbook's numbers) agree with themselves: every
#      difference of runs.csv is the run's value minus its clean run's of the same seed, every
#      mean, min and max of summary.csv is that of runs.csv, summary.md's rows are summary.csv's,
#      curves.csv ends at runs.csv's final losses, provenance.txt counts the runs; and the same
#      check fails on a copy with one number changed

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
if ! command -v gnuplot > /dev/null 2>&1; then
    skip "gnuplot is not installed" "make deps"
fi
export OMP_NUM_THREADS=1

is_png() { [ "$(head -c 4 "$1" 2> /dev/null | od -An -tx1 | tr -d ' \n')" = 89504e47 ]; }

# consistent DIR SEEDS: 0 when DIR's files agree with each other as spikes.sh writes them (every
# arm SEEDS seeds), else 1 with what disagrees on stdout
consistent() {
    local dir=$1 seeds=$2
    [ "$(head -n 1 "$dir/runs.csv")" = "arm,seed,exit,ref,val_in,val_end,val_after,val_final,d_in,d_end,d_after,d_final,loss_flags,grad_flags,skips,rollbacks,steps_redone,batches_skipped,bad_updates,caught" ] ||
        { echo "runs.csv: another header"; return 1; }
    [ "$(head -n 1 "$dir/summary.csv")" = "arm,runs,ref,d_in,d_end,d_after,d_final,d_final_min,d_final_max,val_final,loss_flags,grad_flags,skips,rollbacks,steps_redone,batches_skipped,bad_updates,caught,stopped,settings" ] ||
        { echo "summary.csv: another header"; return 1; }
    awk -F, -v seeds="$seeds" -v md="$dir/summary.md" '
        function abs(x) { return x < 0 ? -x : x }
        function no(msg) { print msg; bad = 1 }
        FILENAME ~ /runs.csv$/ { if (FNR == 1) next
            key = $1 SUBSEP $2; ref[key] = $4; n[$1]++
            for (i = 5; i <= 8; i++) val[key, i] = $i
            for (i = 9; i <= 12; i++) d[key, i] = $i
            sd[$1, 9] += $9; sd[$1, 10] += $10; sd[$1, 11] += $11; sd[$1, 12] += $12; sv[$1] += $8
            for (i = 13; i <= 19; i++) s[$1, i] += $i
            caught[$1] += $20
            f = $12 + 0; if (!($1 in lo) || f < lo[$1]) lo[$1] = f; if (!($1 in hi) || f > hi[$1]) hi[$1] = f
            runs++; next }
        FILENAME ~ /summary.csv$/ { if (FNR == 1) next
            arms++; a = $1
            if (n[a] != seeds || $2 != seeds) no(a ": " n[a] " runs in runs.csv, " $2 " in summary.csv, not " seeds)
            for (i = 4; i <= 7; i++) if (abs($i - sd[a, i + 5] / n[a]) > 1e-4) no(a ": summary column " i " is " $i ", runs.csv mean " sd[a, i + 5] / n[a])
            if (abs($8 - lo[a]) > 1e-9 || abs($9 - hi[a]) > 1e-9) no(a ": d_final min, max " $8 ", " $9 " against " lo[a] ", " hi[a])
            if (abs($10 - sv[a] / n[a]) > 1e-4) no(a ": val_final " $10 " against " sv[a] / n[a])
            for (i = 11; i <= 17; i++) if (abs($i - s[a, i + 2] / n[a]) > 0.006) no(a ": summary column " i " is " $i ", runs.csv mean " s[a, i + 2] / n[a])
            if ($18 != caught[a]) no(a ": caught " $18 " against " caught[a])
            if (a != $3) { row = sprintf("| %s |", a); want = sprintf("%+.3f (%+.3f to %+.3f) | %.4f |", $7, $8, $9, $10)
                           found = 0
                           while ((getline line < md) > 0) if (index(line, row) == 1 && index(line, want)) found = 1
                           close(md)
                           if (!found) no(a ": summary.md has no row with " want) }
            next }
        FILENAME ~ /curves.csv$/ { if (FNR == 1 || $5 != 1) next
            key = $1 SUBSEP $2; if (!(key in last) || $3 > last[key]) { last[key] = $3; lv[key] = $4 }; next }
        FILENAME ~ /provenance.txt$/ { if (sub(/^runs = /, "")) pr = $0 + 0; next }
        END {
            for (key in ref) { split(key, k, SUBSEP)
                r = ref[key] SUBSEP k[2]
                if (!(r in ref)) { no(k[1] " seed " k[2] ": no clean run " ref[key]); continue }
                for (i = 5; i <= 8; i++) if (abs(d[key, i + 4] - (val[key, i] - val[r, i])) > 1.5e-4)
                    no(k[1] " seed " k[2] ": difference " d[key, i + 4] " is not " val[key, i] " - " val[r, i])
                if (!(key in lv) || abs(lv[key] - val[key, 8]) > 1e-4) no(k[1] " seed " k[2] ": curves.csv ends at " lv[key] ", runs.csv " val[key, 8]) }
            if (pr != runs) no("provenance.txt counts " pr " runs, runs.csv has " runs)
            if (arms < 1) no("summary.csv has no arm")
            exit bad }' "$dir/runs.csv" "$dir/summary.csv" "$dir/curves.csv" "$dir/provenance.txt"
}

# ---- 1. the smoke form ---------------------------------------------------------------------------
echo "test_spikes_chapter: spikes.sh --smoke"
out=plots/06-spikes-smoke
MOE_BIN=$moe bash chapters/06-troubleshooting/spikes.sh --smoke > "$tmp/smoke.log" 2>&1
check "spikes.sh --smoke exits 0" $? "$(tail -n 30 "$tmp/smoke.log")"
missing=""
for f in runs.csv summary.csv summary.md curves.csv provenance.txt; do [ -s "$out/$f" ] || missing="$missing $f"; done
for f in curves.png damage.png; do is_png "$out/$f" || missing="$missing $f"; done
[ -z "$missing" ]
check "it writes runs.csv, summary.csv, summary.md, curves.csv, provenance.txt and two PNGs" $? "missing:$missing"
[ "$(awk -F, 'NR > 1' "$out/summary.csv" | wc -l)" = 14 ] && [ "$(awk -F, 'NR > 1' "$out/runs.csv" | wc -l)" = 28 ]
check "summary.csv has the 14 arms, runs.csv their 2 seeds each" $? "$(cut -d, -f1,2 "$out/runs.csv" | tr '\n' ' ')"
msg=$(consistent "$out" 2)
check "its files agree with each other" $? "$msg"
msg=$(awk -F, 'NR > 1 && $1 ~ /^clean/ && ($4 != $1 || $9 != 0 || $12 != 0 || $19 != 0) { print "clean arm: " $0 }
               NR > 1 && $1 == "none" && ($19 != 15 || $15 != 0 || $16 != 0) { print "none: " $0 }
               NR > 1 && $1 == "none-lone" && ($19 != 1 || $15 != 0) { print "none-lone: " $0 }' "$out/runs.csv")
[ -z "$msg" ]
check "a clean arm is its own reference and trains no corrupted batch; none keeps all 15, none-lone its 1" $? "$msg"
msg=""
while IFS=, read -r arm seed _ _ _ _ _ _ _ _ _ _ _ _ skips rollbacks _; do
    dir=runs/ch06-spikes-$arm-s$seed-smoke
    case $arm in
        skip*) n=$(awk -F, 'NR == 1 { c = $NF } NR > 1 && c == "skipped" { s += $NF } END { print s + 0 }' "$dir/train.csv")
              [ "$n" = "$skips" ] || msg="$msg $arm-s$seed: $skips skips, train.csv $n;" ;;
        rollback*) n=$(($(wc -l < "$dir/rollbacks.csv") - 1))
                   [ "$n" = "$rollbacks" ] || msg="$msg $arm-s$seed: $rollbacks rollbacks, rollbacks.csv $n;" ;;
    esac
done < <(tail -n +2 "$out/runs.csv")
[ -z "$msg" ]
check "skips are train.csv's column skipped, rollbacks the rows of rollbacks.csv" $? "$msg"

# ---- 2. the handbook's command ------------------------------------------------------------------
echo "test_spikes_chapter: moe train with spike_action=rollback"
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.d_expert=32 --set train.batch=4
      --set train.steps=60 --set train.warmup=5 --set train.lr=1e-2 --set train.clip=0
      --set train.beta2=0.999 --set train.eval_every=0 --set train.ckpt_every=0
      --set train.rollback_every=10 --set data.corrupt_from=40 --set data.corrupt_batches=5)
"$moe" train --out "$tmp/guarded" --set train.spike_action=rollback --set train.spike_on=loss "${tiny[@]}" --quiet > "$tmp/guarded.log" 2>&1
rc=$?
[ "$rc" = 0 ] && [ "$(awk -F, 'NR > 1' "$tmp/guarded/rollbacks.csv" | wc -l)" -ge 1 ] &&
    [ -s "$tmp/guarded/rolled_back.csv" ] && grep -q '^rollback = 1: a spike at step 41,' "$tmp/guarded/provenance.txt"
check "it rolls back at the stretch's first batch: rollbacks.csv, rolled_back.csv, provenance.txt" $? \
    "exit $rc; $(cat "$tmp/guarded/rollbacks.csv" 2> /dev/null); $(tail -n 3 "$tmp/guarded.log")"

# ---- 3. the committed numbers -----------------------------------------------------------------------
echo "test_spikes_chapter: the committed plots/06-spikes/"
c=plots/06-spikes
msg=$(consistent "$c" 8)
check "runs.csv, summary.csv, summary.md, curves.csv and provenance.txt agree (8 seeds per arm)" $? "$msg"
[ "$(awk -F, 'NR > 1' "$c/runs.csv" | wc -l)" = 112 ] && grep -q '^dirty = no$' "$c/provenance.txt" &&
    is_png "$c/curves.png" && is_png "$c/damage.png"
check "112 runs, none from a dirty tree, and the two figures" $? "$(grep -m 3 '^runs\|^dirty\|^commits' "$c/provenance.txt")"
mkdir -p "$tmp/c1" "$tmp/c2"
cp "$c"/* "$tmp/c1/"
cp "$c"/* "$tmp/c2/"
awk -F, -v OFS=, '$1 == "none" && $2 == 3 { $12 = sprintf("%.4f", $12 + 0.001) } 1' "$c/runs.csv" > "$tmp/c1/runs.csv"
awk -F, -v OFS=, '$1 == "rollback" { $4 = sprintf("%.4f", $4 + 0.001) } 1' "$c/summary.csv" > "$tmp/c2/summary.csv"
! cmp -s "$c/summary.csv" "$tmp/c2/summary.csv" && ! consistent "$tmp/c1" 8 > /dev/null && ! consistent "$tmp/c2" 8 > /dev/null
check "the check fails on a difference or a mean changed by 0.001" $?

finish
