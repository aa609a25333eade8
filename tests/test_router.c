/*
 * test_router.c: every routing and balancing mode of the router (moe.score, moe.norm_topk,
 * moe.topk_before_softmax, moe.route_scale, moe.balance, moe.n_group with moe.topk_group).
 *
 * Hand cases pin down the forward values of each mode (sigmoid scores and weights, the
 * Mixtral top-k-then-softmax weights, route_scale, the sigmoid aux loss with per-token
 * normalised scores); finite-difference checks cover router_gate_backward in every
 * combination, and the whole block in a few of them. Group-limited routing is checked against a
 * brute force of its rule written from its definition (keys on a grid, so that experts and
 * groups tie), and with every group kept against the plain top-k, bit for bit. As in test_moe.c, a
 * gradient check through top-k uses well-separated logits and asserts that the routing did not
 * change.
 */
#include <string.h>

#include "base/util.h"
#include "model/moe_block.h"
#include "moe/router_row.h"
#include "moe_util.h"
#include "nn/ops.h"
#include "testutil.h"

static MoeSpec spec_of(int E, int K, int score, int topk_first, int norm_topk, float rs,
                       int balance) {
    MoeSpec sp = {.num_experts = E, .top_k = K, .norm_topk = norm_topk};
    moe_spec_defaults(&sp);
    sp.score = score;
    sp.topk_before_softmax = topk_first;
    sp.route_scale = rs;
    sp.balance = balance;
    return sp;
}

/* ---- forward values ------------------------------------------------------------------------ */

START_TEST(test_sigmoid_scores_and_weights) {
    enum { N = 2, E = 3, K = 2 };
    const float logits[N * E] = {0.0f, logf(3.0f), -logf(3.0f), 2.0f, -1.0f, 1.0f};
    float s[N * E], lse[N], w[N * K];
    int idx[N * K];
    MoeSpec sp = spec_of(E, K, MOE_SCORE_SIGMOID, 0, 0, 1.0f, MOE_BALANCE_AUX);
    router_scores_forward(s, lse, logits, N, &sp);
    /* sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4, independently per expert */
    const float want_s0[E] = {0.5f, 0.75f, 0.25f};
    CLOSE_ARRAYS(s, want_s0, E, "sigmoid scores");
    CLOSE(lse[0], logf(1.0f + 3.0f + 1.0f / 3.0f), "lse of the logits with sigmoid scores");
    router_gate_forward(idx, w, s, logits, NULL, N, &sp);
    ck_assert_int_eq(idx[0], 1);
    ck_assert_int_eq(idx[1], 0);
    ck_assert_int_eq(idx[2], 0);
    ck_assert_int_eq(idx[3], 2);
    CLOSE(w[0], 0.75f, "sigmoid weight, no norm_topk");
    CLOSE(w[1], 0.5f, "sigmoid weight, no norm_topk");
    sp.norm_topk = 1;
    sp.route_scale = 2.5f;
    router_gate_forward(idx, w, s, logits, NULL, N, &sp);
    CLOSE(w[0], 2.5f * 0.75f / 1.25f, "sigmoid weight, renormalised and scaled");
    CLOSE(w[1], 2.5f * 0.5f / 1.25f, "sigmoid weight, renormalised and scaled");
}
END_TEST

START_TEST(test_topk_first_matches_renormalised_softmax) {
    /* softmax over the K chosen logits = renormalised softmax scores: p_i / sum_j p_j */
    enum { N = 7, E = 6, K = 3 };
    float logits[N * E], p[N * E], lse[N], w1[N * K], w2[N * K];
    int i1[N * K], i2[N * K];
    fill_uniform(logits, N * E, 3.0f, 5);
    MoeSpec sp = spec_of(E, K, MOE_SCORE_SOFTMAX, 0, 1, 1.0f, MOE_BALANCE_AUX);
    router_scores_forward(p, lse, logits, N, &sp);
    router_gate_forward(i1, w1, p, logits, NULL, N, &sp);
    sp.topk_before_softmax = 1;
    router_gate_forward(i2, w2, p, logits, NULL, N, &sp);
    for (int j = 0; j < N * K; j++) ck_assert_int_eq(i1[j], i2[j]);
    CLOSE_ARRAYS(w2, w1, N * K, "Mixtral weights vs renormalised softmax");
    /* route_scale multiplies the weights and nothing else */
    sp.route_scale = 0.5f;
    router_gate_forward(i2, w2, p, logits, NULL, N, &sp);
    for (int j = 0; j < N * K; j++) w1[j] *= 0.5f;
    CLOSE_ARRAYS(w2, w1, N * K, "route_scale 0.5");
}
END_TEST

START_TEST(test_gate_weights_of_a_given_choice) {
    /* router_gate_weights on the choice router_gate_forward made gives its weights bit for
     * bit in every weighting mode; on a forced choice, the weights of that choice */
    enum { N = 9, E = 5, K = 2 };
    float logits[N * E], p[N * E], lse[N], w[N * K], w2[N * K];
    int idx[N * K];
    fill_uniform(logits, N * E, 2.0f, 11);
    for (int mode = 0; mode < 6; mode++) {
        const int score = mode & 1 ? MOE_SCORE_SIGMOID : MOE_SCORE_SOFTMAX;
        const int topk_first = mode == 4, norm_topk = mode >= 2;
        MoeSpec sp =
            spec_of(E, K, score, topk_first, norm_topk, mode == 5 ? 2.5f : 1.0f, MOE_BALANCE_AUX);
        router_scores_forward(p, lse, logits, N, &sp);
        router_gate_forward(idx, w, p, logits, NULL, N, &sp);
        router_gate_weights(w2, idx, p, logits, N, &sp);
        ck_assert_mem_eq(w, w2, sizeof w);
        /* force the token's two lowest-scoring experts, in reverse order */
        for (int n = 0; n < N; n++) {
            int lo = 0, lo2 = -1;
            for (int e = 1; e < E; e++)
                if (p[n * E + e] < p[n * E + lo]) lo = e;
            for (int e = 0; e < E; e++)
                if (e != lo && (lo2 < 0 || p[n * E + e] < p[n * E + lo2])) lo2 = e;
            idx[n * K] = lo2, idx[n * K + 1] = lo;
        }
        router_gate_weights(w2, idx, p, logits, N, &sp);
        for (int n = 0; n < N; n++) {
            const float *pn = p + n * E, *ln = logits + n * E;
            const int a = idx[n * K], b = idx[n * K + 1];
            float wa = pn[a], wb = pn[b];
            if (topk_first) {
                wa = 1.0f / (1.0f + expf(ln[b] - ln[a]));
                wb = 1.0f - wa;
            } else if (norm_topk) {
                float z = wa + wb;
                wa /= z, wb /= z;
            }
            CLOSE(w2[n * K], sp.route_scale * wa, "forced choice, first weight");
            CLOSE(w2[n * K + 1], sp.route_scale * wb, "forced choice, second weight");
        }
    }
}
END_TEST

START_TEST(test_sigmoid_aux_loss_normalises_scores) {
    /* two tokens, E = 2, K = 1: f = (1, 0) (both to expert 0);
     * token scores (0.6, 0.2) -> q = (0.75, 0.25); (0.3, 0.3) -> q = (0.5, 0.5);
     * P_0 = 0.625, aux = E f_0 P_0 = 2 * 0.625 = 1.25 */
    const float s[4] = {0.6f, 0.2f, 0.3f, 0.3f};
    const int idx[2] = {0, 0};
    MoeSpec sp = spec_of(2, 1, MOE_SCORE_SIGMOID, 0, 0, 1.0f, MOE_BALANCE_AUX);
    MoeCtx cx;
    moe_ctx_train(&cx, &sp, 2, NULL);
    CLOSE(router_balance_loss(s, idx, 2, &sp, &cx), 1.25f, "sigmoid aux loss");
    sp.score = MOE_SCORE_SOFTMAX; /* softmax scores are taken as they are: P_0 = 0.45 */
    CLOSE(router_balance_loss(s, idx, 2, &sp, &cx), 0.9f, "softmax aux loss");
}
END_TEST

START_TEST(test_seq_aux_hand) {
    /* E = 2, K = 1, two sequences of T = 2 tokens, f_i = E / (K T) * count_i:
     *   seq 0: both tokens to expert 0: f = (2, 0), P = (0.7, 0.3): sum f P = 1.4
     *   seq 1: one token each:          f = (1, 1), P = (0.3, 0.7): sum f P = 1.0
     * seq_aux = mean = 1.2, while the batch-wide Switch loss sees f = (3/4, 1/4), P = (1/2, 1/2)
     * and gives E sum f P = 1: balanced over the batch, not within each sequence. */
    const float p[8] = {0.8f, 0.2f, 0.6f, 0.4f, 0.5f, 0.5f, 0.1f, 0.9f};
    const int idx[4] = {0, 0, 0, 1};
    MoeSpec sp = spec_of(2, 1, MOE_SCORE_SOFTMAX, 0, 1, 1.0f, MOE_BALANCE_SEQ_AUX);
    MoeCtx cx;
    moe_ctx_train(&cx, &sp, 2, NULL);
    CLOSE(router_balance_loss(p, idx, 4, &sp, &cx), 1.2f, "seq_aux loss");
    sp.balance = MOE_BALANCE_AUX;
    CLOSE(router_balance_loss(p, idx, 4, &sp, &cx), 1.0f, "Switch aux loss of the same routing");
    /* one sequence of all four tokens: seq_aux equals the Switch loss */
    sp.balance = MOE_BALANCE_SEQ_AUX;
    cx.T = 4;
    CLOSE(router_balance_loss(p, idx, 4, &sp, &cx), 1.0f, "seq_aux with one sequence");
}
END_TEST

START_TEST(test_bias_moves_choice_not_weights) {
    enum { E = 3, K = 2 };
    const float p[E] = {0.5f, 0.3f, 0.2f};
    const float bias[E] = {0.0f, 0.25f, 0.0f}; /* keys 0.5, 0.55, 0.2 */
    int idx[K];
    float w[K];
    MoeSpec sp = spec_of(E, K, MOE_SCORE_SOFTMAX, 0, 1, 1.0f, MOE_BALANCE_AUX_FREE);
    router_gate_forward(idx, w, p, NULL, NULL, 1, &sp);
    ck_assert_int_eq(idx[0], 0);
    ck_assert_int_eq(idx[1], 1);
    router_gate_forward(idx, w, p, NULL, bias, 1, &sp);
    ck_assert_int_eq(idx[0], 1); /* the bias lifts expert 1 above expert 0 ... */
    ck_assert_int_eq(idx[1], 0);
    CLOSE(w[0], 0.3f / 0.8f, "... but its weight is its unbiased score"); /* not 0.55 / 1.05 */
    CLOSE(w[1], 0.5f / 0.8f, "unbiased weight of expert 0");
    const float big[E] = {0.0f, 0.0f, 1.0f}; /* expert 2 enters the top 2 */
    router_gate_forward(idx, w, p, NULL, big, 1, &sp);
    ck_assert_int_eq(idx[0], 2);
    ck_assert_int_eq(idx[1], 0);
    CLOSE(w[0], 0.2f / 0.7f, "unbiased weight of expert 2");
}
END_TEST

START_TEST(test_bias_update_rules) {
    /* counts (4, 3, 2, 1): loads (0.4, 0.3, 0.2, 0.1), mean 0.25; the bias accumulates (+=)
     * from 1 */
    const double count[4] = {4, 3, 2, 1};
    float b[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    router_bias_update(b, count, 4, MOE_BIAS_SIGN, 0.1f);
    const float want_sign[4] = {0.9f, 0.9f, 1.1f, 1.1f};
    CLOSE_ARRAYS(b, want_sign, 4, "sign rule: overloaded experts down, underloaded up");
    for (int e = 0; e < 4; e++) b[e] = 1.0f;
    router_bias_update(b, count, 4, MOE_BIAS_PROPORTIONAL, 0.1f);
    /* (mean - load) / mean = -0.6, -0.2, 0.2, 0.6 */
    const float want_prop[4] = {0.94f, 0.98f, 1.02f, 1.06f};
    CLOSE_ARRAYS(b, want_prop, 4, "proportional rule");
    const double even[4] = {5, 5, 5, 5};
    router_bias_update(b, even, 4, MOE_BIAS_SIGN, 0.1f);
    CLOSE_ARRAYS(b, want_prop, 4, "balanced loads leave the bias alone (sign 0)");
}
END_TEST

START_TEST(test_bias_update_exact_fair_share) {
    /* 384 assignments over 8 experts: a fair share is exactly 48. As float fractions these
     * loads average (in double) to 0.1250000019, not 0.125, so a rule on the floats would push
     * the four experts at exactly 48 up; on the counts their bias must not move at all. */
    const double count[8] = {48, 61, 35, 48, 52, 44, 48, 48};
    double float_mean = 0.0;
    for (int e = 0; e < 8; e++) float_mean += (float)(count[e] / 384.0);
    float_mean /= 8.0;
    ck_assert_msg(float_mean != 0.125, "the case must be one where float loads mislead");
    float b[8] = {0};
    router_bias_update(b, count, 8, MOE_BIAS_SIGN, 0.01f);
    const float want[8] = {0.0f, -0.01f, 0.01f, 0.0f, -0.01f, 0.01f, 0.0f, 0.0f};
    for (int e = 0; e < 8; e++) ck_assert_float_eq(b[e], want[e]); /* exact, not close */
    router_bias_update(b, count, 8, MOE_BIAS_PROPORTIONAL, 0.01f);
    for (int e = 0; e < 8; e += 3) /* experts 0, 3, 6 hold exactly 48 */
        ck_assert_float_eq(b[e], 0.0f);
}
END_TEST

/* ---- router_gate_backward in every mode ---------------------------------------------------- */

typedef struct {
    MoeSpec sp;
    MoeCtx cx;
    int N;
    float *logits, *scores, *lse, *w, *dw;
    const float *bias;
    int *idx, *idx0;
    float bal_scale, z_scale;
} GateCtx;

/* L = sum dw * w + bal_scale * balance loss + z_scale * z, as a function of the logits */
static double gate_loss(void *vc) {
    GateCtx *c = vc;
    router_scores_forward(c->scores, c->lse, c->logits, c->N, &c->sp);
    router_gate_forward(c->idx, c->w, c->scores, c->logits, c->bias, c->N, &c->sp);
    for (int j = 0; j < c->N * c->sp.top_k; j++)
        ck_assert_msg(c->idx[j] == c->idx0[j], "routing changed under perturbation");
    /* none and aux_free have no balance loss: router_balance_loss is then a diagnostic */
    int has_loss = c->sp.balance == MOE_BALANCE_AUX || c->sp.balance == MOE_BALANCE_SEQ_AUX;
    return dot_d(c->dw, c->w, (size_t)c->N * c->sp.top_k) +
           (has_loss ? c->bal_scale *
                           (double)router_balance_loss(c->scores, c->idx, c->N, &c->sp, &c->cx)
                     : 0.0) +
           c->z_scale * (double)router_z_loss(c->lse, c->N);
}

/* One finite-difference check of router_gate_backward for sp (T = 3 tokens per sequence). */
static void check_gate_gradient(MoeSpec sp, const float *bias) {
    enum { N = 6, E = 5, K = 2 };
    float logits[N * E], scores[N * E], lse[N], w[N * K], dw[N * K], dl[N * E], noise[N * E];
    int idx[N * K], idx0[N * K];
    fill_uniform(noise, N * E, 0.1f, 21);
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++)
            logits[n * E + e] = 0.6f * ((2 * e + n) % E) - 1.2f + noise[n * E + e];
    ck_assert(min_logit_gap(logits, N, E) > 0.3f);
    fill_uniform(dw, N * K, 1.0f, 22);
    MoeCtx cx;
    moe_ctx_train(&cx, &sp, 3, NULL);
    GateCtx c = {sp, cx, N, logits, scores, lse, w, dw, bias, idx, idx0, 0.7f, 0.3f};
    router_scores_forward(scores, lse, logits, N, &sp);
    router_gate_forward(idx0, w, scores, logits, bias, N, &sp);
    router_gate_backward(dl, dw, scores, lse, logits, idx0, w, N, &sp, &cx, c.bal_scale, c.z_scale);
    char what[160];
    snprintf(what, sizeof what,
             "gate dlogits: score %d topk_first %d norm_topk %d scale %g balance %d", sp.score,
             sp.topk_before_softmax, sp.norm_topk, (double)sp.route_scale, sp.balance);
    gradcheck(gate_loss, &c, logits, dl, N * E, EPS, N * E, what);
    ck_assert(max_abs(dl, N * E) > 1e-3f);
}

START_TEST(test_gate_backward_every_mode) {
    /* aux_free runs with a bias that reorders some tokens' choices (the logits are 0.6 apart,
     * so a bias of 0.35 swaps neighbours): the gradient ignores it, as it should */
    const int balances[] = {MOE_BALANCE_AUX, MOE_BALANCE_SEQ_AUX, MOE_BALANCE_AUX_FREE,
                            MOE_BALANCE_NONE};
    const float bias[5] = {0.0f, 0.35f, -0.35f, 0.1f, 0.0f};
    const float scales[] = {1.0f, 2.5f};
    for (int score = 0; score <= 1; score++)
        for (int first = 0; first <= (score == MOE_SCORE_SOFTMAX); first++)
            for (int norm_topk = first; norm_topk <= 1; norm_topk++)
                for (int si = 0; si < 2; si++)
                    for (int b = 0; b < 4; b++)
                        check_gate_gradient(
                            spec_of(5, 2, score, first, norm_topk, scales[si], balances[b]),
                            balances[b] == MOE_BALANCE_AUX_FREE ? bias : NULL);
}
END_TEST

/* The plain entry points are the softmax / Switch-aux special case of the general ones. */
START_TEST(test_plain_router_is_the_default_mode) {
    enum { N = 5, E = 4, K = 2 };
    float logits[N * E], p[N * E], lse[N], w1[N * K], w2[N * K], dw[N * K], d1[N * E], d2[N * E];
    int i1[N * K], i2[N * K];
    fill_uniform(logits, N * E, 2.0f, 3);
    fill_uniform(dw, N * K, 1.0f, 4);
    MoeSpec sp = spec_of(E, K, MOE_SCORE_SOFTMAX, 0, 1, 1.0f, MOE_BALANCE_AUX);
    router_softmax_forward(p, lse, logits, N, E);
    router_topk_forward(i1, w1, p, N, E, K, 1);
    router_gate_forward(i2, w2, p, logits, NULL, N, &sp);
    ck_assert(memcmp(i1, i2, sizeof i1) == 0 && memcmp(w1, w2, sizeof w1) == 0);
    MoeCtx cx;
    moe_ctx_train(&cx, &sp, N, NULL);
    ck_assert_float_eq(router_aux_loss(p, i1, N, E, K), router_balance_loss(p, i1, N, &sp, &cx));
    router_backward(d1, dw, p, lse, i1, w1, N, E, K, 1, 0.4f, 0.2f);
    router_gate_backward(d2, dw, p, lse, logits, i1, w1, N, &sp, &cx, 0.4f, 0.2f);
    ck_assert(memcmp(d1, d2, sizeof d1) == 0);
}
END_TEST

/* ---- group-limited routing (moe.n_group, moe.topk_group) ------------------------------------ */

/* The rule of group-limited routing, written from its definition rather than from router_row.h:
 * keys v = key + bias; each group of E / G consecutive experts scores the sum of its two largest
 * keys (its keys sorted); the groups sorted by score, ties to the lower group, and the first KG
 * kept; then the experts of the kept groups sorted by key, ties to the lower expert, and the
 * first K chosen. Returns the kept groups as bits. */
static unsigned long long brute_group_topk(int *in, const float *key, const float *bias, int E,
                                           int K, int G, int KG) {
    const int per = E / G;
    float v[64], gs[64];
    int order[64];
    for (int e = 0; e < E; e++) v[e] = bias ? key[e] + bias[e] : key[e];
    for (int g = 0; g < G; g++) {
        float sorted[64];
        memcpy(sorted, v + g * per, (size_t)per * sizeof(float));
        for (int i = 1; i < per; i++) /* insertion sort, descending */
            for (int j = i; j > 0 && sorted[j] > sorted[j - 1]; j--) {
                float t = sorted[j];
                sorted[j] = sorted[j - 1], sorted[j - 1] = t;
            }
        gs[g] = sorted[0] + sorted[1];
    }
    /* the groups by (score descending, index ascending): a stable insertion sort */
    for (int g = 0; g < G; g++) order[g] = g;
    for (int i = 1; i < G; i++)
        for (int j = i; j > 0 && gs[order[j]] > gs[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    unsigned long long kept = 0;
    for (int j = 0; j < KG; j++) kept |= 1ull << order[j];
    int cand[64], n = 0;
    for (int e = 0; e < E; e++)
        if ((kept >> (e / per)) & 1u) cand[n++] = e;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[cand[j]] > v[cand[j - 1]]; j--) {
            int t = cand[j];
            cand[j] = cand[j - 1], cand[j - 1] = t;
        }
    for (int k = 0; k < K; k++) in[k] = cand[k];
    return kept;
}

START_TEST(test_group_topk_brute_force) {
    /* random keys on a grid of quarter steps (ties between experts, and between groups' sums,
     * are frequent), with and without an aux-free bias (also quarter steps), softmax and
     * sigmoid scores: router_gate_forward's choice equals the rule's, every chosen expert is
     * in a kept group, and the weights are router_gate_weights' of that choice */
    enum { N = 200 };
    const int cases[][4] = {/* E, G, KG, K */
                            {4, 2, 1, 2},  {8, 4, 1, 2},  {8, 4, 2, 3},
                            {8, 2, 1, 1},  {12, 3, 2, 4}, {16, 8, 3, 4},
                            {16, 4, 1, 4}, {64, 8, 4, 8}, {64, 32, 5, 6}};
    long group_ties = 0, moved = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int E = cases[c][0], G = cases[c][1], KG = cases[c][2], K = cases[c][3];
        float *l = malloc_check((size_t)N * E * sizeof(float));
        float *p = malloc_check((size_t)N * E * sizeof(float)), bias[64];
        fill_uniform(l, (size_t)N * E, 2.0f, 300 + c);
        for (int i = 0; i < N * E; i++) l[i] = roundf(l[i] * 4.0f) / 4.0f;
        fill_uniform(bias, (size_t)E, 0.5f, 400 + c);
        for (int e = 0; e < E; e++) bias[e] = roundf(bias[e] * 4.0f) / 4.0f;
        for (int mode = 0; mode < 4; mode++) {
            const int score = mode & 1, with_bias = mode >> 1;
            const float *b = with_bias ? bias : NULL;
            MoeSpec sp = spec_of(E, K, score, 0, 1, 1.0f, MOE_BALANCE_AUX_FREE);
            sp.n_group = G, sp.topk_group = KG;
            /* the quarter-step logits themselves as keys: sigmoid scores of equal logits tie */
            router_scores_forward(p, NULL, l, N, &sp);
            int idx[N * 8], want[8], plain[N * 8];
            float w[N * 8], w2[N * 8];
            router_gate_forward(idx, w, p, l, b, N, &sp);
            router_gate_weights(w2, idx, p, l, N, &sp);
            ck_assert(memcmp(w, w2, (size_t)N * K * sizeof(float)) == 0);
            MoeSpec flat = sp;
            flat.n_group = 0;
            router_gate_forward(plain, w2, p, l, b, N, &flat);
            for (int n = 0; n < N; n++) {
                const float *key = p + (size_t)n * E;
                unsigned long long kept = brute_group_topk(want, key, b, E, K, G, KG);
                for (int k = 0; k < K; k++) {
                    ck_assert_msg(idx[n * K + k] == want[k],
                                  "E %d G %d KG %d K %d mode %d token %d: choice %d is expert "
                                  "%d, the rule's %d",
                                  E, G, KG, K, mode, n, k, idx[n * K + k], want[k]);
                    ck_assert(((kept >> (idx[n * K + k] / (E / G))) & 1u) != 0);
                }
                moved += memcmp(idx + n * K, plain + n * K, (size_t)K * sizeof(int)) != 0;
                /* two groups with the same score: the tie rule decides */
                for (int g = 0; g < G; g++)
                    for (int h = g + 1; h < G; h++)
                        group_ties += router_group_score(key, b, g * (E / G), E / G) ==
                                      router_group_score(key, b, h * (E / G), E / G);
            }
        }
        free(l), free(p);
    }
    /* the comparison proves the tie rule and the masking only if both happened */
    ck_assert_msg(group_ties > 1000, "only %ld tied pairs of groups", group_ties);
    ck_assert_msg(moved > 1000, "grouping changed only %ld tokens' choices", moved);
}
END_TEST

START_TEST(test_group_all_kept_is_plain_topk) {
    /* topk_group = n_group keeps every group: idx and w bit for bit those of no groups, in
     * every gate mode, with and without bias */
    enum { N = 300, E = 16 };
    float l[N * E], p[N * E], bias[E];
    fill_uniform(l, (size_t)N * E, 2.0f, 91);
    for (int i = 0; i < N * E; i++) l[i] = roundf(l[i] * 4.0f) / 4.0f;
    fill_uniform(bias, E, 0.5f, 92);
    const int Gs[] = {2, 4, 8};
    for (int mode = 0; mode < 16; mode++) {
        const int score = mode & 1, tf = (mode >> 1) & 1, norm = (mode >> 2) & 1;
        const float *b = (mode >> 3) & 1 ? bias : NULL;
        if (tf && (score == MOE_SCORE_SIGMOID || !norm)) continue;
        for (int ig = 0; ig < 3; ig++) {
            MoeSpec sp = spec_of(E, 4, score, tf, norm, 2.5f, MOE_BALANCE_AUX_FREE);
            router_scores_forward(p, NULL, l, N, &sp);
            int i1[N * 4], i2[N * 4];
            float w1[N * 4], w2[N * 4];
            router_gate_forward(i1, w1, p, l, b, N, &sp);
            sp.n_group = Gs[ig], sp.topk_group = Gs[ig];
            router_gate_forward(i2, w2, p, l, b, N, &sp);
            ck_assert_msg(memcmp(i1, i2, sizeof i1) == 0 && memcmp(w1, w2, sizeof w1) == 0,
                          "mode %d G %d", mode, Gs[ig]);
        }
    }
}
END_TEST

START_TEST(test_group_score_hand) {
    /* a group's score is the sum of its two best keys, not its best one: group 0 has the best
     * expert (0.9), group 1 the better pair (0.5 + 0.5 > 0.9 + 0.05) */
    enum { E = 4, K = 2 };
    const float p[E] = {0.9f, 0.05f, 0.5f, 0.5f};
    int idx[K];
    float w[K];
    MoeSpec sp = spec_of(E, K, MOE_SCORE_SIGMOID, 0, 1, 1.0f, MOE_BALANCE_AUX_FREE);
    sp.n_group = 2, sp.topk_group = 1;
    router_gate_forward(idx, w, p, NULL, NULL, 1, &sp);
    ck_assert_int_eq(idx[0], 2);
    ck_assert_int_eq(idx[1], 3);
    CLOSE(w[0], 0.5f, "renormalised over the chosen pair");
    /* the aux-free bias counts in the group's score: +0.2 on expert 1 lifts group 0 to 1.15 */
    const float bias[E] = {0.0f, 0.2f, 0.0f, 0.0f};
    router_gate_forward(idx, w, p, NULL, bias, 1, &sp);
    ck_assert_int_eq(idx[0], 0);
    ck_assert_int_eq(idx[1], 1);
    CLOSE(w[0], 0.9f / 0.95f, "the weights use the unbiased scores");
    /* equal group scores: the lower group */
    const float tie[E] = {0.6f, 0.4f, 0.5f, 0.5f};
    router_gate_forward(idx, w, tie, NULL, NULL, 1, &sp);
    ck_assert_int_eq(idx[0], 0);
    ck_assert_int_eq(idx[1], 1);
}
END_TEST

/* ---- the whole block in other modes -------------------------------------------------------- */

typedef struct {
    MoeSpec sp;
    MoeCtx cx;
    MoeWeights wt;
    MoeActs *a;
    int N;
    float *x, *y, *R;
    const int *idx0;
    Rng rng0; /* the noise stream at the first forward: every forward redraws the same noise */
} BlockCtx;

static double block_loss(void *vc) {
    BlockCtx *c = vc;
    if (c->cx.rng) *c->cx.rng = c->rng0;
    moe_block_forward(&backend_cpu, c->y, c->a, c->x, &c->wt, &c->sp, &c->cx, c->N);
    for (int j = 0; j < c->N * c->sp.top_k; j++)
        ck_assert_msg(c->a->idx[j] == c->idx0[j], "routing changed under perturbation");
    return dot_d(c->y, c->R, (size_t)c->N * c->sp.d_model) +
           moe_balance_coef(&c->sp) * (double)c->a->aux_loss + c->sp.z_coef * (double)c->a->z_loss;
}

/* With jitter or noise > 0, the forward draws from an RNG, restored before every forward of
 * the check so that the noise is a fixed constant of the function being differentiated. */
static void check_block_gradient(MoeSpec sp, const float *bias) {
    enum { N = 6, C = 8, E = 4, K = 2, F = 6 };
    float x[N * C], Wr[E * C], Wg[E * F * C], Wu[E * F * C], Wd[E * C * F], y[N * C], R[N * C];
    float dx[N * C], y2[N * C];
    int idx0[N * K];
    fill_uniform(x, N * C, 1.0f, 51);
    fill_uniform(Wr, E * C, 1.5f, 60); /* spread logits: test_moe_block.c, test_block_gradcheck */
    fill_uniform(Wg, (size_t)E * F * C, 0.5f, 53);
    fill_uniform(Wu, (size_t)E * F * C, 0.5f, 54);
    fill_uniform(Wd, (size_t)E * C * F, 0.5f, 55);
    fill_uniform(R, N * C, 1.0f, 56);
    sp.d_model = C;
    sp.d_expert = F;
    sp.aux_coef = 0.5f;
    sp.z_coef = 0.2f;
    sp.seq_len = 3;
    Rng rng;
    rng_seed(&rng, 77);
    MoeCtx cx;
    moe_ctx_train(&cx, &sp, 3, sp.jitter > 0.0f || sp.noise > 0.0f ? &rng : NULL);
    MoeWeights wt = {.router = Wr, .Wg = Wg, .Wu = Wu, .Wd = Wd, .bias = bias};
    MoeActs a;
    MoeScratch s;
    moe_acts_alloc(&backend_cpu, &a, &sp, NULL, N);
    moe_scratch_alloc(&backend_cpu, &s, &sp, N);
    float gWr[E * C] = {0}, gWg[E * F * C] = {0}, gWu[E * F * C] = {0}, gWd[E * C * F] = {0};
    MoeGrads gr = {gWr, gWg, gWu, gWd};
    Rng rng0 = rng;
    moe_block_forward(&backend_cpu, y, &a, x, &wt, &sp, &cx, N);
    ck_assert_int_eq(a.jittered, sp.jitter > 0.0f);
    if (cx.rng) { /* the noise is real: the logits differ from the noise-free ones */
        float clean[N * E];
        matmul_forward(clean, x, Wr, N, C, E);
        ck_assert(memcmp(clean, a.logits, sizeof clean) != 0);
    }
    float bound = 2.0f * EPS * fmaxf(max_abs(x, N * C), max_abs(Wr, E * C));
    ck_assert(min_logit_gap(a.logits, N, E) > 4.0f * bound);
    memcpy(idx0, a.idx, sizeof idx0);
    moe_block_backward(&backend_cpu, dx, &gr, R, &a, x, &wt, &sp, &cx, &s, 1.0f);
    BlockCtx c = {sp, cx, wt, &a, N, x, y2, R, idx0, rng0};
    char what[160];
    snprintf(what, sizeof what,
             "block dx: score %d topk_first %d norm_topk %d scale %g balance %d jitter %g noise %g",
             sp.score, sp.topk_before_softmax, sp.norm_topk, (double)sp.route_scale, sp.balance,
             (double)sp.jitter, (double)sp.noise);
    gradcheck(block_loss, &c, x, dx, N * C, EPS, N * C, what);
    snprintf(what, sizeof what, "block d router: score %d topk_first %d balance %d", sp.score,
             sp.topk_before_softmax, sp.balance);
    gradcheck(block_loss, &c, Wr, gWr, E * C, EPS, E * C, what);
    gradcheck(block_loss, &c, Wd, gWd, E * C * F, EPS, 40, "block dWd");
    moe_scratch_free(&backend_cpu, &s);
    moe_acts_free(&backend_cpu, &a);
}

START_TEST(test_block_gradients_other_modes) {
    check_block_gradient(spec_of(4, 2, MOE_SCORE_SIGMOID, 0, 1, 2.5f, MOE_BALANCE_AUX), NULL);
    check_block_gradient(spec_of(4, 2, MOE_SCORE_SIGMOID, 0, 0, 1.0f, MOE_BALANCE_AUX), NULL);
    check_block_gradient(spec_of(4, 2, MOE_SCORE_SOFTMAX, 1, 1, 1.5f, MOE_BALANCE_AUX), NULL);
    check_block_gradient(spec_of(4, 2, MOE_SCORE_SOFTMAX, 0, 0, 0.5f, MOE_BALANCE_NONE), NULL);
    check_block_gradient(spec_of(4, 2, MOE_SCORE_SOFTMAX, 0, 1, 1.0f, MOE_BALANCE_SEQ_AUX), NULL);
    check_block_gradient(spec_of(4, 2, MOE_SCORE_SIGMOID, 0, 1, 1.0f, MOE_BALANCE_SEQ_AUX), NULL);
    const float bias[4] = {0.3f, -0.2f, 0.0f, 0.1f};
    check_block_gradient(spec_of(4, 2, MOE_SCORE_SIGMOID, 0, 1, 1.0f, MOE_BALANCE_AUX_FREE), bias);
}
END_TEST

/* Group-limited routing: the choice is a constant of the backward, so the gradients are those
 * of the chosen experts, and the balance losses count only them (their f) while P keeps every
 * expert's score. Two groups of two experts, one kept: each token's pair is its best group. */
START_TEST(test_block_gradients_groups) {
    const int balances[] = {MOE_BALANCE_AUX, MOE_BALANCE_SEQ_AUX};
    for (int score = 0; score < 2; score++)
        for (int ib = 0; ib < 2; ib++) {
            MoeSpec sp = spec_of(4, 2, score, 0, 1, 1.0f, balances[ib]);
            sp.n_group = 2, sp.topk_group = 1;
            check_block_gradient(sp, NULL);
        }
    const float bias[4] = {0.3f, -0.2f, 0.0f, 0.1f};
    MoeSpec sp = spec_of(4, 2, MOE_SCORE_SIGMOID, 0, 1, 2.5f, MOE_BALANCE_AUX_FREE);
    sp.n_group = 2, sp.topk_group = 1;
    check_block_gradient(sp, bias);
}
END_TEST

/* Exploration noise, fixed: jitter scales the router's input gradient by the same factors,
 * logit noise is a constant. */
START_TEST(test_block_gradients_with_noise) {
    /* the amounts keep every token's logits well apart with these seeds (asserted inside) */
    MoeSpec sp = spec_of(4, 2, MOE_SCORE_SOFTMAX, 0, 1, 1.0f, MOE_BALANCE_AUX);
    sp.jitter = 0.2f;
    check_block_gradient(sp, NULL);
    sp.jitter = 0.0f;
    sp.noise = 0.02f;
    check_block_gradient(sp, NULL);
    sp = spec_of(4, 2, MOE_SCORE_SIGMOID, 0, 1, 2.0f, MOE_BALANCE_SEQ_AUX);
    sp.jitter = 0.05f;
    sp.noise = 0.02f;
    check_block_gradient(sp, NULL);
}
END_TEST

static Suite *router_suite(void) {
    Suite *s = suite_create("router");
    TCase *fwd = tcase_create("forward");
    tcase_add_test(fwd, test_sigmoid_scores_and_weights);
    tcase_add_test(fwd, test_topk_first_matches_renormalised_softmax);
    tcase_add_test(fwd, test_gate_weights_of_a_given_choice);
    tcase_add_test(fwd, test_sigmoid_aux_loss_normalises_scores);
    tcase_add_test(fwd, test_plain_router_is_the_default_mode);
    tcase_add_test(fwd, test_seq_aux_hand);
    tcase_add_test(fwd, test_bias_moves_choice_not_weights);
    tcase_add_test(fwd, test_bias_update_rules);
    tcase_add_test(fwd, test_bias_update_exact_fair_share);
    tcase_add_test(fwd, test_group_score_hand);
    tcase_add_test(fwd, test_group_topk_brute_force);
    tcase_add_test(fwd, test_group_all_kept_is_plain_topk);
    suite_add_tcase(s, fwd);
    TCase *grads = tcase_create("gradients");
    tcase_add_test(grads, test_gate_backward_every_mode);
    tcase_add_test(grads, test_block_gradients_other_modes);
    tcase_add_test(grads, test_block_gradients_with_noise);
    tcase_add_test(grads, test_block_gradients_groups);
    tcase_set_timeout(grads, 60);
    suite_add_tcase(s, grads);
    return s;
}

TEST_MAIN(router_suite)
