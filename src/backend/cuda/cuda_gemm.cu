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
 * weights, gradients and AdamW moments stay fp32 in every mode. gemm_args.h chooses them
 * (gemm_compute, gemm_experts_call: cublasGemmGroupedBatchedEx has no bf16 compute on fp32
 * data, so the experts' products at bf16 run one cublasGemmEx each).
 */
#include "backend/cuda/cuda.cuh"

#include "backend/cuda/gemm_args.h"
#include "backend/cuda/kernels_att.h"

/* gemm_args.h's numbers as cuBLAS's types */
static cublasComputeType_t cublas_compute(int compute) {
    switch (compute) {
    case GEMM_COMPUTE_32F_FAST_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GEMM_COMPUTE_32F_FAST_16BF: return CUBLAS_COMPUTE_32F_FAST_16BF;
    default: return CUBLAS_COMPUTE_32F;
    }
}
static cudaDataType_t cuda_type(int type) {
    switch (type) {
    case GEMM_TYPE_16F: return CUDA_R_16F;
    case GEMM_TYPE_16BF: return CUDA_R_16BF;
    default: return CUDA_R_32F;
    }
}

static cublasComputeType_t compute_type(const Backend *be) {
    return cublas_compute(gemm_compute(cuda_ctx(be)->precision));
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
    float max = warp_max(att_row_max(row, t + 1, lane, MOE_WARP));
    att_row_exp(row, t + 1, max, lane, MOE_WARP);
    float sum = warp_sum(att_row_sum(row, t + 1, lane, MOE_WARP));
    att_row_normalise(row, t + 1, T, 1.0f / sum, lane, MOE_WARP);
}

/* dS (rows, T) = P (dP - rowsum(P dP)) scale in place of dP, 0 above the diagonal */
__global__ static void causal_softmax_backward_kernel(float *dP, const float *P, int rows, int T,
                                                      float scale) {
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / MOE_WARP, lane = threadIdx.x % MOE_WARP;
    if (r >= rows) return;
    size_t off = (size_t)r * T;
    int t = r % T;
    float pdp = warp_sum(att_row_dot(P + off, dP + off, t + 1, lane, MOE_WARP));
    att_row_jacobian(dP + off, P + off, t + 1, T, pdp, scale, lane, MOE_WARP);
}

static unsigned row_blocks(int rows) {
    return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

/* the device's attention steps (gemm_args.h: att_forward_steps, att_backward_steps) */
static void att_gemm(void *ctx, const GemmArgs *a) {
    gemm_run((const Backend *)ctx, a);
}
static void att_softmax(void *ctx, float *P, int rows, int T) {
    causal_softmax_kernel<<<row_blocks(rows), CUDA_THREADS, 0, cuda_stream((const Backend *)ctx)>>>(
        P, rows, T);
    CUDA_LAUNCHED();
}
static void att_softmax_backward(void *ctx, float *dP, const float *P, int rows, int T,
                                 float scale) {
    causal_softmax_backward_kernel<<<row_blocks(rows), CUDA_THREADS, 0,
                                     cuda_stream((const Backend *)ctx)>>>(dP, P, rows, T, scale);
    CUDA_LAUNCHED();
}
static AttSteps att_steps(const Backend *be) {
    AttSteps s = {att_gemm, att_softmax, att_softmax_backward, (void *)be};
    return s;
}

void cuda_attention_forward(const Backend *be, float *out, float *att, const float *q,
                            const float *k, const float *v, int B, int T, int H, int Hkv, int D,
                            int Dv) {
    const AttSteps s = att_steps(be);
    att_forward_steps(&s, out, att, q, k, v, B, T, H, Hkv, D, Dv, 1.0f / sqrtf((float)D));
}

/* Decoding: one warp per (query row, head) row of att (N H, Tc): scores, softmax over the
 * first t + 1 keys of the row's sequence (rows[n] = s Tc + t, katt_dec_seq), then the weighted sum of the values (attention_row.h, kernels_att.h). The
 * row is a few hundred keys at most in this engine, so one warp reads it whole; no product
 * library is needed. */
__global__ static void decode_attention_kernel(float *out, float *att, const float *q,
                                               const float *kc, const float *vc, const int *rows,
                                               int N, int H, int Hkv, int D, int Dv, int Tc,
                                               float scale) {
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / MOE_WARP, lane = threadIdx.x % MOE_WARP;
    if (r >= N * H) return; /* whole warps leave together */
    const int n = r / H, h = r % H, KW = Hkv * D, VW = Hkv * Dv;
    int len;
    const int s = katt_dec_seq(rows, n, Tc, &len);
    float *p = att + (size_t)r * Tc;
    const size_t kh = (size_t)s * Tc * KW + (size_t)(h / (H / Hkv)) * D;
    const size_t vh = (size_t)s * Tc * VW + (size_t)(h / (H / Hkv)) * Dv;
    float max = warp_max(att_row_scores(p, q + (size_t)n * H * D + (size_t)h * D, kc + kh, len, KW,
                                        D, scale, lane, MOE_WARP));
    att_row_exp(p, len, max, lane, MOE_WARP);
    float sum = warp_sum(att_row_sum(p, len, lane, MOE_WARP));
    att_row_normalise(p, len, Tc, 1.0f / sum, lane, MOE_WARP);
    __syncwarp();
    katt_dec_lane_out(out + (size_t)n * H * Dv + (size_t)h * Dv, p, vc + vh, len, VW, Dv, lane);
}

void cuda_attention_decode(const Backend *be, float *out, float *att, const float *q,
                           const float *kc, const float *vc, const int *rows, int N, int H, int Hkv,
                           int D, int Dv, int Tc) {
    if (N <= 0) return;
    decode_attention_kernel<<<row_blocks(N * H), CUDA_THREADS, 0, cuda_stream(be)>>>(
        out, att, q, kc, vc, rows, N, H, Hkv, D, Dv, Tc, 1.0f / sqrtf((float)D));
    CUDA_LAUNCHED();
}

void cuda_attention_backward(const Backend *be, float *dq, float *dk, float *dv, float *ws,
                             const float *dout, const float *att, const float *q, const float *k,
                             const float *v, int B, int T, int H, int Hkv, int D, int Dv,
                             int n_ws) {
    const AttSteps s = att_steps(be);
    att_backward_steps(&s, dq, dk, dv, ws, dout, att, q, k, v, B, T, H, Hkv, D, Dv, n_ws,
                       1.0f / sqrtf((float)D));
}

/* ---- the experts ----------------------------------------------------------------------------
 * The slices of the plan (gemm_args.h: expert_slices) are the problems. The slice bounds come
 * to the host once per call (E + 1 offsets and E counts: one small copy and a wait), since
 * cuBLAS takes sizes from the host. Then, by default, each pass of products (g, u, ye; and
 * backward dh, dWd, dxe, dWg, dWu, dxe again) over every slice is one
 * cublasGemmGroupedBatchedEx call (two: the kept slices, then a padded plan's padding slices,
 * so that no call has two problems adding into one expert's weight gradient), and the SwiGLU
 * between them one kernel over all the rows. MOE_CUDA_EXPERTS=loop runs the first rung instead:
 * a loop over the slices, three products and a SwiGLU each (the order of backend/cpu_gemm.c). */

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

/* Room for the argument lists of `passes` passes over n slices. The stream is idle when this
 * runs (plan_to_host waited for it), so growing frees nothing in use. */
typedef struct {
    ExpertSlice *slices; /* (2 E) */
    GemmArgs *args;      /* (passes, n) */
    cublasOperation_t *ta, *tb;
    int *m, *n, *k, *lda, *ldb, *ldc, *group_size; /* (n) each: one pass's */
    float *alpha, *beta;                           /* (n) */
    const void **ptr_host;                         /* (passes, 3, n): pinned */
    const void **ptr_dev;                          /* the same on the device */
} Groups;

static void *grow(void **p, size_t *have, size_t need, int kind) {
    if (need <= *have) return *p;
    if (*p) {
        if (kind == 0)
            free(*p);
        else if (kind == 1)
            CUDA_CHECK(cudaFreeHost(*p));
        else
            CUDA_CHECK(cudaFree(*p));
    }
    if (kind == 0)
        *p = malloc_check(need);
    else if (kind == 1)
        CUDA_CHECK(cudaMallocHost(p, need));
    else
        CUDA_CHECK(cudaMalloc(p, need));
    *have = need;
    return *p;
}

static Groups groups_room(const Backend *be, int E, int passes) {
    CudaCtx *c = cuda_ctx(be);
    const size_t n = (size_t)2 * E;
    const size_t host = n * sizeof(ExpertSlice) + (size_t)passes * n * sizeof(GemmArgs) +
                        2 * n * sizeof(cublasOperation_t) + 7 * n * sizeof(int) +
                        2 * n * sizeof(float) + 64;
    char *h = (char *)grow(&c->group_host, &c->group_host_bytes, host, 0);
    Groups g;
    g.slices = (ExpertSlice *)h, h += n * sizeof(ExpertSlice);
    g.args = (GemmArgs *)h, h += (size_t)passes * n * sizeof(GemmArgs);
    g.ta = (cublasOperation_t *)h, h += n * sizeof(cublasOperation_t);
    g.tb = (cublasOperation_t *)h, h += n * sizeof(cublasOperation_t);
    int *ints = (int *)h;
    g.m = ints, g.n = ints + n, g.k = ints + 2 * n, g.lda = ints + 3 * n, g.ldb = ints + 4 * n;
    g.ldc = ints + 5 * n, g.group_size = ints + 6 * n;
    h += 7 * n * sizeof(int);
    g.alpha = (float *)h, g.beta = g.alpha + n;
    const size_t ptrs = (size_t)passes * 3 * n * sizeof(void *);
    g.ptr_host = (const void **)grow(&c->group_pinned, &c->group_pinned_bytes, ptrs, 1);
    g.ptr_dev = (const void **)grow(&c->group_dev, &c->group_dev_bytes, ptrs, 2);
    return g;
}

/* One grouped call: the problems args[0 .. cnt) of one pass, whose A, B and C pointers are at
 * dA, dB, dC on the device. Every problem is a group of one. Where cuBLAS's grouped call has no
 * such combination of types (bf16 arithmetic on fp32 data: gemm_experts_call), the same
 * problems run one cublasGemmEx each, in order. */
static void gemm_grouped(const Backend *be, Groups *g, const GemmArgs *args, int cnt,
                         const void *const *dA, const void *const *dB, void *const *dC) {
    if (cnt <= 0) return;
    const GemmExpertsCall call = gemm_experts_call(cuda_ctx(be)->precision);
    const GemmTypes *t = &call.types;
    if (call.call == GEMM_EACH) {
        for (int i = 0; i < cnt; i++) gemm_run_as(be, &args[i], cublas_compute(t->compute));
        return;
    }
    for (int i = 0; i < cnt; i++) {
        const GemmArgs *a = &args[i];
        g->ta[i] = a->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
        g->tb[i] = a->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
        g->m[i] = a->m, g->n[i] = a->n, g->k[i] = a->k;
        g->lda[i] = a->lda, g->ldb[i] = a->ldb, g->ldc[i] = a->ldc;
        g->alpha[i] = a->alpha, g->beta[i] = a->beta, g->group_size[i] = 1;
    }
    CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
        cuda_ctx(be)->blas, g->ta, g->tb, g->m, g->n, g->k, g->alpha, dA, cuda_type(t->a), g->lda,
        dB, cuda_type(t->b), g->ldb, g->beta, dC, cuda_type(t->c), g->ldc, cnt, g->group_size,
        cublas_compute(t->compute)));
}

/* Every pass of passes[0 .. np) over the n slices: the argument lists built, the pointer arrays
 * uploaded in one copy; then the passes run in order, each as the kept slices' grouped call
 * and the padding slices' one, and the SwiGLU over all the plan's rows (offsets[E], known once
 * the slices are on the host) where it falls: forward after u; backward once dh is there
 * (after dWd, which reads h, when that is wanted). */
static void experts_grouped(const Backend *be, const ExpertBuffers *b, const int *passes, int np,
                            const int *offsets, const int *counts, int E, int backward) {
    const int *hp = plan_to_host(be, offsets, counts, E);
    const int S = hp[E];
    Groups g = groups_room(be, E, np);
    int n_kept = 0;
    const int n = expert_slices(g.slices, &n_kept, hp, counts ? hp + E + 1 : NULL, E);
    for (int p = 0; p < np; p++)
        for (int i = 0; i < n; i++) {
            GemmArgs a = gemm_expert(b, passes[p], g.slices[i]);
            g.args[(size_t)p * n + i] = a;
            const void **pt = g.ptr_host + (size_t)p * 3 * n;
            pt[i] = a.A, pt[n + i] = a.B, pt[2 * n + i] = a.C;
        }
    if (n > 0)
        CUDA_CHECK(cudaMemcpyAsync(g.ptr_dev, g.ptr_host, (size_t)np * 3 * n * sizeof(void *),
                                   cudaMemcpyHostToDevice, cuda_stream(be)));
    for (int p = 0; p < np; p++) {
        const GemmArgs *args = g.args + (size_t)p * n;
        const void *const *d = g.ptr_dev + (size_t)p * 3 * n;
        for (int part = 0; part < 2; part++) { /* kept slices, then padding slices */
            const int first = part ? n_kept : 0, cnt = part ? n - n_kept : n_kept;
            gemm_grouped(be, &g, args + first, cnt, d + first, d + n + first,
                         (void *const *)(d + 2 * n + first));
        }
        if (!backward && passes[p] == EXPERT_U) cuda_swiglu_forward(be, b->h, b->g, b->u, S, b->F);
        if (backward && (passes[p] == EXPERT_DWD || (passes[p] == EXPERT_DH && !b->dWd)))
            cuda_swiglu_backward(be, b->dg, b->du, b->dh, b->g, b->u, S, b->F);
    }
}

/* the first rung: one slice after another, as backend/cpu_gemm.c runs them */
static void experts_loop(const Backend *be, const ExpertBuffers *b, int backward,
                         const int *offsets, const int *counts, int E) {
    const int *hp = plan_to_host(be, offsets, counts, E);
    for (int e = 0; e < E; e++) {
        int r0 = hp[e], rows = hp[e + 1] - hp[e], kept = counts ? hp[E + 1 + e] : rows;
        for (int part = 0; part < 2; part++) {
            ExpertSlice sl = {e, part ? r0 + kept : r0, part ? rows - kept : kept};
            if (sl.rows <= 0) continue;
            const size_t rf = (size_t)sl.r0 * b->F;
            GemmArgs a;
            if (!backward) {
                a = gemm_expert(b, EXPERT_G, sl), gemm_run(be, &a);
                a = gemm_expert(b, EXPERT_U, sl), gemm_run(be, &a);
                cuda_swiglu_forward(be, b->h + rf, b->g + rf, b->u + rf, sl.rows, b->F);
                a = gemm_expert(b, EXPERT_Y, sl), gemm_run(be, &a);
                continue;
            }
            a = gemm_expert(b, EXPERT_DH, sl), gemm_run(be, &a);
            if (b->dWd) a = gemm_expert(b, EXPERT_DWD, sl), gemm_run(be, &a);
            cuda_swiglu_backward(be, b->dg + rf, b->du + rf, b->dh + rf, b->g + rf, b->u + rf,
                                 sl.rows, b->F);
            if (b->dxe) a = gemm_expert(b, EXPERT_DXG, sl), gemm_run(be, &a);
            if (b->dWg) a = gemm_expert(b, EXPERT_DWG, sl), gemm_run(be, &a);
            if (b->dWu) a = gemm_expert(b, EXPERT_DWU, sl), gemm_run(be, &a);
            if (b->dxe) a = gemm_expert(b, EXPERT_DXU, sl), gemm_run(be, &a);
        }
    }
}

void cuda_experts_forward(const Backend *be, float *ye, float *g, float *u, float *h,
                          const float *xe, const float *Wg, const float *Wu, const float *Wd,
                          const int *offsets, const int *counts, int E, int C, int F) {
    ExpertBuffers b = {};
    b.xe = (float *)xe, b.g = g, b.u = u, b.h = h, b.ye = ye;
    b.Wg = (float *)Wg, b.Wu = (float *)Wu, b.Wd = (float *)Wd, b.C = C, b.F = F;
    if (cuda_ctx(be)->experts_loop) {
        experts_loop(be, &b, 0, offsets, counts, E);
        return;
    }
    const int passes[] = {EXPERT_G, EXPERT_U, EXPERT_Y};
    experts_grouped(be, &b, passes, 3, offsets, counts, E, 0);
}

void cuda_experts_backward(const Backend *be, float *dxe, float *dWg, float *dWu, float *dWd,
                           float *dg, float *du, float *dh, const float *dye, const float *xe,
                           const float *g, const float *u, const float *h, const float *Wg,
                           const float *Wu, const float *Wd, const int *offsets, const int *counts,
                           int E, int C, int F) {
    ExpertBuffers b = {};
    b.xe = (float *)xe, b.g = (float *)g, b.u = (float *)u, b.h = (float *)h;
    b.dxe = dxe, b.dg = dg, b.du = du, b.dh = dh, b.dye = (float *)dye;
    b.Wg = (float *)Wg, b.Wu = (float *)Wu, b.Wd = (float *)Wd;
    b.dWg = dWg, b.dWu = dWu, b.dWd = dWd, b.C = C, b.F = F;
    if (cuda_ctx(be)->experts_loop) {
        experts_loop(be, &b, 1, offsets, counts, E);
        return;
    }
    /* the passes asked for (a NULL gradient is not wanted); dh and the SwiGLU's always */
    int passes[EXPERT_PASSES], np = 0;
    passes[np++] = EXPERT_DH;
    if (dWd) passes[np++] = EXPERT_DWD;
    if (dxe) passes[np++] = EXPERT_DXG;
    if (dWg) passes[np++] = EXPERT_DWG;
    if (dWu) passes[np++] = EXPERT_DWU;
    if (dxe) passes[np++] = EXPERT_DXU;
    experts_grouped(be, &b, passes, np, offsets, counts, E, 1);
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
