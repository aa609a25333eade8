/*
 * test_moe.c: the Mixture-of-Experts block piece by piece (test_moe_block.c: the whole block).
 *
 * Hand-made routing cases pin down the discrete parts (top-k order and ties, the dispatch
 * plan, empty experts, the loss and statistics values), and finite-difference gradient checks
 * cover the backward pass of every piece: the router, combine and permute, the experts.
 *
 * Gradient checks through top-k only make sense while a perturbation of 1e-3 cannot change
 * which experts are chosen (top-k is piecewise constant). Each such check therefore uses
 * well-separated logits, asserts the separation up front, and asserts inside the scalar
 * function that the routing did not change.
 */
#include <string.h>

#include "base/omp_compat.h"

#include "base/util.h"
#include "model/moe_block.h"
#include "moe_util.h"
#include "nn/ops.h"
#include "testutil.h"

/* ---- router: top-k, losses, statistics ---------------------------------------------------- */

START_TEST(test_topk_order_ties_renorm) {
    enum { N = 4, E = 5 };
    const float scores[N * E] = {
        0.10f, 0.30f, 0.30f, 0.25f, 0.05f, /* tie 1 vs 2 -> 1 first */
        0.20f, 0.20f, 0.20f, 0.20f, 0.20f, /* all tied -> lowest indices */
        0.05f, 0.05f, 0.10f, 0.40f, 0.40f, /* tie at the top, then 2 */
        0.10f, 0.20f, 0.30f, 0.40f, 0.00f, /* descending order 3, 2, 1 */
    };
    const int want3[N * 3] = {1, 2, 3, 0, 1, 2, 3, 4, 2, 3, 2, 1};
    const int want2[N * 2] = {1, 2, 0, 1, 3, 4, 3, 2};
    int idx[N * 3];
    float w[N * 3];

    router_topk_forward(idx, w, scores, N, E, 3, 0);
    for (int j = 0; j < N * 3; j++) ck_assert_int_eq(idx[j], want3[j]);
    for (int j = 0; j < N * 3; j++) /* without norm_topk the weights are the scores */
        ck_assert_float_eq(w[j], scores[(j / 3) * E + idx[j]]);

    router_topk_forward(idx, w, scores, N, E, 3, 1);
    for (int j = 0; j < N * 3; j++) ck_assert_int_eq(idx[j], want3[j]);
    for (int n = 0; n < N; n++)
        CLOSE(w[n * 3] + w[n * 3 + 1] + w[n * 3 + 2], 1.0f, "renormalised weights sum to 1");
    CLOSE(w[2], 0.25f / 0.85f, "norm_topk weight of expert 3");

    router_topk_forward(idx, w, scores, N, E, 2, 1);
    for (int j = 0; j < N * 2; j++) ck_assert_int_eq(idx[j], want2[j]);
    CLOSE(w[6], 0.4f / 0.7f, "norm_topk weight, last row");
}
END_TEST

START_TEST(test_softmax_and_z_loss) {
    enum { N = 4, E = 2 };
    const float logits[N * E] = {0.0f, logf(3.0f), 1.0f, 1.0f, 1000.0f, 1000.0f, -1000.0f, 0.0f};
    const float want_p[N * E] = {0.25f, 0.75f, 0.5f, 0.5f, 0.5f, 0.5f, 0.0f, 1.0f};
    const float want_lse[N] = {logf(4.0f), 1.0f + logf(2.0f), 1000.0f + logf(2.0f), 0.0f};
    float p[N * E], lse[N];
    router_softmax_forward(p, lse, logits, N, E);
    CLOSE_ARRAYS(p, want_p, N * E, "softmax scores");
    CLOSE_ARRAYS(lse, want_lse, N, "logsumexp (large logits)");
    /* z-loss over the first two tokens: (ln(4)^2 + (1 + ln 2)^2) / 2 */
    double l4 = log(4.0), l2 = 1.0 + log(2.0);
    CLOSE(router_z_loss(lse, 2), (l4 * l4 + l2 * l2) / 2.0, "z-loss");
}
END_TEST

START_TEST(test_aux_loss_balanced_and_collapsed) {
    enum { N = 4, E = 4 };
    float uniform[N * E];
    for (int i = 0; i < N * E; i++) uniform[i] = 0.25f;
    const int balanced2[N * 2] = {0, 1, 2, 3, 1, 0, 3, 2}; /* every expert twice */
    ck_assert_float_eq(router_aux_loss(uniform, balanced2, N, E, 2), 1.0f);
    const int balanced1[N] = {3, 1, 0, 2};
    ck_assert_float_eq(router_aux_loss(uniform, balanced1, N, E, 1), 1.0f);

    /* with f uniform, aux = E sum_i (1/E) P_i = sum_i P_i = 1 whatever the scores */
    float logits[N * E], scores[N * E], lse[N];
    fill_uniform(logits, N * E, 2.0f, 11);
    router_softmax_forward(scores, lse, logits, N, E);
    CLOSE(router_aux_loss(scores, balanced2, N, E, 2), 1.0f, "aux, balanced, any scores");

    /* collapsed: every token to expert 0 with score 0.7 -> aux = E * 1 * 0.7 = 2.8 */
    float collapsed[N * E];
    for (int n = 0; n < N; n++) {
        collapsed[n * E] = 0.7f;
        for (int e = 1; e < E; e++) collapsed[n * E + e] = 0.1f;
    }
    const int all0[N] = {0, 0, 0, 0};
    float aux = router_aux_loss(collapsed, all0, N, E, 1);
    ck_assert(aux > 1.0f);
    CLOSE(aux, 2.8f, "aux loss, collapsed routing");
}
END_TEST

START_TEST(test_router_stats_hand) {
    enum { N = 4, E = 4 };
    /* per-token entropies: ln 4, ln 2, 0, 1.5 ln 2 -> mean 1.125 ln 2 */
    const float scores[N * E] = {0.25f, 0.25f, 0.25f, 0.25f, 0.5f, 0.5f,  0.0f,  0.0f,
                                 1.0f,  0.0f,  0.0f,  0.0f,  0.5f, 0.25f, 0.25f, 0.0f};
    const int idx[N] = {0, 0, 0, 1}; /* loads 0.75, 0.25, 0, 0 */
    const float want_load[E] = {0.75f, 0.25f, 0.0f, 0.0f};
    RouterStats st;
    float load[E];
    router_stats(&st, load, scores, idx, N, E, 1);
    CLOSE_ARRAYS(load, want_load, E, "load");
    /* mean 0.25: maxvio = 0.5 / 0.25; std = sqrt((0.25 + 0 + 0.0625 * 2) / 4) = sqrt(0.09375) */
    CLOSE(st.maxvio, 2.0f, "maxvio");
    CLOSE(st.cv, sqrt(1.5), "cv");
    CLOSE(st.entropy, 1.125 * log(2.0), "entropy");
    ck_assert_float_eq(st.drop_frac, 0.0f);
    /* top-1 scores 0.25, 0.5, 1, 0.5 -> mean 0.5625 */
    CLOSE(st.top1, 0.5625f, "mean top-1 score");

    const int even[N] = {2, 0, 3, 1};
    router_stats(&st, load, scores, even, N, E, 1);
    ck_assert_float_eq(st.maxvio, 0.0f);
    ck_assert_float_eq(st.cv, 0.0f);
}
END_TEST

/* ---- dispatch plan, permute, combine ----------------------------------------------------- */

/* Five tokens, two experts each, four experts; expert 3 gets nothing. */
enum { PN = 5, PK = 2, PE = 4 };
static const int plan_idx[PN * PK] = {2, 0, 0, 1, 2, 1, 0, 2, 1, 0};
/* by hand: expert 0 takes (0,1) (1,0) (3,0) (4,1), expert 1 (1,1) (2,1) (4,0), expert 2 the rest */
static const int plan_slot[PN * PK] = {7, 0, 1, 4, 8, 5, 2, 9, 6, 3};
static const int plan_slot_token[PN * PK] = {0, 1, 3, 4, 1, 2, 4, 0, 2, 3};

START_TEST(test_plan_hand_and_permutation) {
    DispatchPlan p;
    dispatch_plan_alloc(&p, PN, PE, PK);
    dispatch_plan_build(&p, plan_idx, PN);
    const int counts[PE] = {4, 3, 3, 0};
    const int offsets[PE + 1] = {0, 4, 7, 10, 10};
    ck_assert_int_eq(p.S, PN * PK);
    for (int e = 0; e < PE; e++) ck_assert_int_eq(p.counts[e], counts[e]);
    for (int e = 0; e <= PE; e++) ck_assert_int_eq(p.offsets[e], offsets[e]);
    for (int j = 0; j < PN * PK; j++) ck_assert_int_eq(p.slot[j], plan_slot[j]);
    for (int s = 0; s < PN * PK; s++) ck_assert_int_eq(p.slot_token[s], plan_slot_token[s]);
    dispatch_plan_free(&p);

    /* random routing: slots form a permutation, each slice is in token order */
    enum { N = 37, K = 3, E = 7 };
    int idx[N * K], seen[N * K];
    Rng r;
    rng_seed(&r, 5);
    for (int n = 0; n < N; n++) { /* a + k b mod E, E prime, 0 < b < E: K distinct experts */
        int a = (int)rng_below(&r, E), b = 1 + (int)rng_below(&r, E - 1);
        for (int k = 0; k < K; k++) idx[n * K + k] = (a + k * b) % E;
    }
    dispatch_plan_alloc(&p, N, E, K);
    dispatch_plan_build(&p, idx, N);
    ck_assert_int_eq(p.S, N * K);
    memset(seen, 0, sizeof(seen));
    for (int j = 0; j < N * K; j++) {
        int s = p.slot[j];
        ck_assert(s >= 0 && s < N * K);
        seen[s]++;
        ck_assert_int_eq(p.slot_token[s], j / K);
        ck_assert(s >= p.offsets[idx[j]] && s < p.offsets[idx[j] + 1]);
    }
    for (int s = 0; s < N * K; s++) ck_assert_int_eq(seen[s], 1);
    for (int e = 0; e < E; e++)
        for (int s = p.offsets[e] + 1; s < p.offsets[e + 1]; s++)
            ck_assert_int_lt(p.slot_token[s - 1], p.slot_token[s]);
    dispatch_plan_free(&p);
}
END_TEST

START_TEST(test_permute_combine_forward_and_drop) {
    enum { C = 2, S = PN * PK };
    DispatchPlan p;
    dispatch_plan_alloc(&p, PN, PE, PK);
    dispatch_plan_build(&p, plan_idx, PN);
    float x[PN * C], xe[S * C], ye[S * C], w[PN * PK], y[PN * C], want[PN * C];
    for (int n = 0; n < PN; n++) {
        x[n * C] = (float)n;
        x[n * C + 1] = 10.0f * n;
    }
    permute_forward(xe, x, &p, C);
    for (int s = 0; s < S; s++) {
        ck_assert_float_eq(xe[s * C], (float)plan_slot_token[s]);
        ck_assert_float_eq(xe[s * C + 1], 10.0f * plan_slot_token[s]);
    }

    for (int s = 0; s < S; s++) {
        ye[s * C] = (float)s;
        ye[s * C + 1] = -2.0f * s;
    }
    for (int j = 0; j < PN * PK; j++) w[j] = 0.1f * (j + 1);
    const int *slot = plan_slot;
    combine_forward(y, ye, w, &p, C);
    for (int n = 0; n < PN; n++) {
        int s0 = slot[n * PK], s1 = slot[n * PK + 1];
        want[n * C] = w[n * PK] * s0 + w[n * PK + 1] * s1;
        want[n * C + 1] = -2.0f * (w[n * PK] * s0 + w[n * PK + 1] * s1);
    }
    CLOSE_ARRAYS(y, want, PN * C, "combine");

    /* a dropped assignment (capacity mode: slot -1) contributes nothing and gets dw = 0 */
    p.slot[1 * PK + 1] = -1; /* token 1's second expert */
    combine_forward(y, ye, w, &p, C);
    CLOSE(y[1 * C], w[1 * PK] * slot[1 * PK], "combine skips a dropped assignment");
    float dy[PN * C], dye[S * C], dw[PN * PK], dx[PN * C];
    for (int i = 0; i < PN * C; i++) dy[i] = 1.0f;
    for (int i = 0; i < S * C; i++) dye[i] = 0.0f;
    dw[1 * PK + 1] = 99.0f;
    combine_backward(dye, dw, dy, ye, w, &p, C);
    ck_assert_float_eq(dw[1 * PK + 1], 0.0f);
    ck_assert_float_eq(dye[slot[1 * PK + 1] * C], 0.0f); /* its slot gets no gradient */
    for (int i = 0; i < S * C; i++) xe[i] = 1.0f;        /* dxe = 1 everywhere */
    permute_backward(dx, xe, &p, C);
    ck_assert_float_eq(dx[1 * C], 1.0f); /* token 1: one kept slot */
    ck_assert_float_eq(dx[0], 2.0f);     /* token 0: two kept slots */
    dispatch_plan_free(&p);
}
END_TEST

/* An expert with no tokens: empty slice, nothing written past the used slots, no weight
 * gradient; the other experts' rows match a per-row dense SwiGLU with their own weights. */
START_TEST(test_expert_without_tokens) {
    enum { E = 3, C = 4, F = 3, S = 5, SPARE = 2 };
    const int idx[S] = {2, 0, 2, 0, 2}; /* N = 5 tokens, K = 1, expert 1 unused */
    DispatchPlan p;
    dispatch_plan_alloc(&p, S, E, 1);
    dispatch_plan_build(&p, idx, S);
    ck_assert_int_eq(p.counts[1], 0);
    ck_assert_int_eq(p.offsets[1], p.offsets[2]);

    const float sentinel = 12345.0f;
    float x[S * C], xe[S * C], Wg[E * F * C], Wu[E * F * C], Wd[E * C * F];
    float ye[(S + SPARE) * C], g[(S + SPARE) * F], u[(S + SPARE) * F], h[(S + SPARE) * F];
    fill_uniform(x, S * C, 1.0f, 1);
    fill_experts(Wg, Wu, Wd, E, F, C, 2);
    for (int i = 0; i < (S + SPARE) * C; i++) ye[i] = sentinel;
    for (int i = 0; i < (S + SPARE) * F; i++) g[i] = u[i] = h[i] = sentinel;
    permute_forward(xe, x, &p, C);
    experts_forward(ye, g, u, h, xe, Wg, Wu, Wd, p.offsets, NULL, E, C, F);
    for (int i = S * C; i < (S + SPARE) * C; i++) ck_assert_float_eq(ye[i], sentinel);
    for (int i = S * F; i < (S + SPARE) * F; i++) ck_assert_float_eq(h[i], sentinel);

    for (int s = 0; s < S; s++) { /* row s against a dense SwiGLU with its expert's weights */
        int n = p.slot_token[s], e = idx[n];
        float gg[F], uu[F], hh[F], want[C];
        matmul_forward(gg, x + n * C, Wg + e * F * C, 1, C, F);
        matmul_forward(uu, x + n * C, Wu + e * F * C, 1, C, F);
        swiglu_forward(hh, gg, uu, 1, F);
        matmul_forward(want, hh, Wd + e * C * F, 1, F, C);
        CLOSE_ARRAYS(ye + s * C, want, C, "expert row");
    }

    float dye[S * C], dxe[S * C], dg[S * F], du[S * F], dh[S * F];
    float dWg[E * F * C] = {0}, dWu[E * F * C] = {0}, dWd[E * C * F] = {0};
    fill_uniform(dye, S * C, 1.0f, 5);
    experts_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, p.offsets, NULL,
                     E, C, F);
    for (int i = 0; i < F * C; i++) {
        ck_assert_float_eq(dWg[1 * F * C + i], 0.0f);
        ck_assert_float_eq(dWu[1 * F * C + i], 0.0f);
        ck_assert_float_eq(dWd[1 * C * F + i], 0.0f);
    }
    ck_assert(max_abs(dWg, F * C) > 0.0f && max_abs(dWd + 2 * C * F, C * F) > 0.0f);
    dispatch_plan_free(&p);
}
END_TEST

/* ---- gradient checks -------------------------------------------------------------------- */

typedef struct {
    int N, E, K, norm_topk;
    float *logits, *scores, *lse, *w, *dw;
    int *idx, *idx0;
    float aux_scale, z_scale;
} RouterCtx;

/* L = sum dw * w + aux_scale * aux + z_scale * z, as a function of the logits */
static double router_loss(void *vc) {
    RouterCtx *c = vc;
    router_softmax_forward(c->scores, c->lse, c->logits, c->N, c->E);
    router_topk_forward(c->idx, c->w, c->scores, c->N, c->E, c->K, c->norm_topk);
    for (int j = 0; j < c->N * c->K; j++)
        ck_assert_msg(c->idx[j] == c->idx0[j], "routing changed under perturbation");
    return dot_d(c->dw, c->w, (size_t)c->N * c->K) +
           c->aux_scale * (double)router_aux_loss(c->scores, c->idx, c->N, c->E, c->K) +
           c->z_scale * (double)router_z_loss(c->lse, c->N);
}

START_TEST(test_router_backward_gradcheck) {
    enum { N = 6, E = 5, K = 2 };
    float logits[N * E], scores[N * E], lse[N], w[N * K], dw[N * K], dl[N * E], noise[N * E];
    int idx[N * K], idx0[N * K];
    /* logits 0.6 apart (a different order per token) plus noise below 0.1 */
    fill_uniform(noise, N * E, 0.1f, 21);
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++)
            logits[n * E + e] = 0.6f * ((2 * e + n) % E) - 1.2f + noise[n * E + e];
    ck_assert(min_logit_gap(logits, N, E) > 0.3f);
    fill_uniform(dw, N * K, 1.0f, 22);
    for (int norm_topk = 0; norm_topk <= 1; norm_topk++) {
        RouterCtx c = {N, E, K, norm_topk, logits, scores, lse, w, dw, idx, idx0, 0.7f, 0.3f};
        router_softmax_forward(scores, lse, logits, N, E);
        router_topk_forward(idx0, w, scores, N, E, K, norm_topk);
        router_backward(dl, dw, scores, lse, idx0, w, N, E, K, norm_topk, c.aux_scale, c.z_scale);
        gradcheck(router_loss, &c, logits, dl, N * E, EPS, N * E,
                  norm_topk ? "router dlogits (norm_topk)" : "router dlogits (no norm_topk)");
    }
}
END_TEST

typedef struct {
    const DispatchPlan *p;
    int C;
    float *x, *xe, *ye, *w, *y, *R, *Re;
} PermCtx;

static double combine_loss(void *vc) { /* L = sum y * R, y = combine(ye, w) */
    PermCtx *c = vc;
    combine_forward(c->y, c->ye, c->w, c->p, c->C);
    return dot_d(c->y, c->R, (size_t)c->p->N * c->C);
}

static double permute_loss(void *vc) { /* L = sum xe * Re, xe = gather(x) */
    PermCtx *c = vc;
    permute_forward(c->xe, c->x, c->p, c->C);
    return dot_d(c->xe, c->Re, (size_t)c->p->S * c->C);
}

START_TEST(test_combine_permute_gradcheck) {
    enum { C = 3, S = PN * PK };
    DispatchPlan p;
    dispatch_plan_alloc(&p, PN, PE, PK);
    dispatch_plan_build(&p, plan_idx, PN);
    float x[PN * C], xe[S * C], ye[S * C], w[PN * PK], y[PN * C], R[PN * C], Re[S * C];
    float dye[S * C], dw[PN * PK], dx[PN * C];
    fill_uniform(x, PN * C, 1.0f, 31);
    fill_uniform(ye, S * C, 1.0f, 32);
    fill_uniform(w, PN * PK, 1.0f, 33);
    fill_uniform(R, PN * C, 1.0f, 34);
    fill_uniform(Re, S * C, 1.0f, 35);
    PermCtx c = {&p, C, x, xe, ye, w, y, R, Re};
    combine_backward(dye, dw, R, ye, w, &p, C);
    gradcheck(combine_loss, &c, ye, dye, S * C, EPS, S * C, "combine dye");
    gradcheck(combine_loss, &c, w, dw, PN * PK, EPS, PN * PK, "combine dw");
    permute_backward(dx, Re, &p, C);
    gradcheck(permute_loss, &c, x, dx, PN * C, EPS, PN * C, "permute dx");
    dispatch_plan_free(&p);
}
END_TEST

typedef struct {
    const int *offsets;
    int E, C, F, S;
    float *xe, *Wg, *Wu, *Wd, *ye, *g, *u, *h, *R;
} ExpertsCtx;

static double experts_loss(void *vc) { /* L = sum ye * R */
    ExpertsCtx *c = vc;
    experts_forward(c->ye, c->g, c->u, c->h, c->xe, c->Wg, c->Wu, c->Wd, c->offsets, NULL, c->E,
                    c->C, c->F);
    return dot_d(c->ye, c->R, (size_t)c->S * c->C);
}

START_TEST(test_experts_gradcheck) {
    enum { E = 3, C = 6, F = 5, S = 7 };
    const int offsets[E + 1] = {0, 3, 3, 7}; /* expert 1 has no rows */
    float xe[S * C], Wg[E * F * C], Wu[E * F * C], Wd[E * C * F], ye[S * C], R[S * C];
    float g[S * F], u[S * F], h[S * F], dg[S * F], du[S * F], dh[S * F], dxe[S * C];
    float dWg[E * F * C] = {0}, dWu[E * F * C] = {0}, dWd[E * C * F] = {0};
    fill_uniform(xe, S * C, 1.0f, 41);
    fill_experts(Wg, Wu, Wd, E, F, C, 42);
    fill_uniform(R, S * C, 1.0f, 45);
    ExpertsCtx c = {offsets, E, C, F, S, xe, Wg, Wu, Wd, ye, g, u, h, R};
    experts_loss(&c);
    experts_backward(dxe, dWg, dWu, dWd, dg, du, dh, R, xe, g, u, h, Wg, Wu, Wd, offsets, NULL, E,
                     C, F);
    gradcheck(experts_loss, &c, xe, dxe, S * C, EPS, S * C, "experts dxe");
    gradcheck(experts_loss, &c, Wg, dWg, E * F * C, EPS, E * F * C, "experts dWg");
    gradcheck(experts_loss, &c, Wu, dWu, E * F * C, EPS, E * F * C, "experts dWu");
    gradcheck(experts_loss, &c, Wd, dWd, E * C * F, EPS, E * C * F, "experts dWd");

    /* weight gradients accumulate: a second backward doubles them, dxe is rewritten */
    float once[E * F * C], dxe1[S * C];
    memcpy(once, dWg, sizeof(once));
    memcpy(dxe1, dxe, sizeof(dxe1));
    experts_loss(&c);
    experts_backward(dxe, dWg, dWu, dWd, dg, du, dh, R, xe, g, u, h, Wg, Wu, Wd, offsets, NULL, E,
                     C, F);
    for (int i = 0; i < E * F * C; i++) once[i] *= 2.0f;
    CLOSE_ARRAYS(dWg, once, E * F * C, "dWg accumulates");
    ck_assert(memcmp(dxe, dxe1, sizeof(dxe)) == 0); /* dxe is written, not accumulated */
}
END_TEST

/* experts_similarity: copies give 1, a negated expert -1 for its pairs, and a hand-made case
 * the mean of its three pair cosines; the result does not depend on the thread count. */
START_TEST(test_experts_similarity) {
    enum { E = 3, F = 2, C = 2 };
    float Wg[E * F * C], Wu[E * F * C], Wd[E * C * F];
    Rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < F * C; i++) {
        Wg[i] = rng_normal(&r);
        Wu[i] = rng_normal(&r);
        Wd[i] = rng_normal(&r);
    }
    for (int e = 1; e < E; e++) /* copies */
        for (int i = 0; i < F * C; i++) {
            Wg[e * F * C + i] = Wg[i];
            Wu[e * F * C + i] = Wu[i];
            Wd[e * F * C + i] = Wd[i];
        }
    CLOSE((float)experts_similarity(Wg, Wu, Wd, E, C, F), 1.0f, "identical experts");
    for (int i = 0; i < F * C; i++) { /* expert 1 = -expert 0: pairs (0,1) -1, (0,2) 1, (1,2) -1 */
        Wg[F * C + i] = -Wg[i];
        Wu[F * C + i] = -Wu[i];
        Wd[F * C + i] = -Wd[i];
    }
    CLOSE((float)experts_similarity(Wg, Wu, Wd, E, C, F), -1.0f / 3.0f, "a negated expert");
    /* hand-made, with every matrix in play: expert 0 = 1 at g0 and d0; expert 1 = 1 at g0 and
     * u0; expert 2 = 3 at u0 and 1 at d0. cos(0,1) = 1/2, cos(0,2) = 1/sqrt(20),
     * cos(1,2) = 3/sqrt(20). */
    memset(Wg, 0, sizeof Wg);
    memset(Wu, 0, sizeof Wu);
    memset(Wd, 0, sizeof Wd);
    Wg[0] = Wd[0] = 1.0f;
    Wg[F * C] = Wu[F * C] = 1.0f;
    Wu[2 * F * C] = 3.0f;
    Wd[2 * F * C] = 1.0f;
    CLOSE((float)experts_similarity(Wg, Wu, Wd, E, C, F),
          (float)((0.5 + 1.0 / sqrt(20.0) + 3.0 / sqrt(20.0)) / 3.0), "hand-made pairs");
    ck_assert(experts_similarity(Wg, Wu, Wd, 1, C, F) == 0.0);
    omp_set_num_threads(1);
    double one = experts_similarity(Wg, Wu, Wd, E, C, F);
    omp_set_num_threads(2);
    double two = experts_similarity(Wg, Wu, Wd, E, C, F);
    ck_assert(one == two);
}
END_TEST

static Suite *moe_suite(void) {
    Suite *s = suite_create("moe");
    TCase *routing = tcase_create("routing");
    tcase_add_test(routing, test_topk_order_ties_renorm);
    tcase_add_test(routing, test_softmax_and_z_loss);
    tcase_add_test(routing, test_aux_loss_balanced_and_collapsed);
    tcase_add_test(routing, test_router_stats_hand);
    tcase_add_test(routing, test_plan_hand_and_permutation);
    tcase_add_test(routing, test_permute_combine_forward_and_drop);
    tcase_add_test(routing, test_expert_without_tokens);
    tcase_add_test(routing, test_experts_similarity);
    suite_add_tcase(s, routing);
    TCase *grads = tcase_create("gradients");
    tcase_add_test(grads, test_router_backward_gradcheck);
    tcase_add_test(grads, test_combine_permute_gradcheck);
    tcase_add_test(grads, test_experts_gradcheck);
    tcase_set_timeout(grads, 60);
    suite_add_tcase(s, grads);
    return s;
}

TEST_MAIN(moe_suite)
