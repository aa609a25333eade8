/*
 * grader.c: the automatic grader of lab 01 (the router). One Check TCase per task:
 *
 *   task1_softmax   lab_softmax_forward   hand-computed rows, huge logits, the engine's softmax
 *   task2_topk      lab_topk_forward      hand-computed choice, ties, K = 1 and K = E, stale
 *                                         idx on entry, the engine's top-k on random scores
 *   task3_aux_loss  lab_aux_loss          balanced (1), collapsed (E), an idle expert, engine
 *   task4_backward  lab_router_backward   K = 1, hand-computed weight and aux paths, = not +=,
 *                                         the engine's router_backward, finite differences
 *
 * Every task is graded on its own: its inputs come from the engine (src/moe/router.c, linked
 * from libmoe.a), never from the student's other tasks, so one unfinished task fails only
 * itself. Comparisons use the project's one tolerance rule (tests/testutil.h):
 * |got - want| <= atol + rtol * |want|.
 *
 * Run through labs/Makefile: make -C labs grade LAB=01-router [TASK=task2_topk].
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lab.h"
#include "lab_fixture.h"
#include "moe/moe_ops.h"
#include "router_lab.h"

/* Weak: a function missing from the student's file is NULL, and fails its task alone (lab_main)
 * instead of the link. */
#pragma weak lab_softmax_forward
#pragma weak lab_topk_forward
#pragma weak lab_aux_loss
#pragma weak lab_router_backward

/* ---- helpers --------------------------------------------------------------------------------- */

/* The checks below are macros around functions that write the failure message: Check reports
 * the line of the failing assertion, and a student should land on the test, not the helper. */
#define MSG_LEN 512

/* "0.1 0.4 0.2 0.3": one token's scores, for messages */
static const char *row_text(const float *row, int E) {
    static char buf[256];
    size_t len = 0;
    buf[0] = '\0';
    for (int e = 0; e < E && len < sizeof buf - 16; e++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%.4g", e ? " " : "", row[e]);
    return buf;
}

/* idx (N, K) must equal want (N, K) exactly */
static int idx_differs(char *msg, const int *got, const int *want, const float *scores, int N,
                       int E, int K, const char *what) {
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            if (got[n * K + k] != want[n * K + k]) {
                snprintf(msg, MSG_LEN,
                         "%s: token %d, slot %d: got expert %d, want expert %d (scores of the "
                         "token: %s; K = %d)",
                         what, n, k, got[n * K + k], want[n * K + k],
                         row_text(scores + (size_t)n * E, E), K);
                return 1;
            }
    return 0;
}
#define EXPECT_IDX(got, want, scores, N, E, K, what)                                               \
    do {                                                                                           \
        char m_[MSG_LEN];                                                                          \
        if (idx_differs(m_, (got), (want), (scores), (N), (E), (K), (what)))                       \
            ck_abort_msg("%s", m_);                                                                \
    } while (0)

/* every row of x (rows, cols) must sum to 1 */
static int row_sum_differs(char *msg, const float *x, int rows, int cols, const char *what) {
    for (int n = 0; n < rows; n++) {
        double s = 0.0;
        for (int c = 0; c < cols; c++) s += x[n * cols + c];
        float got = (float)s, want = 1.0f;
        double ex;
        if (tol_worst(&got, &want, 1, TOL_F32_ATOL, TOL_F32_RTOL, &ex) >= 0) {
            snprintf(msg, MSG_LEN, "%s: token %d sums to %.7g", what, n, s);
            return 1;
        }
    }
    return 0;
}
#define EXPECT_ROWS_SUM_TO_ONE(x, rows, cols, what)                                                \
    do {                                                                                           \
        char m_[MSG_LEN];                                                                          \
        if (row_sum_differs(m_, (x), (rows), (cols), (what))) ck_abort_msg("%s", m_);              \
    } while (0)

/* ---- task 1: softmax ------------------------------------------------------------------------- */

START_TEST(softmax_hand_computed) {
    /* exp of (0, ln 2, ln 5, ln 2) is (1, 2, 5, 2), which sums to 10; equal logits give 1/E */
    enum { N = 2, E = 4 };
    const float l2 = logf(2.0f), l5 = logf(5.0f);
    const float logits[N * E] = {0.0f, l2, l5, l2, 7.0f, 7.0f, 7.0f, 7.0f};
    const float want[N * E] = {0.1f, 0.2f, 0.5f, 0.2f, 0.25f, 0.25f, 0.25f, 0.25f};
    float scores[N * E];
    LAB_CALL(lab_softmax_forward(scores, logits, N, E));
    EXPECT_TOKEN_TABLE(scores, want, N, E, "expert",
                       "softmax of (0, ln 2, ln 5, ln 2) and (7, 7, 7, 7)");
}
END_TEST

START_TEST(softmax_huge_logits) {
    /* exp(1000) overflows float32 (and exp(-1000) underflows to 0): subtracting the row
     * maximum first gives (1, 1, 0, 1) / 3 and (1, 1, 1, e) / (3 + e) */
    enum { N = 2, E = 4 };
    const float logits[N * E] = {1000, 1000, -1000, 1000, -1000, -1000, -1000, -999};
    const float e1 = expf(1.0f), third = 1.0f / 3.0f;
    const float want[N * E] = {third,        third,        0.0f,         third,
                               1 / (3 + e1), 1 / (3 + e1), 1 / (3 + e1), e1 / (3 + e1)};
    float scores[N * E];
    LAB_CALL(lab_softmax_forward(scores, logits, N, E));
    EXPECT_TOKEN_TABLE(scores, want, N, E, "expert",
                       "softmax of logits near +-1000 (subtract the row maximum before exp)");
}
END_TEST

START_TEST(softmax_matches_engine) {
    enum { N = 37, E = 8 };
    float logits[N * E], scores[N * E], want[N * E];
    fill_uniform(logits, N * E, 6.0f, 101);
    router_softmax_forward(want, NULL, logits, N, E);
    LAB_CALL(lab_softmax_forward(scores, logits, N, E));
    EXPECT_TOKEN_TABLE(scores, want, N, E, "expert",
                       "softmax of random logits (N = 37, E = 8) against the engine");
    EXPECT_ROWS_SUM_TO_ONE(scores, N, E, "softmax: a row of scores does not sum to 1");
}
END_TEST

START_TEST(softmax_single_expert) {
    /* E = 1: one expert gets probability 1, whatever its logit */
    enum { N = 3, E = 1 };
    const float logits[N] = {-5.0f, 0.0f, 80.0f}, want[N] = {1.0f, 1.0f, 1.0f};
    float scores[N];
    LAB_CALL(lab_softmax_forward(scores, logits, N, E));
    EXPECT_TOKEN_TABLE(scores, want, N, E, "expert", "softmax with one expert (E = 1)");
}
END_TEST

/* ---- task 2: top-k --------------------------------------------------------------------------- */

START_TEST(topk_hand_computed) {
    /* top 2 of (0.1, 0.4, 0.2, 0.3): experts 1 then 3, weights 0.4 / 0.7 and 0.3 / 0.7 */
    enum { N = 1, E = 4, K = 2 };
    const float scores[N * E] = {0.1f, 0.4f, 0.2f, 0.3f};
    const int want_idx[N * K] = {1, 3};
    const float want_w[N * K] = {0.4f / 0.7f, 0.3f / 0.7f};
    int idx[N * K] = {-7, -7};
    float w[N * K];
    LAB_CALL(lab_topk_forward(idx, w, scores, N, E, K));
    EXPECT_IDX(idx, want_idx, scores, N, E, K, "top-2, best expert first");
    EXPECT_TOKEN_TABLE(w, want_w, N, K, "slot",
                       "top-2 weights: w_k = p_k / (sum of the chosen scores)");
}
END_TEST

START_TEST(topk_ties_go_to_lower_index) {
    enum { N = 3, E = 4, K = 2 };
    const float scores[N * E] = {0.3f,  0.2f,  0.3f,  0.2f,   /* tie for first: 0 then 2 */
                                 0.1f,  0.3f,  0.3f,  0.3f,   /* three-way tie: 1 then 2 */
                                 0.25f, 0.25f, 0.25f, 0.25f}; /* all equal: 0 then 1 */
    const int want_idx[N * K] = {0, 2, 1, 2, 0, 1};
    const float want_w[N * K] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    int idx[N * K];
    float w[N * K];
    for (int i = 0; i < N * K; i++) idx[i] = -7;
    LAB_CALL(lab_topk_forward(idx, w, scores, N, E, K));
    EXPECT_IDX(idx, want_idx, scores, N, E, K,
               "tied scores: the lower expert index wins, and comes first");
    EXPECT_TOKEN_TABLE(w, want_w, N, K, "slot", "weights of tied experts");
}
END_TEST

START_TEST(topk_k1_and_k_equals_e) {
    /* K = 1: the argmax, weight 1. K = E: every expert, sorted; the weights are the scores. */
    enum { E = 4 };
    const float scores[E] = {0.1f, 0.4f, 0.2f, 0.3f};
    int idx1[1] = {-7}, idx4[E] = {-7, -7, -7, -7};
    float w1[1], w4[E];
    const int want1[1] = {1}, want4[E] = {1, 3, 2, 0};
    const float want_w1[1] = {1.0f}, want_w4[E] = {0.4f, 0.3f, 0.2f, 0.1f};
    LAB_CALL(lab_topk_forward(idx1, w1, scores, 1, E, 1));
    EXPECT_IDX(idx1, want1, scores, 1, E, 1, "K = 1: the single best expert");
    EXPECT_TOKEN_TABLE(w1, want_w1, 1, 1, "slot", "K = 1: the one weight is renormalised to 1");
    LAB_CALL(lab_topk_forward(idx4, w4, scores, 1, E, E));
    EXPECT_IDX(idx4, want4, scores, 1, E, E, "K = E: every expert, in descending score order");
    EXPECT_TOKEN_TABLE(w4, want_w4, 1, E, "slot",
                       "K = E: the weights are the scores themselves (they already sum to 1)");
}
END_TEST

START_TEST(topk_ignores_old_contents_of_idx) {
    /* idx holds each token's best expert in every slot on entry, as it would after an earlier
     * call: an implementation that reads slots it has not written yet skips that expert */
    enum { N = 16, E = 8, K = 3 };
    float scores[N * E], w[N * K], want_w[N * K];
    int idx[N * K], want_idx[N * K];
    lab_softmax_scores(scores, N, E, 3.0f, 202);
    router_topk_forward(want_idx, want_w, scores, N, E, K, 1);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) idx[n * K + k] = want_idx[n * K];
    LAB_CALL(lab_topk_forward(idx, w, scores, N, E, K));
    EXPECT_IDX(idx, want_idx, scores, N, E, K,
               "top-3 when idx already held old values (read only the slots written so far)");
}
END_TEST

START_TEST(topk_matches_engine) {
    enum { N = 41, E = 8 };
    float scores[N * E], w[N * 3], want_w[N * 3];
    int idx[N * 3], want_idx[N * 3];
    lab_softmax_scores(scores, N, E, 3.0f, 203);
    for (int K = 2; K <= 3; K++) {
        char what[96];
        router_topk_forward(want_idx, want_w, scores, N, E, K, 1);
        LAB_CALL(lab_topk_forward(idx, w, scores, N, E, K));
        snprintf(what, sizeof what, "top-%d of random scores (N = %d, E = %d) against the engine",
                 K, N, E);
        EXPECT_IDX(idx, want_idx, scores, N, E, K, what);
        EXPECT_TOKEN_TABLE(w, want_w, N, K, "slot", what);
        EXPECT_ROWS_SUM_TO_ONE(w, N, K, "top-k: the weights of a token do not sum to 1");
    }
}
END_TEST

/* ---- task 3: aux loss ------------------------------------------------------------------------ */

START_TEST(aux_balanced_is_one) {
    /* uniform scores and an even split: f_i = P_i = 1/E, aux = E * E / E^2 = 1 */
    enum { N = 4, E = 4 };
    float uniform[N * E];
    for (int i = 0; i < N * E; i++) uniform[i] = 0.25f;
    const int even1[N * 1] = {0, 1, 2, 3};
    const int even2[N * 2] = {0, 1, 2, 3, 1, 2, 3, 0};
    float got1 = 0.0f, got2 = 0.0f;
    LAB_CALL(got1 = lab_aux_loss(uniform, even1, N, E, 1));
    EXPECT_VALUE(got1, 1.0f, "aux loss of a perfectly balanced routing (K = 1) must be 1");
    LAB_CALL(got2 = lab_aux_loss(uniform, even2, N, E, 2));
    EXPECT_VALUE(got2, 1.0f,
                 "aux loss of a perfectly balanced routing (K = 2) must be 1 (f_i divides by "
                 "N * K, the number of assignments)");
}
END_TEST

START_TEST(aux_collapsed_is_E) {
    /* every token sends everything to expert 0 with score 1: f_0 = P_0 = 1, aux = E */
    enum { N = 3, E = 4 };
    float onehot[N * E] = {0};
    const int all0[N] = {0, 0, 0};
    for (int n = 0; n < N; n++) onehot[n * E] = 1.0f;
    float got = 0.0f;
    LAB_CALL(got = lab_aux_loss(onehot, all0, N, E, 1));
    EXPECT_VALUE(got, (float)E, "aux loss of a routing collapsed onto one expert must be E = 4");
}
END_TEST

START_TEST(aux_hand_computed_idle_expert) {
    /* N = 2, E = 4, K = 2; expert 3 gets no token.
     *   counts (2, 1, 1, 0) -> f = counts / (N K) = (0.5, 0.25, 0.25, 0)
     *   P = column means of the scores = (0.45, 0.2, 0.25, 0.1)
     *   aux = 4 * (0.225 + 0.05 + 0.0625 + 0) = 1.35 */
    enum { N = 2, E = 4, K = 2 };
    const float scores[N * E] = {0.5f, 0.3f, 0.1f, 0.1f, 0.4f, 0.1f, 0.4f, 0.1f};
    const int idx[N * K] = {0, 1, 0, 2};
    float got = 0.0f;
    LAB_CALL(got = lab_aux_loss(scores, idx, N, E, K));
    EXPECT_VALUE(got, 1.35f,
                 "aux loss with an idle expert: f = (0.5 0.25 0.25 0), P = (0.45 0.2 0.25 0.1), "
                 "aux = 1.35 (2.7 means f divided by N instead of N * K)");
}
END_TEST

START_TEST(aux_matches_engine) {
    enum { N = 29, E = 8, K = 2 };
    float scores[N * E], w[N * K];
    int idx[N * K];
    lab_softmax_scores(scores, N, E, 2.0f, 301);
    router_topk_forward(idx, w, scores, N, E, K, 1);
    float got = 0.0f, want = router_aux_loss(scores, idx, N, E, K);
    LAB_CALL(got = lab_aux_loss(scores, idx, N, E, K));
    EXPECT_VALUE(got, want,
                 "aux loss of a random routing (N = 29, E = 8, K = 2) against the engine");
}
END_TEST

/* ---- task 4: backward ------------------------------------------------------------------------ */

/* the engine's dlogits (N, E) for the same question, z-loss off */
static void engine_backward(float *dl, const float *dw, const float *scores, const int *idx,
                            const float *w, int N, int E, int K, float aux_scale) {
    float lse[64] = {0}; /* only read for the z-loss, which is off */
    if (N > 64) ck_abort_msg("grader: engine_backward holds at most 64 tokens");
    router_backward(dl, dw, scores, lse, idx, w, N, E, K, 1, aux_scale, 0.0f);
}

START_TEST(backward_k1_weight_path_is_zero) {
    /* with K = 1 the renormalised weight is p / p = 1 whatever the logits, so dw carries no
     * gradient: dlogits must be 0 (aux_scale = 0) */
    enum { N = 2, E = 3, K = 1 };
    const float scores[N * E] = {0.5f, 0.3f, 0.2f, 0.1f, 0.2f, 0.7f};
    const int idx[N * K] = {0, 2};
    const float w[N * K] = {1.0f, 1.0f}, dw[N * K] = {0.8f, -1.5f}, want[N * E] = {0};
    float dl[N * E];
    for (int i = 0; i < N * E; i++) dl[i] = 1000.0f;
    LAB_CALL(lab_router_backward(dl, dw, scores, idx, w, N, E, K, 0.0f));
    EXPECT_TOKEN_TABLE(dl, want, N, E, "expert",
                       "K = 1, aux_scale = 0: w is always 1, so dlogits must be 0");
}
END_TEST

START_TEST(backward_hand_computed_weights) {
    /* p = (0.5, 0.3, 0.2), top-2 = experts 0, 1, Z = 0.8, w = (0.625, 0.375), dw = (1, -2):
     *   sum_k dw_k w_k = -0.125; dp = ((1 + 0.125) / 0.8, (-2 + 0.125) / 0.8, 0)
     *                            = (1.40625, -2.34375, 0)
     *   sum_i p_i dp_i = 0 (always, through the renormalisation); dl = p * dp */
    enum { N = 1, E = 3, K = 2 };
    const float scores[N * E] = {0.5f, 0.3f, 0.2f};
    const int idx[N * K] = {0, 1};
    const float w[N * K] = {0.625f, 0.375f}, dw[N * K] = {1.0f, -2.0f};
    const float want[N * E] = {0.703125f, -0.703125f, 0.0f};
    float dl[N * E];
    for (int i = 0; i < N * E; i++) dl[i] = 1000.0f;
    LAB_CALL(lab_router_backward(dl, dw, scores, idx, w, N, E, K, 0.0f));
    EXPECT_TOKEN_TABLE(dl, want, N, E, "expert",
                       "gradient through the renormalised weights, aux_scale = 0");
}
END_TEST

START_TEST(backward_hand_computed_aux) {
    /* the routing of aux_hand_computed_idle_expert, dw = 0, aux_scale = 1:
     *   dp[n,i] = E f_i / N = (1, 0.5, 0.5, 0) for both tokens
     *   token 0: sum p dp = 0.7,  dl = p * (dp - 0.7)  = (0.15, -0.06, -0.02, -0.07)
     *   token 1: sum p dp = 0.65, dl = p * (dp - 0.65) = (0.14, -0.015, -0.06, -0.065) */
    enum { N = 2, E = 4, K = 2 };
    const float scores[N * E] = {0.5f, 0.3f, 0.1f, 0.1f, 0.4f, 0.1f, 0.4f, 0.1f};
    const int idx[N * K] = {0, 1, 0, 2};
    const float w[N * K] = {0.625f, 0.375f, 0.5f, 0.5f}, dw[N * K] = {0};
    const float want[N * E] = {0.15f, -0.06f, -0.02f, -0.07f, 0.14f, -0.015f, -0.06f, -0.065f};
    float dl[N * E];
    for (int i = 0; i < N * E; i++) dl[i] = 1000.0f;
    LAB_CALL(lab_router_backward(dl, dw, scores, idx, w, N, E, K, 1.0f));
    EXPECT_TOKEN_TABLE(dl, want, N, E, "expert",
                       "gradient of the aux loss alone (dw = 0, aux_scale = 1)");
}
END_TEST

START_TEST(backward_writes_not_accumulates) {
    /* the same call twice into the same buffer must give the same dlogits */
    enum { N = 5, E = 6, K = 2 };
    float scores[N * E], w[N * K], dw[N * K], first[N * E] = {0}, second[N * E];
    int idx[N * K];
    lab_softmax_scores(scores, N, E, 2.0f, 401);
    router_topk_forward(idx, w, scores, N, E, K, 1);
    fill_uniform(dw, N * K, 1.0f, 402);
    LAB_CALL(lab_router_backward(first, dw, scores, idx, w, N, E, K, 0.5f));
    memcpy(second, first, sizeof second);
    LAB_CALL(lab_router_backward(second, dw, scores, idx, w, N, E, K, 0.5f));
    EXPECT_TOKEN_TABLE(
        second, first, N, E, "expert",
        "a second call into the same dlogits changed it: write (=), do not add (+=)");
}
END_TEST

START_TEST(backward_matches_engine) {
    static const struct {
        int N, E, K;
        float aux_scale;
    } cases[] = {{33, 8, 2, 0.0f}, {33, 8, 2, 0.05f}, {20, 6, 3, 0.3f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int N = cases[c].N, E = cases[c].E, K = cases[c].K;
        float scores[33 * 8], w[33 * 3], dw[33 * 3], dl[33 * 8], want[33 * 8];
        int idx[33 * 3];
        char what[128];
        lab_softmax_scores(scores, N, E, 2.5f, 410 + c);
        router_topk_forward(idx, w, scores, N, E, K, 1);
        fill_uniform(dw, (size_t)N * K, 1.0f, 420 + c);
        engine_backward(want, dw, scores, idx, w, N, E, K, cases[c].aux_scale);
        LAB_CALL(lab_router_backward(dl, dw, scores, idx, w, N, E, K, cases[c].aux_scale));
        snprintf(what, sizeof what,
                 "dlogits of a random routing (N = %d, E = %d, K = %d, aux_scale = %g) against "
                 "the engine",
                 N, E, K, (double)cases[c].aux_scale);
        EXPECT_TOKEN_TABLE(dl, want, N, E, "expert", what);
    }
}
END_TEST

/* L(logits) = sum dw * w + aux_scale * aux, through the engine's forward pass */
typedef struct {
    int N, E, K;
    float aux_scale;
    float *logits, *scores, *w, *dw;
    int *idx, *idx0;
} LossCtx;

static double router_loss(void *vc) {
    LossCtx *c = vc;
    router_softmax_forward(c->scores, NULL, c->logits, c->N, c->E);
    router_topk_forward(c->idx, c->w, c->scores, c->N, c->E, c->K, 1);
    for (int j = 0; j < c->N * c->K; j++) /* the test's own set-up, not the student's code */
        ck_assert_msg(c->idx[j] == c->idx0[j], "grader: the routing changed under perturbation");
    double L = 0.0;
    for (int j = 0; j < c->N * c->K; j++) L += (double)c->dw[j] * c->w[j];
    return L + c->aux_scale * (double)router_aux_loss(c->scores, c->idx, c->N, c->E, c->K);
}

START_TEST(backward_finite_differences) {
    /* central differences of L with respect to every logit. The logits of a token are 0.6
     * apart (in a different order per token) plus noise below 0.1, so a step of 1e-3 never
     * changes which experts are chosen. */
    enum { N = 6, E = 5, K = 2 };
    float logits[N * E], noise[N * E], scores[N * E], w[N * K], dw[N * K], dl[N * E];
    int idx[N * K], idx0[N * K];
    fill_uniform(noise, N * E, 0.1f, 431);
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++)
            logits[n * E + e] = 0.6f * (float)((2 * e + n) % E) - 1.2f + noise[n * E + e];
    fill_uniform(dw, N * K, 1.0f, 432);
    LossCtx c = {N, E, K, 0.7f, logits, scores, w, dw, idx, idx0};
    router_softmax_forward(scores, NULL, logits, N, E);
    router_topk_forward(idx0, w, scores, N, E, K, 1);
    LAB_CALL(lab_router_backward(dl, dw, scores, idx0, w, N, E, K, c.aux_scale));
    gradcheck(router_loss, &c, logits, dl, N * E, 1e-3f, N * E,
              "dlogits against finite differences of sum(dw * w) + 0.7 * aux "
              "(element = token * E + expert, E = 5)");
}
END_TEST

/* ---- suite ----------------------------------------------------------------------------------- */

static Suite *router_lab_suite(void) {
    Suite *s = suite_create("lab 01: router");
    TCase *t1 = tcase_create("task1_softmax");
    tcase_add_test(t1, softmax_hand_computed);
    tcase_add_test(t1, softmax_huge_logits);
    tcase_add_test(t1, softmax_single_expert);
    tcase_add_test(t1, softmax_matches_engine);
    suite_add_tcase(s, t1);
    TCase *t2 = tcase_create("task2_topk");
    tcase_add_test(t2, topk_hand_computed);
    tcase_add_test(t2, topk_ties_go_to_lower_index);
    tcase_add_test(t2, topk_k1_and_k_equals_e);
    tcase_add_test(t2, topk_ignores_old_contents_of_idx);
    tcase_add_test(t2, topk_matches_engine);
    suite_add_tcase(s, t2);
    TCase *t3 = tcase_create("task3_aux_loss");
    tcase_add_test(t3, aux_balanced_is_one);
    tcase_add_test(t3, aux_collapsed_is_E);
    tcase_add_test(t3, aux_hand_computed_idle_expert);
    tcase_add_test(t3, aux_matches_engine);
    suite_add_tcase(s, t3);
    TCase *t4 = tcase_create("task4_backward");
    tcase_add_test(t4, backward_k1_weight_path_is_zero);
    tcase_add_test(t4, backward_hand_computed_weights);
    tcase_add_test(t4, backward_hand_computed_aux);
    tcase_add_test(t4, backward_writes_not_accumulates);
    tcase_add_test(t4, backward_matches_engine);
    tcase_add_test(t4, backward_finite_differences);
    suite_add_tcase(s, t4);
    return s;
}

int main(void) {
    static const LabTask tasks[] = {LAB_TASK("task1_softmax", lab_softmax_forward, 2),
                                    LAB_TASK("task2_topk", lab_topk_forward, 3),
                                    LAB_TASK("task3_aux_loss", lab_aux_loss, 2),
                                    LAB_TASK("task4_backward", lab_router_backward, 3)};
    return lab_main(router_lab_suite(), "lab 01: router", tasks, 4);
}
