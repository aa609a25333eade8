/*
 * test_memory.c: the analytical memory formula (memory.c) against the model's allocations.
 *
 *   - for dense, all-MoE and mixed models (first_dense, every) and several B x T, the words
 *     of model_memory_floats (floats and integers, 4 bytes each) are the bytes model_init
 *     allocates from its backend (backend_bytes_allocated after minus before, less the ops'
 *     workspace, Model.work_bytes): a buffer added to the model without a term in the
 *     formula, or a term left behind when a buffer goes, fails here;
 *   - the breakdown is consistent: parameters equal the parameter table's count, gradients
 *     P, moments 2P, the fields add up to the total;
 *   - the integer words of one small MoE model match a count done by hand, for token choice and for
 * expert choice (every (token, expert) pair a candidate, E * cap slots) and for a padded capacity
 * plan (E * cap slot rows).
 */
#include <string.h>

#include "base/util.h"
#include "model/memory.h"
#include "model/model.h"
#include "moe/moe_ops.h"
#include "testutil.h"

typedef struct {
    const char *what;
    int num_experts, top_k, d_expert, first_dense, every, B, T;
    float jitter;   /* moe.jitter (and moe.noise) > 0 keep the router's jittered input, factors and
                       noise */
    int num_shared; /* shared experts: one more SwiGLU per MoE block */
    int routing;    /* MOE_ROUTING_*: expert choice sizes idx, w, the plan by E, slots by cap */
    float ec_capacity;
    /* token-choice capacity (0: dropless); padded plans may hold more rows than N K */
    float capacity_factor;
    int padded, cap_scope;
    float eval_capacity_factor; /* 0 here: leave the default (-1, the training factor) */
} Shape;

static Config shape_config(const Shape *s) {
    Config c;
    config_defaults(&c);
    c.d_model = 16;
    c.n_layer = 4;
    c.n_head = 2;
    c.d_ff = 24;
    c.seq_len = s->T;
    c.num_experts = s->num_experts;
    c.top_k = s->top_k;
    c.d_expert = s->d_expert;
    c.first_dense = s->first_dense;
    c.every = s->every;
    c.jitter = s->jitter;
    c.noise = s->jitter; /* the jitter shape draws logit noise too: its (N, E) buffer */
    c.num_shared = s->num_shared;
    c.routing = s->routing;
    if (s->routing == MOE_ROUTING_EXPERT_CHOICE) {
        c.balance = MOE_BALANCE_NONE;
        c.ec_capacity = s->ec_capacity;
    }
    c.capacity_factor = s->capacity_factor;
    c.padded = s->padded;
    c.capacity_scope = s->cap_scope;
    if (s->eval_capacity_factor > 0.0f) c.eval_capacity_factor = s->eval_capacity_factor;
    return c;
}

/* the capacity fields of a dropless shape */
#define DROPLESS 0.0f, 0, MOE_CAP_BATCH, 0.0f

static const Shape SHAPES[] = {
    {"dense", 0, 2, 0, 0, 1, 2, 8, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, DROPLESS},
    {"all MoE", 4, 2, 12, 0, 1, 2, 8, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, DROPLESS},
    {"all MoE, top-1, d_expert 0 (= d_ff)", 4, 1, 0, 0, 1, 3, 5, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE,
     0.0f, DROPLESS},
    {"first_dense 1", 4, 2, 12, 1, 1, 1, 7, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, DROPLESS},
    {"every 2 after 1 dense", 8, 3, 10, 1, 2, 2, 6, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f,
     DROPLESS},
    {"MoE only above 3 dense", 2, 2, 8, 3, 1, 4, 3, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f,
     DROPLESS},
    {"router jitter", 4, 2, 12, 1, 1, 2, 8, 0.1f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, DROPLESS},
    {"two shared experts", 4, 2, 12, 1, 1, 2, 8, 0.0f, 2, MOE_ROUTING_TOKEN_CHOICE, 0.0f, DROPLESS},
    {"expert choice", 4, 2, 12, 1, 1, 2, 8, 0.0f, 0, MOE_ROUTING_EXPERT_CHOICE, 1.0f, DROPLESS},
    {"expert choice, capacity 1.5, top-1", 8, 1, 10, 0, 2, 3, 5, 0.0f, 1, MOE_ROUTING_EXPERT_CHOICE,
     1.5f, DROPLESS},
    /* cap = 16 per expert: E cap = 64 padded rows for N K = 32 assignments */
    {"padded capacity 2", 4, 2, 12, 1, 1, 2, 8, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, 2.0f, 1,
     MOE_CAP_BATCH, 0.0f},
    /* training: 2 sequences x cap 4 (min_capacity) = N K; evaluation at 3: 2 x 8 per expert */
    {"padded per sequence, eval factor 3", 4, 2, 12, 0, 1, 2, 8, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE,
     0.0f, 0.5f, 1, MOE_CAP_SEQUENCE, 3.0f},
    {"capacity 1.25 unpadded", 4, 2, 12, 0, 1, 2, 8, 0.0f, 0, MOE_ROUTING_TOKEN_CHOICE, 0.0f, 1.25f,
     0, MOE_CAP_BATCH, 0.0f},
};

START_TEST(test_formula_matches_allocation) {
    const Shape *s = &SHAPES[_i];
    Config c = shape_config(s);
    size_t before = backend_bytes_allocated;
    Model m;
    model_init(&m, &c, s->B, s->T);
    size_t allocated = backend_bytes_allocated - before - m.work_bytes;
    model_free(&m);
    MemoryBreakdown mb;
    size_t formula = model_memory_floats(&c, s->B, s->T, &mb);
    ck_assert_msg(4 * mb.total_words == allocated,
                  "%s: the formula gives %zu bytes, model_init allocated %zu (difference %ld): "
                  "update memory.c to match the buffers of model_init",
                  s->what, 4 * mb.total_words, allocated,
                  (long)allocated - (long)(4 * mb.total_words));
    ck_assert_uint_eq(model_memory_floats(&c, s->B, s->T, NULL), formula);
}
END_TEST

START_TEST(test_breakdown_consistent) {
    const Shape *s = &SHAPES[_i];
    Config c = shape_config(s);
    MemoryBreakdown mb;
    size_t total = model_memory_floats(&c, s->B, s->T, &mb);
    ParamTable pt;
    params_table_build(&pt, &c);
    ck_assert_uint_eq(mb.params, params_count_total(&pt));
    params_table_free(&pt);
    ck_assert_uint_eq(mb.grads, mb.params);
    ck_assert_uint_eq(mb.adam, 2 * mb.params);
    ck_assert_uint_eq(mb.floats, total);
    ck_assert_uint_eq(mb.params + mb.grads + mb.adam + mb.acts_resid + mb.acts_attn + mb.acts_ffn +
                          mb.acts_head + mb.scratch,
                      total);
    ck_assert_uint_eq(mb.total_words, total + mb.int_words);
    /* the residual stream: L + 1 boundaries of N x C */
    ck_assert_uint_eq(mb.acts_resid, (size_t)(c.n_layer + 1) * s->B * s->T * c.d_model);
}
END_TEST

START_TEST(test_int_words_by_hand) {
    /* 4 blocks, MoE in blocks 1 and 3 (first_dense 1, every 2), E = 8, K = 3, N = 2 x 6 = 12:
     * inputs + targets 2 N = 24; per MoE block idx N K + 1 = 37, counts E = 8,
     * offsets E + 1 = 9, slot and slot_token 2 (N K + 1) = 74, i.e. 128; two blocks 256. */
    Config c = shape_config(&SHAPES[4]);
    MemoryBreakdown mb;
    model_memory_floats(&c, 2, 6, &mb);
    ck_assert_uint_eq(mb.int_words, 24 + 2 * 128);

    /* expert choice, E = 4, N = 2 x 8 = 16, MoE in blocks 1..3: idx N E + 1 = 65, counts 4,
     * offsets 5, slot and slot_token 2 (N E + 1) = 130, i.e. 204 per block */
    c = shape_config(&SHAPES[8]);
    model_memory_floats(&c, 2, 8, &mb);
    ck_assert_uint_eq(mb.int_words, 2 * 16 + 3 * 204);

    /* padded capacity 2, E = 4, K = 2, N = 16, MoE in blocks 1..3: idx, counts, offsets and
     * slot as dropless (33 + 4 + 5 + 33), slot_token E cap + 1 = 65 rows, i.e. 140 per block */
    c = shape_config(&SHAPES[10]);
    model_memory_floats(&c, 2, 8, &mb);
    ck_assert_uint_eq(mb.int_words, 2 * 16 + 3 * 140);

    /* a dense model holds only the token ids */
    c = shape_config(&SHAPES[0]);
    model_memory_floats(&c, 2, 8, &mb);
    ck_assert_uint_eq(mb.int_words, 2 * 16);
}
END_TEST

START_TEST(test_attention_is_quadratic_in_T) {
    /* doubling T at a fixed number of tokens N halves B: every (N, .) term stays, and the
     * attention probabilities B H T^2 = N H T double; the difference is exactly that. */
    Config c = shape_config(&SHAPES[1]);
    MemoryBreakdown a, b;
    model_memory_floats(&c, 4, 4, &a);
    model_memory_floats(&c, 2, 8, &b);
    size_t N = 16, H = (size_t)c.n_head, L = (size_t)c.n_layer;
    ck_assert_uint_eq(b.acts_attn - a.acts_attn, L * N * H * (8 - 4));
    ck_assert_uint_eq(b.floats - a.floats, L * N * H * (8 - 4));
}
END_TEST

static Suite *memory_suite(void) {
    Suite *s = suite_create("memory");
    TCase *tc = tcase_create("formula");
    int n = (int)(sizeof SHAPES / sizeof SHAPES[0]);
    tcase_add_loop_test(tc, test_formula_matches_allocation, 0, n);
    tcase_add_loop_test(tc, test_breakdown_consistent, 0, n);
    tcase_add_test(tc, test_int_words_by_hand);
    tcase_add_test(tc, test_attention_is_quadratic_in_T);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(memory_suite)
