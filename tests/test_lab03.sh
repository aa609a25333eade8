#!/usr/bin/env bash
# test_lab03.sh: the grader of labs/03-all-to-all, an MPI lab (run by `make test`).
#
#   1. the reference solution passes every task with 4 ranks (the default), 1 and 2
#   2. the untouched starter fails (exit non-zero) and names each unimplemented task: its
#      TODO line on stderr and the task in the summary, with no numerical noise; with 4 ranks
#      the report and each TODO line are printed once (by rank 0)
#   3. TASK=task3_exchange grades that task alone, TASK=task5_dispatch on the starter fails
#      that task alone; an unknown TASK lists the tasks
#   4. the grader catches real bugs, each in its own task only: the destination rank as e % P
#      (task1_counts), an inclusive prefix sum (task2_displs), a count exchange of one count
#      per rank instead of E / P (task3_exchange), a pack in token order inside each rank
#      (task4_pack), an all-to-all whose counts are rows, not floats (task5_dispatch)
#   5. a file that lacks one function fails that task alone (the link does not fail)
#   6. make -C labs list names the lab and its five tasks
# Checks 1-3 and 6 are the ones every lab has, in tests/lib/lab_harness.sh, which also says
# which build (MOE_BUILD, MOE_BIN) the grader runs against. Skipped (exit 77) without mpicc and
# mpirun.
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.
if ! command -v mpicc > /dev/null 2>&1 || ! command -v mpirun > /dev/null 2>&1; then
    echo "test_lab03: skipped: labs/03-all-to-all needs MPI (mpicc, mpirun); install it with: make deps"
    exit 77
fi
lab=03-all-to-all
solution=labs/$lab/solution/alltoall_lab.c
tasks="task1_counts task2_displs task3_exchange task4_pack task5_dispatch"
functions="lab_send_counts lab_displacements lab_exchange_counts lab_pack lab_dispatch"
single_task=task3_exchange
starter_task=task5_dispatch
# shellcheck source-path=SCRIPTDIR source=lib/lab_harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/lab_harness.sh" || exit 1

lab_common_checks

for np in 1 2; do
    grade grade-solution NP=$np
    [ $rc -eq 0 ] && grep -q '^Tasks passed: 5 of 5\.$' <<< "$out" &&
        grep -q "(lab 03: all-to-all, $np rank" <<< "$out"
    check "the reference solution passes all 5 tasks with NP=$np" $? "exit $rc: $out"
done

grade grade-starter
missing=""
n=1
for f in $functions; do
    [ "$(grep -c "^TODO: task $n ($f) is not implemented$" <<< "$out")" = 1 ] || missing="$missing $f"
    n=$((n + 1))
done
[ -z "$missing" ] && [ "$(grep -c '^Tasks passed' <<< "$out")" = 1 ] &&
    grep -q '(lab 03: all-to-all, 4 ranks)' <<< "$out" && ! grep -q '^\[rank' <<< "$out"
check "with 4 ranks, the starter's report and each TODO line are printed once" $? \
    "missing or repeated:$missing in: $out"

# the destination rank as e % P (round-robin experts) instead of e / (E / P) (blocks)
if mutant modulo 's|send_counts\[e / El\]++;|send_counts[e % P]++;|'; then
    grade grade SOLUTION="$tmp/modulo.c"
    only_fails task1_counts &&
        grep -q "the README's example, rank 1's routing: send_counts\[0\]: got 5, want 2" <<< "$out"
    check "the destination rank as e % P fails task1_counts and nothing else" $? "exit $rc: $out"
fi

# an inclusive prefix sum: each block would start where it ends
if mutant inclusive '/^int lab_displacements/,/^}/s|displs\[p\] = total;|displs[p] = total + counts[p];|'; then
    grade grade SOLUTION="$tmp/inclusive.c"
    only_fails task2_displs &&
        grep -q "the README's example, rank 0's send_counts: displs\[0\]: got 3, want 0" <<< "$out"
    check "an inclusive prefix sum fails task2_displs and nothing else" $? "exit $rc: $out"
fi

# one count per rank instead of the El counts of its experts
if mutant one_count \
    's|MPI_Alltoall(expert_counts, El, MPI_INT, recv_counts, El,|MPI_Alltoall(expert_counts, 1, MPI_INT, recv_counts, 1,|'; then
    grade grade SOLUTION="$tmp/one_count.c" NP=2
    only_fails task3_exchange && grep -q "the README's example, .*recv_counts\[" <<< "$out"
    check "exchanging one count per rank fails task3_exchange and nothing else" $? "exit $rc: $out"
fi

# inside each destination rank, assignments in token order instead of by local expert
if mutant token_order 's|int r = next\[e\]++;|int r = next[e / (E / P) * (E / P)]++;|'; then
    grade grade SOLUTION="$tmp/token_order.c"
    only_fails task4_pack &&
        grep -q "the README's example, rank 0's tokens: row\[" <<< "$out"
    check "a pack in token order inside each rank fails task4_pack and nothing else" $? \
        "exit $rc: $out"
fi

# counts and displacements of rows handed to MPI_Alltoallv, which counts floats
if mutant rows_not_floats '/for (int i = 0; i < 4 \* P; i++) scount\[i\] \*= C;/d'; then
    grade grade SOLUTION="$tmp/rows_not_floats.c"
    only_fails task5_dispatch && grep -q "the README's example, .*: recv row" <<< "$out"
    check "an all-to-all counting rows instead of floats fails task5_dispatch and nothing else" \
        $? "exit $rc: $out"
fi

# a file without lab_displacements: the grader's functions are weak, so only task2 fails
if mutant no_displs '/^int lab_displacements/,/^}/d'; then
    grade grade SOLUTION="$tmp/no_displs.c" NP=2
    only_fails task2_displs &&
        grep -q "function lab_displacements is not defined in your file" <<< "$out"
    check "a missing lab_displacements fails task2_displs and nothing else" $? "exit $rc: $out"
fi

lab_list_check
lab_finish
