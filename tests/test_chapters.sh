#!/usr/bin/env bash
# The chapter programs run and print every step they promise (docs that run). They use a tiny
# model trained here on synthetic data, so the test needs neither the corpus nor `make demo`.
# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
build=${MOE_BUILD:-build}
export OMP_NUM_THREADS=2
"$moe" synth --out "$tmp/data" --tokens 40000 --seed 5 > /dev/null
"$moe" train --out "$tmp/run" --quiet --set data.train="$tmp/data/train.bin" \
  --set data.val="$tmp/data/val.bin" --set model.d_model=32 --set model.n_layer=2 \
  --set model.n_head=2 --set model.seq_len=32 --set model.d_ff=64 --set moe.num_experts=4 \
  --set moe.d_expert=32 --set train.batch=4 --set train.steps=8 --set train.warmup=2 \
  --set train.eval_every=0 > /dev/null
check "a tiny MoE to route with" $? "training failed"

echo "test_chapters: 01-routing/routing"
prog=$build/chapters/01-routing/routing
"$prog" --ckpt "$tmp/run/ckpt.bin" --data "$tmp/data/val.bin" > "$tmp/out.txt" 2> "$tmp/err.txt"
check "routing exits 0" $? "$(cat "$tmp/err.txt")"
for section in "1. the batch" "2. scores" "3. loads" "4. Switch aux loss" "5. z-loss" \
               "6. share of each domain" "7. aux-loss-free balancing"; do
  grep -q "^$section" "$tmp/out.txt"
  check "prints \"$section\"" $? "$(head -n 5 "$tmp/out.txt")"
done
# the loads it prints are fractions of all assignments: they sum to 1
awk '/^   expert +[0-9]+  [0-9.]+  #*$/ { s += $3; n++ } END { exit !(n == 4 && s > 0.99 && s < 1.01) }' "$tmp/out.txt"
check "the 4 expert loads sum to 1" $? "$(grep '^   expert' "$tmp/out.txt")"
"$prog" --ckpt "$tmp/run/ckpt.bin" --data "$tmp/data/val.bin" --layer 7 > /dev/null 2> "$tmp/err.txt"
[ $? -eq 2 ] && grep -q "not an MoE block" "$tmp/err.txt"
check "a layer that is not an MoE block: exit 2 and a message" $? "$(cat "$tmp/err.txt")"
"$prog" --ckpt "$tmp/nope.bin" > /dev/null 2> "$tmp/err.txt"
[ $? -eq 2 ] && grep -q "no checkpoint" "$tmp/err.txt"
check "a missing checkpoint: exit 2 and a message" $? "$(cat "$tmp/err.txt")"

echo "test_chapters: 02-capacity/capacity"
prog=$build/chapters/02-capacity/capacity
"$prog" --ckpt "$tmp/run/ckpt.bin" --data "$tmp/data/val.bin" > "$tmp/out.txt" 2> "$tmp/err.txt"
check "capacity exits 0" $? "$(cat "$tmp/err.txt")"
for section in "1. routing" "2. capacity" "3. factor 1" "4. the block's output" \
               "5. padded execution"; do
  grep -q "^$section" "$tmp/out.txt"
  check "prints \"$section\"" $? "$(head -n 5 "$tmp/out.txt")"
done
# every printed cap is max(min_capacity, ceil(factor tokens K / E)), at most tokens: 4 factors
# x 2 scopes (fields: factor F scope ceil(F x tokens x K / E) = ceil(..) = .. min_capacity M cap C)
awk '$1 == "factor" && $17 == "cap" {
       want = $2 * $6 * $8 / ($10 + 0); c = int(want); if (want - c > 1e-9) c++
       if (c < $16) c = $16; if (c < 1) c = 1; if (c > $6) c = $6
       n++; if ($18 != c) bad++ }
     END { exit !(n == 8 && bad == 0) }' "$tmp/out.txt"
check "each printed capacity equals the formula" $? "$(grep '^   factor' "$tmp/out.txt")"
# at factor 1 each policy keeps and drops every expert's demand, no more and no less
awk '/^3\. factor 1/ { on = 1; next } on && /^ +[0-9]+ +[0-9]+ \|/ {
       n++; if ($4 + $5 != $2 || $7 + $8 != $2) bad++ } /^   position keeps/ { on = 0 }
     END { exit !(n == 4 && bad == 0) }' "$tmp/out.txt"
check "kept + dropped = demand for every expert and policy" $? "$(grep -A 6 '^3\.' "$tmp/out.txt")"
# a token whose every assignment is dropped gets a block output of exactly 0
grep -A 1 "every assignment dropped (slots" "$tmp/out.txt" | grep -q "|y| = 0.000000 .*, 0 of 32 entries"
check "a fully dropped token has y = 0" $? "$(grep -A 8 '^4\.' "$tmp/out.txt")"
"$prog" --ckpt "$tmp/run/ckpt.bin" --bogus 1 > /dev/null 2> "$tmp/err.txt"
[ $? -eq 2 ] && grep -q "usage: capacity" "$tmp/err.txt"
check "an unknown option: exit 2 and the usage" $? "$(cat "$tmp/err.txt")"

echo "test_chapters: 03-expert-parallel/a2a (one process; tests/mpi/test_a2a.sh runs it over 1, 2, 4)"
prog=$build/chapters/03-expert-parallel/a2a
"$prog" > "$tmp/out.txt" 2> "$tmp/err.txt"
check "a2a exits 0" $? "$(cat "$tmp/err.txt")"
for section in "1. the grid" "2. routing" "3. the count exchange" "4. the rows exchanged" \
               "5. the combine" "6. the load"; do
  grep -q "^$section" "$tmp/out.txt"
  check "prints \"$section\"" $? "$(head -n 5 "$tmp/out.txt")"
done
# one process: it says how to run 4, sends no bytes, and its output is the reference's
awk '/mpirun -np 4/ { hint = 1 } /rows out  0 in  0  sent +0 B  received +0 B  model +0 B/ { zero = 1 }
     /max \|y - y_ref\| =/ { n++; if (!($NF + 0 < 1e-5)) bad++ }
     END { exit !(hint && zero && n == 1 && bad == 0) }' "$tmp/out.txt"
check "P = 1: the mpirun hint, 0 bytes, y = the reference" $? "$(sed -n '/^4\./,/^6\./p' "$tmp/out.txt")"
"$prog" --bogus > /dev/null 2> "$tmp/err.txt"
[ $? -eq 2 ] && grep -q "usage:" "$tmp/err.txt"
check "an argument: exit 2 and the usage" $? "$(cat "$tmp/err.txt")"

echo "test_chapters: 03-expert-parallel/step_profile"
prog=$build/chapters/03-expert-parallel/step_profile
"$prog" --run "$tmp/run" --out "$tmp/prof" --steps 3 > "$tmp/out.txt" 2> "$tmp/err.txt"
check "step_profile exits 0" $? "$(cat "$tmp/err.txt")"
# one row per op of src/model/profile.h, seconds per step; the experts and attention took time
awk -F, 'NR == 1 { ok = ($0 == "op,seconds_per_step"); next } { n++; t[$1] = $2; if ($2 < 0) bad++ }
     END { exit !(ok && n == 14 && bad == 0 && t["experts"] > 0 && t["attention"] > 0) }' "$tmp/prof/profile.csv"
check "profile.csv: 14 ops, experts and attention > 0" $? "$(cat "$tmp/prof/profile.csv" 2>&1)"
grep -qx 'train.steps = 3' "$tmp/prof/config.txt" && grep -qx 'moe.num_experts = 4' "$tmp/prof/config.txt"
check "the rerun has the run's model and the asked steps" $? "$(head -n 12 "$tmp/prof/config.txt")"
"$prog" --run "$tmp/nope" --out "$tmp/prof2" > /dev/null 2> "$tmp/err.txt"
[ $? -eq 2 ] && grep -q "no $tmp/nope/config.txt" "$tmp/err.txt" && [ ! -e "$tmp/prof2" ]
check "a missing run: exit 2, a message, nothing written" $? "$(cat "$tmp/err.txt")"
"$prog" --run "$tmp/run" --out "$tmp/prof2" --steps 0 > /dev/null 2> "$tmp/err.txt"
[ $? -eq 2 ] && grep -q "steps takes 1 to" "$tmp/err.txt"
check "--steps 0: exit 2 and a message" $? "$(cat "$tmp/err.txt")"

echo "test_chapters: 04-upcycling/upcycle"
"$moe" train --out "$tmp/dense" --quiet --set data.train="$tmp/data/train.bin" \
  --set data.val="$tmp/data/val.bin" --set model.d_model=32 --set model.n_layer=2 \
  --set model.n_head=2 --set model.seq_len=32 --set model.d_ff=64 --set moe.num_experts=0 \
  --set train.batch=4 --set train.steps=8 --set train.warmup=2 --set train.eval_every=0 > /dev/null
check "a tiny dense model to upcycle" $? "training failed"
prog=$build/chapters/04-upcycling/upcycle
"$prog" --ckpt "$tmp/dense/ckpt.bin" --data "$tmp/data/val.bin" --experts 4 > "$tmp/out.txt" \
  2> "$tmp/err.txt"
check "upcycle exits 0" $? "$(cat "$tmp/err.txt")"
for section in "1. the dense model" "2. the conversion" "3. parameters" "4. the same function" \
               "5. making the copies differ"; do
  grep -q "^$section" "$tmp/out.txt"
  check "prints \"$section\"" $? "$(head -n 5 "$tmp/out.txt")"
done
# 3 router initialisations, each with the dense loss to 1e-5
awk '/^   dense +loss/ { d = $3 } /^   exact copies/ { n++; x = $7 - d; if (x * x > 1e-10) bad++ }
     END { exit !(n == 3 && bad == 0 && d > 0) }' "$tmp/out.txt"
check "exact copies give the dense loss whatever the router" $? "$(grep -A 4 '^4\.' "$tmp/out.txt")"
# parameters: + 2 blocks x ((E - 1) x 3 x F x C + E x C) = 2 x (3 x 3 x 64 x 32 + 4 x 32)
awk '/^3\. parameters/ { exit !($4 + 2 * (3 * 3 * 64 * 32 + 4 * 32) == $6) }' "$tmp/out.txt"
check "the parameter count grows by the formula" $? "$(grep '^3\.' "$tmp/out.txt")"
# drop-upcycling: similarity near (1 - r)^2 (within 0.1 at F = 64), falling with r
awk '/drop-upcycling r=/ { split($2, a, "="); r = a[2]; n++; s = $NF; w = (1 - r) ^ 2
       if ((s - w) ^ 2 > 0.01 || (n > 1 && s >= prev)) bad++; prev = s }
     END { exit !(n == 3 && bad == 0) }' "$tmp/out.txt"
check "drop-upcycling similarity falls as (1 - r)^2" $? "$(grep 'drop-upcycling' "$tmp/out.txt")"
"$prog" --ckpt "$tmp/run/ckpt.bin" --data "$tmp/data/val.bin" > /dev/null 2> "$tmp/err.txt"
[ $? -eq 2 ] && grep -q "already an MoE" "$tmp/err.txt"
check "an MoE checkpoint: exit 2 and a message" $? "$(cat "$tmp/err.txt")"

echo "test_chapters: 05-stability/stability"
prog=$build/chapters/05-stability/stability
"$prog" --layers 4 --width 32 --data "$tmp/data/val.bin" > "$tmp/out.txt" 2> "$tmp/err.txt"
check "stability exits 0" $? "$(cat "$tmp/err.txt")"
for section in "1. the residual stream" "2. what each block adds" "3. the router logits" \
               "4. the z-loss"; do
  grep -q "^$section" "$tmp/out.txt"
  check "prints \"$section\"" $? "$(head -n 5 "$tmp/out.txt")"
done
# growth of the stream over the 4 blocks at init: sandwich's output norms make it grow most
awk '$1 == "growth" { exit !($3 > $2 && $3 > $4 && $3 > 2) }' "$tmp/out.txt"
check "at init the stream grows most under sandwich norms (gain 1)" $? "$(grep '^ *growth' "$tmp/out.txt")"
# bf16 keeps 8 significant bits: every rounding's relative error is at most 2^-8
awk '/^3\./ { in3 = 1 } /^4\./ { in3 = 0 }
     in3 && /^   x1 |^   x10 |^   x100 / && $2 != "+" { n++; if ($5 > 0.00390625 || $5 <= 0) bad++ }
     END { exit !(n >= 3 && bad == 0) }' "$tmp/out.txt"
check "the logits' bf16 rounding: relative error in (0, 2^-8] at every scale" $? \
  "$(grep -A 8 '^3\.' "$tmp/out.txt")"
"$prog" --layers 0 > /dev/null 2> "$tmp/err.txt"
[ $? -eq 2 ] && grep -q usage "$tmp/err.txt"
check "--layers 0: exit 2 and the usage" $? "$(cat "$tmp/err.txt")"


echo "test_chapters: the public header"
# every chapter program includes src/moe.h (directly or through chapter.h) and, of src/, only
# the headers that src/README.md's table of exceptions ("The public header") lists for it
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bad=""
for f in "$root"/chapters/*/*.c "$root"/chapters/chapter.h; do
  rel=${f#"$root"/chapters/}
  row=$(grep "^| \`$rel\` |" "$root/src/README.md")
  public=0
  for h in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
    case $h in
      moe.h | ../chapter.h) public=1 ;;
      *) [[ "$row" == *"\`$h\`"* ]] || bad="$bad $rel:$h" ;;
    esac
  done
  [ $public = 1 ] || bad="$bad $rel:(no moe.h)"
done
[ -z "$bad" ]
check "the chapter programs include moe.h and only the exceptions src/README.md lists" $? \
  "not in src/README.md's table:$bad"

finish
