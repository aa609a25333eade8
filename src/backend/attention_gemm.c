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
 * S and dP are computed as full T x T squares and the entries above the diagonal are then
 * masked (P = 0 there, so dS = 0 too): half of those two products is wasted, but one large
 * GEMM still beats two triangular loops by an order of magnitude on a CPU.
 *
 * The (b, h) pairs are independent; an OpenMP loop hands each to one thread, and each thread's
 * sgemm calls run single-threaded (the OpenMP build of OpenBLAS detects the parallel region),
 * so results do not depend on scheduling. tests/test_backend_ops.c checks this file against
 * the reference within float tolerance, and tests/test_ops.c its gradients by finite
 * differences.
 *
 * Accumulation rule (ops.h): no parameters; dq, dk, dv are written.
 */
#include "backend/cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>

#include "nn/exp.h"

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
            /* S = s Q K^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, scale, q + head, C,
                        k + head, C, 0.0f, P, T);
            for (int t = 0; t < T; t++) causal_softmax_row(P + (size_t)t * T, t, T);
            /* O = P V */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T, 1.0f, P, T, v + head, C,
                        0.0f, out + head, C);
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
            /* forward: O = P V  ->  dV = P^T dO */
            if (dv)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T, 1.0f, P, T, dO, C,
                            0.0f, dv + head, C);
            if (!dq && !dk) continue;
            /* dP = dO V^T, then dS = P (dP - rowsum(P dP)) s, in this thread's slice */
            float *dS = ws + (size_t)omp_get_thread_num() * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, 1.0f, dO, C, v + head, C,
                        0.0f, dS, T);
            for (int t = 0; t < T; t++) {
                const float *p = P + (size_t)t * T;
                float *ds = dS + (size_t)t * T;
                float pdp = 0.0f;
                for (int j = 0; j <= t; j++) pdp += p[j] * ds[j];
                for (int j = 0; j <= t; j++) ds[j] = p[j] * (ds[j] - pdp) * scale;
                for (int j = t + 1; j < T; j++) ds[j] = 0.0f;
            }
            /* forward: S = s Q K^T (s is folded into dS)  ->  dQ = dS K, dK = dS^T Q */
            if (dq)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, T, 1.0f, dS, T,
                            k + head, C, 0.0f, dq + head, C);
            if (dk)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, D, T, 1.0f, dS, T, q + head,
                            C, 0.0f, dk + head, C);
        }
    }
}
