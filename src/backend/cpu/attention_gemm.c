/*
 * attention_gemm.c: causal self-attention as matrix products, the cpu backend's version.
 *
 * The same math as the reference loops in src/nn/attention.c (read that file first), reorganised so
 * that almost all the work is done by sgemm. For one batch row b and query head h, with Q the
 * (T, D) slice of q (rows H D floats apart), K, V those of its key-value head in k, v (rows
 * Hkv D apart) and s = 1 / sqrt(D):
 *
 *   forward:   S = s Q K^T (T, T)        P = causal_softmax(S)        O = P V (T, Dv)
 *   backward:  dV = P^T dO               dP = dO V^T (T, T)
 *              dS = P * (dP - rowsum(P * dP)) * s                     (softmax Jacobian)
 *              dQ = dS K                 dK = dS^T Q
 *
 * The products run over blocks of ATT_BLOCK query rows, each against only the keys [0, end of
 * the block) it can see, so the blocks above the diagonal are never computed; inside a block
 * the entries above the diagonal are masked (P = 0 there, so dS = 0 too). A triangle of
 * blocks of GEMMs still beats triangular loops by an order of magnitude on a CPU.
 *
 * Between the products, the softmax and its backward add up each row's terms in column order,
 * but eight rows side by side (row_sums), and the softmax's other loops run in the widest
 * vector lanes the CPU has (NN_WIDE_LANES). The bits are those of one row at a time (the
 * smoke references of tests/test_ablations.sh compare training losses exactly), sooner.
 *
 * The forward's (b, h) pairs are independent, and so are the backward's (b, g) pairs (a
 * key-value head with its group of query heads, which add into its dK and dV); an OpenMP loop
 * hands each to one thread, and each thread's sgemm calls run single-threaded (the OpenMP build of
 * OpenBLAS detects the parallel region), so results do not depend on scheduling.
 * tests/test_backend_ops.c checks this file against the reference within float tolerance, and
 * tests/test_attention.c its gradients by finite differences.
 *
 * Accumulation rule (ops.h): no parameters; dq, dk, dv are written.
 */
#include "backend/cpu/cpu.h"

#include <math.h>

#include "base/omp_compat.h"
#include "backend/cpu/blas.h" /* last: its macro I */

#include "nn/exp.h"

/* Query rows are taken ATT_BLOCK at a time, each block against only the keys it can see: the
 * products skip the blocks above the diagonal (10 of 16 blocks remain at T = 4 x ATT_BLOCK) */
#define ATT_BLOCK 64

/* Rows whose softmax sums advance together (causal_softmax_block) */
#define SOFTMAX_ROWS 8

/* sum[i] = p_i[0] d_i[0] + p_i[1] d_i[1] + ... up to column len_i - 1, added in that order, for
 * the n rows p_i = p + i T (d_i likewise), row i of length len0 + i; with d NULL, the sum of
 * p_i's columns. A sum kept in order is a chain of additions each waiting on the last; eight
 * rows' chains are independent, so they advance side by side over the columns every row has,
 * then each row adds its own last columns. Every sum sees its terms in the same order as one
 * row's loop would, so the bits are the same, sooner. */
static void row_sums(float *sum, const float *p, const float *d, int n, int len0, int T) {
#define TERM(i, j) (d ? p[(size_t)(i)*T + (j)] * d[(size_t)(i)*T + (j)] : p[(size_t)(i)*T + (j)])
    if (n < SOFTMAX_ROWS) { /* the last rows of a block: one at a time */
        for (int i = 0; i < n; i++) {
            float s = 0.0f;
            for (int j = 0; j < len0 + i; j++) s += TERM(i, j);
            sum[i] = s;
        }
        return;
    }
    float s[SOFTMAX_ROWS] = {0};
    for (int j = 0; j < len0; j++)
        for (int i = 0; i < SOFTMAX_ROWS; i++) s[i] += TERM(i, j);
    for (int i = 1; i < SOFTMAX_ROWS; i++)
        for (int j = len0; j < len0 + i; j++) s[i] += TERM(i, j);
    for (int i = 0; i < SOFTMAX_ROWS; i++) sum[i] = s[i];
#undef TERM
}

/* Rows t0 .. t0 + R - 1 of the scores (rows T floats apart, P at row t0): row t becomes the
 * softmax over j <= t of its scores, with zeros for j > t. */
NN_WIDE_LANES static void causal_softmax_block(float *P, int t0, int R, int T) {
    for (int r0 = 0; r0 < R; r0 += SOFTMAX_ROWS) {
        const int n = R - r0 < SOFTMAX_ROWS ? R - r0 : SOFTMAX_ROWS;
        float *Pr = P + (size_t)r0 * T, sum[SOFTMAX_ROWS];
        for (int i = 0; i < n; i++) {
            float *p = Pr + (size_t)i * T;
            const int t = t0 + r0 + i;
            /* the largest score: the same whatever the order of the comparisons */
            float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
            for (int j = 0; j <= t; j++) maxv = p[j] > maxv ? p[j] : maxv;
#pragma omp simd
            for (int j = 0; j <= t; j++) p[j] = nn_expf(p[j] - maxv);
        }
        row_sums(sum, Pr, NULL, n, t0 + r0 + 1, T);
        for (int i = 0; i < n; i++) {
            float *p = Pr + (size_t)i * T, inv = 1.0f / sum[i];
            const int t = t0 + r0 + i;
            for (int j = 0; j <= t; j++) p[j] *= inv;
            for (int j = t + 1; j < T; j++) p[j] = 0.0f;
        }
    }
}

void cpu_attention_forward(float *out, float *att, const float *q, const float *k, const float *v,
                           int B, int T, int H, int Hkv, int D, int Dv) {
    /* out (B, T, H Dv), att (B, H, T, T), q (B, T, H D), k (B, T, Hkv D), v (B, T, Hkv Dv) */
    const int QW = H * D, KW = Hkv * D, VW = Hkv * Dv, OW = H * Dv, group = H / Hkv;
    const float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            const size_t qh = (size_t)b * T * QW + (size_t)h * D;           /* (b, t = 0, h) */
            const size_t kh = (size_t)b * T * KW + (size_t)(h / group) * D; /* its kv head */
            const size_t vh = (size_t)b * T * VW + (size_t)(h / group) * Dv;
            const size_t oh = (size_t)b * T * OW + (size_t)h * Dv;
            float *P = att + ((size_t)b * H + h) * T * T;
            /* per block of query rows [t0, t0 + R): only the keys [0, t0 + R) it can see */
            for (int t0 = 0; t0 < T; t0 += ATT_BLOCK) {
                const int R = T - t0 < ATT_BLOCK ? T - t0 : ATT_BLOCK, J = t0 + R;
                float *Pb = P + (size_t)t0 * T;
                /* S = s Q K^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, J, D, scale,
                            q + qh + (size_t)t0 * QW, QW, k + kh, KW, 0.0f, Pb, T);
                causal_softmax_block(Pb, t0, R, T);
                /* O = P V */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, Dv, J, 1.0f, Pb, T,
                            v + vh, VW, 0.0f, out + oh + (size_t)t0 * OW, OW);
            }
        }
    }
}

/* dS (T, T) = P (dP - rowsum(P dP)) s, dP = dO V^T, for one head of Dv value channels: per
 * block of query rows, over the keys it sees. dO's rows are OW floats apart, V's VW. */
static void head_dscores(float *dS, const float *P, const float *dO, const float *V, int T, int OW,
                         int VW, int Dv, float scale) {
    for (int t0 = 0; t0 < T; t0 += ATT_BLOCK) {
        const int R = T - t0 < ATT_BLOCK ? T - t0 : ATT_BLOCK, J = t0 + R;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, J, Dv, 1.0f, dO + (size_t)t0 * OW,
                    OW, V, VW, 0.0f, dS + (size_t)t0 * T, T);
    }
    for (int t0 = 0; t0 < T; t0 += SOFTMAX_ROWS) {
        const int n = T - t0 < SOFTMAX_ROWS ? T - t0 : SOFTMAX_ROWS;
        float pdp[SOFTMAX_ROWS]; /* sum over j <= t of P[t, j] dP[t, j] */
        row_sums(pdp, P + (size_t)t0 * T, dS + (size_t)t0 * T, n, t0 + 1, T);
        for (int i = 0; i < n; i++) {
            const int t = t0 + i;
            const float *p = P + (size_t)t * T;
            float *ds = dS + (size_t)t * T;
            for (int j = 0; j <= t; j++) ds[j] = p[j] * (ds[j] - pdp[i]) * scale;
            for (int j = t + 1; j < T; j++) ds[j] = 0.0f;
        }
    }
}

void cpu_attention_backward(float *dq, float *dk, float *dv, float *ws, const float *dout,
                            const float *att, const float *q, const float *k, const float *v, int B,
                            int T, int H, int Hkv, int D, int Dv, int n_ws) {
    /* dq (B, T, H D), dk (B, T, Hkv D), dv (B, T, Hkv Dv) written (any may be NULL), ws (n_ws,
     * T, T) workspace, dout (B, T, H Dv), att (B, H, T, T), q (B, T, H D), k (B, T, Hkv D), v
     * (B, T, Hkv Dv) */
    const int QW = H * D, KW = Hkv * D, VW = Hkv * Dv, OW = H * Dv, group = H / Hkv;
    const float scale = 1.0f / sqrtf((float)D);
    /* one dS slice per thread: no more threads than slices (each (b, g) is computed whole by
     * one thread whatever the count, so the count never changes a result) */
    const int n_threads = omp_get_max_threads() < n_ws ? omp_get_max_threads() : n_ws;
    (void)n_threads; /* read by the pragma alone, which a build without OpenMP ignores */
    /* the heads of a group add into one dk and dv: a thread takes a (b, g) pair whole and its
     * heads in order, the first writing (beta 0) and the others adding (beta 1) */
#pragma omp parallel for collapse(2) schedule(static) num_threads(n_threads)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < Hkv; g++) {
            const size_t kh = (size_t)b * T * KW + (size_t)g * D; /* (b, t = 0, g) */
            const size_t vh = (size_t)b * T * VW + (size_t)g * Dv;
            float *dS = ws + (size_t)omp_get_thread_num() * T * T;
            for (int h = g * group; h < (g + 1) * group; h++) {
                const size_t qh = (size_t)b * T * QW + (size_t)h * D;
                const float *P = att + ((size_t)b * H + h) * T * T;
                const float *dO = dout + (size_t)b * T * OW + (size_t)h * Dv;
                const float beta = h == g * group ? 0.0f : 1.0f;
                /* forward: O = P V  ->  dV = P^T dO; the keys [j0, j0 + R) are seen by the
                 * query rows [j0, T) only */
                for (int j0 = 0; dv && j0 < T; j0 += ATT_BLOCK) {
                    const int R = T - j0 < ATT_BLOCK ? T - j0 : ATT_BLOCK;
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R, Dv, T - j0, 1.0f,
                                P + (size_t)j0 * T + j0, T, dO + (size_t)j0 * OW, OW, beta,
                                dv + vh + (size_t)j0 * VW, VW);
                }
                if (!dq && !dk) continue;
                head_dscores(dS, P, dO, v + vh, T, OW, VW, Dv, scale);
                /* forward: S = s Q K^T (s is folded into dS)  ->  dQ = dS K (query rows over
                 * the keys they see), dK = dS^T Q (keys over the query rows that see them) */
                for (int t0 = 0; dq && t0 < T; t0 += ATT_BLOCK) {
                    const int R = T - t0 < ATT_BLOCK ? T - t0 : ATT_BLOCK;
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, D, t0 + R, 1.0f,
                                dS + (size_t)t0 * T, T, k + kh, KW, 0.0f, dq + qh + (size_t)t0 * QW,
                                QW);
                }
                for (int j0 = 0; dk && j0 < T; j0 += ATT_BLOCK) {
                    const int R = T - j0 < ATT_BLOCK ? T - j0 : ATT_BLOCK;
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R, D, T - j0, 1.0f,
                                dS + (size_t)j0 * T + j0, T, q + qh + (size_t)j0 * QW, QW, beta,
                                dk + kh + (size_t)j0 * KW, KW);
                }
            }
        }
    }
}
