#!/usr/bin/env bash
# test_layouts.sh: the process grid's axes together: dist.tp x dist.ep x data-parallel, under
# every dist.zero, with and without dist.overlap, give the one-process run. Runs with
# MOE_BIN=build/mpi/moe and needs mpirun; tests/mpi/test_tp.sh and test_zero.sh test each axis
# on its own, this suite their products.
#
# One tiny MoE with a dense first block, a shared expert, grouped-query heads and aux-free
# balancing, two micro-batches a step, 8 steps (20 in the sweep) at a learning rate (3e-3) low
# enough that the last bits of the processes' other summation orders do not grow past the
# tolerance (at 1e-2 dist.tp=4's gradient norm drifts to 2e-5 by step 6, from one-step
# gradients within 2e-6 of one process's: tests/mpi/test_tp_grad.c); every step's loss, aux,
# z, gradient norm and validation loss agree with the one-process run to 1e-5 relative, and
# dist.csv's grad_sent, weight_sent and tp_sent of process 0 are moe plan --config's count,
# byte for byte; and
# `moe bench --layout` times a config's step in a grid (its memory, its bytes: the planner's),
# refusing a grid that does not fit the processes; a checkpoint saved under dist.tp=2 x
# dist.zero=3 resumes under dist.ep=4, and the reverse, on the one-process curve:
#   make test (quick)         tp 2 x ep 2 under dist.zero=2 without overlap, and tp 2 x 2
#                             replicas under dist.zero=3 on cpu-fenced (host staging)
#   MOE_TEST_FULL=1           (make test-slow) every grid of 2 to 8 processes with tp in
#                             {1, 2, 4} and ep in {1, 2}, each under dist.zero 0, 1, 2 and 3,
#                             with dist.overlap 1 and 0, for 20 steps
# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
need_mpirun skip
moe=$(executable "${MOE_BIN:-build/mpi/moe}" "make mpi (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# shellcheck source=tests/lib/np_runs.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/np_runs.sh" # same_curves, bytes_agree

"$moe" synth --out "$tmp/data" --tokens 40000 --seed 7 > /dev/null
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=4 --set model.kv_heads=4
      --set model.seq_len=16 --set model.d_ff=64 --set model.vocab=256 --set moe.num_experts=4
      --set moe.top_k=2 --set moe.d_expert=32 --set moe.num_shared=1 --set moe.first_dense=1
      --set moe.balance=aux_free --set moe.bias_rate=0.05 --set train.batch=8 --set train.accum=2
      --set train.steps=8 --set train.warmup=2 --set train.lr=3e-3 --set train.eval_every=4
      --set train.eval_batches=1 --set "data.train=$tmp/data/train.bin"
      --set "data.val=$tmp/data/val.bin" --quiet)


"$moe" train --out "$tmp/one" "${tiny[@]}" > "$tmp/one.log" 2>&1
check "one process trains" $? "$(tail -n 3 "$tmp/one.log")"

# layout NP TP EP ZERO OVERLAP [DEVICE]: the run over NP processes against one process's
layout() {
    local np=$1 tp=$2 ep=$3 zero=$4 ov=$5 dev=${6:-cpu}
    local name=np$np-tp$tp-ep$ep-zero$zero-ov$ov-$dev
    timeout -k 10 180 mpirun -np "$np" "$moe" train --out "$tmp/$name" "${tiny[@]}" \
        --set dist.tp="$tp" --set dist.ep="$ep" --set dist.zero="$zero" --set dist.overlap="$ov" \
        --set train.device="$dev" > "$tmp/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] && same_curves "$tmp/one" "$tmp/$name" && bytes_agree "$tmp/$name" "$np"
    check "$np processes: dist.tp=$tp x dist.ep=$ep x $((np / tp / ep)) replicas, dist.zero=$zero, dist.overlap=$ov, $dev: the one-process curve; the bytes moe plan counts" \
        $? "exit $rc: $(tail -n 2 "$tmp/$name.log"); $(paste -d' ' "$tmp/one/train.csv" "$tmp/$name/train.csv" 2> /dev/null | sed -n 2,3p)"
    rm -rf "${tmp:?}/$name"
}

# moe bench --layout: the step's time of a config in a grid, its memory and bytes
out=$(timeout -k 10 120 mpirun -np 4 "$moe" bench --layout --config test --steps 2 --warmup 1 \
      --set dist.tp=2 --set dist.zero=3 2>&1)
rc=$?
[ $rc -eq 0 ] && awk '$1 == "test" && $2 == "2.1.2.1" && $3 == "z3" && $4 > 0 && $5 > 0 && $6 > 0 &&
                      $8 > 0 && $9 > 0 && $10 > 0 && $13 == "the" && $14 == "same" { ok = 1 }
                      END { exit !ok }' <<< "$out"
check "mpirun -np 4 moe bench --layout --config test --set dist.tp=2 --set dist.zero=3: the step's time, the memory, the bytes a step, moe plan's count the same" \
    $? "exit $rc: $out"
out=$(timeout -k 10 120 mpirun -np 4 "$moe" bench --layout --config test --steps 1 --set dist.tp=2 \
      --set dist.ep=4 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "dist.tp=2 x dist.ep=4 = 8 processes a data-parallel replica, which does not divide the 4 processes" <<< "$out"
check "moe bench --layout with dist.tp=2 x dist.ep=4 on 4 processes: refused with the arithmetic" $? "exit $rc: $out"
out=$("$moe" bench --config test --set dist.tp=2 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "add --layout" <<< "$out"
check "moe bench --set without --layout: exit 2, saying to add it" $? "exit $rc: $out"

# checkpoints free of the grid: saved at step 4 under dist.tp=2 x dist.zero=3 (2 replicas),
# resumed to step 8 under dist.ep=4; saved under dist.ep=4, resumed under dist.tp=2 x
# dist.zero=3: the one-process curve either way
# across FROM_SETS TO_SETS NAME: train 4 steps on 4 processes under FROM, resume under TO
across() {
    local name=$3
    # shellcheck disable=SC2086 # the sets are lists of options
    timeout -k 10 120 mpirun -np 4 "$moe" train --out "$tmp/$name" "${tiny[@]}" $1 --until 4 \
        > "$tmp/$name.log" 2>&1 &&
        # shellcheck disable=SC2086
        timeout -k 10 120 mpirun -np 4 "$moe" train --resume "$tmp/$name" --quiet $2 \
            >> "$tmp/$name.log" 2>&1 &&
        same_curves "$tmp/one" "$tmp/$name"
}
across "--set dist.tp=2 --set dist.zero=3" "--set dist.tp=1 --set dist.zero=0 --set dist.ep=4" tpz-ep
check "saved under dist.tp=2 x dist.zero=3 (step 4), resumed under dist.ep=4: the one-process curve" \
    $? "$(tail -n 3 "$tmp/tpz-ep.log")"
across "--set dist.ep=4" "--set dist.ep=1 --set dist.tp=2 --set dist.zero=3" ep-tpz
check "saved under dist.ep=4 (step 4), resumed under dist.tp=2 x dist.zero=3: the one-process curve" \
    $? "$(tail -n 3 "$tmp/ep-tpz.log")"

if [ "${MOE_TEST_FULL:-0}" != 1 ]; then
    layout 4 2 2 2 0
    layout 4 2 1 3 1 cpu-fenced
    finish
    exit
fi

# the sweep: 20 steps (one process's run again at that length)
tiny+=(--set train.steps=20)
rm -rf "${tmp:?}/one"
"$moe" train --out "$tmp/one" "${tiny[@]}" > "$tmp/one.log" 2>&1
check "one process trains 20 steps" $? "$(tail -n 3 "$tmp/one.log")"
for grid in "2 1 1" "4 1 1" "8 1 1" "2 1 2" "4 1 2" "8 1 2" "2 2 1" "4 2 1" "8 2 1" \
            "4 2 2" "8 2 2" "4 4 1" "8 4 1" "8 4 2"; do
    read -r np tp ep <<< "$grid"
    for zero in 0 1 2 3; do
        layout "$np" "$tp" "$ep" "$zero" 1
        layout "$np" "$tp" "$ep" "$zero" 0
    done
done
finish
