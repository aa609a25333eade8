#!/usr/bin/env bash
# Chapter 6: a gallery of broken runs. Each arm trains a small model with one mistake that
# provokes one failure (or with none: the healthy arms), then `moe doctor` diagnoses it; the
# summary says whether the doctor named the failure the arm provokes, and anything else it
# found. On the healthy arms every finding is a false positive.
#
#   bash chapters/06-troubleshooting/gallery.sh            # 300 steps of the default model (the handbook's)
#   bash chapters/06-troubleshooting/gallery.sh --quick    # 150 steps
#   bash chapters/06-troubleshooting/gallery.sh --smoke    # 200 steps of a tiny model (the test)
#   bash chapters/06-troubleshooting/gallery.sh --summarize [--quick|--smoke]   # only redo the summary and figures
#   bash chapters/06-troubleshooting/gallery.sh --only NAME   # (re)train one arm
#   MOE_BIN=path/to/moe bash chapters/06-troubleshooting/gallery.sh   # with another build of moe
#
# The ep-imbalance arm trains with two processes (dist.ep=2) under mpirun, with MOE_MPI_BIN
# (default: build/mpi/moe, made by make mpi when mpicc exists); with MOE_MPI_BIN= (empty) or
# without MPI it is skipped, and the summary says so.
# Writes runs/ch06-gallery-NAME[-quick|-smoke]/ and, in plots/06-troubleshooting[-quick|-smoke]/:
# gallery.csv and gallery.md (per arm: the findings it should provoke, those moe doctor named,
# its exit status, the missed and the unexpected ones; the csv also its loss and gradient-norm
# spikes, train.csv's flags), divergence.csv (the divergence arm's learning rate, loss and
# gradient norm at each of its steps), reports/NAME.txt (the doctor's report),
# NAME.png (the symptom against the healthy run), thresholds.md (moe doctor --thresholds),
# live.txt (the warnings moe train printed while the arms trained),
# runs.tar.gz (the run directories without their checkpoints: tests/test_gallery.sh diagnoses
# them again) and provenance.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/06-troubleshooting
. chapters/lib.sh

# name | settings | findings it provokes (- for none) | the symptom plotted | what it does
ARMS=(
  "healthy||-|loss|the default settings"
  "healthy-aux-free|moe.balance=aux_free moe.bias_rate=1e-2|-|churn|aux-free balancing at a bias rate of 1e-2"
  "healthy-capacity|moe.capacity_factor=1.25|-|drop|a capacity factor of 1.25"
  "divergence|train.lr=0.2 train.warmup=100 train.clip=0 train.diverge_loss=7|divergence|loss|a learning rate warming up to 0.2 without clipping"
  "loss-rising|train.lr=0.1 train.warmup=100 train.min_lr=1|loss_rising|loss|a peak learning rate of 0.1, held after 100 steps of warm-up"
  "collapse|moe.balance=none moe.z_coef=0 moe.router_init_std=1 train.lr=0.01|router_collapse|share|no balancing, no z-loss, a router drawn with std 1, a learning rate of 0.01"
  "starving|moe.balance=none moe.num_experts=16 moe.top_k=1|starving_experts|minload|no balancing, 16 experts, top-1"
  "spikes|train.lr=0.05 train.warmup=0|grad_spikes|grad|a learning rate of 0.05 from the first step"
  "drop-storm|moe.capacity_factor=0.5|drop_storm|drop|a capacity factor of 0.5"
  "aux-dominates|moe.aux_coef=1|balance_dominates|aux|an aux-loss coefficient of 1"
  "logit-growth|moe.z_coef=0 train.lr=0.02|logit_growth|logit|no z-loss at a learning rate of 0.02"
  "bias-oscillation|moe.balance=aux_free moe.bias_rate=0.1|bias_oscillation|churn|an aux-free bias rate of 0.1"
  "bias-drift|moe.balance=aux_free moe.score=sigmoid moe.z_coef=0 train.lr=0.01|bias_drift|bias|aux-free sigmoid router without z-loss at a learning rate of 0.01"
  "overfitting|TINY_DATA|overfitting data_repeated|gap|a training shard of 5,000 tokens"
  "data-change|RESUME data.train=data/corpus/val.bin|data_changed|loss|resumed half-way on another shard (--allow-data-change)"
  "throughput-drop|RESUME train.threads=1|throughput_drop|tok|resumed half-way with one thread instead of two"
  "ep-imbalance|MPI moe.balance=none moe.z_coef=0 moe.router_init_std=1|ep_imbalance|ep|two processes of 4 experts each, the router collapsed"
)

ablate_args "$@"
steps=$(by_mode 300 150 200)
check_only $(for v in "${ARMS[@]}"; do echo "${v%%|*}"; done)
ablate_build
out=plots/06-troubleshooting$suffix
mkdir -p "$out/reports"
BASE=(--set train.steps=$steps --set train.warmup=$((steps / 12)) --set train.eval_every=$((steps / 6))
      --set train.eval_batches=4 --set train.ckpt_every=0 --set train.threads=2)
SMALL=()
[ "$mode" = smoke ] && SMALL=("${MODEL_SETS[@]}" "${TRAIN_SETS[@]}" --set train.eval_batches=2)

# the MPI build of the ep-imbalance arm: MOE_MPI_BIN, else build/mpi/moe when mpicc exists
mpi_bin() {
  if [ -n "${MOE_MPI_BIN+set}" ]; then echo "$MOE_MPI_BIN"; return; fi
  command -v mpicc > /dev/null && command -v mpirun > /dev/null || return 0
  make --no-print-directory mpi > /dev/null && echo build/mpi/moe
}

# train NAME SETTINGS: one arm into runs/ch06-gallery-NAME$suffix (exit status 3, a divergence,
# is the arm's result, not the script's failure)
train() {
  local name=$1 dir=runs/ch06-gallery-$1$suffix rc=0 sets=() kv first="" resume=() mpi=()
  shift
  for kv in $1; do
    case $kv in
      TINY_DATA) # a small shard of synthetic text, trained on for many passes
        rm -rf "runs/ch06-gallery-data$suffix"
        "$moe" synth --out "runs/ch06-gallery-data$suffix" --tokens 5000 > /dev/null
        sets+=(--set data.train=runs/ch06-gallery-data$suffix/train.bin
               --set data.val=runs/ch06-gallery-data$suffix/val.bin) ;;
      RESUME) first=1 ;;
      MPI)
        local bin
        bin=$(mpi_bin)
        if [ -z "$bin" ]; then echo "   skipped: no MPI build (MOE_MPI_BIN)"; rm -rf "$dir"; return; fi
        mpi=(env "${MPIRUN_ENV[@]}" mpirun -np 2 "$bin")
        sets+=(--set dist.ep=2 --set train.threads=1) ;;
      *) if [ -n "$first" ]; then resume+=(--set "$kv"); else sets+=(--set "$kv"); fi ;;
    esac
  done
  rm -rf "$dir"
  if [ -n "$first" ]; then # half the steps, then the rest with the change
    "$moe" train --out "$dir" --quiet "${BASE[@]}" ${SMALL[@]+"${SMALL[@]}"} "${sets[@]}" \
      "${EXTRA_SETS[@]}" --until $((steps / 2)) > "$dir.log" 2>&1 || rc=$?
    [ "$rc" = 0 ] && { "$moe" train --resume "$dir" --quiet --allow-data-change "${resume[@]}" \
      >> "$dir.log" 2>&1 || rc=$?; }
  elif [ ${#mpi[@]} -gt 0 ]; then
    "${mpi[@]}" train --out "$dir" --quiet "${BASE[@]}" ${SMALL[@]+"${SMALL[@]}"} "${sets[@]}" \
      "${EXTRA_SETS[@]}" > "$dir.log" 2>&1 || rc=$?
  else
    "$moe" train --out "$dir" --quiet "${BASE[@]}" ${SMALL[@]+"${SMALL[@]}"} "${sets[@]}" \
      "${EXTRA_SETS[@]}" > "$dir.log" 2>&1 || rc=$?
  fi
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || { cat "$dir.log" >&2; echo "$dir: exit $rc" >&2; exit 1; }
  mv "$dir.log" "$dir/train.log" # the live warnings are in it
}

MPIRUN_ENV=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)
# one run at a time, with the machine's two cores: the throughput arm needs a quiet machine
for v in "${ARMS[@]}"; do
  IFS='|' read -r name settings expect metric what <<<"$v"
  wants "$name" || continue
  echo "== $name: $what"
  train "$name" "$settings"
done

dirs=()
for v in "${ARMS[@]}"; do
  name=${v%%|*}
  case $v in *"|MPI "*) [ -d "runs/ch06-gallery-$name$suffix" ] || continue ;; esac
  dirs+=("runs/ch06-gallery-$name$suffix")
done
if ! require_runs "$0" "${dirs[@]}"; then
  [ "$summarize_only" = 1 ] && exit 2
  echo "summary skipped until every arm has its run"; exit 0
fi
. $here/symptoms.sh

# ---- the diagnosis of every arm ------------------------------------------------------------------
"$moe" doctor --thresholds > "$out/thresholds.md"
{
  echo "arm,expected,found,exit_status,missed,unexpected,loss_spikes,grad_spikes"
  for v in "${ARMS[@]}"; do
    IFS='|' read -r name settings expect metric what <<<"$v"
    dir=runs/ch06-gallery-$name$suffix
    if [ ! -d "$dir" ]; then echo "$name,$expect,skipped,,,,,"; continue; fi
    rc=0
    "$moe" doctor "$dir" > "$out/reports/$name.txt" || rc=$?
    [ "$rc" = 2 ] && { cat "$out/reports/$name.txt" >&2; exit 1; }
    found=$(sed -n 's/^\(FAILURE\|WARNING\|NOTE\) \([a-z_]*\):.*/\2/p' "$out/reports/$name.txt" | tr '\n' ' ')
    missed="" unexpected=""
    for f in $expect; do [ "$f" = - ] || case " $found " in *" $f "*) ;; *) missed="$missed $f" ;; esac; done
    for f in $found; do case " $expect " in *" $f "*) ;; *) unexpected="$unexpected $f" ;; esac; done
    found=${found% }
    spikes=$(awk -F, 'NR > 1 { l += $9; g += $10 } END { printf "%d,%d", l, g }' "$dir/train.csv")
    echo "$name,$expect,${found:--},$rc,${missed# },${unexpected# },$spikes"
  done
} > "$out/gallery.csv"

# gallery.md: the table of the chapter
{
  echo "| run | what it does | provokes | moe doctor finds | exit |"
  echo "| --- | --- | --- | --- | ---: |"
  for v in "${ARMS[@]}"; do
    IFS='|' read -r name settings expect metric what <<<"$v"
    IFS=, read -r _ _ found rc _ _ < <(awk -F, -v a="$name" '$1 == a' "$out/gallery.csv")
    echo "| $name | $what | ${expect//_/\\_} | ${found//_/\\_} | ${rc:-skipped} |"
  done
  [ -z "${EXTRA_SET:-}" ] || { echo; extra_note; }
} > "$out/gallery.md"

# divergence.csv: the divergence arm's steps up to the one it stopped at, with the learning rate,
# loss and gradient norm of each (the handbook reads the run's last steps from it, 6.1)
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; print "step,lr,loss,grad_norm"; next }
  { print $1 "," $c["lr"] "," $c["loss"] "," $c["grad_norm"] }' \
  "runs/ch06-gallery-divergence$suffix/train.csv" > "$out/divergence.csv"

# ---- figures: each arm's symptom against the healthy run ---------------------------------------
series=$(mktemp -d)
trap 'rm -rf "$series"' EXIT
for v in "${ARMS[@]}"; do
  IFS='|' read -r name settings expect metric what <<<"$v"
  [ "$name" = healthy ] && [ "$metric" = loss ] && continue
  dir=runs/ch06-gallery-$name$suffix
  [ -d "$dir" ] || continue
  symptom "$metric" "$dir" > "$series/$name.dat"
  symptom "$metric" "runs/ch06-gallery-healthy$suffix" > "$series/$name.healthy.dat"
  healthy=1
  [ -s "$series/$name.healthy.dat" ] || healthy=0
  gnuplot -e "dir='$series'; name='$name'; label='$(symptom_label "$metric")'; healthy=$healthy; out='$out/$name.png'" \
    $here/symptom.gp
done
# live.txt: the warnings moe train printed while each arm trained (its train.log)
for d in "${dirs[@]}"; do
  grep '^warning: ' "$d/train.log" 2> /dev/null | sed "s|^|${d#runs/ch06-gallery-}: |" || true
done | sed "s|$suffix: |: |" > "$out/live.txt"
# runs.tar.gz: every run directory without its checkpoint, the files moe doctor reads (and the
# live warnings of train.log), so that the test diagnoses the handbook's runs again
files=()
for d in "${dirs[@]}"; do
  for f in config.txt provenance.txt train.csv router.csv val_router.csv domains.csv dist.csv train.log; do
    [ -f "$d/$f" ] && files+=("$d/$f")
  done
done
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "${files[@]}" |
  gzip -n -9 > "$out/runs.tar.gz"
all=()
for d in "${dirs[@]}"; do all+=("${d#runs/ch06-gallery-}=$d"); done
write_provenance "$out" "${all[@]}"
echo "wrote $out/: gallery.csv, gallery.md, divergence.csv, reports/, thresholds.md, runs.tar.gz, provenance.txt and a figure per arm"
awk -F, 'NR > 1 { printf "  %-18s %-32s exit %s%s%s\n", $1, $3, $4, ($5 ? "  MISSED " $5 : ""), ($6 && $2 == "-" ? "  FALSE POSITIVE " $6 : "") }' "$out/gallery.csv"
