/*
 * router_lab.h: lab 01, the router of a Mixture-of-Experts layer (assignment: README.md).
 *
 *   logits (N, E) --task 1: softmax--> scores p (N, E) --task 2: top-k--> idx, w (N, K)
 *   task 3: Switch load-balancing loss  aux = E * sum_i f_i P_i
 *   task 4: backward, dlogits (N, E) from dw (N, K) and the aux loss
 *
 * Conventions (the same as the engine, src/moe/moe_ops.h): float32, row-major, so element
 * (n, e) of an (N, E) array is at [n * E + e]. Outputs come first, then inputs, then
 * dimensions. Dimension letters: N tokens, E experts, K experts chosen per token (top-k),
 * 1 <= K <= E. The gradient dlogits is written (=), not accumulated.
 */
#ifndef ROUTER_LAB_H
#define ROUTER_LAB_H

#include "lab.h" /* lab_todo(), the marker of an unfinished task */

/* Task 1. scores (N, E) = softmax of each row of logits (N, E):
 *   p[n,e] = exp(logits[n,e]) / sum_j exp(logits[n,j]) */
void lab_softmax_forward(float *scores, const float *logits, int N, int E);

/* Task 2. Top-k per token. idx (N, K): the K experts with the highest scores, in descending
 * score order, a tie going to the lower expert index. w (N, K): their renormalised weights
 *   w[n,k] = p[n, idx[n,k]] / sum_j p[n, idx[n,j]]        (each row of w sums to 1)
 * scores (N, E) as written by task 1. */
void lab_topk_forward(int *idx, float *w, const float *scores, int N, int E, int K);

/* Task 3. Switch load-balancing loss of one routing decision:
 *   aux = E * sum_i f_i P_i,  f_i = (number of (n, k) with idx[n,k] = i) / (N * K),
 *                             P_i = (1 / N) sum_n p[n,i]
 * scores (N, E), idx (N, K). Equals 1 when the routing is perfectly balanced. */
float lab_aux_loss(const float *scores, const int *idx, int N, int E, int K);

/* Task 4. Backward of the router. With the forward pass of tasks 1-3 as a function of logits,
 *   L = sum_{n,k} dw[n,k] * w[n,k] + aux_scale * aux
 * writes dlogits (N, E) = dL / dlogits, treating f_i (a count of discrete choices) as a
 * constant. dw (N, K) is the gradient arriving at the weights; scores (N, E), idx (N, K) and
 * w (N, K) are what the forward pass produced. */
void lab_router_backward(float *dlogits, const float *dw, const float *scores, const int *idx,
                         const float *w, int N, int E, int K, float aux_scale);

#endif
