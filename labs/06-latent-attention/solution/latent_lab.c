/*
 * latent_lab.c: reference solution of lab 06 (README.md in this folder has the assignment).
 *
 *   keys and values:  lat = x Wkv_a^T,  latn = rmsnorm(lat) * g,  kvb = latn Wkv_b^T,
 *                     k = [head h's key part of kvb | krope],  v = head h's value part
 *   absorbed query:   q_lat = q_nope Wuk_h, so that q_lat . latn = q_nope . k_nope
 *   absorbed scores:  (q_lat . latn_t + q_rope . krope_t) / sqrt(nope_dim + rope_dim)
 *   cache size:       MHA 2 H Dh, GQA 2 Hkv Dh, MLA kv_rank + rope_dim floats a token and layer
 *
 * Plain serial loops: the point is the math. Sums are accumulated in double so the results
 * match the engine (src/nn/matmul.c, src/nn/rmsnorm.c, src/model/attn_block.c) to float32
 * round-off.
 */
#include "latent_lab.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static float *floats(size_t n) {
    float *a = malloc((n ? n : 1) * sizeof(float));
    if (!a) {
        fprintf(stderr, "latent_lab: out of memory\n");
        exit(1);
    }
    return a;
}

/* y (N, OUT) = x (N, IN) W^T, W (OUT, IN) */
static void linear(float *y, const float *x, const float *W, int N, int IN, int OUT) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double acc = 0.0;
            for (int i = 0; i < IN; i++)
                acc += (double)x[(size_t)n * IN + i] * W[(size_t)o * IN + i];
            y[(size_t)n * OUT + o] = (float)acc;
        }
}

/* ---- task 1 ---------------------------------------------------------------------------------- */

void lab_latent_kv_forward(float *latn, float *k, float *v, const float *x, const float *krope,
                           const float *Wkv_a, const float *g, const float *Wkv_b,
                           const LabMlaDims *d, int N) {
    /* latn (N, KR), k (N, H, D), v (N, H, DV) written; x (N, C), krope (N, R) */
    const int KR = d->kv_rank, NOPE = d->nope_dim, R = d->rope_dim, DV = d->v_dim, H = d->H;
    const int D = NOPE + R, KVB = NOPE + DV; /* a head's key; a head's share of kvb */
    float *lat = floats((size_t)N * KR), *kvb = floats((size_t)N * H * KVB);
    linear(lat, x, Wkv_a, N, d->C, KR);
    /* the latent's RMSNorm, with its own gain: it sets the scale of every head's key and value */
    for (int n = 0; n < N; n++) {
        const float *ln = lat + (size_t)n * KR;
        double ss = 0.0;
        for (int r = 0; r < KR; r++) ss += (double)ln[r] * ln[r];
        float rstd = (float)(1.0 / sqrt(ss / KR + (double)LAB_RMSNORM_EPS));
        for (int r = 0; r < KR; r++) latn[(size_t)n * KR + r] = ln[r] * rstd * g[r];
    }
    linear(kvb, latn, Wkv_b, N, KR, H * KVB);
    /* each head's KVB channels of kvb: its key part, then its value; the key's last R channels
     * are the one rotated key every head shares */
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const float *src = kvb + ((size_t)n * H + h) * KVB;
            float *kh = k + ((size_t)n * H + h) * D, *vh = v + ((size_t)n * H + h) * DV;
            for (int i = 0; i < NOPE; i++) kh[i] = src[i];
            for (int i = 0; i < R; i++) kh[NOPE + i] = krope[(size_t)n * R + i];
            for (int i = 0; i < DV; i++) vh[i] = src[NOPE + i];
        }
    free(lat);
    free(kvb);
}

/* ---- task 2 ---------------------------------------------------------------------------------- */

void lab_absorb_query(float *q_lat, const float *q_nope, const float *Wkv_b, int h,
                      const LabMlaDims *d) {
    /* q_lat (KR) written; q_nope (NOPE). Head h's key rows Wuk_h start at row h (NOPE + DV):
     * k_nope[i] = sum_r Wuk_h[i, r] latn[r], so q_nope . k_nope = sum_r (q_nope Wuk_h)[r] latn[r]
     */
    const int KR = d->kv_rank, NOPE = d->nope_dim, KVB = NOPE + d->v_dim;
    const float *Wuk = Wkv_b + (size_t)h * KVB * KR;
    for (int r = 0; r < KR; r++) {
        double acc = 0.0;
        for (int i = 0; i < NOPE; i++) acc += (double)q_nope[i] * Wuk[(size_t)i * KR + r];
        q_lat[r] = (float)acc;
    }
}

/* ---- task 3 ---------------------------------------------------------------------------------- */

void lab_absorbed_scores(float *scores, const float *q_lat, const float *q_rope, const float *cache,
                         int Tc, const LabMlaDims *d) {
    /* scores (Tc) written; q_lat (KR), q_rope (R), cache (Tc, KR + R).
     * The scale is the full key's, 1 / sqrt(NOPE + R): the score is the same q . k as without
     * the cache's trick, only summed in another order. */
    const int KR = d->kv_rank, R = d->rope_dim, W = KR + R;
    const double scale = 1.0 / sqrt((double)(d->nope_dim + R));
    for (int t = 0; t < Tc; t++) {
        const float *row = cache + (size_t)t * W;
        double acc = 0.0;
        for (int r = 0; r < KR; r++) acc += (double)q_lat[r] * row[r];
        for (int i = 0; i < R; i++) acc += (double)q_rope[i] * row[KR + i];
        scores[t] = (float)(acc * scale);
    }
}

/* ---- task 4 ---------------------------------------------------------------------------------- */

long long lab_cache_floats(const LabCacheShape *s) {
    switch (s->attention) {
    case LAB_ATTN_MHA: return 2LL * s->n_head * s->head_dim;       /* a key and a value a head */
    case LAB_ATTN_GQA: return 2LL * s->kv_heads * s->head_dim;     /* a key-value head a group */
    case LAB_ATTN_MLA: return (long long)s->kv_rank + s->rope_dim; /* the latent, the rope key */
    default: return 0;
    }
}

long long lab_cache_bytes(const LabCacheShape *s, int n_layer, long long tokens, int elem_bytes) {
    /* every factor in 64 bits: DeepSeek-V2's cache of 128k tokens is 9 GB */
    return lab_cache_floats(s) * (long long)n_layer * tokens * (long long)elem_bytes;
}
