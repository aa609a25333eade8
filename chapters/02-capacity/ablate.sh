#!/usr/bin/env bash
# Chapter 2: the same model trained with a fixed expert capacity, from starving to dropless.
#
#   bash chapters/02-capacity/ablate.sh            # 600 steps per variant (the handbook's numbers)
#   bash chapters/02-capacity/ablate.sh --quick    # 100 steps per variant, about 10 minutes
#   bash chapters/02-capacity/ablate.sh --summarize [--quick]   # only redo tables and figures
#   bash chapters/02-capacity/ablate.sh --only NAME [--quick]   # (re)train one variant, then summarise
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
# Writes runs/ch02-NAME[-quick]/ and, in plots/02-capacity[-quick]/ (the handbook's figures):
# summary.csv, summary.md, val_loss.png, drops.png, loss_time.png, padding.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/02-capacity

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
out=plots/02-capacity$suffix
mkdir -p "$out"
if [ -n "$only" ] && ! printf '%s\n' "${VARIANTS[@]}" | grep -q "^$only|"; then
  echo "no variant named '$only'; the names are: $(printf '%s\n' "${VARIANTS[@]}" | cut -d'|' -f1 | tr '\n' ' ')" >&2
  exit 2
fi

step_tokens() { # RUN_DIR: tokens per optimizer step, B * T * accum, from its config.txt
  awk -F' = ' '$1 == "train.batch" { b = $2 } $1 == "model.seq_len" { t = $2 }
               $1 == "train.accum" { a = $2 } END { print b * t * a }' "$1/config.txt"
}

names=()
for v in "${VARIANTS[@]}"; do
  IFS='|' read -r name settings what <<<"$v"
  names+=("$name")
  dir=runs/ch02-$name$suffix
  if [ "$summarize_only" = 0 ] && { [ -z "$only" ] || [ "$only" = "$name" ]; }; then
    sets=()
    for kv in $settings; do sets+=(--set "$kv"); done
    rm -rf "$dir"
    echo "== $name: $what"
    "$moe" train --out "$dir" --quiet --set train.steps=$steps \
      --set train.eval_every=$((steps / 6)) "${sets[@]}"
    # the same checkpoint with room for everything: factor 2, and no capacity at all
    "$moe" eval --ckpt "$dir/ckpt.bin" --set moe.eval_capacity_factor=2 |
      awk '{ print $2 }' > "$dir/eval_cf2.txt"
    "$moe" eval --ckpt "$dir/ckpt.bin" --set moe.eval_capacity_factor=0 |
      awk '{ print $2 }' > "$dir/eval_dropless.txt"
    bash plots/plot_run.sh "$dir" >/dev/null
  fi
done

# ---- summary: one row per variant ----------------------------------------------------------
# Columns of router.csv are found by their header names. Over the last 20% of the steps,
# averaged over the MoE blocks: the dropped fraction of the assignments and the padding
# fraction of the computed expert rows. Validation loss at the last evaluation (at the
# training factor), and of the final checkpoint at factor 2 and dropless (moe eval).
# Median tokens/s; training seconds = sum over steps of B*T*accum / tok_per_s, the time of the
# optimizer steps themselves (evaluations, checkpoints and start-up excluded).
{
  echo "variant,factor,policy,aux,val_loss,val_loss_cf2,val_loss_dropless,drop_frac,pad_frac,tok_per_s,train_seconds"
  for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name settings what <<<"$v"
    dir=runs/ch02-$name$suffix
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
    read -r drop pad < <(awk -F, -v from=$from '
      NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      $1 > from { d += $c["drop_frac"]; p += (c["pad_frac"] ? $c["pad_frac"] : 0); n++ }
      END { printf "%.4f %.4f\n", d / n, p / n }' "$dir/router.csv")
    cf2=$(awk '{ printf "%.4f", $1 }' "$dir/eval_cf2.txt")
    dl=$(awk '{ printf "%.4f", $1 }' "$dir/eval_dropless.txt")
    echo "$name,$factor,$policy,$balance,$val,$cf2,$dl,$drop,$pad,$tok,$secs"
  done
} > "$out/summary.csv"

{
  echo "| variant | factor | drop policy | balance | val loss | val loss at factor 2 | val loss dropless | dropped | padding | tokens/s | training s |"
  echo "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, ($2 == 0 ? "dropless" : $2), $3, $4, $5, $6, $7, $8, $9, $10, $11 }' \
    "$out/summary.csv"
  echo
  echo "Val loss: at step $steps, evaluated at the training factor; then the same checkpoint evaluated with capacity factor 2 and dropless (\`moe.eval_capacity_factor\`). Dropped (fraction of the routed assignments) and padding (fraction of the computed expert rows that are zero padding): mean over the MoE blocks and the last 20% of the $steps steps. Capacity runs are padded (\`moe.padded=1\`), dropless runs compute only their rows. Training s: the sum over steps of tokens per step / tokens/s (the optimizer steps only, without evaluations); both are comparable between variants only when nothing else ran on the machine. balance none keeps the default z-loss."
  commits=$(for v in "${VARIANTS[@]}"; do
               awk -F'= ' '/^commit/ {print $2; exit}' "runs/ch02-${v%%|*}$suffix/provenance.txt"
             done | sort -u | tr '\n' ' ')
  echo "Machine: $(awk -F'= ' '/^cpu/ {print $2; exit}' "runs/ch02-${names[0]}$suffix/provenance.txt"), threads $(awk -F'= ' '/^threads/ {print $2; exit}' "runs/ch02-${names[0]}$suffix/provenance.txt"); built from commit(s) ${commits% } (each run's provenance.txt names its own)."
} > "$out/summary.md"

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
  awk -F, -v a=$aux 'NR > 1 && $2 == 0 && $4 == a { print $10 }' "$out/summary.csv" > "$data/dropless-$aux.tok"
done
factors="0.5 1.0 1.25 2.0"
gnuplot -e "dir='$data'; factors='$factors'; out='$out/val_loss.png'; xcol=1; xlab='optimizer step'" $here/val_loss.gp
gnuplot -e "dir='$data'; factors='$factors'; out='$out/loss_time.png'; xcol=2; xlab='training time (s, cumulative)'" $here/val_loss.gp
gnuplot -e "dir='$data'; factors='$factors'; out='$out/drops.png'; variant='cf1.0-position-aux'; layers=$layers" $here/drops.gp
gnuplot -e "dir='$data'; out='$out/padding.png'" $here/padding.gp
cat "$out/summary.md"
echo "wrote $out/: summary.csv summary.md val_loss.png loss_time.png drops.png padding.png"
