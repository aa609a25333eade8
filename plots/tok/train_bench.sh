#!/usr/bin/env bash
# plots/tok/train_bench.sh: how long `moe tokenizer train` takes, measured (src/README.md, "The
# tokenizer", quotes it): 4096 and 32768 tokens learned from the text of the byte corpus's
# training shard (make data; about 5 MB), each ROUNDS times (default 3), the vocabularies taken
# in turn, with the wall time of each run. Writes plots/tok/train_bench.csv (vocab, round,
# seconds, bytes of text) and train_bench.md (the median of each, the machine, the commit), or
# the same into OUT_DIR.
#
#   bash plots/tok/train_bench.sh            # or ROUNDS=5 bash plots/tok/train_bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}
case $rounds in '' | *[!0-9]* | 0) echo "train_bench.sh: ROUNDS=$rounds: give a whole number >= 1" >&2; exit 2 ;; esac
make --no-print-directory build/moe data/corpus/train.bin > /dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the shard's tokens are its text, documents back to back: skip the header (256 bytes) and the
# document records (16 bytes each; their count is the uint32 at byte 24)
docs=$(od -An -t u4 -j 24 -N 4 data/corpus/train.bin | tr -d ' ')
tail -c +$((256 + 16 * docs + 1)) data/corpus/train.bin > "$tmp/train.txt"
bytes=$(wc -c < "$tmp/train.txt")
out=${OUT_DIR:-plots/tok}
mkdir -p "$out"
{
  echo "vocab,round,seconds,text_bytes"
  for r in $(seq "$rounds"); do
    for v in 4096 32768; do
      rm -f "$tmp/tok.json"
      start=$(date +%s.%N)
      build/moe tokenizer train --vocab "$v" --from "$tmp/train.txt" --out "$tmp/tok.json" > /dev/null 2>&1
      end=$(date +%s.%N)
      awk -v v="$v" -v r="$r" -v a="$start" -v b="$end" -v n="$bytes" 'BEGIN { printf "%d,%d,%.3f,%d\n", v, r, b - a, n }'
    done
  done
} > "$out/train_bench.csv"
{
  echo "| vocabulary | text (MB) | seconds (median of $rounds) | min | max |"
  echo "| ---: | ---: | ---: | ---: | ---: |"
  for v in 4096 32768; do
    b=$(awk -F, -v v="$v" 'NR > 1 && $1 == v { b = $4 } END { print b }' "$out/train_bench.csv")
    awk -F, -v v="$v" 'NR > 1 && $1 == v { print $3 }' "$out/train_bench.csv" | sort -n |
      awk -v v="$v" -v b="$b" '{ s[++n] = $1 }
        END { m = n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
              printf "| %d | %.2f | %.2f | %.2f | %.2f |\n", v, b / 1e6, m, s[1], s[n] }'
  done
  echo
  echo "moe tokenizer train --pattern llama3 (the default) on the training text of data/corpus/train.bin, each vocabulary $rounds times, taken in turn; wall seconds of the whole command (reading, counting, merging, writing). Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- src || echo ' (with changes to src/)')."
} > "$out/train_bench.md"
cat "$out/train_bench.md"
