#!/usr/bin/env bash
# test_bench_peer.sh: plots/bench/peer.sh, moe bench beside a PyTorch peer (run by `make test`
# with MOE_BIN set). PyTorch is not a dependency of the tests, so:
#
#   1. the script's own work (interleaving, reading both programs' numbers, the medians and
#      within-round ratios, the table and its provenance line) runs with a stand-in peer that
#      prints what torch_peer.py prints, with known numbers: the ratio must be moe.c's
#      tokens/s (read from its own JSON) over the stand-in's
#   2. without torch the script stops with exit 2 and says how to get it (make bench-peer)
#   3. bad options exit 2
#   4. plots/bench/torch_peer.py is valid Python; where build/venv-torch has torch (after
#      make bench-peer), its --smoke run with the real peer passes too
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
cd "$root" || exit 1
export MOE_BIN=$moe

# ---- 1. with a stand-in peer ----------------------------------------------------------------
echo "test_bench_peer: peer.sh --smoke with a stand-in peer"
cat > "$tmp/peer" << 'EOF'
#!/usr/bin/env bash
# prints what torch_peer.py prints: a header, then "NAME STEP_MS TOKENS_PER_S" per config
[ "$1" = --version ] && { echo "stand-in 1.0"; exit 0; }
while [ $# -gt 0 ]; do [ "$1" = --config ] && name=$2; shift; done
echo "stand-in, median of 1 steps"
echo "config step_ms tokens/s"
echo "$name 40.0 1600"
EOF
chmod +x "$tmp/peer"
PEER="$tmp/peer" bash plots/bench/peer.sh --smoke > "$tmp/out.txt" 2> "$tmp/err.txt"
rc=$?
check "peer.sh --smoke exits 0" $rc "exit $rc: $(tail -n 3 "$tmp/err.txt")"
csv=plots/bench-smoke/peer.csv
md=plots/bench-smoke/peer.md
[ "$(head -n 1 "$csv" 2> /dev/null)" = "round,config,moe_tokens_per_s,torch_tokens_per_s,ratio" ] &&
    [ "$(awk 'END { print NR }' "$csv")" -eq 2 ]
check "peer.csv: header and one row (one round, config test)" $? "$(cat "$csv" 2> /dev/null)"
awk -F, 'NR == 2 && $1 == 1 && $2 == "test" && $3 > 0 && $4 == 1600 {
           d = $5 - $3 / $4; exit !(d < 1e-3 && d > -1e-3) }
         NR == 2 { exit 1 }' "$csv"
check "the row has moe.c's tokens/s, the peer's 1600 and their ratio" $? "$(cat "$csv" 2> /dev/null)"
m=$(awk -F, 'NR == 2 { print $3 }' "$csv")
r=$(awk -F, 'NR == 2 { printf "%.2f", $5 }' "$csv")
grep -q "^| test | $(printf '%.0f' "$m") | 1600 | $r | $r | $r |$" "$md" &&
    grep -q "stand-in 1.0" "$md" && grep -q "built from commit" "$md" && grep -q "Machine: " "$md"
check "peer.md: the table row (one round: lowest = highest = the ratio), the peer's version, the machine and the commit" $? "$(cat "$md" 2> /dev/null)"

# ---- 2. no torch ----------------------------------------------------------------------------
echo "test_bench_peer: without torch"
printf '#!/bin/sh\nexit 1\n' > "$tmp/python"
chmod +x "$tmp/python"
PYTHON="$tmp/python" bash plots/bench/peer.sh --smoke > "$tmp/o.txt" 2> "$tmp/e.txt"
rc=$?
[ $rc -eq 2 ] && grep -q "cannot import torch: run make bench-peer" "$tmp/e.txt"
check "a python without torch: exit 2, and make bench-peer named" $? "exit $rc: $(cat "$tmp/e.txt")"

# ---- 3. bad options -------------------------------------------------------------------------
echo "test_bench_peer: bad options"
for bad in "--rounds 0" "--steps x" "--fast" "--config"; do
    # shellcheck disable=SC2086  # the options are words
    PEER="$tmp/peer" bash plots/bench/peer.sh $bad > "$tmp/o.txt" 2> "$tmp/e.txt"
    rc=$?
    [ $rc -eq 2 ] && grep -q "usage: bash plots/bench/peer.sh" "$tmp/e.txt"
    check "$bad: exit 2 with the usage" $? "exit $rc: $(cat "$tmp/e.txt")"
done

# ---- 4. the real peer ------------------------------------------------------------------------
echo "test_bench_peer: plots/bench/torch_peer.py"
python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' plots/bench/torch_peer.py 2> "$tmp/py.err"
check "torch_peer.py parses as Python" $? "$(cat "$tmp/py.err")"
venv=build/venv-torch/bin/python
if [ -x "$venv" ] && "$venv" -c 'import torch' 2> /dev/null; then
    PYTHON=$venv bash plots/bench/peer.sh --smoke > "$tmp/real.txt" 2> "$tmp/real.err"
    rc=$?
    [ $rc -eq 0 ] && grep -q "PyTorch [0-9]" plots/bench-smoke/peer.md
    check "with torch ($venv): peer.sh --smoke runs the real peer" $? "exit $rc: $(tail -n 3 "$tmp/real.err")"
else
    echo "  (no torch in build/venv-torch: make bench-peer installs it; the real peer is not run)"
fi

finish
