/*
 * rmsnorm.c: root-mean-square normalization with a learned gain, per row of C channels.
 *
 *   r_n   = 1 / sqrt(mean_c(x[n,c]^2) + eps)
 *   y[n,c] = x[n,c] * r_n * w[c]
 *
 * Unlike LayerNorm there is no mean subtraction and no bias: the row is only rescaled to unit
 * RMS, then each channel gets its own gain w. The forward pass saves r_n (rstd) so the
 * backward pass does not recompute the row sums.
 *
 * Accumulation rule (ops.h): dw is added to, dx is written.
 */
#include "nn/ops.h"

#include <math.h>

void rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int N, int C) {
    /* y (N, C), rstd (N), x (N, C), w (C) */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *xn = x + (size_t)n * C;
        float *yn = y + (size_t)n * C;
        /* the sum of squares in double: C can be a few thousand and x^2 is all positive */
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)xn[c] * xn[c];
        float r = (float)(1.0 / sqrt(ss / C + (double)RMSNORM_EPS));
        for (int c = 0; c < C; c++) yn[c] = xn[c] * r * w[c];
        if (rstd) rstd[n] = r;
    }
}

void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                      const float *rstd, int N, int C) {
    /* dx (N, C), dw (C), dy (N, C), x (N, C), w (C), rstd (N)
     *
     * forward: y_j = x_j r w_j with r = (mean(x^2) + eps)^(-1/2), so dr/dx_k = -r^3 x_k / C.
     *   dx_k = sum_j dy_j w_j (delta_jk r + x_j dr/dx_k)
     *        = r w_k dy_k - (r^3 x_k / C) sum_j dy_j w_j x_j          -- written
     *   dw_j += sum_n dy[n,j] x[n,j] r_n                              -- accumulated */
    if (dx) {
#pragma omp parallel for
        for (int n = 0; n < N; n++) {
            const float *xn = x + (size_t)n * C;
            const float *dyn = dy + (size_t)n * C;
            float *dxn = dx + (size_t)n * C;
            float r = rstd[n];
            double dot = 0.0; /* sum_j dy_j w_j x_j */
            for (int c = 0; c < C; c++) dot += (double)dyn[c] * w[c] * xn[c];
            float coef = (float)((double)r * r * r * dot / C);
            for (int c = 0; c < C; c++) dxn[c] = r * w[c] * dyn[c] - coef * xn[c];
        }
    }
    if (dw) {
        /* each channel's sum runs over the rows in order, in double, by one thread: no shared
         * float sums. The channels go in blocks of RMS_BLOCK, so that a row's slice of the
         * block is contiguous in memory (one channel at a time would stride C floats per row) */
        enum { RMS_BLOCK = 64 };
        const int n_blocks = (C + RMS_BLOCK - 1) / RMS_BLOCK;
#pragma omp parallel for
        for (int blk = 0; blk < n_blocks; blk++) {
            const int c0 = blk * RMS_BLOCK, width = C - c0 < RMS_BLOCK ? C - c0 : RMS_BLOCK;
            double acc[RMS_BLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float *dyn = dy + (size_t)n * C + c0, *xn = x + (size_t)n * C + c0;
                for (int c = 0; c < width; c++) acc[c] += (double)dyn[c] * xn[c] * rstd[n];
            }
            for (int c = 0; c < width; c++) dw[c0 + c] += (float)acc[c];
        }
    }
}
