#!/usr/bin/env bash
# bench_grade_all.sh: how long `make -C labs grade-all` takes over a class of N submissions
# (make -C labs bench-grade-all [N=100] [BENCH_LABS="01-router 03-all-to-all"] [JOBS=2]).
#
# For each lab, a class of N submissions made from the reference solution: three in five are
# the solution, one the untouched starter, one the solution without its second function (one
# task fails, the others pass). grade-all grades it, JOBS at a time, with the engine and the
# grader's objects already built (a first grade-all builds them and is not timed). Each lab's
# row goes to BENCH_OUT (plots/labs/grade_all.txt unless set), written whole at the end:
#   lab submissions jobs seconds seconds_per_submission
# after a line naming the machine. An MPI lab is left out, and said, without mpirun.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2 # the repository root
N=${N:-100}
JOBS=${JOBS:-2}
OUT=${BENCH_OUT:-plots/labs/grade_all.txt}
LABS=${BENCH_LABS:-01-router 03-all-to-all}
if ! [[ $N =~ ^[1-9][0-9]*$ ]]; then
    echo "bench-grade-all: N=$N is not a number of submissions (1, 2, ...)"
    exit 2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moe_bench_grade_all.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

rows=""
for lab in $LABS; do
    if [ ! -f "labs/$lab/grader.c" ]; then
        echo "bench-grade-all: $lab is not a lab (labs/*/grader.c)"
        exit 2
    fi
    if [ -f "labs/$lab/MPI" ] && ! command -v mpirun > /dev/null 2>&1; then
        echo "bench-grade-all: $lab left out: it needs mpirun (make deps installs Open MPI)"
        continue
    fi
    solution=$(ls labs/"$lab"/solution/*.c)
    starter=$(ls labs/"$lab"/starter/*.c)
    # the lab's second function, from the grader's table of tasks
    second=$(grep -o 'LAB_TASK("[^"]*", [a-z_]*' "labs/$lab/grader.c" | sed -n 2p | sed 's/.*, //')
    class=$tmp/$lab
    mkdir -p "$class"
    for i in $(seq 1 "$N"); do
        case $((i % 5)) in
        3) cp "$starter" "$class/s$i.c" ;;
        4) sed "/^[a-z].*[ *]$second(/,/^}/d" "$solution" > "$class/s$i.c" ;;
        *) cp "$solution" "$class/s$i.c" ;;
        esac
    done
    # the engine and the grader's objects, built once outside the time
    mkdir -p "$tmp/warm" && cp "$solution" "$tmp/warm/"
    if ! make -s -C labs grade-all LAB="$lab" DIR="$tmp/warm" JOBS="$JOBS" > "$tmp/warm.log" 2>&1; then
        echo "bench-grade-all: grade-all of $lab failed:"
        cat "$tmp/warm.log"
        exit 1
    fi
    rm -rf "$tmp/warm"
    start=$(date +%s.%N)
    make -s -C labs grade-all LAB="$lab" DIR="$class" JOBS="$JOBS" > "$tmp/$lab.log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    graded=$(grep -c '^"' "$class/grades.csv" 2> /dev/null)
    if [ $rc -ne 0 ] || [ "$graded" != "$N" ]; then
        echo "bench-grade-all: grade-all of $lab failed or graded $graded of $N:"
        cat "$tmp/$lab.log"
        exit 1
    fi
    row=$(awk -v l="$lab" -v n="$N" -v j="$JOBS" -v a="$start" -v b="$end" \
        'BEGIN { printf "%s %d %d %.1f %.2f", l, n, j, b - a, (b - a) / n }')
    echo "bench-grade-all: $row"
    rows+=$row$'\n'
done

cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2> /dev/null)
mkdir -p "$(dirname "$OUT")"
{
    echo "# make -C labs bench-grade-all N=$N: ${cpu:-$(uname -m)}, $(nproc 2> /dev/null || echo '?') cores, $(date -u +%Y-%m-%d)"
    echo "lab submissions jobs seconds seconds_per_submission"
    printf '%s' "$rows"
} > "$OUT.tmp" && mv -f "$OUT.tmp" "$OUT"
echo "bench-grade-all: wrote $OUT"
