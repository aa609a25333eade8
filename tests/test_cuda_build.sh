#!/usr/bin/env bash
# test_cuda_build.sh: the CUDA build, on a machine with the CUDA toolkit and with or without a
# GPU (tests/gpu/run_device.sh checks the GPU half).
#
#   1. `make cuda` builds build/cuda/moe for Hopper (CUDA_ARCH=90; with MOE_TEST_FULL=1, as
#      `make test-full` and CI's extra pass set it, for Hopper and Ampere, "90 80"): nvcc with
#      every warning an error, and ptxas reports no register spill and no local memory (stack
#      frame) in any kernel of any .cu file.
#   2. The unit suites of the backends (test_backend_ops, test_cuda_gemm: the experts' cuBLAS
#      types at every precision; test_backend_cpu: cpu-fenced's pointer checks;
#      test_backend_coll: NCCL's start across ranks) linked against the CUDA build's library
#      pass: the cuda backend in the binary changes nothing on the CPU.
#      With MOE_TEST_FULL=1, every unit suite (make test-units CUDA=1).
#   3. A CPU training run of build/cuda/moe writes the same checkpoint, byte for byte, as
#      build/moe's.
#   4. train.device=cuda without a GPU (or its driver) exits 2 with the driver's words and a
#      hint, and writes no run; the CPU-only build/moe names `make cuda` instead.
#   5. With MOE_TEST_FULL=1: `make cuda MPI=1` builds build/cuda-mpi/moe (the GPU build across
#      processes, its exchanges staged through the host), which trains over 2 processes on the
#      CPU.
# The slow parts (a second architecture, every unit suite again, a second full build) wait for
# MOE_TEST_FULL=1, so that `make test` stays within its three minutes.
# Skipped (exit 77: reported, neither passed nor failed) where nvcc is absent.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_cuda_build: make cuda, its ptxas report, the CPU suites on it, train.device=cuda"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe") || exit 1
export OMP_NUM_THREADS=2
full=${MOE_TEST_FULL:-0}
if [ "$full" = 1 ]; then archs="90 80"; else archs=90; fi

nvcc=$(make -s --no-print-directory -f Makefile features 2> /dev/null | grep -c '^HAVE_CUDA=1')
if [ "$nvcc" != 1 ]; then
    skip "no nvcc on this machine, so the CUDA build is not checked" \
        "the CUDA toolkit (https://developer.nvidia.com/cuda-downloads), or set CUDA_HOME"
fi

# 1. the build. SANITIZE=0 and MPI=0 whatever make test was given: the CUDA build is
# build/cuda/ (make test SANITIZE=1 runs this script too)
make_plain() { make --no-print-directory SANITIZE=0 MPI=0 "$@"; }
log=$tmp/make.log
make_plain cuda CUDA_ARCH="$archs" > "$log" 2>&1
check "make cuda CUDA_ARCH=\"$archs\" builds build/cuda/moe" $? "$(grep -E 'error|warning' "$log" | head -n 5)"
reports=(build/cuda/obj/src/backend/cuda/*.cu.ptxas)
[ -e "${reports[0]}" ]
check "ptxas reports exist for every .cu file (${#reports[@]})" $?
kernels=$(cat "${reports[@]}" | grep -c 'Compiling entry function')
all_archs=1
for a in $archs; do grep -q "sm_$a" <(cat "${reports[@]}") || all_archs=0; done
[ "$kernels" -gt 10 ] && [ $all_archs = 1 ]
check "ptxas compiled $kernels kernels for sm_${archs// /, sm_}" $?
spills=$(cat "${reports[@]}" | grep -E 'bytes spill (stores|loads)' | grep -vc ' 0 bytes spill stores, 0 bytes spill loads')
stack=$(cat "${reports[@]}" | grep -E 'bytes stack frame' | grep -vc '^ *0 bytes stack frame')
[ "$kernels" -gt 10 ] && [ "$spills" = 0 ] && [ "$stack" = 0 ]
check "no kernel spills registers or uses a stack frame" $? \
    "$(cat "${reports[@]}" | grep -E 'bytes stack frame' | grep -v '^ *0 bytes stack frame, 0 bytes spill' | head -n 3)"
[ -x build/cuda/moe ] && ldd build/cuda/moe | grep -q libcublas
check "build/cuda/moe links cuBLAS" $?

# 2. the unit suites on the CUDA build's library: the backends' (every one with MOE_TEST_FULL=1)
if [ "$full" = 1 ]; then
    make_plain CUDA=1 CUDA_ARCH="$archs" test-units > "$tmp/units.log" 2>&1
else
    make_plain CUDA=1 CUDA_ARCH="$archs" build/cuda/tests/test_backend_ops build/cuda/tests/test_cuda_gemm \
        build/cuda/tests/test_backend_cpu build/cuda/tests/test_backend_coll > "$tmp/units.log" 2>&1 &&
        OMP_WAIT_POLICY=passive bash tests/lib/run_suites.sh "test (units)" build/cuda/tests/test_backend_ops \
            build/cuda/tests/test_cuda_gemm build/cuda/tests/test_backend_cpu \
            build/cuda/tests/test_backend_coll >> "$tmp/units.log" 2>&1
fi
rc=$?
check "the unit suites pass on the CUDA build ($(grep -E 'passed, [0-9]+ failed' "$tmp/units.log" | tail -n 1))" $rc \
    "$(grep -E 'FAIL|failed|Failures: [1-9]' "$tmp/units.log" | head -n 5)"

# 3. the same CPU run on both binaries
data="$tmp/data"
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set train.batch=4 --set train.steps=6 --set train.eval_every=3 --set train.warmup=2
      --set "data.train=$data/train.bin" --set "data.val=$data/val.bin" --quiet)
"$moe" synth --out "$data" --tokens 30000 --seed 5 > /dev/null 2>&1
"$moe" train --out "$tmp/cpu" "${tiny[@]}" > "$tmp/cpu.log" 2>&1 &&
    build/cuda/moe train --out "$tmp/cuda-bin" "${tiny[@]}" > "$tmp/cuda-bin.log" 2>&1 &&
    cmp -s "$tmp/cpu/ckpt.bin" "$tmp/cuda-bin/ckpt.bin"
check "a CPU run of build/cuda/moe writes build/moe's checkpoint byte for byte" $? \
    "$(tail -n 3 "$tmp/cuda-bin.log")"

# 4. train.device=cuda where it cannot run
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then
    echo "  skip a GPU is present: tests/gpu/run_device.sh checks train.device=cuda here"
else
    build/cuda/moe train --out "$tmp/gpu" "${tiny[@]}" --set train.device=cuda > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "no GPU" "$tmp/err" && grep -qi "driver" "$tmp/err" &&
        grep -q "train.device=cpu" "$tmp/err" && [ ! -e "$tmp/gpu" ]
    check "build/cuda/moe: train.device=cuda without a GPU exits 2 with the driver's words" $? \
        "exit $rc: $(head -n 2 "$tmp/err")"
    build/cuda/moe bench --device cuda --config test > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "no GPU" "$tmp/err" && grep -qi "driver" "$tmp/err" && [ ! -s "$tmp/out" ]
    check "build/cuda/moe: bench --device cuda without a GPU exits 2 with the driver's words" $? \
        "exit $rc: $(tail -n 2 "$tmp/err")"
fi
"$moe" train --out "$tmp/nocuda" "${tiny[@]}" --set train.device=cuda > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "make cuda" "$tmp/err" && [ ! -e "$tmp/nocuda" ]
check "build/moe: train.device=cuda exits 2 and names make cuda" $? "exit $rc: $(head -n 2 "$tmp/err")"

# 5. the GPU build across processes (mpicc for the C, nvcc for the kernels): it builds, and its
# CPU run over 2 processes trains
if [ "$full" != 1 ]; then
    echo "  skip make cuda MPI=1: a second full build, checked by make test-full (MOE_TEST_FULL=1)"
elif command -v mpicc > /dev/null 2>&1 && command -v mpirun > /dev/null 2>&1; then
    make --no-print-directory SANITIZE=0 cuda MPI=1 CUDA_ARCH=90 > "$tmp/mpi.log" 2>&1 &&
        [ -x build/cuda-mpi/moe ] && ldd build/cuda-mpi/moe | grep -q libmpi
    check "make cuda MPI=1 builds build/cuda-mpi/moe (cuBLAS and MPI)" $? \
        "$(grep -E 'error' "$tmp/mpi.log" | head -n 5)"
    if [ -e "${CUDA_HOME:-/usr/local/cuda}/include/nccl.h" ]; then
        ldd build/cuda-mpi/moe | grep -q libnccl && grep -q -- '-DMOE_HAVE_NCCL=1' build/cuda-mpi/nvcc.flags
        check "with the toolkit's NCCL, build/cuda-mpi/moe links it (dist.collectives=nccl)" $? \
            "$(ldd build/cuda-mpi/moe | grep -E 'nccl|cublas')"
    fi
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
        OMP_NUM_THREADS=1 timeout -k 10 120 mpirun -np 2 build/cuda-mpi/moe train --out "$tmp/two" \
        "${tiny[@]}" --set dist.ep=2 > "$tmp/two.log" 2>&1
    check "build/cuda-mpi/moe trains over 2 processes on the CPU" $? "$(tail -n 3 "$tmp/two.log")"
else
    echo "  skip no MPI here: make cuda MPI=1 is not checked"
fi

finish
