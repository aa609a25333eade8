#!/usr/bin/env bash
# run_suites.sh LABEL SUITE...: run each test suite in turn, as `make test` does, and print
# one line a suite with its result and seconds, then the slowest suites and the totals.
# A suite is a test binary (run as it is) or a shell script (run with bash). Its exit status
# says what it found: 0 passed, 77 skipped (an optional tool is missing: the suite has said
# which and how to install it), anything else failed. Exits 0 when none failed; a skipped
# suite neither passes nor fails. The environment (MOE_BIN, MOE_BUILD, OMP_NUM_THREADS, ...)
# is the caller's.
set -u
label=$1
shift
passed=0 failed=0 skipped=0 failed_names="" skipped_names=""
times=$(mktemp)
trap 'rm -f "$times"' EXIT
start_all=$(date +%s.%N)
for t in "$@"; do
    [ -e "$t" ] || continue
    echo "== $t"
    start=$(date +%s.%N)
    case $t in
    *.sh) bash "$t" ;;
    *) "$t" ;;
    esac
    rc=$?
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    case $rc in
    0) result=passed passed=$((passed + 1)) ;;
    77) result=skipped skipped=$((skipped + 1)) skipped_names="$skipped_names $t" ;;
    *) result="FAILED (exit $rc)" failed=$((failed + 1)) failed_names="$failed_names $t" ;;
    esac
    echo "== $t: $result in $secs s"
    echo "$secs $t" >> "$times"
done
total=$(awk -v a="$start_all" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
echo "$label: the slowest suites (seconds):"
sort -rn "$times" | head -n 8 | awk '{ printf "  %6.1f  %s\n", $1, $2 }'
[ -z "$skipped_names" ] || echo "$label: skipped suites (each said why above):$skipped_names"
[ -z "$failed_names" ] || echo "$label: failed suites:$failed_names"
echo "$label: $passed passed, $failed failed, $skipped skipped in $total s"
[ "$failed" = 0 ]
