#!/usr/bin/env bash
# test_tp.sh: tensor parallelism with sequence parallelism (dist.tp, src/model/tp.h) gives the
# one-process result. Run by `make test-mpi` / `make test` with MOE_BIN=build/mpi/moe; needs
# mpirun.
#
#   1. a tiny MoE with a dense first block, a shared expert and aux-loss-free balancing, trained
#      8 steps in one process and with dist.tp=2 (2 processes), dist.tp=2 x dist.ep=2 (4),
#      dist.tp=2 x data-parallel 2 (4) and dist.tp=4 (4): every step's loss, aux, z, gradient
#      norm and validation loss agree to 1e-5 relative (the embedding and the head split by
#      vocabulary, the cross-entropy over the shares); with the aux loss too (at dist.tp=2 x
#      dist.ep=2 and dist.tp=4; on every grid with MOE_TEST_FULL=1, make test-slow); grouped-query
#      heads with qk-norm (per head) at dist.tp=2 and dist.tp=2 x dist.ep=2; a tied head at
#      dist.tp=2 x data-parallel 2; train.device=cpu-fenced (the collectives through the host's
#      copy) at dist.tp=2 x dist.ep=2; the teaching collectives at dist.tp=2
#   2. after the 8 steps every weight of the dist.tp=2 x dist.ep=2 checkpoint (its shares
#      gathered into whole tensors) is the one-process checkpoint's, to 1e-5, and it evaluates
#      in one process to the one-process checkpoint's validation loss
#   3. a checkpoint saved at dist.tp=2 (step 4) resumes in one process, one saved in one process
#      resumes at dist.tp=2 x dist.ep=2, and one saved at dist.tp=2 x dist.ep=2 resumes at
#      dist.tp=4: each continues the one-process curve
#   4. one step's gradients (tests/mpi/test_tp_grad.c, $MOE_BUILD/tests/mpi/test_tp_grad): every
#      tensor's gradient of each process at dist.tp=2, 2 x dist.ep=2, 2 x data-parallel 2 and 4
#      is its share of the one-process gradient to 1e-5 (the embedding's and the head's rows
#      too), with grouped-query heads, qk-norm, a dense block, shared experts, the aux and z
#      losses; and with a tied head at dist.tp=2
#   5. bad input exits 2 with a message naming the setting: dist.tp not dividing the heads, the
#      dense feed-forward's width or the vocabulary, a replica's tokens that do not split, seq_aux over rows
#      that are not whole sequences, latent attention, qk_norm=full, multi-token prediction,
#      dist.collectives=nccl
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
echo "test_tp: tensor parallelism gives the one-process result"
need_mpirun skip
moe=$(executable "${MOE_BIN:-build/mpi/moe}" "make mpi (or set MOE_BIN)") || exit 1
build=${MOE_BUILD:-build/mpi}
grad=$(executable "$build/tests/mpi/test_tp_grad" \
       "make MPI=1 $build/tests/mpi/test_tp_grad (or set MOE_BUILD)") || exit 1
export OMP_NUM_THREADS=1

trap 'rm -rf "$tmp"' EXIT
"$moe" synth --out "$tmp/data" --tokens 60000 --seed 3 > /dev/null
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=4 --set model.seq_len=16
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set moe.first_dense=1 --set moe.num_shared=1 --set moe.balance=aux_free
      --set moe.bias_rate=0.05 --set train.batch=4 --set train.steps=8 --set train.warmup=2
      --set train.lr=1e-2 --set train.eval_every=4 --set "data.train=$tmp/data/train.bin"
      --set "data.val=$tmp/data/val.bin" --quiet)

# shellcheck source=tests/lib/np_runs.sh
. "$root/tests/lib/np_runs.sh" # run, resume, same_curves
# agree NAME ONE WHAT RC: the check that run NAME's curve is run ONE's
agree() {
    same_curves "$tmp/$2" "$tmp/$1"
    check "$3: every step's loss, aux, z, grad norm, val loss = one process's" $? \
        "exit $4: $(tail -n 3 "$tmp/$1.log"); $(paste -d' ' "$tmp/$2/train.csv" "$tmp/$1/train.csv" | head -n 4)"
}

# ---- 1. the one-process result ------------------------------------------------------------
for variant in "free|" "aux|--set moe.balance=aux"; do
    IFS='|' read -r vname vsets <<< "$variant"
    # shellcheck disable=SC2086 # vsets is a list of options
    run "one-$vname" 1 $vsets
    check "$vname: one process trains" $? "$(tail -n 3 "$tmp/one-$vname.log")"
    for grid in "2 2 1" "4 2 2" "4 2 1" "4 4 1"; do
        read -r np tp ep <<< "$grid"
        # the aux loss on two of the grids in make test, all four with MOE_TEST_FULL=1
        [ "$vname" = aux ] && [ "${MOE_TEST_FULL:-0}" != 1 ] && [ "$tp" = 2 ] && [ "$ep" = 1 ] && continue
        # shellcheck disable=SC2086
        run "$vname-np$np-tp$tp-ep$ep" "$np" --set dist.tp="$tp" --set dist.ep="$ep" $vsets
        agree "$vname-np$np-tp$tp-ep$ep" "one-$vname" \
            "$vname: $np processes, dist.tp=$tp x dist.ep=$ep x $((np / tp / ep)) data-parallel" $?
    done
done
gqa=(--set model.kv_heads=2 --set model.qk_norm=head)
run one-gqa 1 "${gqa[@]}"
run gqa-tp2 2 --set dist.tp=2 "${gqa[@]}"
agree gqa-tp2 one-gqa "grouped-query heads with qk-norm, dist.tp=2" $?
run gqa-tp2-ep2 4 --set dist.tp=2 --set dist.ep=2 "${gqa[@]}"
agree gqa-tp2-ep2 one-gqa "grouped-query heads with qk-norm, dist.tp=2 x dist.ep=2" $?
run one-tied 1 --set model.tied=1
run tied-tp2-dp2 4 --set dist.tp=2 --set model.tied=1
agree tied-tp2-dp2 one-tied "tied head, dist.tp=2 x 2 data-parallel" $?
run fenced-tp2-ep2 4 --set dist.tp=2 --set dist.ep=2 --set train.device=cpu-fenced
agree fenced-tp2-ep2 one-free "train.device=cpu-fenced, dist.tp=2 x dist.ep=2" $?
run teach-tp2 2 --set dist.tp=2 --set dist.collectives=teach
agree teach-tp2 one-free "dist.collectives=teach, dist.tp=2" $?

# ---- 2. the checkpoint holds the whole model -----------------------------------------------
# floats FILE: the tensor data of a safetensors file, one float per line
floats() { safetensors_data "$1" | od -An -v -f | tr -s ' ' '\n' | sed '/^$/d'; }
"$moe" export --ckpt "$tmp/one-free/ckpt.bin" --out "$tmp/one.st" > /dev/null &&
    "$moe" export --ckpt "$tmp/free-np4-tp2-ep2/ckpt.bin" --out "$tmp/tp2ep2.st" > /dev/null
rc=$?
paste <(floats "$tmp/one.st") <(floats "$tmp/tp2ep2.st") > "$tmp/weights.txt"
awk '{ n++; d = $1 - $2; d = d < 0 ? -d : d; if (d > 1e-5) bad++; if (d > mx) mx = d }
     END { print n, bad + 0, mx; exit !(n > 20000 && bad == 0) }' "$tmp/weights.txt" > "$tmp/wcmp.txt"
same=$? # before the message's $(cat ...) sets $? again
check "the dist.tp=2 x dist.ep=2 checkpoint holds every weight = one process's (floats, differing, largest difference: $(cat "$tmp/wcmp.txt"))" \
    "$same" "export exit $rc"

one=$("$moe" eval --ckpt "$tmp/one-free/ckpt.bin" | awk '{ print $2 }')
tp2=$("$moe" eval --ckpt "$tmp/free-np4-tp2-ep2/ckpt.bin" --set dist.tp=1 --set dist.ep=1 |
      awk '{ print $2 }')
awk -v a="$one" -v b="$tp2" 'BEGIN { d = a - b; exit !(a > 0 && d * d < 1e-10) }'
check "the dist.tp=2 x dist.ep=2 checkpoint evaluates in one process to the one-process loss ($tp2, $one)" \
    $? "different"

# ---- 3. checkpoints independent of the grid -------------------------------------------------
run ck-tp2 2 --set dist.tp=2 --until 4
resume ck-tp2 1 --set dist.tp=1
agree ck-tp2 one-free "saved at dist.tp=2 (step 4), resumed in one process" $?
run ck-one 1 --until 4
resume ck-one 4 --set dist.tp=2 --set dist.ep=2
agree ck-one one-free "saved in one process (step 4), resumed at dist.tp=2 x dist.ep=2" $?
run ck-tp2ep2 4 --set dist.tp=2 --set dist.ep=2 --until 4
resume ck-tp2ep2 4 --set dist.tp=4 --set dist.ep=1
agree ck-tp2ep2 one-free "saved at dist.tp=2 x dist.ep=2 (step 4), resumed at dist.tp=4" $?

# ---- 4. one step's gradients ------------------------------------------------------------------
for grid in "2 2 1 0" "4 2 2 0" "4 2 1 0" "4 4 1 0" "2 2 1 1"; do
    read -r np tp ep tied <<< "$grid"
    out=$(MOE_TEST_TP=$tp MOE_TEST_EP=$ep MOE_TEST_TIED=$tied timeout -k 10 60 \
          mpirun -np "$np" "$grad" 2>&1)
    rc=$?
    check "one step at dist.tp=$tp x dist.ep=$ep x $((np / tp / ep)) data-parallel$([ "$tied" = 1 ] && echo ", tied head"): every tensor's gradient = its share of one process's ($(grep -o 'worst.*' <<< "$out"))" \
        "$rc" "$(tail -n 4 <<< "$out")"
done

# ---- 5. bad input ---------------------------------------------------------------------------
# refused WHAT NP PATTERN --set ...: the run exits 2 with a message matching PATTERN
refused() {
    local what=$1 np=$2 pattern=$3 out rc
    shift 3
    if [ "$np" = 1 ]; then
        out=$("$moe" train --out "$tmp/bad" "${tiny[@]}" "$@" 2>&1)
    else
        out=$(timeout -k 10 60 mpirun -np "$np" "$moe" train --out "$tmp/bad" "${tiny[@]}" "$@" 2>&1)
    fi
    rc=$?
    [ "$rc" = 2 ] && grep -q -- "$pattern" <<< "$out" && [ ! -e "$tmp/bad" ]
    check "$what: exit 2 with a message, no run directory" $? "exit $rc: $(head -n 3 <<< "$out")"
}
refused "dist.tp=3 of 4 heads" 1 "model.n_head=4 heads do not split into 3" --set dist.tp=3
refused "model.d_ff=63 over dist.tp=2" 1 "model.d_ff=63 does not split" \
    --set dist.tp=2 --set model.d_ff=63
refused "model.vocab=255 over dist.tp=2" 1 "model.vocab=255 does not split" --set dist.tp=2 \
    --set model.vocab=255
refused "a replica's 1 x 15 tokens over dist.tp=2" 2 "1 x 15 tokens" \
    --set dist.tp=2 --set train.batch=1 --set model.seq_len=15
refused "seq_aux over half a sequence" 2 "not whole sequences" \
    --set dist.tp=2 --set train.batch=1 --set moe.balance=seq_aux
refused "latent attention" 1 "model.attention=mla is not split" --set dist.tp=2 \
    --set model.attention=mla --set mla.q_rank=8 --set mla.kv_rank=6 --set mla.rope_dim=4 \
    --set mla.nope_dim=4 --set mla.v_dim=6
refused "qk_norm=full" 1 "model.qk_norm=full is not split" --set dist.tp=2 --set model.qk_norm=full
refused "multi-token prediction" 1 "model.mtp_depth > 0 is not split" --set dist.tp=2 \
    --set model.mtp_depth=1
refused "NCCL" 1 "dist.collectives=nccl is not split" --set dist.tp=2 --set dist.collectives=nccl

finish
