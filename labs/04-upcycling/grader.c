/*
 * grader.c: the automatic grader of lab 04 (sparse upcycling of one layer). One Check TCase per
 * task:
 *
 *   task1_copy    lab_copy_experts   a hand-checked copy, random shapes with F != C (a
 *                                    transposed down shows), nothing written past the
 *                                    outputs, and a model whose MoE blocks are the student's
 *                                    copies computing its dense parent's loss
 *   task2_stats   lab_stats          hand-computed values, a single value, equal values (no
 *                                    NaN), a large mean with a tiny spread (float sums and the
 *                                    one-pass formula fail), random matrices
 *   task3_choose  lab_choose_units   the README's example, many (F, n_drop, seed) against the
 *                                    reference shuffle, exactly n_drop draws, n_drop 0 and F
 *   task4_drop    lab_drop_units     the README's example, random units with F != C (row of
 *                                    gate and up, column of down), every other element
 *                                    bit-identical, n_drop 0 and F
 *   task5_split   lab_split_experts  a hand-checked split, random shapes, G = 1 (a copy), and
 *                                    a model with uniform routing computing its dense parent's
 *                                    loss
 *
 * The expected results come from the plain reference functions below (independent of the
 * solution) and from the engine's model (src/model/model.h), which runs the upcycled networks.
 * Every task takes its inputs from the grader, never from the student's other tasks, so one
 * unfinished task fails only itself.
 *
 * Run through labs/Makefile: make -C labs grade LAB=04-upcycling [TASK=task3_choose].
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "config/config.h"
#include "lab.h"
#include "model/model.h"
#include "model/params.h"
#include "upcycle_lab.h"

/* Weak: a function missing from the student's file is NULL, and fails its task alone (lab_main)
 * instead of the link. */
#pragma weak lab_copy_experts
#pragma weak lab_stats
#pragma weak lab_choose_units
#pragma weak lab_drop_units
#pragma weak lab_split_experts

/* ---- reference logic --------------------------------------------------------------------- */

/* e_gate, e_up (E, F, C), e_down (E, C, F) = the dense matrices, element by element */
static void ref_copy(float *e_gate, float *e_up, float *e_down, const float *w_gate,
                     const float *w_up, const float *w_down, int E, int F, int C) {
    for (int e = 0; e < E; e++)
        for (int f = 0; f < F; f++)
            for (int c = 0; c < C; c++) {
                size_t o = (size_t)e * F * C;
                e_gate[o + (size_t)f * C + c] = w_gate[(size_t)f * C + c];
                e_up[o + (size_t)f * C + c] = w_up[(size_t)f * C + c];
                e_down[o + (size_t)c * F + f] = w_down[(size_t)c * F + f];
            }
}

/* two-pass mean and population std in double */
static void ref_stats(double *mean, double *std, const float *w, int n) {
    double s = 0.0, ss = 0.0;
    for (int i = 0; i < n; i++) s += w[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) ss += (w[i] - *mean) * (w[i] - *mean);
    *std = sqrt(ss / n);
}

/* the partial Fisher-Yates of upcycle_lab.h */
static void ref_choose(int *units, int n_drop, int F, LabRng *rng) {
    int *perm = malloc((size_t)F * sizeof(int));
    for (int f = 0; f < F; f++) perm[f] = f;
    for (int i = 0; i < n_drop; i++) {
        int j = i + lab_rng_below(rng, F - i), t = perm[j];
        perm[j] = perm[i];
        perm[i] = t;
        units[i] = t;
    }
    free(perm);
}

/* re-draw units of gate, up (F, C), down (C, F) in place from z (n_drop, 3, C) */
static void ref_drop(float *gate, float *up, float *down, const int *units, int n_drop, int F,
                     int C, const float stats[6], const float *z) {
    for (int i = 0; i < n_drop; i++)
        for (int c = 0; c < C; c++) {
            int u = units[i];
            gate[u * C + c] = stats[0] + stats[1] * z[(3 * i + 0) * C + c];
            up[u * C + c] = stats[2] + stats[3] * z[(3 * i + 1) * C + c];
            down[c * F + u] = stats[4] + stats[5] * z[(3 * i + 2) * C + c];
        }
}

/* fine-grained experts: e_gate, e_up (E, Fe, C), e_down (E, C, Fe), slice e % G */
static void ref_split(float *e_gate, float *e_up, float *e_down, const float *w_gate,
                      const float *w_up, const float *w_down, int E, int G, int F, int C) {
    int Fe = F / G;
    for (int e = 0; e < E; e++)
        for (int j = 0; j < Fe; j++)
            for (int c = 0; c < C; c++) {
                int f = (e % G) * Fe + j;
                e_gate[(e * Fe + j) * C + c] = w_gate[f * C + c];
                e_up[(e * Fe + j) * C + c] = w_up[f * C + c];
                e_down[(e * C + c) * Fe + j] = (float)G * w_down[c * F + f];
            }
}

/* ---- helpers ----------------------------------------------------------------------------- */

/* The checks are macros around functions that write the failure message: Check reports the
 * line of the failing assertion, and a student should land on the test, not the helper. */
#define MSG_LEN 640

/* Extra floats after every output buffer, filled with GUARD: a write past the end shows. */
#define GUARD_N 8
#define GUARD 12345.0f

static float *guarded(size_t n, float fill) {
    float *p = malloc((n + GUARD_N) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = fill;
    for (int i = 0; i < GUARD_N; i++) p[n + i] = GUARD;
    return p;
}

/* Name element i of a stack of E matrices (R, S) as "name[e][r, s]" */
static void element_name(char *buf, size_t len, const char *name, size_t i, int E, int R, int S) {
    size_t per = (size_t)R * S;
    if (E > 1)
        snprintf(buf, len, "expert %zu's %s[%zu, %zu]", i / per, name, i % per / S, i % S);
    else
        snprintf(buf, len, "%s[%zu, %zu]", name, i % per / S, i % S);
}

/* got (E, R, S) against want: exactly (exact 1) or under the tolerance rule; the guard after
 * got must be intact. Writes a message naming the element and returns 1 on a difference. */
static int stack_differs(char *msg, const float *got, const float *want, int E, int R, int S,
                         int exact, const char *name, const char *what) {
    size_t n = (size_t)E * R * S;
    char el[96];
    for (int g = 0; g < GUARD_N; g++)
        if (got[n + g] != GUARD) {
            snprintf(msg, MSG_LEN, "%s: %s was written past its end (element %zu of %zu)", what,
                     name, n + g, n);
            return 1;
        }
    long bad = -1;
    if (exact) {
        for (size_t i = 0; i < n && bad < 0; i++)
            if (!(got[i] == want[i])) bad = (long)i;
    } else {
        double ex;
        bad = tol_worst(got, want, n, TOL_F32_ATOL, TOL_F32_RTOL, &ex);
    }
    if (bad < 0) return 0;
    element_name(el, sizeof el, name, (size_t)bad, E, R, S);
    snprintf(msg, MSG_LEN, "%s: %s (each matrix %d x %d): got %.7g, want %.7g%s", what, el, R, S,
             (double)got[bad], (double)want[bad], exact ? " (an exact copy)" : "");
    return 1;
}
#define EXPECT_STACK(got, want, E, R, S, exact, name, what)                                        \
    do {                                                                                           \
        char m_[MSG_LEN];                                                                          \
        if (stack_differs(m_, (got), (want), (E), (R), (S), (exact), (name), (what)))              \
            ck_abort_msg("%s", m_);                                                                \
    } while (0)

/* ---- models: a dense parent and its upcycled child --------------------------------------- */

enum { MB = 2, MT = 8 }; /* the batch the models run */

/* A small model: C 8, L 2, H 2, F 12; an MoE block in every layer when num_experts > 0. */
static void tiny_config(Config *c, int num_experts, int top_k, int d_expert) {
    config_defaults(c);
    c->d_model = 8;
    c->n_layer = 2;
    c->n_head = 2;
    c->seq_len = MT;
    c->d_ff = 12;
    c->num_experts = num_experts;
    c->top_k = top_k;
    c->d_expert = d_expert;
    c->first_dense = 0;
    c->every = 1;
    c->norm_topk = 1;
    c->capacity_factor = 0.0f; /* dropless */
    c->init_std = 0.3f;        /* a larger init than training: the FFNs matter to the loss */
    c->seed = 11;
}

/* Copy every tensor of src that dst has under the same name (all but the MoE blocks). */
static void copy_shared_tensors(Model *dst, const Model *src) {
    for (int i = 0; i < dst->pt.n; i++) {
        const ParamTensor *t = &dst->pt.t[i];
        int j = params_find(&src->pt, t->name);
        if (j < 0) continue;
        ck_assert_msg(src->pt.t[j].numel == t->numel, "grader: %s differs in size", t->name);
        memcpy(dst->params + t->offset, src->params + src->pt.t[j].offset,
               t->numel * sizeof(float));
    }
}

/* The language-model loss of m on a fixed batch of bytes. */
static float batch_loss(Model *m) {
    int inputs[MB * MT], targets[MB * MT];
    for (int i = 0; i < MB * MT; i++) {
        inputs[i] = (37 * i + 11) % MOE_VOCAB;
        targets[i] = (53 * i + 7) % MOE_VOCAB;
    }
    model_forward(m, inputs, targets, MB, MT, NULL);
    return m->state.loss;
}

/* ---- task 1: copy ------------------------------------------------------------------------ */

START_TEST(copy_hand_checked) {
    /* E = 2, F = 3, C = 2: gate rows (1, 2) (3, 4) (5, 6); down (C, F) rows (21, 22, 23) and
     * (24, 25, 26). Every expert holds the same numbers in the same places. */
    enum { E = 2, F = 3, C = 2 };
    static const float w_gate[F * C] = {1, 2, 3, 4, 5, 6};
    static const float w_up[F * C] = {11, 12, 13, 14, 15, 16};
    static const float w_down[C * F] = {21, 22, 23, 24, 25, 26};
    static const float want_gate[E * F * C] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6};
    static const float want_up[E * F * C] = {11, 12, 13, 14, 15, 16, 11, 12, 13, 14, 15, 16};
    static const float want_down[E * C * F] = {21, 22, 23, 24, 25, 26, 21, 22, 23, 24, 25, 26};
    float *g = guarded(E * F * C, 999.0f), *u = guarded(E * F * C, 999.0f),
          *d = guarded(E * C * F, 999.0f);
    LAB_CALL(lab_copy_experts(g, u, d, w_gate, w_up, w_down, E, F, C));
    const char *what = "2 experts from F = 3, C = 2";
    EXPECT_STACK(g, want_gate, E, F, C, 1, "e_gate", what);
    EXPECT_STACK(u, want_up, E, F, C, 1, "e_up", what);
    EXPECT_STACK(d, want_down, E, C, F, 1, "e_down", what);
    free(g), free(u), free(d);
}
END_TEST

START_TEST(copy_random_shapes) {
    /* F != C everywhere, so a down copied as if it were (F, C) lands in the wrong places */
    static const struct { int E, F, C; } cases[] = {{4, 12, 8}, {1, 5, 7}, {8, 16, 6}, {3, 7, 16}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int E = cases[k].E, F = cases[k].F, C = cases[k].C;
        const size_t n = (size_t)E * F * C;
        float *wg = guarded(F * C, 0), *wu = guarded(F * C, 0), *wd = guarded(C * F, 0);
        fill_uniform(wg, (size_t)F * C, 1.0f, 100 + k);
        fill_uniform(wu, (size_t)F * C, 1.0f, 200 + k);
        fill_uniform(wd, (size_t)C * F, 1.0f, 300 + k);
        float *g = guarded(n, NAN), *u = guarded(n, NAN), *d = guarded(n, NAN);
        float *rg = malloc(n * sizeof(float)), *ru = malloc(n * sizeof(float)),
              *rd = malloc(n * sizeof(float));
        ref_copy(rg, ru, rd, wg, wu, wd, E, F, C);
        LAB_CALL(lab_copy_experts(g, u, d, wg, wu, wd, E, F, C));
        char what[96];
        snprintf(what, sizeof what, "E = %d, F = %d, C = %d", E, F, C);
        EXPECT_STACK(g, rg, E, F, C, 1, "e_gate", what);
        EXPECT_STACK(u, ru, E, F, C, 1, "e_up", what);
        EXPECT_STACK(d, rd, E, C, F, 1, "e_down", what);
        free(wg), free(wu), free(wd), free(g), free(u), free(d), free(rg), free(ru), free(rd);
    }
}
END_TEST

START_TEST(copy_preserves_the_model) {
    /* A dense model and an MoE model of the same shape (4 experts, top-2, weights renormalised
     * to sum 1, a random router). With every expert a copy of its block's dense FFN, the MoE
     * block computes sum_k w_k FFN(x) = FFN(x): the loss is the dense loss. */
    Config cd, cm;
    tiny_config(&cd, 0, 2, 0);
    tiny_config(&cm, 4, 2, 12);
    Model dense, moe;
    model_init(&dense, &cd, MB, MT);
    model_init(&moe, &cm, MB, MT);
    copy_shared_tensors(&moe, &dense);
    for (int l = 0; l < cm.n_layer; l++) {
        const LayerView *d = &dense.w.layers[l];
        LayerView *m = &moe.w.layers[l];
        fill_uniform(m->router, (size_t)cm.num_experts * cm.d_model, 1.0f, 40 + l);
        LAB_CALL(lab_copy_experts(m->e_gate, m->e_up, m->e_down, d->w_gate, d->w_up, d->w_down,
                                  cm.num_experts, cm.d_ff, cm.d_model));
    }
    float want = batch_loss(&dense), got = batch_loss(&moe);
    expect_close(got, want, TOL_F32_ATOL, TOL_F32_RTOL,
                 "the upcycled model's loss (4 experts, top-2, every expert your copy of the "
                 "dense FFN) against its dense parent's loss: function preservation");
    model_free(&dense);
    model_free(&moe);
}
END_TEST

/* ---- task 2: stats ----------------------------------------------------------------------- */

/* lab_stats on w (n) against the two-pass reference */
static void expect_stats(const float *w, int n, const char *what) {
    double want_mean, want_std;
    float mean = NAN, std = NAN;
    char msg[MSG_LEN];
    ref_stats(&want_mean, &want_std, w, n);
    LAB_CALL(lab_stats(&mean, &std, w, n));
    snprintf(msg, sizeof msg, "%s: the mean", what);
    expect_close(mean, want_mean, TOL_F32_ATOL, TOL_F32_RTOL, msg);
    snprintf(msg, sizeof msg, "%s: the std (got %.7g, want %.7g)", what, (double)std, want_std);
    ck_assert_msg(!isnan(std), "%s", msg);
    expect_close(std, want_std, TOL_F32_ATOL, TOL_F32_RTOL, msg);
}

START_TEST(stats_hand_computed) {
    static const float w[4] = {1, 2, 3, 4};
    float mean = NAN, std = NAN;
    LAB_CALL(lab_stats(&mean, &std, w, 4));
    expect_close(mean, 2.5f, TOL_F32_ATOL, TOL_F32_RTOL, "mean of 1, 2, 3, 4 = 2.5");
    expect_close(std, 1.118034f, TOL_F32_ATOL, TOL_F32_RTOL,
                 "std of 1, 2, 3, 4 = sqrt(1.25) = 1.118034 (divide by n, not n - 1)");
    static const float one[1] = {-3.5f};
    LAB_CALL(lab_stats(&mean, &std, one, 1));
    expect_close(mean, -3.5f, TOL_F32_ATOL, TOL_F32_RTOL, "mean of the single value -3.5");
    expect_close(std, 0.0f, TOL_F32_ATOL, TOL_F32_RTOL, "std of a single value = 0");
}
END_TEST

START_TEST(stats_equal_values) {
    /* 1000 copies of 0.3f (or 0.9f): the one-pass E[w^2] - E[w]^2 in double comes out at
     * -2e-15 (-1e-14), and its sqrt is NaN */
    enum { N = 1000 };
    static float w[N];
    for (int i = 0; i < N; i++) w[i] = 0.3f;
    expect_stats(w, N, "1000 equal values 0.3 (std 0, never NaN)");
    for (int i = 0; i < N; i++) w[i] = 0.9f;
    expect_stats(w, N, "1000 equal values 0.9 (std 0, never NaN)");
}
END_TEST

START_TEST(stats_large_mean_tiny_spread) {
    /* 2^20 values 1000 + 0.001 u (u uniform in [-1, 1)): a float running sum of them loses
     * several percent of the mean, and the one-pass formula in double loses the std (its two
     * terms, about 1e6, agree to 13 digits) */
    const int n = 1 << 20;
    float *w = malloc((size_t)n * sizeof(float));
    fill_uniform(w, (size_t)n, 0.001f, 7);
    for (int i = 0; i < n; i++) w[i] += 1000.0f;
    expect_stats(w, n, "2^20 values 1000 + 0.001 u (sum in double; subtract the mean first)");
    free(w);
}
END_TEST

START_TEST(stats_random_matrices) {
    static const struct {
        int n;
        float scale, offset;
    } cases[] = {{96, 0.02f, 0.0f}, {4096, 0.3f, 0.0f}, {777, 1.0f, -0.25f}, {3, 5.0f, 2.0f}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float *w = malloc((size_t)cases[k].n * sizeof(float));
        char what[96];
        fill_uniform(w, (size_t)cases[k].n, cases[k].scale, 30 + k);
        for (int i = 0; i < cases[k].n; i++) w[i] += cases[k].offset;
        snprintf(what, sizeof what, "%d uniform values in %g +- %g", cases[k].n,
                 (double)cases[k].offset, (double)cases[k].scale);
        expect_stats(w, cases[k].n, what);
        free(w);
    }
}
END_TEST

/* ---- task 3: choose ---------------------------------------------------------------------- */

/* units (n_drop) must be distinct units of 0..F-1, equal to the reference shuffle from the same
 * seed, and leave the generator where n_drop draws leave it */
static int choose_differs(char *msg, int F, int n_drop, uint64_t seed) {
    int *units = malloc((size_t)(n_drop + 1) * sizeof(int));
    int *want = malloc((size_t)(n_drop + 1) * sizeof(int));
    int *seen = calloc((size_t)F, sizeof(int));
    LabRng r, rw;
    lab_rng_seed(&r, seed);
    lab_rng_seed(&rw, seed);
    for (int i = 0; i <= n_drop; i++) units[i] = -7;
    ref_choose(want, n_drop, F, &rw);
    lab_choose_units(units, n_drop, F, &r);
    int bad = 0;
    char where[80];
    snprintf(where, sizeof where, "F = %d, n_drop = %d, seed %llu", F, n_drop,
             (unsigned long long)seed);
    for (int i = 0; i < n_drop && !bad; i++) {
        if (units[i] < 0 || units[i] >= F) {
            snprintf(msg, MSG_LEN, "%s: units[%d] = %d is not a unit 0..%d", where, i, units[i],
                     F - 1);
            bad = 1;
        } else if (seen[units[i]]++) {
            snprintf(msg, MSG_LEN, "%s: unit %d chosen twice (units[%d]): units must be distinct",
                     where, units[i], i);
            bad = 1;
        } else if (units[i] != want[i]) {
            snprintf(msg, MSG_LEN,
                     "%s: units[%d]: got %d, want %d (j = i + lab_rng_below(rng, F - i), then "
                     "swap perm[i] and perm[j])",
                     where, i, units[i], want[i]);
            bad = 1;
        }
    }
    if (!bad && units[n_drop] != -7) {
        snprintf(msg, MSG_LEN, "%s: units[%d] written: units holds only n_drop entries", where,
                 n_drop);
        bad = 1;
    }
    if (!bad && memcmp(&r, &rw, sizeof r) != 0) {
        snprintf(msg, MSG_LEN,
                 "%s: the generator was not left where exactly %d calls of lab_rng_below leave "
                 "it: draw once per chosen unit, no more",
                 where, n_drop);
        bad = 1;
    }
    free(units), free(want), free(seen);
    return bad;
}
#define EXPECT_CHOOSE(F, n_drop, seed)                                                             \
    do {                                                                                           \
        char m_[MSG_LEN];                                                                          \
        int bad_ = 0;                                                                              \
        LAB_CALL(bad_ = choose_differs(m_, (F), (n_drop), (seed)));                                \
        if (bad_) ck_abort_msg("%s", m_);                                                          \
    } while (0)

START_TEST(choose_readme_example) {
    /* F = 8, n_drop = 3, seed 42: the README works it through */
    static const int want[3] = {6, 2, 7};
    int units[3] = {-1, -1, -1};
    LabRng r;
    lab_rng_seed(&r, 42);
    LAB_CALL(lab_choose_units(units, 3, 8, &r));
    for (int i = 0; i < 3; i++)
        ck_assert_msg(units[i] == want[i],
                      "the README's example (F = 8, n_drop = 3, seed 42): units[%d]: got %d, "
                      "want %d (the units are 6, 2, 7)",
                      i, units[i], want[i]);
}
END_TEST

START_TEST(choose_against_reference) {
    /* the lab's generator is the engine's: the same seed, the same draws */
    Rng er;
    LabRng lr;
    rng_seed(&er, 2024);
    lab_rng_seed(&lr, 2024);
    for (int i = 0; i < 100; i++)
        ck_assert_msg((int)rng_below(&er, (uint64_t)(i + 1)) == lab_rng_below(&lr, i + 1),
                      "grader: upcycle_lab.h's generator no longer matches src/base/util.h's Rng");
    static const int F[] = {2, 5, 12, 24, 64, 1000};
    for (size_t k = 0; k < sizeof F / sizeof F[0]; k++)
        for (int frac = 1; frac <= 3; frac++)
            for (uint64_t seed = 1; seed <= 4; seed++)
                EXPECT_CHOOSE(F[k], F[k] * frac / 4, seed * 977 + k);
}
END_TEST

START_TEST(choose_none_and_all) {
    EXPECT_CHOOSE(10, 0, 5); /* no draws at all */
    EXPECT_CHOOSE(1, 1, 6);  /* the only unit */
    EXPECT_CHOOSE(9, 9, 7);  /* every unit: a random permutation */
    EXPECT_CHOOSE(64, 64, 8);
}
END_TEST

/* ---- task 4: drop ------------------------------------------------------------------------ */

/* One expert (F, C) re-drawn by the student and by the reference, from the same copy: every
 * element must match, the untouched ones bit for bit. */
static int drop_differs(char *msg, const int *units, int n_drop, int F, int C, uint64_t seed,
                        const char *what) {
    const size_t n = (size_t)F * C;
    float stats[6] = {0.01f, 0.3f, -0.02f, 0.5f, 0.005f, 0.1f};
    float *z = malloc((size_t)(3 * n_drop * C + 1) * sizeof(float));
    fill_uniform(z, (size_t)3 * n_drop * C, 2.0f, seed);
    float *got[3], *want[3];
    for (int m = 0; m < 3; m++) {
        got[m] = guarded(n, 0);
        want[m] = malloc(n * sizeof(float));
        fill_uniform(got[m], n, 0.5f, seed + 10 + m);
        memcpy(want[m], got[m], n * sizeof(float));
    }
    ref_drop(want[0], want[1], want[2], units, n_drop, F, C, stats, z);
    lab_drop_units(got[0], got[1], got[2], units, n_drop, F, C, stats, z);
    int bad = 0;
    static const char *names[3] = {"gate", "up", "down"};
    for (int m = 0; m < 3 && !bad; m++) {
        int S = m < 2 ? C : F; /* gate, up (F, C); down (C, F): the row length */
        for (int g = 0; g < GUARD_N && !bad; g++)
            if (got[m][n + g] != GUARD) {
                snprintf(msg, MSG_LEN, "%s: %s was written past its end", what, names[m]);
                bad = 1;
            }
        for (size_t i = 0; i < n && !bad; i++) {
            int r = (int)(i / S), s = (int)(i % S), unit = m < 2 ? r : s, pick = -1;
            for (int k = 0; k < n_drop; k++)
                if (units[k] == unit) pick = k;
            int ok = pick < 0 ? got[m][i] == want[m][i]
                              : fabsf(got[m][i] - want[m][i]) <=
                                    TOL_F32_ATOL + TOL_F32_RTOL * fabsf(want[m][i]);
            if (ok) continue;
            if (pick < 0)
                snprintf(msg, MSG_LEN,
                         "%s: %s[%d, %d] changed from %.7g to %.7g, but unit %d was not chosen "
                         "(leave it as it was)",
                         what, names[m], r, s, (double)want[m][i], (double)got[m][i], unit);
            else
                snprintf(msg, MSG_LEN,
                         "%s: %s[%d, %d] (unit %d = units[%d], %s): got %.7g, want %.7g", what,
                         names[m], r, s, unit, pick,
                         m < 2 ? "a row of gate and up" : "a column of down", (double)got[m][i],
                         (double)want[m][i]);
            bad = 1;
        }
    }
    for (int m = 0; m < 3; m++) free(got[m]), free(want[m]);
    free(z);
    return bad;
}
#define EXPECT_DROP(units, n_drop, F, C, seed, what)                                               \
    do {                                                                                           \
        char m_[MSG_LEN];                                                                          \
        int bad_ = 0;                                                                              \
        LAB_CALL(bad_ = drop_differs(m_, (units), (n_drop), (F), (C), (seed), (what)));            \
        if (bad_) ck_abort_msg("%s", m_);                                                          \
    } while (0)

START_TEST(drop_readme_example) {
    /* F = 4, C = 2, units 2 and 0, mean 0 and std 1 for every matrix: the z values land as
     * they are. gate/up rows 2 and 0, down columns 2 and 0. */
    enum { F = 4, C = 2 };
    static const int units[2] = {2, 0};
    static const float stats[6] = {0, 1, 0, 1, 0, 1};
    static const float z[2 * 3 * C] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    float gate[F * C], up[F * C], down[C * F];
    for (int i = 0; i < F * C; i++) gate[i] = up[i] = down[i] = -1;
    static const float want_gate[F * C] = {7, 8, -1, -1, 1, 2, -1, -1};
    static const float want_up[F * C] = {9, 10, -1, -1, 3, 4, -1, -1};
    static const float want_down[C * F] = {11, -1, 5, -1, 12, -1, 6, -1};
    LAB_CALL(lab_drop_units(gate, up, down, units, 2, F, C, stats, z));
    for (int i = 0; i < F * C; i++) {
        ck_assert_msg(gate[i] == want_gate[i],
                      "the README's example: gate[%d, %d]: got %g, want %g", i / C, i % C,
                      (double)gate[i], (double)want_gate[i]);
        ck_assert_msg(up[i] == want_up[i], "the README's example: up[%d, %d]: got %g, want %g",
                      i / C, i % C, (double)up[i], (double)want_up[i]);
        ck_assert_msg(down[i] == want_down[i],
                      "the README's example: down[%d, %d] (down is (C, F): unit u is column u): "
                      "got %g, want %g",
                      i / F, i % F, (double)down[i], (double)want_down[i]);
    }
}
END_TEST

START_TEST(drop_random_units) {
    /* F != C, so a column of down mixed up with a row shows; statistics differ per matrix */
    static const struct {
        int F, C, n_drop;
    } cases[] = {{24, 10, 6}, {12, 8, 3}, {7, 16, 4}, {64, 5, 32}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int units[64];
        char what[96];
        LabRng r;
        lab_rng_seed(&r, 70 + k);
        ref_choose(units, cases[k].n_drop, cases[k].F, &r);
        snprintf(what, sizeof what, "F = %d, C = %d, %d units re-drawn", cases[k].F, cases[k].C,
                 cases[k].n_drop);
        EXPECT_DROP(units, cases[k].n_drop, cases[k].F, cases[k].C, 80 + k, what);
    }
}
END_TEST

START_TEST(drop_none_and_all) {
    int all[12];
    for (int f = 0; f < 12; f++) all[f] = (5 * f + 3) % 12; /* every unit, in a shuffled order */
    EXPECT_DROP(all, 0, 12, 6, 90, "n_drop = 0: nothing changes");
    EXPECT_DROP(all, 12, 12, 6, 91, "n_drop = F: every unit re-drawn (drop ratio 1)");
}
END_TEST

/* ---- task 5: split ----------------------------------------------------------------------- */

/* lab_split_experts against the reference, shapes (E, Fe, C) and (E, C, Fe) */
static void expect_split(int E, int G, int F, int C, uint64_t seed, const char *what) {
    const int Fe = F / G;
    const size_t n = (size_t)E * Fe * C;
    float *wg = malloc((size_t)F * C * sizeof(float)), *wu = malloc((size_t)F * C * sizeof(float)),
          *wd = malloc((size_t)C * F * sizeof(float));
    fill_uniform(wg, (size_t)F * C, 1.0f, seed);
    fill_uniform(wu, (size_t)F * C, 1.0f, seed + 1);
    fill_uniform(wd, (size_t)C * F, 1.0f, seed + 2);
    float *g = guarded(n, NAN), *u = guarded(n, NAN), *d = guarded(n, NAN);
    float *rg = malloc(n * sizeof(float)), *ru = malloc(n * sizeof(float)),
          *rd = malloc(n * sizeof(float));
    ref_split(rg, ru, rd, wg, wu, wd, E, G, F, C);
    LAB_CALL(lab_split_experts(g, u, d, wg, wu, wd, E, G, F, C));
    EXPECT_STACK(g, rg, E, Fe, C, 0, "e_gate", what);
    EXPECT_STACK(u, ru, E, Fe, C, 0, "e_up", what);
    EXPECT_STACK(d, rd, E, C, Fe, 0, "e_down", what);
    free(wg), free(wu), free(wd), free(g), free(u), free(d), free(rg), free(ru), free(rd);
}

START_TEST(split_hand_checked) {
    /* F = 4, G = 2, E = 2, C = 1: expert 0 takes units 0, 1 and expert 1 units 2, 3; down
     * (1, 4) = (1, 2, 3, 4) becomes (2, 4) and (6, 8) */
    static const float w_gate[4] = {10, 20, 30, 40}, w_up[4] = {-1, -2, -3, -4};
    static const float w_down[4] = {1, 2, 3, 4};
    static const float want_gate[4] = {10, 20, 30, 40}, want_up[4] = {-1, -2, -3, -4};
    static const float want_down[4] = {2, 4, 6, 8};
    float *g = guarded(4, NAN), *u = guarded(4, NAN), *d = guarded(4, NAN);
    LAB_CALL(lab_split_experts(g, u, d, w_gate, w_up, w_down, 2, 2, 4, 1));
    const char *what = "F = 4 split in G = 2 slices for E = 2 experts, down times G";
    EXPECT_STACK(g, want_gate, 2, 2, 1, 0, "e_gate", what);
    EXPECT_STACK(u, want_up, 2, 2, 1, 0, "e_up", what);
    EXPECT_STACK(d, want_down, 2, 1, 2, 0, "e_down", what);
    free(g), free(u), free(d);
}
END_TEST

START_TEST(split_random_shapes) {
    expect_split(4, 4, 16, 6, 500, "E = 4, G = 4, F = 16, C = 6 (one slice each)");
    expect_split(6, 3, 12, 5, 510, "E = 6, G = 3, F = 12, C = 5 (expert e takes slice e % 3)");
    expect_split(8, 2, 10, 7, 520, "E = 8, G = 2, F = 10, C = 7 (expert e takes slice e % 2)");
    expect_split(3, 1, 9, 4, 530, "E = 3, G = 1: whole copies, down times 1");
}
END_TEST

START_TEST(split_preserves_the_model_at_uniform_routing) {
    /* Dense F = 12; 4 experts of Fe = 6 (G = 2, each slice twice), top-4 of 4 with a zero
     * router: every gate weight is 1/4, and sum_e (1/4) * 2 * slice_(e % 2)(x) = FFN(x). */
    Config cd, cm;
    tiny_config(&cd, 0, 2, 0);
    tiny_config(&cm, 4, 4, 6);
    Model dense, moe;
    model_init(&dense, &cd, MB, MT);
    model_init(&moe, &cm, MB, MT);
    copy_shared_tensors(&moe, &dense);
    for (int l = 0; l < cm.n_layer; l++) {
        const LayerView *d = &dense.w.layers[l];
        LayerView *m = &moe.w.layers[l];
        memset(m->router, 0, (size_t)cm.num_experts * cm.d_model * sizeof(float));
        LAB_CALL(lab_split_experts(m->e_gate, m->e_up, m->e_down, d->w_gate, d->w_up, d->w_down,
                                   cm.num_experts, 2, cd.d_ff, cm.d_model));
    }
    float want = batch_loss(&dense), got = batch_loss(&moe);
    expect_close(got, want, TOL_F32_ATOL, TOL_F32_RTOL,
                 "the fine-grained model's loss (4 experts of 6 units from F = 12, G = 2, every "
                 "gate weight 1/4) against its dense parent's loss");
    model_free(&dense);
    model_free(&moe);
}
END_TEST

/* ---- suite ------------------------------------------------------------------------------- */

static Suite *upcycle_lab_suite(void) {
    Suite *s = suite_create("lab 04: upcycling");
    TCase *t1 = tcase_create("task1_copy");
    tcase_add_test(t1, copy_hand_checked);
    tcase_add_test(t1, copy_random_shapes);
    tcase_add_test(t1, copy_preserves_the_model);
    suite_add_tcase(s, t1);
    TCase *t2 = tcase_create("task2_stats");
    tcase_add_test(t2, stats_hand_computed);
    tcase_add_test(t2, stats_equal_values);
    tcase_add_test(t2, stats_large_mean_tiny_spread);
    tcase_add_test(t2, stats_random_matrices);
    suite_add_tcase(s, t2);
    TCase *t3 = tcase_create("task3_choose");
    tcase_add_test(t3, choose_readme_example);
    tcase_add_test(t3, choose_against_reference);
    tcase_add_test(t3, choose_none_and_all);
    suite_add_tcase(s, t3);
    TCase *t4 = tcase_create("task4_drop");
    tcase_add_test(t4, drop_readme_example);
    tcase_add_test(t4, drop_random_units);
    tcase_add_test(t4, drop_none_and_all);
    suite_add_tcase(s, t4);
    TCase *t5 = tcase_create("task5_split");
    tcase_add_test(t5, split_hand_checked);
    tcase_add_test(t5, split_random_shapes);
    tcase_add_test(t5, split_preserves_the_model_at_uniform_routing);
    suite_add_tcase(s, t5);
    return s;
}

int main(void) {
    static const LabTask tasks[] = {
        LAB_TASK("task1_copy", lab_copy_experts, 2), LAB_TASK("task2_stats", lab_stats, 2),
        LAB_TASK("task3_choose", lab_choose_units, 2), LAB_TASK("task4_drop", lab_drop_units, 2),
        LAB_TASK("task5_split", lab_split_experts, 2)};
    return lab_main(upcycle_lab_suite(), "lab 04: upcycling", tasks, 5);
}
