#!/usr/bin/env bash
# Chapter 2: what a fixed expert buffer costs in time, measured side by side.
#
#   bash chapters/02-capacity/speed.sh            # the handbook's numbers (about 5 minutes)
#   bash chapters/02-capacity/speed.sh --smoke    # the same for a tiny model (the test)
#   MOE_BIN=path/to/moe bash chapters/02-capacity/speed.sh
#
# The ablation (ablate.sh) trains its variants one after another, so their tokens/s compare
# only if nothing else ran on the machine for the whole hour. This script measures just the
# speed, the way the handbook's speed claims must be measured: the chapter's model with the aux
# loss, padded capacity factors 0.5, 1, 1.25 and 2 (keep by position) and dropless, each trained
# for a few steps (no evaluation, no checkpoint), the five interleaved over ROUNDS rounds, so
# that a disturbance of the machine hits every variant alike. A variant's speed is the median
# over rounds of each round's median tokens/s (the steps after the first STEPS / 3, which warm
# up). Writes plots/02-capacity[-smoke]/speed.csv (variant, factor, then one column per round
# and the median) and speed.md, with the machine and the commit.
set -euo pipefail
cd "$(dirname "$0")/../.."
. chapters/lib.sh
usage_text="[--smoke]"
mode=full
case "${1:-}" in
  "") ;;
  --smoke) mode=smoke ;;
  -h | --help) ablate_usage ;;
  *) echo "$0: unknown option '$1'" >&2; ablate_usage ;;
esac
[ $# -le 1 ] || { echo "$0: one option at most" >&2; ablate_usage; }
suffix=""; [ "$mode" = full ] || suffix=-$mode
extra_sets
steps=$([ "$mode" = full ] && echo 30 || echo 6)
ROUNDS=3
sets=()
if [ "$mode" = smoke ]; then
  sets=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
        --set model.d_ff=64 --set moe.d_expert=32 --set train.batch=4)
fi
ablate_build
out=plots/02-capacity$suffix
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name | settings
VARIANTS=("dropless|moe.capacity_factor=0")
for f in 0.5 1.0 1.25 2.0; do VARIANTS+=("cf$f|moe.capacity_factor=$f moe.drop_policy=position moe.padded=1"); done

# median tokens/s of one short run's steps after the warm-up third
measure() { # NAME SETTINGS ROUND
  local dir=$tmp/$1-$3 kv s=()
  for kv in $2; do s+=(--set "$kv"); done
  "$moe" train --out "$dir" --quiet "${sets[@]}" --set moe.balance=aux --set train.steps=$steps \
    --set train.warmup=$((steps / 3)) --set train.eval_every=0 --set train.ckpt_every=0 "${s[@]}" \
    "${EXTRA_SETS[@]}" > /dev/null
  awk -F, -v skip=$((steps / 3)) 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "tok_per_s") c = i; next }
    $1 > skip { print $c }' "$dir/train.csv" | sort -n | awk '{ a[NR] = $1 } END { printf "%.0f", a[int((NR + 1) / 2)] }'
  [ -f "$tmp/provenance.txt" ] || cp "$dir/provenance.txt" "$tmp/provenance.txt"
  rm -rf "$dir"
}

declare -A tok
for r in $(seq 1 $ROUNDS); do
  for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name settings <<<"$v"
    echo "== round $r: $name" >&2
    tok[$name,$r]=$(measure "$name" "$settings" "$r")
  done
done

{
  printf "variant,factor"; for r in $(seq 1 $ROUNDS); do printf ",round%d" "$r"; done; echo ",tok_per_s"
  for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name settings <<<"$v"
    f=$(sed -n 's/.*moe.capacity_factor=\([0-9.]*\).*/\1/p' <<<"$settings")
    printf "%s,%s" "$name" "$f"
    vals=()
    for r in $(seq 1 $ROUNDS); do printf ",%s" "${tok[$name,$r]}"; vals+=("${tok[$name,$r]}"); done
    printf ",%s\n" "$(printf '%s\n' "${vals[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')"
  done
} > "$out/speed.csv"

# the machine and build, as the runs' provenance.txt recorded them
commit=$(prov "$tmp" commit)
cpu=$(prov "$tmp" cpu)
threads=$(prov "$tmp" threads)
{
  echo "| variant | factor | tokens/s (median of $ROUNDS rounds) |"
  echo "| --- | ---: | ---: |"
  awk -F, 'NR > 1 { printf "| %s | %s | %s |\n", $1, ($2 == 0 ? "dropless" : $2), $NF }' "$out/speed.csv"
  echo
  echo "Side by side: the five variants interleaved over $ROUNDS rounds of $steps steps each (aux loss, keep by position, capacity runs padded); per variant the median over rounds of each round's median tokens/s after the first $((steps / 3)) steps. Machine: $cpu, $threads threads; built from commit $commit."
  extra_note
} > "$out/speed.md"
cat "$out/speed.md"
echo "wrote $out/: speed.csv speed.md"
