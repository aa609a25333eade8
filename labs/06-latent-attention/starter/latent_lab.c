/*
 * latent_lab.c: your solution to lab 06, multi-head latent attention
 * (assignment: labs/06-latent-attention/README.md).
 *
 *   task 1: the latent, its norm, and every head's key and value from it
 *   task 2: a head's query taken into the latent space (q_nope Wuk_h)
 *   task 3: that head's scores against cached [latent | rotated key] rows
 *   task 4: a cache's size for MHA, GQA and MLA
 *
 * Each function below is a stub: it fills its outputs with NaN and calls lab_todo(), which
 * makes the grader report the task as not implemented. Replace the whole body of a function
 * (the lab_todo() call included) with your code, then grade it:
 *   make -C labs grade LAB=06-latent-attention                                every task
 *   make -C labs grade LAB=06-latent-attention TASK=task1_latent_kv           one task
 * Row-major arrays: element (n, c) of an (N, C) array is at [n * C + c]. Helper functions of
 * your own should be `static`. The dimensions are in d: d->C, d->H, d->kv_rank (KR),
 * d->nope_dim (NOPE), d->rope_dim (R), d->v_dim (DV); a head's key has D = NOPE + R channels.
 */
#include "latent_lab.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

void lab_latent_kv_forward(float *latn, float *k, float *v, const float *x, const float *krope,
                           const float *Wkv_a, const float *g, const float *Wkv_b,
                           const LabMlaDims *d, int N) {
    /* TODO task 1: for each token n,
     *   lat[r]   = sum_c x[n,c] * Wkv_a[r,c]                          (KR numbers)
     *   latn[n,r] = lat[r] * rstd * g[r],  rstd = 1 / sqrt(mean of lat^2 + LAB_RMSNORM_EPS)
     *   kvb[j]   = sum_r latn[n,r] * Wkv_b[j,r]                       (H * (NOPE + DV) numbers)
     * then head h's NOPE + DV numbers of kvb, starting at h * (NOPE + DV), are its key part and
     * its value: k[n,h,:] = [those NOPE numbers | krope[n,:]] (D = NOPE + R), v[n,h,:] = the DV.
     * lat and kvb are scratch: malloc them, free them. */
    const int H = d->H, D = d->nope_dim + d->rope_dim;
    for (size_t i = 0; i < (size_t)N * d->kv_rank; i++) latn[i] = NAN;
    for (size_t i = 0; i < (size_t)N * H * D; i++) k[i] = NAN;
    for (size_t i = 0; i < (size_t)N * H * d->v_dim; i++) v[i] = NAN;
    lab_todo(1, "lab_latent_kv_forward");
}

void lab_absorb_query(float *q_lat, const float *q_nope, const float *Wkv_b, int h,
                      const LabMlaDims *d) {
    /* TODO task 2: head h's key rows of Wkv_b begin at row h * (NOPE + DV); call them Wuk,
     * (NOPE, KR). Then
     *   q_lat[r] = sum_i q_nope[i] * Wuk[i,r]          for r < KR
     * (a product with Wuk, not Wuk^T: the sum runs over the NOPE rows). */
    for (int r = 0; r < d->kv_rank; r++) q_lat[r] = NAN;
    lab_todo(2, "lab_absorb_query");
}

void lab_absorbed_scores(float *scores, const float *q_lat, const float *q_rope, const float *cache,
                         int Tc, const LabMlaDims *d) {
    /* TODO task 3: row t of cache holds KR + R numbers, [latn_t | krope_t]. For each t,
     *   scores[t] = (sum_r q_lat[r] * latn_t[r] + sum_i q_rope[i] * krope_t[i]) * scale
     * with the scale of the head's full key: 1 / sqrt(NOPE + R) (README.md, task 3, says why). */
    for (int t = 0; t < Tc; t++) scores[t] = NAN;
    lab_todo(3, "lab_absorbed_scores");
}

long long lab_cache_floats(const LabCacheShape *s) {
    /* TODO task 4: the numbers cached for one token in one layer:
     *   LAB_ATTN_MHA: a key and a value of head_dim for each of the n_head heads
     *   LAB_ATTN_GQA: the same for each of the kv_heads key-value heads
     *   LAB_ATTN_MLA: the latent (kv_rank) and the shared rotated key (rope_dim), nothing more */
    lab_todo(4, "lab_cache_floats");
    return -1;
}

long long lab_cache_bytes(const LabCacheShape *s, int n_layer, long long tokens, int elem_bytes) {
    /* TODO task 4: lab_cache_floats(s) for every layer and token, elem_bytes each. The grader
     * asks for caches of hundreds of GB: multiply in 64 bits (long long), not int. */
    lab_todo(4, "lab_cache_bytes");
    return -1;
}
