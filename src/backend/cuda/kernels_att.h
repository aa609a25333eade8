/*
 * kernels_att.h: what the CUDA attention kernels (cuda_gemm.cu) add to the row of
 * nn/attention_row.h, so that the host can run the kernels' bodies in their order
 * (tests/test_cuda_gemm.c, tests/test_decode.c) and compare the whole GPU attention, products
 * included, with the reference loops of nn/attention.c.
 *
 * A row t of the (T, T) score matrix is handled by one warp: lane l takes the columns
 * j = l, l + 32, ... up to t (the keys row t sees), each body of attention_row.h called with
 * first = l and step = MOE_WARP; the warp's max and sums are combined in the butterfly order of
 * katt_butterfly (on the device: __shfl_xor_sync with offsets 16, 8, 4, 2, 1; every lane ends
 * with the same value, so the host reproduces the device's order).
 *
 *   forward:  p_j = exp(s_j - max) / sum_{i <= t} exp(s_i - max)  for j <= t, 0 above
 *   backward: ds_j = p_j (dp_j - sum_{i <= t} p_i dp_i) scale       for j <= t, 0 above
 * Decoding adds the values' weighted sum, a lane's channels at a time (katt_dec_lane_out).
 */
#ifndef MOE_BACKEND_KERNELS_ATT_H
#define MOE_BACKEND_KERNELS_ATT_H

#include <math.h>

#include "base/hd.h"
#include "nn/attention_row.h"

/* decoding: query row n's sequence in the cache and the positions it attends to, from its cache
 * row rows[n] = s Tc + t (attention_decode, nn/ops.h): returns s, *len = t + 1 */
MOE_HD int katt_dec_seq(const int *rows, int n, int Tc, int *len) {
    const int s = rows[n] / Tc;
    *len = rows[n] - s * Tc + 1;
    return s;
}

/* decoding: lane's channels d = l, l + 32, ... < Dv of out = sum_{j < len} p_j v_j, summed in j
 * order; v is the head's first value, each next one VW floats further */
MOE_HD void katt_dec_lane_out(float *out, const float *p, const float *v, int len, int VW, int Dv,
                              int lane) {
    for (int d = lane; d < Dv; d += MOE_WARP) {
        float acc = 0.0f;
        for (int j = 0; j < len; j++) acc += p[j] * v[(size_t)j * VW + d];
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
