#!/usr/bin/env bash
# Chapter 4: upcycling a trained dense model into an MoE, against training the MoE from scratch.
#
#   bash chapters/04-upcycling/ablate.sh            # 600 + 600 steps (the handbook's numbers)
#   bash chapters/04-upcycling/ablate.sh --quick    # 100 + 100 steps, about 6 minutes of CPU time
#   bash chapters/04-upcycling/ablate.sh --summarize [--quick]   # only redo tables and figures
#   bash chapters/04-upcycling/ablate.sh --only NAME [--quick]   # (re)train one arm, then summarise
#   bash chapters/04-upcycling/ablate.sh --smoke    # every arm, 12 + 12 steps of a tiny model (the test)
#   bash chapters/04-upcycling/ablate.sh --only dense   # only the dense parent: runs/ch04-dense/ckpt.bin,
#                                                       # what build/chapters/04-upcycling/upcycle reads (~2 min)
#   bash chapters/04-upcycling/ablate.sh --only copy-seed2 --only copy-seed3   # the seed arms
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
# 5. copy-seed2, copy-seed3: the copy arm again with train.seed 2 and 3 (the default is 1337),
#    what another seed moves (optional for the summary, which says when they are missing).
# --quick and --smoke scale every run's warm-up with its length (steps / 12, the full runs' 50
# of 600), so that the S/3 budget still has room for it; the full runs keep the default 50.
# --only NAME retrains that arm from the existing dense run (--only dense: the dense run alone).
# Writes runs/ch04-NAME[-quick|-smoke]/ (and runs/ch04-NAME[-quick|-smoke].bin, the upcycled
# checkpoints) and, in plots/04-upcycling[-quick|-smoke]/: summary.csv (with every arm's
# validation loss at steps 50 and 100 of its run), summary.md, curves.csv (every arm's
# validation loss at every evaluation, and the total FLOPs there), provenance.txt,
# val_loss.png, experts.png, budgets.png, final_loss.png (final validation loss at equal
# compute, with the seed spread of copy).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/04-upcycling
. chapters/lib.sh

ablate_args "$@"
case $mode in
  full) P=600; S=600; every=50 ;;
  quick) P=100; S=100; every=20 ;;
  smoke) P=12; S=12; every=3 ;;
esac
ablate_build
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
  "copy-seed2|exact copies; train.seed 2||--set train.seed=2"
  "copy-seed3|exact copies; train.seed 3||--set train.seed=3"
)
REF=copy
budget() { # NAME: its continuation steps: S, or S/3 (-b1), 2S/3 (-b2)
  case $1 in *-b1) echo $((S / 3)) ;; *-b2) echo $((2 * S / 3)) ;; *) echo $S ;; esac
}
check_only dense $(for a in "${ARMS[@]}"; do echo "${a%%|*}"; done)
MOE_SETS=(--set moe.num_experts=8 --set moe.top_k=2 --set moe.d_expert=256)
run() { echo "runs/ch04-$1$suffix"; }
prov() { awk -F' = ' -v k="$2" '$1 == k { print $2; exit }' "$1/provenance.txt"; }
common=(--quiet "${TRAIN_SETS[@]}" --set train.eval_every=$every)

dense=$(run dense)
# the arms to train now: every arm, or those named with --only (dense is trained first when
# it is named, or when nothing is)
todo=()
for a in "${ARMS[@]}"; do wants "${a%%|*}" && todo+=("$a"); done
if [ "$summarize_only" = 0 ]; then
  if [ ${#only[@]} -eq 0 ] || wants dense; then
    rm -rf "$dense"
    echo "== dense: the model to upcycle, $P steps"
    # shellcheck disable=SC2046 # warmup_sets prints options (quick and smoke only)
    "$moe" train --out "$dense" "${common[@]}" "${MODEL_SETS[@]}" $(warmup_sets $P) --set train.steps=$P \
      --set moe.num_experts=0 --set model.d_ff=256 "${EXTRA_SETS[@]}"
    "$moe" eval --ckpt "$dense/ckpt.bin" | awk '{ print $2 }' > "$dense/eval_end.txt"
  elif [ ${#todo[@]} -gt 0 ] && [ ! -f "$dense/ckpt.bin" ]; then
    echo "no dense checkpoint $dense/ckpt.bin to continue: train it first (--only dense)" >&2
    exit 2
  fi
fi
if [ "$summarize_only" = 0 ] && [ ${#todo[@]} -gt 0 ]; then
  # the MoE's FLOPs per token, from an upcycled checkpoint's settings
  probe=$(mktemp -u).bin
  "$moe" upcycle --from "$dense/ckpt.bin" --out "$probe" "${MOE_SETS[@]}" "${EXTRA_SETS[@]}" >/dev/null
  f_moe=$("$moe" info --ckpt "$probe" | awk '/^training FLOPs per token/ { print $5 }')
  rm -f "$probe"
  f_dense=$(prov "$dense" flops_per_token)
  for a in "${todo[@]}"; do
    IFS='|' read -r name what opts sets <<<"$a"
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
        # shellcheck disable=SC2046 # warmup_sets prints options (quick and smoke only)
        "$moe" train --init "$dir.bin" --out "$dir" "${common[@]}" $(warmup_sets $steps) \
          --set train.steps=$steps "${extra[@]}" "${EXTRA_SETS[@]}" ;;
      scratch*)
        steps=$(awk -v s=$cont -v p=$P -v fm="$f_moe" -v fd="$f_dense" 'BEGIN { printf "%d", s + p * fd / fm + 0.5 }')
        # shellcheck disable=SC2046
        "$moe" train --out "$dir" "${common[@]}" "${MODEL_SETS[@]}" $(warmup_sets $steps) \
          --set train.steps=$steps "${MOE_SETS[@]}" "${EXTRA_SETS[@]}" ;;
      *)
        # shellcheck disable=SC2086 # opts is a list of options
        "$moe" upcycle --from "$dense/ckpt.bin" --out "$dir.bin" "${MOE_SETS[@]}" "${EXTRA_SETS[@]}" \
          $opts --seed 1
        # shellcheck disable=SC2046
        "$moe" train --init "$dir.bin" --out "$dir" "${common[@]}" $(warmup_sets $cont) \
          --set train.steps=$cont "${extra[@]}" "${EXTRA_SETS[@]}" ;;
    esac
    # the validation loss where the run starts (at conversion, for the upcycled ones)
    if [ -f "$dir.bin" ]; then
      "$moe" eval --ckpt "$dir.bin" | awk '{ print $2 }' > "$dir/eval_start.txt"
    fi
    # smoke: the per-run figures of the reference arm only (tests/test_plots.sh tests them)
    if [ "$mode" != smoke ] || [ "$name" = "$REF" ]; then bash plots/plot_run.sh "$dir" >/dev/null; fi
  done
fi
dirs=("$dense")
for a in "${ARMS[@]}"; do case ${a%%|*} in *-seed[0-9]*) ;; *) dirs+=("$(run "${a%%|*}")") ;; esac; done
if ! require_runs "$0" "${dirs[@]}"; then
  [ "$summarize_only" = 1 ] && exit 2
  echo "summary skipped until every arm has a run"; exit 0
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
names=(dense)      # the runs of val_loss.png (not the smaller budgets, not the seed arms)
moe_names=()       # the MoE runs of experts.png
all=("dense=$dense")   # NAME=DIR of every run summarised (the seed arms that exist)
for a in "${ARMS[@]}"; do
  IFS='|' read -r name what opts sets <<<"$a"
  dir=$(run "$name")
  [ -f "$dir/train.csv" ] || continue   # a seed arm not trained yet
  all+=("$name=$dir")
  case $name in scratch*) off=0 ;; *) off=$dense_flops ;; esac
  { [ -f "$dir/eval_start.txt" ] && echo "$off $(cat "$dir/eval_start.txt") 0"
    val_series "$dir" "$off"; } > "$data/$name.val"
  case $name in *-b[12] | *-seed[0-9]*) ;; *) names+=("$name") ;; esac
  case $name in dense-continue*) continue ;; esac
  case $name in *-b[12] | *-seed[0-9]*) ;; *) moe_names+=("$name") ;; esac
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
# val_loss_step50 / _step100: the validation loss at step 50 and 100 of the arm's own run;
# val_step50 / val_step100 name the step it comes from, the nearest evaluated one when the run
# did not evaluate there (quick and smoke; summary.md says so).
near() { # NAME.val TARGET: "step loss" of the evaluation nearest TARGET (the earlier on a tie)
  awk -v t="$2" '$3 > 0 { d = $3 - t; if (d < 0) d = -d
                   if (best == "" || d < best) { best = d; s = $3; v = $2 } }
                 END { if (best != "") printf "%d,%.4f", s, v; else printf "," }' "$1"
}
{
  echo "arm,starts_from,steps,total_tflops,val_loss_start,val_loss_end,expert_sim_start,expert_sim_end,maxvio_end,val_step50,val_loss_step50,val_step100,val_loss_step100"
  echo "dense,random init,$P,$(awk '{ x = $1 } END { printf "%.2f", x / 1e12 }' "$data/dense.val"),,$(tail -n 1 "$data/dense.val" | awk '{ printf "%.4f", $2 }'),,,,$(near "$data/dense.val" 50),$(near "$data/dense.val" 100)"
  for a in "${ARMS[@]}"; do
    IFS='|' read -r name what opts sets <<<"$a"
    dir=$(run "$name")
    [ -f "$dir/train.csv" ] || continue
    steps=$(awk -F' = ' '$1 == "train.steps" { print $2 }' "$dir/config.txt")
    start=$(head -n 1 "$data/$name.val" | awk -v has="$([ -f "$dir/eval_start.txt" ] && echo 1)" '{ if (has) printf "%.4f", $2 }')
    read -r pf end < <(tail -n 1 "$data/$name.val" | awk '{ printf "%.2f %.4f\n", $1 / 1e12, $2 }')
    sims=",,"
    if [ -f "$data/$name.exp" ]; then
      # first and last step's similarity; MaxVio: mean over the last 20 % of the steps
      sims=$(awk -v from=$((steps * 4 / 5)) 'NR == 1 { s0 = $2 } { s1 = $2 } $1 > from { m += $3; n++ }
              END { printf "%.4f,%.4f,%.3f", s0, s1, m / n }' "$data/$name.exp")
    fi
    echo "$name,$what,$steps,$pf,$start,$end,$sims,$(near "$data/$name.val" 50),$(near "$data/$name.val" 100)"
  done
} > "$out/summary.csv"
# curves.csv: every arm's validation loss at every evaluation (step 0: at conversion)
{
  echo "arm,step,total_tflops,val_loss"
  for p in "${all[@]}"; do
    awk -v n="${p%%=*}" '{ printf "%s,%d,%.4f,%s\n", n, $3, $1 / 1e12, $2 }' "$data/${p%%=*}.val"
  done
} > "$out/curves.csv"
write_provenance "$out" "${all[@]}"

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
  echo "Early in the continuation: every arm's validation loss at steps 50 and 100 of its own run, and the from-scratch MoE's at the same total compute (linear interpolation between its evaluations; curves.csv has every evaluation)."
  echo
  echo "| arm | step | val loss | total TFLOPs | scratch at the same TFLOPs | step | val loss | total TFLOPs | scratch at the same TFLOPs |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'FILENAME ~ /curves/ { if (FNR > 1) { c[$1, $2] = $3; if ($1 == "scratch") { n++; sx[n] = $3; sy[n] = $4 } }; next }
    function at(x,   i) { for (i = 1; i < n; i++) if (sx[i] <= x && x <= sx[i + 1])
                             return sprintf("%.4f", sy[i] + (sy[i + 1] - sy[i]) * (x - sx[i]) / (sx[i + 1] - sx[i]))
                           return "-" }
    FNR == 1 { for (i = 1; i <= NF; i++) k[$i] = i; next }
    $1 != "dense" && $1 != "scratch" {
      line = "| " $1
      for (j = 50; j <= 100; j += 50) {
        s = $k["val_step" j]; t = c[$1, s]
        line = line sprintf(" | %s%s | %s | %s | %s", s, (s == j ? "" : " (nearest to " j ")"), $k["val_loss_step" j], t, t == "" ? "-" : at(t)) }
      print line " |" }' "$out/curves.csv" "$out/summary.csv"
  echo
  awk -F, 'NR > 1 && ($10 != 50 || $12 != 100) { bad = 1 }
    END { if (bad) print "These runs did not all evaluate at steps 50 and 100 (evaluation every '"$every"' steps): the table gives the nearest evaluated step, named in its step column.\n" }' "$out/summary.csv"
  seed_note "$REF" val_loss_end "$out/summary.csv"
  provenance_note "${all[@]}"
} > "$out/summary.md"

# line types (chapters/series.gp): each arm its colour, its -lr1e-3 restart the same colour
# dashed (type + 8)
types_of() { # NAME...: one line type per name
  local n i j base
  for n in "$@"; do
    base=${n%-lr1e-3}; j=0; i=0
    for m in "$@"; do i=$((i + 1)); [ "$m" = "$base" ] && j=$i; done
    if [ "$base" != "$n" ]; then echo $((j + 8)); else echo "$j"; fi
  done | tr '\n' ' '
}
gnuplot -e "dir='$data'; names='${names[*]}'; types='$(types_of "${names[@]:1}")'; out='$out/val_loss.png'; $([ "$mode" = smoke ] && echo 'nocap=1;') dense_tflops=$(awk -v f="$dense_flops" 'BEGIN { print f / 1e12 }')" $here/val_loss.gp
gnuplot -e "dir='$data'; names='${moe_names[*]}'; types='$(types_of "${moe_names[@]}")'; out='$out/experts.png'" $here/experts.gp
final_loss_figure "$out/final_loss.png" \
  "Chapter 4: validation loss at the end, equal total compute (bars: seed spread of $REF)" \
  "$REF" val_loss_end "$out/summary.csv" "${names[@]:1}"
awk -F, 'NR > 1 { v[$1] = $6; t[$1] = $4 }
  END { split("-b1 -b2", s, " "); s[3] = ""
        for (i = 1; i <= 3; i++) printf "%s %s %s\n", t["copy" s[i]], v["copy" s[i]], v["scratch" s[i]] }' \
  "$out/summary.csv" > "$data/budgets.dat"
gnuplot -e "data='$data/budgets.dat'; out='$out/budgets.png'" $here/budgets.gp
cat "$out/summary.md"
echo "wrote $out/: summary.csv summary.md curves.csv provenance.txt val_loss.png experts.png budgets.png final_loss.png"
