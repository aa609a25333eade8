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
#   4. vocab.sh --smoke: bytes, BPE-4k and BPE-16k (and the BPE arms' second seeds); the BPE corpora hold the byte corpus's
#      validation documents, each arm trains the bytes arm's FLOPs (within half a step), the
#      larger vocabulary has more bytes a token and more of its parameters in the embedding and
#      head, bits a byte are finite; every figure is a PNG; --summarize writes the same vocab.csv
#   5. bad options exit 2

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

# ---- 4. the vocabulary section ----------------------------------------------------------------
bash chapters/08-data-mix/vocab.sh --smoke > "$tmp/vocab" 2>&1
check "vocab.sh --smoke" $? "$(tail -n 5 "$tmp/vocab")"
docs() { od -An -tu4 -j24 -N4 "$1" | tr -d ' '; }
vd=$(docs data/corpus/val.bin)
[ "$(docs runs/ch08-vocab-data/bpe-4k/val.bin)" = "$vd" ] && [ "$(docs runs/ch08-vocab-data/bpe-16k/val.bin)" = "$vd" ]
check "the BPE validation shards hold the byte corpus's $vd documents" $?
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
         { n++; f = $c["steps"] * $c["flops_token"]; if (n == 1) { fb = f; if ($c["bytes_per_token"] != 1) bad = 1 }
           else if (f - fb > $c["flops_token"] / 2 || fb - f > $c["flops_token"] / 2) bad = 1
           if ($c["val_bpb"] + 0 <= 0 || $c["val_bpb"] + 0 > 20) bad = 1 }
         $1 !~ /-seed/ { if (n > 1 && ($c["bytes_per_token"] <= bpt || $c["emb_head_share"] <= share)) bad = 1
           bpt = $c["bytes_per_token"]; share = $c["emb_head_share"] }
         END { exit bad || n != 5 }' plots/08-data-mix-smoke/vocab.csv
check "vocab.csv: 5 arms of equal FLOPs; bytes a token and the embedding-and-head share grow with the vocabulary" \
    $? "$(cat plots/08-data-mix-smoke/vocab.csv)"
for png in vocab_curves vocab_parts; do
    [ "$(head -c 4 "plots/08-data-mix-smoke/$png.png" 2> /dev/null | od -An -c | tr -d ' ')" = '211PNG' ]
    check "$png.png is a PNG" $?
done
cp plots/08-data-mix-smoke/vocab.csv "$tmp/vocab.csv"
bash chapters/08-data-mix/vocab.sh --smoke --summarize > /dev/null 2>&1 && cmp -s plots/08-data-mix-smoke/vocab.csv "$tmp/vocab.csv"
check "vocab.sh --summarize writes the same vocab.csv from the runs" $?

# ---- 5. bad options ------------------------------------------------------------------------
bash chapters/08-data-mix/ablate.sh --smoke --only nosuch > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "natural" "$tmp/out"
check "--only with an unknown arm: exit 2, the arms listed" $? "status $rc: $(cat "$tmp/out")"
bash chapters/08-data-mix/vocab.sh --smoke --only nosuch > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "bpe-16k" "$tmp/out"
check "vocab.sh --only with an unknown arm: exit 2, the arms listed" $? "status $rc: $(cat "$tmp/out")"
"$prog" --skew en:2 data/corpus/train.bin "$tmp/c.bin" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "above 1" "$tmp/out" && [ ! -e "$tmp/c.bin" ]
check "--skew with a fraction above 1: exit 2, nothing written" $? "status $rc: $(cat "$tmp/out")"
finish
