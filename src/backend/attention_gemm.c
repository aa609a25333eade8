/*
 * attention_gemm.c: causal self-attention as matrix products, the cpu backend's version.
 *
 * The same math as the reference loops in src/nn/attention.c (read that file first), reorganised so
 * that almost all the work is done by sgemm. For one batch row b and head h, with Q, K, V the
 * (T, D) slices of q, k, v (rows C floats apart) and s = 1 / sqrt(D):
 *
 *   forward:   S = s Q K^T (T, T)        P = causal_softmax(S)        O = P V (T, D)
 *   backward:  dV = P^T dO               dP = dO V^T (T, T)
 *              dS = P * (dP - rowsum(P * dP)) * s                     (softmax Jacobian)
 *              dQ = dS K                 dK = dS^T Q
 *
 * The products run over blocks of ATT_BLOCK query rows, each against only the keys [0, end of
 * the block) it can see, so the blocks above the diagonal are never computed; inside a block
 * the entries above the diagonal are masked (P = 0 there, so dS = 0 too). A triangle of
 * blocks of GEMMs still beats triangular loops by an order of magnitude on a CPU.
 *
 * The (b, h) pairs are independent; an OpenMP loop hands each to one thread, and each thread's
 * sgemm calls run single-threaded (the OpenMP build of OpenBLAS detects the parallel region),
 * so results do not depend on scheduling. tests/test_backend_ops.c checks this file against
 * the reference within float tolerance, and tests/test_attention.c its gradients by finite
 * differences.
 *
 * Accumulation rule (ops.h): no parameters; dq, dk, dv are written.
 */
#include "backend/cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>

#include "nn/exp.h"

/* Query rows are taken ATT_BLOCK at a time, each block against only the keys it can see: the
 * products skip the blocks above the diagonal (10 of 16 blocks remain at T = 4 x ATT_BLOCK) */
#define ATT_BLOCK 64

/* Row t of p (T): softmax over j <= t of the scores already in p, zeros for j > t. */
static void causal_softmax_row(float *p, int t, int T) {
    float maxv = -INFINITY;
    for (int j = 0; j <= t; j++) maxv = p[j] > maxv ? p[j] : maxv;
#pragma omp simd
    for (int j = 0; j <= t; j++) p[j] = nn_expf(p[j] - maxv);
    float sum = 0.0f;
    for (int j = 0; j <= t; j++) sum += p[j]; /* in order */
    float inv = 1.0f / sum;
    for (int j = 0; j <= t; j++) p[j] *= inv;
    for (int j = t + 1; j < T; j++) p[j] = 0.0f;
}

void cpu_attention_forward(float *out, float *att, const float *q, const float *k, const float *v,
                           int B, int T, int C, int H) {
    /* out (B, T, C), att (B, H, T, T), q, k, v (B, T, C) */
    const int D = C / H;
    const float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            size_t head = (size_t)b * T * C + (size_t)h * D; /* (b, t = 0, h) */
            float *P = att + ((size_t)b * H + h) * T * T;
            /* per block of query rows [t0, t0 + R): only the keys [0, t0 + R) it can see */
            for (int t0 = 0; t0 < T; t0 += ATT_BLOCK) {
                const int R = T - t0 < ATT_BLOCK ? T - t0 : ATT_BLOCK, J = t0 + R;
                float *Pb = P + (size_t)t0 * T;
                /* S = s Q K^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, J, D, scale,
                            q + head + (size_t)t0 * C, C, k + head, C, 0.0f, Pb, T);
                for (int r = 0; r < R; r++) causal_softmax_row(Pb + (size_t)r * T, t0 + r, T);
                /* O = P V */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, D, J, 1.0f, Pb, T,
                            v + head, C, 0.0f, out + head + (size_t)t0 * C, C);
            }
        }
    }
}

void cpu_attention_backward(float *dq, float *dk, float *dv, float *ws, const float *dout,
                            const float *att, const float *q, const float *k, const float *v, int B,
                            int T, int C, int H, int n_ws) {
    /* dq, dk, dv (B, T, C) written (any may be NULL), ws (n_ws, T, T) workspace,
     * dout (B, T, C), att (B, H, T, T), q, k, v (B, T, C) */
    const int D = C / H;
    const float scale = 1.0f / sqrtf((float)D);
    /* one dS slice per thread: no more threads than slices (each (b, h) is computed whole by
     * one thread whatever the count, so the count never changes a result) */
    const int n_threads = omp_get_max_threads() < n_ws ? omp_get_max_threads() : n_ws;
#pragma omp parallel for collapse(2) schedule(static) num_threads(n_threads)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            size_t head = (size_t)b * T * C + (size_t)h * D;
            const float *P = att + ((size_t)b * H + h) * T * T;
            const float *dO = dout + head;
            /* forward: O = P V  ->  dV = P^T dO; the keys [j0, j0 + R) are seen by the query
             * rows [j0, T) only */
            for (int j0 = 0; dv && j0 < T; j0 += ATT_BLOCK) {
                const int R = T - j0 < ATT_BLOCK ? T - j0 : ATT_BLOCK;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R, D, T - j0, 1.0f,
                            P + (size_t)j0 * T + j0, T, dO + (size_t)j0 * C, C, 0.0f,
                            dv + head + (size_t)j0 * C, C);
            }
            if (!dq && !dk) continue;
            /* dP = dO V^T, then dS = P (dP - rowsum(P dP)) s, in this thread's slice: per block
             * of query rows, over the keys it sees */
            float *dS = ws + (size_t)omp_get_thread_num() * T * T;
            for (int t0 = 0; t0 < T; t0 += ATT_BLOCK) {
                const int R = T - t0 < ATT_BLOCK ? T - t0 : ATT_BLOCK, J = t0 + R;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, J, D, 1.0f,
                            dO + (size_t)t0 * C, C, v + head, C, 0.0f, dS + (size_t)t0 * T, T);
            }
            for (int t = 0; t < T; t++) {
                const float *p = P + (size_t)t * T;
                float *ds = dS + (size_t)t * T;
                float pdp = 0.0f;
                for (int j = 0; j <= t; j++) pdp += p[j] * ds[j];
                for (int j = 0; j <= t; j++) ds[j] = p[j] * (ds[j] - pdp) * scale;
                for (int j = t + 1; j < T; j++) ds[j] = 0.0f;
            }
            /* forward: S = s Q K^T (s is folded into dS)  ->  dQ = dS K (query rows over the
             * keys they see), dK = dS^T Q (keys over the query rows that see them) */
            for (int t0 = 0; dq && t0 < T; t0 += ATT_BLOCK) {
                const int R = T - t0 < ATT_BLOCK ? T - t0 : ATT_BLOCK;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, D, t0 + R, 1.0f,
                            dS + (size_t)t0 * T, T, k + head, C, 0.0f, dq + head + (size_t)t0 * C,
                            C);
            }
            for (int j0 = 0; dk && j0 < T; j0 += ATT_BLOCK) {
                const int R = T - j0 < ATT_BLOCK ? T - j0 : ATT_BLOCK;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R, D, T - j0, 1.0f,
                            dS + (size_t)j0 * T + j0, T, q + head + (size_t)j0 * C, C, 0.0f,
                            dk + head + (size_t)j0 * C, C);
            }
        }
    }
}
