/*
 * upcycle.c: a dense model's weights as the start of an MoE (sparse upcycling). See upcycle.h.
 *
 * Why copies work: with gate weights w_k that sum to 1 over the chosen experts, an MoE block
 * whose experts are all the dense SwiGLU computes sum_k w_k FFN(x) = FFN(x), so training
 * starts from the dense model's loss instead of from scratch. Identical experts receive
 * different gradients only through the router, so they separate slowly; noise and
 * drop-upcycling (re-drawing part of each expert's hidden units) break the symmetry at the
 * price of a higher starting loss. Fine-grained slices keep the active FLOPs of the dense
 * model: expert e holds F / G hidden units, and G evenly weighted slices sum back to the FFN:
 *   FFN(x) = W_down h(x) = sum_g W_down[:, slice g] h_g(x) = sum_g (1/G) (G W_down[:, g]) h_g(x).
 *
 * Every random draw comes from one Rng seeded from the options, consumed in parameter-table
 * order (router of a block, then its experts in order), so the result depends only on the
 * seed and the two configs.
 */
#include "convert/upcycle.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void upcycle_options_default(UpcycleOptions *o) {
    o->noise = 0.0f;
    o->drop_ratio = 0.0f;
    o->split = 1;
    o->router_std = 0.02f;
    o->seed = 1;
}

void upcycle_stats(float *mean, float *std, const float *w, size_t n) {
    /* two passes in double: the one-pass E[x^2] - E[x]^2 cancels badly when |mean| >> std */
    double s = 0.0, ss = 0.0;
    for (size_t i = 0; i < n; i++) s += w[i];
    double mu = n ? s / (double)n : 0.0;
    for (size_t i = 0; i < n; i++) ss += ((double)w[i] - mu) * ((double)w[i] - mu);
    *mean = (float)mu;
    *std = n ? (float)sqrt(ss / (double)n) : 0.0f;
}

void upcycle_drop_units(float *gate, float *up, float *down, int *units, int n_drop, int F, int C,
                        const float stats[6], Rng *rng) {
    /* gate, up (F, C); down (C, F); units (n_drop) or NULL.
     * Partial Fisher-Yates: after step i, perm[0..i] is a uniform draw of i + 1 distinct units,
     * so n_drop draws cost n_drop random numbers whatever F is. */
    int *perm = (int *)malloc_check((size_t)F * sizeof(int));
    for (int j = 0; j < F; j++) perm[j] = j;
    for (int i = 0; i < n_drop; i++) {
        int j = i + (int)rng_below(rng, (uint64_t)(F - i));
        int u = perm[j];
        perm[j] = perm[i];
        perm[i] = u;
        if (units) units[i] = u;
        /* a unit is one row of gate and up (its input weights) and one column of down (its
         * output weights): re-drawing all three forgets the unit entirely */
        for (int c = 0; c < C; c++) gate[(size_t)u * C + c] = stats[0] + stats[1] * rng_normal(rng);
        for (int c = 0; c < C; c++) up[(size_t)u * C + c] = stats[2] + stats[3] * rng_normal(rng);
        for (int c = 0; c < C; c++) down[(size_t)c * F + u] = stats[4] + stats[5] * rng_normal(rng);
    }
    free(perm);
}

static void add_noise(float *w, size_t n, float std, Rng *rng) {
    for (size_t i = 0; i < n; i++) w[i] += std * rng_normal(rng);
}

void upcycle_ffn(float *e_gate, float *e_up, float *e_down, const float *w_gate, const float *w_up,
                 const float *w_down, int E, int F, int C, const UpcycleOptions *o, Rng *rng) {
    /* e_gate, e_up (E, Fe, C); e_down (E, C, Fe); w_gate, w_up (F, C); w_down (C, F) */
    const int G = o->split, Fe = F / G;
    const size_t per = (size_t)Fe * C; /* floats in one expert matrix */
    /* stats[0..5]: mean, std of gate, up, down, over the whole dense matrix. An expert's down
     * slice is the dense slice times G, so its values have mean and std G times those of
     * W_down: noise and re-drawn units use the scaled statistics, so that they stay relative
     * to the values they sit among (and a re-drawn unit is as large as a copied one). */
    float stats[6];
    upcycle_stats(&stats[0], &stats[1], w_gate, (size_t)F * C);
    upcycle_stats(&stats[2], &stats[3], w_up, (size_t)F * C);
    upcycle_stats(&stats[4], &stats[5], w_down, (size_t)C * F);
    stats[4] *= (float)G;
    stats[5] *= (float)G;
    const int n_drop = (int)lroundf(o->drop_ratio * (float)Fe);

    for (int e = 0; e < E; e++) {
        const int g = e % G; /* slice: dense hidden units [g Fe, (g + 1) Fe) */
        float *eg = e_gate + (size_t)e * per, *eu = e_up + (size_t)e * per;
        float *ed = e_down + (size_t)e * per;
        /* rows of gate and up are hidden units: the slice is Fe contiguous rows */
        memcpy(eg, w_gate + (size_t)g * per, per * sizeof(float));
        memcpy(eu, w_up + (size_t)g * per, per * sizeof(float));
        /* columns of down are hidden units: row c of the slice is w_down[c, g Fe .. + Fe) */
        for (int c = 0; c < C; c++) {
            const float *src = w_down + (size_t)c * F + (size_t)g * Fe;
            float *dst = ed + (size_t)c * Fe;
            for (int j = 0; j < Fe; j++) dst[j] = (float)G * src[j];
        }
        if (o->noise > 0.0f) {
            add_noise(eg, per, o->noise * stats[1], rng);
            add_noise(eu, per, o->noise * stats[3], rng);
            add_noise(ed, per, o->noise * stats[5], rng);
        }
        if (n_drop > 0) upcycle_drop_units(eg, eu, ed, NULL, n_drop, Fe, C, stats, rng);
    }
}

/* The settings of the model's shape, which the MoE keeps from the dense model (int fields). */
static const struct {
    const char *key;
    size_t off;
} shape[] = {{"model.d_model", offsetof(Config, d_model)},
             {"model.n_layer", offsetof(Config, n_layer)},
             {"model.n_head", offsetof(Config, n_head)},
             {"model.d_ff", offsetof(Config, d_ff)},
             {"model.tied", offsetof(Config, tied)},
             {"model.mtp_depth", offsetof(Config, mtp_depth)}};

int upcycle_check(const Config *dense, const Config *moe, const UpcycleOptions *o, char *err,
                  int errlen) {
    /* !(x >= 0) also refuses NaN */
    if (!(o->noise >= 0.0f))
        return set_error(err, errlen,
                         "upcycling noise=%g is negative; use noise >= 0 (0 = exact "
                         "copies, 0.01 to 0.1 for a little symmetry breaking)",
                         o->noise);
    if (!(o->drop_ratio >= 0.0f && o->drop_ratio <= 1.0f))
        return set_error(err, errlen,
                         "upcycling drop_ratio=%g is outside [0, 1]: it is the "
                         "fraction of each expert's hidden units re-drawn; use e.g. 0.5",
                         o->drop_ratio);
    if (!(o->router_std >= 0.0f))
        return set_error(err, errlen,
                         "upcycling router_std=%g is negative; use router_std >= 0 "
                         "(0 = a zero router, e.g. 0.02)",
                         o->router_std);
    if (o->split < 1)
        return set_error(err, errlen,
                         "upcycling split=%d: use split >= 1 (1 = whole copies of "
                         "the dense FFN, G > 1 = fine-grained slices)",
                         o->split);
    if (dense->num_experts != 0)
        return set_error(err, errlen,
                         "the checkpoint is already an MoE (moe.num_experts=%d): "
                         "upcycling starts from a dense model (moe.num_experts=0)",
                         dense->num_experts);
    if (moe->num_experts < 1)
        return set_error(err, errlen,
                         "the target config is dense (moe.num_experts=%d): set "
                         "moe.num_experts to the experts wanted, e.g. moe.num_experts=8",
                         moe->num_experts);
    if (moe->num_shared != 0)
        return set_error(err, errlen,
                         "moe.num_shared=%d: upcycling makes routed experts only; "
                         "set moe.num_shared=0",
                         moe->num_shared);
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        int a = *(const int *)((const char *)dense + shape[i].off);
        int b = *(const int *)((const char *)moe + shape[i].off);
        if (a != b)
            return set_error(err, errlen,
                             "%s differs: the dense model has %s=%d, the MoE config "
                             "%s=%d; set %s=%d in the MoE config (upcycling keeps the model's "
                             "shape)",
                             shape[i].key, shape[i].key, a, shape[i].key, b, shape[i].key, a);
    }
    const int F = dense->d_ff, G = o->split;
    if (F % G != 0)
        return set_error(err, errlen,
                         "upcycling split=%d does not divide model.d_ff=%d; choose a "
                         "split that divides it",
                         G, F);
    if (moe->num_experts % G != 0)
        return set_error(err, errlen,
                         "moe.num_experts=%d is not a multiple of split=%d: every "
                         "slice needs the same number of experts; use moe.num_experts=%d",
                         moe->num_experts, G, (moe->num_experts / G + 1) * G);
    const int Fe = config_expert_hidden(moe);
    if (Fe != F / G && G == 1 && F % Fe == 0)
        return set_error(err, errlen,
                         "moe.d_expert=%d, but whole copies of the dense FFN have model.d_ff=%d "
                         "hidden units: set moe.d_expert=0 (experts of d_ff), or split=%d to cut "
                         "the dense FFN into %d slices of %d",
                         moe->d_expert, F, F / Fe, F / Fe, Fe);
    if (Fe != F / G)
        return set_error(err, errlen,
                         "moe.d_expert=%d gives experts of %d hidden units, but split=%d cuts "
                         "model.d_ff=%d into slices of d_ff / split = %d: set moe.d_expert=%d%s",
                         moe->d_expert, Fe, G, F, F / G, F / G, G == 1 ? " (or 0)" : "");
    return 0;
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

int upcycle_model(Model *dst, const Model *src, const UpcycleOptions *o, char *err, int errlen) {
    if (upcycle_check(&src->cfg, &dst->cfg, o, err, errlen)) return -1;
    const int C = dst->cfg.d_model, F = src->cfg.d_ff, E = dst->cfg.num_experts;
    Rng rng;
    rng_seed(&rng, o->seed);
    for (int i = 0; i < dst->pt.n; i++) {
        const ParamTensor *t = &dst->pt.t[i];
        float *p = dst->params + t->offset;
        int j = params_find(&src->pt, t->name);
        if (j >= 0 && src->pt.t[j].numel == t->numel) {
            memcpy(p, src->params + src->pt.t[j].offset, t->numel * sizeof(float));
        } else if (j < 0 && has_suffix(t->name, ".moe.router")) {
            /* a small random router makes the first routing decisions differ by token;
             * zeros route every token to the same tie-broken experts */
            for (size_t k = 0; k < t->numel; k++)
                p[k] = o->router_std > 0.0f ? o->router_std * rng_normal(&rng) : 0.0f;
        } else if (j < 0 && has_suffix(t->name, ".moe.w_gate")) {
            /* the three expert tensors are made together, from the same block's dense FFN */
            const LayerView *dl = &dst->w.layers[t->layer], *sl = &src->w.layers[t->layer];
            upcycle_ffn(dl->e_gate, dl->e_up, dl->e_down, sl->w_gate, sl->w_up, sl->w_down, E, F, C,
                        o, &rng);
        } else if (j < 0 &&
                   (has_suffix(t->name, ".moe.w_up") || has_suffix(t->name, ".moe.w_down"))) {
            continue; /* written with moe.w_gate above */
        } else {
            return set_error(err, errlen,
                             "tensor %s of the MoE model has no counterpart in the "
                             "dense model; upcycle from a dense model of the same model.* shape",
                             t->name);
        }
    }
    /* a fresh optimizer: the dense run's moments belong to other tensors and another loss */
    memset(dst->m, 0, dst->pt.total * sizeof(float));
    memset(dst->v, 0, dst->pt.total * sizeof(float));
    memset(dst->grads, 0, dst->pt.total * sizeof(float));
    if (dst->router_bias) memset(dst->router_bias, 0, (size_t)dst->n_moe * E * sizeof(float));
    dst->step = 0;
    return 0;
}
