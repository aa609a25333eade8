#!/usr/bin/env bash
# test_lab02.sh: the grader of labs/02-capacity (run by `make test`).
#
#   1. the reference solution passes every task (exit 0, "Tasks passed: 4 of 4")
#   2. the untouched starter fails (exit non-zero) and names each unimplemented task: its
#      TODO line on stderr and the task in the summary, with no numerical noise
#   3. TASK=task3_score grades that task alone; an unknown TASK lists the tasks
#   4. the grader catches real bugs, each in its own task only: the score policy keeping the
#      lowest weights (task3_score), the capacity as ceil of the float product in double
#      (task1_capacity), a combine that reads dropped assignments (task4_combine)
#   5. a student file that calls the engine's dispatch plan is refused, naming the function
#   6. make -C labs list names the lab and its four tasks
# The engine library is the one of the build under test (MOE_BUILD, else the folder of MOE_BIN):
# build-san (make test SANITIZE=1) grades under the sanitizers against build-san/libmoe.a,
# anything else uses build/.
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.
set -u

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${MOE_BUILD:-$(dirname "${MOE_BIN:-build/moe}")}
case ${build%/} in build-san | */build-san) san=1 ;; *) san=0 ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moe_test_lab02.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# run from `make test`: its jobserver and command-line variables are not for this make
unset MAKEFLAGS MFLAGS MAKELEVEL
export OMP_NUM_THREADS=1

lab=02-capacity
solution=labs/$lab/solution/capacity_lab.c
passed=0
failed=0
ok() { echo "  ok   $*"; passed=$((passed + 1)); }
bad() { echo "  FAIL $*"; failed=$((failed + 1)); }
# check LABEL CONDITION-STATUS DETAIL: ok when the status is 0, else FAIL with the detail
check() { if [ "$2" -eq 0 ]; then ok "$1"; else bad "$1: $3"; fi; }
# grade TARGET [VAR=VALUE...]: the grader's output (stdout and stderr) in $out, status in $rc
grade() {
    out=$(make -s -C labs "$1" LAB=$lab SANITIZE=$san "${@:2}" 2>&1)
    rc=$?
}
# mutant NAME SED-EXPRESSION: the solution with one change, in $tmp/NAME.c; fails the check
# (and returns 1) when the expression no longer changes anything
mutant() {
    sed "$2" "$solution" > "$tmp/$1.c"
    if cmp -s "$tmp/$1.c" "$solution"; then
        bad "the $1 mutant differs from the solution (the sed pattern no longer matches)"
        return 1
    fi
}

tasks="task1_capacity task2_position task3_score task4_combine"
functions="lab_capacity lab_keep_position lab_keep_score lab_combine"

echo "test_lab02: labs/$lab (SANITIZE=$san)"
grade grade-solution
[ $rc -eq 0 ] && grep -q '^Tasks passed: 4 of 4\.$' <<< "$out"
check "the reference solution passes all 4 tasks" $? "exit $rc: $out"

grade grade-starter
[ $rc -ne 0 ] && grep -q '^Tasks passed: 0 of 4\. Not implemented yet: '"$tasks"'\.$' <<< "$out"
check "the starter fails every task, and the summary names them as not implemented" $? \
    "exit $rc: $out"
missing=""
n=1
for f in $functions; do
    grep -q "^TODO: task $n ($f) is not implemented$" <<< "$out" || missing="$missing $f"
    n=$((n + 1))
done
[ -z "$missing" ]
check "the starter prints one 'TODO: task N (function) is not implemented' line per task" $? \
    "missing:$missing in: $out"
! grep -Eq 'got |want |nan' <<< "$out"
check "the starter's report holds no numerical mismatch, only 'not implemented'" $? "$out"

grade grade-solution TASK=task3_score
[ $rc -eq 0 ] && grep -q '^Tasks passed: 1 of 1\.$' <<< "$out" && grep -q 'task3_score' <<< "$out" &&
    ! grep -Eq 'task1_capacity|task2_position|task4_combine' <<< "$out"
check "TASK=task3_score grades that task alone" $? "exit $rc: $out"

grade grade-starter TASK=task1_capacity
[ $rc -ne 0 ] && grep -q '^Tasks passed: 0 of 1\. Not implemented yet: task1_capacity\.$' <<< "$out"
check "TASK=task1_capacity on the starter fails that task alone, as not implemented" $? \
    "exit $rc: $out"

grade grade-solution TASK=task9_nothing
[ $rc -ne 0 ] && grep -q "no task named 'task9_nothing'. The tasks are: $tasks" <<< "$out"
check "an unknown TASK fails and lists the tasks" $? "exit $rc: $out"

# keep by score keeping the lowest weights: the comparator's weight order reversed
if mutant lowest 's/return x->w > y->w ? -1 : 1;/return x->w < y->w ? -1 : 1;/'; then
    grade grade SOLUTION="$tmp/lowest.c"
    [ $rc -ne 0 ] && grep -Eq '^  FAIL  task3_score ' <<< "$out" &&
        grep -q "the README's example, keep by score: .* got slot -1, want 1" <<< "$out" &&
        grep -q '^Tasks passed: 3 of 4\.$' <<< "$out"
    check "keeping the lowest weights fails task3_score and nothing else" $? "exit $rc: $out"
fi

# the capacity as ceil of the float product, in double: one slot too many for 1.1 * 20 / 2
if mutant naive_ceil \
    's|long long cap = (num + den - 1) / den;|long long cap = (long long)ceil((double)capacity_factor * tokens * top_k / num_experts); (void)num; (void)den;|'; then
    grade grade SOLUTION="$tmp/naive_ceil.c"
    [ $rc -ne 0 ] && grep -Eq '^  FAIL  task1_capacity ' <<< "$out" &&
        grep -q 'factor 1.1, min_capacity 1): got 12, want 11' <<< "$out" &&
        grep -q '^Tasks passed: 3 of 4\.$' <<< "$out"
    check "ceil of the float factor's product fails task1_capacity and nothing else" $? \
        "exit $rc: $out"
fi

# combine without skipping dropped assignments: reads the NaN row before each slice
if mutant no_skip '/if (slot\[a\] < 0) continue;/d'; then
    grade grade SOLUTION="$tmp/no_skip.c"
    [ $rc -ne 0 ] && grep -Eq '^  FAIL  task4_combine ' <<< "$out" &&
        grep -q 'token 2 both: y = 0): token 2, channel 0: got nan, want 0' <<< "$out" &&
        grep -q '^Tasks passed: 3 of 4\.$' <<< "$out"
    check "a combine that reads dropped assignments fails task4_combine and nothing else" $? \
        "exit $rc: $out"
fi

cat > "$tmp/engine.c" << 'C'
#include "capacity_lab.h"
typedef struct DispatchPlan DispatchPlan;
void dispatch_plan_build(DispatchPlan *p, const int *idx, int N);
int lab_capacity(int tokens, int top_k, int num_experts, float capacity_factor, int min_capacity) {
    return tokens;
}
void lab_keep_position(int *slot, int *counts, const int *idx, int N, int K, int E, int capacity) {
    dispatch_plan_build((DispatchPlan *)slot, idx, N);
}
void lab_keep_score(int *slot, int *counts, const int *idx, const float *w, int N, int K, int E,
                    int capacity) {}
void lab_combine(float *y, const float *ye, const int *slot, const int *idx, const float *w, int N,
                 int K, int E, int capacity, int C) {}
C
grade grade SOLUTION="$tmp/engine.c"
[ $rc -ne 0 ] && grep -q 'calls the engine (dispatch_plan_build)' <<< "$out" &&
    ! grep -q '^Grading' <<< "$out"
check "a file that calls the engine's dispatch_plan_build is refused before grading" $? \
    "exit $rc: $out"

out=$(make -s -C labs list 2>&1)
grep -q "^$lab: $tasks$" <<< "$out"
check "make -C labs list names $lab and its tasks" $? "$out"

echo "test_lab02: $passed passed, $failed failed"
[ $failed -eq 0 ]
