/*
 * pretok.c: the split patterns (pretok.h), each alternative a few lines of its own.
 *
 * Every alternative is a function that returns the end of its match at i, or 0 when it does
 * not match there (a match is never empty, so 0 cannot be a match's end). The patterns match
 * every character one way or another, so the pieces tile the text.
 */
#include <string.h>

#include "tok/pretok.h"
#include "tok/unicode.h"

static const char *const NAMES[TOK_N_PATTERNS] = {"gpt2", "llama3", "qwen2"};
static const char *const REGEX[TOK_N_PATTERNS] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

const char *tok_pattern_name(TokPattern p) {
    return NAMES[p];
}
const char *tok_pattern_regex(TokPattern p) {
    return REGEX[p];
}

int tok_pattern_by_name(const char *name) {
    for (int p = 0; p < TOK_N_PATTERNS; p++)
        if (strcmp(name, NAMES[p]) == 0) return p;
    return -1;
}

int tok_pattern_by_regex(const char *re) {
    for (int p = 0; p < TOK_N_PATTERNS; p++)
        if (strcmp(re, REGEX[p]) == 0) return p;
    return -1;
}

/* The text being cut: n bytes of valid UTF-8. */
typedef struct {
    const char *s;
    size_t n;
} Text;

/* the code point at i (and in *next the byte after it); -1 at the end */
static long at(const Text *t, size_t i, size_t *next) {
    if (i >= t->n) {
        *next = i;
        return -1;
    }
    *next = i;
    return (long)utf8_next(t->s, t->n, next);
}

static int letter(long c) {
    return c >= 0 && tok_is_letter((uint32_t)c);
}
static int number(long c) {
    return c >= 0 && tok_is_number((uint32_t)c);
}
static int space(long c) {
    return c >= 0 && tok_is_space((uint32_t)c);
}
static int other(long c) {
    return c >= 0 && !letter(c) && !number(c) && !space(c);
} /* [^\s\p{L}\p{N}] */
static int newline(long c) {
    return c == '\r' || c == '\n';
}

/* the end of the run of characters of class cls from i (at most max of them; max 0: no
 * limit), or 0 when there is none */
static size_t run(const Text *t, size_t i, int (*cls)(long), int max) {
    size_t next, end = 0;
    for (int k = 0; (max == 0 || k < max) && cls(at(t, i, &next)); k++) end = i = next;
    return end;
}

/* 's|'t|'re|'ve|'m|'ll|'d, and with fold (Llama 3's (?i:...)) in either case; under Unicode's
 * case folding, U+017F (long s) is an s too */
static size_t contraction(const Text *t, size_t i, int fold) {
    if (i >= t->n || t->s[i] != '\'') return 0;
    size_t a, b;
    long c1 = at(t, i + 1, &a), c2 = at(t, a, &b);
    if (fold) {
        c1 = c1 == 0x17F ? 's' : (c1 >= 'A' && c1 <= 'Z' ? c1 | 0x20 : c1);
        c2 = c2 >= 'A' && c2 <= 'Z' ? c2 | 0x20 : c2;
    }
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return a;
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return b;
    return 0;
}

/* ' ?' then a run of cls: GPT-2's  ?\p{L}+,  ?\p{N}+ and  ?[^\s\p{L}\p{N}]+ (without the
 * space when the run does not follow it: a space is none of the classes) */
static size_t spaced_run(const Text *t, size_t i, int (*cls)(long)) {
    const size_t from = t->s[i] == ' ' ? i + 1 : i;
    return run(t, from, cls, 0);
}

/* \s+(?!\S)|\s+ : a run of white space, but for its last character when a non-space follows
 * and the run has more than one (that last one then goes with what follows) */
static size_t spaces(const Text *t, size_t i) {
    size_t end = run(t, i, space, 0), last = i, next;
    if (!end) return 0;
    if (end == t->n) return end;
    for (size_t k = i; k < end; k = next) {
        last = k;
        at(t, k, &next);
    }
    return last > i ? last : end;
}

static size_t gpt2(const Text *t, size_t i) {
    size_t end;
    if ((end = contraction(t, i, 0))) return end;
    if ((end = spaced_run(t, i, letter))) return end;
    if ((end = spaced_run(t, i, number))) return end;
    if ((end = spaced_run(t, i, other))) return end;
    return spaces(t, i);
}

/* [^\r\n\p{L}\p{N}]?\p{L}+ */
static size_t word(const Text *t, size_t i) {
    size_t next;
    const long c = at(t, i, &next);
    if (letter(c)) return run(t, i, letter, 0);
    if (c < 0 || newline(c) || number(c)) return 0;
    return run(t, next, letter, 0);
}

/*  ?[^\s\p{L}\p{N}]+[\r\n]* */
static size_t punctuation(const Text *t, size_t i) {
    const size_t end = spaced_run(t, i, other);
    if (!end) return 0;
    const size_t more = run(t, end, newline, 0);
    return more ? more : end;
}

/* \s*[\r\n]+ : white space up to and with its last line break */
static size_t line_breaks(const Text *t, size_t i) {
    size_t next, end = 0;
    for (size_t k = i; space(at(t, k, &next)); k = next)
        if (newline(t->s[k])) end = next;
    return end;
}

static size_t llama3(const Text *t, size_t i, int max_digits) {
    size_t end;
    if ((end = contraction(t, i, 1))) return end;
    if ((end = word(t, i))) return end;
    if ((end = run(t, i, number, max_digits))) return end;
    if ((end = punctuation(t, i))) return end;
    if ((end = line_breaks(t, i))) return end;
    return spaces(t, i);
}

size_t tok_piece_end(TokPattern p, const char *s, size_t n, size_t i) {
    const Text t = {s, n};
    const size_t end = p == TOK_GPT2 ? gpt2(&t, i) : llama3(&t, i, p == TOK_LLAMA3 ? 3 : 1);
    if (end > i) return end;
    at(&t, i, &i); /* unreachable: every character matches some alternative */
    return i;
}
