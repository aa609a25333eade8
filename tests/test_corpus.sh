#!/usr/bin/env bash
# test_corpus.sh: the corpus from your own text (moe corpus --from) and make data's fallback
# corpus (run by `make test`):
#   1. --from with two text files, a NAME=FILE, a JSONL file and a long paragraph writes train.bin and val.bin
#      whose domains are the files' (in order of appearance, a JSONL "domain" field honoured)
#      and whose tokens, train and val together, are every byte of each domain's text; the same
#      seed gives the same shards, and a tiny model trains on them
#   2. every bad input (a missing file, a NUL byte, a JSONL line that is not an object with a
#      "text" string, a bad "domain", a file without text, a ninth domain, a split that leaves
#      val.bin empty, a file name that is no domain name) is exit 2 with a message naming the
#      file (and line), and the shards already in --out are left as they were
#   3. make data's corpus target with the fortune folder made to look absent (FORTUNES_DIR)
#      builds the fallback corpus of data/fallback/ and the project's headers, and says so; with
#      the fortunes present it rebuilds the Debian corpus over it
#   4. --tokenizer (one trained by moe tokenizer train --vocab 300): version-3 shards of 2-byte
#      ids, vocab 300 and tokenizer_crc32 the CRC-32 of the file (gzip's, computed apart), whose
#      documents decode (moe tokenizer decode) to those of the byte corpus of the same files and
#      seed, and DIR/tokenizer.json; a tiny model of model.vocab=300 trains on them, its run
#      directory holding tokenizer.json and provenance.txt its CRC-32; refused with exit 2 and
#      nothing written: a tokenizer.json beside the shards changed or missing, train and val
#      shards of two tokenizers, a resume whose run tokenizer.json was replaced, a --tokenizer
#      that is no tokenizer; with the fortunes, the Debian corpus of the same documents in BPE
# A few seconds: text files of a few KB, and the fallback corpus is under 1 MB.

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
build=${MOE_BUILD:-build}
case ${build%/} in build/san | */build/san) san=1 ;; *) san=0 ;; esac
export OMP_NUM_THREADS=1

# shard_table FILE: "DOMAIN TOKENS DOCUMENTS" for each domain of a shard, read from its header
# (n_docs at byte 24, n_domains at 28, the names from 32) and its 16-byte document records
shard_table() {
    local f=$1 n_docs n_dom k names=""
    n_docs=$(od -An -tu4 -j24 -N4 "$f" | tr -d ' ')
    n_dom=$(od -An -tu4 -j28 -N4 "$f" | tr -d ' ')
    for ((k = 0; k < n_dom; k++)); do
        names="$names $(dd if="$f" bs=1 skip=$((32 + 16 * k)) count=16 2> /dev/null | tr -d '\0')"
    done
    od -An -v -tu4 -j256 -N$((16 * n_docs)) "$f" | awk -v names="$names" '
        BEGIN { n = split(names, name, " ") }
        { for (i = 1; i <= NF; i++) w[c++] = $i }
        END {
            for (r = 0; r < c / 4; r++) { tok[w[4 * r + 3]] += w[4 * r + 2]; docs[w[4 * r + 3]]++ }
            for (d = 0; d < n; d++) print name[d + 1], tok[d] + 0, docs[d] + 0
        }'
}
# corpus_table DIR: shard_table of train.bin and val.bin summed, one line per domain
corpus_table() {
    paste -d ' ' <(shard_table "$1/train.bin") <(shard_table "$1/val.bin") |
        awk '{ print $1, $2 + $5, $3 + $6 }'
}
sizes() { cat "$@" | wc -c | tr -d ' '; }

# ---- 1. good input ------------------------------------------------------------------------
echo "test_corpus: moe corpus --from, text and JSONL"
texts="$tmp/texts"
mkdir -p "$texts"
for i in $(seq 1 40); do
    printf 'English paragraph %d, on two lines\nof plain text.\n\n' "$i" >> "$texts/en.txt"
    printf 'Deutscher Absatz %d über Bäume.\n\n\n' "$i" >> "$texts/de.txt"
    printf 'static int f%d(int x) {\n    return x + %d;\n}\n\n' "$i" "$i" >> "$texts/mycode.c"
done
# a paragraph of 200 lines of 100 bytes is cut at line boundaries into pieces of at most
# 8192 bytes (81, 81 and 38 lines), then 30 short paragraphs
for i in $(seq 1 200); do printf '%099d\n' "$i"; done > "$texts/long.txt"
for i in $(seq 1 30); do printf '\nshort %d\n' "$i"; done >> "$texts/long.txt"
en_jsonl='an English record'
note='a note with an escape: caf\u00e9'
{
    printf '{"text": "%s", "domain": "en"}\n' "$en_jsonl"
    printf '\n'
    for i in $(seq 1 30); do printf '{"text": "%s %d", "id": %d}\n' "$note" "$i" "$i"; done
} > "$texts/notes.jsonl"
# the notes' bytes: the escape decodes to the two bytes of U+00E9
notes_bytes=0
for i in $(seq 1 30); do notes_bytes=$((notes_bytes + $(printf 'a note with an escape: caf\303\251 %d' "$i" | wc -c))); done
out="$tmp/mine"
"$moe" corpus --from "$texts/en.txt" "$texts/de.txt" code="$texts/mycode.c" "$texts/notes.jsonl" --out "$out" \
    --from "$texts/long.txt" > "$tmp/good.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -s "$out/train.bin" ] && [ -s "$out/val.bin" ]
check "--from two text files, NAME=FILE and a JSONL file, --from again: exit 0, train.bin and val.bin" $? \
    "exit $rc: $(cat "$tmp/good.txt")"
want="en $(($(sizes "$texts/en.txt") + ${#en_jsonl})) 41
de $(sizes "$texts/de.txt") 40
code $(sizes "$texts/mycode.c") 40
notes $notes_bytes 30
long $(sizes "$texts/long.txt") 33"
got=$(corpus_table "$out" 2>&1)
[ "$got" = "$want" ]
check "domains en de code notes long, in order, each with every byte and paragraph of its text, a long paragraph in 8 KiB pieces" $? \
    "want: $(echo "$want" | tr '\n' '|') got: $(echo "$got" | tr '\n' '|')"
[ "$(shard_table "$out/train.bin" | cut -d' ' -f1 | tr '\n' ' ')" = "en de code notes long " ] &&
    [ "$(shard_table "$out/val.bin" | cut -d' ' -f1 | tr '\n' ' ')" = "en de code notes long " ] &&
    [ "$(shard_table "$out/val.bin" | awk '{ s += $2 } END { print (s > 0) }')" = 1 ]
check "train.bin and val.bin both name the five domains, and val.bin holds tokens" $? \
    "$(shard_table "$out/val.bin" | tr '\n' '|')"
"$moe" corpus --from "$texts/en.txt" "$texts/de.txt" code="$texts/mycode.c" "$texts/notes.jsonl" \
    --out "$tmp/again" --from "$texts/long.txt" > /dev/null 2>&1 && cmp -s "$out/train.bin" "$tmp/again/train.bin" &&
    cmp -s "$out/val.bin" "$tmp/again/val.bin"
check "the same files and seed give byte-identical shards" $?
out_train=$("$moe" train --out "$tmp/run" --set model.d_model=32 --set model.n_layer=2 \
    --set model.n_head=2 --set model.seq_len=16 --set model.d_ff=64 --set moe.num_experts=4 \
    --set moe.top_k=2 --set moe.d_expert=32 --set train.batch=2 --set train.steps=2 \
    --set train.warmup=1 --set train.eval_every=2 --set train.eval_batches=1 \
    --set "data.train=$out/train.bin" --set "data.val=$out/val.bin" --quiet 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -Eq '^2,0,(en|de|code|notes),' "$tmp/run/domains.csv"
check "a tiny model trains 2 steps on them, domains.csv naming their domains" $? "exit $rc: $out_train"

# ---- 2. bad input -------------------------------------------------------------------------
echo "test_corpus: bad input is refused, nothing written"
keep="$tmp/keep"
mkdir -p "$keep" && cp "$out/train.bin" "$out/val.bin" "$keep/"
before=$(cd "$keep" && sha256sum ./*)
printf 'one\n\ntwo\x00three\n' > "$texts/nul.txt"
printf '{"text": "fine"}\n[1, 2]\n' > "$texts/array.jsonl"
printf '{"text": 42}\n' > "$texts/number.jsonl"
printf '{"text": "fine"}\n\n{"body": "no text"}\n' > "$texts/notext.jsonl"
printf '{"text": "fine"\n' > "$texts/broken.jsonl"
printf '{"text": "fine", "domain": "two words"}\n' > "$texts/baddomain.jsonl"
printf '{"text": "  "}\n' > "$texts/blank.jsonl"
: > "$texts/empty.txt"
printf 'a single paragraph\n' > "$texts/one.txt"
cp "$texts/de.txt" "$texts/a+b.txt"
nine=()
for d in 1 2 3 4 5 6 7 8 9; do cp "$texts/de.txt" "$texts/d$d.txt" && nine+=("$texts/d$d.txt"); done
# refused LABEL PATTERN ARGS...: exit 2, a message matching PATTERN, the shards in --out as they were
refused() {
    local label=$1 pattern=$2
    shift 2
    "$moe" corpus "$@" --out "$keep" > "$tmp/bad.txt" 2>&1
    local rc=$?
    [ $rc -eq 2 ] && grep -q -- "$pattern" "$tmp/bad.txt" &&
        [ "$(cd "$keep" && sha256sum ./*)" = "$before" ]
    check "$label: exit 2, \"$pattern\", nothing written" $? "exit $rc: $(cat "$tmp/bad.txt"); $(ls "$keep")"
}
refused "a missing file" "missing.txt" --from "$texts/en.txt" "$texts/missing.txt"
refused "a NUL byte" "nul.txt:3: a NUL byte" --from "$texts/en.txt" "$texts/nul.txt"
refused "a JSONL line that is not an object" "array.jsonl:2: the line is a JSON array" \
    --from "$texts/array.jsonl"
refused "a JSONL \"text\" that is not a string" "number.jsonl:1: the line has a \"text\" that is a JSON number" \
    --from "$texts/number.jsonl"
refused "a JSONL line without \"text\"" "notext.jsonl:3: the line has no \"text\"" \
    --from "$texts/notext.jsonl"
refused "a JSONL line that is not JSON" "broken.jsonl:1: not a JSON object" --from "$texts/broken.jsonl"
refused "a JSONL \"domain\" that is not a domain name" "baddomain.jsonl:1: .*not a domain name" \
    --from "$texts/baddomain.jsonl"
refused "an empty text file (an empty corpus)" "empty.txt holds no text" --from "$texts/empty.txt"
refused "a JSONL file of blank texts" "blank.jsonl holds no text" --from "$texts/blank.jsonl"
refused "a ninth domain" "d9.txt: domain 'd9' would be one more than the 8" --from "${nine[@]}"
refused "a split that leaves val.bin empty" "left the validation shard empty" --from "$texts/one.txt"
refused "a file name that makes no domain name" "name its domain: --from NAME=" --from "$texts/a+b.txt"
refused "--from without a file" "--from needs at least one file" --from --seed 3
"$moe" corpus --from "$texts/nul.txt" --out "$tmp/fresh" > /dev/null 2>&1
[ $? -eq 2 ] && [ ! -e "$tmp/fresh" ]
check "a refusal into a new --out creates nothing" $? "$(ls -la "$tmp/fresh" 2>&1)"

# ---- 3. make data's fallback ---------------------------------------------------------------
echo "test_corpus: make data without the fortunes builds the fallback corpus"
# run from `make test`: its jobserver and command-line variables are not for this make. The
# target is the one make data makes after make deps (in a make of its own, which -o would not
# reach), $(CORPUS)/train.bin; -o takes the binary as built, so that this make never touches
# the build folder (cc.flags, version.c) under another suite's make running at the same time
unset MAKEFLAGS MFLAGS MAKELEVEL
fb="$tmp/fallback"
make -s --no-print-directory -o "$build/moe" SANITIZE=$san FORTUNES_DIR=/nonexistent CORPUS="$fb" \
    "$fb/train.bin" > "$tmp/make.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "data: no fortunes in /nonexistent .*: the fallback corpus" "$tmp/make.txt"
check "make data's corpus with FORTUNES_DIR=/nonexistent: exit 0, and it says it built the fallback" $? \
    "exit $rc: $(tail -n 15 "$tmp/make.txt")"
want="en $(sizes data/fallback/en.txt)
de $(sizes data/fallback/de.txt)
es $(sizes data/fallback/es.txt)
it $(sizes data/fallback/it.txt)
ru $(sizes data/fallback/ru.txt)
code $(sizes src/*/*.h src/*/*/*.h)"
got=$(corpus_table "$fb" 2>&1 | cut -d' ' -f1,2)
[ "$got" = "$want" ] && [ "$(cat "$fb/source.txt")" = fallback ]
check "the fallback: en de es it ru code, every byte of data/fallback/*.txt and src/*/*.h, src/*/*/*.h; source.txt fallback" \
    $? "want: $(echo "$want" | tr '\n' '|') got: $(echo "$got" | tr '\n' '|')"
if [ -d /usr/share/games/fortunes/ru ] && [ -d /usr/share/games/fortunes/de ] &&
    [ -d /usr/share/games/fortunes/es ] && [ -d /usr/share/games/fortunes/it ]; then
    make -s --no-print-directory -o "$build/moe" SANITIZE=$san CORPUS="$fb" "$fb/train.bin" \
        > "$tmp/make2.txt" 2>&1
    rc=$?
    [ $rc -eq 0 ] && grep -q "data: the Debian corpus" "$tmp/make2.txt" &&
        [ "$(cat "$fb/source.txt")" = debian ] &&
        [ "$(corpus_table "$fb" | cut -d' ' -f1 | tr '\n' ' ')" = "en de es it ru code " ]
    check "with the fortunes, make data rebuilds the same folder as the Debian corpus" $? \
        "exit $rc: $(tail -n 5 "$tmp/make2.txt"); $(cat "$fb/source.txt")"
fi

# ---- 4. a BPE corpus (--tokenizer) and its runs -------------------------------------------
echo "test_corpus: moe corpus --tokenizer, and moe train on BPE shards"
# u32 FILE OFFSET: the little-endian 32-bit number at OFFSET
u32() { od -An -tu4 -j"$2" -N4 "$1" | tr -d ' '; }
# crc32 FILE: the CRC-32 of the file as 8 hex digits, from gzip's trailer (the same CRC-32)
crc32() { gzip -c < "$1" | tail -c 8 | od -An -tx4 -N4 | tr -d ' '; }
# shard_docs FILE: one line per document of its ids (token_bytes 1, 2 or 4)
shard_docs() {
    local f=$1 n tb
    n=$(u32 "$f" 24) tb=$(u32 "$f" 12)
    { od -An -v -tu4 -j256 -N$((16 * n)) "$f"; echo --; od -An -v -tu"$tb" -j$((256 + 16 * n)) "$f"; } |
        awk '$1 == "--" { ids = 1; next }
            { for (i = 1; i <= NF; i++) if (ids) tok[t++] = $i; else w[c++] = $i }
            END { for (r = 0; r < c / 4; r++) {
                      line = ""
                      for (k = 0; k < w[4 * r + 2]; k++) line = line (k ? " " : "") tok[w[4 * r] + k]
                      print line } }'
}
# doc_lengths: the byte length of each NUL-ended document on stdin, one a line
doc_lengths() { tr '\000\n' '\n\001' | LC_ALL=C awk '{ print length($0) }'; }
bpe_from=("$texts/en.txt" "$texts/de.txt" code="$texts/mycode.c" "$texts/notes.jsonl" "$texts/long.txt")
"$moe" tokenizer train --vocab 300 --from "$texts/en.txt" "$texts/mycode.c" --out "$tmp/tok.json" 2> /dev/null
bpe="$tmp/bpe"
"$moe" corpus --from "${bpe_from[@]}" --tokenizer "$tmp/tok.json" --out "$bpe" > "$tmp/bpe.txt" 2>&1
rc=$?
crc=$(crc32 "$tmp/tok.json")
[ $rc -eq 0 ] && [ "$(u32 "$bpe/train.bin" 8) $(u32 "$bpe/train.bin" 12)" = "3 2" ] &&
    [ "$(u32 "$bpe/train.bin" 168) $(u32 "$bpe/val.bin" 168)" = "300 300" ] &&
    [ "$(od -An -tx4 -j172 -N4 "$bpe/train.bin" | tr -d ' ')" = "$crc" ] &&
    [ "$(od -An -tx4 -j172 -N4 "$bpe/val.bin" | tr -d ' ')" = "$crc" ] &&
    cmp -s "$tmp/tok.json" "$bpe/tokenizer.json" &&
    grep -Eq '^  code +1 +40 +[0-9]+ +[0-9]+ +'"$(sizes "$texts/mycode.c")"' +[0-9.]+$' "$tmp/bpe.txt"
check "--tokenizer: version 3, 2-byte ids, vocab 300, tokenizer_crc32 = the file's CRC-32 ($crc), DIR/tokenizer.json, a table of bytes per token" \
    $? "exit $rc: $(cat "$tmp/bpe.txt"); $(od -An -tx4 -j168 -N8 "$bpe/train.bin")"
# the documents, decoded, are the byte corpus's of the same files and seed ($out), in order
for k in train val; do
    shard_docs "$bpe/$k.bin" | "$moe" tokenizer decode --tokenizer "$bpe/tokenizer.json" --docs > "$tmp/$k.docs"
    n=$(u32 "$out/$k.bin" 24)
    tr -d '\000' < "$tmp/$k.docs" | cmp -s - <(tail -c +$((257 + 16 * n)) "$out/$k.bin") &&
        [ "$(doc_lengths < "$tmp/$k.docs")" = "$(od -An -v -tu4 -j256 -N$((16 * n)) "$out/$k.bin" | awk '{ print $3 }')" ]
    check "$k.bin's documents decode (moe tokenizer decode) to those of the byte corpus, each whole, in order" $? \
        "$(wc -c < "$tmp/$k.docs") bytes decoded"
done
bpe_run=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.seq_len=16
    --set model.d_ff=64 --set moe.num_experts=4 --set moe.top_k=2 --set moe.d_expert=32
    --set train.batch=2 --set train.warmup=1 --set train.eval_every=2 --set train.eval_batches=1
    --set model.vocab=300 --quiet)
"$moe" train --out "$tmp/brun" "${bpe_run[@]}" --set train.steps=2 --set "data.train=$bpe/train.bin" \
    --set "data.val=$bpe/val.bin" > "$tmp/brun.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && cmp -s "$tmp/tok.json" "$tmp/brun/tokenizer.json" &&
    grep -qx "tokenizer = $bpe/tokenizer.json crc32=$crc" "$tmp/brun/provenance.txt"
check "a model of model.vocab=300 trains on them: the run directory has tokenizer.json, provenance.txt its path and CRC-32" \
    $? "exit $rc: $(cat "$tmp/brun.txt"); $(grep tokenizer "$tmp/brun/provenance.txt")"
# train_refused LABEL PATTERN DIR ARGS...: moe train exit 2 with PATTERN, DIR as it was
train_refused() {
    local label=$1 pattern=$2 dir=$3 before
    shift 3
    before=$(cd "$dir" 2> /dev/null && sha256sum ./* 2> /dev/null)
    "$moe" train "${bpe_run[@]}" "$@" > "$tmp/tbad.txt" 2>&1
    local rc=$?
    [ $rc -eq 2 ] && grep -q -- "$pattern" "$tmp/tbad.txt" &&
        [ "$(cd "$dir" 2> /dev/null && sha256sum ./* 2> /dev/null)" = "$before" ]
    check "$label: exit 2, \"$pattern\", nothing written" $? "exit $rc: $(cat "$tmp/tbad.txt")"
}
cp "$bpe/tokenizer.json" "$tmp/tok.keep"
echo >> "$bpe/tokenizer.json"
train_refused "a tokenizer.json beside the shards that is not theirs" \
    "tokenizer.json (CRC-32 $(crc32 "$bpe/tokenizer.json")) is not the tokenizer data.train" "$tmp/brun2" \
    --out "$tmp/brun2" --set "data.train=$bpe/train.bin" --set "data.val=$bpe/val.bin"
rm "$bpe/tokenizer.json"
train_refused "no tokenizer.json beside the shards" "there is no $bpe/tokenizer.json beside it" \
    "$tmp/brun2" --out "$tmp/brun2" --set "data.train=$bpe/train.bin" --set "data.val=$bpe/val.bin"
[ ! -e "$tmp/brun2" ]
check "the refused runs created no run directory" $? "$(ls -la "$tmp/brun2" 2>&1)"
cp "$tmp/tok.keep" "$bpe/tokenizer.json"
# the same tokenizer with a newline more: the same ids, another file, so another tokenizer
{ cat "$tmp/tok.json" && echo; } > "$tmp/tok2.json"
"$moe" corpus --from "${bpe_from[@]}" --tokenizer "$tmp/tok2.json" --out "$tmp/bpe2" > /dev/null 2>&1
train_refused "train and val shards of two tokenizers" \
    "data.train $bpe/train.bin is of the tokenizer of CRC-32 $crc, data.val $tmp/bpe2/val.bin of $(crc32 "$tmp/tok2.json")" \
    "$tmp/brun" --out "$tmp/brun3" --set "data.train=$bpe/train.bin" --set "data.val=$tmp/bpe2/val.bin"
cp "$tmp/tok2.json" "$tmp/brun/tokenizer.json"
train_refused "a resume whose run tokenizer.json was replaced" \
    "brun/tokenizer.json (CRC-32 $(crc32 "$tmp/tok2.json")) is not the tokenizer of data.train" "$tmp/brun" \
    --resume "$tmp/brun" --set train.steps=3
cp "$tmp/tok.json" "$tmp/brun/tokenizer.json"
"$moe" train --resume "$tmp/brun" --set train.steps=3 --quiet > "$tmp/bres.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -qx "tokenizer = $tmp/brun/tokenizer.json crc32=$crc" "$tmp/brun/provenance.txt"
check "with its tokenizer.json put back the run resumes, provenance.txt naming the run's copy" $? \
    "exit $rc: $(cat "$tmp/bres.txt")"
before=$(cd "$bpe" && sha256sum ./*)
"$moe" corpus --from "${bpe_from[@]}" --tokenizer "$texts/en.txt" --out "$bpe" > "$tmp/bad.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -- "--tokenizer: .*en.txt" "$tmp/bad.txt" && [ "$(cd "$bpe" && sha256sum ./*)" = "$before" ]
check "a --tokenizer that is no tokenizer.json: exit 2 naming it, nothing written" $? "exit $rc: $(cat "$tmp/bad.txt")"
if [ "$(cat "$fb/source.txt" 2> /dev/null)" = debian ]; then
    "$moe" corpus --tokenizer "$tmp/tok.json" --out "$tmp/debbpe" > "$tmp/debbpe.txt" 2>&1
    rc=$?
    [ $rc -eq 0 ] && [ "$(u32 "$tmp/debbpe/train.bin" 168)" = 300 ] &&
        [ "$(corpus_table "$tmp/debbpe" | cut -d' ' -f1,3)" = "$(corpus_table "$fb" | cut -d' ' -f1,3)" ]
    check "the Debian corpus with --tokenizer: vocab 300, the byte corpus's documents by domain" $? \
        "exit $rc: $(cat "$tmp/debbpe.txt")"
fi
finish
