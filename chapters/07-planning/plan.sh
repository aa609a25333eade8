#!/usr/bin/env bash
# Chapter 7: planning a run at scale. Every number of the chapter, from `moe plan`.
#
#   bash chapters/07-planning/plan.sh            # writes plots/07-planning/
#   bash chapters/07-planning/plan.sh --check    # writes them to a scratch folder and compares
#                                                # every planned file with the committed one
#   MOE_BIN=path/to/moe bash chapters/07-planning/plan.sh
#
# Nothing here trains: the planner is arithmetic, so every file but the measured one
# (machine.csv, this machine's moe bench against the plan) is the same on any machine, and
# --check (tests/test_plan_chapter.sh) proves the committed files are what the planner says now.
# Writes, in plots/07-planning/:
#   presets.csv      every preset: the published parameter counts and what plan_count makes of
#                    the shapes; a run's published results
#   counts.csv       the models' counts in billions against the published ones, and whether they
#                    agree (within one unit of the published figure's last digit)
#   runs.csv         each published run's layout as moe plan costs it (one row a run)
#   validation.csv   each published result against the prediction: run:quantity, run, quantity, published,
#                    predicted, predicted / published, and for speeds the efficiency of the
#                    products that would have made the prediction exact
#   layouts.csv      Qwen3-235B on 256 H100: the four layouts measured side by side and the
#                    planner's four best, costed (the figure layouts.png)
#   ep.csv           Qwen3-235B on 256 H100 at tp 2, pp 8, vpp 4: the expert-parallel size from 1
#                    to 32 (ep.png: memory falls, the exchange leaves the node)
#   ladder.csv       from this book's laptop model to a 1T-class model on 384 GH200: the best
#                    layout of each step up
#   search.txt, deepseek.txt, jupiter.txt   three searches as the reader sees them (deepseek.txt:
#                    with the exchange hidden and node-limited routing, as DeepSeek-V3 ran)
#   deepseek_pp.csv  deepseek.txt's search at each pp from 1 to 16, with its bytes (default-ppN)
#                    and with those of the run preset (run-ppN): why the two pick different pp
#   walk.txt         chapters/07-planning/walk.c: DeepSeek-V3's run worked out term by term
#   counts.md, validation.md, ladder.md   the handbook's tables
#   machine.csv      this machine: moe bench's measured step and sgemm, and the plan's step at
#                    that sgemm (measured, so not compared by --check)
#   provenance.txt   the commit and the command
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/07-planning
out=plots/07-planning
# the tree the numbers come from (its own output folder aside, which this script rewrites)
commit=$(git rev-parse --short=12 HEAD 2> /dev/null || echo unknown)
git diff --quiet HEAD -- . ":(exclude)$out" 2> /dev/null || commit=$commit-dirty
check=0
case "${1:-}" in
    --check) check=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
if [ -z "${MOE_BIN:-}" ]; then
    make --no-print-directory build/moe build/chapters/07-planning/walk > /dev/null
    moe=build/moe
else
    moe=$MOE_BIN
    [ -x "$moe" ] || { echo "MOE_BIN=$moe is not an executable" >&2; exit 2; }
fi
walk=$(dirname "$moe")/chapters/07-planning/walk # built beside the moe it was given
[ -x "$walk" ] || { echo "no $walk: make chapters builds it" >&2; exit 2; }
dest=$out
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ch07.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
[ "$check" = 1 ] && dest=$tmp/out
mkdir -p "$dest"

# plan ARGS...: moe plan's CSV rows (exit 1, "does not fit", is a result here, not an error)
plan() { "$moe" plan "$@" --csv-rows || [ $? -eq 1 ]; }
header() { "$moe" plan --run deepseek-v3 --csv | head -n 1; }

# ---- the presets and the published runs ---------------------------------------------------
"$moe" plan --presets --csv > "$dest/presets.csv"
# counts.csv: each model's published counts against plan_count's, in billions; agrees: within
# one unit of the published figure's last digit (the active count as the publisher counts it)
# (round_to for the total; the active's own last digit when finer, as tests/test_plan.c checks)
awk -F, 'function unit(x, u) { # the last digit of a published figure: 32e9 -> 1e9, 12.9e9 -> 1e8
    for (u = 10 ^ (int(log(x) / log(10)) + 1); u > 1 && x % u != 0; u /= 10);
    return u
}
NR > 1 && $1 == "model" {
    act = $6 ? $10 : $9
    au = unit($4) < $5 ? unit($4) : $5
    ok = ($8 - $3 < $5 && $3 - $8 < $5 && act - $4 < au && $4 - act < au)
    if (!hdr++) print "model,total_b,active_b,active_embed_b,published_total_b,published_active_b,active_counts_embedding,agrees"
    printf "%s,%.2f,%.2f,%.2f,%g,%g,%s,%s\n", $2, $8 / 1e9, $9 / 1e9, $10 / 1e9, $3 / 1e9, $4 / 1e9,
        $6 ? "yes" : "no", ok ? "yes" : "no"
}' "$dest/presets.csv" > "$dest/counts.csv"
runs=$(awk -F, '$1 == "run" { print $2 }' "$dest/presets.csv")
{
    echo "run,$(header)"
    for r in $runs; do plan --run "$r" | sed "s/^/$r,/"; done
} > "$dest/runs.csv"

# validation.csv: the published results (presets.csv) against the plans (runs.csv); speeds are
# compared as throughput, so "ratio" above 1 means the plan is optimistic, and implied_eff is
# the products' efficiency (the presets assume 0.7) that would have made it exact
awk -F, '
    FNR == 1 { for (i = 1; i <= NF; i++) col[FILENAME, $i] = i; next }
    FILENAME ~ /presets/ && $1 == "run" {
        name[++n] = $2
        pub[$2, "tokens_gpu"] = $(col[FILENAME, "tokens_gpu"])
        pub[$2, "tflops_gpu"] = $(col[FILENAME, "tflops_gpu"])
        pub[$2, "step_s"] = $(col[FILENAME, "step_s"])
        pub[$2, "states_gb"] = $(col[FILENAME, "states_gb"])
        next
    }
    FILENAME ~ /runs/ {
        r = $1
        got[r, "tokens_gpu"] = $(col[FILENAME, "tokens_per_s_gpu"])
        got[r, "tflops_gpu"] = $(col[FILENAME, "tflops_gpu"])
        got[r, "step_s"] = $(col[FILENAME, "step_s"])
        got[r, "states_gb"] = $(col[FILENAME, "mem_weights_gb"]) + $(col[FILENAME, "mem_grads_gb"])
        fits[r] = $(col[FILENAME, "fits"])
        mem[r] = $(col[FILENAME, "mem_total_gb"])
    }
    END {
        print "key,run,quantity,published,predicted,ratio,implied_eff,fits,mem_total_gb"
        split("tokens_gpu tflops_gpu step_s states_gb", q, " ")
        for (i = 1; i <= n; i++)
            for (j = 1; j <= 4; j++) {
                r = name[i]; k = q[j]
                if (pub[r, k] + 0 == 0) continue
                ratio = (k == "step_s") ? pub[r, k] / got[r, k] : got[r, k] / pub[r, k]
                eff = (k == "states_gb") ? "" : sprintf("%.3f", 0.7 / ratio)
                printf "%s:%s,%s,%s,%g,%.4g,%.3f,%s,%d,%.1f\n", r, k, r, k, pub[r, k], got[r, k],
                    ratio, eff, fits[r], mem[r]
            }
    }' "$dest/presets.csv" "$dest/runs.csv" > "$dest/validation.csv"

# ---- Qwen3-235B on 256 H100: the measured layouts and the planner's best ------------------
qwen=(--model qwen3-235b-a22b --cluster h100 --gpus 256 --set train.global_batch=2048)
"$moe" plan "${qwen[@]}" --search --top 12 > "$dest/search.txt" || [ $? -eq 1 ]
{
    echo "label,published_step_s,$(header)"
    for r in qwen3-235b-ep32 qwen3-235b-fsdp qwen3-235b-pp32 qwen3-235b-tp4; do
        s=$(awk -F, -v r="$r" '$2 == r { print $13 }' "$dest/presets.csv")
        plan --run "$r" | sed "s/^/${r#qwen3-235b-},$s,/"
    done
    plan "${qwen[@]}" --search --top 4 | awk '{ printf "best-%d,,%s\n", NR, $0 }'
} > "$dest/layouts.csv"
{
    echo "ep_size,$(header)"
    for ep in 1 2 4 8 16 32; do
        plan "${qwen[@]}" --set layout.tp=2 --set layout.pp=8 --set layout.vpp=4 \
            --set layout.ep="$ep" --set layout.recompute=selective | sed "s/^/$ep,/"
    done
} > "$dest/ep.csv"

# ---- the ladder: from this book's model on a laptop to a 1T-class model on JUPITER --------
printf '' > "$tmp/default.conf" # the defaults: chapter 0's model
printf 'dist.ep=4\n' > "$tmp/ep4.conf"
{
    echo "step,what,$(header)"
    plan --config "$tmp/default.conf" --cluster laptop | sed 's/^/1,this book'"'"'s model on a laptop,/'
    plan --config "$tmp/ep4.conf" --cluster laptop --gpus 4 |
        sed 's/^/2,the same in 4 processes (ep 4),/'
    plan --model olmoe-1b-7b --cluster h100 --gpus 8 --set train.global_batch=1024 --search --top 1 |
        sed 's/^/3,OLMoE-1B-7B on one H100 node,/'
    plan --model mixtral-8x7b --cluster h100 --gpus 64 --set train.global_batch=256 --search --top 1 |
        sed 's/^/4,Mixtral 8x7B on 8 nodes,/'
    plan "${qwen[@]}" --search --top 1 | sed 's/^/5,Qwen3-235B on 32 nodes,/'
    plan --model deepseek-v3 --cluster h800 --gpus 2048 --set train.global_batch=15360 \
        --search --top 1 | sed 's/^/6,DeepSeek-V3 on 256 nodes,/'
    plan --model kimi-k2 --cluster gh200 --gpus 384 --set train.global_batch=1536 \
        --search --top 1 | sed 's/^/7,a 1T-class MoE on 96 JUPITER nodes,/'
} > "$dest/ladder.csv"
dsv3=(--model deepseek-v3 --cluster h800 --gpus 2048 --set train.global_batch=15360
    --set train.overlap_ep=1 --set train.node_limit=4)
"$moe" plan "${dsv3[@]}" --search --top 6 > "$dest/deepseek.txt" || [ $? -eq 1 ]
# the same search one pipeline depth at a time, with deepseek.txt's bytes (the mixed engine's)
# and with the run preset's (--run deepseek-v3: FP8 cached activations, BF16 moments, FP8
# dispatch; otherwise the same model, machine, batch, overlap and routing)
{
    echo "key,$(header)"
    for pp in 1 2 4 8 16; do
        plan "${dsv3[@]}" --set layout.pp="$pp" --search --top 1 | sed "s/^/default-pp$pp,/"
        plan --run deepseek-v3 --set layout.pp="$pp" --search --top 1 | sed "s/^/run-pp$pp,/"
    done
} > "$dest/deepseek_pp.csv"
"$moe" plan --model kimi-k2 --cluster gh200 --gpus 384 --set train.global_batch=1536 --search \
    --top 8 > "$dest/jupiter.txt" || [ $? -eq 1 ]

# ---- the handbook's tables, from the CSV files above --------------------------------------
awk -F, 'NR > 1 {
    if (!hdr++) {
        print "| model | total (B) | active (B) | active with the embedding (B) | published total | published active | the published active counts the embedding | agrees |"
        print "| --- | --- | --- | --- | --- | --- | --- | --- |"
    }
    printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8
}' "$dest/counts.csv" > "$dest/counts.md"
awk -F, 'BEGIN {
    name["tokens_gpu"] = "tokens/s a GPU"; name["tflops_gpu"] = "TFLOP/s a GPU"
    name["step_s"] = "seconds a step"; name["states_gb"] = "GB of weights and gradients a GPU"
}
NR > 1 {
    $3 = name[$3]
    if (!hdr++) {
        print "| run | quantity | published | planned | ratio | implied efficiency | planned memory, GB |"
        print "| --- | --- | --- | --- | --- | --- | --- |"
    }
    printf "| %s | %s | %s | %s | %s | %s | %s%s |\n", $2, $3, $4, $5, $6, ($7 == "" ? "-" : $7), $9,
        ($8 == 1 ? "" : " (does not fit)")
}' "$dest/validation.csv" > "$dest/validation.md"
awk -F, 'FNR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
{
    if (!hdr++) {
        print "| step | what | GPUs | tp | pp | vpp | ep | dp | micro-batch | recompute | memory, GB | step, s | tokens/s a GPU | MFU % |"
        print "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    }
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.3g | %.3g | %.4g | %.1f |\n", $1, $2,
        $c["gpus"], $c["tp"], $c["pp"], $c["vpp"], $c["ep"], $c["dp"], $c["micro_batch"],
        $c["recompute"], $c["mem_total_gb"], $c["step_s"], $c["tokens_per_s_gpu"], 100 * $c["mfu"]
}' "$dest/ladder.csv" > "$dest/ladder.md"
"$walk" > "$dest/walk.txt"

if [ "$check" = 1 ]; then
    status=0
    for f in presets.csv counts.csv counts.md runs.csv validation.csv validation.md layouts.csv \
        ep.csv ladder.csv ladder.md search.txt deepseek.txt deepseek_pp.csv jupiter.txt walk.txt; do
        if ! cmp -s "$dest/$f" "$out/$f"; then
            echo "plots/07-planning/$f differs from what moe plan gives now:"
            diff "$out/$f" "$dest/$f" | head -n 10
            status=1
        fi
    done
    [ "$status" = 0 ] && echo "plots/07-planning: every planned file is what moe plan gives now"
    exit "$status"
fi

# ---- this machine: the compute term against a measured step ------------------------------
# moe bench measures the step and the sgemm it reaches; the plan at that sgemm (efficiency 1)
# is the time the products alone would take, so the ratio is the share of the step that is
# products on this CPU (handbook chapter 0, "Where the time goes")
bench=$("$moe" bench --config tiny --steps 5 --warmup 2 --json)
printf 'model.d_model=256\nmodel.n_layer=4\nmodel.n_head=4\nmodel.d_ff=1024\nmoe.num_experts=8\nmoe.d_expert=512\ntrain.batch=8\nmodel.seq_len=256\n' > "$tmp/tiny.conf"
gflops=$(printf '%s\n' "$bench" | awk -F'"gflops": ' '/"sgemm"/ { split($2, a, /[,}]/); print a[1]; exit }')
step=$(printf '%s\n' "$bench" | awk -F'"step_ms": ' 'NF > 1 { split($2, a, /[,}]/); print a[1] / 1000; exit }')
[ -n "$gflops" ] && [ -n "$step" ] || { echo "moe bench --json gave no sgemm gflops or step_ms" >&2; exit 1; }
planned=$(plan --config "$tmp/tiny.conf" --cluster laptop \
    --set cluster.peak_fp32_tflops="$(awk -v g="$gflops" 'BEGIN { print g / 1000 }')" \
    --set cluster.efficiency=1 | awk -F, '{ print $35 }')
{
    echo "config,sgemm_gflops,measured_step_s,planned_step_s,products_share"
    awk -v g="$gflops" -v m="$step" -v p="$planned" \
        'BEGIN { printf "tiny,%.4g,%.4g,%.4g,%.3f\n", g, m, p, p / m }'
} > "$dest/machine.csv"

# ---- figures ------------------------------------------------------------------------------
if command -v gnuplot > /dev/null; then
    gnuplot -e "data='$dest/layouts.csv'; out='$dest/layouts.png'" "$here/layouts.gp"
    gnuplot -e "data='$dest/ep.csv'; out='$dest/ep.png'" "$here/ep.gp"
else
    echo "no gnuplot: the figures are not drawn (make deps installs it)" >&2
fi
{
    echo "# plots/07-planning, written by chapters/07-planning/plan.sh"
    echo "commit = $commit"
    echo "machine.csv: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
} > "$dest/provenance.txt"
echo "wrote $dest: $(cd "$dest" && ls | tr '\n' ' ')"
