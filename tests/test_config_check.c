/*
 * test_config_check.c: the checks that involve more than one setting (src/config/config_check.c):
 * each refused combination fails config_validate with a message that names every key
 * involved, the allowed boundaries pass, and config_check_dist refuses what a given number of
 * processes cannot run.
 */
#include <string.h>

#include "config/config.h"
#include "moe/moe_ops.h"
#include "testutil.h"

/* config_validate must fail and the message must name every key given. */
static void validate_fails(const Config *c, const char *key1, const char *key2) {
    char err[512] = "";
    ck_assert_msg(config_validate(c, err, sizeof err) == -1, "accepted a config that breaks %s",
                  key1);
    ck_assert_msg(strstr(err, key1) != NULL, "message '%s' lacks '%s'", err, key1);
    if (key2) ck_assert_msg(strstr(err, key2) != NULL, "message '%s' lacks '%s'", err, key2);
}

START_TEST(test_cross_field_checks) {
    Config def, c;
    config_defaults(&def);

    c = def;
    c.d_model = 130; /* not a multiple of 4 heads */
    validate_fails(&c, "model.d_model", "model.n_head");
    c = def;
    c.d_model = 12; /* head size 3: RoPE needs pairs */
    validate_fails(&c, "model.n_head", "even");
    c = def;
    c.top_k = 9;
    validate_fails(&c, "moe.top_k", "moe.num_experts");
    c = def;
    c.num_experts = 1;
    validate_fails(&c, "moe.num_experts", "moe.num_experts=0");
    c = def;
    c.first_dense = 4;
    validate_fails(&c, "moe.first_dense", "model.n_layer");
    c = def;
    c.warmup = 601;
    validate_fails(&c, "train.warmup", "train.steps");
    c = def;
    c.beta1 = 1.0f;
    validate_fails(&c, "train.beta1", NULL);
    c = def;
    c.beta2 = 1.0f;
    validate_fails(&c, "train.beta2", NULL);
    c = def;
    c.min_lr = 1.5f;
    validate_fails(&c, "train.min_lr", NULL);
    c = def;
    c.train[0] = '\0';
    validate_fails(&c, "data.train", NULL);
    c = def;
    c.val[0] = '\0';
    validate_fails(&c, "data.val", NULL);
    /* the per-key ranges also guard Configs filled in by code */
    c = def;
    c.lr = -1.0f;
    validate_fails(&c, "train.lr", ">= 0");
    c = def;
    c.n_head = 0;
    validate_fails(&c, "model.n_head", NULL);
    c = def;
    c.clip = NAN;
    validate_fails(&c, "train.clip", "finite");
    c = def;
    c.aux_coef = INFINITY;
    validate_fails(&c, "moe.aux_coef", "finite");
    /* routing modes that do not go together */
    c = def;
    c.routing = MOE_ROUTING_EXPERT_CHOICE; /* balanced by construction: no balance loss */
    validate_fails(&c, "moe.routing=expert_choice", "moe.balance=none");
    c.balance = MOE_BALANCE_NONE;
    {
        char err[256];
        ck_assert_msg(config_validate(&c, err, sizeof err) == 0, "%s", err);
    }
    c.topk_before_softmax = 1;
    validate_fails(&c, "moe.topk_before_softmax", "moe.routing");
    c = def;
    c.ec_capacity = 0.0f;
    validate_fails(&c, "moe.ec_capacity", NULL);
    /* capacity: eval_capacity_factor is -1, 0 or positive; expert choice has its own */
    c = def;
    c.eval_capacity_factor = -0.5f;
    validate_fails(&c, "moe.eval_capacity_factor=-0.5", "use -1");
    c = def;
    c.routing = MOE_ROUTING_EXPERT_CHOICE;
    c.balance = MOE_BALANCE_NONE;
    c.capacity_factor = 1.0f;
    validate_fails(&c, "moe.capacity_factor", "moe.ec_capacity");
    c.capacity_factor = 0.0f;
    c.eval_capacity_factor = 2.0f;
    validate_fails(&c, "moe.eval_capacity_factor", "moe.ec_capacity");
    c = def;
    c = def;
    c.second_expert_random = 1;
    validate_fails(&c, "moe.second_expert_random", "moe.capacity_factor > 0");
    c.capacity_factor = 1.0f;
    {
        char err[256];
        ck_assert_msg(config_validate(&c, err, sizeof err) == 0, "%s", err);
    }
    c.top_k = 1;
    validate_fails(&c, "moe.second_expert_random", "moe.top_k=2");
    c = def;
    c.padded = 1; /* dropless has nothing to pad */
    validate_fails(&c, "moe.padded=1", "moe.capacity_factor > 0");
    c.capacity_factor = 1.25f;
    {
        char err[256];
        ck_assert_msg(config_validate(&c, err, sizeof err) == 0, "%s", err);
    }
    c = def;
    c.topk_before_softmax = 1;
    c.score = MOE_SCORE_SIGMOID;
    validate_fails(&c, "moe.topk_before_softmax", "moe.score=softmax");
    c = def;
    c.topk_before_softmax = 1;
    c.norm_topk = 0;
    validate_fails(&c, "moe.topk_before_softmax", "moe.norm_topk=1");
    c = def;
    c.score = 7;
    validate_fails(&c, "moe.score", "softmax|sigmoid");
    c = def;
    c.route_scale = 0.0f;
    validate_fails(&c, "moe.route_scale", "> 0");

    /* the MoE-only checks do not apply to a dense model */
    char err[512] = "";
    c = def;
    c.num_experts = 0;
    c.top_k = 9;
    c.first_dense = 10;
    ck_assert_msg(config_validate(&c, err, sizeof err) == 0, "dense config rejected: %s", err);
    /* boundaries that are allowed */
    c = def;
    c.warmup = c.steps;
    c.top_k = c.num_experts;
    c.first_dense = c.n_layer - 1;
    c.num_experts = 2;
    c.top_k = 2;
    ck_assert_msg(config_validate(&c, err, sizeof err) == 0, "boundary config rejected: %s", err);
}
END_TEST

/* config_check_dist: the checks that depend on how many processes run */
static void dist_fails(const Config *c, int world, const char *key1, const char *key2) {
    char err[512] = "";
    ck_assert_int_eq(config_check_dist(c, world, err, sizeof err), -1);
    ck_assert_msg(strstr(err, key1) != NULL, "message '%s' does not name %s", err, key1);
    if (key2) ck_assert_msg(strstr(err, key2) != NULL, "message '%s' lacks '%s'", err, key2);
}

START_TEST(test_dist_checks) {
    Config def, c;
    config_defaults(&def); /* 8 experts, batch 16 */
    char err[512] = "";
    c = def;
    c.ep = 4;
    ck_assert_msg(config_check_dist(&c, 8, err, sizeof err) == 0, "ep 4 x dp 2 rejected: %s", err);
    ck_assert_msg(config_validate(&c, err, sizeof err) == 0, "dist.ep=4 rejected: %s", err);
    dist_fails(&c, 6, "dist.ep=4", "6 processes");
    c.ep = 3;
    validate_fails(&c, "moe.num_experts=8", "dist.ep=3");
    c = def;
    c.ep = 2;
    c.num_experts = 0;
    validate_fails(&c, "dist.ep=2", "moe.num_experts=0");
    c = def;
    dist_fails(&c, 3, "train.batch=16", "3 processes");
    c.batch = 6;
    ck_assert_msg(config_check_dist(&c, 3, err, sizeof err) == 0, "batch 6 over 3: %s", err);
    /* settings whose result would depend on the split of the batch, refused with > 1 process */
    c = def;
    c.routing = MOE_ROUTING_EXPERT_CHOICE;
    c.balance = MOE_BALANCE_NONE;
    dist_fails(&c, 2, "moe.routing=expert_choice", "token_choice");
    ck_assert_int_eq(config_check_dist(&c, 1, err, sizeof err), 0);
    c = def;
    c.capacity_factor = 1.25f;
    dist_fails(&c, 2, "moe.capacity_scope=batch", "sequence");
    c.capacity_scope = MOE_CAP_SEQUENCE;
    ck_assert_msg(config_check_dist(&c, 2, err, sizeof err) == 0, "sequence scope: %s", err);
    c = def;
    c.noise = 0.1f;
    dist_fails(&c, 4, "moe.noise", "one process");
    /* a dense model over several processes is plain data parallelism */
    c = def;
    c.num_experts = 0;
    c.noise = 0.1f;
    ck_assert_msg(config_check_dist(&c, 4, err, sizeof err) == 0, "dense data-parallel: %s", err);
    /* dist.tp: a replica of dist.tp x dist.ep processes, heads and key-value heads split */
    c = def;
    c.tp = 2;
    c.ep = 2;
    dist_fails(&c, 6, "dist.tp=2 x dist.ep=2 = 4 processes", "6 processes");
    c.n_head = 6;
    c.tp = 4;
    c.ep = 1;
    dist_fails(&c, 4, "model.n_head=6", "dist.tp=4");
    c.n_head = 8;
    c.kv_heads = 2;
    dist_fails(&c, 4, "key-value heads", "dist.tp dividing 2");
    c.kv_heads = 4;
    c.batch = 3;
    dist_fails(&c, 8, "train.batch=3", "2 data-parallel readers");
    /* dist.tp: what it splits besides the heads, the rows between blocks, what it does not */
    c = def;
    c.tp = 2;
    c.n_head = 4;
    c.kv_heads = 2;
    ck_assert_msg(config_check_dist(&c, 4, err, sizeof err) == 0, "dist.tp=2: %s", err);
    c.first_dense = 1;
    c.d_ff = 63;
    dist_fails(&c, 4, "model.d_ff=63", "dense feed-forward");
    c.d_ff = 64;
    c.num_shared = 1;
    c.d_expert = 7;
    dist_fails(&c, 4, "shared experts' 7 hidden channels", "dist.tp dividing 7");
    c.d_expert = 8;
    c.vocab = 255;
    dist_fails(&c, 4, "model.vocab=255", "vocabulary");
    c.vocab = 256;
    c.batch = 2; /* one sequence a replica */
    c.seq_len = 15;
    dist_fails(&c, 4, "1 x 15 tokens", "model.seq_len");
    c.seq_len = 16;
    ck_assert_msg(config_check_dist(&c, 4, err, sizeof err) == 0, "half sequences: %s", err);
    c.balance = MOE_BALANCE_SEQ_AUX;
    dist_fails(&c, 4, "not whole sequences", "moe.balance=seq_aux");
    c.balance = MOE_BALANCE_AUX;
    c.capacity_factor = 1.25f;
    c.capacity_scope = MOE_CAP_SEQUENCE;
    dist_fails(&c, 4, "not whole sequences", "moe.capacity_factor");
    c.capacity_factor = 0.0f;
    c.qk_norm = MOE_QK_NORM_FULL;
    dist_fails(&c, 4, "model.qk_norm=full", "dist.tp=1");
    c.qk_norm = MOE_QK_NORM_HEAD;
    c.mtp_depth = 1;
    dist_fails(&c, 4, "model.mtp_depth", "dist.tp=1");
    c.mtp_depth = 0;
    c.device = MOE_DEVICE_CUDA;
    dist_fails(&c, 4, "train.device=cuda", "dist.tp=1");
}
END_TEST

static Suite *config_check_suite(void) {
    Suite *s = suite_create("config_check");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_cross_field_checks);
    tcase_add_test(tc, test_dist_checks);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(config_check_suite)
