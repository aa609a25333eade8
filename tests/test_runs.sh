#!/usr/bin/env bash
# test_runs.sh: run directories survive crashes and bad conditions (run by `make test` with
# MOE_BIN set).
#
#   1. the crash loop: a training run killed (kill -9) again and again at random moments,
#      some of them on sight of a checkpoint being written (ckpt.bin.tmp), each time
#      continued (--resume, or a fresh start while no config.txt exists yet); every
#      continuation starts (the directory always resumes), and at the end ckpt.bin,
#      router.csv, domains.csv, val_router.csv and train.csv (but for tok_per_s, a clock)
#      equal an unbroken run's bit for bit, and no .tmp file is left
#   2. killed before its first evaluation and checkpoint: every CSV already has its header;
#      `train --out` on it points to --resume, and --resume starts it again from step 0
#      (saying so) and then equals an unbroken run
#   3. torn last rows (a kill in the middle of a write) are cut on resume, not glued onto
#   4. --resume with changed data is refused, naming the file and --allow-data-change (the
#      directory unchanged); with the flag it continues and provenance.txt has the new CRC
#   5. a full disk (simulated with a file-size limit, ulimit -f, SIGXFSZ ignored, so writes
#      fail with EFBIG as they would with ENOSPC) during a resume's CSV rewrite, an import and
#      an upcycle: exit 2 with a message saying to free space, no .tmp or partial file left,
#      and the run resumes afterwards
#   6. an --out that cannot be written, a model too large for memory: exit 2, nothing written
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1

data="$tmp/data"
"$moe" synth --out "$data" --tokens 40000 --seed 5 > /dev/null 2>&1
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set train.batch=4 --set "data.train=$data/train.bin" --set "data.val=$data/val.bin"
      --set train.warmup=4 --set train.eval_batches=2 --quiet)
snapshot() { (cd "$1" && find . -type f -exec sha256sum {} + | sort -k2); }
# same_run A B: the run directories hold the same training, bit for bit (tok_per_s aside)
same_run() {
    cmp -s "$1/ckpt.bin" "$2/ckpt.bin" && cmp -s "$1/router.csv" "$2/router.csv" &&
        cmp -s "$1/domains.csv" "$2/domains.csv" && cmp -s "$1/val_router.csv" "$2/val_router.csv" &&
        cmp -s <(cut -d, -f1-6,8 "$1/train.csv") <(cut -d, -f1-6,8 "$2/train.csv")
}

# ---- 1. the crash loop ----------------------------------------------------------------------
echo "test_runs: kill -9 loop"
# long enough (about 4 s unbroken) that the random kills, up to 0.16 s apart, land many times
# before it ends, however fast the machine
loop=("${tiny[@]}" --set train.steps=500 --set train.eval_every=5 --set train.ckpt_every=2)
"$moe" train --out "$tmp/ref" "${loop[@]}" > /dev/null 2>&1
check "the unbroken run" $? "$(ls "$tmp/ref" 2>&1)"
run="$tmp/crash"
RANDOM=11 # the same moments every time the suite runs
kills=0 in_ckpt=0 bad_rc="" finished=0
for i in $(seq 60); do
    touch "$tmp/attempt"
    if [ -e "$run/config.txt" ]; then
        "$moe" train --resume "$run" --quiet > "$tmp/crash.log" 2>&1 &
    else
        "$moe" train --out "$run" "${loop[@]}" > "$tmp/crash.log" 2>&1 &
    fi
    pid=$!
    if [ $((i % 3)) = 0 ]; then
        # on sight of a checkpoint being written: once the old .tmp is gone, its next one
        for _ in $(seq 3000); do [ -e "$run/ckpt.bin.tmp" ] || break; done
        for _ in $(seq 30000); do [ -e "$run/ckpt.bin.tmp" ] && break; done
    else
        sleep "0.$(printf '%03d' $((RANDOM % 160)))"
    fi
    kill -9 "$pid" 2> /dev/null && kills=$((kills + 1))
    wait "$pid" 2> /dev/null
    rc=$?
    [ -n "$(find "$run" -name ckpt.bin.tmp -newer "$tmp/attempt" 2> /dev/null)" ] &&
        in_ckpt=$((in_ckpt + 1))
    # a kill that lands after the last checkpoint, before the process exits, leaves a finished
    # run: the next --resume says so (exit 2) and the loop is over
    if [ $rc = 2 ] && grep -q "is already at step 500 of train.steps=500" "$tmp/crash.log"; then
        finished=1
        break
    fi
    case $rc in
        0) finished=1; break ;;
        137) ;;
        *) bad_rc="$bad_rc attempt $i: exit $rc: $(head -c 300 "$tmp/crash.log")" ;;
    esac
done
if [ $finished = 0 ]; then # the last attempts were all killed: let it finish
    "$moe" train --resume "$run" --quiet > "$tmp/crash.log" 2>&1 || bad_rc="$bad_rc final: $(cat "$tmp/crash.log")"
fi
[ -z "$bad_rc" ]
check "$kills kills ($in_ckpt inside a checkpoint write): every continuation started" $? "$bad_rc"
[ "$kills" -ge 10 ] && [ "$in_ckpt" -ge 2 ]
check "the loop killed at least 10 times, twice or more inside a checkpoint write" $? \
    "$kills kills, $in_ckpt in a write"
same_run "$tmp/ref" "$run"
check "the killed and continued run equals the unbroken one bit for bit (ckpt.bin, CSVs)" $? \
    "$(cmp "$tmp/ref/ckpt.bin" "$run/ckpt.bin" 2>&1; diff <(cut -d, -f1-6 "$tmp/ref/train.csv") <(cut -d, -f1-6 "$run/train.csv") | head -n 4)"
left=$(find "$run" -name '*.tmp')
[ -z "$left" ]
check "no .tmp file is left in the run directory" $? "$left"

# ---- 2. killed before the first evaluation and checkpoint ------------------------------------
echo "test_runs: a run killed before its first checkpoint"
early="$tmp/early"
"$moe" train --out "$early" "${tiny[@]}" --set train.steps=100000 --set train.eval_every=100000 \
    --set train.ckpt_every=0 > /dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$early/val_router.csv" ] && break; sleep 0.05; done
sleep 0.3
kill -9 $pid 2> /dev/null
wait $pid 2> /dev/null
headers=""
for f in train.csv router.csv domains.csv val_router.csv; do
    [ "$(head -c 5 "$early/$f" 2> /dev/null)" = "step," ] && head -n 1 "$early/$f" | grep -q ',' &&
        [ "$(head -n 1 "$early/$f" | wc -l)" = 1 ] || headers="$headers $f"
done
[ -z "$headers" ] && [ ! -e "$early/ckpt.bin" ]
check "killed before any evaluation: every CSV has its header line, there is no checkpoint" $? \
    "without a header:$headers"
before=$(snapshot "$early")
out=$("$moe" train --out "$early" "${tiny[@]}" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "before its first checkpoint" <<< "$out" && grep -q -- "--resume" <<< "$out" &&
    [ "$before" = "$(snapshot "$early")" ]
check "train --out on it is refused, pointing to --resume (nothing changed)" $? "exit $rc: $out"
out=$("$moe" train --resume "$early" --set train.steps=8 --set train.eval_every=4 \
      --set train.ckpt_every=0 --quiet 2>&1)
rc=$?
"$moe" train --out "$tmp/early_ref" "${tiny[@]}" --set train.steps=8 --set train.eval_every=4 \
    --set train.ckpt_every=0 > /dev/null 2>&1
[ $rc -eq 0 ] && grep -q "no checkpoint yet.*from step 0" <<< "$out" && same_run "$tmp/early_ref" "$early"
check "--resume starts it again from step 0 (saying so) and equals an unbroken run" $? \
    "exit $rc: $out"

# ---- 3. torn rows -----------------------------------------------------------------------------
echo "test_runs: torn rows"
torn_cfg=("${tiny[@]}" --set train.steps=16 --set train.eval_every=4 --set train.ckpt_every=0)
"$moe" train --out "$tmp/straight" "${torn_cfg[@]}" > /dev/null 2>&1
"$moe" train --out "$tmp/torn" "${torn_cfg[@]}" --until 8 > /dev/null 2>&1
# a kill in the middle of writing rows of step 13 (a first field "1" that reads as step 1)
printf '1' >> "$tmp/torn/train.csv"
printf '13,0,0.5' >> "$tmp/torn/router.csv"
printf '1' >> "$tmp/torn/domains.csv"
out=$("$moe" train --resume "$tmp/torn" --quiet 2>&1)
rc=$?
[ $rc -eq 0 ] && same_run "$tmp/straight" "$tmp/torn"
check "torn last rows are cut on resume: the CSVs equal the unbroken run's" $? \
    "exit $rc: $out $(diff <(cut -d, -f1-3 "$tmp/straight/train.csv") <(cut -d, -f1-3 "$tmp/torn/train.csv") | head -n 4)"

# ---- 4. changed data ----------------------------------------------------------------------
echo "test_runs: changed data"
"$moe" train --out "$tmp/dc" "${torn_cfg[@]}" --until 4 > /dev/null 2>&1
# other data of the same shape: a valid shard (its own checksums right) with other tokens
"$moe" synth --out "$tmp/data2" --tokens 40000 --seed 6 > /dev/null 2>&1
before=$(snapshot "$tmp/dc")
out=$("$moe" train --resume "$tmp/dc" --set "data.train=$tmp/data2/train.bin" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "data.train: .*data2/train.bin" <<< "$out" &&
    grep -q -- "--allow-data-change" <<< "$out" && [ "$before" = "$(snapshot "$tmp/dc")" ]
check "--resume with another data.train is refused, naming it and --allow-data-change" $? \
    "exit $rc: $out"
new_crc=$(tail -c +257 "$tmp/data2/train.bin" | gzip -c | tail -c 8 | od -An -tx4 -N4 | tr -d ' ')
out=$("$moe" train --resume "$tmp/dc" --set "data.train=$tmp/data2/train.bin" \
      --allow-data-change --quiet 2>&1)
rc=$?
[ $rc -eq 0 ] && [ "$(grep '^data.train = ' "$tmp/dc/provenance.txt" | tail -n 1 | grep -c "crc32=$new_crc")" = 1 ]
check "--allow-data-change continues; provenance.txt records the new crc32=$new_crc" $? \
    "exit $rc: $out"

# ---- 5. a full disk -------------------------------------------------------------------------
echo "test_runs: a full disk"
# limited LIMIT_KB COMMAND...: the command with files limited to LIMIT_KB KiB
limited() { (trap '' XFSZ; ulimit -f "$1"; shift; "$@"); }
# a limit above config.txt, provenance.txt and train.csv but below router.csv: the rewrite of
# router.csv (rows up to the checkpoint, into router.csv.tmp) is what fails
"$moe" train --out "$tmp/full" "${torn_cfg[@]}" --until 12 > /dev/null 2>&1
kb=$(($(wc -c < "$tmp/full/router.csv") / 1024 - 1))
out=$(limited "$kb" "$moe" train --resume "$tmp/full" --quiet 2>&1)
rc=$?
left=$(find "$tmp/full" -name '*.tmp')
[ "$kb" -ge 2 ] && [ $rc -eq 2 ] && grep -q "router.csv.*free some disk space" <<< "$out" &&
    [ -z "$left" ]
check "a resume whose CSV rewrite fails (files limited to $kb KiB): exit 2, 'free some disk space', no .tmp left" \
    $? "exit $rc, left: $left: $out"
out=$("$moe" train --resume "$tmp/full" --quiet 2>&1)
rc=$?
[ $rc -eq 0 ] && same_run "$tmp/straight" "$tmp/full"
check "with room again the run resumes and equals the unbroken one" $? "exit $rc: $out"
"$moe" export --ckpt "$tmp/full/ckpt.bin" --out "$tmp/full.safetensors" > /dev/null 2>&1
out=$(limited 64 "$moe" import --from "$tmp/full.safetensors" --out "$tmp/imported.bin" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "free disk space" <<< "$out" && ! ls "$tmp"/imported.bin* > /dev/null 2>&1
check "import on a full disk: exit 2, what to do, no file or .tmp left" $? "exit $rc: $out"
"$moe" train --out "$tmp/dense" "${tiny[@]}" --set moe.num_experts=0 --set train.steps=4 \
    --set train.eval_every=0 > /dev/null 2>&1
out=$(limited 64 "$moe" upcycle --from "$tmp/dense/ckpt.bin" --out "$tmp/up.bin" \
      --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=0 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "free disk space" <<< "$out" && ! ls "$tmp"/up.bin* > /dev/null 2>&1
check "upcycle on a full disk: exit 2, what to do, no file or .tmp left" $? "exit $rc: $out"

# ---- 6. an --out that cannot be written, a model too large --------------------------------
echo "test_runs: unwritable folders, too large a model"
if [ "$(id -u)" = 0 ]; then
    locked=/proc/self # even root cannot create files there
else
    locked="$tmp/locked"
    mkdir -p "$locked"
    chmod 555 "$locked"
fi
out=$("$moe" train --out "$locked" "${tiny[@]}" --set train.steps=8 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "writable" <<< "$out"
check "train --out into a folder that cannot be written: exit 2 with a hint" $? "exit $rc: $out"
out=$("$moe" export --ckpt "$tmp/full/ckpt.bin" --out "$locked/x.safetensors" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "writable" <<< "$out"
check "export --out into a folder that cannot be written: exit 2 with a hint" $? "exit $rc: $out"
out=$("$moe" train --out "$tmp/huge" "${tiny[@]}" --set model.d_model=16384 --set model.n_layer=64 \
      --set model.n_head=64 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "GiB of memory" <<< "$out" && grep -q "model.d_model" <<< "$out" &&
    [ ! -e "$tmp/huge" ]
check "a model too large for memory: exit 2 before allocating, nothing written" $? "exit $rc: $out"
out=$("$moe" eval --ckpt "$tmp/full/ckpt.bin" --set train.batch=1048576 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "GiB of memory" <<< "$out" && grep -q "train.batch" <<< "$out"
check "eval with a batch too large for memory: exit 2 before allocating" $? "exit $rc: $out"

finish
