#!/usr/bin/env bash
# test_lab01.sh: the grader of labs/01-router (run by `make test`).
#
#   1. the reference solution passes every task (exit 0, "Tasks passed: 4 of 4") and scores
#      the points of the README's table
#   2. the untouched starter fails (exit non-zero) and names each unimplemented task: its
#      TODO line on stderr and the task in the summary, with no numerical noise
#   3. TASK=task2_topk grades that task alone; an unknown TASK lists the tasks
#   4. the grader catches a real bug: the solution with ties sent to the higher index fails
#      task2_topk and nothing else
#   5. a student file that calls the engine's router is refused, naming the function
#   6. make -C labs handout: the students' tree, without the solutions, grades on its own, and
#      the first grade there says that it builds the engine (tests/lib/lab_harness.sh)
#   7. submissions that try to pass without the work (exit, abort, an endless loop, a huge
#      allocation, a printed pass, forged files), one missing a function and one that does not
#      compile, graded by grade-all: each fails its own task alone, in grades.csv (under
#      SANITIZE=1 a leak instead of the huge allocation)
#   8. make -C labs bench-grade-all at N=3 writes its file (not under SANITIZE=1)
# Checks 1-3 are the ones every lab has, in tests/lib/lab_harness.sh, which also says which
# build (MOE_BUILD, MOE_BIN) the grader runs against.
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.
lab=01-router
solution=labs/$lab/solution/router_lab.c
tasks="task1_softmax task2_topk task3_aux_loss task4_backward"
functions="lab_softmax_forward lab_topk_forward lab_aux_loss lab_router_backward"
single_task=task2_topk
# shellcheck source-path=SCRIPTDIR source=lib/lab_harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/lab_harness.sh" || exit 1

lab_common_checks

# ties to the higher index: '>' becomes '>=' in the scan over experts
if mutant ties 's/p\[e\] > p\[best\]/p[e] >= p[best]/'; then
    grade grade SOLUTION="$tmp/ties.c"
    only_fails task2_topk && grep -Eq '^  FAIL  task2_topk .*4/5 checks pass$' <<< "$out" &&
        grep -q 'tied scores: the lower expert index wins' <<< "$out"
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
refused router_aux_loss

lab_handout_checks
lab_cheat_checks

# make -C labs bench-grade-all, at a tiny size: its file has the machine, the header and a row
if [ "$san" = 0 ]; then
    out=$(N=3 BENCH_LABS=$lab BENCH_OUT="$tmp/grade_all.txt" make -s -C labs bench-grade-all 2>&1)
    rc=$?
    [ $rc -eq 0 ] && grep -q '^# make -C labs bench-grade-all N=3: .*, [0-9]* cores, ' "$tmp/grade_all.txt" &&
        grep -q '^lab submissions jobs seconds seconds_per_submission$' "$tmp/grade_all.txt" &&
        grep -Eq "^$lab 3 2 [0-9]+\.[0-9] [0-9]+\.[0-9]{2}$" "$tmp/grade_all.txt"
    check "make -C labs bench-grade-all times grade-all over N submissions into its file" $? \
        "exit $rc: $out $(cat "$tmp/grade_all.txt" 2>&1)"
fi
lab_finish
