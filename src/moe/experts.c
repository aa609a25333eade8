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
 * so each weight costs one GEMM per expert over the whole slice (a "grouped GEMM" done as a
 * loop of E calls). Experts with no rows are skipped: their outputs have no rows, and their
 * weight gradients get nothing added.
 * A padded capacity plan (capacity.c) adds zero rows after each expert's kept rows; the
 * _padded variants compute the two parts as separate products.
 *
 * Accumulation rule (nn/ops.h): dWg, dWu, dWd are added to (+=); dxe is written (=).
 */
#include "moe/moe_ops.h"
#include "nn/ops.h"

#include <math.h>
#include <stdlib.h>

/* last: through <complex.h> it defines the macro I, so no declaration below may use that name */
#include <cblas.h>

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
                     const float *Wu, const float *Wd, const int *offsets, int E, int C, int F) {
    /* ye (S, C), g, u, h (S, F), xe (S, C), Wg, Wu (E, F, C), Wd (E, C, F), offsets (E + 1) */
    for (int e = 0; e < E; e++)
        slice_forward(ye, g, u, h, xe, Wg, Wu, Wd, e, offsets[e], offsets[e + 1] - offsets[e], C,
                      F);
}

/* Padded plans: the kept rows and the padding rows of a slice are two products. sgemm picks
 * its kernels and blocking by the row count, so one product over all cap rows could round
 * the kept rows differently from the unpadded run; as two, the kept rows see exactly the
 * unpadded call and the padding rows (zeros) still cost their FLOPs. */
void experts_forward_padded(float *ye, float *g, float *u, float *h, const float *xe,
                            const float *Wg, const float *Wu, const float *Wd, const int *offsets,
                            const int *counts, int E, int C, int F) {
    /* as experts_forward; counts (E) kept rows at the start of each slice */
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], kept = counts[e], pad = offsets[e + 1] - offsets[e] - counts[e];
        slice_forward(ye, g, u, h, xe, Wg, Wu, Wd, e, r0, kept, C, F);
        slice_forward(ye, g, u, h, xe, Wg, Wu, Wd, e, r0 + kept, pad, C, F);
    }
}

/* dx (N, in) += dy (N, out) . W (out, in): the input gradient of y = x W^T, ADDED to dx.
 * matmul_backward writes dx; the expert input feeds two linears (g and u), whose input
 * gradients must be summed without an extra (S, C) buffer, so the second one adds in place. */
static void matmul_backward_dx_add(float *dx, const float *dy, const float *W, int N, int in,
                                   int out) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.0f, dy, out, W, in, 1.0f,
                dx, in);
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
    if (dxe) matmul_backward_dx_add(dxe + rc, du + rf, Wu + wo, Se, C, F);
}

void experts_backward(float *dxe, float *dWg, float *dWu, float *dWd, float *dg, float *du,
                      float *dh, const float *dye, const float *xe, const float *g, const float *u,
                      const float *h, const float *Wg, const float *Wu, const float *Wd,
                      const int *offsets, int E, int C, int F) {
    /* dxe (S, C) written; dWg, dWu (E, F, C), dWd (E, C, F) accumulated; dg, du, dh (S, F)
     * scratch; dye (S, C), xe (S, C), g, u, h (S, F), offsets (E + 1).
     *
     * Per expert e, in reverse of the forward:
     *   ye = h Wd^T          dh = dye Wd,   dWd += dye^T h
     *   h = silu(g) * u      dg, du from swiglu_backward
     *   g = xe Wg^T          dxe  = dg Wg,  dWg += dg^T xe
     *   u = xe Wu^T          dxe += du Wu,  dWu += du^T xe */
    for (int e = 0; e < E; e++)
        slice_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, e, offsets[e],
                       offsets[e + 1] - offsets[e], C, F);
}

void experts_backward_padded(float *dxe, float *dWg, float *dWu, float *dWd, float *dg, float *du,
                             float *dh, const float *dye, const float *xe, const float *g,
                             const float *u, const float *h, const float *Wg, const float *Wu,
                             const float *Wd, const int *offsets, const int *counts, int E, int C,
                             int F) {
    /* as experts_backward; the padding rows (dye = 0, h = 0) add exact zeros to the weight
     * gradients, after the kept rows' products */
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], kept = counts[e], pad = offsets[e + 1] - offsets[e] - counts[e];
        slice_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, e, r0, kept, C,
                       F);
        slice_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, e, r0 + kept,
                       pad, C, F);
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
