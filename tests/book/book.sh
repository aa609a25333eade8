#!/usr/bin/env bash
# book.sh: the numbers the handbook and README quote, against the files under plots/.
#
#   bash tests/book/book.sh [--fix] [--plots DIR] [--allow FILE] [DOC...]
#
# Checks every marker of DOC (default: handbook.md README.md; chapters/README.md, "Numbers in
# the handbook", describes them) and that every unmarked decimal number or percentage of the
# prose is on the allow-list (default tests/book/allowed.txt). --fix (make book) rewrites every
# marked number that no longer agrees with its file, at the precision it is quoted with, and
# refreshes the marked tables and transcripts, printing each change. Exit status: 0 when every
# number agrees (after fixing), 1 when one does not, 2 for a bad command line.
# Paths are relative to the repository root (or absolute): the script works from there.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
fix=0
plots=plots
allow=tests/book/allowed.txt
docs=()
while [ $# -gt 0 ]; do
    case $1 in
        --fix) fix=1 ;;
        --plots) [ $# -ge 2 ] || { echo "book.sh: --plots needs a folder" >&2; exit 2; }; plots=$2; shift ;;
        --allow) [ $# -ge 2 ] || { echo "book.sh: --allow needs a file" >&2; exit 2; }; allow=$2; shift ;;
        -*) echo "book.sh: unknown option $1 (usage: book.sh [--fix] [--plots DIR] [--allow FILE] [DOC...])" >&2; exit 2 ;;
        *) docs+=("$1") ;;
    esac
    shift
done
[ ${#docs[@]} -gt 0 ] || docs=(handbook.md README.md)
for d in "${docs[@]}"; do
    [ -f "$d" ] || { echo "book.sh: no document $d" >&2; exit 2; }
    rm -f "$d.new"
done
[ -d "$plots" ] || { echo "book.sh: no folder $plots" >&2; exit 2; }
[ -f "$allow" ] || { echo "book.sh: no allow-list $allow" >&2; exit 2; }
awk -f tests/book/book.awk -v plots="$plots" -v allow="$allow" -v fix=$fix "${docs[@]}"
rc=$?
for d in "${docs[@]}"; do
    if [ -f "$d.new" ]; then mv -f "$d.new" "$d" && echo "book.sh: rewrote $d"; fi
done
exit $rc
