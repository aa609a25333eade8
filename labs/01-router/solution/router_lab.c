/*
 * router_lab.c: reference solution of lab 01 (README.md in this folder has the assignment).
 *
 *   logits (N, E) --softmax--> p (N, E) --top-k, renormalise--> idx, w (N, K)
 *   aux = E * sum_i f_i P_i
 *   backward: dlogits (N, E) from dw (N, K) and aux_scale * aux
 *
 * Plain serial loops: the point is the math. Sums are accumulated in double so the results
 * match the engine (src/moe/router.c) to float32 round-off.
 */
#include "router_lab.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void lab_softmax_forward(float *scores, const float *logits, int N, int E) {
    /* scores (N, E), logits (N, E).
     * softmax(l) = softmax(l - m) for any constant m. With m = max_j l_j every exponent is
     * <= 0, so exp() cannot overflow, and the largest term is exp(0) = 1, so the sum is >= 1
     * and the division is safe. */
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        float *p = scores + (size_t)n * E;
        float m = l[0];
        for (int e = 1; e < E; e++)
            if (l[e] > m) m = l[e];
        double sum = 0.0;
        for (int e = 0; e < E; e++) {
            p[e] = expf(l[e] - m);
            sum += p[e];
        }
        for (int e = 0; e < E; e++) p[e] = (float)(p[e] / sum);
    }
}

void lab_topk_forward(int *idx, float *w, const float *scores, int N, int E, int K) {
    /* idx (N, K), w (N, K), scores (N, E).
     * K rounds of "the best expert not taken yet". Scanning e upwards and replacing the best
     * only on a strictly larger score is what sends a tie to the lower index. K is small
     * (1 to 8 in practice), so the O(K * K * E) cost does not matter. */
    for (int n = 0; n < N; n++) {
        const float *p = scores + (size_t)n * E;
        int *in = idx + (size_t)n * K;
        float *wn = w + (size_t)n * K;
        double chosen = 0.0; /* Z = sum of the chosen scores */
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++) /* only slots already filled this round */
                    if (in[j] == e) taken = 1;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            in[k] = best;
            chosen += p[best];
        }
        /* w_k = p_{i_k} / Z: the chosen experts' weights sum to 1 */
        for (int k = 0; k < K; k++) wn[k] = (float)(p[in[k]] / chosen);
    }
}

/* f (E) = fraction of the N*K assignments that went to each expert. */
static void assignment_fractions(double *f, const int *idx, int N, int E, int K) {
    for (int e = 0; e < E; e++) f[e] = 0.0;
    for (size_t j = 0; j < (size_t)N * K; j++) f[idx[j]] += 1.0;
    for (int e = 0; e < E; e++) f[e] /= (double)N * K;
}

static double *doubles(int n) {
    double *a = malloc((size_t)n * sizeof(double));
    if (!a) {
        fprintf(stderr, "router_lab: out of memory\n");
        exit(1);
    }
    return a;
}

float lab_aux_loss(const float *scores, const int *idx, int N, int E, int K) {
    /* scores (N, E), idx (N, K).
     * aux = E * sum_i f_i P_i with P_i = (1/N) sum_n p[n,i]. f counts assignments (N*K of
     * them), P averages over tokens (N of them): with uniform scores and an even split,
     * f_i = P_i = 1/E and aux = E * E * (1/E)^2 = 1. */
    double *f = doubles(E), *P = doubles(E);
    assignment_fractions(f, idx, N, E, K);
    for (int e = 0; e < E; e++) P[e] = 0.0;
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) P[e] += scores[(size_t)n * E + e];
    double sum = 0.0;
    for (int e = 0; e < E; e++) sum += f[e] * (P[e] / N);
    free(f);
    free(P);
    return (float)(E * sum);
}

void lab_router_backward(float *dlogits, const float *dw, const float *scores, const int *idx,
                         const float *w, int N, int E, int K, float aux_scale) {
    /* dlogits (N, E) written; dw (N, K), scores (N, E), idx (N, K), w (N, K).
     *
     * Per token, first the gradient dp (N, E) with respect to the scores, then through the
     * softmax to the logits. dp is built in the dlogits row and turned into dl in place.
     *
     * 1. Weights. Forward: w_k = p_{i_k} / Z, Z = sum_j p_{i_j}. For a chosen expert i_m,
     *      dw_k / dp_{i_m} = [k = m] / Z - p_{i_k} / Z^2 = ([k = m] - w_k) / Z
     *    so dp_{i_m} = sum_k dw_k ([k = m] - w_k) / Z = (dw_m - sum_k dw_k w_k) / Z,
     *    and dp = 0 for the experts that were not chosen.
     * 2. Aux loss. Forward: aux_scale * E * sum_i f_i (1/N) sum_n p[n,i], with f constant:
     *      dp[n,i] += aux_scale * E * f_i / N   (every expert, chosen or not).
     * 3. Softmax. Forward: p_j = exp(l_j) / sum_i exp(l_i); dp_i / dl_j = p_i ([i = j] - p_j),
     *      dl_j = sum_i dp_i p_i ([i = j] - p_j) = p_j (dp_j - sum_i p_i dp_i). */
    double *f = doubles(E);
    assignment_fractions(f, idx, N, E, K);
    for (int n = 0; n < N; n++) {
        const float *p = scores + (size_t)n * E;
        const float *dwn = dw + (size_t)n * K;
        const float *wn = w + (size_t)n * K;
        const int *in = idx + (size_t)n * K;
        float *dl = dlogits + (size_t)n * E;

        for (int e = 0; e < E; e++) dl[e] = (float)(aux_scale * E * f[e] / N); /* step 2 */

        double Z = 0.0, dot = 0.0; /* step 1 */
        for (int k = 0; k < K; k++) {
            Z += p[in[k]];
            dot += (double)dwn[k] * wn[k];
        }
        for (int k = 0; k < K; k++) dl[in[k]] += (float)((dwn[k] - dot) / Z);

        double pdp = 0.0; /* step 3 */
        for (int e = 0; e < E; e++) pdp += (double)p[e] * dl[e];
        for (int e = 0; e < E; e++) dl[e] = (float)(p[e] * (dl[e] - pdp));
    }
    free(f);
}
