#!/usr/bin/env bash
# test_backends.sh: the same training run on each backend (run by `make test` with MOE_BIN set).
#
#   1. a tiny MoE (jitter and logit noise on, so the host-drawn noise reaches the backend's
#      buffers) trains 30 steps on train.device=cpu and on cpu-ref: the losses, aux and
#      z-losses and gradient norms of every step agree within 2e-3 (relative), the validation
#      loss too; the two differ only in the rounding of the products' sums
#   2. a run started on cpu continues on cpu-ref from its checkpoint (--resume with the device
#      changed): the device is not a setting of the model, and the resumed losses agree with
#      the run that stayed on cpu within the same tolerance
#   3. train.device=gpu is refused with exit 2, naming the backends there are
#   4. cpu-fenced (cpu's ops on memory the host cannot read) trains as cpu does, bit for bit,
#      in five routing modes; eval, sample, resume and export give cpu's output: the engine
#      reads a device's memory only through to_host, as a GPU needs
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=2

data="$tmp/data"
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set moe.jitter=0.05 --set moe.noise=0.1 --set train.batch=4 --set train.warmup=3
      --set "data.train=$data/train.bin" --set "data.val=$data/val.bin" --quiet)
"$moe" synth --out "$data" --tokens 30000 --seed 5 > /dev/null 2>&1

# shellcheck source=tests/lib/csv_close.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/csv_close.sh"

# ---- 1. the same run on both CPU backends ---------------------------------------------------
echo "test_backends: cpu and cpu-ref"
for dev in cpu cpu-ref; do
    "$moe" train --out "$tmp/$dev" "${tiny[@]}" --set train.steps=30 --set train.eval_every=15 \
        --set train.device=$dev > "$tmp/$dev.log" 2>&1
    check "trains 30 steps on $dev" $? "$(tail -n 3 "$tmp/$dev.log")"
done
grep -q '^train.device = cpu-ref$' "$tmp/cpu-ref/config.txt"
check "config.txt records train.device = cpu-ref" $? "$(grep device "$tmp/cpu-ref/config.txt")"
out=$(csv_close "$tmp/cpu/train.csv" "$tmp/cpu-ref/train.csv")
check "every step's losses, aux, z and grad norm agree within 2e-3" $? "$out"
! cmp -s <(cut -d, -f2 "$tmp/cpu/train.csv") <(cut -d, -f2 "$tmp/cpu-ref/train.csv")
check "and the two are not the same run twice (their roundings differ)" $? "identical losses"

# ---- 2. a checkpoint moves between backends -------------------------------------------------
echo "test_backends: a run moves from cpu to cpu-ref"
"$moe" train --out "$tmp/moved" "${tiny[@]}" --set train.steps=30 --set train.eval_every=15 \
    --set train.device=cpu --until 15 > "$tmp/moved.log" 2>&1 &&
    "$moe" train --resume "$tmp/moved" --set train.device=cpu-ref --quiet >> "$tmp/moved.log" 2>&1
check "15 steps on cpu, then --resume --set train.device=cpu-ref to 30" $? "$(tail -n 3 "$tmp/moved.log")"
grep -q '^train.device = cpu-ref$' "$tmp/moved/config.txt"
check "the resumed run records its new device" $? "$(grep device "$tmp/moved/config.txt")"
out=$(csv_close "$tmp/cpu/train.csv" "$tmp/moved/train.csv")
check "its losses agree with the run that stayed on cpu within 2e-3" $? "$out"

# ---- 3. a backend this build does not have ------------------------------------------------------
"$moe" train --out "$tmp/gpu" "${tiny[@]}" --set train.steps=2 --set train.device=gpu > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "train.device" "$tmp/err" && grep -q "cpu-ref" "$tmp/err" && [ ! -e "$tmp/gpu" ]
check "train.device=gpu exits 2, naming the choices, and writes no run" $? "exit $rc: $(head -n 2 "$tmp/err")"

# ---- 4. cpu-fenced: cpu's ops on memory the host cannot read -----------------------------------
# The same runs as on cpu, bit for bit, in every routing mode that reads something of the
# backend's memory on the host (the aux-free biases in router.csv, the experts' similarity,
# the plans, the checkpoint): a direct read would have stopped the run (SIGSEGV), as it would
# crash on a GPU. train.csv less its speed column, router.csv and domains.csv must be equal.
echo "test_backends: cpu-fenced"
no_speed() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "tok_per_s") s = i }
             { o = ""; for (i = 1; i <= NF; i++) if (i != s) o = o $i ","; print o }' "$1"
}
fenced_modes=("dropless softmax, aux:"
              "sigmoid, aux-free:--set moe.score=sigmoid --set moe.balance=aux_free"
              "padded capacity, drop by score:--set moe.capacity_factor=1.0 --set moe.padded=1 --set moe.drop_policy=score"
              "expert choice:--set moe.routing=expert_choice --set moe.balance=none"
              "seq_aux, top-k before softmax, a shared expert:--set moe.balance=seq_aux --set moe.topk_before_softmax=1 --set moe.num_shared=1")
for entry in "${fenced_modes[@]}"; do
    what=${entry%%:*}; read -r -a mode <<< "${entry#*:}"
    rm -rf "$tmp/f-cpu" "$tmp/f-fenced"
    "$moe" train --out "$tmp/f-cpu" "${tiny[@]}" --set train.steps=8 --set train.eval_every=4 \
        "${mode[@]}" > "$tmp/f.log" 2>&1 &&
        "$moe" train --out "$tmp/f-fenced" "${tiny[@]}" --set train.steps=8 \
            --set train.eval_every=4 "${mode[@]}" --set train.device=cpu-fenced > "$tmp/f.log" 2>&1 &&
        cmp -s <(no_speed "$tmp/f-cpu/train.csv") <(no_speed "$tmp/f-fenced/train.csv") &&
        cmp -s "$tmp/f-cpu/router.csv" "$tmp/f-fenced/router.csv" &&
        cmp -s "$tmp/f-cpu/domains.csv" "$tmp/f-fenced/domains.csv"
    check "cpu-fenced trains as cpu does, bit for bit: $what" $? "$(tail -n 2 "$tmp/f.log")"
done
# the last runs' checkpoints (the same weights; each keeps its device): evaluated, sampled and
# continued
"$moe" eval --ckpt "$tmp/f-fenced/ckpt.bin" --set train.device=cpu-fenced > "$tmp/f-eval" 2>&1 &&
    "$moe" eval --ckpt "$tmp/f-fenced/ckpt.bin" --set train.device=cpu > "$tmp/c-eval" 2>&1 &&
    cmp -s "$tmp/f-eval" "$tmp/c-eval"
check "moe eval with train.device=cpu-fenced prints what cpu prints" $? "$(tail -n 2 "$tmp/f-eval")"
grep -q '^train.device = cpu-fenced$' "$tmp/f-fenced/config.txt" &&
    "$moe" sample --ckpt "$tmp/f-fenced/ckpt.bin" --prompt "ab" --tokens 20 > "$tmp/f-sample" 2>&1 &&
    "$moe" sample --ckpt "$tmp/f-cpu/ckpt.bin" --prompt "ab" --tokens 20 > "$tmp/c-sample" 2>&1 &&
    cmp -s "$tmp/f-sample" "$tmp/c-sample"
check "moe sample with train.device=cpu-fenced writes what cpu writes" $? "$(tail -n 2 "$tmp/f-sample")"
"$moe" train --resume "$tmp/f-fenced" --set train.steps=12 --quiet > "$tmp/f.log" 2>&1 &&
    "$moe" train --resume "$tmp/f-cpu" --set train.steps=12 --quiet > "$tmp/c.log" 2>&1 &&
    cmp -s <(no_speed "$tmp/f-cpu/train.csv") <(no_speed "$tmp/f-fenced/train.csv")
check "a cpu-fenced run resumes from its checkpoint as cpu's does" $? "$(tail -n 2 "$tmp/f.log")"
"$moe" export --ckpt "$tmp/f-fenced/ckpt.bin" --out "$tmp/f.safetensors" > "$tmp/f.log" 2>&1 &&
    "$moe" export --ckpt "$tmp/f-cpu/ckpt.bin" --out "$tmp/c.safetensors" > /dev/null 2>&1 &&
    cmp -s "$tmp/f.safetensors" "$tmp/c.safetensors"
check "moe export of a cpu-fenced checkpoint writes cpu's file (conversions run on the CPU)" $? \
    "$(tail -n 2 "$tmp/f.log")"

finish
