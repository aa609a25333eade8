#!/usr/bin/env bash
# np_runs.sh: the training runs of the multi-process suites that compare a layout with one
# process (tests/mpi/test_tp.sh, test_zero.sh), sourced after tests/lib/common.sh. They use the
# suite's $moe, its settings ${tiny[@]} and its $tmp.
#
#   run NAME NP [--set ...]      train with NP processes into $tmp/NAME (NP 1: no mpirun);
#                                its output in $tmp/NAME.log
#   resume NAME NP [--set ...]   continue $tmp/NAME's run with NP processes; its output in
#                                $tmp/NAME.resume.log
# Each mpirun is bounded (a KILL 10 s after the TERM of timeout, as an mpirun stuck ending a
# job ignores the TERM); the status is the command's.
# shellcheck disable=SC2154 # moe, tiny, tmp: set by the sourcing suite

# np_train NP ARGS...: moe train ARGS with NP processes (NP 1: no mpirun)
np_train() {
    local np=$1
    shift
    if [ "$np" = 1 ]; then
        "$moe" train "$@"
    else
        timeout -k 10 120 mpirun -np "$np" "$moe" train "$@"
    fi
}

run() {
    local name=$1 np=$2
    shift 2
    np_train "$np" --out "$tmp/$name" "${tiny[@]}" "$@" > "$tmp/$name.log" 2>&1
}

resume() {
    local name=$1 np=$2
    shift 2
    np_train "$np" --resume "$tmp/$name" --quiet "$@" > "$tmp/$name.resume.log" 2>&1
}
