#!/usr/bin/env bash
# Chapter 4: upcycling a trained dense model into an MoE, against training the MoE from scratch.
#
#   bash chapters/04-upcycling/ablate.sh            # 600 + 600 steps (the handbook's numbers)
#   bash chapters/04-upcycling/ablate.sh --quick    # 100 + 100 steps, a few minutes
#   bash chapters/04-upcycling/ablate.sh --summarize [--quick]   # only redo tables and figures
#   bash chapters/04-upcycling/ablate.sh --only NAME [--quick]   # (re)train one arm, then summarise
#   MOE_BIN=path/to/moe bash chapters/04-upcycling/ablate.sh      # with another build of moe
#
# 1. dense: the chapter 0 model with a dense SwiGLU of hidden 256 in every block, trained for
#    P steps (moe.num_experts=0 model.d_ff=256).
# 2. Its checkpoint continued for S more steps in six ways, each a new run from the same weights
#    (`moe train --init`: step 0, fresh AdamW moments, its own warm-up and cosine):
#      dense-continue   still dense, for as many steps as cost the same FLOPs as S MoE steps
#      copy             upcycled: 8 exact copies of each block's FFN, top-2, router N(0, 0.02^2)
#      noise            the copies plus 1 % relative noise (--noise 0.01)
#      drop-0.25/0.5/1  drop-upcycling: a fraction r of each expert's hidden units re-drawn
#    and three of them again with a gentler restart: peak learning rate 1e-3 (the default is
#    3e-3) and no warm-up (-lr1e-3): dense-continue, copy, drop-0.25
# 4. Where training from scratch catches up: copy and scratch again with smaller budgets, S/3
#    and 2S/3 continuation steps (-b1, -b2). Each run has its own cosine schedule, so only the
#    END of a run is a fair comparison at its budget; these give two more ends.
# 3. scratch: the same MoE (8 experts of hidden 256, top-2: the chapter 0 MoE) from a random
#    init, for as many steps as the dense run and a continuation cost together.
# So every arm spends the same total training FLOPs (moe.c counts them: provenance.txt's
# flops_per_token, the matrix products of forward and backward), and the figures put every
# run on that axis. The MoE settings are the defaults (aux loss 1e-2, z-loss, dropless).
# Writes runs/ch04-NAME[-quick]/ (and runs/ch04-NAME[-quick].bin, the upcycled checkpoints)
# and, in plots/04-upcycling[-quick]/: summary.csv, summary.md, val_loss.png, experts.png,
# budgets.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/04-upcycling

P=600
S=600
every=50
suffix=""
summarize_only=0
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) P=100; S=100; every=20; suffix="-quick" ;;
    --summarize) summarize_only=1 ;;
    --only) only=${2:?--only needs an arm name}; shift ;;
    *) echo "usage: $0 [--quick] [--summarize] [--only NAME]" >&2; exit 2 ;;
  esac
  shift
done
make --no-print-directory build/moe data/corpus/train.bin >/dev/null
moe=${MOE_BIN:-build/moe}
out=plots/04-upcycling$suffix
mkdir -p "$out"

# name | how it starts | upcycle options | training settings of the continuation
gentle="--set train.lr=1e-3 --set train.warmup=0"
ARMS=(
  "dense-continue|the dense checkpoint (stays dense)||"
  "copy|upcycled: exact copies||"
  "noise|upcycled: copies + noise 0.01|--noise 0.01|"
  "drop-0.25|drop-upcycled with r = 0.25|--drop-ratio 0.25|"
  "drop-0.5|drop-upcycled with r = 0.5|--drop-ratio 0.5|"
  "drop-1.0|drop-upcycled with r = 1|--drop-ratio 1|"
  "scratch|random init (the same MoE)||"
  "dense-continue-lr1e-3|the dense checkpoint; lr 1e-3 without warm-up||$gentle"
  "copy-lr1e-3|exact copies; lr 1e-3 without warm-up||$gentle"
  "drop-0.25-lr1e-3|drop-upcycled r = 0.25; lr 1e-3 without warm-up|--drop-ratio 0.25|$gentle"
  "copy-b1|exact copies; budget S/3||"
  "scratch-b1|random init; budget S/3||"
  "copy-b2|exact copies; budget 2S/3||"
  "scratch-b2|random init; budget 2S/3||"
)
budget() { # NAME: its continuation steps: S, or S/3 (-b1), 2S/3 (-b2)
  case $1 in *-b1) echo $((S / 3)) ;; *-b2) echo $((2 * S / 3)) ;; *) echo $S ;; esac
}
if [ -n "$only" ] && ! printf '%s\n' "${ARMS[@]}" | grep -q "^$only|"; then
  echo "no arm named '$only'; the names are: $(printf '%s\n' "${ARMS[@]}" | cut -d'|' -f1 | tr '\n' ' ')" >&2
  exit 2
fi
MOE_SETS=(--set moe.num_experts=8 --set moe.top_k=2 --set moe.d_expert=256)
run() { echo "runs/ch04-$1$suffix"; }
prov() { awk -F' = ' -v k="$2" '$1 == k { print $2; exit }' "$1/provenance.txt"; }
common=(--quiet --set train.eval_every=$every)

dense=$(run dense)
if [ "$summarize_only" = 0 ]; then
  if [ -z "$only" ]; then
    rm -rf "$dense"
    echo "== dense: the model to upcycle, $P steps"
    "$moe" train --out "$dense" "${common[@]}" --set train.steps=$P \
      --set moe.num_experts=0 --set model.d_ff=256
    "$moe" eval --ckpt "$dense/ckpt.bin" | awk '{ print $2 }' > "$dense/eval_end.txt"
  fi
  # the MoE's FLOPs per token, from an upcycled checkpoint's settings
  probe=$(mktemp -u).bin
  "$moe" upcycle --from "$dense/ckpt.bin" --out "$probe" "${MOE_SETS[@]}" >/dev/null
  f_moe=$("$moe" info --ckpt "$probe" | awk '/^training FLOPs per token/ { print $5 }')
  rm -f "$probe"
  f_dense=$(prov "$dense" flops_per_token)
  for a in "${ARMS[@]}"; do
    IFS='|' read -r name what opts sets <<<"$a"
    [ -n "$only" ] && [ "$only" != "$name" ] && continue
    dir=$(run "$name")
    rm -rf "$dir" "$dir.bin"
    echo "== $name: $what"
    # shellcheck disable=SC2206 # sets is a list of options
    extra=($sets)
    cont=$(budget "$name")
    case $name in
      dense-continue*)
        steps=$(awk -v s=$S -v fm="$f_moe" -v fd="$f_dense" 'BEGIN { printf "%d", s * fm / fd + 0.5 }')
        cp "$dense/ckpt.bin" "$dir.bin"
        "$moe" train --init "$dir.bin" --out "$dir" "${common[@]}" --set train.steps=$steps "${extra[@]}" ;;
      scratch*)
        steps=$(awk -v s=$cont -v p=$P -v fm="$f_moe" -v fd="$f_dense" 'BEGIN { printf "%d", s + p * fd / fm + 0.5 }')
        "$moe" train --out "$dir" "${common[@]}" --set train.steps=$steps "${MOE_SETS[@]}" ;;
      *)
        # shellcheck disable=SC2086 # opts is a list of options
        "$moe" upcycle --from "$dense/ckpt.bin" --out "$dir.bin" "${MOE_SETS[@]}" $opts --seed 1
        "$moe" train --init "$dir.bin" --out "$dir" "${common[@]}" --set train.steps=$cont "${extra[@]}" ;;
    esac
    # the validation loss where the run starts (at conversion, for the upcycled ones)
    if [ -f "$dir.bin" ]; then
      "$moe" eval --ckpt "$dir.bin" | awk '{ print $2 }' > "$dir/eval_start.txt"
    fi
    bash plots/plot_run.sh "$dir" >/dev/null
  done
fi

# ---- series for the figures ------------------------------------------------------------------
# NAME.val: total_flops val_loss step (the runs that start from the dense model are shifted by
#           the dense run's FLOPs; the upcycled ones get a first point at conversion)
# NAME.exp: step expert_sim maxvio maxvio_avg10 (means over the MoE blocks; the last a moving
#           average over 10 steps)
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
tokens_of() { awk -F' = ' '$1 == "train.batch" { b = $2 } $1 == "model.seq_len" { t = $2 }
                           $1 == "train.accum" { a = $2 } END { print b * t * a }' "$1/config.txt"; }
val_series() { # RUN_DIR OFFSET_FLOPS: step, val loss -> total flops, val loss, step
  local f tok
  f=$(prov "$1" flops_per_token)
  tok=$(tokens_of "$1")
  awk -F, -v f="$f" -v tok="$tok" -v off="$2" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["val_loss"] != "" { printf "%.6g %s %d\n", off + $1 * tok * f, $c["val_loss"], $1 }' "$1/train.csv"
}
dense_flops=$(awk -v f="$(prov "$dense" flops_per_token)" -v tok="$(tokens_of "$dense")" -v p=$P \
              'BEGIN { printf "%.6g", f * tok * p }')
val_series "$dense" 0 > "$data/dense.val"
names=(dense)      # the runs of val_loss.png (not the smaller budgets)
moe_names=()       # the MoE runs of experts.png
for a in "${ARMS[@]}"; do
  IFS='|' read -r name what opts sets <<<"$a"
  dir=$(run "$name")
  case $name in scratch*) off=0 ;; *) off=$dense_flops ;; esac
  { [ -f "$dir/eval_start.txt" ] && echo "$off $(cat "$dir/eval_start.txt") 0"
    val_series "$dir" "$off"; } > "$data/$name.val"
  case $name in *-b[12]) ;; *) names+=("$name") ;; esac
  case $name in dense-continue*) continue ;; esac
  case $name in *-b[12]) ;; *) moe_names+=("$name") ;; esac
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { s = $1; if (!(s in n)) order[++k] = s; n[s]++; sim[s] += $c["expert_sim"]; mv[s] += $c["maxvio"] }
    END { for (i = 1; i <= k; i++) { s = order[i]; m = mv[s] / n[s]; win[i % 10] = m; t = 0
            for (j = 0; j < 10 && j < i; j++) t += win[(i - j) % 10]
            printf "%d %.6f %.6f %.6f\n", s, sim[s] / n[s], m, t / (i < 10 ? i : 10) } }' \
    "$dir/router.csv" > "$data/$name.exp"
done

# ---- summary -------------------------------------------------------------------------------
# The loss of every arm at the same total FLOPs as the end of the upcycled runs is its last
# evaluation (the budgets are equal by construction, up to the rounding of a step).
{
  echo "arm,starts_from,steps,total_tflops,val_loss_start,val_loss_end,expert_sim_start,expert_sim_end,maxvio_end"
  echo "dense,random init,$P,$(awk '{ x = $1 } END { printf "%.2f", x / 1e12 }' "$data/dense.val"),,$(tail -n 1 "$data/dense.val" | awk '{ printf "%.4f", $2 }'),,,"
  for a in "${ARMS[@]}"; do
    IFS='|' read -r name what opts sets <<<"$a"
    dir=$(run "$name")
    steps=$(awk -F' = ' '$1 == "train.steps" { print $2 }' "$dir/config.txt")
    start=$(head -n 1 "$data/$name.val" | awk -v has="$([ -f "$dir/eval_start.txt" ] && echo 1)" '{ if (has) printf "%.4f", $2 }')
    read -r pf end < <(tail -n 1 "$data/$name.val" | awk '{ printf "%.2f %.4f\n", $1 / 1e12, $2 }')
    sims=",,"
    if [ -f "$data/$name.exp" ]; then
      # first and last step's similarity; MaxVio: mean over the last 20 % of the steps
      sims=$(awk -v from=$((steps * 4 / 5)) 'NR == 1 { s0 = $2 } { s1 = $2 } $1 > from { m += $3; n++ }
              END { printf "%.4f,%.4f,%.3f", s0, s1, m / n }' "$data/$name.exp")
    fi
    echo "$name,$what,$steps,$pf,$start,$end,$sims"
  done
} > "$out/summary.csv"

{
  echo "| arm | starts from | steps | total TFLOPs | val loss at start | val loss at end | expert similarity, step 1 | expert similarity, end | MaxVio |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, ($5 == "" ? "-" : $5), $6, ($7 == "" ? "-" : $7), ($8 == "" ? "-" : $8), ($9 == "" ? "-" : $9) }' \
    "$out/summary.csv"
  echo
  echo "dense: $P steps of the dense model (SwiGLU hidden 256). Every other arm starts from its checkpoint except scratch, and ends at the same total training FLOPs (dense steps x FLOPs per dense step + continuation steps x FLOPs per step; total TFLOPs counts both for the arms that continue the dense run). Val loss at start: the checkpoint the run starts from, at conversion (moe eval). Expert similarity: mean over MoE blocks of the mean pairwise cosine similarity of the experts' weights (router.csv expert_sim) after the first and the last step; MaxVio: mean over the MoE blocks and the last 20 % of the steps."
  echo
  echo "Where training from scratch catches up: the final validation loss of the exact copies and of the same MoE from scratch at three budgets of total training FLOPs (continuations of S/3, 2S/3 and S = $S steps; each run with its own warm-up and cosine schedule, so only its end compares)."
  echo
  echo "| total TFLOPs | copy | scratch | scratch - copy |"
  echo "| ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { v[$1] = $6; t[$1] = $4 }
    END { split("-b1 -b2", s, " "); s[3] = ""
          for (i = 1; i <= 3; i++) printf "| %s | %s | %s | %+.4f |\n", t["copy" s[i]],
            v["copy" s[i]], v["scratch" s[i]], v["scratch" s[i]] - v["copy" s[i]] }' "$out/summary.csv"
  echo
  commits=$(for a in "${ARMS[@]}" dense; do prov "$(run "${a%%|*}")" commit; done | sort -u | tr '\n' ' ')
  echo "Machine: $(prov "$dense" cpu), threads $(prov "$dense" threads); built from commit(s) ${commits% } (each run's provenance.txt names its own)."
} > "$out/summary.md"

gnuplot -e "dir='$data'; names='${names[*]}'; out='$out/val_loss.png'; dense_tflops=$(awk -v f="$dense_flops" 'BEGIN { print f / 1e12 }')" $here/val_loss.gp
gnuplot -e "dir='$data'; names='${moe_names[*]}'; out='$out/experts.png'" $here/experts.gp
awk -F, 'NR > 1 { v[$1] = $6; t[$1] = $4 }
  END { split("-b1 -b2", s, " "); s[3] = ""
        for (i = 1; i <= 3; i++) printf "%s %s %s\n", t["copy" s[i]], v["copy" s[i]], v["scratch" s[i]] }' \
  "$out/summary.csv" > "$data/budgets.dat"
gnuplot -e "data='$data/budgets.dat'; out='$out/budgets.png'" $here/budgets.gp
cat "$out/summary.md"
echo "wrote $out/: summary.csv summary.md val_loss.png experts.png budgets.png"
