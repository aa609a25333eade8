#!/usr/bin/env bash
# test_lab07.sh: the grader of labs/07-tensor-parallel, an MPI lab (run by `make test`).
#
#   1. the reference solution passes every task with 4 ranks (the default) and 3 (an odd
#      world: a group of 2 and a rank alone; groups of 1 rank are graded in both)
#   2. the untouched starter fails (exit non-zero) and names each unimplemented task: its
#      TODO line on stderr and the task in the summary, with no numerical noise; with 4 ranks
#      the report and each TODO line are printed once
#   3. TASK=task3_row_forward grades that task alone, TASK=task5_mlp on the starter fails that
#      task alone; an unknown TASK lists the tasks
#   4. the grader catches real bugs, each graded in its own task (TASK=, one MPI job: the
#      other tasks never call the function changed): an all-gather counting rows
#      instead of floats (task1_column_forward); with MOE_TEST_FULL=1 (make test-slow) also
#      a weight gradient written instead of added to
#      (task2_column_backward), a row-parallel partial product kept without its sum
#      (task3_row_forward), the gradient's all-gather counting rows (task4_row_backward), and
#      a feed-forward that gathers its input twice, or sums with an all-reduce (task5_mlp,
#      whose collectives the grader counts)
#   5. a student file that calls the engine's matmul_forward is refused, naming the function
#   6. make -C labs list names the lab and its five tasks
# Checks 1-3 and 6 are the ones every lab has, in tests/lib/lab_harness.sh, which also says
# which build (MOE_BUILD, MOE_BIN) the grader runs against. The submissions that try to pass
# without the work (lab_cheat_checks) attack the graders' common code, which lab 03's suite
# runs against the MPI labs' way of running a task. Skipped (exit 77) without mpicc and mpirun.
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.
if ! command -v mpicc > /dev/null 2>&1 || ! command -v mpirun > /dev/null 2>&1; then
    echo "test_lab07: skipped: labs/07-tensor-parallel needs MPI (mpicc, mpirun); install it with: make deps"
    exit 77
fi
lab=07-tensor-parallel
solution=labs/$lab/solution/tp_lab.c
tasks="task1_column_forward task2_column_backward task3_row_forward task4_row_backward task5_mlp"
functions="lab_column_forward lab_column_backward lab_row_forward lab_row_backward lab_mlp_forward"
single_task=task3_row_forward
starter_task=task5_mlp
# shellcheck source-path=SCRIPTDIR source=lib/lab_harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/lab_harness.sh" || exit 1

lab_common_checks

# the report lab_common_checks graded last: the starter's working copy, with 4 ranks
missing=""
n=1
for f in $functions; do
    [ "$(grep -c "^TODO: task $n ($f) is not implemented$" <<< "$out")" = 1 ] || missing="$missing $f"
    n=$((n + 1))
done
[ -z "$missing" ] && [ "$(grep -c '^Tasks passed' <<< "$out")" = 1 ] &&
    grep -q '(lab 07: tensor parallelism, 4 ranks)' <<< "$out"
check "with 4 ranks, the starter's report and each TODO line are printed once" $? \
    "missing or repeated:$missing in: $out"

grade grade-solution NP=3
[ $rc -eq 0 ] && grep -q '^Tasks passed: 5 of 5\.$' <<< "$out" &&
    grep -q "(lab 07: tensor parallelism, 3 ranks)" <<< "$out"
check "the reference solution passes all 5 tasks with NP=3" $? "exit $rc: $out"

# fails TASK: the last grading, of TASK alone, failed it
fails() {
    [ "$rc" -ne 0 ] && grep -Eq "^  FAIL  $1 " <<< "$out" && grep -q '^Tasks passed: 0 of 1\.$' <<< "$out"
}

# MPI_Allgather's count in rows, not floats: half of x_all stays as it was (NaN)
if mutant rows_gather '/^int lab_column_forward/,/^}/s|gather_rows(x_all, x, N, IN, comm)|MPI_Allgather(x, N / P, MPI_FLOAT, x_all, N / P, MPI_FLOAT, comm)|'; then
    grade grade SOLUTION="$tmp/rows_gather.c" NP=2 TASK=task1_column_forward
    fails task1_column_forward &&
        grep -q "the README's example, a group of 2 ranks (its rank 0), N = 2, IN = 2, OUT = 2: x_all\[1, 0\]: got nan, want 3" <<< "$out"
    check "an all-gather counting rows instead of floats fails task1_column_forward" $? \
        "exit $rc: $out"
fi

# the other tasks' bugs: an MPI job each (make test-slow, MOE_TEST_FULL=1)
if [ "${MOE_TEST_FULL:-0}" = 1 ]; then
    # the weight gradient written (=), as if nothing came before this backward
    if mutant dw_written '/^int lab_column_backward/,/^}/s|^    matmul_dW(dW, dy, x_all, N, IN, OUTr);|    for (size_t i_ = 0; i_ < (size_t)OUTr * IN; i_++) dW[i_] = 0.0f;\n&|'; then
        grade grade SOLUTION="$tmp/dw_written.c" NP=2 TASK=task2_column_backward
        fails task2_column_backward && grep -q "^          grader.c:[0-9]*: rank 0: random layer, .*: dW\[" <<< "$out"
        check "a weight gradient written instead of added to fails task2_column_backward" $? \
            "exit $rc: $out"
    fi

    # each rank keeps its own rows of its partial product, never summed over the ranks
    if mutant no_sum '/^int lab_row_forward/,/^}/s|int rc = sum_rows(y, part, N, OUT, comm);|int r_, rc = MPI_Comm_rank(comm, \&r_);\n    for (size_t i_ = 0; i_ < (size_t)(N / P) * OUT; i_++) y[i_] = part[(size_t)r_ * (N / P) * OUT + i_];|'; then
        grade grade SOLUTION="$tmp/no_sum.c" NP=2 TASK=task3_row_forward
        fails task3_row_forward &&
            grep -q "the README's example, a group of 2 ranks (its rank 0), N = 2, IN = 2, OUT = 2: y\[1\]: got 1, want 3" <<< "$out"
        check "a row-parallel product without its reduce-scatter fails task3_row_forward" $? \
            "exit $rc: $out"
    fi

    # the gradient's all-gather counting rows, into a buffer of zeros
    if mutant rows_gather_dy '/^int lab_row_backward/,/^}/{s|malloc(((size_t)N \* OUT + 1) \* sizeof(float))|calloc((size_t)N * OUT + 1, sizeof(float))|;s|gather_rows(dy_all, dy, N, OUT, comm)|MPI_Allgather(dy, N / P, MPI_FLOAT, dy_all, N / P, MPI_FLOAT, comm)|}'; then
        grade grade SOLUTION="$tmp/rows_gather_dy.c" NP=2 TASK=task4_row_backward
        fails task4_row_backward &&
            grep -q "the README's example, .*: dW\[1, 0\]: got 0, want 6" <<< "$out"
        check "the gradient's all-gather counting rows fails task4_row_backward" $? \
            "exit $rc: $out"
    fi

    # the input gathered again for the up projection: right numbers, twice the bytes
    if mutant gather_twice '/^int lab_mlp_forward/,/^}/s|^    matmul(u, x_all, Wu, N, C, Fr);|    rc = gather_rows(x_all, x, N, C, comm);\n&|'; then
        grade grade SOLUTION="$tmp/gather_twice.c" NP=2 TASK=task5_mlp
        fails task5_mlp && grep -q "it called MPI_Allgather 2 times, MPI_Reduce_scatter_block 1 and MPI_Allreduce 0" <<< "$out"
        check "a feed-forward gathering its input twice fails task5_mlp, by its count" $? \
            "exit $rc: $out"
    fi

    # the down projection summed with an all-reduce, the rank's rows taken from it
    if mutant all_reduce '/^int lab_mlp_forward/,/^}/s|rc = sum_rows(y, part, N, C, comm);|int r_;\n    MPI_Comm_rank(comm, \&r_);\n    rc = MPI_Allreduce(MPI_IN_PLACE, part, N * C, MPI_FLOAT, MPI_SUM, comm);\n    for (size_t i_ = 0; i_ < (size_t)(N / P) * C; i_++) y[i_] = part[(size_t)r_ * (N / P) * C + i_];|'; then
        grade grade SOLUTION="$tmp/all_reduce.c" NP=2 TASK=task5_mlp
        fails task5_mlp && grep -q "it called MPI_Allgather 1 time, MPI_Reduce_scatter_block 0 and MPI_Allreduce 1" <<< "$out"
        check "a feed-forward summing with an all-reduce fails task5_mlp, by its count" $? \
            "exit $rc: $out"
    fi
else
    echo "  (the mutants of tasks 2 to 5: make test-slow, MOE_TEST_FULL=1)"
fi

# a file that multiplies with the engine's matmul
cp "$solution" "$tmp/engine.c"
cat >> "$tmp/engine.c" << 'C'
void matmul_forward(float *y, const float *x, const float *W, int N, int IN, int OUT);
void lab_engine_linear(float *y, const float *x, const float *W, int N, int IN, int OUT) {
    matmul_forward(y, x, W, N, IN, OUT);
}
C
refused matmul_forward

lab_list_check
lab_finish
