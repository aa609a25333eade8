#!/usr/bin/env bash
# test_serve_chapter.sh: chapter 9 end to end at a tiny size, and its program's bad input.
#
#   1. chapters/09-inference/ablate.sh --smoke: exit 0; every CSV with its header and rows;
#      decode.csv a row per model and batch, the MoE's experts touched between k and E; the
#      trained model's rows; the figures are PNGs; summary.md holds its tables, the program's
#      transcript and the provenance sentence; --summarize redoes the same summary.md from the
#      files; --only and a bad option exit 2
#   2. what the chapter program found, as the handbook reads it: the cache gave the full
#      forward's bytes; int8's error per expert below int4's and both above 0; the quantized
#      losses within 0.1 of fp32's; the cache's hit rate and the in-order replay never fall as
#      the cache grows (LRU keeps what a smaller LRU keeps), reach 1 with every expert resident
#      (the cache) and 0 with one slot for two experts a layer
#   3. the program's bad input exits 2 with a message: a missing checkpoint, a dense one, an
#      unknown option, --tokens past the context

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_serve_chapter: chapter 9 at a tiny size"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
build=${MOE_BUILD:-build}
prog=$(executable "$build/chapters/09-inference/serve" "make chapters") || exit 1
if ! command -v gnuplot > /dev/null 2>&1; then
    skip "gnuplot is not installed" "make deps"
fi
export OMP_NUM_THREADS=1 MOE_BIN=$moe

# 1. the script
out=plots/09-inference-smoke
bash chapters/09-inference/ablate.sh --smoke > "$tmp/ablate" 2>&1
check "ablate.sh --smoke runs" $? "$(tail -n 20 "$tmp/ablate")"
status=0
for f in decode.csv decode_passive.csv decode_quant.csv decode_trained.csv; do
    head -1 "$out/$f" | grep -q '^model,moe,experts,top_k,batch,' || { status=1; echo "    $f: header"; }
done
[ "$(wc -l < "$out/decode.csv")" -eq 5 ] || status=1          # test, test-dense at batch 1, 4
[ "$(wc -l < "$out/decode_quant.csv")" -eq 5 ] || status=1    # int8, int4 at batch 1, 4
[ "$(wc -l < "$out/decode_trained.csv")" -eq 3 ] || status=1
awk -F, 'NR > 1 && $2 == 1 && ($12 < $4 || $12 > $3) { bad = 1 } END { exit bad }' \
    "$out/decode.csv" "$out/decode_trained.csv" || status=1
awk -F, 'NR > 1 { n[$22]++ } END { exit !(n["int8"] == 2 && n["int4"] == 2) }' "$out/decode_quant.csv" || status=1
check "the benchmark's CSVs: rows per model and batch, experts touched between k and E" $status \
    "$(head -n 3 "$out"/decode*.csv)"
status=0
for f in cache.csv quant.csv quant_experts.csv offload.csv; do
    [ "$(wc -l < "$out/$f")" -ge 2 ] || { status=1; echo "    $f: $(wc -l < "$out/$f") lines"; }
done
[ "$(wc -l < "$out/quant.csv")" -eq 4 ] || status=1            # fp32, int8, int4
[ "$(wc -l < "$out/quant_experts.csv")" -eq 17 ] || status=1   # 2 layers x 8 experts
check "the program's CSVs" $status "$(wc -l "$out"/*.csv)"
status=0
for p in decode experts quant offload; do
    [ "$(head -c 4 "$out/$p.png" | od -An -c | tr -d ' ')" = "211PNG" ] || { status=1; echo "    $p.png"; }
done
check "the four figures are PNGs" $status
grep -q '^| test | 1 |' "$out/summary.md" && grep -q '^## The trained MoE' "$out/summary.md" &&
    grep -q "^1. one sequence decoded" "$out/summary.md" && grep -q "Built from commit" "$out/summary.md"
check "summary.md: the tables, the transcript, the provenance" $? "$(head -n 30 "$out/summary.md")"
cp "$out/summary.md" "$tmp/summary.md"
bash chapters/09-inference/ablate.sh --smoke --summarize > /dev/null 2>&1 && cmp -s "$out/summary.md" "$tmp/summary.md"
check "--summarize redoes the same summary.md" $? "$(diff "$out/summary.md" "$tmp/summary.md" | head)"
bash chapters/09-inference/ablate.sh --smoke --only x > "$tmp/out" 2>&1
check "--only exits 2: one model, nothing to choose" $([ $? -eq 2 ] && grep -q "nothing to choose" "$tmp/out"; echo $?) "$(cat "$tmp/out")"
bash chapters/09-inference/ablate.sh --fast > "$tmp/out" 2>&1
check "an unknown option exits 2" $([ $? -eq 2 ]; echo $?) "$(cat "$tmp/out")"

# 2. what the program found
awk -F, 'NR == 2 { exit !($4 == 1) }' "$out/cache.csv"
check "the cache decoded the full forward's bytes" $? "$(cat "$out/cache.csv")"
awk -F, 'NR > 1 { if (!($4 > 0 && $5 > $4)) bad = 1 } END { exit bad }' "$out/quant_experts.csv"
check "every expert: 0 < int8's error < int4's" $? "$(head -n 5 "$out/quant_experts.csv")"
awk -F, 'NR > 1 { d = $3 < 0 ? -$3 : $3; if (d > 0.1) bad = 1 } END { exit bad }' "$out/quant.csv"
check "the quantized losses within 0.1 of fp32's" $? "$(cat "$out/quant.csv")"
awk -F, 'NR == 2 { if ($3 != 0 || $4 != 0) bad = 1 }
         NR > 2 { if ($3 < h - 1e-9 || $4 < r - 1e-9) bad = 1 }
         NR > 1 { h = $3; r = $4; last = $1; all = $2 }
         END { if (last != all || h != 1) bad = 1; exit bad }' "$out/offload.csv"
check "hit rates: 0 with one slot, never falling as the cache grows, 1 with every expert" $? \
    "$(cat "$out/offload.csv")"

# 3. the program alone, and its bad input
ckpt=runs/ch09-moe-smoke/ckpt.bin
"$prog" --ckpt "$ckpt" --tokens 6 --batches 1 > "$tmp/serve.txt" 2>&1
[ $? -eq 0 ] && grep -q "^1. one sequence" "$tmp/serve.txt" && grep -q "^2. the experts quantized" "$tmp/serve.txt" &&
    grep -q "^3. the experts in a file" "$tmp/serve.txt"
check "the program alone prints its three parts" $? "$(head -c 400 "$tmp/serve.txt")"
bad_prog() { # LABEL WORDS ARGS...
    local label=$1 words=$2
    shift 2
    "$prog" "$@" > "$tmp/out" 2>&1
    local rc=$?
    [ $rc -eq 2 ] && grep -q -- "$words" "$tmp/out"
    check "$label: exit 2" $? "status $rc: $(head -c 300 "$tmp/out")"
}
bad_prog "a missing checkpoint" "no checkpoint" --ckpt "$tmp/none.bin"
bad_prog "an unknown option" "usage" --ckpt "$ckpt" --fast 1
bad_prog "--tokens past the context" "no room for a prompt" --ckpt "$ckpt" --tokens 40 --batches 1
"$moe" train --out "$tmp/dense" --quiet --set model.d_model=16 --set model.n_layer=1 --set model.n_head=2 \
    --set model.seq_len=16 --set model.d_ff=32 --set moe.num_experts=0 --set train.batch=2 \
    --set train.steps=2 --set train.warmup=0 --set train.eval_batches=1 > /dev/null 2>&1
bad_prog "a dense checkpoint" "dense model" --ckpt "$tmp/dense/ckpt.bin"

finish
