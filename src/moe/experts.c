/*
 * experts.c: E SwiGLU feed-forwards, each over its own contiguous slice of the slot buffer.
 *
 * After permutation, expert e owns rows [offsets[e], offsets[e+1]) of xe (S, C). Each expert
 * is a plain dense SwiGLU on those S_e rows:
 *
 *   g = xe_e Wg[e]^T,  u = xe_e Wu[e]^T      (S_e, F)
 *   h = silu(g) * u                          (S_e, F)
 *   ye_e = h Wd[e]^T                         (S_e, C)
 *
 * so each weight costs one product per expert over the whole slice (a "grouped GEMM" done as
 * a loop over the experts). Experts with no rows are skipped: their outputs have no rows, and
 * their weight gradients get nothing added. A padded capacity plan (capacity.c) adds zero rows
 * after each expert's kept rows; with counts given, the two parts are separate products.
 *
 * This is the reference, on the plain loops of nn/matmul.c (the cpu-ref backend's); the cpu
 * backend runs the same slices on sgemm (src/backend/cpu/cpu_gemm.c).
 *
 * Accumulation rule (nn/ops.h): dWg, dWu, dWd are added to (+=); dxe is written (=).
 */
#include "moe/moe_ops.h"
#include "nn/ops.h"

#include <math.h>
#include <stdlib.h>

/* Expert e's SwiGLU on the Se rows starting at row r0 of the slot buffers. */
static void slice_forward(float *ye, float *g, float *u, float *h, const float *xe, const float *Wg,
                          const float *Wu, const float *Wd, int e, int r0, int Se, int C, int F) {
    if (Se <= 0) return;
    size_t rc = (size_t)r0 * C, rf = (size_t)r0 * F, wo = (size_t)e * F * C;
    matmul_forward(g + rf, xe + rc, Wg + wo, Se, C, F);
    matmul_forward(u + rf, xe + rc, Wu + wo, Se, C, F);
    swiglu_forward(h + rf, g + rf, u + rf, Se, F);
    matmul_forward(ye + rc, h + rf, Wd + wo, Se, F, C);
}

void experts_forward(float *ye, float *g, float *u, float *h, const float *xe, const float *Wg,
                     const float *Wu, const float *Wd, const int *offsets, const int *counts, int E,
                     int C, int F) {
    /* ye (S, C), g, u, h (S, F), xe (S, C), Wg, Wu (E, F, C), Wd (E, C, F), offsets (E + 1),
     * counts (E) or NULL */
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], rows = offsets[e + 1] - offsets[e];
        int kept = counts ? counts[e] : rows;
        slice_forward(ye, g, u, h, xe, Wg, Wu, Wd, e, r0, kept, C, F);
        slice_forward(ye, g, u, h, xe, Wg, Wu, Wd, e, r0 + kept, rows - kept, C, F);
    }
}

/* dx (N, in) += dy (N, out) . W (out, in): the input gradient of y = x W^T, ADDED to dx (the
 * expert input feeds two linears, g and u, whose input gradients add up). */
static void matmul_dx_add(float *dx, const float *dy, const float *W, int N, int in, int out) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < out; o++) {
            const float gy = dy[(size_t)n * out + o], *wo = W + (size_t)o * in;
            for (int i = 0; i < in; i++) dx[(size_t)n * in + i] += gy * wo[i];
        }
}

/* Expert e's backward over the Se rows starting at row r0 (the math: experts_backward). */
static void slice_backward(float *dxe, float *dWg, float *dWu, float *dWd, float *dg, float *du,
                           float *dh, const float *dye, const float *xe, const float *g,
                           const float *u, const float *h, const float *Wg, const float *Wu,
                           const float *Wd, int e, int r0, int Se, int C, int F) {
    if (Se <= 0) return;
    size_t rc = (size_t)r0 * C, rf = (size_t)r0 * F, wo = (size_t)e * F * C;
    matmul_backward(dh + rf, dWd ? dWd + wo : NULL, dye + rc, h + rf, Wd + wo, Se, F, C);
    swiglu_backward(dg + rf, du + rf, dh + rf, g + rf, u + rf, Se, F);
    matmul_backward(dxe ? dxe + rc : NULL, dWg ? dWg + wo : NULL, dg + rf, xe + rc, Wg + wo, Se, C,
                    F);
    matmul_backward(NULL, dWu ? dWu + wo : NULL, du + rf, xe + rc, Wu + wo, Se, C, F);
    if (dxe) matmul_dx_add(dxe + rc, du + rf, Wu + wo, Se, C, F);
}

void experts_backward(float *dxe, float *dWg, float *dWu, float *dWd, float *dg, float *du,
                      float *dh, const float *dye, const float *xe, const float *g, const float *u,
                      const float *h, const float *Wg, const float *Wu, const float *Wd,
                      const int *offsets, const int *counts, int E, int C, int F) {
    /* dxe (S, C) written; dWg, dWu (E, F, C), dWd (E, C, F) accumulated; dg, du, dh (S, F)
     * scratch; dye (S, C), xe (S, C), g, u, h (S, F), offsets (E + 1), counts (E) or NULL.
     *
     * Per expert e, in reverse of the forward:
     *   ye = h Wd^T          dh = dye Wd,   dWd += dye^T h
     *   h = silu(g) * u      dg, du from swiglu_backward
     *   g = xe Wg^T          dxe  = dg Wg,  dWg += dg^T xe
     *   u = xe Wu^T          dxe += du Wu,  dWu += du^T xe
     * The padding rows of a padded plan (dye = 0, h = 0) add exact zeros to the weight
     * gradients, after the kept rows' products. */
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], rows = offsets[e + 1] - offsets[e];
        int kept = counts ? counts[e] : rows;
        slice_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, e, r0, kept, C,
                       F);
        slice_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, e, r0 + kept,
                       rows - kept, C, F);
    }
}

/* dot of two expert vectors, or a norm when a == b; double sums in a fixed order */
static double expert_dot(const float *Wg, const float *Wu, const float *Wd, int a, int b,
                         size_t n) {
    const float *w[3] = {Wg, Wu, Wd};
    double s = 0.0;
    for (int t = 0; t < 3; t++) {
        const float *x = w[t] + (size_t)a * n, *y = w[t] + (size_t)b * n;
        for (size_t i = 0; i < n; i++) s += (double)x[i] * y[i];
    }
    return s;
}

double experts_similarity(const float *Wg, const float *Wu, const float *Wd, int E, int C, int F) {
    if (E < 2) return 0.0;
    const size_t n = (size_t)F * C; /* floats of one expert in each of the three matrices */
    const int pairs = E * (E - 1) / 2;
    double *dots = (double *)malloc_check((size_t)(pairs + E) * sizeof(double));
    double *norms = dots + pairs;
    /* one thread per entry, then a serial sum: the same result for any thread count */
#pragma omp parallel for schedule(dynamic)
    for (int j = 0; j < pairs + E; j++) {
        if (j >= pairs) {
            norms[j - pairs] = sqrt(expert_dot(Wg, Wu, Wd, j - pairs, j - pairs, n));
            continue;
        }
        int a = 0, r = j; /* pair j in the order (0,1), (0,2) .. (0,E-1), (1,2) .. */
        while (r >= E - 1 - a) r -= E - 1 - a++;
        dots[j] = expert_dot(Wg, Wu, Wd, a, a + 1 + r, n);
    }
    double sum = 0.0;
    for (int a = 0, j = 0; a < E; a++)
        for (int b = a + 1; b < E; b++, j++) {
            double den = norms[a] * norms[b];
            sum += den > 0.0 ? dots[j] / den : 0.0;
        }
    free(dots);
    return sum / pairs;
}
