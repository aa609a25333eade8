/*
 * cpu.h: the fast versions of the cpu backend, beside the references of nn/ and moe/ (same
 * arguments, same results within float rounding; tests/test_backend_ops.c checks each one
 * against its reference, tests/test_backend_grad.c its gradients). Only this folder calls
 * OpenBLAS.
 */
#ifndef MOE_BACKEND_CPU_H
#define MOE_BACKEND_CPU_H

#include <stddef.h>

#include "moe/moe_ops.h"
#include "nn/ops.h"

/* cpu_gemm.c: the products on sgemm */
void cpu_matmul_forward(float *y, const float *x, const float *W, int N, int IN, int OUT);
void cpu_matmul_backward(float *dx, float *dW, const float *dy, const float *x, const float *W,
                         int N, int IN, int OUT);
void cpu_experts_forward(float *ye, float *g, float *u, float *h, const float *xe, const float *Wg,
                         const float *Wu, const float *Wd, const int *offsets, const int *counts,
                         int E, int C, int F);
void cpu_experts_backward(float *dxe, float *dWg, float *dWu, float *dWd, float *dg, float *du,
                          float *dh, const float *dye, const float *xe, const float *g,
                          const float *u, const float *h, const float *Wg, const float *Wu,
                          const float *Wd, const int *offsets, const int *counts, int E, int C,
                          int F);
/* one warm-up sgemm of n x n x n, then reps timed ones: seconds[r] each */
void cpu_sgemm_seconds(int n, int reps, double *seconds);

/* attention_gemm.c: causal attention as strided products, one (batch row, head) per thread */
void cpu_attention_forward(float *out, float *att, const float *q, const float *k, const float *v,
                           int B, int T, int H, int Hkv, int D, int Dv);
void cpu_attention_backward(float *dq, float *dk, float *dv, float *ws, const float *dout,
                            const float *att, const float *q, const float *k, const float *v, int B,
                            int T, int H, int Hkv, int D, int Dv, int n_ws);

#endif
