#!/usr/bin/env bash
# test_options.sh: the command line of `moe` itself (run by `make test` with MOE_BIN set).
#
#   1. help: `moe help`, `moe help CMD`, `moe CMD --help` and `-h` print the same text for
#      every command (exit 0); every option a help lists is one the command accepts, and an
#      unknown command of `moe help` exits 2
#   2. malformed options exit 2 with a message: an option with a space in it ("--ckpt --set"
#      passed as one word), an empty path (--out "", --out=), an option of another command
#   2b. --opt=value is --opt value for every option of every command that takes a value (the
#      same answer to the same mistake, the same samples and losses when it runs; --set=k=v
#      splits at the first '='; a value that looks like --a=b stays whole); an option without
#      a value given one (--json=1) is refused by name
#   2c. moe version = moe --version: the commit provenance.txt records and the build's features
#   3. whole numbers are range-checked in full (one parser for every integer option): no
#      wrap-around (sample --tokens 4294967299 samples more than 3 tokens, 2147483647 does not
#      overflow), values past the range, past 64 bits, with trailing text or spaces exit 2
#   4. sample --temperature 1e-50 samples the greedy text of --temperature 0 (no NaN bytes)
#   5. huge capacity factors (moe.capacity_factor=3e38, moe.ec_capacity=3e38) keep every
#      token instead of overflowing to min_capacity: drop_frac 0
#   6. a run that ends before any evaluation says "no evaluation ran", not "val loss nan"
# Prints one line per check and "N passed, M failed"; exits non-zero when a check fails.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
export OMP_NUM_THREADS=1

data="$tmp/data"
tiny=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=32
      --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
      --set train.batch=4 --set "data.train=$data/train.bin" --set "data.val=$data/val.bin"
      --set train.warmup=1 --quiet)
"$moe" synth --out "$data" --tokens 30000 --seed 3 > /dev/null 2>&1
"$moe" train --out "$tmp/run" "${tiny[@]}" --set train.steps=4 --set train.eval_every=2 \
    > /dev/null 2>&1
ckpt="$tmp/run/ckpt.bin"
[ -s "$ckpt" ]
check "a tiny run to sample from" $? "no $ckpt"

# refuse LABEL PATTERN COMMAND...: exit 2, nothing on stdout, stderr matches the ERE
refuse() {
    local label=$1 pattern=$2
    shift 2
    "$@" > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    [ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -Eq -- "$pattern" "$tmp/err"
    check "$label" $? "exit $rc: $(head -n 1 "$tmp/err") $(head -c 100 "$tmp/out")"
}

# ---- 1. help ------------------------------------------------------------------------------
echo "test_options: help"
cmds="train eval sample export import upcycle info corpus synth bench tokenizer"
out=$("$moe" help 2>&1)
rc=$?
missing=""
for c in $cmds help; do grep -Eq "^  $c " <<< "$out" || missing="$missing $c"; done
[ $rc -eq 0 ] && [ -z "$missing" ]
check "moe help lists every command" $? "exit $rc, missing:$missing"
for c in $cmds; do
    a=$("$moe" help "$c" 2>&1); ra=$?
    b=$("$moe" "$c" --help 2>&1); rb=$?
    h=$("$moe" "$c" -h 2>&1); rh=$?
    # every "  --option" line of the help: the command must not call it unknown. A trailing
    # unknown --zzz (twice: once it may be taken as the option's value) stops every command
    # before it runs
    unknown=""
    for opt in $(sed -n 's/^  \(--[a-z-]*\).*/\1/p' <<< "$a"); do
        [ "$opt" = --help ] && continue
        "$moe" "$c" "$opt" --zzz --zzz < /dev/null 2>&1 | grep -q "unknown option '$opt'" &&
            unknown="$unknown $opt"
    done
    n=$(grep -c '^  --' <<< "$a")
    [ $ra -eq 0 ] && [ $rb -eq 0 ] && [ $rh -eq 0 ] && [ "$a" = "$b" ] && [ "$a" = "$h" ] &&
        [ "${a:0:$((11 + ${#c}))}" = "usage: moe $c" ] && [ "$n" -ge 2 ] && [ -z "$unknown" ]
    check "moe help $c = moe $c --help = -h: usage line and $n options, each accepted" $? \
        "exit $ra/$rb/$rh, unknown:$unknown: $(head -n 1 <<< "$b")"
done
refuse "moe help of an unknown command" "unknown command 'frobnicate'" "$moe" help frobnicate

# ---- 2. malformed options -------------------------------------------------------------------
echo "test_options: malformed options"
refuse "an option with a space in it is refused, not ignored" "unknown option '--ckpt --set'" \
    "$moe" sample --ckpt "$ckpt" "--ckpt --set" model.d_model=64
refuse "train --out '' is refused (empty path)" "--out needs a path" "$moe" train --out ""
refuse "synth --out '' is refused" "--out needs a path" "$moe" synth --out ""
refuse "eval --ckpt '' is refused" "--ckpt needs a path" "$moe" eval --ckpt ""
refuse "an option of another command" "unknown option '--tokens'" "$moe" eval --ckpt "$ckpt" --tokens 5
refuse "--allow-data-change without --resume" "allow-data-change" \
    "$moe" train --out "$tmp/never" --allow-data-change
[ ! -e "$tmp/never" ] && [ ! -e x ]
check "the refused commands created nothing" $? "$tmp/never or ./x exists"

# ---- 2b. --opt=value ------------------------------------------------------------------------
echo "test_options: --opt=value"
# a value option: the help line names its value (--out DIR, --set key=value); a flag does not
for c in $cmds doctor plan; do
    help=$("$moe" help "$c")
    values=" $(sed -n 's/^  \(--[a-z-]*\) \([A-Z][A-Z0-9_=]*\|[a-z]*=[a-z]*\)\( .*\)\?$/\1/p' <<< "$help" | tr '\n' ' ')"
    differ=""
    for opt in $(sed -n 's/^  \(--[a-z-]*\).*/\1/p' <<< "$help"); do
        [ "$opt" = --help ] && continue
        # the trailing unknown --zzz stops every command before it runs
        "$moe" "$c" "$opt=zzz" --zzz --zzz < /dev/null > /dev/null 2> "$tmp/eq"
        req=$?
        if [[ "$values" == *" $opt "* ]]; then
            "$moe" "$c" "$opt" zzz --zzz --zzz < /dev/null > /dev/null 2> "$tmp/sp"
            rsp=$?
            [ $req -eq 2 ] && [ $rsp -eq 2 ] && cmp -s "$tmp/eq" "$tmp/sp" || differ="$differ $opt"
        else
            [ $req -eq 2 ] && grep -q "^error: moe $c: $opt takes no value; write $opt alone, not '$opt=zzz'" "$tmp/eq" ||
                differ="$differ $opt"
        fi
    done
    check "moe $c: every --opt=zzz answers as --opt zzz; a flag=zzz is refused by name" \
        "$([ -z "$differ" ]; echo $?)" "differ:$differ: $(head -n 1 "$tmp/eq")"
done
"$moe" sample --ckpt "$ckpt" --tokens 20 --seed 5 --prompt "ab" > "$tmp/s_space" 2>&1
"$moe" sample --ckpt="$ckpt" --tokens=20 --seed=5 --prompt=ab > "$tmp/s_eq" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(wc -c < "$tmp/s_eq")" -eq 23 ] && cmp -s "$tmp/s_space" "$tmp/s_eq"
check "sample --ckpt=PATH --tokens=20 --seed=5 --prompt=ab samples what the spaced form does" $? \
    "exit $rc: $(head -c 200 "$tmp/s_eq")"
"$moe" eval --ckpt "$ckpt" --set train.eval_batches=1 --batches 1 > "$tmp/e_space" 2>&1
"$moe" eval --ckpt="$ckpt" --set=train.eval_batches=1 --batches=1 > "$tmp/e_eq" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "^val_loss " "$tmp/e_eq" && cmp -s "$tmp/e_space" "$tmp/e_eq"
check "eval --set=train.eval_batches=1: the value is all after the first '='" $? \
    "exit $rc: $(head -c 200 "$tmp/e_eq")"
out=$("$moe" sample --ckpt "$ckpt" --prompt --a=b --tokens 1 2>&1)
rc=$?
[ $rc -eq 0 ] && [ "${out:0:5}" = "--a=b" ]
check "a value that looks like an option (--prompt --a=b) stays whole" $? "exit $rc: $out"
refuse "--out= is an empty path" "--out needs a path" "$moe" synth --out=
refuse "an option of another command, with =" "unknown option '--tokens=5'" \
    "$moe" eval --ckpt "$ckpt" --tokens=5
refuse "a flag given a value" "--quiet takes no value" "$moe" train --out "$tmp/never" --quiet=1
[ ! -e "$tmp/never" ] && [ ! -e zzz ]
check "the refused --opt=value commands created nothing" $? "$tmp/never or ./zzz exists"

# ---- 2c. version --------------------------------------------------------------------------
echo "test_options: version"
a=$("$moe" --version 2>&1); ra=$?
b=$("$moe" version 2>&1); rb=$?
commit=$(sed -n 's/^commit = //p' "$tmp/run/provenance.txt" | head -n 1)
[ $ra -eq 0 ] && [ $rb -eq 0 ] && [ "$a" = "$b" ] && [ -n "$commit" ] &&
    [ "$(head -n 1 <<< "$a")" = "moe.c $commit" ] &&
    grep -Eq '^features: backends cpu cpu-ref cpu-fenced( cuda)?; CUDA (yes|no); NCCL (yes|no); MPI (yes|no); OpenMP (yes|no)' <<< "$a" &&
    [ "$(wc -l <<< "$a")" -eq 2 ]
check "moe --version = moe version: the commit of provenance.txt ($commit) and the features" $? \
    "exit $ra/$rb: $a"
refuse "moe version takes no argument" "unknown option 'x'" "$moe" version x

# ---- 3. whole numbers ---------------------------------------------------------------------
echo "test_options: whole numbers"
# 4294967299 = 2^32 + 3 once wrapped to 3 tokens: now it is a long count, stopped here by head
for n in 4294967299 2147483647; do
    got=$(timeout 20 "$moe" sample --ckpt "$ckpt" --tokens "$n" --seed 1 2> /dev/null | head -c 500 | wc -c)
    [ "$got" -eq 500 ]
    check "sample --tokens $n samples on (500 bytes read, not a wrapped count)" $? "got $got bytes"
done
refuse "--tokens past the range" "--tokens expects a whole number in \[1, 1000000000000\]" \
    "$moe" sample --ckpt "$ckpt" --tokens 1000000000001
refuse "--tokens past 64 bits" "--tokens expects a whole number" \
    "$moe" sample --ckpt "$ckpt" --tokens 18446744073709551621
refuse "--tokens with trailing text" "got '12abc'" "$moe" sample --ckpt "$ckpt" --tokens 12abc
refuse "--tokens with a leading space" "got ' 5'" "$moe" sample --ckpt "$ckpt" --tokens " 5"
refuse "--until 1e3 is not a whole number" "--until expects a whole number" \
    "$moe" train --out "$tmp/never" --until 1e3
refuse "--seed -1 is below the range" "--seed expects a whole number in \[0," \
    "$moe" synth --out "$tmp/never" --seed -1
refuse "--domains 9 is above the range" "--domains expects a whole number in \[1, 8\]" \
    "$moe" synth --out "$tmp/never" --domains 9
refuse "--temperature nan" "--temperature expects a number" \
    "$moe" sample --ckpt "$ckpt" --temperature nan

# ---- 4. tiny temperatures -----------------------------------------------------------------
echo "test_options: temperature"
"$moe" sample --ckpt "$ckpt" --tokens 60 --temperature 1e-50 --prompt "ab" > "$tmp/t_tiny" 2>&1
rc=$?
"$moe" sample --ckpt "$ckpt" --tokens 60 --temperature 0 --prompt "ab" > "$tmp/t_zero" 2>&1
ff=$(od -An -tx1 -v "$tmp/t_tiny" | tr ' ' '\n' | grep -c '^ff$')
[ $rc -eq 0 ] && [ "$ff" -eq 0 ] && cmp -s "$tmp/t_tiny" "$tmp/t_zero" && [ "$(wc -c < "$tmp/t_tiny")" -eq 63 ]
check "--temperature 1e-50 samples the greedy text of --temperature 0 (no 0xFF bytes)" $? \
    "exit $rc, $ff bytes 0xFF: $(od -c "$tmp/t_tiny" | head -n 2)"

# ---- 5. huge capacity factors ---------------------------------------------------------------
echo "test_options: capacity factors"
"$moe" train --out "$tmp/cap" "${tiny[@]}" --set train.steps=3 --set train.eval_every=0 \
    --set moe.capacity_factor=3e38 > "$tmp/cap.log" 2>&1
rc=$?
drops=$(awk -F, 'NR > 1 { n++; if ($6 != 0) d++ } END { print n + 0, d + 0 }' "$tmp/cap/router.csv" 2> /dev/null)
[ $rc -eq 0 ] && [ "$drops" = "6 0" ]
check "moe.capacity_factor=3e38 drops nothing (6 router rows, drop_frac 0)" $? \
    "exit $rc, rows dropping: $drops: $(tail -n 2 "$tmp/cap.log")"
"$moe" train --out "$tmp/ec" "${tiny[@]}" --set train.steps=3 --set train.eval_every=0 \
    --set moe.routing=expert_choice --set moe.balance=none --set moe.ec_capacity=3e38 \
    > "$tmp/ec.log" 2>&1
rc=$?
drops=$(awk -F, 'NR > 1 { n++; if ($6 != 0) d++ } END { print n + 0, d + 0 }' "$tmp/ec/router.csv" 2> /dev/null)
[ $rc -eq 0 ] && [ "$drops" = "6 0" ]
check "moe.ec_capacity=3e38: every expert takes every token (drop_frac 0)" $? \
    "exit $rc, rows dropping: $drops: $(tail -n 2 "$tmp/ec.log")"

# ---- 6. no evaluation -------------------------------------------------------------------------
echo "test_options: a run without evaluation"
out=$("$moe" train --out "$tmp/noeval" "${tiny[@]}" --set train.steps=2 --set train.eval_every=0 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "no evaluation ran" <<< "$out" && ! grep -qi "nan" <<< "$out"
check "a run without evaluation says 'no evaluation ran', never nan" $? "exit $rc: $out"

finish
