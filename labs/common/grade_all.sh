#!/usr/bin/env bash
# grade_all.sh: grades every submission in a folder; run by `make -C labs grade-all LAB=NN-name
# DIR=folder` (labs/README.md, "Grading a class"), which compiles the grader's own objects and
# the engine once and passes, in the environment:
#   LAB      the lab's folder under labs/          DIR    the submissions' folder
#   WORK     a scratch folder (objs/: the grader's objects)
#   LABCC    the compiler (and variables before it) LAB_CFLAGS   its flags
#   GRADER_SRC     the grader's own files (relative to labs/)
#   GRADER_CFLAGS  their flags (the engine's headers, Check, OpenBLAS)
#   LIBMOE   the engine's library                  LAB_LIBS     the libraries to link
#   JOBS     submissions graded at a time (2)
# A submission is a *.c file in DIR, or a subfolder of DIR holding exactly one .c file (a
# student's folder, named after it). Each is compiled alone, checked for calls into the engine,
# linked with the grader's objects and graded with GRADE_FORMAT=csv; its row goes to
# DIR/grades.csv, written once at the end, and a summary to stdout. The grader's report of each
# submission (for a closer look) is in WORK/subs/NAME/report.txt.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2 # labs/
if [ ! -w "$DIR" ]; then
    echo "grade-all: cannot write $DIR/grades.csv: the folder is not writable"
    exit 2
fi

# csv_quote TEXT: TEXT as one CSV field, its quotes doubled, its line breaks made spaces
csv_quote() {
    local s=${1//$'\n'/ }
    s=${s//\"/\"\"}
    printf '"%s"' "$s"
}

# row NAME POINTS MAX SECONDS MESSAGE RESULT...: one line of grades.csv, printed in one write
row() {
    local line name=$1 points=$2 max=$3 seconds=$4 message=${5:0:300} r
    shift 5
    line=$(csv_quote "$name")
    for r in "$@"; do line+=",$r"; done
    line+=",$points,$max,$seconds,$(csv_quote "$message")"
    printf '%s\n' "$line"
}

# zero NAME MESSAGE: the row of a submission graded on no task (it did not compile, or link)
zero() {
    local r=() t
    for t in "${task_list[@]}"; do r+=(fail); done
    row "$1" 0 "$MAX" 0 "$2" "${r[@]}"
}

# compile_objs FOLDER: the grader's own objects (GRADER_SRC), compiled into FOLDER
# shellcheck disable=SC2086 # GRADER_CFLAGS is a list of words
compile_objs() {
    local src o
    mkdir -p "$1" || return
    for src in $GRADER_SRC; do
        o=$(basename "$src" .c).o
        env $LABCC $GRADER_CFLAGS -c "$src" -o "$1/$o" || return
    done
}

# grade_one NAME FILE: compiles, checks, links and grades one submission; prints its row
grade_one() {
    local name=$1 src=$2 s="$WORK/subs/$1" used err out
    if ! rm -rf "$s" || ! mkdir -p "$s"; then
        zero "$name" "grade-all: cannot make $s"
        return
    fi
    # shellcheck disable=SC2086 # LAB_CFLAGS and LAB_LIBS are lists of words
    if ! env $LABCC $LAB_CFLAGS -I"$LAB" -Icommon -c "$src" -o "$s/student.o" 2> "$s/cc.txt"; then
        err=$(grep -m1 -E 'error|Error' "$s/cc.txt" || head -n1 "$s/cc.txt")
        zero "$name" "does not compile: ${err#"$src":}"
        return
    fi
    used=$(comm -12 <(nm -u "$s/student.o" | awk '{ print $NF }' | sort -u) "$WORK/engine.txt")
    if [ -n "$used" ]; then
        zero "$name" "calls the engine (${used//$'\n'/ }): refused"
        return
    fi
    used=$(nm -u "$s/student.o" | awk '$NF ~ /^lab_/ && $NF != "lab_todo" { print $NF }')
    if [ -n "$used" ]; then
        zero "$name" "calls the grader (${used//$'\n'/ }): refused"
        return
    fi
    # the grader's objects, copied into this submission's own folder and checked there: a
    # submission graded beside this one may be rewriting the shared ones while this links
    local objs=$s/objs
    mkdir -p "$objs" && cp "$WORK"/objs/*.o "$objs/" 2> /dev/null
    if [ "$(cd "$objs" && sha256sum ./*.o 2> /dev/null)" != "$OBJS_SUMS" ]; then
        echo "grade-all: the grader's objects in $WORK/objs were rewritten by a submission:" \
            "compiling them again for $name" >&2
        rm -rf "$objs"
        compile_objs "$objs" || {
            zero "$name" "grade-all: cannot compile the grader again"
            return
        }
    fi
    # shellcheck disable=SC2086
    if ! env $LABCC $LAB_CFLAGS "$objs"/*.o "$s/student.o" "$LIBMOE" -o "$s/grader" $LAB_LIBS \
        2> "$s/cc.txt"; then
        err=$(grep -m1 -E 'multiple definition|undefined reference|error' "$s/cc.txt" ||
            head -n1 "$s/cc.txt")
        zero "$name" "does not link: ${err##*: }"
        return
    fi
    # the rows are read from the grader's stdout, never from a file the submission could write
    out=$(cd "$s" && env -u CK_FORK LAB_SOLUTION="$src" GRADE_FORMAT=csv OMP_NUM_THREADS=1 ./grader \
        2> report.txt < /dev/null)
    local points=0 seconds=0 message="" results=() t line result p secs msg
    for t in "${task_list[@]}"; do
        line=$(grep "^$t," <<< "$out" | tail -n1)
        IFS=, read -r _ result p _ secs msg <<< "$line"
        if [ "$result" = pass ]; then
            points=$((points + p))
        else
            result=fail
            [ -n "$line" ] || msg="the grader gave no result (report.txt says why)"
            msg=${msg#\"}
            msg=${msg%\"}
            [ -n "$message" ] || message="$t: ${msg//\"\"/\"}"
        fi
        results+=("$result")
        seconds=$(awk -v a="$seconds" -v b="${secs:-0}" 'BEGIN { printf "%.2f", a + b }')
    done
    row "$name" "$points" "$MAX" "$seconds" "$message" "${results[@]}"
}

compile_objs "$WORK/objs" || exit 2
# The tasks and their points, from the grader linked without a submission: every function
# is missing then, and every task fails at once with its points.
# shellcheck disable=SC2086
if ! env $LABCC $LAB_CFLAGS "$WORK"/objs/*.o "$LIBMOE" -o "$WORK/probe" $LAB_LIBS ||
    ! probe=$(GRADE_FORMAT=csv "$WORK/probe" 2> /dev/null; [ $? -le 1 ]); then
    echo "grade-all: the grader of $LAB does not build or run on its own (see above)"
    exit 2
fi
TASKS=$(cut -d, -f1 <<< "$probe" | tr '\n' ' ')
MAX=$(awk -F, '{ s += $4 } END { print s }' <<< "$probe")
read -ra task_list <<< "$TASKS"
# their checksums, kept in this script's memory (a file beside them could be rewritten too)
OBJS_SUMS=$(cd "$WORK/objs" && sha256sum ./*.o)
# the engine's symbols, which a submission may not use
nm -g --defined-only "$LIBMOE" 2> /dev/null | awk 'NF == 3 { print $3 }' | sort -u > "$WORK/engine.txt"

# the submissions: NAME and FILE, each ended by a NUL (xargs -0)
subs=$WORK/submissions
skipped=()
count=0
declare -A seen
: > "$subs"
add() {
    if [ -n "${seen[$1]:-}" ]; then
        skipped+=("$2 (a submission named $1 already: ${seen[$1]})")
        return
    fi
    seen[$1]=$2
    printf '%s\0%s\0' "$1" "$(cd "$(dirname "$2")" && pwd)/$(basename "$2")" >> "$subs"
    count=$((count + 1))
}
for f in "$DIR"/*.c; do
    [ -f "$f" ] && add "$(basename "$f" .c)" "$f"
done
for d in "$DIR"/*/; do
    [ -d "$d" ] || continue
    files=()
    for f in "$d"*.c; do [ -f "$f" ] && files+=("$f"); done
    if [ ${#files[@]} -eq 1 ]; then
        add "$(basename "$d")" "${files[0]}"
    else
        skipped+=("$d (${#files[@]} .c files, not one)")
    fi
done
if [ "$count" -eq 0 ]; then
    echo "grade-all: $DIR holds no submission: a *.c file, or a folder with one .c file, each"
    exit 2
fi
echo "grade-all: $count submissions in $DIR, $JOBS at a time"

export -f grade_one row zero csv_quote compile_objs
export WORK LAB LABCC LAB_CFLAGS GRADER_SRC GRADER_CFLAGS LIBMOE LAB_LIBS TASKS MAX OBJS_SUMS
# shellcheck disable=SC2016 # the script of bash -c, its variables expanded there
rows=$(xargs -0 -n2 -P "$JOBS" bash -c 'read -ra task_list <<< "$TASKS"; grade_one "$1" "$2"' _ \
    < "$subs" | LC_ALL=C sort)

header="submission"
for t in "${task_list[@]}"; do header+=",$t"; done
header+=",points,max_points,seconds,message"
# written whole, after every submission's processes are gone
if ! { printf '%s\n%s\n' "$header" "$rows" > "$DIR/grades.csv.tmp" &&
    mv -f "$DIR/grades.csv.tmp" "$DIR/grades.csv"; }; then
    echo "grade-all: cannot write $DIR/grades.csv (see above)"
    exit 2
fi

# the summary: the mean over every submission (one that does not compile scores 0)
graded=0 sum=0 broken=()
re='^"(([^"]|"")*)",((pass|fail),)+([0-9]+),([0-9]+),([0-9.]+),"(.*)"$'
while IFS= read -r line; do
    [[ $line =~ $re ]] || continue
    graded=$((graded + 1))
    sum=$((sum + BASH_REMATCH[5]))
    case ${BASH_REMATCH[8]} in
    "does not compile"* | "does not link"*) broken+=("${BASH_REMATCH[1]}: ${BASH_REMATCH[8]}") ;;
    esac
done <<< "$rows"
awk -v g="$graded" -v s="$sum" -v m="$MAX" -v b="${#broken[@]}" 'BEGIN {
    printf "grade-all: %d graded, mean score %.2f of %d points, %d did not compile\n",
           g, g ? s / g : 0, m, b }'
for b in "${broken[@]}"; do echo "  $b"; done
for s in "${skipped[@]}"; do echo "grade-all: skipped $s"; done
echo "grade-all: wrote $DIR/grades.csv"
