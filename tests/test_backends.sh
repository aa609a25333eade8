#!/usr/bin/env bash
# test_backends.sh: the same training run on each backend (run by `make test` with MOE_BIN set).
#
#   1. a tiny MoE (jitter and logit noise on, so the host-drawn noise reaches the backend's
#      buffers) trains 30 steps on train.device=cpu and on cpu-ref: the losses, aux and
#      z-losses and gradient norms of every step agree within 2e-3 (relative), the validation
#      loss too; the two differ only in the rounding of the products' sums; and the same with
#      group-limited routing (moe.n_group=2, moe.topk_group=1)
#   2. a run started on cpu continues on cpu-ref from its checkpoint (--resume with the device
#      changed): the device is not a setting of the model, and the resumed losses agree with
#      the run that stayed on cpu within the same tolerance
#   3. train.device=gpu is refused with exit 2, naming the backends there are
#   4. cpu-fenced (cpu's ops on memory the host cannot read) trains as cpu does, bit for bit,
#      in five routing modes, the attention's variants and multi-token prediction; eval,
#      sample, resume and export give cpu's output: the engine
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
# the same sources' ids spread over a vocabulary of 1000 (2-byte shards), for model.vocab=1000
"$moe" synth --out "$tmp/data1000" --tokens 30000 --seed 5 --vocab 1000 > /dev/null 2>&1

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

# group-limited routing (DeepSeek-V3's: sigmoid scores, aux-free biases, each token's two
# experts from the best of two groups): the same run on both, and its routing is the groups'
grouped=(--set moe.score=sigmoid --set moe.balance=aux_free --set moe.n_group=2
         --set moe.topk_group=1 --set train.steps=10 --set train.eval_every=5)
for dev in cpu cpu-ref; do
    "$moe" train --out "$tmp/g-$dev" "${tiny[@]}" "${grouped[@]}" --set train.device=$dev \
        --record-routing "$tmp/g-$dev.route" > "$tmp/g-$dev.log" 2>&1
done
out=$(csv_close "$tmp/g-cpu/train.csv" "$tmp/g-cpu-ref/train.csv")
check "moe.n_group=2 moe.topk_group=1 trains 10 steps on cpu and cpu-ref, every step within 2e-3" \
    $? "$out $(tail -n 2 "$tmp/g-cpu.log" "$tmp/g-cpu-ref.log")"
# the recordings (8 bytes of magic, six int32, then each call's N x 2 experts): every token's
# two experts in one group of {0, 1} and {2, 3}, and both groups chosen
for dev in cpu cpu-ref; do
    od -An -v -t d4 -j 32 "$tmp/g-$dev.route" | tr -s ' ' '\n' | sed '/^$/d' |
        awk 'NR % 2 == 1 { a = $1; next }
             { pairs++; g = int(a / 2); if (g != int($1 / 2) || a == $1) bad++; seen[g] = 1 }
             END { print pairs " pairs, " bad + 0 " across groups"
                   exit !(pairs > 1000 && bad == 0 && (0 in seen) && (1 in seen)) }' \
        > "$tmp/g.out"
    check "$dev: every token's two experts are one group's" $? "$(cat "$tmp/g.out")"
done

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
"$moe" train --out "$tmp/nccl" "${tiny[@]}" --set train.steps=4 --set dist.collectives=nccl > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "train.device=cuda" "$tmp/err" && grep -q "dist.collectives=mpi" "$tmp/err" && [ ! -e "$tmp/nccl" ]
check "dist.collectives=nccl on a CPU table exits 2, naming train.device=cuda and mpi, and writes no run" $? \
    "exit $rc: $(head -n 2 "$tmp/err")"

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
              "seq_aux, top-k before softmax, a shared expert:--set moe.balance=seq_aux --set moe.topk_before_softmax=1 --set moe.num_shared=1"
              "a multi-token prediction module (its MoE block, its own losses' place), a tied head:--set model.mtp_depth=1 --set model.tied=1"
              "a vocabulary of 1000 from 2-byte shards, a multi-token prediction module:--set model.vocab=1000 --set data.train=$tmp/data1000/train.bin --set data.val=$tmp/data1000/val.bin --set model.mtp_depth=1"
              "grouped-query heads of their own width, qk-norm over the projection:--set model.n_head=4 --set model.kv_heads=2 --set model.head_dim=12 --set model.qk_norm=full"
              "latent attention:--set model.attention=mla --set mla.q_rank=16 --set mla.kv_rank=12 --set mla.rope_dim=4 --set mla.nope_dim=8 --set mla.v_dim=10")
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

# The host's waits a GPU would make (cpu-fenced counts them: MOE_HOST_READS=1 prints each
# step's): three MoE blocks, three micro-batches. A step needs the slice sizes of each block's
# experts in both passes (the grouped products take them from the host); everything else it
# reports comes down in two copies: the losses, routing statistics and gradient norm before
# the update, expert_sim and the biases after it. An evaluation's reads are counted apart.
# router.csv and train.csv still hold every number: one row per step and block, every step's
# losses.
reads=(--set model.n_layer=3 --set train.accum=3 --set train.batch=2 --set train.steps=4
       --set train.eval_every=4 --set train.device=cpu-fenced)
MOE_HOST_READS=1 "$moe" train --out "$tmp/reads" "${tiny[@]}" "${reads[@]}" > "$tmp/reads.log" 2>&1
rc=$?
L=3 A=3
bound=$((2 * L * A + 2))
[ $rc -eq 0 ] && [ "$(grep -c '^host reads: step [0-9]*: ' "$tmp/reads.log")" = 4 ] &&
    awk -v b=$bound '/^host reads: step/ { n = $5 + 0; if (n > b || n < 1) bad = 1; seen++ }
                     END { exit bad || seen != 4 }' "$tmp/reads.log" &&
    grep -q '^host reads: step 4: [0-9]*, evaluation [1-9]' "$tmp/reads.log" &&
    [ "$(tail -n +2 "$tmp/reads/router.csv" | wc -l)" = $((4 * L)) ] &&
    awk -F, 'NR > 1 && ($3 == "" || $4 == "" || $6 == "") { bad = 1 } END { exit bad || NR != 5 }' \
        "$tmp/reads/train.csv"
check "cpu-fenced: at most $bound host reads a training step (3 MoE blocks x 3 micro-batches x 2 passes: the experts' slice sizes; then one copy before the update, one after); train.csv and router.csv complete" \
    $? "exit $rc: $(grep '^host reads' "$tmp/reads.log" | tr '\n' ' ')"

# ---- 5. routing recorded on one backend, replayed on another -----------------------------------
# The comparison a GPU's device script makes (tests/gpu/run_device.sh), here between the CPU
# backends: the replaying run counts where its own top-k differs (replay.csv), then routes as
# recorded. A recording of a different run (another seed) shows the replay takes effect: many
# flips, and router.csv's expert loads (the choice alone decides them) are the recording's.
echo "test_backends: routing recorded and replayed"
rt=(--set moe.jitter=0 --set moe.noise=0 --set train.steps=12 --set train.eval_every=6)
"$moe" train --out "$tmp/r-cpu" "${tiny[@]}" "${rt[@]}" --record-routing "$tmp/cpu.route" \
    > "$tmp/r.log" 2>&1
check "moe train --record-routing writes a recording" $? "$(tail -n 2 "$tmp/r.log")"
for dev in cpu cpu-fenced; do
    "$moe" train --out "$tmp/r-$dev-play" "${tiny[@]}" "${rt[@]}" --set train.device=$dev \
        --replay-routing "$tmp/cpu.route" > "$tmp/r.log" 2>&1 &&
        grep -q "differed in 0 of 6144 choices" "$tmp/r.log" &&
        [ "$(awk -F, 'NR > 1 && $3 == 0' "$tmp/r-$dev-play/replay.csv" | wc -l)" = 12 ] &&
        cmp -s <(no_speed "$tmp/r-cpu/train.csv") <(no_speed "$tmp/r-$dev-play/train.csv")
    check "$dev replays cpu's own routing: no flip in any of 12 steps, the same run bit for bit" \
        $? "$(tail -n 2 "$tmp/r.log")"
done
"$moe" train --out "$tmp/r-ref-play" "${tiny[@]}" "${rt[@]}" --set train.device=cpu-ref \
    --replay-routing "$tmp/cpu.route" > "$tmp/r.log" 2>&1 &&
    out=$(csv_close "$tmp/r-cpu/train.csv" "$tmp/r-ref-play/train.csv") &&
    grep -q "^routing replayed from .*(.* %)" "$tmp/r.log"
check "cpu-ref replays cpu's routing, reports its flip rate, and its losses agree within 2e-3" $? \
    "${out:-}$(tail -n 2 "$tmp/r.log")"
cols=$((6 + 4)) # step, layer, ..., load_0 .. load_3
"$moe" train --out "$tmp/r-seed" "${tiny[@]}" "${rt[@]}" --set train.seed=7 \
    --record-routing "$tmp/seed7.route" > "$tmp/r.log" 2>&1 &&
    "$moe" train --out "$tmp/r-forced" "${tiny[@]}" "${rt[@]}" \
        --replay-routing "$tmp/seed7.route" > "$tmp/r.log" 2>&1 &&
    cmp -s <(cut -d, -f1,2,7-$cols "$tmp/r-seed/router.csv") \
        <(cut -d, -f1,2,7-$cols "$tmp/r-forced/router.csv") &&
    ! cmp -s <(cut -d, -f1,2,7-$cols "$tmp/r-cpu/router.csv") \
        <(cut -d, -f1,2,7-$cols "$tmp/r-forced/router.csv") &&
    [ "$(awk -F, 'NR == 2 { print ($3 > 100) }' "$tmp/r-forced/replay.csv")" = 1 ]
check "another run's recording is obeyed: its expert loads, over 100 flips in step 1" $? \
    "$(head -n 3 "$tmp/r-forced/replay.csv" | tr '\n' ' ')$(tail -n 2 "$tmp/r.log")"
# mistakes: exit 2, a message naming the option, no run directory, the recording untouched
cp "$tmp/cpu.route" "$tmp/cpu.route.orig"
printf 'garbage' > "$tmp/bad.route"
head -c 40 "$tmp/cpu.route" > "$tmp/damaged.route" && printf '\x63\x00\x00\x00' >> "$tmp/damaged.route" &&
    tail -c +45 "$tmp/cpu.route" >> "$tmp/damaged.route"
replay_mistakes=("another top-k:--set moe.top_k=1 --replay-routing $tmp/cpu.route:recorded with"
                 "more steps than recorded:--set train.steps=20 --replay-routing $tmp/cpu.route:holds 24"
                 "expert choice:--set moe.routing=expert_choice --set moe.balance=none --replay-routing $tmp/cpu.route:token-choice"
                 "not a recording:--replay-routing $tmp/bad.route:not a routing recording"
                 "an expert out of range:--replay-routing $tmp/damaged.route:damaged"
                 "recording over a file:--record-routing $tmp/cpu.route:exists"
                 "both options:--record-routing $tmp/new.route --replay-routing $tmp/cpu.route:not both")
for entry in "${replay_mistakes[@]}"; do
    IFS=: read -r what opts want <<< "$entry"
    read -r -a opts <<< "$opts"
    rm -rf "$tmp/r-bad"
    "$moe" train --out "$tmp/r-bad" "${tiny[@]}" "${rt[@]}" "${opts[@]}" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    # a mistake found before training writes no run; one found inside the recording stops the
    # run at that step, as bad data would
    [ $rc -eq 2 ] && grep -q -- "$want" "$tmp/err" && cmp -s "$tmp/cpu.route" "$tmp/cpu.route.orig" &&
        { [ "$what" = "an expert out of range" ] || [ ! -e "$tmp/r-bad" ]; } && [ ! -e "$tmp/new.route" ]
    check "routing replay refuses $what: exit 2, saying so" $? "exit $rc: $(head -n 2 "$tmp/err")"
done
"$moe" train --resume "$tmp/r-cpu" --set train.steps=14 --replay-routing "$tmp/cpu.route" \
    > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "fresh run" "$tmp/err"
check "routing replay refuses --resume (a recording starts at step 0): exit 2" $? "exit $rc: $(cat "$tmp/err")"

finish
