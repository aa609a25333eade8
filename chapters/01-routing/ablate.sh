#!/usr/bin/env bash
# Chapter 1: the same model trained under every routing and balancing method.
#
#   bash chapters/01-routing/ablate.sh            # 600 steps per variant (the handbook's numbers)
#   bash chapters/01-routing/ablate.sh --quick    # 100 steps per variant, a few minutes
#   bash chapters/01-routing/ablate.sh --summarize [--quick]   # only redo tables and figures
#   MOE_BIN=path/to/moe bash chapters/01-routing/ablate.sh      # with another build of moe
#
# Every variant is the default MoE of chapter 0 (4 blocks of width 128, 8 experts of hidden 256,
# top-2, batch 16 x 128 bytes of the six-domain corpus, same seed and steps) with a few settings
# changed, listed in VARIANTS below. Writes runs/ch01-NAME[-quick]/ and, in
# chapters/01-routing/results[-quick]/: summary.csv, summary.md, val_loss.png, balance.png,
# and each variant's load heatmap and domain heatmap.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/01-routing

# name | settings (--set key=value ...) | what it shows
VARIANTS=(
  "none|moe.balance=none moe.z_coef=0|no balancing at all"
  "aux-1e-2|moe.balance=aux moe.aux_coef=1e-2|Switch aux loss, alpha 1e-2"
  "aux-1e-3|moe.balance=aux moe.aux_coef=1e-3|Switch aux loss, alpha 1e-3"
  "seq-aux|moe.balance=seq_aux moe.aux_coef=1e-3|sequence-wise aux loss (DeepSeek-V3), alpha 1e-3"
  "aux-free|moe.balance=aux_free moe.bias_rate=1e-3|aux-loss-free bias, softmax scores"
  "aux-free-sigmoid|moe.balance=aux_free moe.bias_rate=1e-3 moe.score=sigmoid|aux-loss-free bias, sigmoid scores"
  "aux-free-1e-2|moe.balance=aux_free moe.bias_rate=1e-2|aux-loss-free bias, 10x the bias rate"
  "aux-free-sigmoid-1e-2|moe.balance=aux_free moe.bias_rate=1e-2 moe.score=sigmoid|aux-loss-free bias, sigmoid scores, 10x the bias rate"
  "z-off|moe.balance=aux moe.aux_coef=1e-2 moe.z_coef=0|aux 1e-2 without the z-loss"
  "shared-fine|moe.balance=aux moe.aux_coef=1e-2 moe.num_experts=16 moe.top_k=3 moe.d_expert=128 moe.num_shared=1|1 shared + 16 fine-grained experts, top-3"
)

steps=600
suffix=""
summarize_only=0
for arg in "$@"; do
  case "$arg" in
    --quick) steps=100; suffix="-quick" ;;
    --summarize) summarize_only=1 ;;
    *) echo "usage: $0 [--quick] [--summarize]" >&2; exit 2 ;;
  esac
done
make --no-print-directory build/moe data/corpus/train.bin >/dev/null
moe=${MOE_BIN:-build/moe} # another binary (e.g. a copy, while the tree is rebuilt)
out=$here/results$suffix
mkdir -p "$out"

names=()
for v in "${VARIANTS[@]}"; do
  IFS='|' read -r name settings what <<<"$v"
  names+=("$name")
  dir=runs/ch01-$name$suffix
  if [ "$summarize_only" = 0 ]; then
    sets=()
    for kv in $settings; do sets+=(--set "$kv"); done
    rm -rf "$dir"
    echo "== $name: $what"
    "$moe" train --out "$dir" --quiet --set train.steps=$steps \
      --set train.eval_every=$((steps / 6)) "${sets[@]}"
    bash plots/plot_run.sh "$dir" >/dev/null
  fi
done

# ---- summary: one row per variant ----------------------------------------------------------
# final val loss; MaxVio and CV averaged over the MoE blocks and the last 20% of the steps
# (router.csv); dropped fraction (router.csv); median tokens/s (train.csv)
{
  echo "variant,val_loss,maxvio,cv,drop_frac,tok_per_s,settings"
  for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name settings what <<<"$v"
    dir=runs/ch01-$name$suffix
    val=$(awk -F, 'NR > 1 && $8 != "" { v = $8 } END { printf "%.4f", v }' "$dir/train.csv")
    tok=$(awk -F, 'NR > 1 { print $7 }' "$dir/train.csv" | sort -n |
          awk '{ a[NR] = $1 } END { printf "%.0f", a[int((NR + 1) / 2)] }')
    read -r maxvio cv drop < <(awk -F, -v from=$((steps * 4 / 5)) '
      NR > 1 && $1 > from { m += $3; c += $4; d += $6; n++ }
      END { printf "%.3f %.3f %.4f\n", m / n, c / n, d / n }' "$dir/router.csv")
    echo "$name,$val,$maxvio,$cv,$drop,$tok,$settings"
  done
} > "$out/summary.csv"

{
  echo "| variant | settings | val loss | MaxVio | CV | dropped | tokens/s |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { printf "| %s | `%s` | %s | %s | %s | %s | %s |\n", $1, $7, $2, $3, $4, $5, $6 }' \
    "$out/summary.csv"
  echo
  echo "MaxVio and CV: mean over the MoE blocks and the last 20% of the $steps steps (router.csv)."
  echo "Machine: $(awk -F'= ' '/^cpu/ {print $2; exit}' runs/ch01-none$suffix/provenance.txt), commit $(awk -F'= ' '/^commit/ {print $2; exit}' runs/ch01-none$suffix/provenance.txt)."
} > "$out/summary.md"

# ---- figures -------------------------------------------------------------------------------
# per-variant series for gnuplot: validation loss, and MaxVio / CV averaged over blocks
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
for name in "${names[@]}"; do
  dir=runs/ch01-$name$suffix
  awk -F, 'NR > 1 && $8 != "" { print $1, $8 }' "$dir/train.csv" > "$data/$name.val"
  awk -F, 'NR > 1 { m[$1] += $3; c[$1] += $4; n[$1]++ }
           END { for (s in m) print s, m[s] / n[s], c[s] / n[s] }' "$dir/router.csv" |
    sort -n > "$data/$name.bal"
  cp "$dir/load_heatmap.png" "$out/load_$name.png"
  cp "$dir/domains.png" "$out/domains_$name.png"
done
gnuplot -e "dir='$data'; names='${names[*]}'; out='$out/val_loss.png'" $here/val_loss.gp
gnuplot -e "dir='$data'; names='${names[*]}'; out='$out/balance.png'; steps=$steps" $here/balance.gp
cat "$out/summary.md"
echo "wrote $out/: summary.csv summary.md val_loss.png balance.png load_*.png domains_*.png"
