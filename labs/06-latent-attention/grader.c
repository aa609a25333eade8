/*
 * grader.c: the automatic grader of lab 06 (multi-head latent attention). One Check TCase per
 * task:
 *
 *   task1_latent_kv        lab_latent_kv_forward  the latent norm's gain, Wkv_b = 0 (k is krope
 *                                                 in every head, v = 0), the engine's ops as
 *                                                 src/model/attn_block.c runs them
 *   task2_absorb_query     lab_absorb_query       a head's rows of Wkv_b by hand, the engine's
 *                                                 matmul, q_lat . latn = q_nope . k_nope
 *   task3_absorbed_scores  lab_absorbed_scores    hand-computed scores, the full q . k / sqrt(D)
 *                                                 of the engine's keys, the engine's absorbed
 *                                                 decoding (attention_decode over the cache)
 *   task4_cache_size       lab_cache_floats,      published models, the decoder's count
 *                          lab_cache_bytes        (src/infer/decode.c) from the engine's config,
 *                                                 caches past 2^31 and 2^32 bytes
 *
 * Every task is graded on its own: its inputs come from the grader and the engine (src/nn/ops.h,
 * src/config/config.h, linked from libmoe.a), never from the student's other tasks, so one
 * unfinished task fails only itself. Comparisons use the project's one tolerance rule
 * (tests/testutil.h): |got - want| <= atol + rtol * |want|.
 *
 * Run through labs/Makefile: make -C labs grade LAB=06-latent-attention [TASK=task1_latent_kv].
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "lab.h"
#include "lab_fixture.h"
#include "lab_guard.h"
#include "latent_lab.h"
#include "nn/ops.h"

/* Weak: a function missing from the student's file is NULL, and fails its task alone (lab_main)
 * instead of the link. */
#pragma weak lab_latent_kv_forward
#pragma weak lab_absorb_query
#pragma weak lab_absorbed_scores
#pragma weak lab_cache_floats
#pragma weak lab_cache_bytes

/* ---- helpers --------------------------------------------------------------------------------- */

/* The checks below are macros around functions that write the failure message: Check reports
 * the line of the failing assertion, and a student should land on the test, not the helper. */
#define MSG_LEN 640

/* The largest shapes the tests use: every buffer is a fixed array on the stack. */
enum { MAXN = 9, MAXC = 16, MAXH = 4, MAXKR = 12, MAXD = 12, MAXDV = 7, MAXKVB = 16 };
enum { MAXT = 9, MAXW = MAXKR + 4 };

/* A count, exactly. */
#define EXPECT_COUNT(got, want, what)                                                              \
    do {                                                                                           \
        long long g_ = (got), w_ = (want);                                                         \
        if (g_ != w_) ck_abort_msg("%s: got %lld, want %lld", (what), g_, w_);                     \
    } while (0)

/* "N = 3, C = 8, H = 2, kv_rank = 6, nope_dim = 4, rope_dim = 2, v_dim = 3" (without N when
 * N is 0: the tasks of one query) */
static const char *dims_text(char *buf, size_t len, const LabMlaDims *d, int N) {
    int at = N > 0 ? snprintf(buf, len, "N = %d, ", N) : 0;
    snprintf(buf + at, len - (size_t)at,
             "C = %d, H = %d, kv_rank = %d, nope_dim = %d, rope_dim = %d, v_dim = %d", d->C, d->H,
             d->kv_rank, d->nope_dim, d->rope_dim, d->v_dim);
    return buf;
}

/* The engine's keys and values, as src/model/attn_block.c (mla_keys_values) makes them:
 * latn (N, KR), kvb (N, H KVB), k (N, H D), v (N, H DV) */
static void engine_kv(float *latn, float *kvb, float *k, float *v, const float *x,
                      const float *krope, const float *Wkv_a, const float *g, const float *Wkv_b,
                      const LabMlaDims *d, int N) {
    const int KR = d->kv_rank, NOPE = d->nope_dim, R = d->rope_dim, DV = d->v_dim, H = d->H;
    const int D = NOPE + R, KVB = NOPE + DV;
    float lat[MAXN * MAXKR], rstd[MAXN];
    matmul_forward(lat, x, Wkv_a, N, d->C, KR);
    rmsnorm_forward(latn, rstd, lat, g, N, KR);
    matmul_forward(kvb, latn, Wkv_b, N, KR, H * KVB);
    copy_block(k, D, kvb, KVB, N * H, NOPE, 0);
    for (int h = 0; h < H; h++) copy_block(k + (size_t)h * D + NOPE, H * D, krope, R, N, R, 0);
    copy_block(v, DV, kvb + NOPE, KVB, N * H, DV, 0);
}

/* The engine's absorbed query of head h (src/model/attn_block.c, mla_absorb_queries): q_nope
 * times head h's key rows Wuk_h (NOPE, KR) of Wkv_b, as the backward of a product with it */
static void engine_absorb(float *q_lat, const float *q_nope, const float *Wkv_b, int h,
                          const LabMlaDims *d) {
    const int KVB = d->nope_dim + d->v_dim;
    matmul_backward(q_lat, NULL, q_nope, NULL, Wkv_b + (size_t)h * KVB * d->kv_rank, 1, d->kv_rank,
                    d->nope_dim);
}

/* the shapes of the random tests: H = 1, nope_dim != v_dim, odd ranks among them */
static const struct {
    int N;
    LabMlaDims d;
} shapes[] = {
    {1, {4, 1, 2, 2, 2, 2}},
    {3, {8, 2, 6, 4, 2, 3}},
    {5, {16, 4, 12, 8, 4, 6}},
    {9, {12, 3, 5, 3, 2, 7}},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* ---- task 1: the latent keys and values -------------------------------------------------------
 */

/* guarded outputs of task 1 */
typedef struct {
    float latn[MAXN * MAXKR + LAB_GUARD_N], k[MAXN * MAXH * MAXD + LAB_GUARD_N];
    float v[MAXN * MAXH * MAXDV + LAB_GUARD_N];
} KvOut;

static void kv_init(KvOut *o, const LabMlaDims *d, int N) {
    lab_fill_guarded(o->latn, (size_t)N * d->kv_rank, NAN);
    lab_fill_guarded(o->k, (size_t)N * d->H * (d->nope_dim + d->rope_dim), NAN);
    lab_fill_guarded(o->v, (size_t)N * d->H * d->v_dim, NAN);
}

START_TEST(latent_kv_norm_gain) {
    /* the latent's norm has a gain of its own (the engine's kv_a_norm): here 3 in every channel,
     * so every row of latn has an RMS of 3 (to 1e-5), not 1 */
    enum { N = 4 };
    const LabMlaDims d = {6, 2, 5, 3, 2, 4};
    const int D = 5, KVB = 7;
    float x[N * 6], krope[N * 2], Wkv_a[5 * 6], g[5], Wkv_b[2 * KVB * 5];
    float latn[N * 5], kvb[N * 2 * KVB], k[N * 2 * D], v[N * 2 * 4];
    KvOut o;
    fill_uniform(x, sizeof x / sizeof x[0], 2.0f, 600);
    fill_uniform(krope, sizeof krope / sizeof krope[0], 1.0f, 601);
    fill_uniform(Wkv_a, sizeof Wkv_a / sizeof Wkv_a[0], 0.5f, 602);
    fill_uniform(Wkv_b, sizeof Wkv_b / sizeof Wkv_b[0], 0.5f, 603);
    for (int r = 0; r < 5; r++) g[r] = 3.0f;
    engine_kv(latn, kvb, k, v, x, krope, Wkv_a, g, Wkv_b, &d, N);
    kv_init(&o, &d, N);
    LAB_CALL(lab_latent_kv_forward(o.latn, o.k, o.v, x, krope, Wkv_a, g, Wkv_b, &d, N));
    EXPECT_TABLE(o.latn, latn, N, 5, "latn",
                 "the latent's norm with a gain of 3 in every channel: latn = rmsnorm(lat) * g "
                 "(did you leave out the gain g?)");
    EXPECT_TABLE(o.k, k, N, 2 * D, "k", "keys from a latent normed with a gain of 3");
    EXPECT_TABLE(o.v, v, N, 2 * 4, "v", "values from a latent normed with a gain of 3");
}
END_TEST

START_TEST(latent_kv_zero_up_projection) {
    /* Wkv_b = 0: kvb = 0, so every head's key is [0 ... 0 | krope[n]] (the rotated key is the
     * same in every head) and every value is 0 */
    enum { N = 3 };
    const LabMlaDims d = {5, 3, 4, 2, 3, 2};
    const int D = 5;
    float x[N * 5], krope[N * 3], Wkv_a[4 * 5], g[4], Wkv_b[3 * 4 * 4] = {0};
    float k[N * 3 * D], v[N * 3 * 2] = {0};
    KvOut o;
    fill_uniform(x, sizeof x / sizeof x[0], 2.0f, 610);
    fill_uniform(krope, sizeof krope / sizeof krope[0], 1.0f, 611);
    fill_uniform(Wkv_a, sizeof Wkv_a / sizeof Wkv_a[0], 0.5f, 612);
    lab_fill_gain(g, 4, 613);
    for (int n = 0; n < N; n++)
        for (int h = 0; h < 3; h++)
            for (int i = 0; i < D; i++)
                k[(n * 3 + h) * D + i] = i < 2 ? 0.0f : krope[n * 3 + i - 2];
    kv_init(&o, &d, N);
    LAB_CALL(lab_latent_kv_forward(o.latn, o.k, o.v, x, krope, Wkv_a, g, Wkv_b, &d, N));
    EXPECT_TABLE(o.k, k, N, 3 * D, "k",
                 "Wkv_b = 0 (H = 3, nope_dim = 2, rope_dim = 3): each head's key must be "
                 "[0, 0 | krope[n]], the rotated key shared by the heads in its last rope_dim "
                 "channels");
    EXPECT_TABLE(o.v, v, N, 3 * 2, "v", "Wkv_b = 0: every value must be 0");
}
END_TEST

START_TEST(latent_kv_matches_engine) {
    for (int s = 0; s < NSHAPES; s++) {
        const int N = shapes[s].N;
        const LabMlaDims *d = &shapes[s].d;
        const int KR = d->kv_rank, H = d->H, D = d->nope_dim + d->rope_dim, DV = d->v_dim;
        const int KVB = d->nope_dim + DV;
        float x[MAXN * MAXC], krope[MAXN * 4], Wkv_a[MAXKR * MAXC], g[MAXKR];
        float Wkv_b[MAXH * MAXKVB * MAXKR];
        float latn[MAXN * MAXKR], kvb[MAXN * MAXH * MAXKVB], k[MAXN * MAXH * MAXD];
        float v[MAXN * MAXH * MAXDV];
        char what[200], dims[160];
        KvOut o;
        fill_uniform(x, (size_t)N * d->C, 2.0f, 620 + s);
        fill_uniform(krope, (size_t)N * d->rope_dim, 1.0f, 630 + s);
        fill_uniform(Wkv_a, (size_t)KR * d->C, 1.0f / sqrtf((float)d->C), 640 + s);
        lab_fill_gain(g, KR, 650 + s);
        fill_uniform(Wkv_b, (size_t)H * KVB * KR, 1.0f / sqrtf((float)KR), 660 + s);
        engine_kv(latn, kvb, k, v, x, krope, Wkv_a, g, Wkv_b, d, N);
        kv_init(&o, d, N);
        LAB_CALL(lab_latent_kv_forward(o.latn, o.k, o.v, x, krope, Wkv_a, g, Wkv_b, d, N));
        snprintf(what, sizeof what, "random layer (%s) against the engine",
                 dims_text(dims, sizeof dims, d, N));
        EXPECT_TABLE(o.latn, latn, N, KR, "latn", what);
        EXPECT_TABLE(o.k, k, N, H * D, "k (row n, column h * D + i)", what);
        EXPECT_TABLE(o.v, v, N, H * DV, "v (row n, column h * v_dim + i)", what);
    }
}
END_TEST

/* ---- task 2: the absorbed query ---------------------------------------------------------------
 */

START_TEST(absorb_hand_computed) {
    /* H = 2, nope_dim = 2, v_dim = 1, kv_rank = 3: Wkv_b has 3 rows a head, head 0's key rows
     * 0 and 1 and value row 2, head 1's key rows 3 and 4 and value row 5. Head 1 with
     * q_nope = (1, 2): q_lat = 1 * row 3 + 2 * row 4 = (1, 0, 2) + 2 (0, 1, -1) = (1, 2, 0) */
    const LabMlaDims d = {4, 2, 3, 2, 2, 1};
    const float Wkv_b[6 * 3] = {5, 5, 5, 6, 6, 6, 7, 7, 7, 1, 0, 2, 0, 1, -1, 9, 9, 9};
    const float q_nope[2] = {1, 2}, want[3] = {1, 2, 0};
    float q_lat[3 + LAB_GUARD_N];
    lab_fill_guarded(q_lat, 3, NAN);
    LAB_CALL(lab_absorb_query(q_lat, q_nope, Wkv_b, 1, &d));
    EXPECT_TABLE(q_lat, want, 1, 3, "q_lat",
                 "head 1 of 2 (nope_dim = 2, v_dim = 1), q_nope = (1, 2): head 1's key rows of "
                 "Wkv_b are rows 3 and 4 (head 0's two key rows and one value row come first), "
                 "q_lat = 1 * row 3 + 2 * row 4");
}
END_TEST

START_TEST(absorb_matches_engine) {
    for (int s = 0; s < NSHAPES; s++) {
        const LabMlaDims *d = &shapes[s].d;
        const int KR = d->kv_rank, KVB = d->nope_dim + d->v_dim;
        float Wkv_b[MAXH * MAXKVB * MAXKR], q_nope[MAXD], want[MAXKR], q_lat[MAXKR + LAB_GUARD_N];
        char what[200], dims[160];
        fill_uniform(Wkv_b, (size_t)d->H * KVB * KR, 1.0f, 700 + s);
        for (int h = 0; h < d->H; h++) {
            fill_uniform(q_nope, (size_t)d->nope_dim, 2.0f, 710 + 10 * s + h);
            engine_absorb(want, q_nope, Wkv_b, h, d);
            lab_fill_guarded(q_lat, (size_t)KR, NAN);
            LAB_CALL(lab_absorb_query(q_lat, q_nope, Wkv_b, h, d));
            snprintf(what, sizeof what, "head %d (%s) against the engine", h,
                     dims_text(dims, sizeof dims, d, 0));
            EXPECT_TABLE(q_lat, want, 1, KR, "q_lat", what);
        }
    }
}
END_TEST

START_TEST(absorb_identity) {
    /* what the absorbed query is for: q_lat . latn = q_nope . k_nope for every latent, k_nope
     * the head's key part of latn Wkv_b^T (the engine's), so the keys need not be made */
    enum { T = 7 };
    const LabMlaDims d = {8, 3, 6, 4, 2, 3};
    const int KR = 6, KVB = 7, H = 3;
    float Wkv_b[3 * 7 * 6], latn[T * 6], kvb[T * 3 * 7], q_nope[4], q_lat[6 + LAB_GUARD_N];
    float got[T + LAB_GUARD_N], want[T];
    fill_uniform(Wkv_b, sizeof Wkv_b / sizeof Wkv_b[0], 0.5f, 720);
    fill_uniform(latn, sizeof latn / sizeof latn[0], 1.5f, 721);
    matmul_forward(kvb, latn, Wkv_b, T, KR, H * KVB);
    for (int h = 0; h < H; h++) {
        char what[200];
        fill_uniform(q_nope, 4, 2.0f, 722 + h);
        lab_fill_guarded(q_lat, (size_t)KR, NAN);
        LAB_CALL(lab_absorb_query(q_lat, q_nope, Wkv_b, h, &d));
        lab_fill_guarded(got, T, NAN);
        for (int t = 0; t < T; t++) {
            got[t] = (float)dot_d(q_lat, latn + t * KR, (size_t)KR);
            want[t] = (float)dot_d(q_nope, kvb + (t * H + h) * KVB, 4);
        }
        snprintf(what, sizeof what,
                 "head %d of 3: q_lat . latn_t must equal q_nope . k_nope_t, k_nope_t = head %d's "
                 "4 key channels of latn_t Wkv_b^T, for 7 latents t",
                 h, h);
        EXPECT_TABLE(got, want, 1, T, "q_lat . latn_t (index t)", what);
    }
}
END_TEST

/* ---- task 3: the absorbed scores --------------------------------------------------------------
 */

START_TEST(scores_hand_computed) {
    /* kv_rank = 2, rope_dim = 2, nope_dim = 7: the scale is 1 / sqrt(7 + 2) = 1/3 (the full
     * key's width, not the cached row's 2 + 2). q_lat = (3, 6), q_rope = (1.5, 3):
     *   row (1, 0 | 0, 0):      3 / 3                       = 1
     *   row (0, 1 | 1, 1):      (6 + 1.5 + 3) / 3           = 3.5
     *   row (2, 2 | -1, 0.5):   (6 + 12 - 1.5 + 1.5) / 3    = 6 */
    const LabMlaDims d = {4, 1, 2, 7, 2, 3};
    const float cache[3 * 4] = {1, 0, 0, 0, 0, 1, 1, 1, 2, 2, -1, 0.5f};
    const float q_lat[2] = {3, 6}, q_rope[2] = {1.5f, 3}, want[3] = {1, 3.5f, 6};
    float scores[3 + LAB_GUARD_N];
    lab_fill_guarded(scores, 3, NAN);
    LAB_CALL(lab_absorbed_scores(scores, q_lat, q_rope, cache, 3, &d));
    EXPECT_TABLE(
        scores, want, 1, 3, "scores",
        "q_lat = (3, 6), q_rope = (1.5, 3) against rows (1, 0 | 0, 0), (0, 1 | 1, 1), "
        "(2, 2 | -1, 0.5), nope_dim = 7: (q_lat . latn_t + q_rope . krope_t) / sqrt(7 + 2)");
}
END_TEST

START_TEST(scores_equal_full_attention) {
    /* the identity the decoder relies on: for every head h, the absorbed score against the
     * cached [latn_t | krope_t] equals q_h . k_h,t / sqrt(D) with the head's full key
     * k_h,t = [k_nope | krope_t] made from latn_t by the engine (task 1's k). q_lat comes from
     * the engine too, so this grades task 3 alone. */
    for (int s = 0; s < NSHAPES; s++) {
        const LabMlaDims *d = &shapes[s].d;
        const int T = shapes[s].N, KR = d->kv_rank, R = d->rope_dim, NOPE = d->nope_dim;
        const int H = d->H, D = NOPE + R, KVB = NOPE + d->v_dim, W = KR + R;
        float latn[MAXT * MAXKR], krope[MAXT * 4], Wkv_b[MAXH * MAXKVB * MAXKR];
        float kvb[MAXT * MAXH * MAXKVB], k[MAXT * MAXH * MAXD], cache[MAXT * MAXW];
        float q[MAXH * MAXD], q_lat[MAXKR], scores[MAXT + LAB_GUARD_N], want[MAXT];
        char what[400], dims[160];
        fill_uniform(latn, (size_t)T * KR, 1.5f, 800 + s);
        fill_uniform(krope, (size_t)T * R, 1.0f, 810 + s);
        fill_uniform(Wkv_b, (size_t)H * KVB * KR, 1.0f / sqrtf((float)KR), 820 + s);
        fill_uniform(q, (size_t)H * D, 1.0f, 830 + s);
        matmul_forward(kvb, latn, Wkv_b, T, KR, H * KVB);
        copy_block(k, D, kvb, KVB, T * H, NOPE, 0);
        for (int h = 0; h < H; h++) copy_block(k + (size_t)h * D + NOPE, H * D, krope, R, T, R, 0);
        copy_block(cache, W, latn, KR, T, KR, 0);
        copy_block(cache + KR, W, krope, R, T, R, 0);
        for (int h = 0; h < H; h++) {
            for (int t = 0; t < T; t++)
                want[t] = (float)(dot_d(q + h * D, k + ((size_t)t * H + h) * D, (size_t)D) /
                                  sqrt((double)D));
            engine_absorb(q_lat, q + h * D, Wkv_b, h, d);
            lab_fill_guarded(scores, (size_t)T, NAN);
            LAB_CALL(lab_absorbed_scores(scores, q_lat, q + h * D + NOPE, cache, T, d));
            snprintf(what, sizeof what,
                     "head %d (%s, Tc = %d): the absorbed scores must equal the full q . k / "
                     "sqrt(D) with the head's keys (the scale is the full key's, D = nope_dim + "
                     "rope_dim = %d, not the cached row's kv_rank + rope_dim = %d)",
                     h, dims_text(dims, sizeof dims, d, 0), T, D, W);
            EXPECT_TABLE(scores, want, 1, T, "scores", what);
        }
    }
}
END_TEST

START_TEST(scores_match_engine_decode) {
    /* the engine's absorbed decoding (src/model/attn_block.c, mla_decode) runs the attention op
     * over the cached rows as one head of W = kv_rank + rope_dim channels, the query scaled by
     * sqrt(W / D) so that the op's 1 / sqrt(W) is the model's 1 / sqrt(D): the softmax of your
     * scores must be the probabilities it attends with */
    enum { T = 8 };
    const LabMlaDims d = {8, 2, 10, 6, 4, 5};
    const int KR = 10, R = 4, W = 14, D = 10;
    float cache[T * 14], q_lat[10], q_rope[4], qp[14], out[14], att[T], probs[T + LAB_GUARD_N];
    float scores[T + LAB_GUARD_N];
    const int rows[1] = {T - 1}; /* one sequence's position T - 1: all T rows */
    fill_uniform(cache, T * W, 1.5f, 840);
    fill_uniform(q_lat, KR, 1.5f, 841);
    fill_uniform(q_rope, R, 1.5f, 842);
    for (int i = 0; i < W; i++)
        qp[i] = (i < KR ? q_lat[i] : q_rope[i - KR]) * sqrtf((float)W / (float)D);
    attention_decode(out, att, qp, cache, cache, rows, 1, 1, 1, W, W, T);
    lab_fill_guarded(scores, T, NAN);
    LAB_CALL(lab_absorbed_scores(scores, q_lat, q_rope, cache, T, &d));
    for (int t = 0; t < T + LAB_GUARD_N; t++)
        if (t < T ? !isfinite(scores[t]) : scores[t] != LAB_GUARD)
            ck_abort_msg("8 cached rows: scores[%d] is %g (%s)", t, (double)scores[t],
                         t < T ? "write a finite score for every row" : "written past its end");
    double m = scores[0], sum = 0.0;
    for (int t = 1; t < T; t++) m = scores[t] > m ? scores[t] : m;
    for (int t = 0; t < T; t++) sum += exp(scores[t] - m);
    lab_fill_guarded(probs, T, NAN);
    for (int t = 0; t < T; t++) probs[t] = (float)(exp(scores[t] - m) / sum);
    EXPECT_TABLE(probs, att, 1, T, "softmax(scores)",
                 "8 cached rows (kv_rank = 10, rope_dim = 4, nope_dim = 6) against the engine's "
                 "absorbed decoding: the softmax of your scores must be its attention "
                 "probabilities (scale by 1 / sqrt(nope_dim + rope_dim) = 1 / sqrt(10))");
}
END_TEST

/* ---- task 4: the cache's size -----------------------------------------------------------------
 */

/* the decoder's count (src/infer/decode.c, decoder_open) for the engine's Config of s: a key and
 * a value a key-value head, or latent attention's latent and rotated key */
static long long engine_cache_floats(const LabCacheShape *s) {
    Config c;
    memset(&c, 0, sizeof c);
    c.n_head = s->n_head;
    c.d_model = s->n_head * s->head_dim;
    c.head_dim = s->head_dim;
    c.kv_heads = s->attention == LAB_ATTN_GQA ? s->kv_heads : 0;
    if (s->attention == LAB_ATTN_MLA) {
        c.attention = MOE_ATTN_MLA;
        c.mla_kv_rank = s->kv_rank;
        c.mla_rope_dim = s->rope_dim;
        return (long long)c.mla_kv_rank + c.mla_rope_dim;
    }
    c.attention = MOE_ATTN_MHA;
    return (long long)config_kv_heads(&c) * (config_head_dim(&c) + config_value_dim(&c));
}

START_TEST(cache_published_models) {
    /* a token and layer of Llama 2 7B (32 heads of 128), Llama 2 70B (64 query heads, 8
     * key-value heads of 128) and DeepSeek-V2 (a latent of 512, a rotated key of 64) */
    const LabCacheShape mha = {LAB_ATTN_MHA, 32, 0, 128, 0, 0};
    const LabCacheShape gqa = {LAB_ATTN_GQA, 64, 8, 128, 0, 0};
    const LabCacheShape mla = {LAB_ATTN_MLA, 128, 0, 0, 512, 64};
    long long got = 0;
    LAB_CALL(got = lab_cache_floats(&mha));
    EXPECT_COUNT(got, 8192,
                 "MHA, 32 heads of head_dim 128: a key and a value a head, 2 * 32 * 128");
    LAB_CALL(got = lab_cache_floats(&gqa));
    EXPECT_COUNT(got, 2048,
                 "GQA, 64 query heads sharing 8 key-value heads of 128: only the key-value heads "
                 "are cached, 2 * 8 * 128 (not n_head)");
    LAB_CALL(got = lab_cache_floats(&mla));
    EXPECT_COUNT(got, 576,
                 "MLA, kv_rank 512 and rope_dim 64: the latent and the shared rotated key, "
                 "512 + 64, whatever the heads");
}
END_TEST

START_TEST(cache_matches_decoder) {
    static const LabCacheShape cases[] = {
        {LAB_ATTN_MHA, 1, 0, 8, 0, 0},   {LAB_ATTN_MHA, 6, 0, 16, 0, 0},
        {LAB_ATTN_GQA, 6, 2, 16, 0, 0},  {LAB_ATTN_GQA, 12, 1, 64, 0, 0},
        {LAB_ATTN_MLA, 16, 0, 0, 32, 8}, {LAB_ATTN_MLA, 4, 0, 0, 7, 2},
    };
    static const char *kinds[] = {"MHA", "GQA", "MLA"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const LabCacheShape *s = &cases[i];
        long long got = 0;
        char what[200];
        LAB_CALL(got = lab_cache_floats(s));
        snprintf(what, sizeof what,
                 "%s, n_head %d, kv_heads %d, head_dim %d, kv_rank %d, rope_dim %d, against the "
                 "engine's decoder",
                 kinds[s->attention], s->n_head, s->kv_heads, s->head_dim, s->kv_rank, s->rope_dim);
        EXPECT_COUNT(got, engine_cache_floats(s), what);
    }
}
END_TEST

START_TEST(cache_bytes_64_bits) {
    /* whole caches in bf16: Llama 2 7B, 32 layers, 4096 tokens: 2^31 bytes, one past int's
     * range; DeepSeek-V2, 60 layers, 128k tokens: 9.06e9 bytes with MLA, past 2^32, and
     * 5.15e11 had it cached its 128 heads' keys and values of 128 */
    const LabCacheShape mha = {LAB_ATTN_MHA, 32, 0, 128, 0, 0};
    const LabCacheShape mla = {LAB_ATTN_MLA, 128, 0, 0, 512, 64};
    const LabCacheShape v2_mha = {LAB_ATTN_MHA, 128, 0, 128, 0, 0};
    long long got = 0;
    if (!lab_cache_bytes)
        ck_abort_msg("function lab_cache_bytes is not defined in your file (task 4 has two)");
    LAB_CALL(got = lab_cache_bytes(&mha, 32, 4096, 2));
    EXPECT_COUNT(got, 2147483648LL,
                 "Llama 2 7B (MHA, 32 heads of 128), 32 layers, 4096 tokens, 2 bytes: 2^31 "
                 "bytes (multiply in 64 bits: int overflows)");
    LAB_CALL(got = lab_cache_bytes(&mla, 60, 131072, 2));
    EXPECT_COUNT(got, 9059696640LL,
                 "DeepSeek-V2 (MLA, 512 + 64), 60 layers, 131072 tokens, 2 bytes: 576 * 60 * "
                 "131072 * 2 (multiply in 64 bits)");
    LAB_CALL(got = lab_cache_bytes(&v2_mha, 60, 131072, 2));
    EXPECT_COUNT(got, 515396075520LL,
                 "DeepSeek-V2's shape with MHA (128 heads of 128), 60 layers, 131072 tokens, 2 "
                 "bytes: 32768 * 60 * 131072 * 2");
    LAB_CALL(got = lab_cache_bytes(&mla, 1, 1, 4));
    EXPECT_COUNT(got, 2304, "MLA (512 + 64), 1 layer, 1 token, 4 bytes (float32)");
}
END_TEST

/* ---- suite ----------------------------------------------------------------------------------- */

static Suite *latent_lab_suite(void) {
    Suite *s = suite_create("lab 06: latent attention");
    TCase *t1 = tcase_create("task1_latent_kv");
    tcase_add_test(t1, latent_kv_norm_gain);
    tcase_add_test(t1, latent_kv_zero_up_projection);
    tcase_add_test(t1, latent_kv_matches_engine);
    suite_add_tcase(s, t1);
    TCase *t2 = tcase_create("task2_absorb_query");
    tcase_add_test(t2, absorb_hand_computed);
    tcase_add_test(t2, absorb_matches_engine);
    tcase_add_test(t2, absorb_identity);
    suite_add_tcase(s, t2);
    TCase *t3 = tcase_create("task3_absorbed_scores");
    tcase_add_test(t3, scores_hand_computed);
    tcase_add_test(t3, scores_equal_full_attention);
    tcase_add_test(t3, scores_match_engine_decode);
    suite_add_tcase(s, t3);
    TCase *t4 = tcase_create("task4_cache_size");
    tcase_add_test(t4, cache_published_models);
    tcase_add_test(t4, cache_matches_decoder);
    tcase_add_test(t4, cache_bytes_64_bits);
    suite_add_tcase(s, t4);
    return s;
}

int main(void) {
    /* the student's header states the engine's eps as a number: they must agree */
    if (LAB_RMSNORM_EPS != RMSNORM_EPS) {
        fprintf(stderr,
                "grader: latent_lab.h's LAB_RMSNORM_EPS (%g) is not the engine's "
                "RMSNORM_EPS (%g, src/nn/ops.h): restore the header\n",
                (double)LAB_RMSNORM_EPS, (double)RMSNORM_EPS);
        return 2;
    }
    static const LabTask tasks[] = {LAB_TASK("task1_latent_kv", lab_latent_kv_forward, 3),
                                    LAB_TASK("task2_absorb_query", lab_absorb_query, 2),
                                    LAB_TASK("task3_absorbed_scores", lab_absorbed_scores, 3),
                                    LAB_TASK("task4_cache_size", lab_cache_floats, 2)};
    return lab_main(latent_lab_suite(), "lab 06: latent attention", tasks, 4);
}
