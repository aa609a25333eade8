#!/usr/bin/env bash
# test_spikes.sh: what a run does at a loss spike (train.spike_action, src/train/spike.h), on a
# run made to spike by a corrupted stretch of its data (data.corrupt_from, data.corrupt_batches).
# Runs with MOE_BIN set (make test).
#
#   1. the corrupted batches: the run is the clean run's up to them, spikes at the first, and
#      marks it
#   2. skip: exactly the steps acted on have skipped=1, the others are the marked run's
#      until the first skip; stopped after a skip and resumed, the unbroken run bit for bit
#   3. rollback: rollbacks.csv, rolled_back.csv and provenance.txt record it, train.csv has each
#      step once and no spike in the stretch; stopped after the rollback, or killed in the
#      middle of its copy of rollback.bin or of keeping rollback.bin, and resumed: the
#      unbroken run bit for bit (ckpt.bin, train.csv but its clock, router.csv, rollbacks.csv)
#   4. train.max_rollbacks=0: exit 3 naming it, the spiking step's row in train.csv
#   5. refusals (exit 2, nothing changed): a resume whose spike_action changes train.csv's
#      columns; a routing recording with rollbacks
#   6. the backends: cpu-fenced rolls back as cpu does, bit for bit; cpu-ref at the same steps
# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1

"$moe" synth --out "$tmp/data" --tokens 40000 --seed 5 > /dev/null 2>&1
# 100 steps; batches 60-64 of the stream are random tokens (steps 61-65)
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set train.batch=4 --set "data.train=$tmp/data/train.bin"
      --set "data.val=$tmp/data/val.bin" --set train.warmup=10 --set train.eval_every=25
      --set train.eval_batches=2 --set train.steps=100 --set train.ckpt_every=20
      --set train.spike_on=loss --set train.rollback_every=20 --quiet)
bad=(--set data.corrupt_from=60 --set data.corrupt_batches=5)
train() { "$moe" train --out "$tmp/$1" "${tiny[@]}" "${@:2}" > "$tmp/$1.log" 2>&1; }
# col FILE NAME: the column NAME of FILE's rows, "step value" a line
col() { awk -F, -v n="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == n) c = i; next }
                             { print $1, $c }' "$1"; }
# same_run A B: the same training bit for bit (tok_per_s, a clock, aside)
same_run() {
    cmp -s "$tmp/$1/ckpt.bin" "$tmp/$2/ckpt.bin" && cmp -s "$tmp/$1/router.csv" "$tmp/$2/router.csv" &&
        cmp -s <(cut -d, -f1-6,8- "$tmp/$1/train.csv") <(cut -d, -f1-6,8- "$tmp/$2/train.csv") &&
        { [ ! -e "$tmp/$1/rollbacks.csv" ] || cmp -s "$tmp/$1/rollbacks.csv" "$tmp/$2/rollbacks.csv"; }
}

echo "test_spikes: a corrupted stretch"
train clean
train none "${bad[@]}"
cmp -s <(head -n 61 "$tmp/clean/train.csv" | cut -d, -f1-6,8-) \
    <(head -n 61 "$tmp/none/train.csv" | cut -d, -f1-6,8-)
check "the run is the clean run's up to step 60" $? "$(diff <(head -n 61 "$tmp/clean/train.csv") <(head -n 61 "$tmp/none/train.csv") | head -n 4)"
awk -F, 'NR == FNR { if ($1 == 61) c = $2; next } $1 == 61 { exit !($2 > c + 1 && $9 == 1) }' \
    "$tmp/clean/train.csv" "$tmp/none/train.csv"
check "step 61 (batch 60, random tokens) spikes: its loss above the clean run's by more than 1, marked" $? \
    "$(grep -h '^61,' "$tmp/clean/train.csv" "$tmp/none/train.csv")"

echo "test_spikes: skip"
train skip "${bad[@]}" --set train.spike_action=skip
acted=$(col "$tmp/skip/train.csv" loss_spike | awk '$2 == 1 { print $1 }')
skipped=$(col "$tmp/skip/train.csv" skipped | awk '$2 == 1 { print $1 }')
steps=$(echo $skipped)
[ -n "$skipped" ] && [ "$acted" = "$skipped" ] && echo "$skipped" | grep -qx 61 &&
    grep -q "train.spike_action=skip: $(echo "$skipped" | wc -l) update" "$tmp/skip.log"
check "skipped=1 at exactly the loss spikes (steps $steps), step 61 among them; the count printed" $? \
    "spikes: $(echo $acted); skipped: $(echo $skipped); $(tail -n 2 "$tmp/skip.log")"
cmp -s <(head -n 61 "$tmp/none/train.csv" | cut -d, -f1-6,8-10) \
    <(head -n 61 "$tmp/skip/train.csv" | cut -d, -f1-6,8-10) &&
    ! cmp -s "$tmp/none/ckpt.bin" "$tmp/skip/ckpt.bin"
check "the marked run's rows until the first skip, another run after it" $?
train skip2 "${bad[@]}" --set train.spike_action=skip --until 63 &&
    "$moe" train --resume "$tmp/skip2" --quiet > "$tmp/skip2.resume.log" 2>&1
same_run skip skip2
check "stopped after the skip at step 61 and resumed: the unbroken run bit for bit" $? \
    "$(tail -n 2 "$tmp/skip2.resume.log")"

echo "test_spikes: rollback"
rb=(--set train.spike_action=rollback --set train.rollback_skip=10)
train rb "${bad[@]}" "${rb[@]}"
rc=$?
[ $rc = 0 ] && [ "$(sed -n 2p "$tmp/rb/rollbacks.csv")" = "1,61,60,60,11" ] &&
    [ "$(wc -l < "$tmp/rb/rollbacks.csv")" = 2 ]
check "one rollback: the spike at step 61 back to step 60, 11 batches skipped (rollbacks.csv)" $? \
    "exit $rc; $(cat "$tmp/rb/rollbacks.csv"); $(tail -n 3 "$tmp/rb.log")"
[ "$(cut -d, -f1,2 "$tmp/rb/rolled_back.csv" | tail -n +2)" = "1,61" ] &&
    grep -q "^rollback = 1: a spike at step 61, back to step 60" "$tmp/rb/provenance.txt"
check "rolled_back.csv holds the undone step's row; provenance.txt the rollback" $? \
    "$(cat "$tmp/rb/rolled_back.csv")"
[ "$(cut -d, -f1 "$tmp/rb/train.csv" | tail -n +2 | tr '\n' ' ')" = "$(seq -s ' ' 100) " ] &&
    [ -z "$(col "$tmp/rb/train.csv" loss_spike | awk '$1 > 60 && $1 <= 75 && $2 == 1')" ]
check "train.csv has steps 1-100 once each, and no loss spike after step 60 (the stretch skipped)" $? \
    "$(col "$tmp/rb/train.csv" loss_spike | awk '$2 == 1')"
train rb0 "${bad[@]}" "${rb[@]}" --set data.corrupt_batches=1 --set train.rollback_skip=0 --until 70 &&
    "$moe" train --resume "$tmp/rb0" --quiet > "$tmp/rb0.resume.log" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(sed -n 2p "$tmp/rb0/rollbacks.csv")" = "1,61,60,60,1" ]
check "train.rollback_skip=0 (one corrupted batch) skips the undone step's batch alone, and the run resumes after it" $? \
    "exit $rc: $(cat "$tmp/rb0/rollbacks.csv"); $(tail -n 2 "$tmp/rb0.resume.log")"
train rb2 "${bad[@]}" "${rb[@]}" --until 70 &&
    "$moe" train --resume "$tmp/rb2" --quiet > "$tmp/rb2.resume.log" 2>&1
same_run rb rb2
check "stopped after the rollback and resumed: the unbroken run bit for bit" $? \
    "$(tail -n 2 "$tmp/rb2.resume.log")"
# ckpt.bin is written at steps 20, 40 and 60; its 4th write is the rollback's copy
for kill in ckpt.bin:4 rollback.bin:2; do
    (MOE_CRASH_IN_WRITE=$kill train "rbk" "${bad[@]}" "${rb[@]}") 2> /dev/null
    rc=$?
    "$moe" train --resume "$tmp/rbk" --quiet > "$tmp/rbk.resume.log" 2>&1
    same_run rb rbk && [ "$(cut -d, -f1 "$tmp/rbk/rolled_back.csv" | sort -u | tr '\n' ' ')" = "1 rollback " ]
    check "killed inside its write $kill (exit $rc) and resumed: the unbroken run, bit for bit" $? \
        "$(tail -n 2 "$tmp/rbk.resume.log"; cat "$tmp/rbk/rollbacks.csv")"
    rm -rf "$tmp/rbk"
done

echo "test_spikes: the bound"
train stop "${bad[@]}" "${rb[@]}" --set train.max_rollbacks=0
rc=$?
[ $rc = 3 ] && grep -q "after 0 rollbacks (train.max_rollbacks=0): the run stops" "$tmp/stop.log" &&
    [ "$(tail -n 1 "$tmp/stop/train.csv" | cut -d, -f1)" = 61 ]
check "train.max_rollbacks=0: exit 3 naming it, the spiking step's row last in train.csv" $? \
    "exit $rc: $(tail -n 2 "$tmp/stop.log")"

echo "test_spikes: refusals"
before=$(snapshot "$tmp/none")
"$moe" train --resume "$tmp/none" --set train.spike_action=skip --set train.steps=120 > "$tmp/r.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "train.spike_action=skip needs train.csv's column skipped" "$tmp/r.log" &&
    [ "$before" = "$(snapshot "$tmp/none")" ]
check "a resume whose spike_action changes train.csv's columns: exit 2, saying so, nothing changed" $? \
    "exit $rc: $(cat "$tmp/r.log")"
"$moe" train --out "$tmp/tape" "${tiny[@]}" "${rb[@]}" --record-routing "$tmp/tape.bin" > "$tmp/r.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "train.spike_action=rollback trains steps again" "$tmp/r.log" && [ ! -e "$tmp/tape" ]
check "--record-routing with rollbacks: exit 2, saying why, nothing created" $? "exit $rc: $(cat "$tmp/r.log")"

echo "test_spikes: backends"
train fenced "${bad[@]}" "${rb[@]}" --set train.device=cpu-fenced
# (ckpt.bin holds the settings, train.device among them)
cmp -s <(cut -d, -f1-6,8- "$tmp/rb/train.csv") <(cut -d, -f1-6,8- "$tmp/fenced/train.csv") &&
    cmp -s "$tmp/rb/router.csv" "$tmp/fenced/router.csv" &&
    cmp -s "$tmp/rb/rollbacks.csv" "$tmp/fenced/rollbacks.csv"
check "cpu-fenced rolls back as cpu does, bit for bit (train.csv, router.csv, rollbacks.csv)" $? \
    "$(tail -n 2 "$tmp/fenced.log")"
train ref "${bad[@]}" "${rb[@]}" --set train.device=cpu-ref --set train.steps=75
cmp -s "$tmp/rb/rollbacks.csv" "$tmp/ref/rollbacks.csv"
check "cpu-ref rolls back at the same step, to the same step" $? "$(cat "$tmp/ref/rollbacks.csv")"
finish
