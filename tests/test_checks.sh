#!/usr/bin/env bash
# test_checks.sh: every check of the test scripts can fail, and make test's runner counts
# each suite by its status.
#
# A script's `check "WHAT" $? ...` reads the status of the command before it. A command
# substitution in WHAT ("... $(cat f) ...") runs first and replaces that status with its own,
# almost always 0: the check then passes whatever the test found. Every .sh under tests/,
# chapters/ and labs/ is scanned for a check whose first argument holds $( (an arithmetic
# $(( is fine) and whose status argument is $?; then the scan itself on a scratch file.
# Needs only bash and awk.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_checks: a check's status is the test's"
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

# masked FILE...: FILE:LINE of each check whose message runs a command before $? is read
masked() {
    awk '/^[ \t]*check "/ {
             line = $0; start = FNR
             while (line ~ /\\$/ && (getline more) > 0) { sub(/\\$/, "", line); line = line more }
             msg = line; sub(/^[ \t]*check "/, "", msg)
             # the first argument: up to its closing quote (quotes inside $( ) nest)
             depth = 0; arg = ""
             for (i = 1; i <= length(msg); i++) {
                 c = substr(msg, i, 1)
                 if (c == "\"" && depth == 0) break
                 if (substr(msg, i, 2) == "$(" && substr(msg, i, 3) != "$((") depth++
                 else if (c == ")" && depth > 0) depth--
                 arg = arg c
             }
             rest = substr(msg, i + 1)
             tmp = arg; gsub(/\$\(\(/, "", tmp)
             if (index(tmp, "$(") && rest ~ /^[ \t]*\$\?/) print FILENAME ":" start
         }' "$@"
}

mapfile -t scripts < <(find tests chapters labs -name '*.sh' -not -path '*/fixtures/*' \
                       -not -name test_checks.sh | sort) # this one holds a probe
found=$(masked "${scripts[@]}")
[ -z "$found" ]
check "no check in ${#scripts[@]} scripts reads \$? after a command substitution in its message" $? \
    "$found"

# the scan on a scratch file: the masked form is found, the safe forms are not
cat > "$tmp/probe.sh" <<'PROBE'
false
check "masked: $(echo x) here" $? "detail"
false
check "arithmetic $((1 + 1)) is fine" $? "$(echo detail is fine)"
false
ok=$?
check "captured first: $(echo x)" $ok
false
check "masked over two lines: $(echo x)" \
    $? "detail"
PROBE
got=$(masked "$tmp/probe.sh" | sed 's/.*://' | tr '\n' ' ')
[ "$got" = "2 9 " ]
check "the scan finds the masked checks of a probe (lines 2 and 9) and no safe one" $? "found lines: $got"

# make test's runner (tests/lib/run_suites.sh): 0 passes, 77 is skipped, anything else fails
# the run; each suite's output is printed whole with its seconds; every suite has a TMPDIR of
# its own; one at a time the same
echo "test_checks: the suite runner"
mkdir -p "$tmp/s"
printf 'echo "pass: one"\nsleep 0.2\necho "pass: two"\necho "$TMPDIR" > %q\n' "$tmp/tmp1" > "$tmp/s/pass.sh"
printf 'echo "$TMPDIR" > %q\nexit 77\n' "$tmp/tmp2" > "$tmp/s/skip.sh"
printf 'echo "fail: here"\nexit 3\n' > "$tmp/s/fail.sh"
for jobs in 3 1; do
    out=$(MOE_TEST_JOBS=$jobs bash tests/lib/run_suites.sh probe "$tmp/s/pass.sh" "$tmp/s/skip.sh" \
              "$tmp/s/fail.sh" "$tmp/s/absent.sh" 2>&1)
    rc=$?
    [ $rc = 1 ] && grep -q "probe: 1 passed, 1 failed, 1 skipped" <<< "$out" &&
        grep -q "pass.sh: passed in [0-9.]* s (CPU [0-9.]* s)" <<< "$out" &&
        grep -q "fail.sh: FAILED (exit 3)" <<< "$out" && grep -q "skip.sh: skipped" <<< "$out" &&
        [ "$(grep -A 2 "^== $tmp/s/pass.sh\$" <<< "$out" | tail -n 2 | tr '\n' ' ')" = "pass: one pass: two " ] &&
        [ -s "$tmp/tmp1" ] && [ "$(cat "$tmp/tmp1")" != "$(cat "$tmp/tmp2")" ]
    check "$jobs at a time: a pass, a skip (77) and a failure (3) counted as such, exit 1, output whole, a TMPDIR each" \
        $? "exit $rc: $out"
done
MOE_TEST_JOBS=2 bash tests/lib/run_suites.sh probe "$tmp/s/pass.sh" "$tmp/s/skip.sh" > "$tmp/out2" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "probe: 1 passed, 0 failed, 1 skipped" "$tmp/out2"
check "a pass and a skip: exit 0 (a skip neither passes nor fails)" $? "exit $rc: $(cat "$tmp/out2")"
MOE_TEST_JOBS=0 bash tests/lib/run_suites.sh probe "$tmp/s/pass.sh" > "$tmp/out3" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "MOE_TEST_JOBS=0" "$tmp/out3"
check "MOE_TEST_JOBS=0: exit 2, naming it" $? "exit $rc: $(cat "$tmp/out3")"

# the Makefile's test targets hand their suites to tests/lib/make_test.sh: make test-units on a
# scratch build whose unit suites are stand-ins, one failing, one skipping, the rest passing
# (with the environment make test gives them); an unknown target is refused
units=(tests/test_*.c tests/mpi/test_*.c)
for c in "${units[@]}"; do
    mkdir -p "$(dirname "$tmp/b/$c")"
    printf '#!/bin/sh\n[ "$OMP_NUM_THREADS$CK_DEFAULT_TIMEOUT" = 2600 ] || exit 5\nexit %s\n' \
        "$([ "$c" = "${units[0]}" ] && echo 4 || { [ "$c" = "${units[1]}" ] && echo 77 || echo 0; })" > "$tmp/b/${c%.c}"
    chmod +x "$tmp/b/${c%.c}"
done
out=$(MOE_TEST_JOBS=3 bash tests/lib/make_test.sh test-units "$tmp/b" 2>&1)
rc=$?
[ $rc = 1 ] && grep -q "test (units): $((${#units[@]} - 2)) passed, 1 failed, 1 skipped" <<< "$out" &&
    grep -q "test (units): failed suites: $tmp/b/${units[0]%.c}\$" <<< "$out"
check "make_test.sh test-units: every unit suite of the build, a failure failing it (exit 1)" $? "exit $rc: $out"
rm "$tmp/b/${units[0]%.c}"
out=$(MOE_TEST_JOBS=3 bash tests/lib/make_test.sh test-units "$tmp/b" 2>&1)
rc=$?
[ $rc = 0 ] && grep -q "test (units): $((${#units[@]} - 2)) passed, 0 failed, 1 skipped" <<< "$out"
check "make_test.sh test-units: passes and a skip (77) pass it" $? "exit $rc: $out"
out=$(bash tests/lib/make_test.sh tests "$tmp/b" 2>&1)
rc=$?
[ $rc = 2 ] && grep -q "no target 'tests'" <<< "$out"
check "make_test.sh with an unknown target: exit 2, naming it" $? "exit $rc: $out"

finish
