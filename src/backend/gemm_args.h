/*
 * gemm_args.h: every product of the CUDA backend, as the argument tuple of one column-major
 * GEMM (the convention of cuBLAS and of BLAS before it).
 *
 * The engine stores matrices row-major; cuBLAS reads column-major. A row-major (R, K) matrix
 * with rows ld floats apart IS the column-major (K, R) matrix with leading dimension ld: its
 * transpose, at no cost. So the row-major product y = x W^T is computed as the column-major
 * y^T = W x^T, whose operands are the same bytes. For a linear layer (nn/ops.h: y (N, OUT) =
 * x (N, IN) W^T, W (OUT, IN)):
 *
 *   pass      column-major product               transa transb  m    n    k    beta
 *   forward   y^T  (OUT, N)  = W^T x^T           T      N       OUT  N    IN   0
 *   dx        dx^T (IN, N)   = W   dy^T          N      N       IN   N    OUT  0 (or 1: add)
 *   dW        dW^T (IN, OUT) += x^T dy           N      T       IN   OUT  N    1
 *
 * (each operand named as it reads column-major: "W" is the column-major (IN, OUT) view of the
 * row-major W). dW's beta 1 is the accumulation rule of nn/ops.h.
 *
 * One builder per pass, one struct for all: cuda_gemm.cu hands a GemmArgs to cublasGemmEx (or
 * the strided-batched call, with the strides filled), and tests/test_gemm_args.c hands the
 * same tuples to cblas_sgemm(CblasColMajor, ...) on the CPU and compares them with the
 * reference matmul: the arguments are checked on a machine without a GPU.
 *
 * Plain C, no CUDA types: the CPU build and its tests include it too.
 */
#ifndef MOE_BACKEND_GEMM_ARGS_H
#define MOE_BACKEND_GEMM_ARGS_H

#include <stddef.h>

/* C (m, n) = alpha op(A) op(B) + beta C, column-major; op transposes when trans is set.
 * A batched call adds `batch` products, the i-th with its operands at A + i strideA etc. */
typedef struct {
    int transa, transb; /* 1: the operand is transposed */
    int m, n, k;
    float alpha;
    const float *A;
    int lda;
    const float *B;
    int ldb;
    float beta;
    float *C;
    int ldc;
    int batch; /* 1 for one product */
    long long strideA, strideB, strideC;
} GemmArgs;

static inline GemmArgs gemm_args(int transa, int transb, int m, int n, int k, float alpha,
                                 const float *A, int lda, const float *B, int ldb, float beta,
                                 float *C, int ldc) {
    GemmArgs a = {transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, 1, 0, 0, 0};
    return a;
}

/* y (N, OUT) = x (N, IN) W (OUT, IN)^T */
static inline GemmArgs gemm_linear_forward(float *y, const float *x, const float *W, int N, int IN,
                                           int OUT) {
    return gemm_args(1, 0, OUT, N, IN, 1.0f, W, IN, x, IN, 0.0f, y, OUT);
}
/* dx (N, IN) = dy (N, OUT) W, or dx += that when add is set */
static inline GemmArgs gemm_linear_dx(float *dx, const float *dy, const float *W, int N, int IN,
                                      int OUT, int add) {
    return gemm_args(0, 0, IN, N, OUT, 1.0f, W, IN, dy, OUT, add ? 1.0f : 0.0f, dx, IN);
}
/* dW (OUT, IN) += dy (N, OUT)^T x (N, IN) */
static inline GemmArgs gemm_linear_dw(float *dW, const float *dy, const float *x, int N, int IN,
                                      int OUT) {
    return gemm_args(0, 1, IN, OUT, N, 1.0f, x, IN, dy, OUT, 1.0f, dW, IN);
}

/* ---- attention, one batch row b: the H heads as one strided batch ---------------------------
 * q, k, v, out (T, C) rows of the batch row, head h at column h D (stride D between heads, rows
 * C apart); P (H, T, T) one (T, T) matrix per head, row-major. Row-major products:
 *   S = s Q K^T      O = P V      dV = P^T dO      dP = dO V^T      dQ = dS K      dK = dS^T Q */

/* P (T, T) = scale Q K^T, per head */
static inline GemmArgs gemm_att_scores(float *P, const float *q, const float *k, int T, int C,
                                       int D, int heads, float scale) {
    GemmArgs a = gemm_args(1, 0, T, T, D, scale, k, C, q, C, 0.0f, P, T);
    a.batch = heads, a.strideA = D, a.strideB = D, a.strideC = (long long)T * T;
    return a;
}
/* O (T, D) = P (T, T) V (T, D), per head (also dQ = dS K: P = dS, V = k) */
static inline GemmArgs gemm_att_pv(float *out, const float *P, const float *v, int T, int C, int D,
                                   int heads) {
    GemmArgs a = gemm_args(0, 0, D, T, T, 1.0f, v, C, P, T, 0.0f, out, C);
    a.batch = heads, a.strideA = D, a.strideB = (long long)T * T, a.strideC = D;
    return a;
}
/* dV (T, D) = P (T, T)^T dO (T, D), per head (also dK = dS^T Q: P = dS, dO = q) */
static inline GemmArgs gemm_att_ptdo(float *dv, const float *P, const float *dout, int T, int C,
                                     int D, int heads) {
    GemmArgs a = gemm_args(0, 1, D, T, T, 1.0f, dout, C, P, T, 0.0f, dv, C);
    a.batch = heads, a.strideA = D, a.strideB = (long long)T * T, a.strideC = D;
    return a;
}
/* dP (T, T) = dO (T, D) V (T, D)^T, per head: gemm_att_scores with scale 1 */

#endif
