#!/usr/bin/env bash
# test_bench.sh: `moe bench` end to end (run by `make test` with MOE_BIN set).
#
#   1. --json on tiny-dense (one timed step, no warm-up): stdout is one JSON object and
#      nothing else, with every key of the report; the measured numbers are positive; the
#      numbers agree with each other (tokens/s x step time = B x T tokens, GFLOP/s =
#      FLOPs per token x tokens/s); peak RSS is within a factor of the analytical memory
#   2. text with --profile on the small hidden test shapes (an MoE config and its dense
#      twin): the table has both rows and the MoE/dense column; each op with model FLOPs
#      shows its GFLOP/s and share of the sgemm, the others a dash, and "all products" adds
#      up their times; the CSV has a header and one row per op and config, and each config's
#      percentages add up to 100; plots/bench_profile.gp draws it (when gnuplot is installed);
#      in the JSON, the ops' FLOPs add up to the step's and each rate is FLOPs over time
#   --rounds 3 measures the sgemm and every config three times in turn, and reports the
#      medians with the sgemm's range
#   3. bad options exit 2 with a message and print nothing on stdout
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
# OMP_NUM_THREADS is the caller's: the runs without --threads measure the default thread count

# num KEY FILE: the number after "KEY": in FILE (the first one)
num() { sed -n "s/.*\"$1\": \([-+0-9.eE]*\).*/\1/p" "$2" | head -n 1; }

# ---- 1. JSON ------------------------------------------------------------------------------
echo "test_bench: --json, tiny-dense"
"$moe" bench --config tiny-dense --steps 1 --warmup 0 --threads 2 --json > "$tmp/b.json" 2> "$tmp/b.err"
rc=$?
check "bench --json exits 0" $rc "exit $rc: $(cat "$tmp/b.err")"
first=$(head -c 1 "$tmp/b.json")
last=$(tail -n 1 "$tmp/b.json")
[ "$first" = "{" ] && [ "$last" = "}" ]
check "stdout is one JSON object" $? "starts with '$first', ends with '$last'"
if command -v python3 > /dev/null 2>&1; then
    python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/b.json" 2> "$tmp/py.err"
    check "the JSON parses (python3)" $? "$(cat "$tmp/py.err")"
fi
missing=""
for k in commit machine cpu cores threads sgemm gflops gflops_median steps warmup configs name moe \
    d_model n_layer n_head batch seq_len params_total params_active flops_per_token step_ms \
    step_ms_min step_ms_max tokens_per_s sgemm_fraction moe_over_dense peak_rss_mib \
    analytical_mib rss_over_analytical memory_floats int_words total_words; do
    grep -q "\"$k\":" "$tmp/b.json" || missing="$missing $k"
done
[ -z "$missing" ]
check "every key is there" $? "missing:$missing"
grep -q '"name": "tiny-dense"' "$tmp/b.json" && grep -q '"moe": false' "$tmp/b.json" &&
    grep -q '"moe_over_dense": null' "$tmp/b.json" && grep -q '"threads": 2' "$tmp/b.json"
check "tiny-dense: dense, no twin ratio, 2 threads" $? "$(cat "$tmp/b.json")"
nonpos=""
for k in gflops step_ms tokens_per_s flops_per_token sgemm_fraction peak_rss_mib analytical_mib \
    params_total; do
    v=$(num "$k" "$tmp/b.json")
    float_cmp "${v:-0}" ">" 0 || nonpos="$nonpos $k=$v"
done
[ -z "$nonpos" ]
check "measured numbers are positive" $? "not positive:$nonpos"
step=$(num step_ms "$tmp/b.json")
tps=$(num tokens_per_s "$tmp/b.json")
fpt=$(num flops_per_token "$tmp/b.json")
gf=$(sed -n 's/.*"gflops": \([-+0-9.eE]*\), "sgemm_fraction".*/\1/p' "$tmp/b.json")
float_cmp "$tps * $step / 1000" ">" 2047 && float_cmp "$tps * $step / 1000" "<" 2049
check "tokens/s x step = B x T = 2048 tokens" $? "tokens_per_s $tps, step_ms $step"
float_cmp "$gf / ($fpt * $tps / 1e9)" ">" 0.999 && float_cmp "$gf / ($fpt * $tps / 1e9)" "<" 1.001
check "GFLOP/s = FLOPs per token x tokens/s" $? "gflops $gf, flops_per_token $fpt, tokens/s $tps"
ratio=$(num rss_over_analytical "$tmp/b.json")
float_cmp "$ratio" ">" 0.9 && float_cmp "$ratio" "<" 2.5
check "peak RSS is near the analytical memory (RSS / analytical = $ratio)" $? "out of [0.9, 2.5]"

# ---- 2. text and profile ---------------------------------------------------------------------
echo "test_bench: text with --profile, test and test-dense"
csv="$tmp/prof.csv"
"$moe" bench --config test --config test-dense --steps 3 --warmup 1 --profile \
    --profile-out "$csv" > "$tmp/b.txt" 2> "$tmp/b.err"
rc=$?
check "bench --profile exits 0" $rc "exit $rc: $(cat "$tmp/b.err")"
grep -q '^machine: .*threads; OpenBLAS [A-Za-z0-9_]*; sgemm 2048x2048x2048: [0-9.]* GFLOP/s' "$tmp/b.txt" &&
    grep -q '^config .*step ms .*tokens/s .*GFLOP/s .*%sgemm .*/dense .*RSS MiB .*calc MiB' "$tmp/b.txt"
check "header line and table columns" $? "$(head -n 5 "$tmp/b.txt")"
# OpenBLAS's kernels: on a CPU with AVX2 and FMA never one of the sets without them (moe sets
# OPENBLAS_CORETYPE when the library fell back to one), and a set the environment names is kept
core=$(sed -n 's/^machine: .*; OpenBLAS \([A-Za-z0-9_]*\); sgemm .*/\1/p' "$tmp/b.txt")
if grep -qw avx2 /proc/cpuinfo 2> /dev/null && grep -qw fma /proc/cpuinfo; then
    ! grep -qixE 'unknown|katmai|coppermine|northwood|prescott|banias|atom|core2|penryn|dunnington|nehalem|athlon|opteron|opteron_sse3|barcelona|nano|sandybridge|bobcat|bulldozer|piledriver|steamroller' <<< "${core:-unknown}"
    check "a CPU with AVX2 and FMA runs OpenBLAS kernels that use them ($core)" $? "$(head -n 1 "$tmp/b.txt")"
    env OPENBLAS_CORETYPE=Haswell "$moe" bench --config test --steps 1 --warmup 0 2> /dev/null |
        grep -q '^machine: .*; OpenBLAS Haswell; sgemm'
    check "OPENBLAS_CORETYPE=Haswell in the environment is kept" $?
fi
grep -q "\"blas_core\": \"$core\"" "$tmp/b.json"
check "the JSON names the same OpenBLAS kernels as the text ($core)" $? "$(grep -o '"blas_core": "[^"]*"' "$tmp/b.json")"
awk '$1 == "test" && $2 == "2x32" && $8 + 0 > 0 { a = 1 }
     $1 == "test-dense" && $8 == "-" { b = 1 } END { exit !(a && b) }' "$tmp/b.txt"
check "rows for test (with an MoE/dense ratio) and test-dense" $? "$(cat "$tmp/b.txt")"
grep -q '^profile test: ms per step' "$tmp/b.txt" && grep -q '^  experts ' "$tmp/b.txt"
check "per-op profile tables" $? "$(cat "$tmp/b.txt")"
# each op's GFLOP/s: the ops with model FLOPs show a rate and a share of the sgemm, the others
# a dash; "all products" is the time of the ops with a rate, added up
awk '/^profile test(-dense)?:/ { cfg = $2 }
     cfg != "" && $1 ~ /^(attn_proj|attention|head)$/ { if ($6 + 0 > 0 && $7 ~ /%$/) ok[cfg]++; else bad = 1 }
     cfg != "" && $1 ~ /^(embedding|rmsnorm|rope|residual|swiglu|permute|loss|optimizer|other)$/ { if ($6 != "-") bad = 1 }
     cfg != "" && $1 ~ /^(attn_proj|attention|dense_ffn|router|experts|head)$/ && $6 != "-" { sum[cfg] += $4 }
     cfg != "" && $1 == "all" && $2 == "products" { seen[cfg] = 1; d = $3 - sum[cfg]; if (d < -0.03 || d > 0.03) bad = 1 }
     END { exit !(ok["test:"] == 3 && ok["test-dense:"] == 3 && seen["test:"] && seen["test-dense:"] && !bad) }' "$tmp/b.txt"
check "profile: GFLOP/s and %sgemm for the ops with model FLOPs, and all products added up" $? "$(cat "$tmp/b.txt")"
nops=$(awk -F, 'NR > 1 && $1 == "test" { n++ } END { print n + 0 }' "$csv" 2> /dev/null)
[ "$(head -n 1 "$csv" 2> /dev/null)" = "config,op,fwd_ms,bwd_ms,total_ms,percent" ] &&
    [ "${nops:-0}" -ge 10 ] && [ "$(awk 'END { print NR }' "$csv")" -eq $((2 * nops + 1)) ]
check "profile CSV: header and $nops rows per config" $? "$(cat "$csv" 2> /dev/null)"
awk -F, 'NR > 1 { p[$1] += $6; if ($5 < 0 || $5 + 0.0002 < $3 + $4) bad = 1 }  # 3 values rounded to 4 decimals
         END { for (c in p) if (p[c] < 99.9 || p[c] > 100.1) bad = 1; exit bad }' "$csv"
check "percentages add up to 100, total >= fwd + bwd" $? "$(cat "$csv")"
awk -F, '$1 == "test" && $2 == "experts" && $5 > 0 { a = 1 }
         $1 == "test-dense" && $2 == "dense_ffn" && $5 > 0 { b = 1 }
         $1 == "test-dense" && $2 == "experts" && $5 > 0 { bad = 1 }
         END { exit !(a && b && !bad) }' "$csv"
check "the MoE config times experts, the dense twin its dense FFN" $? "$(cat "$csv")"
if command -v gnuplot > /dev/null 2>&1; then
    gnuplot -e "data='$csv'; out='$tmp/prof.png'" plots/bench_profile.gp 2> "$tmp/gp.err"
    rc=$?
    [ $rc -eq 0 ] && [ "$(head -c 4 "$tmp/prof.png" | tail -c 3)" = "PNG" ] &&
        [ "$(wc -c < "$tmp/prof.png")" -gt 10000 ]
    check "plots/bench_profile.gp draws a PNG" $? "exit $rc: $(cat "$tmp/gp.err")"
fi

# ---- the per-op FLOPs in the JSON add up to the step's, and each op's rate is its FLOPs over its time
"$moe" bench --config test --steps 1 --warmup 0 --json --profile > "$tmp/pj.json" 2> /dev/null
rc=$?
if [ $rc -eq 0 ] && command -v python3 > /dev/null 2>&1; then
    python3 - "$tmp/pj.json" > "$tmp/pj.err" 2>&1 << 'PY'
import json, sys
c = json.load(open(sys.argv[1]))["configs"][0]
tokens = c["batch"] * c["seq_len"]
ops = {p["op"]: p for p in c["profile"]}
total = sum(p["flops_per_token"] for p in c["profile"])
assert abs(total / c["flops_per_token"] - 1) < 1e-9, (total, c["flops_per_token"])
for name in ("attn_proj", "attention", "router", "experts", "head"):
    p = ops[name]
    assert p["flops_per_token"] > 0 and p["gflops"] > 0, p
    rate = p["flops_per_token"] * tokens / (p["total_ms"] / 1e3) / 1e9
    assert abs(p["gflops"] / rate - 1) < 1e-4, (name, p["gflops"], rate)
for name in ("embedding", "rmsnorm", "dense_ffn", "permute", "optimizer", "other"):
    assert ops[name]["gflops"] is None and ops[name]["flops_per_token"] == 0, ops[name]
PY
    rc=$?
fi
check "JSON profile: the ops' FLOPs add up to flops_per_token, gflops = FLOPs / time" $rc "$(cat "$tmp/pj.err" 2> /dev/null)"

# ---- the reference attention can be timed too, and says so
"$moe" bench --config test --steps 1 --warmup 0 --json --reference-attention > "$tmp/ref.json" 2> /dev/null
rc=$?
[ $rc -eq 0 ] && grep -q '"attention": "reference"' "$tmp/ref.json" && grep -q '"tokens_per_s"' "$tmp/ref.json"
check "--reference-attention runs and is named in the JSON" $? "exit $rc"

# ---- more experts at the same active compute: the ratio to the config with fewer
"$moe" bench --config test --config test-e16 --steps 1 --warmup 0 > "$tmp/fine.txt" 2> /dev/null &&
    "$moe" bench --config test --config test-e16 --steps 1 --warmup 0 --json > "$tmp/fine.json" 2> /dev/null
rc=$?
[ $rc -eq 0 ] && grep -q "^test-e16 runs at [0-9.]*x the tokens/s of test: 16 experts instead of 4" "$tmp/fine.txt" &&
    grep -q '"tokens_over_fewer_experts": [0-9.]' "$tmp/fine.json" && grep -q '"tokens_over_fewer_experts": null' "$tmp/fine.json"
check "test-e16 reports its tokens/s over test's (16 experts against 4), text and JSON" $? "exit $rc: $(tail -n 2 "$tmp/fine.txt")"

# ---- and the reference backend: the same config on cpu-ref
"$moe" bench --config test --steps 1 --warmup 0 --json --device cpu-ref > "$tmp/dev.json" 2> /dev/null
rc=$?
[ $rc -eq 0 ] && grep -q '"device": "cpu-ref"' "$tmp/dev.json" && grep -q '"tokens_per_s"' "$tmp/dev.json"
check "--device cpu-ref runs and is named in the JSON" $? "exit $rc"

# ---- rounds: the sgemm and each config measured in turn, three times; medians reported
"$moe" bench --config test --config test-dense --steps 1 --warmup 0 --rounds 3 --json \
    > "$tmp/rounds.json" 2> "$tmp/rounds.err"
rc=$?
lo=$(num gflops_low "$tmp/rounds.json")
hi=$(num gflops_high "$tmp/rounds.json")
mid=$(num gflops "$tmp/rounds.json")
[ $rc -eq 0 ] && grep -q '"rounds": 3' "$tmp/rounds.json" &&
    [ "$(grep -c 'round [123] of 3: sgemm' "$tmp/rounds.err")" -eq 3 ] &&
    [ "$(grep -c 'round [123] of 3: test-dense: .* ms per step' "$tmp/rounds.err")" -eq 3 ] &&
    float_cmp "$lo" "<=" "$mid" && float_cmp "$mid" "<=" "$hi" &&
    grep -q '"moe_over_dense": [0-9.]' "$tmp/rounds.json"
check "--rounds 3: three interleaved rounds, the sgemm's median inside its range [$lo, $hi]" $? \
    "exit $rc: $(tail -n 3 "$tmp/rounds.err")"

# ---- 3. bad options ---------------------------------------------------------------------------
echo "test_bench: bad options"
expect_usage() { # LABEL PATTERN ARGS...: exit 2, PATTERN on stderr, nothing on stdout
    local label=$1 pattern=$2
    shift 2
    "$moe" bench "$@" > "$tmp/o.txt" 2> "$tmp/e.txt"
    local rc=$?
    [ $rc -eq 2 ] && grep -q -- "$pattern" "$tmp/e.txt" && [ ! -s "$tmp/o.txt" ]
    check "$label" $? "exit $rc, stderr: $(head -n 2 "$tmp/e.txt")"
}
expect_usage "--device of a backend this build lacks" "no backend 'gpu'" --device gpu
expect_usage "unknown option" "unknown option '--fast'" --fast
expect_usage "--precision of another name" "fp32|tf32|bf16" --precision fp16 --config test
expect_usage "--device cuda in a build without CUDA names make cuda" "make cuda" --device cuda \
    --config test
expect_usage "unknown config names the choices" "tiny, tiny-dense, small, small-dense, tiny-e64" \
    --config huge
expect_usage "--steps 0" "--steps expects a whole number" --steps 0
expect_usage "--steps abc" "--steps expects a whole number" --steps abc
expect_usage "--warmup -1" "--warmup expects a whole number" --warmup -1
expect_usage "--threads x" "--threads expects a whole number" --threads x
expect_usage "--rounds 0" "--rounds expects a whole number" --rounds 0
expect_usage "--rounds 51" "--rounds expects a whole number" --rounds 51
expect_usage "--config without a value" "--config needs a value" --config
expect_usage "unwritable --profile-out" "cannot write the profile CSV" --config test \
    --profile-out "$tmp/no/such/dir/p.csv"
# the GPU-sized configs are valid settings (checked before the CSV is opened, nothing runs)
expect_usage "gpu-medium and its dense twin are valid configs" "cannot write the profile CSV" \
    --config gpu-medium --config gpu-medium-dense --profile --profile-out "$tmp/no/such/dir/p.csv"

finish
