/*
 * test_stability.c: the settings of chapter 5 (stability), beyond the gradient checks of
 * tests/test_model.c (which cover sandwich norms and the group and step-wide balance loss):
 *
 *   - init: TinyInit's std from width and depth, the embedding's 0.5, init_scale exactly,
 *     moe.router_init_std (the router's std, nothing else changed), the gains of sandwich and
 *     depth-scaled sandwich norms;
 *   - a bf16 router: every rounded tensor holds bf16 values, and the model stays close to the
 *     fp32 router's (the gradients pass straight through the roundings);
 *   - the balance loss over groups of experts and over the step's micro-batches, recomputed
 *     by hand from the routing the block recorded;
 *   - the spike rule of train.csv, and its refill from a resumed run's rows.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "testutil.h"
#include "train/train_log.h"

static Config small_config(int E) {
    Config c;
    config_defaults(&c);
    c.d_model = 64;
    c.n_layer = 4;
    c.n_head = 4;
    c.seq_len = 16;
    c.d_ff = 96;
    c.num_experts = E;
    c.top_k = 2;
    c.d_expert = 32;
    c.seed = 11;
    return c;
}

static double std_of(const float *x, size_t n) {
    double s = 0.0, ss = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i], ss += (double)x[i] * x[i];
    const double mean = s / n;
    return sqrt(ss / n - mean * mean);
}

static const float *tensor(const Model *m, const char *name) {
    const int i = params_find(&m->pt, name);
    ck_assert_msg(i >= 0, "no tensor %s", name);
    return m->params + m->pt.t[i].offset;
}
static size_t numel(const Model *m, const char *name) {
    return m->pt.t[params_find(&m->pt, name)].numel;
}

START_TEST(test_tiny_init_and_scale) {
    Config c = small_config(4);
    c.init = MOE_INIT_TINY;
    Model m;
    model_init(&m, &c, 1, 16);
    const double want = sqrt(1.0 / (2.0 * 64 * 4)); /* 0.0442 */
    const char *mats[] = {"layers.1.attn.wq", "layers.2.attn.wo", "layers.3.moe.w_down", "head"};
    for (int i = 0; i < 4; i++) {
        const double s = std_of(tensor(&m, mats[i]), numel(&m, mats[i]));
        ck_assert_msg(fabs(s / want - 1.0) < 0.05, "%s: std %g, TinyInit wants %g", mats[i], s,
                      want);
    }
    const double e = std_of(tensor(&m, "tok_emb"), numel(&m, "tok_emb"));
    ck_assert_msg(fabs(e / 0.5 - 1.0) < 0.05, "tok_emb std %g, TinyInit wants 0.5", e);
    model_free(&m);

    /* init_scale multiplies every draw exactly (a power of two), norms stay 1 */
    Config c1 = small_config(4), c2 = c1;
    c2.init_scale = 2.0f;
    Model a, b;
    model_init(&a, &c1, 1, 16);
    model_init(&b, &c2, 1, 16);
    for (int i = 0; i < a.pt.n; i++) {
        const ParamTensor *t = &a.pt.t[i];
        const float k = t->ndim == 1 ? 1.0f : 2.0f;
        for (size_t j = 0; j < t->numel; j++)
            ck_assert_msg(b.params[t->offset + j] == k * a.params[t->offset + j],
                          "%s[%zu] with init_scale 2", t->name, j);
    }
    model_free(&a), model_free(&b);

    /* moe.router_init_std is the router's std itself: the same normal draws scaled by 0.5
     * instead of init_std 0.02 (to rounding); every other tensor is drawn bit for bit as before */
    Config r1 = small_config(4), r2 = r1;
    r2.router_init_std = 0.5f;
    Model p, q;
    model_init(&p, &r1, 1, 16);
    model_init(&q, &r2, 1, 16);
    for (int i = 0; i < p.pt.n; i++) {
        const ParamTensor *t = &p.pt.t[i];
        const int router = strstr(t->name, "moe.router") != NULL;
        if (router) {
            const double s = std_of(q.params + t->offset, t->numel);
            ck_assert_msg(fabs(s / 0.5 - 1.0) < 0.1, "%s: std %g with moe.router_init_std 0.5",
                          t->name, s);
            for (size_t j = 0; j < t->numel; j++)
                ck_assert_msg(fabsf(q.params[t->offset + j] - 25.0f * p.params[t->offset + j]) <=
                                  1e-6f * fabsf(q.params[t->offset + j]),
                              "%s[%zu]: 0.5 / 0.02 times the default draw", t->name, j);
        } else {
            ck_assert_msg(
                memcmp(q.params + t->offset, p.params + t->offset, t->numel * sizeof(float)) == 0,
                "%s changed with moe.router_init_std", t->name);
        }
    }
    model_free(&p), model_free(&q);
}
END_TEST

START_TEST(test_sandwich_gains) {
    Config c = small_config(4);
    ParamTable pt;
    params_table_build(&pt, &c);
    ck_assert_int_lt(params_find(&pt, "layers.0.attn_post_norm"), 0); /* pre-norm: none */
    const size_t plain = pt.total;
    params_table_free(&pt);
    for (int norm = MOE_NORM_SANDWICH; norm <= MOE_NORM_DSSN; norm++) {
        c.norm = norm;
        Model m;
        model_init(&m, &c, 1, 16);
        ck_assert_uint_eq(m.pt.total, plain + 2 * 4 * 64); /* two gains of C per block */
        const float ga = norm == MOE_NORM_DSSN ? 0.283f / 2.0f : 1.0f; /* sqrt(L) = 2 */
        const float gf = norm == MOE_NORM_DSSN ? 0.432f / 2.0f : 1.0f;
        for (int l = 0; l < 4; l++)
            for (int j = 0; j < 64; j++) {
                ck_assert(m.w.layers[l].attn_post_norm[j] == ga);
                ck_assert(m.w.layers[l].ffn_post_norm[j] == gf);
                ck_assert(m.w.layers[l].attn_norm[j] == 1.0f);
            }
        model_free(&m);
    }
}
END_TEST

static int all_bf16(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        if (u & 0xffffu) return 0;
    }
    return 1;
}

/* the router's gradient of one model with the given precision, and its loss */
static float router_run(int precision, float *grad_router, size_t n) {
    Config c = small_config(4);
    c.router_precision = precision;
    enum { B = 2, T = 16 };
    Model m;
    model_init(&m, &c, B, T);
    /* a router with spread scores, as after some training: at init the scores sit within a
     * bf16 spacing of each other and rounding them changes the top-k, which is the instability
     * itself, not the gradient's formula this test checks */
    for (int l = 0; l < c.n_layer; l++)
        for (int i = 0; i < 4 * 64; i++) m.w.layers[l].router[i] *= 8.0f;
    int in[B * T], tg[B * T];
    random_tokens(in, tg, B * T, 5);
    model_zero_grad(&m);
    const float loss = model_forward(&m, in, tg, B, T, NULL);
    model_backward(&m, 1.0f, NULL);
    const MoeActs *a = m.state.blocks[1].moe;
    if (precision != MOE_ROUTER_FP32)
        ck_assert_msg(all_bf16(a->logits, (size_t)B * T * 4), "logits not rounded to bf16");
    if (precision == MOE_ROUTER_BF16) {
        ck_assert_msg(all_bf16(a->scores, (size_t)B * T * 4), "scores not rounded");
        ck_assert_msg(all_bf16(a->xr, (size_t)B * T * 64), "router input not rounded");
        ck_assert_msg(all_bf16(a->wr, (size_t)4 * 64), "router weights not rounded");
    } else {
        ck_assert(!all_bf16(a->scores, (size_t)B * T * 4));
    }
    memcpy(grad_router, m.g.layers[1].router, n * sizeof(float));
    model_free(&m);
    return loss;
}

START_TEST(test_bf16_router) {
    enum { NR = 4 * 64 };
    float g32[NR], g16[NR];
    const float l32 = router_run(MOE_ROUTER_FP32, g32, NR);
    for (int p = MOE_ROUTER_BF16_LOGITS; p <= MOE_ROUTER_BF16; p++) {
        const float l16 = router_run(p, g16, NR);
        /* bf16 carries ~3 significant digits: the loss moves a little, not much */
        ck_assert_msg(l16 != l32 && fabsf(l16 - l32) < 1e-2f, "loss fp32 %g, bf16 mode %d %g", l32,
                      p, l16);
        /* straight-through: the router's gradient is the fp32 one's, up to the rounding */
        const double cosine = dot_d(g32, g16, NR) / sqrt(dot_d(g32, g32, NR) * dot_d(g16, g16, NR));
        ck_assert_msg(cosine > 0.99, "router gradient of bf16 mode %d: cosine %g to fp32's", p,
                      cosine);
    }
}
END_TEST

/* aux loss by hand: G sum_g f_g P_g over groups of E / G experts, f the fractions of the
 * assignments counted over `count` (E), P the mean scores of this call */
static double aux_by_hand(const double *count, const float *scores, int N, int E, int G) {
    double total = 0.0, loss = 0.0;
    for (int e = 0; e < E; e++) total += count[e];
    const int per = E / G;
    for (int g = 0; g < G; g++) {
        double f = 0.0, P = 0.0;
        for (int e = g * per; e < (g + 1) * per; e++) {
            f += count[e] / total;
            for (int n = 0; n < N; n++) P += scores[(size_t)n * E + e] / N;
        }
        loss += f * P;
    }
    return G * loss;
}

static void count_idx(double *count, const int *idx, int NK) {
    for (int j = 0; j < NK; j++) count[idx[j]] += 1.0;
}

START_TEST(test_balance_groups_and_global_scope) {
    enum { B = 2, T = 16, N = B * T, E = 8, K = 2 };
    for (int scope = MOE_SCOPE_MICRO; scope <= MOE_SCOPE_GLOBAL; scope++)
        for (int G = 0; G <= 4; G += 2) {
            Config c = small_config(E);
            c.balance_groups = G;
            c.balance_scope = scope;
            Model m;
            model_init(&m, &c, B, T);
            const MoeActs *a = m.state.blocks[2].moe;
            double step_count[E] = {0};
            for (int micro = 0; micro < 3; micro++) {
                int in[N], tg[N];
                random_tokens(in, tg, N, 20 + micro);
                model_forward(&m, in, tg, B, T, &(StepCtx){.training = 1, .micro = micro});
                double count[E] = {0};
                count_idx(count, a->idx, N * K);
                count_idx(step_count, a->idx, N * K);
                const double want = aux_by_hand(scope == MOE_SCOPE_GLOBAL ? step_count : count,
                                                a->scores, N, E, G ? G : E);
                ck_assert_msg(fabs(a->aux_loss - want) < 1e-5 * want,
                              "scope %d groups %d micro %d: aux loss %.8g, by hand %.8g", scope, G,
                              micro, (double)a->aux_loss, want);
            }
            model_free(&m);
        }
}
END_TEST

START_TEST(test_spike_rule) {
    SpikeWatch s;
    spike_watch_init(&s, 5, 3.0f);
    const double xs[] = {1.0, 1.1, 0.9, 1.0, 1.05}; /* mean 1.01, std 0.066 */
    for (int i = 0; i < 5; i++) ck_assert_int_eq(spike_watch_push(&s, xs[i]), 0); /* not judged */
    ck_assert_int_eq(spike_watch_push(&s, 1.19), 0); /* < 1.01 + 3 * 0.066 = 1.208 */
    ck_assert_int_eq(spike_watch_push(&s, NAN), 0);  /* a divergence, not a spike */
    ck_assert_int_eq(spike_watch_push(&s, 5.0), 1);
    ck_assert_int_eq(spike_watch_push(&s, 0.5), 0); /* below: never a spike */
    spike_watch_free(&s);

    /* a resumed run reads the rows it keeps: the same judgement as an unbroken one */
    char dir[] = "/tmp/moe-spike-XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    char path[64];
    snprintf(path, sizeof path, "%s/train.csv", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "step,loss,aux_loss,z_loss,lr,grad_norm,tok_per_s,val_loss,loss_spike,grad_spike\n");
    for (int i = 0; i < 8; i++)
        fprintf(f, "%d,%g,0,0,0.001,%g,10,,0,0\n", i + 1, 2.0 + 0.01 * (i % 3),
                1.0 + 0.1 * (i % 2));
    fclose(f);
    SpikeWatch l, g;
    spike_watch_init(&l, 4, 3.0f);
    spike_watch_init(&g, 4, 3.0f);
    spike_watch_refill(&l, &g, path, 6); /* rows 1..6 kept */
    ck_assert_int_eq(l.n, 6);
    ck_assert_int_eq(g.n, 6);
    ck_assert_int_eq(spike_watch_push(&l, 9.0), 1);
    ck_assert_int_eq(spike_watch_push(&g, 1.05), 0);
    spike_watch_free(&l), spike_watch_free(&g);
    unlink(path);
    rmdir(dir);
}
END_TEST

static Suite *stability_suite(void) {
    Suite *s = suite_create("stability");
    TCase *tc = tcase_create("stability");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tiny_init_and_scale);
    tcase_add_test(tc, test_sandwich_gains);
    tcase_add_test(tc, test_bf16_router);
    tcase_add_test(tc, test_balance_groups_and_global_scope);
    tcase_add_test(tc, test_spike_rule);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(stability_suite)
