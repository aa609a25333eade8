#!/usr/bin/env bash
# test_lab04.sh: the grader of labs/04-upcycling (run by `make test`).
#
#   1. the reference solution passes every task (exit 0, "Tasks passed: 5 of 5")
#   2. the untouched starter fails (exit non-zero) and names each unimplemented task: its
#      TODO line on stderr and the task in the summary, with no numerical noise
#   3. TASK=task3_choose grades that task alone, TASK=task1_copy on the starter fails that task
#      alone; an unknown TASK lists the tasks
#   4. the grader catches real bugs, each in its own task only: a transposed down copy
#      (task1_copy, also through the model's loss), the one-pass variance (task2_stats), the
#      naive shuffle j = below(F) (task3_choose), a row of down re-drawn instead of a column
#      (task4_drop), fine-grained experts without the factor G (task5_split)
#   5. a student file that calls the engine's generator is refused, naming the function
#   6. make -C labs list names the lab and its five tasks
# Checks 1-3 and 6 are the ones every lab has, in tests/lib/lab_harness.sh, which also says
# which build (MOE_BUILD, MOE_BIN) the grader runs against.
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.
lab=04-upcycling
solution=labs/$lab/solution/upcycle_lab.c
tasks="task1_copy task2_stats task3_choose task4_drop task5_split"
functions="lab_copy_experts lab_stats lab_choose_units lab_drop_units lab_split_experts"
single_task=task3_choose
starter_task=task1_copy
# shellcheck source-path=SCRIPTDIR source=lib/lab_harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/lab_harness.sh" || exit 1

lab_common_checks

# the experts' down copied as if it were (F, C): also breaks function preservation
if mutant down_transposed 's|memcpy(e_down + e \* fc, w_down, fc \* sizeof(float));|for (int f = 0; f < F; f++) for (int c = 0; c < C; c++) e_down[e * fc + (size_t)f * C + c] = w_down[(size_t)c * F + f];|'; then
    grade grade SOLUTION="$tmp/down_transposed.c"
    only_fails task1_copy &&
        grep -q "2 experts from F = 3, C = 2: expert 0's e_down\[0, 1\] (each matrix 2 x 3): got 24, want 22" <<< "$out" &&
        grep -q "against its dense parent's loss: function preservation" <<< "$out"
    check "a transposed down copy fails task1_copy (and the model's loss) and nothing else" $? \
        "exit $rc: $out"
fi

# the one-pass variance E[w^2] - E[w]^2: NaN for equal values, no digits left at mean 1000
if mutant one_pass 's|for (int i = 0; i < n; i++) ss += ((double)w\[i\] - m) \* ((double)w\[i\] - m);|for (int i = 0; i < n; i++) ss += (double)w[i] * w[i]; ss -= n * m * m;|'; then
    grade grade SOLUTION="$tmp/one_pass.c"
    only_fails task2_stats && grep -q '1000 equal values 0.3 (std 0, never NaN): the std (got -nan' <<< "$out" &&
        grep -q '2^20 values 1000 + 0.001 u' <<< "$out"
    check "the one-pass variance fails task2_stats and nothing else" $? "exit $rc: $out"
fi

# the naive shuffle: j drawn from all F units at every step
if mutant naive_shuffle 's|int j = i + lab_rng_below(rng, F - i);|int j = lab_rng_below(rng, F);|'; then
    grade grade SOLUTION="$tmp/naive_shuffle.c"
    only_fails task3_choose &&
        grep -q "the README's example (F = 8, n_drop = 3, seed 42): units\[1\]: got 0, want 2" <<< "$out"
    check "the naive shuffle j = below(F) fails task3_choose and nothing else" $? "exit $rc: $out"
fi

# a unit's row of down (as if down were (F, C)) re-drawn instead of its column
if mutant down_row 's|down\[(size_t)c \* F + u\]|down[(size_t)u * C + c]|'; then
    grade grade SOLUTION="$tmp/down_row.c"
    only_fails task4_drop && grep -q "unit u is column u" <<< "$out"
    check "re-drawing a row of down instead of a column fails task4_drop and nothing else" $? \
        "exit $rc: $out"
fi

# fine-grained experts without the factor G on down: the model's loss moves
if mutant no_factor 's|= (float)G \* w_down|= w_down|'; then
    grade grade SOLUTION="$tmp/no_factor.c"
    only_fails task5_split && grep -q "against its dense parent's loss" <<< "$out"
    check "fine-grained experts without the factor G fail task5_split and nothing else" $? \
        "exit $rc: $out"
fi

# a file that draws with the engine's generator instead of the lab's
sed 's|int j = i + lab_rng_below(rng, F - i);|int j = i + (int)rng_below((void *)rng, (uint64_t)(F - i));|' \
    "$solution" > "$tmp/engine.c"
sed -i 's|#include <string.h>|#include <string.h>\nuint64_t rng_below(void *r, uint64_t n);|' "$tmp/engine.c"
refused rng_below

lab_list_check
lab_finish
