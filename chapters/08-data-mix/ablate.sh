#!/usr/bin/env bash
# Chapter 8: the same model trained on the same uneven corpus under seven domain mixes.
#
#   bash chapters/08-data-mix/ablate.sh            # 600 steps per arm (the handbook's numbers)
#   bash chapters/08-data-mix/ablate.sh --quick    # 100 steps per arm
#   bash chapters/08-data-mix/ablate.sh --smoke    # every arm for 12 steps of a tiny model (the test)
#   bash chapters/08-data-mix/ablate.sh --summarize [--quick]   # only redo tables and figures
#   bash chapters/08-data-mix/ablate.sh --only NAME [--quick]   # (re)train one arm
#   MOE_BIN=path/to/moe bash chapters/08-data-mix/ablate.sh
#
# The corpus of chapter 0 holds its six domains in nearly equal parts, which real data does not.
# The training shard here keeps each domain's documents with the probability SKEW gives it (build/
# chapters/08-data-mix/mix --skew, a fixed hash of each document): English whole, code 40 %,
# German 25 %, Spanish 15 %, Italian 6 %, Russian 3 %, as uneven as a web crawl; the validation
# shard stays the balanced one, so every domain is measured alike. Every arm is chapter 0's
# default MoE with one data.* setting changed (ARMS), the same seed and steps, so every arm sees
# the same number of tokens. Writes runs/ch08-NAME[-quick|-smoke]/, the skewed shard in
# runs/ch08-data/, and in plots/08-data-mix[-quick|-smoke]/: summary.csv and summary.md (one row an
# arm: validation loss overall and per domain at the last step, the windows drawn of each
# domain, MaxVio, the domain-expert information), curves.csv, provenance.txt, mix.txt (the
# chapter program on the skewed shard), domain_loss.png, curves.png, routing.png, and each arm's
# domain heatmap.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/08-data-mix
. chapters/lib.sh

SKEW=en:1,code:0.4,de:0.25,es:0.15,it:0.06,ru:0.03
# name | settings | what it shows
ARMS=(
  "natural|data.mix=natural|the shard as it is: each domain by its size"
  "uniform|data.mix=uniform|every domain a sixth"
  "temp-2|data.mix_temperature=2|shares as size^(1/2)"
  "temp-5|data.mix_temperature=5|shares as size^(1/5)"
  "ru-up|data.mix=ru:0.2|the smallest domain up-weighted to a fifth, the rest by size"
  "no-code|data.mix=code:0|code left out"
  "end-uniform|data.mix_end=uniform data.mix_end_frac=0.2|natural, then uniform for the last fifth"
)
DOMAINS=(en de es it ru code)

ablate_args "$@"
steps=$(by_mode 600 100 12)
check_only $(for v in "${ARMS[@]}"; do echo "${v%%|*}"; done)
ablate_build
make --no-print-directory "${MOE_BUILD:-build}/chapters/08-data-mix/mix" > /dev/null 2>&1 || true
prog=$(dirname "$moe")/chapters/08-data-mix/mix
[ -x "$prog" ] || { echo "no $prog: make chapters builds it" >&2; exit 2; }
out=plots/08-data-mix$suffix
mkdir -p "$out"

data=runs/ch08-data
if [ ! -f "$data/train.bin" ]; then
  mkdir -p "$data"
  "$prog" --skew "$SKEW" data/corpus/train.bin "$data/train.bin"
fi
"$prog" "$data/train.bin" ru:0.2 code:0 > "$out/mix.txt"

names=()
all=()
for v in "${ARMS[@]}"; do
  IFS='|' read -r name settings what <<<"$v"
  dir=runs/ch08-$name$suffix
  names+=("$name")
  if wants "$name"; then
    sets=()
    for kv in $settings; do sets+=(--set "$kv"); done
    rm -rf "$dir"
    echo "== $name: $what"
    # shellcheck disable=SC2046 # warmup_sets prints options (quick and smoke only)
    "$moe" train --out "$dir" --quiet "${MODEL_SETS[@]}" "${TRAIN_SETS[@]}" $(warmup_sets $steps) \
      --set "data.train=$data/train.bin" --set data.val=data/corpus/val.bin \
      --set train.steps=$steps --set train.eval_every=$((steps / 6)) "${sets[@]}" "${EXTRA_SETS[@]}"
    if [ "$mode" != smoke ] || [ "$name" = natural ]; then bash plots/plot_run.sh "$dir" > /dev/null; fi
  fi
  all+=("$name=$dir")
done
dirs=()
for n in "${names[@]}"; do dirs+=("runs/ch08-$n$suffix"); done
if ! require_runs "$0" "${dirs[@]}"; then
  [ "$summarize_only" = 1 ] && exit 2
  echo "summary skipped until every arm has a run"; exit 0
fi

# ---- summary: one row an arm ----------------------------------------------------------------
# val_loss and val_<domain>: at the last evaluation (train.csv, val_domains.csv); drawn_<domain>:
# the share of all the windows the run drew (mix.csv); maxvio: the step batch's MaxVio over the
# last 20% of the steps, mean over the blocks (router.csv); domain_mi: the mutual information of
# domain and expert at the last evaluation, domains weighted alike, mean over the blocks
# (domains.csv; 0: every domain spreads over the experts alike, ln 6 = 1.79 at most)
{
  printf "arm,val_loss"
  for d in "${DOMAINS[@]}"; do printf ",val_%s" "$d"; done
  for d in "${DOMAINS[@]}"; do printf ",drawn_%s" "$d"; done
  echo ",maxvio,domain_mi,settings"
  for v in "${ARMS[@]}"; do
    IFS='|' read -r name settings what <<<"$v"
    dir=runs/ch08-$name$suffix
    val=$(awk -F, 'NR > 1 && $8 != "" { v = $8 } END { printf "%.4f", v }' "$dir/train.csv")
    per=$(awk -F, -v list="${DOMAINS[*]}" 'NR > 1 { last = $1; v[$1, $2] = $3 }
          END { n = split(list, d, " "); for (i = 1; i <= n; i++) printf ",%.4f", v[last, d[i]] }' \
          "$dir/val_domains.csv")
    drawn=$(awk -F, -v list="${DOMAINS[*]}" 'NR > 1 { w[$3] += $4; t += $4 }
            END { n = split(list, d, " "); for (i = 1; i <= n; i++) printf ",%.4f", t ? w[d[i]] / t : 0 }' \
            "$dir/mix.csv")
    maxvio=$(awk -F, -v from=$((steps * 4 / 5)) 'NR > 1 && $1 > from { m += $3; n++ }
             END { printf "%.3f", n ? m / n : 0 }' "$dir/router.csv")
    mi=$(domain_mi "$dir/domains.csv")
    echo "$name,$val$per$drawn,$maxvio,$mi,$settings"
  done
} > "$out/summary.csv"

{
  echo "| arm | settings | val loss | en | de | es | it | ru | code | drawn: en | de | es | it | ru | code | MaxVio | domain-expert information |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { printf "| %s | `%s` |", $1, $17; for (i = 2; i <= 16; i++) printf " %s |", $i; print "" }' \
    "$out/summary.csv"
  echo
  echo "Training shard: chapter 0's corpus with each domain's documents kept by $SKEW ($(head -n 1 "$out/mix.txt" | cut -d: -f2-)); validation: the balanced corpus (data/corpus/val.bin), the same windows for every arm. Val loss (overall and per domain) at step $steps; drawn: each domain's share of all the windows the run drew (mix.csv). MaxVio: mean over the MoE blocks and the last 20% of the steps. Domain-expert information: the mutual information of the domain and the expert chosen at the last evaluation (nats; domains weighted alike, mean over the blocks)."
  provenance_note "${all[@]}"
} > "$out/summary.md"

write_curves "$out/curves.csv" "${all[@]}"
write_provenance "$out" "${all[@]}"

# ---- figures ---------------------------------------------------------------------------------
tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT
# domain_loss.dat: a row a domain, a column an arm (the final validation loss)
awk -F, -v list="${DOMAINS[*]}" 'NR == 1 { next } { arm[++n] = $1; for (i = 3; i <= 8; i++) v[n, i - 2] = $i }
     END { k = split(list, d, " "); printf "domain"; for (a = 1; a <= n; a++) printf " %s", arm[a]; print ""
           for (i = 1; i <= k; i++) { printf "%s", d[i]; for (a = 1; a <= n; a++) printf " %s", v[a, i]; print "" } }' \
  "$out/summary.csv" > "$tmpd/domain_loss.dat"
awk -F, 'NR > 1 { print $1, $15, $16 }' "$out/summary.csv" > "$tmpd/routing.dat"
for name in "${names[@]}"; do
  dir=runs/ch08-$name$suffix
  awk -F, 'NR > 1 && $8 != "" { print $1, $8 }' "$dir/train.csv" > "$tmpd/$name.val"
  [ -f "$dir/domains.png" ] && cp "$dir/domains.png" "$out/domains_$name.png"
done
gnuplot -e "data='$tmpd/domain_loss.dat'; out='$out/domain_loss.png'; steps=$steps" $here/domain_loss.gp
gnuplot -e "dir='$tmpd'; names='${names[*]}'; out='$out/curves.png'" $here/curves.gp
gnuplot -e "data='$tmpd/routing.dat'; out='$out/routing.png'" $here/routing.gp
cat "$out/summary.md"
echo "wrote $out/: summary.csv summary.md curves.csv provenance.txt mix.txt domain_loss.png curves.png routing.png domains_*.png"
