#!/usr/bin/env bash
# Chapter 9: serving an MoE. One trained model and the reference configs, measured decoding.
#
#   bash chapters/09-inference/ablate.sh            # the handbook's numbers (600 training steps)
#   bash chapters/09-inference/ablate.sh --quick    # 100 training steps
#   bash chapters/09-inference/ablate.sh --smoke    # everything at a tiny size (the test)
#   bash chapters/09-inference/ablate.sh --summarize [--quick]   # only redo tables and figures
#   MOE_BIN=path/to/moe bash chapters/09-inference/ablate.sh
#
# Trains chapter 0's default MoE (runs/ch09-moe[-quick|-smoke]/), then writes, in
# plots/09-inference[-quick|-smoke]/:
#   decode.csv          moe bench --decode of the tiny and small reference MoEs and their dense
#                       twins at batch 1, 4, 16, 64 (random weights and prompts)
#   decode_passive.csv  the small pair again with the OpenMP threads sleeping between regions
#                       (OMP_WAIT_POLICY=passive, training's setting) instead of spinning
#   decode_quant.csv    the small MoE with its experts in int8 and in int4
#   decode_trained.csv  the trained MoE on its validation text: the experts a real batch touches
#   serve.txt, cache.csv, quant.csv, quant_experts.csv, offload.csv
#                       the chapter program (build/chapters/09-inference/serve) on the trained
#                       model: the cache against the full forward, the experts quantized, the
#                       experts offloaded behind a cache of every size
#   summary.md, provenance.txt, and the figures decode.png, experts.png, quant.png, offload.png
# The timings are of this machine, measured one after another in one run of this script: run
# it on a quiet machine (the bench reports the threads and the memory bandwidth it measured).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=chapters/09-inference
usage_text="[--quick | --smoke] [--summarize]"
. chapters/lib.sh

ablate_args "$@"
[ ${#only[@]} -eq 0 ] || { echo "$0: one model is trained here; --only has nothing to choose" >&2; exit 2; }
steps=$(by_mode 600 100 12)
ablate_build
make --no-print-directory "${MOE_BUILD:-build}/chapters/09-inference/serve" > /dev/null 2>&1 || true
prog=$(dirname "$moe")/chapters/09-inference/serve
[ -x "$prog" ] || { echo "no $prog: make chapters builds it" >&2; exit 2; }
out=plots/09-inference$suffix
mkdir -p "$out"
dir=runs/ch09-moe$suffix

if [ "$summarize_only" = 0 ]; then
  rm -rf "$dir"
  echo "== training $dir ($steps steps)"
  # shellcheck disable=SC2046 # warmup_sets prints options (quick and smoke only)
  "$moe" train --out "$dir" --quiet "${MODEL_SETS[@]}" "${TRAIN_SETS[@]}" $(warmup_sets $steps) \
    --set train.steps=$steps --set train.eval_every=$((steps / 6)) "${EXTRA_SETS[@]}"
  if [ "$mode" = smoke ]; then
    configs=(--config test --config test-dense)
    pair=(--config test --config test-dense)
    moe_cfg=(--config test)
    batches=1,4
    timing=(--steps 2 --warmup 1)
    serve_args=(--tokens 6 --batches 2)
  else
    configs=(--config tiny --config tiny-dense --config small --config small-dense)
    pair=(--config small --config small-dense)
    moe_cfg=(--config small)
    batches=1,4,16,64
    timing=()
    serve_args=()
  fi
  echo "== decoding: the reference configs"
  "$moe" bench --decode "${configs[@]}" --batch $batches "${timing[@]}" --csv > "$out/decode.csv"
  echo "== decoding: the threads asleep between regions"
  OMP_WAIT_POLICY=passive "$moe" bench --decode "${pair[@]}" --batch $batches "${timing[@]}" --csv \
    > "$out/decode_passive.csv"
  echo "== decoding: quantized experts"
  {
    "$moe" bench --decode "${moe_cfg[@]}" --batch $batches "${timing[@]}" --quant int8 --csv
    "$moe" bench --decode "${moe_cfg[@]}" --batch $batches "${timing[@]}" --quant int4 --csv | tail -n +2
  } > "$out/decode_quant.csv"
  echo "== decoding: the trained model"
  "$moe" bench --decode --ckpt "$dir/ckpt.bin" --batch $batches "${timing[@]}" --csv \
    > "$out/decode_trained.csv"
  echo "== the chapter program"
  # the program decodes as moe sample does: OpenMP threads waiting actively (src/cli/moe.c)
  OMP_WAIT_POLICY=active "$prog" --ckpt "$dir/ckpt.bin" --out "$out" "${serve_args[@]}" \
    > "$out/serve.txt"
fi
if ! require_runs "$0" "$dir"; then
  [ "$summarize_only" = 1 ] && exit 2
  exit 0
fi
for f in decode.csv decode_passive.csv decode_quant.csv decode_trained.csv serve.txt cache.csv \
         quant.csv quant_experts.csv offload.csv; do
  [ -s "$out/$f" ] || { echo "$0: no $out/$f: run the script without --summarize first" >&2; exit 2; }
done

# ---- summary ---------------------------------------------------------------------------------
# col FILE NAME: the column index of NAME in FILE's header
col() { awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) print i; exit }' "$1"; }
# cell FILE MODEL BATCH NAME: one value of a bench CSV
cell() { awk -F, -v m="$2" -v b="$3" -v k="$(col "$1" "$4")" 'NR > 1 && $1 == m && $5 == b { print $k }' "$1"; }
{
  echo "# Chapter 9: serving an MoE"
  echo
  echo "Machine: $(awk -F, 'NR == 2 { printf "memory bandwidth %.1f GB/s (a copy within memory)", $21 / 1e9 }' "$out/decode.csv"), $(prov "$dir" cpu), $(prov "$dir" threads) threads."
  echo
  echo "## Decoding speed (moe bench --decode, random weights and prompts)"
  echo
  echo "| model | batch | prefill tok/s | decode tok/s | step ms | experts touched | expected | MB a token | of the memory bound |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { t = $12 == "nan" ? "-" : sprintf("%.2f", $12); x = $13 == "nan" ? "-" : sprintf("%.2f", $13)
                    printf "| %s | %d | %.0f | %.0f | %.2f | %s | %s | %.2f | %.0f%% |\n", $1, $5, $10, $11, $9 * 1e3, t, x, $16 / 1e6, 100 * $18 }' \
    "$out/decode.csv"
  echo
  echo "Each MoE against its dense twin, batch by batch (decode tokens/s, MoE over dense):"
  echo
  awk -F, 'NR > 1 { v[$1 "," $5] = $11; if ($2 == 1) { m[++n] = $1 "," $5; name[n] = $1; b[n] = $5; t[n] = $12; x[n] = $13; r[n] = $18 } }
           END { for (i = 1; i <= n; i++) { d = v[name[i] "-dense," b[i]]; if (d == "") continue
                 printf "- %s at batch %d: MoE %.0f, dense %.0f, MoE over dense %.2f; experts touched %.2f of %.2f expected; %.0f%% of the memory bound\n", name[i], b[i], v[m[i]], d, v[m[i]] / d, t[i], x[i], 100 * r[i] } }' \
    "$out/decode.csv"
  echo
  echo "## The threads asleep between regions (OMP_WAIT_POLICY=passive)"
  echo
  echo "| model | batch | decode tok/s, passive | decode tok/s, active | active over passive |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  awk -F, 'NR == FNR { if (FNR > 1) a[$1 "," $5] = $11; next }
           FNR > 1 && (($1 "," $5) in a) { printf "| %s | %d | %.0f | %.0f | %.1f |\n", $1, $5, $11, a[$1 "," $5], a[$1 "," $5] / $11 }' \
    "$out/decode.csv" "$out/decode_passive.csv"
  echo
  awk -F, 'NR == FNR { if (FNR > 1) a[$1 "," $5] = $11; next }
           FNR > 1 && (($1 "," $5) in a) { printf "- %s at batch %d: threads active over asleep %.1f\n", $1, $5, a[$1 "," $5] / $11 }' \
    "$out/decode.csv" "$out/decode_passive.csv"
  echo
  echo "## Quantized experts: decoding speed of the $(sed -n 2p "$out/decode_quant.csv" | cut -d, -f1) MoE"
  echo
  echo "| experts | batch | decode tok/s | MB a token | over fp32 |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  awk -F, 'NR == FNR { if (FNR > 1) f[$1 "," $5] = $11; next }
           FNR > 1 { printf "| %s | %d | %.0f | %.2f | %.2f |\n", $22, $5, $11, $16 / 1e6, (($1 "," $5) in f) ? $11 / f[$1 "," $5] : 0 }' \
    "$out/decode.csv" "$out/decode_quant.csv"
  echo
  awk -F, 'NR == FNR { if (FNR > 1) f[$1 "," $5] = $11; next }
           FNR > 1 && (($1 "," $5) in f) { printf "- %s at batch %d: decode over fp32 %.2f\n", $22, $5, $11 / f[$1 "," $5] }' \
    "$out/decode.csv" "$out/decode_quant.csv"
  echo
  echo "## The trained MoE: experts a batch touches on real text"
  echo
  echo "| batch | experts touched | expected (uniform) | decode tok/s |"
  echo "| ---: | ---: | ---: | ---: |"
  awk -F, 'NR > 1 { printf "| %d | %.2f | %.2f | %.0f |\n", $5, $12, $13, $11 }' "$out/decode_trained.csv"
  echo
  awk -F, 'NR > 1 { printf "- trained at batch %d: experts touched %.2f, uniform %.2f\n", $5, $12, $13 }' "$out/decode_trained.csv"
  echo
  echo "## The chapter program on the trained MoE"
  echo
  echo '```'
  cat "$out/serve.txt"
  echo '```'
  echo
  echo "Trained: $dir ($steps steps). $(provenance_note "moe=$dir")"
} > "$out/summary.md"
write_provenance "$out" "moe=$dir"

# ---- figures ---------------------------------------------------------------------------------
big=small little=tiny
[ "$mode" != smoke ] || big=test little=test
tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT
for m in $(awk -F, 'NR > 1 { print $1 }' "$out/decode.csv" | sort -u); do
  awk -F, -v m="$m" 'NR > 1 && $1 == m { print $5, $11, $16 }' "$out/decode.csv" > "$tmpd/$m.dat"
done
gnuplot -e "dir='$tmpd'; big='$big'; little='$little'; out='$out/decode.png'" $here/decode.gp
gnuplot -e "random='$out/decode.csv'; model='$big'; trained='$out/decode_trained.csv'; out='$out/experts.png'" $here/experts.gp
gnuplot -e "data='$out/offload.csv'; out='$out/offload.png'" $here/offload.gp
gnuplot -e "data='$out/quant_experts.csv'; out='$out/quant.png'" $here/quant.gp
cat "$out/summary.md"
echo "wrote $out/: summary.md provenance.txt decode*.csv serve.txt cache.csv quant.csv quant_experts.csv offload.csv decode.png experts.png quant.png offload.png"
