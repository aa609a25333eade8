#!/usr/bin/env bash
# Chapter 2: the same model trained with a fixed expert capacity, from starving to dropless.
#
#   bash chapters/02-capacity/ablate.sh            # 600 steps per variant (the handbook's numbers)
#   bash chapters/02-capacity/ablate.sh --quick    # 100 steps per variant, about 8 minutes of CPU time
#                                                 # (a check: only the largest differences pass the seed noise)
#   bash chapters/02-capacity/ablate.sh --summarize [--quick]   # only redo tables and figures
#   bash chapters/02-capacity/ablate.sh --only NAME [--quick]   # (re)train one variant, then summarise
#   bash chapters/02-capacity/ablate.sh --smoke    # every variant for 12 steps of a tiny model (the test)
#   bash chapters/02-capacity/ablate.sh --only dropless-aux-seed2 --only dropless-aux-seed3   # seed arms
#   MOE_BIN=path/to/moe bash chapters/02-capacity/ablate.sh      # with another build of moe
#
# Every variant is the default MoE of chapter 0 (4 blocks of width 128, 8 experts of hidden 256,
# top-2, batch 16 x 128 bytes of the six-domain corpus, same seed and steps) with only the
# capacity settings changed: capacity factor 0.5, 1, 1.25 and 2 under both drop policies
# (position, score), with the Switch aux loss (moe.balance=aux, default coefficient) and without
# it (moe.balance=none; the z-loss stays at its default in both), plus the dropless model
# (factor 0) with and without the aux loss: 4 x 2 x 2 + 2 = 18 variants. Capacity runs are
# padded (moe.padded=1: every expert computes its whole budget of rows, used or not), so the
# time per step is the honest cost of a fixed buffer; dropless runs compute exactly their rows.
# Each checkpoint is also evaluated at factor 2 and dropless (moe.eval_capacity_factor).
# The reference arm dropless-aux is trained twice more with other values of train.seed (SEEDS),
# to measure what another seed moves; the summary works without them and says so.
# Writes runs/ch02-NAME[-quick|-smoke]/ and, in plots/02-capacity[-quick|-smoke]/ (the
# handbook's figures): summary.csv, summary.md, curves.csv (every variant's validation loss at
# every evaluation), provenance.txt, val_loss.png, drops.png, loss_time.png, padding.png,
# final_loss.png (final validation loss per variant with the seed spread).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/02-capacity
. chapters/lib.sh

# name | settings (--set key=value ...) | what it shows
VARIANTS=()
for aux in aux none; do
  for policy in position score; do
    for f in 0.5 1.0 1.25 2.0; do
      VARIANTS+=("cf$f-$policy-$aux|moe.capacity_factor=$f moe.drop_policy=$policy moe.balance=$aux moe.padded=1|capacity factor $f, keep by $policy, balance $aux")
    done
  done
  VARIANTS+=("dropless-$aux|moe.capacity_factor=0 moe.balance=$aux|dropless (factor 0), balance $aux")
done

REF=dropless-aux
SEEDS=(
  "dropless-aux-seed2|moe.capacity_factor=0 moe.balance=aux train.seed=2|dropless, balance aux, seed 2"
  "dropless-aux-seed3|moe.capacity_factor=0 moe.balance=aux train.seed=3|dropless, balance aux, seed 3"
)

ablate_args "$@"
steps=$(by_mode 600 100 12)
check_only $(for v in "${VARIANTS[@]}" "${SEEDS[@]}"; do echo "${v%%|*}"; done)
ablate_build
out=plots/02-capacity$suffix
mkdir -p "$out"

step_tokens() { # RUN_DIR: tokens per optimizer step, B * T * accum, from its config.txt
  awk -F' = ' '$1 == "train.batch" { b = $2 } $1 == "model.seq_len" { t = $2 }
               $1 == "train.accum" { a = $2 } END { print b * t * a }' "$1/config.txt"
}

names=()     # the variants (the figures' series)
all=()       # NAME=DIR of every run summarised: the variants and the seed arms that exist
for v in "${VARIANTS[@]}" "${SEEDS[@]}"; do
  IFS='|' read -r name settings what <<<"$v"
  dir=runs/ch02-$name$suffix
  case $name in *-seed[0-9]*) ;; *) names+=("$name") ;; esac
  if wants "$name"; then
    sets=()
    for kv in $settings; do sets+=(--set "$kv"); done
    rm -rf "$dir"
    echo "== $name: $what"
    # shellcheck disable=SC2046 # warmup_sets prints options (quick and smoke only)
    "$moe" train --out "$dir" --quiet "${MODEL_SETS[@]}" "${TRAIN_SETS[@]}" $(warmup_sets $steps) \
      --set train.steps=$steps --set train.eval_every=$((steps / 6)) "${sets[@]}" "${EXTRA_SETS[@]}"
    # the same checkpoint with room for everything: factor 2, and no capacity at all
    "$moe" eval --ckpt "$dir/ckpt.bin" --set moe.eval_capacity_factor=2 |
      awk '{ print $2 }' > "$dir/eval_cf2.txt"
    "$moe" eval --ckpt "$dir/ckpt.bin" --set moe.eval_capacity_factor=0 |
      awk '{ print $2 }' > "$dir/eval_dropless.txt"
    # smoke: the per-run figures of the reference arm only (tests/test_plots.sh tests them)
    if [ "$mode" != smoke ] || [ "$name" = "$REF" ]; then bash plots/plot_run.sh "$dir" >/dev/null; fi
  fi
  case $name in *-seed[0-9]*) [ -f "$dir/train.csv" ] || continue ;; esac
  all+=("$name=$dir")
done
dirs=()
for n in "${names[@]}"; do dirs+=("runs/ch02-$n$suffix"); done
if ! require_runs "$0" "${dirs[@]}"; then
  [ "$summarize_only" = 1 ] && exit 2
  echo "summary skipped until every variant has a run"; exit 0
fi

# ---- summary: one row per variant ----------------------------------------------------------
# Columns of router.csv are found by their header names. Over the last 20% of the steps,
# averaged over the MoE blocks: the dropped fraction of the assignments and the padding
# fraction of the computed expert rows. Validation loss at the last evaluation (at the
# training factor), and of the final checkpoint at factor 2 and dropless (moe eval).
# Median tokens/s; training seconds = sum over steps of B*T*accum / tok_per_s, the time of the
# optimizer steps themselves (evaluations, checkpoints and start-up excluded).
# drop_frac_after: the dropped fraction (mean over blocks) averaged over the steps after
# drop_after_step (steps / 6: step 100 of 600, past the router's first unbalanced steps);
# drop_frac_max: the largest dropped fraction (mean over blocks) of any one step.
after=$((steps / 6))
{
  echo "variant,factor,policy,aux,val_loss,val_loss_cf2,val_loss_dropless,drop_frac,pad_frac,tok_per_s,train_seconds,drop_after_step,drop_frac_after,drop_frac_max"
  for v in "${VARIANTS[@]}" "${SEEDS[@]}"; do
    IFS='|' read -r name settings what <<<"$v"
    dir=runs/ch02-$name$suffix
    [ -f "$dir/train.csv" ] || continue   # a seed arm not trained yet
    from=$((steps * 4 / 5))
    factor=$(awk -F' = ' '$1 == "moe.capacity_factor" { print $2 }' "$dir/config.txt")
    policy=$(awk -F' = ' '$1 == "moe.drop_policy" { print $2 }' "$dir/config.txt")
    balance=$(awk -F' = ' '$1 == "moe.balance" { print $2 }' "$dir/config.txt")
    tokens=$(step_tokens "$dir")
    [ "$factor" = 0 ] && policy=-
    read -r val secs < <(awk -F, -v tokens="$tokens" '
      NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      { if ($c["val_loss"] != "") val = $c["val_loss"]; secs += tokens / $c["tok_per_s"] }
      END { printf "%.4f %.1f\n", val, secs }' "$dir/train.csv")
    tok=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "tok_per_s") c = i; next }
                   { print $c }' "$dir/train.csv" | sort -n |
          awk '{ a[NR] = $1 } END { printf "%.0f", a[int((NR + 1) / 2)] }')
    read -r drop pad late peak < <(awk -F, -v from=$from -v after=$after '
      NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      $1 > from { d += $c["drop_frac"]; p += (c["pad_frac"] ? $c["pad_frac"] : 0); n++ }
      $1 > after { dl += $c["drop_frac"]; nl++ }
      { ds[$1] += $c["drop_frac"]; nb[$1]++ }
      END { for (s in ds) if (ds[s] / nb[s] > mx) mx = ds[s] / nb[s]
            printf "%.4f %.4f %.6f %.4f\n", d / n, p / n, nl ? dl / nl : 0, mx }' "$dir/router.csv")
    cf2=$(awk '{ printf "%.4f", $1 }' "$dir/eval_cf2.txt")
    dl=$(awk '{ printf "%.4f", $1 }' "$dir/eval_dropless.txt")
    echo "$name,$factor,$policy,$balance,$val,$cf2,$dl,$drop,$pad,$tok,$secs,$after,$late,$peak"
  done
} > "$out/summary.csv"

{
  echo "| variant | factor | drop policy | balance | val loss | val loss at factor 2 | val loss dropless | dropped | dropped after step $after | dropped, worst step | padding | tokens/s | training s |"
  echo "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %.2f %% | %s | %s | %s | %s |\n", $1, ($2 == 0 ? "dropless" : $2), $3, $4, $5, $6, $7, $8, 100 * $13, $14, $9, $10, $11 }' \
    "$out/summary.csv"
  echo
  echo "Val loss: at step $steps, evaluated at the training factor; then the same checkpoint evaluated with capacity factor 2 and dropless (\`moe.eval_capacity_factor\`). Dropped (fraction of the routed assignments) and padding (fraction of the computed expert rows that are zero padding): mean over the MoE blocks and the last 20% of the $steps steps. Capacity runs are padded (\`moe.padded=1\`), dropless runs compute only their rows. Training s: the sum over steps of tokens per step / tokens/s (the optimizer steps only, without evaluations); both are comparable between variants only when nothing else ran on the machine. balance none keeps the default z-loss."
  echo "Dropped after step $after: the mean over the steps after step $after (the router's first unbalanced steps excluded); worst step: the largest dropped fraction of any one step (both means over the MoE blocks). Curves.csv has every variant's validation loss at every evaluation."
  awk -F, 'NR > 1 && $2 == 2.0 && $4 == "aux" { printf "%s%s %.4f %%", (n++ ? ", " : "Factor 2 with the aux loss, dropped after step " after ": "), $1, 100 * $13 }
           END { if (n) print "." }' after=$after "$out/summary.csv"
  seed_note "$REF" val_loss "$out/summary.csv"
  provenance_note "${all[@]}"
} > "$out/summary.md"
write_curves "$out/curves.csv" "${all[@]}"
write_provenance "$out" "${all[@]}"

# ---- figures -------------------------------------------------------------------------------
# per-variant series for gnuplot (whitespace-separated, columns found by header name):
#   NAME.val   step cumulative_training_seconds val_loss      (eval steps)
#   NAME.drop  step drop_frac(mean over blocks) drop_frac(block 0) ... (block L-1)
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
for name in "${names[@]}"; do
  dir=runs/ch02-$name$suffix
  tokens=$(step_tokens "$dir")
  awk -F, -v tokens="$tokens" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { secs += tokens / $c["tok_per_s"] }
    $c["val_loss"] != "" { print $1, secs, $c["val_loss"] }' "$dir/train.csv" > "$data/$name.val"
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { s = $c["step"]; l = $c["layer"]; d[s, l] = $c["drop_frac"]; if (l + 1 > L) L = l + 1
      if (!(s in seen)) { seen[s] = 1; order[++n] = s } }
    END { for (i = 1; i <= n; i++) { s = order[i]; m = 0; line = ""
            for (l = 0; l < L; l++) { m += d[s, l]; line = line " " d[s, l] }
            print s, m / L line } }' "$dir/router.csv" > "$data/$name.drop"
done
layers=$(awk '{ print NF - 2; exit }' "$data/${names[0]}.drop")
# padding fraction and median tokens/s against the factor, one file per policy x balance
for aux in aux none; do
  for policy in position score; do
    awk -F, -v p=$policy -v a=$aux 'NR > 1 && $3 == p && $4 == a { print $2, $9, $10 }' \
      "$out/summary.csv" > "$data/pad-$policy-$aux"
  done
  awk -F, -v a=$aux 'NR > 1 && $1 == "dropless-" a { print $10 }' "$out/summary.csv" > "$data/dropless-$aux.tok"
done
factors="0.5 1.0 1.25 2.0"
gnuplot -e "dir='$data'; factors='$factors'; out='$out/val_loss.png'; xcol=1; xlab='optimizer step'" $here/val_loss.gp
gnuplot -e "dir='$data'; factors='$factors'; out='$out/loss_time.png'; xcol=2; xlab='training time (s, cumulative)'" $here/val_loss.gp
gnuplot -e "dir='$data'; factors='$factors'; out='$out/drops.png'; variant='cf1.0-position-aux'; layers=$layers" $here/drops.gp
gnuplot -e "dir='$data'; out='$out/padding.png'" $here/padding.gp
final_loss_figure "$out/final_loss.png" \
  "Chapter 2: validation loss at step $steps per variant (bars: seed spread of $REF)" \
  "$REF" val_loss "$out/summary.csv" "${names[@]}"
cat "$out/summary.md"
echo "wrote $out/: summary.csv summary.md curves.csv provenance.txt val_loss.png loss_time.png drops.png padding.png final_loss.png"
