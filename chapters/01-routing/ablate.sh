#!/usr/bin/env bash
# Chapter 1: the same model trained under every routing and balancing method.
#
#   bash chapters/01-routing/ablate.sh            # 600 steps per variant (the handbook's numbers)
#   bash chapters/01-routing/ablate.sh --quick    # 100 steps per variant, a few minutes
#   bash chapters/01-routing/ablate.sh --summarize [--quick]   # only redo tables and figures
#   bash chapters/01-routing/ablate.sh --only NAME [--quick]   # (re)train one variant, then summarise
#   MOE_BIN=path/to/moe bash chapters/01-routing/ablate.sh      # with another build of moe
#
# Every variant is the default MoE of chapter 0 (4 blocks of width 128, 8 experts of hidden 256,
# top-2, batch 16 x 128 bytes of the six-domain corpus, same seed and steps) with a few settings
# changed, listed in VARIANTS below. Writes runs/ch01-NAME[-quick]/ and, in
# plots/01-routing[-quick]/ (the handbook's figures): summary.csv, summary.md, val_loss.png, balance.png,
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
  "expert-choice|moe.routing=expert_choice moe.balance=none|expert choice: each expert picks its top tokens of the batch"
  "shared-fine|moe.balance=aux moe.aux_coef=1e-2 moe.num_experts=16 moe.top_k=3 moe.d_expert=128 moe.num_shared=1|1 shared + 16 fine-grained experts, top-3"
)

steps=600
suffix=""
summarize_only=0
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) steps=100; suffix="-quick" ;;
    --summarize) summarize_only=1 ;;
    --only) only=${2:?--only needs a variant name}; shift ;;
    *) echo "usage: $0 [--quick] [--summarize] [--only NAME]" >&2; exit 2 ;;
  esac
  shift
done
make --no-print-directory build/moe data/corpus/train.bin >/dev/null
moe=${MOE_BIN:-build/moe} # another binary (e.g. a copy, while the tree is rebuilt)
out=plots/01-routing$suffix
mkdir -p "$out"

names=()
for v in "${VARIANTS[@]}"; do
  IFS='|' read -r name settings what <<<"$v"
  names+=("$name")
  dir=runs/ch01-$name$suffix
  if [ "$summarize_only" = 0 ] && { [ -z "$only" ] || [ "$only" = "$name" ]; }; then
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
# Over the last 20% of the steps, averaged over the MoE blocks (router.csv, train.csv):
# MaxVio, CV, the share of the two busiest experts (top2), the dropped fraction, the z-loss
# (mean logsumexp^2 of the router logits: how large they are); at the last evaluation: the
# validation loss and the MaxVio over the whole validation set (val_router.csv); median tokens/s.
{
  echo "variant,val_loss,val_maxvio,maxvio,cv,top2_share,drop_frac,z_loss,tok_per_s,settings"
  for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name settings what <<<"$v"
    dir=runs/ch01-$name$suffix
    from=$((steps * 4 / 5))
    val=$(awk -F, 'NR > 1 && $8 != "" { v = $8 } END { printf "%.4f", v }' "$dir/train.csv")
    z=$(awk -F, -v from=$from 'NR > 1 && $1 > from { s += $4; n++ } END { printf "%.3f", s / n }' \
        "$dir/train.csv")
    tok=$(awk -F, 'NR > 1 { print $7 }' "$dir/train.csv" | sort -n |
          awk '{ a[NR] = $1 } END { printf "%.0f", a[int((NR + 1) / 2)] }')
    read -r maxvio cv top2 drop < <(awk -F, -v from=$from '
      NR == 1 { for (i = 1; i <= NF; i++) if ($i ~ /^load_/) { if (!first) first = i; last = i } }
      NR > 1 && $1 > from {
        m += $3; c += $4; d += $6; n++
        a = 0; b = 0   # the two largest loads of this row
        for (i = first; i <= last; i++) { if ($i > a) { b = a; a = $i } else if ($i > b) b = $i }
        t += a + b }
      END { printf "%.3f %.3f %.3f %.4f\n", m / n, c / n, t / n, d / n }' "$dir/router.csv")
    vmax=$(awk -F, 'NR > 1 { if ($1 != step) { step = $1; s = 0; n = 0 } s += $3; n++ }
                    END { printf "%.3f", n ? s / n : 0 }' "$dir/val_router.csv")
    echo "$name,$val,$vmax,$maxvio,$cv,$top2,$drop,$z,$tok,$settings"
  done
} > "$out/summary.csv"

{
  echo "| variant | settings | val loss | MaxVio (val set) | MaxVio | CV | top-2 share | dropped | z-loss | tokens/s |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { printf "| %s | `%s` | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $10, $2, $3, $4, $5, $6, $7, $8, $9 }' \
    "$out/summary.csv"
  echo
  echo "MaxVio, CV, top-2 share (the fraction of assignments taken by the two busiest experts; 2/E when balanced), dropped and z-loss: mean over the MoE blocks and the last 20% of the $steps steps. MaxVio (val set): at the last evaluation, over the whole validation set, mean over the blocks. Val loss at step $steps."
  commits=$(for v in "${VARIANTS[@]}"; do
               awk -F'= ' '/^commit/ {print $2; exit}' "runs/ch01-${v%%|*}$suffix/provenance.txt"
             done | sort -u | tr '\n' ' ')
  echo "Machine: $(awk -F'= ' '/^cpu/ {print $2; exit}' runs/ch01-none$suffix/provenance.txt); built from commit(s) ${commits% } (each run's provenance.txt names its own)."
  ec=runs/ch01-expert-choice$suffix
  if [ -f "$ec/ckpt.bin" ]; then
    leaky=$("$moe" eval --ckpt "$ec/ckpt.bin" | awk '{ print $2 }')
    causal=$("$moe" eval --ckpt "$ec/ckpt.bin" --set moe.routing=token_choice | awk '{ print $2 }')
    echo
    echo "Expert choice, validation loss of the same checkpoint: routed as trained (each expert ranks all tokens of the batch, later ones included) $leaky; routed causally (token choice, top-2 of each token's own scores) $causal."
  fi
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
