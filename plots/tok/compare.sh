#!/usr/bin/env bash
# plots/tok/compare.sh: moe tokenizer (src/tok/) checked against Hugging Face's tokenizers
# library itself, on every document of the corpus (src/README.md, "The tokenizer").
#
#   make tok-compare                       # installs tokenizers into build/venv-tok (a
#                                          # developer tool, never a dependency), then runs this
#   PYTHON=path/to/python bash plots/tok/compare.sh   # a python that has tokenizers
#
# (a) the library trains a GPT-2-style (ByteLevel with its regex) and a Llama-3-style (a Split,
# then ByteLevel, ignore_merges) tokenizer.json on the corpus; (b) every document, and 5000
# random texts of hard parts side by side, is encoded by the library and by moe tokenizer encode
# --docs, compared id for id, and decoded back by both;
# (c) moe tokenizer train's own files (gpt2, llama3 at 32k, qwen2) are loaded by the library and
# compared the same way; (d) the character classes of every code point against
# src/tok/unicode_tables.h. Writes plots/tok/compare.csv and compare.md, and the fixtures the
# unit tests read without Python (tests/data/tok/: two tokenizers of vocabulary 1000, texts,
# the library's ids and decoded texts). Exit status 1 on any mismatch.
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-build/venv-tok/bin/python}
"$python" -c 'import tokenizers' 2> /dev/null || {
    echo "compare.sh: $python has no tokenizers: run make tok-compare" >&2
    exit 2
}
make --no-print-directory build/moe data/corpus/train.bin > /dev/null
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tok_compare.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p tests/data/tok
"$python" plots/tok/compare.py build/moe data/corpus/train.bin plots/tok tests/data/tok "$tmp"
cat plots/tok/compare.md
