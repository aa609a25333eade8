#!/usr/bin/env bash
# test_lab01.sh: the grader of labs/01-router (run by `make test`).
#
#   1. the reference solution passes every task (exit 0, "Tasks passed: 4 of 4")
#   2. the untouched starter fails (exit non-zero) and names each unimplemented task: its
#      TODO line on stderr and the task in the summary, with no numerical noise
#   3. TASK=task2_topk grades that task alone
#   4. the grader catches a real bug: the solution with ties sent to the higher index fails
#      task2_topk and nothing else
#   5. a student file that calls the engine's router is refused, naming the function
# The engine library is the one of the build under test (MOE_BUILD, else the folder of MOE_BIN):
# build-san (make test SANITIZE=1) grades under the sanitizers against build-san/libmoe.a,
# anything else uses build/.
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.
set -u

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${MOE_BUILD:-$(dirname "${MOE_BIN:-build/moe}")}
case ${build%/} in build-san | */build-san) san=1 ;; *) san=0 ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moe_test_lab01.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# run from `make test`: its jobserver and command-line variables are not for this make
unset MAKEFLAGS MFLAGS MAKELEVEL
export OMP_NUM_THREADS=1

passed=0
failed=0
ok() { echo "  ok   $*"; passed=$((passed + 1)); }
bad() { echo "  FAIL $*"; failed=$((failed + 1)); }
# check LABEL CONDITION-STATUS DETAIL: ok when the status is 0, else FAIL with the detail
check() { if [ "$2" -eq 0 ]; then ok "$1"; else bad "$1: $3"; fi; }
# grade TARGET [VAR=VALUE...]: the grader's output (stdout and stderr) in $out, status in $rc
grade() {
    out=$(make -s -C labs "$1" LAB=01-router SANITIZE=$san "${@:2}" 2>&1)
    rc=$?
}

tasks="task1_softmax task2_topk task3_aux_loss task4_backward"
functions="lab_softmax_forward lab_topk_forward lab_aux_loss lab_router_backward"

echo "test_lab01: labs/01-router (SANITIZE=$san)"
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

grade grade-solution TASK=task2_topk
[ $rc -eq 0 ] && grep -q '^Tasks passed: 1 of 1\.$' <<< "$out" && grep -q 'task2_topk' <<< "$out" &&
    ! grep -q 'task1_softmax' <<< "$out"
check "TASK=task2_topk grades that task alone" $? "exit $rc: $out"

grade grade-solution TASK=task9_nothing
[ $rc -ne 0 ] && grep -q "no task named 'task9_nothing'. The tasks are: $tasks" <<< "$out"
check "an unknown TASK fails and lists the tasks" $? "exit $rc: $out"

# ties to the higher index: '>' becomes '>=' in the scan over experts
sed 's/p\[e\] > p\[best\]/p[e] >= p[best]/' labs/01-router/solution/router_lab.c > "$tmp/ties.c"
if cmp -s "$tmp/ties.c" labs/01-router/solution/router_lab.c; then
    bad "the tie-breaking mutant differs from the solution (the sed pattern no longer matches)"
else
    grade grade SOLUTION="$tmp/ties.c"
    [ $rc -ne 0 ] && grep -Eq '^  FAIL  task2_topk .*4/5 checks pass$' <<< "$out" &&
        grep -q 'tied scores: the lower expert index wins' <<< "$out" &&
        grep -q '^Tasks passed: 3 of 4\.$' <<< "$out"
    check "ties sent to the higher index fail task2_topk's tie test and nothing else" $? \
        "exit $rc: $out"
fi

cat > "$tmp/engine.c" << 'C'
#include "router_lab.h"
float router_aux_loss(const float *scores, const int *idx, int N, int E, int K);
void lab_softmax_forward(float *scores, const float *logits, int N, int E) {}
void lab_topk_forward(int *idx, float *w, const float *scores, int N, int E, int K) {}
float lab_aux_loss(const float *scores, const int *idx, int N, int E, int K) {
    return router_aux_loss(scores, idx, N, E, K);
}
void lab_router_backward(float *dlogits, const float *dw, const float *scores, const int *idx,
                         const float *w, int N, int E, int K, float aux_scale) {}
C
grade grade SOLUTION="$tmp/engine.c"
[ $rc -ne 0 ] && grep -q 'calls the engine (router_aux_loss)' <<< "$out" &&
    ! grep -q '^Grading' <<< "$out"
check "a file that calls the engine's router_aux_loss is refused before grading" $? \
    "exit $rc: $out"

echo "test_lab01: $passed passed, $failed failed"
[ $failed -eq 0 ]
