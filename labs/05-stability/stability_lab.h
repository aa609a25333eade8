/*
 * stability_lab.h: lab 05, a stable residual block (assignment: README.md).
 *
 *   task 1: RMSNorm forward            y = x * r * w,  r = 1 / sqrt(mean(x^2) + eps) per row
 *   task 2: RMSNorm backward           dx (written), dw (added to)
 *   task 3: sandwich sublayer forward  out = x + rmsnorm_post(rmsnorm_pre(x) W^T); the
 *                                      depth-scaled initial gain c / sqrt(L) of the post norm
 *   task 4: sandwich sublayer backward dx (written), dW, dw_pre, dw_post (added to)
 *   task 5: router z-loss              z = mean_n lse_n^2, and coef * dz/dlogits added
 *
 * Conventions (the engine's, src/nn/ops.h): float32, row-major, so element (n, c) of an (N, C)
 * array is at [n * C + c]. Outputs come first, then inputs, then weights, then dimensions.
 * Dimension letters: N tokens, C channels, E experts. A linear layer's weight W is (OUT, IN)
 * and y = x W^T. The accumulation rule of the backward passes: a gradient with respect to an
 * activation (dx) is WRITTEN (=); a gradient with respect to a parameter (dw, dW) is ADDED to
 * (+=), so that the gradients of several micro-batches sum up.
 */
#ifndef STABILITY_LAB_H
#define STABILITY_LAB_H

#include "lab.h" /* lab_todo(), the marker of an unfinished task */

/* The eps of RMSNorm, the engine's value (RMSNORM_EPS in src/nn/ops.h): r = 1 / sqrt(ms + eps) */
#define LAB_RMSNORM_EPS 1e-5f

/* Task 1. RMSNorm of each row of x (N, C) with the gain w (C):
 *   r_n = 1 / sqrt((1/C) sum_c x[n,c]^2 + LAB_RMSNORM_EPS)       rstd (N) = r, written
 *   y[n,c] = x[n,c] * r_n * w[c]                                 y (N, C), written */
void lab_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int N, int C);

/* Task 2. Backward of task 1, from dy (N, C), with x (N, C), w (C) and the forward's rstd (N):
 *   dx (N, C) = dL/dx                                            written
 *   dw (C)   += dL/dw                                            added to */
void lab_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                          const float *rstd, int N, int C);

/* What the sandwich forward saves for its backward pass. The caller allocates the four buffers;
 * the forward (task 3) writes them, the backward (task 4) reads them. */
typedef struct {
    float *u;      /* (N, C) the pre norm's output: u = rmsnorm(x; w_pre) */
    float *r_pre;  /* (N) the pre norm's rstd */
    float *h;      /* (N, C) the sublayer's output: h = u W^T */
    float *r_post; /* (N) the post norm's rstd (of h) */
} LabSandwichActs;

/* Task 3. One sandwich-norm sublayer with a linear sublayer f(u) = u W^T, W (C, C):
 *   u = rmsnorm(x; w_pre),  h = u W^T,  out = x + rmsnorm(h; w_post)
 * out (N, C) written; acts' four buffers written; x (N, C), W (C, C), w_pre (C), w_post (C). */
void lab_sandwich_forward(float *out, LabSandwichActs *acts, const float *x, const float *W,
                          const float *w_pre, const float *w_post, int N, int C);

/* Task 3 too. The initial gain of a post norm in Depth-Scaled Sandwich-Norm for a model of L
 * layers: c / sqrt(L). */
float lab_dssn_gain(float c, int L);

/* Task 4. Backward of task 3, from dout (N, C), with the forward's acts and inputs:
 *   dx (N, C) = dL/dx                                            written
 *   dW (C, C) += dL/dW, dw_pre (C) += dL/dw_pre, dw_post (C) += dL/dw_post    added to */
void lab_sandwich_backward(float *dx, float *dW, float *dw_pre, float *dw_post, const float *dout,
                           const LabSandwichActs *acts, const float *x, const float *W,
                           const float *w_pre, const float *w_post, int N, int C);

/* Task 5. The router z-loss of logits (N, E), with lse_n = log sum_e exp(logits[n,e]):
 *   returns z = (1/N) sum_n lse_n^2
 *   dlogits[n,e] += coef * (2/N) * lse_n * softmax(logits[n,:])_e       dlogits (N, E), ADDED to
 * (the z-loss's term of the router's gradient: the caller has put the other terms there). */
float lab_z_loss(float *dlogits, const float *logits, int N, int E, float coef);

#endif
