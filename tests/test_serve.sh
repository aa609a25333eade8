#!/usr/bin/env bash
# test_serve.sh: serving a trained model from the command line (handbook chapter 9).
#
#   1. moe sample decodes from a key-value cache: at temperature 0 its bytes are those of the
#      full forward (--no-cache) over 150 bytes of a 32-token context, which restarts the
#      context several times; the same at temperature 0.8 with one seed; a batch of prompts
#      (--prompts FILE) gives each prompt the bytes it gets alone
#   2. bad sample options exit 2 with a message: --prompt and --prompts together, a missing
#      prompts file, an empty one, a file of more than 256 lines, --tokens over 10^6 with
#      --prompts (of one line too)
#   3. moe bench --decode: a CSV row per model and batch; the MoE's experts touched per step
#      lie between k and E and near E (1 - (1 - k/E)^batch); tokens/s and the bytes a token
#      positive; the dense twin touches none; a trained checkpoint is served with prompts from
#      its validation shard; the key-value cache's bytes a token for multi-head, grouped-query
#      and latent attention (tiny, tiny-gqa, tiny-mla), and the key-value bytes a step reads
#   4. bad bench options exit 2 with a message: --csv without --decode, a bad --batch list
#      (an empty one, a trailing comma), a missing --ckpt, --profile with --decode, more steps
#      than a context holds, --quant with --offload (before any model is built)
#   5. the experts served otherwise: moe eval --offload gives the resident model's loss to the
#      last digit whatever the cache's size, and reports its hits; --quant int8 moves the loss
#      by less than 0.01 and int4 by less than 0.1, each reporting a smaller size than fp32;
#      moe sample --offload 1 gives the resident model's bytes; bench --decode --quant int8
#      reads fewer bytes a token than fp32; --quant with --offload, an unknown format and a
#      cache of 0 exit 2 naming the mistake

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_serve: decoding from a cache, and its benchmark"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1

"$moe" synth --out "$tmp/d" --tokens 60000 --seed 3 > /dev/null
run=$tmp/run
"$moe" train --out "$run" --set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 \
    --set model.seq_len=32 --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 \
    --set moe.d_expert=32 --set train.batch=4 --set train.steps=40 --set train.warmup=4 --set train.lr=1e-2 \
    --set "data.train=$tmp/d/train.bin" --set "data.val=$tmp/d/val.bin" --quiet > /dev/null 2>&1
check "a tiny MoE trains" $? "see moe train"
ckpt=$run/ckpt.bin

# 1. the cache against the full forward
sample() { "$moe" sample --ckpt "$ckpt" "$@" 2> "$tmp/sample.err"; }
sample --prompt "the " --tokens 150 --temperature 0 > "$tmp/cached"
sample --prompt "the " --tokens 150 --temperature 0 --no-cache > "$tmp/full"
n=$(wc -c < "$tmp/cached")
[ "$n" -eq 155 ] && cmp -s "$tmp/cached" "$tmp/full"
check "temperature 0: the cache gives the full forward's 150 bytes (several context restarts)" \
    $? "$n bytes; $(cmp "$tmp/cached" "$tmp/full" 2>&1)"
sample --prompt "a" --tokens 150 --temperature 0.8 --seed 5 > "$tmp/cached"
sample --prompt "a" --tokens 150 --temperature 0.8 --seed 5 --no-cache > "$tmp/full"
cmp -s "$tmp/cached" "$tmp/full"
check "temperature 0.8, one seed: the same bytes both ways" $? "$(cmp "$tmp/cached" "$tmp/full" 2>&1)"
printf 'the \n\nand a much longer prompt than the others, longer than the 32-token context\n' \
    > "$tmp/prompts"
sample --prompts "$tmp/prompts" --tokens 60 --temperature 0 > "$tmp/batch"
status=0
for i in 1 2 3; do
    line=$(sed -n "${i}p" "$tmp/prompts")
    [ -n "$line" ] || line=$'\n'
    alone=$(sample --prompt "$line" --tokens 60 --temperature 0; echo x)
    alone=${alone%x}
    # the batch's sample i: the text between its header and the next one
    got=$(awk -v i="$i" '/^--- sample [0-9]+ of 3 ---$/ { on = ($3 == i); next } on' "$tmp/batch"; echo x)
    got=${got%x}
    [ "$got" = "$alone" ] || { status=1; echo "    prompt $i: batch '$got' alone '$alone'"; }
done
[ "$(grep -c '^--- sample [0-9] of 3 ---$' "$tmp/batch")" -eq 3 ] || status=1
check "--prompts: three prompts decoded together, each as it decodes alone" $status

# 2. bad sample options
bad_sample() { # LABEL EXPECTED-WORDS ARGS...
    local label=$1 words=$2
    shift 2
    "$moe" sample --ckpt "$ckpt" "$@" > "$tmp/out" 2>&1
    local rc=$?
    [ $rc -eq 2 ] && grep -q -- "$words" "$tmp/out"
    check "$label: exit 2 naming it" $? "status $rc: $(head -c 300 "$tmp/out")"
}
bad_sample "--prompt with --prompts" "not both" --prompt a --prompts "$tmp/prompts"
bad_sample "a missing prompts file" "$tmp/nope" --prompts "$tmp/nope"
: > "$tmp/empty"
bad_sample "an empty prompts file" "empty" --prompts "$tmp/empty"
seq 1 300 > "$tmp/many"
bad_sample "more than 256 prompts" "more than 256" --prompts "$tmp/many"
echo "one prompt" > "$tmp/one"
bad_sample "--prompts of one line, --tokens over 10^6" "--tokens 1000001: with --prompts .* at most 1000000" \
    --prompts "$tmp/one" --tokens 1000001

# 3. the decoding benchmark
"$moe" bench --decode --config test --config test-dense --batch 1,4,16 --steps 4 --csv \
    > "$tmp/bench.csv" 2> "$tmp/bench.err"
check "bench --decode --csv runs" $? "$(head -c 300 "$tmp/bench.err")"
head -1 "$tmp/bench.csv" | grep -q '^model,moe,experts,top_k,batch,'
check "its CSV has a header" $? "$(head -1 "$tmp/bench.csv")"
[ "$(wc -l < "$tmp/bench.csv")" -eq 7 ]
check "one row per model and batch (2 x 3)" $? "$(wc -l < "$tmp/bench.csv") lines"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { moe = $col["moe"]; t = $col["experts_touched"]; x = $col["experts_expected"]
      k = $col["top_k"]; E = $col["experts"]
      if ($col["decode_tok_s"] <= 0 || $col["prefill_tok_s"] <= 0 || $col["weight_bytes_token"] <= 0) bad = 1
      if (moe == 1 && (t < k || t > E || t < 0.8 * x || t > 1.2 * x)) bad = 1
      if (moe == 0 && t != "nan") bad = 1 }  # a dense row touches no expert
    END { exit bad }' "$tmp/bench.csv"
check "experts touched between k and E, within 20% of E (1 - (1 - k/E)^B); speeds positive" $? \
    "$(cat "$tmp/bench.csv")"
"$moe" bench --decode --ckpt "$ckpt" --batch 2 --steps 3 > "$tmp/bench.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "ckpt.bin *2 " "$tmp/bench.txt"
check "bench --decode --ckpt serves a trained model" $? "status $rc: $(head -c 400 "$tmp/bench.txt")"
# the cache's bytes a token (all layers) for the three attentions at tiny's size, side by side as
# the handbook runs them: 2 L Hkv D floats for multi-head (tiny: 4 layers, 4 heads of 256 / 4)
# and grouped-query attention (tiny-gqa: 2 key-value heads), L (kv_rank + rope_dim) for latent
# attention (tiny-mla: 128 + 32); and the key-value bytes a step reads are those rows: at step s
# (from 0) each of B sequences reads P + s + 1 positions and writes 1, so one step of no warm-up
# moves B (P + 2) rows
"$moe" bench --decode --config tiny --config tiny-gqa --config tiny-mla --batch 1 --steps 1 \
    --warmup 0 --csv > "$tmp/attn.csv" 2> "$tmp/attn.err"
rc=$?
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { want["tiny"] = 2 * 4 * 4 * 64 * 4; want["tiny-gqa"] = 2 * 4 * 2 * 64 * 4
      want["tiny-mla"] = 4 * (128 + 32) * 4
      got = $col["cache_bytes_token"]; rows = $col["batch"] * ($col["prompt"] + 2)
      printf "%s: %s bytes a token (want %d), %s key-value bytes a step (want %d)\n", $1, got,
          want[$1], $col["kv_bytes_step"], rows * want[$1]
      if (got != want[$1] || $col["kv_bytes_step"] != rows * want[$1]) bad = 1; n++ }
    END { exit bad || n != 3 }' "$tmp/attn.csv" > "$tmp/attn.txt" 2>&1
check "bench --decode: the cache's bytes a token are 2 L Hkv D x 4 (tiny, tiny-gqa), L (kv_rank + rope_dim) x 4 (tiny-mla), and a step's key-value bytes follow" \
    $((rc || $?)) "exit $rc: $(cat "$tmp/attn.txt" "$tmp/attn.err" | head -c 600)"

# 4. bad bench options
bad_bench() { # LABEL EXPECTED-WORDS ARGS...
    local label=$1 words=$2
    shift 2
    "$moe" bench "$@" > "$tmp/out" 2>&1
    local rc=$?
    [ $rc -eq 2 ] && grep -q -- "$words" "$tmp/out"
    check "$label: exit 2 naming it" $? "status $rc: $(head -c 300 "$tmp/out")"
}
bad_bench "--csv without --decode" "add --decode" --csv
bad_bench "a bad --batch list" "batch sizes" --decode --batch 1,x
bad_bench "a batch of 0" "batch sizes" --decode --batch 0
bad_bench "an empty --batch list" "lists no batch size" --decode --batch ""
bad_bench "a --batch list ending in a comma" "batch sizes" --decode --batch 1,4,
# checked with the options, before any model is read or built: the missing checkpoint is not
# what stops it
bad_bench "--quant with --offload" "quantized or offloaded, not both" --decode --ckpt "$tmp/none.bin" \
    --quant int4 --offload 2
bad_bench "a missing checkpoint" "no checkpoint" --decode --ckpt "$tmp/none.bin"
bad_bench "--profile with --decode" "drop them" --decode --profile
bad_bench "more steps than the context holds" "do not fit" --decode --config test --steps 40

# 5. quantized and offloaded experts
loss_of() { awk '/^val_loss/ { print $2 }' "$1"; }
"$moe" eval --ckpt "$ckpt" > "$tmp/e.fp32" 2>&1
status=0
for slots in 1 3 8; do
    "$moe" eval --ckpt "$ckpt" --offload $slots > "$tmp/e.off" 2>&1 || status=1
    [ "$(loss_of "$tmp/e.off")" = "$(loss_of "$tmp/e.fp32")" ] || status=1
    grep -q "experts through a cache of $slots, [0-9.]*% hits" "$tmp/e.off" || status=1
done
check "eval --offload 1, 3, 8: the resident loss to the last digit, with the cache's hits" $status \
    "$(cat "$tmp/e.fp32" "$tmp/e.off")"
for q in int8:0.01 int4:0.1; do
    "$moe" eval --ckpt "$ckpt" --quant "${q%%:*}" > "$tmp/e.q" 2>&1
    a=$(loss_of "$tmp/e.q") b=$(loss_of "$tmp/e.fp32")
    float_cmp "($a - $b) * ($a - $b)" "<" "${q#*:} * ${q#*:}" &&
        grep -q "experts ${q%%:*}, [0-9.]* MB against [0-9.]* in fp32" "$tmp/e.q" &&
        awk '{ for (i = 1; i <= NF; i++) if ($(i + 1) == "MB") { a = $i; b = $(i + 3) } }
             END { exit !(a < b) }' "$tmp/e.q"
    check "eval --quant ${q%%:*}: the loss within ${q#*:} of fp32's ($a against $b), fewer bytes" $? \
        "$(cat "$tmp/e.q")"
done
sample --prompt "the " --tokens 80 --temperature 0 > "$tmp/resident"
sample --prompt "the " --tokens 80 --temperature 0 --offload 1 > "$tmp/offloaded"
cmp -s "$tmp/resident" "$tmp/offloaded"
check "sample --offload 1: the resident model's bytes" $? "$(cmp "$tmp/resident" "$tmp/offloaded" 2>&1)"
"$moe" sample --ckpt "$ckpt" --prompts "$tmp/prompts" --offload 8 --tokens 30 --temperature 0 > "$tmp/po" 2>&1
sample --prompts "$tmp/prompts" --tokens 30 --temperature 0 > "$tmp/pr"
cmp -s "$tmp/po" "$tmp/pr"
check "sample --prompts --offload 8: a batch from the cache of experts, the resident bytes" $? \
    "$(cmp "$tmp/po" "$tmp/pr" 2>&1)"
"$moe" bench --decode --config test --batch 4 --steps 3 --csv > "$tmp/b.fp32" 2>&1
"$moe" bench --decode --config test --batch 4 --steps 3 --csv --quant int8 > "$tmp/b.int8" 2>&1
col() { awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next } { print $k }' "$1"; }
[ "$(col "$tmp/b.int8" experts_as)" = int8 ] &&
    float_cmp "$(col "$tmp/b.int8" weight_bytes_token)" "<" "$(col "$tmp/b.fp32" weight_bytes_token)"
check "bench --decode --quant int8 reads fewer weight bytes a token than fp32" $? \
    "$(cat "$tmp/b.fp32" "$tmp/b.int8")"
"$moe" sample --ckpt "$ckpt" --prompts "$tmp/prompts" --quant int8 --tokens 10 > "$tmp/q" 2>&1
[ $? -eq 0 ] && [ "$(grep -c '^--- sample [0-9] of 3 ---$' "$tmp/q")" -eq 3 ]
check "sample --prompts with int8 experts: three samples" $? "$(head -c 300 "$tmp/q")"
bad_sample "--quant with --offload" "not both" --quant int8 --offload 2
bad_sample "an unknown format" "int8 (per output channel)" --quant int3
bad_sample "a cache of 0 experts" "--offload" --offload 0

finish
