/*
 * grader.c: the automatic grader of lab 02 (capacity and drop policies). One Check TCase per
 * task:
 *
 *   task1_capacity  lab_capacity       hand-computed capacities, factor < 1, min_capacity
 *                                      winning, the clamp to tokens, dropless, decimal factors
 *                                      whose float product lands just above an integer
 *   task2_position  lab_keep_position  the README's example, an idle expert, a token with
 *                                      every assignment dropped, stale outputs on entry, the
 *                                      engine's dropless plan and capacity plan, random routings
 *   task3_score     lab_keep_score     the README's example (where ranking by the renormalised
 *                                      weight would keep another token), ties, token order of
 *                                      the slots, a fully dropped token, the engine's capacity
 *                                      plan, random routings with ties
 *   task4_combine   lab_combine        hand-computed sums, a fully dropped token, = not +=,
 *                                      the engine's combine when dropless, random routings
 *
 * The expected keep decisions come from the plain reference functions below (written for
 * clarity, not speed, and independent of the solution), and, for both policies, from the
 * engine's capacity plan (capacity_plan_build, src/moe/capacity.c), which ranks by the same
 * router score; the random routings themselves come from the engine's top-k (src/moe/router.c).
 * Every task takes its inputs from the grader or the engine, never from the student's other
 * tasks, so one unfinished task fails only itself.
 *
 * Run through labs/Makefile: make -C labs grade LAB=02-capacity [TASK=task2_position].
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "capacity_lab.h"

/* Weak: a function missing from the student's file is NULL, and fails its task alone (lab_main)
 * instead of the link. */
#pragma weak lab_capacity
#pragma weak lab_keep_position
#pragma weak lab_keep_score
#pragma weak lab_combine
#include "lab.h"
#include "lab_fixture.h"
#include "moe/moe_ops.h"

/* ---- reference logic --------------------------------------------------------------------- */

/* ceil(permille / 1000 * tokens * top_k / E) in integers, then min_capacity and the clamp */
static int ref_capacity(int tokens, int top_k, int E, int permille, int min_capacity) {
    if (permille <= 0) return tokens;
    long long num = (long long)permille * tokens * top_k, den = 1000LL * E;
    long long cap = num / den + (num % den != 0);
    if (cap < min_capacity) cap = min_capacity;
    if (cap > tokens) cap = tokens;
    return (int)cap;
}

/* key (N * K): the router score of each assignment, key[n * K + k] = scores[n, idx[n, k]] */
static void assignment_scores(float *key, const float *scores, const int *idx, int N, int K,
                              int E) {
    for (int a = 0; a < N * K; a++) key[a] = scores[(a / K) * E + idx[a]];
}

/* Does assignment b of the same expert come before a in the policy's order? Position: a lower
 * index. Score: a higher score (key, one per assignment), or an equal one and a lower index. */
static int beats(const float *key, int b, int a) {
    if (!key) return b < a;
    return key[b] > key[a] || (key[b] == key[a] && b < a);
}

/* slot (N * K), counts (E) of either policy (key NULL: position), by counting: assignment a is
 * kept when fewer than `capacity` assignments of its expert beat it; its slot is the number of
 * kept assignments of its expert with a lower index. */
static void ref_keep(int *slot, int *counts, const int *idx, const float *key, int N, int K,
                     int E, int capacity) {
    int NK = N * K;
    for (int a = 0; a < NK; a++) {
        int ahead = 0;
        for (int b = 0; b < NK; b++) ahead += b != a && idx[b] == idx[a] && beats(key, b, a);
        slot[a] = ahead < capacity ? 0 : -1;
    }
    for (int e = 0; e < E; e++) counts[e] = 0;
    for (int a = 0; a < NK; a++)
        if (slot[a] >= 0) slot[a] = counts[idx[a]]++;
}

/* y (N, C) = sum over kept assignments of w * ye row, in double */
static void ref_combine(float *y, const float *ye, const int *slot, const int *idx,
                        const float *w, int N, int K, int capacity, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) {
                int a = n * K + k;
                if (slot[a] >= 0) s += (double)w[a] * ye[((size_t)idx[a] * capacity + slot[a]) * C + c];
            }
            y[n * C + c] = (float)s;
        }
}

/* ---- helpers ----------------------------------------------------------------------------- */

/* The checks are macros around functions that write the failure message: Check reports the
 * line of the failing assertion, and a student should land on the test, not the helper. */
#define MSG_LEN 640

/* slot and counts must equal want_slot and want_counts exactly; key (N * K): the assignments'
 * router scores, named in the message (NULL for keep by position) */
static int keep_differs(char *msg, const int *slot, const int *counts, const int *want_slot,
                        const int *want_counts, const int *idx, const float *key, int N, int K,
                        int E, int capacity, const char *what) {
    for (int a = 0; a < N * K; a++)
        if (slot[a] != want_slot[a]) {
            char wt[48] = "";
            if (key) snprintf(wt, sizeof wt, ", score %.4g", (double)key[a]);
            snprintf(msg, MSG_LEN,
                     "%s: token %d, choice k = %d (expert %d%s): got slot %d, want %d%s "
                     "(capacity %d, N = %d, K = %d, E = %d)",
                     what, a / K, a % K, idx[a], wt, slot[a], want_slot[a],
                     want_slot[a] < 0 ? " (dropped)" : "", capacity, N, K, E);
            return 1;
        }
    for (int e = 0; e < E; e++)
        if (counts[e] != want_counts[e]) {
            snprintf(msg, MSG_LEN, "%s: counts[%d]: got %d, want %d kept assignments (capacity %d)",
                     what, e, counts[e], want_counts[e], capacity);
            return 1;
        }
    return 0;
}
#define EXPECT_KEEP(slot, counts, want_slot, want_counts, idx, key, N, K, E, capacity, what)       \
    do {                                                                                           \
        char m_[MSG_LEN];                                                                          \
        if (keep_differs(m_, (slot), (counts), (want_slot), (want_counts), (idx), (key), (N), (K), \
                         (E), (capacity), (what)))                                                 \
            ck_abort_msg("%s", m_);                                                                \
    } while (0)

/* lab_capacity(...) must return want */
#define EXPECT_CAPACITY(tokens, top_k, E, factor, min_cap, want, why)                              \
    do {                                                                                           \
        int got_ = -2;                                                                             \
        LAB_CALL(got_ = lab_capacity((tokens), (top_k), (E), (factor), (min_cap)));                \
        ck_assert_msg(got_ == (want),                                                              \
                      "lab_capacity(tokens %d, top_k %d, experts %d, factor %g, min_capacity "   \
                      "%d): got %d, want %d (%s)",                                                 \
                      (tokens), (top_k), (E), (double)(factor), (min_cap), got_, (want), (why));   \
    } while (0)

/* top-k routing of random scores from the engine: scores (N, E) softmax, idx, w (N, K) with
 * renormalised weights */
static void random_routing(float *scores, int *idx, float *w, int N, int E, int K,
                           unsigned long long seed) {
    lab_softmax_scores(scores, N, E, 2.0f, seed);
    router_topk_forward(idx, w, scores, N, E, K, 1);
}

/* slot (N * K), counts (E) from the engine's capacity plan (batch scope, no padding) for the
 * policy (MOE_DROP_POSITION or MOE_DROP_SCORE): a kept assignment's slot counted from its
 * expert's offset, -1 when dropped */
static void engine_keep(int *slot, int *counts, const int *idx, const float *scores, int N, int K,
                        int E, int permille, int policy) {
    MoeSpec spec = {.num_experts = E, .top_k = K, .norm_topk = 1};
    moe_spec_defaults(&spec);
    spec.capacity_factor = permille / 1000.0f, spec.min_capacity = 1, spec.drop_policy = policy;
    MoeCtx ctx; /* one call on the N tokens, at the spec's factor */
    moe_ctx_train(&ctx, &spec, N, NULL);
    DispatchPlan plan;
    dispatch_plan_alloc(&plan, N, E, K);
    capacity_plan_build(&plan, idx, scores, NULL, N, &spec, &ctx);
    for (int a = 0; a < N * K; a++)
        slot[a] = plan.slot[a] < 0 ? -1 : plan.slot[a] - plan.offsets[idx[a]];
    for (int e = 0; e < E; e++) counts[e] = plan.counts[e];
    dispatch_plan_free(&plan);
}

/* The README's example: 6 tokens, top-2, 3 experts, capacity 3. ex_scores are the router's
 * softmax scores (N, E), each row summing to 1; ex_idx is their top-2. */
enum { EX_N = 6, EX_K = 2, EX_E = 3, EX_CAP = 3 };
static const int ex_idx[EX_N * EX_K] = {0, 1, 0, 2, 1, 0, 0, 1, 1, 0, 0, 2};
static const float ex_scores[EX_N * EX_E] = {0.5f, 0.45f, 0.05f, /* token 0 */
                                             0.6f, 0.1f,  0.3f,  /* token 1 */
                                             0.35f, 0.4f, 0.25f, /* token 2 */
                                             0.7f, 0.2f,  0.1f,  /* token 3 */
                                             0.3f, 0.6f,  0.1f,  /* token 4 */
                                             0.5f, 0.15f, 0.35f}; /* token 5 */

/* ---- task 1: capacity -------------------------------------------------------------------- */

START_TEST(capacity_hand_computed) {
    EXPECT_CAPACITY(8, 2, 4, 1.25f, 1, 5, "1.25 * 8 * 2 / 4 = 5 exactly: no rounding up");
    EXPECT_CAPACITY(16, 2, 8, 1.0f, 1, 4, "1.0 * 16 * 2 / 8 = 4");
    EXPECT_CAPACITY(7, 2, 4, 1.0f, 1, 4, "7 * 2 / 4 = 3.5, rounded up");
    EXPECT_CAPACITY(10, 2, 4, 1.1f, 1, 6, "1.1 * 10 * 2 / 4 = 5.5, rounded up");
    EXPECT_CAPACITY(6, 2, 3, 0.75f, 1, 3, "the README's example: 0.75 * 6 * 2 / 3 = 3");
}
END_TEST

START_TEST(capacity_factor_below_one) {
    EXPECT_CAPACITY(16, 2, 8, 0.5f, 1, 2, "0.5 * 16 * 2 / 8 = 2");
    EXPECT_CAPACITY(12, 1, 4, 0.25f, 0, 1, "0.25 * 12 / 4 = 0.75, rounded up");
    EXPECT_CAPACITY(20, 1, 8, 0.1f, 0, 1, "0.1 * 20 / 8 = 0.25, rounded up");
}
END_TEST

START_TEST(capacity_min_capacity_wins) {
    EXPECT_CAPACITY(8, 1, 8, 0.5f, 4, 4, "ceil(0.5 * 8 / 8) = 1 is below min_capacity 4");
    EXPECT_CAPACITY(64, 2, 64, 1.0f, 4, 4, "ceil(64 * 2 / 64) = 2 is below min_capacity 4");
    EXPECT_CAPACITY(64, 2, 8, 1.0f, 4, 16, "16 is above min_capacity 4: the formula wins");
}
END_TEST

START_TEST(capacity_clamped_to_tokens) {
    EXPECT_CAPACITY(4, 2, 2, 4.0f, 1, 4,
                    "4.0 * 4 * 2 / 2 = 16, but an expert holds each of the 4 tokens at most once");
    EXPECT_CAPACITY(6, 1, 4, 1.0f, 10, 6, "min_capacity 10 is more than the 6 tokens");
}
END_TEST

START_TEST(capacity_dropless) {
    EXPECT_CAPACITY(37, 2, 8, 0.0f, 4, 37, "capacity_factor 0 means dropless: capacity = tokens");
    EXPECT_CAPACITY(5, 1, 2, 0.0f, 1, 5, "capacity_factor 0 means dropless: capacity = tokens");
}
END_TEST

START_TEST(capacity_decimal_factors) {
    /* float holds none of these factors exactly (1.1f = 1.10000002, 0.3f = 0.30000001), and
     * each product is a whole number: the ceil of the float product in double is one too many */
    EXPECT_CAPACITY(10, 1, 1, 1.1f, 1, 10,
                    "1.1 * 10 / 1 = 11, clamped to the 10 tokens");
    EXPECT_CAPACITY(20, 1, 2, 1.1f, 1, 11,
                    "1.1 * 20 / 2 = 11 exactly, but (double)1.1f * 20 / 2 = 11.0000002");
    EXPECT_CAPACITY(10, 1, 4, 1.2f, 1, 3,
                    "1.2 * 10 / 4 = 3 exactly, but (double)1.2f * 10 / 4 = 3.0000001");
    EXPECT_CAPACITY(10, 1, 3, 0.3f, 0, 1,
                    "0.3 * 10 / 3 = 1 exactly, but (double)0.3f * 10 / 3 = 1.00000004");
    EXPECT_CAPACITY(90, 4, 9, 1.2f, 0, 48,
                    "1.2 * 90 * 4 / 9 = 48 exactly, but in float 1.2f * 90 * 4 / 9 = 48.000004");
    EXPECT_CAPACITY(20, 1, 4, 2.2f, 1, 11,
                    "2.2 * 20 / 4 = 11 exactly, but (double)2.2f * 20 / 4 = 11.0000002");
}
END_TEST

START_TEST(capacity_random) {
    /* random settings against the exact decimal, computed in integers */
    static const int permille[] = {100, 250, 300, 500, 700, 750, 1000, 1100,
                                   1200, 1250, 1400, 1500, 1750, 2000};
    unsigned long long s = 0x9E3779B97F4A7C15ull;
    for (int t = 0; t < 2000; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(s >> 33);
        int tokens = 1 + (int)(r % 100), top_k = 1 + (int)(r / 100 % 4);
        int E = top_k + (int)(r / 400 % 13), p = permille[r / 5200 % 14];
        int min_cap = (int)(r / 72800 % 3);
        int want = ref_capacity(tokens, top_k, E, p, min_cap);
        char why[96];
        snprintf(why, sizeof why, "%d/1000 * %d * %d / %d = %.6f", p, tokens, top_k, E,
                 p / 1000.0 * tokens * top_k / E);
        EXPECT_CAPACITY(tokens, top_k, E, p / 1000.0f, min_cap, want, why);
    }
}
END_TEST

/* ---- task 2: keep by position ------------------------------------------------------------ */

START_TEST(position_readme_example) {
    /* expert 0 gets tokens 0 1 2 3 4 5 and keeps 0 1 2; expert 1 gets 0 2 3 4 and keeps
     * 0 2 3; expert 2 gets 1 5 and keeps both. Token 4 loses both its assignments. */
    static const int want_slot[EX_N * EX_K] = {0, 0, 1, 0, 1, 2, -1, 2, -1, -1, -1, 1};
    static const int want_counts[EX_E] = {3, 3, 2};
    int slot[EX_N * EX_K], counts[EX_E];
    LAB_CALL(lab_keep_position(slot, counts, ex_idx, EX_N, EX_K, EX_E, EX_CAP));
    EXPECT_KEEP(slot, counts, want_slot, want_counts, ex_idx, NULL, EX_N, EX_K, EX_E, EX_CAP,
                "the README's example, keep by position");
}
END_TEST

START_TEST(position_idle_expert_and_dropped_token) {
    /* E = 4, K = 2, capacity 1; expert 3 receives nothing; token 2 finds both its experts
     * (0 and 1) already full and loses everything */
    enum { N = 4, K = 2, E = 4, CAP = 1 };
    static const int idx[N * K] = {0, 1, 2, 0, 1, 0, 2, 1};
    static const int want_slot[N * K] = {0, 0, 0, -1, -1, -1, -1, -1};
    static const int want_counts[E] = {1, 1, 1, 0};
    int slot[N * K], counts[E];
    LAB_CALL(lab_keep_position(slot, counts, idx, N, K, E, CAP));
    EXPECT_KEEP(slot, counts, want_slot, want_counts, idx, NULL, N, K, E, CAP,
                "capacity 1, expert 3 idle (count 0), token 2 dropped entirely");
}
END_TEST

START_TEST(position_ignores_old_contents) {
    /* slot and counts hold garbage on entry, and capacity 0 keeps nothing */
    enum { N = 3, K = 2, E = 3 };
    static const int idx[N * K] = {0, 1, 1, 2, 2, 0};
    static const int want_slot[N * K] = {0, 0, 1, 0, 1, 1};
    static const int want_counts[E] = {2, 2, 2};
    static const int none_slot[N * K] = {-1, -1, -1, -1, -1, -1}, none_counts[E] = {0, 0, 0};
    int slot[N * K], counts[E];
    for (int a = 0; a < N * K; a++) slot[a] = 7;
    for (int e = 0; e < E; e++) counts[e] = 99;
    LAB_CALL(lab_keep_position(slot, counts, idx, N, K, E, 2));
    EXPECT_KEEP(slot, counts, want_slot, want_counts, idx, NULL, N, K, E, 2,
                "slot and counts held old values on entry (write every element)");
    LAB_CALL(lab_keep_position(slot, counts, idx, N, K, E, 0));
    EXPECT_KEEP(slot, counts, none_slot, none_counts, idx, NULL, N, K, E, 0,
                "capacity 0 drops every assignment");
}
END_TEST

START_TEST(position_dropless_matches_engine) {
    /* capacity = N drops nothing: the slot is then the position inside the expert's slice of
     * the engine's dropless plan, slot - offsets[expert] */
    enum { N = 40, K = 2, E = 8 };
    int idx[N * K], slot[N * K], counts[E], want_slot[N * K];
    float scores[N * E], w[N * K];
    random_routing(scores, idx, w, N, E, K, 501);
    DispatchPlan plan;
    dispatch_plan_alloc(&plan, N, E, K);
    dispatch_plan_build(&plan, idx, N);
    for (int a = 0; a < N * K; a++) want_slot[a] = plan.slot[a] - plan.offsets[idx[a]];
    LAB_CALL(lab_keep_position(slot, counts, idx, N, K, E, N));
    EXPECT_KEEP(slot, counts, want_slot, plan.counts, idx, NULL, N, K, E, N,
                "capacity = tokens (dropless) against the engine's dispatch plan");
    dispatch_plan_free(&plan);
}
END_TEST

START_TEST(position_matches_engine) {
    /* with drops: the engine's capacity plan under moe.drop_policy=position */
    enum { N = 48, K = 2, E = 6, PERMILLE = 750 };
    const int cap = ref_capacity(N, K, E, PERMILLE, 1);
    int idx[N * K], slot[N * K], counts[E], want_slot[N * K], want_counts[E];
    float scores[N * E], w[N * K];
    random_routing(scores, idx, w, N, E, K, 505);
    engine_keep(want_slot, want_counts, idx, scores, N, K, E, PERMILLE, MOE_DROP_POSITION);
    LAB_CALL(lab_keep_position(slot, counts, idx, N, K, E, cap));
    EXPECT_KEEP(slot, counts, want_slot, want_counts, idx, NULL, N, K, E, cap,
                "capacity factor 0.75 against the engine's capacity plan (drop policy position)");
}
END_TEST

START_TEST(position_random) {
    static const struct {
        int N, E, K, permille;
    } cases[] = {{64, 8, 2, 1250}, {64, 8, 2, 500}, {50, 6, 3, 1000}, {33, 4, 1, 750}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int N = cases[c].N, E = cases[c].E, K = cases[c].K;
        const int cap = ref_capacity(N, K, E, cases[c].permille, 1);
        int idx[64 * 3], slot[64 * 3], counts[8], want_slot[64 * 3], want_counts[8];
        float scores[64 * 8], w[64 * 3];
        char what[128];
        random_routing(scores, idx, w, N, E, K, 510 + c);
        ref_keep(want_slot, want_counts, idx, NULL, N, K, E, cap);
        LAB_CALL(lab_keep_position(slot, counts, idx, N, K, E, cap));
        snprintf(what, sizeof what, "random top-%d routing, capacity factor %g", K,
                 cases[c].permille / 1000.0);
        EXPECT_KEEP(slot, counts, want_slot, want_counts, idx, NULL, N, K, E, cap, what);
    }
}
END_TEST

/* ---- task 3: keep by score --------------------------------------------------------------- */

START_TEST(score_readme_example) {
    /* expert 0 ranks tokens 3 (0.7), 1 (0.6), 0 (0.5), 5 (0.5, loses the tie to token 0),
     * 2 (0.35), 4 (0.3) and keeps 0 1 3; expert 1 ranks 4 (0.6), 0 (0.45), 2 (0.4), 3 (0.2)
     * and keeps 0 2 4; expert 2 keeps 1 and 5. Slots count the kept ones in token order.
     * Ranking expert 0 by the renormalised weight instead would keep token 5 (0.5 / 0.85 =
     * 0.59) over token 0 (0.5 / 0.95 = 0.53). */
    static const int want_slot[EX_N * EX_K] = {0, 0, 1, 0, 1, -1, 2, -1, 2, -1, -1, 1};
    static const int want_counts[EX_E] = {3, 3, 2};
    int slot[EX_N * EX_K], counts[EX_E];
    float key[EX_N * EX_K];
    assignment_scores(key, ex_scores, ex_idx, EX_N, EX_K, EX_E);
    LAB_CALL(lab_keep_score(slot, counts, ex_idx, ex_scores, EX_N, EX_K, EX_E, EX_CAP));
    EXPECT_KEEP(slot, counts, want_slot, want_counts, ex_idx, key, EX_N, EX_K, EX_E, EX_CAP,
                "the README's example, keep by score");
}
END_TEST

START_TEST(score_slots_in_token_order) {
    /* K = 1, every token on expert 0, capacity 2: the scores rise with the token, so tokens 2
     * and 3 are kept; token 2 comes first in token order and gets slot 0, although token 3
     * ranks first. Expert 1 receives nothing. */
    enum { N = 4, K = 1, E = 2, CAP = 2 };
    static const int idx[N] = {0, 0, 0, 0};
    static const float scores[N * E] = {0.55f, 0.45f, 0.6f, 0.4f, 0.7f, 0.3f, 0.8f, 0.2f};
    static const int want_slot[N] = {-1, -1, 0, 1}, want_counts[E] = {2, 0};
    int slot[N], counts[E];
    float key[N * K];
    assignment_scores(key, scores, idx, N, K, E);
    LAB_CALL(lab_keep_score(slot, counts, idx, scores, N, K, E, CAP));
    EXPECT_KEEP(slot, counts, want_slot, want_counts, idx, key, N, K, E, CAP,
                "the highest scores are kept, but slots number them in token order");
}
END_TEST

START_TEST(score_ties_to_lower_token) {
    /* every token scores its two experts 0.45 each: four equal scores at experts 0 and 1,
     * capacity 2: tokens 0 and 1 win; expert 2 is idle */
    enum { N = 4, K = 2, E = 3, CAP = 2 };
    static const int idx[N * K] = {0, 1, 0, 1, 1, 0, 0, 1};
    static const float scores[N * E] = {0.45f, 0.45f, 0.1f, 0.45f, 0.45f, 0.1f,
                                        0.45f, 0.45f, 0.1f, 0.45f, 0.45f, 0.1f};
    static const int want_slot[N * K] = {0, 0, 1, 1, -1, -1, -1, -1};
    static const int want_counts[E] = {2, 2, 0};
    int slot[N * K], counts[E];
    float key[N * K];
    assignment_scores(key, scores, idx, N, K, E);
    for (int a = 0; a < N * K; a++) slot[a] = 7;
    for (int e = 0; e < E; e++) counts[e] = 99;
    LAB_CALL(lab_keep_score(slot, counts, idx, scores, N, K, E, CAP));
    EXPECT_KEEP(slot, counts, want_slot, want_counts, idx, key, N, K, E, CAP,
                "equal scores: the lower token wins (expert 2 idle, tokens 2 and 3 dropped)");
}
END_TEST

START_TEST(score_token_fully_dropped) {
    /* capacity 1: token 1 scores lower than token 0 at both of its experts and loses both;
     * token 2 keeps expert 2 and loses expert 0 to token 0 */
    enum { N = 3, K = 2, E = 3, CAP = 1 };
    static const int idx[N * K] = {0, 1, 0, 1, 2, 0};
    static const float scores[N * E] = {0.5f, 0.35f, 0.15f, 0.45f, 0.3f, 0.25f,
                                        0.3f, 0.1f,  0.6f};
    static const int want_slot[N * K] = {0, 0, -1, -1, 0, -1};
    static const int want_counts[E] = {1, 1, 1};
    int slot[N * K], counts[E];
    float key[N * K];
    assignment_scores(key, scores, idx, N, K, E);
    LAB_CALL(lab_keep_score(slot, counts, idx, scores, N, K, E, CAP));
    EXPECT_KEEP(slot, counts, want_slot, want_counts, idx, key, N, K, E, CAP,
                "capacity 1: token 1 loses at both its experts");
}
END_TEST

START_TEST(score_matches_engine) {
    /* the engine's capacity plan under moe.drop_policy=score, which ranks by the same router
     * scores (src/moe/capacity.c) */
    enum { N = 48, K = 2, E = 6, PERMILLE = 750 };
    const int cap = ref_capacity(N, K, E, PERMILLE, 1);
    int idx[N * K], slot[N * K], counts[E], want_slot[N * K], want_counts[E];
    float scores[N * E], w[N * K], key[N * K];
    random_routing(scores, idx, w, N, E, K, 515);
    assignment_scores(key, scores, idx, N, K, E);
    engine_keep(want_slot, want_counts, idx, scores, N, K, E, PERMILLE, MOE_DROP_SCORE);
    LAB_CALL(lab_keep_score(slot, counts, idx, scores, N, K, E, cap));
    EXPECT_KEEP(slot, counts, want_slot, want_counts, idx, key, N, K, E, cap,
                "capacity factor 0.75 against the engine's capacity plan (drop policy score)");
}
END_TEST

START_TEST(score_random) {
    /* scores from the engine, and the same routing with its scores rounded to eighths (many
     * ties), against the grader's reference */
    static const struct {
        int N, E, K, permille;
    } cases[] = {{64, 8, 2, 1000}, {64, 8, 2, 500}, {50, 6, 3, 1250}, {33, 4, 1, 750}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int tied = 0; tied < 2; tied++) {
            const int N = cases[c].N, E = cases[c].E, K = cases[c].K;
            const int cap = ref_capacity(N, K, E, cases[c].permille, 1);
            int idx[64 * 3], slot[64 * 3], counts[8], want_slot[64 * 3], want_counts[8];
            float scores[64 * 8], w[64 * 3], key[64 * 3];
            char what[128];
            random_routing(scores, idx, w, N, E, K, 520 + c);
            if (tied)
                for (int i = 0; i < N * E; i++) scores[i] = roundf(scores[i] * 8.0f) / 8.0f;
            assignment_scores(key, scores, idx, N, K, E);
            ref_keep(want_slot, want_counts, idx, key, N, K, E, cap);
            LAB_CALL(lab_keep_score(slot, counts, idx, scores, N, K, E, cap));
            snprintf(what, sizeof what, "random top-%d routing, capacity factor %g%s", K,
                     cases[c].permille / 1000.0, tied ? ", scores rounded to eighths (ties)" : "");
            EXPECT_KEEP(slot, counts, want_slot, want_counts, idx, key, N, K, E, cap, what);
        }
}
END_TEST

/* ---- task 4: combine --------------------------------------------------------------------- */

START_TEST(combine_hand_computed) {
    /* N = 3, K = 2, E = 2, capacity 2, C = 2. ye rows: expert 0 (1, 2) (3, 4), expert 1
     * (10, 20) and an unused row of NaN; a row of NaN also sits before the buffer, where a
     * slot of -1 of expert 0 would read. Token 0 keeps both; token 1 keeps expert 0 only;
     * token 2 loses both and gets 0. */
    enum { N = 3, K = 2, E = 2, CAP = 2, C = 2 };
    static const int idx[N * K] = {0, 1, 1, 0, 0, 1};
    static const int slot[N * K] = {0, 0, -1, 1, -1, -1};
    static const float w[N * K] = {0.75f, 0.25f, 0.6f, 0.4f, 0.5f, 0.5f};
    const float buf[(1 + E * CAP) * C] = {NAN, NAN, 1, 2, 3, 4, 10, 20, NAN, NAN};
    const float *ye = buf + C;
    /* token 0: 0.75 (1, 2) + 0.25 (10, 20) = (3.25, 6.5); token 1: 0.4 (3, 4) = (1.2, 1.6) */
    static const float want[N * C] = {3.25f, 6.5f, 1.2f, 1.6f, 0.0f, 0.0f};
    float y[N * C];
    for (int i = 0; i < N * C; i++) y[i] = 1000.0f;
    LAB_CALL(lab_combine(y, ye, slot, idx, w, N, K, E, CAP, C));
    EXPECT_TOKEN_TABLE(y, want, N, C, "channel",
                       "hand-computed combine (token 1 lost one assignment, token 2 both: y = 0)");
}
END_TEST

START_TEST(combine_writes_not_accumulates) {
    enum { N = 2, K = 1, E = 1, CAP = 1, C = 3 };
    static const int idx[N] = {0, 0}, slot[N] = {0, -1};
    static const float w[N] = {2.0f, 1.0f};
    const float buf[(1 + CAP) * C] = {NAN, NAN, NAN, 1, -1, 0.5f}; /* NaN: the row of slot -1 */
    const float *ye = buf + C;
    static const float want[N * C] = {2.0f, -2.0f, 1.0f, 0.0f, 0.0f, 0.0f};
    float y[N * C];
    for (int i = 0; i < N * C; i++) y[i] = 5.0f;
    LAB_CALL(lab_combine(y, ye, slot, idx, w, N, K, E, CAP, C));
    LAB_CALL(lab_combine(y, ye, slot, idx, w, N, K, E, CAP, C));
    EXPECT_TOKEN_TABLE(y, want, N, C, "channel",
                       "two calls into a y that held 5: write (=) every element, do not add (+=)");
}
END_TEST

START_TEST(combine_dropless_matches_engine) {
    /* capacity = N: every assignment kept. The engine's packed buffer (S, C) holds expert e's
     * rows from offsets[e]; the padded one from e * N. */
    enum { N = 24, K = 2, E = 4, C = 5 };
    int idx[N * K], slot[N * K], counts[E];
    float scores[N * E], w[N * K], packed[N * K * C], padded[E * N * C], y[N * C], want[N * C];
    random_routing(scores, idx, w, N, E, K, 601);
    fill_uniform(packed, N * K * C, 1.0f, 602);
    for (int i = 0; i < E * N * C; i++) padded[i] = NAN;
    DispatchPlan plan;
    dispatch_plan_alloc(&plan, N, E, K);
    dispatch_plan_build(&plan, idx, N);
    combine_forward(want, packed, w, &plan, C);
    ref_keep(slot, counts, idx, NULL, N, K, E, N);
    for (int e = 0; e < E; e++)
        memcpy(padded + (size_t)e * N * C, packed + (size_t)plan.offsets[e] * C,
               (size_t)plan.counts[e] * C * sizeof(float));
    LAB_CALL(lab_combine(y, padded, slot, idx, w, N, K, E, N, C));
    EXPECT_TOKEN_TABLE(y, want, N, C, "channel",
                       "dropless combine (capacity = tokens) against the engine");
    dispatch_plan_free(&plan);
}
END_TEST

START_TEST(combine_random) {
    /* both policies, with drops. The row before the buffer and every unused row are NaN, so
     * reading a dropped assignment (slot -1) or a row past counts shows up. */
    enum { N = 48, K = 2, E = 6, C = 7 };
    int idx[N * K], slot[N * K], counts[E];
    float scores[N * E], w[N * K], key[N * K], y[N * C], want[N * C];
    random_routing(scores, idx, w, N, E, K, 610);
    assignment_scores(key, scores, idx, N, K, E);
    for (int policy = 0; policy < 2; policy++) {
        const int cap = ref_capacity(N, K, E, policy ? 750 : 1000, 1);
        float buf[(1 + E * N) * C];
        float *ye = buf + C;
        char what[128];
        for (int i = 0; i < (1 + E * N) * C; i++) buf[i] = NAN;
        ref_keep(slot, counts, idx, policy ? key : NULL, N, K, E, cap);
        for (int e = 0; e < E; e++)
            fill_uniform(ye + (size_t)e * cap * C, (size_t)counts[e] * C, 1.0f, 620 + e);
        ref_combine(want, ye, slot, idx, w, N, K, cap, C);
        LAB_CALL(lab_combine(y, ye, slot, idx, w, N, K, E, cap, C));
        snprintf(what, sizeof what, "random routing, keep by %s, capacity %d (N = %d, E = %d)",
                 policy ? "score" : "position", cap, N, E);
        EXPECT_TOKEN_TABLE(y, want, N, C, "channel", what);
    }
}
END_TEST

/* ---- suite ------------------------------------------------------------------------------- */

static Suite *capacity_lab_suite(void) {
    Suite *s = suite_create("lab 02: capacity");
    TCase *t1 = tcase_create("task1_capacity");
    tcase_add_test(t1, capacity_hand_computed);
    tcase_add_test(t1, capacity_factor_below_one);
    tcase_add_test(t1, capacity_min_capacity_wins);
    tcase_add_test(t1, capacity_clamped_to_tokens);
    tcase_add_test(t1, capacity_dropless);
    tcase_add_test(t1, capacity_decimal_factors);
    tcase_add_test(t1, capacity_random);
    suite_add_tcase(s, t1);
    TCase *t2 = tcase_create("task2_position");
    tcase_add_test(t2, position_readme_example);
    tcase_add_test(t2, position_idle_expert_and_dropped_token);
    tcase_add_test(t2, position_ignores_old_contents);
    tcase_add_test(t2, position_dropless_matches_engine);
    tcase_add_test(t2, position_matches_engine);
    tcase_add_test(t2, position_random);
    suite_add_tcase(s, t2);
    TCase *t3 = tcase_create("task3_score");
    tcase_add_test(t3, score_readme_example);
    tcase_add_test(t3, score_slots_in_token_order);
    tcase_add_test(t3, score_ties_to_lower_token);
    tcase_add_test(t3, score_token_fully_dropped);
    tcase_add_test(t3, score_matches_engine);
    tcase_add_test(t3, score_random);
    suite_add_tcase(s, t3);
    TCase *t4 = tcase_create("task4_combine");
    tcase_add_test(t4, combine_hand_computed);
    tcase_add_test(t4, combine_writes_not_accumulates);
    tcase_add_test(t4, combine_dropless_matches_engine);
    tcase_add_test(t4, combine_random);
    suite_add_tcase(s, t4);
    return s;
}

int main(void) {
    static const LabTask tasks[] = {LAB_TASK("task1_capacity", lab_capacity, 2),
                                    LAB_TASK("task2_position", lab_keep_position, 3),
                                    LAB_TASK("task3_score", lab_keep_score, 3),
                                    LAB_TASK("task4_combine", lab_combine, 2)};
    return lab_main(capacity_lab_suite(), "lab 02: capacity", tasks, 4);
}
