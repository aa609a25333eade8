#!/usr/bin/env bash
# test_dist.sh: the process grid and collectives of src/parallel under mpirun (run by
# `make test-mpi` with MOE_BUILD set; the binary is $MOE_BUILD/tests/mpi/test_dist).
#
#   1. the Check suite of tests/mpi/test_dist.c on every rank, with each engine of collectives
#      (teach: built by hand; mpi: MPI's own): 1 process (ep 1), 2 (ep 2), 4 (ep 4; and ep 2 x
#      dp 2), 8 (ep 4 x dp 2, oversubscribed), and with a tensor-parallel axis 4 (tp 2 x ep 2)
#      and 8 (tp 2 x ep 2 x dp 2): grid layout, sums over WORLD / EP / DP / TP / DATA (every
#      member the same bits), reduce-scatter and all-gather over each (the all-reduce's sum,
#      uneven and empty ranges, byte counts), all-to-alls, broadcast, gather, barrier
#   2. a bad grid is refused with a message: dist.ep=3, and dist.tp=2 x dist.ep=4, on 4
#      processes
#   3. no silent hangs: a rank that stops answering in the middle of a run of all-to-alls
#      (MOE_TEST_HANG_RANK=1, dist timeout 3 s) ends the job non-zero within 15 s, and the
#      other ranks name rank 1; the same in the second row of ep 2 x dp 2 (rank 3 stops,
#      rank 2 must name world rank 3, not its EP index 1, and no message may blame another
#      rank: rank 0, done with its row, waits in a barrier for ranks 2 and 3)
#   4. a rank that dies (MOE_TEST_KILL_RANK=1: SIGKILL, dist timeout 30 s so that MPI's own
#      detection is what is tested) ends the job non-zero within 15 s
#   5. in sums over 4 processes (MOE_TEST_HANG_SUM=1), where ranks 2 and 3 wait for rank 0
#      and rank 0 for the stopped rank 1, every message names rank 1, never rank 0
#   3-5 again with MPI's collectives, which cannot name the silent rank: the job ends within
#      15 s and the message names the collective, its group and the group's world ranks
#   6. a process stopped before MPI_Init (MOE_TEST_STOP_AT_START=2) does not hang the others
#      there: the job ends non-zero within 15 s with a message about the start of the job
# Every mpirun runs under `timeout -k 10 60` (a KILL 10 s after the TERM: an mpirun stuck while
# it ends a job ignores the TERM). Prints one line per check and "N passed, M failed";
# exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
build=${MOE_BUILD:-build/mpi}
bin=$(executable "$build/tests/mpi/test_dist" \
      "make MPI=1 $build/tests/mpi/test_dist (or set MOE_BUILD)") || exit 1
need_mpirun required
export OMP_NUM_THREADS=1
unset MOE_TEST_HANG_RANK MOE_TEST_KILL_RANK MOE_TEST_TIMEOUT MOE_TEST_HANG_SUM MOE_TEST_STOP_AT_START \
    MOE_TEST_COLLECTIVES

now_ms() { date +%s%3N; }

# run NP EP [VAR=VALUE ...]: mpirun -np NP with MOE_TEST_EP=EP; sets rc, secs, out (stdout
# and stderr of every rank)
run() {
    local np=$1 ep=$2
    shift 2
    local t0
    t0=$(now_ms)
    env MOE_TEST_EP="$ep" MOE_TEST_TP="${tp:-1}" "$@" timeout -k 10 60 mpirun -np "$np" "$bin" > "$tmp/out" 2>&1
    rc=$?
    secs=$(awk -v ms=$(($(now_ms) - t0)) 'BEGIN { printf "%.1f", ms / 1000 }')
    out=$(cat "$tmp/out")
}

# run_ranks NP EP [VAR=VALUE ...]: as run, but the job has ended when its ranks have: Open MPI's
# mpirun has been seen to hang on after every rank of a job that failed inside MPI_Init had
# exited, ignoring the TERM of timeout. When the ranks are gone and mpirun is not, it is killed
# and lingered=1; secs is the time until the ranks had ended.
run_ranks() {
    local np=$1 ep=$2 t0 pid seen=0 i
    shift 2
    t0=$(now_ms)
    env MOE_TEST_EP="$ep" "$@" timeout -k 10 60 mpirun -np "$np" "$bin" > "$tmp/out" 2>&1 &
    pid=$!
    lingered=0
    for i in $(seq 300); do
        kill -0 "$pid" 2> /dev/null || break
        if pgrep -f "^$bin\$" > /dev/null; then seen=1
        elif [ $seen = 1 ]; then lingered=1; break; fi
        sleep 0.1
    done
    secs=$(awk -v ms=$(($(now_ms) - t0)) 'BEGIN { printf "%.1f", ms / 1000 }')
    if [ $lingered = 1 ]; then # mpirun relays the ranks' last output: 10 s to end by itself
        for i in $(seq 100); do kill -0 "$pid" 2> /dev/null && sleep 0.1; done
        if kill -0 "$pid" 2> /dev/null; then pkill -9 -P "$pid"; else lingered=0; fi
    fi
    wait "$pid"
    rc=$?
    [ $lingered = 1 ] && [ $rc -gt 128 ] && rc=1 # the ranks ended with an error; mpirun was killed
    out=$(cat "$tmp/out")
}

# ---- 1. the suite on every grid ----------------------------------------------------------
echo "test_dist: the suite under mpirun"
for coll in teach mpi; do
    for grid in "1 1" "2 2" "4 4" "4 2" "8 4"; do
        set -- $grid
        run "$1" "$2" MOE_TEST_COLLECTIVES=$coll
        [ $rc -eq 0 ] && grep -q "all passed" <<< "$out"
        check "$coll collectives, mpirun -np $1, ep $2 x dp $(($1 / $2)): every test on every rank (${secs} s)" $? \
            "exit $rc: $(grep -E 'rank|FAIL|rror' <<< "$out" | head -n 8)"
    done
    # with a tensor-parallel axis: tp 2 x ep 2, and tp 2 x ep 2 x dp 2 (oversubscribed; with
    # MPI's collectives only in make test-slow, MOE_TEST_FULL=1)
    for grid in "4 2 2" "8 2 2"; do
        [ "$coll" = mpi ] && [ "$grid" = "8 2 2" ] && [ "${MOE_TEST_FULL:-0}" != 1 ] && continue
        set -- $grid
        tp=$3 run "$1" "$2" MOE_TEST_COLLECTIVES=$coll
        [ $rc -eq 0 ] && grep -q "all passed" <<< "$out"
        check "$coll collectives, mpirun -np $1, tp $3 x ep $2 x dp $(($1 / $2 / $3)): every test on every rank (${secs} s)" $? \
            "exit $rc: $(grep -E 'rank|FAIL|rror' <<< "$out" | head -n 8)"
    done
done

# ---- 2. a grid that does not fit ---------------------------------------------------------
echo "test_dist: bad grid"
run 4 3
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "dist.ep=3 does not divide the 4 processes: run with mpirun -np 3" <<< "$out"
check "dist.ep=3 on 4 processes is refused with what to do" $? "exit $rc: $(head -n 3 <<< "$out")"
tp=2 run 4 4
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "dist.tp=2 x dist.ep=4 = 8 processes a data-parallel replica, which does not divide the 4 processes" <<< "$out"
check "dist.tp=2 x dist.ep=4 on 4 processes is refused with the arithmetic" $? "exit $rc: $(head -n 3 <<< "$out")"

# ---- 3, 4. failures end the job, in bounded time ----------------------------------------
echo "test_dist: failures"
run 4 4 MOE_TEST_HANG_RANK=1 MOE_TEST_TIMEOUT=3
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "${secs%.*}" -lt 15 ] &&
    grep -qE "rank [023]: no answer from rank\(s\) 1 \(world ranks\) in the alltoallv_f" <<< "$out"
check "a rank that stops answering: job ended (exit $rc) in ${secs} s, rank 1 named" $? \
    "exit $rc after ${secs} s: $(grep -E 'moe:|test_dist' <<< "$out" | head -n 4)"

# in the second EP row (world ranks 2, 3) the silent peer is EP member 1 but world rank 3: the
# message must give the world rank
run 4 2 MOE_TEST_HANG_RANK=3 MOE_TEST_TIMEOUT=3
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "${secs%.*}" -lt 15 ] &&
    grep -qE "rank 2: no answer from rank\(s\) 3 \(world ranks\) in the alltoallv_f" <<< "$out"
check "ep 2 x dp 2, rank 3 stops: job ended (exit $rc) in ${secs} s, rank 2 names world rank 3" $? \
    "exit $rc after ${secs} s: $(grep -E 'moe:|test_dist' <<< "$out" | head -n 4)"

# and nobody blames another rank: rank 0, done with its row, waits in the barrier for ranks 2
# and 3, of which 2 waits for the stopped 3; rank 2's message must be the only one
[ "$(grep -c "no answer from rank" <<< "$out")" -ge 1 ] &&
    ! grep "no answer from rank" <<< "$out" | grep -qv "rank(s) 3 (world ranks)"
check "ep 2 x dp 2, rank 3 stops: every 'no answer' message names rank 3 alone" $? \
    "$(grep 'no answer' <<< "$out" | head -n 4)"

run 4 2 MOE_TEST_KILL_RANK=1 MOE_TEST_TIMEOUT=30
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "${secs%.*}" -lt 15 ] && grep -q "kills itself" <<< "$out"
check "a rank killed: job ended (exit $rc) in ${secs} s" $? \
    "exit $rc after ${secs} s: $(tail -n 4 <<< "$out")"

# with MPI's collectives the library cannot say who is missing: the message names the
# collective, its group and the group's world ranks, and the job still ends in bounded time
run 4 2 MOE_TEST_HANG_RANK=3 MOE_TEST_TIMEOUT=3 MOE_TEST_COLLECTIVES=mpi
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "${secs%.*}" -lt 15 ] &&
    grep -qE "rank 2: the alltoallv_f over the expert-parallel group \(world ranks 2, 3\) did not complete in 3.0 s.*dist.collectives=teach names it" <<< "$out"
check "MPI's collectives, rank 3 stops: job ended (exit $rc) in ${secs} s, rank 2 names the exchange and its group" $? \
    "exit $rc after ${secs} s: $(grep -E 'moe:|test_dist' <<< "$out" | head -n 4)"
run 4 4 MOE_TEST_HANG_SUM=1 MOE_TEST_TIMEOUT=3 MOE_TEST_COLLECTIVES=mpi
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "${secs%.*}" -lt 15 ] &&
    grep -qE "the allreduce_sum_d over the world \(world ranks 0, 1, 2, 3\) did not complete" <<< "$out"
check "MPI's collectives, rank 1 stops in a sum: job ended (exit $rc) in ${secs} s, naming the sum" $? \
    "exit $rc after ${secs} s: $(grep -E 'moe:|test_dist' <<< "$out" | head -n 4)"
run 4 2 MOE_TEST_KILL_RANK=1 MOE_TEST_TIMEOUT=30 MOE_TEST_COLLECTIVES=mpi
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "${secs%.*}" -lt 15 ] && grep -q "kills itself" <<< "$out"
check "MPI's collectives, a rank killed: job ended (exit $rc) in ${secs} s" $? \
    "exit $rc after ${secs} s: $(tail -n 4 <<< "$out")"

# ---- 5, 6. the rank to blame, and the start of the job --------------------------------------
echo "test_dist: sums and start-up"
run 4 4 MOE_TEST_HANG_SUM=1 MOE_TEST_TIMEOUT=3
named=$(grep "no answer from rank" <<< "$out")
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "${secs%.*}" -lt 15 ] && [ -n "$named" ] &&
    ! grep -qv "rank 0: no answer from rank(s) 1 (world ranks) in the allreduce_sum_d" <<< "$named"
check "sums over 4 ranks, rank 1 stops: job ended (exit $rc) in ${secs} s; rank 0 names rank 1, nobody names rank 0" \
    $? "exit $rc after ${secs} s: $(grep -E 'moe:|test_dist' <<< "$out" | head -n 4)"

run_ranks 4 4 MOE_TEST_STOP_AT_START=2 MOE_TEST_TIMEOUT=3
note=""
[ $lingered = 1 ] && note="; mpirun lingered after its ranks and was killed"
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "${secs%.*}" -lt 15 ] &&
    grep -qE "rank [013]: the start of the job \(MPI_Init, the process grid\) did not finish within 3 s" <<< "$out"
check "a process stopped before MPI_Init: job ended (exit $rc) in ${secs} s with a start-up message$note" \
    $? "exit $rc after ${secs} s: $(grep -E 'moe:|test_dist' <<< "$out" | head -n 4)"

finish
