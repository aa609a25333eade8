/*
 * test_plan.c: `moe plan`'s cost model (src/plan/) against moe.c, published shapes, and hand.
 *   - plan_count of moe.c's configs (plan_from_config) = the engine's parameter table, total
 *     and active with the embedding: defaults, dense, 2 shared experts, first_dense 1 with
 *     every 2, model.norm=sandwich, d_expert 0;
 *   - model presets: counts_agree = 1, total and active within round_to of the published
 *     counts (the active also within its last digit's unit); counts_agree = 0, not; round_to
 *     the published total's last digit, and both figures of two significant digits or more;
 *   - by hand: Mixtral 8x7B's attention, expert, total, active; DeepSeek-V3's latent
 *     attention, norms, experts, dense and MoE layers;
 *   - the moe.c engine's memory (ep 1, B = global_batch / accum / dp) = what model_init
 *     allocates minus Model.state.work_bytes; plan_moec_ep_bytes = chapter 3's 8388736 (1024
 *     tokens, P = 2), 6291648 (512, P = 4), 0 (P = 1);
 *   - the mixed engine by hand (tiny MoE, 8 GPUs in nodes of 4, tp 2, ep 2, dp 4): memory for
 *     ZeRO 0-3, tensor-parallel and exchange bytes and seconds, compute, gradient sums,
 *     optimizer, step, tokens/s, MFU; pipelined: bubble = (pp - 1) / vpp x t_mb, step =
 *     micro t_mb + bubble + dp_exposed + optim (rtol 1e-12);
 *   - monotone: activations none > selective > experts > full as compute + recomputation
 *     grows; ZeRO 0..3 never adds memory; imbalance adds busiest rows and exchange time;
 *   - the products' precision picks the peak: fp8 halves bf16's compute, memory unchanged.
 * The search, the keys and the layouts refused: tests/test_plan_search.c.
 */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "model/memory.h"
#include "model/model.h"
#include "model/params.h"
#include "plan/plan.h"
#include "plan_util.h"
#include "testutil.h"

/* ---- plan_count against the engine's parameter table ---------------------------------- */

static const struct {
    const char *what, *set[8];
} CONFIGS[] = {
    {"the defaults", {NULL}},
    {"dense (moe.num_experts=0)", {"moe.num_experts=0", NULL}},
    {"2 shared experts", {"moe.num_shared=2", NULL}},
    {"first_dense 1, every 2", {"moe.first_dense=1", "moe.every=2", NULL}},
    {"model.norm=sandwich", {"model.norm=sandwich", NULL}},
    {"d_expert 0 (= d_ff)", {"moe.d_expert=0", NULL}},
    {"grouped-query heads of 48", {"model.kv_heads=2", "model.head_dim=48", NULL}},
    {"multi-query, qk-norm per head", {"model.kv_heads=1", "model.qk_norm=head", NULL}},
    {"qk-norm over the projection", {"model.kv_heads=2", "model.qk_norm=full", NULL}},
    {"latent attention, queries through a latent",
     {"model.attention=mla", "mla.q_rank=48", "mla.kv_rank=32", "mla.rope_dim=8", "mla.nope_dim=16",
      "mla.v_dim=24", NULL}},
    {"latent attention, queries from the stream",
     {"model.attention=mla", "mla.kv_rank=32", "mla.rope_dim=8", "mla.nope_dim=0", "mla.v_dim=16",
      NULL}},
    {"two multi-token prediction modules", {"model.mtp_depth=2", NULL}},
    {"a dense model's module, tied head",
     {"moe.num_experts=0", "model.mtp_depth=1", "model.tied=1", NULL}},
};
#define N_CONFIGS ((int)(sizeof CONFIGS / sizeof CONFIGS[0]))

static Config config_of(int i) {
    Config c;
    char err[256];
    config_defaults(&c);
    for (int s = 0; CONFIGS[i].set[s]; s++)
        ck_assert_msg(config_set(&c, CONFIGS[i].set[s], err, sizeof err) == 0, "%s: %s",
                      CONFIGS[i].set[s], err);
    ck_assert_msg(config_validate(&c, err, sizeof err) == 0, "%s: %s", CONFIGS[i].what, err);
    return c;
}

START_TEST(test_count_is_the_engines_table) {
    Config c = config_of(_i);
    static PlanInput in;
    plan_defaults(&in);
    plan_from_config(&in, &c);
    PlanCounts k;
    plan_count(&in.m, &k);
    ParamTable pt;
    params_table_build(&pt, &c);
    const double total = (double)params_count_total(&pt);
    const double active = (double)params_count_active(&pt, &c);
    params_table_free(&pt);
    ck_assert_msg(k.total == total && k.active_embed == active,
                  "%s: expected the parameter table's %.0f total and %.0f active (with the "
                  "embedding), got %.0f and %.0f",
                  CONFIGS[_i].what, total, active, k.total, k.active_embed);
}
END_TEST

/* the unit of the last digit of a published figure: 12.9e9 -> 1e8, 37e9 -> 1e9 */
static double last_digit_unit(double x) {
    double u = pow(10.0, floor(log10(x)));
    while (u > 1 && fmod(x, u) != 0) u /= 10;
    return u;
}

START_TEST(test_model_presets_published_counts) {
    int models = 0;
    for (int i = 0; i < PLAN_N_PRESETS; i++) {
        const PlanPreset *p = &PLAN_PRESETS[i];
        if (strcmp(p->kind, "model") != 0) continue;
        models++;
        static PlanInput in;
        char err[512];
        plan_defaults(&in);
        ck_assert_msg(plan_preset(&in, "model", p->name, err, sizeof err) == 0, "%s: %s", p->name,
                      err);
        ck_assert_msg(p->total > 0 && p->active > 0 && p->round_to > 0,
                      "%s: a model preset without published counts", p->name);
        /* round_to is the published total's last digit, and a figure of one significant digit
         * ("1 trillion") agrees with any count within a factor of two: it tests nothing, so
         * the reference must be a figure of two digits or more (the report's, not a rounding) */
        ck_assert_msg(p->round_to == last_digit_unit(p->total),
                      "%s: round_to %g is not the last digit of the published %.4g", p->name,
                      p->round_to, p->total);
        ck_assert_msg(p->total / p->round_to >= 10 && p->active / last_digit_unit(p->active) >= 10,
                      "%s: the published %.4g total and %.4g active must have two significant "
                      "digits or more to test the counts",
                      p->name, p->total, p->active);
        PlanCounts c;
        plan_count(&in.m, &c);
        const double act = p->active_embed ? c.active_embed : c.active;
        const double unit = fmin(p->round_to, last_digit_unit(p->active));
        const int total_ok = fabs(c.total - p->total) < p->round_to;
        const int active_ok = fabs(act - p->active) < unit;
        const int active_round = fabs(act - p->active) < p->round_to;
        if (p->counts_agree) {
            ck_assert_msg(total_ok, "%s: published %.4g total, plan_count %.6g (round_to %g)",
                          p->name, p->total, c.total, p->round_to);
            ck_assert_msg(active_ok, "%s: published %.4g active, plan_count %.6g (within %g)",
                          p->name, p->active, act, unit);
        } else {
            ck_assert_msg(!(total_ok && active_round),
                          "%s: counts_agree = 0, yet plan_count gives %.6g total and %.6g active "
                          "for the published %.4g and %.4g: the handbook's statement is stale",
                          p->name, c.total, act, p->total, p->active);
        }
    }
    ck_assert_msg(models >= 5, "expected at least 5 model presets, found %d", models);
}
END_TEST

static void preset_counts(const char *name, PlanCounts *c) {
    static PlanInput in;
    char err[512];
    plan_defaults(&in);
    ck_assert_msg(plan_preset(&in, "model", name, err, sizeof err) == 0, "%s: %s", name, err);
    plan_count(&in.m, c);
}

START_TEST(test_counts_by_hand) {
    PlanCounts c;
    /* Mixtral 8x7B: d 4096, 32 query heads and 8 key-value heads of 128, 8 experts of 14336,
     * vocabulary 32000, 32 layers, untied head */
    preset_counts("mixtral-8x7b", &c);
    /* q and o: 4096 x (32 x 128) each; k and v: 4096 x (8 x 128) each */
    EXPECT_EQ(c.attn, 4096.0 * 4096 * 2 + 2.0 * 4096 * 1024, "Mixtral attention a layer");
    EXPECT_EQ(c.expert, 3.0 * 4096 * 14336, "Mixtral one expert (gate, up, down)");
    EXPECT_EQ(c.router, 8.0 * 4096, "Mixtral router");
    /* a layer: attention, 2 norm gains, router, 8 experts; plus embedding, head, final norm */
    const double layer =
        4096.0 * 4096 * 2 + 2.0 * 4096 * 1024 + 2 * 4096 + 8 * 4096 + 8 * 3.0 * 4096 * 14336;
    EXPECT_EQ(c.total, 32 * layer + 2.0 * 32000 * 4096 + 4096, "Mixtral total (46.7B)");
    /* a token: the same with 2 experts, the embedding counted (the published 12.9B does) */
    const double active_layer = layer - 6 * 3.0 * 4096 * 14336;
    EXPECT_EQ(c.active_embed, 32 * active_layer + 2.0 * 32000 * 4096 + 4096,
              "Mixtral active with the embedding (12.9B)");

    /* DeepSeek-V3's latent attention, d 7168, 128 heads: queries down to 1536 and up to
     * 128 heads x (128 + 64) = 192; keys and values down to one latent of 512 plus the
     * 64-wide rotary key (576), up to 128 heads x (128 key + 128 value) = 256; the output
     * from 128 heads x 128 back to 7168 */
    preset_counts("deepseek-v3", &c);
    EXPECT_EQ(c.attn,
              7168.0 * 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512.0 * 128 * 256 +
                  128.0 * 128 * 7168,
              "DeepSeek-V3 latent attention a layer");
    /* two norms of 7168 and the latents' norms of 1536 and 512 */
    EXPECT_EQ(c.norms, 2 * 7168.0 + 1536 + 512, "DeepSeek-V3 norm gains a layer");
    EXPECT_EQ(c.expert, 3.0 * 7168 * 2048, "DeepSeek-V3 one expert");
    EXPECT_EQ(c.shared, 3.0 * 7168 * 2048, "DeepSeek-V3 the shared expert");
    EXPECT_EQ(c.n_dense, 3, "DeepSeek-V3 dense layers");
    EXPECT_EQ(c.n_moe, 58, "DeepSeek-V3 MoE layers");
}
END_TEST

static const char *const BASE[6] = {"model.d_model=16", "model.n_layer=3", "model.n_head=2",
                                    "model.d_ff=24",    "model.seq_len=8", "train.batch=4"};
static const struct {
    const char *what, *set[8];
} SMALL[] = {
    {"dense", {"moe.num_experts=0", NULL}},
    {"MoE, top-2", {"moe.num_experts=4", "moe.d_expert=12", NULL}},
    {"MoE, shared, first_dense 1, accum 2",
     {"moe.num_experts=4", "moe.d_expert=12", "moe.num_shared=1", "moe.first_dense=1",
      "train.accum=2", NULL}},
    {"MoE, latent attention",
     {"moe.num_experts=4", "moe.d_expert=12", "model.attention=mla", "mla.q_rank=6",
      "mla.kv_rank=5", "mla.rope_dim=4", "mla.v_dim=3", NULL}},
    {"MoE, grouped-query heads of 6, qk-norm",
     {"moe.num_experts=4", "moe.d_expert=12", "model.kv_heads=1", "model.head_dim=6",
      "model.qk_norm=head", NULL}},
    {"MoE, a vocabulary of 1000, multi-token prediction",
     {"moe.num_experts=4", "moe.d_expert=12", "model.vocab=1000", "model.mtp_depth=1", NULL}},
    {"dense, a vocabulary of 1000, tied head",
     {"moe.num_experts=0", "model.vocab=1000", "model.tied=1", NULL}},
};

START_TEST(test_moec_memory_is_the_allocation) {
    Config c;
    char err[512];
    config_defaults(&c);
    for (int s = 0; s < 6; s++) ck_assert_int_eq(config_set(&c, BASE[s], err, sizeof err), 0);
    for (int s = 0; SMALL[_i].set[s]; s++)
        ck_assert_msg(config_set(&c, SMALL[_i].set[s], err, sizeof err) == 0, "%s", err);
    ck_assert_msg(config_validate(&c, err, sizeof err) == 0, "%s: %s", SMALL[_i].what, err);
    static PlanInput in;
    plan_defaults(&in);
    plan_from_config(&in, &c);
    ck_assert_int_eq(plan_preset(&in, "cluster", "laptop", err, sizeof err), 0);
    in.k.gpus = 1;
    PlanResult r;
    plan_layout(&in, &in.lay, &r);
    ck_assert_msg(r.valid, "%s: %s", SMALL[_i].what, r.invalid);
    /* the micro-batch: global batch / accum / dp */
    const int B = (int)(in.t.global_batch / in.m.c.accum / r.dp);
    ck_assert_msg(B == c.batch && r.lay.micro_batch == B, "B %d, micro-batch %d, train.batch %d", B,
                  r.lay.micro_batch, c.batch);

    const size_t before = backend_bytes_allocated;
    Model m;
    model_init(&m, &c, B, c.seq_len);
    const double allocated = (double)(backend_bytes_allocated - before - m.state.work_bytes);
    model_free(&m);
    const double planned = r.mem_weights + r.mem_grads + r.mem_optim + r.mem_acts;
    ck_assert_msg(planned == allocated && r.mem_total == allocated,
                  "%s: model_init allocated %.0f bytes (without its workspace), the plan gives "
                  "%.0f (total %.0f)",
                  SMALL[_i].what, allocated, planned, r.mem_total);
}
END_TEST

START_TEST(test_moec_ep_bytes_chapter3) {
    Config c;
    config_defaults(&c);
    static PlanInput in;
    plan_defaults(&in);
    plan_from_config(&in, &c);
    /* L_moe [4 N K (P - 1) / P x 4 C + 2 (E / P) x 4 (P - 1)], C 128, K 2, E 8, 4 MoE blocks */
    EXPECT_EQ(plan_moec_ep_bytes(&in.m, 1024, 2), 8388736, "P = 2, 1024 tokens a process");
    EXPECT_EQ(plan_moec_ep_bytes(&in.m, 512, 4), 6291648, "P = 4, 512 tokens a process");
    EXPECT_EQ(plan_moec_ep_bytes(&in.m, 1024, 1), 0, "P = 1: nothing is exchanged");
}
END_TEST

/* dist.dispatch=tokens (ep.h): U = N (P - 1) q rows of a token and member, each 4 x 4 C bytes
 * (out and back, forward and backward) plus 3 Km floats of pairs, plus a count per peer; q the
 * chance a token reaches the other member. Demo shape, P = 2 (El 4, Km 2):
 *   uniform top-2 of 8: q = 1 - C(4,2) / C(8,2) = 11 / 14, U = 1024 x 11 / 14 = 804.57...,
 *     4 blocks x (2072 U + 4) = 6668304
 *   moe.n_group=4, topk_group=1 (two groups a member): q = 1 - C(2,1) / C(4,1) = 1 / 2,
 *     4 x (2072 x 512 + 4) = 4243472, half the rows of dist.dispatch=rows' 8388736
 * and the layout's exchange bytes (moe plan --config at dist.ep=2) are the formula's. */
START_TEST(test_moec_ep_bytes_tokens) {
    Config c;
    char err[512];
    config_defaults(&c);
    c.dispatch = DIST_DISPATCH_TOKENS;
    static PlanInput in;
    plan_defaults(&in);
    plan_from_config(&in, &c);
    EXPECT_REL(plan_moec_ep_bytes(&in.m, 1024, 2), 6668304, 1e-12, "uniform routing, P = 2");
    c.n_group = 4, c.topk_group = 1;
    plan_from_config(&in, &c);
    EXPECT_REL(plan_moec_ep_bytes(&in.m, 1024, 2), 4243472, 1e-12, "groups of one member, P = 2");
    c.ep = 2;
    ck_assert_msg(config_validate(&c, err, sizeof err) == 0, "%s", err);
    plan_from_config(&in, &c);
    ck_assert_int_eq(plan_preset(&in, "cluster", "laptop", err, sizeof err), 0);
    in.k.gpus = 2;
    PlanResult r;
    plan_layout(&in, &in.lay, &r);
    ck_assert_msg(r.valid, "%s", r.invalid);
    const double tokens = (double)c.batch / 2 * c.seq_len; /* a process's micro-batch */
    EXPECT_REL(r.ep_bytes, c.accum * plan_moec_ep_bytes(&in.m, tokens, 2), 1e-12,
               "the layout's exchange, a step");
}
END_TEST

/* ---- the mixed engine by hand ------------------------------------------------------------ */

/* V 1000, d 64, 2 layers of 4 heads of 16; layer 0 dense (d_ff 128), layer 1 MoE: 4 experts of
 * 32, top-2, 1 shared; T 16. 8 GPUs in nodes of 4, 100 TFLOP/s at 0.5, HBM 2 TB/s, 100 GB/s in
 * a node, 10 between; bf16 weights, fp32 gradients, master and moments; global batch 16.
 * Layout tp 2, pp 1, ep 2, micro-batch 2: dp 4, edp 2 x 4 / 2 = 4, 2 micro-batches a step. */
START_TEST(test_mixed_by_hand) {
    static PlanInput in;
    hand_input(&in);
    /* parameters: attention 4 x 64 x 64 = 16384 a layer, 2 norm gains of 64, dense SwiGLU
     * 3 x 64 x 128, router 4 x 64, an expert (and the shared one) 3 x 64 x 32, embedding and
     * head 1000 x 64 each, final norm 64. Split over tp: attention, dense, shared, embedding,
     * head; whole: norms, router, final norm; experts: 4 / ep = 2 whole on a GPU. */
    const double attn = 4.0 * 64 * 64, dense = 3.0 * 64 * 128, expert = 3.0 * 64 * 32;
    const double dense_p =
        (2 * attn + dense + expert + 2 * 1000.0 * 64) / 2 + (2 * 2 * 64 + 4 * 64 + 64);
    const double exp_p = 2 * expert;
    const double dp = 4, edp = 4, micro = 16.0 / (dp * 2);
    /* ZeRO shards over dp the dense parameters and over edp the experts: the optimizer state
     * from stage 1, the gradients from 2, the weights at 3 */
#define SHARDED(z, from) (dense_p / ((z) >= (from) ? dp : 1) + exp_p / ((z) >= (from) ? edp : 1))
    for (int z = 0; z <= 3; z++) {
        in.t.zero = z;
        PlanResult r;
        plan_layout(&in, &in.lay, &r);
        ck_assert_msg(r.valid && r.dp == 4 && r.edp == 4, "ZeRO %d: dp %d edp %d %s", z, r.dp,
                      r.edp, r.invalid);
        EXPECT_EQ(r.micro, micro, "micro-batches a step");
        const double w = 2 * SHARDED(z, 3), g = 4 * SHARDED(z, 2), o = (4 + 2 * 4) * SHARDED(z, 1);
        ck_assert_msg(fabs(r.mem_weights / w - 1) < RTOL && fabs(r.mem_grads / g - 1) < RTOL &&
                          fabs(r.mem_optim / o - 1) < RTOL,
                      "ZeRO %d: expected weights %.17g (2 bytes), gradients %.17g (4), optimizer "
                      "%.17g (master 4 + 2 moments of 4); got %.17g, %.17g, %.17g",
                      z, w, g, o, r.mem_weights, r.mem_grads, r.mem_optim);
    }
#undef SHARDED
    in.t.zero = 1;
    PlanResult r;
    plan_layout(&in, &in.lay, &r);
    const double n = 2 * 16, nt = n / 2; /* tokens a micro-batch; a tp GPU's share */
    /* tensor parallel with sequence parallel: an all-gather before and a reduce-scatter after
     * each split sublayer (the 2 attentions, the dense SwiGLU, the shared expert), forward and
     * backward: 4 x 4 collectives of (tp - 1) / tp x n x d bf16 values a micro-batch */
    const double tp_mb = 4 * 4 * 0.5 * n * 64 * 2;
    EXPECT_REL(r.tp_bytes, micro * tp_mb, RTOL, "tensor-parallel bytes a step");
    EXPECT_REL(r.tp_s, micro * tp_mb / 100e9, RTOL, "tensor-parallel seconds (in a node)");
    /* the exchange: nt tokens x top-2 rows, half of them to the other GPU of the group (same
     * node), out and back, forward and backward: 4 x 16 rows of 64 bf16 values; the counts,
     * 2 ints of 4 bytes per local expert (2) and peer (1) */
    const double ep_mb = 4 * (nt * 2 * 0.5) * 64 * 2 + 2 * 2 * 4 * 1;
    EXPECT_REL(r.ep_bytes, micro * ep_mb, RTOL, "expert-exchange bytes a step");
    EXPECT_EQ(r.ep_inter_bytes, 0, "expert exchange across nodes (the group is in one node)");
    EXPECT_REL(r.ep_s, micro * ep_mb / 100e9, RTOL, "expert-exchange seconds");
    EXPECT_EQ(r.busiest_rows, nt * 2, "busiest rows (imbalance 1)");
    /* compute: 6 FLOPs a parameter and token of the split products over tp (2 attentions,
     * the dense SwiGLU, the shared expert, the head), the causal scores 3 x 2 h (dqk + dv)
     * T / 2 a token and layer over tp, the router on nt tokens and 2 experts a row */
    const double split_mm = 2 * attn + dense + expert + 1000.0 * 64;
    const double scores = 2.0 * 4 * (16 + 16) * (16 / 2.0);
    const double mm =
        split_mm * 6 * n / 2 + 2 * 3 * scores * n / 2 + 6 * 4 * 64 * nt + 6 * expert * nt * 2;
    const double comp = mm / (100e12 * 0.5);
    EXPECT_REL(r.compute_s, micro * comp, RTOL, "compute seconds a step");
    EXPECT_EQ(r.recompute_s, 0, "no recomputation");
    /* gradient sums with ZeRO 1: a reduce-scatter of fp32 gradients and an all-gather of
     * bf16 weights, (dp - 1) / dp of them; both groups (stride 2 and 2 in nodes of 4) cross
     * nodes */
    const double db = 0.75 * dense_p * (4 + 2), eb = 0.75 * exp_p * (4 + 2);
    EXPECT_REL(r.dp_bytes, db + eb, RTOL, "gradient-sum bytes");
    ck_assert_msg(r.dp_inter, "the dp group {0, 2, 4, 6} crosses nodes of 4");
    EXPECT_REL(r.dp_s, db / 10e9 + eb / 10e9, RTOL, "gradient-sum seconds");
    EXPECT_EQ(r.dp_exposed_s, r.dp_s, "overlap_dp 0: all exposed");
    /* the optimizer reads and writes its quarter of the state: weights 2 x 2, gradients 4,
     * master 2 x 4, moments 4 x 4 bytes a parameter, at 2 TB/s */
    const double optim = (dense_p / dp + exp_p / edp) * (4 + 4 + 8 + 16) / 2e12;
    EXPECT_REL(r.optim_s, optim, RTOL, "optimizer seconds");
    const double t_mb = comp + tp_mb / 100e9 + ep_mb / 100e9;
    EXPECT_EQ(r.bubble_s, 0, "pp 1: no bubble");
    const double step = micro * t_mb + (db + eb) / 10e9 + optim;
    EXPECT_REL(r.step_s, step, RTOL, "step seconds");
    EXPECT_REL(r.tokens_per_s, 16 * 16 / step, RTOL, "tokens a second");
    /* MFU: 6 x the active products (head, 2 attentions, the dense SwiGLU, router, 2 experts,
     * the shared one) + 3 x the scores of 2 layers, per token */
    const double flops_token =
        6 * (1000.0 * 64 + 2 * attn + dense + 4 * 64 + 3 * expert) + 3 * 2 * scores;
    EXPECT_REL(r.mfu, flops_token * 16 * 16 / (8 * 100e12 * step), RTOL, "MFU");
}
END_TEST

/* pipelined layouts: the bubble and the step from the per-step terms */
START_TEST(test_bubble_and_step) {
    static PlanInput in;
    const char *runs[] = {"megatron-mixtral-8x7b", "deepseek-v3"};
    for (int i = 0; i < 3; i++) {
        if (i < 2) {
            run_preset(&in, runs[i]);
        } else { /* the hand model on 4 layers, pp 2 vpp 2, 8 GPUs */
            hand_input(&in);
            in.m.c.n_layer = 4;
            in.lay.pp = 2, in.lay.vpp = 2, in.lay.tp = 1, in.lay.ep = 4;
        }
        PlanResult r;
        plan_layout(&in, &in.lay, &r);
        ck_assert_msg(r.valid, "layout %d: %s", i, r.invalid);
        const double t_mb =
            (r.compute_s + r.recompute_s + r.tp_s + r.ep_exposed_s + r.pp_s) / r.micro;
        EXPECT_REL(r.bubble_s, (r.lay.pp - 1.0) / r.lay.vpp * t_mb, RTOL,
                   "bubble = (pp - 1) / vpp x one micro-batch");
        EXPECT_REL(r.step_s, r.micro * t_mb + r.bubble_s + r.dp_exposed_s + r.optim_s, RTOL,
                   "step = micro x t_mb + bubble + exposed gradient sums + optimizer");
        ck_assert_msg(r.lay.pp > 1 && r.pp_bytes > 0, "layout %d: pp %d, %g bytes between stages",
                      i, r.lay.pp, r.pp_bytes);
    }
}
END_TEST

START_TEST(test_recompute_trades_memory_for_time) {
    static PlanInput in;
    run_preset(&in, "megatron-mixtral-8x7b");
    PlanResult r[4];
    static const char *const NAMES[] = {"none", "selective", "experts", "full"};
    for (int rc = PLAN_RC_NONE; rc <= PLAN_RC_FULL; rc++) {
        PlanLayout l = in.lay;
        l.recompute = rc;
        plan_layout(&in, &l, &r[rc]);
        ck_assert_msg(r[rc].valid, "%s: %s", NAMES[rc], r[rc].invalid);
    }
    for (int rc = 1; rc <= PLAN_RC_FULL; rc++) {
        ck_assert_msg(r[rc].mem_acts < r[rc - 1].mem_acts,
                      "activations: expected %s (%.6g) < %s (%.6g)", NAMES[rc], r[rc].mem_acts,
                      NAMES[rc - 1], r[rc - 1].mem_acts);
        const double a = r[rc - 1].compute_s + r[rc - 1].recompute_s;
        const double b = r[rc].compute_s + r[rc].recompute_s;
        /* selective recomputation's norms and activation functions cost no products */
        ck_assert_msg(rc == PLAN_RC_SELECTIVE ? b >= a : b > a,
                      "compute + recomputation: expected %s (%.6g) %s %s (%.6g)", NAMES[rc], b,
                      rc == PLAN_RC_SELECTIVE ? ">=" : ">", NAMES[rc - 1], a);
    }
}
END_TEST

START_TEST(test_zero_never_adds_memory) {
    static PlanInput in;
    run_preset(&in, "megatron-mixtral-8x7b");
    double prev = INFINITY, prev_w = INFINITY, prev_g = INFINITY, prev_o = INFINITY;
    for (int zero = 0; zero <= 3; zero++) {
        in.t.zero = zero;
        PlanResult r;
        plan_layout(&in, &in.lay, &r);
        ck_assert_msg(r.valid, "%s", r.invalid);
        /* the kind it shards gets smaller (dp 16, edp 2), the others stay */
        ck_assert_msg(r.mem_total <= prev &&
                          (zero == 1 ? r.mem_optim < prev_o : r.mem_optim <= prev_o) &&
                          (zero == 2 ? r.mem_grads < prev_g : r.mem_grads <= prev_g) &&
                          (zero == 3 ? r.mem_weights < prev_w : r.mem_weights <= prev_w),
                      "ZeRO %d after %d: total %.6g after %.6g, optimizer %.6g after %.6g, "
                      "gradients %.6g after %.6g, weights %.6g after %.6g",
                      zero, zero - 1, r.mem_total, prev, r.mem_optim, prev_o, r.mem_grads, prev_g,
                      r.mem_weights, prev_w);
        prev = r.mem_total, prev_w = r.mem_weights, prev_g = r.mem_grads, prev_o = r.mem_optim;
    }
}
END_TEST

START_TEST(test_imbalance_costs_rows_and_exchange) {
    static PlanInput in;
    run_preset(&in, "megatron-mixtral-8x7b");
    double rows = 0, ep_s = 0;
    for (double imb = 1; imb <= 2.01; imb += 0.5) {
        in.t.imbalance = imb;
        PlanResult r;
        plan_layout(&in, &in.lay, &r);
        ck_assert_msg(r.valid, "%s", r.invalid);
        ck_assert_msg(r.busiest_rows > rows, "imbalance %.1f: busiest rows %.6g, not above %.6g",
                      imb, r.busiest_rows, rows);
        ck_assert_msg(r.ep_s > ep_s, "imbalance %.1f: exchange %.6g s, not above %.6g s", imb,
                      r.ep_s, ep_s);
        rows = r.busiest_rows, ep_s = r.ep_s;
    }
}
END_TEST

/* The products' precision picks the peak: fp8's twice bf16's halves the compute and leaves the
 * MFU's denominator at fp8's peak; the memory does not change. */
START_TEST(test_precision_picks_the_peak) {
    static PlanInput in;
    run_preset(&in, "megatron-mixtral-8x7b");
    PlanResult b, e;
    plan_layout(&in, &in.lay, &b);
    in.t.precision = PLAN_PREC_FP8;
    plan_layout(&in, &in.lay, &e);
    const double ratio = in.k.peak_tflops[PLAN_PREC_BF16] / in.k.peak_tflops[PLAN_PREC_FP8];
    ck_assert_msg(fabs(e.compute_s / b.compute_s - ratio) < 1e-12,
                  "fp8 compute %.6g s over bf16's %.6g s: %.6g, expected the peaks' ratio %.6g",
                  e.compute_s, b.compute_s, e.compute_s / b.compute_s, ratio);
    ck_assert_msg(e.mem_total == b.mem_total, "memory %.6g at fp8, %.6g at bf16", e.mem_total,
                  b.mem_total);
    ck_assert_msg(fabs(e.mfu * e.step_s / (b.mfu * b.step_s) - ratio) < 1e-12,
                  "MFU x step at fp8 over bf16: %.6g, expected %.6g",
                  e.mfu * e.step_s / (b.mfu * b.step_s), ratio);
}
END_TEST

static Suite *plan_suite(void) {
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plan");
    tcase_add_loop_test(tc, test_count_is_the_engines_table, 0, N_CONFIGS);
    tcase_add_test(tc, test_model_presets_published_counts);
    tcase_add_test(tc, test_counts_by_hand);
    tcase_add_loop_test(tc, test_moec_memory_is_the_allocation, 0,
                        (int)(sizeof SMALL / sizeof SMALL[0]));
    tcase_add_test(tc, test_moec_ep_bytes_chapter3);
    tcase_add_test(tc, test_moec_ep_bytes_tokens);
    tcase_add_test(tc, test_mixed_by_hand);
    tcase_add_test(tc, test_bubble_and_step);
    tcase_add_test(tc, test_recompute_trades_memory_for_time);
    tcase_add_test(tc, test_zero_never_adds_memory);
    tcase_add_test(tc, test_imbalance_costs_rows_and_exchange);
    tcase_add_test(tc, test_precision_picks_the_peak);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(plan_suite)
