/*
 * router.c: which experts each token goes to, with what weight, and how balanced that is.
 *
 *   logits (N, E) --softmax--> scores p (N, E) --top-k--> idx (N, K), w (N, K)
 *   w[n,k] = p[n, idx[n,k]]                      (renorm = 0)
 *   w[n,k] = p[n, idx[n,k]] / Z_n, Z_n = sum_j p[n, idx[n,j]]   (renorm = 1)
 *
 * Two auxiliary losses keep the router healthy:
 *   - Switch load balancing: aux = E * sum_i f_i P_i, f_i the fraction of the N*K assignments
 *     that chose expert i, P_i the mean score of expert i. Minimal (= 1) when both are uniform;
 *     a router that sends everything to one expert scores up to E.
 *   - z-loss: z = mean_n lse_n^2, lse_n = log sum_e exp(logits[n,e]). It keeps the logits
 *     small, so the softmax does not saturate and float32 round-off stays harmless.
 *
 * Accumulation rule (nn/ops.h): the router has no parameters of its own here (its linear layer
 * is a matmul in layer.c), so every gradient in this file is written (=).
 */
#include "moe/moe_ops.h"

#include <math.h>
#include <stdlib.h>

#include "util.h"

void router_softmax_forward(float *scores, float *lse, const float *logits, int N, int E) {
    /* scores (N, E), lse (N), logits (N, E)
     * Subtracting the row maximum m keeps exp() in range: p_e = exp(l_e - m) / sum exp(l - m)
     * and lse = m + log sum exp(l - m). */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        float *p = scores + (size_t)n * E;
        float m = l[0];
        for (int e = 1; e < E; e++) m = l[e] > m ? l[e] : m;
        double sum = 0.0;
        for (int e = 0; e < E; e++) {
            p[e] = expf(l[e] - m);
            sum += p[e];
        }
        float inv = (float)(1.0 / sum);
        for (int e = 0; e < E; e++) p[e] *= inv;
        if (lse) lse[n] = m + (float)log(sum);
    }
}

void router_topk_forward(int *idx, float *w, const float *scores, int N, int E, int K, int renorm) {
    /* idx (N, K), w (N, K), scores (N, E)
     * K passes of "largest score not yet taken" per token: K is small (1..8), and scanning
     * experts in increasing order with a strict > makes a tie go to the lower index. */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *p = scores + (size_t)n * E;
        int *in = idx + (size_t)n * K;
        float *wn = w + (size_t)n * K;
        double z = 0.0;
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++) taken |= in[j] == e;
                if (taken) continue;
                if (best < 0 || p[e] > p[best]) best = e;
            }
            in[k] = best;
            wn[k] = p[best];
            z += p[best];
        }
        if (renorm) {
            float inv = (float)(1.0 / z);
            for (int k = 0; k < K; k++) wn[k] *= inv;
        }
    }
}

/* f (E) = fraction of the N*K assignments per expert. Counting integers, so it is exact. */
static void assignment_fractions(float *f, const int *idx, int N, int E, int K) {
    for (int e = 0; e < E; e++) f[e] = 0.0f;
    for (size_t j = 0; j < (size_t)N * K; j++) f[idx[j]] += 1.0f;
    float inv = 1.0f / ((float)N * (float)K);
    for (int e = 0; e < E; e++) f[e] *= inv;
}

float router_aux_loss(const float *scores, const int *idx, int N, int E, int K) {
    /* scores (N, E), idx (N, K): E * sum_i f_i P_i, P_i = (1/N) sum_n p[n,i].
     * Serial sums in a fixed order: this is O(N E), small next to the expert GEMMs. */
    if (N <= 0) return 0.0f;
    float *f = malloc_check((size_t)E * sizeof(float));
    double *P = calloc_check((size_t)E, sizeof(double));
    assignment_fractions(f, idx, N, E, K);
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) P[e] += scores[(size_t)n * E + e];
    double loss = 0.0;
    for (int e = 0; e < E; e++) loss += (double)f[e] * (P[e] / N);
    free(f);
    free(P);
    return (float)(E * loss);
}

float router_z_loss(const float *lse, int N) {
    /* lse (N): mean lse^2 */
    if (N <= 0) return 0.0f;
    double acc = 0.0;
    for (int n = 0; n < N; n++) acc += (double)lse[n] * lse[n];
    return (float)(acc / N);
}

void router_backward(float *dlogits, const float *dw, const float *scores, const float *lse,
                     const int *idx, const float *w, int N, int E, int K, int renorm,
                     float aux_scale, float z_scale) {
    /* dlogits (N, E) written; dw (N, K), scores (N, E), lse (N), idx (N, K), w (N, K).
     *
     * Three steps per token, from the output back to the logits:
     * 1. top-k weights -> scores dp (N, E):
     *    w_k = p_{i_k}                 gives  dp_{i_k} = dw_k
     *    w_k = p_{i_k} / Z, Z = sum_j p_{i_j}
     *                                  gives  dp_{i_k} = (dw_k - sum_j dw_j w_j) / Z
     *    and dp = 0 for the experts not chosen.
     * 2. aux = E sum_i f_i (1/N) sum_n p[n,i] with f constant: dp[n,i] += aux_scale E f_i / N.
     * 3. softmax p = softmax(l): dl_j = p_j (dp_j - sum_i p_i dp_i);
     *    z = (1/N) sum_n lse_n^2 with d lse / d l_j = p_j: dl_j += z_scale 2 lse p_j / N.
     * dp is built in the dlogits row itself, then turned into dl in place. */
    if (N <= 0) return;
    float *f = malloc_check((size_t)E * sizeof(float));
    assignment_fractions(f, idx, N, E, K);
    float aux_per = aux_scale * (float)E / (float)N; /* times f_i */
    float z_per = z_scale * 2.0f / (float)N;         /* times lse_n p_j */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *p = scores + (size_t)n * E;
        const float *dwn = dw + (size_t)n * K;
        const float *wn = w + (size_t)n * K;
        const int *in = idx + (size_t)n * K;
        float *dl = dlogits + (size_t)n * E;
        for (int e = 0; e < E; e++) dl[e] = aux_per * f[e];
        if (renorm) {
            double z = 0.0, dot = 0.0;
            for (int k = 0; k < K; k++) {
                z += p[in[k]];
                dot += (double)dwn[k] * wn[k];
            }
            for (int k = 0; k < K; k++) dl[in[k]] += (float)((dwn[k] - dot) / z);
        } else {
            for (int k = 0; k < K; k++) dl[in[k]] += dwn[k];
        }
        double pdp = 0.0; /* sum_i p_i dp_i */
        for (int e = 0; e < E; e++) pdp += (double)p[e] * dl[e];
        float zl = z_per * lse[n];
        for (int e = 0; e < E; e++) dl[e] = p[e] * (dl[e] - (float)pdp) + zl * p[e];
    }
    free(f);
}

void load_balance(float *maxvio, float *cv, const float *load, int E) {
    /* load (E). mean = 1/E when the loads are fractions of all assignments; computed here so
     * that an average of several batches' loads works the same way. */
    double mean = 0.0, maxl = load[0], var = 0.0;
    for (int e = 0; e < E; e++) {
        mean += load[e];
        if (load[e] > maxl) maxl = load[e];
    }
    mean /= E;
    for (int e = 0; e < E; e++) var += ((double)load[e] - mean) * ((double)load[e] - mean);
    var /= E; /* population variance: the E experts are the whole population */
    *maxvio = mean > 0.0 ? (float)((maxl - mean) / mean) : 0.0f;
    *cv = mean > 0.0 ? (float)(sqrt(var) / mean) : 0.0f;
}

void router_stats(RouterStats *st, float *load, const float *scores, const int *idx, int N, int E,
                  int K) {
    /* load (E), scores (N, E), idx (N, K). The mean load is always 1/E (the loads sum to 1),
     * so maxvio and cv are relative to the perfectly balanced value. */
    if (N <= 0) {
        for (int e = 0; e < E; e++) load[e] = 0.0f;
        st->maxvio = st->cv = st->entropy = st->drop_frac = 0.0f;
        return;
    }
    assignment_fractions(load, idx, N, E, K);
    load_balance(&st->maxvio, &st->cv, load, E);
    double ent = 0.0;
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) {
            double p = scores[(size_t)n * E + e];
            if (p > 0.0) ent -= p * log(p); /* 0 log 0 = 0 */
        }
    st->entropy = (float)(ent / N);
    st->drop_frac = 0.0f; /* no plan here: a capacity-mode caller fills this in */
}
