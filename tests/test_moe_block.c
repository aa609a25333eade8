/*
 * test_moe_block.c: the Mixture-of-Experts block whole (moe_block_forward, moe_block_backward);
 * test_moe.c checks its pieces.
 *
 * A finite-difference gradient check covers the block's backward pass (dx and every weight,
 * with and without renormalised weights, the aux and z-losses in the scalar), and a block with
 * K = E (every token to every expert) is compared with a plain per-token computation,
 * sum_e p_e SwiGLU_e(x).
 *
 * Gradient checks through top-k only make sense while a perturbation of 1e-3 cannot change
 * which experts are chosen (top-k is piecewise constant). The check therefore uses
 * well-separated logits, asserts the separation up front, and asserts inside the scalar
 * function that the routing did not change.
 */
#include <string.h>

#include "model/moe_block.h"
#include "moe_util.h"

typedef struct {
    MoeSpec sp;
    MoeCtx cx;
    MoeWeights wt;
    MoeActs *a;
    int N;
    float *x, *y, *R;
    const int *idx0;
} BlockCtx;

/* L = sum y * R + aux_coef * aux_loss + z_coef * z_loss: what the backward pass differentiates
 * with dy = R and loss_scale = 1. */
static double block_loss(void *vc) {
    BlockCtx *c = vc;
    moe_block_forward(&backend_cpu, c->y, c->a, c->x, &c->wt, &c->sp, &c->cx, c->N);
    for (int j = 0; j < c->N * c->sp.top_k; j++)
        ck_assert_msg(c->a->idx[j] == c->idx0[j], "routing changed under perturbation");
    return dot_d(c->y, c->R, (size_t)c->N * c->sp.d_model) +
           c->sp.aux_coef * (double)c->a->aux_loss + c->sp.z_coef * (double)c->a->z_loss;
}

START_TEST(test_block_gradcheck) {
    enum { N = 6, C = 8, E = 4, K = 2, F = 6 };
    float x[N * C], Wr[E * C], Wg[E * F * C], Wu[E * F * C], Wd[E * C * F], y[N * C], R[N * C];
    float dx[N * C], y2[N * C];
    int idx0[N * K];
    fill_uniform(x, N * C, 1.0f, 51);
    /* A router scale of 1.5 (three times the expert weights) spreads the logits: with this seed
     * every pair of logits of a token is further apart than any 1e-3 perturbation of x or Wr
     * can move them (asserted below), so top-k stays fixed and L is differentiable there. */
    fill_uniform(Wr, E * C, 1.5f, 60);
    fill_experts(Wg, Wu, Wd, E, F, C, 53);
    fill_uniform(R, N * C, 1.0f, 56);
    for (int norm_topk = 0; norm_topk <= 1; norm_topk++) {
        MoeSpec sp = {.d_model = C, .num_experts = E, .top_k = K, .d_expert = F, .seq_len = N};
        moe_spec_defaults(&sp);
        sp.norm_topk = norm_topk, sp.aux_coef = 0.5f, sp.z_coef = 0.2f;
        MoeCtx cx; /* one sequence of N tokens */
        moe_ctx_train(&cx, &sp, N, NULL);
        MoeWeights wt = {.router = Wr, .Wg = Wg, .Wu = Wu, .Wd = Wd};
        MoeActs a;
        MoeScratch s;
        moe_acts_alloc(&backend_cpu, &a, &sp, NULL, N);
        moe_scratch_alloc(&backend_cpu, &s, &sp, N);
        float gWr[E * C] = {0}, gWg[E * F * C] = {0}, gWu[E * F * C] = {0}, gWd[E * C * F] = {0};
        MoeGrads gr = {gWr, gWg, gWu, gWd};

        moe_block_forward(&backend_cpu, y, &a, x, &wt, &sp, &cx, N);
        /* a perturbation eps of x[n,c] moves logit e by eps Wr[e,c]; of Wr[e,c], by eps x[n,c] */
        float bound = 2.0f * EPS * fmaxf(max_abs(x, N * C), max_abs(Wr, E * C));
        float gap = min_logit_gap(a.logits, N, E);
        ck_assert_msg(gap > 4.0f * bound, "logits too close for a stable gradient check: %g", gap);
        memcpy(idx0, a.idx, sizeof(idx0));
        moe_block_backward(&backend_cpu, dx, &gr, R, &a, x, &wt, &sp, &cx, &s, 1.0f);

        BlockCtx c = {sp, cx, wt, &a, N, x, y2, R, idx0};
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
            snprintf(what, sizeof(what), "block %s (norm_topk %d)", checks[i].name, norm_topk);
            gradcheck(block_loss, &c, checks[i].v, checks[i].grad, (size_t)checks[i].n, EPS,
                      (size_t)checks[i].n, what);
        }

        /* same inputs, same thread count: bit-identical output */
        moe_block_forward(&backend_cpu, y2, &a, x, &wt, &sp, &cx, N);
        ck_assert(memcmp(y, y2, sizeof(y)) == 0);

        moe_scratch_free(&backend_cpu, &s);
        moe_acts_free(&backend_cpu, &a);
    }
}
END_TEST

/* K = E: every token visits every expert with weight p_e = softmax(x Wr^T)_e, so the block is
 * y = sum_e p_e SwiGLU_e(x), computed here row by row in double with no plan at all. */
START_TEST(test_block_all_experts_reference) {
    enum { N = 5, C = 6, E = 3, K = E, F = 4 };
    float x[N * C], Wr[E * C], Wg[E * F * C], Wu[E * F * C], Wd[E * C * F], y[N * C];
    float want[N * C];
    fill_uniform(x, N * C, 1.0f, 61);
    fill_uniform(Wr, E * C, 1.0f, 62);
    fill_experts(Wg, Wu, Wd, E, F, C, 63);
    for (int n = 0; n < N; n++) {
        const float *xn = x + n * C;
        double l[E], m = -INFINITY, z = 0.0, out[C] = {0};
        for (int e = 0; e < E; e++) {
            l[e] = 0.0;
            for (int c = 0; c < C; c++) l[e] += (double)Wr[e * C + c] * xn[c];
            m = l[e] > m ? l[e] : m;
        }
        for (int e = 0; e < E; e++) z += exp(l[e] - m);
        for (int e = 0; e < E; e++) {
            double pe = exp(l[e] - m) / z, hid[F];
            for (int f = 0; f < F; f++) {
                double g = 0.0, u = 0.0;
                for (int c = 0; c < C; c++) {
                    g += (double)Wg[(e * F + f) * C + c] * xn[c];
                    u += (double)Wu[(e * F + f) * C + c] * xn[c];
                }
                hid[f] = g / (1.0 + exp(-g)) * u;
            }
            for (int c = 0; c < C; c++) {
                double o = 0.0;
                for (int f = 0; f < F; f++) o += (double)Wd[(e * C + c) * F + f] * hid[f];
                out[c] += pe * o;
            }
        }
        for (int c = 0; c < C; c++) want[n * C + c] = (float)out[c];
    }
    for (int norm_topk = 0; norm_topk <= 1; norm_topk++) {
        MoeSpec sp = {.d_model = C, .num_experts = E, .top_k = K, .d_expert = F, .seq_len = N};
        moe_spec_defaults(&sp);
        sp.norm_topk = norm_topk, sp.aux_coef = 0.01f, sp.z_coef = 0.001f;
        MoeCtx cx;
        moe_ctx_train(&cx, &sp, N, NULL);
        MoeWeights wt = {.router = Wr, .Wg = Wg, .Wu = Wu, .Wd = Wd};
        MoeActs a;
        moe_acts_alloc(&backend_cpu, &a, &sp, NULL, N);
        moe_block_forward(&backend_cpu, y, &a, x, &wt, &sp, &cx, N);
        CLOSE_ARRAYS(y, want, N * C,
                     norm_topk ? "K = E block, norm_topk" : "K = E block, no norm_topk");
        for (int e = 0; e < E; e++) ck_assert_int_eq(a.plan.counts[e], N);
        /* every expert sees every token, so f is uniform and aux = 1 */
        CLOSE(a.aux_loss, 1.0f, "aux loss with K = E");
        moe_acts_free(&backend_cpu, &a);
    }
}
END_TEST

static Suite *moe_block_suite(void) {
    Suite *s = suite_create("moe_block");
    TCase *block = tcase_create("block");
    tcase_add_test(block, test_block_gradcheck);
    tcase_add_test(block, test_block_all_experts_reference);
    tcase_set_timeout(block, 60);
    suite_add_tcase(s, block);
    return s;
}

TEST_MAIN(moe_block_suite)
