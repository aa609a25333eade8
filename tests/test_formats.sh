#!/usr/bin/env bash
# test_formats.sh: damaged and unusual input files through the `moe` command line (run by
# `make test` with MOE_BIN set). tests/test_formats.c sweeps every header byte in C; here a
# few representative ones go through the commands that read them:
#
#   1. a checkpoint with a changed header byte (step, entry count, a reserved byte, the header
#      checksum): `moe info`, `moe eval` and `moe train --resume` exit 2 and leave the run
#      directory byte-identical (train.csv is not cut back)
#   2. shards with a changed header byte, record or token: train and eval exit 2, write nothing
#   3. a FIFO, a directory, /dev/zero as checkpoint, shard, safetensors or config: exit 2 at
#      once (never a hang), saying what the path is; a config with a NUL byte names its line
#   4. export refuses an existing --out (its own --ckpt included) and an --out whose temporary
#      file would be the input; synth refuses to replace shards
#   5. the window boundary: a shard of exactly model.seq_len + 1 tokens evaluates, one of
#      model.seq_len is refused with a message that agrees with itself
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1

data="$tmp/data"
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set train.batch=4 --set "data.train=$data/train.bin" --set "data.val=$data/val.bin")
# flip FILE OFFSET: replace the byte at OFFSET by its complement
flip() {
    local byte
    byte=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    printf "\\$(printf '%03o' $((255 - byte)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

"$moe" synth --out "$data" --tokens 20000 --seed 3 > /dev/null 2>&1
run="$tmp/run"
"$moe" train --out "$run" "${tiny[@]}" --set train.steps=8 --set train.warmup=1 \
    --set train.eval_every=4 --until 4 --quiet > /dev/null 2>&1
[ -s "$run/ckpt.bin" ] && [ "$(wc -l < "$run/train.csv")" = 5 ]
check "setup: a 4-step run of 8 (ckpt.bin, train.csv with 4 rows)" $? "training failed"

never="$tmp/never" # what no refused command may create
# refuse LABEL PATTERNS COMMAND...: exit 2 within 20 s, nothing on stdout, stderr matching each
# ;-separated ERE of PATTERNS, $never absent
refuse() {
    local label=$1 patterns=$2 rc p why=""
    shift 2
    timeout 20 "$@" > "$tmp/stdout" 2> "$tmp/stderr" < /dev/null
    rc=$?
    [ $rc -eq 124 ] && why="still running after 20 s (blocked?);"
    [ $rc -eq 2 ] || why="$why exit $rc, expected 2;"
    [ -s "$tmp/stdout" ] && why="$why wrote to stdout: $(head -c 200 "$tmp/stdout");"
    IFS=';' read -ra pats <<< "$patterns"
    for p in "${pats[@]}"; do
        grep -Eqi -- "$p" "$tmp/stderr" || why="$why message lacks /$p/;"
    done
    [ -e "$never" ] && { why="$why created $never;"; rm -rf "$never"; }
    if [ -z "$why" ]; then ok "$label: $(head -n 1 "$tmp/stderr" | cut -c 1-120)"
    else bad "$label: $why stderr: $(head -n 1 "$tmp/stderr")"; fi
}
# refuse_keeps LABEL DIR PATTERNS COMMAND...: refuse, and every file of DIR is unchanged
refuse_keeps() {
    local label=$1 dir=$2 patterns=$3 before after
    shift 3
    before=$(snapshot "$dir")
    refuse "$label" "$patterns" "$@"
    after=$(snapshot "$dir")
    [ "$before" = "$after" ]
    check "$label: every file of ${dir##*/} unchanged" $? \
        "$(diff <(echo "$before") <(echo "$after") | head -n 4)"
}

# ---- 1. checkpoint headers ----------------------------------------------------------------
echo "test_formats: checkpoint headers"
# 16: the step's lowest byte, 23: its highest (a step of about 2^63), 12: the entry count,
# 100: a reserved byte, 44: the header checksum itself
for off in 16 23 12 100 44; do
    d="$tmp/ck$off"
    cp -r "$run" "$d"
    flip "$d/ckpt.bin" "$off"
    refuse_keeps "info, header byte $off changed" "$d" "header checksum|corrupt" \
        "$moe" info --ckpt "$d/ckpt.bin"
    refuse_keeps "eval, header byte $off changed" "$d" "header checksum|corrupt" \
        "$moe" eval --ckpt "$d/ckpt.bin"
    refuse_keeps "train --resume, header byte $off changed" "$d" "header checksum|corrupt" \
        "$moe" train --resume "$d"
done

# ---- 2. shard headers, records and tokens ---------------------------------------------------
echo "test_formats: shards"
T=(train --out "$never" "${tiny[@]}" --set train.steps=2 --set train.warmup=1)
n_docs=$(od -An -tu4 -j24 -N4 "$data/val.bin" | tr -d ' ')
for spot in 16:header 160:header 200:header $((256 + 12)):payload $((256 + 16 * n_docs + 5)):payload; do
    off=${spot%%:*}
    cp "$data/val.bin" "$tmp/v$off.bin"
    flip "$tmp/v$off.bin" "$off"
    refuse "eval, val.bin byte $off changed" "v$off\.bin;${spot##*:} checksum mismatch;make data" \
        "$moe" eval --ckpt "$run/ckpt.bin" --set "data.val=$tmp/v$off.bin"
    refuse "train, shard byte $off changed" "v$off\.bin;${spot##*:} checksum mismatch" \
        "$moe" "${T[@]}" --set "data.train=$tmp/v$off.bin"
done

# ---- 3. special files ---------------------------------------------------------------------
echo "test_formats: special files"
mkfifo "$tmp/fifo"
refuse "--config FIFO" "fifo;FIFO" "$moe" train --out "$never" --config "$tmp/fifo"
refuse "--config /dev/zero" "/dev/zero;character device" \
    "$moe" train --out "$never" --config /dev/zero
refuse "--config DIR" "is a directory;did you mean '$run/config.txt'" \
    "$moe" train --out "$never" --config "$run"
refuse "eval --ckpt FIFO" "fifo;FIFO" "$moe" eval --ckpt "$tmp/fifo"
refuse_keeps "eval --ckpt RUN_DIR" "$run" "is a directory;did you mean '$run/ckpt.bin'" \
    "$moe" eval --ckpt "$run"
refuse "data.train FIFO" "data\.train;FIFO" "$moe" "${T[@]}" --set "data.train=$tmp/fifo"
refuse "data.val DIR" "data\.val;is a directory;$data/train\.bin" \
    "$moe" "${T[@]}" --set "data.val=$data"
refuse "import --from FIFO" "FIFO;safetensors" \
    "$moe" import --from "$tmp/fifo" --out "$never"
refuse "import --from /dev/zero" "character device" \
    "$moe" import --from /dev/zero --out "$never"
printf 'train.steps=1\0junk\n' > "$tmp/nul.txt"
refuse "config with a NUL byte names the line" "nul\.txt:1;NUL byte" \
    "$moe" train --out "$never" --config "$tmp/nul.txt"
head -c 2000000 /dev/zero | tr '\0' '#' > "$tmp/big.txt"
refuse "config over 1 MiB" "big\.txt;limit" "$moe" train --out "$never" --config "$tmp/big.txt"

# ---- 4. outputs that exist ----------------------------------------------------------------
echo "test_formats: existing outputs"
refuse_keeps "export --out its own --ckpt" "$run" "already exists;another --out" \
    "$moe" export --ckpt "$run/ckpt.bin" --out "$run/ckpt.bin"
refuse_keeps "export --out an existing file" "$run" "already exists" \
    "$moe" export --ckpt "$run/ckpt.bin" --out "$run/train.csv"
cp "$run/ckpt.bin" "$tmp/m.tmp"
refuse "export --out M when M.tmp is the input" "m\.tmp;input" \
    "$moe" export --ckpt "$tmp/m.tmp" --out "$tmp/m"
cmp -s "$run/ckpt.bin" "$tmp/m.tmp" && [ ! -e "$tmp/m" ]
check "export: the input M.tmp unchanged, no M written" $? "changed or written"
refuse_keeps "synth --out over existing shards" "$data" "already exists;another --out" \
    "$moe" synth --out "$data" --tokens 5000

# ---- 5. the window boundary ---------------------------------------------------------------
echo "test_formats: the window boundary"
"$moe" synth --out "$tmp/w33" --tokens 33 --seed 4 > /dev/null 2>&1
"$moe" synth --out "$tmp/w32" --tokens 32 --seed 4 > /dev/null 2>&1
out=$("$moe" eval --ckpt "$run/ckpt.bin" --set "data.val=$tmp/w33/train.bin" --batches 1 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q '^val_loss' <<< "$out"
check "eval on a shard of seq_len + 1 = 33 tokens" $? "exit $rc: $out"
refuse "eval on a shard of seq_len = 32 tokens" \
    "holds 32 tokens, fewer than one window of model\.seq_len \+ 1 = 33" \
    "$moe" eval --ckpt "$run/ckpt.bin" --set "data.val=$tmp/w32/train.bin"
out=$("$moe" train --out "$tmp/w33run" "${tiny[@]}" --set "data.train=$tmp/w33/train.bin" \
      --set train.steps=2 --set train.warmup=1 --set train.eval_every=0 --quiet 2>&1)
rc=$?
check "train on a shard of seq_len + 1 = 33 tokens" $rc "exit $rc: $out"

finish
