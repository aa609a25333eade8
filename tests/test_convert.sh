#!/usr/bin/env bash
# test_convert.sh: the commands that turn one model file into another, end to end (run by
# `make test` with MOE_BIN set).
#
#   1. upcycle: a tiny dense run becomes an MoE checkpoint at step 0 whose validation loss is
#      the dense one (exact copies, norm_topk), with the parameter counts of the formula, and
#      `moe info` shows moe blocks where asked (moe.every=2); noise changes the loss
#   2. train --init: a new run from the upcycled weights starts at step 0 with the dense
#      model's loss (its first training loss is no more than 0.3 above the dense run's last),
#      records init_from in provenance.txt, and trains
#   3. export then import then export: the same tensor bytes and the same validation loss, with
#      the file's evaluation settings (no --set); an aux_free model's router biases travel too
#      (its imported validation loss is exactly the checkpoint's, and routing without the biases
#      gives another); a file without moe.c's metadata is refused, naming the settings it lacks
#      and their --set, and imports with them given (a note says its bytes are unchecked); the
#      vocabulary of such a file is tok_emb's rows (a model of 300 ids back with its loss)
#   4. (also) the checksum: a changed byte in an exported file's config text, tensor bytes or
#      checksum digits is refused with exit 2 and nothing written
#   4. bad input exits 2 with a message and writes nothing: upcycling an MoE, a drop ratio
#      out of range, a split that does not divide, an existing --out, --init with --resume, an
#      --init checkpoint of another shape, a truncated safetensors file
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1

val_of() { sed -n 's/^val_loss \([0-9.]*\).*/\1/p' <<< "$1"; }

data="$tmp/data"
"$moe" synth --out "$data" --tokens 60000 --seed 3 > /dev/null
dense_set=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
           --set model.d_ff=64 --set moe.num_experts=0 --set train.batch=4 --set train.eval_every=0
           --set "data.train=$data/train.bin" --set "data.val=$data/val.bin")
"$moe" train --out "$tmp/dense" "${dense_set[@]}" --set train.steps=30 --set train.lr=1e-2 \
    --set train.warmup=5 --quiet > /dev/null 2>&1
check "a tiny dense model to upcycle" $? "training failed"
dense_val=$(val_of "$("$moe" eval --ckpt "$tmp/dense/ckpt.bin" --batches 4)")

# ---- 1. upcycle ------------------------------------------------------------------------
echo "test_convert: upcycle"
out=$("$moe" upcycle --from "$tmp/dense/ckpt.bin" --out "$tmp/up.bin" --set moe.num_experts=4 \
      --set moe.top_k=2 --set moe.d_expert=64 --router-std 0.5 2>&1)
rc=$?
up_val=$(val_of "$("$moe" eval --ckpt "$tmp/up.bin" --batches 4 2>&1)")
[ $rc -eq 0 ] && [ -n "$up_val" ] && [ -n "$dense_val" ] &&
    float_cmp "($up_val - $dense_val)^2" "<" "1e-10"
check "exact copies keep the function: val loss $up_val == dense $dense_val" $? "exit $rc: $out"
info=$("$moe" info --ckpt "$tmp/up.bin")
# dense: 2 x 3 x 64 x 32 FFN weights; MoE: each block + 3 x 64 x 32 x 3 more experts + 4 x 32 router
dense_total=$("$moe" info --ckpt "$tmp/dense/ckpt.bin" | awk '/^parameters/ { print $2 }')
up_total=$(awk '/^parameters/ { print $2 }' <<< "$info")
[ -n "$dense_total" ] && [ "$up_total" = $((dense_total + 2 * (3 * 3 * 64 * 32 + 4 * 32))) ] &&
    grep -q '^step 0$' <<< "$info" && grep -q '^blocks: moe moe$' <<< "$info"
check "upcycled: step 0, blocks moe moe, $up_total = $dense_total + 2 x (3 x 3 x 64 x 32 + 4 x 32) parameters" \
    $? "$(head -n 4 <<< "$info")"
"$moe" upcycle --from "$tmp/dense/ckpt.bin" --out "$tmp/every.bin" --set moe.num_experts=4 \
    --set moe.d_expert=64 --set moe.every=2 > /dev/null 2>&1 &&
    "$moe" info --ckpt "$tmp/every.bin" | grep -q '^blocks: moe dense$'
check "moe.every=2 upcycles every other block (blocks: moe dense)" $? "$("$moe" info --ckpt "$tmp/every.bin" 2>&1 | sed -n 3p)"
"$moe" upcycle --from "$tmp/dense/ckpt.bin" --out "$tmp/noise.bin" --set moe.num_experts=4 \
    --set moe.d_expert=64 --noise 0.2 > /dev/null 2>&1
noise_val=$(val_of "$("$moe" eval --ckpt "$tmp/noise.bin" --batches 4 2>&1)")
[ -n "$noise_val" ] && [ "$noise_val" != "$dense_val" ]
check "noise 0.2 changes the function (val loss $noise_val)" $? "no val loss"
"$moe" upcycle --from "$tmp/dense/ckpt.bin" --out "$tmp/fine.bin" --set moe.num_experts=4 \
    --split 2 > /dev/null 2>&1 &&
    "$moe" info --ckpt "$tmp/fine.bin" | grep -q '^moe.d_expert = 32$'
check "--split 2 makes experts of d_ff / 2 = 32 without a moe.d_expert" $? \
    "$("$moe" info --ckpt "$tmp/fine.bin" 2>&1 | grep d_expert)"

# ---- 2. train --init -------------------------------------------------------------------
echo "test_convert: train --init"
out=$("$moe" train --init "$tmp/up.bin" --out "$tmp/cont" --set train.steps=10 \
      --set train.warmup=2 --quiet 2>&1)
rc=$?
first=$(awk -F, 'NR == 2 { print $2 }' "$tmp/cont/train.csv" 2>/dev/null)
dense_last=$(awk -F, 'NR > 1 { l = $2 } END { print l }' "$tmp/dense/train.csv")
rows=$(awk 'END { print NR - 1 }' "$tmp/cont/train.csv" 2>/dev/null)
[ $rc -eq 0 ] && [ "$rows" = 10 ] && [ -n "$first" ] &&
    float_cmp "$first" "<" "$dense_last + 0.3" &&
    grep -q "^init_from = $tmp/up.bin$" "$tmp/cont/provenance.txt"
check "train --init: 10 steps from step 0, first loss $first near the dense run's last $dense_last, init_from recorded" \
    $? "exit $rc, rows $rows: $out"
"$moe" info --ckpt "$tmp/cont/ckpt.bin" | grep -q '^step 10$'
check "the --init run's checkpoint is at step 10" $? "$("$moe" info --ckpt "$tmp/cont/ckpt.bin" 2>&1 | head -n 2)"

# ---- 3. export and import --------------------------------------------------------------
echo "test_convert: export and import"
"$moe" export --ckpt "$tmp/up.bin" --out "$tmp/up.safetensors" > /dev/null 2>&1 &&
    out=$("$moe" import --from "$tmp/up.safetensors" --out "$tmp/imported.bin" 2>&1)
rc=$?
# import takes the model.* and moe.* settings and the evaluation's (train.batch, data.val, ...)
# from the file, so the imported checkpoint evaluates on the same windows with no --set
imp_val=$(val_of "$("$moe" eval --ckpt "$tmp/imported.bin" --batches 4 2>&1)")
"$moe" export --ckpt "$tmp/imported.bin" --out "$tmp/again.safetensors" > /dev/null 2>&1
[ $rc -eq 0 ] && [ -n "$imp_val" ] && [ "$imp_val" = "$up_val" ] &&
    cmp -s <(safetensors_data "$tmp/up.safetensors") <(safetensors_data "$tmp/again.safetensors")
check "export -> import -> export: same val loss ($imp_val) and identical tensor bytes" $? \
    "exit $rc: $out"

# aux_free: the router biases are part of the function
"$moe" train --out "$tmp/af" "${dense_set[@]}" --set moe.num_experts=4 --set moe.d_expert=32 \
    --set moe.balance=aux_free --set moe.bias_rate=0.2 --set train.steps=12 --set train.warmup=2 \
    --quiet > /dev/null 2>&1
af_val=$(val_of "$("$moe" eval --ckpt "$tmp/af/ckpt.bin" 2>&1)")
nobias_val=$(val_of "$("$moe" eval --ckpt "$tmp/af/ckpt.bin" --set moe.balance=none 2>&1)")
out=$("$moe" export --ckpt "$tmp/af/ckpt.bin" --out "$tmp/af.safetensors" 2>&1 &&
      "$moe" import --from "$tmp/af.safetensors" --out "$tmp/af_imported.bin" 2>&1)
rc=$?
af_imp_val=$(val_of "$("$moe" eval --ckpt "$tmp/af_imported.bin" 2>&1)")
[ $rc -eq 0 ] && [ -n "$af_val" ] && [ "$af_imp_val" = "$af_val" ] &&
    [ "$nobias_val" != "$af_val" ] && grep -q '"layers.1.moe.router_bias"' "$tmp/af.safetensors"
check "aux_free: export -> import -> eval gives the checkpoint's val loss $af_val exactly (without the biases: $nobias_val)" \
    $? "exit $rc, imported $af_imp_val: $out"

# a file from elsewhere: the same tensors without the metadata (and so without a checksum)
strip_metadata() { # IN OUT
    local LC_ALL=C n json len
    n=$(od -An -tu8 -N8 "$1" | tr -d ' ')
    json=$(head -c $((8 + n)) "$1" | tail -c "$n" | sed 's/"__metadata__":{[^}]*},//; s/ *$//')
    while [ $((${#json} % 8)) -ne 0 ]; do json="$json "; done
    len=${#json}
    printf "$(printf '\\x%02x' $((len & 255)) $((len >> 8 & 255)) $((len >> 16 & 255)) 0 0 0 0 0)" > "$2"
    printf '%s' "$json" >> "$2"
    safetensors_data "$1" >> "$2"
}
strip_metadata "$tmp/up.safetensors" "$tmp/bare.safetensors"
err=$("$moe" import --from "$tmp/bare.safetensors" --out "$tmp/bare.bin" 2>&1 >/dev/null)
rc=$?
[ $rc -eq 2 ] && [ ! -e "$tmp/bare.bin" ] && grep -q "does not record model.n_head, model.seq_len" <<< "$err" &&
    grep -q -- "--set moe.score=softmax" <<< "$err"
check "a file without metadata: exit 2, names the settings it lacks and their --set" $? "exit $rc: $err"
fn_set=(--set model.n_head=2 --set model.seq_len=32 --set model.rope_theta=10000 --set moe.top_k=2
        --set moe.norm_topk=1 --set moe.score=softmax --set moe.topk_before_softmax=0
        --set moe.route_scale=1 --set moe.balance=aux --set moe.routing=token_choice
        --set moe.capacity_factor=0 --set moe.eval_capacity_factor=-1 --set moe.n_group=0
        --set moe.topk_group=0)
out=$("$moe" import --from "$tmp/bare.safetensors" --out "$tmp/bare.bin" "${fn_set[@]}" 2>&1)
rc=$?
bare_val=$(val_of "$("$moe" eval --ckpt "$tmp/bare.bin" --batches 4 --set "data.val=$data/val.bin" \
           --set train.batch=4 2>&1)")
[ $rc -eq 0 ] && [ "$bare_val" = "$up_val" ] && grep -q "note: .*no moe.crc32 checksum" <<< "$out"
check "... with them given: imports (a note: unchecked), val loss $bare_val == $up_val" $? \
    "exit $rc: $out"
# a model of 300 ids: its vocabulary comes from tok_emb's rows (model.vocab=300)
"$moe" synth --out "$tmp/d300" --tokens 20000 --seed 3 --vocab 300 > /dev/null
"$moe" train --out "$tmp/v300" "${dense_set[@]}" --set model.vocab=300 --set train.steps=4 \
    --set train.warmup=1 --set "data.train=$tmp/d300/train.bin" --set "data.val=$tmp/d300/val.bin" \
    --quiet > /dev/null 2>&1 &&
    "$moe" export --ckpt "$tmp/v300/ckpt.bin" --out "$tmp/v300.safetensors" > /dev/null 2>&1 &&
    strip_metadata "$tmp/v300.safetensors" "$tmp/v300-bare.safetensors" &&
    out=$("$moe" import --from "$tmp/v300-bare.safetensors" --out "$tmp/v300-bare.bin" \
          --set model.n_head=2 --set model.seq_len=32 --set model.rope_theta=10000 2>&1)
rc=$?
a=$(val_of "$("$moe" eval --ckpt "$tmp/v300/ckpt.bin" --batches 2 2>&1)")
b=$(val_of "$("$moe" eval --ckpt "$tmp/v300-bare.bin" --batches 2 --set train.batch=4 \
    --set "data.val=$tmp/d300/val.bin" 2>&1)")
[ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] &&
    "$moe" info --ckpt "$tmp/v300-bare.bin" | grep -qx 'model.vocab = 300'
check "a file without metadata of a model of 300 ids: model.vocab=300 from tok_emb, val loss $a == $b" \
    $? "exit $rc: $out"


# ---- 4. bad input ----------------------------------------------------------------------
echo "test_convert: bad input"
expect_error() { # LABEL PATTERN COMMAND...: exit 2, the pattern on stderr
    local label=$1 pattern=$2
    shift 2
    local err rc
    err=$("$@" 2>&1 >/dev/null)
    rc=$?
    [ $rc -eq 2 ] && grep -qi -- "$pattern" <<< "$err"
    check "$label: exit 2, says '$pattern'" $? "exit $rc: $err"
}
expect_error "upcycling an MoE" "already" \
    "$moe" upcycle --from "$tmp/up.bin" --out "$tmp/x1.bin" --set moe.num_experts=8
expect_error "no moe.num_experts" "moe.num_experts" \
    "$moe" upcycle --from "$tmp/dense/ckpt.bin" --out "$tmp/x2.bin"
expect_error "drop ratio 1.5" "--drop-ratio" \
    "$moe" upcycle --from "$tmp/dense/ckpt.bin" --out "$tmp/x3.bin" --set moe.num_experts=4 \
    --drop-ratio 1.5
expect_error "split 3 of 4 experts" "split" \
    "$moe" upcycle --from "$tmp/dense/ckpt.bin" --out "$tmp/x4.bin" --set moe.num_experts=4 \
    --split 3
expect_error "an existing --out" "already exists" \
    "$moe" upcycle --from "$tmp/dense/ckpt.bin" --out "$tmp/up.bin" --set moe.num_experts=4
expect_error "--init with --resume" "--init" \
    "$moe" train --init "$tmp/up.bin" --resume "$tmp/cont"
expect_error "--init with another shape" "shape" \
    "$moe" train --init "$tmp/up.bin" --out "$tmp/x5" --set model.d_model=64
head -c 100 "$tmp/up.safetensors" > "$tmp/trunc.safetensors"
expect_error "a truncated safetensors file" "trunc.safetensors" \
    "$moe" import --from "$tmp/trunc.safetensors" --out "$tmp/x6.bin"
# one changed byte of an exported file: in the config text (moe.top_k = 2 -> 3: valid JSON and
# a valid setting), in the tensor bytes, in the checksum's digits
flip_at() { # FILE OFFSET NEWBYTE(octal): write one byte in place
    printf "\\$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
byte_offset() { grep -abo -- "$2" "$1" | head -n 1 | cut -d: -f1; }
cp "$tmp/up.safetensors" "$tmp/c1.safetensors"
at=$(byte_offset "$tmp/c1.safetensors" 'moe.top_k = 2')
flip_at "$tmp/c1.safetensors" $((at + 12)) 063
expect_error "a changed config byte" "checksum mismatch" \
    "$moe" import --from "$tmp/c1.safetensors" --out "$tmp/x7.bin"
cp "$tmp/up.safetensors" "$tmp/c2.safetensors"
flip_at "$tmp/c2.safetensors" $(($(stat -c %s "$tmp/c2.safetensors") - 3)) 177
expect_error "a changed tensor byte" "checksum mismatch" \
    "$moe" import --from "$tmp/c2.safetensors" --out "$tmp/x8.bin"
cp "$tmp/up.safetensors" "$tmp/c3.safetensors"
at=$(byte_offset "$tmp/c3.safetensors" '"moe.crc32":"')
digit=$(dd if="$tmp/c3.safetensors" bs=1 skip=$((at + 13)) count=1 status=none)
flip_at "$tmp/c3.safetensors" $((at + 13)) "$([ "$digit" = 0 ] && echo 061 || echo 060)"
expect_error "a wrong checksum" "checksum mismatch" \
    "$moe" import --from "$tmp/c3.safetensors" --out "$tmp/x9.bin"
missing=""
for f in x1.bin x2.bin x3.bin x4.bin x5 x6.bin x7.bin x8.bin x9.bin; do [ -e "$tmp/$f" ] && missing="$missing $f"; done
[ -z "$missing" ]
check "nothing written by a refused command" $? "written:$missing"

finish
