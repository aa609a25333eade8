/*
 * attention.c: causal multi-head self-attention on already projected (and rotated) q, k, v:
 * the plain reference, loop by loop (the cpu-ref backend's). src/backend/cpu/attention_gemm.c
 * computes the same with matrix products (the cpu backend's) and is tested against this one.
 *
 * Layout: H query heads and Hkv key-value heads of D channels each. q and out are (B, T, H D),
 * k and v (B, T, Hkv D); head h owns channels [h D, (h + 1) D) of its rows. Query head h reads
 * key-value head g = h / (H / Hkv): Hkv = H is multi-head attention, Hkv = 1 multi-query,
 * anything between grouped-query attention (the H / Hkv heads of a group share one key and one
 * value). For one batch row b and head h, with s = 1 / sqrt(D):
 *
 *   score[t][j] = s * q_t . k_j                 for j <= t (a token sees only its past)
 *   p[t][j]     = softmax_j(score[t][j])        over j = 0..t
 *   out_t       = sum_{j<=t} p[t][j] v_j
 *
 * att (B, H, T, T) stores p, with zeros above the diagonal, for the backward pass.
 * The 1/sqrt(D) keeps the scores' variance near 1 whatever the head size, so the softmax
 * does not saturate at initialization.
 *
 * The forward's (b, h) pairs are independent, each writing its own slice of out and att. In
 * the backward the heads of a group add into the same dk and dv, so the OpenMP loop runs over
 * (b, g) and a group's heads go in order inside it: each sum is done by one thread in a fixed
 * order.
 *
 * Accumulation rule (ops.h): attention has no parameters; dq, dk, dv are written.
 */
#include "nn/ops.h"

#include <math.h>
#include "base/omp_compat.h"
#include <string.h>

#include "nn/attention_row.h"

/* One query of one head: ot (Dv) = sum_{j < n} p[j] v_j, p (Tp) = softmax_j(s q . k_j) over the
 * first n keys, 0 for the rest of the row (the causal mask). q is the head's D channels, ot its
 * Dv; k, v its first key and value, each next one KW and VW floats further. */
static void attend_row(float *ot, float *p, const float *q, const float *k, const float *v, int n,
                       int Tp, int KW, int VW, int D, int Dv, float scale) {
    /* the softmax row (attention_row.h): scores, less their max so exp() cannot overflow */
    const float max = att_row_scores(p, q, k, n, KW, D, scale, 0, 1);
    att_row_exp(p, n, max, 0, 1);
    att_row_normalise(p, n, Tp, 1.0f / att_row_sum(p, n, 0, 1), 0, 1);
    /* the values weighted by p, a value row at a time (each channel summed in key order) */
    for (int d = 0; d < Dv; d++) ot[d] = 0.0f;
    for (int j = 0; j < n; j++) {
        const float *vj = v + (size_t)j * VW;
        for (int d = 0; d < Dv; d++) ot[d] += p[j] * vj[d];
    }
}

void attention_forward(float *out, float *att, const float *q, const float *k, const float *v,
                       int B, int T, int H, int Hkv, int D, int Dv) {
    /* out (B, T, H Dv), att (B, H, T, T), q (B, T, H D), k (B, T, Hkv D), v (B, T, Hkv Dv) */
    const int QW = H * D, KW = Hkv * D, VW = Hkv * Dv, OW = H * Dv, group = H / Hkv;
    const float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            const size_t qh = (size_t)b * T * QW + (size_t)h * D;
            const size_t oh = (size_t)b * T * OW + (size_t)h * Dv;
            const size_t kh = (size_t)b * T * KW + (size_t)(h / group) * D;
            const size_t vh = (size_t)b * T * VW + (size_t)(h / group) * Dv;
            float *ab = att + ((size_t)b * H + h) * T * T;
            for (int t = 0; t < T; t++) /* row t sees keys 0 .. t */
                attend_row(out + oh + (size_t)t * OW, ab + (size_t)t * T, q + qh + (size_t)t * QW,
                           k + kh, v + vh, t + 1, T, KW, VW, D, Dv, scale);
        }
    }
}

/* Each query row against its sequence's cache: row n is sequence s's position t (rows[n] =
 * s Tc + t), attention_forward's row t, the keys and values read from the cache. */
void attention_decode(float *out, float *att, const float *q, const float *kc, const float *vc,
                      const int *rows, int N, int H, int Hkv, int D, int Dv, int Tc) {
    /* out (N, H Dv), att (N, H, Tc), q (N, H D), kc (S, Tc, Hkv D), vc (S, Tc, Hkv Dv) */
    const int QW = H * D, KW = Hkv * D, VW = Hkv * Dv, group = H / Hkv;
    const float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const int s = rows[n] / Tc, len = rows[n] % Tc + 1; /* positions 0 .. t */
            const size_t kh = (size_t)s * Tc * KW + (size_t)(h / group) * D;
            const size_t vh = (size_t)s * Tc * VW + (size_t)(h / group) * Dv;
            attend_row(out + (size_t)n * H * Dv + (size_t)h * Dv, att + ((size_t)n * H + h) * Tc,
                       q + (size_t)n * QW + (size_t)h * D, kc + kh, vc + vh, len, Tc, KW, VW, D, Dv,
                       scale);
        }
}

/* The shape of one backward: rows of q, k, v, out QW, KW, VW, OW floats; heads of D channels
 * (queries and keys) and Dv (values and outputs). */
typedef struct {
    int T, QW, KW, VW, OW, D, Dv;
    float scale;
} AttShape;

/* The backward of query head h of batch row b, its dq written, its dk and dv (those of its
 * key-value head) added to. qh, oh, kh, vh: the offsets of (b, t = 0, h) in q and out and of its
 * key-value head in k and v; ds (T) the thread's row of workspace. */
static void head_backward(float *dq, float *dk, float *dv, float *ds, const float *dout,
                          const float *ab, const float *q, const float *k, const float *v,
                          size_t qh, size_t oh, size_t kh, size_t vh, const AttShape *s) {
    const int T = s->T, QW = s->QW, KW = s->KW, VW = s->VW, OW = s->OW, D = s->D, Dv = s->Dv;
    const float scale = s->scale;
    const float *qb = q + qh, *kb = k + kh, *vb = v + vh, *gb = dout + oh;
    for (int t = 0; t < T; t++) {
        const float *p = ab + (size_t)t * T;
        const float *gt = gb + (size_t)t * OW;
        const float *qt = qb + (size_t)t * QW;
        if (dv) {
            for (int j = 0; j <= t; j++) {
                float *dvj = dv + vh + (size_t)j * VW;
                for (int d = 0; d < Dv; d++) dvj[d] += p[j] * gt[d];
            }
        }
        if (!dq && !dk) continue;
        for (int j = 0; j <= t; j++) { /* dp[t][j] */
            const float *vj = vb + (size_t)j * VW;
            float dp = 0.0f;
            for (int d = 0; d < Dv; d++) dp += gt[d] * vj[d];
            ds[j] = dp;
        }
        /* the softmax's Jacobian (attention_row.h), pdp = sum_i p[t][i] dp[t][i] */
        const float pdp = att_row_dot(p, ds, t + 1, 0, 1);
        att_row_jacobian(ds, p, t + 1, t + 1, pdp, scale, 0, 1);
        if (dq) {
            float *dqt = dq + qh + (size_t)t * QW;
            for (int d = 0; d < D; d++) dqt[d] = 0.0f;
            for (int j = 0; j <= t; j++) {
                const float *kj = kb + (size_t)j * KW;
                for (int d = 0; d < D; d++) dqt[d] += ds[j] * kj[d];
            }
        }
        if (dk) {
            for (int j = 0; j <= t; j++) {
                float *dkj = dk + kh + (size_t)j * KW;
                for (int d = 0; d < D; d++) dkj[d] += ds[j] * qt[d];
            }
        }
    }
}

void attention_backward(float *dq, float *dk, float *dv, float *ws, const float *dout,
                        const float *att, const float *q, const float *k, const float *v, int B,
                        int T, int H, int Hkv, int D, int Dv, int n_ws) {
    /* dq (B, T, H D), dk (B, T, Hkv D), dv (B, T, Hkv Dv), ws (n_ws, T, T) workspace (a row of
     * its slice per thread is used), dout (B, T, H Dv), att (B, H, T, T), q (B, T, H D), k
     * (B, T, Hkv D), v (B, T, Hkv Dv)
     *
     * forward: out_t = sum_j p[t][j] v_j,  p[t] = softmax(score[t]),  score[t][j] = s q_t . k_j
     *   dv_j        = sum_{t>=j} p[t][j] dout_t          (and over the heads of v's group)
     *   dp[t][j]    = dout_t . v_j
     *   dscore[t][j] = p[t][j] (dp[t][j] - sum_i p[t][i] dp[t][i])    (softmax Jacobian)
     *   dq_t        = s sum_{j<=t} dscore[t][j] k_j
     *   dk_j        = s sum_{t>=j} dscore[t][j] q_t      (and over the heads of k's group)
     * Masked entries have p = 0, hence dscore = 0: the mask needs no extra term. */
    const int group = H / Hkv;
    const AttShape s = {T, H * D, Hkv * D, Hkv * Dv, H * Dv, D, Dv, 1.0f / sqrtf((float)D)};
    const int n_threads = omp_get_max_threads() < n_ws ? omp_get_max_threads() : n_ws;
    (void)n_threads; /* read by the pragma alone, which a build without OpenMP ignores */
#pragma omp parallel for collapse(2) num_threads(n_threads)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < Hkv; g++) {
            const size_t kh = (size_t)b * T * s.KW + (size_t)g * D; /* (b, t = 0, g) */
            const size_t vh = (size_t)b * T * s.VW + (size_t)g * Dv;
            /* dk and dv sum over later queries t and the group's heads: they start at zero */
            for (int t = 0; t < T; t++) {
                if (dk) memset(dk + kh + (size_t)t * s.KW, 0, (size_t)D * sizeof(float));
                if (dv) memset(dv + vh + (size_t)t * s.VW, 0, (size_t)Dv * sizeof(float));
            }
            float *ds = ws + (size_t)omp_get_thread_num() * T * T; /* dscore[t][0..t] */
            for (int h = g * group; h < (g + 1) * group; h++)
                head_backward(dq, dk, dv, ds, dout, att + ((size_t)b * H + h) * T * T, q, k, v,
                              (size_t)b * T * s.QW + (size_t)h * D,
                              (size_t)b * T * s.OW + (size_t)h * Dv, kh, vh, &s);
        }
    }
}
