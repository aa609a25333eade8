#!/usr/bin/env bash
# test_stability.sh: the settings and metrics of chapter 5 (stability) through `moe train`
# (run by `make test` with MOE_BIN set).
#
#   1. every backend of this build (cpu, cpu-ref, cpu-fenced) trains with all of them at once
#      (depth-scaled sandwich norms, TinyInit at half scale, a bf16 router, the aux loss over
#      the step's micro-batches and over groups of experts): cpu and cpu-fenced give the same
#      bits, cpu-ref the same losses within 2e-3
#   2. train.csv marks spikes (loss_spike, grad_spike: 0 or 1); router.csv has max_logit,
#      lse_mean and maxvio_group (> 0 with groups)
#   3. a resumed run is bit-exact with them on: 20 steps straight == 10 (--until) + --resume,
#      the spike columns included (the resumed run refills its window from train.csv)
#   4. divergence: a loss above train.diverge_loss (or not finite) ends the run with exit
#      status 3, the message naming the step, and train.csv's last row that step's loss
#   5. bad combinations exit 2 naming the keys, and create nothing
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1

data="$tmp/data"
"$moe" synth --out "$data" --tokens 40000 --seed 5 > /dev/null 2>&1 || {
    bad "synth"
    finish
}
tiny=(--set model.d_model=32 --set model.n_layer=3 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set train.batch=2 --set train.accum=2 --set train.warmup=3 --set train.eval_every=0
      --set train.ckpt_every=5 --set train.spike_window=4
      --set "data.train=$data/train.bin" --set "data.val=$data/val.bin")
methods=(--set model.norm=dssn --set model.init=tiny --set model.init_scale=0.5
         --set moe.router_precision=bf16 --set moe.balance_scope=global
         --set moe.balance_groups=2)

# ---- 1. every backend --------------------------------------------------------------------
echo "test_stability: every backend"
for dev in cpu cpu-ref cpu-fenced; do
    out=$("$moe" train --out "$tmp/$dev" --quiet "${tiny[@]}" "${methods[@]}" \
          --set train.steps=8 --set train.device=$dev 2>&1)
    rc=$?
    check "train.device=$dev trains with every method of chapter 5" $rc "exit $rc: $out"
done
cmp -s <(cut -d, -f1-6 "$tmp/cpu/train.csv") <(cut -d, -f1-6 "$tmp/cpu-fenced/train.csv")
check "cpu-fenced: the same train.csv losses and gradient norms as cpu, bit for bit" $?
worst=$(paste -d, "$tmp/cpu/train.csv" "$tmp/cpu-ref/train.csv" |
        awk -F, 'NR > 1 { d = $2 - $12; if (d < 0) d = -d; if (d > w) w = d } END { print w + 0 }')
float_cmp "$worst" "<" 2e-3
check "cpu-ref: every step's loss within 2e-3 of cpu's (largest difference $worst)" $?

# ---- 2. the metrics ----------------------------------------------------------------------
echo "test_stability: metrics"
h=$(head -n 1 "$tmp/cpu/train.csv")
flags=$(awk -F, 'NR > 1 && (($9 != 0 && $9 != 1) || ($10 != 0 && $10 != 1)) { bad++ }
                 END { print bad + 0 }' "$tmp/cpu/train.csv")
[ "$h" = "step,loss,aux_loss,z_loss,lr,grad_norm,tok_per_s,val_loss,loss_spike,grad_spike" ] &&
    [ "$flags" = 0 ]
check "train.csv ends with loss_spike and grad_spike, each 0 or 1" $? "header '$h', bad rows $flags"
cols=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                { m = $(c["max_logit"]); l = $(c["lse_mean"]); g = $(c["maxvio_group"])
                  if (m > 0 && l > 0 && g > 0) ok++; n++ }
                END { print ok + 0, n + 0 }' "$tmp/cpu/router.csv")
[ "$cols" = "24 24" ]
check "router.csv: max_logit, lse_mean and maxvio_group (2 groups) positive in all 24 rows" $? \
    "rows ok, rows: $cols"
# ---- 3. resume ---------------------------------------------------------------------------
echo "test_stability: resume"
long=(--set train.steps=20 --set train.lr=2e-2 --set train.spike_k=1)
"$moe" train --out "$tmp/straight" --quiet "${tiny[@]}" "${methods[@]}" "${long[@]}" > /dev/null 2>&1
"$moe" train --out "$tmp/split" --quiet --until 10 "${tiny[@]}" "${methods[@]}" "${long[@]}" \
    > /dev/null 2>&1
out=$("$moe" train --resume "$tmp/split" --quiet 2>&1)
rc=$?
check "--resume continues the run" $rc "exit $rc: $out"
cmp -s "$tmp/straight/ckpt.bin" "$tmp/split/ckpt.bin"
check "10 steps + --resume to 20 == 20 straight: ckpt.bin byte for byte" $?
cmp -s <(cut -d, -f1-6,9,10 "$tmp/straight/train.csv") <(cut -d, -f1-6,9,10 "$tmp/split/train.csv")
check "... and train.csv's losses, gradient norms and spike flags" $?
n=$(awk -F, 'NR > 1 { s += $9 + $10 } END { print s + 0 }' "$tmp/straight/train.csv")
[ "$n" -gt 0 ]
check "train.spike_k=1 marks spikes (so the comparison above compared some): $n" $?

# ---- 4. divergence -----------------------------------------------------------------------
echo "test_stability: divergence"
out=$("$moe" train --out "$tmp/div" --quiet "${tiny[@]}" --set train.steps=20 \
      --set train.diverge_loss=4 2>&1)
rc=$?
last=$(tail -n 1 "$tmp/div/train.csv" 2>/dev/null)
[ $rc -eq 3 ] && [[ $out == *"diverged: the training loss is "*" at step 1 (above train.diverge_loss)"* ]] &&
    [ "${last%%,*}" = 1 ] && float_cmp "$(echo "$last" | cut -d, -f2)" ">" 4
check "train.diverge_loss=4 (the first loss is ~5.5): exit 3 at step 1, its row in train.csv" $? \
    "exit $rc, last row '$last': $out"
out=$("$moe" train --out "$tmp/nan" --quiet "${tiny[@]}" --set train.steps=30 --set train.lr=1e30 \
      --set train.clip=0 --set train.warmup=0 2>&1)
rc=$?
[ $rc -eq 3 ] && [[ $out == *"not a finite number"* ]]
check "train.lr=1e30: the loss stops being a number, exit 3 says so" $? "exit $rc: $out"
out=$("$moe" train --resume "$tmp/div" --quiet --set train.diverge_loss=0 2>&1)
rc=$?
check "a diverged run resumes from its last checkpoint with another bound" $rc "exit $rc: $out"

# ---- 5. bad combinations -----------------------------------------------------------------
echo "test_stability: bad combinations"
while IFS='|' read -r sets want; do
    read -ra s <<< "$sets"
    args=()
    for kv in "${s[@]}"; do args+=(--set "$kv"); done
    out=$("$moe" train --out "$tmp/bad" --quiet "${tiny[@]}" "${args[@]}" 2>&1)
    rc=$?
    [ $rc -eq 2 ] && [[ $out == *"$want"* ]] && [ ! -e "$tmp/bad" ]
    check "$sets: exit 2 naming $want, nothing created" $? "exit $rc: $out"
done << 'EOF'
moe.balance_groups=3|moe.balance_groups=3 must be 0 (every expert) or a divisor >= 2
moe.balance_groups=1|moe.balance_groups=1 must be 0
moe.balance=seq_aux moe.balance_scope=global|moe.balance is not aux
moe.routing=expert_choice moe.balance=none moe.balance_groups=2|moe.balance is not aux
model.norm=post|model.norm expects one of pre|sandwich|dssn
model.init_scale=0|model.init_scale must be > 0
train.spike_window=1|train.spike_window must be >= 2
EOF

finish
