#!/usr/bin/env bash
# test_runs.sh: run directories survive crashes and bad conditions (run by `make test` with
# MOE_BIN set).
#
#   1. the crash loop: a training run killed (kill -9) again and again at random moments,
#      every third time instead inside a checkpoint write (MOE_CRASH_IN_WRITE, io/files.h:
#      SIGKILL with half of ckpt.bin.tmp written), each time continued (--resume, or a fresh
#      start while no config.txt exists yet); every continuation starts (the directory always
#      resumes), and at the end ckpt.bin, router.csv, domains.csv, val_router.csv and
#      train.csv (but for tok_per_s, a clock) equal an unbroken run's bit for bit, and no .tmp
#      file is left
#   2. killed before its first evaluation and checkpoint: every CSV already has its header;
#      `train --out` on it points to --resume, and --resume starts it again from step 0
#      (saying so) and then equals an unbroken run; so do the attention's variants and two
#      multi-token prediction modules stopped with --until and resumed (`moe info` lists the
#      modules, `export --format hf` refuses them, `sample --draft mtp` writes the bytes of
#      decoding without the draft)
#   3. torn last rows (a kill in the middle of a write) are cut on resume, not glued onto
#   4. --resume with changed data is refused, naming the file and --allow-data-change (the
#      directory unchanged); with the flag it continues and provenance.txt has the new CRC
#   5. a full disk (simulated with a file-size limit, ulimit -f, SIGXFSZ ignored, so writes
#      fail with EFBIG as they would with ENOSPC) during a resume's CSV rewrite, an import and
#      an upcycle: exit 2 with a message saying to free space, no .tmp or partial file left,
#      and the run resumes afterwards
#   6. an --out that cannot be written, a model too large for memory: exit 2, nothing written
#   7. one command at a time: while a run trains, `train --resume` and `train --out` on its
#      directory exit 2 naming the process; of two `train --out` started together one is
#      refused; SIGINT and SIGTERM stop a run after its step with a checkpoint (exit 130, 143)
#      and print the command that continues it, which does, from that step
#   8. a missing or damaged provenance.txt (no data check possible) is refused, naming the
#      file and --allow-data-change, which then continues
#   9. hand edits to config.txt (a setting, or a line that is none) are refused on resume,
#      naming the key and both values, or the line, and saying how to change a setting
#  10. a train.csv replaced by junk, or cut short, and a lost ckpt.bin (train.csv past the
#      first checkpoint) are refused, naming the file, the run directory unchanged
#  11. a tied head (model.tied=1): resumed, it equals an unbroken run bit for bit; `moe info`
#      lists no head and counts the untied model's parameters less 256 x d_model; --resume with
#      model.tied=0 is refused, naming it, the run directory unchanged
#  12. a vocabulary of its own (model.vocab=16384, from `moe synth --vocab` shards of 2-byte
#      ids): stopped with --until and resumed, it equals an unbroken run bit for bit; its first
#      loss is about ln 16384, `moe info` lists 16384 rows, `moe eval` runs, `moe sample`
#      refuses it without a tokenizer.json (its ids are not bytes) and --resume with another
#      model.vocab is refused
#  13. a run's tokenizer (a tokenizer.json of 300 tokens beside the checkpoint of a model of 300):
#      `moe sample` prints the prompt and the decoding of the ids it samples (--ids), the prompt's
#      ids the tokenizer's encoding, the same text with the cache, --no-cache and --draft mtp over
#      window restarts at temperature 0, and at a temperature --prompts' first sample is
#      --prompt's; a tokenizer of another size is refused naming both, and `moe eval` refuses
#      shards whose tokenizer_crc32 is another tokenizer's (python3 writes them)
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
# rows_of FILE: the complete rows of a CSV (its lines but the header)
rows_of() { echo $(($( { wc -l < "$1"; } 2> /dev/null || echo 1) - 1)); }
# same_run A B: the run directories hold the same training, bit for bit (tok_per_s aside)
same_run() {
    cmp -s "$1/ckpt.bin" "$2/ckpt.bin" && cmp -s "$1/router.csv" "$2/router.csv" &&
        cmp -s "$1/domains.csv" "$2/domains.csv" && cmp -s "$1/val_router.csv" "$2/val_router.csv" &&
        cmp -s <(cut -d, -f1-6,8 "$1/train.csv") <(cut -d, -f1-6,8 "$2/train.csv")
}

# ---- 1. the crash loop ----------------------------------------------------------------------
echo "test_runs: kill -9 loop"
# long enough (about 4 s unbroken) that the random kills, up to 0.1 s apart, land many times
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
        start=(--resume "$run" --quiet)
    else
        start=(--out "$run" "${loop[@]}")
    fi
    # every third attempt dies by itself in the middle of its first or second checkpoint
    crash=""
    [ $((i % 3)) = 0 ] && crash="ckpt.bin:$((1 + RANDOM % 2))"
    MOE_CRASH_IN_WRITE=$crash "$moe" train "${start[@]}" > "$tmp/crash.log" 2>&1 &
    pid=$!
    if [ $((i % 3)) != 0 ]; then
        sleep "0.$(printf '%03d' $((RANDOM % 100)))"
        kill -9 "$pid" 2> /dev/null && kills=$((kills + 1))
    fi
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
check "$kills random kills and $in_ckpt inside a checkpoint write: every continuation started" $? "$bad_rc"
[ "$kills" -ge 10 ] && [ "$in_ckpt" -ge 5 ]
check "the loop killed at least 10 times at random and 5 or more times inside a checkpoint write" $? \
    "$kills kills, $in_ckpt in a write"
same_run "$tmp/ref" "$run"
check "the killed and continued run equals the unbroken one bit for bit (ckpt.bin, CSVs)" $? \
    "$(cmp "$tmp/ref/ckpt.bin" "$run/ckpt.bin" 2>&1; diff <(cut -d, -f1-6 "$tmp/ref/train.csv") <(cut -d, -f1-6 "$run/train.csv") | head -n 4)"
left=$(find "$run" -name '*.tmp')
[ -z "$left" ]
check "no .tmp file is left in the run directory" $? "$left"
# each killed process held the directory's lock; the kernel released it with the process
[ -e "$run/lock" ] && [ -z "$bad_rc" ]
check "the lock file stayed after every kill -9, and no continuation was refused by it" $? \
    "$(ls "$run")"

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

# the attention's variants keep their state in the checkpoint too: grouped key-value heads of
# their own width with norms on queries and keys, stopped at step 6 (--until) and resumed
att=("${tiny[@]}" --set model.n_head=4 --set model.kv_heads=2 --set model.head_dim=12
     --set model.qk_norm=head --set train.steps=12 --set train.eval_every=4 --set train.ckpt_every=0)
"$moe" train --out "$tmp/att_ref" "${att[@]}" > /dev/null 2>&1
"$moe" train --out "$tmp/att" "${att[@]}" --until 6 > "$tmp/att.log" 2>&1 &&
    [ "$(rows_of "$tmp/att/train.csv")" = 6 ] &&
    "$moe" train --resume "$tmp/att" --quiet >> "$tmp/att.log" 2>&1 && same_run "$tmp/att_ref" "$tmp/att"
check "grouped-query heads with qk-norm: stopped at step 6 and resumed, the unbroken run bit for bit" \
    $? "$(tail -n 3 "$tmp/att.log")"
mla=("${tiny[@]}" --set model.attention=mla --set mla.q_rank=16 --set mla.kv_rank=12
     --set mla.rope_dim=4 --set mla.nope_dim=8 --set mla.v_dim=10 --set train.steps=12
     --set train.eval_every=4 --set train.ckpt_every=0)
"$moe" train --out "$tmp/mla_ref" "${mla[@]}" > /dev/null 2>&1
"$moe" train --out "$tmp/mla" "${mla[@]}" --until 6 > "$tmp/mla.log" 2>&1 &&
    [ "$(rows_of "$tmp/mla/train.csv")" = 6 ] &&
    "$moe" train --resume "$tmp/mla" --quiet >> "$tmp/mla.log" 2>&1 && same_run "$tmp/mla_ref" "$tmp/mla"
check "latent attention: stopped at step 6 and resumed, the unbroken run bit for bit" $? \
    "$(tail -n 3 "$tmp/mla.log")"

# multi-token prediction's modules keep their tensors and moments in the checkpoint: two MoE
# modules over two micro-batches a step, stopped at step 6 and resumed; their losses' columns
# (past same_run's) equal too
mtp=("${tiny[@]}" --set model.mtp_depth=2 --set train.accum=2 --set train.steps=12
     --set train.eval_every=4 --set train.ckpt_every=0)
"$moe" train --out "$tmp/mtp_ref" "${mtp[@]}" > /dev/null 2>&1
"$moe" train --out "$tmp/mtp" "${mtp[@]}" --until 6 > "$tmp/mtp.log" 2>&1 &&
    [ "$(rows_of "$tmp/mtp/train.csv")" = 6 ] &&
    "$moe" train --resume "$tmp/mtp" --quiet >> "$tmp/mtp.log" 2>&1 && same_run "$tmp/mtp_ref" "$tmp/mtp" &&
    cmp -s <(cut -d, -f1-6,8- "$tmp/mtp_ref/train.csv") <(cut -d, -f1-6,8- "$tmp/mtp/train.csv") &&
    head -n 1 "$tmp/mtp/train.csv" | grep -q ',grad_spike,mtp1_loss,mtp2_loss$'
check "two multi-token prediction modules: stopped at step 6 and resumed, the unbroken run bit for bit" \
    $? "$(tail -n 3 "$tmp/mtp.log")"
"$moe" info --ckpt "$tmp/mtp/ckpt.bin" > "$tmp/mtp.info" 2>&1 &&
    grep -q '^multi-token prediction: 2 modules, moe blocks (training only)$' "$tmp/mtp.info" &&
    grep -Eq '^mtp\.2\.eh_proj +32 x 64 ' "$tmp/mtp.info" && grep -Eq '^mtp\.1\.moe\.router ' "$tmp/mtp.info"
check "moe info names the modules and lists their tensors (mtp.k.*)" $? "$(head -n 6 "$tmp/mtp.info")"
out=$("$moe" export --ckpt "$tmp/mtp/ckpt.bin" --format hf --out "$tmp/mtp_hf" 2>&1)
rc=$?
[ $rc -eq 2 ] && [ ! -e "$tmp/mtp_hf" ] && grep -q 'model.mtp_depth=2.*without --format hf' <<< "$out"
check "export --format hf refuses the modules, naming moe.c's own export, and writes nothing" $? \
    "exit $rc: $out"
# the first module as a draft of the byte after next, checked in two-row steps: 100 bytes
# (three windows of 32, so restarts between a byte and its guess too) at temperature 0 are
# those without it; the first byte comes from the prefill and each step writes one byte and
# one more for an accepted guess, so steps + accepted = 99, and some guesses are accepted
"$moe" sample --ckpt "$tmp/mtp/ckpt.bin" --prompt "ab" --tokens 100 --temperature 0 \
    > "$tmp/plain.txt" 2> /dev/null &&
    "$moe" sample --ckpt "$tmp/mtp/ckpt.bin" --prompt "ab" --tokens 100 --temperature 0 \
        --draft mtp > "$tmp/draft.txt" 2> "$tmp/draft.err" &&
    cmp -s "$tmp/plain.txt" "$tmp/draft.txt" &&
    read -r a g n s r < <(sed -En 's/^draft mtp: ([0-9]+) of ([0-9]+) guesses .* accepted .*; ([0-9]+) bytes in ([0-9]+) steps .*\(([0-9]+) restarts .*/\1 \2 \3 \4 \5/p' "$tmp/draft.err") &&
    [ "$n" = 100 ] && [ "$a" -gt 0 ] && [ "$a" -le "$g" ] && [ "$g" -le "$s" ] &&
    [ $((s + a)) = 99 ] && [ "$r" -ge 2 ]
check "sample --draft mtp writes the bytes of decoding without it in fewer steps, one a byte less each accepted guess" $? \
    "$(cat "$tmp/draft.err")"
out=$("$moe" sample --ckpt "$tmp/att/ckpt.bin" --prompt "ab" --temperature 0 --draft mtp 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q 'model.mtp_depth=0' <<< "$out"
check "sample --draft mtp of a model without modules: exit 2, naming model.mtp_depth" $? "exit $rc: $out"
out=$("$moe" sample --ckpt "$tmp/mtp/ckpt.bin" --prompt "ab" --draft mtp 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q 'add --temperature 0' <<< "$out"
check "sample --draft mtp without --temperature 0: exit 2, saying to add it" $? "exit $rc: $(head -n 1 <<< "$out")"

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

# ---- 7. one command at a time; stopping on a signal -----------------------------------------
echo "test_runs: a run in use, SIGINT and SIGTERM"
long=("${tiny[@]}" --set train.steps=100000 --set train.eval_every=100000 --set train.ckpt_every=0)
# a script's background job starts with SIGINT ignored; moe catches it all the same, so the
# SIGINT below stops it as Ctrl-C does in a terminal
busy="$tmp/busy"
"$moe" train --out "$busy" "${long[@]}" > "$tmp/busy.log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ "$(rows_of "$busy/train.csv")" -ge 2 ] && break; sleep 0.02; done
# (a command that is let in trains on: timeout ends it, and the check fails)
out=$(timeout 10 "$moe" train --resume "$busy" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "$busy is in use by process $pid" <<< "$out"
check "--resume of a directory a run is training in: exit 2, 'in use by process $pid'" $? \
    "exit $rc: $out"
out=$(timeout 10 "$moe" train --out "$busy" "${tiny[@]}" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "$busy is in use by process $pid" <<< "$out"
check "train --out into it: exit 2, 'in use by process $pid'" $? "exit $rc: $out"
# stop_with SIGNAL PID: send it and wait up to 10 s for the process to end; rc is its status,
# or "running" (after a kill -9) when it did not end
stop_with() {
    kill "-$1" "$2"
    for _ in $(seq 500); do kill -0 "$2" 2> /dev/null || break; sleep 0.02; done
    local alive=0
    if kill -0 "$2" 2> /dev/null; then
        alive=1
        kill -9 "$2"
    fi
    wait "$2" 2> /dev/null
    rc=$?
    [ $alive = 0 ] || rc=running
}
stop_with INT $pid
at=$(sed -n 's/^step //p' < <("$moe" info --ckpt "$busy/ckpt.bin" 2> /dev/null))
[ "$rc" = 130 ] && [ -n "$at" ] && [ "$at" -ge 2 ] &&
    grep -q "Continue with: moe train --resume $busy\$" "$tmp/busy.log"
check "SIGINT: exit 130, a checkpoint of step ${at:-?}, and the command that continues" $? \
    "exit $rc: $(tail -n 2 "$tmp/busy.log")"
out=$("$moe" train --resume "$busy" --until $((${at:-0} + 3)) 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "(resumed)" <<< "$out" &&
    [ "$(cut -d, -f1 "$busy/train.csv" | tail -n +2 | tr '\n' ' ')" = "$(seq -s ' ' $((${at:-0} + 3))) " ]
check "--resume continues from step ${at:-?}: train.csv holds steps 1..$((${at:-0} + 3)) once each" $? \
    "exit $rc: $out $(cut -d, -f1 "$busy/train.csv" | tail -n 5 | tr '\n' ' ')"
# two new runs into one folder, started together: one trains, the other is refused
pair="$tmp/pair"
"$moe" train --out "$pair" "${long[@]}" > "$tmp/pair1.log" 2>&1 &
p1=$!
"$moe" train --out "$pair" "${long[@]}" > "$tmp/pair2.log" 2>&1 &
p2=$!
for _ in $(seq 500); do { kill -0 $p1 && kill -0 $p2; } 2> /dev/null || break; sleep 0.02; done
if kill -0 $p1 2> /dev/null; then first=$p2 second=$p1 log="$tmp/pair2.log"; else first=$p1 second=$p2 log="$tmp/pair1.log"; fi
kill -9 $first 2> /dev/null # both train: neither was refused
wait $first 2> /dev/null
rc=$?
[ $rc -eq 2 ] && grep -q "in use by process $second" "$log"
check "two train --out into one folder at once: one is refused, 'in use by process N'" $? \
    "exit $rc: $(cat "$tmp/pair1.log" "$tmp/pair2.log")"
for _ in $(seq 200); do [ "$(rows_of "$pair/train.csv")" -ge 1 ] && break; sleep 0.02; done
stop_with TERM $second
[ "$rc" = 143 ] && [ -e "$pair/ckpt.bin" ] && cat "$tmp"/pair*.log | grep -q "stopped by SIGTERM"
check "SIGTERM: exit 143 and a checkpoint" $? "exit $rc: $(cat "$tmp"/pair*.log)"

# ---- 8. provenance.txt missing or damaged -------------------------------------------------
echo "test_runs: provenance.txt missing or damaged"
"$moe" train --out "$tmp/prov" "${torn_cfg[@]}" --until 4 > /dev/null 2>&1
mv "$tmp/prov/provenance.txt" "$tmp/prov.txt"
before=$(snapshot "$tmp/prov")
out=$("$moe" train --resume "$tmp/prov" --quiet 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "provenance.txt is missing" <<< "$out" &&
    grep -q -- "--allow-data-change" <<< "$out" && [ "$before" = "$(snapshot "$tmp/prov")" ]
check "--resume without provenance.txt: exit 2, naming it and --allow-data-change" $? \
    "exit $rc: $out"
head -c 2000 /dev/urandom > "$tmp/prov/provenance.txt"
before=$(snapshot "$tmp/prov")
out=$("$moe" train --resume "$tmp/prov" --quiet 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "provenance.txt records no data.train line" <<< "$out" &&
    [ "$before" = "$(snapshot "$tmp/prov")" ]
check "--resume with a provenance.txt of junk: exit 2, saying what it lacks" $? "exit $rc: $out"
out=$("$moe" train --resume "$tmp/prov" --allow-data-change --quiet 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "^data.train = .* crc32=" "$tmp/prov/provenance.txt"
check "with --allow-data-change it continues and records the data anew" $? "exit $rc: $out"

# ---- 9. config.txt edited by hand -------------------------------------------------------------
echo "test_runs: config.txt edited by hand"
"$moe" train --out "$tmp/cfg" "${torn_cfg[@]}" --until 4 > /dev/null 2>&1
cp "$tmp/cfg/config.txt" "$tmp/config.orig"
bad_edit=""
for edit in "train.lr = 0.5" "train.steps = 99" "train.seed = 7" "model.d_model = 64" \
    "data.train = $data/val.bin" "data.mix = uniform"; do
    key=${edit%% = *}
    sed "s|^$key = .*|$edit|" "$tmp/config.orig" > "$tmp/cfg/config.txt"
    was=$(grep "^$key = " "$tmp/config.orig" | sed 's/^[^=]*= //')
    before=$(snapshot "$tmp/cfg")
    out=$("$moe" train --resume "$tmp/cfg" --quiet 2>&1)
    rc=$?
    [ $rc -eq 2 ] && grep -qF "$edit in config.txt, $was in the checkpoint" <<< "$out" &&
        grep -qF -- "--set $key=" <<< "$out" && [ "$before" = "$(snapshot "$tmp/cfg")" ] ||
        bad_edit="$bad_edit [$edit] exit $rc: $out"
done
[ -z "$bad_edit" ]
check "six hand edits (lr, steps, seed, d_model, data.train, data.mix): exit 2 naming the key, both values, --set" \
    $? "$bad_edit"
{ cat "$tmp/config.orig"; echo "this is no setting"; } > "$tmp/cfg/config.txt"
before=$(snapshot "$tmp/cfg")
out=$("$moe" train --resume "$tmp/cfg" --quiet 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "config.txt:$(($(wc -l < "$tmp/config.orig") + 1)): .*this is no setting" <<< "$out" &&
    [ "$before" = "$(snapshot "$tmp/cfg")" ]
check "a line that is no setting: exit 2 naming the file, line and text" $? "exit $rc: $out"
sed "s|^train.steps = .*|train.steps = 12|" "$tmp/config.orig" > "$tmp/cfg/config.txt"
out=$("$moe" train --resume "$tmp/cfg" --set train.steps=12 --quiet 2>&1)
rc=$?
[ $rc -eq 0 ] && [ "$(tail -n 1 "$tmp/cfg/train.csv" | cut -d, -f1)" = 12 ]
check "the change given as the message says (--set train.steps=12 on resume) is taken" $? \
    "exit $rc: $out"

# ---- 10. damaged logs, a lost checkpoint ------------------------------------------------------
echo "test_runs: damaged train.csv, lost ckpt.bin"
dmg=("${tiny[@]}" --set train.steps=16 --set train.eval_every=4 --set train.ckpt_every=4)
"$moe" train --out "$tmp/junk" "${dmg[@]}" --until 8 > /dev/null 2>&1
head -c 3000 /dev/urandom > "$tmp/junk/train.csv"
before=$(snapshot "$tmp/junk")
out=$("$moe" train --resume "$tmp/junk" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "train.csv is damaged" <<< "$out" && [ "$before" = "$(snapshot "$tmp/junk")" ]
check "--resume onto a train.csv of junk: exit 2, naming it (nothing changed)" $? "exit $rc: $out"
"$moe" train --out "$tmp/cut" "${dmg[@]}" --until 8 > /dev/null 2>&1
head -n 4 "$tmp/cut/train.csv" > "$tmp/cut.csv" && mv "$tmp/cut.csv" "$tmp/cut/train.csv"
before=$(snapshot "$tmp/cut")
out=$("$moe" train --resume "$tmp/cut" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "train.csv has no row of that step" <<< "$out" &&
    [ "$before" = "$(snapshot "$tmp/cut")" ]
check "--resume onto a train.csv cut short of the checkpoint: exit 2, naming it" $? \
    "exit $rc: $out"
"$moe" train --out "$tmp/lost" "${dmg[@]}" --until 8 > /dev/null 2>&1
rm "$tmp/lost/ckpt.bin"
before=$(snapshot "$tmp/lost")
out=$("$moe" train --resume "$tmp/lost" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "no checkpoint .*ckpt.bin, but the run had one" <<< "$out" &&
    [ "$before" = "$(snapshot "$tmp/lost")" ]
check "--resume without ckpt.bin, train.csv past the first checkpoint: exit 2 (no restart)" $? \
    "exit $rc: $out"

# ---- 11. a tied head ---------------------------------------------------------------------------
echo "test_runs: a tied head (model.tied=1)"
tied=("${tiny[@]}" --set model.tied=1 --set train.steps=8 --set train.eval_every=4 --set train.ckpt_every=0)
out=""
"$moe" train --out "$tmp/tied_ref" "${tied[@]}" > /dev/null 2>&1 &&
    "$moe" train --out "$tmp/tied" "${tied[@]}" --until 4 > /dev/null 2>&1 &&
    out=$("$moe" train --resume "$tmp/tied" --quiet 2>&1)
rc=$?
[ $rc -eq 0 ] && same_run "$tmp/tied_ref" "$tmp/tied"
check "a tied model trained 4 steps and resumed to 8 equals an unbroken run, bit for bit" $? \
    "exit $rc: $out"
"$moe" info --ckpt "$tmp/tied/ckpt.bin" > "$tmp/tied.info" 2>&1
"$moe" train --out "$tmp/untied" "${tiny[@]}" --set train.steps=1 --set train.warmup=0 > /dev/null 2>&1
"$moe" info --ckpt "$tmp/untied/ckpt.bin" > "$tmp/untied.info" 2>&1
# parameters: the untied model's less the head's 256 x 32, and the sum of the tensors listed
got=$(awk 'FNR == 1 { t = 0 } /^parameters:/ { p[FILENAME] = $2 } /^\[tensors\]/ { t = 1; next }
           t && /\(/ { gsub(/[()]/, "", $NF); s[FILENAME] += $NF } /^head / { h[FILENAME]++ }
           END { for (f in p) printf "%s %s %s %d\n", f ~ /untied/ ? "untied" : "tied", p[f], s[f], h[f] }' \
          "$tmp/tied.info" "$tmp/untied.info" | sort)
awk '$1 == "tied" { tp = $2; ts = $3; th = $4 } $1 == "untied" { up = $2; uh = $4 }
     END { exit !(tp == ts && tp == up - 256 * 32 && th == 0 && uh == 1) }' <<< "$got"
check "moe info of a tied run: no head tensor, its parameters the untied model's less 256 x 32" $? "$got"
before=$(snapshot "$tmp/tied")
out=$("$moe" train --resume "$tmp/tied" --set model.tied=0 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "checkpoint has model.tied=1, config has 0" <<< "$out" &&
    [ "$before" = "$(snapshot "$tmp/tied")" ]
check "--resume of a tied run with --set model.tied=0: exit 2, naming model.tied (nothing changed)" $? \
    "exit $rc: $out"

# ---- 12. a vocabulary of its own ---------------------------------------------------------------
echo "test_runs: a vocabulary of 16384 (model.vocab, 2-byte shards)"
"$moe" synth --out "$tmp/data16k" --tokens 20000 --seed 5 --vocab 16384 > /dev/null 2>&1
wide=("${tiny[@]}" --set model.vocab=16384 --set "data.train=$tmp/data16k/train.bin"
      --set "data.val=$tmp/data16k/val.bin" --set train.steps=6 --set train.eval_every=3
      --set train.ckpt_every=0)
# the shard's header: version 3, 2-byte ids, vocab 16384; the file 256 + 16 n_docs + 2 n_tokens
hdr=$(od -An -tu4 -j8 -N8 "$tmp/data16k/train.bin" | xargs)/$(od -An -tu4 -j168 -N4 "$tmp/data16k/train.bin" | xargs)
[ "$hdr" = "3 2/16384" ] && [ "$(stat -c %s "$tmp/data16k/train.bin")" = $((256 + 16 * 40 + 2 * 20000)) ]
check "synth --vocab 16384 writes version 3 shards of 2-byte ids" $? "version, token_bytes/vocab: $hdr"
"$moe" train --out "$tmp/wide_ref" "${wide[@]}" > /dev/null 2>&1 &&
    "$moe" train --out "$tmp/wide" "${wide[@]}" --until 3 > "$tmp/wide.log" 2>&1 &&
    [ "$(rows_of "$tmp/wide/train.csv")" = 3 ] &&
    "$moe" train --resume "$tmp/wide" --quiet >> "$tmp/wide.log" 2>&1 &&
    same_run "$tmp/wide_ref" "$tmp/wide"
check "model.vocab=16384: stopped at step 3 and resumed, the unbroken run bit for bit" $? \
    "$(tail -n 3 "$tmp/wide.log")"
# a fresh model guesses the 16384 ids about uniformly: its first loss is near ln 16384 = 9.70
awk -F, 'NR == 2 { exit !($2 > 9.4 && $2 < 10) }' "$tmp/wide/train.csv"
check "its first loss is about ln 16384 (the head has 16384 rows)" $? "$(sed -n 2p "$tmp/wide/train.csv")"
"$moe" info --ckpt "$tmp/wide/ckpt.bin" > "$tmp/wide.info" 2>&1 &&
    grep -Eq '^tok_emb +16384 x 32 ' "$tmp/wide.info" && grep -Eq '^head +16384 x 32 ' "$tmp/wide.info"
check "moe info lists the embedding and the head of 16384 rows" $? "$(grep -E '^(tok_emb|head) ' "$tmp/wide.info")"
out=$("$moe" eval --ckpt "$tmp/wide/ckpt.bin" 2>&1)
check "moe eval measures its loss" $? "$out"
out=$("$moe" sample --ckpt "$tmp/wide/ckpt.bin" --prompt ab --tokens 5 2> "$tmp/wide.err")
rc=$?
[ $rc -eq 2 ] && [ -z "$out" ] &&
    grep -q "model.vocab=16384.*not the 256 bytes.*no $tmp/wide/tokenizer.json beside it" "$tmp/wide.err"
check "moe sample refuses it without a tokenizer.json: its ids are not bytes (exit 2)" $? \
    "exit $rc: $out $(cat "$tmp/wide.err")"
before=$(snapshot "$tmp/wide")
out=$("$moe" train --resume "$tmp/wide" --set model.vocab=256 --set train.steps=8 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "model.vocab" <<< "$out" && [ "$before" = "$(snapshot "$tmp/wide")" ]
check "--resume with --set model.vocab=256: exit 2, naming model.vocab (nothing changed)" $? \
    "exit $rc: $out"

# ---- 13. a run's tokenizer ---------------------------------------------------------------------
echo "test_runs: a run's tokenizer (tokenizer.json beside ckpt.bin)"
# a tokenizer of 300 tokens trained on text of words and numbers, shards of 300 ids, and a run of
# them with a multi-token prediction module (for --draft), its tokenizer.json copied beside it
seq 1 2000 | awk '{ print "item " $1 " of the list, number " $1 * 7 ", naïve café" }' > "$tmp/words.txt"
"$moe" tokenizer train --vocab 300 --from "$tmp/words.txt" --out "$tmp/tok300.json" > /dev/null 2>&1
"$moe" tokenizer train --vocab 310 --from "$tmp/words.txt" --out "$tmp/tok310.json" > /dev/null 2>&1
"$moe" synth --out "$tmp/data300" --tokens 20000 --seed 5 --vocab 300 > /dev/null 2>&1
"$moe" train --out "$tmp/bpe" "${tiny[@]}" --set model.vocab=300 --set model.mtp_depth=1 \
    --set "data.train=$tmp/data300/train.bin" --set "data.val=$tmp/data300/val.bin" \
    --set train.steps=6 --set train.eval_every=6 --set train.ckpt_every=0 > /dev/null 2>&1
cp "$tmp/tok300.json" "$tmp/bpe/tokenizer.json"
bpe=(--ckpt "$tmp/bpe/ckpt.bin" --temperature 0)
prompt="item 1234 of the list, number 8638, naïve café"
# its text is the decoding of its ids (--ids: the prompt's line, then the sample's), the prompt's
# ids the tokenizer's encoding; 70 tokens restart the window of 32 twice, counted in tokens: the
# key-value cache, a full forward every token and the draft give the same text
"$moe" sample "${bpe[@]}" --prompt "$prompt" --tokens 70 > "$tmp/bpe.txt" 2> "$tmp/bpe.err" &&
    "$moe" sample "${bpe[@]}" --prompt "$prompt" --tokens 70 --ids > "$tmp/bpe.ids" 2>> "$tmp/bpe.err" &&
    "$moe" sample "${bpe[@]}" --prompt "$prompt" --tokens 70 --no-cache > "$tmp/bpe_nc.txt" 2>> "$tmp/bpe.err" &&
    "$moe" sample "${bpe[@]}" --prompt "$prompt" --tokens 70 --draft mtp > "$tmp/bpe_draft.txt" 2> "$tmp/bpe_draft.err"
rc=$?
n=$(sed -n 2p "$tmp/bpe.ids" | wc -w)
{ printf '%s' "$prompt"; sed -n 2p "$tmp/bpe.ids" | "$moe" tokenizer decode --tokenizer "$tmp/tok300.json"; } > "$tmp/bpe.dec"
[ $rc = 0 ] && [ "$n" = 70 ] && cmp -s "$tmp/bpe.txt" "$tmp/bpe.dec"
check "sample with the run's tokenizer: 70 tokens, its text the prompt and their decoding" $? \
    "exit $rc, $n ids: $(cmp "$tmp/bpe.txt" "$tmp/bpe.dec") $(cat "$tmp/bpe.err")"
[ "$(sed -n 1p "$tmp/bpe.ids")" = "$(printf '%s\n' "$prompt" | "$moe" tokenizer encode --tokenizer "$tmp/tok300.json")" ]
check "--ids: the prompt's ids are the tokenizer's encoding of it" $? "$(sed -n 1p "$tmp/bpe.ids")"
cmp -s "$tmp/bpe.txt" "$tmp/bpe_nc.txt" && cmp -s "$tmp/bpe.txt" "$tmp/bpe_draft.txt" &&
    grep -q '; 70 tokens in ' "$tmp/bpe_draft.err"
check "at temperature 0 the cache, --no-cache and --draft mtp give the same text (windows of tokens)" $? \
    "$(cmp "$tmp/bpe.txt" "$tmp/bpe_nc.txt"; cmp "$tmp/bpe.txt" "$tmp/bpe_draft.txt"; cat "$tmp/bpe_draft.err")"
# drawn at a temperature: the same seed the same ids, and --prompts' first line those of --prompt
printf '%s\nnumber 7\n' "$prompt" > "$tmp/prompts.txt"
"$moe" sample --ckpt "$tmp/bpe/ckpt.bin" --prompt "$prompt" --tokens 30 --seed 3 --ids > "$tmp/hot1" 2>&1 &&
    "$moe" sample --ckpt "$tmp/bpe/ckpt.bin" --prompt "$prompt" --tokens 30 --seed 3 > "$tmp/hot1.txt" 2>&1 &&
    "$moe" sample --ckpt "$tmp/bpe/ckpt.bin" --prompts "$tmp/prompts.txt" --tokens 30 --seed 3 --ids > "$tmp/hot2" 2>&1
rc=$?
{ printf '%s' "$prompt"; sed -n 2p "$tmp/hot1" | "$moe" tokenizer decode --tokenizer "$tmp/tok300.json"; } > "$tmp/hot1.dec"
[ $rc = 0 ] && [ "$(sed -n 2,3p "$tmp/hot2")" = "$(cat "$tmp/hot1")" ] && cmp -s "$tmp/hot1.txt" "$tmp/hot1.dec" &&
    [ "$(sed -n 6p "$tmp/hot2" | wc -w)" = 30 ] && tr ' ' '\n' < "$tmp/hot1" | awk '$1 >= 256 { n++ } END { exit !n }'
check "at temperature 0.8: --prompts' first sample is --prompt's with the same seed, the text their decoding" $? \
    "exit $rc: $(cat "$tmp/hot1"; cat "$tmp/hot2")"
# a tokenizer of another size than model.vocab, and a run's shards of another tokenizer
cp "$tmp/tok310.json" "$tmp/bpe/tokenizer.json"
out=$("$moe" sample "${bpe[@]}" --prompt ab --tokens 5 2>&1)
rc=$?
cp "$tmp/tok300.json" "$tmp/bpe/tokenizer.json"
[ $rc = 2 ] && grep -q "model.vocab=300, but the tokenizer beside it, $tmp/bpe/tokenizer.json, has 310 tokens" <<< "$out"
check "sample with a tokenizer of 310 tokens beside a model of 300: exit 2, naming both" $? "exit $rc: $out"
if command -v python3 > /dev/null 2>&1; then
    # shard_crc SRC DST FILE: the shard SRC as DST with tokenizer_crc32 the CRC-32 of FILE
    shard_crc() {
        python3 - "$@" << 'PY'
import struct, sys, zlib
b = bytearray(open(sys.argv[1], "rb").read())
b[172:176] = struct.pack("<I", zlib.crc32(open(sys.argv[3], "rb").read()))
b[164:168] = b"\0\0\0\0"
b[164:168] = struct.pack("<I", zlib.crc32(bytes(b[:256])))
open(sys.argv[2], "wb").write(b)
PY
    }
    shard_crc "$tmp/data300/val.bin" "$tmp/val_tok300.bin" "$tmp/tok300.json"
    shard_crc "$tmp/data300/val.bin" "$tmp/val_tok310.bin" "$tmp/tok310.json"
    "$moe" eval --ckpt "$tmp/bpe/ckpt.bin" --set "data.val=$tmp/val_tok300.bin" > "$tmp/ev.out" 2>&1
    rc=$?
    out=$("$moe" eval --ckpt "$tmp/bpe/ckpt.bin" --set "data.val=$tmp/val_tok310.bin" 2>&1)
    rc2=$?
    crc=$(python3 -c 'import sys, zlib; print("%08x" % zlib.crc32(open(sys.argv[1], "rb").read()))' "$tmp/tok310.json")
    [ $rc = 0 ] && [ $rc2 = 2 ] && grep -q "tokenizer of CRC-32 $crc, but the checkpoint's, $tmp/bpe/tokenizer.json, is" <<< "$out"
    check "eval: shards of the run's tokenizer run, of another (its CRC-32) exit 2, naming both" $? \
        "exit $rc, $rc2: $(cat "$tmp/ev.out") $out"
fi

finish
