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

#include "config/config.h" /* MOE_PRECISION_* */

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

/* ---- attention: strided batches of heads --------------------------------------------------
 * q: rows of H query heads of D channels (QW = H D floats a row); k: rows of Hkv key-value
 * heads (KW = Hkv D); v: Hkv heads of Dv (VW = Hkv Dv); out, dout: H heads of Dv (OW = H Dv);
 * query head h reads key-value head h / (H / Hkv). P (T, T) one row-major matrix per head.
 * Row-major products, per head:
 *   S = s Q K^T      O = P V      dV = P^T dO      dP = dO V^T      dQ = dS K      dK = dS^T Q
 * A batch runs `heads` query heads side by side, their Q D floats apart in a row; kstride is how
 * far apart their key-value heads are: D when each has its own (multi-head), 0 when they share
 * one (the heads of one group). */

/* P (T, T) = scale Q K^T, per head */
static inline GemmArgs gemm_att_scores(float *P, const float *q, int ldq, const float *k, int ldk,
                                       long long kstride, int T, int D, int heads, float scale) {
    GemmArgs a = gemm_args(1, 0, T, T, D, scale, k, ldk, q, ldq, 0.0f, P, T);
    a.batch = heads, a.strideA = kstride, a.strideB = D, a.strideC = (long long)T * T;
    return a;
}
/* O (T, D) = P (T, T) V (T, D), per head (also dQ = dS K: P = dS, V = k) */
static inline GemmArgs gemm_att_pv(float *out, int ldo, const float *P, const float *v, int ldv,
                                   long long vstride, int T, int D, int heads) {
    GemmArgs a = gemm_args(0, 0, D, T, T, 1.0f, v, ldv, P, T, 0.0f, out, ldo);
    a.batch = heads, a.strideA = vstride, a.strideB = (long long)T * T, a.strideC = D;
    return a;
}
/* dV (T, D) = P (T, T)^T dO (T, D) + beta dV, per head, each head its own dV D floats after the
 * last (also dK = dS^T Q: P = dS, dO = q) */
static inline GemmArgs gemm_att_ptdo(float *dv, int lddv, const float *P, const float *dout,
                                     int ldo, int T, int D, int heads, float beta) {
    GemmArgs a = gemm_args(0, 1, D, T, T, 1.0f, dout, ldo, P, T, beta, dv, lddv);
    a.batch = heads, a.strideA = D, a.strideB = (long long)T * T, a.strideC = D;
    return a;
}

/* The attention's products and the softmax steps between them, in the order the CUDA backend
 * runs them (cuda_gemm.cu gives the device's calls, tests/test_cuda_gemm.c the host's): gemm
 * runs one tuple; softmax makes rows rows of T scores probabilities (row r is query r % T);
 * softmax_backward turns rows rows of dP into dS in place. */
typedef struct {
    void (*gemm)(void *ctx, const GemmArgs *a);
    void (*softmax)(void *ctx, float *P, int rows, int T);
    void (*softmax_backward)(void *ctx, float *dP, const float *P, int rows, int T, float scale);
    void *ctx;
} AttSteps;

/* The heads a batch takes: all H with a key-value head each (kstride D), else one group's
 * H / Hkv (kstride 0). */
static inline int att_span(int H, int Hkv) {
    return H == Hkv ? H : H / Hkv;
}

/* Where the heads of one batch start: q's (head h0), out's, and those of its key-value head in
 * k and v, in batch row b. */
typedef struct {
    size_t q, o, k, v;
} AttAt;
static inline AttAt att_at(int b, int h0, int T, int H, int Hkv, int D, int Dv) {
    const int grp = H / Hkv;
    AttAt a = {(size_t)b * T * H * D + (size_t)h0 * D, (size_t)b * T * H * Dv + (size_t)h0 * Dv,
               (size_t)b * T * Hkv * D + (size_t)(h0 / grp) * D,
               (size_t)b * T * Hkv * Dv + (size_t)(h0 / grp) * Dv};
    return a;
}

/* out (B, T, H Dv), att (B, H, T, T) from q (B, T, H D), k (B, T, Hkv D), v (B, T, Hkv Dv) */
static inline void att_forward_steps(const AttSteps *s, float *out, float *att, const float *q,
                                     const float *k, const float *v, int B, int T, int H, int Hkv,
                                     int D, int Dv, float scale) {
    const int QW = H * D, KW = Hkv * D, VW = Hkv * Dv, OW = H * Dv, span = att_span(H, Hkv);
    const int own = H == Hkv; /* a key-value head each: the batch's heads step through k, v */
    for (int b = 0; b < B; b++)
        for (int h0 = 0; h0 < H; h0 += span) {
            const AttAt at = att_at(b, h0, T, H, Hkv, D, Dv);
            float *P = att + ((size_t)b * H + h0) * T * T;
            GemmArgs sc =
                gemm_att_scores(P, q + at.q, QW, k + at.k, KW, own ? D : 0, T, D, span, scale);
            s->gemm(s->ctx, &sc);
            s->softmax(s->ctx, P, span * T, T);
            GemmArgs o = gemm_att_pv(out + at.o, OW, P, v + at.v, VW, own ? Dv : 0, T, Dv, span);
            s->gemm(s->ctx, &o);
        }
}

/* dV = P^T dO for the heads [h0, h0 + span) of batch row b: one batch when each has its own
 * value head, else a product a head, the group's first writing and the others adding (products
 * of one batch may run at once, and so never write the same output) */
static inline void att_dv_steps(const AttSteps *s, float *dv, const float *P, const float *dout,
                                const AttAt *at, int T, int H, int Hkv, int Dv, int span) {
    const int own = H == Hkv;
    for (int j = 0; j < (own ? 1 : span); j++) {
        GemmArgs a = gemm_att_ptdo(dv + at->v, Hkv * Dv, P + (size_t)j * T * T,
                                   dout + at->o + (size_t)j * Dv, H * Dv, T, Dv, own ? span : 1,
                                   j ? 1.0f : 0.0f);
        s->gemm(s->ctx, &a);
    }
}

/* The backward: dq (B, T, H D) written, dk (B, T, Hkv D) and dv (B, T, Hkv Dv) written as the
 * sums over each group's heads (any may be NULL); ws (n_ws, T, T) holds the dS of n_ws heads at
 * a time. A group's heads add into its dk and dv one product after another (beta 1 after the
 * first). */
static inline void att_backward_steps(const AttSteps *s, float *dq, float *dk, float *dv, float *ws,
                                      const float *dout, const float *att, const float *q,
                                      const float *k, const float *v, int B, int T, int H, int Hkv,
                                      int D, int Dv, int n_ws, float scale) {
    const int QW = H * D, KW = Hkv * D, VW = Hkv * Dv, OW = H * Dv, span = att_span(H, Hkv);
    const int own = H == Hkv;
    const int chunk = n_ws < span ? n_ws : span; /* heads whose dS fit in ws at once */
    for (int b = 0; b < B; b++)
        for (int h0 = 0; h0 < H; h0 += span) {
            const float *P = att + ((size_t)b * H + h0) * T * T;
            const AttAt at = att_at(b, h0, T, H, Hkv, D, Dv);
            if (dv) att_dv_steps(s, dv, P, dout, &at, T, H, Hkv, Dv, span);
            if (!dq && !dk) continue;
            for (int c0 = 0; c0 < span; c0 += chunk) {
                const int G = span - c0 < chunk ? span - c0 : chunk;
                const size_t qh = at.q + (size_t)c0 * D, oh = at.o + (size_t)c0 * Dv;
                const size_t kh = at.k + (size_t)(own ? c0 * D : 0);
                const size_t vh = at.v + (size_t)(own ? c0 * Dv : 0);
                GemmArgs dp =
                    gemm_att_scores(ws, dout + oh, OW, v + vh, VW, own ? Dv : 0, T, Dv, G, 1.0f);
                s->gemm(s->ctx, &dp);
                s->softmax_backward(s->ctx, ws, P + (size_t)c0 * T * T, G * T, T, scale);
                if (dq) {
                    GemmArgs a = gemm_att_pv(dq + qh, QW, ws, k + kh, KW, own ? D : 0, T, D, G);
                    s->gemm(s->ctx, &a);
                }
                for (int j = 0; dk && j < (own ? 1 : G); j++) {
                    GemmArgs a =
                        gemm_att_ptdo(dk + kh, KW, ws + (size_t)j * T * T, q + qh + (size_t)j * D,
                                      QW, T, D, own ? G : 1, own || c0 + j == 0 ? 0.0f : 1.0f);
                    s->gemm(s->ctx, &a);
                }
            }
        }
}

/* ---- the experts: one problem per slice ------------------------------------------------------
 * A plan's slot buffer holds expert e's rows [offsets[e], offsets[e + 1]); in a padded plan the
 * first counts[e] are kept rows and the rest padding, each part a product of its own (as on the
 * CPU: the kept rows then round as in an unpadded plan). expert_slices lists the non-empty
 * parts: every expert's kept part first, in expert order (n_kept of them), then every expert's
 * padding part. Within each of the two lists no two slices share an expert, so the products of
 * one list may run as one grouped call even where they accumulate into the expert's weight
 * gradient; the second list then runs after the first. out holds 2 E slices. */
typedef struct {
    int e, r0, rows;
} ExpertSlice;

static inline int expert_slices(ExpertSlice *out, int *n_kept, const int *offsets,
                                const int *counts, int E) {
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int e = 0; e < E; e++) {
            int r0 = offsets[e], rows = offsets[e + 1] - offsets[e];
            int kept = counts ? counts[e] : rows;
            ExpertSlice sl = {e, pass ? r0 + kept : r0, pass ? rows - kept : kept};
            if (sl.rows > 0) out[n++] = sl;
        }
        if (pass == 0) *n_kept = n;
    }
    return n;
}

/* The experts' products of one slice, by pass (experts.c's math): xe (S, C) the slot rows,
 * g, u, h (S, F), ye (S, C); Wg, Wu (E, F, C), Wd (E, C, F). */
enum {
    EXPERT_G,   /* g = xe Wg[e]^T */
    EXPERT_U,   /* u = xe Wu[e]^T */
    EXPERT_Y,   /* ye = h Wd[e]^T */
    EXPERT_DH,  /* dh = dye Wd[e] */
    EXPERT_DWD, /* dWd[e] += dye^T h */
    EXPERT_DXG, /* dxe = dg Wg[e] */
    EXPERT_DWG, /* dWg[e] += dg^T xe */
    EXPERT_DWU, /* dWu[e] += du^T xe */
    EXPERT_DXU, /* dxe += du Wu[e] */
    EXPERT_PASSES
};
typedef struct {
    float *xe, *g, *u, *h, *ye;      /* forward */
    float *dxe, *dg, *du, *dh, *dye; /* backward */
    float *Wg, *Wu, *Wd, *dWg, *dWu, *dWd;
    int C, F;
} ExpertBuffers;

static inline GemmArgs gemm_expert(const ExpertBuffers *b, int pass, ExpertSlice sl) {
    const int C = b->C, F = b->F, n = sl.rows;
    const size_t rc = (size_t)sl.r0 * C, rf = (size_t)sl.r0 * F, wo = (size_t)sl.e * F * C;
    switch (pass) {
    case EXPERT_G: return gemm_linear_forward(b->g + rf, b->xe + rc, b->Wg + wo, n, C, F);
    case EXPERT_U: return gemm_linear_forward(b->u + rf, b->xe + rc, b->Wu + wo, n, C, F);
    case EXPERT_Y: return gemm_linear_forward(b->ye + rc, b->h + rf, b->Wd + wo, n, F, C);
    case EXPERT_DH: return gemm_linear_dx(b->dh + rf, b->dye + rc, b->Wd + wo, n, F, C, 0);
    case EXPERT_DWD: return gemm_linear_dw(b->dWd + wo, b->dye + rc, b->h + rf, n, F, C);
    case EXPERT_DXG: return gemm_linear_dx(b->dxe + rc, b->dg + rf, b->Wg + wo, n, C, F, 0);
    case EXPERT_DWG: return gemm_linear_dw(b->dWg + wo, b->dg + rf, b->xe + rc, n, C, F);
    case EXPERT_DWU: return gemm_linear_dw(b->dWu + wo, b->du + rf, b->xe + rc, n, C, F);
    default: return gemm_linear_dx(b->dxe + rc, b->du + rf, b->Wu + wo, n, C, F, 1);
    }
}

/* ---- the arithmetic of each call, by train.precision -----------------------------------------
 * cuBLAS's data and compute types as plain numbers (cuda_gemm.cu turns them into its
 * cudaDataType_t and cublasComputeType_t), so that the host tests can check the choice against
 * cuBLAS's tables of supported combinations. */
enum { GEMM_TYPE_32F, GEMM_TYPE_16F, GEMM_TYPE_16BF };
enum { GEMM_COMPUTE_32F, GEMM_COMPUTE_32F_FAST_TF32, GEMM_COMPUTE_32F_FAST_16BF };
typedef struct {
    int a, b, c; /* GEMM_TYPE_*: A's, B's and C's data type */
    int compute; /* GEMM_COMPUTE_* */
} GemmTypes;

/* The large products' compute type at a train.precision (MOE_PRECISION_*): fp32 as fp32 FMAs,
 * tf32 and bf16 on tensor cores with the fp32 operands rounded inside cuBLAS. The data stay
 * fp32 (the engine's buffers). */
static inline int gemm_compute(int precision) {
    switch (precision) {
    case MOE_PRECISION_TF32: return GEMM_COMPUTE_32F_FAST_TF32;
    case MOE_PRECISION_BF16: return GEMM_COMPUTE_32F_FAST_16BF;
    default: return GEMM_COMPUTE_32F;
    }
}

/* How the experts' products of one pass run (cuda_gemm.cu), and with which types:
 *
 *   GEMM_GROUPED  one cublasGemmGroupedBatchedEx call over the pass's problems;
 *   GEMM_EACH     one cublasGemmEx per problem, in the list's order, on the same stream.
 *
 * cuBLAS's table for the grouped call takes fp32 A, B and C with CUBLAS_COMPUTE_32F and
 * CUBLAS_COMPUTE_32F_FAST_TF32 only; its bf16 rows want bf16 operands AND a bf16 C, which
 * would round the experts' outputs and the weight gradients they accumulate into to bf16.
 * cublasGemmEx takes fp32 data with CUBLAS_COMPUTE_32F_FAST_16BF. So at bf16 the products run
 * one by one through cublasGemmEx, as bf16 products with fp32 data like every other product
 * of the step (more launches, the same arithmetic); at fp32 and tf32 they are grouped. */
enum { GEMM_GROUPED, GEMM_EACH };
typedef struct {
    int call; /* GEMM_GROUPED or GEMM_EACH */
    GemmTypes types;
} GemmExpertsCall;

static inline GemmExpertsCall gemm_experts_call(int precision) {
    const int compute = gemm_compute(precision);
    GemmExpertsCall c = {GEMM_GROUPED, {GEMM_TYPE_32F, GEMM_TYPE_32F, GEMM_TYPE_32F, compute}};
    if (compute == GEMM_COMPUTE_32F_FAST_16BF) c.call = GEMM_EACH;
    return c;
}

#endif
