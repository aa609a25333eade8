/*
 * test_upcycle.c: a dense model turned into an MoE (src/convert/upcycle.c).
 *
 *   - function preservation: exact copies with normalised top-k weights give the dense loss,
 *     whatever a non-trivial router picks (all blocks MoE, every other block, Mixtral top-k);
 *     noise or unnormalised weights do not;
 *   - parameter counts: what the experts and routers add, total and active;
 *   - exact copies: every expert is the dense FFN bit for bit, every other tensor the source's,
 *     and the optimizer state starts fresh;
 *   - drop-upcycling: exactly round(r Fe) units per expert re-drawn (gate row, up row, down
 *     column), different units per expert, with the dense matrix's statistics;
 *   - noise: its std is noise times the dense matrix's std (G times it for split down slices);
 *   - fine-grained split: expert e is slice e % G with w_down times G; two evenly weighted
 *     halves give the dense loss back;
 *   - determinism in the seed; bad inputs refused with the key named.
 * Every model here is small (C 32, F 64, L 2, B x T 2 x 16): the suite takes well under a
 * second.
 */
#include <stdarg.h>
#include <string.h>

#include "convert/upcycle.h"
#include "model/model.h"
#include "testutil.h"

enum { UB = 2, UT = 16, UC = 32, UF = 64 };

/* Apply key=value settings (NULL-terminated) and validate. */
static void set_keys(Config *c, ...) {
    char err[512];
    va_list ap;
    va_start(ap, c);
    for (const char *kv = va_arg(ap, const char *); kv; kv = va_arg(ap, const char *))
        ck_assert_msg(config_set(c, kv, err, sizeof err) == 0, "%s: %s", kv, err);
    va_end(ap);
    ck_assert_msg(config_validate(c, err, sizeof err) == 0, "%s", err);
}

/* The dense parent: a larger init than training uses, so each FFN moves the loss visibly. */
static Config dense_config(void) {
    Config c;
    config_defaults(&c);
    set_keys(&c, "model.d_model=32", "model.n_layer=2", "model.n_head=2", "model.d_ff=64",
             "model.seq_len=16", "model.init_std=0.2", "train.batch=2", "train.seed=11",
             "moe.num_experts=0", NULL);
    return c;
}

/* An MoE child of dense_config with E experts of hidden size d_expert (0 = d_ff). */
static Config moe_config(int E, int K, int d_expert) {
    Config c = dense_config();
    char e[32], k[32], f[32];
    snprintf(e, sizeof e, "moe.num_experts=%d", E);
    snprintf(k, sizeof k, "moe.top_k=%d", K);
    snprintf(f, sizeof f, "moe.d_expert=%d", d_expert);
    set_keys(&c, e, k, f, "moe.norm_topk=1", "train.seed=99", NULL);
    return c;
}

static void batch_tokens(int *in, int *tg) {
    Rng r;
    rng_seed(&r, 5);
    for (int i = 0; i < UB * UT; i++) {
        in[i] = (int)rng_below(&r, MOE_VOCAB);
        tg[i] = (int)rng_below(&r, MOE_VOCAB);
    }
}

static float loss_of(Model *m) {
    int in[UB * UT], tg[UB * UT];
    batch_tokens(in, tg);
    model_forward(m, in, tg, UB, UT, NULL);
    return m->state.loss;
}

/* dst = upcycle(dense model of dense_config) into config mc with options o. */
static void make_pair(Model *src, Model *dst, const Config *mc, const UpcycleOptions *o) {
    Config dc = dense_config();
    char err[512];
    model_init(src, &dc, UB, UT);
    model_init(dst, mc, UB, UT);
    ck_assert_msg(upcycle_model(dst, src, o, err, sizeof err) == 0, "%s", err);
}

static void free_pair(Model *src, Model *dst) {
    model_free(src);
    model_free(dst);
}

/* Loss of the upcycled model; the dense parent's in *dense, and when experts_used is not NULL
 * the number of distinct experts the first MoE block chose. */
static float upcycled_loss(const Config *mc, const UpcycleOptions *o, float *dense,
                           int *experts_used) {
    Model src, dst;
    make_pair(&src, &dst, mc, o);
    *dense = loss_of(&src);
    float loss = loss_of(&dst);
    if (experts_used) { /* distinct experts chosen in the first MoE block */
        const MoeActs *a = NULL;
        for (int l = 0; l < mc->n_layer && !a; l++) a = dst.state.blocks[l].moe;
        int used[64] = {0};
        *experts_used = 0;
        for (int i = 0; i < a->N * mc->top_k; i++)
            if (!used[a->idx[i]]++) (*experts_used)++;
    }
    free_pair(&src, &dst);
    return loss;
}

START_TEST(test_function_preserved) {
    static const char *variant[] = {NULL, "moe.every=2", "moe.topk_before_softmax=1"};
    UpcycleOptions o;
    upcycle_options_default(&o);
    o.router_std = 0.5f;
    o.seed = 3;
    for (int v = 0; v < 3; v++) {
        Config mc = moe_config(4, 2, 0);
        if (variant[v]) set_keys(&mc, variant[v], NULL);
        float dense;
        int used;
        float loss = upcycled_loss(&mc, &o, &dense, &used);
        ck_assert_msg(used > 2, "%s: the router sent every token to the same experts",
                      variant[v] ? variant[v] : "all MoE");
        expect_close(loss, dense, 0.0f, 1e-5f, variant[v] ? variant[v] : "all MoE");
    }
    /* the same check can fail: noise, or weights that do not sum to 1 */
    Config mc = moe_config(4, 2, 0);
    float dense;
    o.noise = 0.1f;
    float noisy = upcycled_loss(&mc, &o, &dense, NULL);
    ck_assert_msg(fabsf(noisy - dense) > 1e-4f * dense, "noise 0.1: loss %.7g = dense %.7g", noisy,
                  dense);
    o.noise = 0.0f;
    set_keys(&mc, "moe.norm_topk=0", NULL);
    float unnorm = upcycled_loss(&mc, &o, &dense, NULL);
    ck_assert_msg(fabsf(unnorm - dense) > 1e-4f * dense, "norm_topk=0: loss %.7g = dense %.7g",
                  unnorm, dense);
}
END_TEST

START_TEST(test_param_counts) {
    const int E = 4, K = 2;
    Config dc = dense_config(), mc = moe_config(E, K, 0);
    ParamTable dp, mp;
    params_table_build(&dp, &dc);
    params_table_build(&mp, &mc);
    size_t per_block = (size_t)(E - 1) * 3 * UF * UC + (size_t)E * UC;
    ck_assert_uint_eq(params_count_total(&mp), params_count_total(&dp) + 2 * per_block);
    size_t per_block_active = (size_t)(K - 1) * 3 * UF * UC + (size_t)E * UC;
    ck_assert_uint_eq(params_count_active(&mp, &mc),
                      params_count_total(&dp) + 2 * per_block_active);
    params_table_free(&mp);
    set_keys(&mc, "moe.every=2", NULL); /* block 0 MoE, block 1 dense */
    params_table_build(&mp, &mc);
    ck_assert_uint_eq(params_count_total(&mp), params_count_total(&dp) + per_block);
    params_table_free(&mp);
    params_table_free(&dp);
}
END_TEST

START_TEST(test_exact_copies) {
    const int E = 4;
    Config mc = moe_config(E, 2, 0);
    set_keys(&mc, "moe.balance=aux_free", NULL); /* so the model has router biases */
    Config dc = dense_config();
    Model src, dst;
    model_init(&src, &dc, UB, UT);
    model_init(&dst, &mc, UB, UT);
    /* stale optimizer state that upcycling must clear */
    for (size_t i = 0; i < dst.pt.total; i++) dst.m[i] = dst.v[i] = dst.grads[i] = 1.0f;
    for (int i = 0; i < dst.n_moe * E; i++) dst.router_bias[i] = 1.0f;
    dst.step = 7;
    UpcycleOptions o;
    upcycle_options_default(&o);
    char err[512];
    ck_assert_msg(upcycle_model(&dst, &src, &o, err, sizeof err) == 0, "%s", err);

    const size_t FC = (size_t)UF * UC;
    for (int l = 0; l < mc.n_layer; l++) {
        const LayerView *d = &dst.w.layers[l], *s = &src.w.layers[l];
        for (int e = 0; e < E; e++) {
            ck_assert_msg(memcmp(d->e_gate + e * FC, s->w_gate, FC * sizeof(float)) == 0,
                          "layer %d expert %d: w_gate", l, e);
            ck_assert_msg(memcmp(d->e_up + e * FC, s->w_up, FC * sizeof(float)) == 0,
                          "layer %d expert %d: w_up", l, e);
            ck_assert_msg(memcmp(d->e_down + e * FC, s->w_down, FC * sizeof(float)) == 0,
                          "layer %d expert %d: w_down", l, e);
        }
        ck_assert_msg(max_abs(d->router, (size_t)E * UC) > 0.0f, "layer %d: router all zero", l);
    }
    int copied = 0;
    for (int i = 0; i < dst.pt.n; i++) {
        const ParamTensor *t = &dst.pt.t[i];
        int j = params_find(&src.pt, t->name);
        if (j < 0) continue;
        copied++;
        ck_assert_msg(memcmp(dst.params + t->offset, src.params + src.pt.t[j].offset,
                             t->numel * sizeof(float)) == 0,
                      "%s differs from the dense model", t->name);
    }
    ck_assert_int_eq(copied, 1 + 2 * 6 + 2); /* tok_emb, 6 per block, final_norm, head */
    ck_assert_float_eq(max_abs(dst.m, dst.pt.total), 0.0f);
    ck_assert_float_eq(max_abs(dst.v, dst.pt.total), 0.0f);
    ck_assert_float_eq(max_abs(dst.grads, dst.pt.total), 0.0f);
    ck_assert_float_eq(max_abs(dst.router_bias, (size_t)dst.n_moe * E), 0.0f);
    ck_assert_int_eq(dst.step, 0);
    free_pair(&src, &dst);
}
END_TEST

/* Units of expert e (hidden size Fe) whose weights differ from dense slice 0; fails unless each
 * such unit differs in every element of its gate row, up row and down column. */
static int changed_units(const LayerView *d, const LayerView *s, int e, int Fe, int *mask) {
    const float *g = d->e_gate + (size_t)e * Fe * UC, *u = d->e_up + (size_t)e * Fe * UC;
    const float *dn = d->e_down + (size_t)e * Fe * UC;
    int n = 0;
    for (int j = 0; j < Fe; j++) {
        int diff = 0;
        for (int c = 0; c < UC; c++) {
            diff += g[j * UC + c] != s->w_gate[j * UC + c];
            diff += u[j * UC + c] != s->w_up[j * UC + c];
            diff += dn[c * Fe + j] != s->w_down[c * UF + j];
        }
        ck_assert_msg(diff == 0 || diff == 3 * UC, "expert %d unit %d: %d of %d weights differ", e,
                      j, diff, 3 * UC);
        mask[j] = diff > 0;
        n += mask[j];
    }
    return n;
}

START_TEST(test_drop_upcycling) {
    const int E = 4;
    Config mc = moe_config(E, 2, 0);
    UpcycleOptions o;
    upcycle_options_default(&o);
    const float ratios[] = {0.25f, 0.0f, 1.0f};
    const int want[] = {16, 0, UF};
    for (int r = 0; r < 3; r++) {
        o.drop_ratio = ratios[r];
        Model src, dst;
        make_pair(&src, &dst, &mc, &o);
        int mask[E][UF], distinct = 0;
        for (int l = 0; l < mc.n_layer; l++)
            for (int e = 0; e < E; e++) {
                int n = changed_units(&dst.w.layers[l], &src.w.layers[l], e, UF, mask[e]);
                ck_assert_msg(n == want[r], "drop_ratio %g, layer %d expert %d: %d units changed",
                              ratios[r], l, e, n);
                if (e > 0) distinct += memcmp(mask[e], mask[0], sizeof mask[0]) != 0;
            }
        if (r == 0) ck_assert_msg(distinct > 0, "every expert re-drew the same units");
        free_pair(&src, &dst);
    }
}
END_TEST

/* Re-drawn units take the dense matrix's mean and std (a large matrix, every unit re-drawn);
 * with split G, the down slices are G times the dense values, and so are their statistics. */
START_TEST(test_drop_statistics) {
    enum { F = 512, C = 64 };
    const size_t n = (size_t)F * C;
    float *wg = floats_alloc(n), *wu = floats_alloc(n), *wd = floats_alloc(n);
    float *eg = floats_alloc(n), *eu = floats_alloc(n), *ed = floats_alloc(n);
    Rng r;
    rng_seed(&r, 21);
    for (size_t i = 0; i < n; i++) {
        wg[i] = 0.3f + 0.5f * rng_normal(&r);
        wu[i] = -0.2f + 0.1f * rng_normal(&r);
        wd[i] = 0.5f + 2.0f * rng_normal(&r);
    }
    UpcycleOptions o;
    upcycle_options_default(&o);
    o.drop_ratio = 1.0f;
    for (int G = 1; G <= 2; G++) {
        o.split = G;
        rng_seed(&r, 4);
        /* E = G experts: together they hold F * C floats per matrix, every one re-drawn */
        upcycle_ffn(eg, eu, ed, wg, wu, wd, G, F, C, &o, &r);
        const float *dense[3] = {wg, wu, wd}, *expert[3] = {eg, eu, ed};
        for (int m = 0; m < 3; m++) {
            float dm, ds, em, es, scale = m == 2 ? (float)G : 1.0f;
            upcycle_stats(&dm, &ds, dense[m], n);
            upcycle_stats(&em, &es, expert[m], n);
            expect_close(em, scale * dm, 0.03f * scale * ds, 0.0f, "mean of the re-drawn units");
            expect_close(es, scale * ds, 0.0f, 0.03f, "std of the re-drawn units");
            size_t same = 0;
            for (size_t i = 0; i < n; i++) same += expert[m][i] == dense[m][i];
            ck_assert_msg(same == 0, "matrix %d: %zu weights kept at drop_ratio 1", m, same);
        }
    }
    /* upcycle_drop_units reports distinct units, and changes exactly those */
    int units[8], seen[F] = {0};
    memcpy(eg, wg, n * sizeof(float));
    memcpy(eu, wu, n * sizeof(float));
    memcpy(ed, wd, n * sizeof(float));
    const float stats[6] = {0, 1, 0, 1, 0, 1};
    upcycle_drop_units(eg, eu, ed, units, 8, F, C, stats, &r);
    for (int i = 0; i < 8; i++) {
        ck_assert_msg(units[i] >= 0 && units[i] < F && !seen[units[i]]++, "unit %d", units[i]);
        ck_assert_msg(eg[(size_t)units[i] * C] != wg[(size_t)units[i] * C], "unit not re-drawn");
    }
    int changed = 0;
    for (int j = 0; j < F; j++)
        changed += memcmp(eg + (size_t)j * C, wg + (size_t)j * C, C * 4) != 0;
    ck_assert_int_eq(changed, 8);
    free(wg), free(wu), free(wd), free(eg), free(eu), free(ed);
}
END_TEST

/* Noise is relative to each dense matrix's std (G times it for the down slices of split G). */
START_TEST(test_noise_scale) {
    enum { F = 256, C = 64 };
    const size_t n = (size_t)F * C;
    float *w[3], *e[3];
    const float stds[3] = {0.5f, 0.1f, 2.0f};
    Rng r;
    rng_seed(&r, 8);
    for (int m = 0; m < 3; m++) {
        w[m] = floats_alloc(n);
        e[m] = floats_alloc(n);
        for (size_t i = 0; i < n; i++) w[m][i] = 1.0f + stds[m] * rng_normal(&r);
    }
    UpcycleOptions o;
    upcycle_options_default(&o);
    o.noise = 0.1f;
    for (int G = 1; G <= 2; G++) {
        o.split = G;
        upcycle_ffn(e[0], e[1], e[2], w[0], w[1], w[2], G, F, C, &o, &r);
        for (int m = 0; m < 3; m++) {
            float scale = m == 2 ? (float)G : 1.0f, dm, ds, nm, ns;
            upcycle_stats(&dm, &ds, w[m], n);
            /* noise = expert - its copy: gate and up slices are contiguous rows (k indexes the
             * dense matrix too); down of expert x is (C, Fe) with (c, j) = w_down[c, x Fe + j] */
            float *delta = floats_alloc(n);
            const size_t Fe = (size_t)F / G, per = Fe * C;
            for (size_t k = 0; k < n; k++) {
                size_t x = k / per, c = k % per / Fe, j = k % Fe;
                float copy = m < 2 ? w[m][k] : scale * w[m][c * F + x * Fe + j];
                delta[k] = e[m][k] - copy;
            }
            upcycle_stats(&nm, &ns, delta, n);
            expect_close(ns, 0.1f * scale * ds, 0.0f, 0.03f, "std of the noise");
            expect_close(nm, 0.0f, 0.03f * ns, 0.0f, "mean of the noise");
            free(delta);
        }
    }
    for (int m = 0; m < 3; m++) free(w[m]), free(e[m]);
}
END_TEST

START_TEST(test_fine_grained_split) {
    const int E = 4, G = 2, Fe = UF / G;
    Config mc = moe_config(E, 2, Fe);
    UpcycleOptions o;
    upcycle_options_default(&o);
    o.split = G;
    Model src, dst;
    make_pair(&src, &dst, &mc, &o);
    for (int l = 0; l < mc.n_layer; l++) {
        const LayerView *d = &dst.w.layers[l], *s = &src.w.layers[l];
        for (int e = 0; e < E; e++) {
            const int g = e % G;
            const size_t per = (size_t)Fe * UC;
            ck_assert(memcmp(d->e_gate + e * per, s->w_gate + g * per, per * 4) == 0);
            ck_assert(memcmp(d->e_up + e * per, s->w_up + g * per, per * 4) == 0);
            for (int c = 0; c < UC; c++)
                for (int j = 0; j < Fe; j++)
                    ck_assert_msg(d->e_down[e * per + c * Fe + j] ==
                                      2.0f * s->w_down[c * UF + g * Fe + j],
                                  "layer %d expert %d: w_down[%d, %d]", l, e, c, j);
        }
    }
    free_pair(&src, &dst);
    /* a zero router weights the two halves 1/2 each: the dense FFN, so the dense loss */
    mc = moe_config(2, 2, Fe);
    o.router_std = 0.0f;
    make_pair(&src, &dst, &mc, &o);
    for (int l = 0; l < mc.n_layer; l++)
        ck_assert_float_eq(max_abs(dst.w.layers[l].router, 2 * UC), 0.0f);
    expect_close(loss_of(&dst), loss_of(&src), 0.0f, 1e-5f, "split 2, zero router");
    free_pair(&src, &dst);
}
END_TEST

START_TEST(test_deterministic_in_seed) {
    Config mc = moe_config(4, 2, 0);
    UpcycleOptions o;
    upcycle_options_default(&o);
    o.noise = 0.05f;
    o.drop_ratio = 0.25f;
    Model s1, d1, s2, d2;
    make_pair(&s1, &d1, &mc, &o);
    make_pair(&s2, &d2, &mc, &o);
    ck_assert_msg(memcmp(d1.params, d2.params, d1.pt.total * sizeof(float)) == 0,
                  "same seed, different parameters");
    free_pair(&s2, &d2);
    o.seed = 2;
    make_pair(&s2, &d2, &mc, &o);
    ck_assert_msg(memcmp(d1.params, d2.params, d1.pt.total * sizeof(float)) != 0,
                  "another seed, the same parameters");
    free_pair(&s1, &d1);
    free_pair(&s2, &d2);
}
END_TEST

/* upcycle_check refuses, and its message names the key to change. */
static void expect_refused(const Config *dc, const Config *mc, const UpcycleOptions *o,
                           const char *key) {
    char err[512] = "";
    ck_assert_msg(upcycle_check(dc, mc, o, err, sizeof err) == -1, "%s accepted", key);
    ck_assert_msg(strstr(err, key) != NULL, "message for %s: %s", key, err);
}

START_TEST(test_bad_inputs) {
    Config dc = dense_config(), mc = moe_config(4, 2, 0);
    UpcycleOptions o;
    upcycle_options_default(&o);
    char err[512];
    ck_assert_msg(upcycle_check(&dc, &mc, &o, err, sizeof err) == 0, "%s", err);

    expect_refused(&mc, &mc, &o, "moe.num_experts"); /* already an MoE */
    expect_refused(&dc, &dc, &o, "moe.num_experts"); /* target dense */
    Config bad = mc;
    bad.d_model = 64;
    expect_refused(&dc, &bad, &o, "model.d_model");
    bad = mc;
    bad.d_ff = 128;
    expect_refused(&dc, &bad, &o, "model.d_ff");
    bad = mc;
    bad.num_shared = 1;
    expect_refused(&dc, &bad, &o, "moe.num_shared");
    bad = mc;
    bad.tied = 1; /* the dense model's head is its own */
    expect_refused(&dc, &bad, &o, "model.tied");
    o.split = 2; /* experts of d_ff, not d_ff / 2 */
    expect_refused(&dc, &mc, &o, "moe.d_expert");
    bad = moe_config(3, 2, UF / 2); /* 3 experts, 2 slices */
    expect_refused(&dc, &bad, &o, "moe.num_experts");
    o.split = 3; /* 64 / 3 does not slice evenly, although d_expert = 21 = 64 / 3 rounded down */
    bad = moe_config(3, 2, UF / 3);
    expect_refused(&dc, &bad, &o, "split=3");
    upcycle_options_default(&o);
    o.drop_ratio = 1.5f;
    expect_refused(&dc, &mc, &o, "drop_ratio");
    o.drop_ratio = -0.1f;
    expect_refused(&dc, &mc, &o, "drop_ratio");
    upcycle_options_default(&o);
    o.noise = -1.0f;
    expect_refused(&dc, &mc, &o, "noise");
    o.noise = NAN;
    expect_refused(&dc, &mc, &o, "noise");
    upcycle_options_default(&o);
    o.router_std = -0.02f;
    expect_refused(&dc, &mc, &o, "router_std");
    upcycle_options_default(&o);
    bad = mc;
    bad.n_head = 4;
    expect_refused(&dc, &bad, &o, "model.n_head");
    /* upcycle_model refuses too, and leaves the target untouched */
    Model src, dst;
    model_init(&src, &mc, UB, UT);
    model_init(&dst, &mc, UB, UT);
    float before = dst.params[0];
    upcycle_options_default(&o);
    ck_assert_int_eq(upcycle_model(&dst, &src, &o, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "moe.num_experts=0") != NULL, "%s", err);
    ck_assert_float_eq(dst.params[0], before);
    free_pair(&src, &dst);
}
END_TEST

static Suite *upcycle_suite(void) {
    Suite *s = suite_create("upcycle");
    TCase *tc = tcase_create("upcycle");
    tcase_add_test(tc, test_function_preserved);
    tcase_add_test(tc, test_param_counts);
    tcase_add_test(tc, test_exact_copies);
    tcase_add_test(tc, test_drop_upcycling);
    tcase_add_test(tc, test_drop_statistics);
    tcase_add_test(tc, test_noise_scale);
    tcase_add_test(tc, test_fine_grained_split);
    tcase_add_test(tc, test_deterministic_in_seed);
    tcase_add_test(tc, test_bad_inputs);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(upcycle_suite)
