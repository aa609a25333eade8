#!/usr/bin/env bash
# run_device.sh [--smoke | --part NAME] [--list] [OUT]: the CUDA backend's checks on a machine
# with an NVIDIA GPU. Every step has its own time limit; the results go to two files in OUT
# (default $OUT, else build/cuda/gpu-check): summary.txt (a line per step, with the tail of a
# failed step's log) and logs.tar.gz (every step's log and the runs' CSV files). The runs and
# logs themselves are written to RD_WORK (default build/cuda/gpu-work), emptied at the start.
#
#   --smoke      the first check on a GPU, within 8 minutes of step limits, the build included:
#                the build for this GPU's architecture alone, the ops and the gradients against
#                the CPU, a short MoE and a dense training against the CPU's losses, the same for
#                grouped-query attention with qk_norm and for latent attention, each then
#                decoded on the GPU from the cache against the full forward, NCCL at one
#                process, one bench
#   --part NAME  one part of the full check (each within 8 minutes of step limits, the build
#                included, so that each fits one short call on a GPU machine of its own)
#   (neither)    every part, one after the other: the whole check, about 40 minutes of limits
#   --list       the steps, their time limits and their sum, and the files written, without a
#                GPU (with --smoke or --part: that profile alone)
#
# The steps (--list gives each part's):
#   build    make cuda for this GPU's architecture (nvidia-smi's compute_cap), with the
#            machine's own nvcc, and the unit suites the steps run
#   ops      every table entry on the GPU against the CPU reference, forward and backward
#            (tests/test_backend_ops.c: integers exactly, floats with the one tolerance rule);
#            grad: the gradients of the GPU's products by finite differences
#            (tests/test_backend_grad.c); MOE_TEST_CUDA=1 makes a GPU that does not open fail
#   coll     NCCL's sum and exchange at a world of one (tests/test_backend_coll.c)
#   decode   the key-value cache's decoding on the GPU against the full forward at every
#            position (tests/test_decode.c, the GPU among its backends)
#   sanitize compute-sanitizer memcheck and racecheck over the ops, where the tool exists
#   train    the same short runs on cpu and cuda: dense, MoE, padded capacity, expert choice,
#            sigmoid scores with seq_aux and aux-free balancing, shared experts, chapter 5's
#            stability methods, grouped-query attention (heads of their own width, qk_norm)
#            and latent attention; every step's losses and gradient norm within 2e-3
#            (relative), as tests/test_backends.sh asks of cpu-ref; a run made to spike
#            (train.spike_action=skip, then rollback) skips and rolls back at the cpu run's
#            steps; the two new attentions'
#            GPU checkpoints then sample 100 bytes at temperature 0 from the key-value cache
#            and with the full forward at every byte (moe sample --no-cache): the same bytes
#   replay   the cpu runs' routing recorded and replayed on the GPU (moe train
#            --record-routing / --replay-routing): the flip rate the GPU's own top-k shows, and
#            every step within 5e-4 once flips are replayed away
#   precision 50 steps at tf32 and at bf16 end within 2 % of fp32's loss; the MoE run again
#            with the experts' first rung (MOE_CUDA_EXPERTS=loop); two GPU runs write the same
#            checkpoint, byte for byte (repeat); a GPU checkpoint continues on the CPU (resume)
#   multi    dist.collectives=nccl at a world of one (the gradients' sums through NCCL) and, on
#            a machine with 2 GPUs, over 2 processes; (where MPI is, or comes from .gpu-deps) 2
#            processes share the GPU at dist.ep=2, the exchange staged through the host; each
#            within 2e-3 of the 1-process GPU run
#   bench    moe bench --device cuda: tiny, small and gpu-medium (with its dense twin) in fp32,
#            gpu-medium with the experts' loop, in tf32 and in bf16; the decode part: moe bench
#            --decode of small and gpu-medium with their dense twins, and of tiny, tiny-gqa and
#            tiny-mla (multi-head, grouped-query and latent attention: their caches' bytes a
#            token and their speeds)
# A step that fails is run again once, with CUDA_LAUNCH_BLOCKING=1 (each launch waits, so an
# error is reported by the call that made it) under compute-sanitizer's memcheck where the tool
# exists, within what is left of the profile's 8 minutes once the later steps' limits are set
# aside: its log (NAME.rerun.log) names the failing kernel, not a later synchronization.
#
# It needs what `make test` needs (OpenBLAS, Check) and the CUDA toolkit; a step whose
# prerequisite is missing is reported as skipped, never as passed. A machine without OpenBLAS,
# Check or Open MPI and without a way to install them takes them from .gpu-deps/ (Debian
# packages that tests/gpu/pack_deps.sh downloads on a machine with network; git ignores the
# folder, and a copy of the working tree carries it where it is named), unpacked under
# /tmp/moe-deps. Without a GPU (nvidia-smi finds none) it exits 2 and writes nothing.
#
# REHEARSE=1 runs the same steps on a machine without a GPU, with cpu-ref standing in for cuda
# (and the GPU-only steps skipped): a check of the script itself, before a GPU's time is spent.
# RD_BUILD=DIR (with REHEARSE=1) takes the binaries already built in DIR (build, build/san)
# instead of making build/cuda/; RD_FAIL=STEP makes that step's first run fail, so that its
# rerun is seen; RD_TIME_SCALE=N (with REHEARSE=1) gives every step N times its limit, for a
# slow stand-in (cpu-ref under the sanitizers). ONLY='ops|train-.*' runs only the steps of the
# profile whose names match (an extended regular expression, whole names).
# A step over its limit is killed with its every process (SIGKILL to its process group: a
# training run sent SIGTERM would write its checkpoint first, into the folder its rerun starts
# again).
# Exit status: 0 every step passed or was skipped, 1 a step failed, 2 a usage error or no GPU.
set -u
me=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
start_dir=$PWD
cd "$(dirname "$0")/../.." || exit 2

# ---- the plan ----------------------------------------------------------------------------------
# NAME LIMIT PROFILES DESCRIPTION: every step in the order it runs, its time limit in seconds,
# and the profiles that run it: smoke, and the parts of the full check (every part starts with
# the build, which make keeps to a moment where the same machine built it already). --list
# prints this table; the test suite (tests/test_gpu_scripts.sh) holds each profile's limits to
# BUDGET seconds, as the time of one short call on a GPU machine.
BUDGET=480
PARTS="ops memcheck racecheck train replay precision multi bench decoding"
plan_table() {
    cat << 'PLAN'
build               120 smoke,ops,memcheck,racecheck,train,replay,precision,multi,bench,decoding make cuda for this GPU's architecture, and the unit suites the steps run
ops                  60 smoke,ops            every table entry on the GPU against cpu-ref (test_backend_ops)
grad                 45 smoke,ops            the GPU's products' gradients by finite differences (test_backend_grad)
coll                 45 ops                  NCCL's sum and exchange at a world of one (test_backend_coll)
decode               60 ops                  decoding with the key-value cache against the full forward (test_decode)
sanitize-memcheck   330 memcheck             compute-sanitizer memcheck over test_backend_ops
sanitize-racecheck  330 racecheck            compute-sanitizer racecheck over test_backend_ops
train-dense          30 smoke,train          a dense run on cpu and on the GPU: every step within 2e-3
train-moe            40 smoke,train          an MoE run (8 experts, top-2) on cpu and on the GPU: every step within 2e-3
train-gqa            30 smoke,train          grouped-query attention (2 key-value heads of their own width) with qk_norm, cpu against the GPU; the GPU's cached decoding against its full forward
train-mla            30 smoke,train          multi-head latent attention, cpu against the GPU; the GPU's cached decoding (the latent cache) against its full forward
train-capacity       40 train                padded capacity, cpu against the GPU
train-expert-choice  40 train                expert choice, cpu against the GPU
train-aux-free       40 train                sigmoid scores, aux-free balancing, cpu against the GPU
train-seq-aux        40 train                seq_aux with a shared expert, cpu against the GPU
train-stability      40 train                DSSN, TinyInit, a bf16 router, the aux loss over groups, cpu against the GPU
train-spikes         30 train                a run made to spike (data.corrupt_from) skips and rolls back at the steps the cpu run does
replay-stability     50 replay               chapter 5's methods, the cpu run's routing replayed on the GPU: within 5e-4
replay-moe           50 replay               the MoE run, routing replayed: the flip rate, every step within 5e-4
replay-capacity      50 replay               padded capacity, routing replayed
replay-aux-free      50 replay               aux-free balancing, routing replayed
replay-seq-aux       50 replay               seq_aux with a shared expert, routing replayed
precision-tf32       75 precision            50 steps at fp32 and at tf32: the last loss within 2 %
precision-bf16       45 precision            50 steps at bf16 against fp32's: the last loss within 2 %
train-moe-loop       40 precision            the MoE run with the experts' first rung (MOE_CUDA_EXPERTS=loop)
repeat               45 precision            two GPU runs write the same checkpoint, byte for byte
resume               45 precision            10 steps on the GPU, 10 more on the CPU: the MoE run's losses
build-mpi           120 multi                make cuda MPI=1 (where MPI is)
staged-2proc         60 multi                2 processes share the GPU at dist.ep=2, staged through the host
nccl-1proc           45 smoke,multi          dist.collectives=nccl at a world of one against the 1-process run
nccl-2proc           60 multi                dist.collectives=nccl over 2 processes (a machine with 2 GPUs)
bench                60 smoke                moe bench --device cuda, gpu-medium and its dense twin, 5 steps
bench-fp32          150 bench                moe bench --device cuda: tiny, small, gpu-medium and its dense twin, fp32
bench-fp32-loop      60 bench                gpu-medium with the experts' loop
bench-tf32           60 bench                gpu-medium and its dense twin in tf32
bench-bf16           60 bench                gpu-medium and its dense twin in bf16
bench-decode        150 decoding             moe bench --decode of small and its dense twin
bench-decode-attn    45 decoding             moe bench --decode of tiny, tiny-gqa and tiny-mla: the three attentions' caches side by side
bench-decode-medium 150 decoding             moe bench --decode of gpu-medium and its dense twin, batches 1, 4, 16
PLAN
}
part_about() {
    case $1 in
        smoke) echo "the first check on a GPU: build, ops, a short MoE and dense training, grouped-query and latent attention (trained, decoded), NCCL, a bench" ;;
        ops) echo "the op suites on the GPU: ops, gradients, NCCL's collectives, decoding" ;;
        memcheck) echo "compute-sanitizer memcheck over the ops" ;;
        racecheck) echo "compute-sanitizer racecheck over the ops" ;;
        train) echo "the training runs, cpu against the GPU" ;;
        replay) echo "the training runs with the cpu's routing replayed on the GPU" ;;
        precision) echo "tf32 and bf16, the experts' loop, repeatability, a GPU checkpoint resumed on the CPU" ;;
        multi) echo "across processes: NCCL at 1 and 2 processes, 2 processes staged through the host" ;;
        bench) echo "the training benchmarks" ;;
        decoding) echo "the decoding benchmarks" ;;
        all) echo "every part, one after the other" ;;
    esac
}
# in_profile STEP_PROFILES: whether a step of those profiles runs in $profile
in_profile() {
    [ "$profile" = all ] && [ "$1" != smoke ] && return 0
    [[ ,$1, == *",$profile,"* ]]
}
# profile_steps: "NAME LIMIT" for each step of $profile, in order (ONLY applied)
profile_steps() {
    local name limit profs rest
    while read -r name limit profs rest; do
        in_profile "$profs" || continue
        if [ -n "${ONLY:-}" ] && ! [[ $name =~ ^($ONLY)$ ]]; then continue; fi
        echo "$name $limit"
    done < <(plan_table)
}
OUT_FILES="summary.txt logs.tar.gz"
list_profile() {
    local name limit profs about total=0 n=0
    echo "$profile: $(part_about "$profile")"
    while read -r name limit profs about; do
        in_profile "$profs" || continue
        if [ -n "${ONLY:-}" ] && ! [[ $name =~ ^($ONLY)$ ]]; then continue; fi
        printf '  %-20s %4d s  %s\n' "$name" "$limit" "$about"
        total=$((total + limit)) n=$((n + 1))
    done < <(plan_table)
    if [ "$profile" = all ]; then
        echo "  total: $total s in $n steps ($((total / 60)) min $((total % 60)) s; a failed step's rerun within its own limit)"
    else
        echo "  total: $total s in $n steps (at most $BUDGET s; a failed step's rerun within the $((BUDGET - total)) s left)"
    fi
    echo "  output: $(echo $OUT_FILES | wc -w) files in OUT ($OUT_FILES)"
}

usage() {
    echo "usage: bash tests/gpu/run_device.sh [--smoke | --part NAME] [--list] [OUT]"
    echo "  NAME: one of $PARTS (--list shows each part's steps and limits)"
}
# ---- the command line ------------------------------------------------------------------------
# The training steps are functions of this script; `timeout` runs them as
# `run_device.sh --fn NAME ARGS...`, with the folders and the device in the environment.
fn_mode=0 list=0 profile=all outarg=
if [ "${1:-}" = --fn ]; then
    fn_mode=1
    shift
else
    while [ $# -gt 0 ]; do
        case $1 in
            --smoke) profile=smoke ;;
            --part)
                [ $# -ge 2 ] || { echo "run_device.sh: --part needs a part's name" >&2; usage >&2; exit 2; }
                profile=$2
                shift
                ;;
            --part=*) profile=${1#--part=} ;;
            --list) list=1 ;;
            -h | --help) usage; exit 0 ;;
            -*) echo "run_device.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
            *)
                [ -z "$outarg" ] || { echo "run_device.sh: one OUT folder, not $outarg and $1" >&2; exit 2; }
                outarg=$1
                ;;
        esac
        shift
    done
    if [ "$profile" != all ] && [ "$profile" != smoke ] && [[ " $PARTS " != *" $profile "* ]]; then
        echo "run_device.sh: no part $profile; the parts are: $PARTS" >&2
        exit 2
    fi
fi
if [ $list = 1 ]; then
    if [ "$profile" = all ]; then
        for profile in smoke $PARTS; do list_profile; done
        profile=all
        list_profile
    else
        list_profile
    fi
    exit 0
fi

# ---- the folders and the device ----------------------------------------------------------------
if [ $fn_mode = 0 ]; then
    gpu=cuda arch= scale=1
    if [ "${REHEARSE:-0}" = 1 ]; then
        gpu=cpu-ref arch=90 scale=${RD_TIME_SCALE:-1}
        if ! [[ $scale =~ ^[1-9][0-9]*$ ]]; then
            echo "run_device.sh: RD_TIME_SCALE=$scale is not a whole number from 1 (each step's" \
                "limit is multiplied by it in a rehearsal)" >&2
            exit 2
        fi
    elif ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > /dev/null 2>&1; then
        # before OUT is touched: a summary of an earlier run stays as it was
        echo "run_device.sh: no GPU here (nvidia-smi finds none), so nothing is checked and" \
            "nothing written: run it on a machine with an NVIDIA GPU and its driver, or with" \
            "REHEARSE=1 to rehearse the steps with cpu-ref standing in" >&2
        exit 2
    else
        # compute_cap (9.0) is the build's CUDA_ARCH (90); drivers before 510 lack the field
        arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -n 1 | tr -d ' .')
    fi
    out=${outarg:-${OUT:-build/cuda/gpu-check}}
    case $out in /*) ;; *) out=$start_dir/$out ;; esac
    work=${RD_WORK:-build/cuda/gpu-work}
    case $work in /*) ;; *) work=$PWD/$work ;; esac
    bdir=${RD_BUILD:-build/cuda}
    export RD_OUT=$out RD_WORK=$work RD_GPU=$gpu RD_BIN=$bdir/moe RD_MPI_BIN=$bdir-mpi/moe
    mkdir -p "$out" "$work" || exit 2
    rm -rf "$work/logs" "$work/runs" "$out/summary.txt" "$out/logs.tar.gz"
    mkdir -p "$work/logs" "$work/runs"
fi
out=$RD_OUT work=$RD_WORK logs=$RD_WORK/logs moe=$RD_BIN
summary=$out/summary.txt
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} OMP_WAIT_POLICY=passive
say() { echo "$*" | tee -a "$summary"; }

data=$work/data
base=(--set model.d_model=64 --set model.n_layer=2 --set model.n_head=4 --set model.seq_len=64
      --set model.d_ff=128 --set moe.d_expert=64 --set train.batch=8 --set train.steps=20
      --set train.eval_every=10 --set train.warmup=3 --set "data.train=$data/train.bin"
      --set "data.val=$data/val.bin" --quiet)
moe_set=(--set moe.num_experts=8 --set moe.top_k=2)
# shellcheck source=tests/lib/csv_close.sh
. tests/lib/csv_close.sh
train_pair() { # NAME SETTINGS...: the run on cpu and on the GPU, compared
    local name=$1; shift
    rm -rf "$work/runs/$name-cpu" "$work/runs/$name-gpu" # a rerun starts again
    $moe train --out "$work/runs/$name-cpu" "${base[@]}" "$@" --set train.device=cpu &&
        $moe train --out "$work/runs/$name-gpu" "${base[@]}" "$@" --set train.device=$RD_GPU &&
        csv_close "$work/runs/$name-cpu/train.csv" "$work/runs/$name-gpu/train.csv"
}
replay_pair() { # NAME SETTINGS...: the CPU's routing replayed on the GPU (route_tape.h)
    # The cpu run records its choices, the GPU run takes them instead of its own top-k and
    # counts where its own differ (the flip rate: near-ties decided the other way by the GPU's
    # rounding). Without flips the runs differ by arithmetic alone: every step within 5e-4.
    # Lines starting "= " go to the summary.
    local name=$1 rec=$work/runs/$1.route; shift
    rm -rf "$rec" "$work/runs/$name-cpu-rec" "$work/runs/$name-gpu-replay"
    $moe train --out "$work/runs/$name-cpu-rec" "${base[@]}" "$@" --set train.device=cpu \
        --record-routing "$rec" &&
        $moe train --out "$work/runs/$name-gpu-replay" "${base[@]}" "$@" \
            --set train.device=$RD_GPU --replay-routing "$rec" > "$work/runs/$name-replay.txt" ||
        return 1
    cat "$work/runs/$name-replay.txt"
    echo "= $name: the GPU's own top-k $(sed -n 's/.*own top-k \(differed in [^;]*\);.*/\1/p' \
        "$work/runs/$name-replay.txt"); step 1 (the same weights): $(awk -F, 'NR == 2 {
        print $3 " of " $2 }' "$work/runs/$name-gpu-replay/replay.csv")"
    if [ -e "$work/runs/$name-gpu/train.csv" ]; then
        echo "= $name without replay: $(csv_close "$work/runs/$name-cpu/train.csv" \
            "$work/runs/$name-gpu/train.csv" | tail -n 1)"
    fi
    local diff rc
    diff=$(csv_close "$work/runs/$name-cpu-rec/train.csv" \
        "$work/runs/$name-gpu-replay/train.csv" 5e-4)
    rc=$?
    echo "$diff"
    echo "= $name with replay: $(echo "$diff" | tail -n 1)"
    return $rc
}
spikes_pair() { # NAME SETTINGS...: train_pair with skip, then with rollback, on a run made to
    # spike (a corrupted stretch at step 26): the same steps skipped, the same rollbacks
    local name=$1 action; shift
    for action in skip rollback; do
        train_pair "$name-$action" "$@" --set train.steps=40 --set train.spike_window=8 \
            --set train.spike_on=loss --set data.corrupt_from=25 --set data.corrupt_batches=3 \
            --set train.rollback_every=5 --set "train.spike_action=$action" || return 1
    done
    local cpu=$work/runs/$name-rollback-cpu gpu=$work/runs/$name-rollback-gpu
    [ "$(wc -l < "$cpu/rollbacks.csv")" -ge 2 ] && cmp "$cpu/rollbacks.csv" "$gpu/rollbacks.csv" &&
        cmp <(cut -d, -f1,11 "$work/runs/$name-skip-cpu/train.csv") \
            <(cut -d, -f1,11 "$work/runs/$name-skip-gpu/train.csv") || return 1
    echo "= $name: $RD_GPU skips steps $(awk -F, '$11 == 1 { printf "%s ", $1 }' \
        "$work/runs/$name-skip-gpu/train.csv")and rolls back ($(tail -n +2 "$gpu/rollbacks.csv" |
        tr '\n' ' ')) as cpu does"
}
train_decode() { # NAME SETTINGS...: train_pair, then the GPU run's checkpoint decoded on the GPU
    # from the key-value cache and with the full forward at every byte (moe sample --no-cache):
    # at temperature 0 the same bytes, over 100 bytes of a 64-token context (restarted twice)
    local name=$1 ckpt=$work/runs/$1-gpu/ckpt.bin
    train_pair "$@" || return 1
    local how full=()
    for how in cache full; do
        [ $how = full ] && full=(--no-cache)
        $moe sample --ckpt "$ckpt" --prompt "the " --tokens 100 --temperature 0 \
            ${full[@]+"${full[@]}"} > "$work/runs/$name-sample-$how.txt" || return 1
    done
    if cmp "$work/runs/$name-sample-cache.txt" "$work/runs/$name-sample-full.txt"; then
        echo "= $name: decoding on $RD_GPU, 100 bytes from the cache equal the full forward's"
    else
        echo "= $name: decoding on $RD_GPU, the cache's bytes differ from the full forward's"
        return 1
    fi
}
moe_gpu() { # train-moe's GPU run, the reference of the steps below, made where a part lacks it
    [ -e "$work/runs/moe-gpu/train.csv" ] && return 0
    rm -rf "$work/runs/moe-gpu"
    $moe train --out "$work/runs/moe-gpu" "${base[@]}" "${moe_set[@]}" --set train.device=$RD_GPU
}
repeat() { # a second GPU run of train-moe's settings: the same checkpoint, byte for byte
    moe_gpu || return 1
    rm -rf "$work/runs/again"
    $moe train --out "$work/runs/again" "${base[@]}" "${moe_set[@]}" --set train.device=$RD_GPU &&
        cmp "$work/runs/moe-gpu/ckpt.bin" "$work/runs/again/ckpt.bin"
}
resume() { # 10 steps on the GPU, the other 10 on the CPU: train-moe's losses
    moe_gpu || return 1
    rm -rf "$work/runs/moved"
    $moe train --out "$work/runs/moved" "${base[@]}" "${moe_set[@]}" --set train.device=$RD_GPU \
        --until 10 &&
        $moe train --resume "$work/runs/moved" --set train.device=cpu --quiet &&
        csv_close "$work/runs/moe-gpu/train.csv" "$work/runs/moved/train.csv"
}
against_moe_gpu() { # RUN LABEL: runs/RUN's losses against train-moe's GPU run, within 2e-3
    local diff rc
    diff=$(csv_close "$work/runs/moe-gpu/train.csv" "$work/runs/$1/train.csv")
    rc=$?
    echo "$diff"
    echo "= $2: $(echo "$diff" | tail -n 1)"
    return $rc
}
staged() { # 2 processes share the GPU (dist.ep=2, host staging): train-moe's 1-process run
    # (the rehearsal stages cpu-fenced's memory, the host-unreadable stand-in for a GPU's)
    local dev=$RD_GPU
    [ "$dev" = cpu-ref ] && dev=cpu-fenced
    moe_gpu || return 1
    rm -rf "$work/runs/staged"
    timeout -k 10 50 mpirun -np 2 "$RD_MPI_BIN" train --out "$work/runs/staged" "${base[@]}" \
        "${moe_set[@]}" --set train.device=$dev --set dist.ep=2 --set dist.collectives=teach ||
        return 1
    against_moe_gpu staged "staged over 2 processes against 1"
}
nccl_pair() { # NP: train-moe's GPU run with dist.collectives=nccl over NP processes (NP 1: the
    # gradients' sums through NCCL at a world of one; 2: one GPU each, the exchange too)
    local np=$1
    local cmd=("$moe")
    [ "$np" -gt 1 ] && cmd=(timeout -k 10 50 mpirun -np "$np" "$RD_MPI_BIN")
    moe_gpu || return 1
    rm -rf "$work/runs/nccl-$np"
    "${cmd[@]}" train --out "$work/runs/nccl-$np" "${base[@]}" "${moe_set[@]}" \
        --set train.device=$RD_GPU --set dist.collectives=nccl --set dist.ep="$np" || return 1
    against_moe_gpu "nccl-$np" "NCCL over $np process(es) against the 1-process run"
}
precision_pair() { # P: 50 steps at precision P against fp32: the last loss within 2 %
    local p=$1 a b
    for q in fp32 "$p"; do
        [ -e "$work/runs/prec-$q/train.csv" ] && continue # fp32's run serves both comparisons
        rm -rf "$work/runs/prec-$q"
        $moe train --out "$work/runs/prec-$q" "${base[@]}" "${moe_set[@]}" --set train.steps=50 \
            --set train.device=$RD_GPU --set train.precision=$q || return 1
    done
    a=$(tail -n 1 "$work/runs/prec-fp32/train.csv" | cut -d, -f2)
    b=$(tail -n 1 "$work/runs/prec-$p/train.csv" | cut -d, -f2)
    echo "last loss: fp32 $a, $p $b"
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 * a) }'
}
build_all() { # make cuda for ARCH and the unit suites the steps run (MPI=1: build/cuda-mpi)
    local arch=$1; shift
    if [ -n "${RD_BUILD:-}" ]; then # the rehearsal's binaries, built already
        local f
        for f in "$moe" "$RD_BUILD"/tests/test_backend_ops "$RD_BUILD"/tests/test_backend_grad; do
            [ -x "$f" ] || { echo "no $f: build it first (RD_BUILD=$RD_BUILD)"; return 1; }
        done
        echo "RD_BUILD=$RD_BUILD: its binaries, built already"
        return 0
    fi
    make -j"$(nproc)" cuda CUDA_ARCH="$arch" "$@" &&
        make -j"$(nproc)" CUDA=1 CUDA_ARCH="$arch" "$@" build/cuda/tests/test_backend_ops \
            build/cuda/tests/test_backend_grad build/cuda/tests/test_backend_coll \
            build/cuda/tests/test_decode
}
build_mpi() {
    if [ -n "${RD_BUILD:-}" ]; then
        [ -x "$RD_MPI_BIN" ] && echo "RD_BUILD=$RD_BUILD: $RD_MPI_BIN, built already" && return 0
        echo "no $RD_MPI_BIN: build it first"
        return 1
    fi
    make -j"$(nproc)" cuda MPI=1 CUDA_ARCH="$1"
}
if [ $fn_mode = 1 ]; then
    "$@"
    exit
fi

# ---- the steps -------------------------------------------------------------------------------
# step NAME LIMIT CMD...: run CMD with a time limit, its output in logs/NAME.log; a step that
# fails runs again once (rerun)
step() {
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    remaining=$((remaining - limit))
    if [ "$name" = "${RD_FAIL:-}" ]; then # the rerun's own check, in a rehearsal
        echo "RD_FAIL=$name: this run made to fail" > "$logs/$name.log"
        false
    else
        timeout -s KILL "$((limit * scale))" "$@" > "$logs/$name.log" 2>&1
    fi
    local rc=$?
    say "$name: $([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc$([ $rc = 137 ] && echo ": over its $limit s"))") in $((SECONDS - t0)) s"
    grep '^= ' "$logs/$name.log" | sed 's/^= /    /' | tee -a "$summary"
    if [ $rc != 0 ]; then
        tail -n 15 "$logs/$name.log" | sed 's/^/    /' | tee -a "$summary"
        case $name in build* | sanitize-*) ;; *) rerun "$name" "$limit" "$@" ;; esac
    fi
    return $rc
}
# rerun NAME LIMIT CMD...: the failed step again, each launch waited for (CUDA_LAUNCH_BLOCKING=1)
# and under memcheck where it exists, so that the first error names its kernel; within the
# step's limit and what is left of the budget once the later steps' limits are set aside
rerun() {
    local name=$1 limit=$2; shift 2
    local left=$limit t0=$SECONDS san=() how="CUDA_LAUNCH_BLOCKING=1"
    if [ "$profile" != all ]; then
        left=$((BUDGET - (SECONDS - steps_t0) - remaining))
        [ $left -gt "$limit" ] && left=$limit
    fi
    if [ $left -lt 15 ]; then
        say "    rerun: skipped, $left s left of the $BUDGET s once the later steps' limits are set aside"
        return
    fi
    if [ -n "$sanitizer" ]; then
        san=("$sanitizer" --tool memcheck --target-processes all --error-exitcode 1 --print-limit 20)
        how="$how under compute-sanitizer memcheck"
    fi
    # CK_FORK=no: the op suites' tests in the one process the sanitizer watches from the start
    CUDA_LAUNCH_BLOCKING=1 CK_FORK=no timeout -s KILL "$((left * scale))" ${san[@]+"${san[@]}"} "$@" \
        > "$logs/$name.rerun.log" 2>&1
    local rc=$?
    say "    rerun with $how: $([ $rc = 0 ] && echo "pass (the failure did not repeat)" || echo "FAIL (exit $rc)") in $((SECONDS - t0)) s"
    if [ $rc != 0 ]; then
        # the sanitizer's first reports (the kernel, its thread and block, the address) first
        { grep -m 12 -E '^=========  *(Invalid|Program hit|Saved host backtrace|at |by thread|Address)|^========= [A-Z]' \
            "$logs/$name.rerun.log"; tail -n 8 "$logs/$name.rerun.log"; } | sed 's/^/      /' | tee -a "$summary"
    fi
}
# pack: logs.tar.gz, every step's log and the runs' CSV and text files (no checkpoint, no data)
pack() {
    tar -czf "$out/logs.tar.gz" -C "$work" --exclude='*.bin' --exclude='*.route' logs runs 2> /dev/null ||
        echo "pack: logs.tar.gz could not be written" >&2
}
finish() {
    say "done: $(grep -c '^[a-z0-9-]*: pass' "$summary") passed, $(grep -c '^[a-z0-9-]*: FAIL' "$summary") failed, $(grep -c '^[a-z0-9-]*: skipped' "$summary") skipped"
    pack
    ! grep -q '^[a-z0-9-]*: FAIL' "$summary"
}

: > "$summary"
say "moe.c GPU check ($profile), $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ "$gpu" = cpu-ref ]; then
    say "REHEARSAL: no GPU, cpu-ref stands in for cuda; the GPU-only steps are skipped"
else
    say "gpu: $(nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader | head -n 1)"
    say "gpus: $(nvidia-smi -L | wc -l)"
    if [ -z "$arch" ]; then
        arch=90
        say "arch: nvidia-smi gives no compute_cap (a driver before 510): building for sm_90"
    fi
fi
nvcc_bin=$(command -v nvcc || echo "$cuda_home/bin/nvcc")
say "nvcc: $("$nvcc_bin" --version 2> /dev/null | tail -n 1), built for sm_$arch"
sanitizer=
if [ "$gpu" = cuda ]; then
    for s in "$(command -v compute-sanitizer)" "$cuda_home/bin/compute-sanitizer" \
        "$cuda_home/compute-sanitizer/compute-sanitizer"; do
        [ -n "$s" ] && [ -x "$s" ] && { sanitizer=$s; break; }
    done
fi

# OpenBLAS, Check and Open MPI from .gpu-deps/ where the machine has none
have_deps() {
    command -v pkg-config > /dev/null 2>&1 && pkg-config --exists check 2> /dev/null &&
        { pkg-config --exists openblas 2> /dev/null ||
            ls /usr/lib/*/openblas-openmp/pkgconfig/openblas.pc > /dev/null 2>&1; }
}
have_mpi() { command -v mpicc > /dev/null 2>&1 && command -v mpirun > /dev/null 2>&1; }
deps_ok=0 mpi_ok=0
have_deps && deps_ok=1
have_mpi && mpi_ok=1
if { [ $deps_ok = 0 ] || [ $mpi_ok = 0 ]; } && ls .gpu-deps/*.deb > /dev/null 2>&1; then
    root=/tmp/moe-deps
    mkdir -p "$root"
    for f in .gpu-deps/*.deb; do
        if command -v dpkg-deb > /dev/null 2>&1; then
            dpkg-deb -x "$f" "$root"
        else # ar and tar alone: the data member of the package
            member=$(ar t "$f" | grep '^data\.tar')
            ar p "$f" "$member" | tar -x -C "$root" --auto-compress -f - 2> /dev/null ||
                ar p "$f" "$member" | tar -xJ -C "$root"
        fi
    done
    lib=$(ls -d "$root"/usr/lib/*-linux-gnu | head -n 1)
    export PATH=$root/usr/bin:$PATH
    export LD_LIBRARY_PATH=$lib/openblas-openmp:$lib/openmpi/lib:$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    if [ $deps_ok = 0 ]; then
        export DEPS_ROOT=$root PKG_CONFIG_SYSROOT_DIR=$root
        export PKG_CONFIG_LIBDIR=$lib/openblas-openmp/pkgconfig:$lib/pkgconfig:$root/usr/share/pkgconfig
        say "deps: OpenBLAS and Check from .gpu-deps, unpacked in $root"
        # packages of a newer system than this one do not load here: say so before the build
        if ldd "$lib/openblas-openmp/libopenblas.so.0" 2>&1 | grep -E 'not found|version' > /dev/null; then
            say "deps: the unpacked OpenBLAS does not load here ($(ldd "$lib/openblas-openmp/libopenblas.so.0" 2>&1 |
                grep -m 1 -E 'not found|version')): pack .gpu-deps on a system as old as this one"
        fi
    fi
    if [ $mpi_ok = 0 ] && [ -x "$root/usr/bin/mpicc.openmpi" ]; then
        # Debian's Open MPI names its programs *.openmpi; OPAL_PREFIX and PMIX_INSTALL_PREFIX
        # move its data files and plugins from /usr to the unpacked tree
        ln -sf mpicc.openmpi "$root/usr/bin/mpicc"
        ln -sf mpirun.openmpi "$root/usr/bin/mpirun"
        export OPAL_PREFIX=$root/usr PMIX_INSTALL_PREFIX=$lib/pmix2
        export PMIX_MCA_pcompress_base_silence_warning=1
        say "deps: Open MPI from .gpu-deps, unpacked in $root"
    fi
fi
have_deps || say "deps: no OpenBLAS or Check here, and none in .gpu-deps/ (bash tests/gpu/pack_deps.sh, on a machine with network): the build will stop"
have_mpi || say "deps: no MPI here, and none in .gpu-deps/: the steps across processes are skipped"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# NCCL: the toolkit's, else the nvidia-nccl Python wheel's (NCCL_HOME for the Makefile)
if [ ! -e "$cuda_home/include/nccl.h" ] && [ -z "${NCCL_HOME:-}" ]; then
    wheel=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2> /dev/null ||
            python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2> /dev/null)
    if [ -n "$wheel" ] && [ -e "$wheel/include/nccl.h" ]; then
        export NCCL_HOME=$wheel
        say "deps: NCCL from the Python wheel in $wheel"
    fi
fi
[ -e "${NCCL_HOME:-$cuda_home}/include/nccl.h" ] || say "deps: no NCCL here: the NCCL steps are skipped"

skipped() { # NAME WHY: a step that cannot run here, reported as such
    remaining=$((remaining - $2))
    say "$1: skipped ($3)"
}
need_data() {
    [ -e "$data/train.bin" ] || $moe synth --out "$data" --tokens 200000 --seed 5 > /dev/null 2>&1
}
# run_named NAME LIMIT: the step NAME of the plan, or why it cannot run here
run_named() {
    local name=$1 limit=$2 need=0 mpi_bin=$RD_MPI_BIN
    [ "$gpu" = cuda ] && need=1
    case $name in
        build) step build "$limit" bash "$me" --fn build_all "$arch" ;;
        ops | grad | coll | decode)
            local suite=test_backend_$name
            [ "$name" = decode ] && suite=test_decode
            if [ ! -x "$bdir/tests/$suite" ]; then
                skipped "$name" "$limit" "no $bdir/tests/$suite"
                return 0
            fi
            step "$name" "$limit" env MOE_TEST_CUDA=$need "$bdir/tests/$suite" ;;
        sanitize-*)
            if [ "$gpu" != cuda ]; then
                skipped "$name" "$limit" "rehearsal"
            elif [ -z "$sanitizer" ]; then
                skipped "$name" "$limit" "no compute-sanitizer on this machine"
            else
                step "$name" "$limit" env MOE_TEST_CUDA=1 CK_FORK=no "$sanitizer" \
                    --tool "${name#sanitize-}" --error-exitcode 1 "$bdir/tests/test_backend_ops"
            fi ;;
        train-* | replay-*)
            need_data
            local fn=train_pair variant=${name#*-} env=()
            case $variant in gqa | mla) fn=train_decode ;; spikes) fn=spikes_pair ;; esac
            [ "${name%%-*}" = replay ] && fn=replay_pair
            local set=("${moe_set[@]}")
            case $variant in
                dense) set=(--set moe.num_experts=0) ;;
                # the new attention: 2 key-value heads for the 4 query heads, each of 32 channels
                # (not d_model / n_head), normed queries and keys; latent attention with queries
                # through their own latent
                gqa) set+=(--set model.kv_heads=2 --set model.head_dim=32 --set model.qk_norm=head) ;;
                mla) set+=(--set model.attention=mla --set mla.q_rank=32 --set mla.kv_rank=32
                           --set mla.rope_dim=8 --set mla.nope_dim=8 --set mla.v_dim=16) ;;
                capacity) set+=(--set moe.capacity_factor=1.0 --set moe.padded=1) ;;
                expert-choice) set+=(--set moe.routing=expert_choice --set moe.balance=none) ;;
                aux-free) set+=(--set moe.score=sigmoid --set moe.balance=aux_free) ;;
                seq-aux) set+=(--set moe.score=sigmoid --set moe.balance=seq_aux --set moe.num_shared=1) ;;
                # chapter 5's methods together: DSSN, TinyInit, a bf16 router, the aux loss over
                # the step and over groups (accumulation 2)
                stability) set+=(--set model.norm=dssn --set model.init=tiny --set moe.router_precision=bf16
                                 --set moe.balance_scope=global --set moe.balance_groups=2 --set train.accum=2) ;;
                # the experts' first rung (a loop of products per expert) against the grouped calls
                moe-loop) env=(MOE_CUDA_EXPERTS=loop) ;;
            esac
            step "$name" "$limit" env ${env[@]+"${env[@]}"} bash "$me" --fn "$fn" "$variant" "${set[@]}" ;;
        # tf32 and bf16 products, judged by the loss: 50 steps within 2 % of fp32's
        precision-*) need_data; step "$name" "$limit" bash "$me" --fn precision_pair "${name#precision-}" ;;
        repeat | resume) need_data; step "$name" "$limit" bash "$me" --fn "$name" ;;
        build-mpi)
            if ! have_mpi; then skipped "$name" "$limit" "no MPI here"; return 0; fi
            step build-mpi "$limit" bash "$me" --fn build_mpi "$arch" || mpi_failed=1 ;;
        # two processes sharing the GPU, the expert exchange and the gradients' sums staged
        # through the host (NCCL refuses two ranks on one GPU)
        staged-2proc)
            if ! have_mpi || [ ! -x "$mpi_bin" ] || [ "${mpi_failed:-0}" = 1 ]; then
                skipped "$name" "$limit" "no MPI here, or no $mpi_bin built"
                return 0
            fi
            need_data
            step "$name" "$limit" bash "$me" --fn staged ;;
        # NCCL: at a world of one on this GPU, and over 2 GPUs where there are 2 (NCCL refuses
        # two processes on one GPU, so one GPU cannot check the exchange through it)
        nccl-1proc)
            if [ "$gpu" != cuda ]; then skipped "$name" "$limit" rehearsal; return 0; fi
            if ! ldd "$moe" | grep -q libnccl; then skipped "$name" "$limit" "this build has no NCCL"; return 0; fi
            need_data
            step "$name" "$limit" bash "$me" --fn nccl_pair 1 ;;
        nccl-2proc)
            if [ "$gpu" != cuda ] || [ "$(nvidia-smi -L | wc -l)" -lt 2 ] || ! have_mpi ||
                [ ! -x "$mpi_bin" ] || [ "${mpi_failed:-0}" = 1 ] || ! ldd "$mpi_bin" | grep -q libnccl; then
                skipped "$name" "$limit" "it needs 2 GPUs, MPI and build/cuda-mpi/moe with NCCL; NCCL refuses two processes on one GPU"
                return 0
            fi
            need_data
            step "$name" "$limit" bash "$me" --fn nccl_pair 2 ;;
        bench*)
            local args=(--device "$gpu") env=()
            if [ "$gpu" != cuda ]; then # the rehearsal's stand-in is slow: the smallest config
                case $name in
                    bench-decode*) args=(--decode "${args[@]}" --config test --batch "1,4" --steps 2) ;;
                    *) args+=(--config test --steps 1 --warmup 0) ;;
                esac
            else
                case $name in
                    bench) args+=(--precision fp32 --config gpu-medium --config gpu-medium-dense --steps 5 --warmup 2) ;;
                    bench-fp32) args+=(--precision fp32 --config tiny --config small --config gpu-medium --config gpu-medium-dense) ;;
                    bench-fp32-loop) args+=(--config gpu-medium) env=(MOE_CUDA_EXPERTS=loop) ;;
                    bench-tf32 | bench-bf16) args+=(--precision "${name#bench-}" --config gpu-medium --config gpu-medium-dense) ;;
                    bench-decode) args=(--decode "${args[@]}" --config small --config small-dense) ;;
                    bench-decode-attn) args=(--decode "${args[@]}" --config tiny --config tiny-gqa --config tiny-mla) ;;
                    bench-decode-medium) args=(--decode "${args[@]}" --config gpu-medium --config gpu-medium-dense --batch "1,4,16") ;;
                esac
            fi
            step "$name" "$limit" env ${env[@]+"${env[@]}"} "$moe" bench "${args[@]}" --json ;;
        *) say "$name: not a step of this script"; return 1 ;;
    esac
}

mapfile -t rows < <(profile_steps)
remaining=0
for row in "${rows[@]}"; do remaining=$((remaining + ${row#* })); done
say "plan: ${#rows[@]} steps, $remaining s of limits$([ "$profile" != all ] && echo " (of $BUDGET s)")"
steps_t0=$SECONDS
for row in "${rows[@]}"; do
    if ! run_named "${row% *}" "${row#* }" && [ "${row% *}" = build ]; then
        say "the build failed: the other steps need it"
        finish
        exit 1
    fi
done
finish
