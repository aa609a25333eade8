/*
 * encode.c: text to ids and ids to bytes (tok.h).
 *
 * A piece's merges go as the library applies them: every adjacent pair that has a rank waits
 * in a heap ordered by (rank, position); the first one out is merged if its two symbols are
 * still the pair it was queued as, and the new symbol's pairs with its neighbours join the
 * heap. The pieces of a text repeat (words), so each piece's ids are cached.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tok/tok.h"
#include "tok/unicode.h"

#define CACHE_MAX_PIECE 256     /* longer pieces are not cached */
#define CACHE_MAX_IDS (1 << 22) /* the cache is emptied when it holds more ids than this */

typedef struct {
    int rank, pos;
} Queued;

/* a binary min-heap of (rank, pos) */
typedef struct {
    Queued *q;
    int n;
} Heap;

static int before(Queued a, Queued b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(Heap *h, Queued x) {
    int i = h->n++;
    while (i > 0 && before(x, h->q[(i - 1) / 2])) h->q[i] = h->q[(i - 1) / 2], i = (i - 1) / 2;
    h->q[i] = x;
}

static Queued heap_pop(Heap *h) {
    const Queued top = h->q[0], last = h->q[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(h->q[c + 1], h->q[c])) c++;
        if (!before(h->q[c], last)) break;
        h->q[i] = h->q[c], i = c;
    }
    if (h->n) h->q[i] = last;
    return top;
}

/* queue the pair of symbols a and b (b < 0: none) when it has a rank */
static void queue_pair(const Tokenizer *t, Heap *h, const int *sym, int a, int b) {
    if (b < 0) return;
    const int *r = pairmap_find(&t->rank, (uint32_t)sym[a], (uint32_t)sym[b]);
    if (r) heap_push(h, (Queued){*r, a});
}

/* the n bytes of a piece, merged: their ids appended to out */
static void merge_piece(const Tokenizer *t, const char *b, size_t n, TokIds *out) {
    int *sym = (int *)malloc_check(3 * n * sizeof *sym + 3 * n * sizeof(Queued));
    int *next = sym + n, *prev = sym + 2 * n; /* the live symbols, linked; -1 ends */
    Heap h = {(Queued *)(sym + 3 * n), 0};
    for (size_t i = 0; i < n; i++) {
        sym[i] = t->byte_id[(uint8_t)b[i]];
        next[i] = i + 1 < n ? (int)i + 1 : -1;
        prev[i] = (int)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++) queue_pair(t, &h, sym, (int)i, (int)i + 1);
    while (h.n) {
        const Queued x = heap_pop(&h);
        const int a = x.pos, c = next[a];
        if (sym[a] < 0 || c < 0) continue; /* merged into its left neighbour, or now last */
        const int *r = pairmap_find(&t->rank, (uint32_t)sym[a], (uint32_t)sym[c]);
        if (!r || *r != x.rank) continue; /* no longer the pair it was queued as */
        sym[a] = t->merges[x.rank][2];
        sym[c] = -1;
        next[a] = next[c];
        if (next[c] >= 0) prev[next[c]] = a;
        if (prev[a] >= 0) queue_pair(t, &h, sym, prev[a], a);
        queue_pair(t, &h, sym, a, next[a]);
    }
    for (int i = 0; i >= 0; i = next[i]) tok_ids_push(out, sym[i]);
    free(sym);
}

/* a piece's ids, from the cache or merged (and cached) */
static void encode_piece(Tokenizer *t, const char *b, size_t n, TokIds *out) {
    const int *hit = n <= CACHE_MAX_PIECE ? strmap_find(&t->cache, b, n) : NULL;
    if (hit) {
        for (int k = 0; k < t->cache_ids[*hit]; k++) tok_ids_push(out, t->cache_ids[*hit + 1 + k]);
        return;
    }
    const size_t first = out->n;
    int whole = -1;
    if (t->ignore_merges) {
        char *a = (char *)malloc_check(2 * n);
        whole = tok_lookup(t, a, tok_bytes_to_alphabet(b, n, a));
        free(a);
    }
    if (whole >= 0)
        tok_ids_push(out, whole);
    else
        merge_piece(t, b, n, out);
    if (n > CACHE_MAX_PIECE) return;
    const size_t k = out->n - first;
    if (t->cache_len + k + 1 > CACHE_MAX_IDS) strmap_clear(&t->cache), t->cache_len = 0;
    if (t->cache_len + k + 1 > t->cache_cap) {
        t->cache_cap = 2 * (t->cache_len + k + 1);
        t->cache_ids = (int *)realloc_check(t->cache_ids, t->cache_cap * sizeof *t->cache_ids);
    }
    int fresh;
    strmap_put(&t->cache, b, n, (int)t->cache_len, &fresh);
    t->cache_ids[t->cache_len++] = (int)k;
    memcpy(t->cache_ids + t->cache_len, out->id + first, k * sizeof *out->id);
    t->cache_len += k;
}

/* the added token that starts at s[i] (the longest of those that do), normalized (TOK_NORMALIZED)
 * or not as normalized says, or -1 */
static int added_at(const Tokenizer *t, const char *s, size_t n, size_t i, int normalized) {
    int best = -1;
    size_t best_len = 0;
    const int c = (uint8_t)s[i];
    for (int k = t->added_from[c]; k < t->added_from[c + 1]; k++) {
        const int id = t->added_by_byte[k];
        const size_t len = strlen(t->match[id]);
        if (!(t->kind[id] & TOK_NORMALIZED) == !normalized && len > best_len && len <= n - i &&
            memcmp(s + i, t->match[id], len) == 0)
            best = id, best_len = len;
    }
    return best;
}

/* the text s[from, to), which no added token interrupts, cut into pieces and encoded */
static void encode_span(Tokenizer *t, const char *s, size_t from, size_t to, TokIds *out) {
    for (size_t i = from; i < to;) {
        const size_t end = from + tok_piece_end(t->pattern, s + from, to - from, i - from);
        encode_piece(t, s + i, end - i, out);
        i = end;
    }
}

/* s[from, to) cut at the added tokens (normalized or not, as normalized says), the text
 * between them encoded by span */
static void split_added(Tokenizer *t, const char *s, size_t from, size_t to, int normalized,
                        void (*span)(Tokenizer *, const char *, size_t, size_t, TokIds *),
                        TokIds *out) {
    for (size_t i = from; i < to && t->n_added; i++) {
        const int id = added_at(t, s, to, i, normalized);
        if (id < 0) continue;
        span(t, s, from, i, out);
        tok_ids_push(out, id);
        from = i + strlen(t->match[id]);
        i = from - 1;
    }
    span(t, s, from, to, out);
}

/* s[from, to), between the added tokens that are not normalized: normalized (NFC when the
 * tokenizer has it), then cut at those that are, as the library's added vocabulary does */
static void encode_normalized(Tokenizer *t, const char *s, size_t from, size_t to, TokIds *out) {
    size_t len;
    char *nfc = t->nfc && to > from ? tok_nfc(s + from, to - from, &len) : NULL;
    if (nfc) {
        split_added(t, nfc, 0, len, 1, encode_span, out);
        free(nfc);
    } else {
        split_added(t, s, from, to, 1, encode_span, out);
    }
}

void tok_encode(Tokenizer *t, const char *text, size_t n, TokIds *out) {
    char *s = (char *)malloc_check(3 * n + 1);
    n = utf8_lossy(text, n, s);
    split_added(t, s, 0, n, 0, encode_normalized, out);
    free(s);
}

const char *tok_decode_id(const Tokenizer *t, long id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || !t->token[id]) return NULL;
    *len = t->n_bytes[id];
    return t->bytes[id];
}
