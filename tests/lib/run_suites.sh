#!/usr/bin/env bash
# run_suites.sh LABEL SUITE...: run test suites as `make test` does, MOE_TEST_JOBS of them at a
# time (default 4), and print each suite's output whole when it ends, with its result, its
# seconds and the CPU seconds it used; then the slowest suites and the totals.
#
# A suite is a test binary (run as it is) or a shell script (run with bash). Its exit status
# says what it found: 0 passed, 77 skipped (an optional tool is missing: the suite has said which
# and how to install it), anything else failed. Exits 0 when none failed; a skipped suite
# neither passes nor fails. The environment (MOE_BIN, MOE_BUILD, OMP_NUM_THREADS, ...) is the
# caller's, but for the multi-process suites (tests/mpi/): they run MOE_MPI_BIN and
# MOE_MPI_BUILD (the MPI build) as their MOE_BIN and MOE_BUILD, where those are set, and
# without leak checking (Open MPI's own allocations look like leaks to AddressSanitizer; the
# single-process suites check ours).
#
# Why several at a time on a 2-core machine: most suites spend much of their time waiting
# (processes starting, mpirun, a timeout they test), so their CPU seconds add up to about half
# their seconds (the multi-process ones' to a fifth: they wait on their peers and on the
# timeouts they test); four side by side fill the cores. Suites start in the order given, so
# the caller lists the longest first. MOE_TEST_JOBS=1 runs one at a time.
set -u
label=$1
shift
jobs=${MOE_TEST_JOBS:-4}
# wait -n (one job, whichever ends first) is bash 4.3's; an older bash runs one at a time
if [ "${BASH_VERSINFO[0]}" -lt 4 ] || { [ "${BASH_VERSINFO[0]}" = 4 ] && [ "${BASH_VERSINFO[1]}" -lt 3 ]; }; then
    jobs=1
fi
case $jobs in '' | *[!0-9]* | 0) echo "run_suites: MOE_TEST_JOBS=$jobs: give a whole number >= 1" >&2; exit 2 ;; esac

work=$(mktemp -d "${TMPDIR:-/tmp}/moe_suites.XXXXXX")
trap 'rm -rf "$work"' EXIT

suites=()
for t in "$@"; do [ -e "$t" ] && suites+=("$t"); done

# run_one I SUITE: run it, its output to $work/I.log; then "STATUS SECONDS CPU" to $work/I.done.
# Each suite has a TMPDIR of its own: Open MPI keeps its session files under it, and two mpirun
# jobs of two suites side by side must not share (and remove) one session folder.
run_one() {
    local start end
    mkdir -p "$work/$1.tmpdir"
    export TMPDIR=$work/$1.tmpdir
    start=$(date +%s.%N)
    case $2 in
    tests/mpi/*.sh)
        MOE_BIN=${MOE_MPI_BIN:-${MOE_BIN:-}} MOE_BUILD=${MOE_MPI_BUILD:-${MOE_BUILD:-}} \
            ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 bash "$2" ;;
    *.sh) bash "$2" ;;
    *) "$2" ;;
    esac > "$work/$1.log" 2>&1 < /dev/null
    local rc=$?
    end=$(date +%s.%N)
    # this subshell's `times`: the CPU (user + system) its children, the suite, used
    times > "$work/$1.times"
    awk -v rc=$rc -v a="$start" -v b="$end" 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] }
        printf "%d %.1f %.1f\n", rc, b - a, t }' "$work/$1.times" > "$work/$1.tmp"
    mv "$work/$1.tmp" "$work/$1.done"
}

passed=0 failed=0 skipped=0 failed_names="" skipped_names=""
start_all=$(date +%s.%N)
# report I: print a finished suite's output and result, and count it
report() {
    local i=$1 t=${suites[$1]} rc secs cpu result
    read -r rc secs cpu < "$work/$i.done"
    echo "== $t"
    cat "$work/$i.log"
    case $rc in
    0) result=passed passed=$((passed + 1)) ;;
    77) result=skipped skipped=$((skipped + 1)) skipped_names="$skipped_names $t" ;;
    *) result="FAILED (exit $rc)" failed=$((failed + 1)) failed_names="$failed_names $t" ;;
    esac
    echo "== $t: $result in $secs s (CPU $cpu s)"
    echo "$secs $t" >> "$work/times"
    rm "$work/$i.done"
    touch "$work/$i.reported"
}
# report_finished: report every suite that has ended and not been reported
report_finished() {
    local i
    for i in "${!suites[@]}"; do [ -e "$work/$i.done" ] && report "$i"; done
}

running=0
for i in "${!suites[@]}"; do
    while [ "$running" -ge "$jobs" ]; do
        wait -n 2> /dev/null || true
        report_finished
        running=$((i - $(find "$work" -name '*.reported' | wc -l)))
    done
    if [ "$jobs" = 1 ]; then
        (run_one "$i" "${suites[$i]}") # a subshell: its `times` are this suite's alone
        report "$i"
    else
        run_one "$i" "${suites[$i]}" &
        running=$((running + 1))
    fi
done
wait
report_finished

total=$(awk -v a="$start_all" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
echo "$label: the slowest suites (seconds):"
sort -rn "$work/times" 2> /dev/null | head -n 8 | awk '{ printf "  %6.1f  %s\n", $1, $2 }'
[ -z "$skipped_names" ] || echo "$label: skipped suites (each said why above):$skipped_names"
[ -z "$failed_names" ] || echo "$label: failed suites:$failed_names"
echo "$label: $passed passed, $failed failed, $skipped skipped in $total s ($jobs at a time)"
[ "$failed" = 0 ]
