#!/usr/bin/env bash
# test_pp.sh: pipeline parallelism (dist.pp, src/model/pipe.h) against one process. Runs with
# MOE_BIN=build/mpi/moe and needs mpirun.
#
# One tiny MoE of 4 blocks (a dense first block, a shared expert, aux-free balancing), four
# micro-batches a step: every step's loss, aux, z, gradient norm and validation loss agree with
# the one-process run to 1e-5 relative; the banner's allocation is memory.h's formula for the
# largest process (a stage's table once for each micro-batch it holds); process 0's bytes by
# purpose in dist.csv (pp_sent among them) are moe plan --config's count; pipe.csv has every
# action of every stage, and no stage's actions overlap; checkpoints cross pipeline layouts;
# a stopped stage ends the job naming it, and the run resumes; settings a pipeline cannot take
# are refused (exit 2), and --print-schedule prints the lists and the bubble:
#   make test (quick)   pp 2 (1f1b), pp 2 x ep 2 under dist.zero=2 without overlap (gpipe),
#                       pp 2 x 2 replicas under dist.zero=3 with dist.pp_layers=3,1 (1f1b: the
#                       weights' windows in a stage's order), pp 4 (1f1b) with dist.pp_layers,
#                       the crossings, the refusals
#   MOE_TEST_FULL=1     (make test-slow) every pipeline layout of 2 to 8 processes: pp 2 and 4,
#                       tp 1 and 2, ep 1 and 2 where they divide, each schedule under dist.zero 0
#                       to 3, for 20 steps; and the stopped stage
# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
need_mpirun skip
moe=$(executable "${MOE_BIN:-build/mpi/moe}" "make mpi (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# shellcheck source=tests/lib/np_runs.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/np_runs.sh" # same_curves, bytes_agree
full=${MOE_TEST_FULL:-0}
steps=$([ "$full" = 1 ] && echo 20 || echo 6)

"$moe" synth --out "$tmp/data" --tokens 40000 --seed 7 > /dev/null
tiny=(--set model.d_model=32 --set model.n_layer=4 --set model.n_head=4 --set model.kv_heads=4
      --set model.seq_len=16 --set model.d_ff=64 --set model.vocab=256 --set moe.num_experts=4
      --set moe.top_k=2 --set moe.d_expert=32 --set moe.num_shared=1 --set moe.first_dense=1
      --set moe.balance=aux_free --set moe.bias_rate=0.05 --set train.batch=8 --set train.accum=4
      --set "train.steps=$steps" --set train.warmup=2 --set train.lr=3e-3
      --set train.eval_every=3 --set train.eval_batches=1 --set "data.train=$tmp/data/train.bin"
      --set "data.val=$tmp/data/val.bin" --quiet)

# memory_agrees LOG: the banner's allocation of the largest process is the formula's
memory_agrees() {
    grep -q "holds \([0-9]*\) bytes, memory.h's formula \1$" "$1"
}
# timeline_sane DIR STAGES: pipe.csv has 2 x train.accum actions of every stage at every step,
# each ending after it starts and before the stage's next one starts
timeline_sane() {
    awk -F, -v P="$2" -v A=4 'NR == 1 { next }
        { n[$1 "," $2]++; if ($7 < $6) bad++
          k = $1 "," $2; if ((k in last) && $6 < last[k]) bad++; last[k] = $7 }
        END { for (k in n) { if (n[k] != 2 * A) bad++; keys++ }
              exit !(bad == 0 && keys > 0 && keys % P == 0) }' "$1/pipe.csv"
}

"$moe" train --out "$tmp/one" "${tiny[@]}" > "$tmp/one.log" 2>&1
check "one process trains" $? "$(tail -n 3 "$tmp/one.log")"

# layout NP PP TP EP ZERO OVERLAP SCHEDULE [LAYERS]: the run over NP processes against one
# process's
layout() {
    local np=$1 pp=$2 tp=$3 ep=$4 zero=$5 ov=$6 sched=$7 layers=${8:-even}
    local name=np$np-pp$pp-tp$tp-ep$ep-zero$zero-ov$ov-$sched-$layers
    timeout -k 10 180 mpirun -np "$np" "$moe" train --out "$tmp/$name" "${tiny[@]}" \
        --set dist.pp="$pp" --set dist.tp="$tp" --set dist.ep="$ep" --set dist.zero="$zero" \
        --set dist.overlap="$ov" --set dist.pp_schedule="$sched" --set dist.pp_layers="$layers" \
        > "$tmp/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] && same_curves "$tmp/one" "$tmp/$name" && memory_agrees "$tmp/$name.log" &&
        bytes_agree "$tmp/$name" "$np" && timeline_sane "$tmp/$name" "$pp" &&
        awk -F, 'NR > 1 && $2 == -1 && $3 == 0 { p = $15 } END { exit !(p > 0) }' "$tmp/$name/dist.csv"
    check "$np processes: dist.pp=$pp ($sched, layers $layers) x dist.tp=$tp x dist.ep=$ep, dist.zero=$zero, dist.overlap=$ov: the one-process curve; memory, bytes and timeline as planned" \
        $? "exit $rc: $(tail -n 2 "$tmp/$name.log"); $(paste -d' ' "$tmp/one/train.csv" "$tmp/$name/train.csv" 2> /dev/null | sed -n 2,3p)"
    rm -rf "${tmp:?}/$name"
}

if [ "$full" = 1 ]; then
    for np in 2 4 8; do
        for pp in 2 4; do
            [ $((np % pp)) -eq 0 ] || continue
            stage=$((np / pp))
            for tp in 1 2; do
                for ep in 1 2; do
                    [ $((stage % (tp * ep))) -eq 0 ] || continue
                    for sched in 1f1b gpipe; do
                        for zero in 0 1 2 3; do layout "$np" "$pp" "$tp" "$ep" "$zero" 1 "$sched"; done
                    done
                done
            done
        done
    done
else
    layout 2 2 1 1 0 1 1f1b
    layout 4 2 1 2 2 0 gpipe
    layout 4 2 1 1 3 1 1f1b 3,1
    layout 4 4 1 1 0 1 1f1b 1,1,1,1
fi

# Checkpoints hold whole tensors: a pipeline's run resumes in one process, and one process's
# under a pipeline of another split, on the one-process curve.
half=$((steps / 2))
mpirun -np 2 "$moe" train --out "$tmp/cross1" "${tiny[@]}" --set dist.pp=2 --until "$half" \
    > "$tmp/cross1.log" 2>&1 &&
    "$moe" train --resume "$tmp/cross1" --set dist.pp=1 --quiet > "$tmp/cross1r.log" 2>&1 &&
    same_curves "$tmp/one" "$tmp/cross1"
check "dist.pp=2 to step $half, then one process: the one-process curve" $? \
    "$(tail -n 2 "$tmp/cross1.log" "$tmp/cross1r.log" 2> /dev/null)"
"$moe" train --out "$tmp/cross2" "${tiny[@]}" --until "$half" > "$tmp/cross2.log" 2>&1 &&
    mpirun -np 4 "$moe" train --resume "$tmp/cross2" --set dist.pp=2 --set dist.tp=2 \
        --set dist.pp_layers=3,1 --quiet > "$tmp/cross2r.log" 2>&1 &&
    same_curves "$tmp/one" "$tmp/cross2"
check "one process to step $half, then dist.pp=2 (layers 3,1) x dist.tp=2: the one-process curve" \
    $? "$(tail -n 2 "$tmp/cross2.log" "$tmp/cross2r.log" 2> /dev/null)"

# moe bench --layout times a pipeline's step: its schedule's micro-batches, its bytes between
# stages (the planner's count)
out=$(timeout -k 10 120 mpirun -np 2 "$moe" bench --layout --config test --steps 2 --warmup 1 \
      --set dist.pp=2 --set train.accum=2 2>&1)
rc=$?
[ $rc -eq 0 ] && awk '$1 == "test" && $2 == "1.1.1.2" && $4 > 0 && $6 > 0 && $11 > 0 &&
                      $13 == "the" && $14 == "same" { ok = 1 } END { exit !ok }' <<< "$out"
check "mpirun -np 2 moe bench --layout --set dist.pp=2: the step's time, its bytes between stages, moe plan's count the same" \
    $? "exit $rc: $out"

# The schedule, printed without processes: the lists, the timeline, the bubble of the formula.
out=$("$moe" train "${tiny[@]}" --set dist.pp=4 --set train.accum=6 --print-schedule 2>&1)
grep -q "stage 0 (layers 0-0, embedding), holds 4 micro-batch(es): F0 F1 F2 F3 B0 F4 B1" <<< "$out" &&
    grep -q "stage 3 (layers 3-3, head and loss), holds 1 micro-batch(es): F0 B0 F1 B1" <<< "$out" &&
    grep -q "bubble 0.333, (P - 1) / (M + P - 1) = 0.333" <<< "$out"
check "--print-schedule: 1F1B's lists, the micro-batches each stage holds, the bubble" $? "$out"
out=$("$moe" train "${tiny[@]}" --set dist.pp=2 --set dist.pp_schedule=gpipe --print-schedule 2>&1)
grep -q "holds 4 micro-batch(es): F0 F1 F2 F3 B0 B1 B2 B3" <<< "$out" &&
    grep -q "bubble 0.200, (P - 1) / (M + P - 1) = 0.200" <<< "$out"
check "--print-schedule: GPipe's" $? "$out"

# refused: exit 2, a message naming the setting, nothing written
refused() {
    local label=$1 want=$2 np=$3
    shift 3
    if [ "$np" = 1 ]; then
        "$moe" train --out "$tmp/refused" "${tiny[@]}" "$@" > "$tmp/refused.log" 2>&1
    else
        mpirun -np "$np" "$moe" train --out "$tmp/refused" "${tiny[@]}" "$@" > "$tmp/refused.log" 2>&1
    fi
    local rc=$?
    [ $rc -ne 0 ] && grep -q -- "$want" "$tmp/refused.log" && [ ! -e "$tmp/refused" ]
    check "refused: $label" $? "exit $rc: $(grep -v '^-\|^$' "$tmp/refused.log" | head -n 3)"
}
refused "dist.pp=3 over 2 processes" "dist.pp=3 pipeline stages do not divide the 2 processes" 2 \
    --set dist.pp=3
refused "dist.pp_layers that do not add up" "dist.pp_layers=1,2 gives 2 stages 3 layers" 2 \
    --set dist.pp=2 --set dist.pp_layers=1,2
refused "a tied head" "dist.pp=2: a tied head (model.tied=1) is not run over pipeline stages" 2 \
    --set dist.pp=2 --set model.tied=1
refused "more stages than layers" "dist.pp=8 stages need a layer each" 8 --set dist.pp=8
refused "--print-schedule of one stage" "has no pipeline schedule" 1 --print-schedule

# A stage that stops answering ends the job within dist.timeout, its neighbour naming it; the
# run resumes from its checkpoint to the one-process curve.
if [ "$full" = 1 ]; then
    # the teaching collectives name a silent peer wherever the stop finds rank 0 (MPI's own
    # name only the collective and its group), as the pipeline's messages do
    mpirun -np 2 "$moe" train --out "$tmp/stop" "${tiny[@]}" --set train.steps=4000 \
        --set train.ckpt_every=2 --set train.eval_every=0 --set dist.pp=2 --set dist.timeout=3 \
        --set dist.collectives=teach > "$tmp/stop.log" 2>&1 &
    job=$!
    for _ in $(seq 100); do [ -s "$tmp/stop/ckpt.bin" ] && break; sleep 0.1; done
    for p in $(pgrep -f "moe train --out $tmp/stop"); do
        tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -q '^OMPI_COMM_WORLD_RANK=1$' &&
            kill -STOP "$p"
    done
    start=$(date +%s)
    wait "$job"
    rc=$? secs=$(($(date +%s) - start))
    [ $rc -ne 0 ] && [ $secs -le 30 ] && grep -q "no answer from rank(s) 1 " "$tmp/stop.log"
    check "stage 1 stops: the job ends (exit $rc) in $secs s, rank 0 names rank 1" $? \
        "$(grep -v '^-\|^$' "$tmp/stop.log" | tail -n 4)"
    pkill -KILL -f "moe train --out $tmp/stop" 2> /dev/null
    # two steps past the last one train.csv recorded (the checkpoint is at or before it)
    last=$(tail -n 1 "$tmp/stop/train.csv" | cut -d, -f1)
    timeout -k 10 120 mpirun -np 2 "$moe" train --resume "$tmp/stop" --until $((last + 2)) \
        --quiet > "$tmp/stop_r.log" 2>&1 &&
        [ "$(tail -n 1 "$tmp/stop/train.csv" | cut -d, -f1)" = $((last + 2)) ]
    check "the stopped run resumes from its checkpoint, to step $((last + 2))" $? "$(tail -n 3 "$tmp/stop_r.log")"
fi

finish
