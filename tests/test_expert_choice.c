/*
 * test_expert_choice.c: expert-choice routing (moe.routing=expert_choice, moe/expert_choice.c).
 *
 *   - capacity: cap = ceil(ec_capacity N K / E), clamped to [1, N];
 *   - a hand case, N = 4 tokens, E = 2 experts, K = 1, cap = 2: exactly which tokens each
 *     expert picks (ties to the lower token), the slots in token order, a token picked by both
 *     experts (its output is the weighted sum of both), a token picked by none (its output is
 *     exactly 0), gate weights route_scale * score, and the statistics (equal loads,
 *     drop_frac = the fraction of unpicked tokens);
 *   - the backward pass of the whole block against finite differences, softmax and sigmoid
 *     scores, z-loss on, with scores far enough apart that no pick changes under the
 *     perturbation;
 *   - the leak: in a whole causal model, changing only the LAST token of a sequence changes
 *     the logits of earlier positions under expert choice, and leaves them bit-identical under
 *     token choice.
 */
#include <math.h>
#include <string.h>

#include "model/model.h"
#include "moe/moe_ops.h"
#include "testutil.h"

#define EPS 1e-3f

static MoeSpec ec_spec(int C, int E, int K, int F) {
    MoeSpec sp = {.d_model = C, .num_experts = E, .top_k = K, .d_expert = F};
    moe_spec_defaults(&sp);
    sp.routing = MOE_ROUTING_EXPERT_CHOICE;
    sp.balance = MOE_BALANCE_NONE;
    return sp;
}

START_TEST(test_capacity) {
    MoeSpec sp = ec_spec(2, 2, 1, 2);
    ck_assert_int_eq(moe_ec_capacity(&sp, 4), 2); /* 4 * 1 / 2 */
    sp.ec_capacity = 0.1f;
    ck_assert_int_eq(moe_ec_capacity(&sp, 4), 1); /* ceil(0.2), and never below 1 */
    sp.ec_capacity = 10.0f;
    ck_assert_int_eq(moe_ec_capacity(&sp, 4), 4); /* at most every token */
    sp.ec_capacity = 3e38f; /* a huge factor is every token, not an overflow to 1 */
    ck_assert_int_eq(moe_ec_capacity(&sp, 1000), 1000);
    sp.ec_capacity = 3.4028235e38f;
    ck_assert_int_eq(moe_ec_capacity(&sp, 1 << 30), 1 << 30);
    sp = ec_spec(2, 4, 2, 2);
    ck_assert_int_eq(moe_ec_capacity(&sp, 10), 5); /* 10 * 2 / 4 */
    sp.ec_capacity = 1.5f;
    ck_assert_int_eq(moe_ec_capacity(&sp, 10), 8); /* ceil(7.5) */
    ck_assert_uint_eq(moe_slots_max(&sp, 10), 4 * 8);
    ck_assert_int_eq(moe_assignments_per_token(&sp), 4);
    sp.routing = MOE_ROUTING_TOKEN_CHOICE;
    ck_assert_uint_eq(moe_slots_max(&sp, 10), 10 * 2);
    ck_assert_int_eq(moe_assignments_per_token(&sp), 2);
}
END_TEST

/* One expert's SwiGLU on one token, written out: Wd (silu(Wg x) * (Wu x)). out (C), x (C). */
static void expert_ref(float *out, const float *x, const float *Wg, const float *Wu,
                       const float *Wd, int e, int C, int F) {
    float h[16];
    for (int f = 0; f < F; f++) {
        double g = 0.0, u = 0.0;
        for (int c = 0; c < C; c++) {
            g += (double)Wg[((size_t)e * F + f) * C + c] * x[c];
            u += (double)Wu[((size_t)e * F + f) * C + c] * x[c];
        }
        h[f] = (float)(g / (1.0 + exp(-g)) * u);
    }
    for (int c = 0; c < C; c++) {
        double acc = 0.0;
        for (int f = 0; f < F; f++) acc += (double)Wd[((size_t)e * C + c) * F + f] * h[f];
        out[c] = (float)acc;
    }
}

START_TEST(test_hand_case) {
    enum { N = 4, C = 2, E = 2, K = 1, F = 3 };
    /* Router = identity, so the logits are x. Softmax scores per token (expert 0, expert 1):
     *   token 0: logits (2, 0)   -> (0.88, 0.12)
     *   token 1: logits (0.5, 0) -> (0.62, 0.38)
     *   token 2: the same as token 1: ties with it in both columns
     *   token 3: logits (0, 1.5) -> (0.18, 0.82)
     * cap = 2. Expert 0 ranks 0.88 (t0), 0.62 (t1), 0.62 (t2), 0.18 (t3): picks t0 and t1 (the
     * tie goes to the lower token). Expert 1 ranks 0.82 (t3), 0.38 (t1, t2), 0.12 (t0): picks
     * t3 and t1. Token 1 goes to both experts, token 2 to none. */
    const float x[N * C] = {2.0f, 0.0f, 0.5f, 0.0f, 0.5f, 0.0f, 0.0f, 1.5f};
    const float Wr[E * C] = {1.0f, 0.0f, 0.0f, 1.0f};
    float Wg[E * F * C], Wu[E * F * C], Wd[E * C * F], y[N * C];
    fill_uniform(Wg, E * F * C, 1.0f, 11);
    fill_uniform(Wu, E * F * C, 1.0f, 12);
    fill_uniform(Wd, E * C * F, 1.0f, 13);
    MoeSpec sp = ec_spec(C, E, K, F);
    sp.route_scale = 2.0f;
    MoeCtx cx; /* the plan needs no T: one sequence of the N tokens */
    moe_ctx_train(&cx, &sp, N, NULL);
    MoeWeights wt = {.router = Wr, .Wg = Wg, .Wu = Wu, .Wd = Wd};
    MoeActs a;
    moe_acts_alloc(&backend_cpu, &a, &sp, NULL, N);
    moe_block_forward(&backend_cpu, y, &a, x, &wt, &sp, &cx, N);

    /* slot(n, e): expert 0 owns slots 0..1 (t0, t1), expert 1 slots 2..3 (t1, t3) */
    const int want_slot[N * E] = {0, -1, 1, 2, -1, -1, -1, 3};
    const int want_token[E * 2] = {0, 1, 1, 3};
    for (int j = 0; j < N * E; j++) {
        ck_assert_msg(a.plan.slot[j] == want_slot[j], "slot(%d, %d) = %d, want %d", j / E, j % E,
                      a.plan.slot[j], want_slot[j]);
        ck_assert_int_eq(a.idx[j], j % E);
        expect_close(a.w[j], 2.0f * a.scores[j], TOL_F32_ATOL, TOL_F32_RTOL, "w = 2 score");
    }
    ck_assert_int_eq(a.plan.S, 4);
    for (int s = 0; s < 4; s++) ck_assert_int_eq(a.plan.slot_token[s], want_token[s]);
    ck_assert_int_eq(a.plan.offsets[1], 2);
    ck_assert_float_eq(a.aux_loss, 0.0f);

    /* outputs: token 2 exactly 0; the others the weighted sums of their experts' outputs */
    for (int c = 0; c < C; c++) ck_assert_msg(y[2 * C + c] == 0.0f, "unpicked token has output");
    float want[N * C] = {0}, o[C];
    const int pick_n[4] = {0, 1, 1, 3}, pick_e[4] = {0, 0, 1, 1};
    for (int p = 0; p < 4; p++) {
        int n = pick_n[p], e = pick_e[p];
        expert_ref(o, x + n * C, Wg, Wu, Wd, e, C, F);
        for (int c = 0; c < C; c++) want[n * C + c] += 2.0f * a.scores[n * E + e] * o[c];
    }
    expect_close_arrays(y, want, N * C, TOL_F32_ATOL, TOL_F32_RTOL, "expert-choice output");

    /* statistics: 2 kept assignments per expert, token 2 of 4 unpicked */
    RouterStats st;
    float load[E];
    expert_choice_stats(&st, load, a.scores, &a.plan);
    ck_assert_float_eq(load[0], 0.5f);
    ck_assert_float_eq(load[1], 0.5f);
    ck_assert_float_eq(st.maxvio, 0.0f);
    ck_assert_float_eq(st.drop_frac, 0.25f);
    moe_acts_free(&backend_cpu, &a);
}
END_TEST

/* ---- gradient check of the block ---------------------------------------------------------- */

typedef struct {
    MoeSpec sp;
    MoeCtx cx;
    MoeWeights wt;
    MoeActs *a;
    int N;
    float *x, *y, *R;
    const int *slot0; /* (N, E) the picks of the unperturbed forward */
} EcCtx;

/* L = sum y * R + z_coef z_loss: what the backward differentiates with dy = R, loss_scale 1. */
static double ec_loss(void *vc) {
    EcCtx *c = vc;
    moe_block_forward(&backend_cpu, c->y, c->a, c->x, &c->wt, &c->sp, &c->cx, c->N);
    for (int j = 0; j < c->N * c->sp.num_experts; j++)
        ck_assert_msg((c->a->plan.slot[j] >= 0) == (c->slot0[j] >= 0),
                      "a pick changed under perturbation");
    double L = 0.0;
    for (int i = 0; i < c->N * c->sp.d_model; i++) L += (double)c->y[i] * c->R[i];
    return L + c->sp.z_coef * (double)c->a->z_loss;
}

/* The smallest margin of a pick: min over experts e, tokens p picked by e and u not picked
 * of scores[p, e] - scores[u, e]. The picks are stable while no perturbation moves a score by
 * half of it. scores (N, E), slot (N, E). */
static float min_pick_margin(const float *scores, const int *slot, int N, int E) {
    float gap = INFINITY;
    for (int e = 0; e < E; e++)
        for (int p = 0; p < N; p++)
            for (int u = 0; u < N; u++)
                if (slot[p * E + e] >= 0 && slot[u * E + e] < 0)
                    gap = fminf(gap, scores[p * E + e] - scores[u * E + e]);
    return gap;
}

START_TEST(test_block_gradcheck) {
    enum { N = 6, C = 8, E = 4, K = 2, F = 6 };
    float x[N * C], Wr[E * C], Wg[E * F * C], Wu[E * F * C], Wd[E * C * F], R[N * C];
    float y[N * C], y2[N * C], dx[N * C];
    int slot0[N * E];
    fill_uniform(x, N * C, 1.0f, 87);
    fill_uniform(Wr, E * C, 1.5f, 72);
    fill_uniform(Wg, E * F * C, 0.5f, 73);
    fill_uniform(Wu, E * F * C, 0.5f, 74);
    fill_uniform(Wd, E * C * F, 0.5f, 75);
    fill_uniform(R, N * C, 1.0f, 76);
    for (int score = MOE_SCORE_SOFTMAX; score <= MOE_SCORE_SIGMOID; score++) {
        MoeSpec sp = ec_spec(C, E, K, F);
        sp.score = score;
        sp.z_coef = 0.2f;
        sp.route_scale = 1.5f;
        MoeCtx cx;
        moe_ctx_train(&cx, &sp, N, NULL);
        MoeWeights wt = {.router = Wr, .Wg = Wg, .Wu = Wu, .Wd = Wd};
        MoeActs a;
        MoeScratch s;
        moe_acts_alloc(&backend_cpu, &a, &sp, NULL, N);
        moe_scratch_alloc(&backend_cpu, &s, &sp, N);
        float gWr[E * C] = {0}, gWg[E * F * C] = {0}, gWu[E * F * C] = {0}, gWd[E * C * F] = {0};
        MoeGrads gr = {gWr, gWg, gWu, gWd};

        moe_block_forward(&backend_cpu, y, &a, x, &wt, &sp, &cx, N);
        ck_assert_int_eq(a.plan.S, E * 3); /* cap = 6 * 2 / 4 */
        /* a perturbation eps of x[n,c] moves the logits of token n by eps Wr[., c]; of
         * Wr[e,c], logit e of every token by eps x[., c]; a softmax or sigmoid score moves by
         * at most twice the largest logit move */
        float bound = 2.0f * EPS * fmaxf(max_abs(x, N * C), max_abs(Wr, E * C));
        float gap = min_pick_margin(a.scores, a.plan.slot, N, E);
        ck_assert_msg(gap > 4.0f * bound, "picks too close for a stable check: %g", gap);
        memcpy(slot0, a.plan.slot, sizeof(slot0));
        moe_block_backward(&backend_cpu, dx, &gr, R, &a, x, &wt, &sp, &cx, &s, 1.0f);

        EcCtx c = {sp, cx, wt, &a, N, x, y2, R, slot0};
        struct {
            float *v, *grad;
            int n;
            const char *name;
        } checks[] = {{x, dx, N * C, "dx"},
                      {Wr, gWr, E * C, "d router"},
                      {Wg, gWg, E * F * C, "dWg"},
                      {Wu, gWu, E * F * C, "dWu"},
                      {Wd, gWd, E * C * F, "dWd"}};
        for (int i = 0; i < 5; i++) {
            char what[64];
            snprintf(what, sizeof what, "expert-choice block %s (score %d)", checks[i].name, score);
            gradcheck(ec_loss, &c, checks[i].v, checks[i].grad, (size_t)checks[i].n, EPS,
                      (size_t)checks[i].n, what);
        }
        /* the router gradient is not only the z-loss: turning z off changes it but keeps it
         * non-zero (the gate weights carry score gradients) */
        float gWr0[E * C] = {0};
        MoeGrads gr0 = {gWr0, NULL, NULL, NULL};
        sp.z_coef = 0.0f;
        moe_block_forward(&backend_cpu, y2, &a, x, &wt, &sp, &cx, N);
        moe_block_backward(&backend_cpu, NULL, &gr0, R, &a, x, &wt, &sp, &cx, &s, 1.0f);
        ck_assert(max_abs(gWr0, E * C) > 1e-3f);

        /* same inputs, same thread count: bit-identical output */
        moe_block_forward(&backend_cpu, y2, &a, x, &wt, &sp, &cx, N);
        ck_assert(memcmp(y, y2, sizeof y) == 0);
        moe_scratch_free(&backend_cpu, &s);
        moe_acts_free(&backend_cpu, &a);
    }
}
END_TEST

/* ---- the leak ------------------------------------------------------------------------------ */

static Config leak_config(int routing) {
    Config c;
    config_defaults(&c);
    c.d_model = 8;
    c.n_layer = 2;
    c.n_head = 2;
    c.seq_len = 8;
    c.d_ff = 12;
    c.num_experts = 4;
    c.top_k = 1;
    c.d_expert = 6;
    c.first_dense = 0;
    c.init_std = 0.3f;
    c.seed = 5;
    c.routing = routing;
    c.balance = MOE_BALANCE_NONE;
    return c;
}

/* How many of 16 replacements of the last token change the logits (N, V) of an earlier position
 * beyond rounding (the tolerance rule of testutil.h); fails if the last position's own logits
 * never change (the probe would be void). */
static int earlier_changes(int routing) {
    enum { T = 8 };
    Config c = leak_config(routing);
    char err[256];
    ck_assert_msg(config_validate(&c, err, sizeof err) == 0, "%s", err);
    Model m;
    model_init(&m, &c, 1, T);
    int in[T];
    for (int t = 0; t < T; t++) in[t] = (37 * t + 11) % MOE_VOCAB;
    const size_t NV = (size_t)T * MOE_VOCAB, earlier = (size_t)(T - 1) * MOE_VOCAB;
    float *base = malloc(NV * sizeof(float));
    model_forward(&m, in, NULL, 1, T, NULL);
    memcpy(base, m.state.logits, NV * sizeof(float));
    int changed = 0, last_changed = 0;
    for (int r = 1; r <= 16; r++) {
        in[T - 1] = (in[T - 1] + 13 * r) % MOE_VOCAB;
        model_forward(&m, in, NULL, 1, T, NULL);
        /* beyond rounding: an expert's product sums each row the same way whatever the other
         * rows of its slice, but sgemm may pick another kernel for a slice of another height,
         * so a row's last bits can move with its neighbours; a leak moves far more */
        double ex;
        changed += tol_worst(m.state.logits, base, earlier, TOL_F32_ATOL, TOL_F32_RTOL, &ex) >= 0;
        last_changed +=
            memcmp(m.state.logits + earlier, base + earlier, MOE_VOCAB * sizeof(float)) != 0;
    }
    ck_assert_msg(last_changed > 0, "changing the last token never changed its own logits");
    free(base);
    model_free(&m);
    return changed;
}

START_TEST(test_leak_expert_choice_sees_the_future) {
    int token = earlier_changes(MOE_ROUTING_TOKEN_CHOICE);
    ck_assert_msg(token == 0, "token choice: the last token changed earlier logits %d times",
                  token);
    int expert = earlier_changes(MOE_ROUTING_EXPERT_CHOICE);
    ck_assert_msg(expert > 0, "expert choice: earlier logits never depended on the last token");
}
END_TEST

static Suite *expert_choice_suite(void) {
    Suite *s = suite_create("expert_choice");
    TCase *tc = tcase_create("routing");
    tcase_add_test(tc, test_capacity);
    tcase_add_test(tc, test_hand_case);
    tcase_add_test(tc, test_block_gradcheck);
    tcase_add_test(tc, test_leak_expert_choice_sees_the_future);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(expert_choice_suite)
