/*
 * attention_row.h: the arithmetic of one row of causal attention, written once.
 *
 * A row is one query's scores against the keys it sees, their softmax, and in backward that
 * softmax's Jacobian. The reference (attention.c) runs each body over the whole row (first 0,
 * step 1); the CUDA kernels (backend/cuda/cuda_gemm.cu) run them one lane at a time, a warp a
 * row (first = the lane, step = MOE_WARP), and combine the lanes' maxima and sums across the
 * warp. nvcc compiles this text for the device (MOE_HD, base/hd.h), so the two sides cannot
 * drift apart; the host tests (tests/test_cuda_gemm.c, tests/test_decode.c) walk the lanes in
 * the kernel's order with these same bodies.
 *
 * Each body visits the columns j = first, first + step, ... of the row, in increasing order:
 *   scores:    p_j = scale (q . k_j), the dot in channel order; returns the largest
 *   exp, sum:  p_j = exp(p_j - max); their sum in column order
 *   normalise: p_j *= 1 / sum for j < n, 0 for n <= j < Tp (the causal mask)
 *   dot:       sum_j p_j dp_j
 *   jacobian:  dp_j = p_j (dp_j - sum_i p_i dp_i) scale for j < n, 0 for n <= j < Tp
 * The exp is nn_expf on the host (the reference's bits, and a loop that vectorizes) and CUDA's
 * expf on the device, as in moe/router_row.h: the GPU's probabilities agree with the
 * reference's to the float tolerance (tests/test_backend_ops.c).
 */
#ifndef MOE_NN_ATTENTION_ROW_H
#define MOE_NN_ATTENTION_ROW_H

#include <math.h>
#include <stddef.h>

#include "base/hd.h"
#include "nn/exp.h"

#ifdef __CUDA_ARCH__
#define ATT_ROW_EXPF expf
#else
#define ATT_ROW_EXPF nn_expf
#endif
/* the host's exp loop runs four lanes at a time (nn/exp.h); nvcc takes no OpenMP */
#ifdef __CUDACC__
#define ATT_ROW_SIMD
#else
#define ATT_ROW_SIMD _Pragma("omp simd")
#endif

/* p[j] = scale (q . k_j) for the row's columns j < n, k_j = k + j C (q and each k_j: D
 * channels); returns their largest (-INFINITY when the share is empty) */
MOE_HD float att_row_scores(float *p, const float *q, const float *k, int n, int C, int D,
                            float scale, int first, int step) {
    float max = -INFINITY;
    for (int j = first; j < n; j += step) {
        const float *kj = k + (size_t)j * C;
        float dot = 0.0f;
        for (int d = 0; d < D; d++) dot += q[d] * kj[d];
        p[j] = dot * scale;
        max = p[j] > max ? p[j] : max;
    }
    return max;
}

/* the largest row[j] of the columns j < n (-INFINITY when the share is empty) */
MOE_HD float att_row_max(const float *row, int n, int first, int step) {
    float max = -INFINITY;
    for (int j = first; j < n; j += step) max = row[j] > max ? row[j] : max;
    return max;
}

/* row[j] = exp(row[j] - max) over the columns j < n */
MOE_HD void att_row_exp(float *row, int n, float max, int first, int step) {
    ATT_ROW_SIMD
    for (int j = first; j < n; j += step) row[j] = ATT_ROW_EXPF(row[j] - max);
}

/* the sum of row[j] over the columns j < n, in column order */
MOE_HD float att_row_sum(const float *row, int n, int first, int step) {
    float s = 0.0f;
    for (int j = first; j < n; j += step) s += row[j];
    return s;
}

/* row[j] *= inv over the columns j < n, and 0 over n <= j < Tp */
MOE_HD void att_row_normalise(float *row, int n, int Tp, float inv, int first, int step) {
    for (int j = first; j < Tp; j += step) row[j] = j < n ? row[j] * inv : 0.0f;
}

/* the sum of p[j] dp[j] over the columns j < n, in column order */
MOE_HD float att_row_dot(const float *p, const float *dp, int n, int first, int step) {
    float s = 0.0f;
    for (int j = first; j < n; j += step) s += p[j] * dp[j];
    return s;
}

/* dp[j] = p[j] (dp[j] - pdp) scale over the columns j < n, and 0 over n <= j < Tp */
MOE_HD void att_row_jacobian(float *dp, const float *p, int n, int Tp, float pdp, float scale,
                             int first, int step) {
    for (int j = first; j < Tp; j += step) dp[j] = j < n ? p[j] * (dp[j] - pdp) * scale : 0.0f;
}

#endif
