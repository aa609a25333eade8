/*
 * matmul.c: the linear layer without bias, y = x W^T, as plain loops (the reference; the cpu
 * backend runs the same products on sgemm, src/backend/cpu/cpu_gemm.c).
 *
 * Shapes: x (N, IN), W (OUT, IN), y (N, OUT). Storing W as (out, in) makes every weight read
 * along its rows in the forward pass and matches PyTorch's nn.Linear, so exported tensors
 * load there unchanged.
 *
 * Every output element is one dot product summed in index order by one thread, so the result
 * does not depend on the thread count.
 *
 * Accumulation rule (ops.h): dW is added to, dx is written.
 */
#include "nn/ops.h"

void matmul_forward(float *y, const float *x, const float *W, int N, int IN, int OUT) {
    /* y[n, o] = sum_i x[n, i] W[o, i] */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *xn = x + (size_t)n * IN;
        for (int o = 0; o < OUT; o++) {
            const float *wo = W + (size_t)o * IN;
            float acc = 0.0f;
            for (int i = 0; i < IN; i++) acc += xn[i] * wo[i];
            y[(size_t)n * OUT + o] = acc;
        }
    }
}

void matmul_backward(float *dx, float *dW, const float *dy, const float *x, const float *W, int N,
                     int IN, int OUT) {
    /* forward: y = x W^T
     * dx[n, i]  = sum_o dy[n, o] W[o, i]        -- written
     * dW[o, i] += sum_n dy[n, o] x[n, i]        -- accumulated */
    if (dx) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float *dxn = dx + (size_t)n * IN;
            for (int i = 0; i < IN; i++) dxn[i] = 0.0f;
            for (int o = 0; o < OUT; o++) {
                const float g = dy[(size_t)n * OUT + o], *wo = W + (size_t)o * IN;
                for (int i = 0; i < IN; i++) dxn[i] += g * wo[i];
            }
        }
    }
    if (dW) {
#pragma omp parallel for schedule(static)
        for (int o = 0; o < OUT; o++) {
            float *dwo = dW + (size_t)o * IN;
            for (int n = 0; n < N; n++) {
                const float g = dy[(size_t)n * OUT + o], *xn = x + (size_t)n * IN;
                for (int i = 0; i < IN; i++) dwo[i] += g * xn[i];
            }
        }
    }
}
