/*
 * stability_lab.c: your solution to lab 05, a stable residual block
 * (assignment: labs/05-stability/README.md).
 *
 *   task 1: RMSNorm forward     task 2: RMSNorm backward (dx written, dw added to)
 *   task 3: out = x + rmsnorm_post(rmsnorm_pre(x) W^T), and the DSSN gain c / sqrt(L)
 *   task 4: its backward        task 5: the router z-loss and its gradient (added to)
 *
 * Each function below is a stub: it fills its outputs with NaN and calls lab_todo(), which
 * makes the grader report the task as not implemented. Replace the whole body of a function
 * (the lab_todo() call included) with your code, then grade it:
 *   make -C labs grade LAB=05-stability                            every task
 *   make -C labs grade LAB=05-stability TASK=task1_rmsnorm         one task
 * Row-major arrays: element (n, c) of an (N, C) array is at [n * C + c]. Helper functions of
 * your own should be `static`. You may call your own task 1 and 2 functions from tasks 3 and 4.
 */
#include "stability_lab.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

void lab_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int N, int C) {
    /* TODO task 1: for each row n of x,
     *   rstd[n] = 1 / sqrt((sum of x[n,c]^2 over c) / C + LAB_RMSNORM_EPS)
     *   y[n,c]  = x[n,c] * rstd[n] * w[c]
     * Sum the squares in double (the grader tries rows of 1e20, whose squares overflow float). */
    for (size_t i = 0; i < (size_t)N * C; i++) y[i] = NAN;
    for (int n = 0; n < N; n++) rstd[n] = NAN;
    lab_todo(1, "lab_rmsnorm_forward");
}

void lab_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                          const float *rstd, int N, int C) {
    /* TODO task 2: with r = rstd[n], per row n (README.md, task 2, derives it):
     *   dx[n,c]  = r * w[c] * dy[n,c] - (r^3 * x[n,c] / C) * sum_j dy[n,j] * w[j] * x[n,j]
     *   dw[c]   += sum over rows n of dy[n,c] * x[n,c] * r_n
     * dx is written (=); dw is ADDED to (+=): it may hold other gradients already. */
    for (size_t i = 0; i < (size_t)N * C; i++) dx[i] = NAN;
    for (int c = 0; c < C; c++) dw[c] = NAN;
    lab_todo(2, "lab_rmsnorm_backward");
}

void lab_sandwich_forward(float *out, LabSandwichActs *acts, const float *x, const float *W,
                          const float *w_pre, const float *w_post, int N, int C) {
    /* TODO task 3: the sandwich sublayer, saving what the backward needs:
     *   acts->u, acts->r_pre  = RMSNorm of x with the gain w_pre (task 1)
     *   acts->h[n,o]          = sum_i u[n,i] * W[o,i]            (h = u W^T, W is (C, C))
     *   v, acts->r_post       = RMSNorm of h with the gain w_post
     *   out                   = x + v                            (the residual connection)
     * v is a scratch array of N * C floats (malloc it, free it), or build it in out. */
    for (size_t i = 0; i < (size_t)N * C; i++) out[i] = acts->u[i] = acts->h[i] = NAN;
    for (int n = 0; n < N; n++) acts->r_pre[n] = acts->r_post[n] = NAN;
    lab_todo(3, "lab_sandwich_forward");
}

float lab_dssn_gain(float c, int L) {
    /* TODO task 3: the depth-scaled initial gain of a post norm, c / sqrt(L). */
    lab_todo(3, "lab_dssn_gain");
    return NAN;
}

void lab_sandwich_backward(float *dx, float *dW, float *dw_pre, float *dw_post, const float *dout,
                           const LabSandwichActs *acts, const float *x, const float *W,
                           const float *w_pre, const float *w_post, int N, int C) {
    /* TODO task 4: from the output back to the input (README.md, task 4):
     *   dv = dout                                     (the gradient at the post norm's output)
     *   dh, dw_post += backward of the post norm      (task 2, with h, w_post, r_post)
     *   du[n,i] = sum_o dh[n,o] * W[o,i];  dW[o,i] += sum_n dh[n,o] * u[n,i]
     *   dxb, dw_pre += backward of the pre norm       (task 2, with x, w_pre, r_pre)
     *   dx = dout + dxb                               (the residual path, plus the branch)
     * dx is written; dW, dw_pre and dw_post are added to. */
    for (size_t i = 0; i < (size_t)N * C; i++) dx[i] = NAN;
    for (size_t i = 0; i < (size_t)C * C; i++) dW[i] = NAN;
    for (int c = 0; c < C; c++) dw_pre[c] = dw_post[c] = NAN;
    lab_todo(4, "lab_sandwich_backward");
}

float lab_z_loss(float *dlogits, const float *logits, int N, int E, float coef) {
    /* TODO task 5: per token n, lse_n = log sum_e exp(logits[n,e]), computed as
     *   m + log sum_e exp(logits[n,e] - m),  m = the row's maximum
     * (the grader tries logits of 100 and 1000, where exp() overflows without the shift).
     * Return z = (sum_n lse_n^2) / N, and ADD (+=) to dlogits[n,e]
     *   coef * (2 / N) * lse_n * p[n,e],  p[n,e] = exp(logits[n,e] - lse_n)   (the softmax) */
    for (size_t i = 0; i < (size_t)N * E; i++) dlogits[i] = NAN;
    lab_todo(5, "lab_z_loss");
    return NAN;
}
