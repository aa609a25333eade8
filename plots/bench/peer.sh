#!/usr/bin/env bash
# The CPU step of moe.c beside a PyTorch 2.x eager MoE of the same shapes, in one run.
#
#   make bench-peer                          # installs PyTorch (CPU use) into build/venv-torch,
#                                            # then runs this script
#   bash plots/bench/peer.sh [--rounds N] [--steps N] [--threads N] [--config NAME]...
#   bash plots/bench/peer.sh --smoke         # the test's tiny form (config test, one round)
#   PYTHON=path/to/python bash plots/bench/peer.sh   # a python that has torch
#   PEER="cmd ..." bash plots/bench/peer.sh  # another peer speaking torch_peer.py's output
#
# PyTorch is a developer tool here, never a dependency of the build or the tests. The peer,
# plots/bench/torch_peer.py, builds each `moe bench` reference config in PyTorch eager mode
# (its experts a loop over the experts, as the frameworks' CPU paths run them) and times the
# same step: zero grad, forward, backward, gradient-norm clipping, AdamW, on random tokens.
#
# A machine shared with other work drifts in speed over minutes, so the two are interleaved:
# per round and config, `moe bench --config NAME --json` and then the peer, on the same
# threads, over five rounds by default. Each figure is the median over the rounds; the ratio is
# taken within each round, and its lowest and highest round are shown beside it.
# Writes plots/bench[-smoke]/peer.csv (round, config, moe and torch tokens/s and their ratio)
# and peer.md (the table, the machine, torch's version and the commit).
set -euo pipefail
cd "$(dirname "$0")/../.."
usage() {
  echo "usage: bash plots/bench/peer.sh [--smoke] [--rounds N] [--steps N] [--warmup N] [--threads N] [--config NAME]..." >&2
  exit 2
}
rounds=5 steps=5 warmup=2 threads=${OMP_NUM_THREADS:-0} suffix="" configs=()
number() { [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] || { echo "peer.sh: $1 expects a whole number >= $3, got '$2'" >&2; usage; }; }
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) rounds=1 steps=1 warmup=0 suffix=-smoke configs=(test) ;;
    --rounds | --steps | --warmup | --threads | --config)
      [ $# -ge 2 ] || { echo "peer.sh: $1 needs a value" >&2; usage; }
      case $1 in
        --rounds) number "$1" "$2" 1; rounds=$2 ;;
        --steps) number "$1" "$2" 1; steps=$2 ;;
        --warmup) number "$1" "$2" 0; warmup=$2 ;;
        --threads) number "$1" "$2" 0; threads=$2 ;;
        --config) configs+=("$2") ;;
      esac
      shift ;;
    -h | --help) usage ;;
    *) echo "peer.sh: unknown option '$1'" >&2; usage ;;
  esac
  shift
done
[ ${#configs[@]} -gt 0 ] || configs=(tiny small tiny-e64)

moe=${MOE_BIN:-build/moe}
[ -x "$moe" ] || { echo "peer.sh: no $moe: build it with make build/moe (or set MOE_BIN)" >&2; exit 2; }
if [ -z "${PEER:-}" ]; then
  python=${PYTHON:-build/venv-torch/bin/python}
  if ! [ -x "$python" ] || ! "$python" -c 'import torch' 2> /dev/null; then
    echo "peer.sh: $python cannot import torch: run make bench-peer (it installs PyTorch into build/venv-torch), or set PYTHON to a python that has it" >&2
    exit 2
  fi
  PEER="$python plots/bench/torch_peer.py"
fi
[ "$threads" -gt 0 ] || threads=$(nproc)
out=plots/bench$suffix
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# tokens/s of one config: moe bench's JSON, and the peer's line "NAME STEP_MS TOKENS_PER_S"
moe_tps() {
  "$moe" bench --config "$1" --steps "$steps" --warmup "$warmup" --threads "$threads" --json \
    2> /dev/null > "$tmp/b.json"
  sed -n 's/.*"tokens_per_s": \([0-9.eE+-]*\).*/\1/p' "$tmp/b.json" | head -n 1
}
peer_tps() {
  # shellcheck disable=SC2086  # PEER is a command line
  $PEER --config "$1" --steps "$steps" --warmup "$warmup" --threads "$threads" > "$tmp/p.txt"
  awk -v c="$1" '$1 == c { print $3 }' "$tmp/p.txt"
}

echo "round,config,moe_tokens_per_s,torch_tokens_per_s,ratio" > "$tmp/peer.csv"
for r in $(seq 1 "$rounds"); do
  for c in "${configs[@]}"; do
    echo "== round $r of $rounds: $c" >&2
    m=$(moe_tps "$c")
    p=$(peer_tps "$c")
    [[ $m =~ ^[0-9.eE+-]+$ ]] || { echo "peer.sh: moe bench --config $c gave no tokens/s" >&2; exit 1; }
    [[ $p =~ ^[0-9.eE+-]+$ ]] || { echo "peer.sh: the peer gave no tokens/s for $c: $(cat "$tmp/p.txt")" >&2; exit 1; }
    awk -v r="$r" -v c="$c" -v m="$m" -v p="$p" 'BEGIN { printf "%d,%s,%.1f,%.1f,%.4f\n", r, c, m, p, m / p }' >> "$tmp/peer.csv"
  done
done
version=$($PEER --version 2> /dev/null | head -n 1 || true)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
commit=$(sed -n 's/.*"commit": "\([^"]*\)".*/\1/p' "$tmp/b.json" | head -n 1)
cp "$tmp/peer.csv" "$out/peer.csv"
{
  echo "| config | moe.c tokens/s | PyTorch tokens/s | moe.c / PyTorch | lowest round | highest round |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
  for c in "${configs[@]}"; do
    awk -F, -v c="$c" '$2 == c { m[++n] = $3; p[n] = $4; q[n] = $5 }
      function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                     return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
      END { lo = hi = q[1]; for (i = 2; i <= n; i++) { lo = q[i] < lo ? q[i] : lo; hi = q[i] > hi ? q[i] : hi }
            printf "| %s | %.0f | %.0f | %.2f | %.2f | %.2f |\n", c, med(m, n), med(p, n), med(q, n), lo, hi }' "$tmp/peer.csv"
  done
  echo
  echo "Side by side: per round and config, moe bench and then the PyTorch eager peer ($version), $steps timed steps after $warmup warm-up steps each, $threads threads, interleaved over $rounds round(s); each figure the median over the rounds, the ratio taken within each round. Machine: $cpu, $(nproc) cores; moe.c built from commit $commit."
} > "$out/peer.md"
cat "$out/peer.md"
echo "wrote $out/peer.csv and $out/peer.md"
