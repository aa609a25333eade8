#!/usr/bin/env bash
# run_device.sh [OUT]: the CUDA backend's checks on a machine with an NVIDIA GPU, in one
# invocation of a few minutes; every step has its own time limit, and the results go to one
# summary, OUT/summary.txt (OUT defaults to $OUT, else build-cuda/gpu-check).
#
#   build    make cuda for this GPU's architecture, with the machine's own nvcc
#   ops      every table entry on the GPU against the CPU reference, forward and backward
#            (tests/test_backend_ops.c: integers exactly, floats with the one tolerance rule),
#            and the gradients of the GPU's products by finite differences
#            (tests/test_backend_grad.c); MOE_TEST_CUDA=1 makes a GPU that does not open fail
#   sanitize compute-sanitizer memcheck and racecheck over the ops, where the tool exists
#   train    the same short runs on cpu and cuda: dense, MoE, padded capacity, expert choice,
#            sigmoid scores with seq_aux and aux-free balancing, shared experts; every step's
#            losses and gradient norm within 2e-3 (relative), as tests/test_backends.sh asks
#            of cpu-ref
#   replay   the cpu runs' routing recorded and replayed on the GPU (moe train
#            --record-routing / --replay-routing): the flip rate the GPU's own top-k shows, and
#            every step within 5e-4 once flips are replayed away (MoE, capacity, aux-free,
#            seq_aux with a shared expert)
#            and the MoE run again with the experts' first rung (MOE_CUDA_EXPERTS=loop); 50
#            steps at tf32 and at bf16 end within 2 % of fp32's loss
#   repeat   two GPU runs write the same checkpoint, byte for byte
#   nccl     dist.collectives=nccl: the MoE run at a world of one (the gradients' sums through
#            NCCL) and, on a machine with 2 GPUs, over 2 processes; the losses of the 1-process
#            run within 2e-3 (the coll step runs NCCL's sum and exchange at a world of one:
#            tests/test_backend_coll.c)
#   staged   (where MPI is, or comes from .gpu-deps) 2 processes share the GPU at dist.ep=2,
#            the expert exchange and the gradients' sums staged through the host: the losses of
#            the 1-process GPU run within 2e-3
#   resume   a GPU checkpoint continues on the CPU
#   decode   the key-value cache's decoding on the GPU against the full forward at every
#            position (tests/test_decode.c, the GPU among its backends)
#   bench    moe bench --device cuda: tiny, small and gpu-medium (with its dense twin) in fp32,
#            gpu-medium with the experts' loop, gpu-medium in tf32 and bf16; moe bench --decode
#            of small and gpu-medium with their dense twins; each JSON in OUT/bench-*.log
# It needs what `make test` needs (OpenBLAS, Check) and the CUDA toolkit; a step whose
# prerequisite is missing is reported as skipped, never as passed. A machine without OpenBLAS
# or Check and without a way to install them takes them from .gpu-deps/ (Debian packages that
# tests/gpu/pack_deps.sh downloads on a machine with network), unpacked under /tmp/moe-deps.
#
# REHEARSE=1 runs the same steps on a machine without a GPU, with cpu-ref standing in for cuda
# (and the GPU-only steps skipped): a check of the script itself, before a GPU's time is spent.
# ONLY='build|ops|train-.*' runs only the steps whose names match (an extended regular
# expression, whole names): the checks split over two calls where one call's time is short.
# The first call must include build; the train-* runs before the replay-*, staged and nccl
# steps that compare with them.
set -u
me=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.."
# The training steps are functions of this script; `timeout` runs them as
# `run_device.sh --fn NAME ARGS...`, with the folder and the device in the environment.
fn_mode=0
if [ "${1:-}" = --fn ]; then fn_mode=1; shift; fi
if [ $fn_mode = 0 ]; then
    export RD_OUT=${1:-${OUT:-build-cuda/gpu-check}}
fi
out=$RD_OUT
mkdir -p "$out"
summary=$out/summary.txt
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} OMP_WAIT_POLICY=passive
say() { echo "$*" | tee -a "$summary"; }
# step NAME LIMIT CMD...: run CMD with a time limit, its output in OUT/NAME.log
step() {
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    if [ -n "${ONLY:-}" ] && ! [[ $name =~ ^($ONLY)$ ]]; then
        say "$name: skipped (ONLY=$ONLY)"
        return 0
    fi
    timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    say "$name: $([ $rc = 0 ] && echo pass || echo "FAIL (exit $rc)") in $((SECONDS - t0)) s"
    grep '^= ' "$out/$name.log" | sed 's/^= /    /' | tee -a "$summary"
    [ $rc = 0 ] || tail -n 15 "$out/$name.log" | sed 's/^/    /' | tee -a "$summary"
    return $rc
}

moe=build-cuda/moe
data=$out/data
base=(--set model.d_model=64 --set model.n_layer=2 --set model.n_head=4 --set model.seq_len=64
      --set model.d_ff=128 --set moe.d_expert=64 --set train.batch=8 --set train.steps=20
      --set train.eval_every=10 --set train.warmup=3 --set "data.train=$data/train.bin"
      --set "data.val=$data/val.bin" --quiet)
# shellcheck source=tests/lib/csv_close.sh
. tests/lib/csv_close.sh
train_pair() { # NAME SETTINGS...: the run on cpu and on the GPU, compared
    local name=$1; shift
    $moe train --out "$out/runs/$name-cpu" "${base[@]}" "$@" --set train.device=cpu &&
        $moe train --out "$out/runs/$name-gpu" "${base[@]}" "$@" --set train.device=$RD_GPU &&
        csv_close "$out/runs/$name-cpu/train.csv" "$out/runs/$name-gpu/train.csv"
}
replay_pair() { # NAME SETTINGS...: the CPU's routing replayed on the GPU (route_tape.h)
    # The cpu run records its choices, the GPU run takes them instead of its own top-k and
    # counts where its own differ (the flip rate: near-ties decided the other way by the GPU's
    # rounding). Without flips the runs differ by arithmetic alone: every step within 5e-4.
    # Lines starting "= " go to the summary.
    local name=$1 rec=$out/runs/$1.route; shift
    rm -f "$rec"
    $moe train --out "$out/runs/$name-cpu-rec" "${base[@]}" "$@" --set train.device=cpu \
        --record-routing "$rec" &&
        $moe train --out "$out/runs/$name-gpu-replay" "${base[@]}" "$@" \
            --set train.device=$RD_GPU --replay-routing "$rec" > "$out/runs/$name-replay.txt" ||
        return 1
    cat "$out/runs/$name-replay.txt"
    echo "= $name: the GPU's own top-k $(sed -n 's/.*own top-k \(differed in [^;]*\);.*/\1/p' \
        "$out/runs/$name-replay.txt"); step 1 (the same weights): $(awk -F, 'NR == 2 {
        print $3 " of " $2 }' "$out/runs/$name-gpu-replay/replay.csv")"
    if [ -e "$out/runs/$name-gpu/train.csv" ]; then
        echo "= $name without replay: $(csv_close "$out/runs/$name-cpu/train.csv" \
            "$out/runs/$name-gpu/train.csv" | tail -n 1)"
    fi
    local diff rc
    diff=$(csv_close "$out/runs/$name-cpu-rec/train.csv" \
        "$out/runs/$name-gpu-replay/train.csv" 5e-4)
    rc=$?
    echo "$diff"
    echo "= $name with replay: $(echo "$diff" | tail -n 1)"
    return $rc
}
repeat() { # a second GPU run of train-moe's settings: the same checkpoint, byte for byte
    $moe train --out "$out/runs/again" "${base[@]}" --set moe.num_experts=8 --set moe.top_k=2 \
        --set train.device=$RD_GPU && cmp "$out/runs/moe-gpu/ckpt.bin" "$out/runs/again/ckpt.bin"
}
resume() { # 10 steps on the GPU, the other 10 on the CPU: train-moe's losses
    $moe train --out "$out/runs/moved" "${base[@]}" --set moe.num_experts=8 --set moe.top_k=2 \
        --set train.device=$RD_GPU --until 10 &&
        $moe train --resume "$out/runs/moved" --set train.device=cpu --quiet &&
        csv_close "$out/runs/moe-gpu/train.csv" "$out/runs/moved/train.csv"
}
against_moe_gpu() { # RUN LABEL: runs/RUN's losses against train-moe's GPU run, within 2e-3
    local diff rc
    diff=$(csv_close "$out/runs/moe-gpu/train.csv" "$out/runs/$1/train.csv")
    rc=$?
    echo "$diff"
    echo "= $2: $(echo "$diff" | tail -n 1)"
    return $rc
}
staged() { # 2 processes share the GPU (dist.ep=2, host staging): train-moe's 1-process run
    # (the rehearsal stages cpu-fenced's memory, the host-unreadable stand-in for a GPU's)
    local dev=$RD_GPU
    [ "$dev" = cpu-ref ] && dev=cpu-fenced
    timeout -k 10 150 mpirun -np 2 build-cuda-mpi/moe train --out "$out/runs/staged" "${base[@]}" \
        --set moe.num_experts=8 --set moe.top_k=2 --set train.device=$dev --set dist.ep=2 \
        --set dist.collectives=teach || return 1
    against_moe_gpu staged "staged over 2 processes against 1"
}
nccl_pair() { # NP: train-moe's GPU run with dist.collectives=nccl over NP processes (NP 1: the
    # gradients' sums through NCCL at a world of one; 2: one GPU each, the exchange too)
    local np=$1 bin=$moe
    local cmd=("$moe")
    if [ "$np" -gt 1 ]; then
        bin=build-cuda-mpi/moe
        cmd=(timeout -k 10 150 mpirun -np "$np" "$bin")
    fi
    "${cmd[@]}" train --out "$out/runs/nccl-$np" "${base[@]}" --set moe.num_experts=8 \
        --set moe.top_k=2 --set train.device=$RD_GPU --set dist.collectives=nccl \
        --set dist.ep="$np" || return 1
    against_moe_gpu "nccl-$np" "NCCL over $np process(es) against the 1-process run"
}
precision_pair() { # P: 50 steps at precision P against fp32: the last loss within 2 %
    local p=$1 a b
    for q in fp32 "$p"; do
        [ -e "$out/runs/prec-$q/train.csv" ] && continue # fp32's run serves both comparisons
        $moe train --out "$out/runs/prec-$q" "${base[@]}" --set moe.num_experts=8 \
            --set moe.top_k=2 --set train.steps=50 --set train.device=$RD_GPU \
            --set train.precision=$q || return 1
    done
    a=$(tail -n 1 "$out/runs/prec-fp32/train.csv" | cut -d, -f2)
    b=$(tail -n 1 "$out/runs/prec-$p/train.csv" | cut -d, -f2)
    echo "last loss: fp32 $a, $p $b"
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 * a) }'
}
if [ $fn_mode = 1 ]; then
    "$@"
    exit
fi

: > "$summary"
say "moe.c GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
gpu=cuda
if [ "${REHEARSE:-0}" = 1 ]; then
    gpu=cpu-ref arch=90
    say "REHEARSAL: no GPU, cpu-ref stands in for cuda; the GPU-only steps are skipped"
elif ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > /dev/null 2>&1; then
    say "no GPU (nvidia-smi finds none): nothing to check here"
    exit 1
else
    say "gpu: $(nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader | head -n 1)"
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
fi
say "nvcc: $(nvcc --version 2>/dev/null | tail -n 1)"

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
        export PKG_CONFIG_LIBDIR=$lib/openblas-openmp/pkgconfig:$lib/pkgconfig
        say "deps: OpenBLAS and Check from .gpu-deps, unpacked in $root"
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
have_deps || say "deps: no OpenBLAS or Check here, and no .gpu-deps/ (tests/gpu/pack_deps.sh): the build will stop"
have_mpi || say "deps: no MPI here, and none in .gpu-deps/: the steps across processes are skipped"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# NCCL: the toolkit's, else the nvidia-nccl Python wheel's (NCCL_HOME for the Makefile)
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -e "$cuda_home/include/nccl.h" ] && [ -z "${NCCL_HOME:-}" ]; then
    wheel=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2> /dev/null ||
            python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2> /dev/null)
    if [ -n "$wheel" ] && [ -e "$wheel/include/nccl.h" ]; then
        export NCCL_HOME=$wheel
        say "deps: NCCL from the Python wheel in $wheel"
    fi
fi
[ -e "${NCCL_HOME:-$cuda_home}/include/nccl.h" ] || say "deps: no NCCL here: the NCCL steps are skipped"

step build 300 make -j"$(nproc)" cuda CUDA_ARCH="${arch:-90}" || exit 1
step build-tests 120 make -j"$(nproc)" CUDA=1 CUDA_ARCH="${arch:-90}" \
    build-cuda/tests/test_backend_ops build-cuda/tests/test_backend_grad \
    build-cuda/tests/test_backend_coll build-cuda/tests/test_decode || exit 1

need=$([ "$gpu" = cuda ] && echo 1 || echo 0)
MOE_TEST_CUDA=$need step ops 120 build-cuda/tests/test_backend_ops
MOE_TEST_CUDA=$need step grad 120 build-cuda/tests/test_backend_grad
MOE_TEST_CUDA=$need step coll 60 build-cuda/tests/test_backend_coll
MOE_TEST_CUDA=$need step decode 120 build-cuda/tests/test_decode

if [ "$gpu" != cuda ]; then
    say "sanitize: skipped (rehearsal)"
elif command -v compute-sanitizer > /dev/null 2>&1; then
    for tool in memcheck racecheck; do
        MOE_TEST_CUDA=1 CK_FORK=no step "sanitize-$tool" 240 compute-sanitizer --tool "$tool" \
            --error-exitcode 1 build-cuda/tests/test_backend_ops
    done
else
    say "sanitize: skipped (no compute-sanitizer on this machine)"
fi

$moe synth --out "$data" --tokens 200000 --seed 5 > /dev/null 2>&1
export RD_GPU=$gpu
step train-dense 120 bash "$me" --fn train_pair dense --set moe.num_experts=0
step train-moe 120 bash "$me" --fn train_pair moe --set moe.num_experts=8 --set moe.top_k=2
step train-capacity 120 bash "$me" --fn train_pair capacity --set moe.num_experts=8 --set moe.top_k=2 \
    --set moe.capacity_factor=1.0 --set moe.padded=1
step train-expert-choice 120 bash "$me" --fn train_pair expert-choice --set moe.num_experts=8 --set moe.top_k=2 \
    --set moe.routing=expert_choice --set moe.balance=none
step train-aux-free 120 bash "$me" --fn train_pair aux-free --set moe.num_experts=8 --set moe.top_k=2 \
    --set moe.score=sigmoid --set moe.balance=aux_free
step train-seq-aux 120 bash "$me" --fn train_pair seq-aux --set moe.num_experts=8 --set moe.top_k=2 \
    --set moe.score=sigmoid --set moe.balance=seq_aux --set moe.num_shared=1
# chapter 5's methods together: DSSN, TinyInit, a bf16 router, the aux loss over the step and
# over groups (accumulation 2), and their replay
step train-stability 120 bash "$me" --fn train_pair stability --set moe.num_experts=8 --set moe.top_k=2 \
    --set model.norm=dssn --set model.init=tiny --set moe.router_precision=bf16 \
    --set moe.balance_scope=global --set moe.balance_groups=2 --set train.accum=2
step replay-stability 120 bash "$me" --fn replay_pair stability --set moe.num_experts=8 \
    --set moe.top_k=2 --set model.norm=dssn --set model.init=tiny --set moe.router_precision=bf16 \
    --set moe.balance_scope=global --set moe.balance_groups=2 --set train.accum=2
# the CPU's routing replayed on the GPU: the flip rate, and the runs without flips
step replay-moe 120 bash "$me" --fn replay_pair moe --set moe.num_experts=8 --set moe.top_k=2
step replay-capacity 120 bash "$me" --fn replay_pair capacity --set moe.num_experts=8 \
    --set moe.top_k=2 --set moe.capacity_factor=1.0 --set moe.padded=1
step replay-aux-free 120 bash "$me" --fn replay_pair aux-free --set moe.num_experts=8 \
    --set moe.top_k=2 --set moe.score=sigmoid --set moe.balance=aux_free
step replay-seq-aux 120 bash "$me" --fn replay_pair seq-aux --set moe.num_experts=8 \
    --set moe.top_k=2 --set moe.score=sigmoid --set moe.balance=seq_aux --set moe.num_shared=1

# tf32 and bf16 products, judged by the loss: 50 steps within 2 % of fp32's
step precision-tf32 120 bash "$me" --fn precision_pair tf32
step precision-bf16 120 bash "$me" --fn precision_pair bf16
# the experts' first rung (a loop of products per expert) against the grouped calls
MOE_CUDA_EXPERTS=loop step train-moe-loop 120 bash "$me" --fn train_pair moe-loop \
    --set moe.num_experts=8 --set moe.top_k=2
step repeat 120 bash "$me" --fn repeat
step resume 120 bash "$me" --fn resume
# two processes sharing the GPU, the expert exchange and the gradients' sums staged through
# the host (NCCL refuses two ranks on one GPU; NCCL itself is not built yet)
if have_mpi; then
    step build-mpi 300 make -j"$(nproc)" cuda MPI=1 CUDA_ARCH="${arch:-90}" &&
        step staged-2proc 180 bash "$me" --fn staged
else
    say "staged-2proc: skipped (no MPI here)"
fi
# NCCL: at a world of one on this GPU, and over 2 GPUs where there are 2 (NCCL refuses two
# processes on one GPU, so one GPU cannot check the exchange through it)
if [ "$gpu" = cuda ] && ldd "$moe" | grep -q libnccl; then
    step nccl-1proc 150 bash "$me" --fn nccl_pair 1
    if [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && have_mpi && [ -x build-cuda-mpi/moe ]; then
        step nccl-2proc 180 bash "$me" --fn nccl_pair 2
    else
        say "nccl-2proc: skipped (it needs 2 GPUs and MPI; NCCL refuses two processes on one GPU)"
    fi
else
    say "nccl: skipped ($([ "$gpu" = cuda ] && echo "this build has no NCCL" || echo "rehearsal"))"
fi
if [ "$gpu" = cuda ]; then
    step bench-fp32 200 $moe bench --device cuda --precision fp32 --config tiny --config small \
        --config gpu-medium --config gpu-medium-dense --json
    MOE_CUDA_EXPERTS=loop step bench-fp32-loop 120 $moe bench --device cuda --config gpu-medium \
        --json
    for p in tf32 bf16; do
        step "bench-$p" 120 $moe bench --device cuda --precision $p --config gpu-medium \
            --config gpu-medium-dense --json
    done
    step bench-decode 200 $moe bench --decode --device cuda --config small --config small-dense \
        --json
    step bench-decode-medium 200 $moe bench --decode --device cuda --config gpu-medium \
        --config gpu-medium-dense --batch 1,4,16 --json
else # the rehearsal's stand-in is slow: the bench's smallest config, one step
    step bench 240 $moe bench --device "$gpu" --config test --steps 1 --warmup 0 --json
    step bench-decode 120 $moe bench --decode --device "$gpu" --config test --batch 1,4 \
        --steps 2 --json
fi
say "done: $(grep -c ': pass' "$summary") passed, $(grep -c ': FAIL' "$summary") failed"
! grep -q ': FAIL' "$summary"
