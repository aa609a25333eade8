#!/usr/bin/env bash
# test_tokenizer.sh: `moe tokenizer train|encode|decode` end to end (run by `make test` with
# MOE_BIN set); the tokenizer itself is tests/test_tok.c's.
#
#   1. encode gives the ids the tokenizers library gives (tests/data/tok/: its files and ids,
#      from plots/tok/compare.sh), line by line and with --docs (documents ended by NUL bytes,
#      newlines and all); decode gives the text back, byte for byte
#   2. train writes a tokenizer.json, the same file twice from the same text, which encode
#      loads; a line's newline is not encoded, and an empty line is an empty line of ids
#   3. bad input exits 2 with a message and writes nothing: a missing or unsupported
#      tokenizer.json, an id outside the vocabulary, unknown options and patterns, a --vocab
#      below 256, an existing --out, a missing text file; output that cannot be written is
#      a failure (exit 1), not a silent success
# Prints one line per check and "N passed, M failed"; a second or so in all.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
fix=tests/data/tok

# 1. the library's ids, with --docs (the fixtures are NUL-ended texts, one line of ids each)
for p in gpt2 llama3; do
    "$moe" tokenizer encode --tokenizer $fix/$p.json --docs < $fix/texts.bin > "$tmp/$p.ids" 2> "$tmp/err"
    cmp -s "$tmp/$p.ids" $fix/$p.ids
    check "encode --docs: the ids the tokenizers library gives for the 15 texts ($p)" $? \
        "$(diff "$tmp/$p.ids" $fix/$p.ids | head -n 6) $(cat "$tmp/err")"
    "$moe" tokenizer decode --tokenizer $fix/$p.json --docs < $fix/$p.ids > "$tmp/$p.txt" 2> "$tmp/err"
    cmp -s "$tmp/$p.txt" $fix/decoded.bin
    check "decode --docs: the library's text, byte for byte ($p)" $? "$(cmp "$tmp/$p.txt" $fix/decoded.bin) $(cat "$tmp/err")"
done
# line by line: each line's ids on a line (the newline itself not encoded), decoded back
printf 'Hello world!\n\nПривет, мир 123\r\nlast line without a newline' > "$tmp/lines.txt"
"$moe" tokenizer encode --tokenizer $fix/llama3.json < "$tmp/lines.txt" > "$tmp/lines.ids"
rows=$(wc -l < "$tmp/lines.ids")
empty=$(sed -n 2p "$tmp/lines.ids")
"$moe" tokenizer decode --tokenizer $fix/llama3.json < "$tmp/lines.ids" > "$tmp/lines.back"
printf '\n' >> "$tmp/lines.txt"
[ "$rows" = 4 ] && [ -z "$empty" ] && cmp -s "$tmp/lines.txt" "$tmp/lines.back"
check "encode: a line of ids a line (an empty line empty, no newline id); decode: the lines back" $? \
    "$rows rows, line 2 '$empty': $(cmp "$tmp/lines.txt" "$tmp/lines.back")"
"$moe" tokenizer encode --tokenizer $fix/gpt2.json <<< "a" > "$tmp/a.ids"
[ "$(cat "$tmp/a.ids")" = "$(grep -n '"a": ' $fix/gpt2.json | sed 's/.*: \([0-9]*\),*/\1/')" ]
check "encode: 'a' is the id of \"a\" in the vocabulary" $? "got '$(cat "$tmp/a.ids")'"

# 2. training
# (text of numbers in words and digits, and the fixtures' texts: the same on every machine)
seq 1 5000 | awk '{ print "item " $1 " of the list, number " $1 * 7 }' > "$tmp/words.txt"
tr '\0' '\n' < $fix/texts.bin >> "$tmp/words.txt"
out=$("$moe" tokenizer train --vocab 700 --from "$tmp/words.txt" $fix/texts.bin --out "$tmp/t1.json" 2>&1)
rc=$?
"$moe" tokenizer train --vocab 700 --from "$tmp/words.txt" $fix/texts.bin --out "$tmp/t2.json" --pattern llama3 > /dev/null 2>&1
cmp -s "$tmp/t1.json" "$tmp/t2.json"
check "train: exit 0, 700 tokens, the same file twice (llama3 the default pattern)" $((rc | $?)) "exit $rc: $out"
[[ $out == *"700 tokens (256 bytes, 444 merges), pattern llama3"* ]]
check "train says what it wrote" $? "$out"
"$moe" tokenizer encode --tokenizer "$tmp/t1.json" --docs < $fix/texts.bin > "$tmp/t1.ids" &&
    "$moe" tokenizer decode --tokenizer "$tmp/t1.json" --docs < "$tmp/t1.ids" | cmp -s - $fix/decoded.bin
check "a trained tokenizer encodes, and decodes back to the text" $? "$(head -c 300 "$tmp/t1.ids")"
"$moe" tokenizer train --vocab 300 --from "$tmp/words.txt" --out "$tmp/g.json" --pattern gpt2 > /dev/null 2>&1 &&
    grep -q '"use_regex": true' "$tmp/g.json" && grep -q '"Regex"' "$tmp/t1.json"
check "train --pattern gpt2: ByteLevel with its regex; llama3: a Split" $? ""

# 3. bad input: exit 2, a message, nothing written
refused() { # LABEL WANT CMD...: exit 2 and WANT in the message
    local label=$1 want=$2
    shift 2
    local msg rc
    msg=$("$@" 2>&1 < /dev/null)
    rc=$?
    [ $rc = 2 ] && [[ $msg == *"$want"* ]]
    check "$label: exit 2, '$want'" $? "exit $rc: $msg"
}
refused "encode, a missing tokenizer.json" "no.json" "$moe" tokenizer encode --tokenizer "$tmp/no.json"
sed 's/"type": "BPE"/"type": "WordPiece"/' $fix/gpt2.json > "$tmp/wp.json"
refused "encode, a WordPiece model" 'model.type is "WordPiece"' "$moe" tokenizer encode --tokenizer "$tmp/wp.json"
sed 's/"normalizer": null/"normalizer": {"type": "NFKC"}/' $fix/gpt2.json > "$tmp/nfkc.json"
refused "decode, a normalizer other than NFC" 'normalizer is of type "NFKC"' "$moe" tokenizer decode --tokenizer "$tmp/nfkc.json"
out=$(printf 'caf\xc3\xa9\0cafe\xcc\x81\0' | "$moe" tokenizer encode --tokenizer $fix/qwen2-nfc.json --docs 2>&1)
[ $? = 0 ] && [ "$(sed -n 1p <<< "$out")" = "$(sed -n 2p <<< "$out")" ]
check "encode, the normalizer NFC: e U+0301 as U+00E9" $? "$out"
msg=$(printf '40 41\n5 99999 7\n' | "$moe" tokenizer decode --tokenizer $fix/gpt2.json 2>&1 > /dev/null)
rc=$?
[ $rc = 2 ] && [[ $msg == *"line 2: '99999' is not an id of the vocabulary (0 to 999)"* ]]
check "decode, an id outside the vocabulary: exit 2, the line and the id named" $? "exit $rc: $msg"
msg=$(echo "1 x" | "$moe" tokenizer decode --tokenizer $fix/gpt2.json 2>&1 > /dev/null)
[ $? = 2 ] && [[ $msg == *"'x' is not an id"* ]]
check "decode, a word that is no number: exit 2" $? "$msg"
refused "an unknown option" "unknown option '--bogus'" "$moe" tokenizer encode --tokenizer $fix/gpt2.json --bogus
refused "no subcommand" "train, encode or decode" "$moe" tokenizer
refused "an unknown subcommand" "not 'split'" "$moe" tokenizer split
refused "encode without --tokenizer" "encode needs --tokenizer FILE" "$moe" tokenizer encode
refused "--docs takes no value" "--docs takes no value" "$moe" tokenizer encode --docs=1 --tokenizer $fix/gpt2.json
refused "train, an unknown pattern" "--pattern is gpt2, llama3 or qwen2, not 'bert'" \
    "$moe" tokenizer train --vocab 300 --from "$tmp/words.txt" --out "$tmp/x.json" --pattern bert
refused "train, --vocab below 256" "--vocab expects a whole number from 256" \
    "$moe" tokenizer train --vocab 100 --from "$tmp/words.txt" --out "$tmp/x.json"
refused "train, a missing text file" "none.txt" \
    "$moe" tokenizer train --vocab 300 --from "$tmp/none.txt" --out "$tmp/x.json"
[ ! -e "$tmp/x.json" ]
check "the refused trainings wrote no --out" $? "$(ls "$tmp")"
sum=$(sha256sum "$tmp/t1.json")
refused "train, an --out that exists" "already exists" \
    "$moe" tokenizer train --vocab 300 --from "$tmp/words.txt" --out "$tmp/t1.json"
[ "$(sha256sum "$tmp/t1.json")" = "$sum" ]
check "the existing --out is untouched" $? ""
if [ -w /dev/full ]; then
    echo hi | "$moe" tokenizer encode --tokenizer $fix/gpt2.json > /dev/full 2> "$tmp/err"
    [ $? = 1 ] && grep -q "writing standard output failed" "$tmp/err"
    check "encode to a full disk (/dev/full): exit 1, not a silent success" $? "$(cat "$tmp/err")"
fi
"$moe" help tokenizer | grep -q -- '--docs'
check "moe help tokenizer lists --docs" $? ""

# the training benchmark src/README.md quotes, one round into a folder of the test's own
if [ -f "$root/data/corpus/train.bin" ] && [ "$moe" = "$root/build/moe" ]; then
    ROUNDS=1 OUT_DIR="$tmp/bench" bash "$root/plots/tok/train_bench.sh" > "$tmp/bench.out" 2>&1
    rc=$?
    [ $rc -eq 0 ] && [ "$(wc -l < "$tmp/bench/train_bench.csv")" = 3 ] &&
        awk -F, 'NR > 1 && !($3 > 0 && $4 > 1000000) { bad++ } END { exit bad > 0 }' "$tmp/bench/train_bench.csv" &&
        grep -q '^| 32768 | ' "$tmp/bench/train_bench.md"
    check "plots/tok/train_bench.sh: a round of 4096 and 32768 tokens, timed, in its CSV and table" $? \
        "exit $rc: $(tail -n 3 "$tmp/bench.out")"
fi

finish
