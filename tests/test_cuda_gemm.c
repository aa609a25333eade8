/*
 * test_cuda_gemm.c: the CUDA backend's products, checked on the CPU.
 *
 *   - every GemmArgs tuple of backend/cuda/gemm_args.h (the column-major arguments cuda_gemm.cu
 *     hands to cuBLAS) run through cblas_sgemm(CblasColMajor, ...): the linear layer's
 *     forward, dx (written and added) and dW (accumulated) against the reference matmul;
 *   - the experts' grouped products: the slice lists of a dropless and a padded plan, every pass
 *     of GemmArgs over them (kept slices, then padding slices) and the SwiGLU between, as
 *     cuda_gemm.cu runs them, against experts_forward / experts_backward;
 *   - the GPU attention's whole algorithm on the host, in the order cuda_gemm.cu runs it: the
 *     strided-batched tuples per batch row, the softmax and its backward from the bodies of
 *     backend/cuda/kernels_att.h walked lane by lane with the warp's butterfly, the heads of the
 *     backward in groups as small as the workspace allows; against nn/attention.c;
 *   - the data and compute types of the experts' call at every train.precision, against the
 *     combinations cuBLAS documents for cublasGemmGroupedBatchedEx and cublasGemmEx.
 * No GPU is needed: what cuBLAS and the kernels add on a GPU is checked there
 * (tests/gpu/run_device.sh).
 */
#include "backend/cpu/blas.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gemm_args.h"
#include "backend/cuda/kernels_att.h"
#include "moe/moe_ops.h"
#include "ops_util.h"

/* a GemmArgs tuple as cuBLAS would run it, on the CPU */
static void gemm_cblas(const GemmArgs *a) {
    for (int i = 0; i < a->batch; i++)
        cblas_sgemm(CblasColMajor, a->transa ? CblasTrans : CblasNoTrans,
                    a->transb ? CblasTrans : CblasNoTrans, a->m, a->n, a->k, a->alpha,
                    a->A + i * a->strideA, a->lda, a->B + i * a->strideB, a->ldb, a->beta,
                    a->C + i * a->strideC, a->ldc);
}

START_TEST(test_linear_tuples) {
    const int shapes[][3] = {{7, 5, 3}, {1, 16, 9}, {33, 64, 48}, {5, 1, 1}};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        int N = shapes[sh][0], IN = shapes[sh][1], OUT = shapes[sh][2];
        size_t nx = (size_t)N * IN, ny = (size_t)N * OUT, nw = (size_t)OUT * IN;
        float *x = rand_floats(nx, 1.0f, 1 + sh), *W = rand_floats(nw, 0.5f, 2 + sh);
        float *dy = rand_floats(ny, 1.0f, 3 + sh), *prior = rand_floats(nw, 0.1f, 4 + sh);
        float *y = garbage_floats(ny), *y_ref = floats_alloc(ny);
        GemmArgs f = gemm_linear_forward(y, x, W, N, IN, OUT);
        gemm_cblas(&f);
        matmul_forward(y_ref, x, W, N, IN, OUT);
        CLOSE_ARRAYS(y, y_ref, ny, "forward tuple");

        /* dx written over NaN, dW added to a non-zero prior */
        float *dx = garbage_floats(nx), *dW = floats_alloc(nw);
        float *dx_ref = floats_alloc(nx), *dW_ref = floats_alloc(nw);
        memcpy(dW, prior, nw * sizeof(float));
        memcpy(dW_ref, prior, nw * sizeof(float));
        GemmArgs d = gemm_linear_dx(dx, dy, W, N, IN, OUT, 0);
        GemmArgs w = gemm_linear_dw(dW, dy, x, N, IN, OUT);
        gemm_cblas(&d), gemm_cblas(&w);
        matmul_backward(dx_ref, dW_ref, dy, x, W, N, IN, OUT);
        CLOSE_ARRAYS(dx, dx_ref, nx, "dx tuple");
        CLOSE_ARRAYS(dW, dW_ref, nw, "dW tuple (accumulated)");

        /* dx with add: dx + dy W */
        float *dx2 = floats_alloc(nx), *want = floats_alloc(nx);
        for (size_t i = 0; i < nx; i++) dx2[i] = 1.0f, want[i] = 1.0f + dx_ref[i];
        GemmArgs d2 = gemm_linear_dx(dx2, dy, W, N, IN, OUT, 1);
        gemm_cblas(&d2);
        CLOSE_ARRAYS(dx2, want, nx, "dx tuple with add");
        free(x), free(W), free(dy), free(prior), free(y), free(y_ref), free(dx), free(dW);
        free(dx_ref), free(dW_ref), free(dx2), free(want);
    }
}
END_TEST

/* ---- attention as cuda_gemm.cu runs it ------------------------------------------------------ */

/* one warp over each of rows rows of P (row r is query r % T), as the kernels walk them */
static void softmax_rows(float *P, int rows, int T) {
    for (int r = 0; r < rows; r++) {
        float *row = P + (size_t)r * T, v[MOE_WARP];
        int t = r % T;
        for (int l = 0; l < MOE_WARP; l++) v[l] = att_row_max(row, t + 1, l, MOE_WARP);
        float max = katt_butterfly(v, 1);
        for (int l = 0; l < MOE_WARP; l++) att_row_exp(row, t + 1, max, l, MOE_WARP);
        for (int l = 0; l < MOE_WARP; l++) v[l] = att_row_sum(row, t + 1, l, MOE_WARP);
        float inv = 1.0f / katt_butterfly(v, 0);
        for (int l = 0; l < MOE_WARP; l++) att_row_normalise(row, t + 1, T, inv, l, MOE_WARP);
    }
}
static void softmax_backward_rows(float *dP, const float *P, int rows, int T, float scale) {
    for (int r = 0; r < rows; r++) {
        size_t off = (size_t)r * T;
        float v[MOE_WARP];
        int t = r % T;
        for (int l = 0; l < MOE_WARP; l++)
            v[l] = att_row_dot(P + off, dP + off, t + 1, l, MOE_WARP);
        float pdp = katt_butterfly(v, 0);
        for (int l = 0; l < MOE_WARP; l++)
            att_row_jacobian(dP + off, P + off, t + 1, T, pdp, scale, l, MOE_WARP);
    }
}

/* the host's attention steps: the device's order (gemm_args.h), cuBLAS's tuples through cblas,
 * the kernels' bodies a warp at a time */
static void host_gemm(void *ctx, const GemmArgs *a) {
    (void)ctx, gemm_cblas(a);
}
static void host_softmax(void *ctx, float *P, int rows, int T) {
    (void)ctx, softmax_rows(P, rows, T);
}
static void host_softmax_backward(void *ctx, float *dP, const float *P, int rows, int T,
                                  float scale) {
    (void)ctx, softmax_backward_rows(dP, P, rows, T, scale);
}
static const AttSteps HOST_STEPS = {host_gemm, host_softmax, host_softmax_backward, NULL};

START_TEST(test_attention_algorithm) {
    /* T above a warp's 32 columns and not a multiple of it; the backward's heads in chunks of
     * 1, 2, ... all; heads of their own, in groups of 2 and 3, and one key-value head for all;
     * values narrower and wider than the queries and keys */
    const int cases[][6] = {{2, 45, 3, 3, 8, 8},  {1, 7, 2, 2, 4, 4},  {3, 33, 4, 4, 4, 4},
                            {2, 37, 4, 2, 6, 6},  {1, 40, 6, 2, 4, 4}, {2, 9, 3, 1, 8, 8},
                            {2, 35, 3, 3, 10, 6}, {1, 12, 4, 2, 4, 6}};
    for (size_t cs = 0; cs < sizeof cases / sizeof cases[0]; cs++) {
        const int B = cases[cs][0], T = cases[cs][1], H = cases[cs][2], Hkv = cases[cs][3];
        const int D = cases[cs][4], Dv = cases[cs][5];
        const float scale = 1.0f / sqrtf((float)D);
        size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D;
        size_t nv = (size_t)B * T * Hkv * Dv, no = (size_t)B * T * H * Dv;
        size_t na = (size_t)B * H * T * T;
        float *q = rand_floats(nq, 1.0f, 10 + cs), *k = rand_floats(nk, 1.0f, 20 + cs);
        float *v = rand_floats(nv, 1.0f, 30 + cs), *dout = rand_floats(no, 1.0f, 40 + cs);
        float *out = garbage_floats(no), *att = garbage_floats(na);
        float *out_ref = floats_alloc(no), *att_ref = floats_alloc(na);
        att_forward_steps(&HOST_STEPS, out, att, q, k, v, B, T, H, Hkv, D, Dv, scale);
        attention_forward(out_ref, att_ref, q, k, v, B, T, H, Hkv, D, Dv);
        CLOSE_ARRAYS(att, att_ref, na, "attention probabilities");
        CLOSE_ARRAYS(out, out_ref, no, "attention output");

        float *dq_ref = floats_alloc(nq), *dk_ref = floats_alloc(nk), *dv_ref = floats_alloc(nv);
        float *ws_ref = attn_ws_alloc(T, 1);
        attention_backward(dq_ref, dk_ref, dv_ref, ws_ref, dout, att_ref, q, k, v, B, T, H, Hkv, D,
                           Dv, 1);
        for (int n_ws = 1; n_ws <= H; n_ws++) {
            float *dq = garbage_floats(nq), *dk = garbage_floats(nk), *dv = garbage_floats(nv);
            float *ws = garbage_floats((size_t)n_ws * T * T);
            att_backward_steps(&HOST_STEPS, dq, dk, dv, ws, dout, att, q, k, v, B, T, H, Hkv, D, Dv,
                               n_ws, scale);
            expect_close_arrays(dq, dq_ref, nq, TOL_F32_ATOL, TOL_F32_RTOL, "attention dq");
            expect_close_arrays(dk, dk_ref, nk, TOL_F32_ATOL, TOL_F32_RTOL, "attention dk");
            expect_close_arrays(dv, dv_ref, nv, TOL_F32_ATOL, TOL_F32_RTOL, "attention dv");
            free(dq), free(dk), free(dv), free(ws);
        }
        free(q), free(k), free(v), free(dout), free(out), free(att), free(out_ref);
        free(att_ref), free(dq_ref), free(dk_ref), free(dv_ref), free(ws_ref);
    }
}
END_TEST

/* ---- the experts' grouped products as cuda_gemm.cu runs them ------------------------------- */

/* every pass over the slices, kept ones then padding ones, the SwiGLU where the GPU runs it */
static void gpu_experts(const ExpertBuffers *b, const int *passes, int np, const ExpertSlice *sl,
                        int n, int n_kept, int S, int backward) {
    for (int p = 0; p < np; p++) {
        for (int i = 0; i < n; i++) { /* i < n_kept: the kept slices' call, then the padding's */
            GemmArgs a = gemm_expert(b, passes[p], sl[i]);
            gemm_cblas(&a);
        }
        if (!backward && passes[p] == EXPERT_U) swiglu_forward(b->h, b->g, b->u, S, b->F);
        if (backward && passes[p] == EXPERT_DWD)
            swiglu_backward(b->dg, b->du, b->dh, b->g, b->u, S, b->F);
    }
    (void)n_kept;
}

START_TEST(test_experts_grouped_lists) {
    enum { E = 5, C = 12, F = 10 };
    /* dropless (expert 2 empty), then padded: kept rows then padding rows in each slice */
    const int off_a[E + 1] = {0, 7, 9, 9, 20, 23};
    const int off_b[E + 1] = {0, 6, 12, 18, 24, 30}, cnt_b[E] = {6, 2, 0, 5, 3};
    for (int padded = 0; padded < 2; padded++) {
        const int *off = padded ? off_b : off_a, *cnt = padded ? cnt_b : NULL, S = off[E];
        ExpertSlice sl[2 * E];
        int n_kept = 0, n = expert_slices(sl, &n_kept, off, cnt, E);
        /* within each list no expert twice: a grouped call never adds into one dW twice */
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < (i < n_kept ? n_kept : n); j++)
                ck_assert_msg(sl[i].e != sl[j].e, "slices %d and %d are both expert %d", i, j,
                              sl[i].e);
        ck_assert_int_eq(n, padded ? 8 : 4);
        size_t sc = (size_t)S * C, sf = (size_t)S * F, w = (size_t)E * F * C;
        float *xe = rand_floats(sc, 1.0f, 70), *dye = rand_floats(sc, 1.0f, 71);
        float *W = rand_floats(3 * w, 0.3f, 72);
        if (padded) /* padding rows are zeros, as the gather writes them */
            for (int e = 0; e < E; e++)
                for (int r = off[e] + cnt[e]; r < off[e + 1]; r++)
                    for (int c = 0; c < C; c++)
                        xe[(size_t)r * C + c] = 0.0f, dye[(size_t)r * C + c] = 0.0f;
        float *ye = garbage_floats(sc), *act = floats_alloc(6 * sf), *dxe = garbage_floats(sc);
        float *dW = floats_alloc(3 * w);
        ExpertBuffers b = {xe,           act,          act + sf,     act + 2 * sf, ye, dxe,
                           act + 3 * sf, act + 4 * sf, act + 5 * sf, dye,          W,  W + w,
                           W + 2 * w,    dW,           dW + w,       dW + 2 * w,   C,  F};
        const int fw[] = {EXPERT_G, EXPERT_U, EXPERT_Y};
        const int bw[] = {EXPERT_DH, EXPERT_DWD, EXPERT_DXG, EXPERT_DWG, EXPERT_DWU, EXPERT_DXU};
        gpu_experts(&b, fw, 3, sl, n, n_kept, S, 0);
        gpu_experts(&b, bw, 6, sl, n, n_kept, S, 1);

        float *ye_r = floats_alloc(sc), *a_r = floats_alloc(6 * sf), *dxe_r = floats_alloc(sc);
        float *dW_r = floats_alloc(3 * w);
        experts_forward(ye_r, a_r, a_r + sf, a_r + 2 * sf, xe, W, W + w, W + 2 * w, off, cnt, E, C,
                        F);
        experts_backward(dxe_r, dW_r, dW_r + w, dW_r + 2 * w, a_r + 3 * sf, a_r + 4 * sf,
                         a_r + 5 * sf, dye, xe, a_r, a_r + sf, a_r + 2 * sf, W, W + w, W + 2 * w,
                         off, cnt, E, C, F);
        CLOSE_ARRAYS(ye, ye_r, sc, padded ? "padded experts ye" : "experts ye");
        CLOSE_ARRAYS(dxe, dxe_r, sc, padded ? "padded experts dxe" : "experts dxe");
        CLOSE_ARRAYS(dW, dW_r, 3 * w, padded ? "padded experts dW" : "experts dW");
        free(xe), free(dye), free(W), free(ye), free(act), free(dxe), free(dW), free(ye_r);
        free(a_r), free(dxe_r), free(dW_r);
    }
}
END_TEST

/* the butterfly leaves the same value in every lane, and a wrong partner would show */
START_TEST(test_butterfly) {
    float v[MOE_WARP], w[MOE_WARP];
    for (int l = 0; l < MOE_WARP; l++) v[l] = w[l] = (float)(l * l % 7) - 2.5f;
    float s = katt_butterfly(v, 0);
    double want = 0.0;
    for (int l = 0; l < MOE_WARP; l++) want += w[l];
    CLOSE(s, (float)want, "butterfly sum");
    for (int l = 1; l < MOE_WARP; l++) ck_assert_float_eq(v[l], v[0]);
    ck_assert_float_eq(katt_butterfly(w, 1), 1.5f); /* the largest of l^2 mod 7 is 4 */
}
END_TEST

/* ---- the types of each call, against cuBLAS's tables -------------------------------------
 * The combinations of data and compute types cuBLAS documents for its calls (the cuBLAS
 * Library documentation, CUDA 12.5 on: "cublasGemmGroupedBatchedEx" and "cublasGemmEx"), as
 * gemm_args.h numbers them; scale type fp32 in every row. The grouped call: */
static const GemmTypes GROUPED_TABLE[] = {
    {GEMM_TYPE_16BF, GEMM_TYPE_16BF, GEMM_TYPE_16BF, GEMM_COMPUTE_32F},
    {GEMM_TYPE_16F, GEMM_TYPE_16F, GEMM_TYPE_16F, GEMM_COMPUTE_32F},
    {GEMM_TYPE_32F, GEMM_TYPE_32F, GEMM_TYPE_32F, GEMM_COMPUTE_32F},
    {GEMM_TYPE_32F, GEMM_TYPE_32F, GEMM_TYPE_32F, GEMM_COMPUTE_32F_FAST_TF32},
};
/* cublasGemmEx's rows whose compute type gemm_args.h names (it has more: fp16 compute, fp64,
 * integers, complex) */
static const GemmTypes GEMMEX_TABLE[] = {
    {GEMM_TYPE_16BF, GEMM_TYPE_16BF, GEMM_TYPE_16BF, GEMM_COMPUTE_32F},
    {GEMM_TYPE_16BF, GEMM_TYPE_16BF, GEMM_TYPE_32F, GEMM_COMPUTE_32F},
    {GEMM_TYPE_16F, GEMM_TYPE_16F, GEMM_TYPE_16F, GEMM_COMPUTE_32F},
    {GEMM_TYPE_16F, GEMM_TYPE_16F, GEMM_TYPE_32F, GEMM_COMPUTE_32F},
    {GEMM_TYPE_32F, GEMM_TYPE_32F, GEMM_TYPE_32F, GEMM_COMPUTE_32F},
    {GEMM_TYPE_32F, GEMM_TYPE_32F, GEMM_TYPE_32F, GEMM_COMPUTE_32F_FAST_16BF},
    {GEMM_TYPE_32F, GEMM_TYPE_32F, GEMM_TYPE_32F, GEMM_COMPUTE_32F_FAST_TF32},
};

static int in_table(const GemmTypes *t, const GemmTypes *table, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t->a == table[i].a && t->b == table[i].b && t->c == table[i].c &&
            t->compute == table[i].compute)
            return 1;
    return 0;
}

/* Every train.precision: the experts' call takes a combination its cuBLAS call documents, on
 * the engine's fp32 data, at the precision's own arithmetic (bf16 is not quietly made tf32) */
START_TEST(test_experts_call_types) {
    static const struct {
        int precision;
        const char *name;
        int compute;
    } P[] = {{MOE_PRECISION_FP32, "fp32", GEMM_COMPUTE_32F},
             {MOE_PRECISION_TF32, "tf32", GEMM_COMPUTE_32F_FAST_TF32},
             {MOE_PRECISION_BF16, "bf16", GEMM_COMPUTE_32F_FAST_16BF}};
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        const GemmExpertsCall c = gemm_experts_call(P[i].precision);
        const GemmTypes *t = &c.types;
        ck_assert_int_eq(gemm_compute(P[i].precision), P[i].compute);
        ck_assert_msg(t->compute == P[i].compute, "train.precision=%s: the experts compute in %d",
                      P[i].name, t->compute);
        ck_assert_msg(t->a == GEMM_TYPE_32F && t->b == GEMM_TYPE_32F && t->c == GEMM_TYPE_32F,
                      "train.precision=%s: the experts' data are not the engine's fp32", P[i].name);
        const int grouped = c.call == GEMM_GROUPED;
        ck_assert_msg(grouped ? in_table(t, GROUPED_TABLE, sizeof GROUPED_TABLE / sizeof *t)
                              : in_table(t, GEMMEX_TABLE, sizeof GEMMEX_TABLE / sizeof *t),
                      "train.precision=%s: %s has no A %d, B %d, C %d with compute type %d",
                      P[i].name, grouped ? "cublasGemmGroupedBatchedEx" : "cublasGemmEx", t->a,
                      t->b, t->c, t->compute);
    }
    /* fp32 and tf32 keep the grouped call (one launch a pass) */
    ck_assert_int_eq(gemm_experts_call(MOE_PRECISION_FP32).call, GEMM_GROUPED);
    ck_assert_int_eq(gemm_experts_call(MOE_PRECISION_TF32).call, GEMM_GROUPED);
}
END_TEST

Suite *cuda_gemm_suite(void) {
    Suite *s = suite_create("cuda_gemm");
    TCase *tc = tcase_create("cuda_gemm");
    tcase_add_test(tc, test_linear_tuples);
    tcase_add_test(tc, test_attention_algorithm);
    tcase_add_test(tc, test_experts_grouped_lists);
    tcase_add_test(tc, test_butterfly);
    tcase_add_test(tc, test_experts_call_types);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(cuda_gemm_suite)
