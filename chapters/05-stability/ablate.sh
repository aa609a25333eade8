#!/usr/bin/env bash
# Chapter 5: a model made to be fragile, trained under each stability method over several seeds,
# and the balance loss's scope on a stable one.
#
#   bash chapters/05-stability/ablate.sh            # 300 steps, 20 seeds per arm (the handbook's numbers)
#   bash chapters/05-stability/ablate.sh --quick    # 100 steps, 4 seeds per arm
#   bash chapters/05-stability/ablate.sh --smoke    # 12 steps of a tiny model, 2 seeds (the test)
#   bash chapters/05-stability/ablate.sh --summarize [--quick]   # only redo tables and figures
#   bash chapters/05-stability/ablate.sh --only NAME [--quick]   # (re)train one arm, every seed
#   MOE_BIN=path/to/moe bash chapters/05-stability/ablate.sh     # with another build of moe
#
# Part 1, stability. Instability is a matter of chance, so every arm is trained with SEEDS values
# of train.seed and counted: how many runs diverged (a training loss above train.diverge_loss,
# 7 nats where uniform bytes cost 5.55: moe train stops with exit status 3), how many loss and
# gradient-norm spikes the others had (train.csv's flags: above the mean of the 20 steps before
# by 4 standard deviations), their final validation loss and their router logits. The fragile
# model (FRAGILE): 8 blocks of width 64, 8 experts of hidden 64 top-2 in every block, batch 8 x
# 64 bytes, a peak learning rate of 0.14 reached after 5 steps, no gradient clipping. ARMS change
# one method each against the baseline pre.
# Part 2, balancing scope. On a stable model (the same shape at learning rate 1e-2 with
# clipping) trained in micro-batches of 2 sequences, 8 per step: the aux loss counted per
# micro-batch, over the step's batch (moe.balance_scope=global), and over 2 groups of experts
# (moe.balance_groups=2); the balance of the step's batch (router.csv MaxVio) against how much
# the experts specialise in the six domains (domains.csv: the mutual information of domain and
# expert).
# Writes runs/ch05-NAME-sSEED[-quick|-smoke]/ and, in plots/05-stability[-quick|-smoke]/:
# summary.csv and summary.md (part 1, one row per arm), balance.csv (part 2, one row per run),
# runs.csv (part 1, one row per run), curves.csv (every run's validation loss at every
# evaluation, the run named ARM-sSEED), provenance.txt, stability.png (diverged runs and spikes per
# arm), logits.png (the largest router logit over training), balance.png (part 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/05-stability
. chapters/lib.sh

FRAGILE=(model.d_model=64 model.n_layer=8 model.n_head=4 model.seq_len=64 model.d_ff=256
         moe.num_experts=8 moe.top_k=2 moe.d_expert=64 train.batch=8 train.lr=0.14
         train.warmup=5 train.clip=0 train.diverge_loss=7)
# name | settings | what it shows
ARMS=(
  "pre|model.norm=pre|pre-norm, default init, fp32 router, z-loss 1e-3: the baseline"
  "sandwich|model.norm=sandwich|sandwich norm: an output norm of gain 1 on each sublayer"
  "dssn|model.norm=dssn|depth-scaled sandwich norm: output gains 0.283 and 0.432 over sqrt(L)"
  "tinyinit|model.init=tiny|TinyInit: std sqrt(1 / (2 C L)), embedding 0.5"
  "dssn-tinyinit|model.norm=dssn model.init=tiny|DSSN with TinyInit, as Pangu Ultra pairs them"
  "init-0.1|model.init_scale=0.1|every init std divided by 10 (Switch Transformer's smaller init)"
  "bf16-router|moe.router_precision=bf16|the router in bf16: input, weights, logits, scores rounded"
  "z-off|moe.z_coef=0|no router z-loss"
  "z-1e-2|moe.z_coef=1e-2|10 times the router z-loss"
)
STABLE=(model.d_model=64 model.n_layer=8 model.n_head=4 model.seq_len=64 model.d_ff=256
        moe.num_experts=8 moe.top_k=2 moe.d_expert=64 train.batch=2 train.accum=8 train.lr=1e-2)
SCOPES=(
  "micro|moe.balance_scope=micro|aux loss per micro-batch of 2 sequences"
  "global|moe.balance_scope=global|aux loss over the step's 8 micro-batches so far"
  "groups-2|moe.balance_groups=2|aux loss over 2 groups of 4 experts, per micro-batch"
)

ablate_args "$@"
steps=$(by_mode 300 100 12)
nseeds=$(by_mode 20 4 2)
bseeds=$(by_mode 4 2 1)
check_only $(for v in "${ARMS[@]}" "${SCOPES[@]}"; do echo "${v%%|*}"; done)
ablate_build
out=plots/05-stability$suffix
mkdir -p "$out"

# the smoke mode's tiny shape and batch (lib.sh's --set options) as key=value words, which
# override a part's model and come before an arm's own settings
SMOKE=()
for kv in "${MODEL_SETS[@]}" "${TRAIN_SETS[@]}"; do [ "$kv" = --set ] || SMOKE+=("$kv"); done

# train NAME SEED SETTINGS...: one run into runs/ch05-NAME-sSEED$suffix; its exit status goes
# to exit_status next to train.csv (3: diverged, which is a result here, not a failure)
train() {
  local name=$1 seed=$2 dir=runs/ch05-$1-s$2$suffix rc=0 sets=() kv
  shift 2
  for kv in "$@"; do sets+=(--set "$kv"); done
  rm -rf "$dir"
  "$moe" train --out "$dir" --quiet "${sets[@]}" --set train.steps=$steps \
    --set train.eval_every=$((steps / 6)) --set train.seed=$seed "${EXTRA_SETS[@]}" > "$dir.log" 2>&1 ||
    rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || { cat "$dir.log" >&2; echo "$dir: exit $rc" >&2; exit 1; }
  echo "$rc" > "$dir/exit_status"
  rm -f "$dir.log"
}

# two runs at a time (launch, chapters/lib.sh): the machine's cores, one thread each
export OMP_NUM_THREADS=1
for v in "${ARMS[@]}"; do
  IFS='|' read -r name settings what <<<"$v"
  wants "$name" || continue
  echo "== $name ($nseeds seeds): $what"
  # shellcheck disable=SC2086 # the settings are words
  for seed in $(seq 1 "$nseeds"); do
    launch "$name" "$seed" "${FRAGILE[@]}" ${SMOKE[@]+"${SMOKE[@]}"} $settings
  done
done
for v in "${SCOPES[@]}"; do
  IFS='|' read -r name settings what <<<"$v"
  wants "$name" || continue
  echo "== $name ($bseeds seeds): $what"
  # shellcheck disable=SC2086
  for seed in $(seq 1 "$bseeds"); do
    launch "$name" "$seed" "${STABLE[@]}" train.warmup=$((steps / 10)) ${SMOKE[@]+"${SMOKE[@]}"} \
      $settings
  done
done
launched

dirs=()
all=()
for v in "${ARMS[@]}" "${SCOPES[@]}"; do
  name=${v%%|*}
  n=$nseeds
  case " ${SCOPES[*]} " in *" $name|"*) n=$bseeds ;; esac
  for seed in $(seq 1 "$n"); do
    dirs+=("runs/ch05-$name-s$seed$suffix")
    all+=("$name-s$seed=runs/ch05-$name-s$seed$suffix")
  done
done
if ! require_runs "$0" "${dirs[@]}"; then
  [ "$summarize_only" = 1 ] && exit 2
  echo "summary skipped until every arm has its runs"; exit 0
fi

# ---- part 1: one row per run, then per arm ---------------------------------------------------
# per run: diverged (exit status 3), the step it stopped at, its loss and gradient spikes, its
# final validation loss, and over its last 20% of steps the largest router logit and the mean
# logsumexp (mean over the MoE blocks)
{
  echo "arm,seed,diverged,last_step,loss_spikes,grad_spikes,val_loss,max_logit,lse_mean"
  for v in "${ARMS[@]}"; do
    name=${v%%|*}
    for seed in $(seq 1 "$nseeds"); do
      dir=runs/ch05-$name-s$seed$suffix
      div=$([ "$(cat "$dir/exit_status")" = 3 ] && echo 1 || echo 0)
      read -r last ls gs val < <(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
          { last = $1; ls += $c["loss_spike"]; gs += $c["grad_spike"]
            if ($c["val_loss"] != "") val = $c["val_loss"] }
          END { printf "%d %d %d %s\n", last, ls, gs, val == "" ? "nan" : val }' "$dir/train.csv")
      read -r ml lm < <(awk -F, -v from=$((steps * 4 / 5)) '
          NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
          $1 > from { m += $c["max_logit"]; l += $c["lse_mean"]; n++ }
          END { if (n) printf "%.3f %.3f\n", m / n, l / n; else print "nan nan" }' "$dir/router.csv")
      [ "$div" = 1 ] && val=nan ml=nan lm=nan
      echo "$name,$seed,$div,$last,$ls,$gs,$val,$ml,$lm"
    done
  done
} > "$out/runs.csv"

# per arm: runs, diverged and their fraction, the median step of divergence, and p_vs_pre: the
# two-sided p-value of Fisher's exact test of its diverged count against pre's (how often
# counts at least this far apart come from the same chance of diverging); over the runs that
# did not diverge: the mean spikes, the validation loss (mean, min, max) and the logits; last,
# p_bonferroni: p_vs_pre times the number of arms compared with pre (at most 1), so that the
# chance that any of them reads below 0.05 by chance alone is at most 0.05 (Bonferroni)
ref_div=$(awk -F, '$1 == "pre" && $3 == 1 { d++ } END { print d + 0 }' "$out/runs.csv")
{
  echo "arm,runs,diverged,diverged_frac,diverged_step,p_vs_pre,loss_spikes,grad_spikes,val_loss,val_min,val_max,max_logit,lse_mean,settings,p_bonferroni"
  for v in "${ARMS[@]}"; do
    IFS='|' read -r name settings what <<<"$v"
    awk -F, -v arm="$name" -v settings="$settings" -v rd="$ref_div" -v m=$((${#ARMS[@]} - 1)) '
      function lc(n, k,   i, s) { s = 0; for (i = 1; i <= k; i++) s += log(n - k + i) - log(i); return s }
      function fisher(a, b, n,   K, x, lo, hi, p0, px, p) {  # a, b of n each; two-sided
        K = a + b; lo = K > n ? K - n : 0; hi = K < n ? K : n
        p0 = exp(lc(n, a) + lc(n, K - a) - lc(2 * n, K)); p = 0
        for (x = lo; x <= hi; x++) { px = exp(lc(n, x) + lc(n, K - x) - lc(2 * n, K)); if (px <= p0 * (1 + 1e-7)) p += px }
        return p > 1 ? 1 : p }
      $1 == arm { n++
        if ($3 == 1) { d++; ds[d] = $4; next }
        s++; ls += $5; gs += $6; vl += $7; ml += $8; lm += $9
        if (s == 1 || $7 < lo) lo = $7; if (s == 1 || $7 > hi) hi = $7 }
      END {
        for (i = 1; i <= d; i++) for (j = i + 1; j <= d; j++) if (ds[j] < ds[i]) { t = ds[i]; ds[i] = ds[j]; ds[j] = t }
        med = d ? ds[int((d + 1) / 2)] : "nan"
        p = fisher(d, rd, n); pb = p * m > 1 ? 1 : p * m
        if (s) printf "%s,%d,%d,%.2f,%s,%.3f,%.1f,%.1f,%.4f,%.4f,%.4f,%.2f,%.2f,%s,%.3f\n", arm, n, d, d / n, med,
                      p, ls / s, gs / s, vl / s, lo, hi, ml / s, lm / s, settings, pb
        else printf "%s,%d,%d,%.2f,%s,%.3f,nan,nan,nan,nan,nan,nan,nan,%s,%.3f\n", arm, n, d, d / n, med, p, settings, pb }' \
      "$out/runs.csv"
  done
} > "$out/summary.csv"

# ---- part 2: the balance loss's scope ------------------------------------------------------------
# per run: MaxVio of the step's batch over the last 20% of steps (mean over blocks), the mutual
# information of domain and expert at the last evaluation (nats, mean over blocks; each domain
# weighs the same: I = H(mean_d p_d) - mean_d H(p_d), 0 when every domain uses the experts alike,
# ln 6 = 1.79 at most), and the final validation loss
{
  echo "arm,seed,maxvio,maxvio_group,domain_mi,val_loss"
  for v in "${SCOPES[@]}"; do
    name=${v%%|*}
    for seed in $(seq 1 "$bseeds"); do
      dir=runs/ch05-$name-s$seed$suffix
      # the groups' MaxVio from the loads (every arm's, not only groups-2's maxvio_group column):
      # the first half of the experts against the second
      read -r maxvio maxvio_g < <(awk -F, -v from=$((steps * 4 / 5)) '
          NR == 1 { for (i = 1; i <= NF; i++) if ($i ~ /^load_/) { if (!first) first = i; last = i }; next }
          $1 > from { m += $3; n++; a = 0; b = 0; half = (last - first + 1) / 2
                      for (i = first; i <= last; i++) if (i < first + half) a += $i; else b += $i
                      g += (a > b ? a : b) / ((a + b) / 2) - 1 }
          END { printf "%.3f %.3f\n", n ? m / n : 0, n ? g / n : 0 }' "$dir/router.csv")
      mi=$(domain_mi "$dir/domains.csv")
      val=$(awk -F, 'NR > 1 && $8 != "" { v = $8 } END { print v }' "$dir/train.csv")
      echo "$name,$seed,$maxvio,$maxvio_g,$mi,$val"
    done
  done
} > "$out/balance.csv"

{
  echo "### Part 1: stability of the fragile model ($nseeds seeds per arm, $steps steps)"
  echo
  echo "| arm | settings | diverged | p vs pre | p vs pre, Bonferroni | median step of divergence | loss spikes | grad-norm spikes | val loss (min-max) | max logit | mean lse |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { printf "| %s | `%s` | %d of %d | %s | %s | %s | %s | %s | %s (%s-%s) | %s | %s |\n", $1, $14, $3, $2, $6, $15, $5, $7, $8, $9, $10, $11, $12, $13 }' \
    "$out/summary.csv"
  echo
  echo "Diverged: the training loss went above 7 nats (moe train exit status 3). p vs pre: the two-sided p-value of Fisher's exact test of the arm's diverged count against pre's (below 0.05: a difference that chance alone would give less than once in 20 comparisons). Bonferroni: that p times the $((${#ARMS[@]} - 1)) arms compared with pre, at most 1 (below 0.05: chance alone would give any of the $((${#ARMS[@]} - 1)) such a difference less than once in 20 sets of comparisons). The other columns are over the runs that did not diverge: spikes per run (train.csv's flags: above the mean of the 20 steps before by 4 standard deviations), validation loss at step $steps (mean, and min-max over the seeds), and over the last 20% of the steps the largest |router logit| and the mean logsumexp, mean over the MoE blocks. runs.csv has every run."
  echo
  echo "### Part 2: where the aux loss counts its fractions ($bseeds seeds, $steps steps, micro-batches of 2 sequences, 8 per step)"
  echo
  echo "| arm | MaxVio of the step's batch | MaxVio of 2 groups | domain-expert information (nats) | val loss |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  for v in "${SCOPES[@]}"; do
    name=${v%%|*}
    awk -F, -v arm="$name" '$1 == arm { n++; m += $3; g += $4; i += $5; l += $6 }
      END { printf "| %s | %.3f | %.3f | %.4f | %.4f |\n", arm, m / n, g / n, i / n, l / n }' "$out/balance.csv"
  done
  echo
  echo "Means over the seeds. MaxVio: over the last 20% of the steps, of the loads of each step's whole batch, mean over the blocks; of 2 groups: the same of the summed loads of experts 0-3 and 4-7 (groups-2 balances these; router.csv's maxvio_group is this number for that arm). Domain-expert information: the mutual information of the data domain and the expert chosen at the last evaluation, domains weighted alike, mean over the blocks (0: every domain spreads over the experts alike)."
  echo
  provenance_note "${all[@]}"
} > "$out/summary.md"
write_provenance "$out" "${all[@]}"
write_curves "$out/curves.csv" "${all[@]}"

# ---- figures ---------------------------------------------------------------------------------------
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
# stability.png: per arm (row y, 1 at the top), the fraction diverged and the mean spikes
awk -F, 'NR > 1 { printf "%d %s %s %s %s\n", NR - 1, $1, $4, ($8 == "nan" ? 0 : $8), ($7 == "nan" ? 0 : $7) }' \
  "$out/summary.csv" > "$data/arms"
gnuplot -e "data='$data/arms'; out='$out/stability.png'; n=$nseeds; steps=$steps; H=$((220 + 30 * ${#ARMS[@]}))" \
  $here/stability.gp
# logits.png: the largest router logit over training, mean over the blocks and the seeds that
# did not diverge, for the arms that change it most
logit_arms=(pre bf16-router z-off z-1e-2 dssn)
for name in "${logit_arms[@]}"; do
  for seed in $(seq 1 "$nseeds"); do
    dir=runs/ch05-$name-s$seed$suffix
    [ "$(cat "$dir/exit_status")" = 3 ] && continue
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { print $1, $c["max_logit"] }' "$dir/router.csv"
  done | awk '{ s[$1] += $2; n[$1]++ } END { for (k in s) print k, s[k] / n[k] }' | sort -n > "$data/$name.logit"
done
gnuplot -e "dir='$data'; names='${logit_arms[*]}'; out='$out/logits.png'" $here/logits.gp
# balance.png: MaxVio against domain information, one point per run
awk -F, 'NR > 1 { print > (d "/" $1 ".bal") }' d="$data" "$out/balance.csv"
scope_names=$(for v in "${SCOPES[@]}"; do printf '%s ' "${v%%|*}"; done)
gnuplot -e "dir='$data'; names='${scope_names% }'; out='$out/balance.png'" $here/balance.gp
cat "$out/summary.md"
echo "wrote $out/: summary.csv summary.md runs.csv balance.csv curves.csv provenance.txt stability.png logits.png balance.png"
