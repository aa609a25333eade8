/*
 * router_lab.c: your solution to lab 01, the router (assignment: labs/01-router/README.md).
 *
 *   logits (N, E) --task 1: softmax--> p (N, E) --task 2: top-k--> idx, w (N, K)
 *   task 3: aux = E * sum_i f_i P_i
 *   task 4: dlogits (N, E) from dw (N, K) and aux_scale * aux
 *
 * Each function below is a stub: it fills its outputs with NaN / -1 and calls lab_todo(),
 * which makes the grader report the task as not implemented. Replace the whole body of a
 * function (the lab_todo() call included) with your code, then grade it:
 *   make -C labs grade LAB=01-router                       every task
 *   make -C labs grade LAB=01-router TASK=task1_softmax    one task
 * Row-major arrays: element (n, e) of an (N, E) array is at [n * E + e]. Helper functions
 * of your own should be `static`.
 */
#include "router_lab.h"

#include <math.h>
#include <stdlib.h>

void lab_softmax_forward(float *scores, const float *logits, int N, int E) {
    /* TODO task 1: for each token n, scores[n,e] = exp(logits[n,e]) / sum_j exp(logits[n,j]).
     * Logits can be large (the grader tries 1000): subtract the row's maximum before exp(),
     * which leaves the result unchanged and keeps exp() from overflowing. */
    for (size_t i = 0; i < (size_t)N * E; i++) scores[i] = NAN;
    lab_todo(1, "lab_softmax_forward");
}

void lab_topk_forward(int *idx, float *w, const float *scores, int N, int E, int K) {
    /* TODO task 2: for each token n, pick the K experts with the highest scores[n, :].
     *  - idx[n*K + 0] is the best expert, idx[n*K + 1] the second best, and so on;
     *  - on a tie, the lower expert index wins (and comes first);
     *  - an expert can be chosen only once per token;
     *  - w[n*K + k] = scores[n, idx[n*K + k]] / (sum of the K chosen scores of token n).
     * Do not assume anything about the contents of idx and w on entry. */
    for (size_t i = 0; i < (size_t)N * K; i++) {
        idx[i] = -1;
        w[i] = NAN;
    }
    lab_todo(2, "lab_topk_forward");
}

float lab_aux_loss(const float *scores, const int *idx, int N, int E, int K) {
    /* TODO task 3: the Switch load-balancing loss, aux = E * sum_i f_i * P_i, where
     *  - f_i = (how many of the N*K entries of idx equal i) / (N * K)
     *  - P_i = (1/N) * sum over tokens n of scores[n, i]
     * You need a small array of E counts: malloc it (and free it). */
    lab_todo(3, "lab_aux_loss");
    return NAN;
}

void lab_router_backward(float *dlogits, const float *dw, const float *scores, const int *idx,
                         const float *w, int N, int E, int K, float aux_scale) {
    /* TODO task 4: dlogits = d/dlogits [ sum_{n,k} dw[n,k] * w[n,k] + aux_scale * aux ].
     * Per token n, build dp (E), the gradient with respect to that token's scores:
     *  1. through the renormalisation w_k = p_{i_k} / Z, Z = sum_j p_{i_j}:
     *       dp[idx[k]] = (dw[k] - sum_j dw[j] * w[j]) / Z, and 0 for experts not chosen
     *  2. through the aux loss, f held constant: dp[i] += aux_scale * E * f_i / N
     *  3. through the softmax: dlogits[j] = p[j] * (dp[j] - sum_i p[i] * dp[i])
     * Write every element of dlogits (=, not +=). */
    for (size_t i = 0; i < (size_t)N * E; i++) dlogits[i] = NAN;
    lab_todo(4, "lab_router_backward");
}
