/*
 * test_plan_search.c: `moe plan`'s search, its keys and the layouts it refuses (src/plan/).
 *   - invalid layouts (tp vs heads, tp over a node, ep vs experts, pp over layers, a stage left
 *     without a layer, batch not splitting, moe.c engine with vpp 2, a grid moe train refuses,
 *     or no config; its tp 2 and pp 2 are valid): valid = 0,
 *     the reason names the field;
 *   - plan_search: all valid, fitting first by step time, then by memory; a fixed pp kept;
 *     all but the first say why they lose; the first is plan_layout of its layout;
 *   - plan_set: unknown key (nearest suggested), non-number, out of range, fraction for a
 *     whole number, bad choice: -1 naming the key, nothing changed; good values set;
 *     plan_set_fixed marks a layout field fixed, plan_set does not; a count above the
 *     planner's bound (GPUs, batch, layout sizes, vocabulary) names the bound; a model key
 *     the engine has (moe.num_experts, model.d_model, ...) is refused with the engine's bound
 *     and message, and model.post_norm with its new name model.norm; a byte size of 0 and a
 *     cluster's memory, efficiency or bandwidth of 0 are refused with the reason;
 *   - at the bounds (2^20 GPUs, 2^24 sequences) dp, the replicas and the micro-batches are
 *     exact and no term is negative.
 * The cost model's formulas: tests/test_plan.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "plan/plan.h"
#include "plan_util.h"
#include "testutil.h"

static void expect_invalid(const PlanInput *in, PlanLayout l, const char *field, const char *what) {
    PlanResult r;
    plan_layout(in, &l, &r);
    ck_assert_msg(!r.valid, "%s: expected valid = 0, got a valid layout", what);
    ck_assert_msg(strstr(r.invalid, field) != NULL, "%s: expected a reason naming '%s', got '%s'",
                  what, field, r.invalid);
}

#define LAY(tp, pp, ep) ((PlanLayout){tp, pp, ep, 1, 1, PLAN_RC_NONE})

START_TEST(test_invalid_layouts) {
    static PlanInput in;
    hand_input(&in); /* 4 heads, 4 experts, 2 layers, 8 GPUs in nodes of 4 */
    expect_invalid(&in, LAY(8, 1, 1), "tp = 8", "tp 8 over nodes of 4");
    in.t.global_batch = 12;
    expect_invalid(&in, LAY(1, 1, 1), "global batch", "12 sequences over dp 8");
    in.k.gpus = 6, in.t.global_batch = 6;
    expect_invalid(&in, LAY(1, 1, 3), "ep = 3", "ep 3 of 4 experts");
    in.k.gpus_per_node = 8;
    expect_invalid(&in, LAY(3, 1, 1), "tp = 3", "tp 3 of 4 heads");
    in.k.gpus = 4;
    expect_invalid(&in, LAY(1, 4, 1), "pp = 4", "pp 4 of 2 layers");

    /* the moe.c engine: tensor, pipeline, expert and data parallelism, no virtual stages, what
     * moe train takes (a pipeline refuses a tied head), and moe.c's own models only */
    Config c;
    char err[512];
    config_defaults(&c);
    plan_defaults(&in);
    plan_from_config(&in, &c);
    ck_assert_int_eq(plan_preset(&in, "cluster", "laptop", err, sizeof err), 0);
    in.k.gpus = 2;
    expect_invalid(&in, ((PlanLayout){1, 2, 1, 2, 1, PLAN_RC_NONE}), "vpp = 1",
                   "the moe.c engine with vpp 2");
    in.m.c.tied = 1;
    expect_invalid(&in, LAY(1, 2, 1), "model.tied", "the moe.c engine, pp 2 with a tied head");
    in.m.c.tied = 0;
    PlanResult ok;
    plan_layout(&in, &LAY(2, 1, 1), &ok);
    ck_assert_msg(ok.valid, "the moe.c engine with tp 2: %s", ok.invalid);
    plan_layout(&in, &LAY(1, 2, 1), &ok);
    ck_assert_msg(ok.valid, "the moe.c engine with pp 2: %s", ok.invalid);
    plan_defaults(&in);
    ck_assert_int_eq(plan_preset(&in, "model", "mixtral-8x7b", err, sizeof err), 0);
    ck_assert_int_eq(plan_preset(&in, "cluster", "h100", err, sizeof err), 0);
    in.t.engine = PLAN_ENGINE_MOEC, in.t.zero = 0, in.t.global_batch = 8;
    expect_invalid(&in, LAY(1, 1, 8), "--config", "the moe.c engine without a moe.c config");
    /* and the same layouts are valid where they divide (so each refusal above is its own) */
    hand_input(&in);
    PlanResult r;
    plan_layout(&in, &in.lay, &r);
    ck_assert_msg(r.valid, "the hand layout: %s", r.invalid);
}
END_TEST

#define MAX_RESULTS 20000

START_TEST(test_search) {
    static PlanInput in;
    static PlanResult out[MAX_RESULTS];
    char err[512];
    plan_defaults(&in);
    ck_assert_int_eq(plan_preset(&in, "model", "mixtral-8x7b", err, sizeof err), 0);
    ck_assert_int_eq(plan_preset(&in, "cluster", "h100", err, sizeof err), 0);
    in.k.gpus = 32, in.t.global_batch = 64;
    for (int fixed = 0; fixed <= 1; fixed++) {
        if (fixed) in.fixed |= PLAN_FIX_PP, in.lay.pp = 1;
        const int n = plan_search(&in, out, MAX_RESULTS);
        ck_assert_msg(n > 1 && n < MAX_RESULTS, "expected some layouts, got %d", n);
        ck_assert_msg(out[0].fits, "the best layout of Mixtral on 32 H100 should fit");
        int unfit = 0;
        for (int i = 0; i < n; i++) {
            const PlanResult *x = &out[i], *y = &out[i > 0 ? i - 1 : 0];
            ck_assert_msg(x->valid && (!fixed || x->lay.pp == 1) && (i == 0 || x->loses[0]),
                          "result %d: expected valid%s and why it loses; valid %d, pp %d, '%s'", i,
                          fixed ? ", pp 1" : "", x->valid, x->lay.pp, x->loses);
            /* fitting ones by step time, then the others by memory */
            const int ordered = x->fits    ? y->fits && x->step_s >= y->step_s
                                : !y->fits ? x->mem_total >= y->mem_total
                                           : 1;
            ck_assert_msg(i == 0 || ordered,
                          "result %d (fits %d, %.6g s, %.6g B) ranked after one that fits %d, "
                          "%.6g s, %.6g B",
                          i, x->fits, x->step_s, x->mem_total, y->fits, y->step_s, y->mem_total);
            unfit += !x->fits;
        }
        ck_assert_msg(fixed || unfit, "expected some layouts of 32 GPUs not to fit");
        PlanResult again;
        plan_layout(&in, &out[0].lay, &again);
        EXPECT_REL(out[0].step_s, again.step_s, RTOL, "the best's step_s against plan_layout");
        EXPECT_REL(out[0].mem_total, again.mem_total, RTOL, "the best's memory");
    }
}
END_TEST

static void expect_refused(PlanInput *in, const char *kv, const char *a, const char *b) {
    char err[512] = "";
    static PlanInput before;
    memcpy(&before, in, sizeof before);
    ck_assert_msg(plan_set(in, kv, err, sizeof err) == -1, "%s: expected -1, got 0", kv);
    ck_assert_msg(strstr(err, a) != NULL, "%s: expected a message naming '%s', got '%s'", kv, a,
                  err);
    ck_assert_msg(!b || strstr(err, b) != NULL, "%s: expected '%s' in the message, got '%s'", kv, b,
                  err);
    ck_assert_msg(memcmp(&before, in, sizeof before) == 0,
                  "%s: a refused setting changed the input", kv);
}

/* Every key of `moe plan --keys` takes a value and sets its field: 1 for a number (an engine
 * key's lowest value when that is more: model.vocab's 2), a choice's first name; a key whose type
 * disagrees with its field's (an int written into a double) is refused by plan_set, so it fails
 * here. The value read back through the CSV of a plan would need a model and a cluster; the fields
 * are checked through plan_set's own answer. One name, one row: a key is listed once, and a model
 * key the engine has comes with its row's help (the planner reads it through that row, and has none
 * of its own). */
START_TEST(test_every_key_sets) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    plan_print_keys(f);
    fclose(f);
    char *all = malloc(len + 2); /* the listing after a newline: every name follows one */
    ck_assert_ptr_nonnull(all);
    snprintf(all, len + 2, "\n%s", text);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), n++) {
        char name[64], kind[64], kv[160], err[512];
        ck_assert_int_eq(sscanf(line, "%63s %63s", name, kind), 2);
        double lowest = 1;
        for (int i = 0; i < CONFIG_NKEYS; i++)
            if (strcmp(CONFIG_KEYS[i].name, name) == 0 && CONFIG_KEYS[i].min > 1)
                lowest = CONFIG_KEYS[i].min;
        if (strchr(kind, '|'))
            snprintf(kv, sizeof kv, "%s=%.*s", name, (int)strcspn(kind, "|"), kind);
        else
            snprintf(kv, sizeof kv, "%s=%.0f", name, lowest);
        static PlanInput in;
        plan_defaults(&in);
        ck_assert_msg(plan_set(&in, kv, err, sizeof err) == 0, "%s: %s", kv, err);
        char spaced[80];
        snprintf(spaced, sizeof spaced, "\n%s ", name);
        const char *first = strstr(all, spaced);
        ck_assert_msg(first && !strstr(first + 1, spaced), "%s listed twice", name);
        const int model_key = strncmp(name, "model.", 6) == 0 || strncmp(name, "moe.", 4) == 0;
        for (int i = 0; i < CONFIG_NKEYS && model_key; i++)
            if (strcmp(CONFIG_KEYS[i].name, name) == 0)
                ck_assert_msg(strstr(line, CONFIG_KEYS[i].help) != NULL,
                              "%s is the engine's key, but its line is not the engine's row: %s",
                              name, line);
    }
    free(text);
    free(all);
    ck_assert_msg(n >= 50, "moe plan --keys listed %d keys", n);
    /* an int field read back: train.overlap_dp=0 turns the overlap off */
    static PlanInput in;
    char err[512];
    plan_defaults(&in);
    ck_assert_int_eq(in.t.overlap_dp, 1);
    ck_assert_int_eq(plan_set(&in, "train.overlap_dp=0", err, sizeof err), 0);
    ck_assert_int_eq(in.t.overlap_dp, 0);
}
END_TEST

START_TEST(test_set) {
    static PlanInput in;
    char err[512];
    plan_defaults(&in);
    expect_refused(&in, "model.d_modle=3", "model.d_modle", "did you mean 'model.d_model'");
    expect_refused(&in, "model.d_model=abc", "model.d_model", "abc");
    expect_refused(&in, "model.d_model=", "model.d_model", "no value");
    expect_refused(&in, "cluster.efficiency=2", "cluster.efficiency", "more than 0 and at most 1");
    /* counts above the planner's bounds: the key and the bound named */
    expect_refused(&in, "cluster.gpus=1099511627776", "cluster.gpus", "[1, 1048576]");
    expect_refused(&in, "cluster.gpus_per_node=1099511627776", "cluster.gpus_per_node", "1048576]");
    expect_refused(&in, "train.global_batch=1099511627776", "train.global_batch", "[1, 16777216]");
    expect_refused(&in, "train.accum=1099511627776", "train.accum", "<= 1048576");
    expect_refused(&in, "layout.ep=1099511627776", "layout.ep", "1048576]");
    expect_refused(&in, "layout.pp=2048", "layout.pp", "[1, 1024]");
    expect_refused(&in, "layout.micro_batch=1099511627776", "layout.micro_batch", "16777216]");
    /* a key the engine has: its row's bound and message (config/keys.c), not the planner's */
    expect_refused(&in, "moe.num_experts=1099511627776", "moe.num_experts", "<= 4096");
    expect_refused(&in, "model.d_model=70000", "model.d_model", "<= 65536");
    expect_refused(&in, "moe.top_k=0", "moe.top_k", ">= 1");
    expect_refused(&in, "model.norm=post", "model.norm", "pre|sandwich|dssn");
    /* a former name of the planner's: refused with the engine's */
    expect_refused(&in, "model.post_norm=1", "model.post_norm is now model.norm",
                   "model.norm=sandwich");
    expect_refused(&in, "model.vocab=16777217", "model.vocab", "<= 16777216");
    /* sizes of nothing, and settings of the cluster at zero: refused with their reason */
    const char *bytes[] = {"weight", "grad", "moment", "act", "a2a"};
    for (int i = 0; i < 5; i++) {
        char kv[80], key[64];
        snprintf(key, sizeof key, "train.%s_bytes", bytes[i]);
        snprintf(kv, sizeof kv, "%s=0", key);
        expect_refused(&in, kv, key, "[0.125, 16], not 0: a stored value takes at least one bit");
    }
    const char *cluster[] = {"memory_gb", "efficiency", "hbm_tbs", "intra_gbs", "inter_gbs"};
    for (int i = 0; i < 5; i++) {
        char kv[80], key[64];
        snprintf(key, sizeof key, "cluster.%s", cluster[i]);
        snprintf(kv, sizeof kv, "%s=0", key);
        expect_refused(&in, kv, key, "must be more than 0");
    }
    ck_assert_int_eq(plan_set(&in, "train.master_bytes=0", err, sizeof err), 0); /* none */
    expect_refused(&in, "train.zero=4", "train.zero", "[0, 3]");
    expect_refused(&in, "model.n_layer=2.5", "model.n_layer", "expects an integer");
    expect_refused(&in, "layout.tp=1.5", "layout.tp", "whole");
    expect_refused(&in, "model.attention=gqa", "model.attention", "mha|mla");
    expect_refused(&in, "layout.recompute=some", "layout.recompute", "selective");
    expect_refused(&in, "model.d_model", "model.d_model", "key=value");

    const char *good[] = {"model.d_model=512",  "cluster.efficiency=0.45", "model.attention=mla",
                          "train.engine=moe.c", "layout.recompute=full",   "layout.tp=4"};
    for (int i = 0; i < 6; i++)
        ck_assert_msg(plan_set(&in, good[i], err, sizeof err) == 0, "%s: %s", good[i], err);
    ck_assert_msg(in.m.c.d_model == 512 && in.k.efficiency == 0.45 &&
                      in.m.c.attention == MOE_ATTN_MLA && in.t.engine == PLAN_ENGINE_MOEC &&
                      in.lay.recompute == PLAN_RC_FULL && in.lay.tp == 4,
                  "expected 512 0.45 mla moe.c full 4, got %d %g %d %d %d %d", in.m.c.d_model,
                  in.k.efficiency, in.m.c.attention, in.t.engine, in.lay.recompute, in.lay.tp);
    ck_assert_msg(in.fixed == 0, "plan_set fixed a field (%u)", in.fixed);
    ck_assert_int_eq(plan_set_fixed(&in, "layout.pp=2", err, sizeof err), 0);
    ck_assert_int_eq(in.lay.pp, 2);
    ck_assert_msg(in.fixed == PLAN_FIX_PP, "plan_set_fixed layout.pp: expected PLAN_FIX_PP, got %u",
                  in.fixed);
    ck_assert_int_eq(plan_set_fixed(&in, "model.n_layer=8", err, sizeof err), 0);
    ck_assert_msg(in.fixed == PLAN_FIX_PP, "a model key fixed a layout field (%u)", in.fixed);
}
END_TEST

/* At the planner's bounds every size of a layout is exact: dp the GPUs, each expert's replicas
 * dp / ep, the micro-batches batch / dp, and no memory, traffic or time below zero. */
START_TEST(test_bounds_are_exact) {
    static PlanInput in;
    char err[512];
    plan_defaults(&in);
    const char *set[] = {"cluster.gpus=1048576", "train.global_batch=16777216"};
    ck_assert_msg(plan_preset(&in, "model", "mixtral-8x7b", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(plan_preset(&in, "cluster", "h100", err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(plan_set(&in, set[i], err, sizeof err) == 0, "%s: %s", set[i], err);
    ck_assert_msg(plan_validate(&in, err, sizeof err) == 0, "%s", err);
    PlanResult r;
    plan_layout(&in, &LAY(1, 1, 8), &r);
    ck_assert_msg(r.valid, "%s", r.invalid);
    ck_assert_int_eq(r.dp, PLAN_MAX_GPUS);
    ck_assert_int_eq(r.edp, PLAN_MAX_GPUS / 8);
    EXPECT_EQ(r.micro, (double)PLAN_MAX_BATCH / PLAN_MAX_GPUS, "micro-batches a step");
    const double terms[] = {r.mem_weights, r.mem_grads, r.mem_optim, r.mem_acts,
                            r.dp_bytes,    r.ep_bytes,  r.compute_s, r.optim_s};
    for (int i = 0; i < 8; i++) ck_assert_msg(terms[i] > 0, "term %d: %g", i, terms[i]);
    ck_assert_msg(r.step_s > 0 && r.mfu > 0 && r.mfu < 1, "step %g s, MFU %g", r.step_s, r.mfu);
}
END_TEST

static Suite *plan_search_suite(void) {
    Suite *s = suite_create("plan_search");
    TCase *tc = tcase_create("plan_search");
    tcase_add_test(tc, test_invalid_layouts);
    tcase_add_test(tc, test_search);
    tcase_add_test(tc, test_set);
    tcase_add_test(tc, test_every_key_sets);
    tcase_add_test(tc, test_bounds_are_exact);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(plan_search_suite)
