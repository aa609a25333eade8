/*
 * test_ops.c: the dense ops of src/nn/ops.h.
 *
 *   - every backward pass against central finite differences of L = sum(out * R), R a fixed
 *     random tensor (so every output element carries weight), accumulated in double;
 *   - the accumulation rule: parameter gradients add up over calls, activation gradients are
 *     overwritten (their buffers start full of NaN, so reading them would show);
 *   - forward values small enough to work out by hand;
 *   - the RoPE table: a table built for a longer context rotates exactly as a tight one;
 *   - nn_expf against exp in double.
 * Attention has its own file, test_attention.c.
 */
#include <math.h>
#include "base/omp_compat.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "backend/cpu/cpu.h"
#include "nn/exp.h"
#include "ops_util.h"

/* ---- matmul ---------------------------------------------------------------------------- */

typedef struct {
    const float *x, *W, *R; /* x (N, I), W (O, I), R (N, O) */
    float *y;               /* y (N, O) */
    int N, I, O;
} MatmulCtx;

static double matmul_loss(void *p) {
    MatmulCtx *c = p;
    matmul_forward(c->y, c->x, c->W, c->N, c->I, c->O);
    return weighted_sum(c->y, c->R, (size_t)c->N * c->O);
}

START_TEST(test_matmul_grad) {
    int N = 10, I = 8, O = 6;
    float *x = rand_floats((size_t)N * I, 1.0f, 1), *W = rand_floats((size_t)O * I, 0.5f, 2);
    float *R = rand_floats((size_t)N * O, 1.0f, 3), *y = floats_alloc((size_t)N * O);
    float *dx = garbage_floats((size_t)N * I), *dW = floats_alloc((size_t)O * I);
    MatmulCtx c = {x, W, R, y, N, I, O};
    matmul_backward(dx, dW, R, x, W, N, I, O);
    gradcheck(matmul_loss, &c, x, dx, (size_t)N * I, FD_EPS, ALL_PROBES, "matmul dx");
    gradcheck(matmul_loss, &c, W, dW, (size_t)O * I, FD_EPS, ALL_PROBES, "matmul dW");

    /* a second call: dW doubles (accumulated), dx is unchanged (written) */
    float *dW2 = floats_alloc((size_t)O * I), *dx1 = floats_alloc((size_t)N * I);
    scale_copy(dW2, dW, (size_t)O * I, 2.0f);
    memcpy(dx1, dx, (size_t)N * I * sizeof(float));
    matmul_backward(dx, dW, R, x, W, N, I, O);
    expect_close_arrays(dW, dW2, (size_t)O * I, TOL_F32_ATOL, TOL_F32_RTOL, "matmul dW twice");
    expect_close_arrays(dx, dx1, (size_t)N * I, TOL_F32_ATOL, TOL_F32_RTOL, "matmul dx twice");
    free(x), free(W), free(R), free(y), free(dx), free(dW), free(dW2), free(dx1);
}
END_TEST

/* ---- rmsnorm --------------------------------------------------------------------------- */

typedef struct {
    const float *x, *w, *R; /* x (N, C), w (C), R (N, C) */
    float *y, *rstd;        /* y (N, C), rstd (N) */
    int N, C;
} RmsnormCtx;

static double rmsnorm_loss(void *p) {
    RmsnormCtx *c = p;
    rmsnorm_forward(c->y, c->rstd, c->x, c->w, c->N, c->C);
    return weighted_sum(c->y, c->R, (size_t)c->N * c->C);
}

START_TEST(test_rmsnorm_grad) {
    int N = 10, C = 8;
    size_t nc = (size_t)N * C;
    float *x = rand_floats(nc, 1.0f, 11), *w = rand_floats(C, 1.0f, 12);
    float *R = rand_floats(nc, 1.0f, 13), *y = floats_alloc(nc), *rstd = floats_alloc(N);
    float *dx = garbage_floats(nc), *dw = floats_alloc(C);
    RmsnormCtx c = {x, w, R, y, rstd, N, C};
    rmsnorm_loss(&c); /* fills rstd */
    rmsnorm_backward(dx, dw, R, x, w, rstd, N, C);
    gradcheck(rmsnorm_loss, &c, x, dx, nc, FD_EPS, ALL_PROBES, "rmsnorm dx");
    gradcheck(rmsnorm_loss, &c, w, dw, C, FD_EPS, ALL_PROBES, "rmsnorm dw");

    float *dw2 = floats_alloc(C), *dx1 = floats_alloc(nc);
    scale_copy(dw2, dw, C, 2.0f);
    memcpy(dx1, dx, nc * sizeof(float));
    rmsnorm_backward(dx, dw, R, x, w, rstd, N, C);
    expect_close_arrays(dw, dw2, C, TOL_F32_ATOL, TOL_F32_RTOL, "rmsnorm dw twice");
    expect_close_arrays(dx, dx1, nc, TOL_F32_ATOL, TOL_F32_RTOL, "rmsnorm dx twice");
    free(x), free(w), free(R), free(y), free(rstd), free(dx), free(dw), free(dw2), free(dx1);
}
END_TEST

START_TEST(test_rmsnorm_forward_values) {
    /* x = (1, 2, 3, 4): mean(x^2) = 30/4 = 7.5, 1/sqrt(7.5) = 0.36514837 */
    float x[4] = {1, 2, 3, 4}, w[4] = {1.0f, 0.5f, 2.0f, -1.0f}, y[4], rstd[1];
    float want[4] = {0.36514837f, 0.36514837f, 2.19089023f, -1.46059349f};
    rmsnorm_forward(y, rstd, x, w, 1, 4);
    expect_close(rstd[0], 0.36514837f, TOL_F32_ATOL, TOL_F32_RTOL, "rmsnorm rstd");
    expect_close_arrays(y, want, 4, TOL_F32_ATOL, TOL_F32_RTOL, "rmsnorm y");
}
END_TEST

/* ---- rope ------------------------------------------------------------------------------ */

typedef struct {
    const float *x, *R; /* x (B, T, H, D), R (B, T, H, D) */
    float *y;           /* y (B, T, H, D): the rotated copy */
    const float *cs;    /* cs (T, D/2, 2): rope_table */
    int B, T, H, D;
} RopeCtx;

static double rope_loss(void *p) {
    RopeCtx *c = p;
    size_t n = (size_t)c->B * c->T * c->H * c->D;
    memcpy(c->y, c->x, n * sizeof(float));
    rope_forward(c->y, c->cs, c->B, c->T, c->H, c->D);
    return weighted_sum(c->y, c->R, n);
}

START_TEST(test_rope_grad) {
    int B = 2, T = 5, H = 2, D = 4;
    size_t n = (size_t)B * T * H * D;
    float *x = rand_floats(n, 1.0f, 21), *R = rand_floats(n, 1.0f, 22), *y = floats_alloc(n);
    float *dx = floats_alloc(n), *cs = rope_cs_alloc(T, D, 10.0f);
    RopeCtx c = {x, R, y, cs, B, T, H, D};
    memcpy(dx, R, n * sizeof(float)); /* in place: dL/dy in, dL/dx out */
    rope_backward(dx, cs, B, T, H, D);
    gradcheck(rope_loss, &c, x, dx, n, FD_EPS, ALL_PROBES, "rope dx");
    free(x), free(R), free(y), free(dx), free(cs);
}
END_TEST

START_TEST(test_rope_forward_values) {
    /* B=1, T=2, H=1, D=4, theta=100: at t=1 pair 0 turns by 1 rad, pair 1 by 100^(-1/2)=0.1 */
    float x[8] = {1, 0, 0, 1, 1, 0, 0, 1};
    float want[8] = {1, 0, 0, 1, 0.54030231f, 0.84147098f, -0.09983342f, 0.99500417f};
    float *cs = rope_cs_alloc(2, 4, 100.0f);
    rope_forward(x, cs, 1, 2, 1, 4);
    expect_close_arrays(x, want, 8, TOL_F32_ATOL, TOL_F32_RTOL, "rope known rotation");
    free(cs);
}
END_TEST

START_TEST(test_rope_table_longer_context) {
    /* a model builds its table once for its longest T; a shorter batch reads its first rows,
     * and must rotate bit for bit as a table built for exactly that T */
    int B = 2, T = 6, H = 2, D = 8;
    size_t n = (size_t)B * T * H * D;
    float *x = rand_floats(n, 1.0f, 24), *y0 = floats_alloc(n), *y1 = floats_alloc(n);
    float *tight = rope_cs_alloc(T, D, 500.0f), *wide = rope_cs_alloc(4 * T, D, 500.0f);
    ck_assert_msg(memcmp(tight, wide, (size_t)T * D * sizeof(float)) == 0,
                  "the first T rows of a longer table differ");
    memcpy(y0, x, n * sizeof(float));
    memcpy(y1, x, n * sizeof(float));
    rope_forward(y0, tight, B, T, H, D);
    rope_forward(y1, wide, B, T, H, D);
    ck_assert_msg(memcmp(y0, y1, n * sizeof(float)) == 0, "rope forward depends on T_max");
    ck_assert_msg(memcmp(y0, x, n * sizeof(float)) != 0, "rope forward changed nothing");
    rope_backward(y0, tight, B, T, H, D);
    rope_backward(y1, wide, B, T, H, D);
    ck_assert_msg(memcmp(y0, y1, n * sizeof(float)) == 0, "rope backward depends on T_max");
    free(x), free(y0), free(y1), free(tight), free(wide);
}
END_TEST

START_TEST(test_rope_identity_and_norm) {
    int B = 2, T = 7, H = 3, D = 8;
    size_t n = (size_t)B * T * H * D;
    float *x = rand_floats(n, 1.0f, 23), *y = floats_alloc(n);
    float *cs = rope_cs_alloc(T, D, 10000.0f);
    memcpy(y, x, n * sizeof(float));
    rope_forward(y, cs, B, T, H, D);
    for (size_t i = 0; i < n; i += 2) {
        int t = (int)((i / ((size_t)H * D)) % T);
        if (t == 0) { /* angle 0: identity */
            ck_assert_msg(y[i] == x[i] && y[i + 1] == x[i + 1], "rope changed t=0 at %zu", i);
        }
        float r0 = hypotf(x[i], x[i + 1]), r1 = hypotf(y[i], y[i + 1]);
        expect_close(r1, r0, TOL_F32_ATOL, TOL_F32_RTOL, "rope pair norm");
    }
    /* the backward rotation undoes the forward one */
    rope_backward(y, cs, B, T, H, D);
    expect_close_arrays(y, x, n, TOL_F32_ATOL, TOL_F32_RTOL, "rope backward inverts forward");
    free(x), free(y), free(cs);
}
END_TEST

/* ---- swiglu ---------------------------------------------------------------------------- */

typedef struct {
    const float *g, *u, *R; /* (N, F) each */
    float *h;               /* (N, F) */
    int N, F;
} SwigluCtx;

static double swiglu_loss(void *p) {
    SwigluCtx *c = p;
    swiglu_forward(c->h, c->g, c->u, c->N, c->F);
    return weighted_sum(c->h, c->R, (size_t)c->N * c->F);
}

START_TEST(test_swiglu_grad) {
    int N = 10, F = 12;
    size_t n = (size_t)N * F;
    float *g = rand_floats(n, 3.0f, 71), *u = rand_floats(n, 1.0f, 72);
    float *R = rand_floats(n, 1.0f, 73), *h = floats_alloc(n);
    float *dg = garbage_floats(n), *du = garbage_floats(n);
    SwigluCtx c = {g, u, R, h, N, F};
    swiglu_backward(dg, du, R, g, u, N, F);
    gradcheck(swiglu_loss, &c, g, dg, n, FD_EPS, ALL_PROBES, "swiglu dg");
    gradcheck(swiglu_loss, &c, u, du, n, FD_EPS, ALL_PROBES, "swiglu du");
    free(g), free(u), free(R), free(h), free(dg), free(du);
}
END_TEST

START_TEST(test_swiglu_forward_values) {
    /* silu(1) = 0.73105858, silu(-1) = -0.26894142, silu(20) = 20 (to float precision) */
    float g[4] = {0.0f, 1.0f, -1.0f, 20.0f}, u[4] = {5.0f, 2.0f, 3.0f, 0.5f}, h[4];
    float want[4] = {0.0f, 1.46211716f, -0.80682426f, 10.0f};
    swiglu_forward(h, g, u, 1, 4);
    expect_close_arrays(h, want, 4, TOL_F32_ATOL, TOL_F32_RTOL, "swiglu h");
}
END_TEST

/* ---- crossentropy ---------------------------------------------------------------------- */

typedef struct {
    const float *logits;   /* (N, V) */
    const int *targets;    /* (N) */
    float *probs, *losses; /* probs (N, V), losses (N) */
    int N, V;
    float scale;
} CeCtx;

static double ce_loss(void *p) {
    CeCtx *c = p;
    crossentropy_forward(c->losses, c->probs, c->logits, c->targets, c->N, c->V);
    double s = 0.0;
    for (int n = 0; n < c->N; n++) s += c->losses[n];
    return c->scale * s;
}

START_TEST(test_crossentropy_grad) {
    int N = 6, V = 9;
    size_t n = (size_t)N * V;
    int targets[6] = {0, 8, 3, 3, 5, 1};
    float *logits = rand_floats(n, 2.0f, 81), *probs = floats_alloc(n);
    float *losses = floats_alloc(N), *dlogits = garbage_floats(n);
    CeCtx c = {logits, targets, probs, losses, N, V, 1.0f / N};
    ce_loss(&c);
    crossentropy_backward(dlogits, probs, targets, c.scale, N, V);
    gradcheck(ce_loss, &c, logits, dlogits, n, FD_EPS, ALL_PROBES, "crossentropy dlogits");
    free(logits), free(probs), free(losses), free(dlogits);
}
END_TEST

START_TEST(test_crossentropy_forward_values) {
    /* uniform logits: p = 1/V, loss = log V */
    enum { V = 7 };
    float logits[2 * V], probs[2 * V], losses[2];
    int targets[2] = {0, 6};
    for (int i = 0; i < 2 * V; i++) logits[i] = 0.3f;
    crossentropy_forward(losses, probs, logits, targets, 2, V);
    for (int n = 0; n < 2; n++)
        expect_close(losses[n], logf(V), TOL_F32_ATOL, TOL_F32_RTOL, "uniform loss is log V");
    for (int i = 0; i < 2 * V; i++)
        expect_close(probs[i], 1.0f / V, TOL_F32_ATOL, TOL_F32_RTOL, "uniform p is 1/V");

    /* logits (0, ln 3), target 1: p = (1/4, 3/4), loss = log(4/3); shifting by 100 (exp(100)
     * overflows float) changes nothing; a target 200 below the rest costs about 200 */
    float z[6] = {0.0f, 1.09861229f, 100.0f, 101.09861229f, 0.0f, -200.0f}, p[6], l[3];
    int y[3] = {1, 1, 1};
    crossentropy_forward(l, p, z, y, 3, 2);
    expect_close(l[0], 0.28768207f, TOL_F32_ATOL, TOL_F32_RTOL, "loss of (0, ln 3)");
    expect_close(l[1], 0.28768207f, 1e-4f, TOL_F32_RTOL, "loss of shifted logits");
    expect_close(l[2], 200.0f, TOL_F32_ATOL, TOL_F32_RTOL, "loss of an underflowing target");
    expect_close(p[3], 0.75f, TOL_F32_ATOL, TOL_F32_RTOL, "p of shifted logits");
}
END_TEST

/* ---- adamw ----------------------------------------------------------------------------- */

START_TEST(test_adamw_first_step) {
    /* step 1: m_hat = g, v_hat = g^2, so p moves by lr * (g / (|g| + eps) + wd * p) */
    enum { n = 4 };
    float p[n] = {0.5f, -0.3f, 0.2f, 1.0f}, g[n] = {0.1f, -2.0f, 0.0f, 1e-3f};
    float m[n] = {0}, v[n] = {0}, want[n], want_m[n], want_v[n];
    float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    for (int i = 0; i < n; i++) {
        float sign = g[i] > 0 ? 1.0f : (g[i] < 0 ? -1.0f : 0.0f);
        want[i] = p[i] - lr * (sign + wd * p[i]);
        want_m[i] = (1 - b1) * g[i];
        want_v[i] = (1 - b2) * g[i] * g[i];
    }
    const AdamwStep st = {.lr = lr,
                          .beta1 = b1,
                          .beta2 = b2,
                          .eps = eps,
                          .weight_decay = wd,
                          .grad_scale = 1.0f,
                          .step = 1};
    adamw_update(p, g, m, v, n, &st);
    expect_close_arrays(p, want, n, TOL_F32_ATOL, TOL_F32_RTOL, "adamw p after step 1");
    expect_close_arrays(m, want_m, n, TOL_F32_ATOL, TOL_F32_RTOL, "adamw m after step 1");
    expect_close_arrays(v, want_v, n, TOL_F32_ATOL, TOL_F32_RTOL, "adamw v after step 1");
}
END_TEST

START_TEST(test_adamw_no_decay_and_bias_correction) {
    /* wd = 0 and g = 0: nothing moves, exactly */
    float p0 = 0.75f, g0 = 0.0f, m0 = 0.0f, v0 = 0.0f;
    AdamwStep st = {.lr = 0.01f,
                    .beta1 = 0.9f,
                    .beta2 = 0.999f,
                    .eps = 1e-8f,
                    .weight_decay = 0.0f,
                    .grad_scale = 1.0f,
                    .step = 1};
    adamw_update(&p0, &g0, &m0, &v0, 1, &st);
    ck_assert_msg(p0 == 0.75f, "zero gradient without decay moved p to %g", (double)p0);

    /* a constant gradient: the bias correction makes m_hat = g and v_hat = g^2 at every step,
     * so each of 5 steps moves p by lr * sign(g) */
    float p[2] = {1.0f, 1.0f}, g[2] = {0.5f, -0.02f}, m[2] = {0}, v[2] = {0};
    for (st.step = 1; st.step <= 5; st.step++) adamw_update(p, g, m, v, 2, &st);
    float want[2] = {0.95f, 1.05f};
    expect_close_arrays(p, want, 2, TOL_F32_ATOL, TOL_F32_RTOL, "adamw 5 steps");
}
END_TEST

START_TEST(test_adamw_grad_scale) {
    /* grad_scale s on g is the same update, bit for bit, as s * g with scale 1 (the clipping
     * factor folded into the pass), and g itself is left as it was */
    enum { n = 37 };
    float p1[n], p2[n], m1[n] = {0}, m2[n] = {0}, v1[n] = {0}, v2[n] = {0}, g[n], gs[n];
    const float s = 0.37f;
    for (int i = 0; i < n; i++) {
        p1[i] = p2[i] = 0.1f * (float)(i % 7) - 0.3f;
        g[i] = 0.05f * (float)((i * 5) % 11) - 0.2f;
        gs[i] = g[i] * s;
    }
    AdamwStep scaled = {.lr = 3e-3f,
                        .beta1 = 0.9f,
                        .beta2 = 0.95f,
                        .eps = 1e-8f,
                        .weight_decay = 0.1f,
                        .grad_scale = s,
                        .step = 1};
    AdamwStep plain = scaled;
    plain.grad_scale = 1.0f;
    for (int t = 1; t <= 3; t++) {
        scaled.step = plain.step = t;
        adamw_update(p1, g, m1, v1, n, &scaled);
        adamw_update(p2, gs, m2, v2, n, &plain);
    }
    for (int i = 0; i < n; i++) {
        ck_assert_msg(p1[i] == p2[i] && m1[i] == m2[i] && v1[i] == v2[i],
                      "element %d: grad_scale differs from a pre-scaled gradient", i);
        ck_assert_msg(g[i] == 0.05f * (float)((i * 5) % 11) - 0.2f, "g[%d] was changed", i);
    }
}
END_TEST

START_TEST(test_adamw_clear_grad) {
    /* clear_grad = 1: the same p, m, v, bit for bit, and every g[i] zero after (n not a
     * multiple of any vector width, so the loop's tail is covered too) */
    enum { n = 1003 };
    static float p1[n], p2[n], m1[n], m2[n], v1[n], v2[n], g0[n], g1[n], g2[n];
    fill_uniform(p1, n, 1.0f, 31);
    fill_uniform(g1, n, 0.1f, 32);
    fill_uniform(m1, n, 0.01f, 33);
    fill_uniform(v1, n, 0.01f, 34);
    for (int i = 0; i < n; i++) {
        v1[i] *= v1[i];
        p2[i] = p1[i], g0[i] = g2[i] = g1[i], m2[i] = m1[i], v2[i] = v1[i];
    }
    AdamwStep keep = {.lr = 3e-3f,
                      .beta1 = 0.9f,
                      .beta2 = 0.95f,
                      .eps = 1e-8f,
                      .weight_decay = 0.1f,
                      .grad_scale = 0.7f,
                      .step = 4};
    AdamwStep clear = keep;
    clear.clear_grad = 1;
    adamw_update(p1, g1, m1, v1, n, &keep);
    adamw_update(p2, g2, m2, v2, n, &clear);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(p1[i] == p2[i] && m1[i] == m2[i] && v1[i] == v2[i],
                      "element %d: clear_grad changed the update", i);
        ck_assert_msg(g2[i] == 0.0f && g1[i] == g0[i],
                      "element %d: g %g with clear_grad (want 0), %g without (want %g)", i,
                      (double)g2[i], (double)g1[i], (double)g0[i]);
    }
}
END_TEST

/* ---- nn_expf ---------------------------------------------------------------------------- */

/* a float's place on the number line, as an integer: neighbours differ by 1 */
static int64_t float_order(float f) {
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i < 0 ? (int64_t)INT32_MIN - i : i;
}

/* bf16 keeps 8 bits of mantissa (7 stored): values checked by hand, in bits */
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
START_TEST(test_round_bf16_values) {
    const struct {
        uint32_t in, want;
    } cases[] = {
        {0x3f800000u, 0x3f800000u}, /* 1 is a bf16 */
        {0x3f808000u, 0x3f800000u}, /* 1 + 2^-8: a tie, to the even 1 */
        {0x3f818000u, 0x3f820000u}, /* 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6 */
        {0x3f808001u, 0x3f810000u}, /* just above the tie: up */
        {0x3f807fffu, 0x3f800000u}, /* just below: down */
        {0xbf808001u, 0xbf810000u}, /* the sign stays */
        {0x3fffffffu, 0x40000000u}, /* the carry reaches the exponent: 2 */
        {0x7f7fffffu, 0x7f800000u}, /* the largest float is past the largest bf16: inf */
        {0x7f800000u, 0x7f800000u}, /* inf stays */
        {0x00000001u, 0x00000000u}, /* the smallest subnormal rounds to 0 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        float y;
        const float x = from_bits(cases[i].in);
        vec_round_bf16(&y, &x, 1);
        ck_assert_msg(to_bits(y) == cases[i].want, "round_bf16(0x%08x) = 0x%08x, want 0x%08x",
                      cases[i].in, to_bits(y), cases[i].want);
    }
    float nan = from_bits(0x7fc00001u), y;
    vec_round_bf16(&y, &nan, 1);
    ck_assert(isnan(y));
    /* in place, and every result is a bf16 within half a unit of 2^-8 relative */
    float v[257];
    for (int i = 0; i < 257; i++) v[i] = (float)(i - 128) * 0.0123f + 0.5f;
    float w[257];
    memcpy(w, v, sizeof v);
    vec_round_bf16(w, w, 257);
    for (int i = 0; i < 257; i++) {
        ck_assert_uint_eq(to_bits(w[i]) & 0xffffu, 0);
        ck_assert(fabsf(w[i] - v[i]) <= fabsf(v[i]) * (1.0f / 256.0f) + 1e-30f);
    }
}
END_TEST

START_TEST(test_expf_accuracy_and_edges) {
    /* every 257th float of the range where the result is a normal float: at most 2 units in the
     * last place from exp in double, and never decreasing */
    int64_t worst = 0;
    float worst_x = 0.0f, prev = 0.0f;
    long n = 0;
    for (int64_t o = float_order(-87.3f); o <= float_order(88.3f); o += 257, n++) {
        int32_t bits = o < 0 ? (int32_t)(INT32_MIN - o) : (int32_t)o;
        float x;
        memcpy(&x, &bits, sizeof x);
        const float got = nn_expf(x), want = (float)exp((double)x);
        const int64_t d = llabs(float_order(got) - float_order(want));
        if (d > worst) worst = d, worst_x = x;
        ck_assert_msg(got >= prev, "nn_expf decreases at %.9g: %.9g after %.9g", (double)x,
                      (double)got, (double)prev);
        prev = got;
    }
    ck_assert_msg(n > 1000000, "only %ld points checked", n);
    ck_assert_msg(worst <= 2, "nn_expf is %lld units in the last place from exp at %.9g",
                  (long long)worst, (double)worst_x);
    ck_assert(nn_expf(0.0f) == 1.0f);
    ck_assert(nn_expf(-88.0f) == 0.0f && nn_expf(-1e30f) == 0.0f && nn_expf(-INFINITY) == 0.0f);
    ck_assert(isinf(nn_expf(89.0f)) && isinf(nn_expf(INFINITY)));
    ck_assert(isnan(nn_expf(NAN)));
    /* the sigmoid of a large logit of either sign, as swiglu.c and router.c take it */
    ck_assert(1.0f / (1.0f + nn_expf(-100.0f)) == 1.0f);
    ck_assert(1.0f / (1.0f + nn_expf(100.0f)) == 0.0f);
}
END_TEST

Suite *ops_suite(void) {
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("dense");
    tcase_add_test(tc, test_matmul_grad);
    tcase_add_test(tc, test_round_bf16_values);
    tcase_add_test(tc, test_rmsnorm_grad);
    tcase_add_test(tc, test_rmsnorm_forward_values);
    tcase_add_test(tc, test_rope_grad);
    tcase_add_test(tc, test_rope_forward_values);
    tcase_add_test(tc, test_rope_identity_and_norm);
    tcase_add_test(tc, test_rope_table_longer_context);
    tcase_add_test(tc, test_swiglu_grad);
    tcase_add_test(tc, test_swiglu_forward_values);
    tcase_add_test(tc, test_crossentropy_grad);
    tcase_add_test(tc, test_crossentropy_forward_values);
    tcase_add_test(tc, test_adamw_first_step);
    tcase_add_test(tc, test_adamw_no_decay_and_bias_correction);
    tcase_add_test(tc, test_adamw_grad_scale);
    tcase_add_test(tc, test_adamw_clear_grad);
    tcase_add_test(tc, test_expf_accuracy_and_edges);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(ops_suite)
