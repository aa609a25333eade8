/*
 * unicode.c: UTF-8, the character classes and the byte alphabet (unicode.h).
 */
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
