#!/usr/bin/env bash
# test_lab02.sh: the grader of labs/02-capacity (run by `make test`).
#
#   1. the reference solution passes every task (exit 0, "Tasks passed: 4 of 4") and scores
#      the points of the README's table
#   2. the untouched starter fails (exit non-zero) and names each unimplemented task: its
#      TODO line on stderr and the task in the summary, with no numerical noise
#   3. TASK=task3_score grades that task alone, TASK=task1_capacity on the starter fails that
#      task alone; an unknown TASK lists the tasks
#   4. the grader catches real bugs, each in its own task only: the score policy keeping the
#      lowest scores, ranking by the renormalised gate weight instead of the router score, or
#      reading the scores as one per assignment (N, K) instead of the router's (N, E)
#      (task3_score), the capacity as ceil of the float product in double
#      (task1_capacity), a combine that reads dropped assignments (task4_combine)
#   5. a student file that calls the engine's dispatch plan is refused, naming the function
#   6. make -C labs list names the lab and its four tasks
#   7. (MOE_TEST_FULL=1: make test-slow) submissions that try to pass without the work (exit,
#      abort, an endless loop, a huge allocation, a printed pass, forged files), one missing a
#      function and one that does not compile, graded by grade-all: each fails its own task
#      alone, in grades.csv (under SANITIZE=1 a leak instead of the huge allocation)
# Checks 1-3 and 6 are the ones every lab has, in tests/lib/lab_harness.sh, which also says
# which build (MOE_BUILD, MOE_BIN) the grader runs against.
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.
lab=02-capacity
solution=labs/$lab/solution/capacity_lab.c
tasks="task1_capacity task2_position task3_score task4_combine"
functions="lab_capacity lab_keep_position lab_keep_score lab_combine"
single_task=task3_score
starter_task=task1_capacity
# shellcheck source-path=SCRIPTDIR source=lib/lab_harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/lab_harness.sh" || exit 1

lab_common_checks

# keep by score keeping the lowest scores: the comparator's score order reversed
if mutant lowest 's/return x->score > y->score ? -1 : 1;/return x->score < y->score ? -1 : 1;/'; then
    grade grade SOLUTION="$tmp/lowest.c"
    only_fails task3_score &&
        grep -q "the README's example, keep by score: .* got slot -1, want 1" <<< "$out"
    check "keeping the lowest scores fails task3_score and nothing else" $? "exit $rc: $out"
fi

# keep by score reading scores[a], as if they were one per assignment, not scores[n, idx[a]]
if mutant per_assignment 's/scores\[(size_t)(a \/ K) \* E + idx\[a\]\]/scores[a]/'; then
    grade grade SOLUTION="$tmp/per_assignment.c"
    only_fails task3_score &&
        grep -q "the README's example, keep by score: token 1, choice k = 0 (expert 0, score 0.6): got slot -1, want 1" <<< "$out"
    check "reading the scores as (N, K) fails task3_score and nothing else" $? "exit $rc: $out"
fi

# keep by score ranking by the renormalised gate weight, score / (the token's chosen scores):
# the README's example keeps token 5 over token 0, and with top-1 every weight is 1
if mutant renormalised 's|r\[a\] = (Ranked){idx\[a\], scores\[(size_t)(a / K) \* E + idx\[a\]\], a};|{ int n = a / K; float z = 0; for (int k = 0; k < K; k++) z += scores[n * E + idx[n * K + k]]; r[a] = (Ranked){idx[a], scores[n * E + idx[a]] / z, a}; }|'; then
    grade grade SOLUTION="$tmp/renormalised.c"
    only_fails task3_score &&
        grep -q "the README's example, keep by score: token 0, choice k = 0 (expert 0, score 0.5): got slot -1, want 0" <<< "$out" &&
        grep -q "the highest scores are kept, but slots number them in token order: .* got slot 0, want -1" <<< "$out"
    check "ranking by the renormalised weight fails task3_score and nothing else" $? "exit $rc: $out"
fi

# the capacity as ceil of the float product, in double: one slot too many for 1.1 * 20 / 2
if mutant naive_ceil \
    's|long long cap = (num + den - 1) / den;|long long cap = (long long)ceil((double)capacity_factor * tokens * top_k / num_experts); (void)num; (void)den;|'; then
    grade grade SOLUTION="$tmp/naive_ceil.c"
    only_fails task1_capacity &&
        grep -q 'factor 1.1, min_capacity 1): got 12, want 11' <<< "$out"
    check "ceil of the float factor's product fails task1_capacity and nothing else" $? \
        "exit $rc: $out"
fi

# combine without skipping dropped assignments: reads the NaN row before each slice
if mutant no_skip '/if (slot\[a\] < 0) continue;/d'; then
    grade grade SOLUTION="$tmp/no_skip.c"
    only_fails task4_combine &&
        grep -q 'token 2 both: y = 0): token 2, channel 0: got nan, want 0' <<< "$out"
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
void lab_keep_score(int *slot, int *counts, const int *idx, const float *scores, int N, int K,
                    int E, int capacity) {}
void lab_combine(float *y, const float *ye, const int *slot, const int *idx, const float *w, int N,
                 int K, int E, int capacity, int C) {}
C
refused dispatch_plan_build

# the class of cheating submissions attacks the graders' common code, which lab 01's suite
# attacks in make test too; here in make test-slow (MOE_TEST_FULL=1), to keep make test short
if [ "${MOE_TEST_FULL:-0}" = 1 ]; then
    lab_cheat_checks
else
    echo "  (the cheating submissions: make test-slow, MOE_TEST_FULL=1)"
fi
lab_list_check
lab_finish
