/*
 * unicode.c: UTF-8, the character classes, the byte alphabet and NFC (unicode.h).
 */
#include <stdlib.h>

#include "base/util.h"
#include "tok/unicode.h"
#include "tok/unicode_tables.h"

/* The length of the well-formed sequence at s (n bytes left), or 0 when there is none; then
 * *bad is how many bytes the maximal ill-formed prefix spans (at least 1). The ranges of the
 * second byte are Unicode's table 3-7 of well-formed byte sequences. */
static int wellformed(const uint8_t *s, size_t n, int *bad) {
    const uint8_t c = s[0];
    int len;
    uint8_t lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else {
        *bad = 1;
        return 0;
    }
    for (int k = 1; k < len; k++) {
        const uint8_t ok_lo = k == 1 ? lo : 0x80, ok_hi = k == 1 ? hi : 0xBF;
        if ((size_t)k >= n || s[k] < ok_lo || s[k] > ok_hi) {
            *bad = k;
            return 0;
        }
    }
    return len;
}

size_t utf8_lossy(const char *s, size_t n, char *out) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        int bad = 0;
        const int len = wellformed(u + i, n - i, &bad);
        if (len) {
            for (int k = 0; k < len; k++) out[o++] = s[i + k];
            i += (size_t)len;
        } else {
            o += (size_t)utf8_put(0xFFFD, out + o);
            i += (size_t)bad;
        }
    }
    return o;
}

uint32_t utf8_next(const char *s, size_t n, size_t *i) {
    const uint8_t *u = (const uint8_t *)s + *i;
    const size_t left = n - *i;
    if (u[0] < 0x80 || left < 2) {
        *i += 1;
        return u[0];
    }
    if (u[0] < 0xE0) {
        *i += 2;
        return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    }
    if (u[0] < 0xF0 || left < 4) {
        *i += 3;
        return (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    }
    *i += 4;
    return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 |
           (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
}

int utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* binary search of n sorted ranges */
static int in_ranges(const uint32_t (*r)[2], int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid - 1;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

#define RANGES(t) (int)(sizeof t / sizeof t[0])

int tok_is_letter(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return in_ranges(TOK_LETTER, RANGES(TOK_LETTER), cp);
}

int tok_is_number(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return in_ranges(TOK_NUMBER, RANGES(TOK_NUMBER), cp);
}

int tok_is_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    return in_ranges(TOK_SPACE, RANGES(TOK_SPACE), cp);
}

/* the bytes that stand for themselves in GPT-2's alphabet */
static int printable(uint32_t b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The 68 others are 0x00..0x20, 0x7F..0xA0 and 0xAD, numbered from U+0100 in that order. */
uint32_t tok_byte_char(uint8_t b) {
    if (printable(b)) return b;
    if (b <= 0x20) return 0x100 + b;
    if (b <= 0xA0) return 0x100 + 0x21 + (b - 0x7Fu);
    return 0x143; /* 0xAD, the soft hyphen */
}

int tok_char_byte(uint32_t cp) {
    if (cp < 0x100) return printable(cp) ? (int)cp : -1;
    if (cp <= 0x120) return (int)(cp - 0x100);
    if (cp <= 0x142) return (int)(cp - 0x121 + 0x7F);
    return cp == 0x143 ? 0xAD : -1;
}

size_t tok_bytes_to_alphabet(const char *b, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)utf8_put(tok_byte_char((uint8_t)b[i]), out + o);
    return o;
}

/* NFC (unicode.h). The tables are the tokenizers library's normalization data (unicode_gen.py):
 * what its normalizer does is what the tokenizer must do, even where Unicode has moved on. */

/* Hangul syllables are LV or LVT: decomposed and composed by arithmetic (Unicode 3.12) */
enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7 };
enum { L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT };
enum { S_COUNT = L_COUNT * N_COUNT };

static int ccc(uint32_t cp) {
    int lo = 0, hi = RANGES(TOK_CCC) - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (cp < TOK_CCC[mid][0])
            hi = mid - 1;
        else if (cp > TOK_CCC[mid][1])
            lo = mid + 1;
        else
            return (int)TOK_CCC[mid][2];
    }
    return 0;
}

/* the row of a table of n rows sorted by (row[0], row[1]) whose keys are a, b (b is not
 * compared when cmp2 is 0), or NULL */
static const uint32_t *find_row(const uint32_t (*rows)[3], int n, uint32_t a, uint32_t b,
                                int cmp2) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        const uint32_t *r = rows[mid];
        if (a < r[0] || (a == r[0] && cmp2 && b < r[1]))
            hi = mid - 1;
        else if (a > r[0] || (cmp2 && b > r[1]))
            lo = mid + 1;
        else
            return r;
    }
    return NULL;
}

/* A growing array of code points. */
typedef struct {
    uint32_t *cp;
    size_t n, cap;
} Cps;

static void cps_push(Cps *v, uint32_t cp) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 64;
        v->cp = (uint32_t *)realloc_check(v->cp, v->cap * sizeof *v->cp);
    }
    v->cp[v->n++] = cp;
}

/* cp's full canonical decomposition appended to v */
static void decompose(uint32_t cp, Cps *v) {
    if (cp - S_BASE < S_COUNT) {
        const uint32_t s = cp - S_BASE;
        cps_push(v, L_BASE + s / N_COUNT);
        cps_push(v, V_BASE + s % N_COUNT / T_COUNT);
        if (s % T_COUNT) cps_push(v, T_BASE + s % T_COUNT);
        return;
    }
    const uint32_t *d = find_row(TOK_DECOMP, RANGES(TOK_DECOMP), cp, 0, 0);
    if (!d) {
        cps_push(v, cp);
        return;
    }
    decompose(d[1], v);
    if (d[2]) decompose(d[2], v);
}

/* the primary composite of a and b, or 0 */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a - L_BASE < L_COUNT && b - V_BASE < V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a - S_BASE < S_COUNT && (a - S_BASE) % T_COUNT == 0 && b - T_BASE - 1 < T_COUNT - 1)
        return a + (b - T_BASE);
    const uint32_t *r = find_row(TOK_COMPOSE, RANGES(TOK_COMPOSE), a, b, 1);
    return r ? r[2] : 0;
}

/* the marks of each run of nonzero classes in class order, stably (an insertion sort: runs
 * are short) */
static void reorder(Cps *v) {
    for (size_t i = 1; i < v->n; i++) {
        const uint32_t c = v->cp[i];
        const int k = ccc(c);
        if (k == 0) continue;
        size_t j = i;
        while (j > 0 && ccc(v->cp[j - 1]) > k) v->cp[j] = v->cp[j - 1], j--;
        v->cp[j] = c;
    }
}

/* canonical composition in place: each character joins the last starter when no character
 * between them blocks it (one of class 0, or of a class as high as its own) */
static void recompose(Cps *v) {
    if (!v->n) return;
    long starter = ccc(v->cp[0]) ? -1 : 0;
    int last = starter < 0 ? 256 : 0; /* the class of the last character kept */
    size_t n = 1;
    for (size_t i = 1; i < v->n; i++) {
        const uint32_t c = v->cp[i];
        const int k = ccc(c);
        const uint32_t joined =
            starter >= 0 && (last < k || (last == 0 && (size_t)starter == n - 1))
                ? compose(v->cp[starter], c)
                : 0;
        if (joined) {
            v->cp[starter] = joined;
            continue;
        }
        if (k == 0) starter = (long)n;
        last = k;
        v->cp[n++] = c;
    }
    v->n = n;
}

static int nfc_needed(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        if (in_ranges(TOK_NFC_CHECK, RANGES(TOK_NFC_CHECK), utf8_next(s, n, &i))) return 1;
    }
    return 0;
}

char *tok_nfc(const char *s, size_t n, size_t *len) {
    if (!nfc_needed(s, n)) return NULL;
    Cps v = {0};
    for (size_t i = 0; i < n;) decompose(utf8_next(s, n, &i), &v);
    reorder(&v);
    recompose(&v);
    char *out = (char *)malloc_check(4 * v.n + 1);
    size_t o = 0;
    for (size_t k = 0; k < v.n; k++) o += (size_t)utf8_put(v.cp[k], out + o);
    free(v.cp);
    *len = o;
    return out;
}
