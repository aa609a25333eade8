/*
 * train.c: byte-level BPE trained on text (tok.h, tok_train).
 *
 * The text is cut into pieces by the split pattern and the distinct pieces counted (words);
 * the vocabulary starts with the 256 bytes, id = the byte; then, until the vocabulary has the
 * size asked for, the most frequent adjacent pair of tokens over all words (each word's pairs
 * counted as often as the word occurs) becomes a new token. Ties go to the pair of smaller ids,
 * (left, then right): the same text gives the same file, and the pair of older tokens wins.
 *
 * Incremental: each pair keeps its count and the words it occurs in; a merge rewrites only
 * those words, and only the pairs of the words it rewrote change. The largest count is found
 * in a heap whose entries may be stale: a count only ever falls (a merged pair's occurrences
 * are gone, and a new pair holds the newest token), so an entry that is out of date is pushed
 * back with its true count and the next one looked at.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tok/tok.h"
#include "tok/unicode.h"

typedef struct {
    int *sym; /* (n) the word's tokens */
    int n;
    int64_t count; /* how often the word occurs */
    int seen;      /* the last merge that rewrote it */
} Word;

typedef struct {
    int64_t count;
    int a, b;
    int *words; /* (n_words) the words it occurs in (perhaps no longer; perhaps twice) */
    int n_words, cap;
    int pushed; /* the last merge that queued it as new */
} Pair;

typedef struct {
    int64_t count;
    int pair;
} Entry;

struct TokTrainer {
    TokPattern pattern;
    uint64_t bytes; /* the text counted so far */
    Word *w;
    int n_w, cap_w;
    StrMap index; /* a piece's bytes -> its word */
    Pair *p;
    int n_p, cap_p;
    PairMap pairs; /* (a, b) -> index into p */
    Entry *heap;
    int n_heap, cap_heap;
    int *fresh; /* (n_fresh) the new pairs of the merge under way */
    int n_fresh, cap_fresh;
};

TokTrainer *tok_trainer_new(TokPattern pattern) {
    TokTrainer *tr = (TokTrainer *)calloc_check(1, sizeof *tr);
    tr->pattern = pattern;
    return tr;
}

void tok_trainer_free(TokTrainer *tr) {
    for (int w = 0; w < tr->n_w; w++) free(tr->w[w].sym);
    for (int k = 0; k < tr->n_p; k++) free(tr->p[k].words);
    free(tr->w), free(tr->p), free(tr->heap), free(tr->fresh);
    strmap_free(&tr->index);
    pairmap_free(&tr->pairs);
    free(tr);
}

/* the word of a piece, counted once more */
static void count_piece(TokTrainer *tr, const char *s, size_t n) {
    int fresh;
    const int *w = strmap_put(&tr->index, s, n, tr->n_w, &fresh);
    if (!fresh) {
        tr->w[*w].count++;
        return;
    }
    if (tr->n_w == tr->cap_w) {
        tr->cap_w = tr->cap_w ? 2 * tr->cap_w : 1024;
        tr->w = (Word *)realloc_check(tr->w, (size_t)tr->cap_w * sizeof *tr->w);
    }
    Word *x = &tr->w[tr->n_w++];
    x->sym = (int *)malloc_check(n * sizeof *x->sym);
    for (size_t i = 0; i < n; i++) x->sym[i] = (uint8_t)s[i];
    x->n = (int)n, x->count = 1, x->seen = -1;
}

void tok_trainer_count(TokTrainer *tr, const char *text, size_t n) {
    char *s = (char *)malloc_check(3 * n + 1);
    n = utf8_lossy(text, n, s);
    for (size_t i = 0; i < n;) {
        const size_t end = tok_piece_end(tr->pattern, s, n, i);
        count_piece(tr, s + i, end - i);
        i = end;
    }
    free(s);
    tr->bytes += n;
}

/* heap order: the larger count first, then the smaller pair */
static int above(const TokTrainer *tr, Entry x, Entry y) {
    if (x.count != y.count) return x.count > y.count;
    const Pair *p = &tr->p[x.pair], *q = &tr->p[y.pair];
    return p->a != q->a ? p->a < q->a : p->b < q->b;
}

static void push(TokTrainer *tr, Entry x) {
    if (tr->n_heap == tr->cap_heap) {
        tr->cap_heap = tr->cap_heap ? 2 * tr->cap_heap : 1024;
        tr->heap = (Entry *)realloc_check(tr->heap, (size_t)tr->cap_heap * sizeof *tr->heap);
    }
    int i = tr->n_heap++;
    while (i > 0 && above(tr, x, tr->heap[(i - 1) / 2]))
        tr->heap[i] = tr->heap[(i - 1) / 2], i = (i - 1) / 2;
    tr->heap[i] = x;
}

static Entry pop(TokTrainer *tr) {
    const Entry top = tr->heap[0], last = tr->heap[--tr->n_heap];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= tr->n_heap) break;
        if (c + 1 < tr->n_heap && above(tr, tr->heap[c + 1], tr->heap[c])) c++;
        if (!above(tr, tr->heap[c], last)) break;
        tr->heap[i] = tr->heap[c], i = c;
    }
    if (tr->n_heap) tr->heap[i] = last;
    return top;
}

/* the index of the pair (a, b), made when new */
static int pair_of(TokTrainer *tr, int a, int b) {
    int fresh;
    const int *k = pairmap_put(&tr->pairs, (uint32_t)a, (uint32_t)b, tr->n_p, &fresh);
    if (!fresh) return *k;
    if (tr->n_p == tr->cap_p) {
        tr->cap_p = tr->cap_p ? 2 * tr->cap_p : 4096;
        tr->p = (Pair *)realloc_check(tr->p, (size_t)tr->cap_p * sizeof *tr->p);
    }
    tr->p[tr->n_p] = (Pair){0, a, b, NULL, 0, 0, -1};
    return tr->n_p++;
}

/* every adjacent pair of word w counted (sign +1) or taken back (-1); with token m >= 0, the
 * pairs that hold m note w among their words and are new pairs of merge step (m < 0: all of
 * them note w, the first count) */
static void count_word(TokTrainer *tr, int w, int sign, int m, int step) {
    const Word *x = &tr->w[w];
    for (int i = 0; i + 1 < x->n; i++) {
        const int k = pair_of(tr, x->sym[i], x->sym[i + 1]);
        Pair *p = &tr->p[k];
        p->count += sign * x->count;
        if (sign < 0 || (m >= 0 && p->a != m && p->b != m)) continue;
        if (!p->n_words || p->words[p->n_words - 1] != w) {
            if (p->n_words == p->cap) {
                p->cap = p->cap ? 2 * p->cap : 4;
                p->words = (int *)realloc_check(p->words, (size_t)p->cap * sizeof *p->words);
            }
            p->words[p->n_words++] = w;
        }
        if (m >= 0 && p->pushed != step) {
            p->pushed = step;
            if (tr->n_fresh == tr->cap_fresh) {
                tr->cap_fresh = tr->cap_fresh ? 2 * tr->cap_fresh : 1024;
                tr->fresh =
                    (int *)realloc_check(tr->fresh, (size_t)tr->cap_fresh * sizeof *tr->fresh);
            }
            tr->fresh[tr->n_fresh++] = k;
        }
    }
}

/* every (a, b) of word w as the token m, left to right */
static void rewrite(TokTrainer *tr, int w, int a, int b, int m, int step) {
    Word *x = &tr->w[w];
    count_word(tr, w, -1, m, step);
    int o = 0;
    for (int i = 0; i < x->n; i++)
        if (i + 1 < x->n && x->sym[i] == a && x->sym[i + 1] == b)
            x->sym[o++] = m, i++;
        else
            x->sym[o++] = x->sym[i];
    x->n = o;
    count_word(tr, w, +1, m, step);
}

/* the merge of pair k into the token m: its words rewritten, the new pairs queued */
static void merge(TokTrainer *tr, int k, int m, int step) {
    const int a = tr->p[k].a, b = tr->p[k].b;
    tr->n_fresh = 0;
    for (int j = 0; j < tr->p[k].n_words; j++) {
        const int w = tr->p[k].words[j];
        if (tr->w[w].seen == step) continue;
        tr->w[w].seen = step;
        rewrite(tr, w, a, b, m, step);
    }
    for (int j = 0; j < tr->n_fresh; j++)
        if (tr->p[tr->fresh[j]].count > 0)
            push(tr, (Entry){tr->p[tr->fresh[j]].count, tr->fresh[j]});
}

/* the token of a + b: a new id, or the one that already has that text (two merges may make
 * the same text: "ab"+"c" and "a"+"bc") */
static int merged_token(Tokenizer *t, int a, int b) {
    const size_t la = strlen(t->token[a]), lb = strlen(t->token[b]);
    char *s = (char *)malloc_check(la + lb + 1);
    memcpy(s, t->token[a], la);
    memcpy(s + la, t->token[b], lb + 1);
    int id = tok_lookup(t, s, la + lb);
    if (id < 0) {
        char err[200];
        id = t->n_vocab;
        if (tok_set_token(t, id, s, TOK_MODEL, err, sizeof err)) moe_fatal("%s", err);
    }
    free(s);
    return id;
}

int tok_trainer_run(TokTrainer *tr, Tokenizer *t, int vocab) {
    char err[200];
    tok_init(t, tr->pattern);
    for (int b = 0; b < 256; b++) { /* id = the byte */
        char c[5];
        c[utf8_put(tok_byte_char((uint8_t)b), c)] = '\0';
        if (tok_set_token(t, b, c, TOK_MODEL, err, sizeof err)) moe_fatal("%s", err);
    }
    for (int w = 0; w < tr->n_w; w++) count_word(tr, w, +1, -1, -1);
    for (int k = 0; k < tr->n_p; k++)
        if (tr->p[k].count > 0) push(tr, (Entry){tr->p[k].count, k});
    int step = 0;
    while (t->n_vocab < vocab && tr->n_heap) {
        const Entry e = pop(tr);
        const int64_t now = tr->p[e.pair].count;
        if (now != e.count) { /* stale: its count has fallen since */
            if (now > 0) push(tr, (Entry){now, e.pair});
            continue;
        }
        const int a = tr->p[e.pair].a, b = tr->p[e.pair].b, m = merged_token(t, a, b);
        tok_add_merge_ids(t, a, b, m);
        merge(tr, e.pair, m, step++);
    }
    if (tok_finish(t, err, sizeof err)) moe_fatal("%s", err);
    return step;
}
