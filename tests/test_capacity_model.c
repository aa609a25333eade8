/*
 * test_capacity_model.c: whole models with token-choice capacity (moe.capacity_factor).
 *
 *   - dropless, a capacity that drops nothing, and the same padded give bit-identical losses;
 *     a capacity that drops changes the loss;
 *   - a token whose every assignment is dropped leaves its layer with exactly its residual;
 *   - moe.eval_capacity_factor: -1 evaluates at the training factor, 0 is dropless (the loss of
 *     a dropless model, bit for bit), a larger factor drops less, and training ignores it;
 *   - moe.second_expert_random: drops only second choices, only while training.
 * The block and the plans themselves: test_capacity.c.
 */
#include <string.h>

#include "model/model.h"
#include "moe/moe_ops.h"
#include "testutil.h"

static Config cap_config(float factor) {
    Config c;
    config_defaults(&c);
    c.d_model = 8;
    c.n_layer = 2;
    c.n_head = 2;
    c.seq_len = 8;
    c.d_ff = 12;
    c.num_experts = 4;
    c.top_k = 2;
    c.d_expert = 6;
    c.init_std = 0.3f;
    c.seed = 9;
    c.capacity_factor = factor;
    c.min_capacity = 1;
    return c;
}

enum { MB = 2, MT = 8 };

static float model_loss(const Config *c, int training, Model *keep) {
    char err[256];
    ck_assert_msg(config_validate(c, err, sizeof err) == 0, "%s", err);
    Model m;
    model_init(&m, c, MB, MT);
    int in[MB * MT], tg[MB * MT];
    for (int i = 0; i < MB * MT; i++)
        in[i] = (31 * i + 7) % MOE_VOCAB, tg[i] = (in[i] + 1) % MOE_VOCAB;
    float loss = model_forward(&m, in, tg, MB, MT, &(StepCtx){.training = training});
    if (keep)
        *keep = m;
    else
        model_free(&m);
    return loss;
}

/* Assignments dropped over every MoE block of the last forward. */
static int model_dropped(const Model *m) {
    int dropped = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const MoeActs *a = m->state.blocks[l].moe;
        if (!a) continue;
        for (int j = 0; j < a->N * m->cfg.top_k; j++) dropped += a->plan.slot[j] < 0;
    }
    return dropped;
}

START_TEST(test_model_dropless_vs_large_capacity) {
    Config c = cap_config(0.0f);
    float dropless = model_loss(&c, 0, NULL);
    c.capacity_factor = 4.0f;
    float big = model_loss(&c, 0, NULL);
    ck_assert_msg(memcmp(&dropless, &big, sizeof big) == 0, "loss %.9g vs %.9g", dropless, big);
    c.padded = 1;
    float padded = model_loss(&c, 0, NULL);
    ck_assert_msg(memcmp(&dropless, &padded, sizeof big) == 0, "padded loss differs");
    c.capacity_factor = 0.25f;
    float small = model_loss(&c, 0, NULL);
    ck_assert_msg(small != dropless, "a capacity that drops changed nothing");
}
END_TEST

START_TEST(test_model_dropped_token_is_residual) {
    Config c = cap_config(0.01f); /* cap = 1 per expert: most tokens lose every assignment */
    Model m;
    model_loss(&c, 0, &m);
    int all_dropped = 0;
    const int K = c.top_k, C = c.d_model;
    for (int l = 0; l < c.n_layer; l++) {
        const MoeActs *a = m.state.blocks[l].moe;
        for (int n = 0; n < MB * MT; n++) {
            int kept = 0;
            for (int k = 0; k < K; k++) kept += a->plan.slot[n * K + k] >= 0;
            if (kept) continue;
            all_dropped++;
            ck_assert_msg(memcmp(m.state.resid[l + 1] + (size_t)n * C,
                                 m.state.blocks[l].resid_mid + (size_t)n * C,
                                 (size_t)C * sizeof(float)) == 0,
                          "layer %d token %d: output is not its residual", l, n);
        }
    }
    ck_assert(all_dropped > 0);
    model_free(&m);
}
END_TEST

START_TEST(test_eval_capacity_factor) {
    Config c = cap_config(0.25f);
    Model m;
    /* training drops; eval_capacity_factor -1 evaluates at the same factor */
    model_loss(&c, 1, &m);
    int train_drops = model_dropped(&m);
    model_free(&m);
    ck_assert(train_drops > 0);
    model_loss(&c, 0, &m);
    ck_assert_int_eq(model_dropped(&m), train_drops);
    model_free(&m);
    /* 0: dropless evaluation, bit-identical to a dropless model */
    c.eval_capacity_factor = 0.0f;
    float ev = model_loss(&c, 0, &m);
    ck_assert_int_eq(model_dropped(&m), 0);
    model_free(&m);
    Config d = cap_config(0.0f);
    float dl = model_loss(&d, 0, NULL);
    ck_assert(memcmp(&ev, &dl, sizeof ev) == 0);
    /* a larger factor drops less, and training ignores it */
    c.eval_capacity_factor = 0.5f;
    model_loss(&c, 0, &m);
    int eval_drops = model_dropped(&m);
    model_free(&m);
    ck_assert(eval_drops < train_drops);
    model_loss(&c, 1, &m);
    ck_assert_int_eq(model_dropped(&m), train_drops);
    model_free(&m);
}
END_TEST

START_TEST(test_model_second_expert_random) {
    Config c = cap_config(4.0f); /* no capacity drops: only the coin */
    c.second_expert_random = 1;
    Model m;
    model_loss(&c, 0, &m);
    ck_assert_int_eq(model_dropped(&m), 0); /* evaluation: no draw */
    model_free(&m);
    model_loss(&c, 1, &m);
    int drops = model_dropped(&m);
    ck_assert(drops > 0);
    /* each dropped assignment is a second choice */
    for (int l = 0; l < c.n_layer; l++)
        for (int n = 0; n < MB * MT; n++)
            ck_assert_int_ge(m.state.blocks[l].moe->plan.slot[n * 2], 0);
    model_free(&m);
}
END_TEST

static Suite *capacity_model_suite(void) {
    Suite *s = suite_create("capacity_model");
    TCase *tc = tcase_create("models");
    tcase_add_test(tc, test_model_dropless_vs_large_capacity);
    tcase_add_test(tc, test_model_dropped_token_is_residual);
    tcase_add_test(tc, test_eval_capacity_factor);
    tcase_add_test(tc, test_model_second_expert_random);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(capacity_model_suite)
