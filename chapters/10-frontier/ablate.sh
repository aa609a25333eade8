#!/usr/bin/env bash
# Chapter 10: the frontier block. Its attention (MHA, GQA, MLA), norms on queries and keys,
# group-limited routing and multi-token prediction, each trained beside the chapter's baseline.
#
#   bash chapters/10-frontier/ablate.sh            # the handbook's numbers (200 steps an arm)
#   bash chapters/10-frontier/ablate.sh --quick    # 50 steps an arm
#   bash chapters/10-frontier/ablate.sh --smoke    # every arm for 12 steps of a tiny model (the test)
#   bash chapters/10-frontier/ablate.sh --summarize [--quick]   # only redo tables and figures
#   bash chapters/10-frontier/ablate.sh --only NAME              # (re)train one arm
#   bash chapters/10-frontier/ablate.sh --no-mpi  # leave out the dist.ep=4 runs (part 3)
#   bash chapters/10-frontier/ablate.sh --only mtp  # only the multi-token prediction runs (part 4)
#
# The baseline (mha) is the engine's default model at half its batch: 4 blocks of width 128, 4
# heads of 32 channels, 8 experts top-2 of hidden 256 in every block, batch 8 x 128 bytes, lr
# 3e-3. Arms:
#   mha, mha-seed2, mha-seed3   the baseline, three values of train.seed (the spread)
#   gqa                         model.kv_heads=2: two key-value heads shared by two queries each
#   mla                         model.attention=mla: a latent of 64, a rotated key of 16, heads
#                               of 32 + 16 query-key and 32 value channels (about MHA's
#                               parameters, chapters/10-frontier/frontier.c counts them)
#   qk-head                     model.qk_norm=head
#   mha-hot, qk-hot             the baseline and qk-head at a learning rate of 2e-2 and no
#                               gradient clipping, where the logits grow
#   group                       moe.n_group=4 moe.topk_group=1: a token's two experts from one
#                               group of two (DeepSeek-V3's node limit, at this size)
# Each arm trains in four legs (--until at 1/4, 1/2, 3/4, then --resume: bit-exact), and after
# each build/chapters/10-frontier/frontier reads its checkpoint: the largest attention logit,
# the queries' and keys' RMS, the largest router logit, block by block (logits.csv). Then
# moe bench --decode times mha, gqa and mla from their checkpoints at batch 1 and 16
# (decode.csv). Part 3 (quick and full, with Open MPI; build/mpi/moe): the chapter's smallest
# model (width 32, 2 blocks) under dist.ep=4 on 4 processes, unrestricted and group, each with
# dist.dispatch=rows and =tokens, 20 steps: the exchange's bytes from dist.csv beside the cost
# model's (moe plan --config, uniform routing) (mpi.csv). Part 4 (--only mtp alone): the baseline with
# model.mtp_depth 0, 1, 2 at equal steps (mtp0, mtp1, mtp2), and depth 0 at the steps that spend
# depth 1's and 2's training FLOPs (mtp0-c1, mtp0-c2; moe info's FLOPs a token of each config);
# moe sample --draft mtp on mtp1 and mtp2 (mtp.csv, mtp.md, mtp_curves.csv, mtp_provenance.txt,
# mtp.png, written apart from the other arms' files, which it leaves alone).
# Into plots/10-frontier[-quick|-smoke]/: summary.csv, summary.md, curves.csv, logits.csv,
# decode.csv, cache.csv and frontier.txt (the program on fresh models), mpi.csv, provenance.txt,
# val_loss.png, logits.png, final_loss.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/10-frontier
usage_text="[--quick | --smoke] [--summarize] [--only NAME]... [--no-mpi]"
. chapters/lib.sh

use_mpi=1
args=()
for a in "$@"; do
  if [ "$a" = --no-mpi ]; then use_mpi=0; else args+=("$a"); fi
done
ablate_args ${args[@]+"${args[@]}"}
[ "$mode" != smoke ] || use_mpi=0 # the smoke test runs without MPI (tests/test_frontier_chapter.sh)
steps=$(by_mode 200 50 12)
BASE=(--set train.batch=8) # before the smoke mode's own batch (TRAIN_SETS)
ablate_build
make --no-print-directory "${MOE_BUILD:-build}/chapters/10-frontier/frontier" > /dev/null 2>&1 || true
prog=$(dirname "$moe")/chapters/10-frontier/frontier
[ -x "$prog" ] || { echo "no $prog: make chapters builds it" >&2; exit 2; }
out=plots/10-frontier$suffix
mkdir -p "$out" runs

ARMS=("mha|" "mha-seed2|train.seed=2" "mha-seed3|train.seed=3"
      "gqa|model.kv_heads=2"
      "mla|model.attention=mla mla.kv_rank=64 mla.rope_dim=16 mla.nope_dim=32 mla.v_dim=32"
      "qk-head|model.qk_norm=head"
      "mha-hot|train.lr=2e-2 train.clip=0"
      "qk-hot|model.qk_norm=head train.lr=2e-2 train.clip=0"
      "group|moe.n_group=4 moe.topk_group=1")
# the smoke model (2 heads of 16 channels): one key-value head; latent attention of a latent of
# 16 and heads of 8 + 8 query-key and 16 value channels
if [ "$mode" = smoke ]; then
  ARMS[3]="gqa|model.kv_heads=1"
  ARMS[4]="mla|model.attention=mla mla.kv_rank=16 mla.rope_dim=8 mla.nope_dim=8 mla.v_dim=16"
fi
names=()
for a in "${ARMS[@]}"; do names+=("${a%%|*}"); done
check_only "${names[@]}" mpi mtp
run_of() { echo "runs/ch10-$1$suffix"; }

# train_legs NAME SETTINGS: the arm in four legs, the program on each leg's checkpoint
train_legs() {
  local name=$1 dir sets=() kv leg until
  dir=$(run_of "$name")
  for kv in $2; do sets+=(--set "$kv"); done
  rm -rf "$dir"
  echo "== $name ($steps steps): ${2:-the baseline}"
  for leg in 1 2 3 4; do
    until=$((steps * leg / 4))
    local stop=()
    [ $leg = 4 ] || stop=(--until "$until")
    local rc=0
    if [ $leg = 1 ]; then
      # shellcheck disable=SC2046 # warmup_sets prints options (quick and smoke only)
      "$moe" train --out "$dir" --quiet "${BASE[@]}" "${MODEL_SETS[@]}" "${TRAIN_SETS[@]}" $(warmup_sets $steps) \
        --set train.steps=$steps --set train.eval_every=$((steps / 6)) ${sets[@]+"${sets[@]}"} \
        "${EXTRA_SETS[@]}" "${stop[@]}" > "$dir.log" 2>&1 || rc=$?
    else
      "$moe" train --resume "$dir" --quiet "${stop[@]}" >> "$dir.log" 2>&1 || rc=$?
    fi
    echo $rc > "$dir/exit_status"
    if [ $rc != 0 ]; then
      echo "   $name stopped in leg $leg with status $rc (3: diverged); $dir.log has why"
      return 0
    fi
    "$prog" --ckpt "$dir/ckpt.bin" --step $until --csv "$dir/logits.csv" > /dev/null
  done
}

if [ "$summarize_only" = 0 ]; then
  for a in "${ARMS[@]}"; do
    wants "${a%%|*}" && train_legs "${a%%|*}" "${a#*|}"
  done
  if [ ${#only[@]} -eq 0 ]; then
    echo "== the program on fresh models"
    "$prog" --out "$out" > "$out/frontier.txt"
    echo "== decoding: mha, gqa, mla"
    if [ "$mode" = smoke ]; then timing=(--steps 2 --warmup 1); else timing=(); fi
    "$moe" bench --decode --ckpt "$(run_of mha)/ckpt.bin" --ckpt "$(run_of gqa)/ckpt.bin" \
      --ckpt "$(run_of mla)/ckpt.bin" --batch 1,16 ${timing[@]+"${timing[@]}"} --csv |
      sed "s|^runs/ch10-\([a-z]*\)$suffix/ckpt.bin,|\1,|" > "$out/decode.csv"
  fi
fi

# ---- part 3: the exchange under dist.ep=4 ---------------------------------------------------
mpi_steps=20
mpi_model=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
           --set model.d_ff=64 --set moe.d_expert=32 --set train.batch=4 --set train.eval_every=0
           --set train.ckpt_every=0 --set train.warmup=2 --set "train.steps=$mpi_steps")
if [ "$summarize_only" = 0 ] && [ $use_mpi = 1 ] && wants mpi; then
  if command -v mpicc > /dev/null && command -v mpirun > /dev/null; then
    make --no-print-directory mpi > /dev/null
    for g in topk group topk-tokens group-tokens; do
      dir=$(run_of ep4-$g)
      rm -rf "$dir"
      gsets=()
      case $g in group*) gsets=(--set moe.n_group=4 --set moe.topk_group=1) ;; esac
      case $g in *-tokens) gsets+=(--set dist.dispatch=tokens) ;; esac
      echo "== dist.ep=4, $g ($mpi_steps steps of the smallest model, 4 processes)"
      # --bind-to none: Open MPI would pin the four processes to cores one by one
      OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1 mpirun --bind-to none -np 4 \
        build/mpi/moe train --out "$dir" --quiet "${mpi_model[@]}" --set dist.ep=4 \
        --set train.threads=1 ${gsets[@]+"${gsets[@]}"} "${EXTRA_SETS[@]}" > "$dir.log" 2>&1 ||
        { echo "$0: the dist.ep=4 run failed; $dir.log has why (--no-mpi leaves it out)" >&2; exit 1; }
    done
  else
    echo "== no Open MPI (make deps): part 3 left out"
  fi
fi

# mpi_summary: mpi.csv and mpi.md from the dist.ep=4 runs there are (part 3)
mpi_summary() {
  local have=0 g
  for g in topk group topk-tokens group-tokens; do [ -f "$(run_of ep4-$g)/dist.csv" ] && have=1; done
  [ $have = 1 ] || return 0
  {
    echo "arm,steps,bytes_sent_step,rows_out_remote_step,rows_in_step,model_bytes_step"
    for g in topk group topk-tokens group-tokens; do
      d=$(run_of ep4-$g)
      [ -f "$d/dist.csv" ] || continue
      # the cost model of a process's bytes a step under uniform routing (moe plan's exchange,
      # chapter 3's formula; ep.h's for dist.dispatch=tokens), for the run's own config
      model=$("$moe" plan --config "$d/config.txt" --cluster laptop --gpus 4 --csv |
              awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { printf "%.0f", $c["ep_gb"] * 1e9 }')
      awk -F, -v g=$g -v model="$model" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
          $c["layer"] >= 0 { b += $c["bytes_sent"]; r += $c["rows_out_remote"]; ri += $c["rows_in"]; s[$1] = 1; ranks[$3] = 1 }
          END { n = 0; for (x in s) n++; p = 0; for (x in ranks) p++
                printf "%s,%d,%.0f,%.1f,%.1f,%s\n", g, n, b / n / p, r / n / p, ri / n / p, model }' "$d/dist.csv"
    done
  } > "$out/mpi.csv"
  {
    echo "The engine's exchange under dist.ep=4 (4 processes, $mpi_steps steps of width 32 and 2 blocks, a global batch of 4 x 32; dist.csv, a process's blocks, a step, mean over the processes):"
    echo
    echo "| arm | bytes sent a step | cost model (uniform routing) | rows sent away a step | rows the experts ran a step |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    awk -F, 'NR > 1 { printf "| %s | %.0f | %s | %.1f | %.1f |\n", $1, $3, $6, $4, $5 }' "$out/mpi.csv"
    echo
    echo "topk and group send one row per (token, expert) (dist.dispatch=rows, src/model/ep.h): grouping bounds the processes a token reaches, not the bytes. The -tokens arms send a token once to each process it reaches (dist.dispatch=tokens), and there grouping cuts the bytes."
  } > "$out/mpi.md"
  cat "$out/mpi.md"
  echo "wrote $out/: mpi.csv mpi.md"
}
if [ $use_mpi = 1 ] && { [ "$summarize_only" = 1 ] || wants mpi; }; then mpi_summary; fi

# ---- part 4: multi-token prediction ----------------------------------------------------------
# mtp0, mtp1, mtp2: the baseline with model.mtp_depth 0, 1 and 2 (model.mtp_coef 0.3, the
# engine's default), $steps steps each. Compute is counted as moe info's training FLOPs a token
# (forward and backward matrix products, the modules' included) times the tokens trained on:
# mtp0-c1 and mtp0-c2 are depth 0 given the steps that spend what depth 1 and depth 2 spent
# (its warm-up unchanged, its schedule over its own steps). Then moe sample --draft mtp at
# temperature 0 on the depth-1 and depth-2 checkpoints, one prompt at a time: speculative
# decoding, how many of module 1's guesses of the byte after next the model's two-row steps
# accepted, and the bytes a step.
MTP_PROMPTS=("The " "Debian " "If the package " "This program is free software")
mtp_runs=(mtp0 mtp1 mtp2 mtp0-c1 mtp0-c2)
draft_tokens=$(by_mode 256 128 16)
mtp_train() { # NAME STEPS DEPTH
  local dir rc=0
  dir=$(run_of "$1")
  rm -rf "$dir"
  echo "== $1 ($2 steps): model.mtp_depth=$3"
  # shellcheck disable=SC2046 # warmup_sets prints options (quick and smoke only)
  "$moe" train --out "$dir" --quiet "${BASE[@]}" "${MODEL_SETS[@]}" "${TRAIN_SETS[@]}" $(warmup_sets $steps) \
    --set train.steps="$2" --set train.eval_every=$((steps / 6)) --set model.mtp_depth="$3" \
    "${EXTRA_SETS[@]}" > "$dir.log" 2>&1 || rc=$?
  [ -d "$dir" ] && echo $rc > "$dir/exit_status"
  [ $rc = 0 ] || echo "   $1 stopped with status $rc; $dir.log has why"
}
# the validation loss at the last evaluation
last_val() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["val_loss"] != "" { v = $c["val_loss"] } END { print v }' "$1/train.csv"; }
flops_token() { "$moe" info --ckpt "$(run_of "$1")/ckpt.bin" | awk '$1 == "training" && $2 == "FLOPs" { printf "%.0f\n", $5 }'; }
tokens_step() { awk -F' = ' '$1 == "train.batch" { b = $2 } $1 == "model.seq_len" { t = $2 } END { print b * t }' "$(run_of "$1")/config.txt"; }
if [ "$summarize_only" = 0 ] && wants mtp; then
  for d in 0 1 2; do mtp_train mtp$d "$steps" $d; done
  f0=$(flops_token mtp0)
  for d in 1 2; do
    # the steps whose FLOPs equal depth d's, to the nearest step
    mtp_train mtp0-c$d "$(awk -v s="$steps" -v f="$(flops_token mtp$d)" -v f0="$f0" 'BEGIN { printf "%d", s * f / f0 + 0.5 }')" 0
  done
  for d in 1 2; do
    dir=$(run_of mtp$d)
    echo "== the draft of mtp$d: $draft_tokens bytes from each of ${#MTP_PROMPTS[@]} prompts"
    : > "$dir/draft.txt"
    for p in "${MTP_PROMPTS[@]}"; do
      "$moe" sample --ckpt "$dir/ckpt.bin" --prompt "$p" --draft mtp --temperature 0 --tokens "$draft_tokens" \
        2>&1 > /dev/null | grep '^draft mtp:' >> "$dir/draft.txt" ||
        { echo "$0: moe sample --draft mtp on $dir failed" >&2; exit 1; }
    done
  done
fi
mtp_pairs=()
for n in "${mtp_runs[@]}"; do mtp_pairs+=("$n=$(run_of "$n")"); done
mtp_dirs=()
for n in "${mtp_runs[@]}"; do mtp_dirs+=("$(run_of "$n")"); done
# mtp.csv, mtp.md, mtp_curves.csv, mtp_provenance.txt, mtp.png: after the other arms' summary,
# whose seed spread mtp.md quotes, or here when their runs are missing (only --only mtp ran)
mtp_summary() {
  if [ -n "$(missing_runs "${mtp_dirs[@]}")" ]; then
    echo "== no multi-token prediction runs yet (--only mtp trains them): mtp.csv left as it is"
    return 0
  fi
  local tmpm n d depth ns f f0 losses draft sn lo hi
  # per run: depth, steps, FLOPs a token, TFLOPs in all, the main head's last validation loss,
  # the main and the modules' training losses (mean of the last tenth of the steps), the draft
  {
    echo "arm,depth,steps,flops_token,flops_of_depth0,train_tflops,val_loss,train_loss,mtp1_loss,mtp2_loss,draft_kept,draft_guesses,draft_kept_frac,draft_steps,draft_bytes_step,exit_status"
    f0=$(flops_token mtp0)
    for n in "${mtp_runs[@]}"; do
      d=$(run_of "$n")
      depth=$(awk -F' = ' '$1 == "model.mtp_depth" { print $2 }' "$d/config.txt")
      ns=$(awk -F, 'NR > 1 { n = $1 } END { print n }' "$d/train.csv")
      f=$(flops_token "$n")
      losses=$(awk -F, -v s="$ns" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
          $1 > s - (s >= 10 ? int(s / 10) : 1) { n++; l += $c["loss"]; if (c["mtp1_loss"]) m1 += $c["mtp1_loss"]; if (c["mtp2_loss"]) m2 += $c["mtp2_loss"]
                        h1 = c["mtp1_loss"] > 0; h2 = c["mtp2_loss"] > 0 }
          END { printf "%.4f,%s,%s", l / n, h1 ? sprintf("%.4f", m1 / n) : "", h2 ? sprintf("%.4f", m2 / n) : "" }' "$d/train.csv")
      draft=",,,,"
      # a line: "draft mtp: A of G guesses ... accepted (f); N bytes in S steps ...", the first
      # of the N bytes from the prompt's prefill
      [ -s "$d/draft.txt" ] && draft=$(awk '{ k += $3; g += $5; b += $14 - 1; s += $17 }
          END { printf "%d,%d,%.4f,%d,%.4f", k, g, g ? k / g : 0, s, s ? b / s : 0 }' "$d/draft.txt")
      echo "$n,$depth,$ns,$f,$(awk -v f="$f" -v f0="$f0" 'BEGIN { printf "%.4f", f / f0 }'),$(awk -v f="$f" -v t="$(tokens_step "$n")" -v s="$ns" 'BEGIN { printf "%.4f", f * t * s / 1e12 }'),$(last_val "$d"),$losses,$draft,$(cat "$d/exit_status")"
    done
  } > "$out/mtp.csv"
  {
    echo "arm,step,train_tflops,val_loss"
    for n in "${mtp_runs[@]}"; do
      d=$(run_of "$n")
      awk -F, -v n="$n" -v ft="$(awk -v f="$(flops_token "$n")" -v t="$(tokens_step "$n")" 'BEGIN { print f * t / 1e12 }')" \
        'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["val_loss"] != "" { printf "%s,%d,%.4f,%s\n", n, $1, $1 * ft, $c["val_loss"] }' "$d/train.csv"
    done
  } > "$out/mtp_curves.csv"
  mcell() { awk -F, -v k="$1" -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $1 == k { print $c[col] }' "$out/mtp.csv"; }
  {
    echo "# Chapter 10: multi-token prediction"
    echo
    echo "The baseline (mha) with model.mtp_depth 0, 1, 2 (model.mtp_coef $(awk -F' = ' '$1 == "model.mtp_coef" { print $2 }' "$(run_of mtp1)/config.txt")), $steps steps each, and depth 0 again at the steps that spend depth 1's and depth 2's training FLOPs$([ "$mode" = smoke ] && echo ", here at the smoke size (width 32, 2 blocks)")."
    echo
    echo "| arm | depth | steps | FLOPs a token | TFLOPs | val loss | train loss | mtp1 loss | mtp2 loss | draft accepted | bytes a step | exit |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    awk -F, 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $6, $7, $8, $9 == "" ? "-" : $9, $10 == "" ? "-" : $10, $13 == "" ? "-" : $11 " of " $12 " (" $13 ")", $15 == "" ? "-" : $15, $16 }' "$out/mtp.csv"
    echo
    echo "FLOPs a token: moe info's training FLOPs a token (forward and backward matrix products, the modules' included); TFLOPs: that times the tokens of every step. Val loss: the main head's at the last evaluation (the modules are training-only). Train loss, mtp1 and mtp2 loss: the main head's and the modules' training cross-entropy, mean over the last tenth of the steps (module k predicts the byte k + 1 past the next). Draft kept: moe sample --draft mtp --temperature 0, $draft_tokens bytes from each of the prompts $(printf '"%s", ' "${MTP_PROMPTS[@]}" | sed 's/, $//'): speculative decoding, module 1's guesses of the byte after next that the model's step of two rows (the byte before it and the guess) accepted. Bytes a step: the bytes after each prompt's first (which its prefill gives) over the model's steps, 1 without a draft."
    echo
    echo "## At equal steps and at equal compute"
    echo
    echo "| depth | FLOPs of depth 0 | val loss | depth 0, equal steps | depth 0, equal FLOPs | its steps |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
    for k in 1 2; do
      echo "| $k | $(mcell mtp$k flops_of_depth0) | $(mcell mtp$k val_loss) | $(mcell mtp0 val_loss) | $(mcell mtp0-c$k val_loss) | $(mcell mtp0-c$k steps) |"
    done
    echo
    read -r sn lo hi < <(seed_spread "$out/summary.csv" mha val_loss 2> /dev/null || echo 0 0 0)
    if [ "$sn" -ge 2 ]; then
      awk -v n="$sn" -v lo="$lo" -v hi="$hi" 'BEGIN { printf "Seed spread: the baseline (mha, summary.csv) with %d values of train.seed ends between %.4f and %.4f, a spread (max - min) of %.4f nats: differences smaller than that are noise.\n", n, lo, hi, hi - lo }'
    else
      echo "Seed spread: not measured here (summary.csv has no mha-seed2 and mha-seed3): read differences under about 0.01 nats as noise."
    fi
    echo
    provenance_note "${mtp_pairs[@]}" | sed 's/provenance.txt next to this file/mtp_provenance.txt next to this file/'
  } > "$out/mtp.md"
  tmpm=$(mktemp -d)
  write_provenance "$tmpm" "${mtp_pairs[@]}"
  mv "$tmpm/provenance.txt" "$out/mtp_provenance.txt"
  for n in "${mtp_runs[@]}"; do awk -F, -v n="$n" '$1 == n { print $3, $4 }' "$out/mtp_curves.csv" > "$tmpm/$n.flops"; done
  gnuplot -e "dir='$tmpm'; names='${mtp_runs[*]}'; out='$out/mtp.png'" $here/mtp.gp
  rm -rf "$tmpm"
  cat "$out/mtp.md"
  echo "wrote $out/: mtp.csv mtp.md mtp_curves.csv mtp_provenance.txt mtp.png"
}
main_dirs=()
for n in "${names[@]}"; do main_dirs+=("$(run_of "$n")"); done
[ -z "$(missing_runs "${main_dirs[@]}")" ] || mtp_summary

# ---- summary ---------------------------------------------------------------------------------
dirs=()
pairs_all=()
for n in "${names[@]}"; do dirs+=("$(run_of "$n")"); pairs_all+=("$n=$(run_of "$n")"); done
if ! require_runs "$0" "${dirs[@]}"; then
  [ "$summarize_only" = 1 ] && exit 2
  exit 0
fi
for f in frontier.txt cache.csv decode.csv; do
  [ -s "$out/$f" ] || { echo "$0: no $out/$f: run the script without --summarize or --only first" >&2; exit 2; }
done

# the mean step time over the second half (ms)
step_ms() {
  local bt
  bt=$(awk -F' = ' '$1 == "train.batch" { b = $2 } $1 == "model.seq_len" { t = $2 } END { print b * t }' "$1/config.txt")
  awk -F, -v bt="$bt" -v s="$steps" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      $1 > s / 2 && $c["tok_per_s"] > 0 { t += bt / $c["tok_per_s"]; n++ } END { printf "%.1f", n ? 1000 * t / n : 0 }' "$1/train.csv"
}
{
  echo "arm,params,active,val_loss,step_ms,exit_status,max_attn_logit,q_rms,k_rms,router_max_logit,procs_per_token,remote_rows_per_token,remote_procs_per_token"
  for n in "${names[@]}"; do
    d=$(run_of "$n")
    read -r total active < <("$moe" plan --config "$d/config.txt" --json |
      sed 's/.*"total": \([0-9]*\), "active": [0-9]*, "active_with_embedding": \([0-9]*\).*/\1 \2/')
    # the last leg's row of every block: the largest attention and router logits over the
    # blocks, the RMS and the processes' means
    stats=$(awk -F, 'NR > 1 { s = $2 } NR > 1 { r[NR] = $0 } END {
        for (i in r) { split(r[i], f, ","); if (f[2] != s) continue
          if (n == 0 || f[4] > ma) ma = f[4]; q += f[5]; k += f[6]; if (n == 0 || f[7] > mr) mr = f[7]
          p += f[8]; rr += f[9]; rp += f[10]; n++ }
        if (n) printf "%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f", ma, q / n, k / n, mr, p / n, rr / n, rp / n
        else printf ",,,,,," }' "$d/logits.csv" 2> /dev/null || echo ",,,,,,")
    echo "$n,$total,$active,$(last_val "$d"),$(step_ms "$d"),$(cat "$d/exit_status"),$stats"
  done
} > "$out/summary.csv"
{
  echo "arm,step,layer,max_attn_logit,q_rms,k_rms,router_max_logit,procs_per_token,remote_rows_per_token,remote_procs_per_token"
  for n in "${names[@]}"; do tail -n +2 "$(run_of "$n")/logits.csv" 2> /dev/null | sed "s/^[^,]*,/$n,/"; done
} > "$out/logits.csv"
write_curves "$out/curves.csv" "${pairs_all[@]}"

# cell CSV KEY COLUMN
cell() { awk -F, -v k="$2" -v col="$3" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $1 == k { print $c[col] }' "$1"; }
{
  echo "# Chapter 10: the frontier block"
  echo
  echo "Every arm: $steps steps of the engine's default model (4 blocks of width 128, 4 heads, 8 experts top-2 of hidden 256, batch 8 x 128 bytes) unless its settings say otherwise$([ "$mode" = smoke ] && echo ", here at the smoke size (width 32, 2 blocks)")."
  echo
  echo "| arm | settings | params | active | val loss | step ms | exit | max attention logit | q RMS | k RMS | max router logit |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for a in "${ARMS[@]}"; do
    n=${a%%|*}
    awk -F, -v n="$n" -v s="${a#*|}" 'NR > 1 && $1 == n { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, s == "" ? "(baseline)" : s, $2, $3, $4, $5, $6, $7, $8, $9, $10 }' "$out/summary.csv"
  done
  echo
  echo "Params and active: moe plan's counts (active with the embedding). Val loss at the last evaluation; step ms the mean over the second half of the steps; exit the run's status (3: diverged). The logits and RMS: frontier.c on the last checkpoint, one validation batch of 4 sequences; the largest over the blocks (the RMS their mean)."
  echo
  seed_note mha val_loss "$out/summary.csv"
  echo
  echo "## The key-value cache and decoding"
  echo
  echo "| model | batch | decode tok/s | cache bytes | step ms |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      { printf "| %s | %d | %.0f | %.0f | %.2f |\n", $1, $c["batch"], $c["decode_tok_s"], $c["cache_bytes"], 1000 * $c["step_s"] }' "$out/decode.csv"
  echo
  echo "The program on fresh models of the chapter's shape (frontier.txt; cache.csv):"
  echo
  echo '```'
  cat "$out/frontier.txt"
  echo '```'
  echo
  echo "## Group-limited routing under expert parallelism"
  echo
  echo "Where the rows of the trained models would go over 4 processes (frontier.c; a token's processes, its rows to other processes, and those processes), mean over the blocks:"
  echo
  echo "| arm | processes a token reaches | rows sent away a token | processes sent to a token |"
  echo "| --- | ---: | ---: | ---: |"
  for n in mha group; do
    awk -F, -v n="$n" 'NR > 1 && $1 == n { printf "| %s | %s | %s | %s |\n", n, $11, $12, $13 }' "$out/summary.csv"
  done
  echo
  provenance_note "${pairs_all[@]}"
} > "$out/summary.md"
write_provenance "$out" "${pairs_all[@]}"

# ---- figures ---------------------------------------------------------------------------------
tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT
for n in "${names[@]}"; do
  awk -F, -v n="$n" '$1 == n { print $2, $3 }' "$out/curves.csv" > "$tmpd/$n.val"
  # a step's largest attention and router logits over the blocks
  awk -F, -v n="$n" '$1 == n { if (!($2 in a) || $4 > a[$2]) a[$2] = $4; if (!($2 in r) || $7 > r[$2]) r[$2] = $7 }
      END { for (s in a) print s, a[s], r[s] }' "$out/logits.csv" | sort -n > "$tmpd/$n.logits"
done
gnuplot -e "dir='$tmpd'; names='${names[*]}'; out='$out/val_loss.png'" $here/val_loss.gp
gnuplot -e "dir='$tmpd'; names='mha qk-head mha-hot qk-hot gqa mla'; out='$out/logits.png'" $here/logits.gp
final_loss_figure "$out/final_loss.png" "chapter 10: final validation loss ($steps steps)" mha val_loss \
  "$out/summary.csv" "${names[@]}"
cat "$out/summary.md"
echo "wrote $out/: summary.csv summary.md curves.csv logits.csv decode.csv cache.csv frontier.txt provenance.txt val_loss.png logits.png final_loss.png"
mtp_summary
