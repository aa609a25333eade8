#!/usr/bin/env bash
# Chapter 0: the dense baseline against the default MoE, trained the same way.
#
#   bash chapters/00-intro/compare.sh           # 600 steps each (the handbook's numbers)
#   bash chapters/00-intro/compare.sh --quick   # 100 steps each, a smoke run
#   bash chapters/00-intro/compare.sh --smoke   # both for 12 steps of a tiny model (the test)
#   bash chapters/00-intro/compare.sh --summarize [--quick | --smoke]   # only redo the tables and figure
#   bash chapters/00-intro/compare.sh --only dense|moe   # (re)train one, then summarise
#
# Both models have 4 blocks of d_model 128 and the same active feed-forward compute per token:
# the dense block is one SwiGLU of hidden 512; the MoE block routes each token to 2 of 8
# experts of hidden 256. Writes runs/ch00-{dense,moe}[-quick|-smoke]/ (with their plots) and
# plots/00-intro[-quick|-smoke]/: summary.csv, summary.md, curves.csv (both models' validation
# loss at every evaluation), provenance.txt (commits, -dirty, data checksums, machine and
# threads of the runs), val_loss.png and the MoE run's figures (the handbook's).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/00-intro
. chapters/lib.sh
ablate_args "$@"
steps=$(by_mode 600 100 12)
extra=()   # full and quick: the default evaluation every 100 steps
[ "$mode" = smoke ] && extra=(--set train.eval_every=3)
check_only dense moe
ablate_build
out=plots/00-intro$suffix
mkdir -p "$out"

train() { # name, extra settings...
  local name=$1; shift
  local dir=runs/ch00-$name$suffix
  wants "$name" || return 0
  rm -rf "$dir"
  # shellcheck disable=SC2046 # warmup_sets prints options (quick and smoke only)
  "$moe" train --out "$dir" --quiet "${MODEL_SETS[@]}" "${TRAIN_SETS[@]}" "${extra[@]}" \
    $(warmup_sets $steps) --set train.steps=$steps "$@" "${EXTRA_SETS[@]}"
  bash plots/plot_run.sh "$dir" >/dev/null
}
train dense --set moe.num_experts=0
train moe
runs=(dense=runs/ch00-dense$suffix moe=runs/ch00-moe$suffix)
if ! require_runs "$0" runs/ch00-dense$suffix runs/ch00-moe$suffix; then
  [ "$summarize_only" = 1 ] && exit 2
  echo "summary skipped until both runs exist"; exit 0
fi

# summary: final train loss (mean of the last 20 steps), final val loss, median tok/s,
# parameters total and active, unigram entropy of the training data
{
  echo "model,params_total,params_active,train_loss_last20,val_loss,tok_per_s_median"
  for name in dense moe; do
    dir=runs/ch00-$name$suffix
    read -r total active < <("$moe" info --ckpt "$dir/ckpt.bin" |
      awk '/^parameters:/ {print $2, $4}')
    awk -F, -v name=$name -v total=$total -v active=$active '
      NR > 1 { loss[NR] = $2; tok[++n] = $7; if ($8 != "") val = $8; last = NR }
      END {
        s = 0; k = 0
        for (i = last - 19; i <= last; i++) if (i > 1) { s += loss[i]; k++ }
        # median tok/s: sort the column (insertion sort, fine for a few thousand rows)
        for (i = 2; i <= n; i++) { v = tok[i]; j = i - 1
          while (j > 0 && tok[j] > v) { tok[j + 1] = tok[j]; j-- } tok[j + 1] = v }
        printf "%s,%s,%s,%.4f,%.4f,%.0f\n", name, total, active, s / k, val, tok[int((n + 1) / 2)]
      }' "$dir/train.csv"
  done
} > "$out/summary.csv"
write_curves "$out/curves.csv" "${runs[@]}"

{
  echo "| model | parameters (total) | parameters (active per token) | train loss (last 20 steps) | val loss | tokens/s (median) |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 }' "$out/summary.csv"
  entropy=$(awk -F'= ' '/^data.train_unigram_entropy/ {print $2; exit}' runs/ch00-moe$suffix/provenance.txt)
  echo
  echo "Losses in nats per byte. Unigram entropy of the training bytes (the loss of a model that ignores context): $entropy."
  bt=$(awk -F' = ' '$1 == "train.batch" { b = $2 } $1 == "model.seq_len" { t = $2 } END { print b " x " t }' \
       runs/ch00-moe$suffix/config.txt)
  echo "Steps: $steps of $bt tokens. Machine: $(prov runs/ch00-moe$suffix cpu), threads $(prov runs/ch00-moe$suffix threads), commit $(prov runs/ch00-moe$suffix commit)."
  provenance_note "${runs[@]}"
  echo
  awk -F, -v steps=$steps '
    NR == 1 { for (i = 1; i <= NF; i++) if ($i ~ /^load_/) { if (!first) first = i; last = i }; next }
    $1 <= 20 { early += $3; ne++ }
    $1 > steps - 100 || steps <= 100 && $1 > steps / 2 { late += $3; nl++; if ($3 > late_max) late_max = $3
                       for (e = first; e <= last; e++) if (min == "" || $e < min) min = $e }
    END { w = steps > 100 ? 100 : steps - int(steps / 2)
          printf "MoE balance (router.csv): MaxVio mean %.2f over steps 1-20, %.2f over the last %d steps (max %.2f); smallest expert load in the last %d steps %.3f (fair share %.3f).\n",
                 early / ne, late / nl, w, late_max, w, min, 1 / (last - first + 1) }' runs/ch00-moe$suffix/router.csv
  # two passes over domains.csv: find the last step and the last block, then the largest
  # expert share of each domain there
  awk -F, 'NR == FNR { if (FNR > 1) { if ($1 > last) last = $1; if ($2 > top) top = $2 }; next }
           FNR > 1 && $1 == last && $2 == top {
             if (!($3 in mx)) { order[++n] = $3; mx[$3] = 0 }
             if ($5 > mx[$3]) mx[$3] = $5
             if ($4 + 1 > experts) experts = $4 + 1 }
           END {
             printf "MoE specialisation (domains.csv, last block, step %d): largest share of one domain'"'"'s assignments on one expert:", last
             for (i = 1; i <= n; i++) printf " %s %.2f%s", order[i], mx[order[i]], i < n ? "," : ""
             printf " (uniform: %.3f).\n", 1 / experts }' \
      runs/ch00-moe$suffix/domains.csv runs/ch00-moe$suffix/domains.csv
  echo
  echo "Validation loss at every evaluation (curves.csv):"
  echo
  echo "| step | dense | moe | moe - dense |"
  echo "| ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { v[$1, $2] = $3; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
    END { for (i = 1; i <= n; i++) { s = order[i]
            if ((("dense", s) in v) && (("moe", s) in v))
              printf "| %d | %.4f | %.4f | %+.4f |\n", s, v["dense", s], v["moe", s], v["moe", s] - v["dense", s] } }' \
    "$out/curves.csv"
} > "$out/summary.md"
write_provenance "$out" "${runs[@]}"

gnuplot -e "dense='runs/ch00-dense$suffix/train.csv'; moe='runs/ch00-moe$suffix/train.csv'; out='$out/val_loss.png'" $here/compare.gp
for f in loss balance load_heatmap domains; do
  cp "runs/ch00-moe$suffix/$f.png" "$out/moe_$f.png"
done
cat "$out/summary.md"
echo "wrote $out/: summary.csv summary.md curves.csv provenance.txt val_loss.png moe_{loss,balance,load_heatmap,domains}.png"
