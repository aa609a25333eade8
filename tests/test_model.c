/*
 * test_model.c: the whole model and its state.
 *
 *   - gradient check of the full objective (cross-entropy + aux + z losses) with respect to
 *     every parameter tensor, for a dense model and an MoE model (with a dense first block);
 *   - the parameter table: names, shapes, counts, one contiguous layout;
 *   - gradient accumulation: two half-batches accumulate to the full batch's gradient;
 *   - checkpoints: save + load restores the state exactly; a model of another shape is
 *     refused with a message naming the difference;
 *   - model.tied (the head is the embedding's transpose): no head tensor, the gradients
 *     (the embedding's rows of input tokens carry the head's part and the embedding's), the
 *     CPU backends agree, and a checkpoint round trip, refused by an untied model and back;
 *   - what a forward computed, as model/inspect.h gives it (the chapter programs' view).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/inspect.h"
#include "model/model.h"
#include "testutil.h"
#include "train/checkpoint.h"

static Config tiny_config(int num_experts) {
    Config c;
    config_defaults(&c);
    c.d_model = 8;
    c.n_layer = 2;
    c.n_head = 2;
    c.seq_len = 6;
    c.d_ff = 12;
    c.num_experts = num_experts;
    c.top_k = 2;
    c.d_expert = 6;
    c.first_dense = num_experts ? 1 : 0;
    c.aux_coef = 0.1f;
    c.z_coef = 0.01f;
    /* a larger init than training uses: bigger gradients are measured more precisely by
     * float32 finite differences */
    c.init_std = 0.3f;
    c.seed = 7;
    return c;
}

typedef struct {
    Model *m;
    const int *in, *tg;
    int B, T;
    const StepCtx *sc; /* the passes' mode (NULL: evaluation's) */
} ObjCtx;

static double objective(void *p) {
    ObjCtx *o = (ObjCtx *)p;
    return model_forward(o->m, o->in, o->tg, o->B, o->T, o->sc);
}

/* inputs and targets (n) of c's vocabulary: random bytes at 256 (as every test has them), else
 * random ids below V with the last id and one above the bytes' first among the inputs and
 * targets, so that the rows beyond 256 are read and written */
static void vocab_tokens(const Config *c, int *in, int *tg, int n, unsigned long long seed) {
    random_tokens(in, tg, n, seed);
    if (c->vocab == 256) return;
    Rng r;
    rng_seed(&r, seed);
    const uint64_t V = (uint64_t)c->vocab;
    for (int i = 0; i < n; i++) in[i] = (int)rng_below(&r, V), tg[i] = (int)rng_below(&r, V);
    in[0] = tg[1] = c->vocab - 1;
    in[1] = tg[0] = 256 % c->vocab;
}

/* Same routing as the unperturbed forward? Finite differences are only meaningful where the
 * discrete top-k choice does not change. */
static void check_model_gradients_eps(Config c, float eps) {
    const int num_experts = c.num_experts;
    const int B = 2, T = 6, N = B * T;
    /* multi-token prediction's modules run in training passes only (no noise is set here) */
    static const StepCtx training = {.training = 1};
    const StepCtx *sc = c.mtp_depth > 0 ? &training : NULL;
    Model m;
    model_init(&m, &c, B, T);
    if (num_experts) { /* spread the router scores so that no top-k choice is near a tie */
        for (int l = 0; l < c.n_layer + c.mtp_depth; l++)
            if (m.w.layers[l].router)
                for (int i = 0; i < c.num_experts * c.d_model; i++) m.w.layers[l].router[i] *= 6.0f;
    }
    int in[12], tg[12];
    vocab_tokens(&c, in, tg, N, 3);
    model_zero_grad(&m);
    model_forward(&m, in, tg, B, T, sc);
    model_backward(&m, 1.0f, sc);
    float *analytic = floats_alloc(m.pt.total);
    memcpy(analytic, m.grads, m.pt.total * sizeof(float));

    ObjCtx ctx = {&m, in, tg, B, T, sc};
    for (int i = 0; i < m.pt.n; i++) {
        const ParamTensor *t = &m.pt.t[i];
        char what[128];
        snprintf(what, sizeof what, "%s model, d objective / d %s", num_experts ? "MoE" : "dense",
                 t->name);
        gradcheck(objective, &ctx, m.params + t->offset, analytic + t->offset, t->numel, eps, 24,
                  what);
    }
    /* the check above must have seen real gradients, not only zeros */
    double norm = 0.0;
    for (size_t j = 0; j < m.pt.total; j++) norm += fabs(analytic[j]);
    ck_assert_msg(norm > 1.0, "gradients are suspiciously small (sum |g| = %g)", norm);
    free(analytic);
    model_free(&m);
}

static void check_model_gradients_of(Config c) {
    check_model_gradients_eps(c, 1e-2f);
}

static void check_model_gradients(int num_experts) {
    check_model_gradients_of(tiny_config(num_experts));
}

/* multi-token prediction (model.mtp_depth, DeepSeek-V3): one and two modules after a dense
 * model and after an MoE model (the modules' blocks MoE blocks, like the last layer), each
 * module's norms, projection and block checked with the rest, the embedding and the head getting
 * the modules' gradients too; on the reference backend and on cpu. A larger mtp_coef than
 * training's makes the modules' share of the shared tensors' gradients plain to see. One
 * module on the reference backend, two on cpu (each backend's arithmetic is the other's within
 * the tolerance, tests/test_backend_ops.c: a depth on each keeps the suite's time). */
START_TEST(test_model_gradients_mtp) {
    static const int devices[] = {MOE_DEVICE_CPU_REF, MOE_DEVICE_CPU};
    for (int d = 0; d < 2; d++)
        for (int e = 0; e <= 4; e += 4) {
            Config c = tiny_config(e);
            c.device = devices[d];
            c.mtp_depth = d + 1;
            c.mtp_coef = 0.7f;
            check_model_gradients_of(c);
        }
}
END_TEST

/* A training pass over fewer tokens than the model holds (B 1 x T 5 of 2 x 6) computes what a
 * model of that size computes: the modules' rows side by side do not depend on the size held */
START_TEST(test_mtp_smaller_pass) {
    Config c = tiny_config(4);
    c.mtp_depth = 2;
    const StepCtx training = {.training = 1};
    int in[12], tg[12];
    random_tokens(in, tg, 12, 5);
    Model big, small;
    model_init(&big, &c, 2, 6);
    model_init(&small, &c, 1, 5);
    const float o_big = model_forward(&big, in, tg, 1, 5, &training);
    const float o_small = model_forward(&small, in, tg, 1, 5, &training);
    ck_assert_msg(o_big == o_small, "objective %.9g in a model of 2 x 6, %.9g in one of 1 x 5",
                  o_big, o_small);
    ck_assert(big.state.mtp_loss[1] == small.state.mtp_loss[1]);
    ck_assert(isfinite(o_big) && o_big > big.state.loss); /* the modules' losses were added */
    model_free(&big);
    model_free(&small);
}
END_TEST

START_TEST(test_dense_model_gradients) {
    check_model_gradients(0);
}
END_TEST

START_TEST(test_moe_model_gradients) {
    check_model_gradients(4);
}
END_TEST

/* sigmoid scores, scaled weights and the per-sequence balance loss (B = 2 sequences) */
START_TEST(test_moe_model_gradients_sigmoid_seq_aux) {
    Config c = tiny_config(4);
    c.score = MOE_SCORE_SIGMOID;
    c.route_scale = 2.0f;
    c.balance = MOE_BALANCE_SEQ_AUX;
    check_model_gradients_of(c);
}
END_TEST

/* one shared expert next to the routed ones (the shared SwiGLU's tensors are in the table, so
 * the loop above checks them too) */
START_TEST(test_moe_model_gradients_shared) {
    Config c = tiny_config(4);
    c.num_shared = 1;
    check_model_gradients_of(c);
}
END_TEST

/* sandwich norms (model.norm, chapter 5): the output norms' gains and the sublayers' products
 * behind them, on a dense model and on MoE models (one with a shared expert); dssn starts its
 * output gains below 1, which changes the values but not the formulas. An output norm scales
 * the small product behind it up to unit RMS, so a step of 1e-2 in wo can flip a later top-k
 * choice: the MoE models take steps of 1e-3 */
START_TEST(test_model_gradients_sandwich) {
    Config c = tiny_config(0);
    c.norm = MOE_NORM_SANDWICH;
    check_model_gradients_of(c);
    c = tiny_config(4);
    c.norm = MOE_NORM_SANDWICH;
    check_model_gradients_eps(c, 1e-3f);
    c.norm = MOE_NORM_DSSN;
    c.num_shared = 1;
    check_model_gradients_eps(c, 1e-3f);
}
END_TEST

/* the aux loss over groups of experts, and over the step's micro-batches (a first micro-batch:
 * its own count, through the path that counts outside the loss) */
START_TEST(test_moe_model_gradients_balance_groups) {
    Config c = tiny_config(4);
    c.balance_groups = 2;
    check_model_gradients_of(c);
    c.balance_groups = 0;
    c.balance_scope = MOE_SCOPE_GLOBAL;
    check_model_gradients_of(c);
}
END_TEST

/* multi-head latent attention: queries straight from the stream or through a latent, a dense
 * and an MoE model, values narrower than the queries and keys, one on cpu-ref and one on cpu;
 * and a multi-token prediction module whose block is of latent attention */
START_TEST(test_model_gradients_latent_attention) {
    for (int moe = 0; moe < 2; moe++) { /* the dense model on cpu-ref, the MoE one on cpu */
        Config c = tiny_config(moe ? 4 : 0);
        c.device = moe ? MOE_DEVICE_CPU : MOE_DEVICE_CPU_REF;
        c.attention = MOE_ATTN_MLA;
        c.n_head = 3;
        c.mla_kv_rank = 5;
        c.mla_rope_dim = 2;
        c.mla_nope_dim = 4;
        c.mla_v_dim = 3;
        c.mla_q_rank = moe ? 0 : 6;
        check_model_gradients_of(c);
        if (moe) continue;
        c.mtp_depth = 1; /* a multi-token prediction module's block of latent attention */
        check_model_gradients_of(c);
    }
}
END_TEST

/* the attention's variants (chapter 10): grouped-query heads (4 query heads on 2 key-value
 * heads, and one key-value head for all), a head width apart from d_model / n_head, and the
 * norms on queries and keys, per head and over the whole projection; on the reference
 * backend and on cpu (its products and blocked attention) */
START_TEST(test_model_gradients_attention_variants) {
    static const int devices[] = {MOE_DEVICE_CPU_REF, MOE_DEVICE_CPU};
    for (int d = 0; d < 2; d++) { /* grouped heads of their own width on both */
        Config c = tiny_config(0);
        c.device = devices[d];
        c.n_head = 4;
        c.kv_heads = 2;
        c.head_dim = 6;
        check_model_gradients_of(c);
    }
    Config c = tiny_config(0); /* multi-query, qk-norm per head, on cpu */
    c.device = MOE_DEVICE_CPU;
    c.n_head = 4;
    c.kv_heads = 1;
    c.head_dim = 6;
    c.qk_norm = MOE_QK_NORM_HEAD;
    check_model_gradients_of(c);
    c = tiny_config(4); /* an MoE model, qk-norm over the projection, on cpu-ref */
    c.device = MOE_DEVICE_CPU_REF;
    c.n_head = 4;
    c.kv_heads = 2;
    c.qk_norm = MOE_QK_NORM_FULL;
    check_model_gradients_of(c);
}
END_TEST

/* model.tied: the head is tok_emb's transpose. The loop checks tok_emb's gradient at probes
 * spread over its rows, most of them rows of no input token (the head's part alone); the rows
 * of the input tokens carry both parts, the head's and the embedding's, and are checked whole. */
static void check_tied_gradients(Config c) {
    c.tied = 1;
    check_model_gradients_of(c);
    const int B = 2, T = 6, C = c.d_model;
    Model m;
    model_init(&m, &c, B, T);
    int in[12], tg[12];
    vocab_tokens(&c, in, tg, B * T, 3);
    model_zero_grad(&m);
    model_forward(&m, in, tg, B, T, NULL);
    model_backward(&m, 1.0f, NULL);
    ObjCtx ctx = {&m, in, tg, B, T, NULL};
    for (int n = 0; n < 3; n++) {
        char what[96];
        snprintf(what, sizeof what, "tied %s model, d objective / d tok_emb row %d (an input)",
                 c.num_experts ? "MoE" : "dense", in[n]);
        float row[64];
        memcpy(row, m.grads + (size_t)in[n] * C, (size_t)C * sizeof(float));
        gradcheck(objective, &ctx, m.params + (size_t)in[n] * C, row, (size_t)C, 1e-2f, 64, what);
    }
    model_free(&m);
}

START_TEST(test_tied_model_gradients) {
    check_tied_gradients(tiny_config(0));
    check_tied_gradients(tiny_config(4));
}
END_TEST

/* model.vocab other than the bytes' 256: the embedding (V, C), the head (V, C) and the loss
 * over 300 ids, the last and one past the bytes among the inputs and targets, untied and tied
 * (the rows of the input ids, beyond 256 among them, checked whole), on the reference backend
 * and on cpu. */
START_TEST(test_model_gradients_vocab) {
    static const int devices[] = {MOE_DEVICE_CPU_REF, MOE_DEVICE_CPU};
    for (int d = 0; d < 2; d++) {
        Config c = tiny_config(d ? 4 : 0);
        c.vocab = 300;
        c.device = devices[d];
        check_model_gradients_of(c);
        check_tied_gradients(c);
    }
}
END_TEST

/* model.tied: no head tensor (V C fewer parameters), the embedding first in the table as ever */
START_TEST(test_param_table_tied) {
    Config c = tiny_config(4);
    ParamTable untied, pt;
    params_table_build(&untied, &c);
    c.tied = 1;
    params_table_build(&pt, &c);
    ck_assert_int_ge(params_find(&untied, "head"), 0);
    ck_assert_int_lt(params_find(&pt, "head"), 0);
    ck_assert_int_eq(params_find(&pt, "tok_emb"), 0);
    ck_assert_str_eq(pt.t[pt.n - 1].name, "final_norm");
    ck_assert_uint_eq(params_count_total(&pt), params_count_total(&untied) - 256 * 8);
    ck_assert_uint_eq(params_count_active(&pt, &c), params_count_active(&untied, &c) - 256 * 8);
    ParamView v;
    float *buf = floats_alloc(pt.total);
    params_view(&v, &pt, buf);
    ck_assert_ptr_null(v.head);
    ck_assert_ptr_eq(v.tok_emb, buf);
    params_view_free(&v);
    free(buf);
    params_table_free(&untied);
    params_table_free(&pt);
}
END_TEST

/* A tied model's objective and gradients on each CPU backend: cpu-ref (the reference loops) and
 * cpu (sgemm) within the float32 tolerance, cpu-fenced (cpu's ops on memory the host reads only
 * through to_host) bit for bit cpu's. */
static float tied_pass(int device, float *grads) {
    Config c = tiny_config(4);
    c.tied = 1;
    c.device = device;
    Model m;
    model_init(&m, &c, 2, 6);
    int in[12], tg[12];
    random_tokens(in, tg, 12, 13);
    model_zero_grad(&m);
    const float obj = model_forward(&m, in, tg, 2, 6, NULL);
    model_backward(&m, 1.0f, NULL);
    float *host = model_host_copy(&m, m.grads, m.pt.total);
    memcpy(grads, host ? host : m.grads, m.pt.total * sizeof(float));
    free(host);
    model_free(&m);
    return obj;
}

START_TEST(test_tied_backends_agree) {
    Config c = tiny_config(4);
    c.tied = 1;
    ParamTable pt;
    params_table_build(&pt, &c);
    float *ref = floats_alloc(pt.total), *cpu = floats_alloc(pt.total);
    float *fenced = floats_alloc(pt.total);
    const float o_ref = tied_pass(MOE_DEVICE_CPU_REF, ref);
    const float o_cpu = tied_pass(MOE_DEVICE_CPU, cpu);
    const float o_fenced = tied_pass(MOE_DEVICE_CPU_FENCED, fenced);
    CLOSE(o_cpu, o_ref, "tied model: objective on cpu vs cpu-ref");
    CLOSE_ARRAYS(cpu, ref, pt.total, "tied model: gradients on cpu vs cpu-ref");
    ck_assert(o_fenced == o_cpu);
    ck_assert_int_eq(memcmp(fenced, cpu, pt.total * sizeof(float)), 0);
    free(ref), free(cpu), free(fenced);
    params_table_free(&pt);
}
END_TEST

/* shared experts: three tensors per MoE block of hidden num_shared * d_expert, all active */
START_TEST(test_param_table_shared) {
    Config c = tiny_config(4);
    ParamTable plain, pt;
    params_table_build(&plain, &c);
    c.num_shared = 2;
    params_table_build(&pt, &c);
    ck_assert_int_lt(params_find(&pt, "layers.0.moe.shared_gate"), 0); /* block 0 is dense */
    int g = params_find(&pt, "layers.1.moe.shared_gate");
    int d = params_find(&pt, "layers.1.moe.shared_down");
    ck_assert_int_ge(g, 0);
    ck_assert_int_ge(params_find(&pt, "layers.1.moe.shared_up"), 0);
    ck_assert_int_eq(pt.t[g].shape[0], 12); /* 2 x d_expert 6 */
    ck_assert_int_eq(pt.t[g].shape[1], 8);
    ck_assert_int_eq(pt.t[d].shape[0], 8);
    ck_assert_int_eq(pt.t[d].shape[1], 12);
    ck_assert_uint_eq(params_count_total(&pt), params_count_total(&plain) + 3 * 12 * 8);
    ck_assert_uint_eq(params_count_active(&pt, &c), params_count_active(&plain, &c) + 3 * 12 * 8);
    params_table_free(&plain);
    params_table_free(&pt);
}
END_TEST

START_TEST(test_param_table) {
    Config c = tiny_config(4);
    ParamTable pt;
    params_table_build(&pt, &c);
    /* block 0 dense (first_dense = 1), block 1 MoE */
    ck_assert_int_ge(params_find(&pt, "layers.0.ffn.w_gate"), 0);
    ck_assert_int_lt(params_find(&pt, "layers.0.moe.router"), 0);
    int r = params_find(&pt, "layers.1.moe.router");
    ck_assert_int_ge(r, 0);
    ck_assert_int_eq(pt.t[r].shape[0], 4);
    ck_assert_int_eq(pt.t[r].shape[1], 8);
    int wg = params_find(&pt, "layers.1.moe.w_gate");
    ck_assert_int_eq(pt.t[wg].ndim, 3);
    ck_assert_int_eq(pt.t[wg].shape[1], 6); /* d_expert */
    ck_assert_int_eq(pt.t[params_find(&pt, "layers.1.attn_norm")].decay, 0);
    ck_assert_int_eq(pt.t[params_find(&pt, "layers.1.attn.wq")].decay, 1);
    /* tensors tile the buffer in order */
    size_t off = 0;
    for (int i = 0; i < pt.n; i++) {
        ck_assert_uint_eq(pt.t[i].offset, off);
        off += pt.t[i].numel;
    }
    ck_assert_uint_eq(off, pt.total);
    /* counts by hand: emb + head 2*256*8; per block 2 norms + 4 C^2; dense FFN 3*12*8;
     * MoE router 4*8 + 4 experts * 3*6*8; final norm 8 */
    size_t per_block = 2 * 8 + 4 * 64;
    size_t total = 2 * 256 * 8 + 2 * per_block + 3 * 12 * 8 + 4 * 8 + 4 * 3 * 6 * 8 + 8;
    ck_assert_uint_eq(params_count_total(&pt), total);
    ck_assert_uint_eq(params_count_active(&pt, &c), total - 2 * 3 * 6 * 8); /* 2 of 4 experts */
    params_table_free(&pt);
}
END_TEST

START_TEST(test_accumulation_matches_full_batch) {
    /* dense, so the batch split cannot change routing statistics (the aux loss is a batch
     * statistic and is not additive across micro-batches) */
    Config c = tiny_config(0);
    c.init_std = 0.02f;
    Model full, half;
    model_init(&full, &c, 2, 6);
    model_init(&half, &c, 1, 6);
    int in[12], tg[12];
    random_tokens(in, tg, 12, 11);
    model_zero_grad(&full);
    model_forward(&full, in, tg, 2, 6, NULL);
    model_backward(&full, 1.0f, NULL);
    model_zero_grad(&half);
    for (int b = 0; b < 2; b++) {
        model_forward(&half, in + 6 * b, tg + 6 * b, 1, 6, NULL);
        model_backward(&half, 0.5f, NULL);
    }
    expect_close_arrays(half.grads, full.grads, full.pt.total, TOL_F32_ATOL, 1e-3f,
                        "accumulated gradient vs full batch");
    model_free(&full);
    model_free(&half);
}
END_TEST

START_TEST(test_checkpoint_round_trip_and_shape_check) {
    char dir[] = "/tmp/moe_test_model_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/ckpt.bin", dir);
    Config c = tiny_config(4);
    Model a, b;
    model_init(&a, &c, 2, 6);
    int in[12], tg[12];
    random_tokens(in, tg, 12, 5);
    model_zero_grad(&a);
    model_forward(&a, in, tg, 2, 6, NULL);
    model_backward(&a, 1.0f, NULL);
    size_t before = 0, after = 0;
    for (size_t i = 0; i < a.pt.total; i++) before += a.grads[i] != 0.0f;
    model_adamw_step(&a, 1e-3f, 1.0f);
    /* the step leaves the gradients zero for the next one to accumulate into */
    for (size_t i = 0; i < a.pt.total; i++) after += a.grads[i] != 0.0f;
    ck_assert_msg(before > a.pt.total / 2 && after == 0,
                  "%zu of %zu gradients non-zero before the AdamW step, %zu after (want 0)", before,
                  a.pt.total, after);
    Rng rng, rng2;
    rng_seed(&rng, 99);
    char err[1024];
    ck_assert_int_eq(checkpoint_save(&a, &rng, path, err, sizeof err), 0);

    Config stored;
    ck_assert_int_eq(checkpoint_config(path, &stored, err, sizeof err), 0);
    char why[256];
    ck_assert_int_eq(config_same_shape(&stored, &c, why, sizeof why), 1);
    ck_assert_float_eq(stored.aux_coef, c.aux_coef);

    model_init(&b, &stored, 2, 6);
    ck_assert_int_eq(checkpoint_load(&b, &rng2, path, 1, err, sizeof err), 0);
    ck_assert_int_eq(b.step, 1);
    ck_assert_int_eq(memcmp(a.params, b.params, a.pt.total * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(a.m, b.m, a.pt.total * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(a.v, b.v, a.pt.total * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(&rng, &rng2, sizeof rng), 0);
    model_free(&b);

    /* another shape: refused, naming the setting */
    Config other = c;
    other.d_model = 16;
    model_init(&b, &other, 2, 6);
    ck_assert_int_eq(checkpoint_load(&b, NULL, path, 0, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "d_model") != NULL, "message should name d_model: %s", err);
    model_free(&b);
    model_free(&a);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* train.spike_action=skip (model_skip_update): a skipped step leaves the weights and both
 * AdamW moments bit for bit as they were and drops its gradients; AdamW's own count skips it
 * too, so the updates after it are those of a run that never took the step: steps on batches
 * 1, X (skipped), 2 equal steps on batches 1, 2. The count survives a checkpoint. */
START_TEST(test_skip_update) {
    Config c = tiny_config(4);
    Model a, b;
    model_init(&a, &c, 2, 6);
    model_init(&b, &c, 2, 6);
    int in[3][12], tg[3][12];
    for (int k = 0; k < 3; k++) random_tokens(in[k], tg[k], 12, 20 + k);
    const int order_a[3] = {0, 1, 2}, order_b[2] = {0, 2};
    const size_t bytes = a.pt.total * sizeof(float);
    float *before = (float *)malloc(3 * bytes);
    for (int i = 0; i < 3; i++) {
        model_forward(&a, in[order_a[i]], tg[order_a[i]], 2, 6, NULL);
        model_backward(&a, 1.0f, NULL);
        if (i != 1) {
            model_adamw_step(&a, 1e-2f, 1.0f);
            continue;
        }
        memcpy(before, a.params, bytes);
        memcpy((char *)before + bytes, a.m, bytes);
        memcpy((char *)before + 2 * bytes, a.v, bytes);
        model_skip_update(&a);
        ck_assert_int_eq(memcmp(before, a.params, bytes), 0);
        ck_assert_int_eq(memcmp((char *)before + bytes, a.m, bytes), 0);
        ck_assert_int_eq(memcmp((char *)before + 2 * bytes, a.v, bytes), 0);
        size_t nonzero = 0;
        for (size_t j = 0; j < a.pt.total; j++) nonzero += a.grads[j] != 0.0f;
        ck_assert_msg(nonzero == 0, "%zu gradients left after a skipped step", nonzero);
    }
    for (int i = 0; i < 2; i++) {
        model_forward(&b, in[order_b[i]], tg[order_b[i]], 2, 6, NULL);
        model_backward(&b, 1.0f, NULL);
        model_adamw_step(&b, 1e-2f, 1.0f);
    }
    ck_assert_int_eq(a.step, 3);
    ck_assert_int_eq(a.skipped, 1);
    ck_assert_int_eq(memcmp(a.params, b.params, bytes), 0);
    ck_assert_int_eq(memcmp(a.v, b.v, bytes), 0);

    /* the count is the checkpoint's: optimizer/skipped, absent where nothing was skipped */
    char dir[] = "/tmp/moe_test_skip_XXXXXX", path[256], err[1024];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/ckpt.bin", dir);
    ck_assert_int_eq(checkpoint_save(&a, NULL, path, err, sizeof err), 0);
    Model r;
    model_init(&r, &c, 2, 6);
    ck_assert_int_eq(checkpoint_load(&r, NULL, path, 1, err, sizeof err), 0);
    ck_assert_int_eq(r.step, 3);
    ck_assert_int_eq(r.skipped, 1);
    ck_assert_int_eq(checkpoint_save(&b, NULL, path, err, sizeof err), 0);
    ck_assert_int_eq(checkpoint_load(&r, NULL, path, 1, err, sizeof err), 0);
    ck_assert_int_eq(r.skipped, 0);
    ck_assert_int_eq(checkpoint_step(path), 2);
    model_free(&r);
    unlink(path);
    rmdir(dir);
    free(before);
    model_free(&a);
    model_free(&b);
}
END_TEST

/* A tied model's checkpoint loads back bit for bit; loaded into an untied model (and an untied
 * model's into a tied one) it is refused, the message naming model.tied. */
START_TEST(test_checkpoint_tied) {
    char dir[] = "/tmp/moe_test_tied_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char tied_path[256], untied_path[256], err[1024];
    snprintf(tied_path, sizeof tied_path, "%s/tied.bin", dir);
    snprintf(untied_path, sizeof untied_path, "%s/untied.bin", dir);
    Config c = tiny_config(4), u = tiny_config(4);
    c.tied = 1;
    Model a, b;
    model_init(&a, &c, 2, 6);
    int in[12], tg[12];
    random_tokens(in, tg, 12, 5);
    model_zero_grad(&a);
    model_forward(&a, in, tg, 2, 6, NULL);
    model_backward(&a, 1.0f, NULL);
    model_adamw_step(&a, 1e-3f, 1.0f);
    ck_assert_int_eq(checkpoint_save(&a, NULL, tied_path, err, sizeof err), 0);
    Config stored;
    ck_assert_int_eq(checkpoint_config(tied_path, &stored, err, sizeof err), 0);
    ck_assert_int_eq(stored.tied, 1);
    model_init(&b, &stored, 2, 6);
    ck_assert_int_eq(checkpoint_load(&b, NULL, tied_path, 1, err, sizeof err), 0);
    ck_assert_int_eq(memcmp(a.params, b.params, a.pt.total * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(a.m, b.m, a.pt.total * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(a.v, b.v, a.pt.total * sizeof(float)), 0);
    model_free(&b);

    model_init(&b, &u, 2, 6);
    ck_assert_int_eq(checkpoint_load(&b, NULL, tied_path, 0, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.tied=1") && strstr(err, "config has 0"),
                  "a tied checkpoint into an untied model: %s", err);
    ck_assert_int_eq(checkpoint_save(&b, NULL, untied_path, err, sizeof err), 0);
    model_free(&b);
    ck_assert_int_eq(checkpoint_load(&a, NULL, untied_path, 0, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.tied=0") && strstr(err, "config has 1"),
                  "an untied checkpoint into a tied model: %s", err);
    model_free(&a);
    unlink(tied_path);
    unlink(untied_path);
    rmdir(dir);
}
END_TEST

/* Aux-free biases: updated only with moe.balance=aux_free, from each block's own loads, and
 * carried by checkpoints (they are not parameters, so the parameter entries do not cover
 * them). */
START_TEST(test_router_bias_update_and_checkpoint) {
    char dir[] = "/tmp/moe_test_bias_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], err[1024];
    snprintf(path, sizeof path, "%s/ckpt.bin", dir);
    Config c = tiny_config(4);
    c.first_dense = 0;                                /* two MoE blocks */
    const double count[8] = {2, 1, 1, 0, 1, 2, 3, 4}; /* per block: assignments per expert */
    Model a, b;
    model_init(&a, &c, 2, 6);
    ck_assert_int_eq(a.n_moe, 2);
    model_update_router_bias(&a, count); /* balance=aux: nothing moves */
    for (int i = 0; i < 8; i++) ck_assert_float_eq(a.router_bias[i], 0.0f);
    model_free(&a);

    c.balance = MOE_BALANCE_AUX_FREE;
    c.bias_rate = 0.5f;
    model_init(&a, &c, 2, 6);
    model_update_router_bias(&a, count);
    const float want[8] = {-0.5f, 0.0f, 0.0f, 0.5f, 0.5f, 0.5f, -0.5f, -0.5f};
    expect_close_arrays(a.router_bias, want, 8, TOL_F32_ATOL, TOL_F32_RTOL, "sign rule per block");
    ck_assert_ptr_eq(a.state.blocks[1].router_bias, a.router_bias + 4);
    ck_assert_int_eq(checkpoint_save(&a, NULL, path, err, sizeof err), 0);
    model_init(&b, &c, 2, 6);
    ck_assert_int_eq(checkpoint_load(&b, NULL, path, 0, err, sizeof err), 0);
    ck_assert_int_eq(memcmp(a.router_bias, b.router_bias, 8 * sizeof(float)), 0);
    model_free(&b);
    model_free(&a);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* moe.jitter and moe.noise act only in a training forward (StepCtx.training), draw from the model's
 * own stream (same seed, same noise), and that stream is restored by a checkpoint. */
START_TEST(test_router_noise_training_only) {
    Config c = tiny_config(4), quiet = tiny_config(4);
    c.jitter = 0.1f;
    c.noise = 0.3f;
    Model a, b, q;
    model_init(&a, &c, 2, 6);
    model_init(&b, &c, 2, 6);
    model_init(&q, &quiet, 2, 6);
    int in[12], tg[12];
    random_tokens(in, tg, 12, 9);
    const StepCtx eval = {.training = 0}, train = {.training = 1};
    Rng start = a.router_rng;
    float clean = model_forward(&q, in, tg, 2, 6, NULL);
    ck_assert(model_forward(&a, in, tg, 2, 6, NULL) == clean);  /* bit for bit: no noise at all */
    ck_assert(model_forward(&a, in, tg, 2, 6, &eval) == clean); /* no context: evaluation mode */
    ck_assert(memcmp(&start, &a.router_rng, sizeof start) == 0);

    float noisy = model_forward(&a, in, tg, 2, 6, &train);
    ck_assert_msg(noisy != clean, "training forward ignored moe.jitter / moe.noise");
    ck_assert(memcmp(&start, &a.router_rng, sizeof start) != 0);
    ck_assert(model_forward(&b, in, tg, 2, 6, &train) == noisy); /* same stream, same noise */
    float second = model_forward(&a, in, tg, 2, 6, &train);
    ck_assert(second != noisy); /* the stream moves on: fresh noise each forward */

    char dir[] = "/tmp/moe_test_noise_XXXXXX", path[256], err[1024];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/ckpt.bin", dir);
    ck_assert_int_eq(checkpoint_save(&a, NULL, path, err, sizeof err), 0);
    model_free(&b);
    model_init(&b, &c, 2, 6);
    ck_assert_int_eq(checkpoint_load(&b, NULL, path, 1, err, sizeof err), 0);
    ck_assert(memcmp(&a.router_rng, &b.router_rng, sizeof(Rng)) == 0);
    ck_assert(model_forward(&a, in, tg, 2, 6, &train) == model_forward(&b, in, tg, 2, 6, &train));
    unlink(path);
    rmdir(dir);
    model_free(&a);
    model_free(&b);
    model_free(&q);
}
END_TEST

/* model/inspect.h, what the chapter programs read of a forward: the blocks' views chain into
 * one another, the routing view agrees with itself and with the router's own product, and the
 * weights are the parameter table's tensors. */
static const float *param(const Model *m, const char *name) {
    const int i = params_find(&m->pt, name);
    ck_assert_msg(i >= 0, "no tensor %s", name);
    return m->params + m->pt.t[i].offset;
}

START_TEST(test_model_inspect) {
    enum { B = 2, T = 6, N = B * T, E = 4, K = 2, C = 8 };
    Config c = tiny_config(E); /* block 0 dense, block 1 MoE */
    c.balance = MOE_BALANCE_AUX_FREE;
    Model m;
    model_init(&m, &c, B, T);
    int in[N], tg[N];
    random_tokens(in, tg, N, 3);
    model_forward(&m, in, tg, B, T, NULL);

    ck_assert(!model_is_moe(&m, 0) && model_is_moe(&m, 1));
    ck_assert(!model_is_moe(&m, -1) && !model_is_moe(&m, 2));

    const BlockView b0 = model_block_view(&m, 0), b1 = model_block_view(&m, 1);
    ck_assert_ptr_eq(b0.output, b1.input);
    ck_assert_ptr_null(b1.attn_out); /* model.norm=pre */
    for (int n = 0; n < N; n++) {    /* the FFN's input is rmsnorm(mid), gains 1 at init */
        double ms = 0.0;
        for (int i = 0; i < C; i++) ms += (double)b1.ffn_in[n * C + i] * b1.ffn_in[n * C + i];
        ck_assert_double_eq_tol(ms / C, 1.0, 1e-3);
    }

    const RouteView dense = model_route_view(&m, 0), r = model_route_view(&m, 1);
    ck_assert(dense.N == 0 && dense.idx == NULL && dense.routed == NULL);
    ck_assert(r.N == N && r.E == E && r.A == K);
    int count[E] = {0};
    float max = 0.0f;
    for (int j = 0; j < N * K; j++) {
        ck_assert(r.idx[j] >= 0 && r.idx[j] < E);
        count[r.idx[j]]++;
    }
    for (int e = 0; e < E; e++) ck_assert_int_eq(r.routed[e], count[e]);
    for (int j = 0; j < N * E; j++) max = fabsf(r.logits[j]) > max ? fabsf(r.logits[j]) : max;
    ck_assert_float_eq(r.max_logit, max);
    float logits[N * E]; /* an fp32 router without noise: the block's own logits, bit for bit */
    model_router_logits(&m, 1, logits);
    ck_assert_int_eq(memcmp(logits, r.logits, sizeof logits), 0);

    const MoeWeights w = model_moe_weights(&m, 1);
    ck_assert_ptr_eq(w.router, param(&m, "layers.1.moe.router"));
    ck_assert_ptr_eq(w.Wg, param(&m, "layers.1.moe.w_gate"));
    ck_assert_ptr_eq(w.Wu, param(&m, "layers.1.moe.w_up"));
    ck_assert_ptr_eq(w.Wd, param(&m, "layers.1.moe.w_down"));
    ck_assert_ptr_eq(w.bias, m.router_bias); /* aux_free: the only MoE block's bias */
    ck_assert_double_eq(model_expert_similarity(&m, 0), 0.0);
    ck_assert_double_eq(model_expert_similarity(&m, 1),
                        experts_similarity(w.Wg, w.Wu, w.Wd, E, C, c.d_expert));
    model_free(&m);

    c.balance = MOE_BALANCE_AUX; /* no bias to add to the choice */
    model_init(&m, &c, B, T);
    ck_assert_ptr_null(model_moe_weights(&m, 1).bias);
    model_free(&m);
}
END_TEST

START_TEST(test_lr_schedule) {
    Config c;
    config_defaults(&c);
    c.lr = 1.0f;
    c.min_lr = 0.1f;
    c.warmup = 10;
    c.steps = 110;
    expect_close(lr_schedule(&c, 0), 0.1f, 1e-6f, 0, "first warm-up step");
    expect_close(lr_schedule(&c, 9), 1.0f, 1e-6f, 0, "end of warm-up");
    expect_close(lr_schedule(&c, 60), 0.55f, 1e-5f, 0, "half-way down the cosine");
    expect_close(lr_schedule(&c, 110), 0.1f, 1e-6f, 0, "end of the cosine");
}
END_TEST

static Suite *model_suite(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_param_table);
    tcase_add_test(tc, test_dense_model_gradients);
    tcase_add_test(tc, test_moe_model_gradients);
    tcase_add_test(tc, test_moe_model_gradients_sigmoid_seq_aux);
    tcase_add_test(tc, test_moe_model_gradients_shared);
    tcase_add_test(tc, test_model_gradients_sandwich);
    tcase_add_test(tc, test_model_gradients_attention_variants);
    tcase_add_test(tc, test_model_gradients_latent_attention);
    tcase_add_test(tc, test_moe_model_gradients_balance_groups);
    tcase_add_test(tc, test_model_gradients_mtp);
    tcase_add_test(tc, test_mtp_smaller_pass);
    tcase_add_test(tc, test_param_table_shared);
    tcase_add_test(tc, test_param_table_tied);
    tcase_add_test(tc, test_tied_model_gradients);
    tcase_add_test(tc, test_model_gradients_vocab);
    tcase_add_test(tc, test_tied_backends_agree);
    tcase_add_test(tc, test_checkpoint_tied);
    tcase_add_test(tc, test_accumulation_matches_full_batch);
    tcase_add_test(tc, test_checkpoint_round_trip_and_shape_check);
    tcase_add_test(tc, test_router_bias_update_and_checkpoint);
    tcase_add_test(tc, test_router_noise_training_only);
    tcase_add_test(tc, test_lr_schedule);
    tcase_add_test(tc, test_model_inspect);
    tcase_add_test(tc, test_skip_update);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(model_suite)
