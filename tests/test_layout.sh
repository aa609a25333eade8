#!/usr/bin/env bash
# test_layout.sh: the folders of src/ depend on each other one way only.
#
# src/README.md's map lists the folders in order; a file may include headers of its own folder
# and of the folders listed before it, never after (no arrow back up, so no circle); a header
# at the top of src/ (moe.h, the public one) stands above them all and may include any; a
# subfolder (backend/cpu/) is part of its folder. Every #include "..." of every file under src/
# is checked against that order, and every folder of src/ must be in the map. Then the check
# itself on a scratch tree: an include that points up fails, naming the file and the arrow.
#
# Inside a folder, the files must not circle either: no .c file calls a function of another that
# (directly or through others) calls one of its own, and no header includes another that
# includes it back. The calls are read from the build's objects with nm (a function one object
# defines, T or W, that another of the same folder leaves undefined, U, is an arrow from the
# second file to the first; data symbols are not counted); a circle fails, named arrow by arrow
# with the function each arrow calls. Then the same on scratch files: a one-way pair passes, a
# pair that calls each other (or headers that include each other) fails.
#
# And every function of src/ (its .c and .cu files) is at most FUNCTION_MAX = 80 lines, from the
# first line of its signature to its closing brace, but for the few in LONG_FUNCTIONS below,
# each named with the reason it is still longer; a listed function that is no longer over the
# limit fails too, so that the list only shrinks. The functions are found by the layout
# clang-format gives them: a signature starting in column 0, the body's closing brace alone in
# column 0 (a struct or an initializer, closed by "};" or "} Name;", is no function).
# Needs bash, awk, grep, nm and a C compiler, and the objects of `make` (MOE_BUILD, default
# build/); the calls of the MPI build's objects (MOE_MPI_BUILD, default build/mpi) are checked
# too where they exist, and skipped where they do not.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_layout: the folders of src/ and their arrows"

# layers SRC_DIR README: one pass over the includes, printing every arrow that points up
layers() {
    local src=$1 readme=$2
    mapfile -t order < <(awk -F'|' '/^## Map/ { on = 1 } on && /^\| `[a-z]+\/`/ {
        gsub(/[ `\/]/, "", $2); print $2 } on && /^## / && !/Map/ { exit }' "$readme")
    [ ${#order[@]} -gt 0 ] || { echo "no folders in the map of $readme"; return 1; }
    local -A rank=()
    local i=0 status=0 d file inc from to
    for d in "${order[@]}"; do rank[$d]=$i; i=$((i + 1)); done
    for d in "$src"/*/; do
        d=$(basename "$d")
        [ -n "${rank[$d]+x}" ] || { echo "src/$d/ is not in the map of $readme"; status=1; }
    done
    while IFS=: read -r file _ inc; do
        inc=${inc#*\"}; inc=${inc%%\"*}
        case $inc in */*) ;; *) continue ;; esac   # a header beside the file
        from=${file#"$src"/}
        case $from in */*) ;; *) continue ;; esac  # src/moe.h, the public header: above every folder
        from=${from%%/*}; to=${inc%%/*}
        [ "$from" = "$to" ] && continue
        [ -n "${rank[$to]+x}" ] || { echo "$file includes $inc: $to/ is not a folder of src/"; status=1; continue; }
        if [ "${rank[$to]}" -gt "${rank[$from]:-0}" ]; then
            echo "$file includes $inc: $from/ may not depend on $to/, which the map lists after it"
            status=1
        fi
    done < <(grep -rn '^#include "' "$src" --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh')
    return $status
}

layers src src/README.md > "$tmp/out" 2>&1
check "every include of src/ points to its own folder or one listed before it in src/README.md" $? \
    "$(head -n 20 "$tmp/out")"

# the training loop reads the model's routing through the model's functions (model/inspect.h,
# model/route_face.h): src/train/ includes neither the MoE block's pieces (moe/) nor the expert
# exchange (model/ep.h), and reaches into no block of the model (Model.blocks)
grep -rnE '^#include "(moe/|model/ep\.h)' src/train > "$tmp/out"
[ ! -s "$tmp/out" ]
check "src/train/ includes neither moe/ nor model/ep.h" $? "$(head -n 20 "$tmp/out")"
grep -rnE 'blocks\[' src/train > "$tmp/out"
[ ! -s "$tmp/out" ]
check "src/train/ reads no Model.blocks (the routing through model functions)" $? "$(head -n 20 "$tmp/out")"

# the check on a scratch tree: base <- model; model including base passes, base including
# model fails with the arrow named
mkdir -p "$tmp/src/base" "$tmp/src/model"
printf '## Map\n\n| folder | file |\n| --- | --- |\n| `base/` | x |\n| `model/` | y |\n\n## Next\n' > "$tmp/README.md"
printf '#include "base/util.h"\n' > "$tmp/src/model/model.c"
printf '#include "util.h"\n' > "$tmp/src/base/util.c"
layers "$tmp/src" "$tmp/README.md" > "$tmp/out" 2>&1
check "a downward include passes" $? "$(cat "$tmp/out")"
printf '#include "model/model.h"\n#include "base/util.h"\n' > "$tmp/src/top.h"
layers "$tmp/src" "$tmp/README.md" > "$tmp/out" 2>&1
check "a header at the top of src/ (the public one) may include any folder" $? "$(cat "$tmp/out")"
printf '#include "model/model.h"\n' > "$tmp/src/base/util.h"
layers "$tmp/src" "$tmp/README.md" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "src/base/util.h includes model/model.h: base/ may not depend on model/" "$tmp/out"
check "an include that points up fails, naming the file and the arrow" $? "status $rc: $(cat "$tmp/out")"
# a subfolder (backend/cpu/, backend/cuda/) is its folder's: its files may include what the
# folder may, and an include of it from a folder listed before is an arrow up like any other
mkdir -p "$tmp/src/model/sub"
printf '#include "base/util.h"\n' > "$tmp/src/model/sub/part.c"
printf '#include "model/sub/part.h"\n' > "$tmp/src/base/util.h"
layers "$tmp/src" "$tmp/README.md" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "src/base/util.h includes model/sub/part.h: base/ may not depend on model/" "$tmp/out" &&
    ! grep -q "model.sub.part\.c" "$tmp/out"
check "a subfolder counts as its folder: model/sub/ includes base/, base/ may not include model/sub/" $? \
    "status $rc: $(cat "$tmp/out")"
rm -r "$tmp/src/model/sub"
mkdir -p "$tmp/src/extra"
rm "$tmp/src/base/util.h"
layers "$tmp/src" "$tmp/README.md" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "src.extra/ is not in the map" "$tmp/out"
check "a folder missing from the map fails" $? "status $rc: $(cat "$tmp/out")"

# ---- no circles between the files of a folder ------------------------------------------------

# cycles: "FOLDER FROM TO WHAT" arrows on stdin (sorted, for a stable report); prints every
# circle a depth-first search meets, "FOLDER/: a.c -(f)-> b.c -(g)-> a.c", status 1 if any
cycles() {
    awk '
    {
        if (!(($1, $2, $3) in what)) { what[$1, $2, $3] = $4; adj[$1, $2] = adj[$1, $2] " " $3 }
        if (!(($1, $2) in seen)) { seen[$1, $2]; from[++n] = $1 SUBSEP $2 }
    }
    function visit(d, u,   i, k, next_of, v) {
        state[d, u] = 1; path[++depth] = u
        k = split(adj[d, u], next_of, " ")
        for (i = 1; i <= k; i++) {
            v = next_of[i]
            if (state[d, v] == 1) report(d, v)
            else if (!state[d, v]) visit(d, v)
        }
        state[d, u] = 2; depth--
    }
    function report(d, v,   i, k, line) {
        for (k = depth; k > 1 && path[k] != v; k--) ;
        line = d "/: " path[k]
        for (i = k; i < depth; i++) line = line " -(" what[d, path[i], path[i + 1]] ")-> " path[i + 1]
        print line " -(" what[d, path[depth], v] ")-> " v
        found = 1
    }
    END {
        for (i = 1; i <= n; i++) {
            split(from[i], p, SUBSEP)
            if (!state[p[1], p[2]]) { depth = 0; visit(p[1], p[2]) }
        }
        exit found
    }'
}

# call_arrows OBJ_DIR SRC_DIR: an arrow for every function a .c file of a folder calls that
# another .c file of the same folder defines, from the objects OBJ_DIR/FOLDER/NAME.o (only those
# whose SRC_DIR/FOLDER/NAME.c exists: an object left from a removed file is not read)
call_arrows() {
    local obj=$1 src=$2 o objs=()
    for o in "$obj"/*/*.o "$obj"/*/*/*.o; do # a subfolder (backend/cpu/) is part of its folder
        [ -e "$o" ] || continue
        o=${o#"$obj"/}
        [ -e "$src/${o%.o}.c" ] && objs+=("$obj/$o")
    done
    [ ${#objs[@]} -gt 0 ] || return 0
    # one nm over all of them: "OBJ_DIR/FOLDER/NAME.o: SYMBOL TYPE ..."
    nm -A -P "${objs[@]}" | awk -v pre="$obj/" '
        {
            file = substr($1, length(pre) + 1); sub(/\.o:$/, ".c", file)
            d = file; sub(/\/.*/, "", d); sub(/^[^\/]*\//, "", file)
        }
        $3 == "T" || $3 == "W" { def[d, $2] = file }
        $3 == "U" { use[++n] = d " " file " " $2 }
        END {
            for (i = 1; i <= n; i++) {
                split(use[i], u, " ")
                if ((u[1], u[3]) in def && def[u[1], u[3]] != u[2]) print u[1], u[2], def[u[1], u[3]], u[3]
            }
        }' | sort
}

# include_arrows SRC_DIR: an arrow for every header of a folder that includes another of it
include_arrows() {
    local src=$1
    grep -n '^#include "' "$src"/*/*.h 2>/dev/null | awk -F'"' -v src="$src/" '{
        split($1, at, ":"); file = substr(at[1], length(src) + 1)
        d = file; sub(/\/.*/, "", d); sub(/^[^\/]*\//, "", file)
        inc = $2; if (inc !~ /\//) inc = d "/" inc
        if (substr(inc, 1, length(d) + 1) == d "/") print d, file, substr(inc, length(d) + 2), "#include"
    }' | sort
}

build=${MOE_BUILD:-build}
if [ -d "$build/obj/src" ]; then
    call_arrows "$build/obj/src" src | cycles > "$tmp/out" 2>&1
    check "no .c file of a folder calls, through the others, back into itself (the objects of $build)" \
        $? "$(head -n 20 "$tmp/out")"
else
    check "the objects of $build/obj/src to read the calls from" 1 "none: build them with make"
fi
# the MPI build's too (MOE_MPI_BUILD, as make test names it, default build/mpi): its files of
# parallel/ (dist_mpi*.c) compile empty in the build above, so their calls are read here, where
# there is one
mpi_build=${MOE_MPI_BUILD:-build/mpi}
if [ -d "$mpi_build/obj/src" ]; then
    call_arrows "$mpi_build/obj/src" src | cycles > "$tmp/out" 2>&1
    check "no .c file of a folder calls, through the others, back into itself (the objects of $mpi_build)" \
        $? "$(head -n 20 "$tmp/out")"
else
    echo "  skip the circles of the MPI build: no $mpi_build/obj/src (make mpi builds it)"
fi
include_arrows src | cycles > "$tmp/out" 2>&1
check "no header of a folder includes, through the others, itself" $? "$(head -n 20 "$tmp/out")"

# the checks on scratch files: lib/a.c calls b.c's function, then b.c calls a.c's back
cc=${CC:-cc}
mkdir -p "$tmp/csrc/lib" "$tmp/cobj/lib"
printf 'int a_fn(void);\nint b_fn(void) { return 1; }\n' > "$tmp/csrc/lib/b.c"
printf 'int b_fn(void);\nint a_fn(void) { return b_fn(); }\n' > "$tmp/csrc/lib/a.c"
for f in a b; do "$cc" -c "$tmp/csrc/lib/$f.c" -o "$tmp/cobj/lib/$f.o" || exit 1; done
call_arrows "$tmp/cobj" "$tmp/csrc" | cycles > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(call_arrows "$tmp/cobj" "$tmp/csrc")" = "lib a.c b.c b_fn" ]
check "a call one way between two files passes" $? "status $rc: $(cat "$tmp/out")"
printf 'int a_fn(void);\nint b_fn(void) { return a_fn() > 0; }\n' > "$tmp/csrc/lib/b.c"
"$cc" -c "$tmp/csrc/lib/b.c" -o "$tmp/cobj/lib/b.o" || exit 1
call_arrows "$tmp/cobj" "$tmp/csrc" | cycles > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qx 'lib/: a.c -(b_fn)-> b.c -(a_fn)-> a.c' "$tmp/out"
check "two files that call each other fail, the circle named with its calls" $? "status $rc: $(cat "$tmp/out")"
rm "$tmp/csrc/lib/b.c"
call_arrows "$tmp/cobj" "$tmp/csrc" | cycles > "$tmp/out" 2>&1
check "an object whose source is gone is not read" $? "$(cat "$tmp/out")"
printf '#include "lib/b.h"\n' > "$tmp/csrc/lib/a.h"
printf '#include "c.h"\n' > "$tmp/csrc/lib/b.h"
printf '#include "base/util.h"\n' > "$tmp/csrc/lib/c.h"
include_arrows "$tmp/csrc" | cycles > "$tmp/out" 2>&1
check "headers that include one way pass" $? "$(cat "$tmp/out")"
printf '#include "lib/a.h"\n' > "$tmp/csrc/lib/c.h"
include_arrows "$tmp/csrc" | cycles > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qx 'lib/: a.h -(#include)-> b.h -(#include)-> c.h -(#include)-> a.h' "$tmp/out"
check "headers that include each other through a third fail, the circle named" $? "status $rc: $(cat "$tmp/out")"

# ---- no function over FUNCTION_MAX lines ---------------------------------------------------

FUNCTION_MAX=80
# FILE FUNCTION: why it is still longer
LONG_FUNCTIONS='
'

# functions FILE...: "LINES FILE:LINE NAME" for every function of the files
functions() {
    awk '
    FNR == 1 { state = 0 }
    state == 0 && /^[A-Za-z_]/ && !/^extern "C" \{/ { state = 1; start = FNR; head = "" }
    state == 1 {
        head = head " " $0
        if (/;[ \t]*(\/\*.*)?$/ && !/\{[ \t]*$/) { state = 0; next }   # a declaration
        if (/\{[ \t]*$/) {
            state = 2
            name = head; sub(/\(.*/, "", name); sub(/.*[^A-Za-z0-9_]/, "", name)
        }
        next
    }
    state == 2 && /^}$/ { print FNR - start + 1, FILENAME ":" start, name; state = 0; next }
    state == 2 && /^}/ { state = 0 }   # a struct, an enum or an initializer
    ' "$@"
}

# long_functions MAX LIST FILE...: every function over MAX lines that LIST does not name, and
# every entry of LIST that is no longer over MAX; status 1 if any
long_functions() {
    local max=$1 list=$2
    shift 2
    functions "$@" | awk -v max="$max" -v list="$list" '
    BEGIN {
        n = split(list, rows, "\n")
        for (i = 1; i <= n; i++) if (split(rows[i], f, /[ :]/) >= 2) listed[f[1] " " f[2]] = 1
    }
    {
        split($2, at, ":"); key = at[1] " " $3
        if ($1 > max && !(key in listed)) { print $2 ": " $3 " is " $1 " lines, over " max; bad = 1 }
        if ($1 > max) seen[key] = 1
    }
    END {
        for (k in listed) if (!(k in seen)) { print k ": listed as longer than " max " but is not (or is gone); take it off the list"; bad = 1 }
        exit bad
    }'
}

mapfile -t c_files < <(find src -name '*.c' -o -name '*.cu' | sort)
long_functions $FUNCTION_MAX "$LONG_FUNCTIONS" "${c_files[@]}" > "$tmp/out" 2>&1
rc=$?
listed=$(grep -c . <<< "$LONG_FUNCTIONS")
check "every function of src/ is at most $FUNCTION_MAX lines$([ "$listed" -eq 0 ] || echo ", but for the $listed listed")" $rc \
    "$(head -n 20 "$tmp/out")"
# a "}" alone in column 0 closes a function or an extern "C" { block: none is missed
functions "${c_files[@]}" > "$tmp/fns"
closing=$(cat "${c_files[@]}" | grep -c '^}$')
blocks=$(cat "${c_files[@]}" | grep -c '^extern "C" {')
[ "$(wc -l < "$tmp/fns")" -eq $((closing - blocks)) ]
check "every closing brace in column 0 of src/ ends a function the scan found" $? \
    "$(wc -l < "$tmp/fns") functions, $closing closing braces, $blocks extern \"C\" blocks"

# the scan on a scratch file: a function of 4 lines (a label in column 0 inside it), a
# prototype, a struct and an initializer that are none, one over the limit
{
    printf 'static int f(int a);\ntypedef struct {\n    int x;\n} S;\nstatic const int T[] = {\n    1,\n};\n'
    printf 'static int f(int a,\n             int b) {\ndone:\n    return a + b;\n}\n'
    printf 'int g(void) {\n'
    for i in 1 2 3 4 5; do printf '    int v%d = %d;\n' "$i" "$i"; done
    printf '    return 0;\n}\n'
} > "$tmp/fn.c"
[ "$(functions "$tmp/fn.c" | awk '{ print $1, $3 }' | tr '\n' ' ')" = "5 f 8 g " ]
check "the scan finds the functions and their lengths, and nothing else" $? "$(functions "$tmp/fn.c")"
long_functions 7 "" "$tmp/fn.c" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "fn.c:13: g is 8 lines, over 7" "$tmp/out"
check "a function over the limit fails, named with its length" $? "status $rc: $(cat "$tmp/out")"
long_functions 7 "$tmp/fn.c g: a reason" "$tmp/fn.c" > "$tmp/out" 2>&1
check "a listed function over the limit passes" $? "$(cat "$tmp/out")"
long_functions 8 "$tmp/fn.c g: a reason" "$tmp/fn.c" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "fn.c g: listed as longer than 8 but is not" "$tmp/out"
check "a listed function no longer over the limit fails: the list only shrinks" $? "status $rc: $(cat "$tmp/out")"

finish
