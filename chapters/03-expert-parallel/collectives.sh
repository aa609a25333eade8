#!/usr/bin/env bash
# Chapter 3: the hand-built collectives against MPI's own, on 2, 4 and 8 processes.
#
#   bash chapters/03-expert-parallel/collectives.sh           # the handbook's numbers
#   bash chapters/03-expert-parallel/collectives.sh --smoke   # 2 processes only (the test)
#   MOE_BUILD=build/mpi bash chapters/03-expert-parallel/collectives.sh
#
# Runs collectives (this folder; mpirun -np P, one thread each) for P = 2, 4 and 8, then the
# overlap of the gradients' sums: chapter 0's MoE data-parallel over 4 processes for 30 steps
# (--smoke: a tiny model, 6 steps), with dist.overlap=0 and 1 over each engine. Writes, in
# plots/03-expert-parallel[-smoke]/collectives/:
#   collectives.csv  engine,op,processes,floats,seconds,member0_sent_bytes,member1_sent_bytes:
#                    the median of 7 calls of a sum (dist_allreduce_sum_f) and of an exchange
#                    (dist_alltoallv_f, n / P floats to each member) of n floats a process,
#                    over teach (built by hand) and mpi (MPI's own), and the bytes member 0 and
#                    member 1 sent in one call as dist.csv counts them
#   summary.md       the largest size: seconds of each engine and their ratio, and the bytes
#                    member 0 sent against member 1
#   collectives.png  seconds of a sum against its size, one line per engine and process count
#   overlap.md       per engine, with and without overlap: the seconds a step waited for the
#                    gradients' sums after its backward (dist.csv's sync_wait_s, the mean over
#                    the processes and the second half of the steps) and the median step
#   provenance.txt   commit, machine, MPI
# On a machine with fewer cores than processes the processes share them (8 on 2 cores here):
# the seconds show the shape of the cost, the bytes are exact.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/03-expert-parallel
procs=(2 4 8)
out=plots/03-expert-parallel/collectives
case ${1:-} in
    --smoke) procs=(2); out=plots/03-expert-parallel-smoke/collectives ;;
    "") ;;
    *) echo "usage: $0 [--smoke]" >&2; exit 2 ;;
esac
build=${MOE_BUILD:-build/mpi}
bin=$build/chapters/03-expert-parallel/collectives
if [ -z "${MOE_BUILD:-}" ]; then make --no-print-directory MPI=1 "$bin" > /dev/null; fi
[ -x "$bin" ] || { echo "$0: no $bin: make MPI=1 chapters first" >&2; exit 2; }
command -v mpirun > /dev/null || { echo "$0: no mpirun: make deps" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
mkdir -p "$out"
cores=$(getconf _NPROCESSORS_ONLN)
csv=$out/collectives.csv
first=1
for p in "${procs[@]}"; do
    echo "== $p processes"
    mpirun --bind-to none -np "$p" "$bin" --csv > "$out/np$p.csv"
    if [ $first = 1 ]; then cat "$out/np$p.csv"; else tail -n +2 "$out/np$p.csv"; fi
    first=0
done > "$csv.tmp"
grep -v '^==' "$csv.tmp" > "$csv"
rm -f "$csv.tmp" "$out"/np*.csv

# the largest size, per process count: each engine's seconds and bytes
{
    big=$(awk -F, 'NR > 1 && $4 > m { m = $4 } END { print m }' "$csv")
    echo "| case | processes | operation | teach (s) | mpi (s) | teach / mpi | member 0 sent, teach (MB) | member 1 sent, teach (MB) | each member sent, mpi (MB) |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    awk -F, -v big="$big" 'NR > 1 && $4 == big { k = $3 " " $2; s[k, $1] = $5; b0[k, $1] = $6; b1[k, $1] = $7
                               if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
        END { for (i = 1; i <= n; i++) { k = order[i]; split(k, f, " ")
                  printf "| %s-%s | %s | %s | %.4f | %.4f | %.2f | %.1f | %.1f | %.1f |\n", f[2], f[1], f[1], f[2],
                         s[k, "teach"], s[k, "mpi"], s[k, "teach"] / s[k, "mpi"],
                         b0[k, "teach"] / 1e6, b1[k, "teach"] / 1e6, b0[k, "mpi"] / 1e6 } }' "$csv"
    echo
    echo "$big floats ($((big * 4 / 1048576)) MiB) a process; the median of 7 calls, timed on member 0 after a barrier. A sum over teach goes up to member 0 and back down: it sends (P - 1) times what each other member sends; MPI's is counted as a ring, 2 (P - 1) / P of the buffer each way for every member (the library does not report its traffic). $cores cores shared by all processes."
} > "$out/summary.md"

# the overlap of the gradients' sums with the backward, in training
moe=$build/moe
[ -n "${MOE_BUILD:-}" ] || make --no-print-directory MPI=1 "$moe" data/corpus/train.bin > /dev/null
runs=runs/ch03-overlap$([ "$out" = plots/03-expert-parallel/collectives ] || echo -smoke)
sets=(--set dist.ep=1 --set train.eval_every=0 --set train.threads=1 --set train.steps=30
      --set train.warmup=5)
if [ "${1:-}" = --smoke ]; then
    sets+=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
           --set model.d_ff=64 --set moe.d_expert=32 --set train.batch=4 --set train.steps=6
           --set train.warmup=1)
fi
{
    echo "| case | engine | dist.overlap | wait after the backward (s per step) | step (s, median) |"
    echo "| --- | --- | --- | --- | --- |"
    for e in teach mpi; do for ov in 0 1; do
        dir=$runs/$e-$ov
        rm -rf "$dir"
        echo "== overlap: $e, dist.overlap=$ov" >&2
        mpirun --bind-to none -np 4 "$moe" train --out "$dir" --quiet "${sets[@]}" \
            --set dist.collectives=$e --set dist.overlap=$ov > /dev/null
        bt=$(awk -F' = ' '$1 == "train.batch" { b = $2 } $1 == "model.seq_len" { t = $2 }
                          END { print b * t }' "$dir/config.txt")
        wait_s=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                          { last = $1 } $2 == -1 { w[$1] += $c["sync_wait_s"]; n[$1]++ }
                          END { for (s in w) if (s > last / 2) { t += w[s] / n[s]; k++ }
                                printf "%.5f", t / k }' "$dir/dist.csv")
        step_s=$(awk -F, -v bt="$bt" 'NR > 1 { print bt / $7 }' "$dir/train.csv" | sort -g |
                 awk '{ a[NR] = $1 } END { printf "%.4f", a[int((NR + 1) / 2)] }')
        echo "| $e-$ov | $e | $ov | $wait_s | $step_s |"
    done; done
    echo
    echo "$([ "${1:-}" = --smoke ] && echo "A tiny MoE" || echo "Chapter 0's MoE") (dist.ep=1: the gradients of every tensor are summed over the 4 processes) for $(awk -F' = ' '$1 == "train.steps" { print $2 }' "$runs/teach-0/config.txt") steps; the wait is the mean over the processes and the second half of the steps of dist.csv's sync_wait_s. $cores cores shared by the 4 processes."
} > "$out/overlap.md"

{
    echo "# $0 on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    commit=$(git rev-parse --short=12 HEAD 2> /dev/null || echo unknown)
    git diff --quiet HEAD -- . ':(exclude)plots' ':(exclude)*.md' 2> /dev/null || commit=$commit-dirty
    echo "commit = $commit"
    echo "host = $(hostname)"
    echo "cpu = $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "cores_online = $cores"
    echo "mpi = $(mpirun --version 2> /dev/null | head -n 1)"
    echo "processes = ${procs[*]}"
} > "$out/provenance.txt"

if command -v gnuplot > /dev/null; then
    data=$(mktemp -d)
    for e in teach mpi; do for p in "${procs[@]}"; do
        awk -F, -v e=$e -v p="$p" 'NR > 1 && $1 == e && $2 == "sum" && $3 == p { print $4, $5 }' \
            "$csv" > "$data/$e-$p.dat"
    done; done
    gnuplot -e "dir='$data'; out='$out/collectives.png'; procs='${procs[*]}'" $here/collectives.gp
    rm -rf "$data"
fi
echo "wrote $out/: collectives.csv summary.md overlap.md provenance.txt$(command -v gnuplot > /dev/null && echo " collectives.png")"
