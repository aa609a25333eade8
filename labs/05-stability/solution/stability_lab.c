/*
 * stability_lab.c: reference solution of lab 05 (README.md in this folder has the assignment).
 *
 *   RMSNorm:        y = x * r * w,  r = 1 / sqrt(mean(x^2) + eps), per row
 *   sandwich:       u = rmsnorm(x; w_pre),  h = u W^T,  out = x + rmsnorm(h; w_post)
 *   DSSN:           the post norm's gain starts at c / sqrt(L)
 *   router z-loss:  z = mean_n lse_n^2,  dz/dl[n,e] = (2/N) lse_n softmax_e
 *
 * Plain serial loops: the point is the math. Sums are accumulated in double so the results
 * match the engine (src/nn/rmsnorm.c, src/nn/matmul.c, src/moe/router.c) to float32 round-off.
 * The sandwich's passes are built from the two RMSNorm functions and a matmul of their own.
 */
#include "stability_lab.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static float *floats(size_t n) {
    float *a = malloc((n ? n : 1) * sizeof(float));
    if (!a) {
        fprintf(stderr, "stability_lab: out of memory\n");
        exit(1);
    }
    return a;
}

/* ---- task 1 ---------------------------------------------------------------------------------- */

void lab_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int N, int C) {
    /* y (N, C) written, rstd (N) written; x (N, C), w (C).
     * The sum of squares is taken in double: it is all positive terms (no cancellation), but a
     * row of large activations (1e20) would overflow float's squares to inf, and r to 0. */
    for (int n = 0; n < N; n++) {
        const float *xn = x + (size_t)n * C;
        float *yn = y + (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)xn[c] * xn[c];
        /* eps keeps r finite for a row of zeros: r = 1 / sqrt(eps), y = 0 */
        float r = (float)(1.0 / sqrt(ss / C + (double)LAB_RMSNORM_EPS));
        for (int c = 0; c < C; c++) yn[c] = xn[c] * r * w[c];
        rstd[n] = r;
    }
}

/* ---- task 2 ---------------------------------------------------------------------------------- */

void lab_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                          const float *rstd, int N, int C) {
    /* dx (N, C) written, dw (C) added to; dy (N, C), x (N, C), w (C), rstd (N).
     *
     * Forward, one row: y_j = x_j r w_j with r = (ms + eps)^(-1/2), ms = (1/C) sum_k x_k^2.
     *   dr/dx_k = -(1/2) (ms + eps)^(-3/2) * 2 x_k / C = -r^3 x_k / C
     *   dy_j/dx_k = [j = k] r w_j + x_j w_j dr/dx_k
     * so, with the row's dot = sum_j dy_j w_j x_j,
     *   dx_k = sum_j dy_j dy_j/dx_k = r w_k dy_k - (r^3 x_k / C) dot
     *   dw_j = sum over rows of dy_j x_j r                          (y is linear in w) */
    for (int c = 0; c < C; c++) {
        double acc = 0.0; /* channel c's sum over the rows, added to dw once */
        for (int n = 0; n < N; n++)
            acc += (double)dy[(size_t)n * C + c] * x[(size_t)n * C + c] * rstd[n];
        dw[c] += (float)acc;
    }
    for (int n = 0; n < N; n++) {
        const float *xn = x + (size_t)n * C, *dyn = dy + (size_t)n * C;
        float *dxn = dx + (size_t)n * C;
        double r = rstd[n], dot = 0.0;
        for (int c = 0; c < C; c++) dot += (double)dyn[c] * w[c] * xn[c];
        double coef = r * r * r * dot / C;
        for (int c = 0; c < C; c++) dxn[c] = (float)(r * w[c] * dyn[c] - coef * xn[c]);
    }
}

/* ---- task 3 ---------------------------------------------------------------------------------- */

/* y (N, C) = x (N, C) W^T, W (C, C): y[n,o] = sum_i x[n,i] W[o,i] */
static void linear_forward(float *y, const float *x, const float *W, int N, int C) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < C; o++) {
            double acc = 0.0;
            for (int i = 0; i < C; i++) acc += (double)x[(size_t)n * C + i] * W[(size_t)o * C + i];
            y[(size_t)n * C + o] = (float)acc;
        }
}

void lab_sandwich_forward(float *out, LabSandwichActs *acts, const float *x, const float *W,
                          const float *w_pre, const float *w_post, int N, int C) {
    /* out (N, C) written, acts written; x (N, C), W (C, C), w_pre (C), w_post (C).
     * The post norm's output v is built in out, then the residual x is added to it. */
    lab_rmsnorm_forward(acts->u, acts->r_pre, x, w_pre, N, C);     /* u = pre norm of x */
    linear_forward(acts->h, acts->u, W, N, C);                     /* h = u W^T */
    lab_rmsnorm_forward(out, acts->r_post, acts->h, w_post, N, C); /* v = post norm of h */
    /* the residual connection: the block adds a bounded v (each row's RMS is about |w_post|,
     * whatever the size of W) to its input */
    for (size_t i = 0; i < (size_t)N * C; i++) out[i] = x[i] + out[i];
}

float lab_dssn_gain(float c, int L) {
    /* L sublayers each adding rows of RMS g to the residual stream, in directions about
     * unrelated to one another, add up to an RMS of about g sqrt(L): g = c / sqrt(L) keeps the
     * sum at about c, however deep the model. */
    return (float)(c / sqrt((double)L));
}

/* ---- task 4 ---------------------------------------------------------------------------------- */

void lab_sandwich_backward(float *dx, float *dW, float *dw_pre, float *dw_post, const float *dout,
                           const LabSandwichActs *acts, const float *x, const float *W,
                           const float *w_pre, const float *w_post, int N, int C) {
    /* dx (N, C) written; dW (C, C), dw_pre (C), dw_post (C) added to; dout (N, C), acts, x,
     * W, w_pre, w_post as in the forward.
     *
     * Forward: u = rms(x; w_pre), h = u W^T, v = rms(h; w_post), out = x + v. Backward, in the
     * reverse order:
     *   dv = dout                                  (out = x + v: d out / d v = identity)
     *   dh, dw_post += rms backward (dv; h, w_post, r_post)
     *   du[n,i] = sum_o dh[n,o] W[o,i]             (h[n,o] = sum_i u[n,i] W[o,i])
     *   dW[o,i] += sum_n dh[n,o] u[n,i]
     *   dxb, dw_pre += rms backward (du; x, w_pre, r_pre)
     *   dx = dout + dxb                            (x reaches out twice: directly, and
     *                                               through the branch; the two add up) */
    const size_t NC = (size_t)N * C;
    float *dh = floats(NC), *du = floats(NC);

    lab_rmsnorm_backward(dh, dw_post, dout, acts->h, w_post, acts->r_post, N, C);

    for (int n = 0; n < N; n++) /* du = dh W */
        for (int i = 0; i < C; i++) {
            double acc = 0.0;
            for (int o = 0; o < C; o++) acc += (double)dh[(size_t)n * C + o] * W[(size_t)o * C + i];
            du[(size_t)n * C + i] = (float)acc;
        }
    for (int o = 0; o < C; o++) /* dW += dh^T u */
        for (int i = 0; i < C; i++) {
            double acc = 0.0;
            for (int n = 0; n < N; n++)
                acc += (double)dh[(size_t)n * C + o] * acts->u[(size_t)n * C + i];
            dW[(size_t)o * C + i] += (float)acc;
        }

    lab_rmsnorm_backward(dx, dw_pre, du, x, w_pre, acts->r_pre, N, C); /* dx = dxb */
    for (size_t i = 0; i < NC; i++) dx[i] = dout[i] + dx[i];           /* + the residual path */

    free(dh);
    free(du);
}

/* ---- task 5 ---------------------------------------------------------------------------------- */

float lab_z_loss(float *dlogits, const float *logits, int N, int E, float coef) {
    /* returns z; dlogits (N, E) added to; logits (N, E).
     *
     * lse = log sum_e exp(l_e) = m + log sum_e exp(l_e - m) for any m; with m = max_e l_e every
     * exponent is <= 0 (no overflow, even for logits of 1000) and the largest term is 1 (the
     * sum is >= 1, its log >= 0, never log 0).
     * d lse / d l_e = exp(l_e) / sum_j exp(l_j) = softmax_e = exp(l_e - lse), so
     *   dz/dl[n,e] = (1/N) 2 lse_n softmax(l_n)_e
     * and the term coef * dz/dl is added to what dlogits holds (the router's other terms). */
    double z = 0.0;
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        float *dl = dlogits + (size_t)n * E;
        float m = l[0];
        for (int e = 1; e < E; e++)
            if (l[e] > m) m = l[e];
        double sum = 0.0;
        for (int e = 0; e < E; e++) sum += exp((double)l[e] - m);
        double lse = m + log(sum);
        z += lse * lse;
        double g = (double)coef * 2.0 / N * lse; /* times softmax_e */
        for (int e = 0; e < E; e++) dl[e] += (float)(g * exp((double)l[e] - lse));
    }
    return (float)(z / N);
}
