#!/usr/bin/env bash
# plots/hf/compare.sh: moe.c's Hugging Face export and import checked against transformers
# itself, on the same weights and tokens (src/REFERENCE.md, "The Hugging Face layout").
#
#   make hf-compare                        # installs torch and transformers into build/venv-torch
#                                          # (a developer tool, never a dependency), then runs this
#   PYTHON=path/to/python bash plots/hf/compare.sh   # a python that has torch and transformers
#
# Two cases a family (mixtral, qwen3_moe, olmoe, deepseek_v3, llama), each one CSV row of
# plots/hf/compare.csv:
#   moe-to-hf-FAMILY   a model of the family's settings trained here for a few steps, exported
#       with moe export --format hf and loaded by transformers; its logits and loss on the first
#       validation batch against moe eval --logits of the same checkpoint; and the exported
#       tokenizer turns text into its bytes and back;
#   hf-to-moe-FAMILY   a small random model made by transformers, saved with save_pretrained,
#       imported with moe import --format hf; moe eval --logits of the import against
#       transformers on those tokens.
# Columns: the largest absolute and relative (to |logit|, floored at 1e-3) logit differences,
# the relative norm of the difference, both losses and their relative difference. Both sides
# compute in fp32 (transformers with its eager attention); the differences are summation order.
# Writes plots/hf/compare.csv, compare.md (the table, versions, machine, commit).
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-build/venv-torch/bin/python}
"$python" -c 'import torch, transformers' 2> /dev/null || {
    echo "compare.sh: $python has no torch and transformers: run make hf-compare" >&2
    exit 2
}
make --no-print-directory build/moe data/corpus/train.bin > /dev/null
moe=build/moe
out=plots/hf
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hf_compare.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
commit=$(git rev-parse --short=12 HEAD 2> /dev/null || echo unknown)
git diff --quiet HEAD -- . ":(exclude)$out" 2> /dev/null || commit=$commit-dirty

rows=()
# the settings each family's model is trained with here
declare -A settings=(
    [mixtral]="--set moe.num_experts=8"
    [qwen3_moe]="--set model.qk_norm=head --set model.kv_heads=2 --set model.head_dim=48
                 --set moe.first_dense=1 --set moe.norm_topk=0"
    [olmoe]="--set model.qk_norm=full --set model.kv_heads=2"
    [deepseek_v3]="--set model.attention=mla --set mla.q_rank=48 --set mla.kv_rank=32
                   --set mla.rope_dim=16 --set mla.nope_dim=16 --set mla.v_dim=32
                   --set moe.score=sigmoid --set moe.balance=aux_free --set moe.num_shared=1
                   --set moe.n_group=4 --set moe.topk_group=2 --set moe.route_scale=2.5
                   --set moe.first_dense=1"
    [llama]="--set moe.num_experts=0"
)
for kind in mixtral qwen3_moe olmoe deepseek_v3 llama; do
    # shellcheck disable=SC2086 # the settings are words
    "$moe" train --out "$tmp/run-$kind" ${settings[$kind]} --set train.steps=60 \
        --set train.warmup=5 --set train.eval_every=60 --quiet > /dev/null
    "$moe" export --ckpt "$tmp/run-$kind/ckpt.bin" --format hf --out "$tmp/hf-$kind" > /dev/null
    "$moe" eval --ckpt "$tmp/run-$kind/ckpt.bin" --batches 1 --set train.batch=4 \
        --logits "$tmp/logits-$kind.st" > /dev/null
    rows+=("$("$python" plots/hf/compare.py load "$tmp/hf-$kind" "$tmp/logits-$kind.st" \
        "moe-to-hf-$kind")")

    "$python" plots/hf/compare.py make "$tmp/made-$kind" "$kind"
    "$moe" import --format hf --from "$tmp/made-$kind" --out "$tmp/import-$kind.bin" > /dev/null \
        2> "$tmp/import-$kind.err" || { cat "$tmp/import-$kind.err" >&2; exit 2; }
    "$moe" eval --ckpt "$tmp/import-$kind.bin" --batches 1 --set train.batch=4 \
        --logits "$tmp/logits-made-$kind.st" > /dev/null
    rows+=("$("$python" plots/hf/compare.py check "$tmp/made-$kind" "$tmp/logits-made-$kind.st" \
        "hf-to-moe-$kind")")
done

{
    echo "case,max_abs_diff,max_rel_diff,rel_norm,moe_loss,hf_loss,loss_rel_diff,tokenizer_bytes"
    printf '%s\n' "${rows[@]}"
} > "$out/compare.csv"
versions=$("$python" -c 'import torch, transformers; print("torch %s, transformers %s" % (torch.__version__, transformers.__version__))')
{
    echo "| case | largest logit difference | largest relative | relative norm | moe.c loss | transformers loss | loss, relative | tokenizer: text is its bytes |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
    awk -F, 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8 }' "$out/compare.csv"
    echo
    echo "$versions; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); commit $commit"
} > "$out/compare.md"
cat "$out/compare.md"
