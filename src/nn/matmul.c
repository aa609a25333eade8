/*
 * matmul.c: the linear layer without bias, y = x W^T, on OpenBLAS sgemm.
 *
 * Shapes: x (N, IN), W (OUT, IN), y (N, OUT). Storing W as (out, in) makes every weight read
 * along its rows in the forward pass and matches PyTorch's nn.Linear, so exported tensors
 * load there unchanged.
 *
 * Accumulation rule (ops.h): dW is added to, dx is written.
 */
#include "nn/ops.h"

#include <cblas.h>

void matmul_forward(float *y, const float *x, const float *W, int N, int IN, int OUT) {
    /* y (N, OUT) = x (N, IN) . W^T (IN, OUT) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OUT, IN, 1.0f, x, IN, W, IN, 0.0f, y,
                OUT);
}

void matmul_backward(float *dx, float *dW, const float *dy, const float *x, const float *W, int N,
                     int IN, int OUT) {
    /* forward: y = x W^T
     * dx (N, IN) = dy (N, OUT) . W (OUT, IN)           -- written
     * dW (OUT, IN) += dy^T (OUT, N) . x (N, IN)        -- accumulated */
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IN, OUT, 1.0f, dy, OUT, W, IN,
                    0.0f, dx, IN);
    if (dW)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN, N, 1.0f, dy, OUT, x, IN, 1.0f,
                    dW, IN);
}
