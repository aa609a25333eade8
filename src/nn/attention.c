/*
 * attention.c: causal multi-head self-attention on already projected (and rotated) q, k, v:
 * the plain reference, loop by loop (the cpu-ref backend's). src/backend/cpu/attention_gemm.c
 * computes the same with matrix products (the cpu backend's) and is tested against this one.
 *
 * Layout: q, k, v, out are (B, T, C) with C = H * D; head h owns channels [h*D, (h+1)*D) of
 * every token. For one batch row b and head h, with s = 1 / sqrt(D):
 *
 *   score[t][j] = s * q_t . k_j                 for j <= t (a token sees only its past)
 *   p[t][j]     = softmax_j(score[t][j])        over j = 0..t
 *   out_t       = sum_{j<=t} p[t][j] v_j
 *
 * att (B, H, T, T) stores p, with zeros above the diagonal, for the backward pass.
 * The 1/sqrt(D) keeps the scores' variance near 1 whatever the head size, so the softmax
 * does not saturate at initialization.
 *
 * Every (b, h) pair is independent and writes its own slice of out, att and the gradients,
 * so the OpenMP loop runs over (b, h) and each sum is done by one thread in a fixed order.
 *
 * Accumulation rule (ops.h): attention has no parameters; dq, dk, dv are written.
 */
#include "nn/ops.h"

#include <math.h>
#include "base/omp_compat.h"
#include <string.h>

#include "nn/attention_row.h"

/* One query of one head: ot (D) = sum_{j < n} p[j] v_j, p (Tp) = softmax_j(s q . k_j) over the
 * first n keys, 0 for the rest of the row (the causal mask). q, ot are the head's D channels;
 * k, v its first key and value, each next one C floats further. */
static void attend_row(float *ot, float *p, const float *q, const float *k, const float *v, int n,
                       int Tp, int C, int D, float scale) {
    /* the softmax row (attention_row.h): scores, less their max so exp() cannot overflow */
    const float max = att_row_scores(p, q, k, n, C, D, scale, 0, 1);
    att_row_exp(p, n, max, 0, 1);
    att_row_normalise(p, n, Tp, 1.0f / att_row_sum(p, n, 0, 1), 0, 1);
    /* the values weighted by p, a value row at a time (each channel summed in key order) */
    for (int d = 0; d < D; d++) ot[d] = 0.0f;
    for (int j = 0; j < n; j++) {
        const float *vj = v + (size_t)j * C;
        for (int d = 0; d < D; d++) ot[d] += p[j] * vj[d];
    }
}

void attention_forward(float *out, float *att, const float *q, const float *k, const float *v,
                       int B, int T, int C, int H) {
    /* out (B, T, C), att (B, H, T, T), q (B, T, C), k (B, T, C), v (B, T, C) */
    int D = C / H;
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            const size_t head = (size_t)b * T * C + (size_t)h * D;
            float *ab = att + ((size_t)b * H + h) * T * T;
            for (int t = 0; t < T; t++) /* row t sees keys 0 .. t */
                attend_row(out + head + (size_t)t * C, ab + (size_t)t * T, q + head + (size_t)t * C,
                           k + head, v + head, t + 1, T, C, D, scale);
        }
    }
}

/* One query row per sequence against its cache: attention_forward's row t = lens[n] - 1, the
 * keys and values read from the cache. */
void attention_decode(float *out, float *att, const float *q, const float *kc, const float *vc,
                      const int *lens, int N, int C, int H, int Tc) {
    /* out (N, C), att (N, H, Tc), q (N, C), kc, vc (N, Tc, C) */
    int D = C / H;
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const size_t head = (size_t)n * Tc * C + (size_t)h * D, row = (size_t)n * C + h * D;
            attend_row(out + row, att + ((size_t)n * H + h) * Tc, q + row, kc + head, vc + head,
                       lens[n], Tc, C, D, scale);
        }
}

void attention_backward(float *dq, float *dk, float *dv, float *ws, const float *dout,
                        const float *att, const float *q, const float *k, const float *v, int B,
                        int T, int C, int H, int n_ws) {
    /* dq, dk, dv (B, T, C), ws (n_ws, T, T) workspace (a row of its slice per thread is used),
     * dout (B, T, C), att (B, H, T, T), q, k, v (B, T, C)
     *
     * forward: out_t = sum_j p[t][j] v_j,  p[t] = softmax(score[t]),  score[t][j] = s q_t . k_j
     *   dv_j        = sum_{t>=j} p[t][j] dout_t
     *   dp[t][j]    = dout_t . v_j
     *   dscore[t][j] = p[t][j] (dp[t][j] - sum_i p[t][i] dp[t][i])    (softmax Jacobian)
     *   dq_t        = s sum_{j<=t} dscore[t][j] k_j
     *   dk_j        = s sum_{t>=j} dscore[t][j] q_t
     * Masked entries have p = 0, hence dscore = 0: the mask needs no extra term. */
    int D = C / H;
    float scale = 1.0f / sqrtf((float)D);
    const int n_threads = omp_get_max_threads() < n_ws ? omp_get_max_threads() : n_ws;
    (void)n_threads; /* read by the pragma alone, which a build without OpenMP ignores */
#pragma omp parallel for collapse(2) num_threads(n_threads)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            size_t head = (size_t)b * T * C + (size_t)h * D; /* offset of (b, t=0, h) */
            const float *qb = q + head, *kb = k + head, *vb = v + head, *gb = dout + head;
            const float *ab = att + ((size_t)b * H + h) * T * T;
            /* dk and dv sum over later queries t, so their head slices start at zero */
            for (int t = 0; t < T; t++) {
                if (dk) memset(dk + head + (size_t)t * C, 0, (size_t)D * sizeof(float));
                if (dv) memset(dv + head + (size_t)t * C, 0, (size_t)D * sizeof(float));
            }
            float *ds = ws + (size_t)omp_get_thread_num() * T * T; /* dscore[t][0..t] */
            for (int t = 0; t < T; t++) {
                const float *p = ab + (size_t)t * T;
                const float *gt = gb + (size_t)t * C;
                const float *qt = qb + (size_t)t * C;
                if (dv) {
                    for (int j = 0; j <= t; j++) {
                        float *dvj = dv + head + (size_t)j * C;
                        for (int d = 0; d < D; d++) dvj[d] += p[j] * gt[d];
                    }
                }
                if (!dq && !dk) continue;
                for (int j = 0; j <= t; j++) { /* dp[t][j] */
                    const float *vj = vb + (size_t)j * C;
                    float dp = 0.0f;
                    for (int d = 0; d < D; d++) dp += gt[d] * vj[d];
                    ds[j] = dp;
                }
                /* the softmax's Jacobian (attention_row.h), pdp = sum_i p[t][i] dp[t][i] */
                const float pdp = att_row_dot(p, ds, t + 1, 0, 1);
                att_row_jacobian(ds, p, t + 1, t + 1, pdp, scale, 0, 1);
                if (dq) {
                    float *dqt = dq + head + (size_t)t * C;
                    for (int d = 0; d < D; d++) dqt[d] = 0.0f;
                    for (int j = 0; j <= t; j++) {
                        const float *kj = kb + (size_t)j * C;
                        for (int d = 0; d < D; d++) dqt[d] += ds[j] * kj[d];
                    }
                }
                if (dk) {
                    for (int j = 0; j <= t; j++) {
                        float *dkj = dk + head + (size_t)j * C;
                        for (int d = 0; d < D; d++) dkj[d] += ds[j] * qt[d];
                    }
                }
            }
        }
    }
}
