#!/usr/bin/env bash
# test_lab05.sh: the grader of labs/05-stability (run by `make test`).
#
#   1. the reference solution passes every task (exit 0, "Tasks passed: 5 of 5")
#   2. the untouched starter fails (exit non-zero) and names each unimplemented task: its
#      TODO line on stderr and the task in the summary, with no numerical noise
#   3. TASK=task2_rmsnorm_backward grades that task alone, TASK=task5_z_loss on the starter
#      fails that task alone; an unknown TASK lists the tasks
#   4. the grader catches real bugs: the sandwich without its residual connection
#      (task3_sandwich_forward only), its backward without the residual path
#      (task4_sandwich_backward only), the z-loss's logsumexp without the max shift
#      (task5_z_loss only), RMSNorm's dw written instead of added to (task2, and task4, whose
#      solution reuses it), RMSNorm without eps (task1, and task3, which reuses it)
#   5. a student file that calls the engine's rmsnorm is refused, naming the function
#   6. make -C labs list names the lab and its five tasks
# Checks 1-3 and 6 are the ones every lab has, in tests/lib/lab_harness.sh, which also says
# which build (MOE_BUILD, MOE_BIN) the grader runs against.
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.
lab=05-stability
solution=labs/$lab/solution/stability_lab.c
tasks="task1_rmsnorm task2_rmsnorm_backward task3_sandwich_forward task4_sandwich_backward task5_z_loss"
functions="lab_rmsnorm_forward lab_rmsnorm_backward lab_sandwich_forward lab_sandwich_backward lab_z_loss"
single_task=task2_rmsnorm_backward
starter_task=task5_z_loss
# shellcheck source-path=SCRIPTDIR source=lib/lab_harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/lab_harness.sh" || exit 1

# fail_two TASK_A TASK_B: the last grading failed those two tasks and passed the others (a bug
# in a function that the solution calls again from a later task)
fail_two() {
    [ "$rc" -ne 0 ] && grep -Eq "^  FAIL  $1 " <<< "$out" && grep -Eq "^  FAIL  $2 " <<< "$out" &&
        grep -q "^Tasks passed: $((ntasks - 2)) of $ntasks\.$" <<< "$out"
}

lab_common_checks

# the sandwich forward without the residual connection: out = branch
if mutant no_residual '/out\[i\] = x\[i\] + out\[i\];/d'; then
    grade grade SOLUTION="$tmp/no_residual.c"
    only_fails task3_sandwich_forward &&
        grep -q "W = 0: the branch adds 0, so out must equal x" <<< "$out"
    check "a sandwich without its residual connection fails task3_sandwich_forward alone" $? \
        "exit $rc: $out"
fi

# the sandwich backward without the residual path: dx = the branch's gradient alone
if mutant no_residual_path '/dx\[i\] = dout\[i\] + dx\[i\];/d'; then
    grade grade SOLUTION="$tmp/no_residual_path.c"
    only_fails task4_sandwich_backward &&
        grep -q "W = 0: the branch passes no gradient to x, so dx must be dout" <<< "$out"
    check "a backward without the residual path fails task4_sandwich_backward and nothing else" \
        $? "exit $rc: $out"
fi

# the z-loss's logsumexp without the max shift: exp(1000) overflows even in double
if mutant no_shift 's/float m = l\[0\];/float m = 0.0f;/
                   s/if (l\[e\] > m) m = l\[e\];/if (0) m = l[e];/'; then
    grade grade SOLUTION="$tmp/no_shift.c"
    only_fails task5_z_loss && grep -Eq '^  FAIL  task5_z_loss .*4/5 checks pass$' <<< "$out" &&
        grep -q "z of logits of 100 and +-1000" <<< "$out"
    check "a logsumexp without the max shift fails task5_z_loss's huge logits and nothing else" \
        $? "exit $rc: $out"
fi

# RMSNorm's dw written (=) instead of added to (+=)
if mutant dw_written 's/dw\[c\] += (float)acc;/dw[c] = (float)acc;/'; then
    grade grade SOLUTION="$tmp/dw_written.c"
    fail_two task2_rmsnorm_backward task4_sandwich_backward &&
        grep -q "dw held 10 before the call: it must hold 10 + the gradient" <<< "$out"
    check "dw written instead of added to fails task2 (and task4, which reuses it), nothing else" \
        $? "exit $rc: $out"
fi

# RMSNorm without eps: a row of zeros gives r = inf
if mutant no_eps 's/ + (double)LAB_RMSNORM_EPS//'; then
    grade grade SOLUTION="$tmp/no_eps.c"
    fail_two task1_rmsnorm task3_sandwich_forward &&
        grep -q "a row of zeros and a row of 1e-3" <<< "$out"
    check "RMSNorm without eps fails task1 (and task3, which reuses it), nothing else" $? \
        "exit $rc: $out"
fi

# a file that normalises with the engine's rmsnorm
cp "$solution" "$tmp/engine.c"
cat >> "$tmp/engine.c" << 'C'
void rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int N, int C);
void lab_engine_norm(float *y, float *rstd, const float *x, const float *w, int N, int C) {
    rmsnorm_forward(y, rstd, x, w, N, C);
}
C
refused rmsnorm_forward

lab_list_check
lab_finish
