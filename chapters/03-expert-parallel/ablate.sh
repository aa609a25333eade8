#!/usr/bin/env bash
# Chapter 3: the same MoE trained in one process and with its experts spread over 2 and 4
# processes (expert parallelism, MPI), with and without load balancing.
#
#   bash chapters/03-expert-parallel/ablate.sh            # 200 steps per run (the handbook's numbers)
#   bash chapters/03-expert-parallel/ablate.sh --quick    # 30 steps per run, under a minute of CPU time
#   bash chapters/03-expert-parallel/ablate.sh --summarize [--quick]   # only redo tables and figures
#   bash chapters/03-expert-parallel/ablate.sh --smoke    # every run for 6 steps of a tiny model (the test)
#   bash chapters/03-expert-parallel/ablate.sh --only ep2-none   # (re)train one run, then summarise
#   MOE_BIN=path/to/moe (an MPI build) bash chapters/03-expert-parallel/ablate.sh
#
# Every run is the chapter 0 MoE (4 blocks of width 128, 8 experts of hidden 256, top-2, batch
# 16 x 128 bytes) with dist.ep = 1 (one process), 2 and 4 (mpirun -np 2 and 4, one OpenMP
# thread each), once with the Switch aux loss (moe.balance=aux) and once without
# (moe.balance=none, z-loss only), over the hand-built collectives the chapter explains
# (dist.collectives=teach). The loss is the same for every dist.ep (tests/mpi/test_ep.sh
# checks it to 1e-5); what changes is where the work happens and what travels. From each run's
# dist.csv: bytes per step against the cost model, each process's load (rows its experts
# processed), and where each process's step time goes. On a 2-core machine 4 processes share
# the cores, so the seconds show the shape of the cost, not what separate machines would see;
# the bytes and the loads are exact.
# A one-process run has no dist.csv, so its expert seconds come from a profiled rerun of the same
# model: step_profile (this folder; built next to the moe binary) trains it again for 30 steps
# (at most the run's) with the op profiler on, into runs/ch03-ep1-*/step_profile/; its experts'
# share of the step times the run's own step time is the ep1 bars' expert part. --summarize
# makes that profile when a run lacks it (a few seconds), so runs trained without it still split.
# Writes runs/ch03-NAME[-quick|-smoke]/ and, in plots/03-expert-parallel[-quick|-smoke]/:
# summary.csv, summary.md, provenance.txt, time.png, bytes.png, load.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/03-expert-parallel
. chapters/lib.sh
ablate_args "$@"
steps=$(by_mode 200 30 6)
names=()
for balance in aux none; do for ep in 1 2 4; do names+=("ep$ep-$balance"); done; done
check_only "${names[@]}"
ablate_build mpi
# the profiler of the one-process runs, from the same build as moe
profiler=$(dirname "$moe")/chapters/03-expert-parallel/step_profile
if [ ! -x "$profiler" ]; then
  case $(dirname "$moe") in
    build/mpi) make --no-print-directory MPI=1 "$profiler" > /dev/null ;;
    build) make --no-print-directory "$profiler" > /dev/null ;;
  esac
fi
[ -x "$profiler" ] || { echo "no $profiler: make chapters (make MPI=1 chapters for build/mpi) first" >&2; exit 2; }
out=plots/03-expert-parallel$suffix
mkdir -p "$out"
# Open MPI: allow root and more processes than cores (a laptop, a container)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_WAIT_POLICY=passive

profile_ep1() { # RUN_DIR: its step_profile/ (profile.csv and the rerun's train.csv)
  local p=$1/step_profile
  rm -rf "$p"
  OMP_NUM_THREADS=2 "$profiler" --run "$1" --out "$p" --steps $((steps < 30 ? steps : 30)) > /dev/null
  rm -f "$p/ckpt.bin"
}
for name in "${names[@]}"; do
  dir=runs/ch03-$name$suffix
  wants "$name" || continue
  ep=${name%%-*}; ep=${ep#ep}
  balance=${name#*-}
  rm -rf "$dir"
  echo "== $name: dist.ep=$ep, moe.balance=$balance"
  # --bind-to none: Open MPI pins each process to one core by default, which would leave a
  # process with 2 OpenMP threads on a single core
  OMP_NUM_THREADS=$((ep == 1 ? 2 : 1)) mpirun --bind-to none -np $ep "$moe" train --out "$dir" --quiet \
    "${MODEL_SETS[@]}" "${TRAIN_SETS[@]}" \
    --set dist.ep=$ep --set dist.collectives=teach --set moe.balance=$balance --set train.steps=$steps \
    --set train.eval_every=0 --set train.warmup=$((steps / 5)) \
    --set train.threads=$((ep == 1 ? 2 : 1)) "${EXTRA_SETS[@]}"
  [ "$ep" = 1 ] && profile_ep1 "$dir"
done
all=()
dirs=()
for name in "${names[@]}"; do all+=("$name=runs/ch03-$name$suffix"); dirs+=("runs/ch03-$name$suffix"); done
if ! require_runs "$0" "${dirs[@]}"; then
  [ "$summarize_only" = 1 ] && exit 2
  echo "summary skipped until every run exists"; exit 0
fi
for name in ep1-aux ep1-none; do
  dir=runs/ch03-$name$suffix
  if [ ! -f "$dir/step_profile/profile.csv" ]; then
    echo "$name: profiling its model for the split of time.png ($dir/step_profile/)"
    profile_ep1 "$dir"
  fi
done
cfg() { awk -F' = ' -v k="$2" '$1 == k { print $2; exit }' "$1/config.txt"; }

# ---- summary -------------------------------------------------------------------------------
# Over the second half of the steps (the router has settled): per process, the mean per step of
# its MoE blocks' bytes sent, rows processed, seconds in the expert exchanges and in its
# experts, and of layer -1's seconds (gradient sums and statistics); the step time is the
# median of B T / tok_per_s. The cost model for P processes and uniform routing: each process
# sends its N K (P - 1) / P remote rows out and receives as many, forward (rows, then outputs
# back) and backward (gradients out and back): 4 N K (P - 1) / P rows of C floats, plus 2 El
# counts of 4 bytes per peer, per MoE block, with N = B T / P tokens per process.
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
{
  echo "run,ep,balance,rank,bytes_per_step,model_bytes_per_step,rows_per_step,exchange_s,expert_s,other_collectives_s,step_s,loss"
  for name in "${names[@]}"; do
    dir=runs/ch03-$name$suffix
    ep=${name%%-*}; ep=${ep#ep}
    balance=${name#*-}
    # the model of this run, for the cost model (C T K E B L: width, context, top-k, experts,
    # batch, MoE blocks; every block is an MoE block here)
    C=$(cfg "$dir" model.d_model) T=$(cfg "$dir" model.seq_len) K=$(cfg "$dir" moe.top_k)
    E=$(cfg "$dir" moe.num_experts) B=$(cfg "$dir" train.batch) L=$(cfg "$dir" model.n_layer)
    median_step() { awk -F, -v tok=$((B * T)) 'NR > 1 { print tok / $7 }' "$1" | sort -g |
                    awk '{ a[NR] = $1 } END { printf "%.4f", a[int((NR + 1) / 2)] }'; }
    step_s=$(median_step "$dir/train.csv")
    loss=$(awk -F, 'NR > 1 { l = $2 } END { printf "%.4f", l }' "$dir/train.csv")
    model=$(awk -v P=$ep -v C=$C -v K=$K -v E=$E -v B=$B -v T=$T -v L=$L 'BEGIN {
              N = B * T / P; El = E / P
              printf "%.0f", L * (4 * N * K * (P - 1) / P * C * 4 + 2 * El * 4 * (P - 1)) }')
    if [ "$ep" = 1 ]; then
      # its experts' seconds: their share of the profiled rerun's step, times this run's step
      p=$dir/step_profile
      expert=$(awk -F, -v s="$step_s" -v ps="$(median_step "$p/train.csv")" '$1 == "experts" {
                 printf "%.5f", s * $2 / ps }' "$p/profile.csv")
      echo "$name,$ep,$balance,0,0,$model,$((L * B * T * K)),0,$expert,0,$step_s,$loss"
      continue
    fi
    awk -F, -v from=$((steps / 2)) -v name="$name" -v ep=$ep -v bal="$balance" -v model="$model" \
        -v step_s="$step_s" -v loss="$loss" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      $1 > from { r = $c["rank"]; s[$1] = 1
        if ($c["layer"] >= 0) { b[r] += $c["bytes_sent"]; rows[r] += $c["rows_in"]
                                 x[r] += $c["comm_s"]; e[r] += $c["expert_s"] }
        else o[r] += $c["comm_s"] }
      END { n = 0; for (k in s) n++
            for (r = 0; r < ep; r++)
              printf "%s,%d,%s,%d,%.0f,%s,%.1f,%.5f,%.5f,%.5f,%s,%s\n", name, ep, bal, r,
                     b[r] / n, model, rows[r] / n, x[r] / n, e[r] / n, o[r] / n, step_s, loss }' \
      "$dir/dist.csv"
  done
} > "$out/summary.csv"

{
  echo "| run | dist.ep | balance | loss at step $steps | step (s, median) | bytes sent per step and process (mean) | cost model (uniform routing) | rows per process and step: min / max | imbalance max / mean |"
  echo "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { k = $1; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
                    ep[k] = $2; bal[k] = $3; loss[k] = $12; st[k] = $11; model[k] = $6
                    bytes[k] += $5; cnt[k]++; r = $7
                    if (!(k in mn) || r < mn[k]) mn[k] = r; if (r > mx[k]) mx[k] = r; sum[k] += r }
    END { for (i = 1; i <= n; i++) { k = order[i]; mean = sum[k] / cnt[k]
            printf "| %s | %s | %s | %s | %s | %.0f | %s | %.0f / %.0f | %.2f |\n", k, ep[k], bal[k],
                   loss[k], st[k], bytes[k] / cnt[k], model[k], mn[k], mx[k], mx[k] / mean } }' \
    "$out/summary.csv"
  echo
  echo "Means over steps $((steps / 2 + 1))-$steps. Bytes: payload bytes a process sent in its MoE blocks' exchanges (forward and backward, counts included; dist.csv). Cost model: 4 N K (P - 1) / P rows of C 4-byte floats plus 2 (E / P) counts per peer, per MoE block, N = B T / P tokens per process, as if routing were uniform. Rows: rows a process's experts computed per step, summed over the $L MoE blocks (its load; for dist.ep = 1, $L B T K). The loss is the same for every dist.ep up to float summation order (tests/mpi/test_ep.sh). Seconds are from $(nproc) cores shared by all processes."
  echo "Expert seconds of the one-process runs (dist.ep = 1, which have no dist.csv): the experts' share of the step in a profiled rerun of the same model (runs/ch03-ep1-*/step_profile/, $(( steps < 30 ? steps : 30 )) steps with the op profiler: the expert GEMMs and their SwiGLU), times the run's own median step."
  provenance_note "${all[@]}"
} > "$out/summary.md"
write_provenance "$out" "${all[@]}"

gnuplot -e "data='$out/summary.csv'; out='$out/time.png'" $here/time.gp
awk -F, 'NR > 1 && $2 > 1 { k = $1; if (!(k in m)) order[++n] = k; m[k] += $5; c[k]++; model[k] = $6 }
         END { for (i = 1; i <= n; i++) { k = order[i]; printf "%s %.0f %s\n", k, m[k] / c[k], model[k] } }' \
  "$out/summary.csv" > "$data/bytes.dat"
gnuplot -e "data='$data/bytes.dat'; out='$out/bytes.png'" $here/bytes.gp
gnuplot -e "data='$out/summary.csv'; out='$out/load.png'" $here/load.gp
cat "$out/summary.md"
echo "wrote $out/: summary.csv summary.md provenance.txt time.png bytes.png load.png"
