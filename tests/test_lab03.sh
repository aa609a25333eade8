#!/usr/bin/env bash
# test_lab03.sh: the grader of labs/03-all-to-all, an MPI lab (run by `make test`).
#
#   1. the reference solution passes every task with 4 ranks (the default), 1 and 2
#   2. the untouched starter fails (exit non-zero) and names each unimplemented task: its
#      TODO line on stderr and the task in the summary, with no numerical noise; with 4 ranks
#      the report and each TODO line are printed once (by rank 0)
#   3. TASK=task3_exchange grades that task alone, TASK=task5_dispatch on the starter fails
#      that task alone; an unknown TASK lists the tasks
#   4. the grader catches real bugs, each in its own task only: a count exchange of one count
#      per rank instead of E / P (task3_exchange), an all-to-all whose counts are rows, not
#      floats (task5_dispatch); with MOE_TEST_FULL=1 (make test-slow) also the destination rank
#      as e % P (task1_counts), an inclusive prefix sum (task2_displs), a pack in token order
#      inside each rank (task4_pack)
#   5. (MOE_TEST_FULL=1: make test-slow) submissions that try to pass without the work, graded
#      by grade-all (each task its own MPI job): every rank exiting, aborting, looping or allocating too much, a printed pass,
#      forged files, one missing a function, one that does not compile; and the ways of MPI:
#      one rank leaving (_exit on rank 1 alone), MPI_Abort, a rank waiting for a message that
#      never comes (the ranks' watchdog ends the job). Each fails its own task alone, in
#      grades.csv
#   6. make -C labs list names the lab and its five tasks; each task's job has a TMPDIR of its own
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
# an early exit ends a rank: mpirun ends the job, and rank 0's report never comes
exit_pattern='exited before the task finished \(a rank ended without the grader.s report'
# Open MPI's own allocations look like leaks to LeakSanitizer: the MPI lab does not look for
# leaks (labs/Makefile sets ASAN_OPTIONS=detect_leaks=0)
leak_check=0
# the class is graded with 2 ranks a task (the solution and the starter are graded with 4 above),
# each task within 6 s: enough for a task on 2 busy cores, and the time the loops take
cheat_np=2
cheat_seconds=6
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

# Each mutant is graded whole (five MPI jobs), so make test grades those of the two exchanges
# (tasks 3 and 5, the lab's point) and make test-slow (MOE_TEST_FULL=1) the others too.

# the destination rank as e % P (round-robin experts) instead of e / (E / P) (blocks)
if [ "${MOE_TEST_FULL:-0}" = 1 ] && mutant modulo 's|send_counts\[e / El\]++;|send_counts[e % P]++;|'; then
    grade grade SOLUTION="$tmp/modulo.c" NP=2
    only_fails task1_counts &&
        grep -q "the README's example, rank 1's routing: send_counts\[0\]: got 5, want 2" <<< "$out"
    check "the destination rank as e % P fails task1_counts and nothing else" $? "exit $rc: $out"
fi

# an inclusive prefix sum: each block would start where it ends
if [ "${MOE_TEST_FULL:-0}" = 1 ] && mutant inclusive '/^int lab_displacements/,/^}/s|displs\[p\] = total;|displs[p] = total + counts[p];|'; then
    grade grade SOLUTION="$tmp/inclusive.c" NP=2
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
if [ "${MOE_TEST_FULL:-0}" = 1 ] && mutant token_order 's|int r = next\[e\]++;|int r = next[e / (E / P) * (E / P)]++;|'; then
    grade grade SOLUTION="$tmp/token_order.c" NP=2
    only_fails task4_pack &&
        grep -q "the README's example, rank 0's tokens: row\[" <<< "$out"
    check "a pack in token order inside each rank fails task4_pack and nothing else" $? \
        "exit $rc: $out"
fi

# counts and displacements of rows handed to MPI_Alltoallv, which counts floats
if mutant rows_not_floats '/for (int i = 0; i < 4 \* P; i++) scount\[i\] \*= C;/d'; then
    grade grade SOLUTION="$tmp/rows_not_floats.c" NP=2
    only_fails task5_dispatch && grep -q "the README's example, .*: recv row" <<< "$out"
    check "an all-to-all counting rows instead of floats fails task5_dispatch and nothing else" \
        $? "exit $rc: $out"
fi

# the ways of MPI to leave a task early, graded with lab_cheat_checks' submissions
lab_more_cheats() {
    inject rank_exits lab_exchange_counts \
        '{ int r_; MPI_Comm_rank(comm, &r_); if (r_ == 1) _exit(0); }'
    inject mpi_aborts lab_pack 'MPI_Abort(MPI_COMM_WORLD, 0);'
    # the grader's own report, called by the student: the number is right, the tests' results
    # are not there yet
    inject reports lab_send_counts \
        '{ void lab_rank_end(void); lab_rank_end(); MPI_Finalize(); _exit(0); }'
    inject deadlocks lab_exchange_counts \
        '{ int r_, x_; MPI_Comm_rank(comm, &r_); if (r_ == 0) MPI_Recv(&x_, 1, MPI_INT, MPI_ANY_SOURCE, 999, comm, MPI_STATUS_IGNORE); }'
    more_cheats=4
}
lab_more_cheat_checks() {
    row_is rank_exits task3_exchange "$exit_pattern"
    check "_exit(0) on rank 1 alone in lab_exchange_counts fails task3_exchange alone" $? \
        "$(cat "$tmp/class/grades.csv")"
    row_is mpi_aborts task4_pack "$exit_pattern"
    check "MPI_Abort in lab_pack fails task4_pack alone, as exited before the task finished" $? \
        "$(cat "$tmp/class/grades.csv")"
    row_is reports "$tasks" '"calls the grader \(lab_rank_end\): refused"$'
    check "a file calling the grader's lab_rank_end is refused, scoring 0" $? \
        "$(cat "$tmp/class/grades.csv")"
    row_is deadlocks task3_exchange "took over $cheat_seconds s \(rank [0-9]+'s watchdog\): some rank waits in an MPI call"
    check "a rank waiting for a message never sent fails task3_exchange alone, by the watchdog" \
        $? "$(cat "$tmp/class/grades.csv")"
}
# the class of cheating submissions: a dozen MPI jobs, several running into the time limit (a
# minute of the two cores), so make test-slow runs them (MOE_TEST_FULL=1)
if [ "${MOE_TEST_FULL:-0}" = 1 ]; then
    lab_cheat_checks
    grade grade SOLUTION="$tmp/class/reports.c"
    [ $rc -eq 2 ] && grep -q "calls the grader (lab_rank_end): only lab_todo() is yours to call" <<< "$out" &&
        ! grep -q '^Grading' <<< "$out"
    check "make -C labs grade refuses a file calling the grader's lab_rank_end before grading" $? \
        "exit $rc: $out"
else
    echo "  (the cheating submissions: make test-slow, MOE_TEST_FULL=1)"
fi

# each task's job has a TMPDIR of its own, removed after it: Open MPI keeps its session files
# there, and a job ending removes the folder it shares with a job starting beside it
mkdir -p "$tmp/jobs" "$tmp/class"
inject tmpdir lab_send_counts \
    '{ static int said_; if (!said_++) printf("TMPDIR=%s\n", getenv("TMPDIR")); }'
out=$(TMPDIR=$tmp/jobs make -s -C labs grade LAB="$lab" SOLUTION="$tmp/class/tmpdir.c" \
    TASK=task1_counts NP=2 SANITIZE=$san 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "^          | TMPDIR=$tmp/jobs/moe_lab_job\.[A-Za-z0-9]*$" <<< "$out" &&
    [ -z "$(ls -A "$tmp/jobs")" ]
check "each task's MPI job runs in a TMPDIR of its own, removed after it" $? \
    "exit $rc: $out; left: $(ls -A "$tmp/jobs")"

lab_list_check
lab_finish
