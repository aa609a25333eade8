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
# the one of MOE_BUILD, else of the folder of MOE_BIN; build/san (make test SANITIZE=1) grades
# under the sanitizers against build/san/libmoe.a, anything else uses build/. $tmp is a scratch
# folder, removed at exit.
#
# The script then calls lab_common_checks (the checks every lab has), its own checks (mutants
# with mutant and only_fails, a file calling the engine with refused), lab_cheat_checks when
# it checks the grader against submissions that try to pass without the work (and grade-all),
# lab_list_check when it checks `make -C labs list`, lab_handout_checks for make -C labs handout
# (one lab's test is enough), and lab_finish last (the summary line and the exit status).
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
case ${build%/} in build/san | */build/san) san=1 ;; *) san=0 ;; esac
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
    readme_points
    local total=0 t
    for t in $tasks; do total=$((total + ${points[$t]:-0})); done
    [ ${#points[@]} -eq "$ntasks" ] && grep -q "^Score: $total of $total points\.$" <<< "$out"
    check "labs/$lab/README.md gives each task its points, and the solution scores them all" \
        $? "README's points: ${points[*]}; grader: $out"

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

    local others=""
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

# readme_points: points[TASK], the points labs/LAB/README.md's table gives each task
declare -A points
readme_points() {
    local task pts
    points=()
    while IFS='|' read -r _ task _ pts _; do
        task=${task//[\` ]/}
        pts=${pts// /}
        [[ $task == task* && $pts =~ ^[0-9]+$ ]] && points[$task]=$pts
    done < <(grep '^| `task' "labs/$lab/README.md")
}

# inject NAME FUNCTION CODE: the solution with CODE first in FUNCTION's body, in $tmp/class/NAME.c
inject() {
    code="$3" fn="$2" awk 'NR == 1 {
            print "#include <dirent.h>\n#include <stdio.h>\n#include <stdlib.h>"
            print "#include <string.h>\n#include <unistd.h>" }
        { print }
        $0 ~ "^[a-z].*[ *]" ENVIRON["fn"] "\\(" { f = 1 }
        f && /\{$/ { print "    " ENVIRON["code"]; f = 0 }' "$solution" > "$tmp/class/$1.c"
    grep -qF -- "$3" "$tmp/class/$1.c" ||
        bad "the $1 submission lacks its code (the function $2 was not found)"
}

# row_is NAME FAILED-TASKS MESSAGE-PATTERN: grades.csv's row of NAME fails exactly the tasks
# FAILED-TASKS (a space-separated list, "" for none), scores the others' points, and its
# message matches the extended regular expression
row_is() {
    local name=$1 want="" t total=0 got
    for t in $tasks; do
        if [[ " $2 " == *" $t "* ]]; then want+=",fail"; else
            want+=",pass"
            total=$((total + ${points[$t]:-0}))
        fi
    done
    [ -f "$tmp/class/grades.csv" ] || return 1
    got=$(grep "^\"$name\"," "$tmp/class/grades.csv")
    [ "$(grep -c "^\"$name\"," "$tmp/class/grades.csv")" -eq 1 ] &&
        [[ $got == "\"$name\"$want,$total,"* ]] && grep -Eq "$3" <<< "$got"
}

# lab_cheat_checks: submissions made from the solution that try to pass a task without doing
# its work, graded together by grade-all (LAB_TIME_LIMIT=$cheat_seconds, 2 unless set, 4 under
# SANITIZE=1, for the endless loop): each fails its own task and nothing else, and grades.csv says why. The
# functions attacked are the lab's first four. The sourcing script may set exit_pattern, the
# message of an early exit (an extended regular expression), cheat_np, the ranks of an MPI
# lab's tasks there, leak_check=0 when LeakSanitizer cannot look for a submission's leaks
# (SANITIZE=1), and define lab_more_cheats (more submissions written into $tmp/class, their
# count in more_cheats) and lab_more_cheat_checks (their rows checked).
lab_cheat_checks() {
    local f t exited=${exit_pattern:-'exited before the task finished \(exit status 0\)'}
    # the loop's limit, with room for a task under the sanitizers on a machine running other
    # suites (LeakSanitizer's check alone takes a good part of a second)
    local seconds=${cheat_seconds:-$([ "$san" = 1 ] && echo 4 || echo 2)}
    read -ra f <<< "$functions"
    read -ra t <<< "$tasks"
    rm -rf "$tmp/class" && mkdir -p "$tmp/class/folder_student"
    cp "$solution" "$tmp/class/copied.c"
    inject exits "${f[1]}" '_exit(0);'
    inject aborts "${f[2]}" 'abort();'
    inject loops "${f[0]}" 'for (volatile int spin_ = 1; spin_;) {}'
    # a memory limit needs RLIMIT_AS, which AddressSanitizer's shadow memory rules out; there,
    # LeakSanitizer checks each task instead (unless the sourcing script set leak_check=0)
    local n=10
    if [ "$san" = 1 ] && [ "${leak_check:-1}" = 0 ]; then
        n=9
    elif [ "$san" = 1 ]; then
        inject leaks "${f[3]}" '{ char *volatile p_ = malloc(100); p_[0] = 1; p_ = NULL; }'
    else
        inject allocates "${f[3]}" \
            '{ size_t n_ = (size_t)3 << 30; char *p_ = malloc(n_); if (!p_) abort(); memset(p_, 1, n_); free(p_); }'
    fi
    inject forges "${f[0]}" 'printf("Tasks passed: '"$ntasks of $ntasks"'.\nScore: 10 of 10 points.\n'"${t[0]}"',pass,2,2,0.01,\"\"\n"); fflush(stdout); _exit(0);'
    # every file in the grader's own folder, and grades.csv next to the submission, forged
    inject overwrites "${f[1]}" \
        '{ char d_[4096]; ssize_t n_ = readlink("/proc/self/exe", d_, sizeof d_ - 1); if (n_ > 0) { d_[n_] = 0; *strrchr(d_, 47) = 0; DIR *dir_ = opendir(d_); struct dirent *e_; while (dir_ && (e_ = readdir(dir_))) { char p_[8192]; snprintf(p_, sizeof p_, "%s/%s", d_, e_->d_name); FILE *o_ = fopen(p_, "w"); if (o_) { fputs("Tasks passed: 4 of 4.\n", o_); fclose(o_); } } } char g_[8192]; snprintf(g_, sizeof g_ - 16, "%s", getenv("LAB_SOLUTION")); strcpy(strrchr(g_, 47), "/grades.csv"); FILE *o_ = fopen(g_, "w"); if (o_) { fputs("forged\n", o_); fclose(o_); } _exit(0); }'
    # the grader's objects, which grade-all links with every submission, rewritten (then it
    # does the work)
    inject tampers "${f[2]}" '{ FILE *o_ = fopen("../../objs/grader.o", "w"); if (o_) { fputs("forged", o_); fclose(o_); } }'
    sed "/^[a-z].*[ *]${f[2]}(/,/^}/d" "$solution" > "$tmp/class/folder_student/mine.c"
    echo 'int broken = ;' > "$tmp/class/broken.c"
    more_cheats=0
    if declare -F lab_more_cheats > /dev/null; then
        lab_more_cheats
        n=$((n + more_cheats))
    fi

    out=$(LAB_TIME_LIMIT=$seconds make -s -C labs grade-all LAB="$lab" DIR="$tmp/class" ${cheat_np:+NP=$cheat_np} \
        SANITIZE=$san 2>&1)
    rc=$?
    [ $rc -eq 0 ] && [ -f "$tmp/class/grades.csv" ]
    check "grade-all grades a folder of submissions into grades.csv" $? "exit $rc: $out"
    [ "$(grep -c '^"' "$tmp/class/grades.csv" 2> /dev/null)" = $n ] &&
        grep -q "^submission,${tasks// /,},points,max_points,seconds,message$" "$tmp/class/grades.csv" &&
        grep -q "^grade-all: $n graded, mean score .*, 1 did not compile$" <<< "$out" &&
        grep -q '^  broken: does not compile: .*error' <<< "$out"
    check "grades.csv has its header and one row per submission; the summary counts them" $? \
        "$out: $(cat "$tmp/class/grades.csv")"

    row_is copied "" '""$'
    check "a copy of the solution passes every task" $? "$(cat "$tmp/class/grades.csv")"
    row_is exits "${t[1]}" "$exited"
    check "_exit(0) in ${f[1]} fails ${t[1]} alone, as exited before the task finished" $? \
        "$(cat "$tmp/class/grades.csv")"
    row_is aborts "${t[2]}" 'crashed: SIGABRT'
    check "abort() in ${f[2]} fails ${t[2]} alone, as crashed with SIGABRT" $? \
        "$(cat "$tmp/class/grades.csv")"
    row_is loops "${t[0]}" "took over $seconds s"
    check "an endless loop in ${f[0]} fails ${t[0]} alone, as over the time limit" $? \
        "$(cat "$tmp/class/grades.csv")"
    if [ "$san" = 1 ] && [ "${leak_check:-1}" = 0 ]; then
        : # no leak is looked for
    elif [ "$san" = 1 ]; then
        row_is leaks "${t[3]}" 'memory leaked'
        check "memory leaked in ${f[3]} fails ${t[3]} alone under SANITIZE=1" $? \
            "$(cat "$tmp/class/grades.csv")"
    else
        row_is allocates "${t[3]}" 'crashed: SIGABRT'
        check "3 GiB allocated in ${f[3]} fails ${t[3]} alone, over the memory limit" $? \
            "$(cat "$tmp/class/grades.csv")"
    fi
    row_is forges "${t[0]}" 'exited before the task finished'
    check "printing a pass (text and CSV) then exiting fails ${t[0]} alone" $? \
        "$(cat "$tmp/class/grades.csv")"
    row_is overwrites "${t[1]}" 'exited before the task finished' &&
        ! grep -q forged "$tmp/class/grades.csv"
    check "overwriting the grader's files and grades.csv fails ${t[1]} alone, forging nothing" \
        $? "$(cat "$tmp/class/grades.csv")"
    row_is tampers "" '""$' && ! grep -Eq 'does not link|grade again' "$tmp/class/grades.csv"
    check "rewriting the grader's objects changes no row: they are compiled again" $? \
        "$(cat "$tmp/class/grades.csv")"
    row_is folder_student "${t[2]}" "function ${f[2]} is not defined in your file"
    check "a folder's one file, missing ${f[2]}, fails ${t[2]} alone (the rest link and pass)" \
        $? "$(cat "$tmp/class/grades.csv")"
    row_is broken "$tasks" '"does not compile: .*error'
    check "a file that does not compile scores 0, with the compiler's first error" $? \
        "$(cat "$tmp/class/grades.csv")"
    if declare -F lab_more_cheat_checks > /dev/null; then lab_more_cheat_checks; fi

    # a folder that is not there, a bad JOBS: said, exit 2, nothing written
    out=$(make -s -C labs grade-all LAB="$lab" DIR="$tmp/nothing" 2>&1)
    rc=$?
    [ $rc -eq 2 ] && grep -q "^grade-all: DIR=$tmp/nothing is not a folder" <<< "$out"
    check "grade-all with a DIR that is not a folder says so (exit 2)" $? "exit $rc: $out"
    cp "$tmp/class/grades.csv" "$tmp/grades_before.csv"
    out=$(make -s -C labs grade-all LAB="$lab" DIR="$tmp/class" JOBS=0 2>&1)
    rc=$?
    [ $rc -eq 2 ] && grep -q "^grade-all: JOBS=0 is not a number" <<< "$out" &&
        cmp -s "$tmp/class/grades.csv" "$tmp/grades_before.csv"
    check "grade-all with JOBS=0 says so (exit 2), grades.csv left as it was" $? "exit $rc: $out"

    # GRADE_FORMAT=csv: one CSV line per task on stdout, nothing else there
    out=$(cd "$tmp/class" && GRADE_FORMAT=csv make -s -C "$root/labs" grade LAB="$lab" \
        SOLUTION="$tmp/class/exits.c" SANITIZE=$san 2> /dev/null)
    local want_csv="" i
    for i in "${!t[@]}"; do
        if [ "$i" -eq 1 ]; then
            want_csv+="${t[$i]},fail,0,${points[${t[$i]}]},[0-9.]+,\"$exited[^\"]*\""$'\n'
        else
            want_csv+="${t[$i]},pass,${points[${t[$i]}]},${points[${t[$i]}]},[0-9.]+,\"\""$'\n'
        fi
    done
    [[ $out$'\n' =~ ^$want_csv$ ]]
    check "GRADE_FORMAT=csv prints task,pass|fail,points,max_points,seconds,message per task" $? \
        "$out"

    # the report of one such file: its printed pass is marked as its output, the score is real
    grade grade SOLUTION="$tmp/class/forges.c"
    [ $rc -ne 0 ] && [ "$(grep -c '^Tasks passed' <<< "$out")" -eq 1 ] &&
        grep -q "^Tasks passed: $((ntasks - 1)) of $ntasks\.$" <<< "$out" &&
        grep -q "^          | Tasks passed: $ntasks of $ntasks\.$" <<< "$out"
    check "a file printing 'Tasks passed: $ntasks of $ntasks' is shown as its output, not a pass" \
        $? "exit $rc: $out"
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
    [ "$san" = 1 ] && bdir="build/san"
    out=$(make -s -C labs handout OUT="$h" 2>&1)
    rc=$?
    for d in labs/*/grader.c; do
        d=$(dirname "$d")
        for f in "$d/README.md" "$d/grader.c" "$d"/*.h "$d"/starter/*.c; do
            [ -f "$h/$f" ] || missing="$missing $f"
        done
    done
    for f in labs/Makefile labs/common/lab.c labs/common/lab_task.c labs/common/lab_task.h labs/common/lab.h tests/testutil.c tests/testutil.h \
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
