/*
 * loader.c: training and validation batches from a shard (see data.h).
 *
 * A window is T+1 consecutive tokens w[0..T]; the model reads inputs w[0..T-1] and predicts
 * targets w[1..T], so targets are the inputs shifted by one. A window starting at s needs
 * s + T <= n_tokens - 1, i.e. s in [0, n_tokens - T - 1]: there are n_tokens - T valid starts.
 * Windows may cross document boundaries (documents are short; the model learns the switch).
 *
 * Training starts are drawn from the loader's own Rng, one per row, so restoring that four-word
 * state restores the exact stream of batches. Validation starts are a fixed function of the
 * window index, spread evenly over the shard, so every evaluation sees the same tokens and
 * every domain.
 */
#include "io/data.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* inputs/targets (T), domains (T): one window starting at token `start`. */
static void fill_window(const Shard *s, uint64_t start, int T, int *inputs, int *targets,
                        uint8_t *domains) {
    const int *w = s->tokens + start;
    for (int t = 0; t < T; t++) {
        inputs[t] = w[t];
        targets[t] = w[t + 1];
        domains[t] = s->tok_domain[start + (uint64_t)t];
    }
}

int shard_check_window(const Shard *s, int T, char *err, int errlen) {
    if (s->n_tokens >= (uint64_t)T + 1) return 0;
    return set_error(err, errlen,
                     "%s holds %llu tokens, fewer than one window of model.seq_len + 1 = %llu; "
                     "use a larger shard or a smaller model.seq_len",
                     s->path, (unsigned long long)s->n_tokens, (unsigned long long)T + 1);
}

static void check_fits(const Shard *s, int T) {
    if (s->n_tokens <= (uint64_t)T)
        moe_fatal("shard '%s' has %llu tokens, too few for windows of %d + 1; the caller must "
                  "check n_tokens > T (use a shorter seq_len or a larger shard)",
                  s->path, (unsigned long long)s->n_tokens, T);
}

void loader_init(Loader *l, const Shard *s, int B, int T, uint64_t seed) {
    check_fits(s, T);
    memset(l, 0, sizeof *l);
    l->shard = s;
    l->B = B;
    l->T = T;
    l->seed = seed;
    rng_seed(&l->rng, seed);
}

void loader_free(Loader *l) {
    for (int d = 0; d < SHARD_MAX_DOMAINS; d++) free(l->run_first[d]), free(l->run_cum[d]);
    memset(l, 0, sizeof *l);
}

/* The runs of s: the maximal stretches of consecutive documents of one domain. A run of len
 * tokens holds len - T window starts whose T + 1 tokens stay inside it. Fills dom, first,
 * starts (each n_docs long at most) and returns the count. */
static uint32_t shard_runs(const Shard *s, int T, uint32_t *dom, uint64_t *first,
                           uint64_t *starts) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_docs; n++) {
        const uint32_t d = s->docs[i].domain;
        uint64_t len = 0;
        dom[n] = d;
        first[n] = s->docs[i].start;
        while (i < s->n_docs && s->docs[i].domain == d) len += s->docs[i++].length;
        starts[n] = len > (uint64_t)T ? len - (uint64_t)T : 0;
    }
    return n;
}

void shard_domain_starts(const Shard *s, int T, uint64_t *size) {
    uint32_t *dom = (uint32_t *)calloc_check(s->n_docs, sizeof *dom);
    uint64_t *first = (uint64_t *)calloc_check(s->n_docs, sizeof *first);
    uint64_t *starts = (uint64_t *)calloc_check(s->n_docs, sizeof *starts);
    for (uint32_t d = 0; d < s->n_domains; d++) size[d] = 0;
    const uint32_t n = shard_runs(s, T, dom, first, starts);
    for (uint32_t r = 0; r < n; r++) size[dom[r]] += starts[r];
    free(dom), free(first), free(starts);
}

void loader_set_mix(Loader *l, const double *share, const double *end_share, int end_step) {
    const Shard *s = l->shard;
    const int D = (int)s->n_domains;
    uint32_t *dom = (uint32_t *)calloc_check(s->n_docs, sizeof *dom);
    uint64_t *first = (uint64_t *)calloc_check(s->n_docs, sizeof *first);
    uint64_t *starts = (uint64_t *)calloc_check(s->n_docs, sizeof *starts);
    const uint32_t n = shard_runs(s, l->T, dom, first, starts);
    for (int d = 0; d < D; d++) { /* each domain's runs with a window, and the starts up to each */
        free(l->run_first[d]), free(l->run_cum[d]);
        l->run_first[d] = (uint64_t *)calloc_check(n, sizeof(uint64_t));
        l->run_cum[d] = (uint64_t *)calloc_check(n, sizeof(uint64_t));
        l->n_runs[d] = 0;
        l->size[d] = 0;
    }
    for (uint32_t r = 0; r < n; r++) {
        const uint32_t d = dom[r];
        if (!starts[r]) continue;
        const int k = l->n_runs[d]++;
        l->run_first[d][k] = first[r];
        l->run_cum[d][k] = l->size[d] += starts[r];
    }
    free(dom), free(first), free(starts);
    for (int phase = 0; phase < 2; phase++) {
        const double *sh = phase == 0 || !end_share ? share : end_share;
        double c = 0.0;
        for (int d = 0; d < D; d++) l->cum[phase][d] = c += sh[d];
    }
    l->end_step = end_share ? end_step : INT_MAX;
    l->mixed = 1;
}

void loader_set_step(Loader *l, int step, long long batch) {
    l->step = step;
    l->batch = batch;
}

void loader_corrupt(Loader *l, long long from, long long n, int vocab) {
    l->corrupt_from = from, l->corrupt_to = n > 0 ? from + n : from;
    l->vocab = vocab;
}

/* A corrupted window's token at place i of the shard: a hash of (i, seed), below vocab. */
static int corrupt_token(const Loader *l, uint64_t i) {
    uint64_t z = i * 0x9E3779B97F4A7C15ull + (l->seed ^ 0x2545F4914F6CDD1Dull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (int)((z ^ (z >> 31)) % (uint64_t)l->vocab);
}

void loader_take_drawn(Loader *l, uint64_t *drawn) {
    for (uint32_t d = 0; d < l->shard->n_domains; d++) drawn[d] = l->drawn[d], l->drawn[d] = 0;
}

/* A window start of domain d: the r-th start of its runs, r drawn uniformly. */
static uint64_t domain_start(Loader *l, int d) {
    const uint64_t r = rng_below(&l->rng, l->size[d]);
    int lo = 0, hi = l->n_runs[d] - 1; /* the first run whose cumulative starts exceed r */
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (l->run_cum[d][mid] > r)
            hi = mid;
        else
            lo = mid + 1;
    }
    return l->run_first[d][lo] + r - (lo ? l->run_cum[d][lo - 1] : 0);
}

/* The start of the next window: a domain by its share and a start inside it, or anywhere. */
static uint64_t draw_start(Loader *l) {
    const Shard *s = l->shard;
    if (!l->mixed) return rng_below(&l->rng, s->n_tokens - (uint64_t)l->T);
    const double *cum = l->cum[l->step >= l->end_step];
    const double u = rng_uniform(&l->rng);
    int d = 0;
    while (d + 1 < (int)s->n_domains && (u >= cum[d] || l->size[d] == 0)) d++;
    while (l->size[d] == 0) d--; /* rounding at the top end: the last domain drawn */
    return domain_start(l, d);
}

void loader_next(Loader *l, int *inputs, int *targets, uint8_t *domains) {
    const Shard *s = l->shard;
    const int corrupt = l->batch >= l->corrupt_from && l->batch < l->corrupt_to;
    for (int b = 0; b < l->B; b++) {
        const uint64_t start = draw_start(l);
        l->drawn[s->tok_domain[start]]++;
        size_t row = (size_t)b * (size_t)l->T;
        fill_window(s, start, l->T, inputs + row, targets + row, domains + row);
        for (int t = 0; corrupt && t < l->T; t++) {
            inputs[row + t] = corrupt_token(l, start + (uint64_t)t);
            targets[row + t] = corrupt_token(l, start + (uint64_t)t + 1);
        }
    }
}

void loader_skip(Loader *l, long long n) {
    for (long long i = 0; i < n; i++) (void)draw_start(l);
}

void loader_val_batch(const Shard *s, int B, int T, int batch_index, int n_batches, int *inputs,
                      int *targets, uint8_t *domains) {
    check_fits(s, T);
    uint64_t n_starts = s->n_tokens - (uint64_t)T;
    uint64_t m = (uint64_t)n_batches * (uint64_t)B;
    for (int b = 0; b < B; b++) {
        /* window i of m, evenly spaced over the valid starts [0, n_starts) */
        uint64_t i = (uint64_t)batch_index * (uint64_t)B + (uint64_t)b;
        uint64_t start = (uint64_t)((unsigned __int128)i * n_starts / m);
        size_t row = (size_t)b * (size_t)T;
        fill_window(s, start, T, inputs + row, targets + row, domains + row);
    }
}

int shard_domain_batch(const Shard *s, int T, int *inputs, int *targets, char *err, int errlen) {
    /* a document long enough for its row: T inputs, and the target after the last */
    const uint32_t need = (uint32_t)T + (targets != NULL);
    for (uint32_t d = 0; d < s->n_domains; d++) {
        uint32_t doc = 0;
        while (doc < s->n_docs && (s->docs[doc].domain != d || s->docs[doc].length < need)) doc++;
        if (doc == s->n_docs)
            return set_error(err, errlen,
                             "%s: domain %s has no document of %u tokens or more: use a shard "
                             "with longer documents in every domain (make data builds the corpus)",
                             s->path, s->domain[d], need);
        const int *w = s->tokens + s->docs[doc].start;
        for (int t = 0; t < T; t++) {
            inputs[(size_t)d * T + t] = w[t];
            if (targets) targets[(size_t)d * T + t] = w[t + 1];
        }
    }
    return 0;
}
