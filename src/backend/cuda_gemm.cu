/*
 * cuda_gemm.cu: the CUDA backend's products, through cuBLAS: the linear layers, attention (the
 * strided-batched rung: every head of a batch row in one call, a softmax kernel between) and
 * the experts, and the yardstick product of `moe bench`.
 *
 * Every product is a GemmArgs tuple (gemm_args.h, where the row-major to column-major mapping
 * is derived), run by gemm_run: one place chooses the cuBLAS call and the compute type. The
 * tuples themselves are checked on the CPU by tests/test_cuda_gemm.c, through CBLAS.
 *
 * Compute types by train.precision (CudaCtx.precision): fp32 CUBLAS_COMPUTE_32F (the products
 * round as fp32 FMAs, within the tolerance of the CPU); tf32 CUBLAS_COMPUTE_32F_FAST_TF32
 * (tensor cores, operands rounded to 10 mantissa bits); bf16 CUBLAS_COMPUTE_32F_FAST_16BF
 * (tensor cores, operands rounded to bf16 inside cuBLAS, fp32 accumulation and output). The
 * weights, gradients and AdamW moments stay fp32 in every mode.
 */
#include "backend/cuda.cuh"

#include "backend/gemm_args.h"
#include "backend/kernels_att.h"

static cublasComputeType_t compute_type(const Backend *be) {
    switch (cuda_ctx(be)->precision) {
    case MOE_PRECISION_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MOE_PRECISION_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    default: return CUBLAS_COMPUTE_32F;
    }
}

static void gemm_run_as(const Backend *be, const GemmArgs *a, cublasComputeType_t type);
static void gemm_run(const Backend *be, const GemmArgs *a) {
    gemm_run_as(be, a, compute_type(be));
}

static void gemm_run_as(const Backend *be, const GemmArgs *a, cublasComputeType_t type) {
    if (a->m <= 0 || a->n <= 0 || a->batch <= 0) return;
    cublasHandle_t h = cuda_ctx(be)->blas;
    cublasOperation_t ta = a->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = a->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (a->k <= 0) { /* an empty sum: C = beta C */
        if (a->beta == 0.0f)
            for (int i = 0; i < a->batch; i++)
                CUDA_CHECK(cudaMemset2DAsync(a->C + i * a->strideC, (size_t)a->ldc * sizeof(float),
                                             0, (size_t)a->m * sizeof(float), (size_t)a->n,
                                             cuda_stream(be)));
        return;
    }
    if (a->batch == 1)
        CUBLAS_CHECK(cublasGemmEx(h, ta, tb, a->m, a->n, a->k, &a->alpha, a->A, CUDA_R_32F, a->lda,
                                  a->B, CUDA_R_32F, a->ldb, &a->beta, a->C, CUDA_R_32F, a->ldc,
                                  type, CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(
            h, ta, tb, a->m, a->n, a->k, &a->alpha, a->A, CUDA_R_32F, a->lda, a->strideA, a->B,
            CUDA_R_32F, a->ldb, a->strideB, &a->beta, a->C, CUDA_R_32F, a->ldc, a->strideC,
            a->batch, type, CUBLAS_GEMM_DEFAULT));
}

/* ---- linear layers -------------------------------------------------------------------------- */

void cuda_matmul_forward(const Backend *be, float *y, const float *x, const float *W, int N, int IN,
                         int OUT) {
    GemmArgs a = gemm_linear_forward(y, x, W, N, IN, OUT);
    gemm_run(be, &a);
}

void cuda_matmul_backward(const Backend *be, float *dx, float *dW, const float *dy, const float *x,
                          const float *W, int N, int IN, int OUT) {
    if (dx) {
        GemmArgs a = gemm_linear_dx(dx, dy, W, N, IN, OUT, 0);
        gemm_run(be, &a);
    }
    if (dW) {
        GemmArgs a = gemm_linear_dw(dW, dy, x, N, IN, OUT);
        gemm_run(be, &a);
    }
}

/* The router's product in fp32 whatever the precision of the others: its logits decide the
 * top-k, and a choice flipped by rounding changes the gradient's path (Switch Transformer's
 * selective precision). */
void cuda_router_logits_forward(const Backend *be, float *logits, const float *x, const float *Wr,
                                int N, int C, int E) {
    GemmArgs a = gemm_linear_forward(logits, x, Wr, N, C, E);
    gemm_run_as(be, &a, CUBLAS_COMPUTE_32F);
}

void cuda_router_logits_backward(const Backend *be, float *dx, float *dWr, const float *dlogits,
                                 const float *x, const float *Wr, int N, int C, int E) {
    if (dx) {
        GemmArgs a = gemm_linear_dx(dx, dlogits, Wr, N, C, E, 0);
        gemm_run_as(be, &a, CUBLAS_COMPUTE_32F);
    }
    if (dWr) {
        GemmArgs a = gemm_linear_dw(dWr, dlogits, x, N, C, E);
        gemm_run_as(be, &a, CUBLAS_COMPUTE_32F);
    }
}

/* ---- attention ------------------------------------------------------------------------------
 * One warp per score row (rows of every head of the call: heads * T of them), the lanes over
 * its columns (kernels_att.h). */

#define ROWS_PER_BLOCK (CUDA_THREADS / MOE_WARP)

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = MOE_WARP / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int off = MOE_WARP / 2; off > 0; off /= 2) {
        float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = v > o ? v : o;
    }
    return v;
}

/* P (rows, T): the rows of heads (T, T) matrices, row r is query t = r % T */
__global__ static void causal_softmax_kernel(float *P, int rows, int T) {
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / MOE_WARP, lane = threadIdx.x % MOE_WARP;
    if (r >= rows) return; /* whole warps leave together: r is the same across a warp */
    float *row = P + (size_t)r * T;
    int t = r % T;
    float max = warp_max(katt_lane_max(row, t, lane));
    float sum = warp_sum(katt_lane_exp(row, t, lane, max));
    katt_lane_normalise(row, t, T, lane, 1.0f / sum);
}

/* dS (rows, T) = P (dP - rowsum(P dP)) scale in place of dP, 0 above the diagonal */
__global__ static void causal_softmax_backward_kernel(float *dP, const float *P, int rows, int T,
                                                      float scale) {
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / MOE_WARP, lane = threadIdx.x % MOE_WARP;
    if (r >= rows) return;
    size_t off = (size_t)r * T;
    int t = r % T;
    float pdp = warp_sum(katt_lane_dot(P + off, dP + off, t, lane));
    katt_lane_jacobian(dP + off, P + off, t, T, lane, pdp, scale);
}

static unsigned row_blocks(int rows) {
    return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

void cuda_attention_forward(const Backend *be, float *out, float *att, const float *q,
                            const float *k, const float *v, int B, int T, int C, int H) {
    const int D = C / H;
    const float scale = 1.0f / sqrtf((float)D);
    for (int b = 0; b < B; b++) {
        size_t row0 = (size_t)b * T * C;
        float *P = att + (size_t)b * H * T * T;
        GemmArgs s = gemm_att_scores(P, q + row0, k + row0, T, C, D, H, scale);
        gemm_run(be, &s);
        causal_softmax_kernel<<<row_blocks(H * T), CUDA_THREADS, 0, cuda_stream(be)>>>(P, H * T, T);
        CUDA_LAUNCHED();
        GemmArgs o = gemm_att_pv(out + row0, P, v + row0, T, C, D, H);
        gemm_run(be, &o);
    }
}

void cuda_attention_backward(const Backend *be, float *dq, float *dk, float *dv, float *ws,
                             const float *dout, const float *att, const float *q, const float *k,
                             const float *v, int B, int T, int C, int H, int n_ws) {
    const int D = C / H;
    const float scale = 1.0f / sqrtf((float)D);
    const int group = n_ws < H ? n_ws : H; /* heads whose dS fit in ws at once */
    for (int b = 0; b < B; b++) {
        size_t row0 = (size_t)b * T * C;
        const float *P = att + (size_t)b * H * T * T;
        if (dv) {
            GemmArgs a = gemm_att_ptdo(dv + row0, P, dout + row0, T, C, D, H);
            gemm_run(be, &a);
        }
        if (!dq && !dk) continue;
        for (int h0 = 0; h0 < H; h0 += group) {
            const int G = H - h0 < group ? H - h0 : group;
            size_t col = row0 + (size_t)h0 * D;
            const float *Ph = P + (size_t)h0 * T * T;
            GemmArgs dp = gemm_att_scores(ws, dout + col, v + col, T, C, D, G, 1.0f);
            gemm_run(be, &dp);
            causal_softmax_backward_kernel<<<row_blocks(G * T), CUDA_THREADS, 0, cuda_stream(be)>>>(
                ws, Ph, G * T, T, scale);
            CUDA_LAUNCHED();
            if (dq) {
                GemmArgs a = gemm_att_pv(dq + col, ws, k + col, T, C, D, G);
                gemm_run(be, &a);
            }
            if (dk) {
                GemmArgs a = gemm_att_ptdo(dk + col, ws, q + col, T, C, D, G);
                gemm_run(be, &a);
            }
        }
    }
}

/* ---- the experts ----------------------------------------------------------------------------
 * The first rung: a loop over the experts, three products and a SwiGLU per non-empty slice
 * (the math of src/moe/experts.c, the order of backend/cpu_gemm.c: a padded slice's kept rows
 * and padding rows are two products). The slice bounds come to the host once per call (E + 1
 * offsets and E counts: one small copy and a wait), since cuBLAS takes sizes from the host. */

static int *plan_to_host(const Backend *be, const int *offsets, const int *counts, int E) {
    int *h = (int *)cuda_stage(be, (size_t)(2 * E + 1) * sizeof(int));
    CUDA_CHECK(cudaMemcpyAsync(h, offsets, (size_t)(E + 1) * sizeof(int), cudaMemcpyDeviceToHost,
                               cuda_stream(be)));
    if (counts)
        CUDA_CHECK(cudaMemcpyAsync(h + E + 1, counts, (size_t)E * sizeof(int),
                                   cudaMemcpyDeviceToHost, cuda_stream(be)));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
    return h;
}

static void slice_forward(const Backend *be, float *ye, float *g, float *u, float *h,
                          const float *xe, const float *Wg, const float *Wu, const float *Wd, int e,
                          int r0, int rows, int C, int F) {
    if (rows <= 0) return;
    size_t rc = (size_t)r0 * C, rf = (size_t)r0 * F, wo = (size_t)e * F * C;
    cuda_matmul_forward(be, g + rf, xe + rc, Wg + wo, rows, C, F);
    cuda_matmul_forward(be, u + rf, xe + rc, Wu + wo, rows, C, F);
    cuda_swiglu_forward(be, h + rf, g + rf, u + rf, rows, F);
    cuda_matmul_forward(be, ye + rc, h + rf, Wd + wo, rows, F, C);
}

void cuda_experts_forward(const Backend *be, float *ye, float *g, float *u, float *h,
                          const float *xe, const float *Wg, const float *Wu, const float *Wd,
                          const int *offsets, const int *counts, int E, int C, int F) {
    const int *hp = plan_to_host(be, offsets, counts, E);
    for (int e = 0; e < E; e++) {
        int r0 = hp[e], rows = hp[e + 1] - hp[e], kept = counts ? hp[E + 1 + e] : rows;
        slice_forward(be, ye, g, u, h, xe, Wg, Wu, Wd, e, r0, kept, C, F);
        slice_forward(be, ye, g, u, h, xe, Wg, Wu, Wd, e, r0 + kept, rows - kept, C, F);
    }
}

static void slice_backward(const Backend *be, float *dxe, float *dWg, float *dWu, float *dWd,
                           float *dg, float *du, float *dh, const float *dye, const float *xe,
                           const float *g, const float *u, const float *h, const float *Wg,
                           const float *Wu, const float *Wd, int e, int r0, int rows, int C,
                           int F) {
    if (rows <= 0) return;
    size_t rc = (size_t)r0 * C, rf = (size_t)r0 * F, wo = (size_t)e * F * C;
    cuda_matmul_backward(be, dh + rf, dWd ? dWd + wo : NULL, dye + rc, h + rf, Wd + wo, rows, F, C);
    cuda_swiglu_backward(be, dg + rf, du + rf, dh + rf, g + rf, u + rf, rows, F);
    cuda_matmul_backward(be, dxe ? dxe + rc : NULL, dWg ? dWg + wo : NULL, dg + rf, xe + rc,
                         Wg + wo, rows, C, F);
    cuda_matmul_backward(be, NULL, dWu ? dWu + wo : NULL, du + rf, xe + rc, Wu + wo, rows, C, F);
    if (dxe) { /* the input feeds both g and u: dxe += du Wu */
        GemmArgs a = gemm_linear_dx(dxe + rc, du + rf, Wu + wo, rows, C, F, 1);
        gemm_run(be, &a);
    }
}

void cuda_experts_backward(const Backend *be, float *dxe, float *dWg, float *dWu, float *dWd,
                           float *dg, float *du, float *dh, const float *dye, const float *xe,
                           const float *g, const float *u, const float *h, const float *Wg,
                           const float *Wu, const float *Wd, const int *offsets, const int *counts,
                           int E, int C, int F) {
    const int *hp = plan_to_host(be, offsets, counts, E);
    for (int e = 0; e < E; e++) {
        int r0 = hp[e], rows = hp[e + 1] - hp[e], kept = counts ? hp[E + 1 + e] : rows;
        slice_backward(be, dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, e, r0,
                       kept, C, F);
        slice_backward(be, dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, e,
                       r0 + kept, rows - kept, C, F);
    }
}

/* ---- the yardstick: C (n, n) = A B at the backend's precision, timed with events ------------ */

__global__ static void fill_kernel(float *x, size_t n, unsigned seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned z = (unsigned)i * 2654435761u ^ seed; /* a hash: any values of unit size do */
    z ^= z >> 16, z *= 0x7feb352du, z ^= z >> 15;
    x[i] = (float)(z >> 8) * (1.0f / 16777216.0f) - 0.5f;
}

void cuda_gemm_seconds(const Backend *be, int n, int reps, double *seconds) {
    const size_t nn = (size_t)n * n;
    float *a = (float *)be->alloc(be, 3 * nn * sizeof(float)), *b = a + nn, *c = b + nn;
    fill_kernel<<<cuda_blocks(2 * nn), CUDA_THREADS, 0, cuda_stream(be)>>>(a, 2 * nn, 1u);
    CUDA_LAUNCHED();
    cudaEvent_t t0, t1;
    CUDA_CHECK(cudaEventCreate(&t0));
    CUDA_CHECK(cudaEventCreate(&t1));
    GemmArgs g = gemm_args(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int rep = -1; rep < reps; rep++) { /* one warm-up, then the timed products */
        CUDA_CHECK(cudaEventRecord(t0, cuda_stream(be)));
        gemm_run(be, &g);
        CUDA_CHECK(cudaEventRecord(t1, cuda_stream(be)));
        CUDA_CHECK(cudaEventSynchronize(t1));
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
        if (rep >= 0) seconds[rep] = 1e-3 * ms;
    }
    CUDA_CHECK(cudaEventDestroy(t0));
    CUDA_CHECK(cudaEventDestroy(t1));
    be->free(be, a);
}
