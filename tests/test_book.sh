#!/usr/bin/env bash
# test_book.sh: the book quotes its numbers and commands honestly (run by `make test`).
#
#   1. every number handbook.md and README.md quote agrees with its file under plots/, and
#      every unmarked decimal or percentage is an allowed setting (tests/book/book.sh, the
#      check of `make book-check`)
#   2. every command the handbook and the READMEs show is in tests/doc_commands.txt, with a
#      test that runs it (tests/book/commands.sh)
#   3. the number checker itself, on the fixtures of tests/book/fixtures/: a good document
#      passes; a wrong number, a wrong derived value or percentage, an edited table row or
#      transcript line, a missing file, row or column, an unmarked number (a marker must touch
#      its number) and a bad allow-list each fail with a message naming the line; --fix
#      rewrites drifted numbers at their quoted precision and refreshes tables and transcripts
#   4. the command checker on fixtures: a command missing from the registry, an entry whose
#      test does not run it, a test file that does not exist
#   5. every src/ path the documents and the code's comments name exists (tests/book/paths.sh),
#      and the checker fails on a path that does not, a brace alternative and a glob included
# Needs only bash and awk: no build.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fx=tests/book/fixtures

# ---- 1, 2: the real documents ------------------------------------------------------------------
echo "test_book: the handbook's numbers and the documented commands"
bash tests/book/book.sh > "$tmp/book.out" 2>&1
check "every quoted number agrees with its file (make book-check)" $? "$(head -n 30 "$tmp/book.out")"
bash tests/book/commands.sh > "$tmp/cmd.out" 2>&1
check "every documented command is registered with a test that runs it" $? "$(head -n 30 "$tmp/cmd.out")"
bash tests/book/paths.sh > "$tmp/paths.out" 2>&1
check "every src/ path named in the documents and the code exists" $? "$(head -n 30 "$tmp/paths.out")"

# ---- 3. the number checker on fixtures -----------------------------------------------------------
# book DOC [PLOTS]: the checker on a fixture document, output in $tmp/out, status returned
book() { bash tests/book/book.sh --plots "${2:-$fx/plots}" --allow "${ALLOW:-$fx/allowed.txt}" "$1" > "$tmp/out" 2>&1; }
# mutant NAME SED-SCRIPT: a copy of the good fixture with one edit, at $tmp/NAME.md
# (returns 1 when the edit no longer changes anything, the fixture having moved)
mutant() { sed "$2" "$fx/good.md" > "$tmp/$1.md"; ! cmp -s "$fx/good.md" "$tmp/$1.md"; }
# fails NAME SED-SCRIPT PATTERN: the mutant fails the check with a message matching PATTERN
fails() {
    mutant "$1" "$2" || { bad "$1: the edit changes nothing in $fx/good.md"; return; }
    book "$tmp/$1.md"
    local rc=$?
    [ $rc -eq 1 ] && grep -q -- "$3" "$tmp/out"
    check "$1: exit 1 and \"$3\"" $? "exit $rc: $(cat "$tmp/out")"
}

echo "test_book: the number checker"
book "$fx/good.md"
check "the good fixture passes, silently" $? "$(cat "$tmp/out")"
[ ! -s "$tmp/out" ]
check "nothing printed for the good fixture" $? "$(cat "$tmp/out")"

fails "wrong number" 's/^The default loss is 2\.0784/The default loss is 2.0785/' \
    'number.md:3: quotes 2.0785 but ch/summary.csv base val_loss is 2.0784'
fails "wrong rounding" 's/or 2\.08</or 2.07</' 'quotes 2.07 but ch/summary.csv base val_loss is 2.0784 (2.08 at'
fails "wrong derived value" 's/^0\.046</0.047</' 'value.md:5: quotes 0.047 but = \[ch/summary.csv z-off val_loss\]'
fails "wrong percentage" 's/^1\.2 %</1.3 %</' 'quotes 1.3 % but = 100'
fails "wrong significant digits" 's/^16,800</16,900</' 'quotes 16,900 but ch/summary.csv z-off tok_per_s is 16826 (16,800'
fails "wrong text-table field" 's/1698\.7</1698.8</' 'quotes 1698.8 but ch/run.txt small $2 is 1698.7'
fails "wrong field after a text" 's/59\.9 %</55.4 %</' 'quotes 55.4 % but ch/run.txt after "profile small:" experts $5 is 59.9'
fails "edited table row" 's/^| z-off | 2\.1241 |/| z-off | 2.1240 |/' \
    'this line of the table is not in tests/book/fixtures/plots/ch/summary.md'
fails "table rows out of order" '/^| variant | val loss/{h;d;};/^| --- | ---: | ---: |/{G;}' 'this line of the table is not in'
fails "edited transcript line" 's/^    tiny             462\.5/    tiny             462.6/' \
    'this line of the transcript is not in tests/book/fixtures/plots/ch/run.txt'
fails "missing file" 's/^The default loss is 2\.0784<!-- ch\/summary\.csv/The default loss is 2.0784<!-- ch\/nosuch.csv/' \
    'no file tests/book/fixtures/plots/ch/nosuch.csv'
fails "missing table file" 's/<!-- table ch\/summary\.md -->/<!-- table ch\/nosuch.md -->/' 'no file tests/book/fixtures/plots/ch/nosuch.md'
fails "missing row" 's/or 2\.08<!-- ch\/summary\.csv base/or 2.08<!-- ch\/summary.csv basis/' "no row 'basis' in ch/summary.csv"
fails "missing column" 's/or 2\.08<!-- ch\/summary\.csv base val_loss/or 2.08<!-- ch\/summary.csv base val_los/' \
    "no column 'val_los' (columns: variant, val_loss"
fails "missing text" 's/after "MaxVio mean "/after "MaxVio median "/' 'no "MaxVio median " in ch/summary.md'
fails "unmarked number" 's/^are not prose\./are not prose, unlike 2.13./' "number.md:22: unmarked number 2.13"
fails "unmarked percentage" 's/^are not prose\./are not prose, unlike 64 %./' "unmarked number 64 %"
fails "unmarked table cell" 's/^| z-off | 2\.1241 | 6447 \/ 9937 |/&\n\n| x | 0.5 |/' "unmarked number 0.5"
fails "a marker after a blank" 's/or 2\.08</or 2.08 </' "unmarked number 2.08"
fails "wrong max" 's/^to 2\.1241<!-- = max/to 2.0784<!-- = max/' 'quotes 2.0784 but = max(\[ch/summary.csv z-off val_loss\], \[ch/summary.csv base val_loss\]) is 2.1241'
fails "a bad expression" 's/ - \[ch\/summary.csv base val_loss\] -->/ - -->/' 'the expression ends too early'
fails "an unbalanced expression" 's/= \[ch\/summary.csv z-off val_loss\] - /= ([ch\/summary.csv z-off val_loss] - /' 'a ( without its )'

# an integer under four digits is exact: 600 does not quote 604
cp -r "$fx/plots" "$tmp/p604"
sed -i 's/^steps: 600$/steps: 604/' "$tmp/p604/ch/run.txt"
book "$fx/good.md" "$tmp/p604"
[ $? -eq 1 ] && grep -q 'quotes 600 but ch/run.txt after "steps: " is 604' "$tmp/out"
check "a short integer is exact: exit 1 and \"quotes 600 but ... is 604\"" $? "$(cat "$tmp/out")"

printf '0.01\n5%%   the validation share\n' > "$tmp/noreason.txt"
ALLOW=$tmp/noreason.txt book "$fx/good.md"
[ $? -eq 1 ] && grep -q "allow-list entry '0.01' has no reason" "$tmp/out"
check "an allow-list entry without a reason fails" $? "$(cat "$tmp/out")"
{ cat "$fx/allowed.txt"; echo "3.14   pi, used nowhere"; } > "$tmp/unused.txt"
ALLOW=$tmp/unused.txt book "$fx/good.md"
[ $? -eq 1 ] && grep -q "allow-list entry '3.14' is not used" "$tmp/out"
check "an unused allow-list entry fails" $? "$(cat "$tmp/out")"
bash tests/book/book.sh --bogus > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "unknown option --bogus" "$tmp/out"
check "a bad option: exit 2 and a message" $? "$(cat "$tmp/out")"

# --fix after an ablation moved its results: the numbers follow at their precision
echo "test_book: --fix (make book)"
cp -r "$fx/plots" "$tmp/plots"
sed -i 's/^z-off,2\.1241,0\.238,0\.0115,16826$/z-off,2.1302,0.238,0.0131,17310/' "$tmp/plots/ch/summary.csv"
sed -i 's/^| z-off | 2\.1241 | 6447 \/ 9937 |$/| z-off | 2.1302 | 6400 \/ 9990 |/' "$tmp/plots/ch/summary.md"
sed -i 's/^small           1698\.7      1206   61\.2%$/small           1701.26     1204   61.0%/' "$tmp/plots/ch/run.txt"
sed -i 's/^tiny             462\.5      4428   58\.4%$/tiny            1462.5      1428   18.4%/' "$tmp/plots/ch/run.txt"
cp "$fx/good.md" "$tmp/fixed.md"
book "$tmp/fixed.md" "$tmp/plots"
[ $? -eq 1 ] && [ "$(grep -c 'quotes\|not in' "$tmp/out")" -ge 7 ]
check "the moved results fail the check" $? "$(cat "$tmp/out")"
bash tests/book/book.sh --fix --plots "$tmp/plots" --allow "$fx/allowed.txt" "$tmp/fixed.md" > "$tmp/fix.out" 2>&1
check "--fix exits 0" $? "$(cat "$tmp/fix.out")"
book "$tmp/fixed.md" "$tmp/plots"
check "after --fix the check passes" $? "$(cat "$tmp/out")"
want() { grep -qF -- "$1" "$tmp/fixed.md"; check "--fix wrote $2" $? "no '$1' in: $(cat "$tmp/fixed.md")"; }
want '0.052<!-- = [ch/summary.csv z-off val_loss]' "a derived value at its 3 decimals"
want '1.3 %<!-- = 100 *' "a percentage at its precision"
want '17,300<!-- ch/summary.csv z-off tok_per_s -->' "an integer at its 3 significant digits, with its comma"
want '1701.3<!-- ch/run.txt small $2 -->' "a text-table field at its 1 decimal"
want '61.0%<!-- ch/run.txt small $4 -->' "a percentage field, trailing zero kept"
want '| z-off | 2.1302 | 6400 / 9990 |' "the table row from the summary"
want '    tiny            1462.5      1428   18.4%' "the transcript line of the same shape, indent kept"
want 'The default loss is 2.0784<!--' "an unchanged number as it was"
grep -q '2.0784 ->' "$tmp/fix.out"
[ $? -ne 0 ] && grep -q '0.046 -> 0.052' "$tmp/fix.out" && grep -q '17,300' "$tmp/fix.out"
check "--fix prints each change, and only changes" $? "$(cat "$tmp/fix.out")"
cp "$tmp/fixed.md" "$tmp/before.md"
bash tests/book/book.sh --fix --plots "$tmp/plots" --allow "$fx/allowed.txt" "$tmp/fixed.md" > "$tmp/fix.out" 2>&1
[ $? -eq 0 ] && [ ! -s "$tmp/fix.out" ] && cmp -s "$tmp/before.md" "$tmp/fixed.md"
check "--fix on an agreeing document changes nothing" $? "$(cat "$tmp/fix.out")"
sed 's/ch\/summary.csv base val_loss -->, or/ch\/nosuch.csv base val_loss -->, or/' "$fx/good.md" > "$tmp/unfixable.md"
bash tests/book/book.sh --fix --plots "$tmp/plots" --allow "$fx/allowed.txt" "$tmp/unfixable.md" > "$tmp/fix.out" 2>&1
[ $? -eq 1 ] && grep -q 'no file' "$tmp/fix.out" && grep -q '0.052<!--' "$tmp/unfixable.md"
check "--fix fixes what it can and fails on a missing file" $? "$(cat "$tmp/fix.out")"

# ---- 4. the command checker on fixtures ---------------------------------------------------------
echo "test_book: the command checker"
# cmds DOC REGISTRY: the checker on a fixture, output in $tmp/out
cmds() { bash tests/book/commands.sh --registry "$2" "$1" > "$tmp/out" 2>&1; }
cmds "$fx/commands.md" "$fx/commands.txt"
check "the fixture's commands are all registered" $? "$(cat "$tmp/out")"
grep -v '^make fixture-two' "$fx/commands.txt" > "$tmp/reg1.txt"
cmds "$fx/commands.md" "$tmp/reg1.txt"
[ $? -eq 1 ] && grep -q 'commands.md:.*not in the registry: make fixture-two ARG=1' "$tmp/out"
check "a documented command missing from the registry fails" $? "$(cat "$tmp/out")"
sed 's/=> tests\/book\/fixtures\/runs_them.sh => fixture-one --tiny/=> tests\/book\/fixtures\/runs_them.sh => fixture-one --huge/' \
    "$fx/commands.txt" > "$tmp/reg2.txt"
cmds "$fx/commands.md" "$tmp/reg2.txt"
[ $? -eq 1 ] && grep -q "does not contain 'fixture-one --huge'" "$tmp/out"
check "an entry whose test does not run it fails" $? "$(cat "$tmp/out")"
sed 's/runs_them\.sh => fixture-one/nosuch.sh => fixture-one/' "$fx/commands.txt" > "$tmp/reg3.txt"
cmds "$fx/commands.md" "$tmp/reg3.txt"
[ $? -eq 1 ] && grep -q 'no test file tests/book/fixtures/nosuch.sh' "$tmp/out"
check "an entry naming a missing test file fails" $? "$(cat "$tmp/out")"
{ cat "$fx/commands.txt"; echo "make gone => tests/book/fixtures/runs_them.sh"; } > "$tmp/reg4.txt"
cmds "$fx/commands.md" "$tmp/reg4.txt"
[ $? -eq 1 ] && grep -q "'make gone' is shown by no document" "$tmp/out"
check "an entry no document shows fails" $? "$(cat "$tmp/out")"

# ---- 5. the path checker on a document of its own ---------------------------------------------
printf 'See src/moe/router.c, src/io/files.{h,c} and src/moe/router*.c (src/nn/).\n' > "$tmp/good_paths.md"
bash tests/book/paths.sh "$tmp/good_paths.md" > "$tmp/out" 2>&1
check "paths: existing files, brace alternatives, a glob and a folder pass" $? "$(cat "$tmp/out")"
for p in moe/no_such.c 'io/files.{h,x}' 'moe/nothing*.c'; do  # src/ added below, so this file names none of them
    p=src/$p
    printf 'Line one.\nThe code is in %s, read it.\n' "$p" > "$tmp/bad_paths.md"
    bash tests/book/paths.sh "$tmp/bad_paths.md" > "$tmp/out" 2>&1
    rc=$?
    [ $rc -eq 1 ] && grep -q "bad_paths.md:2: names src/" "$tmp/out"
    check "paths: $p fails, naming the line" $? "status $rc: $(cat "$tmp/out")"
done

finish
