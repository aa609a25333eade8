#!/usr/bin/env bash
# Chapter 6: acting on a loss spike. One run with a corrupted stretch of data in its middle (a
# few batches of random tokens, data.corrupt_from and data.corrupt_batches), trained as it is
# (spike_action=none), skipping the spiking updates (skip), rolling back over them (rollback),
# and with AdamW's second moment made to follow faster (train.beta2=0.95), its epsilon raised
# (train.eps=1e-5) or the gradient clipped (train.clip=1); and the clean run of each optimizer setting without the stretch, which
# every corrupted arm is measured against, seed by seed.
#
#   bash chapters/06-troubleshooting/spikes.sh            # 300 steps, 8 seeds per arm (the handbook's numbers)
#   bash chapters/06-troubleshooting/spikes.sh --quick    # 150 steps, 3 seeds per arm
#   bash chapters/06-troubleshooting/spikes.sh --smoke    # 60 steps, 2 seeds per arm (the test)
#   bash chapters/06-troubleshooting/spikes.sh --summarize [--quick|--smoke]   # only redo tables and figures
#   bash chapters/06-troubleshooting/spikes.sh --only NAME   # (re)train one arm, every seed
#   MOE_BIN=path/to/moe bash chapters/06-troubleshooting/spikes.sh   # with another build of moe
#
# The model (MODEL): width 32, 2 blocks, 4 experts top-2, batches of 4 x 32 bytes, a learning
# rate of 1e-2 after 10 steps of warm-up, no clipping, AdamW with beta2 = 0.999 (the common
# default of Adam's implementations; moe.c's own is 0.95). The stretch: the batches FROM ..
# FROM + N - 1 of the data stream (steps FROM + 1 .. FROM + N), 15 batches from 125 of 300 in
# full mode. A spike (train.csv's flags) is a value above the mean of the 20 steps before it by
# train.spike_k = 8 standard deviations: at the default 4 these tiny runs flag loss spikes of
# their own in the first hundred steps, and a rollback there skips batches too (rollback-k4
# shows what that does). Two more arms meet one corrupted batch instead of the stretch
# (none-lone, skip-lone): what skipping is for. The arms act on loss spikes
# (train.spike_on=loss) but rollback-either, which acts on the gradient norm's too. A rollback returns to rollback.bin, kept every 25 steps
# (train.rollback_every), and skips 20 batches (train.rollback_skip) after the undone ones.
#
# Measured per run, from its train.csv (the steps it kept) and, for a rollback run, its
# rollbacks.csv and rolled_back.csv: the validation loss at IN (5 steps into the stretch), END
# (its last step), AFTER (10 steps after it) and at the last step, each minus that of the clean
# run of the same seed and optimizer settings (the arm's ref); the updates skipped, the
# rollbacks, the steps they undid, the updates applied on a corrupted batch (bad_updates: the
# corrupted batches' updates the run kept) and whether a rollback was set off by a corrupted batch
# (caught; a run whose earlier rollbacks skipped over the stretch never meets it).
# Writes runs/ch06-spikes-NAME-sSEED[-quick|-smoke]/ and, in plots/06-spikes[-quick|-smoke]/:
# runs.csv (one row per run), summary.csv and summary.md (one row per arm, means over the
# seeds), curves.csv (every run's validation loss at every evaluation it kept, and the undone
# ones of rollback runs), provenance.txt, curves.png (one seed's validation loss around the
# stretch under none, skip and rollback; the mean damage over the seeds under none, beta2 0.95,
# clip 1 and eps 1e-5) and damage.png (every seed's damage, per arm).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/06-troubleshooting
. chapters/lib.sh

MODEL=(model.d_model=32 model.n_layer=2 model.n_head=2 model.seq_len=32 model.d_ff=64
       moe.num_experts=4 moe.d_expert=32 train.batch=4 train.lr=1e-2 train.warmup=10
       train.clip=0 train.beta2=0.999 train.spike_k=8 train.eval_every=5 train.eval_batches=8
       train.ckpt_every=0)
ROLL="train.spike_action=rollback train.max_rollbacks=10 train.rollback_skip=20"
ncor=15 # the stretch's batches
# name | corrupted batches from FROM on | settings | the clean arm it is measured against | what it does
ARMS=(
  "clean|0||clean|no corrupted stretch: the reference of none, skip and the rollbacks"
  "none|$ncor||clean|the stretch trained on (train.spike_action=none)"
  "skip|$ncor|train.spike_action=skip train.spike_on=loss|clean|a loss spike's update not applied"
  "rollback|$ncor|$ROLL train.spike_on=loss|clean|back to rollback.bin at a loss spike, the undone steps' batches and 20 more skipped"
  "rollback-either|$ncor|$ROLL train.spike_on=either|clean|rollback at a spike of the loss or of the gradient norm"
  "rollback-k4|$ncor|$ROLL train.spike_on=loss train.spike_k=4|clean|rollback with spikes judged at the default 4 standard deviations"
  "clean-beta2-0.95|0|train.beta2=0.95|clean-beta2-0.95|no stretch, AdamW beta2 0.95: the reference of beta2-0.95"
  "beta2-0.95|$ncor|train.beta2=0.95|clean-beta2-0.95|the stretch trained on, AdamW beta2 0.95"
  "clean-clip-1|0|train.clip=1|clean-clip-1|no stretch, gradients clipped to norm 1: the reference of clip-1"
  "clip-1|$ncor|train.clip=1|clean-clip-1|the stretch trained on, gradients clipped to norm 1"
  "clean-eps-1e-5|0|train.eps=1e-5|clean-eps-1e-5|no stretch, AdamW eps 1e-5: the reference of eps-1e-5"
  "eps-1e-5|$ncor|train.eps=1e-5|clean-eps-1e-5|the stretch trained on, AdamW eps 1e-5"
  "none-lone|1||clean|one corrupted batch, not a stretch, trained on"
  "skip-lone|1|train.spike_action=skip train.spike_on=loss|clean|one corrupted batch, its update skipped at a loss spike"
)

ablate_args "$@"
steps=$(by_mode 300 150 60)
nseeds=$(by_mode 8 3 2)
from=$(by_mode 125 60 25) # the first corrupted batch (0-based): step from + 1
every=$(by_mode 25 20 10) # train.rollback_every
check_only $(for v in "${ARMS[@]}"; do echo "${v%%|*}"; done)
ablate_build
out=plots/06-spikes$suffix
mkdir -p "$out" runs
in_step=$((from + 5)) end_step=$((from + ncor)) after_step=$((from + ncor + 10))
curve_seed=1 # the seed curves.png draws

# train NAME SEED NCORRUPT SETTINGS...: one run into runs/ch06-spikes-NAME-sSEED$suffix; its exit
# status goes to exit_status (3: a spike after train.max_rollbacks rollbacks, a result here)
train() {
  local name=$1 seed=$2 corrupt=$3 dir=runs/ch06-spikes-$1-s$2$suffix rc=0 sets=() kv
  shift 3
  for kv in "${MODEL[@]}" "$@"; do sets+=(--set "$kv"); done
  [ "$corrupt" = 0 ] || sets+=(--set data.corrupt_from=$from --set data.corrupt_batches=$corrupt)
  rm -rf "$dir"
  "$moe" train --out "$dir" --quiet "${sets[@]}" --set train.steps=$steps \
    --set train.rollback_every=$every --set train.seed=$seed "${EXTRA_SETS[@]}" > "$dir.log" 2>&1 ||
    rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || { cat "$dir.log" >&2; echo "$dir: exit $rc" >&2; exit 1; }
  echo "$rc" > "$dir/exit_status"
  rm -f "$dir.log" "$dir/ckpt.bin" "$dir/rollback.bin"
}

# two runs at a time (launch, chapters/lib.sh): the machine's cores, one thread each
export OMP_NUM_THREADS=1
for v in "${ARMS[@]}"; do
  IFS='|' read -r name corrupt settings ref what <<<"$v"
  wants "$name" || continue
  echo "== $name ($nseeds seeds): $what"
  # shellcheck disable=SC2086 # the settings are words
  for seed in $(seq 1 "$nseeds"); do launch "$name" "$seed" "$corrupt" $settings; done
done
launched

dirs=()
all=()
for v in "${ARMS[@]}"; do
  name=${v%%|*}
  for seed in $(seq 1 "$nseeds"); do
    dirs+=("runs/ch06-spikes-$name-s$seed$suffix")
    all+=("$name-s$seed=runs/ch06-spikes-$name-s$seed$suffix")
  done
done
if ! require_runs "$0" "${dirs[@]}"; then
  [ "$summarize_only" = 1 ] && exit 2
  echo "summary skipped until every arm has its runs"; exit 0
fi

# ---- one row per run ---------------------------------------------------------------------------
# run_row DIR NCORRUPT: "val_in val_end val_after val_final loss_flags grad_flags skips rollbacks
# steps_redone batches_skipped bad_updates caught" of one run. The batch step t (train.csv's
# 1-based step) trained on is t - 1 plus the batches skipped at 0-based steps up to t - 1 by the
# rollbacks recorded before it (spike.h): every rollback's row for the kept steps, the earlier
# rollbacks' for the steps the k-th undid. NCORRUPT: the arm's corrupted batches (0: a clean arm).
run_row() {
  local dir=$1 hi=$((from + $2)) rb=/dev/null undone=/dev/null
  [ -f "$dir/rollbacks.csv" ] && rb=$dir/rollbacks.csv
  [ -f "$dir/rolled_back.csv" ] && undone=$dir/rolled_back.csv
  awk -F, -v in_s=$in_step -v end_s=$end_step -v after_s=$after_step -v lo=$from -v hi=$hi '
    function batch(t, k,   j, b) { b = t - 1; for (j = 1; j < k; j++) if (at[j] <= t - 1) b += nb[j]; return b }
    function bad(b) { return b >= lo && b < hi }
    FILENAME == ARGV[1] { if (FNR > 1) { n++; sp[n] = $2; to[n] = $3; at[n] = $4; nb[n] = $5
                                          redone += $2 - $3; skipped_b += $5 }
                          next }
    FILENAME == ARGV[2] { if (FNR > 1 && $2 == sp[$1] && bad(batch($2, $1))) caught = 1; next }
    FNR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { t = $1; last = t
      if ($c["val_loss"] != "") v[t] = $c["val_loss"]
      lf += $c["loss_spike"]; gf += $c["grad_spike"]
      sk = ("skipped" in c) ? $c["skipped"] : 0; skips += sk
      if (!sk && bad(batch(t, n + 1))) badu++ }
    function val(s) { return (s in v) ? v[s] : "nan" }
    END { printf "%s %s %s %s %d %d %d %d %d %d %d %d\n", val(in_s), val(end_s), val(after_s), val(last),
                 lf, gf, skips, n, redone, skipped_b, badu, caught }' "$rb" "$undone" "$dir/train.csv"
}
{
  echo "arm,seed,exit,ref,val_in,val_end,val_after,val_final,d_in,d_end,d_after,d_final,loss_flags,grad_flags,skips,rollbacks,steps_redone,batches_skipped,bad_updates,caught"
  for v in "${ARMS[@]}"; do
    IFS='|' read -r name corrupt settings ref what <<<"$v"
    for seed in $(seq 1 "$nseeds"); do
      dir=runs/ch06-spikes-$name-s$seed$suffix
      read -r a b c d rest < <(run_row "$dir" "$corrupt")
      read -r ra rb rc rd _ < <(run_row "runs/ch06-spikes-$ref-s$seed$suffix" 0)
      awk -v arm="$name" -v seed="$seed" -v rc="$(cat "$dir/exit_status")" -v ref="$ref" \
          -v vals="$a $b $c $d" -v refs="$ra $rb $rc $rd" -v rest="$rest" 'BEGIN {
        split(vals, x, " "); split(refs, r, " "); gsub(" ", ",", rest)
        printf "%s,%s,%s,%s", arm, seed, rc, ref
        for (i = 1; i <= 4; i++) printf ",%s", x[i] == "nan" ? "nan" : sprintf("%.4f", x[i])
        for (i = 1; i <= 4; i++) printf ",%s", x[i] == "nan" || r[i] == "nan" ? "nan" : sprintf("%.4f", x[i] - r[i])
        printf ",%s\n", rest }'
    done
  done
} > "$out/runs.csv"

# ---- one row per arm: means over the seeds (d_final's min and max too) --------------------------
{
  echo "arm,runs,ref,d_in,d_end,d_after,d_final,d_final_min,d_final_max,val_final,loss_flags,grad_flags,skips,rollbacks,steps_redone,batches_skipped,bad_updates,caught,stopped,settings"
  for v in "${ARMS[@]}"; do
    IFS='|' read -r name corrupt settings ref what <<<"$v"
    awk -F, -v arm="$name" -v settings="$settings" '
      NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      $1 == arm { n++; ref = $4; stopped += $3 == 3
        for (i = 9; i <= NF; i++) s[i] += $i
        f = $c["d_final"] + 0; if (n == 1 || f < lo) lo = f; if (n == 1 || f > hi) hi = f
        vf += $c["val_final"] }
      END { printf "%s,%d,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f", arm, n, ref, s[9] / n, s[10] / n, s[11] / n, s[12] / n, lo, hi, vf / n
            for (i = 13; i <= 19; i++) printf ",%.2f", s[i] / n
            printf ",%d,%d,%s\n", s[20], stopped, settings }' "$out/runs.csv"
  done
} > "$out/summary.csv"

{
  echo "### Acting on a corrupted stretch: $nseeds seeds per arm, $steps steps, batches $from-$((from + ncor - 1)) random tokens (batch $from alone in the -lone arms)"
  echo
  echo "| arm | what it does | measured against | Δ val loss 5 steps into the stretch | at its end | 10 steps after | at step $steps (min to max) | val loss at step $steps | updates skipped | rollbacks | steps undone | bad updates kept | runs whose rollback caught the stretch |"
  echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for v in "${ARMS[@]}"; do
    IFS='|' read -r name corrupt settings ref what <<<"$v"
    [ "$corrupt" = 0 ] && continue
    awk -F, -v arm="$name" -v what="$what" 'NR > 1 && $1 == arm {
      printf "| %s | %s | %s | %+.3f | %+.3f | %+.3f | %+.3f (%+.3f to %+.3f) | %.4f | %.2f | %.2f | %.1f | %.1f | %d of %d |\n",
             $1, what, $3, $4, $5, $6, $7, $8, $9, $10, $13, $14, $15, $17, $18, $2 }' "$out/summary.csv"
  done
  echo
  echo "Means over the seeds. Δ: the run's validation loss minus that of the clean run of the same seed and optimizer settings (the arm named in the third column), at step $in_step (5 steps into the stretch of steps $((from + 1))-$end_step), step $end_step, step $after_step and step $steps; the min and max over the seeds of the last in brackets. Bad updates kept: updates applied on a corrupted batch that the run kept (none trains on $ncor, none-lone on 1; a rollback's undone steps do not count). The clean arms:"
  echo
  echo "| clean arm | val loss at step $steps | loss spikes flagged | gradient-norm spikes flagged |"
  echo "| --- | ---: | ---: | ---: |"
  for v in "${ARMS[@]}"; do
    IFS='|' read -r name corrupt settings ref what <<<"$v"
    [ "$corrupt" = 0 ] || continue
    awk -F, -v arm="$name" 'NR > 1 && $1 == arm { printf "| %s | %.4f | %.2f | %.2f |\n", $1, $10, $11, $12 }' "$out/summary.csv"
  done
  echo
  echo "Spikes flagged: per run, train.csv's flags at train.spike_k = 8 (a value above the mean of the 20 steps before it by 8 of their standard deviations). runs.csv has every run; summary.csv every column."
  echo
  provenance_note "${all[@]}"
} > "$out/summary.md"
write_provenance "$out" "${all[@]}"

# every evaluation of every run: the kept steps (kept=1) and a rollback's undone ones (kept=0,
# the rollback's number in `rollback`)
{
  echo "arm,seed,step,val_loss,kept,rollback"
  for v in "${ARMS[@]}"; do
    name=${v%%|*}
    for seed in $(seq 1 "$nseeds"); do
      dir=runs/ch06-spikes-$name-s$seed$suffix
      awk -F, -v arm="$name" -v seed="$seed" 'FNR == 1 { delete c; for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["val_loss"] != "" { if ("rollback" in c) print arm "," seed "," $2 "," $c["val_loss"] ",0," $1
                               else print arm "," seed "," $1 "," $c["val_loss"] ",1," }' \
        "$dir/train.csv" $([ -f "$dir/rolled_back.csv" ] && echo "$dir/rolled_back.csv")
    done
  done
} > "$out/curves.csv"

# ---- figures ---------------------------------------------------------------------------------------
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
# curves.png: one seed's validation loss in the arms that act at the spike; and the mean over
# the seeds of none, beta2-0.95, clip-1 and eps-1e-5 minus their clean runs, step by step
awk -F, -v seed=$curve_seed -v d="$data" 'NR > 1 && $2 == seed && $5 == 1 { print $3, $4 > (d "/" $1 ".val") }' \
  "$out/curves.csv"
for p in "none clean" "beta2-0.95 clean-beta2-0.95" "clip-1 clean-clip-1" "eps-1e-5 clean-eps-1e-5"; do
  read -r a r <<<"$p"
  awk -F, -v a="$a" -v r="$r" 'NR > 1 && $5 == 1 && ($1 == a || $1 == r) { v[$1, $2, $3] = $4; steps[$3] = 1; seeds[$2] = 1 }
    END { for (t in steps) { s = 0; n = 0
            for (k in seeds) if ((a, k, t) in v && (r, k, t) in v) { s += v[a, k, t] - v[r, k, t]; n++ }
            if (n) print t, s / n } }' "$out/curves.csv" | sort -n > "$data/$a.delta"
done
gnuplot -e "dir='$data'; out='$out/curves.png'; from=$from; ncor=$ncor; steps=$steps; seed=$curve_seed; n=$nseeds" \
  $here/spikes_curves.gp
# damage.png: per corrupted arm (row y, 1 at the top), every seed's Δ at IN and at the last step;
# the arms of the stretch (seeds, means) apart from those of one batch (lone_seeds, lone_means),
# whose damage is a hundredth as large
stretch=() lone=()
for v in "${ARMS[@]}"; do
  IFS='|' read -r name corrupt settings ref what <<<"$v"
  case $corrupt in 0) ;; 1) lone+=("$name") ;; *) stretch+=("$name") ;; esac
done
rows() { # NAMES FILE D_IN_COLUMN D_FINAL_COLUMN: "y arm d_in d_final" of the rows of NAMES
  awk -F, -v names="$1" -v ci="$3" -v cf="$4" 'BEGIN { k = split(names, a, " "); for (i = 1; i <= k; i++) y[a[i]] = i }
    NR > 1 && ($1 in y) { print y[$1], $1, $ci, $cf }' "$2"
}
rows "${stretch[*]}" "$out/runs.csv" 9 12 > "$data/seeds"
rows "${stretch[*]}" "$out/summary.csv" 4 7 > "$data/means"
rows "${lone[*]}" "$out/runs.csv" 9 12 > "$data/lone_seeds"
rows "${lone[*]}" "$out/summary.csv" 4 7 > "$data/lone_means"
gnuplot -e "dir='$data'; out='$out/damage.png'; n=$nseeds; steps=$steps; in_step=$in_step; ncor=$ncor; nlone=${#lone[@]}; H=$((300 + 34 * (${#stretch[@]} + ${#lone[@]})))" \
  $here/spikes_damage.gp
cat "$out/summary.md"
echo "wrote $out/: runs.csv summary.csv summary.md curves.csv provenance.txt curves.png damage.png"
