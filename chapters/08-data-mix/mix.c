/*
 * Chapter 8, mix.c: how the training windows are drawn for a domain mix.
 *
 *   make chapters && build/chapters/08-data-mix/mix [SHARD] [MIX]...
 *       each domain of SHARD (default data/corpus/train.bin): its tokens and window starts;
 *       then for the natural mix, uniform, temperatures 2 and 5 and each MIX given (data.mix's
 *       syntax, e.g. ru:0.2 or code:0): the shares it asks for, the shares of 60,000 windows
 *       the engine's loader draws with it, and how many times a run of 600 steps of 16 x 128
 *       tokens would read each domain's tokens (its epochs: above 1, it repeats)
 *   build/chapters/08-data-mix/mix --skew FRACTIONS IN OUT
 *       OUT: the shard IN keeping each domain's documents with the probability FRACTIONS gives
 *       it (name:fraction,..., the others kept whole), decided by a fixed hash of the document:
 *       a corpus whose domains are as uneven as real data (chapters/08-data-mix/ablate.sh)
 *
 * Every function it calls is the engine's: shard_load, shard_domain_starts and the loader
 * (src/io/data.h), mix_parse and mix_resolve (src/io/mix.h), all of them declared by src/moe.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"

enum { T = 128, B = 16, STEPS = 600, DRAWN = 60000 };

static void show(const Shard *s, const uint64_t *size, const char *label, const MixSpec *m,
                 double temperature) {
    double share[SHARD_MAX_DOMAINS];
    char err[512];
    if (mix_resolve(m, temperature, s, size, share, err, sizeof err)) moe_input_error("%s", err);
    Loader l;
    loader_init(&l, s, DRAWN / 100, T, 1234);
    loader_set_mix(&l, share, NULL, 0);
    int *in = (int *)malloc_check(sizeof(int) * (DRAWN / 100) * T);
    int *tg = (int *)malloc_check(sizeof(int) * (DRAWN / 100) * T);
    uint8_t *dm = (uint8_t *)malloc_check((size_t)(DRAWN / 100) * T);
    for (int i = 0; i < 100; i++) loader_next(&l, in, tg, dm);
    uint64_t drawn[SHARD_MAX_DOMAINS];
    loader_take_drawn(&l, drawn);
    printf("\n%s\n  %-6s %8s %8s %8s\n", label, "domain", "asked", "drawn", "epochs");
    for (uint32_t d = 0; d < s->n_domains; d++)
        printf("  %-6s %8.4f %8.4f %8.2f\n", s->domain[d], share[d], (double)drawn[d] / DRAWN,
               size[d] ? share[d] * STEPS * B * T / (double)size[d] : 0.0);
    free(in), free(tg), free(dm);
    loader_free(&l);
}

/* --skew: keep document i of domain d when a hash of i falls below the domain's fraction. */
static int skew(const char *fractions, const char *in, const char *out) {
    Shard s;
    char err[1024];
    if (shard_load(&s, in, err, sizeof err)) moe_input_error("%s", err);
    MixSpec m;
    if (mix_parse(fractions, &m, err, sizeof err) || m.kind != MIX_WEIGHTS)
        moe_input_error("--skew: %s (name:fraction,...)", err[0] ? err : fractions);
    double keep[SHARD_MAX_DOMAINS];
    for (uint32_t d = 0; d < s.n_domains; d++) keep[d] = 1.0;
    for (int i = 0; i < m.n; i++) {
        uint32_t d = 0;
        while (d < s.n_domains && strcmp(s.domain[d], m.name[i])) d++;
        if (d == s.n_domains) moe_input_error("--skew: %s has no domain '%s'", in, m.name[i]);
        if (m.weight[i] > 1) moe_input_error("--skew: a fraction above 1 for '%s'", m.name[i]);
        keep[d] = m.weight[i];
    }
    int *tokens = (int *)malloc_check(s.n_tokens * sizeof(int));
    ShardDoc *docs = (ShardDoc *)malloc_check(sizeof(ShardDoc) * s.n_docs);
    uint64_t n = 0;
    uint32_t nd = 0;
    for (uint32_t i = 0; i < s.n_docs; i++) {
        Rng r;
        rng_seed(&r, 0x736b6577u + i); /* the document's own fixed draw */
        if (rng_uniform(&r) >= keep[s.docs[i].domain]) continue;
        memcpy(tokens + n, s.tokens + s.docs[i].start, s.docs[i].length * sizeof(int));
        docs[nd] = (ShardDoc){n, s.docs[i].length, s.docs[i].domain};
        n += s.docs[i].length, nd++;
    }
    if (shard_write(out, tokens, n, s.vocab, s.tokenizer_crc32, docs, nd,
                    (const char(*)[SHARD_DOMAIN_NAME])s.domain, s.n_domains, err, sizeof err))
        moe_input_error("%s", err);
    printf("wrote %s: %u of %u documents, %llu tokens\n", out, nd, s.n_docs,
           (unsigned long long)n);
    free(tokens), free(docs);
    shard_free(&s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--skew") == 0) return skew(argv[2], argv[3], argv[4]);
    if (argc > 1 && argv[1][0] == '-') {
        fprintf(stderr, "usage: %s [SHARD] [MIX]... | --skew FRACTIONS IN OUT\n", argv[0]);
        return MOE_EXIT_INPUT;
    }
    const char *path = argc > 1 ? argv[1] : "data/corpus/train.bin";
    Shard s;
    char err[1024];
    if (shard_load(&s, path, err, sizeof err) || shard_check_window(&s, T, err, sizeof err))
        moe_input_error("%s", err);
    uint64_t size[SHARD_MAX_DOMAINS];
    shard_domain_starts(&s, T, size);
    printf("%s: %llu tokens in %u documents\n  %-6s %10s %10s\n", path,
           (unsigned long long)s.n_tokens, s.n_docs, "domain", "tokens", "starts");
    uint64_t tok[SHARD_MAX_DOMAINS] = {0};
    for (uint32_t i = 0; i < s.n_docs; i++) tok[s.docs[i].domain] += s.docs[i].length;
    for (uint32_t d = 0; d < s.n_domains; d++)
        printf("  %-6s %10llu %10llu\n", s.domain[d], (unsigned long long)tok[d],
               (unsigned long long)size[d]);
    MixSpec m;
    mix_parse("natural", &m, err, sizeof err);
    show(&s, size, "natural (data.mix=natural)", &m, 0.0);
    mix_parse("uniform", &m, err, sizeof err);
    show(&s, size, "uniform (data.mix=uniform)", &m, 0.0);
    mix_parse("natural", &m, err, sizeof err);
    show(&s, size, "temperature 2 (data.mix_temperature=2)", &m, 2.0);
    show(&s, size, "temperature 5 (data.mix_temperature=5)", &m, 5.0);
    for (int i = 2; i < argc; i++) {
        if (mix_parse(argv[i], &m, err, sizeof err)) moe_input_error("%s", err);
        char label[600];
        snprintf(label, sizeof label, "data.mix=%s", argv[i]);
        show(&s, size, label, &m, 0.0);
    }
    shard_free(&s);
    return 0;
}
