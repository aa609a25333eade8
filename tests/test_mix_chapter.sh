#!/usr/bin/env bash
# test_mix_chapter.sh: chapter 8's program and ablation, end to end at a tiny size.
#
#   1. mix --skew keeps each domain's documents by its fraction, the same ones every time (two
#      runs write the same file), English whole and Russian thinned
#   2. mix on the skewed shard: for every mix it shows, the shares drawn are within 0.01 of the
#      shares asked, code:0 draws no code, and the natural mix reads every domain the same
#      number of times (its epochs)
#   3. ablate.sh --smoke: seven arms; summary.csv has a finite validation loss and six
#      per-domain losses for each, the no-code arm drew no code, the uniform arm about a sixth
#      of each; every figure is a PNG; --summarize writes the same summary.csv again
#   4. bad options exit 2

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_mix_chapter: chapter 8, the data mix"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
build=${MOE_BUILD:-build}
prog=$(executable "$build/chapters/08-data-mix/mix" "make chapters") || exit 1
export OMP_NUM_THREADS=1 MOE_BIN=$moe
[ -f data/corpus/train.bin ] || make --no-print-directory data/corpus/train.bin > /dev/null

# ---- 1. --skew ----------------------------------------------------------------------------
skew=en:1,code:0.4,de:0.25,es:0.15,it:0.06,ru:0.03
"$prog" --skew "$skew" data/corpus/train.bin "$tmp/a.bin" > "$tmp/out" 2>&1 &&
    "$prog" --skew "$skew" data/corpus/train.bin "$tmp/b.bin" > /dev/null 2>&1 && cmp -s "$tmp/a.bin" "$tmp/b.bin"
check "--skew writes the same shard twice" $? "$(cat "$tmp/out")"
"$prog" "$tmp/a.bin" code:0 > "$tmp/mix.txt" 2>&1
check "mix on the skewed shard" $? "$(tail -n 3 "$tmp/mix.txt")"
full_en=$("$prog" data/corpus/train.bin | awk '$1 == "en" && NF == 3 { print $2; exit }')
awk -v en="$full_en" '$1 == "en" && NF == 3 && !seen_en++ { ok_en = $2 == en }
     $1 == "ru" && NF == 3 && !seen_ru++ { ru = $2 }
     END { exit !(ok_en && ru > 0 && ru < en * 0.06) }' "$tmp/mix.txt"
check "English kept whole ($full_en tokens), Russian thinned to about 3 %" $? "$(head -n 8 "$tmp/mix.txt")"

# ---- 2. the program's draws ------------------------------------------------------------------
awk 'NF == 4 && $2 ~ /^[0-9.]+$/ { d = $2 - $3; if (d < 0) d = -d; if (d > 0.01) bad = 1; n++ }
     /^data.mix=code:0/ { cz = 1 } cz && $1 == "code" { if ($3 != 0) bad = 1; cz = 0 }
     END { exit bad || n != 30 }' "$tmp/mix.txt"
check "every mix's drawn shares within 0.01 of the asked ones (30 rows); code:0 draws no code" $? \
    "$(cat "$tmp/mix.txt")"
awk '/^natural/ { on = 1; next } /^$/ { on = 0 } on && NF == 4 && $2 ~ /^[0-9.]+$/ { e[$4]++ }
     END { n = 0; for (k in e) n++; exit n != 1 }' "$tmp/mix.txt"
check "the natural mix reads every domain the same number of times" $? "$(sed -n '/^natural/,/^$/p' "$tmp/mix.txt")"

# ---- 3. the ablation ---------------------------------------------------------------------------
out=plots/08-data-mix-smoke
bash chapters/08-data-mix/ablate.sh --smoke > "$tmp/ablate" 2>&1
check "ablate.sh --smoke" $? "$(tail -n 5 "$tmp/ablate")"
awk -F, 'NR > 1 { n++; for (i = 2; i <= 8; i++) if ($i + 0 <= 0 || $i + 0 > 10) bad = 1 }
         $1 == "no-code" && $14 != "0.0000" { bad = 1 }
         $1 == "uniform" { for (i = 9; i <= 14; i++) if ($i < 0.05 || $i > 0.3) bad = 1 }
         END { exit bad || n != 7 }' "$out/summary.csv"
check "summary.csv: 7 arms, finite losses overall and by domain; no-code drew no code, uniform about a sixth each" \
    $? "$(cat "$out/summary.csv")"
for png in domain_loss curves routing domains_natural; do
    [ "$(head -c 4 "$out/$png.png" 2> /dev/null | od -An -c | tr -d ' ')" = '211PNG' ]
    check "$png.png is a PNG" $?
done
cp "$out/summary.csv" "$tmp/summary.csv"
bash chapters/08-data-mix/ablate.sh --smoke --summarize > /dev/null 2>&1 && cmp -s "$out/summary.csv" "$tmp/summary.csv"
check "--summarize writes the same summary.csv from the runs" $?

# ---- 4. bad options ------------------------------------------------------------------------
bash chapters/08-data-mix/ablate.sh --smoke --only nosuch > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "natural" "$tmp/out"
check "--only with an unknown arm: exit 2, the arms listed" $? "status $rc: $(cat "$tmp/out")"
"$prog" --skew en:2 data/corpus/train.bin "$tmp/c.bin" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "above 1" "$tmp/out" && [ ! -e "$tmp/c.bin" ]
check "--skew with a fraction above 1: exit 2, nothing written" $? "status $rc: $(cat "$tmp/out")"
finish
