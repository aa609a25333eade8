#!/usr/bin/env python3
"""unicode_gen.py: writes unicode_tables.h, the character classes the pre-tokenizer patterns
name (\\p{L}, \\p{N}, \\s), as sorted ranges of code points, and the data of the NFC
normalizer (unicode.c), from Python's unicodedata (the unicodedata2 backport, for its Unicode
version).

    build/venv-tok/bin/python src/tok/unicode_gen.py > src/tok/unicode_tables.h

A developer script: the header is committed, and the build never runs Python. The Unicode
version must be the one the tokenizers library's regular expressions use: Unicode 16.0 for
tokenizers 0.23 (its Oniguruma), newer than the unicodedata of most Pythons, so the script reads
the unicodedata2 backport at that version (make tok-compare installs it into build/venv-tok).
The header records the version, and plots/tok/compare.py checks every code point of the three
classes against the library.
\\s is Oniguruma's Unicode whitespace: U+0009..U+000D, U+0085 and the categories Zs, Zl, Zp.

NFC is another matter: the library's normalizer (its Rust crate unicode-normalization-alignments)
carries the normalization data of an older Unicode (9.0), so a mark assigned since has
combining class 0 there and a composition added since is not made. The normalization tables
are Unicode 16.0's cut to what the library's own normalizer does, each entry checked against
it: a decomposition kept when the library's NFD makes it, a combining class when the library
reorders the mark, a composition pair when the library's NFC makes it. So this script also
needs tokenizers (make tok-compare installs both), and plots/tok/compare.py checks the result.
"""
import sys

try:
    import unicodedata2 as unicodedata
except ImportError:
    sys.exit("unicode_gen.py: needs unicodedata2==16.0.0 (make tok-compare installs it)")
try:
    from tokenizers import normalizers
except ImportError:
    sys.exit("unicode_gen.py: needs tokenizers, the library's NFC (make tok-compare installs it)")

UNICODE_VERSION = "16.0.0"


def ranges(member):
    out, start = [], None
    for cp in range(0x110000):
        if member(cp):
            if start is None:
                start = cp
        elif start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return out


def category(cp):
    return unicodedata.category(chr(cp))


CLASSES = [
    ("TOK_LETTER", "\\p{L}: Lu Ll Lt Lm Lo", lambda cp: category(cp) in ("Lu", "Ll", "Lt", "Lm", "Lo")),
    ("TOK_NUMBER", "\\p{N}: Nd Nl No", lambda cp: category(cp) in ("Nd", "Nl", "No")),
    ("TOK_SPACE", "\\s: U+0009..U+000D, U+0085, Zs Zl Zp",
     lambda cp: 0x09 <= cp <= 0x0D or cp == 0x85 or category(cp) in ("Zs", "Zl", "Zp")),
]


HANGUL = range(0xAC00, 0xD7A4)  # the syllables: decomposed and composed by arithmetic, not tables


def nfc_data():
    """The library's normalization data, as Unicode 16.0's entries its normalizer applies:
    (decompositions {cp: (a, b or 0)}, combining classes {cp: ccc}, pairs {(a, b): cp})."""
    lib_nfc, lib_nfd = normalizers.NFC(), normalizers.NFD()
    decomp, ccc, pairs = {}, {}, {}
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or cp in HANGUL:
            continue
        c = chr(cp)
        d = unicodedata.decomposition(c)
        if d and not d.startswith("<") and lib_nfd.normalize_str(c) == unicodedata.normalize("NFD", c):
            parts = [int(x, 16) for x in d.split()]
            decomp[cp] = (parts[0], parts[1] if len(parts) == 2 else 0)
            if len(parts) == 2 and lib_nfc.normalize_str(chr(parts[0]) + chr(parts[1])) == c:
                pairs[(parts[0], parts[1])] = cp  # a primary composite: not excluded
        k = unicodedata.combining(c)
        # the library reorders the mark before one of class 1 (U+0334) only if it knows its class
        if k > 1 and lib_nfc.normalize_str(c + "\u0334") == unicodedata.normalize("NFC", c + "\u0334"):
            ccc[cp] = k
        elif k == 1:
            ccc[cp] = 1
    return decomp, ccc, pairs


def needs_work(decomp, ccc, pairs):
    """The code points after which NFC may not leave a text as it is (not NFC_Quick_Check=Yes
    with class 0): a mark, a character NFC never keeps, or the second of a pair (with the
    Hangul vowels and trailing consonants)."""
    seconds = {b for _, b in pairs}
    composites = set(pairs.values())
    return lambda cp: (cp in ccc or (cp in decomp and cp not in composites) or cp in seconds
                       or 0x1161 <= cp <= 0x1175 or 0x11A8 <= cp <= 0x11C2)


def write_rows(w, rows, decimal=-1):
    """rows as C initializers, code points in hex, the column decimal (a class) in decimal"""
    line = "   "
    for r in rows:
        item = " {" + ", ".join(("%d" if i == decimal else "0x%X") % x for i, x in enumerate(r)) + "},"
        if len(line) + len(item) > 99:
            w(line + "\n")
            line = "   "
        line += item
    w(line + "\n};\n")


def write_nfc(w):
    decomp, ccc, pairs = nfc_data()
    runs = []
    for cp in sorted(ccc):
        if runs and runs[-1][1] == cp - 1 and runs[-1][2] == ccc[cp]:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp, ccc[cp]])
    w("\n/* NFC (unicode.c), the library's normalization data (see unicode_gen.py) */\n")
    w("\n/* the canonical combining classes other than 0: [first, last, class], %d runs */\n" % len(runs))
    w("static const uint32_t TOK_CCC[][3] = {\n")
    write_rows(w, runs, 2)
    w("\n/* the canonical decompositions, one level (unicode.c recurses), but the Hangul syllables:\n"
      " * [code point, first, second or 0], %d by code point */\n" % len(decomp))
    w("static const uint32_t TOK_DECOMP[][3] = {\n")
    write_rows(w, [(cp, ) + decomp[cp] for cp in sorted(decomp)])
    w("\n/* the compositions, exclusions and singletons left out: [first, second, composite],\n"
      " * %d by (first, second) */\n" % len(pairs))
    w("static const uint32_t TOK_COMPOSE[][3] = {\n")
    write_rows(w, [k + (pairs[k], ) for k in sorted(pairs)])
    rs = ranges(needs_work(decomp, ccc, pairs))
    w("\n/* the code points NFC may change a text at (not Quick_Check Yes with class 0): %d ranges */\n" % len(rs))
    w("static const uint32_t TOK_NFC_CHECK[][2] = {\n")
    write_rows(w, rs)


def main():
    if unicodedata.unidata_version != UNICODE_VERSION:
        sys.exit("unicode_gen.py: unicodedata2 has Unicode %s, not %s: pip install unicodedata2==%s"
                 % (unicodedata.unidata_version, UNICODE_VERSION, UNICODE_VERSION))
    w = sys.stdout.write
    w("/*\n * unicode_tables.h: the character classes of the pre-tokenizer patterns, as sorted,\n")
    w(" * disjoint ranges of code points [first, last], and the tables of NFC. Generated by\n")
    w(" * src/tok/unicode_gen.py from Unicode %s (unicodedata2); do not edit by hand.\n */\n"
      % unicodedata.unidata_version)
    w("#ifndef MOE_TOK_UNICODE_TABLES_H\n#define MOE_TOK_UNICODE_TABLES_H\n\n#include <stdint.h>\n\n")
    w('#define TOK_UNICODE_VERSION "%s"\n' % unicodedata.unidata_version)
    for name, what, member in CLASSES:
        rs = ranges(member)
        w("\n/* %s: %d ranges */\n" % (what, len(rs)))
        w("static const uint32_t %s[][2] = {\n" % name)
        line = "   "
        for a, b in rs:
            item = " {0x%X, 0x%X}," % (a, b)
            if len(line) + len(item) > 99:
                w(line + "\n")
                line = "   "
            line += item
        w(line + "\n};\n")
    write_nfc(w)
    w("\n#endif\n")


if __name__ == "__main__":
    main()
