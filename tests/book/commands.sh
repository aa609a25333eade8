#!/usr/bin/env bash
# commands.sh: every command the documents show is run by a test.
#
#   bash tests/book/commands.sh [--registry FILE] [DOC...]
#
# A shown command is a line of a ```sh block (a trailing "\" joins the next line; a "  # ..."
# comment is dropped) or a line of an indented code block that starts with build/ (a
# build folder or a variant's under it), make, bash or mpirun. Each must be an entry of the registry (default tests/doc_commands.txt),
# compared with runs of blanks collapsed:
#
#   COMMAND => TEST_FILE                 the test file contains COMMAND itself
#   COMMAND => TEST_FILE => TINY_FORM    the test file contains TINY_FORM (the same command
#                                        at a tiny size, or the way the test spells it)
#   COMMAND => not run: REASON           shown but not runnable by a test (an editor session)
#
# Fails on a shown command missing from the registry, an entry whose test file is missing or
# does not contain the command (or its tiny form), and an entry that no document shows.
# Documents default to the handbook and the READMEs; paths are relative to the repository root.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
registry=tests/doc_commands.txt
docs=()
while [ $# -gt 0 ]; do
    case $1 in
        --registry) [ $# -ge 2 ] || { echo "commands.sh: --registry needs a file" >&2; exit 2; }; registry=$2; shift ;;
        -*) echo "commands.sh: unknown option $1 (usage: commands.sh [--registry FILE] [DOC...])" >&2; exit 2 ;;
        *) docs+=("$1") ;;
    esac
    shift
done
[ ${#docs[@]} -gt 0 ] || docs=(handbook.md README.md chapters/README.md labs/README.md labs/*/README.md \
                               data/README.md data/fallback/README.md src/README.md src/REFERENCE.md src/BACKENDS.md \
                               tests/gpu/README.md)
for d in "${docs[@]}" "$registry"; do [ -f "$d" ] || { echo "commands.sh: no file $d" >&2; exit 2; }; done

# the shown commands, one a line: DOC:LINE<tab>COMMAND
awk '
function norm(s) { gsub(/[ \t]+/, " ", s); sub(/^ /, "", s); sub(/ $/, "", s); return s }
# a comment starts at a # that follows a blank, outside quotes
function uncomment(s,   i, c, q) {
    q = ""
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (q != "") { if (c == q) q = ""; continue }
        if (c == "\"" || c == "\047") q = c
        else if (c == "#" && (i == 1 || substr(s, i - 1, 1) ~ /[ \t]/)) return substr(s, 1, i - 1)
    }
    return s
}
function emit(where, s) { s = norm(s); if (s != "") print where "\t" s }
FNR == 1 { fence = ""; indent = 0; prevblank = 1; pend = "" }
{
    line = $0
    if (fence != "") {
        if (line ~ /^ *(```|~~~)/) { fence = ""; if (pend != "") emit(at, pend); pend = ""; next }
        if (fence != "sh") next
        s = uncomment(line)
        if (pend == "") at = FILENAME ":" FNR
        if (s ~ /\\[ \t]*$/) { sub(/\\[ \t]*$/, " ", s); pend = pend s; next }
        emit(at, pend s); pend = ""
        next
    }
    if (line ~ /^ *(```|~~~)/) {
        info = line; sub(/^ *(```|~~~)[ \t]*/, "", info); sub(/[ \t].*$/, "", info)
        fence = (info == "sh" || info == "bash" || info == "shell") ? "sh" : "other"
        next
    }
    blank = line ~ /^[ \t]*$/
    if (line ~ /^    / && (prevblank || indent)) {
        indent = 1
        s = line; sub(/^[ \t]+/, "", s)
        if (s ~ /^(build\/|make( |$)|bash |mpirun )/) emit(FILENAME ":" FNR, uncomment(s))
    } else if (!blank) indent = 0
    prevblank = blank
}' "${docs[@]}" > "${TMPDIR:-/tmp}/commands.$$"

status=0
awk -F'\t' -v reg="$registry" '
function norm(s) { gsub(/[ \t]+/, " ", s); sub(/^ /, "", s); sub(/ $/, "", s); return s }
function has(file, text,   line, found) {
    found = 0
    while ((getline line < file) > 0) if (index(line, text)) { found = 1; break }
    close(file)
    return found
}
BEGIN {
    n = 0; bad = 0
    while ((getline line < reg) > 0) {
        n++
        if (line ~ /^[ \t]*(#|$)/) continue
        k = split(line, P, "=>")
        cmd = norm(P[1]); test = norm(P[2]); tiny = (k >= 3) ? norm(P[3]) : cmd
        if (k < 2 || cmd == "" || test == "") { print reg ":" n ": write COMMAND => TEST_FILE [=> TINY_FORM] (or => not run: REASON)"; bad++; continue }
        entry[cmd] = n
        if (test ~ /^not run:/) {
            if (norm(substr(test, 9)) == "") { print reg ":" n ": not run needs a reason: " cmd; bad++ }
            continue
        }
        if ((getline probe < test) < 0) { print reg ":" n ": no test file " test " (for: " cmd ")"; bad++; continue }
        close(test)
        if (!has(test, tiny)) { print reg ":" n ": " test " does not contain \047" tiny "\047 (for: " cmd ")"; bad++ }
    }
    close(reg)
}
{ shown[$2] = 1; if (!($2 in entry)) { print $1 ": not in the registry: " $2 " (add it to " reg " with the test that runs it)"; bad++ } }
END {
    for (c in entry) if (!(c in shown)) { print reg ":" entry[c] ": \047" c "\047 is shown by no document; remove it"; bad++ }
    exit bad > 0
}' "${TMPDIR:-/tmp}/commands.$$" || status=1
rm -f "${TMPDIR:-/tmp}/commands.$$"
exit $status
