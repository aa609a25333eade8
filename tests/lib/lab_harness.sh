#!/usr/bin/env bash
# lab_harness.sh: what the tests of the labs' graders (tests/test_labNN.sh) share; each of them
# sources this file, so `make test` (which runs tests/*.sh) never runs it alone.
#
# The sourcing script sets, before it sources this file:
#   lab           the lab's folder under labs/, e.g. 02-capacity
#   solution      the reference solution, the file its mutants are made from
#   tasks         the lab's tasks, in order (the grader's names)
#   functions     the function each task implements, in the same order
#   single_task   a task that TASK= grades alone on the solution
#   starter_task  (optional) a task that TASK= grades alone on the starter
# Sourcing moves to the repository root and picks the build under test: the engine library is
# the one of MOE_BUILD, else of the folder of MOE_BIN; build-san (make test SANITIZE=1) grades
# under the sanitizers against build-san/libmoe.a, anything else uses build/. $tmp is a scratch
# folder, removed at exit.
#
# The script then calls lab_common_checks (the checks every lab has), its own checks (mutants
# with mutant and only_fails, a file calling the engine with refused), lab_list_check when it
# checks `make -C labs list`, lab_handout_checks for make -C labs handout (one lab's test is
# enough), and lab_finish last (the summary line and the exit status).
# shellcheck disable=SC2154 # lab, solution, tasks, ...: set by the sourcing script

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    echo "lab_harness.sh is sourced by tests/test_labNN.sh, not run alone" >&2
    exit 0
fi
set -u

name=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
build=${MOE_BUILD:-$(dirname "${MOE_BIN:-build/moe}")}
case ${build%/} in build-san | */build-san) san=1 ;; *) san=0 ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moe_$name.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# run from `make test`: its jobserver and command-line variables are not for this make
unset MAKEFLAGS MFLAGS MAKELEVEL
export OMP_NUM_THREADS=1

read -ra task_list <<< "$tasks"
ntasks=${#task_list[@]}
passed=0
failed=0
ok() { echo "  ok   $*"; passed=$((passed + 1)); }
bad() { echo "  FAIL $*"; failed=$((failed + 1)); }
# check LABEL CONDITION-STATUS DETAIL: ok when the status is 0, else FAIL with the detail
check() { if [ "$2" -eq 0 ]; then ok "$1"; else bad "$1: $3"; fi; }
# grade TARGET [VAR=VALUE...]: the grader's output (stdout and stderr) in $out, status in $rc
grade() {
    out=$(make -s -C labs "$1" LAB="$lab" SANITIZE=$san "${@:2}" 2>&1)
    rc=$?
}
# mutant NAME SED-EXPRESSION: the solution with one change, in $tmp/NAME.c; fails the check
# (and returns 1) when the expression no longer changes anything
mutant() {
    sed "$2" "$solution" > "$tmp/$1.c"
    if cmp -s "$tmp/$1.c" "$solution"; then
        bad "the $1 mutant differs from the solution (the sed pattern no longer matches)"
        return 1
    fi
}
# only_fails TASK: the last grading failed TASK and passed every other task
only_fails() {
    [ "$rc" -ne 0 ] && grep -Eq "^  FAIL  $1 " <<< "$out" &&
        grep -q "^Tasks passed: $((ntasks - 1)) of $ntasks\.$" <<< "$out"
}
# refused FUNCTION: $tmp/engine.c, a student file that calls the engine's FUNCTION, is refused
# by name before any task is graded
refused() {
    grade grade SOLUTION="$tmp/engine.c"
    [ $rc -ne 0 ] && grep -q "calls the engine ($1)" <<< "$out" && ! grep -q '^Grading' <<< "$out"
    check "a file that calls the engine's $1 is refused before grading" $? "exit $rc: $out"
}

# the checks every lab has: the solution passes, the starter fails as not implemented (its
# TODO lines, its summary, no numerical noise), TASK= grades one task, an unknown TASK is named
lab_common_checks() {
    echo "$name: labs/$lab (SANITIZE=$san)"
    grade grade-solution
    [ $rc -eq 0 ] && grep -q "^Tasks passed: $ntasks of $ntasks\.$" <<< "$out"
    check "the reference solution passes all $ntasks tasks" $? "exit $rc: $out"

    grade grade-starter
    [ $rc -ne 0 ] &&
        grep -q "^Tasks passed: 0 of $ntasks\. Not implemented yet: $tasks\.$" <<< "$out"
    check "the starter fails every task, and the summary names them as not implemented" $? \
        "exit $rc: $out"
    local missing="" n=1 f
    for f in $functions; do
        grep -q "^TODO: task $n ($f) is not implemented$" <<< "$out" || missing="$missing $f"
        n=$((n + 1))
    done
    [ -z "$missing" ]
    check "the starter prints one 'TODO: task N (function) is not implemented' line per task" \
        $? "missing:$missing in: $out"
    ! grep -Eq 'got |want |nan' <<< "$out"
    check "the starter's report holds no numerical mismatch, only 'not implemented'" $? "$out"

    local others="" t
    for t in $tasks; do [ "$t" = "$single_task" ] || others="${others:+$others|}$t"; done
    grade grade-solution TASK="$single_task"
    [ $rc -eq 0 ] && grep -q '^Tasks passed: 1 of 1\.$' <<< "$out" &&
        grep -q "$single_task" <<< "$out" && ! grep -Eq "$others" <<< "$out"
    check "TASK=$single_task grades that task alone" $? "exit $rc: $out"

    if [ -n "${starter_task:-}" ]; then
        grade grade-starter TASK="$starter_task"
        [ $rc -ne 0 ] &&
            grep -q "^Tasks passed: 0 of 1\. Not implemented yet: $starter_task\.$" <<< "$out"
        check "TASK=$starter_task on the starter fails that task alone, as not implemented" $? \
            "exit $rc: $out"
    fi

    grade grade-solution TASK=task9_nothing
    [ $rc -ne 0 ] && grep -q "no task named 'task9_nothing'. The tasks are: $tasks" <<< "$out"
    check "an unknown TASK fails and lists the tasks" $? "exit $rc: $out"

    # the student's path the READMEs show, start then grade, on a working copy in $tmp (WORK=,
    # so that a student's own copy in labs/ is never touched)
    local work=$tmp/work_$(basename "$solution")
    out=$(make -s -C labs start LAB="$lab" WORK="$work" 2>&1)
    rc=$?
    [ $rc -eq 0 ] && cmp -s "$work" "labs/$lab/starter/$(basename "$solution")"
    check "make -C labs start LAB=$lab copies the starter" $? "exit $rc: $out"
    echo "/* the student's work */" >> "$work"
    out=$(make -s -C labs start LAB="$lab" WORK="$work" 2>&1)
    rc=$?
    [ $rc -eq 0 ] && grep -q "the student's work" "$work" && grep -q "left as it is" <<< "$out"
    check "start again leaves the working copy as it is" $? "exit $rc: $out"
    out=$(make -s -C labs grade LAB="$lab" WORK="$work" SANITIZE=$san 2>&1)
    rc=$?
    [ $rc -ne 0 ] && grep -q "^Tasks passed: 0 of $ntasks\. Not implemented yet: $tasks\.$" <<< "$out"
    check "make -C labs grade LAB=$lab grades the working copy (the starter: nothing done yet)" $? \
        "exit $rc: $out"
}

# make -C labs list: one line per lab, its name and its tasks
lab_list_check() {
    out=$(make -s -C labs list 2>&1)
    grep -q "^$lab: $tasks$" <<< "$out"
    check "make -C labs list names $lab and its tasks" $? "$out"
}

# make -C labs handout: the tree for students. It must hold every lab's starter, assignment and
# grader, labs/common and the engine, and no solution; be refused inside the repository or over
# a non-empty folder; and grade there alone: the starter fails as a starter does, the solution
# copied in passes. Its engine is the objects of the build under test copied over (tar keeps
# the times, and the handout's sources keep the checkout's, so make finds them up to date)
# without libmoe.a, which the first grade makes: "labs: building the engine" must show then,
# and not on the next grade, when the library is up to date.
lab_handout_checks() {
    local h=$tmp/handout bdir=build missing="" leak="" d f s
    [ "$san" = 1 ] && bdir="build-san"
    out=$(make -s -C labs handout OUT="$h" 2>&1)
    rc=$?
    for d in labs/*/grader.c; do
        d=$(dirname "$d")
        for f in "$d/README.md" "$d/grader.c" "$d"/*.h "$d"/starter/*.c; do
            [ -f "$h/$f" ] || missing="$missing $f"
        done
    done
    for f in labs/Makefile labs/common/lab.c labs/common/lab.h tests/testutil.c tests/testutil.h \
        Makefile $(git ls-files src); do
        [ -f "$h/$f" ] || missing="$missing $f"
    done
    [ $rc -eq 0 ] && [ -z "$missing" ]
    check "make -C labs handout writes every lab's starter, README and grader, and the engine" $? \
        "exit $rc, missing:$missing; $out"
    [ -d "$h" ] || return

    leak=$(find "$h" -name solution)$(grep -rlE -e 'grade-solution' -e '(^|[/` ])solution/' "$h")
    for s in labs/*/solution/*; do
        leak=$leak$(find "$h" -type f -name "$(basename "$s")" -exec cmp -s "$s" {} \; -print)
    done
    [ -z "$leak" ]
    check "the handout holds no solution: no solution folder or copy, no mention of one" $? "$leak"
    out=$(LC_ALL=C make -s -C "$h/labs" grade-solution LAB="$lab" 2>&1)
    rc=$?
    [ $rc -ne 0 ] && grep -q "No rule to make target 'grade-solution'" <<< "$out"
    check "the handout's labs/Makefile has no grade-solution target" $? "exit $rc: $out"
    grep -Eq "^$(git rev-parse HEAD)(-dirty)?$" "$h/COMMIT"
    check "the handout's COMMIT names the commit it was made from" $? "$(cat "$h/COMMIT" 2>&1)"

    out=$(make -s -C labs handout OUT=labs/handout.tmp 2>&1)
    rc=$?
    [ $rc -eq 2 ] && grep -q "inside the repository" <<< "$out" && [ ! -e labs/handout.tmp ]
    check "a handout inside the repository is refused (exit 2), nothing written" $? "exit $rc: $out"
    rm -rf labs/handout.tmp
    f=$(cat "$h/COMMIT")
    echo "the instructor's notes" > "$h/COMMIT.notes"
    out=$(make -s -C labs handout OUT="$h" 2>&1)
    rc=$?
    [ $rc -eq 2 ] && grep -q "is not empty" <<< "$out" && [ "$(cat "$h/COMMIT")" = "$f" ] &&
        [ -f "$h/COMMIT.notes" ]
    check "a handout over a non-empty folder is refused (exit 2), the folder left as it was" $? \
        "exit $rc: $out"
    rm -f "$h/COMMIT.notes"

    if [ -d "$bdir/obj/src" ]; then
        mkdir -p "$h/$bdir" && tar -C "$bdir" -cf - cc.flags obj/src | tar -xf - -C "$h/$bdir"
    fi
    make -s -C "$h/labs" start LAB="$lab" > /dev/null 2>&1
    out=$(make -C "$h/labs" grade LAB="$lab" SANITIZE=$san 2>&1)
    rc=$?
    [ $rc -ne 0 ] && grep -q "^Tasks passed: 0 of $ntasks\. Not implemented yet: $tasks\.$" <<< "$out"
    check "in the handout, make -C labs start, then grade: the starter fails every task" $? \
        "exit $rc: $out"
    grep -q "^labs: building the engine (once, about a minute)$" <<< "$out" &&
        grep -q "^  ar $bdir/libmoe.a$" <<< "$out"
    check "with libmoe.a missing, grade says it builds the engine, and shows the steps" $? "$out"
    cp "$solution" "$h/labs/$lab/"
    out=$(make -C "$h/labs" grade LAB="$lab" SANITIZE=$san 2>&1)
    rc=$?
    [ $rc -eq 0 ] && grep -q "^Tasks passed: $ntasks of $ntasks\.$" <<< "$out"
    check "in the handout, the reference solution copied in passes every task" $? "exit $rc: $out"
    ! grep -q "building the engine" <<< "$out"
    check "with libmoe.a up to date, grade says nothing of the engine" $? "$out"
}

# the summary line; the status is non-zero when a check failed
lab_finish() {
    echo "$name: $passed passed, $failed failed"
    [ $failed -eq 0 ]
}
