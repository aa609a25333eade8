/*
 * kernels_att.h: the arithmetic of the CUDA attention's softmax kernels (cuda_gemm.cu), one
 * lane's share of a row at a time, so that the host can run the same bodies in the kernel's
 * order (tests/test_cuda_gemm.c) and compare the whole GPU attention, products included, with
 * the reference loops of nn/attention.c.
 *
 * A row t of the (T, T) score matrix is handled by one warp: lane l takes the columns
 * j = l, l + 32, ... up to t (the keys row t sees); the warp's max and sums are combined in
 * the butterfly order of katt_butterfly (on the device: __shfl_xor_sync with offsets 16, 8, 4,
 * 2, 1; every lane ends with the same value, so the host reproduces the device's bits).
 *
 *   forward:  p_j = exp(s_j - max) / sum_{i <= t} exp(s_i - max)  for j <= t, 0 above
 *   backward: ds_j = p_j (dp_j - sum_{i <= t} p_i dp_i) scale       for j <= t, 0 above
 */
#ifndef MOE_BACKEND_KERNELS_ATT_H
#define MOE_BACKEND_KERNELS_ATT_H

#include <math.h>

#include "base/hd.h"

/* lane's max of row[j], j = lane, lane + 32, ... <= t (-INFINITY when it has none) */
MOE_HD float katt_lane_max(const float *row, int t, int lane) {
    float m = -INFINITY;
    for (int j = lane; j <= t; j += MOE_WARP) m = row[j] > m ? row[j] : m;
    return m;
}
/* row[j] = exp(row[j] - max) over the lane's columns; returns their sum, in column order */
MOE_HD float katt_lane_exp(float *row, int t, int lane, float max) {
    float s = 0.0f;
    for (int j = lane; j <= t; j += MOE_WARP) {
        float e = expf(row[j] - max);
        row[j] = e;
        s += e;
    }
    return s;
}
/* row[j] *= inv over the lane's columns <= t; 0 for its columns above t */
MOE_HD void katt_lane_normalise(float *row, int t, int T, int lane, float inv) {
    for (int j = lane; j < T; j += MOE_WARP) row[j] = j <= t ? row[j] * inv : 0.0f;
}
/* lane's share of sum_j p_j dp_j over j <= t */
MOE_HD float katt_lane_dot(const float *p, const float *dp, int t, int lane) {
    float s = 0.0f;
    for (int j = lane; j <= t; j += MOE_WARP) s += p[j] * dp[j];
    return s;
}
/* dp[j] = p_j (dp_j - pdp) scale over the lane's columns <= t; 0 above t */
MOE_HD void katt_lane_jacobian(float *dp, const float *p, int t, int T, int lane, float pdp,
                               float scale) {
    for (int j = lane; j < T; j += MOE_WARP) dp[j] = j <= t ? p[j] * (dp[j] - pdp) * scale : 0.0f;
}

/* Decoding (attention_decode): one warp per (sequence, head), its row p (Tc) of probabilities.
 * Lane l scores the cached keys j = l, l + 32, ... < len: p_j = scale q . k_j, the dot in
 * channel order; k is the head's first key (a row every C floats). Returns the lane's max. */
MOE_HD float katt_dec_lane_scores(float *p, const float *q, const float *k, int len, int C, int D,
                                  float scale, int lane) {
    float m = -INFINITY;
    for (int j = lane; j < len; j += MOE_WARP) {
        const float *kj = k + (size_t)j * C;
        float dot = 0.0f;
        for (int d = 0; d < D; d++) dot += q[d] * kj[d];
        p[j] = dot * scale;
        m = p[j] > m ? p[j] : m;
    }
    return m;
}
/* lane's channels d = l, l + 32, ... < D of out = sum_{j < len} p_j v_j, summed in j order */
MOE_HD void katt_dec_lane_out(float *out, const float *p, const float *v, int len, int C, int D,
                              int lane) {
    for (int d = lane; d < D; d += MOE_WARP) {
        float acc = 0.0f;
        for (int j = 0; j < len; j++) acc += p[j] * v[(size_t)j * C + d];
        out[d] = acc;
    }
}

/* The device's warp combine, on the host: v (32 lanes) after the butterfly of op (0 sum, 1 max);
 * every lane holds the result, v[0] is returned. */
static inline float katt_butterfly(float *v, int op) {
    for (int off = MOE_WARP / 2; off > 0; off /= 2) {
        float next[MOE_WARP];
        for (int l = 0; l < MOE_WARP; l++) {
            float a = v[l], b = v[l ^ off];
            next[l] = op ? (a > b ? a : b) : a + b;
        }
        for (int l = 0; l < MOE_WARP; l++) v[l] = next[l];
    }
    return v[0];
}

#endif
