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

/* inputs/targets (T), domains (T): one window starting at token `start`. */
static void fill_window(const Shard *s, uint64_t start, int T, int *inputs, int *targets,
                        uint8_t *domains) {
    const uint8_t *w = s->tokens + start;
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
    l->shard = s;
    l->B = B;
    l->T = T;
    rng_seed(&l->rng, seed);
}

void loader_next(Loader *l, int *inputs, int *targets, uint8_t *domains) {
    const Shard *s = l->shard;
    uint64_t n_starts = s->n_tokens - (uint64_t)l->T;
    for (int b = 0; b < l->B; b++) {
        uint64_t start = rng_below(&l->rng, n_starts);
        size_t row = (size_t)b * (size_t)l->T;
        fill_window(s, start, l->T, inputs + row, targets + row, domains + row);
    }
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
