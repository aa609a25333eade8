/*
 * swiglu.c: the gated activation of a SwiGLU feed-forward, elementwise over (N, F).
 *
 *   sigma(g) = 1 / (1 + exp(-g)),  silu(g) = g sigma(g),  h = silu(g) * u
 *
 * g and u are two linear projections of the same input; u acts as a learned, signed gate
 * on the smooth ReLU-like silu(g).
 *
 * Accumulation rule (ops.h): no parameters; dg and du are written.
 */
#include "nn/ops.h"

#include <math.h>

#include "nn/exp.h"


NN_WIDE_LANES
void swiglu_forward(float *h, const float *g, const float *u, int N, int F) {
    /* h (N, F), g (N, F), u (N, F) */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
#pragma omp simd
        for (int f = 0; f < F; f++) {
            size_t i = (size_t)n * F + f;
            float sig = 1.0f / (1.0f + nn_expf(-g[i])); /* exp overflow gives inf, sig 0: fine */
            h[i] = g[i] * sig * u[i];
        }
    }
}

NN_WIDE_LANES
void swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u, int N,
                     int F) {
    /* dg (N, F), du (N, F), dh (N, F), g (N, F), u (N, F)
     *
     * forward: h = g sigma(g) u
     *   du = dh silu(g)                                   -- written
     *   dg = dh u silu'(g),  silu'(g) = sigma(g) (1 + g (1 - sigma(g)))   -- written */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * F;
        if (du && dg) {
#pragma omp simd
            for (int f = 0; f < F; f++) {
                const size_t i = row + f;
                const float sig = 1.0f / (1.0f + nn_expf(-g[i]));
                du[i] = dh[i] * g[i] * sig;
                dg[i] = dh[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
            }
            continue;
        }
        for (int f = 0; f < F; f++) { /* one of the two */
            const size_t i = row + f;
            const float sig = 1.0f / (1.0f + nn_expf(-g[i]));
            if (du) du[i] = dh[i] * g[i] * sig;
            if (dg) dg[i] = dh[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
        }
    }
}
