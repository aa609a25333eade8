#!/usr/bin/env bash
# test_mix.sh: sampling the training windows by domain (data.mix, data.mix_temperature,
# data.mix_end; io/mix.h), end to end on a synthetic shard of three domains.
#
#   1. a mix is honoured within sampling error: the windows mix.csv counts for each domain lie
#      within 4 standard deviations of the share asked for (binomial), over 2400 windows; a
#      domain given 0 is never drawn; the target column is the share asked for
#   2. the temperature: 1 gives the natural shares (each domain by its size: the targets of
#      data.mix=natural), a large one the uniform shares to 1e-3, 0.25 shares in proportion to
#      size^4 (the synthetic domains' sizes differ a little); provenance.txt records the
#      resolved shares (and nothing for the natural mix)
#   3. an end mix: after step steps - lround(frac x steps), the windows follow data.mix_end, and
#      a mix.csv row ends where it takes over (1.3 end steps round to 1, not up to 2); the
#      smallest frac that gives it one step
#   4. a resume under a mix is bit for bit: 12 steps, then 12 more after --resume, give the
#      checkpoint and the losses of 24 steps straight
#   5. val_domains.csv: each evaluation's per-domain losses, weighted by their tokens, are the
#      val_loss of train.csv
#   and the handbook's four commands run at a tiny size
#   6. bad mixes exit 2 with a message and write nothing: a name the shard lacks (the message
#      lists its domains), a negative weight, a weight that is not a number, one below the
#      smallest normal double or past the largest, an empty mix or end mix, an end mix of no
#      step, all weights 0, name=weight, a mix and a temperature together, an end mix without
#      its fraction, named shares over 1 with a domain unnamed

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_mix: the domains' shares of the training windows"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1

"$moe" synth --out "$tmp/d" --domains 3 --tokens 60000 --seed 4 > /dev/null
base=(--set model.d_model=16 --set model.n_layer=1 --set model.n_head=2 --set model.seq_len=16
      --set model.d_ff=32 --set moe.d_expert=16 --set moe.num_experts=4 --set train.batch=8
      --set train.warmup=1 --set "data.train=$tmp/d/train.bin" --set "data.val=$tmp/d/val.bin")
run() { # NAME SETTINGS...
    local name=$1
    shift
    "$moe" train --out "$tmp/$name" "${base[@]}" "$@" --quiet > "$tmp/$name.log" 2>&1
}
# shares NAME: "domain windows share target" summed over mix.csv's rows
shares() {
    awk -F, 'NR > 1 { w[$3] += $4; n += $4; t[$3] = $6; if (!($3 in o)) o[$3] = ++k }
        END { for (d in o) printf "%s %d %.6f %.6f %d\n", d, w[d], w[d] / n, t[d], n }' \
        "$tmp/$1/mix.csv" | sort
}

# ---- 1. a mix ----------------------------------------------------------------------------
run mix --set data.mix=syn0:0.6,syn1:0.4,syn2:0 --set train.steps=300 --set train.eval_every=100
check "a run with data.mix=syn0:0.6,syn1:0.4,syn2:0" $? "$(tail -n 3 "$tmp/mix.log")"
shares mix > "$tmp/s"
awk '{ p = $4; n = $5; sd = sqrt(p * (1 - p) / n); d = $3 - p; if (d < 0) d = -d
       if (p > 0 && d > 4 * sd) bad = 1; if (p == 0 && $2 != 0) bad = 1 }
     END { exit bad || NR != 3 }' "$tmp/s"
check "each domain's share of 2400 windows within 4 sd of the mix; syn2 never drawn" $? "$(cat "$tmp/s")"
grep -q '^syn0 [0-9]* [0-9.]* 0.600000 ' "$tmp/s" && grep -q '^syn2 0 0.000000 0.000000 ' "$tmp/s"
check "mix.csv's target is the share asked for" $? "$(cat "$tmp/s")"

# ---- 2. the temperature ---------------------------------------------------------------------
run natural --set data.mix_temperature=1 --set train.steps=2 --set train.eval_every=0
run plain --set train.steps=2 --set train.eval_every=0
run flat --set data.mix_temperature=1000 --set train.steps=2 --set train.eval_every=0
run sharp --set data.mix_temperature=0.25 --set train.steps=2 --set train.eval_every=0
shares natural > "$tmp/n"
shares plain > "$tmp/p"
shares flat > "$tmp/f"
shares sharp > "$tmp/q"
cut -d' ' -f1,4 "$tmp/n" > "$tmp/n4"
cut -d' ' -f1,4 "$tmp/p" > "$tmp/p4"
cmp -s "$tmp/n4" "$tmp/p4" &&
    awk '{ if ($4 < 0.333 || $4 > 0.334) bad = 1 } END { exit bad || NR != 3 }' "$tmp/f" &&
    paste -d' ' "$tmp/n" "$tmp/q" | awk '{ n[NR] = $4; q[NR] = $9 }
        END { for (i = 2; i <= 3; i++) { r = (q[1] / q[i]) / (n[1] / n[i])^4 - 1
                                         if (r * r > 1e-8) bad = 1 }
              exit bad || NR != 3 }'
check "temperature 1: the natural shares; 1000: uniform to 1e-3; 0.25: shares as size^4" $? \
    "T=1: $(cat "$tmp/n"); natural: $(cat "$tmp/p"); T=1000: $(cat "$tmp/f"); T=0.25: $(cat "$tmp/q")"
n0=$(awk '{ print $4 }' "$tmp/n" | head -n 1)
awk -v a="$n0" -F'[:,]' '/^data.mix_shares/ { d = $2 - a; ok = d * d < 1e-8 } END { exit !ok }' \
    "$tmp/natural/provenance.txt" && ! grep -q mix_shares "$tmp/plain/provenance.txt"
check "provenance.txt records the resolved shares (syn0 $n0), and none for the natural mix" $? \
    "$(grep mix "$tmp/natural/provenance.txt")"

# ---- 3. an end mix --------------------------------------------------------------------------
run end --set data.mix=syn0:1,syn1:0,syn2:0 --set data.mix_end=syn0:0,syn1:0,syn2:1 \
    --set data.mix_end_frac=0.25 --set train.steps=40 --set train.eval_every=0
awk -F, 'NR > 1 { if ($1 <= 30 && $3 == "syn0" && ($4 == 0 || $6 != 1)) bad = 1
                  if ($2 >= 30 && $3 == "syn2" && ($4 == 0 || $6 != 1)) bad = 1
                  if ($2 >= 30 && $3 == "syn0" && $4 != 0) bad = 1
                  if ($1 == 30) edge = 1 }
     END { exit bad || !edge }' "$tmp/end/mix.csv"
check "data.mix_end takes over at step 30 of 40 (a mix.csv row ends there)" $? "$(cat "$tmp/end/mix.csv")"
# the end mix's steps are lround(frac * steps), the nearest count: 1.3 rounds to 1, so the last
# step only (from step 10 of 10, the last mix.csv row before it at step 9; src/README.md)
run end13 --set data.mix=syn0:1,syn1:0,syn2:0 --set data.mix_end=syn0:0,syn1:0,syn2:1 \
    --set data.mix_end_frac=0.13 --set train.steps=10 --set train.eval_every=0
awk -F, 'NR > 1 && $4 > 0 { last[$3] = $1; from[$3] = $2 }
     END { exit !(last["syn0"] == 9 && from["syn2"] == 9 && last["syn2"] == 10) }' "$tmp/end13/mix.csv"
check "data.mix_end_frac=0.13 of 10 steps: the end mix draws step 10 alone (lround of 1.3)" $? \
    "$(cat "$tmp/end13/mix.csv")"

# the smallest fraction the refusal below suggests for 4 steps: one step of the end mix
run endmin --set data.mix=syn0:1,syn1:0,syn2:0 --set data.mix_end=syn0:0,syn1:0,syn2:1 \
    --set data.mix_end_frac=0.125 --set train.steps=4 --set train.eval_every=0
awk -F, 'NR > 1 && $1 == 3 && $3 == "syn0" && $4 > 0 { a = 1 }
         NR > 1 && $1 == 4 && $2 == 3 && $3 == "syn2" && $4 > 0 { b = 1 } END { exit !(a && b) }' \
    "$tmp/endmin/mix.csv"
check "data.mix_end_frac=0.125 of 4 steps: the end mix has the last step" $? \
    "$(cat "$tmp/endmin/mix.csv" "$tmp/endmin.log" 2> /dev/null)"

# ---- 4. resume under a mix ----------------------------------------------------------------
mixed=(--set data.mix=syn0:0.2,syn1:0.5 --set train.steps=24 --set train.eval_every=12
       --set train.ckpt_every=12)
"$moe" train --out "$tmp/straight" "${base[@]}" "${mixed[@]}" --quiet > /dev/null 2>&1
"$moe" train --out "$tmp/resumed" "${base[@]}" "${mixed[@]}" --until 12 --quiet > /dev/null 2>&1 &&
    "$moe" train --resume "$tmp/resumed" --quiet > /dev/null 2>&1
rc=$?
cut -d, -f1-6,8 "$tmp/straight/train.csv" > "$tmp/a"
cut -d, -f1-6,8 "$tmp/resumed/train.csv" > "$tmp/b"
[ $rc -eq 0 ] && cmp -s "$tmp/straight/ckpt.bin" "$tmp/resumed/ckpt.bin" && cmp -s "$tmp/a" "$tmp/b" &&
    cmp -s "$tmp/straight/val_domains.csv" "$tmp/resumed/val_domains.csv"
check "12 + 12 steps resumed under a mix = 24 straight: checkpoint, losses, per-domain losses" $? \
    "status $rc: $(diff "$tmp/a" "$tmp/b" | head -n 4)"

# ---- 5. val_domains.csv -------------------------------------------------------------------
got=$(awk -F, 'FNR == 1 { next } FILENAME ~ /val_domains/ { s[$1] += $3 * $4; n[$1] += $4; next }
               $8 != "" { d = s[$1] / n[$1] - $8; if (d < 0) d = -d; if (d > 2e-6 || !n[$1]) bad = 1; k++ }
               END { print (bad || k != 3) ? "bad " k : "ok" }' \
      "$tmp/mix/val_domains.csv" "$tmp/mix/train.csv")
[ "$got" = ok ]
check "the per-domain validation losses, weighted by tokens, are val_loss at all 3 evaluations" $? "$got"

# ---- the handbook's commands, on the synthetic shard (its domains are syn0..syn2) -------------
hb=(--set train.steps=3 --set train.eval_every=0)
"$moe" train --out "$tmp/hb1" "${base[@]}" "${hb[@]}" --set data.mix=syn2:0.2 --quiet > /dev/null 2>&1 &&
    "$moe" train --out "$tmp/hb2" "${base[@]}" "${hb[@]}" --set data.mix_temperature=2 --quiet > /dev/null 2>&1 &&
    "$moe" train --out "$tmp/hb3" "${base[@]}" "${hb[@]}" --set data.mix=syn1:0 --quiet > /dev/null 2>&1 &&
    "$moe" train --out "$tmp/hb4" "${base[@]}" "${hb[@]}" --set data.mix_end=uniform --set data.mix_end_frac=0.2 --quiet > /dev/null 2>&1
check "the handbook's four mix commands run (one domain a fifth, a temperature, one left out, an end mix)" $?

# ---- 6. bad mixes ---------------------------------------------------------------------------
refuse() { # WHAT PATTERN SETTINGS...
    local what=$1 pat=$2 rc
    shift 2
    "$moe" train --out "$tmp/refused" "${base[@]}" --set train.steps=2 "$@" > "$tmp/out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$pat" "$tmp/out" && [ ! -e "$tmp/refused" ]
    check "$what: exit 2, \"$pat\", nothing written" $? "status $rc: $(cat "$tmp/out")"
}
refuse "a domain the shard lacks" "names 'en', which .* does not have; its domains: syn0, syn1, syn2" \
    --set data.mix=en:0.5
refuse "a negative weight" "the weight of 'syn0' is -1, below 0" --set data.mix=syn0:-1
refuse "a weight that is not a number" "the weight of 'syn0' is 'x', not a number" --set data.mix=syn0:x
refuse "a weight below the smallest normal double" \
    "the weight of 'syn0', 1e-320, is above 0 but below the smallest normal double" --set data.mix=syn0:1e-320
refuse "a weight past the largest double" "1e400, is too large" --set data.mix=syn0:1e400
refuse "an empty mix" "data.mix is empty; write e.g. data.mix=natural" --set data.mix=
refuse "an empty end mix" "data.mix_end is empty; write e.g. data.mix_end=none" --set data.mix_end=
refuse "an end mix with no step" \
    "data.mix_end_frac=0.01 of train.steps=4 gives data.mix_end no step .* data.mix_end_frac=0.125 or more" \
    --set data.mix_end=uniform --set data.mix_end_frac=0.01 --set train.steps=4
refuse "all weights 0" "every domain has a share of 0" --set data.mix=syn0:0,syn1:0,syn2:0
refuse "name=weight" "is not name:weight" --set data.mix=syn0=1
refuse "a mix and a temperature" "both set the shares" --set data.mix=uniform --set data.mix_temperature=2
refuse "an end mix without its fraction" "go together" --set data.mix_end=uniform
refuse "named shares over 1, a domain unnamed" "add up to 1.2" --set data.mix=syn0:0.7,syn1:0.5
finish
