/*
 * grader.c: the automatic grader of lab 05 (a stable residual block). One Check TCase per task:
 *
 *   task1_rmsnorm            lab_rmsnorm_forward    hand-computed rows, eps (a row of zeros, a
 *                                                   row of 1e-3), rows of 1e20 (squares
 *                                                   overflow float), the engine's rmsnorm
 *   task2_rmsnorm_backward   lab_rmsnorm_backward   the engine's, dx written and dw added to,
 *                                                   finite differences in double
 *   task3_sandwich_forward   lab_sandwich_forward,  W = 0 (out = x), the engine's ops, the
 *                            lab_dssn_gain          post norm bounding the branch, c / sqrt(L)
 *   task4_sandwich_backward  lab_sandwich_backward  W = 0 (dx = dout), the engine's ops, dx
 *                                                   written and dW, dw_pre, dw_post added to,
 *                                                   finite differences in double
 *   task5_z_loss             lab_z_loss             hand-computed rows, logits of +-100 and
 *                                                   +-1000, dlogits added to, the engine's
 *                                                   z-loss and router gradient, finite
 *                                                   differences in double
 *
 * Every task is graded on its own: its inputs come from the grader and the engine (src/nn/ops.h,
 * src/moe/moe_ops.h, linked from libmoe.a), never from the student's other tasks, so one
 * unfinished task fails only itself. The finite differences take a double-precision forward
 * pass written here (the same math as the engine's, without float round-off), so a step of
 * 1e-3 measures the gradient to about six digits. Comparisons use the project's one tolerance
 * rule (tests/testutil.h): |got - want| <= atol + rtol * |want|.
 *
 * Run through labs/Makefile: make -C labs grade LAB=05-stability [TASK=task1_rmsnorm].
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lab.h"
#include "lab_fixture.h"
#include "lab_guard.h"
#include "moe/moe_ops.h"
#include "nn/ops.h"
#include "stability_lab.h"

/* Weak: a function missing from the student's file is NULL, and fails its task alone (lab_main)
 * instead of the link. */
#pragma weak lab_rmsnorm_forward
#pragma weak lab_rmsnorm_backward
#pragma weak lab_sandwich_forward
#pragma weak lab_dssn_gain
#pragma weak lab_sandwich_backward
#pragma weak lab_z_loss

/* ---- helpers --------------------------------------------------------------------------------- */

/* The checks below are macros around functions that write the failure message: Check reports
 * the line of the failing assertion, and a student should land on the test, not the helper. */
#define MSG_LEN 640

/* The largest shapes the tests use: every buffer is a fixed array on the stack. */
enum { MAXN = 17, MAXC = 33, MAXE = 8, MAXNC = MAXN * MAXC, MAXCC = MAXC * MAXC };

/* the shapes of the random tests: N = 1 and odd C among them */
typedef struct {
    int N, C;
} Shape;

/* ---- double-precision forward passes, for the finite differences ------------------------------
 */

/* y (N, C) = rmsnorm(x; w) in double */
static void rms_d(double *y, const double *x, const float *w, int N, int C) {
    for (int n = 0; n < N; n++) {
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += x[n * C + c] * x[n * C + c];
        double r = 1.0 / sqrt(ss / C + (double)RMSNORM_EPS);
        for (int c = 0; c < C; c++) y[n * C + c] = x[n * C + c] * r * w[c];
    }
}

/* L = sum dy * rmsnorm(x; w) */
typedef struct {
    int N, C;
    float *x, *w, *dy;
} RmsCtx;

static double rms_loss(void *vc) {
    RmsCtx *c = vc;
    double x[MAXNC] = {0}, y[MAXNC], L = 0.0;
    for (int i = 0; i < c->N * c->C; i++) x[i] = c->x[i];
    rms_d(y, x, c->w, c->N, c->C);
    for (int i = 0; i < c->N * c->C; i++) L += c->dy[i] * y[i];
    return L;
}

/* L = sum dout * (x + rmsnorm(rmsnorm(x; w_pre) W^T; w_post)) */
typedef struct {
    int N, C;
    float *x, *W, *w_pre, *w_post, *dout;
} SandwichCtx;

static double sandwich_loss(void *vc) {
    SandwichCtx *c = vc;
    const int N = c->N, C = c->C;
    double x[MAXNC] = {0}, u[MAXNC], h[MAXNC] = {0}, v[MAXNC], L = 0.0;
    for (int i = 0; i < N * C; i++) x[i] = c->x[i];
    rms_d(u, x, c->w_pre, N, C);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < C; o++) {
            double acc = 0.0;
            for (int i = 0; i < C; i++) acc += u[n * C + i] * c->W[o * C + i];
            h[n * C + o] = acc;
        }
    rms_d(v, h, c->w_post, N, C);
    for (int i = 0; i < N * C; i++) L += c->dout[i] * (x[i] + v[i]);
    return L;
}

/* L = coef * (1/N) sum_n lse_n^2 */
typedef struct {
    int N, E;
    float coef, *logits;
} ZCtx;

static double z_loss_d(void *vc) {
    ZCtx *c = vc;
    double z = 0.0;
    for (int n = 0; n < c->N; n++) {
        const float *l = c->logits + n * c->E;
        double m = l[0], s = 0.0;
        for (int e = 1; e < c->E; e++) m = l[e] > m ? l[e] : m;
        for (int e = 0; e < c->E; e++) s += exp(l[e] - m);
        double lse = m + log(s);
        z += lse * lse;
    }
    return c->coef * z / c->N;
}

/* ---- task 1: RMSNorm forward ------------------------------------------------------------------
 */

START_TEST(rmsnorm_hand_computed) {
    /* row 0: mean(x^2) = 4, r = 1 / sqrt(4 + 1e-5) = 0.49999938
     * row 1: mean(x^2) = 30 / 4 = 7.5, r = 1 / sqrt(7.5 + 1e-5) = 0.36514813
     * y = x * r * w with w = (1, 0.5, 2, -1) */
    enum { N = 2, C = 4 };
    const float x[N * C] = {2, -2, 2, -2, 1, 2, 3, 4}, w[C] = {1.0f, 0.5f, 2.0f, -1.0f};
    const float r0 = 0.49999938f, r1 = 0.36514813f;
    const float want_y[N * C] = {2 * r0, -r0, 4 * r0, 2 * r0, r1, r1, 6 * r1, -4 * r1};
    const float want_r[N] = {r0, r1};
    float y[N * C + LAB_GUARD_N], rstd[N + LAB_GUARD_N];
    lab_fill_guarded(y, N * C, NAN);
    lab_fill_guarded(rstd, N, NAN);
    LAB_CALL(lab_rmsnorm_forward(y, rstd, x, w, N, C));
    EXPECT_TABLE(rstd, want_r, 1, N, "rstd",
                 "rows (2, -2, 2, -2) and (1, 2, 3, 4): r = 1 / sqrt(MEAN of the squares + eps)");
    EXPECT_TABLE(y, want_y, N, C, "y", "rows (2, -2, 2, -2) and (1, 2, 3, 4), w = (1, 0.5, 2, -1)");
}
END_TEST

START_TEST(rmsnorm_eps) {
    /* eps keeps r finite for a row of zeros (r = 1 / sqrt(1e-5) = 316.22777, y = 0), and
     * matters for small rows: x = 1e-3 gives mean(x^2) = 1e-6, r = 1 / sqrt(1.1e-5) = 301.51134,
     * not 1000 */
    enum { N = 2, C = 3 };
    const float x[N * C] = {0, 0, 0, 1e-3f, 1e-3f, 1e-3f}, w[C] = {1.0f, -2.0f, 0.5f};
    const float r1 = 301.51134f, want_r[N] = {316.22777f, r1};
    const float want_y[N * C] = {0, 0, 0, 1e-3f * r1, -2e-3f * r1, 0.5e-3f * r1};
    float y[N * C + LAB_GUARD_N], rstd[N + LAB_GUARD_N];
    lab_fill_guarded(y, N * C, NAN);
    lab_fill_guarded(rstd, N, NAN);
    LAB_CALL(lab_rmsnorm_forward(y, rstd, x, w, N, C));
    EXPECT_TABLE(rstd, want_r, 1, N, "rstd",
                 "a row of zeros and a row of 1e-3: r = 1 / sqrt(mean(x^2) + eps), eps = 1e-5");
    EXPECT_TABLE(y, want_y, N, C, "y", "a row of zeros and a row of 1e-3 (eps = 1e-5)");
}
END_TEST

START_TEST(rmsnorm_huge_rows) {
    /* a diverging model's activations: (3e19)^2 = 9e38 is past float's largest number (3.4e38),
     * so squares summed in float are inf and r = 0. In double: mean(x^2) = 1.25e39,
     * r = 2.8284271e-20 and y = (0.8485, -1.1314) * w */
    enum { N = 2, C = 2 };
    const float x[N * C] = {3e19f, -4e19f, -1e20f, 1e20f}, w[C] = {1.0f, 0.5f};
    float y[N * C + LAB_GUARD_N], rstd[N + LAB_GUARD_N], want_y[N * C], want_r[N];
    rmsnorm_forward(want_y, want_r, x, w, N, C);
    lab_fill_guarded(y, N * C, NAN);
    lab_fill_guarded(rstd, N, NAN);
    LAB_CALL(lab_rmsnorm_forward(y, rstd, x, w, N, C));
    EXPECT_TABLE(y, want_y, N, C, "y",
                 "rows of 3e19 to 1e20, whose squares overflow float: sum the squares in double");
    EXPECT_TABLE(rstd, want_r, 1, N, "rstd", "rows of 3e19 to 1e20 (sum the squares in double)");
}
END_TEST

START_TEST(rmsnorm_matches_engine) {
    static const Shape shapes[] = {{1, 1}, {1, 7}, {5, 16}, {17, 33}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s].N, C = shapes[s].C;
        float x[MAXNC], w[MAXC], y[MAXNC + LAB_GUARD_N], rstd[MAXN + LAB_GUARD_N], want_y[MAXNC],
            want_r[MAXN];
        char what[128];
        fill_uniform(x, (size_t)N * C, 3.0f, 100 + s);
        lab_fill_gain(w, C, 110 + s);
        rmsnorm_forward(want_y, want_r, x, w, N, C);
        lab_fill_guarded(y, (size_t)N * C, NAN);
        lab_fill_guarded(rstd, (size_t)N, NAN);
        LAB_CALL(lab_rmsnorm_forward(y, rstd, x, w, N, C));
        snprintf(what, sizeof what, "random rows (N = %d, C = %d) against the engine", N, C);
        EXPECT_TABLE(y, want_y, N, C, "y", what);
        EXPECT_TABLE(rstd, want_r, 1, N, "rstd", what);
    }
}
END_TEST

/* ---- task 2: RMSNorm backward -----------------------------------------------------------------
 */

START_TEST(rmsnorm_backward_matches_engine) {
    /* dw starts from random values (the gradients of earlier micro-batches) in both */
    static const Shape shapes[] = {{1, 7}, {6, 16}, {13, 33}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s].N, C = shapes[s].C;
        float x[MAXNC], w[MAXC], y[MAXNC], rstd[MAXN], dy[MAXNC];
        float dx[MAXNC + LAB_GUARD_N], dw[MAXC + LAB_GUARD_N], want_dx[MAXNC], want_dw[MAXC];
        char what[128];
        fill_uniform(x, (size_t)N * C, 2.0f, 200 + s);
        lab_fill_gain(w, C, 210 + s);
        fill_uniform(dy, (size_t)N * C, 1.0f, 220 + s);
        rmsnorm_forward(y, rstd, x, w, N, C);
        fill_uniform(want_dw, (size_t)C, 0.3f, 230 + s);
        memcpy(dw, want_dw, (size_t)C * sizeof(float));
        lab_add_guards(dw, (size_t)C);
        rmsnorm_backward(want_dx, want_dw, dy, x, w, rstd, N, C);
        lab_fill_guarded(dx, (size_t)N * C, 1000.0f);
        LAB_CALL(lab_rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C));
        snprintf(what, sizeof what, "random rows (N = %d, C = %d) against the engine", N, C);
        EXPECT_TABLE(dx, want_dx, N, C, "dx", what);
        EXPECT_TABLE(dw, want_dw, 1, C, "dw", what);
    }
}
END_TEST

START_TEST(rmsnorm_backward_dx_written_dw_added) {
    /* two calls into the same buffers: dx the same both times (written), dw grown by the
     * gradient twice (added to, the engine's accumulation rule) */
    enum { N = 4, C = 5 };
    float x[N * C], w[C], y[N * C], rstd[N], dy[N * C], grad[N * C], grad_dw[C] = {0};
    float dx[N * C + LAB_GUARD_N], dw[C + LAB_GUARD_N], want_dw[C];
    fill_uniform(x, N * C, 2.0f, 240);
    lab_fill_gain(w, C, 241);
    fill_uniform(dy, N * C, 1.0f, 242);
    rmsnorm_forward(y, rstd, x, w, N, C);
    rmsnorm_backward(grad, grad_dw, dy, x, w, rstd, N, C);
    lab_fill_guarded(dw, C, 10.0f);
    lab_fill_guarded(dx, N * C, 1000.0f);
    LAB_CALL(lab_rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C));
    for (int c = 0; c < C; c++) want_dw[c] = 10.0f + grad_dw[c];
    EXPECT_TABLE(dw, want_dw, 1, C, "dw",
                 "dw held 10 before the call: it must hold 10 + the gradient after it (add to dw, "
                 "+=, do not write it)");
    LAB_CALL(lab_rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C));
    for (int c = 0; c < C; c++) want_dw[c] = 10.0f + 2.0f * grad_dw[c];
    EXPECT_TABLE(dw, want_dw, 1, C, "dw", "a second call must add the gradient to dw again");
    EXPECT_TABLE(dx, grad, N, C, "dx",
                 "a second call into the same dx must give the same dx: write it (=), do not add");
}
END_TEST

START_TEST(rmsnorm_backward_finite_differences) {
    /* L = sum dy * y(x, w); central differences of every x and w in double */
    static const Shape shapes[] = {{1, 5}, {3, 7}, {2, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s].N, C = shapes[s].C;
        float x[MAXNC], w[MAXC], y[MAXNC], rstd[MAXN], dy[MAXNC], dx[MAXNC], dw[MAXC] = {0};
        char what[160];
        fill_uniform(x, (size_t)N * C, 2.0f, 250 + s);
        lab_fill_gain(w, C, 260 + s);
        fill_uniform(dy, (size_t)N * C, 1.0f, 270 + s);
        rmsnorm_forward(y, rstd, x, w, N, C);
        LAB_CALL(lab_rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C));
        RmsCtx c = {N, C, x, w, dy};
        snprintf(what, sizeof what,
                 "dx against finite differences of sum(dy * y) (N = %d, C = %d; element = n * C "
                 "+ c)",
                 N, C);
        gradcheck(rms_loss, &c, x, dx, (size_t)N * C, 1e-3f, (size_t)N * C, what);
        snprintf(what, sizeof what,
                 "dw (from 0) against finite differences of sum(dy * y) (N = %d, C = %d)", N, C);
        gradcheck(rms_loss, &c, w, dw, (size_t)C, 1e-3f, (size_t)C, what);
    }
}
END_TEST

/* ---- task 3: sandwich forward -----------------------------------------------------------------
 */

/* the engine's sandwich: acts and out (N, C) */
static void engine_sandwich(float *out, float *u, float *r_pre, float *h, float *r_post,
                            const float *x, const float *W, const float *w_pre, const float *w_post,
                            int N, int C) {
    rmsnorm_forward(u, r_pre, x, w_pre, N, C);
    matmul_forward(h, u, W, N, C, C);
    rmsnorm_forward(out, r_post, h, w_post, N, C);
    for (int i = 0; i < N * C; i++) out[i] += x[i];
}

/* guarded buffers for the student's forward */
typedef struct {
    float out[MAXNC + LAB_GUARD_N], u[MAXNC + LAB_GUARD_N], h[MAXNC + LAB_GUARD_N];
    float r_pre[MAXN + LAB_GUARD_N], r_post[MAXN + LAB_GUARD_N];
    LabSandwichActs acts;
} Fwd;

static void fwd_init(Fwd *f, int N, int C) {
    lab_fill_guarded(f->out, (size_t)N * C, NAN);
    lab_fill_guarded(f->u, (size_t)N * C, NAN);
    lab_fill_guarded(f->h, (size_t)N * C, NAN);
    lab_fill_guarded(f->r_pre, (size_t)N, NAN);
    lab_fill_guarded(f->r_post, (size_t)N, NAN);
    f->acts = (LabSandwichActs){f->u, f->r_pre, f->h, f->r_post};
}

START_TEST(sandwich_zero_weights) {
    /* W = 0: h = 0, the post norm of a zero row is 0 (r_post = 1 / sqrt(eps) = 316.22777), and
     * the block passes its input through unchanged: out = x, the residual connection */
    enum { N = 3, C = 5 };
    float x[N * C], W[C * C] = {0}, w_pre[C], w_post[C], zero[N * C] = {0};
    const float want_rp[N] = {316.22777f, 316.22777f, 316.22777f};
    Fwd f;
    fill_uniform(x, N * C, 2.0f, 300);
    lab_fill_gain(w_pre, C, 301);
    lab_fill_gain(w_post, C, 302);
    fwd_init(&f, N, C);
    LAB_CALL(lab_sandwich_forward(f.out, &f.acts, x, W, w_pre, w_post, N, C));
    EXPECT_TABLE(f.h, zero, N, C, "acts->h", "W = 0: the sublayer's output h = u W^T is 0");
    EXPECT_TABLE(f.r_post, want_rp, 1, N, "acts->r_post",
                 "W = 0: the post norm's rstd of a zero row is 1 / sqrt(eps)");
    EXPECT_TABLE(f.out, x, N, C, "out",
                 "W = 0: the branch adds 0, so out must equal x (out = x + branch: the residual "
                 "connection)");
}
END_TEST

START_TEST(sandwich_matches_engine) {
    static const Shape shapes[] = {{1, 3}, {4, 8}, {9, 17}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s].N, C = shapes[s].C;
        float x[MAXNC], W[MAXCC], w_pre[MAXC], w_post[MAXC];
        float out[MAXNC], u[MAXNC], h[MAXNC], r_pre[MAXN], r_post[MAXN];
        Fwd f;
        char what[128];
        fill_uniform(x, (size_t)N * C, 2.0f, 310 + s);
        fill_uniform(W, (size_t)C * C, 1.0f / sqrtf((float)C), 320 + s);
        lab_fill_gain(w_pre, C, 330 + s);
        lab_fill_gain(w_post, C, 340 + s);
        engine_sandwich(out, u, r_pre, h, r_post, x, W, w_pre, w_post, N, C);
        fwd_init(&f, N, C);
        LAB_CALL(lab_sandwich_forward(f.out, &f.acts, x, W, w_pre, w_post, N, C));
        snprintf(what, sizeof what, "random block (N = %d, C = %d) against the engine", N, C);
        EXPECT_TABLE(f.u, u, N, C, "acts->u (the pre norm's output)", what);
        EXPECT_TABLE(f.r_pre, r_pre, 1, N, "acts->r_pre", what);
        EXPECT_TABLE(f.h, h, N, C, "acts->h (h = u W^T)", what);
        EXPECT_TABLE(f.r_post, r_post, 1, N, "acts->r_post", what);
        EXPECT_TABLE(f.out, out, N, C, "out", what);
    }
}
END_TEST

START_TEST(sandwich_post_norm_bounds_branch) {
    /* every row of the branch's output out - x is normalised and scaled by w_post: with every
     * gain g its RMS is g (to 1e-6 here), whether W is of scale 1 or 1000 */
    enum { N = 6, C = 12 };
    const float g = 0.108f; /* 0.432 / sqrt(16) */
    float x[N * C], W[C * C], w_pre[C], w_post[C], rms[N + LAB_GUARD_N], want[N];
    for (int c = 0; c < C; c++) w_post[c] = g;
    for (int n = 0; n < N; n++) want[n] = g;
    lab_add_guards(rms, N);
    fill_uniform(x, N * C, 1.0f, 350);
    lab_fill_gain(w_pre, C, 351);
    static const float scales[] = {1.0f, 1000.0f};
    for (int k = 0; k < 2; k++) {
        Fwd f;
        char what[160];
        fill_uniform(W, C * C, scales[k], 352 + k);
        fwd_init(&f, N, C);
        LAB_CALL(lab_sandwich_forward(f.out, &f.acts, x, W, w_pre, w_post, N, C));
        for (int n = 0; n < N; n++) {
            double ss = 0.0;
            for (int c = 0; c < C; c++) {
                double b = (double)f.out[n * C + c] - x[n * C + c];
                ss += b * b;
            }
            rms[n] = (float)sqrt(ss / C);
        }
        snprintf(what, sizeof what,
                 "W of scale %g, w_post = %g: the RMS of each row of the branch out - x must be "
                 "w_post",
                 (double)scales[k], (double)g);
        EXPECT_TABLE(rms, want, 1, N, "RMS of row", what);
    }
}
END_TEST

START_TEST(dssn_gain) {
    /* c / sqrt(L) */
    static const struct {
        float c;
        int L;
        float want;
    } cases[] = {{0.283f, 1, 0.283f},
                 {0.283f, 64, 0.035375f},
                 {0.432f, 16, 0.108f},
                 {0.432f, 94, 0.044557398f},
                 {1.0f, 2, 0.70710678f}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float got = 0.0f;
        char what[96];
        LAB_CALL(got = lab_dssn_gain(cases[i].c, cases[i].L));
        snprintf(what, sizeof what, "lab_dssn_gain(%g, %d) = c / sqrt(L)", (double)cases[i].c,
                 cases[i].L);
        EXPECT_VALUE(got, cases[i].want, what);
    }
}
END_TEST

/* ---- task 4: sandwich backward ----------------------------------------------------------------
 */

/* the engine's backward of the sandwich: dx written, dW, dw_pre, dw_post added to */
static void engine_sandwich_backward(float *dx, float *dW, float *dw_pre, float *dw_post,
                                     const float *dout, const float *u, const float *r_pre,
                                     const float *h, const float *r_post, const float *x,
                                     const float *W, const float *w_pre, const float *w_post, int N,
                                     int C) {
    float dh[MAXNC], du[MAXNC];
    rmsnorm_backward(dh, dw_post, dout, h, w_post, r_post, N, C);
    matmul_backward(du, dW, dh, u, W, N, C, C);
    rmsnorm_backward(dx, dw_pre, du, x, w_pre, r_pre, N, C);
    for (int i = 0; i < N * C; i++) dx[i] += dout[i];
}

/* a block's inputs and the engine's forward: acts ready for the student's backward */
typedef struct {
    int N, C;
    float x[MAXNC], W[MAXCC], w_pre[MAXC], w_post[MAXC], dout[MAXNC];
    float out[MAXNC], u[MAXNC], h[MAXNC], r_pre[MAXN], r_post[MAXN];
    LabSandwichActs acts;
} Block;

static void block_init(Block *b, int N, int C, float w_scale, unsigned long long seed) {
    b->N = N;
    b->C = C;
    fill_uniform(b->x, (size_t)N * C, 2.0f, seed);
    fill_uniform(b->W, (size_t)C * C, w_scale / sqrtf((float)C), seed + 1);
    lab_fill_gain(b->w_pre, C, seed + 2);
    lab_fill_gain(b->w_post, C, seed + 3);
    fill_uniform(b->dout, (size_t)N * C, 1.0f, seed + 4);
    engine_sandwich(b->out, b->u, b->r_pre, b->h, b->r_post, b->x, b->W, b->w_pre, b->w_post, N, C);
    b->acts = (LabSandwichActs){b->u, b->r_pre, b->h, b->r_post};
}

START_TEST(sandwich_backward_zero_weights) {
    /* W = 0: the branch's output does not depend on x, so dx is the residual path alone:
     * dx = dout. (h = 0, so dw_post gets 0 too; dW does get a gradient.) */
    enum { N = 3, C = 5 };
    Block b;
    block_init(&b, N, C, 0.0f, 400);
    float dx[N * C + LAB_GUARD_N], dW[C * C + LAB_GUARD_N], dw_pre[C + LAB_GUARD_N],
        dw_post[C + LAB_GUARD_N];
    const float zero[C] = {0};
    lab_fill_guarded(dx, N * C, 1000.0f);
    lab_fill_guarded(dW, C * C, 0.0f);
    lab_fill_guarded(dw_pre, C, 0.0f);
    lab_fill_guarded(dw_post, C, 0.0f);
    LAB_CALL(lab_sandwich_backward(dx, dW, dw_pre, dw_post, b.dout, &b.acts, b.x, b.W, b.w_pre,
                                   b.w_post, N, C));
    EXPECT_TABLE(dx, b.dout, N, C, "dx",
                 "W = 0: the branch passes no gradient to x, so dx must be dout (out = x + "
                 "branch: the residual path carries dout to dx unchanged)");
    EXPECT_TABLE(dw_pre, zero, 1, C, "dw_pre", "W = 0: nothing reaches the pre norm");
    EXPECT_TABLE(dw_post, zero, 1, C, "dw_post", "W = 0: h = 0, so dw_post gets 0");
}
END_TEST

START_TEST(sandwich_backward_matches_engine) {
    /* dW, dw_pre, dw_post start from random values (earlier micro-batches) in both */
    static const Shape shapes[] = {{1, 3}, {4, 8}, {7, 13}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s].N, C = shapes[s].C;
        Block b;
        float dx[MAXNC + LAB_GUARD_N], dW[MAXCC + LAB_GUARD_N], dw_pre[MAXC + LAB_GUARD_N],
            dw_post[MAXC + LAB_GUARD_N];
        float want_dx[MAXNC], want_dW[MAXCC], want_pre[MAXC], want_post[MAXC];
        char what[128];
        block_init(&b, N, C, 1.0f, 410 + 10 * s);
        fill_uniform(want_dW, (size_t)C * C, 0.3f, 415 + 10 * s);
        fill_uniform(want_pre, (size_t)C, 0.3f, 416 + 10 * s);
        fill_uniform(want_post, (size_t)C, 0.3f, 417 + 10 * s);
        memcpy(dW, want_dW, (size_t)C * C * sizeof(float));
        memcpy(dw_pre, want_pre, (size_t)C * sizeof(float));
        memcpy(dw_post, want_post, (size_t)C * sizeof(float));
        lab_add_guards(dW, (size_t)C * C);
        lab_add_guards(dw_pre, (size_t)C);
        lab_add_guards(dw_post, (size_t)C);
        engine_sandwich_backward(want_dx, want_dW, want_pre, want_post, b.dout, b.u, b.r_pre, b.h,
                                 b.r_post, b.x, b.W, b.w_pre, b.w_post, N, C);
        lab_fill_guarded(dx, (size_t)N * C, 1000.0f);
        LAB_CALL(lab_sandwich_backward(dx, dW, dw_pre, dw_post, b.dout, &b.acts, b.x, b.W, b.w_pre,
                                       b.w_post, N, C));
        snprintf(what, sizeof what, "random block (N = %d, C = %d) against the engine", N, C);
        EXPECT_TABLE(dx, want_dx, N, C, "dx", what);
        EXPECT_TABLE(dW, want_dW, C, C, "dW", what);
        EXPECT_TABLE(dw_pre, want_pre, 1, C, "dw_pre", what);
        EXPECT_TABLE(dw_post, want_post, 1, C, "dw_post", what);
    }
}
END_TEST

START_TEST(sandwich_backward_written_and_added) {
    /* two calls into the same buffers: dx the same both times, each parameter gradient grown by
     * its gradient twice */
    enum { N = 3, C = 6 };
    Block b;
    float dx[N * C + LAB_GUARD_N], dW[C * C + LAB_GUARD_N], dw_pre[C + LAB_GUARD_N],
        dw_post[C + LAB_GUARD_N];
    float g_dx[N * C], g_dW[C * C] = {0}, g_pre[C] = {0}, g_post[C] = {0};
    float want_dW[C * C], want_pre[C], want_post[C];
    block_init(&b, N, C, 1.0f, 450);
    engine_sandwich_backward(g_dx, g_dW, g_pre, g_post, b.dout, b.u, b.r_pre, b.h, b.r_post, b.x,
                             b.W, b.w_pre, b.w_post, N, C);
    lab_fill_guarded(dx, N * C, 1000.0f);
    lab_fill_guarded(dW, C * C, 1.0f);
    lab_fill_guarded(dw_pre, C, 2.0f);
    lab_fill_guarded(dw_post, C, 3.0f);
    for (int k = 1; k <= 2; k++) {
        char what[160];
        LAB_CALL(lab_sandwich_backward(dx, dW, dw_pre, dw_post, b.dout, &b.acts, b.x, b.W, b.w_pre,
                                       b.w_post, N, C));
        for (int i = 0; i < C * C; i++) want_dW[i] = 1.0f + (float)k * g_dW[i];
        for (int c = 0; c < C; c++) {
            want_pre[c] = 2.0f + (float)k * g_pre[c];
            want_post[c] = 3.0f + (float)k * g_post[c];
        }
        snprintf(what, sizeof what,
                 "after call %d: dW, dw_pre and dw_post started at 1, 2 and 3 and must grow by "
                 "their gradient at every call (add, +=)",
                 k);
        EXPECT_TABLE(dW, want_dW, C, C, "dW", what);
        EXPECT_TABLE(dw_pre, want_pre, 1, C, "dw_pre", what);
        EXPECT_TABLE(dw_post, want_post, 1, C, "dw_post", what);
        snprintf(what, sizeof what,
                 "after call %d into the same dx: dx must be the gradient (write it, =)", k);
        EXPECT_TABLE(dx, g_dx, N, C, "dx", what);
    }
}
END_TEST

START_TEST(sandwich_backward_finite_differences) {
    /* L = sum dout * out(x, W, w_pre, w_post); central differences in double of every input */
    static const Shape shapes[] = {{1, 5}, {3, 7}, {2, 4}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s].N, C = shapes[s].C;
        Block b;
        float dx[MAXNC], dW[MAXCC] = {0}, dw_pre[MAXC] = {0}, dw_post[MAXC] = {0};
        char what[160];
        block_init(&b, N, C, 1.0f, 470 + 10 * s);
        LAB_CALL(lab_sandwich_backward(dx, dW, dw_pre, dw_post, b.dout, &b.acts, b.x, b.W, b.w_pre,
                                       b.w_post, N, C));
        SandwichCtx c = {N, C, b.x, b.W, b.w_pre, b.w_post, b.dout};
#define SANDWICH_FD(param, grad, n, name)                                                          \
    snprintf(what, sizeof what,                                                                    \
             "%s against finite differences of sum(dout * out) (N = %d, C = %d; element = row * "  \
             "C + column)",                                                                        \
             name, N, C);                                                                          \
    gradcheck(sandwich_loss, &c, param, grad, n, 1e-3f, n, what)
        SANDWICH_FD(b.x, dx, (size_t)N * C, "dx");
        SANDWICH_FD(b.W, dW, (size_t)C * C, "dW (from 0)");
        SANDWICH_FD(b.w_pre, dw_pre, (size_t)C, "dw_pre (from 0)");
        SANDWICH_FD(b.w_post, dw_post, (size_t)C, "dw_post (from 0)");
#undef SANDWICH_FD
    }
}
END_TEST

/* ---- task 5: router z-loss --------------------------------------------------------------------
 */

/* the engine's z-loss and coef * dz/dlogits (written) for logits (N, E): its router gradient
 * with the gate weights' and the balance loss's terms off */
static float engine_z_loss(float *dlogits, const float *logits, int N, int E, float coef) {
    float scores[MAXN * MAXE], lse[MAXN], w[MAXN], dw[MAXN] = {0};
    int idx[MAXN];
    router_softmax_forward(scores, lse, logits, N, E);
    router_topk_forward(idx, w, scores, N, E, 1, 1);
    router_backward(dlogits, dw, scores, lse, idx, w, N, E, 1, 1, 0.0f, coef);
    return router_z_loss(lse, N);
}

START_TEST(z_loss_hand_computed) {
    /* row 0: (0, 0, 0, 0):           lse = ln 4 = 1.3862944,  p = 1/4 each
     * row 1: (ln 2, 0, ln 5, ln 2):  exp = (2, 1, 5, 2), lse = ln 10 = 2.3025851,
     *                                p = (0.2, 0.1, 0.5, 0.2)
     * z = (ln4^2 + ln10^2) / 2 = 3.6118551; with coef = 1 and N = 2, 2/N = 1: dl = lse * p */
    enum { N = 2, E = 4 };
    const float l2 = logf(2.0f), l5 = logf(5.0f), lse0 = 1.3862944f, lse1 = 2.3025851f;
    const float logits[N * E] = {0, 0, 0, 0, l2, 0, l5, l2};
    const float want[N * E] = {lse0 / 4,    lse0 / 4,    lse0 / 4,    lse0 / 4,
                               lse1 * 0.2f, lse1 * 0.1f, lse1 * 0.5f, lse1 * 0.2f};
    float dl[N * E + LAB_GUARD_N], z = 0.0f;
    lab_fill_guarded(dl, N * E, 0.0f);
    LAB_CALL(z = lab_z_loss(dl, logits, N, E, 1.0f));
    EXPECT_VALUE(z, 3.6118551f,
                 "z of rows (0, 0, 0, 0) and (ln 2, 0, ln 5, ln 2): (ln(4)^2 + ln(10)^2) / 2");
    EXPECT_TABLE(dl, want, N, E, "dlogits",
                 "dz/dlogits of rows (0, 0, 0, 0) and (ln 2, 0, ln 5, ln 2): (2/N) lse_n p[n,e]");
}
END_TEST

START_TEST(z_loss_huge_logits) {
    /* exp(100) is past float's range and exp(1000) past double's: lse = m + log sum exp(l - m)
     *   row 0: (100, 100, 100, 100)       lse = 100 + ln 4,   p = 1/4 each
     *   row 1: (1000, -1000, 1000, 1000)  lse = 1000 + ln 3,  p = (1/3, 0, 1/3, 1/3)
     *   row 2: (-1000, -1000, -1000, -1000)  lse = -1000 + ln 4 (a sum of underflowed exp()
     *          is 0, and log 0 = -inf, without the shift) */
    enum { N = 3, E = 4 };
    const float logits[N * E] = {100,  100,  100,   100,   1000,  -1000,
                                 1000, 1000, -1000, -1000, -1000, -1000};
    const double lse[N] = {100 + log(4.0), 1000 + log(3.0), -1000 + log(4.0)};
    const double p[N * E] = {0.25,    0.25,    0.25, 0.25, 1.0 / 3, 0,
                             1.0 / 3, 1.0 / 3, 0.25, 0.25, 0.25,    0.25};
    const float coef = 1e-3f;
    float want[N * E], dl[N * E + LAB_GUARD_N], z = 0.0f;
    double want_z = 0.0;
    for (int n = 0; n < N; n++) {
        want_z += lse[n] * lse[n] / N;
        for (int e = 0; e < E; e++)
            want[n * E + e] = (float)(coef * 2.0 / N * lse[n] * p[n * E + e]);
    }
    lab_fill_guarded(dl, N * E, 0.0f);
    LAB_CALL(z = lab_z_loss(dl, logits, N, E, coef));
    EXPECT_VALUE(z, (float)want_z,
                 "z of logits of 100 and +-1000 (compute lse as m + log sum exp(l - m), m = the "
                 "row's max)");
    EXPECT_TABLE(dl, want, N, E, "dlogits",
                 "dz/dlogits of logits of 100 and +-1000 (subtract the row's max before exp)");
}
END_TEST

START_TEST(z_loss_adds_to_dlogits) {
    /* dlogits already holds the router's other terms: the z-loss's term is added to them */
    enum { N = 5, E = 6 };
    float logits[N * E], before[N * E], grad[N * E], want[N * E], dl[N * E + LAB_GUARD_N];
    fill_uniform(logits, N * E, 3.0f, 500);
    fill_uniform(before, N * E, 0.5f, 501);
    engine_z_loss(grad, logits, N, E, 0.1f);
    for (int i = 0; i < N * E; i++) want[i] = before[i] + grad[i];
    memcpy(dl, before, sizeof before);
    lab_add_guards(dl, N * E);
    LAB_CALL(lab_z_loss(dl, logits, N, E, 0.1f));
    EXPECT_TABLE(dl, want, N, E, "dlogits",
                 "dlogits held the router's other terms: add the z-loss's gradient to them (+=), "
                 "do not write it");
}
END_TEST

START_TEST(z_loss_matches_engine) {
    static const struct {
        int N, E;
        float coef;
    } cases[] = {{1, 1, 1.0f}, {1, 5, 0.001f}, {16, 8, 0.001f}, {17, 7, 0.5f}};
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
        const int N = cases[s].N, E = cases[s].E;
        float logits[MAXN * MAXE], want[MAXN * MAXE], dl[MAXN * MAXE + LAB_GUARD_N], z = 0.0f;
        char what[128];
        fill_uniform(logits, (size_t)N * E, 4.0f, 510 + s);
        float want_z = engine_z_loss(want, logits, N, E, cases[s].coef);
        lab_fill_guarded(dl, (size_t)N * E, 0.0f);
        LAB_CALL(z = lab_z_loss(dl, logits, N, E, cases[s].coef));
        snprintf(what, sizeof what, "random logits (N = %d, E = %d, coef = %g) against the engine",
                 N, E, (double)cases[s].coef);
        EXPECT_VALUE(z, want_z, what);
        EXPECT_TABLE(dl, want, N, E, "dlogits", what);
    }
}
END_TEST

START_TEST(z_loss_finite_differences) {
    /* L = coef * z(logits); central differences in double of every logit */
    static const struct { int N, E; } cases[] = {{1, 6}, {3, 5}, {4, 1}};
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
        const int N = cases[s].N, E = cases[s].E;
        float logits[MAXN * MAXE], dl[MAXN * MAXE] = {0};
        char what[160];
        fill_uniform(logits, (size_t)N * E, 3.0f, 530 + s);
        LAB_CALL(lab_z_loss(dl, logits, N, E, 0.7f));
        ZCtx c = {N, E, 0.7f, logits};
        snprintf(what, sizeof what,
                 "dlogits (from 0) against finite differences of 0.7 * z (N = %d, E = %d; "
                 "element = n * E + e)",
                 N, E);
        gradcheck(z_loss_d, &c, logits, dl, (size_t)N * E, 1e-3f, (size_t)N * E, what);
    }
}
END_TEST

/* ---- suite ----------------------------------------------------------------------------------- */

static Suite *stability_lab_suite(void) {
    Suite *s = suite_create("lab 05: stability");
    TCase *t1 = tcase_create("task1_rmsnorm");
    tcase_add_test(t1, rmsnorm_hand_computed);
    tcase_add_test(t1, rmsnorm_eps);
    tcase_add_test(t1, rmsnorm_huge_rows);
    tcase_add_test(t1, rmsnorm_matches_engine);
    suite_add_tcase(s, t1);
    TCase *t2 = tcase_create("task2_rmsnorm_backward");
    tcase_add_test(t2, rmsnorm_backward_matches_engine);
    tcase_add_test(t2, rmsnorm_backward_dx_written_dw_added);
    tcase_add_test(t2, rmsnorm_backward_finite_differences);
    suite_add_tcase(s, t2);
    TCase *t3 = tcase_create("task3_sandwich_forward");
    tcase_add_test(t3, sandwich_zero_weights);
    tcase_add_test(t3, sandwich_matches_engine);
    tcase_add_test(t3, sandwich_post_norm_bounds_branch);
    tcase_add_test(t3, dssn_gain);
    suite_add_tcase(s, t3);
    TCase *t4 = tcase_create("task4_sandwich_backward");
    tcase_add_test(t4, sandwich_backward_zero_weights);
    tcase_add_test(t4, sandwich_backward_matches_engine);
    tcase_add_test(t4, sandwich_backward_written_and_added);
    tcase_add_test(t4, sandwich_backward_finite_differences);
    suite_add_tcase(s, t4);
    TCase *t5 = tcase_create("task5_z_loss");
    tcase_add_test(t5, z_loss_hand_computed);
    tcase_add_test(t5, z_loss_huge_logits);
    tcase_add_test(t5, z_loss_adds_to_dlogits);
    tcase_add_test(t5, z_loss_matches_engine);
    tcase_add_test(t5, z_loss_finite_differences);
    suite_add_tcase(s, t5);
    return s;
}

int main(void) {
    /* the student's header states the engine's eps as a number: they must agree */
    if (LAB_RMSNORM_EPS != RMSNORM_EPS) {
        fprintf(stderr,
                "grader: stability_lab.h's LAB_RMSNORM_EPS (%g) is not the engine's "
                "RMSNORM_EPS (%g, src/nn/ops.h): restore the header\n",
                (double)LAB_RMSNORM_EPS, (double)RMSNORM_EPS);
        return 2;
    }
    static const LabTask tasks[] = {LAB_TASK("task1_rmsnorm", lab_rmsnorm_forward, 2),
                                    LAB_TASK("task2_rmsnorm_backward", lab_rmsnorm_backward, 2),
                                    LAB_TASK("task3_sandwich_forward", lab_sandwich_forward, 2),
                                    LAB_TASK("task4_sandwich_backward", lab_sandwich_backward, 2),
                                    LAB_TASK("task5_z_loss", lab_z_loss, 2)};
    return lab_main(stability_lab_suite(), "lab 05: stability", tasks, 5);
}
