#!/usr/bin/env bash
# test_checks.sh: every check of the test scripts can fail.
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

finish
