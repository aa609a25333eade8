#!/usr/bin/env bash
# make_test.sh TARGET BUILD: the suites of one of the Makefile's test targets, run by
# tests/lib/run_suites.sh (its summary lines and exit status: 0 when no suite failed; a suite
# that exits 77 is skipped). The Makefile builds what the suites need and then calls this with
# its build folder (build, build/san, build/cuda, ...); the suites and the order they run in,
# and the environment each target gives them, are here.
#
#   test          every shell suite, the multi-process ones (tests/mpi/, on the binaries of
#                 BUILD's MPI variant: build/mpi, build/san-mpi) where Open MPI is, and every
#                 unit suite: make test
#   test-run      every unit suite, then every single-process shell suite
#   test-units    the unit suites (Check) alone: make test-units, make test-cuda
#   test-run-mpi  the multi-process shell suites, on BUILD's binaries (an MPI build): make test-mpi
#   test-slow     the slow variants make test leaves out (MOE_TEST_FULL=1): make test-slow;
#                 with Open MPI, the sweep of the process grid's layouts and every variant of
#                 dist.zero, dist.tp, dist.ep and dist.pp too, lab 03's cheating submissions and
#                 lab 07's mutants
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
usage="usage: tests/lib/make_test.sh test|test-run|test-units|test-run-mpi|test-slow BUILD"
[ $# = 2 ] || { echo "$usage" >&2; exit 2; }
target=$1 build=$2

# mpirun refuses to run as root and to start more processes than cores unless told; the suites
# say so with these variables (Open MPI), so they run the same in a container.
mpirun_env=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)
# the unit suites' threads and Check's time limits (a sanitized build is slow)
unit_env=(OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive CK_DEFAULT_TIMEOUT=600 CK_TIMEOUT_MULTIPLIER=5)

# the unit suites' binaries: one per tests/test_*.c and tests/mpi/test_*.c
unit_bins=()
for c in tests/test_*.c tests/mpi/test_*.c; do [ -e "$c" ] && unit_bins+=("$build/${c%.c}"); done

# The suites that take longest start first, so that the queue's length is about the longest
# suite's rather than the sum of two queues'.
slow_first=(tests/mpi/test_ep.sh tests/mpi/test_ep_teach.sh tests/test_ablations.sh tests/test_cuda_build.sh
            tests/mpi/test_tp.sh tests/mpi/test_dist.sh tests/mpi/test_zero.sh tests/test_lab03.sh tests/test_lab07.sh
            tests/test_bench.sh
            tests/test_gallery.sh)
have_mpirun() { command -v mpicc > /dev/null 2>&1 && command -v mpirun > /dev/null 2>&1; }

case $target in
test)
    # every shell suite but the Arm build, which make test-slow runs (it compiles every file
    # twice, all CPU; a fresh machine lacks its compiler until make deps-cross anyway)
    shell_suites=()
    for s in tests/*.sh; do [ "$s" = tests/test_cross.sh ] || shell_suites+=("$s"); done
    have_mpirun && shell_suites+=(tests/mpi/*.sh)
    suites=()
    for s in "${slow_first[@]}"; do [[ " ${shell_suites[*]} " == *" $s "* ]] && suites+=("$s"); done
    for s in "${shell_suites[@]}"; do [[ " ${slow_first[*]} " == *" $s "* ]] || suites+=("$s"); done
    # the MPI variant of build is build/mpi, of build/san build/san-mpi (the Makefile's names)
    case ${build%/} in build) mpi_build=build/mpi ;; *) mpi_build=${build%/}-mpi ;; esac
    env "${mpirun_env[@]}" MOE_BIN="$build/moe" MOE_BUILD="$build" MOE_MPI_BIN="$mpi_build/moe" \
        MOE_MPI_BUILD="$mpi_build" "${unit_env[@]}" \
        bash tests/lib/run_suites.sh test "${suites[@]}" "${unit_bins[@]}" ;;
test-run)
    env MOE_BIN="$build/moe" MOE_BUILD="$build" "${unit_env[@]}" \
        bash tests/lib/run_suites.sh test "${unit_bins[@]}" tests/*.sh ;;
test-units)
    env "${unit_env[@]}" bash tests/lib/run_suites.sh "test (units)" "${unit_bins[@]}" ;;
# Open MPI's own allocations look like leaks to AddressSanitizer, so leak checking is off here
# (the single-process suites check ours).
test-run-mpi)
    env "${mpirun_env[@]}" ASAN_OPTIONS=detect_leaks=0 MOE_BIN="$build/moe" MOE_BUILD="$build" \
        OMP_WAIT_POLICY=passive bash tests/lib/run_suites.sh "test (MPI)" tests/mpi/*.sh ;;
test-slow)
    env MOE_BIN="$build/moe" MOE_BUILD="$build" MOE_TEST_FULL=1 OMP_WAIT_POLICY=passive \
        bash tests/lib/run_suites.sh "test (slow)" tests/test_cuda_build.sh tests/test_cross.sh
    rc=$?
    # the sweep of the process grid's layouts, on the MPI variant's binaries (the Makefile has
    # built them where Open MPI is)
    case ${build%/} in build) mpi_build=build/mpi ;; *) mpi_build=${build%/}-mpi ;; esac
    if have_mpirun; then
        env "${mpirun_env[@]}" MOE_BIN="$mpi_build/moe" MOE_BUILD="$mpi_build" MOE_TEST_FULL=1 \
            OMP_WAIT_POLICY=passive bash tests/lib/run_suites.sh "test (slow, MPI)" \
            tests/mpi/test_layouts.sh tests/mpi/test_zero.sh tests/mpi/test_tp.sh \
            tests/mpi/test_ep.sh tests/mpi/test_ep_teach.sh tests/mpi/test_dist.sh \
            tests/mpi/test_pp.sh tests/mpi/test_spikes_ep.sh tests/test_lab02.sh \
            tests/test_lab03.sh tests/test_lab07.sh || rc=1
    else
        echo "test-slow: skipped: the layouts' sweep (tests/mpi/test_layouts.sh) needs Open MPI (mpicc, mpirun); install it with make deps"
    fi
    exit $rc ;;
*) echo "make_test.sh: no target '$target' ($usage)" >&2; exit 2 ;;
esac
