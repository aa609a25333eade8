#!/usr/bin/env bash
# Chapter 1: the same model trained under every routing and balancing method.
#
#   bash chapters/01-routing/ablate.sh            # 600 steps per variant (the handbook's numbers)
#   bash chapters/01-routing/ablate.sh --quick    # 100 steps per variant, about 5 minutes of CPU time
#                                                 # (a check: its differences are within the seed noise)
#   bash chapters/01-routing/ablate.sh --summarize [--quick]   # only redo tables and figures
#   bash chapters/01-routing/ablate.sh --only NAME [--quick]   # (re)train one variant, then summarise
#   bash chapters/01-routing/ablate.sh --smoke    # every variant for 12 steps of a tiny model (the test)
#   bash chapters/01-routing/ablate.sh --only aux-1e-2-seed2 --only aux-1e-2-seed3   # the seed arms
#   MOE_BIN=path/to/moe bash chapters/01-routing/ablate.sh      # with another build of moe
#
# Every variant is the default MoE of chapter 0 (4 blocks of width 128, 8 experts of hidden 256,
# top-2, batch 16 x 128 bytes of the six-domain corpus, same seed and steps) with a few settings
# changed, listed in VARIANTS below. The reference arm aux-1e-2 is trained twice more with other
# values of train.seed (SEEDS: aux-1e-2-seed2, -seed3), to measure what another seed moves; the
# seed arms are optional for the summary (without them it says the spread is not measured).
# Writes runs/ch01-NAME[-quick|-smoke]/ and, in plots/01-routing[-quick|-smoke]/ (the handbook's
# figures): summary.csv, summary.md, curves.csv (every variant's validation loss at every
# evaluation), provenance.txt, val_loss.png, balance.png, final_loss.png (final validation loss
# per variant with the seed spread), and each variant's load heatmap and domain heatmap.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/01-routing
. chapters/lib.sh

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

REF=aux-1e-2
# the reference arm again with two more seeds (train.seed; the default is 1337)
SEEDS=(
  "aux-1e-2-seed2|moe.balance=aux moe.aux_coef=1e-2 train.seed=2|Switch aux loss, alpha 1e-2, seed 2"
  "aux-1e-2-seed3|moe.balance=aux moe.aux_coef=1e-2 train.seed=3|Switch aux loss, alpha 1e-2, seed 3"
)

ablate_args "$@"
steps=$(by_mode 600 100 12)
check_only $(for v in "${VARIANTS[@]}" "${SEEDS[@]}"; do echo "${v%%|*}"; done)
ablate_build
out=plots/01-routing$suffix
mkdir -p "$out"

names=()     # the variants (the figures' series)
all=()       # NAME=DIR of every run summarised: the variants and the seed arms that exist
for v in "${VARIANTS[@]}" "${SEEDS[@]}"; do
  IFS='|' read -r name settings what <<<"$v"
  dir=runs/ch01-$name$suffix
  case $name in *-seed[0-9]*) ;; *) names+=("$name") ;; esac
  if wants "$name"; then
    sets=()
    for kv in $settings; do sets+=(--set "$kv"); done
    rm -rf "$dir"
    echo "== $name: $what"
    # shellcheck disable=SC2046 # warmup_sets prints options (quick and smoke only)
    "$moe" train --out "$dir" --quiet "${MODEL_SETS[@]}" "${TRAIN_SETS[@]}" $(warmup_sets $steps) \
      --set train.steps=$steps --set train.eval_every=$((steps / 6)) "${sets[@]}" "${EXTRA_SETS[@]}"
    # smoke: the per-run figures of the reference arm only (tests/test_plots.sh tests them)
    if [ "$mode" != smoke ] || [ "$name" = "$REF" ]; then bash plots/plot_run.sh "$dir" >/dev/null; fi
  fi
  case $name in *-seed[0-9]*) [ -f "$dir/train.csv" ] || continue ;; esac
  all+=("$name=$dir")
done
dirs=()
for n in "${names[@]}"; do dirs+=("runs/ch01-$n$suffix"); done
if ! require_runs "$0" "${dirs[@]}"; then
  [ "$summarize_only" = 1 ] && exit 2
  echo "summary skipped until every variant has a run"; exit 0
fi

# ---- summary: one row per variant ----------------------------------------------------------
# Over the last 20% of the steps, averaged over the MoE blocks (router.csv, train.csv):
# MaxVio, CV, the share of the two busiest experts (top2), the dropped fraction, the z-loss
# (mean logsumexp^2 of the router logits: how large they are); at the last evaluation: the
# validation loss and the MaxVio over the evaluation's validation windows (val_router.csv); median tokens/s.
{
  echo "variant,val_loss,val_maxvio,maxvio,cv,top2_share,drop_frac,z_loss,tok_per_s,settings"
  for v in "${VARIANTS[@]}" "${SEEDS[@]}"; do
    IFS='|' read -r name settings what <<<"$v"
    dir=runs/ch01-$name$suffix
    [ -f "$dir/train.csv" ] || continue   # a seed arm not trained yet
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
  echo "MaxVio, CV, top-2 share (the fraction of assignments taken by the two busiest experts; 2/E when balanced), dropped and z-loss: mean over the MoE blocks and the last 20% of the $steps steps. MaxVio (val set): at the last evaluation, over the validation windows it reads (train.eval_batches x train.batch of them), mean over the blocks. Val loss at step $steps; curves.csv has every variant's at every evaluation."
  seed_note "$REF" val_loss "$out/summary.csv"
  provenance_note "${all[@]}"
  ec=runs/ch01-expert-choice$suffix
  if [ -f "$ec/ckpt.bin" ]; then
    leaky=$("$moe" eval --ckpt "$ec/ckpt.bin" | awk '{ print $2 }')
    causal=$("$moe" eval --ckpt "$ec/ckpt.bin" --set moe.routing=token_choice | awk '{ print $2 }')
    echo
    echo "Expert choice, validation loss of the same checkpoint: routed as trained (each expert ranks all tokens of the batch, later ones included) $leaky; routed causally (token choice, top-2 of each token's own scores) $causal."
  fi
} > "$out/summary.md"

write_curves "$out/curves.csv" "${all[@]}"
write_provenance "$out" "${all[@]}"

# ---- figures -------------------------------------------------------------------------------
# per-variant series for gnuplot: validation loss, and MaxVio / CV averaged over blocks
# (NAME.bal: step maxvio cv, then both as moving averages of the last 10 steps)
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
for name in "${names[@]}"; do
  dir=runs/ch01-$name$suffix
  awk -F, 'NR > 1 && $8 != "" { print $1, $8 }' "$dir/train.csv" > "$data/$name.val"
  awk -F, 'NR > 1 { m[$1] += $3; c[$1] += $4; n[$1]++ }
           END { for (s in m) print s, m[s] / n[s], c[s] / n[s] }' "$dir/router.csv" |
    sort -n | awk '{ i = NR % 10; wm[i] = $2; wc[i] = $3; k = NR < 10 ? NR : 10; sm = 0; sc = 0
                     for (j in wm) { sm += wm[j]; sc += wc[j] }
                     print $1, $2, $3, sm / k, sc / k }' > "$data/$name.bal"
  # the per-variant heatmaps (smoke: only the reference arm draws them)
  [ -f "$dir/load_heatmap.png" ] && cp "$dir/load_heatmap.png" "$out/load_$name.png"
  [ -f "$dir/domains.png" ] && cp "$dir/domains.png" "$out/domains_$name.png"
done
gnuplot -e "dir='$data'; names='${names[*]}'; out='$out/val_loss.png'" $here/val_loss.gp
gnuplot -e "dir='$data'; names='${names[*]}'; out='$out/balance.png'; steps=$steps" $here/balance.gp
final_loss_figure "$out/final_loss.png" \
  "Chapter 1: validation loss at step $steps per variant (bars: seed spread of $REF)" \
  "$REF" val_loss "$out/summary.csv" "${names[@]}"
cat "$out/summary.md"
echo "wrote $out/: summary.csv summary.md curves.csv provenance.txt val_loss.png balance.png final_loss.png load_*.png domains_*.png"
