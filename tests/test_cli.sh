#!/usr/bin/env bash
# test_cli.sh: the `moe` command line end to end (run by `make test` with MOE_BIN set).
#
#   1. training: a tiny MoE run on synthetic data writes the whole run directory; the loss
#      falls well below the first step's and below the unigram entropy; router.csv has one
#      row per step and MoE layer with loads summing to 1; provenance.txt names the commit,
#      the shards' CRC-32s (checked against gzip's) and the threads; config.txt round-trips;
#      with OMP_PROC_BIND set, the threads keep every CPU as a place through moe's exec; a
#      memory budget (train.memory_gib) the run fits trains and reports its peak memory beside
#      the engine's table, one it does not fit is refused with exit 2 before anything is written
#   2. resume is bit-exact: 24 steps straight == 12 steps (--until) + --resume to 24, for
#      ckpt.bin (cmp) and the loss columns of train.csv, even with stale rows after the
#      checkpoint left behind as by a crash; also with aux-free balancing (its biases are in
#      the checkpoint), which lowers MaxVio against no balancing
#   3. bad input (command line, config, data, checkpoint) exits 2 with a message naming the
#      problem, and writes nothing: a new --out is not created, an existing run directory
#      keeps every file byte-identical (sha256sum before and after); among it model.vocab out
#      of range and shards of another vocabulary than model.vocab
#   4. eval, sample, export (safetensors header), info --ckpt and info --keys; --config NAME
#      of a preset (train, upcycle, import), a file of that name winning, info --presets
#   5. a dense model (moe.num_experts=0) trains and its router.csv holds only the header
#   6. shared experts (moe.num_shared=1): their tensors are in the checkpoint, all active
#   7. expert-choice routing (moe.routing=expert_choice) trains with equal loads in router.csv,
#      needs moe.balance=none, and its checkpoint evaluates with causal token-choice routing
#      (`moe eval --set moe.routing=token_choice`), the way to remove its look-ahead leak
#   8. capacity (moe.capacity_factor): router.csv's drop_frac is the mean of the per-expert
#      drops weighted by their loads, pad_frac is 0 unpadded and > 0 padded, padded and
#      unpadded runs are bit-identical, val_router.csv has a drop_frac, and the checkpoint
#      evaluates at another factor (`moe eval --set moe.eval_capacity_factor=...`); with
#      moe.second_expert_random=1 second experts drop and a resumed run stays bit-exact
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.
# Every model is tiny, so the whole script takes a few seconds, also under ASan.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
# one thread unless a check says otherwise
export OMP_NUM_THREADS=1

data="$tmp/data"
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set train.batch=4 --set "data.train=$data/train.bin" --set "data.val=$data/val.bin")

echo "test_cli: synthetic data"
out=$("$moe" synth --out "$data" --tokens 60000 --seed 3 2>&1)
rc=$?
[ $rc -eq 0 ] && [ -s "$data/train.bin" ] && [ -s "$data/val.bin" ]
check "synth writes train.bin and val.bin" $? "exit $rc: $out"

# ---- 1. training ------------------------------------------------------------------------
echo "test_cli: training"
run="$tmp/run"
out=$("$moe" train --out "$run" "${tiny[@]}" --set train.steps=40 --set train.lr=1e-2 \
      --set train.warmup=5 --set train.eval_every=10 --quiet 2>&1)
rc=$?
check "train exits 0" $rc "exit $rc: $out"
missing=""
for f in config.txt provenance.txt train.csv router.csv domains.csv val_router.csv ckpt.bin; do
    [ -s "$run/$f" ] || missing="$missing $f"
done
[ -z "$missing" ]
check "run directory holds config.txt provenance.txt train.csv router.csv domains.csv val_router.csv ckpt.bin" \
    $? "missing or empty:$missing"

prov="$run/provenance.txt"
# the payload's CRC-32 (everything after the 256-byte header), as gzip's trailer holds it
payload_crc() { tail -c +257 "$1" | gzip -c | tail -c 8 | od -An -tx4 -N4 | tr -d ' '; }
crc_train=$(payload_crc "$data/train.bin")
crc_val=$(payload_crc "$data/val.bin")
grep -Eq '^commit = [^ ]+' "$prov" && grep -q "crc32=$crc_train" "$prov" &&
    grep -q "crc32=$crc_val" "$prov" && grep -q '^threads = 1$' "$prov" &&
    grep -Eq '^blas = OpenBLAS, [A-Za-z0-9_]+ kernels' "$prov"
check "provenance.txt: commit, crc32=$crc_train and crc32=$crc_val of the shards, threads = 1, OpenBLAS's kernels" \
    $? "$(tr '\n' '|' < "$prov")"

# threads bound to places (OMP_PROC_BIND, as chapter 3's Slurm scripts set): libgomp binds the
# first thread as it loads, and moe's exec of itself (OMP_WAIT_POLICY) must not leave the new
# process only that thread's one CPU to place its threads on. On a machine of one CPU both
# give 1, and the check cannot tell
env -u OMP_WAIT_POLICY OMP_PROC_BIND=true OMP_PLACES=threads "$moe" train --out "$tmp/bound" \
    "${tiny[@]}" --set train.steps=2 --set train.warmup=1 --set train.eval_every=2 --quiet > /dev/null 2>&1
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
grep -qx "omp_places = $cpus" "$tmp/bound/provenance.txt"
check "OMP_PROC_BIND=true OMP_PLACES=threads: the run's threads have all $cpus CPUs as places" $? \
    "$(grep -E '^(threads|omp_places) ' "$tmp/bound/provenance.txt" 2>&1)"

# train.csv: 40 rows, steps 1..40, val_loss exactly at the eval steps 10 20 30 40
shape=$(awk -F, 'NR > 1 { n++; if ($1 != n) bad = 1; if ($8 != "") v = v $1 " " }
                 END { print n, bad + 0, v }' "$run/train.csv")
[ "$shape" = "40 0 10 20 30 40 " ]
check "train.csv: steps 1..40, val_loss at steps 10 20 30 40" $? "got '$shape'"

first=$(awk -F, 'NR == 2 { print $2 }' "$run/train.csv")
last_val=$(awk -F, 'NR > 1 && $8 != "" { v = $8 } END { print v }' "$run/train.csv")
unigram=$(sed -n 's/.*unigram entropy of the training data \([0-9.]*\) nats.*/\1/p' <<< "$out")
[ -n "$first" ] && [ -n "$last_val" ] && float_cmp "$last_val" "<" "$first - 1.5"
check "final val_loss $last_val is well below the first step's loss $first" $? "not by 1.5 nats"
[ -n "$unigram" ] && [ -n "$last_val" ] && float_cmp "$last_val" "<" "$unigram - 0.5"
check "final val_loss $last_val is below the unigram entropy $unigram" $? "done line: $out"

# a process's memory budget: the same model within it trains and reports its peak; under it,
# exit 2 before anything is written, the message giving the need and what to shard
out=$("$moe" train --out "$tmp/budget" "${tiny[@]}" --set train.steps=2 --set train.warmup=1 \
      --set train.memory_gib=1 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -Eq "^memory: the steps' peak resident [0-9.]+ MiB .*with the start and the checkpoints [0-9.]+ MiB .*the engine's table of a process [0-9.]+ MiB" <<< "$out"
check "train.memory_gib=1: trains and reports its peak resident memory beside the engine's table" $? "exit $rc: $out"
out=$("$moe" train --out "$tmp/over" "${tiny[@]}" --set train.steps=2 --set train.warmup=1 \
      --set train.memory_gib=0.001 2>&1)
rc=$?
[ $rc -eq 2 ] && [ ! -e "$tmp/over" ] &&
    grep -Eq "more than train.memory_gib=0.001 \(1.0 MiB\): spread it over more processes \(dist.tp, dist.pp, dist.zero, dist.ep" <<< "$out"
check "train.memory_gib=0.001, under the model's need: exit 2, nothing written, what to shard" $? "exit $rc: $out"

# router.csv: 4 load columns; one row per step per MoE layer (2 layers); loads sum to 1
header=$(head -n 1 "$run/router.csv")
[ "$header" = "step,layer,maxvio,cv,entropy,drop_frac,load_0,load_1,load_2,load_3,bias_0,bias_1,bias_2,bias_3,top1_score,drop_0,drop_1,drop_2,drop_3,pad_frac,expert_sim,max_logit,lse_mean,maxvio_group" ]
check "router.csv header names load_0..load_3, bias_0..bias_3, top1_score, drop_0..drop_3, pad_frac, expert_sim, max_logit, lse_mean, maxvio_group" $? "got '$header'"
# dropless (the default): drop_frac, every drop_e and pad_frac are 0
rows=$(awk -F, 'NR > 1 { n++; want_step = int((n + 1) / 2); want_layer = (n + 1) % 2
                         if ($1 != want_step || $2 != want_layer || NF != 24) bad++
                         if ($6 != 0) bad++; for (i = 16; i <= 20; i++) if ($i != 0) bad++
                         s = 0; for (i = 7; i <= 10; i++) s += $i
                         if (s < 0.999 || s > 1.001) bad++
                         for (i = 11; i <= 14; i++) if ($i != 0) bad++
                         if ($15 < 0.25 || $15 > 1) bad++    # top-1 of 4 softmax scores
                         if ($21 <= -1 || $21 >= 0.5) bad++   # random experts: far from copies
                         # the largest |logit| m is positive, and the logsumexp of a row lies
                         # between its largest logit (>= -m) and that plus ln 4 (<= m + ln 4);
                         # one process, no groups: maxvio_group 0
                         if ($22 <= 0 || $23 < -$22 || $23 > $22 + log(4) || $24 != 0) bad++ }
                END { print n, bad + 0 }' "$run/router.csv")
[ "$rows" = "80 0" ]
check "router.csv: 80 rows (40 steps x layers 0,1), loads sum to 1, biases 0 (balance=aux), top-1 score in [1/4, 1], no drops, expert_sim of random experts < 0.5, max_logit m > 0, lse_mean in [-m, m + ln 4], maxvio_group 0" $? \
    "rows, bad rows: $rows"

# domains.csv: at each eval step, for each layer and each of the 3 synthetic domains (the
# validation windows are spread over the whole shard, so every domain is evaluated), one row
# per expert and fractions summing to 1
dom=$(awk -F, 'NR > 1 { g = $1 "," $2 "," $3; s[g] += $5; c[g]++; steps[$1] = 1 }
               END { for (g in s) { n++; if (s[g] < 0.999 || s[g] > 1.001 || c[g] != 4) bad++ }
                     for (t in steps) m++
                     print m + 0, n + 0, bad + 0 }' \
      "$run/domains.csv")
[ "$dom" = "4 24 0" ]
check "domains.csv: 4 evals x 2 layers x 3 domains, 4 fractions summing to 1" $? \
    "evals, groups, bad groups: $dom"

# val_router.csv: at each eval step, one row per MoE layer with the loads over the whole
# validation set (summing to 1) and their MaxVio = (max - mean) / mean, mean = 1/4
header=$(head -n 1 "$run/val_router.csv")
vr=$(awk -F, 'NR > 1 { n++; if (NF != 9 || $1 % 10 != 0 || ($2 != 0 && $2 != 1) || $9 != 0) bad++
                       s = 0; mx = 0; for (i = 5; i <= 8; i++) { s += $i; if ($i > mx) mx = $i }
                       if (s < 0.999 || s > 1.001) bad++
                       d = $3 - (mx - 0.25) / 0.25; if (d > 1e-4 || d < -1e-4) bad++ }
              END { print n + 0, bad + 0 }' "$run/val_router.csv")
[ "$header" = "step,layer,maxvio,cv,load_0,load_1,load_2,load_3,drop_frac" ] && [ "$vr" = "8 0" ]
check "val_router.csv: 4 evals x 2 layers, loads sum to 1, maxvio of the loads, drop_frac 0" $? \
    "header '$header', rows, bad rows: $vr"

# config.txt round-trips: training from it (plus two changes) writes the same settings back
rt="$tmp/roundtrip"
out=$("$moe" train --config "$run/config.txt" --set train.steps=6 --set train.warmup=2 \
      --out "$rt" --quiet 2>&1)
rc=$?
if [ $rc -ne 0 ]; then bad "train --config run/config.txt: exit $rc: $out"; else
    d=$(diff <(grep -v -e '^train.steps =' -e '^train.warmup =' "$run/config.txt") \
             <(grep -v -e '^train.steps =' -e '^train.warmup =' "$rt/config.txt"))
    [ -z "$d" ] && grep -q '^train.steps = 6$' "$rt/config.txt" &&
        [ "$(wc -l < "$rt/config.txt")" = "$(wc -l < "$run/config.txt")" ]
    check "config.txt round-trips through --config (only the --set keys differ)" $? "$d"
fi
# and by itself it reproduces the run exactly: the same settings, the same checkpoint
rt="$tmp/rerun"
out=$("$moe" train --config "$run/config.txt" --out "$rt" --quiet 2>&1)
rc=$?
[ $rc -eq 0 ] && cmp -s "$run/config.txt" "$rt/config.txt" && cmp -s "$run/ckpt.bin" "$rt/ckpt.bin"
check "train --config run/config.txt alone reproduces config.txt and ckpt.bin" $? "exit $rc: $out"

# ---- 2. resume ----------------------------------------------------------------------------
echo "test_cli: resume"
resume_cfg=("${tiny[@]}" --set train.steps=24 --set train.warmup=4 --set train.eval_every=6
            --set train.ckpt_every=0 --set train.lr=1e-2)
A="$tmp/A"
B="$tmp/B"
outa=$(OMP_NUM_THREADS=2 "$moe" train --out "$A" "${resume_cfg[@]}" --quiet 2>&1)
rca=$?
outb=$(OMP_NUM_THREADS=2 "$moe" train --out "$B" "${resume_cfg[@]}" --until 12 --quiet 2>&1)
rcb=$?
[ $rca -eq 0 ] && [ $rcb -eq 0 ]
check "24 straight steps and 12 steps with --until exit 0" $? "exit $rca: $outa / exit $rcb: $outb"
step=$("$moe" info --ckpt "$B/ckpt.bin" 2>&1 | sed -n 's/^step //p')
rows=$(awk 'END { print NR - 1 }' "$B/train.csv")
[ "$step" = 12 ] && [ "$rows" = 12 ]
check "--until 12 stops with a step-12 checkpoint and 12 rows" $? "step '$step', $rows rows"
# rows written after the checkpoint (as by a crash) must be dropped on resume
echo "13,9.999999,9.999999,9.999999,0.001,1,1,9.999999" >> "$B/train.csv"
echo "13,0,0,0,0,0,0.25,0.25,0.25,0.25" >> "$B/router.csv"
out=$(OMP_NUM_THREADS=2 "$moe" train --resume "$B" --quiet 2>&1)
rc=$?
check "train --resume continues to step 24" $rc "exit $rc: $out"
cmp_out=$(cmp "$A/ckpt.bin" "$B/ckpt.bin" 2>&1)
check "resumed ckpt.bin is bit-identical to the straight run's" $? "$cmp_out"
d=$(diff <(cut -d, -f1-4 "$A/train.csv") <(cut -d, -f1-4 "$B/train.csv"))
[ -z "$d" ] && [ "$(wc -l < "$A/train.csv")" = 25 ]
check "train.csv loss columns identical row for row (24 rows)" $? "$(head -n 6 <<< "$d")"
d=$(diff <(cut -d, -f1-6 "$A/router.csv") <(cut -d, -f1-6 "$B/router.csv"))
check "router.csv identical after resume (stale row dropped)" $? "$(head -n 6 <<< "$d")"
cmp -s "$A/val_router.csv" "$B/val_router.csv" && [ "$(wc -l < "$A/val_router.csv")" = 9 ]
check "val_router.csv identical after resume (4 evals x 2 layers)" $? \
    "$(diff "$A/val_router.csv" "$B/val_router.csv" | head -n 4)"
grep -q '^resumed_at_step = 12$' "$B/provenance.txt"
check "provenance.txt records resumed_at_step = 12" $? "$(tr '\n' '|' < "$B/provenance.txt")"

# the same with aux-free balancing and router noise: the per-expert biases and the noise
# stream live outside the parameters and must travel through the checkpoint for the resumed
# run to route the same way
free_cfg=("${resume_cfg[@]}" --set moe.balance=aux_free --set moe.bias_rate=0.01
          --set moe.jitter=0.05 --set moe.noise=0.1)
FA="$tmp/A_free"
FB="$tmp/B_free"
outa=$(OMP_NUM_THREADS=2 "$moe" train --out "$FA" "${free_cfg[@]}" --quiet 2>&1)
rca=$?
outb=$(OMP_NUM_THREADS=2 "$moe" train --out "$FB" "${free_cfg[@]}" --until 12 --quiet 2>&1 &&
       OMP_NUM_THREADS=2 "$moe" train --resume "$FB" --quiet 2>&1)
rcb=$?
cmp_out=$(cmp "$FA/ckpt.bin" "$FB/ckpt.bin" 2>&1)
[ $rca -eq 0 ] && [ $rcb -eq 0 ] && [ -z "$cmp_out" ] && cmp -s "$FA/router.csv" "$FB/router.csv"
check "aux_free + noise: 12 steps + --resume to 24 equals 24 straight (ckpt.bin, router.csv)" $? \
    "exit $rca: $outa / exit $rcb: $outb / $cmp_out"
nz=$(awk -F, 'NR > 1 { for (i = 11; i <= 14; i++) if ($i != 0) n++ } END { print n + 0 }' \
     "$FA/router.csv")
[ "$nz" -gt 0 ]
check "aux_free: router.csv bias columns move away from 0" $? "no non-zero bias"
# evaluation runs without the noise: `moe eval` (never noisy) reproduces the run's val_loss
ev=$("$moe" eval --ckpt "$FA/ckpt.bin" 2>&1 | sed -n 's/^val_loss \([0-9.]*\).*/\1/p')
lv=$(awk -F, 'NR > 1 && $8 != "" { v = $8 } END { print v }' "$FA/train.csv")
[ -n "$ev" ] && [ -n "$lv" ] && float_cmp "($ev - $lv)^2" "<" "1e-12"
check "noise is off in evaluation: eval val_loss $ev = the run's last val_loss $lv" $? "differ"

# aux-free balancing balances: over the second half of a 40-step run, the mean MaxVio (from
# router.csv) is lower than without any balancing, for both bias rules
bal_cfg=("${tiny[@]}" --set train.steps=40 --set train.warmup=5 --set train.eval_every=0
         --set train.lr=1e-2)
mean_maxvio() { awk -F, 'NR > 1 && $1 > 20 { s += $3; n++ } END { if (n) printf "%.4f", s / n }' "$1"; }
"$moe" train --out "$tmp/bal_none" "${bal_cfg[@]}" --set moe.balance=none --quiet > /dev/null 2>&1
"$moe" train --out "$tmp/bal_sign" "${bal_cfg[@]}" --set moe.balance=aux_free \
    --set moe.bias_rate=0.005 --quiet > /dev/null 2>&1
"$moe" train --out "$tmp/bal_prop" "${bal_cfg[@]}" --set moe.balance=aux_free \
    --set moe.bias_update=proportional --set moe.bias_rate=0.01 --quiet > /dev/null 2>&1
v_none=$(mean_maxvio "$tmp/bal_none/router.csv")
v_sign=$(mean_maxvio "$tmp/bal_sign/router.csv")
v_prop=$(mean_maxvio "$tmp/bal_prop/router.csv")
[ -n "$v_none" ] && [ -n "$v_sign" ] && [ -n "$v_prop" ] && float_cmp "$v_sign" "<" "$v_none" &&
    float_cmp "$v_prop" "<" "$v_none"
check "aux_free lowers MaxVio: sign $v_sign, proportional $v_prop < none $v_none (steps 21-40)" \
    $? "no balancing did as well"

# ---- 3. bad input -------------------------------------------------------------------------
echo "test_cli: bad input"
bad_out="$tmp/never"  # a run directory no rejected command may create
# reject LABEL PATTERNS COMMAND...: ok when COMMAND exits 2, prints nothing on stdout, its
# stderr matches every ;-separated ERE of PATTERNS (ignoring case) and $bad_out is absent
reject() {
    local label=$1 patterns=$2 rc p why=""
    shift 2
    "$@" > "$tmp/stdout" 2> "$tmp/stderr"
    rc=$?
    [ $rc -eq 2 ] || why="exit $rc, expected 2;"
    [ -s "$tmp/stdout" ] && why="$why wrote to stdout: $(head -c 200 "$tmp/stdout");"
    IFS=';' read -ra pats <<< "$patterns"
    for p in "${pats[@]}"; do
        grep -Eqi -- "$p" "$tmp/stderr" || why="$why message lacks /$p/;"
    done
    [ -e "$bad_out" ] && { why="$why created $bad_out;"; rm -rf "$bad_out"; }
    if [ -z "$why" ]; then ok "$label: $(head -n 1 "$tmp/stderr" | cut -c 1-110)"
    else bad "$label: $why stderr: $(head -n 1 "$tmp/stderr")"; fi
}
T=(train --out "$bad_out" "${tiny[@]}" --set train.steps=4 --set train.warmup=1)

reject "unknown key suggests the nearest" "moe\.topk;moe\.top_k" \
    "$moe" "${T[@]}" --set moe.topk=2
reject "wrong type" "model\.n_layer;abc" "$moe" "${T[@]}" --set model.n_layer=abc
reject "out of range" "train\.lr;-1" "$moe" "${T[@]}" --set train.lr=-1
reject "top_k > num_experts" "moe\.top_k;moe\.num_experts" \
    "$moe" "${T[@]}" --set moe.top_k=5
reject "unknown balance method lists the choices" "moe\.balance;aux\|seq_aux\|aux_free\|none" \
    "$moe" "${T[@]}" --set moe.balance=switch
reject "topk_before_softmax with sigmoid scores" "moe\.topk_before_softmax;moe\.score=softmax" \
    "$moe" "${T[@]}" --set moe.score=sigmoid --set moe.topk_before_softmax=1
reject "moe.n_group not dividing the experts" "moe\.n_group=3;divisor;moe\.num_experts=4" \
    "$moe" "${T[@]}" --set moe.n_group=3
reject "moe.n_group of one expert a group" "moe\.n_group=4;two best;moe\.n_group=2" \
    "$moe" "${T[@]}" --set moe.n_group=4
reject "moe.topk_group above moe.n_group" "moe\.topk_group=3;moe\.n_group=2" \
    "$moe" "${T[@]}" --set moe.n_group=2 --set moe.topk_group=3
reject "moe.topk_group without moe.n_group" "moe\.topk_group=1;moe\.n_group" \
    "$moe" "${T[@]}" --set moe.topk_group=1
reject "moe.top_k more than the kept groups hold" "moe\.top_k=3;moe\.topk_group=1;2 in all" \
    "$moe" "${T[@]}" --set moe.n_group=2 --set moe.topk_group=1 --set moe.top_k=3
reject "moe.n_group with expert choice" "moe\.n_group;moe\.routing=expert_choice" \
    "$moe" "${T[@]}" --set moe.n_group=2 --set moe.routing=expert_choice --set moe.balance=none
reject "moe.n_group not a multiple of dist.ep" "moe\.n_group=3;dist\.ep=2;multiple of dist\.ep" \
    "$moe" "${T[@]}" --set moe.num_experts=6 --set moe.n_group=3 --set dist.ep=2
reject "dist.dispatch=tokens with padded experts" "dist\.dispatch=tokens;moe\.padded=1;moe\.padded=0" \
    "$moe" "${T[@]}" --set dist.ep=2 --set dist.dispatch=tokens --set moe.capacity_factor=1 --set moe.padded=1
reject "dist.dispatch not rows or tokens" "dist\.dispatch;rows|tokens" \
    "$moe" "${T[@]}" --set dist.dispatch=token
reject "d_model not divisible by n_head" "model\.d_model;model\.n_head" \
    "$moe" "${T[@]}" --set model.n_head=3
reject "kv_heads not dividing n_head" "model\.kv_heads=3;model\.n_head" \
    "$moe" "${T[@]}" --set model.kv_heads=3
reject "an odd head_dim" "model\.head_dim=7;RoPE" "$moe" "${T[@]}" --set model.head_dim=7
reject "latent widths without latent attention" "mla\.\*;model\.attention=mla" \
    "$moe" "${T[@]}" --set mla.kv_rank=8
reject "latent attention without its widths" "model\.attention=mla;mla\.kv_rank" \
    "$moe" "${T[@]}" --set model.attention=mla
reject "latent attention with grouped heads" "model\.attention=mla;model\.kv_heads" \
    "$moe" "${T[@]}" --set model.attention=mla --set mla.kv_rank=8 --set mla.rope_dim=4 \
    --set mla.v_dim=8 --set model.kv_heads=1
reject "unknown qk_norm lists the choices" "model\.qk_norm;none\|head\|full" \
    "$moe" "${T[@]}" --set model.qk_norm=layer
reject "model.mtp_depth out of range" "model\.mtp_depth;<= 8;got 9" \
    "$moe" "${T[@]}" --set model.mtp_depth=9
reject "a negative model.mtp_coef" "model\.mtp_coef;>= 0;-0\.5" \
    "$moe" "${T[@]}" --set model.mtp_depth=1 --set model.mtp_coef=-0.5
reject "model.mtp_depth leaving its last module no target" \
    "model\.mtp_depth=4;model\.seq_len=4;lower model\.mtp_depth" \
    "$moe" "${T[@]}" --set model.mtp_depth=4 --set model.seq_len=4
reject "missing data file" "/nonexistent;make data" \
    "$moe" "${T[@]}" --set data.train=/nonexistent
head -c 30000 "$data/train.bin" > "$tmp/cut.bin"
reject "truncated data file" "cut\.bin;truncated" "$moe" "${T[@]}" --set "data.train=$tmp/cut.bin"
cp "$data/val.bin" "$tmp/magic.bin"
printf 'NOTASHRD' | dd of="$tmp/magic.bin" conv=notrunc status=none
reject "data file with a bad magic" "magic.bin;magic" \
    "$moe" "${T[@]}" --set "data.val=$tmp/magic.bin"
# model.vocab: its range, and shards of its vocabulary alone (synth --vocab writes others)
reject "model.vocab below 2" "model\.vocab;>= 2;got 1" "$moe" "${T[@]}" --set model.vocab=1
reject "model.vocab above 2^24" "model\.vocab;<= 16777216" \
    "$moe" "${T[@]}" --set model.vocab=16777217
"$moe" synth --out "$tmp/v300" --tokens 5000 --vocab 300 > /dev/null 2>&1
reject "a shard of another vocabulary than model.vocab" \
    "v300/train\.bin;vocabulary of 300;model\.vocab=256;train with model\.vocab=300" \
    "$moe" "${T[@]}" --set "data.train=$tmp/v300/train.bin"
reject "model.vocab=300 with a byte validation shard" \
    "data\.val;val\.bin;vocabulary of 256 \(bytes\);model\.vocab=300" \
    "$moe" "${T[@]}" --set model.vocab=300 --set "data.train=$tmp/v300/train.bin"
reject "synth --vocab below the bytes" "--vocab;\[256, 16777216\];100" \
    "$moe" synth --out "$bad_out" --vocab 100
printf 'model.d_model = 32\nmodel.n_layr = 2\n' > "$tmp/typo.txt"
reject "config file with a typo names file, line and key" "typo\.txt:2;model\.n_layer" \
    "$moe" train --out "$bad_out" --config "$tmp/typo.txt"
reject "unknown command" "unknown command;frobnicate" "$moe" frobnicate
reject "unknown option" "unknown option;--bogus" "$moe" "${T[@]}" --bogus
reject "missing option value" "--set;value" "$moe" train --out "$bad_out" --set
reject "option of another command" "unknown option;--tokens" "$moe" "${T[@]}" --tokens 5

# an existing run directory must survive every rejected command byte for byte
# reject_keeps LABEL DIR PATTERNS COMMAND...
reject_keeps() {
    local label=$1 dir=$2 patterns=$3 before after
    shift 3
    before=$(snapshot "$dir")
    reject "$label" "$patterns" "$@"
    after=$(snapshot "$dir")
    [ "$before" = "$after" ]
    check "$label: every file of ${dir##*/} unchanged" $? \
        "$(diff <(echo "$before") <(echo "$after") | head -n 4)"
}
reject_keeps "train --out into an existing run" "$run" "already holds a run;--resume" \
    "$moe" train --out "$run" "${tiny[@]}" --set train.steps=4 --set train.warmup=1
nockpt="$tmp/nockpt"
mkdir -p "$nockpt"
cp "$run/train.csv" "$nockpt/"
reject_keeps "--resume of a directory without a checkpoint or config.txt" "$nockpt" "ckpt\.bin;config\.txt" \
    "$moe" train --resume "$nockpt"
reject_keeps "--resume with a shape-changing --set" "$A" "d_model;shape" \
    "$moe" train --resume "$A" --set model.d_model=64 --set train.steps=30
reject_keeps "--resume of a finished run" "$A" "already at step 24;train\.steps" \
    "$moe" train --resume "$A"
sz=$(wc -c < "$run/ckpt.bin")
mid=$((sz / 2))
cp -r "$run" "$tmp/damaged"
# flip a byte in the middle: write its complement, so the copy differs whatever it held
byte=$(od -An -tu1 -j "$mid" -N1 "$run/ckpt.bin" | tr -d ' ')
printf "\\$(printf '%03o' $((255 - byte)))" |
    dd of="$tmp/damaged/ckpt.bin" bs=1 seek="$mid" conv=notrunc status=none
cmp -s "$run/ckpt.bin" "$tmp/damaged/ckpt.bin"
[ $? -eq 1 ]
check "the damaged copy differs from ckpt.bin in one byte" $? "cmp found no difference"
reject_keeps "--resume of a corrupted checkpoint" "$tmp/damaged" "checksum|corrupt" \
    "$moe" train --resume "$tmp/damaged" --set train.steps=50
reject "eval of a corrupted checkpoint" "checksum|corrupt" \
    "$moe" eval --ckpt "$tmp/damaged/ckpt.bin"
head -c $((sz - 1000)) "$run/ckpt.bin" > "$tmp/short.bin"
reject "eval of a truncated checkpoint" "short\.bin;truncated" "$moe" eval --ckpt "$tmp/short.bin"
reject "eval of a missing checkpoint" "nope\.bin" "$moe" eval --ckpt "$tmp/nope.bin"
reject "a shard is not a checkpoint" "not a moe\.c checkpoint|magic" \
    "$moe" info --ckpt "$data/train.bin"
reject "export of a corrupted checkpoint" "checksum|corrupt" \
    "$moe" export --ckpt "$tmp/damaged/ckpt.bin" --out "$tmp/bad.safetensors"
[ ! -e "$tmp/bad.safetensors" ]
check "export of a corrupted checkpoint writes no file" $? "$tmp/bad.safetensors exists"

# ---- 4. the other commands ----------------------------------------------------------------
echo "test_cli: eval, sample, export, info"
out=$("$moe" eval --ckpt "$run/ckpt.bin" 2>&1)
rc=$?
ev=$(sed -n 's/^val_loss \([0-9.]*\).*/\1/p' <<< "$out")
[ $rc -eq 0 ] && [ -n "$ev" ] && float_cmp "($ev - $last_val)^2" "<" "1e-6"
check "eval val_loss $ev matches the run's last val_loss $last_val" $? "exit $rc: $out"

"$moe" sample --ckpt "$run/ckpt.bin" --tokens 50 --seed 1 > "$tmp/s1" 2> "$tmp/s1.err"
rc1=$?
"$moe" sample --ckpt "$run/ckpt.bin" --tokens 50 --seed 1 > "$tmp/s2" 2>&1
"$moe" sample --ckpt "$run/ckpt.bin" --tokens 50 --seed 2 > "$tmp/s3" 2>&1
n=$(wc -c < "$tmp/s1")
# the (short) default prompt, 50 sampled bytes, a final newline
[ $rc1 -eq 0 ] && [ "$n" -ge 51 ] && [ "$n" -le 60 ]
check "sample --tokens 50 prints 50 tokens" $? "exit $rc1, $n bytes: $(head -c 200 "$tmp/s1.err")"
cmp -s "$tmp/s1" "$tmp/s2"
check "sample: the same seed gives the same text" $? "two runs with --seed 1 differ"
! cmp -s "$tmp/s1" "$tmp/s3"
check "sample: another seed gives other text" $? "--seed 1 and --seed 2 agree"
out=$("$moe" sample --ckpt "$run/ckpt.bin" --prompt "abc" --tokens 5 --temperature 0 2>&1)
[ "${out:0:3}" = abc ] && [ ${#out} -ge 8 ]
check "sample --prompt starts with the prompt" $? "got '$out'"

st="$tmp/model.safetensors"
out=$("$moe" export --ckpt "$run/ckpt.bin" --out "$st" 2>&1)
rc=$?
check "export exits 0" $rc "exit $rc: $out"
# first 8 bytes: the JSON header length, little-endian u64
hlen=$(od -An -tu1 -N8 "$st" 2>/dev/null |
    awk '{ v = 0; for (i = NF; i >= 1; i--) v = v * 256 + $i; print v }')
size=$(wc -c < "$st" 2>/dev/null || echo 0)
total=$("$moe" info --ckpt "$run/ckpt.bin" 2>/dev/null | sed -n 's/^parameters: \([0-9]*\) total.*/\1/p')
# the header may be padded with spaces (to align the data)
json=$(head -c $((8 + ${hlen:-0})) "$st" 2>/dev/null | tail -c "${hlen:-0}" | sed 's/ *$//')
[ -n "$hlen" ] && [ "$hlen" -gt 0 ] && [ "$hlen" -lt "$size" ] && [ "${json:0:1}" = "{" ] &&
    [ "${json: -1}" = "}" ]
check "safetensors: 8-byte header length $hlen, then a JSON object" $? "header '${json:0:80}'"
missing=""
for name in tok_emb layers.0.attn.wq layers.1.moe.w_gate head; do
    grep -q "\"$name\":{\"dtype\":\"F32\"" <<< "$json" || missing="$missing $name"
done
[ -z "$missing" ]
check "safetensors header names tok_emb, layers.0.attn.wq, layers.1.moe.w_gate, head as F32" $? \
    "missing:$missing"
[ -n "$total" ] && [ "$size" -eq $((8 + hlen + 4 * total)) ]
check "safetensors size = 8 + header + 4 x $total parameters" $? "$size bytes, header $hlen"

out=$("$moe" info --ckpt "$run/ckpt.bin" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q '^step 40$' <<< "$out" && grep -q '^blocks: moe moe$' <<< "$out"
check "info: step 40, blocks moe moe" $? "exit $rc: $(head -n 4 <<< "$out" | tr '\n' '|')"
read -r tot act <<< "$(sed -n 's/^parameters: \([0-9]*\) total, \([0-9]*\) active.*/\1 \2/p' <<< "$out")"
ptot=${tot:-0}
pact=${act:-0}
# the tensor list: "name  dims  (count)"; the counts add up to the total; a token skips
# E - K = 2 of the 4 experts' three 32 x 32 matrices in each of the 2 MoE layers
sum=$(awk '/^\[tensors\]/ { on = 1; next } on && /\(/ { gsub(/[()]/, "", $NF); s += $NF; n++ }
           END { print s + 0, n + 0 }' <<< "$out")
[ -n "${tot:-}" ] && [ "$sum" = "$tot 23" ] && [ "${act:-0}" -eq $((tot - 2 * 2 * 3 * 32 * 32)) ]
check "info: parameters $tot total, ${act:-?} active (< total), 23 tensors summing to the total" \
    $? "tensor sum, count: $sum"
grep -Eq '^layers\.0\.moe\.w_gate +4 x 32 x 32 ' <<< "$out" && grep -q '^tok_emb ' <<< "$out"
check "info lists tensors with shapes (layers.0.moe.w_gate 4 x 32 x 32)" $? "$out"

keys=$("$moe" info --keys 2>&1)
rc=$?
missing=""
for k in $(sed -n 's/^\([a-z_.]*\) = .*/\1/p' "$run/config.txt"); do
    grep -Eq "^ *$k " <<< "$keys" || missing="$missing $k"
done
nkeys=$(grep -c = "$run/config.txt")
[ $rc -eq 0 ] && [ -z "$missing" ] && grep -q 'model\.d_model' <<< "$keys" &&
    grep -q 'train\.ckpt_every' <<< "$keys"
check "info --keys lists every key of config.txt ($nkeys keys)" $? \
    "exit $rc, missing:$missing"

# --config NAME: a preset's settings when no file NAME exists; the file when one does
echo "test_cli: presets"
pre="$tmp/preset"
small_over=(--set model.d_model=32 --set model.n_head=2 --set model.seq_len=32
            --set moe.d_expert=32 --set train.steps=1 --set train.warmup=0
            --set "data.train=$data/train.bin" --set "data.val=$data/val.bin" --quiet)
out=$("$moe" train --config tiny "${small_over[@]}" --out "$pre" 2>&1)
rc=$?
# tiny's own d_ff and batch (not the defaults 512 and 16), the --set after it winning
[ $rc -eq 0 ] && grep -qx 'model.d_ff = 1024' "$pre/config.txt" &&
    grep -qx 'train.batch = 8' "$pre/config.txt" && grep -qx 'model.n_layer = 4' "$pre/config.txt" &&
    grep -qx 'moe.num_experts = 8' "$pre/config.txt" && grep -qx 'model.d_model = 32' "$pre/config.txt"
check "train --config tiny: config.txt has the preset's d_ff 1024 and batch 8, --set on top" $? \
    "exit $rc: $out"
mkdir -p "$tmp/cwd" && printf 'model.n_layer = 1\n' > "$tmp/cwd/tiny"
out=$(cd "$tmp/cwd" && "$moe" train --config tiny "${small_over[@]}" --out "$pre-file" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -qx 'model.n_layer = 1' "$pre-file/config.txt" &&
    grep -qx 'train.batch = 16' "$pre-file/config.txt"
check "train --config tiny with a file tiny in the current folder reads the file" $? "exit $rc: $out"
out=$("$moe" train --config tinyy "${small_over[@]}" --out "$pre-bad" 2>&1)
rc=$?
[ $rc -eq 2 ] && [ ! -e "$pre-bad" ] &&
    grep -q 'no file tinyy and no preset tinyy; the presets are: tiny, tiny-dense, small' <<< "$out" &&
    grep -q 'gpu-medium' <<< "$out"
check "train --config of neither a file nor a preset: exit 2, the presets listed, nothing written" \
    $? "exit $rc: $out"
out=$("$moe" info --presets 2>&1)
rc=$?
missing=""
for p in tiny tiny-dense small small-dense tiny-e64 gpu-medium gpu-medium-dense; do
    grep -q "^$p " <<< "$out" || missing="$missing $p"
done
# tiny: d_model 256, 4 layers, 8 experts, top-2; its parameters as moe info counts a model
[ $rc -eq 0 ] && [ -z "$missing" ] &&
    grep -Eq '^tiny +256 +4 +8 +2 +[0-9]+ ' <<< "$out" && grep -Eq '^tiny-dense +256 +4 +0 ' <<< "$out"
check "info --presets lists every preset with d_model, layers, experts, top-k, parameters" $? \
    "exit $rc, missing:$missing: $out"
test_params=$(awk '$1 == "test" { print $6 }' <<< "$out")
out=$("$moe" train --config test --set train.steps=1 --set train.warmup=0 --quiet \
      --set "data.train=$data/train.bin" --set "data.val=$data/val.bin" --out "$pre-test" 2>&1 &&
      "$moe" info --ckpt "$pre-test/ckpt.bin" 2>&1)
grep -q "^parameters: ${test_params:-none} total" <<< "$out"
check "info --presets counts a preset's parameters as info --ckpt does (test: ${test_params:-?})" \
    $? "$out"

# upcycle and import take the presets too: test-dense upcycled by --config test-e16 is test-e16
e16_params=$(awk '$1 == "test-e16" { print $6 }' <<< "$("$moe" info --presets)")
out=$("$moe" train --config test-dense --set train.steps=1 --set train.warmup=0 --quiet \
      --set "data.train=$data/train.bin" --set "data.val=$data/val.bin" --out "$pre-dense" 2>&1 &&
      "$moe" upcycle --from "$pre-dense/ckpt.bin" --out "$pre-up.bin" --config test-e16 --split 2 \
          2>&1 && "$moe" export --ckpt "$pre-up.bin" --out "$pre-up.st" 2>&1 &&
      "$moe" import --from "$pre-up.st" --out "$pre-im.bin" --config test-e16 2>&1 &&
      "$moe" info --ckpt "$pre-im.bin" 2>&1)
grep -q "^parameters: ${e16_params:-none} total" <<< "$out"
check "upcycle and import --config test-e16: the preset's ${e16_params:-?} parameters" $? "$out"

# ---- 5. a dense model ---------------------------------------------------------------------
echo "test_cli: dense model"
dense="$tmp/dense"
out=$("$moe" train --out "$dense" "${tiny[@]}" --set moe.num_experts=0 --set train.steps=10 \
      --set train.warmup=2 --set train.eval_every=5 --quiet 2>&1)
rc=$?
check "dense train exits 0" $rc "exit $rc: $out"
r=$(wc -l < "$dense/router.csv" 2>/dev/null)
h=$(head -n 1 "$dense/router.csv" 2>/dev/null)
[ "$r" = 1 ] && [ "$h" = "step,layer,maxvio,cv,entropy,drop_frac,top1_score,pad_frac,expert_sim,max_logit,lse_mean,maxvio_group" ]
check "dense router.csv holds only its header" $? "$r lines, header '$h'"
rows=$(awk -F, 'NR > 1 && $2 + 0 > 0 { n++ } END { print n + 0 }' "$dense/train.csv" 2>/dev/null)
[ "$rows" = 10 ] && [ "$(wc -l < "$dense/domains.csv")" = 1 ] &&
    [ "$(cat "$dense/val_router.csv")" = "step,layer,maxvio,cv,drop_frac" ]
check "dense train.csv has 10 rows with a loss, domains.csv and val_router.csv only a header" $? \
    "$rows rows"
out=$("$moe" info --ckpt "$dense/ckpt.bin" 2>&1)
read -r tot act <<< "$(sed -n 's/^parameters: \([0-9]*\) total, \([0-9]*\) active.*/\1 \2/p' <<< "$out")"
[ -n "${tot:-}" ] && [ "$tot" = "${act:-}" ] && grep -q '^blocks: dense dense$' <<< "$out"
check "dense info: blocks dense dense, active = total = ${tot:-?}" $? "$(head -n 4 <<< "$out")"

# ---- 6. shared experts ----------------------------------------------------------------
echo "test_cli: shared experts"
shared="$tmp/shared"
out=$("$moe" train --out "$shared" "${tiny[@]}" --set moe.num_shared=1 --set train.steps=4 \
      --set train.warmup=1 --set train.eval_every=0 --quiet 2>&1)
rc=$?
info=$("$moe" info --ckpt "$shared/ckpt.bin" 2>&1)
read -r tot act <<< "$(sed -n 's/^parameters: \([0-9]*\) total, \([0-9]*\) active.*/\1 \2/p' <<< "$info")"
# on top of the plain model: three 32 x 32 shared matrices per MoE block, all of them active
[ $rc -eq 0 ] && grep -Eq '^layers\.1\.moe\.shared_down +32 x 32 ' <<< "$info" &&
    [ "${tot:-0}" -eq $((ptot + 2 * 3 * 32 * 32)) ] && [ "${act:-0}" -eq $((pact + 2 * 3 * 32 * 32)) ]
check "num_shared=1 trains; info lists layers.1.moe.shared_down 32 x 32; +6144 total and active" \
    $? "exit $rc: $out / $(grep -E '^parameters|shared' <<< "$info" | tr '\n' '|')"

# ---- 7. expert-choice routing ---------------------------------------------------------
echo "test_cli: expert choice"
ec="$tmp/ec"
ec_set=(--set moe.routing=expert_choice --set moe.balance=none)
reject "expert_choice with a balancing loss" "moe\.balance=none" \
    "$moe" train --out "$bad_out" "${tiny[@]}" --set moe.routing=expert_choice
out=$("$moe" train --out "$ec" "${tiny[@]}" "${ec_set[@]}" --set train.steps=30 \
      --set train.lr=1e-2 --set train.warmup=5 --set train.eval_every=10 --quiet 2>&1)
rc=$?
first=$(awk -F, 'NR == 2 { print $2 }' "$ec/train.csv" 2>/dev/null)
ec_val=$(awk -F, 'NR > 1 && $8 != "" { v = $8 } END { print v }' "$ec/train.csv" 2>/dev/null)
[ $rc -eq 0 ] && [ -n "$first" ] && [ -n "$ec_val" ] && float_cmp "$ec_val" "<" "$first - 1.0"
check "expert_choice trains: val_loss ${ec_val:-?} is below the first step's loss ${first:-?} - 1" \
    $? "exit $rc: $out"
# every expert keeps exactly cap tokens: loads 0.25 each, MaxVio 0; drop_frac in [0, 1]
bad_rows=$(awk -F, 'NR > 1 { if ($3 + 0 != 0 || $6 < 0 || $6 > 1) b++
                             for (i = 7; i <= 10; i++) if ($i != "0.250000") b++ }
                    END { print b + 0, NR - 1 }' "$ec/router.csv" 2>/dev/null)
[ "$bad_rows" = "0 60" ]
check "expert_choice router.csv: 60 rows, every load 0.25, MaxVio 0" $? "bad, rows: $bad_rows"
out=$("$moe" eval --ckpt "$ec/ckpt.bin" 2>&1)
ev=$(sed -n 's/^val_loss \([0-9.]*\).*/\1/p' <<< "$out")
[ -n "$ev" ] && [ -n "$ec_val" ] && float_cmp "($ev - $ec_val)^2" "<" "1e-6"
check "eval of the expert_choice checkpoint reproduces its val_loss ${ec_val:-?}" $? "$out"
out=$("$moe" eval --ckpt "$ec/ckpt.bin" --set moe.routing=token_choice 2>&1)
rc=$?
tc=$(sed -n 's/^val_loss \([0-9.]*\).*/\1/p' <<< "$out")
[ $rc -eq 0 ] && [ -n "$tc" ] && float_cmp "$tc" "<" "$first"
check "the same checkpoint evaluates with causal token_choice routing: val_loss ${tc:-?}" $? \
    "exit $rc: $out"

# ---- 8. capacity --------------------------------------------------------------------------
echo "test_cli: capacity"
cap="$tmp/cap"
cap_set=(--set moe.capacity_factor=0.5 --set moe.min_capacity=1 --set train.steps=12
         --set train.warmup=2 --set train.eval_every=6 --set train.eval_batches=2)
out=$("$moe" train --out "$cap" "${tiny[@]}" "${cap_set[@]}" --quiet 2>&1)
rc=$?
# drop_frac = sum_e load_e drop_e (load_e: routed fraction; drop_e: dropped fraction of it):
# within the rounding of the 6-digit columns; factor 0.5 must drop something; pad_frac 0
capr=$(awk -F, 'NR > 1 { n++; s = 0; for (e = 0; e < 4; e++) s += $(7 + e) * $(16 + e)
                         if (s - $6 > 1e-4 || $6 - s > 1e-4 || $20 != 0) bad++
                         if ($6 > 0.05) dropping++ }
                END { print n + 0, bad + 0, dropping + 0 }' "$cap/router.csv" 2>/dev/null)
[ $rc -eq 0 ] && [ "$capr" = "24 0 24" ]
check "capacity_factor=0.5: router.csv drop_frac = sum load_e drop_e > 0.05, pad_frac 0" $? \
    "exit $rc, rows bad dropping: $capr: $out"
vdrop=$(awk -F, 'NR > 1 && $9 > 0.05 && $9 < 1 { n++ } END { print n + 0 }' "$cap/val_router.csv" 2>/dev/null)
[ "$vdrop" = 4 ]
check "capacity_factor=0.5: val_router.csv drop_frac in (0.05, 1) (2 evals x 2 layers)" $? \
    "rows: $vdrop"
capp="$tmp/capp"
out=$("$moe" train --out "$capp" "${tiny[@]}" "${cap_set[@]}" --set moe.padded=1 --quiet 2>&1)
rc=$?
d=$(diff <(cut -d, -f1-6,8 "$cap/train.csv") <(cut -d, -f1-6,8 "$capp/train.csv"))
# every expert computes cap = 0.5 * 128 * 2 / 4 = 32 rows, E cap = 128 for N K = 256
# assignments: kept = 256 (1 - drop_frac), so pad_frac = 1 - kept / 128 = 2 drop_frac - 1
pads=$(awk -F, 'NR > 1 { p = 2 * $6 - 1 - $20; if (p > 1e-4 || p < -1e-4) bad++; if ($20 > 0) n++ }
                END { print bad + 0, (n > 0) }' "$capp/router.csv" 2>/dev/null)
[ $rc -eq 0 ] && [ -z "$d" ] && [ "$pads" = "0 1" ] &&
    cmp -s <(cut -d, -f1-19 "$cap/router.csv") <(cut -d, -f1-19 "$capp/router.csv")
check "moe.padded=1: losses and drops identical to unpadded, pad_frac = 1 - kept / (E cap) > 0 somewhere" $? \
    "exit $rc, bad rows, any padding: $pads: $(head -n 4 <<< "$d") $out"
cap_val=$(awk -F, 'NR > 1 && $8 != "" { v = $8 } END { print v }' "$cap/train.csv" 2>/dev/null)
out=$("$moe" eval --ckpt "$cap/ckpt.bin" --set train.eval_batches=2 2>&1)
same=$(sed -n 's/^val_loss \([0-9.]*\).*/\1/p' <<< "$out")
out2=$("$moe" eval --ckpt "$cap/ckpt.bin" --set train.eval_batches=2 \
       --set moe.eval_capacity_factor=2 2>&1)
rc=$?
other=$(sed -n 's/^val_loss \([0-9.]*\).*/\1/p' <<< "$out2")
[ $rc -eq 0 ] && [ -n "$same" ] && [ -n "$other" ] && [ -n "$cap_val" ] &&
    float_cmp "($same - $cap_val)^2" "<" "1e-6" && [ "$same" != "$other" ]
check "eval reproduces val_loss ${cap_val:-?} at the trained factor, eval_capacity_factor=2 gives ${other:-?}" \
    $? "exit $rc: $out / $out2"

# the random second expert draws from the router stream, which the checkpoint holds: a resumed
# run repeats the draws (12 straight steps == 6 + --resume to 12, bit for bit). Unnormalised
# weights near 1/4 (a young router) dispatch the second expert about half the time.
sr_set=("${cap_set[@]}" --set moe.capacity_factor=2 --set moe.second_expert_random=1
        --set moe.norm_topk=0 --set train.eval_every=0)
outa=$("$moe" train --out "$tmp/srA" "${tiny[@]}" "${sr_set[@]}" --quiet 2>&1)
rca=$?
outb=$("$moe" train --out "$tmp/srB" "${tiny[@]}" "${sr_set[@]}" --until 6 --quiet 2>&1 &&
       "$moe" train --resume "$tmp/srB" --quiet 2>&1)
rcb=$?
srd=$(awk -F, 'NR > 1 && $6 > 0.05 { n++ } END { print n + 0 }' "$tmp/srA/router.csv" 2>/dev/null)
[ $rca -eq 0 ] && [ $rcb -eq 0 ] && [ "$srd" = 24 ] && cmp -s "$tmp/srA/ckpt.bin" "$tmp/srB/ckpt.bin"
check "second_expert_random drops second experts (24 rows with drop_frac > 0.05) and resumes bit-exactly" \
    $? "exit $rca / $rcb, rows dropping: $srd: $outa $outb"

finish
