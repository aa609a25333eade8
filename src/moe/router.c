/*
 * router.c: which experts each token goes to, and with what weight.
 *
 *   logits l (N, E) --scores--> softmax p = softmax(l)          (moe.score=softmax)
 *                               or sigmoid s_e = 1/(1 + e^-l_e) (moe.score=sigmoid, DeepSeek-V3)
 *   --top-k on scores + bias--> idx (N, K)      (bias: aux-free balancing, router_balance.c;
 *                                                with moe.n_group, in the token's best groups)
 *   --gate weights--> w (N, K) = route_scale * g_k with
 *     g_k = score_{i_k}                                   (norm_topk = 0)
 *     g_k = score_{i_k} / sum_j score_{i_j}               (norm_topk = 1)
 *     g_k = exp(l_{i_k}) / sum_j exp(l_{i_j})             (topk_before_softmax, Mixtral)
 *
 * The last two coincide for softmax scores (p_i / sum_j p_j: the softmax's denominator
 * cancels); the Mixtral form never computes the full softmax for the weights, only for the
 * balancing loss and the statistics. The balancing losses and their gradients live in
 * router_balance.c; the z-loss z = mean_n lse_n^2 (lse_n = log sum_e exp l[n,e]) is here: it
 * keeps the logits small whatever the score function.
 *
 * Accumulation rule (nn/ops.h): the router has no parameters of its own here (its linear layer
 * is a matmul in src/model/moe_block.c), so every gradient in this file is written (=).
 */
#include "moe/moe_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "moe/router_row.h"
#include "nn/exp.h"

size_t moe_work_bytes(const MoeSpec *s, int N) {
    size_t b = router_balance_work_bytes(s), r = router_backward_work_bytes(s, s->seq_len, N);
    size_t c = capacity_work_bytes(s, N), x = expert_choice_work_bytes(s, N);
    b = r > b ? r : b;
    b = c > b ? c : b;
    return x > b ? x : b;
}

void moe_spec_defaults(MoeSpec *s) {
    s->score = MOE_SCORE_SOFTMAX;
    s->topk_before_softmax = 0;
    s->route_scale = 1.0f;
    s->balance = MOE_BALANCE_AUX;
    s->routing = MOE_ROUTING_TOKEN_CHOICE;
    s->ec_capacity = 1.0f;
    s->capacity_factor = 0.0f;
    s->capacity_scope = MOE_CAP_BATCH;
    s->min_capacity = 4;
    s->drop_policy = MOE_DROP_POSITION;
    s->padded = 0;
    s->eval_capacity_factor = -1.0f;
    s->second_expert_random = 0;
    s->router_precision = MOE_ROUTER_FP32;
    s->balance_scope = MOE_SCOPE_MICRO;
    s->balance_groups = 0;
    s->n_group = 0;
    s->topk_group = 0;
}

void moe_ctx_train(MoeCtx *x, const MoeSpec *s, int T, Rng *rng) {
    memset(x, 0, sizeof *x);
    x->T = T;
    x->capacity_factor = s->capacity_factor;
    x->rng = rng;
}

void moe_ctx_eval(MoeCtx *x, const MoeSpec *s, int T) {
    moe_ctx_train(x, s, T, NULL);
    /* evaluation may run at its own capacity (0: dropless) */
    if (s->eval_capacity_factor >= 0.0f) x->capacity_factor = s->eval_capacity_factor;
}

/* lse of one row of logits l (E), with its maximum m: m + log sum exp(l - m). */
static float row_lse(const float *l, int E, float m) {
    double sum = 0.0;
    for (int e = 0; e < E; e++) sum += nn_expf(l[e] - m);
    return m + (float)log(sum);
}

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
            p[e] = nn_expf(l[e] - m);
            sum += p[e];
        }
        float inv = (float)(1.0 / sum);
        for (int e = 0; e < E; e++) p[e] *= inv;
        if (lse) lse[n] = m + (float)log(sum);
    }
}

void router_scores_forward(float *scores, float *lse, const float *logits, int N,
                           const MoeSpec *s) {
    /* scores (N, E), lse (N), logits (N, E) */
    const int E = s->num_experts;
    if (s->score == MOE_SCORE_SOFTMAX) {
        router_softmax_forward(scores, lse, logits, N, E);
        return;
    }
    /* sigmoid: each expert's affinity on its own, in (0, 1); the scores of a token need not
     * sum to 1. 1 / (1 + exp(-l)) is exact enough for both signs in float (exp overflows to
     * inf for l < -88, giving 0). */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        float *sn = scores + (size_t)n * E;
        float m = l[0];
        for (int e = 0; e < E; e++) {
            sn[e] = 1.0f / (1.0f + nn_expf(-l[e]));
            m = l[e] > m ? l[e] : m;
        }
        if (lse) lse[n] = row_lse(l, E, m);
    }
}

void router_gate_weights(float *w, const int *idx, const float *scores, const float *logits, int N,
                         const MoeSpec *s) {
    /* w (N, K) written, idx (N, K) the chosen experts, scores (N, E), logits (N, E) (read only
     * when topk_before_softmax). The normalising sums run in double in k order. */
    const int E = s->num_experts, K = s->top_k;
    const float rs = s->route_scale;
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        router_gate_weights_row(w + (size_t)n * K, idx + (size_t)n * K, scores + (size_t)n * E,
                                s->topk_before_softmax ? logits + (size_t)n * E : NULL, K,
                                s->topk_before_softmax, s->norm_topk, rs);
}

void router_gate_forward(int *idx, float *w, const float *scores, const float *logits,
                         const float *bias, int N, const MoeSpec *s) {
    /* idx (N, K), w (N, K), scores (N, E), logits (N, E) (topk_before_softmax), bias (E) or
     * NULL: the top-k of each row, in its best groups with moe.n_group (router_row.h: ties to
     * the lower group and the lower expert) */
    const int E = s->num_experts, K = s->top_k;
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        router_group_topk_row(idx + (size_t)n * K,
                              (s->topk_before_softmax ? logits : scores) + (size_t)n * E, bias, E,
                              K, s->n_group, s->topk_group);
    router_gate_weights(w, idx, scores, logits, N, s);
}

/* The plain router's settings as a MoeSpec (softmax, Switch aux, route_scale 1). */
static MoeSpec plain_spec(int E, int K, int norm_topk) {
    MoeSpec s = {.num_experts = E, .top_k = K, .norm_topk = norm_topk};
    moe_spec_defaults(&s);
    return s;
}

void router_topk_forward(int *idx, float *w, const float *scores, int N, int E, int K,
                         int norm_topk) {
    MoeSpec s = plain_spec(E, K, norm_topk);
    router_gate_forward(idx, w, scores, NULL, NULL, N, &s);
}

float router_aux_loss(const float *scores, const int *idx, int N, int E, int K) {
    MoeSpec s = plain_spec(E, K, 1);
    MoeCtx x;
    moe_ctx_train(&x, &s, N, NULL);
    return router_balance_loss(scores, idx, N, &s, &x);
}

float router_z_loss(const float *lse, int N) {
    /* lse (N): mean lse^2 */
    if (N <= 0) return 0.0f;
    double acc = 0.0;
    for (int n = 0; n < N; n++) acc += (double)lse[n] * lse[n];
    return (float)(acc / N);
}

size_t router_backward_work_bytes(const MoeSpec *s, int T, int N) {
    /* the balance coefficients: one row of E, or one per sequence of T for seq_aux */
    const int Tb = s->balance == MOE_BALANCE_SEQ_AUX && T > 0 ? T : (N > 0 ? N : 1);
    return (size_t)s->num_experts * ((size_t)(N > 0 ? N : 1) / (size_t)Tb + 1) * sizeof(float);
}

void router_gate_backward(float *dlogits, const float *dw, const float *scores, const float *lse,
                          const float *logits, const int *idx, const float *w, int N,
                          const MoeSpec *s, const MoeCtx *x, float bal_scale, float z_scale) {
    /* dlogits (N, E) written; dw (N, K), scores (N, E), lse (N), logits (N, E), idx (N, K),
     * w (N, K).
     *
     * Per token, from the output back to the logits, with rs = route_scale and w the stored
     * (scaled) weights, dot = sum_j dw_j w_j:
     * 1. gate weights -> scores ds (N, E), zero for the experts not chosen:
     *    w_k = rs s_{i_k}                        gives  ds_{i_k} = rs dw_k
     *    w_k = rs s_{i_k} / Z, Z = sum_j s_{i_j}  gives  ds_{i_k} = (rs dw_k - dot) / Z
     * 2. balance loss: dq = coef (router_balance_coef), q the normalised scores: q = p for
     *    softmax; q = s / S, S = sum_e s_e for sigmoid, so ds_j += (coef_j - sum_i coef_i q_i) / S.
     * 3. scores -> logits:
     *    softmax p = softmax(l):  dl_j = p_j (ds_j - sum_i p_i ds_i)
     *    sigmoid s = sigmoid(l):  dl_j = ds_j s_j (1 - s_j)
     *    topk_first, w_k = rs a_k with a = softmax of the chosen logits:
     *                             dl_{i_k} += a_k (rs dw_k - dot),
     *    added after step 3 (the weights bypass the full softmax).
     * 4. z = (1/N) sum_n lse_n^2, d lse / d l_j = softmax_j: dl_j += z_scale 2 lse softmax_j / N.
     * ds is built in the dlogits row itself, then turned into dl in place. */
    if (N <= 0) return;
    const int E = s->num_experts, K = s->top_k, sig = s->score == MOE_SCORE_SIGMOID;
    const int T = s->balance == MOE_BALANCE_SEQ_AUX ? x->T : N;
    const int topk_first = s->topk_before_softmax;
    const float rs = s->route_scale;
    void *owned;
    float *coef = (float *)moe_work(x, router_backward_work_bytes(s, x->T, N), &owned);
    int rows = router_balance_coef(coef, idx, N, s, x, bal_scale);
    float z_per = z_scale * 2.0f / (float)N; /* times lse_n softmax_j */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *p = scores + (size_t)n * E;
        const float *dwn = dw + (size_t)n * K;
        const float *wn = w + (size_t)n * K;
        const int *in = idx + (size_t)n * K;
        const float *g = coef + (size_t)(rows > 1 ? n / T : 0) * E;
        float *dl = dlogits + (size_t)n * E;
        if (sig) {
            double S = 0.0, gq = 0.0;
            for (int e = 0; e < E; e++) S += p[e];
            for (int e = 0; e < E; e++) gq += (double)g[e] * p[e];
            gq /= S;
            for (int e = 0; e < E; e++) dl[e] = (float)((g[e] - gq) / S);
        } else {
            for (int e = 0; e < E; e++) dl[e] = g[e];
        }
        double dot = 0.0;
        for (int k = 0; k < K; k++) dot += (double)dwn[k] * wn[k];
        if (!topk_first) {
            if (s->norm_topk) {
                double z = 0.0;
                for (int k = 0; k < K; k++) z += p[in[k]];
                for (int k = 0; k < K; k++) dl[in[k]] += (float)((rs * dwn[k] - dot) / z);
            } else {
                for (int k = 0; k < K; k++) dl[in[k]] += rs * dwn[k];
            }
        }
        float zl = z_per * lse[n];
        if (sig) {
            const float *l = logits + (size_t)n * E;
            for (int e = 0; e < E; e++)
                dl[e] = dl[e] * p[e] * (1.0f - p[e]) + zl * nn_expf(l[e] - lse[n]);
        } else {
            double pdp = 0.0; /* sum_i p_i ds_i */
            for (int e = 0; e < E; e++) pdp += (double)p[e] * dl[e];
            for (int e = 0; e < E; e++) dl[e] = p[e] * (dl[e] - (float)pdp) + zl * p[e];
        }
        if (topk_first)
            for (int k = 0; k < K; k++)
                dl[in[k]] += (float)((double)(wn[k] / rs) * (rs * dwn[k] - dot));
    }
    moe_work_done(owned);
}

void router_backward(float *dlogits, const float *dw, const float *scores, const float *lse,
                     const int *idx, const float *w, int N, int E, int K, int norm_topk,
                     float aux_scale, float z_scale) {
    MoeSpec s = plain_spec(E, K, norm_topk);
    MoeCtx x;
    moe_ctx_train(&x, &s, N, NULL);
    router_gate_backward(dlogits, dw, scores, lse, NULL, idx, w, N, &s, &x, aux_scale, z_scale);
}
