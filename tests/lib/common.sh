#!/usr/bin/env bash
# common.sh: what the end-to-end shell tests (tests/test_*.sh, tests/mpi/test_*.sh) share; each
# sources it, so `make test` (which runs tests/*.sh and tests/mpi/*.sh) never runs it alone.
# The lab graders' tests have their own harness, tests/lib/lab_harness.sh.
#
# Sourcing it turns on `set -u`, moves to the repository root ($root), makes a scratch folder
# $tmp (removed at exit) and exports OMP_WAIT_POLICY=passive: idle OpenMP threads sleep instead
# of spinning, which keeps a busy machine (make -j test) from slowing to a crawl and changes no
# result. The thread count is each script's own choice: it exports OMP_NUM_THREADS itself.
# $test_name is the sourcing script's name (test_cli), the prefix of its messages.
#
# The script then resolves what it runs with executable (and, for the MPI tests, need_mpirun),
# counts its checks with check (or ok and bad), and calls finish last: the summary line
# "test_name: N passed, M failed" and a non-zero status when a check failed.

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    echo "common.sh is sourced by the tests in tests/ and tests/mpi/, not run alone" >&2
    exit 0
fi
set -u

test_name=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moe_$test_name.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive

passed=0
failed=0
ok() { echo "  ok   $*"; passed=$((passed + 1)); }
bad() { echo "  FAIL $*"; failed=$((failed + 1)); }
# check LABEL CONDITION-STATUS [DETAIL]: ok when the status is 0, else FAIL with the detail
check() {
    if [ "$2" -eq 0 ]; then ok "$1"; elif [ $# -ge 3 ]; then bad "$1: $3"; else bad "$1"; fi
}

# snapshot DIR: every file under DIR with its SHA-256, sorted by name (a folder left as it was
# compares equal)
snapshot() { (cd "$1" && find . -type f -exec sha256sum {} + | sort -k2); }
# float_cmp A OP B: compare two arithmetic expressions of numbers (awk evaluates them)
float_cmp() { awk "BEGIN { exit !(($1) $2 ($3)) }" < /dev/null 2> /dev/null; }
# safetensors_data FILE: the tensor bytes of a safetensors file (what follows its 8-byte
# little-endian header length and the JSON header)
safetensors_data() { tail -c +$((9 + $(od -An -tu8 -N8 "$1" | tr -d ' '))) "$1"; }

# executable PATH HOW: print PATH made absolute (a relative PATH is from the root); when that is
# not an executable, say so and how to build it ("build it with HOW") on stderr and return 1.
# Used as: moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe") || exit 1
executable() {
    local path=$1
    case $path in /*) ;; *) path="$root/$path" ;; esac
    if [ ! -x "$path" ]; then
        echo "$test_name: no executable $path; build it with $2" >&2
        return 1
    fi
    echo "$path"
}

# need_mpirun skip|required: without mpirun the script stops here, skipped (exit 77) or failed
# (exit 1); with it, mpirun may run as root and start more ranks than there are cores (the
# Makefile sets these too; values the caller set are kept)
need_mpirun() {
    if ! command -v mpirun > /dev/null 2>&1; then
        if [ "$1" = required ]; then
            echo "$test_name: no mpirun; install Open MPI (make deps)"
            exit 1
        fi
        skip "no mpirun (Open MPI)" "make deps"
    fi
    export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
    export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
    export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
}

# skip WHY INSTALL: this suite cannot run here: print "skipped", why, and the command that installs
# what is missing, and stop with status 77, which make test (tests/lib/run_suites.sh) counts as
# skipped, neither passed nor failed
skip() {
    echo "$test_name: skipped: $1; install it with: $2"
    exit 77
}

# finish: the summary line; the status (the script's last command) is non-zero when a check
# failed
finish() {
    echo "$test_name: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
