/*
 * tok.c: a tokenizer's vocabulary and merges, as tokenizer.json or the trainer gives them
 * (tok.h); encode.c turns text into ids with them.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tok/tok.h"
#include "tok/unicode.h"

void tok_ids_push(TokIds *v, int id) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 256;
        v->id = (int *)realloc_check(v->id, v->cap * sizeof *v->id);
    }
    v->id[v->n++] = id;
}

void tok_ids_free(TokIds *v) {
    free(v->id);
    memset(v, 0, sizeof *v);
}

void tok_init(Tokenizer *t, TokPattern pattern) {
    memset(t, 0, sizeof *t);
    t->pattern = pattern;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
}

/* room for ids 0 .. id */
static void reserve(Tokenizer *t, int id) {
    if (id < t->cap) return;
    int cap = t->cap ? t->cap : 512;
    while (cap <= id) cap *= 2;
    t->token = (char **)realloc_check(t->token, (size_t)cap * sizeof *t->token);
    t->kind = (uint8_t *)realloc_check(t->kind, (size_t)cap);
    memset(t->token + t->cap, 0, (size_t)(cap - t->cap) * sizeof *t->token);
    memset(t->kind + t->cap, 0, (size_t)(cap - t->cap));
    t->cap = cap;
}

int tok_set_token(Tokenizer *t, int id, const char *text, int kind, char *err, int errlen) {
    reserve(t, id);
    const size_t len = strlen(text);
    if (t->token[id] && strcmp(t->token[id], text) != 0)
        return set_error(err, errlen, "id %d is both \"%.60s\" and \"%.60s\"", id, t->token[id],
                         text);
    if (kind & TOK_MODEL) {
        int fresh;
        const int *have = strmap_put(&t->vocab, text, len, id, &fresh);
        if (!fresh && *have != id)
            return set_error(err, errlen, "the token \"%.60s\" has two ids, %d and %d", text, *have,
                             id);
    }
    if ((kind & TOK_ADDED) && !(t->kind[id] & TOK_ADDED)) {
        t->added = (int *)realloc_check(t->added, (size_t)(t->n_added + 1) * sizeof *t->added);
        t->added[t->n_added++] = id;
    }
    if (!t->token[id]) {
        t->token[id] = (char *)malloc_check(len + 1);
        memcpy(t->token[id], text, len + 1);
    }
    t->kind[id] |= (uint8_t)kind;
    if (id >= t->n_vocab) t->n_vocab = id + 1;
    return 0;
}

int tok_lookup(const Tokenizer *t, const char *text, size_t len) {
    const int *id = strmap_find(&t->vocab, text, len);
    return id ? *id : -1;
}

void tok_add_merge_ids(Tokenizer *t, int left, int right, int merged) {
    if ((t->n_merges & (t->n_merges - 1)) == 0) /* 0, 1, 2, 4, ...: double the room */
        t->merges =
            (int(*)[3])realloc_check(t->merges, (size_t)(2 * t->n_merges + 1) * sizeof *t->merges);
    int fresh;
    pairmap_put(&t->rank, (uint32_t)left, (uint32_t)right, t->n_merges, &fresh);
    t->merges[t->n_merges][0] = left, t->merges[t->n_merges][1] = right;
    t->merges[t->n_merges][2] = merged;
    t->n_merges++;
}

int tok_add_merge(Tokenizer *t, const char *left, const char *right, char *err, int errlen) {
    const size_t a = strlen(left), b = strlen(right);
    char *both = (char *)malloc_check(a + b + 1);
    memcpy(both, left, a);
    memcpy(both + a, right, b + 1);
    const int l = tok_lookup(t, left, a), r = tok_lookup(t, right, b),
              m = tok_lookup(t, both, a + b);
    free(both);
    if (l < 0 || r < 0 || m < 0)
        return set_error(err, errlen,
                         "the merge \"%.60s\" \"%.60s\" names %s not in the vocabulary", left,
                         right,
                         l < 0   ? "a left token"
                         : r < 0 ? "a right token"
                                 : "a result");
    if (pairmap_find(&t->rank, (uint32_t)l, (uint32_t)r))
        return set_error(err, errlen, "the merge \"%.60s\" \"%.60s\" appears twice", left, right);
    tok_add_merge_ids(t, l, r, m);
    return 0;
}

/* What a token decodes to: each character of the byte alphabet as its byte; a token with
 * any other character (an added token's text) as its own UTF-8, whole, as the library's
 * ByteLevel decoder does. An added token's text is the one it is matched as (tok_finish). */
static void token_bytes(Tokenizer *t, int id) {
    /* a normalized added token decodes as the library has it: in normal form */
    const char *s = t->match[id] ? t->match[id] : t->token[id];
    const size_t n = strlen(s);
    char *out = (char *)malloc_check(n + 1);
    size_t i = 0, o = 0;
    while (i < n) {
        const int b = tok_char_byte(utf8_next(s, n, &i));
        if (b < 0) break;
        out[o++] = (char)b;
    }
    if (i < n || o == 0) memcpy(out, s, o = n); /* a character outside the alphabet */
    t->bytes[id] = out;
    t->n_bytes[id] = (uint32_t)o;
}

int tok_finish(Tokenizer *t, char *err, int errlen) {
    for (int b = 0; b < 256; b++) {
        char c[4];
        t->byte_id[b] = tok_lookup(t, c, (size_t)utf8_put(tok_byte_char((uint8_t)b), c));
        if (t->byte_id[b] < 0)
            return set_error(err, errlen,
                             "the vocabulary has no token for the byte 0x%02X (a byte-level "
                             "vocabulary has all 256, as tokenizers' ByteLevel.alphabet())",
                             b);
    }
    /* what each added token matches: a normalized one is looked for in normalized text, so
     * as its own text normalized (the library normalizes its content the same way) */
    t->match = (char **)calloc_check((size_t)t->n_vocab, sizeof *t->match);
    for (int k = 0; k < t->n_added; k++) {
        const int id = t->added[k];
        size_t len;
        char *nfc = t->nfc && (t->kind[id] & TOK_NORMALIZED)
                        ? tok_nfc(t->token[id], strlen(t->token[id]), &len)
                        : NULL;
        if (nfc) nfc[len] = '\0';
        t->match[id] = nfc ? nfc : t->token[id];
    }
    /* the added tokens by first byte, for the scan of a text (Llama 3 has 256 of them) */
    t->added_by_byte = (int *)malloc_check((size_t)(t->n_added + 1) * sizeof *t->added_by_byte);
    memset(t->added_from, 0, sizeof t->added_from);
    for (int k = 0; k < t->n_added; k++) t->added_from[(uint8_t)t->match[t->added[k]][0] + 1]++;
    for (int c = 0; c < 256; c++) t->added_from[c + 1] += t->added_from[c];
    int fill[256];
    memcpy(fill, t->added_from, sizeof fill);
    for (int k = 0; k < t->n_added; k++)
        t->added_by_byte[fill[(uint8_t)t->match[t->added[k]][0]]++] = t->added[k];
    t->bytes = (char **)calloc_check((size_t)t->n_vocab, sizeof *t->bytes);
    t->n_bytes = (uint32_t *)calloc_check((size_t)t->n_vocab, sizeof *t->n_bytes);
    for (int id = 0; id < t->n_vocab; id++)
        if (t->token[id]) token_bytes(t, id);
    return 0;
}

void tok_free(Tokenizer *t) {
    for (int id = 0; id < t->n_vocab; id++) {
        if (t->match && t->match[id] != t->token[id]) free(t->match[id]);
        free(t->token[id]);
        if (t->bytes) free(t->bytes[id]);
    }
    free(t->match), free(t->token), free(t->bytes), free(t->n_bytes), free(t->kind);
    free(t->merges), free(t->added), free(t->added_by_byte), free(t->cache_ids);
    strmap_free(&t->vocab), strmap_free(&t->cache);
    pairmap_free(&t->rank);
    memset(t, 0, sizeof *t);
}
