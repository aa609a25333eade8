/*
 * json.c: the strict JSON reader pieces of json.h.
 *
 * Strict means: only what RFC 8259 allows, and less where moe.c needs less (numbers are
 * non-negative integers). A header that a lenient parser would guess at is refused instead,
 * with the byte where it went wrong.
 */
#include "io/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int json_fail(JsonReader *j, const char *fmt, ...) {
    if (j->msg[0]) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->msg, sizeof j->msg, fmt, ap);
    va_end(ap);
    return -1;
}

void json_ws(JsonReader *j) {
    while (j->i < j->n && strchr(" \t\r\n", j->s[j->i]) && j->s[j->i]) j->i++;
}

int json_take(JsonReader *j, char c) {
    json_ws(j);
    if (j->i < j->n && j->s[j->i] == c) return j->i++, 1;
    return 0;
}

int json_expect(JsonReader *j, char c) {
    if (json_take(j, c)) return 0;
    if (j->i >= j->n) return json_fail(j, "expected '%c' but the header ended", c);
    return json_fail(j, "expected '%c', found '%c'", c, j->s[j->i]);
}

static int json_hex4(JsonReader *j, unsigned *v) {
    *v = 0;
    for (int k = 0; k < 4; k++, j->i++) {
        char c = j->i < j->n ? j->s[j->i] : 0;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return json_fail(j, "\\u needs four hex digits");
        *v = *v << 4 | (unsigned)d;
    }
    return 0;
}

int json_string(JsonReader *j, char **out) {
    *out = NULL;
    if (json_expect(j, '"')) return -1;
    size_t end = j->i; /* decoded text is never longer than its escaped form */
    while (end < j->n && j->s[end] != '"') end += j->s[end] == '\\' ? 2 : 1;
    if (end >= j->n) return json_fail(j, "a string is not closed");
    char *o = (char *)malloc_check(end - j->i + 1);
    size_t k = 0;
    while (j->s[j->i] != '"') {
        unsigned char c = (unsigned char)j->s[j->i++];
        if (c < 0x20) {
            free(o);
            return json_fail(j, "control character 0x%02x inside a string (write it as \\u%04x)", c,
                             c);
        }
        if (c != '\\') {
            o[k++] = (char)c;
            continue;
        }
        char e = j->s[j->i++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *hit = strchr(from, e);
        if (e && hit) {
            o[k++] = to[hit - from];
            continue;
        }
        unsigned cp, lo;
        if (e != 'u') {
            free(o);
            return json_fail(j, "unknown escape '\\%c' in a string", e);
        }
        if (json_hex4(j, &cp)) return free(o), -1;
        if (cp >= 0xD800 && cp < 0xDC00) { /* high surrogate: a \uDC00..\uDFFF must follow */
            if (j->i + 1 >= j->n || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u')
                return free(o), json_fail(j, "unpaired UTF-16 surrogate \\u%04x", cp);
            j->i += 2;
            if (json_hex4(j, &lo)) return free(o), -1;
            if (lo < 0xDC00 || lo > 0xDFFF)
                return free(o), json_fail(j, "unpaired UTF-16 surrogate \\u%04x", cp);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            return free(o), json_fail(j, "unpaired UTF-16 surrogate \\u%04x", cp);
        }
        if (cp == 0) return free(o), json_fail(j, "\\u0000 (a NUL byte) inside a string");
        if (cp < 0x80) {
            o[k++] = (char)cp;
        } else if (cp < 0x800) {
            o[k++] = (char)(0xC0 | cp >> 6);
            o[k++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            o[k++] = (char)(0xE0 | cp >> 12);
            o[k++] = (char)(0x80 | (cp >> 6 & 0x3F));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        } else {
            o[k++] = (char)(0xF0 | cp >> 18);
            o[k++] = (char)(0x80 | (cp >> 12 & 0x3F));
            o[k++] = (char)(0x80 | (cp >> 6 & 0x3F));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    j->i++; /* the closing quote */
    o[k] = 0;
    *out = o;
    return 0;
}

int json_uint(JsonReader *j, uint64_t *v) {
    json_ws(j);
    size_t start = j->i;
    *v = 0;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
        unsigned d = (unsigned)(j->s[j->i++] - '0');
        if (*v > (UINT64_MAX - d) / 10) return json_fail(j, "integer too large");
        *v = *v * 10 + d;
    }
    if (j->i == start) {
        if (j->i < j->n && j->s[j->i] == '-') return json_fail(j, "negative number");
        return json_fail(j, "expected a non-negative integer");
    }
    if (j->s[start] == '0' && j->i - start > 1) return json_fail(j, "integer with a leading zero");
    if (j->i < j->n && strchr(".eE", j->s[j->i]) && j->s[j->i])
        return json_fail(j, "expected an integer, found a fraction or exponent");
    return 0;
}

int json_uint_array(JsonReader *j, uint64_t *v, int max, int *count) {
    *count = 0;
    if (json_expect(j, '[')) return -1;
    if (json_take(j, ']')) return 0;
    do {
        uint64_t x;
        if (json_uint(j, &x)) return -1;
        if (*count < max) v[*count] = x;
        ++*count;
    } while (json_take(j, ','));
    return json_expect(j, ']');
}

void json_write_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}
