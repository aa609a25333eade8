/*
 * test_attention.c: causal self-attention, the reference loops of src/nn/attention.c and the
 * cpu backend's blocked products of src/backend/cpu/attention_gemm.c.
 *
 *   - the backward of both against central finite differences of L = sum(out * R), alone and
 *     behind RoPE on q and k, for multi-head, grouped-query and multi-query heads;
 *   - the products against the loops, at one block of query rows and at three (the last
 *     partial), with heads of their own and in groups;
 *   - grouped-query attention is multi-head attention on repeated keys and values (its dk, dv
 *     the sums over each group);
 *   - asking for one gradient gives what asking for all three gives; T = 1 returns v;
 *     forward values by hand; no position sees a later one;
 *   - bit-identical results across runs and across workspace sizes (thread counts).
 */
#include <math.h>
#include "base/omp_compat.h"
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "ops_util.h"

/* ---- attention (optionally behind rope on q and k) ------------------------------------- */

/* The head layouts checked: H query heads, Hkv key-value heads of D channels. */
typedef struct {
    int H, Hkv, D, Dv;
    const char *what;
} Heads;
static const Heads HEADS[] = {
    {2, 2, 4, 4, "multi-head"},
    {4, 2, 4, 4, "grouped-query (2 heads a group)"},
    {3, 1, 6, 6, "multi-query"},
    {2, 2, 6, 4, "values narrower than queries and keys (latent attention's heads)"},
    {4, 2, 4, 6, "grouped, values wider"},
};
#define N_HEADS ((int)(sizeof HEADS / sizeof HEADS[0]))

typedef struct {
    const float *q, *k, *v, *R; /* q (B, T, H D), k (B, T, Hkv D), v (B, T, Hkv Dv), R as out */
    float *qr, *kr, *out, *att; /* qr (B, T, H D); kr (B, T, Hkv D); out (B, T, H Dv); att */
    const float *cs;            /* cs (T, D/2, 2): rope_table, theta 10 */
    int B, T, H, Hkv, D, Dv;
    int rope;      /* apply rope_forward to copies of q and k first */
    int reference; /* check the loop reference instead of the GEMM version */
} AttnCtx;

static double attn_loss(void *p) {
    AttnCtx *c = p;
    size_t nq = (size_t)c->B * c->T * c->H * c->D, nk = (size_t)c->B * c->T * c->Hkv * c->D;
    memcpy(c->qr, c->q, nq * sizeof(float));
    memcpy(c->kr, c->k, nk * sizeof(float));
    if (c->rope) {
        rope_forward(c->qr, c->cs, c->B, c->T, c->H, c->D);
        rope_forward(c->kr, c->cs, c->B, c->T, c->Hkv, c->D);
    }
    (c->reference ? attention_forward : cpu_attention_forward)(
        c->out, c->att, c->qr, c->kr, c->v, c->B, c->T, c->H, c->Hkv, c->D, c->Dv);
    return weighted_sum(c->out, c->R, (size_t)c->B * c->T * c->H * c->Dv);
}

static void attn_gradcheck(const Heads *hd, int rope, int reference) {
    const int B = 2, T = 5, H = hd->H, Hkv = hd->Hkv, D = hd->D, Dv = hd->Dv;
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D;
    size_t nv = (size_t)B * T * Hkv * Dv, no = (size_t)B * T * H * Dv;
    float *q = rand_floats(nq, 1.0f, 31), *k = rand_floats(nk, 1.0f, 32);
    float *v = rand_floats(nv, 1.0f, 33), *R = rand_floats(no, 1.0f, 34);
    float *qr = floats_alloc(nq), *kr = floats_alloc(nk), *out = floats_alloc(no);
    float *att = floats_alloc((size_t)B * H * T * T);
    float *dq = garbage_floats(nq), *dk = garbage_floats(nk), *dv = garbage_floats(nv);
    float *cs = rope_cs_alloc(T, D, 10.0f);
    const int n_ws = n_ws_threads();
    float *ws = attn_ws_alloc(T, n_ws);
    AttnCtx c = {q, k, v, R, qr, kr, out, att, cs, B, T, H, Hkv, D, Dv, rope, reference};
    attn_loss(&c); /* fills att and the rotated qr, kr */
    (reference ? attention_backward : cpu_attention_backward)(dq, dk, dv, ws, R, att, qr, kr, v, B,
                                                              T, H, Hkv, D, Dv, n_ws);
    if (rope) {
        rope_backward(dq, cs, B, T, H, D);
        rope_backward(dk, cs, B, T, Hkv, D);
    }
    char what[96];
    snprintf(what, sizeof what, "%s%s %s", rope ? "rope+" : "", reference ? "reference" : "gemm",
             hd->what);
    gradcheck(attn_loss, &c, q, dq, nq, FD_EPS, ALL_PROBES, what);
    gradcheck(attn_loss, &c, k, dk, nk, FD_EPS, ALL_PROBES, what);
    gradcheck(attn_loss, &c, v, dv, nv, FD_EPS, ALL_PROBES, what);
    free(q), free(k), free(v), free(R), free(qr), free(kr), free(out), free(att);
    free(dq), free(dk), free(dv), free(cs), free(ws);
}

START_TEST(test_attention_grad) {
    for (int h = 0; h < N_HEADS; h++) {
        attn_gradcheck(&HEADS[h], 0, 0);
        attn_gradcheck(&HEADS[h], 0, 1);
    }
}
END_TEST

START_TEST(test_rope_attention_grad) {
    for (int h = 0; h < N_HEADS; h++) {
        attn_gradcheck(&HEADS[h], 1, 0);
        attn_gradcheck(&HEADS[h], 1, 1);
    }
}
END_TEST

START_TEST(test_attention_gemm_matches_reference) {
    /* odd shapes: T not a multiple of anything (37, one block of query rows), and T = 150 (three
     * blocks of attention_gemm.c's 64, the last partial); D = 16; three heads of their own, and
     * six query heads in three groups of two */
    const int Ts[2] = {37, 150}, Hs[3][3] = {{3, 3, 16}, {6, 3, 16}, {3, 3, 12}};
    for (int s = 0; s < 6; s++) {
        const int B = 2, T = Ts[s % 2], H = Hs[s / 2][0], Hkv = Hs[s / 2][1], D = 16;
        const int Dv = Hs[s / 2][2];
        size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D;
        size_t nv = (size_t)B * T * Hkv * Dv, no = (size_t)B * T * H * Dv;
        size_t na = (size_t)B * H * T * T;
        float *q = rand_floats(nq, 1.0f, 41), *k = rand_floats(nk, 1.0f, 42);
        float *v = rand_floats(nv, 1.0f, 43), *dout = rand_floats(no, 1.0f, 44);
        float *out[2], *att[2], *dq[2], *dk[2], *dv[2];
        const int n_ws = n_ws_threads();
        float *ws = attn_ws_alloc(T, n_ws);
        for (int r = 0; r < 2; r++) {
            out[r] = garbage_floats(no), att[r] = garbage_floats(na);
            dq[r] = garbage_floats(nq), dk[r] = garbage_floats(nk), dv[r] = garbage_floats(nv);
        }
        attention_forward(out[0], att[0], q, k, v, B, T, H, Hkv, D, Dv);
        attention_backward(dq[0], dk[0], dv[0], ws, dout, att[0], q, k, v, B, T, H, Hkv, D, Dv,
                           n_ws);
        cpu_attention_forward(out[1], att[1], q, k, v, B, T, H, Hkv, D, Dv);
        cpu_attention_backward(dq[1], dk[1], dv[1], ws, dout, att[1], q, k, v, B, T, H, Hkv, D, Dv,
                               n_ws);
        expect_close_arrays(att[1], att[0], na, TOL_F32_ATOL, TOL_F32_RTOL,
                            "att: gemm vs reference");
        expect_close_arrays(out[1], out[0], no, TOL_F32_ATOL, TOL_F32_RTOL,
                            "out: gemm vs reference");
        expect_close_arrays(dq[1], dq[0], nq, TOL_F32_ATOL, TOL_F32_RTOL, "dq: gemm vs reference");
        expect_close_arrays(dk[1], dk[0], nk, TOL_F32_ATOL, TOL_F32_RTOL, "dk: gemm vs reference");
        expect_close_arrays(dv[1], dv[0], nv, TOL_F32_ATOL, TOL_F32_RTOL, "dv: gemm vs reference");
        for (int r = 0; r < 2; r++)
            free(out[r]), free(att[r]), free(dq[r]), free(dk[r]), free(dv[r]);
        free(q), free(k), free(v), free(dout), free(ws);
    }
}
END_TEST

/* Grouped-query attention is multi-head attention whose key-value heads are repeated: each
 * query head's output and probabilities are those of MHA with its group's k and v copied in,
 * and a shared head's dk, dv the sum over its group of MHA's. */
START_TEST(test_gqa_is_repeated_mha) {
    const int B = 2, T = 9, H = 6, Hkv = 2, D = 4, group = H / Hkv, n_ws = n_ws_threads();
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, na = (size_t)B * H * T * T;
    float *q = rand_floats(nq, 1.0f, 71), *k = rand_floats(nk, 1.0f, 72);
    float *v = rand_floats(nk, 1.0f, 73), *dout = rand_floats(nq, 1.0f, 74);
    float *kx = floats_alloc(nq), *vx = floats_alloc(nq); /* k, v repeated to H heads */
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++) {
                kx[(r * H + h) * D + d] = k[(r * Hkv + h / group) * D + d];
                vx[(r * H + h) * D + d] = v[(r * Hkv + h / group) * D + d];
            }
    float *ws = attn_ws_alloc(T, n_ws);
    for (int ref = 0; ref < 2; ref++) {
        float *o = floats_alloc(nq), *a = floats_alloc(na), *dq = floats_alloc(nq);
        float *dk = floats_alloc(nk), *dv = floats_alloc(nk);
        float *o2 = floats_alloc(nq), *a2 = floats_alloc(na), *dq2 = floats_alloc(nq);
        float *dkx = floats_alloc(nq), *dvx = floats_alloc(nq);
        float *dks = floats_alloc(nk), *dvs = floats_alloc(nk);
        (ref ? attention_forward : cpu_attention_forward)(o, a, q, k, v, B, T, H, Hkv, D, D);
        (ref ? attention_backward : cpu_attention_backward)(dq, dk, dv, ws, dout, a, q, k, v, B, T,
                                                            H, Hkv, D, D, n_ws);
        (ref ? attention_forward : cpu_attention_forward)(o2, a2, q, kx, vx, B, T, H, H, D, D);
        (ref ? attention_backward : cpu_attention_backward)(dq2, dkx, dvx, ws, dout, a2, q, kx, vx,
                                                            B, T, H, H, D, D, n_ws);
        memset(dks, 0, nk * sizeof(float)), memset(dvs, 0, nk * sizeof(float));
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++) {
                    dks[(r * Hkv + h / group) * D + d] += dkx[(r * H + h) * D + d];
                    dvs[(r * Hkv + h / group) * D + d] += dvx[(r * H + h) * D + d];
                }
        ck_assert_msg(memcmp(o, o2, nq * sizeof(float)) == 0, "GQA out is not MHA's (ref %d)", ref);
        ck_assert_msg(memcmp(a, a2, na * sizeof(float)) == 0, "GQA att is not MHA's (ref %d)", ref);
        ck_assert_msg(memcmp(dq, dq2, nq * sizeof(float)) == 0, "GQA dq is not MHA's (ref %d)",
                      ref);
        expect_close_arrays(dk, dks, nk, TOL_F32_ATOL, TOL_F32_RTOL, "GQA dk: MHA's summed");
        expect_close_arrays(dv, dvs, nk, TOL_F32_ATOL, TOL_F32_RTOL, "GQA dv: MHA's summed");
        free(o), free(a), free(dq), free(dk), free(dv), free(o2), free(a2), free(dq2);
        free(dkx), free(dvx), free(dks), free(dvs);
    }
    free(q), free(k), free(v), free(dout), free(kx), free(vx), free(ws);
}
END_TEST

START_TEST(test_attention_null_grads) {
    /* asking for one gradient gives the same values as asking for all three */
    int B = 2, T = 5, C = 8, H = 2;
    size_t n = (size_t)B * T * C;
    float *q = rand_floats(n, 1.0f, 35), *k = rand_floats(n, 1.0f, 36);
    float *v = rand_floats(n, 1.0f, 37), *dout = rand_floats(n, 1.0f, 38);
    float *out = floats_alloc(n), *att = floats_alloc((size_t)B * H * T * T);
    float *dq = floats_alloc(n), *dk = floats_alloc(n), *dv = floats_alloc(n);
    float *one = garbage_floats(n);
    const int n_ws = n_ws_threads();
    float *ws = attn_ws_alloc(T, n_ws);
    cpu_attention_forward(out, att, q, k, v, B, T, H, H, C / H, C / H);
    cpu_attention_backward(dq, dk, dv, ws, dout, att, q, k, v, B, T, H, H, C / H, C / H, n_ws);
    cpu_attention_backward(one, NULL, NULL, ws, dout, att, q, k, v, B, T, H, H, C / H, C / H, n_ws);
    ck_assert_msg(memcmp(one, dq, n * sizeof(float)) == 0, "dq alone differs");
    cpu_attention_backward(NULL, one, NULL, ws, dout, att, q, k, v, B, T, H, H, C / H, C / H, n_ws);
    ck_assert_msg(memcmp(one, dk, n * sizeof(float)) == 0, "dk alone differs");
    cpu_attention_backward(NULL, NULL, one, ws, dout, att, q, k, v, B, T, H, H, C / H, C / H, n_ws);
    ck_assert_msg(memcmp(one, dv, n * sizeof(float)) == 0, "dv alone differs");
    free(q), free(k), free(v), free(dout), free(out), free(att), free(dq), free(dk), free(dv);
    free(one), free(ws);
}
END_TEST

START_TEST(test_attention_t1_returns_v) {
    /* one token attends only to itself with probability 1 */
    int B = 2, T = 1, C = 8, H = 2;
    size_t n = (size_t)B * T * C;
    float *q = rand_floats(n, 1.0f, 41), *k = rand_floats(n, 1.0f, 42);
    float *v = rand_floats(n, 1.0f, 43), *out = floats_alloc(n), *att = floats_alloc(B * H);
    cpu_attention_forward(out, att, q, k, v, B, T, H, H, C / H, C / H);
    expect_close_arrays(out, v, n, TOL_F32_ATOL, TOL_F32_RTOL, "attention T=1 out");
    for (int i = 0; i < B * H; i++) expect_close(att[i], 1.0f, TOL_F32_ATOL, 0.0f, "T=1 att");
    free(q), free(k), free(v), free(out), free(att);
}
END_TEST

START_TEST(test_attention_forward_values) {
    /* B=1, T=2, C=D=1 (scale 1): q1 = 1, k = (0, ln 3), v = (2, 6).
     * t=0 sees only itself: out0 = 2. t=1: scores (0, ln 3) -> p = (1/4, 3/4), out1 = 5. */
    float q[2] = {0.5f, 1.0f}, k[2] = {0.0f, 1.09861229f}, v[2] = {2.0f, 6.0f};
    float out[2], att[4] = {NAN, NAN, NAN, NAN};
    float want_out[2] = {2.0f, 5.0f}, want_att[4] = {1.0f, 0.0f, 0.25f, 0.75f};
    cpu_attention_forward(out, att, q, k, v, 1, 2, 1, 1, 1, 1);
    expect_close_arrays(out, want_out, 2, TOL_F32_ATOL, TOL_F32_RTOL, "attention out");
    expect_close_arrays(att, want_att, 4, TOL_F32_ATOL, TOL_F32_RTOL, "attention att");
}
END_TEST

START_TEST(test_attention_causal) {
    int B = 1, T = 6, C = 8, H = 2;
    size_t n = (size_t)B * T * C, row = (size_t)(T - 1) * C;
    float *q = rand_floats(n, 1.0f, 51), *k = rand_floats(n, 1.0f, 52);
    float *v = rand_floats(n, 1.0f, 53), *att = floats_alloc((size_t)B * H * T * T);
    float *out1 = floats_alloc(n), *out2 = floats_alloc(n);
    for (size_t i = 0; i < (size_t)B * H * T * T; i++) att[i] = NAN;
    cpu_attention_forward(out1, att, q, k, v, B, T, H, H, C / H, C / H);
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++)
            for (int j = t + 1; j < T; j++)
                ck_assert_msg(att[((size_t)h * T + t) * T + j] == 0.0f,
                              "att above the diagonal not 0 at h=%d t=%d j=%d", h, t, j);
    for (int c = 0; c < C; c++) k[row + c] += 3.0f, v[row + c] -= 5.0f; /* change the last token */
    cpu_attention_forward(out2, att, q, k, v, B, T, H, H, C / H, C / H);
    ck_assert_msg(memcmp(out1, out2, row * sizeof(float)) == 0,
                  "a later token's k/v changed an earlier output");
    ck_assert_msg(memcmp(out1 + row, out2 + row, C * sizeof(float)) != 0,
                  "the last token's output ignored its own k/v");
    free(q), free(k), free(v), free(att), free(out1), free(out2);
}
END_TEST

START_TEST(test_attention_deterministic) {
    /* run 0 with a workspace slice per thread, run 1 with a single slice (so on one thread):
     * each (b, h) is computed whole by one thread, so the results are the same bits */
    int B = 2, T = 32, C = 64, H = 4;
    size_t n = (size_t)B * T * C, na = (size_t)B * H * T * T;
    float *q = rand_floats(n, 1.0f, 61), *k = rand_floats(n, 1.0f, 62);
    float *v = rand_floats(n, 1.0f, 63), *dout = rand_floats(n, 1.0f, 64);
    float *o[2], *a[2], *dq[2], *dk[2], *dv[2];
    const int n_ws[2] = {n_ws_threads(), 1};
    float *ws = attn_ws_alloc(T, n_ws[0]);
    for (int r = 0; r < 2; r++) {
        o[r] = floats_alloc(n), a[r] = floats_alloc(na);
        dq[r] = floats_alloc(n), dk[r] = floats_alloc(n), dv[r] = floats_alloc(n);
        cpu_attention_forward(o[r], a[r], q, k, v, B, T, H, H, C / H, C / H);
        cpu_attention_backward(dq[r], dk[r], dv[r], ws, dout, a[r], q, k, v, B, T, H, H, C / H,
                               C / H, n_ws[r]);
    }
    ck_assert_msg(memcmp(o[0], o[1], n * sizeof(float)) == 0, "attention out differs");
    ck_assert_msg(memcmp(a[0], a[1], na * sizeof(float)) == 0, "attention att differs");
    ck_assert_msg(memcmp(dq[0], dq[1], n * sizeof(float)) == 0, "attention dq differs");
    ck_assert_msg(memcmp(dk[0], dk[1], n * sizeof(float)) == 0, "attention dk differs");
    ck_assert_msg(memcmp(dv[0], dv[1], n * sizeof(float)) == 0, "attention dv differs");
    for (int r = 0; r < 2; r++) free(o[r]), free(a[r]), free(dq[r]), free(dk[r]), free(dv[r]);
    free(q), free(k), free(v), free(dout), free(ws);
}
END_TEST

Suite *attention_suite(void) {
    Suite *s = suite_create("attention");
    TCase *tc = tcase_create("attention");
    tcase_add_test(tc, test_attention_grad);
    tcase_add_test(tc, test_rope_attention_grad);
    tcase_add_test(tc, test_attention_gemm_matches_reference);
    tcase_add_test(tc, test_gqa_is_repeated_mha);
    tcase_add_test(tc, test_attention_null_grads);
    tcase_add_test(tc, test_attention_t1_returns_v);
    tcase_add_test(tc, test_attention_forward_values);
    tcase_add_test(tc, test_attention_causal);
    tcase_add_test(tc, test_attention_deterministic);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(attention_suite)
