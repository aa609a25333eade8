#!/usr/bin/env bash
# handout.sh: the labs as students get them, without the reference solutions
# (make -C labs handout OUT=DIR, labs/README.md "For instructors").
#
#   bash labs/handout.sh DIR     DIR absolute or relative to the repository root; it must lie
#                                outside the repository and be empty or not exist yet
#
# DIR gets the project's files of this checkout (tracked by git, as they are in the working
# tree) that a student needs to build the engine and grade a lab, and nothing else:
#   Makefile, probes.mk,     the project's, for `make deps` and the engine's library (probes.mk: the
#   .gitignore               compiler, OpenMP and BLAS probes both Makefiles share)
#   src/                     the engine, which the graders link for their reference results
#   tests/testutil.{c,h}     the graders' tolerance rule
#   labs/                    the assignments, starters, graders and labs/common, less every
#                            solution/ folder and bench_grade_all.sh; the Makefile without
#                            grade-solution, handout and bench-grade-all,
#                            labs/README.md without its sections for teachers and instructors
#   COMMIT, README.md        the commit the handout was made from ("-dirty" when the working
#                            tree had changes to these files), and what the tree is
# A handout that still names a solution, or holds a copy of one, is undone and the script
# fails: the check is here, not only in the tests, because a lab added later may put one where
# the filters above do not look.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$root"

die() { echo "handout: $1" >&2; exit 2; }
if [ $# -ne 1 ] || [ -z "$1" ]; then
    die "name the folder to write, outside the repository: make -C labs handout OUT=/tmp/moe-labs"
fi

# abs_path PATH: PATH made absolute, symbolic links resolved, also when it does not exist yet
abs_path() {
    local p=$1 rest=""
    while [ ! -d "$p" ]; do
        rest=/$(basename "$p")$rest
        p=$(dirname "$p")
    done
    echo "$(cd "$p" && pwd -P)$rest"
}
out=$(abs_path "$1")
case $out/ in
    "$root"/*) die "OUT=$1 is inside the repository ($root), which holds the solutions: give a folder outside it, e.g. OUT=/tmp/moe-labs" ;;
esac
if [ -e "$out" ] && [ ! -d "$out" ]; then die "OUT=$1 exists and is not a folder"; fi
if [ -d "$out" ] && [ -n "$(ls -A "$out")" ]; then
    die "OUT=$1 is not empty: give a new or empty folder (nothing in $out was changed)"
fi
commit=$(git rev-parse HEAD 2> /dev/null) ||
    die "$root is not a git checkout: the handout is made from the project's tracked files"

paths=(Makefile probes.mk .gitignore src tests/testutil.c tests/testutil.h labs)
git diff --quiet HEAD -- "${paths[@]}" || commit=$commit-dirty
# from here a failure leaves OUT as it was: gone, or an empty folder
[ -d "$out" ] && existed=1 || existed=0
made=0
undo() {
    if [ "$made" = 0 ]; then
        if [ "$existed" = 1 ]; then find "$out" -mindepth 1 -delete; else rm -rf "$out"; fi
    fi
}
trap undo EXIT
mkdir -p "$out"
# tar keeps the files' times, so that an engine built here and copied over stays up to date
git ls-files -z -- "${paths[@]}" ':(exclude)labs/*/solution/*' ':(exclude)labs/handout.sh' \
    ':(exclude)labs/bench_grade_all.sh' |
    tar -cf - --null -T - | tar -xf - -C "$out"

# drop_target NAME < Makefile: the rule NAME (its paragraph: comments and recipe up to the next
# blank line, the comment starting "# NAME:"), the usage lines naming it and its .PHONY entry
drop_target() {
    sed -e "/^# $1:/,/^\$/d" -e "/^$1:/,/^\$/d" -e "/^#.*labs $1 /d" \
        -e "/^\\.PHONY:/s/ $1 / /" -e "/^\\.PHONY:/s/ $1\$//"
}
drop_target grade-solution < labs/Makefile | drop_target handout |
    drop_target bench-grade-all > "$out/labs/Makefile"
# labs/README.md: the introduction and "For students"; the other sections are for teachers
awk 'BEGIN { keep = 1 } /^## / { keep = ($0 == "## For students") } keep' \
    labs/README.md > "$out/labs/README.md"
for f in labs/*/README.md; do
    grep -v '^| `solution/' "$f" > "$out/$f" || true
done
echo "$commit" > "$out/COMMIT"
cat > "$out/README.md" << EOF
# moe.c labs

The labs of moe.c as handed out to students, made from commit $commit of the project
(also in \`COMMIT\`). Start with \`labs/README.md\`:

    make deps                              # once: compiler, OpenBLAS, Check
    make -C labs start LAB=01-router       # your copy: labs/01-router/router_lab.c
    make -C labs grade LAB=01-router       # grade it

\`src/\` is the engine the graders link for their reference results (its sources are there to
read once you are done; your file may not call it). The handbook the assignments cite is in
the project's repository.
EOF

# the check: no solution folder, no mention of one or of grade-solution, no copy of a solution
leak=$(find "$out" -name solution -print -quit)
[ -z "$leak" ] || leak="a solution folder: $leak"
[ -n "$leak" ] || leak=$(grep -rlE -e 'grade-solution' -e '(^|[/` ])solution/' "$out" | head -n 1 || true)
for s in labs/*/solution/*; do
    [ -n "$leak" ] || [ ! -f "$s" ] || leak=$(find "$out" -type f -size "$(($(wc -c < "$s")))c" \
        -exec cmp -s "$s" {} \; -print -quit)
done
if [ -n "$leak" ]; then
    echo "handout: the handout still holds or names a solution ($leak); nothing was written" >&2
    exit 1
fi
made=1
echo "handout: $out, made from $commit: $(find "$out" -type f | wc -l) files, no solutions"
echo "handout: students run make -C labs start LAB=01-router, then make -C labs grade LAB=01-router, in it"
