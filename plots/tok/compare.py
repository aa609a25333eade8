"""compare.py: moe.c's byte-level BPE (moe tokenizer) against Hugging Face's tokenizers library.

    python compare.py MOE_BIN CORPUS_SHARD OUT_DIR FIXTURE_DIR

Run by plots/tok/compare.sh (make tok-compare), which says what each part checks. Writes
OUT_DIR/compare.csv and compare.md, and the test fixtures under FIXTURE_DIR.
"""
import csv
import json
import platform
import random
import struct
import subprocess
import sys
import time

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        trainers)

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
SPECIAL = "<|endoftext|>"

# the fixture texts: each a case the split patterns or the byte handling must get right
TEXTS = [
    b"Hello world! It's a test; they'll say we've done it, I'm sure you'd agree.",
    "Привет, мир! Съешь же ещё этих мягких французских булок.".encode(),
    "Größe: Übermäßig große Straße, ÄÖÜ äöü ß.".encode(),
    b"int main(void) {\n    return 0x1F; // comment\n}\n",
    "1234567890 3.14159 12,345,678 x2y33z444 \u0663\u0664\u0665 \u2460\u2461".encode(),
    b"a  b   c\t\td \n\n  e   \n",
    "'s 'S 'LL 'Re o'clock rock'n'roll ' '' 'ſa '\u212a".encode(),
    b"line one\r\nline two\r\n\r\nthree\r",
    "I \u2764\ufe0f \U0001f980 and \U0001f468\u200d\U0001f469\u200d\U0001f467 ok".encode(),
    b"bad \xff\xfe bytes \xc3 and \xe2\x82 end \xed\xa0\x80 \xf0\x9f\x98",
    ("one" + SPECIAL + "two " + SPECIAL + SPECIAL + " three<|endoftext").encode(),
    b"",
    b"   leading and trailing spaces   ",
    "a\u00a0b\u3000c\u2028d\u0085e \tf".encode(),
    b"!!!??? ... --- ===\n\n\n",
]


def read_shard(path):
    """The documents of a moe.c token shard (src/io/data.h), as bytes."""
    b = open(path, "rb").read()
    n_docs = struct.unpack_from("<I", b, 24)[0]
    base = 256 + 16 * n_docs
    docs = []
    for i in range(n_docs):
        start, length, _ = struct.unpack_from("<QII", b, 256 + 16 * i)
        docs.append(b[base + start: base + start + length])
    return docs


# qwen2-nfc's added tokens besides the special one: one normalized (matched in the text in NFC,
# as its own text in NFC: Hangul jamo L V, U+AC00), one not (matched in the text as it is, before
# NFC would make U+212B U+00C5); each with a character outside the byte alphabet, which decodes
# as its UTF-8 (a character of the alphabet in an added token decodes as its byte)
NFC_ADDED = [AddedToken("<|\u1100\u1161|>", normalized=True),
             AddedToken("<|\u212b|>", normalized=False)]


def library_tokenizer(pattern, vocab, docs):
    """A byte-level BPE trained by the library on docs: GPT-2's layout (ByteLevel with its own
    regex) or Llama 3's (a Split, then ByteLevel, and ignore_merges); qwen2-nfc is Qwen2's (its
    pattern, the normalizer NFC, and added tokens normalized and not)."""
    tok = Tokenizer(models.BPE(ignore_merges=pattern != "gpt2"))
    if pattern == "qwen2-nfc":
        tok.normalizer = normalizers.NFC()
    if pattern == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3 if pattern == "llama3" else QWEN2), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, show_progress=False, special_tokens=[SPECIAL],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((d.decode("utf-8", "replace") for d in docs), trainer)
    if pattern == "qwen2-nfc":
        tok.add_tokens(NFC_ADDED)
    return tok


def moe(moe_bin, args, data):
    return subprocess.run([moe_bin, "tokenizer"] + args, input=data, capture_output=True,
                          check=True).stdout


def compare(moe_bin, path, docs):
    """Every document encoded by the library and by moe tokenizer encode --docs, id for id, and
    decoded back by both. Returns (tokens, id mismatches, decode mismatches, first mismatch)."""
    tok = Tokenizer.from_file(path)
    texts = [d.decode("utf-8", "replace") for d in docs]
    lib = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    lines = moe(moe_bin, ["encode", "--tokenizer", path, "--docs"], b"\0".join(docs) + b"\0")
    mine = [[int(x) for x in line.split()] for line in lines.decode().split("\n")[:-1]]
    assert len(mine) == len(docs), (len(mine), len(docs))
    back = moe(moe_bin, ["decode", "--tokenizer", path, "--docs"], lines).split(b"\0")[:-1]
    lib_back = tok.decode_batch(lib, skip_special_tokens=False)
    bad_ids = bad_text = 0
    first = ""
    for i, (a, b) in enumerate(zip(lib, mine)):
        if a != b:
            bad_ids += 1
            first = first or "document %d: library %s, moe.c %s" % (i, a[:20], b[:20])
        # with a normalizer the text decodes in its normal form: both decodings must agree,
        # and without one they are the text itself
        if back[i] != lib_back[i].encode() or (tok.normalizer is None and lib_back[i] != texts[i]):
            bad_text += 1
            first = first or "document %d decodes differently" % i
    return sum(map(len, lib)), bad_ids, bad_text, first


def unicode_classes():
    """The code points of \\p{L}, \\p{N} and \\s as the library's regular expressions see them,
    against src/tok/unicode_tables.h's ranges. Returns the count that differ."""
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    text = "".join(map(chr, cps))
    header = open("src/tok/unicode_tables.h").read()
    differ = 0
    for name, pat in (("TOK_LETTER", r"\p{L}"), ("TOK_NUMBER", r"\p{N}"), ("TOK_SPACE", r"\s")):
        rest = set()
        for _, (a, b) in pre_tokenizers.Split(Regex(pat), "removed").pre_tokenize_str(text):
            rest.update(cps[a:b])
        lib = set(cps) - rest
        body = header.split("%s[][2] = {" % name)[1].split("};")[0]
        ours = set()
        nums = [int(x, 16) for x in body.replace("{", " ").replace("}", " ").replace(",", " ").split()]
        for a, b in zip(nums[0::2], nums[1::2]):
            ours.update(range(a, b + 1))
        differ += len(lib ^ ours)
    return differ


# the NFC fixture's texts: decomposed and precomposed Latin, marks out of order, Vietnamese,
# Hangul as jamo and as syllables, Devanagari, a composition exclusion, singletons, the added
# tokens in both forms
NFC_TEXTS = [t.encode() for t in [
    "cafe\u0301 caf\u00e9 e\u0301\u0323 e\u0323\u0301 \u1e1d\u0300 A\u030a\u212b\u00c5 \u2126",
    "Ti\u1ebfng Vi\u00ea\u0323t c\u00f3 d\u00e2\u0301u: ngu\u031bo\u031b\u0300i Vie\u0302\u0323t",
    "\u1112\u1161\u11ab\u1100\u1173\u11af \ud55c\uae00 \ud558\u11ab \u1100\u1161",
    "\u0915\u093c \u0958 \u0928\u093c \u0929 \u0939\u093f\u0928\u094d\u0926\u0940",
    "\u0f73 \u0f71\u0f72 \u0344 \u0308\u0301 \u2adc \u2add\u0338 \u1e9b\u0323 q\u0307\u0323",
    "one<|\u1100\u1161|>two<|\uac00|> three<|\u212b|><|\u00c5|>" + SPECIAL + "e\u0301",
    "\U000105d2\u0307 \U00011382\U000113c9 \u08ca\u0334 a\u0334\u0301\u0316\u0300 ASCII only",
]]


def fixtures(moe_bin, fixture_dir, docs):
    """Three small tokenizers trained by the library (vocab 1000), the texts, and the ids and the
    decoded text the library gives for each (for tests/test_tok.c, which runs no Python)."""
    open(fixture_dir + "/texts.bin", "wb").write(b"\0".join(TEXTS) + b"\0")
    open(fixture_dir + "/nfc_texts.bin", "wb").write(b"\0".join(NFC_TEXTS) + b"\0")
    for pattern in ("gpt2", "llama3", "qwen2-nfc"):
        path = "%s/%s.json" % (fixture_dir, pattern)
        library_tokenizer(pattern, 1000, docs).save(path)
        tok = Tokenizer.from_file(path)
        texts = [t.decode("utf-8", "replace") for t in (NFC_TEXTS if pattern == "qwen2-nfc" else TEXTS)]
        ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        with open("%s/%s.ids" % (fixture_dir, pattern), "w") as f:
            f.writelines(" ".join(map(str, i)) + "\n" for i in ids)
        decoded = tok.decode_batch(ids, skip_special_tokens=False)
        name = "nfc_decoded.bin" if pattern == "qwen2-nfc" else "decoded.bin"
        open("%s/%s" % (fixture_dir, name), "wb").write(b"\0".join(d.encode() for d in decoded) + b"\0")
        if pattern == "gpt2":
            legacy_form(path, "%s/gpt2_strings.json" % fixture_dir, texts, ids)


def legacy_form(path, out, texts, ids):
    """The same tokenizer as GPT-2's own file has it: its merges as "a b" strings, and a
    ByteLevel post-processor (which adds no token); the library must give the same ids."""
    d = json.load(open(path, encoding="utf-8"))
    d["model"]["merges"] = [" ".join(m) for m in d["model"]["merges"]]
    d["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False, indent=2)
    again = [e.ids for e in Tokenizer.from_file(out).encode_batch(texts, add_special_tokens=False)]
    assert again == ids, "the library encodes %s differently" % out


# the parts of the random texts: what the split patterns and the byte handling must get right,
# side by side in every order (no NUL: it ends a document of --docs)
PARTS = [b"a", b"Zq", b"the", b"I", b" ", b"  ", b"\t", b"\n", b"\r\n", b"\r", b"\x0b", b"\x0c",
         b"'", b"'s", b"'S", b"'ll", b"'LL", b"'re", b"'Ve", b"'m", b"'d", b"'t", b"1", b"12",
         b"1234", b"!", b"?!", b"...", b"-", b"_", b"(", b"){", b"//", b"\"", b"\x01", b"\x1c",
         b"\x7f", b"<|endoftext|>", b"<|endoftext", b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80",
         b"\xf0\x9f\x98", b"\x80"] + [t.encode() for t in [
         "\u00a0", "\u2028", "\u3000", "\u0085", "\u200b", "\u017f", "'\u017f", "\u0663",
         "\u2460", "\U0001d7d8", "\u00bd", "\u00e9", "\u00df", "\u0416", "\u0436", "\u65e5\u672c",
         "\u0905", "\u093f", "e\u0301", "\u01c5", "\u02b0", "\u00ab\u00bb", "\u3002", "\u2014",
         "\U0001f980", "\u2764\ufe0f", "\U0001f468\u200d\U0001f469", "\u1c89", "\U00010d40"]]


# and those of NFC's random texts: marks of many classes, precomposed and decomposed Latin,
# Vietnamese, Hangul jamo and syllables, Devanagari with nukta, exclusions and singletons
NFC_PARTS = PARTS[:12] + [t.encode() for t in [
    "e", "E", "o", "A", "u", "\u0301", "\u0300", "\u0302", "\u0303", "\u0308", "\u030a", "\u0323",
    "\u0327", "\u031b", "\u0316", "\u0334", "\u0345", "\u0338", "\u00e9", "\u00c5", "\u212b", "\u2126",
    "\u1ebf", "\u1edd", "\u01a1", "\u00ea", "\u1100", "\u1112", "\u1161", "\u1175", "\u11a8", "\u11c2",
    "\uac00", "\ud55c", "\ud7a3", "\u0915", "\u093c", "\u0928", "\u0958", "\u093f", "\u094d", "\u0f71",
    "\u0f72", "\u0f73", "\u0344", "\u2adc", "\u1e9b", "\u03b1", "\u0313", "\u0342", "\u0399",
    "\u05b8", "\u05bc", "\u08ca", "\U000105d2", "\u0307", "\U00011382", "\U000113c9", "\u3099",
    "\u304b", "\u0b47", "\u0b3e", "<|\u1100\u1161|>", "<|\u1100", "\u1161|>", "<|\uac00|>", "<|\u212b|>",
    "<|\u00c5|>"]]


def random_texts(n, seed=0, parts=PARTS):
    rng = random.Random(seed)
    return [b"".join(rng.choice(parts) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def nfc_sweep():
    """Every code point followed by marks of classes 1 and 230 (its decomposition, its class,
    composing with them), every pair Unicode 16.0 composes (also those newer than the library's
    data), and every Hangul L V and L V T as jamo: in documents of 64 cases."""
    import unicodedata2
    cases = [chr(c) + "\u0334\u0301" for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    for c in range(0x110000):
        d = unicodedata2.decomposition(chr(c))
        if d and not d.startswith("<") and len(d.split()) == 2:
            cases.append("".join(chr(int(x, 16)) for x in d.split()) + " ")
    for l in range(0x1100, 0x1113):
        for v in range(0x1161, 0x1176):
            cases.append(chr(l) + chr(v) + " ")
            cases += [chr(l) + chr(v) + chr(t) for t in range(0x11A8, 0x11C3, 3)]
    return ["".join(cases[i:i + 64]).encode() for i in range(0, len(cases), 64)]


def main():
    moe_bin, shard, out, fixture_dir, tmp = sys.argv[1:6]
    docs = read_shard(shard)
    texts = random_texts(5000)
    rows = []  # (texts, documents, trained by, pattern, vocab, train s) + compare()'s
    paths = []
    for pattern, vocab in (("gpt2", 8000), ("llama3", 8000), ("qwen2-nfc", 8000)):
        t0 = time.time()
        path = "%s/library-%s.json" % (tmp, pattern)
        library_tokenizer(pattern, vocab, docs).save(path)
        paths.append(("library", pattern, vocab, time.time() - t0, path))
    text = tmp + "/corpus.txt"
    open(text, "wb").write(b"".join(docs))
    for pattern, vocab in (("gpt2", 8000), ("llama3", 32000), ("qwen2", 8000)):
        path = "%s/moe-%s.json" % (tmp, pattern)
        t0 = time.time()
        subprocess.run([moe_bin, "tokenizer", "train", "--vocab", str(vocab), "--from", text,
                        "--out", path, "--pattern", pattern], check=True, capture_output=True)
        paths.append(("moe.c", pattern, vocab, time.time() - t0, path))
    nfc_texts = random_texts(5000, 1, NFC_PARTS)
    sweep = nfc_sweep()
    for name, some in (("corpus", docs), ("random", texts), ("random-nfc", nfc_texts),
                       ("nfc-sweep", sweep)):
        for by, pattern, vocab, seconds, path in paths:
            if name in ("random-nfc", "nfc-sweep") and pattern != "qwen2-nfc":
                continue
            rows.append((name, len(some), by, pattern, vocab, seconds) + compare(moe_bin, path, some))
    differ = unicode_classes()
    fixtures(moe_bin, fixture_dir, docs)
    write_report(out, docs, rows, differ)
    bad = sum(r[7] + r[8] for r in rows) + differ
    print("tok compare: %d documents, %d random texts, %d mismatches" % (len(docs), len(texts), bad))
    return 1 if bad else 0


def write_report(out, docs, rows, differ):
    head = ["texts", "documents", "trained_by", "pattern", "vocab", "train_s", "tokens",
            "id_mismatches", "decode_mismatches"]
    with open(out + "/compare.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        for r in rows:
            w.writerow(list(r[:5]) + ["%.1f" % r[5]] + list(r[6:9]))
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", ".", ":(exclude)plots/tok",
                       ":(exclude)tests/data/tok"]).returncode:
        commit += "-dirty"
    with open(out + "/compare.md", "w") as f:
        f.write("# moe tokenizer against the tokenizers library\n\n")
        f.write("Every document of data/corpus/train.bin (%d documents, %d bytes), and %d random "
                "texts of up to 40 hard parts each (white space of every kind, line breaks, "
                "contractions in both cases, digits and letters of several scripts, combining "
                "marks, emoji, the special token whole and cut, ill-formed UTF-8), encoded by "
                "tokenizers %s (`encode(text, add_special_tokens=False)`) and by `moe tokenizer "
                "encode --docs`, id for id, and decoded back by both (`moe tokenizer decode "
                "--docs`; the library's `decode(ids, skip_special_tokens=False)`), with each "
                "tokenizer.json trained by the library (its BpeTrainer, the byte alphabet, one "
                "special token) and by `moe tokenizer train` (loaded by the library's "
                "`Tokenizer.from_file`). plots/tok/compare.sh, `make tok-compare`.\n\n"
                % (len(docs), sum(map(len, docs)), [r[1] for r in rows if r[0] == "random"][0], tokenizers.__version__))
        f.write("qwen2-nfc is Qwen2's layout: its pattern, the normalizer NFC, and two added tokens "
                "besides the special one, one normalized and one not (plots/tok/compare.py, "
                "NFC_ADDED). random-nfc: 5000 random texts of up to 40 parts rich in NFC's cases "
                "(combining marks of many classes, precomposed and decomposed Latin, Vietnamese, "
                "Hangul jamo and syllables, Devanagari, composition exclusions, singletons, the "
                "added tokens in both forms). nfc-sweep: every code point followed by marks of "
                "classes 1 and 230, every pair Unicode 16.0 composes, and the Hangul jamo L V "
                "and L V T, 64 cases a text. With NFC a text decodes in its normal form, so the "
                "two decodings are compared with each other.\n\n")
        f.write("| texts | trained by | pattern | vocab | train s | tokens | id mismatches | decode mismatches |\n")
        f.write("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
        for r in rows:
            f.write("| %s | %s | %s | %d | %.1f | %d | %d | %d |\n" % ((r[0],) + r[2:9]))
        f.write("\nThe character classes \\p{L}, \\p{N} and \\s over every code point, the "
                "library's regular expressions against src/tok/unicode_tables.h (Unicode 16.0): "
                "%d differ.\n" % differ)
        for r in rows:
            if r[9]:
                f.write("\nFirst mismatch, %s, %s %s: %s\n" % (r[0], r[2], r[3], r[9]))
        f.write("\nPython %s, tokenizers %s, %s; commit %s.\n"
                % (platform.python_version(), tokenizers.__version__, platform.machine(), commit))


if __name__ == "__main__":
    sys.exit(main())
