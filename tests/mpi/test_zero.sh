#!/usr/bin/env bash
# test_zero.sh: dist.zero (src/model/zero.h), the AdamW moments, the gradients and the weights
# sharded over each tensor's group, gives the one-process run. Runs with MOE_BIN=build/mpi/moe
# (`make test-mpi`, `make test`) and needs mpirun.
#
# One tiny MoE with a shared expert and aux-free balancing, two micro-batches a step, a width
# (30) that no process count divides, so that shards end inside tensors and are unequal:
#   1. dist.zero=1, 2 and 3 on 2 and 4 processes, with dist.ep=1 and 2, with and without
#      dist.overlap, one tensor a bucket (dist.bucket_mb=0) and whole blocks a bucket, on
#      train.device=cpu and cpu-fenced (host staging) (each variant once in make test, every
#      stage on each with MOE_TEST_FULL=1, make test-slow): every step's loss, aux, z, gradient
#      norm and validation loss agree with the one-process run to 1e-5 relative; dist.zero=2
#      in one process is the one-process run, bit for bit; dist.zero=2 with a tied head and
#      a multi-token prediction module too; dist.csv's bytes (MPI's
#      collectives): dist.zero=2 those of dist.zero=0, dist.zero=1 1.5 x
#   2. with dist.collectives=teach, dist.zero=1, 2 and 3 give dist.zero=0's bits: train.csv,
#      router.csv and the checkpoint's tensors
#   3. checkpoints stay free of the layout: written under dist.zero=2 on 4 processes (dist.ep=2),
#      resumed in one process and under dist.ep=2 (dist.zero=0, 2 processes); written in one
#      process, resumed under dist.zero=2 and 3; written under dist.zero=3, resumed under 1:
#      the one-process curve (make test: the first and the last; every pair with
#      MOE_TEST_FULL=1)
#   4. memory: the bytes the model of the largest process allocated (the banner) are memory.h's
#      formula for it, and `moe plan --config` of the run's config.txt counts the same total
#      (dist.zero 0 to 3); the moments shrink by the group sizes
#   5. dist.csv's grad_sent and weight_sent of process 0 are moe plan --config's count
#      (model/traffic.h), byte for byte, under dist.zero 1, 2 and 3, with mpi and teach
#   6. bad input: dist.zero=4 or -1 exits 2 naming the key's range; dist.zero=3 with a tied
#      head across processes exits 2 saying why
# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
need_mpirun skip
moe=$(executable "${MOE_BIN:-build/mpi/moe}" "make mpi (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1

"$moe" synth --out "$tmp/data" --tokens 40000 --seed 5 > /dev/null
tiny=(--set model.d_model=30 --set model.n_layer=2 --set model.n_head=3 --set model.seq_len=16
      --set model.d_ff=44 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=22
      --set moe.num_shared=1 --set moe.balance=aux_free --set moe.bias_rate=0.05
      --set train.batch=4 --set train.accum=2 --set train.steps=10 --set train.warmup=2
      --set train.lr=1e-2 --set train.eval_every=5 --set train.eval_batches=1
      --set "data.train=$tmp/data/train.bin" --set "data.val=$tmp/data/val.bin" --quiet)

# shellcheck source=tests/lib/np_runs.sh
. "$root/tests/lib/np_runs.sh" # run, resume
# same_curves A B: train.csv's loss, aux_loss, z_loss, grad_norm and val_loss agree to 1e-5
# (relative, or 1e-7 absolute) at every one of the 10 steps
same_curves() {
    awk -F, 'NR == FNR { if (FNR > 1) for (i = 2; i <= NF; i++) a[FNR, i] = $i; n = FNR; next }
             FNR > 1 { rows++
                       for (i = 2; i <= 8; i++) { if (i == 5 || i == 7) continue
                         if (($i == "") != (a[FNR, i] == "")) bad++
                         else if ($i != "") { d = $i - a[FNR, i]; d = d < 0 ? -d : d
                           m = $i < 0 ? -$i : $i; if (d > 1e-5 * m + 1e-7) bad++ } } }
             END { exit !(rows == 10 && n == 11 && bad == 0) }' "$1/train.csv" "$2/train.csv"
}
# same_bits A B: train.csv (but the speed) and router.csv are the same text
same_bits() {
    cmp -s <(cut -d, -f1-6,8- "$1/train.csv") <(cut -d, -f1-6,8- "$2/train.csv") &&
        cmp -s "$1/router.csv" "$2/router.csv"
}
# side A B: the first rows of two train.csv side by side, for a failure's detail
side() { paste -d' ' <(cut -d, -f1-6 "$tmp/$1/train.csv" 2>&1) <(cut -d, -f1-6 "$tmp/$2/train.csv" 2>&1) | head -n 4; }

echo "test_zero: dist.zero 1, 2 and 3 against one process"
run one 1
check "one process trains" $? "$(tail -n 3 "$tmp/one.log")"
run one-z2 1 --set dist.zero=2
rc=$?
same_bits "$tmp/one" "$tmp/one-z2"
check "dist.zero=2 in one process: the one-process run, bit for bit" $? "exit $rc: $(side one one-z2)"
# with MOE_TEST_FULL=1 (make test-slow) every stage on every variant, but a few that the next
# stage's runs cover (its code is a superset: dist.zero=2 shards the moments as 1 does, 3
# reduce-scatters as 2 does); in make test each variant once, on the stage whose code it
# reaches furthest, and the runs the byte counts below read (tests/mpi/test_layouts.sh crosses the
# stages with dist.tp and dist.ep)
quick="1 2 1 1 cpu 25|1 4 2 1 cpu 25|2 2 1 1 cpu 25|2 4 2 1 cpu 25|2 2 2 0 cpu-fenced 25|3 4 2 1 cpu 25|3 4 2 1 cpu-fenced 0|3 4 1 0 cpu 0"
for zero in 1 2 3; do
    for grid in "2 1 1 cpu 25" "4 2 1 cpu 25" "4 1 0 cpu 0" "2 2 0 cpu-fenced 25" \
                "4 2 1 cpu-fenced 0"; do
        read -r np ep overlap device mb <<< "$grid"
        case "$zero $grid" in "1 4 1 0 cpu 0" | "3 2 1 1 cpu 25") continue ;; esac
        [ "${MOE_TEST_FULL:-0}" = 1 ] || [[ "|$quick|" == *"|$zero $grid|"* ]] || continue
        name=z$zero-np$np-ep$ep-o$overlap-$device-b$mb
        run "$name" "$np" --set dist.zero="$zero" --set dist.ep="$ep" --set dist.overlap="$overlap" \
            --set train.device="$device" --set dist.bucket_mb="$mb"
        rc=$?
        same_curves "$tmp/one" "$tmp/$name"
        check "dist.zero=$zero, $np processes, dist.ep=$ep, dist.overlap=$overlap, $device, dist.bucket_mb=$mb: the one-process curve" \
            $? "exit $rc: $(tail -n 3 "$tmp/$name.log"); $(side one "$name")"
    done
done

# a tied head and a multi-token prediction module (their tensors in buckets of other stages)
run one-tied-mtp 1 --set model.tied=1 --set model.mtp_depth=1
run z2-tied-mtp 4 --set dist.zero=2 --set dist.ep=2 --set model.tied=1 --set model.mtp_depth=1
rc=$?
same_curves "$tmp/one-tied-mtp" "$tmp/z2-tied-mtp"
check "dist.zero=2, 4 processes, dist.ep=2, a tied head and a prediction module: the one-process curve" \
    $? "exit $rc: $(tail -n 3 "$tmp/z2-tied-mtp.log"); $(side one-tied-mtp z2-tied-mtp)"

# dist.csv's bytes of the step's other collectives (layer -1, rank 0, step 1) with MPI's: a
# reduce-scatter and an all-gather move what the sum moved (dist.zero=2), the all-gather after
# the whole sum half of it again (dist.zero=1); the statistics' few bytes aside
run z0-np2 2 --set dist.zero=0
bytes() { awk -F, '$1 == 1 && $2 == -1 && $3 == 0 { print $4 }' "$tmp/$1/dist.csv"; }
b0=$(bytes z0-np2) b1=$(bytes z1-np2-ep1-o1-cpu-b25) b2=$(bytes z2-np2-ep1-o1-cpu-b25)
float_cmp "${b2:-0} > 0.999 * ${b0:-0} && ${b2:-0} < 1.001 * ${b0:-0} && ${b1:-0} > 1.49 * ${b0:-0} && ${b1:-0} < 1.51 * ${b0:-0}" "==" 1
check "dist.csv, 2 processes: dist.zero=2 sends the bytes of dist.zero=0, dist.zero=1 1.5 x" $? "zero 0, 1, 2: $b0 $b1 $b2"

echo "test_zero: with the teaching collectives, the bits of dist.zero=0"
for zero in 0 1 2 3; do
    run teach-z$zero 4 --set dist.zero="$zero" --set dist.ep=2 --set dist.collectives=teach
    check "teach, dist.zero=$zero, 4 processes, dist.ep=2: trains" $? "$(tail -n 3 "$tmp/teach-z$zero.log")"
done
for zero in 1 2 3; do
    same_bits "$tmp/teach-z0" "$tmp/teach-z$zero"
    check "teach, dist.zero=$zero: train.csv and router.csv are dist.zero=0's, bit for bit" $? "$(side teach-z0 teach-z$zero)"
    # the files differ in the one byte of the stored settings' dist.zero, and in the header's
    # two checksums (bytes 41 to 48)
    differ=$(cmp -l "$tmp/teach-z0/ckpt.bin" "$tmp/teach-z$zero/ckpt.bin" | awk '$1 > 48' | wc -l)
    [ "$differ" = 1 ]
    check "teach, dist.zero=$zero: the checkpoint's weights and moments are dist.zero=0's, bit for bit" $? "$differ bytes differ"
done

echo "test_zero: checkpoints across layouts"
# written at step 5 under one layout, resumed to step 10 under another: the one-process curve
i=0
for pair in "4 --set dist.ep=2 --set dist.zero=2|1 --set dist.ep=1 --set dist.zero=0" \
            "4 --set dist.ep=2 --set dist.zero=2|2 --set dist.ep=2 --set dist.zero=0" \
            "1 --set dist.zero=0|4 --set dist.ep=2 --set dist.zero=2" \
            "4 --set dist.ep=2 --set dist.zero=3|2 --set dist.ep=2 --set dist.zero=1" \
            "1 --set dist.zero=0|4 --set dist.ep=1 --set dist.zero=3"; do
    IFS='|' read -r first second <<< "$pair"
    i=$((i + 1))
    name=ck$i
    # make test: the first and the last (tests/mpi/test_layouts.sh crosses dist.zero=3 with
    # dist.tp and dist.ep); MOE_TEST_FULL=1: every pair
    [ "${MOE_TEST_FULL:-0}" = 1 ] || [ $i = 1 ] || [ $i = 5 ] || continue
    # shellcheck disable=SC2086 # first and second are the process count and options
    run "$name" $first --until 5
    rc=$?
    # shellcheck disable=SC2086
    resume "$name" $second
    rc2=$?
    same_curves "$tmp/one" "$tmp/$name"
    check "saved on ${first} (step 5), resumed on ${second}: the one-process curve" $? \
        "exit $rc, $rc2: $(tail -n 2 "$tmp/$name.resume.log"); $(side one "$name")"
done

echo "test_zero: memory a process"
# the banner's measured bytes, the formula's, and moe plan's mem_total and mem_optim
declare -A optim
for zero in 0 1 2 3; do
    line=$(grep -o "holds [0-9]* bytes, memory.h's formula [0-9]*" "$tmp/teach-z$zero.log")
    read -r _ held _ _ _ formula <<< "$line"
    "$moe" plan --config "$tmp/teach-z$zero/config.txt" --cluster laptop --gpus 4 --json \
        > "$tmp/plan$zero.json" 2> "$tmp/plan$zero.err"
    rc=$?
    plan=$(python3 -c 'import json, sys; l = json.load(open(sys.argv[1]))["layouts"][0]
print("%.0f %.0f" % (l["mem_total"], l["mem_optim"]))' "$tmp/plan$zero.json" 2>&1)
    read -r total moments <<< "$plan"
    optim[$zero]=$moments
    [ -n "$held" ] && [ "$held" = "$formula" ] && [ $rc = 0 ] && [ "$held" = "$total" ]
    check "dist.zero=$zero, 4 processes, dist.ep=2: the largest process holds the formula's bytes ($held), as moe plan counts them" \
        $? "banner '$line', plan exit $rc: $plan $(cat "$tmp/plan$zero.err")"
done
# the moments of a 4-way world and 2-way expert replicas: a quarter of the rest, half of the
# experts', so between a quarter and a half of dist.zero=0's
float_cmp "${optim[1]:-0} > ${optim[0]:-0} / 4 && ${optim[1]:-0} < ${optim[0]:-0} / 2" "==" 1 &&
    [ "${optim[1]}" = "${optim[2]}" ] && [ "${optim[1]}" = "${optim[3]}" ]
check "moe plan: the moments of dist.zero=1, 2 and 3 are between 1/4 and 1/2 of dist.zero=0's" $? \
    "${optim[*]}"

echo "test_zero: the bytes of the gradients' sums and the weights' gathers"
# process 0's grad_sent and weight_sent in dist.csv (step 1: no evaluation, no checkpoint) are
# moe plan --config's count of them, byte for byte, with either engine
for run_dir in z1-np4-ep2-o1-cpu-b25 z2-np4-ep2-o1-cpu-b25 z3-np4-ep2-o1-cpu-b25 teach-z1 teach-z2 teach-z3; do
    planned=$("$moe" plan --config "$tmp/$run_dir/config.txt" --cluster laptop --gpus 4 --json 2>&1 |
              python3 -c 'import json, sys; l = json.load(sys.stdin)["layouts"][0]
print(int(l["grad_sent"]), int(l["weight_sent"]))' 2>&1)
    got=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                   $1 == 1 && $2 == -1 && $3 == 0 { print $c["grad_sent"], $c["weight_sent"] }' \
              "$tmp/$run_dir/dist.csv")
    [ -n "$got" ] && [ "$got" = "$planned" ] && [ "${got#* }" != 0 ]
    check "$run_dir: process 0's gradient and weight bytes of step 1 ($got) = moe plan --config's" \
        $? "planned $planned"
done

echo "test_zero: bad input"
for v in 4 -1; do
    "$moe" train --out "$tmp/bad$v" "${tiny[@]}" --set dist.zero="$v" > "$tmp/bad.log" 2>&1
    rc=$?
    [ $rc = 2 ] && grep -q "dist.zero must be" "$tmp/bad.log" && [ ! -e "$tmp/bad$v" ]
    check "dist.zero=$v: exit 2 naming the range, no run folder" $? "exit $rc: $(cat "$tmp/bad.log")"
done
run bad3 2 --set dist.zero=3 --set model.tied=1
rc=$?
[ $rc = 2 ] && grep -q "dist.zero=3 gathers the weights a stage at a time, and a tied head" "$tmp/bad3.log" &&
    [ ! -e "$tmp/bad3" ]
check "dist.zero=3 with a tied head on 2 processes: exit 2, saying why" $? "exit $rc: $(head -3 "$tmp/bad3.log")"

finish
