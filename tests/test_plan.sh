#!/usr/bin/env bash
# test_plan.sh: `moe plan` end to end (run by `make test` with MOE_BIN set; the cost model's
# formulas are tests/test_plan.c's).
#
#   1. --help and `moe help plan` list every option; --keys lists the keys (model.norm, not
#      the former model.post_norm; model.tied), the model keys the engine has with the help of
#      its own rows (moe info --keys); --presets lists every preset of
#      src/plan/plan_presets.c, no more, no fewer
#   2. every run preset plans a layout that fits (exit 0, "fits") but the two the handbook says
#      do not (beyond_memory below: exit 1, "DOES NOT FIT"); its --json parses and has
#      params.total, layouts[0].mem_total, step_s and mfu, and says fits as the exit status does
#   3. a layout that does not fit (DeepSeek-V3 on 8 H100): exit 1, "DOES NOT FIT"
#   4. mistakes exit 2 with a message naming them and nothing on stdout: an unknown option,
#      an unknown model, cluster or run preset (the message lists the presets of that kind),
#      an unknown --set key (the nearest suggested), no model, --search or --csv without a
#      cluster, a cluster given in part, a missing --config, --config with --model, a layout
#      that cannot run (tp 3 of 32 heads), --top 0; a count above the planner's bound (GPUs,
#      batch, tp: the key and the bound named) or a model key above the engine's (layers,
#      width: the engine's message), the former name model.post_norm (the new one named), a
#      byte size of 0, a cluster.* key of 0 on a run (its reason said); at the bounds, a plan
#      with no negative number
#   4b. a model without a cluster or a batch: exit 0, its parameters in all, a token's and by
#      part (adding up to the total), the weights' memory at train.weight_bytes, what to add;
#      --json: params, weights_bytes, no layout
#   5. --search: a ranking with "(best)" and the reasons the others are "slower"; with
#      --set layout.pp=1 --json, only layouts of pp 1
#   6. chapter 3: the default config with dist.ep = 2 on 2 processes (and 4 on 4), as
#      chapters/03-expert-parallel/ablate.sh trained them, plans exactly the cost model's
#      bytes of plots/03-expert-parallel/summary.csv and within 1 % of the measured mean
#   7. moe bench's analytical memory: bench's tiny config, written as a config file, plans
#      weights, gradients and optimizer of exactly 4 x bench's params, grads and adam floats,
#      and activations of exactly 4 x its activations + scratch + integer words plus the
#      arena's alignment padding (pad_bytes): the same bytes to the byte; with model.tied = 1,
#      256 x d_model parameters fewer (no head) in the count and in the weights' bytes alike

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=2
presets_c=src/plan/plan_presets.c
# the run presets the planner says do not fit, as handbook chapter 7 states (its validation
# table and "Where it does not, and why"): Kimi K2 on 256 GPUs offloads optimizer state and
# activations to the host, which the planner does not model (the preset is there for the
# weights and gradients a GPU); Qwen3-235B's 32-stage pipeline (96 virtual stages for 94
# layers) plans 80.6 GB. A change that makes either fit must change the chapter too.
beyond_memory=" kimi-k2 qwen3-235b-pp32 "

if ! command -v python3 > /dev/null 2>&1; then
    bad "python3 is needed to read the JSON of moe plan and moe bench"
    finish
    exit
fi
# jget FILE EXPR: print EXPR of the JSON object j read from FILE (python3); fails on an error
jget() { python3 -c "import json, sys; j = json.load(open(sys.argv[1])); print($2)" "$1"; }

echo "test_plan: help, keys, presets"
"$moe" plan --help > "$tmp/help" 2> "$tmp/err"
rc=$?
"$moe" help plan > "$tmp/help2" 2>> "$tmp/err"
rc2=$?
missing=""
for o in --run --model --config --cluster --gpus --set --search --top --json --keys --presets --help; do
    grep -q -- "^  $o\b" "$tmp/help" && grep -q -- "^  $o\b" "$tmp/help2" || missing="$missing $o"
done
[ $rc = 0 ] && [ $rc2 = 0 ] && [ -z "$missing" ]
check "--help and moe help plan: exit 0, every option listed" $? "exit $rc, $rc2; missing:$missing"

"$moe" plan --keys > "$tmp/keys" 2> "$tmp/err"
rc=$?
missing=""
for k in model.d_model model.norm model.tied model.attention mla.kv_rank moe.num_experts moe.top_k \
         cluster.gpus train.zero train.engine layout.tp layout.pp layout.ep layout.vpp \
         layout.recompute; do
    grep -q "^$k " "$tmp/keys" || missing="$missing $k"
done
[ $rc = 0 ] && [ -z "$missing" ] && ! grep -q "^model.post_norm " "$tmp/keys"
check "--keys: exit 0, the keys listed (model.norm, not model.post_norm)" $? "exit $rc; missing:$missing"
# the model keys the engine has: the help of its own rows (moe info --keys), one name each
"$moe" info --keys > "$tmp/info_keys" 2> "$tmp/err"
differ=$(python3 - "$tmp/keys" "$tmp/info_keys" << 'PY'
import sys
plan = {l.split()[0]: l.split(None, 2)[2].strip() for l in open(sys.argv[1]) if l.strip()}
info = {l.split()[0]: l for l in open(sys.argv[2]) if l.strip()}
keys = ("model.d_model", "model.n_layer", "model.norm", "model.tied", "moe.num_experts", "moe.top_k",
        "moe.d_expert")
print(" ".join(k for k in keys if k not in plan or k not in info or plan[k] not in info[k]))
PY
)
[ -z "$differ" ]
check "--keys: the engine's model keys carry its own help (moe info --keys)" $? "differ:$differ"

# the presets the source defines: {"kind", "name", ... at the start of an entry
grep -o '{"\(model\|cluster\|run\)", "[^"]*"' "$presets_c" | sed 's/{"\([a-z]*\)", "\([^"]*\)"/\1 \2/' |
    sort > "$tmp/want_presets"
"$moe" plan --presets > "$tmp/presets" 2> "$tmp/err"
rc=$?
sed -n 's/^--\([a-z]*\) \([^:]*\):.*/\1 \2/p' "$tmp/presets" | sort > "$tmp/got_presets"
n_want=$(wc -l < "$tmp/want_presets")
[ $rc = 0 ] && [ "$n_want" -ge 10 ] && cmp -s "$tmp/want_presets" "$tmp/got_presets"
check "--presets: exit 0, the $n_want presets of $presets_c exactly" $? \
    "exit $rc; $(diff "$tmp/want_presets" "$tmp/got_presets" | tr '\n' ' ')"

echo "test_plan: every run preset"
runs=$(sed -n 's/^run //p' "$tmp/got_presets")
[ -n "$runs" ]
check "there are run presets" $? "none in --presets"
for r in $runs; do
    "$moe" plan --run "$r" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    case $beyond_memory in
        *" $r "*) want=1 word="DOES NOT FIT" ;;
        *) want=0 word=": fits" ;;
    esac
    [ $rc = $want ] && grep -q -- "$word" "$tmp/out"
    check "--run $r: exit $want, \"$word\"" $? "exit $rc: $(grep 'total.* of ' "$tmp/out") $(cat "$tmp/err")"
    "$moe" plan --run "$r" --json > "$tmp/j.json" 2> "$tmp/err"
    got=$(jget "$tmp/j.json" '"%s %s" % (j["params"]["total"] > 0 and j["layouts"][0]["mem_total"] > 0 and j["layouts"][0]["step_s"] > 0 and 0 < j["layouts"][0]["mfu"] < 1, j["layouts"][0]["fits"])' 2>&1)
    want_fits=$([ $want = 0 ] && echo True || echo False)
    [ "$got" = "True $want_fits" ]
    check "--run $r --json: parses, params.total, mem_total, step_s, mfu in (0, 1), fits $want_fits" $? "$got"
done

echo "test_plan: a layout that does not fit"
"$moe" plan --model deepseek-v3 --cluster h100 --set train.global_batch=8 > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc = 1 ] && grep -q "DOES NOT FIT" "$tmp/out"
check "DeepSeek-V3 on 8 H100: exit 1, DOES NOT FIT" $? "exit $rc: $(cat "$tmp/out" "$tmp/err")"

echo "test_plan: mistakes exit 2, nothing on stdout"
expect_2() { # WHAT PATTERN ARGS...: exit 2, PATTERN on stderr, stdout empty
    local what=$1 pat=$2 rc
    shift 2
    "$moe" plan "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    [ $rc = 2 ] && grep -q -- "$pat" "$tmp/err" && [ ! -s "$tmp/out" ]
    check "$what: exit 2, \"$pat\", no output" $? "exit $rc: $(head -c 300 "$tmp/out") $(head -3 "$tmp/err")"
}
expect_2 "an unknown option" "unknown option '--bogus'" --bogus
for kind in model cluster run; do
    other=--cluster
    [ $kind = cluster ] && other=--model
    expect_2 "an unknown $kind preset" "no $kind preset 'nosuch'; the $kind presets: " \
        --$kind nosuch $other "$([ $kind = cluster ] && echo mixtral-8x7b || echo h100)"
    missing=""
    for p in $(sed -n "s/^$kind //p" "$tmp/want_presets"); do
        grep -q "the $kind presets: .*\b$p\b" "$tmp/err" || missing="$missing $p"
    done
    [ -z "$missing" ]
    check "the unknown $kind preset's message lists every $kind preset" $? "missing:$missing"
done
expect_2 "an unknown --set key" "unknown plan key 'model.d_modle'; did you mean 'model.d_model'" \
    --model mixtral-8x7b --cluster h100 --set model.d_modle=4096
expect_2 "a --set value out of range" "train.zero must be in \[0, 3\]" \
    --model mixtral-8x7b --cluster h100 --set train.zero=5
printf 'model.d_model = 128\n' > "$tmp/c.txt"
expect_2 "a precision the cluster has no peak for" "the cluster has no fp8 peak: set cluster.peak_fp8_tflops" \
    --model olmoe-1b-7b --cluster laptop --set train.global_batch=8 --set train.precision=fp8
expect_2 "a moe.c key the config refuses" "model.d_model must be <= 65536" \
    --config "$tmp/c.txt" --cluster laptop --set model.d_model=70000
expect_2 "no model" "no model: give --model" --cluster h100
expect_2 "a model, no cluster, --search" "no cluster: give --cluster" --model mixtral-8x7b --search
expect_2 "a model and a batch, no cluster, --csv" "no cluster: give --cluster" --model mixtral-8x7b \
    --set train.global_batch=8 --csv
expect_2 "a cluster given in part" "cluster.memory_gb is not set" --model mixtral-8x7b \
    --set cluster.gpus_per_node=8 --set train.global_batch=8
# counts beyond any real cluster are refused by name and bound, never wrapped into an int
expect_2 "--gpus 2^40" "cluster.gpus must be in \[1, 1048576\], not 1099511627776" \
    --run deepseek-v3 --gpus 1099511627776 --set train.global_batch=1099511627776
expect_2 "a batch of 2^40 sequences" "train.global_batch must be in \[1, 16777216\]" \
    --run deepseek-v3 --set train.global_batch=1099511627776
expect_2 "tp 2^40" "layout.tp must be in \[1, 1048576\]" --run deepseek-v3 --set layout.tp=1099511627776
# a model key the engine has is read through the engine's row: its bound and its message, with
# or without --config
expect_2 "more layers than the engine's bound" "model.n_layer must be <= 1024" \
    --model mixtral-8x7b --set model.n_layer=5000
expect_2 "a width above the engine's bound, no --config" "model.d_model must be <= 65536" \
    --model mixtral-8x7b --set model.d_model=70000
expect_2 "model.post_norm, the planner's former name" \
    "model.post_norm is now model.norm, the engine's key: model.post_norm=1 is model.norm=sandwich" \
    --model pangu-ultra-moe --set model.post_norm=1
for k in weight_bytes grad_bytes moment_bytes act_bytes a2a_bytes; do
    expect_2 "train.$k=0" "train.$k must be in \[0.125, 16\], not 0: a stored value takes at least one bit" \
        --run deepseek-v3 --set "train.$k=0"
done
for k in memory_gb efficiency hbm_tbs intra_gbs inter_gbs; do
    expect_2 "cluster.$k=0 on a run" "cluster.$k must be more than 0" --run deepseek-v3 --set "cluster.$k=0"
done
# at the bounds every count is exact: no negative number anywhere in the plan
"$moe" plan --model mixtral-8x7b --cluster h100 --gpus 1048576 --set train.global_batch=16777216 \
    --set layout.ep=8 > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -le 1 ] && grep -q "dp 1048576 (each expert on 131072 GPUs" "$tmp/out" &&
    ! grep -Eq '(^|[ ,(])-[0-9]' "$tmp/out"
check "1048576 GPUs and 16777216 sequences: dp 1048576, nothing negative" $? \
    "exit $rc: $(grep -E 'layout|(^|[ ,(])-[0-9]' "$tmp/out") $(cat "$tmp/err")"

echo "test_plan: the counts alone, without a cluster or a batch"
"$moe" plan --model deepseek-v3 > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc = 0 ] && grep -q "^model deepseek-v3: 671.03 B parameters; active a token 37.55 B" "$tmp/out" &&
    grep -q "^  routed experts  *653.909 B  (58 layers of 256 experts" "$tmp/out" &&
    grep -q "^  total  *671.026 B" "$tmp/out" &&
    grep -q "^weights alone: 1342.05 GB at 2 bytes a parameter" "$tmp/out" &&
    grep -q "add a cluster (--cluster NAME --gpus N) and a batch (--set train.global_batch=N)" "$tmp/out"
check "--model deepseek-v3 alone: exit 0, 671.03 B, by part, 1342.05 GB of bf16 weights, what to add" $? \
    "exit $rc: $(cat "$tmp/out" "$tmp/err")"
# the parts add up to the total the planner reports
got=$(awk '/^parameters by part:/ { on = 1; next } on && $1 == "total" { t = $2; next }
    on && / B/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "B") { s += $i; break } }
    END { printf "%.3f %.3f", s, t }' "$tmp/out")
[ "$(echo "$got" | awk '{ print ($1 - $2 < 0.002 && $2 - $1 < 0.002) }')" = 1 ]
check "the parts add up to the total" $? "parts, total: $got"
"$moe" plan --model deepseek-v3 --set train.weight_bytes=1 --cluster h800 > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc = 0 ] && grep -q "^weights alone: 671.03 GB at 1 bytes a parameter" "$tmp/out" &&
    grep -q "add a batch (--set train.global_batch=N)" "$tmp/out" && ! grep -q "add a cluster" "$tmp/out"
check "--model deepseek-v3 --cluster h800 at 1 byte a weight: 671.03 GB, only the batch to add" $? \
    "exit $rc: $(cat "$tmp/out" "$tmp/err")"
"$moe" plan --model mixtral-8x7b --json > "$tmp/j.json" 2> "$tmp/err"
rc=$?
got=$(jget "$tmp/j.json" '"%s %s %d" % (46.70e9 < j["params"]["total"] < 46.71e9, abs(j["weights_bytes"] / j["params"]["total"] - 2) < 1e-9, len(j["layouts"]))' 2>&1)
[ $rc = 0 ] && [ "$got" = "True True 0" ]
check "--model mixtral-8x7b --json alone: params, weights_bytes = 2 x total, no layout" $? "exit $rc: $got"
expect_2 "--config of a missing file" "cannot open config file '$tmp/nosuch.txt'" \
    --config "$tmp/nosuch.txt" --cluster laptop
printf 'model.d_model = 128\n' > "$tmp/c.txt"
expect_2 "--config with --model" "a model preset or a moe.c config, not both" \
    --config "$tmp/c.txt" --model mixtral-8x7b --cluster laptop
expect_2 "tp 3 of Mixtral's 32 heads" "this layout cannot run: tp = 3 does not divide the 32 query" \
    --model mixtral-8x7b --cluster h100 --gpus 3 --set train.global_batch=3 --set layout.tp=3
expect_2 "--top 0" "--top needs a count from 1" --model mixtral-8x7b --cluster h100 --search --top 0
expect_2 "the moe.c engine asked for vpp 2" "the moe.c engine has tensor, pipeline, expert and data parallelism (vpp = 1" \
    --config "$tmp/c.txt" --cluster laptop --gpus 2 --set layout.pp=2 --set layout.vpp=2

echo "test_plan: --search"
search=(--model mixtral-8x7b --cluster h100 --gpus 32 --set train.global_batch=64 --search)
"$moe" plan "${search[@]}" --top 20 > "$tmp/out" 2> "$tmp/err"
rc=$?
n_slower=$(grep -c "% slower: " "$tmp/out")
[ $rc = 0 ] && grep -q "^   1 .*(best)$" "$tmp/out" && [ "$n_slower" -ge 10 ] &&
    grep -q "^the best:" "$tmp/out"
check "--search: exit 0, rank 1 (best), $n_slower others say how much slower and why" $? \
    "exit $rc: $(head -30 "$tmp/out") $(cat "$tmp/err")"
"$moe" plan "${search[@]}" --top 50 --set layout.pp=1 --json > "$tmp/s.json" 2> "$tmp/err"
rc=$?
got=$(jget "$tmp/s.json" '"%d %s" % (len(j["layouts"]), sorted(set(l["pp"] for l in j["layouts"])))' 2>&1)
[ $rc = 0 ] && [ "$got" = "50 [1]" ]
check "--search --set layout.pp=1 --json: 50 layouts, every one pp 1" $? "exit $rc: $got"
got=$(jget "$tmp/s.json" 'all(a["step_s"] <= b["step_s"] for a, b in zip(j["layouts"], j["layouts"][1:]) if a["fits"] and b["fits"])' 2>&1)
[ "$got" = True ]
check "--search --json: the layouts that fit, fastest first" $? "$got"

echo "test_plan: chapter 3's exchange bytes"
# chapters/03-expert-parallel/ablate.sh trains the default config (its MODEL_SETS and
# TRAIN_SETS are empty outside --smoke: batch 16 of 128 tokens) with dist.ep = P on P processes
summary=plots/03-expert-parallel/summary.csv
[ -f "$summary" ]
check "$summary is there" $? "make the chapter's plots (bash chapters/03-expert-parallel/ablate.sh)"
for P in 2 4; do
    printf 'dist.ep = %s\ntrain.batch = 16\nmodel.seq_len = 128\n' "$P" > "$tmp/ep$P.txt"
    "$moe" plan --config "$tmp/ep$P.txt" --cluster laptop --gpus $P --json > "$tmp/ep.json" 2> "$tmp/err"
    rc=$?
    plan=$(jget "$tmp/ep.json" '"%.0f" % j["layouts"][0]["ep_bytes"]' 2>&1)
    # the cost model's column, and the measured bytes a process sent, averaged over the ranks
    model=$(awk -F, -v r="ep$P-aux" '$1 == r { print $6; exit }' "$summary")
    measured=$(awk -F, -v r="ep$P-aux" '$1 == r { s += $5; n++ } END { if (n) printf "%.0f", s / n }' "$summary")
    [ $rc = 0 ] && [ -n "$model" ] && [ "$plan" = "$model" ]
    check "dist.ep=$P: ep_bytes is the cost model of ep$P-aux ($model)" $? "exit $rc: plan $plan $(cat "$tmp/err")"
    [ -n "$measured" ] && float_cmp "($plan / $measured - 1)^2" "<" "0.01^2"
    check "dist.ep=$P: ep_bytes within 1 % of the measured ($measured)" $? "plan $plan"
done

echo "test_plan: moe bench's analytical memory"
# bench's tiny (src/measure/bench.c, bench_config): the defaults with these shape settings,
# top-2, every block an MoE block, 8 sequences of 256
printf '%s\n' "model.d_model = 256" "model.n_layer = 4" "model.n_head = 4" "model.d_ff = 1024" \
    "moe.num_experts = 8" "moe.d_expert = 512" "moe.top_k = 2" "moe.every = 1" \
    "moe.first_dense = 0" "model.seq_len = 256" "train.batch = 8" > "$tmp/tiny.txt"
"$moe" bench --config tiny --steps 1 --warmup 0 --json > "$tmp/b.json" 2> "$tmp/err"
rc=$?
got=$(jget "$tmp/b.json" '" ".join(str(j["configs"][0][k]) for k in ("d_model", "n_layer", "n_head", "d_ff", "num_experts", "d_expert", "top_k", "seq_len", "batch"))' 2>&1)
[ $rc = 0 ] && [ "$got" = "256 4 4 1024 8 512 2 256 8" ]
check "bench's tiny is the config written here" $? "exit $rc: $got $(tail -3 "$tmp/err")"
"$moe" plan --config "$tmp/tiny.txt" --cluster laptop --json > "$tmp/p.json" 2> "$tmp/err"
check "moe plan of tiny: exit 0 (it fits in 16 GB)" $? "$(cat "$tmp/err")"
cat > "$tmp/cmp.py" << 'PY'
import json, sys
b = json.load(open(sys.argv[1]))["configs"][0]["memory_floats"]
p = json.load(open(sys.argv[2]))["layouts"][0]
bad = []
for key, field in (("params", "mem_weights"), ("grads", "mem_grads"), ("adam", "mem_optim")):
    if p[field] != 4 * b[key]:
        bad.append("%s %.0f != 4 x %s %d" % (field, p[field], key, b[key]))
acts = 4 * (b["activations"] + b["scratch"] + b["int_words"]) + b["pad_bytes"]
if p["mem_acts"] != acts:
    bad.append("activations %.0f != 4 x (activations + scratch + int_words) + pad_bytes = %d" % (p["mem_acts"], acts))
if p["mem_total"] != 4 * b["total_words"] + b["pad_bytes"]:
    bad.append("total %.0f != 4 x total_words %d + pad_bytes %d" % (p["mem_total"], b["total_words"], b["pad_bytes"]))
print("; ".join(bad) if bad else "ok")
PY
got=$(python3 "$tmp/cmp.py" "$tmp/b.json" "$tmp/p.json" 2>&1)
[ "$got" = ok ]
check "plan's moe.c memory is bench's to the byte: weights, gradients, moments, activations" $? "$got"

# model.tied (the engine's row): no head tensor, so 256 x d_model = 65536 parameters fewer, in
# the planner's count and in the engine's table it plans the memory of, alike
cp "$tmp/tiny.txt" "$tmp/tied.txt"
echo "model.tied = 1" >> "$tmp/tied.txt"
"$moe" plan --config "$tmp/tied.txt" --cluster laptop --json > "$tmp/pt.json" 2> "$tmp/err"
rc=$?
got=$(python3 - "$tmp/p.json" "$tmp/pt.json" << 'PY' 2>&1
import json, sys
u, t = (json.load(open(f)) for f in sys.argv[1:3])
d = u["params"]["total"] - t["params"]["total"]
w = t["layouts"][0]["mem_weights"]
print("ok" if d == 65536 and t["params"]["head"] == 0 and w == 4 * t["params"]["total"] and
      u["layouts"][0]["mem_weights"] - w == 4 * 65536
      else "%.0f fewer, head %.0f, weights %.0f bytes of %.0f" % (d, t["params"]["head"], w, t["params"]["total"]))
PY
)
[ $rc = 0 ] && [ "$got" = ok ]
check "--config with model.tied = 1: 65536 parameters fewer (no head), its moe.c weights 4 bytes each" $? "exit $rc: $got $(cat "$tmp/err")"

finish
