#!/usr/bin/env bash
# test_spikes_ep.sh: train.spike_action (src/train/spike.h) across processes. Runs with
# MOE_BIN=build/mpi/moe and needs mpirun.
#
# A run made to spike (data.corrupt_from) across processes against one process: with skip the
# same steps skipped, with rollback the same rollbacks (rollbacks.csv byte for byte), and every
# step's loss, aux, z, gradient norm and validation loss within 1e-5; stopped after the
# rollback and resumed on 2 processes, the unbroken 2-process run bit for bit:
#   make test (quick)   skip under dist.ep=2 and dist.zero=3 (2 replicas), rollback under
#                       dist.ep=2 and dist.pp=2
#   MOE_TEST_FULL=1     (make test-slow) also dist.ep=2 x 2 replicas (4 processes), both actions
# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
need_mpirun skip
moe=$(executable "${MOE_BIN:-build/mpi/moe}" "make mpi (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# shellcheck source=tests/lib/np_runs.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/np_runs.sh" # run, resume, same_curves

"$moe" synth --out "$tmp/data" --tokens 40000 --seed 5 > /dev/null
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set train.batch=8 --set "data.train=$tmp/data/train.bin" --set "data.val=$tmp/data/val.bin"
      --set train.warmup=10 --set train.eval_every=20 --set train.eval_batches=1
      --set train.steps=80 --set train.ckpt_every=10 --set train.spike_on=loss
      --set train.rollback_every=10 --set data.corrupt_from=60 --set data.corrupt_batches=4 --quiet)
# skipped STEPS: the steps train.csv's column skipped marks
skipped() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "skipped") c = i; next }
                     $c == 1 { printf "%s ", $1 }' "$1/train.csv"; }

echo "test_spikes_ep: skip"
run skip1 1 --set train.spike_action=skip
steps=$(skipped "$tmp/skip1")
full=${MOE_TEST_FULL:-0}
more=()
[ "$full" = 1 ] && more=("4 dist.ep=2")
for layout in "2 dist.ep=2" "2 dist.zero=3" ${more[@]+"${more[@]}"}; do
    np=${layout%% *} key=${layout#* }
    name="skip$np-${key#dist.}"
    run "$name" "$np" --set train.spike_action=skip --set "$key"
    rc=$?
    [ $rc = 0 ] && [ -n "$steps" ] && [ "$steps" = "$(skipped "$tmp/$name")" ] &&
        same_curves "$tmp/skip1" "$tmp/$name"
    check "$key on $np processes skips steps ${steps}as one process does; the curves agree to 1e-5" $? \
        "exit $rc: $(skipped "$tmp/$name"); $(tail -n 3 "$tmp/$name.log")"
done

echo "test_spikes_ep: rollback"
run rb1 1 --set train.spike_action=rollback
rows=$(tail -n +2 "$tmp/rb1/rollbacks.csv" | tr '\n' ' ')
for layout in "2 dist.ep=2" "2 dist.pp=2" ${more[@]+"${more[@]}"}; do
    np=${layout%% *} key=${layout#* }
    name="rb$np-${key#dist.}"
    run "$name" "$np" --set train.spike_action=rollback --set "$key"
    rc=$?
    [ $rc = 0 ] && [ "$(wc -l < "$tmp/rb1/rollbacks.csv")" -ge 2 ] &&
        cmp -s "$tmp/rb1/rollbacks.csv" "$tmp/$name/rollbacks.csv" && same_curves "$tmp/rb1" "$tmp/$name"
    check "$key on $np processes rolls back as one process does ($rows); the curves agree to 1e-5" $? \
        "exit $rc: $(cat "$tmp/$name/rollbacks.csv"); $(tail -n 3 "$tmp/$name.log")"
done
run rbs 2 --set train.spike_action=rollback --set dist.ep=2 --until 70 && resume rbs 2
rc=$?
u="$tmp/rb2-ep=2"
cmp -s "$u/ckpt.bin" "$tmp/rbs/ckpt.bin" && cmp -s "$u/rollbacks.csv" "$tmp/rbs/rollbacks.csv" &&
    cmp -s <(cut -d, -f1-6,8- "$u/train.csv") <(cut -d, -f1-6,8- "$tmp/rbs/train.csv")
check "2 processes stopped after the rollback and resumed: the unbroken run bit for bit" $? \
    "exit $rc: $(tail -n 3 "$tmp/rbs.resume.log")"
finish
