#!/usr/bin/env bash
# The chapter programs' output, kept next to each chapter's figures so the handbook can quote it
# and a checker can compare the quotes with it.
#
#   bash chapters/transcripts.sh            # all five, from the checkpoints below
#   bash chapters/transcripts.sh --only routing [--only upcycle ...]   # some of them
#   bash chapters/transcripts.sh --no-mpi   # without a2a
#   bash chapters/transcripts.sh --smoke    # on tiny checkpoints trained here (the test)
#
# Writes, each file the command on its first line ("$ ...") and then the program's stdout:
#   plots/01-routing/routing.txt            build/chapters/01-routing/routing on runs/demo/ckpt.bin
#   plots/02-capacity/capacity.txt          build/chapters/02-capacity/capacity on runs/demo/ckpt.bin
#   plots/04-upcycling/upcycle.txt          build/chapters/04-upcycling/upcycle on runs/ch04-dense/ckpt.bin
#   plots/03-expert-parallel/a2a.txt        mpirun -np 4 build/mpi/chapters/03-expert-parallel/a2a
#                                           (when mpirun and mpicc are installed; --no-mpi skips it)
#   plots/05-stability/stability.txt        build/chapters/05-stability/stability (fresh models:
#                                           no checkpoint; --smoke: --layers 2 --width 32)
# The checkpoints: runs/demo/ckpt.bin is what `make demo` trains (about 4 minutes);
# runs/ch04-dense/ckpt.bin is the dense parent of chapter 4, made alone (about 2 minutes) with
#   bash chapters/04-upcycling/ablate.sh --only dense
# (the whole ablation makes it too). A missing checkpoint stops the script with that command.
# The programs read data/corpus/val.bin. --smoke trains a tiny MoE and a tiny dense model into
# runs/transcripts-smoke/ and writes plots/NN-name-smoke/ instead; MOE_BIN (moe) and MOE_BUILD
# (the chapter programs' build folder, default build) choose other builds, MOE_MPI_BUILD
# (default build/mpi) the one of a2a.
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=0
mpi=1
only=()
usage() { echo "usage: $0 [--smoke] [--no-mpi] [--only routing|capacity|upcycle|a2a|stability]..." >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --no-mpi) mpi=0 ;;
    --only)
      case "${2:-}" in routing | capacity | upcycle | a2a | stability) only+=("$2") ;; *) usage ;; esac
      shift ;;
    *) usage ;;
  esac
  shift
done
wants() { [ ${#only[@]} -eq 0 ] && return 0; local o; for o in "${only[@]}"; do [ "$o" = "$1" ] && return 0; done; return 1; }

build=${MOE_BUILD:-build}
mpi_build=${MOE_MPI_BUILD:-build/mpi}
if [ -z "${MOE_BUILD:-}" ]; then
  make --no-print-directory build/moe chapters data/corpus/train.bin > /dev/null
fi
moe=${MOE_BIN:-$build/moe}
[ -f data/corpus/val.bin ] || make --no-print-directory data/corpus/train.bin > /dev/null
suffix=""
demo=runs/demo/ckpt.bin
dense=runs/ch04-dense/ckpt.bin
if [ "$smoke" = 1 ]; then
  suffix=-smoke
  d=runs/transcripts-smoke
  rm -rf "$d"
  tiny=(--quiet --set model.d_model=32 --set model.n_layer=2 --set model.n_head=2
        --set model.seq_len=32 --set model.d_ff=64 --set train.batch=4 --set train.steps=8
        --set train.warmup=2 --set train.eval_every=0 --set train.ckpt_every=0)
  if wants routing || wants capacity; then
    "$moe" train --out "$d/moe" "${tiny[@]}" --set moe.d_expert=32 > /dev/null
  fi
  wants upcycle && "$moe" train --out "$d/dense" "${tiny[@]}" --set moe.num_experts=0 > /dev/null
  demo=$d/moe/ckpt.bin
  dense=$d/dense/ckpt.bin
fi

need() { # CKPT HOW: the checkpoint exists, or say how to make it and stop
  [ -f "$1" ] && return 0
  echo "$0: no checkpoint $1; make it first with: $2" >&2
  exit 2
}
# transcript OUT_FILE COMMAND...: "$ COMMAND" and its stdout into OUT_FILE (replaced only when
# the command succeeds)
transcript() {
  local file=$1
  shift
  mkdir -p "$(dirname "$file")"
  { echo "\$ $*"; "$@"; } > "$file.tmp" || { rm -f "$file.tmp"; echo "$0: failed: $*" >&2; exit 1; }
  mv "$file.tmp" "$file"
  echo "wrote $file"
}

if wants routing; then
  need "$demo" "make demo"
  transcript "plots/01-routing$suffix/routing.txt" "$build/chapters/01-routing/routing" \
    --ckpt "$demo" --data data/corpus/val.bin
fi
if wants capacity; then
  need "$demo" "make demo"
  transcript "plots/02-capacity$suffix/capacity.txt" "$build/chapters/02-capacity/capacity" \
    --ckpt "$demo" --data data/corpus/val.bin
fi
if wants upcycle; then
  need "$dense" "bash chapters/04-upcycling/ablate.sh --only dense"
  transcript "plots/04-upcycling$suffix/upcycle.txt" "$build/chapters/04-upcycling/upcycle" \
    --ckpt "$dense" --data data/corpus/val.bin
fi
if wants stability; then
  stability=()
  [ "$smoke" = 1 ] && stability=(--layers 2 --width 32)
  transcript "plots/05-stability$suffix/stability.txt" "$build/chapters/05-stability/stability" \
    ${stability[@]+"${stability[@]}"}
fi
if wants a2a && [ "$mpi" = 1 ]; then
  a2a=$mpi_build/chapters/03-expert-parallel/a2a
  if ! command -v mpirun > /dev/null 2>&1; then
    echo "no mpirun (Open MPI, make deps): no a2a transcript"
  else
    if [ -z "${MOE_MPI_BUILD:-}" ] && command -v mpicc > /dev/null 2>&1; then
      make --no-print-directory MPI=1 "$a2a" > /dev/null
    fi
    [ -x "$a2a" ] || { echo "$0: no $a2a: make MPI=1 chapters first" >&2; exit 2; }
    # Open MPI: allow root and more processes than cores (a laptop, a container)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    OMP_NUM_THREADS=1 transcript "plots/03-expert-parallel$suffix/a2a.txt" mpirun -np 4 "$a2a"
  fi
fi
