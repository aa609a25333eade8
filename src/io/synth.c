/*
 * synth.c: a synthetic multi-domain shard with a known structure (see data.h).
 *
 * Domain d is a first-order Markov chain over its own 32 bytes, symbol i of domain d being
 * byte (65 + 32 d + i) mod 256: domain 0 is 'A'..'`', domain 1 'a'..0x80, and so on; the eight
 * possible slices are disjoint and together cover all 256 bytes. Each symbol has three likely
 * successors (probabilities 0.60, 0.25, 0.10) and spreads the remaining 0.05 evenly over the
 * domain's 32 symbols, so every transition is possible but the chain is far from uniform:
 * a model that recognises the domain from context can predict much better than one that
 * does not, which is what an expert router should discover.
 *
 * At a vocabulary V other than the bytes' 256 (at least 256), byte b's symbol is id
 * floor(b V / 256): the same chains, their ids spread over the whole vocabulary (the widest
 * near V - 1), so a shard of V ids exercises the embedding's far rows and wide stored ids.
 *
 * Documents of doc_len tokens (the last one shorter if needed) go to the domains round-robin.
 * The transition tables come from Rngs seeded by (seed, d); the token stream from an Rng
 * seeded by stream_seed, so the whole file is a function of the arguments.
 */
#include "io/data.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define SYN_SYMBOLS 32

static int symbol(int d, int i, int vocab) {
    const uint64_t byte = (uint64_t)((65 + SYN_SYMBOLS * d + i) & 255);
    return (int)(byte * (uint64_t)vocab / 256);
}

/* cdf (SYN_SYMBOLS, SYN_SYMBOLS): row i is the cumulative distribution of the successor of
 * symbol i in domain d. */
static void build_chain(double *cdf, int d, uint64_t seed) {
    static const double likely[3] = {0.60, 0.25, 0.10};
    Rng r;
    rng_seed(&r, seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(d + 1)));
    for (int i = 0; i < SYN_SYMBOLS; i++) {
        double p[SYN_SYMBOLS];
        for (int j = 0; j < SYN_SYMBOLS; j++) p[j] = 0.05 / SYN_SYMBOLS;
        int chosen[3];
        for (int k = 0; k < 3; k++) {
            int j, dup;
            do { /* three distinct successors */
                j = (int)rng_below(&r, SYN_SYMBOLS);
                dup = 0;
                for (int m = 0; m < k; m++) dup |= chosen[m] == j;
            } while (dup);
            chosen[k] = j;
            p[j] += likely[k];
        }
        double acc = 0.0;
        for (int j = 0; j < SYN_SYMBOLS; j++) cdf[i * SYN_SYMBOLS + j] = (acc += p[j]);
        cdf[i * SYN_SYMBOLS + SYN_SYMBOLS - 1] = 1.0; /* no rounding gap at the top */
    }
}

static int sample(const double *cdf_row, double u) {
    int j = 0;
    while (j < SYN_SYMBOLS - 1 && u >= cdf_row[j]) j++;
    return j;
}

int synth_write(const char *path, int n_domains, uint64_t n_tokens, int doc_len, int vocab,
                uint64_t seed, uint64_t stream_seed, char *err, int errlen) {
    if (vocab < 256 || (uint32_t)vocab > SHARD_MAX_VOCAB)
        return set_error(err, errlen, "synthetic data: a vocabulary of %d, must be 256..%u", vocab,
                         SHARD_MAX_VOCAB);
    if (n_domains < 1 || n_domains > SHARD_MAX_DOMAINS)
        return set_error(err, errlen, "synthetic data: %d domains requested, must be 1..%d",
                         n_domains, SHARD_MAX_DOMAINS);
    if (doc_len < 1 || n_tokens < 1)
        return set_error(err, errlen,
                         "synthetic data: need n_tokens >= 1 and doc_len >= 1 "
                         "(got %llu and %d)",
                         (unsigned long long)n_tokens, doc_len);
    uint64_t n_docs64 = (n_tokens + (uint64_t)doc_len - 1) / (uint64_t)doc_len;
    if (n_docs64 > UINT32_MAX)
        return set_error(err, errlen,
                         "synthetic data: %llu documents do not fit the shard format; "
                         "use a larger doc_len",
                         (unsigned long long)n_docs64);
    uint32_t n_docs = (uint32_t)n_docs64;

    double *cdf =
        (double *)malloc_check(sizeof(double) * (size_t)n_domains * SYN_SYMBOLS * SYN_SYMBOLS);
    for (int d = 0; d < n_domains; d++)
        build_chain(cdf + (size_t)d * SYN_SYMBOLS * SYN_SYMBOLS, d, seed);
    char names[SHARD_MAX_DOMAINS][SHARD_DOMAIN_NAME] = {{0}};
    for (int d = 0; d < n_domains; d++) snprintf(names[d], SHARD_DOMAIN_NAME, "syn%d", d);

    int *tokens = (int *)malloc_check(n_tokens * sizeof(int));
    ShardDoc *docs = (ShardDoc *)malloc_check(sizeof(ShardDoc) * n_docs);
    Rng r;
    rng_seed(&r, stream_seed);
    uint64_t pos = 0;
    for (uint32_t k = 0; k < n_docs; k++) {
        int d = (int)(k % (uint32_t)n_domains);
        uint64_t len = n_tokens - pos < (uint64_t)doc_len ? n_tokens - pos : (uint64_t)doc_len;
        docs[k] = (ShardDoc){.start = pos, .length = (uint32_t)len, .domain = (uint32_t)d};
        const double *table = cdf + (size_t)d * SYN_SYMBOLS * SYN_SYMBOLS;
        int cur = (int)rng_below(&r, SYN_SYMBOLS); /* first symbol uniform */
        for (uint64_t t = 0; t < len; t++) {
            tokens[pos + t] = symbol(d, cur, vocab);
            cur = sample(table + cur * SYN_SYMBOLS, (double)rng_uniform(&r));
        }
        pos += len;
    }
    int rc = shard_write(path, tokens, n_tokens, (uint32_t)vocab, 0, docs, n_docs,
                         (const char(*)[SHARD_DOMAIN_NAME])names, (uint32_t)n_domains, err, errlen);
    free(tokens);
    free(docs);
    free(cdf);
    return rc;
}
