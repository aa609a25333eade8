/*
 * test_import.c: importing models from safetensors files (import.c), and exporting them.
 *
 *   - round trips: a dense model and an MoE model (moe.every=2, moe.first_dense=1, one shared
 *     expert) written by model_export (`moe export`) come back bit-identical, checksum
 *     verified, with the evaluation settings of the file, and give the same loss on a fixed
 *     batch; an aux_free model's router biases come back too (and the loss depends on them);
 *   - import_config recovers every shape setting from the tensors alone (no metadata; a file
 *     without a head tensor is a tied model, model.tied), takes
 *     model.n_head from the metadata or the caller, refuses each setting that changes the
 *     function when neither the file nor the caller states it (naming it and its --set), and
 *     refuses MoE layer patterns that moe.every / moe.first_dense cannot express;
 *   - import_weights names the missing, mis-shaped or extra tensor, and the router biases an
 *     aux_free model lacks or another model should not have.
 *
 * The reader itself (damaged files, the checksum, half precision, metadata escapes) is tested
 * in test_safetensors.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "convert/import.h"
#include "io/tensorfile.h"
#include "model/model.h"
#include "testutil.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static char err[1024];

static void tmp_setup(void) {
    tmp_dir_make("import");
}

static void set(Config *c, const char *assignment) {
    ck_assert_msg(config_set(c, assignment, err, sizeof err) == 0, "%s: %s", assignment, err);
}

/* 4 blocks of C = 16; the MoE variant has blocks 1 and 3 as MoE blocks of 4 experts of
 * hidden size 24 plus one shared expert, blocks 0 and 2 dense with d_ff = 32. */
static Config small_config(int moe) {
    Config c;
    config_defaults(&c);
    set(&c, "model.d_model=16");
    set(&c, "model.n_layer=4");
    set(&c, "model.n_head=2");
    set(&c, "model.d_ff=32");
    set(&c, "model.seq_len=8");
    set(&c, "train.seed=7");
    set(&c, moe ? "moe.num_experts=4" : "moe.num_experts=0");
    set(&c, "moe.top_k=2");
    set(&c, "moe.d_expert=24");
    set(&c, "moe.every=2");
    set(&c, "moe.first_dense=1");
    set(&c, "moe.num_shared=1");
    return c;
}

enum { META_BARE = 1, META_CONFIG = 2 };

/* The settings that change an MoE model's function other than model.n_head, as a caller
 * would state them for a file without metadata (--set lines): small_config's values. */
#define MOE_GIVEN                                                                                  \
    "model.seq_len=8\nmodel.rope_theta=10000\nmoe.top_k=2\nmoe.norm_topk=1\n"                      \
    "moe.score=softmax\nmoe.topk_before_softmax=0\nmoe.route_scale=1\nmoe.balance=aux\n"           \
    "moe.routing=token_choice\nmoe.capacity_factor=0\nmoe.eval_capacity_factor=-1\n"               \
    "moe.n_group=0\nmoe.topk_group=0\n"

/* The parameters of m as `moe export` names them, leaving out the tensor named skip. Returns
 * the count; e has room for one more entry. */
static int model_entries(const Model *m, TensorRef *e, const char *skip) {
    int n = 0;
    for (int i = 0; i < m->pt.n; i++) {
        const ParamTensor *t = &m->pt.t[i];
        if (skip && strcmp(t->name, skip) == 0) continue;
        snprintf(e[n].name, sizeof e[n].name, "%s", t->name);
        e[n].dtype = TENSOR_F32;
        e[n].ndim = t->ndim;
        memcpy(e[n].shape, t->shape, sizeof t->shape);
        e[n].nbytes = t->numel * sizeof(float);
        e[n].data = m->params + t->offset;
        n++;
    }
    return n;
}

/* Write entries with the metadata `moe export` writes (META_BARE) and/or a "config" entry
 * holding config_write's text of c (META_CONFIG). */
static void write_file(const char *path, const TensorRef *e, int n, const Config *c, int meta) {
    char v[8][32], *text = config_to_text(c);
    snprintf(v[0], 32, "%d", c->d_model);
    snprintf(v[1], 32, "%d", c->n_layer);
    snprintf(v[2], 32, "%d", c->n_head);
    snprintf(v[3], 32, "%d", c->num_experts);
    snprintf(v[4], 32, "%d", c->top_k);
    snprintf(v[5], 32, "%g", c->rope_theta);
    snprintf(v[6], 32, "%d", c->norm_topk);
    const char *keys[9] = {"d_model",    "n_layer",   "n_head", "num_experts", "top_k",
                           "rope_theta", "norm_topk", "format", "config"};
    const char *vals[9] = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], "moe.c", text};
    int from = meta & META_BARE ? 0 : 8, to = meta & META_CONFIG ? 9 : 8;
    ck_assert_msg(safetensors_write(path, e, n, keys + from, vals + from, to > from ? to - from : 0,
                                    err, sizeof err) == 0,
                  "%s", err);
    free(text);
}

static void export_model(const Model *m, const char *path, int meta) {
    TensorRef *e = (TensorRef *)calloc_check((size_t)m->pt.n + 1, sizeof(TensorRef));
    write_file(path, e, model_entries(m, e, NULL), &m->cfg, meta);
    free(e);
}

/* Loss of m on a fixed batch of 2 x 8 tokens. */
static float fixed_loss(Model *m) {
    int in[16], tg[16];
    for (int i = 0; i < 16; i++)
        in[i] = (i * 37 + 11) % MOE_VOCAB, tg[i] = (i * 53 + 5) % MOE_VOCAB;
    model_forward(m, in, tg, 2, 8, NULL);
    return m->state.loss;
}

static void expect_weights_refused(const char *path, const Config *c, const char *want,
                                   const char *want2);

/* ---- round trips ----------------------------------------------------------------------------- */

/* Export a model, import settings and weights into a model initialised from another seed:
 * the parameters must match bit for bit, and so must the loss. */
static void check_round_trip(int moe) {
    Config ca = small_config(moe);
    /* evaluation settings the import must carry over, none of them the defaults */
    set(&ca, "train.batch=3");
    set(&ca, "train.eval_batches=5");
    set(&ca, "data.val=elsewhere/val.bin");
    if (moe) set(&ca, "moe.capacity_factor=1.5"), set(&ca, "moe.eval_capacity_factor=2");
    Model a, b;
    model_init(&a, &ca, 2, 8);
    const char *path = tmp_path(moe ? "moe.safetensors" : "dense.safetensors");
    ck_assert_msg(model_export(&a, path, err, sizeof err) == 0, "%s", err);
    SafeTensors st;
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.n, a.pt.n); /* no router biases: moe.balance=aux */
    ck_assert_int_eq(st.checksum, 1);
    ck_assert_str_eq(safetensors_meta(&st, "format"), "moe.c");
    ck_assert_ptr_null(safetensors_meta(&st, "no such key"));

    Config cb;
    config_defaults(&cb); /* d_model 128, 8 experts, ...: all of it must come from the file */
    ck_assert_msg(import_config(&cb, &st, NULL, err, sizeof err) == 0, "%s", err);
    char why[256];
    ck_assert_msg(config_same_shape(&ca, &cb, why, sizeof why), "shapes differ: %s", why);
    ck_assert_int_eq(cb.n_head, 2);
    ck_assert_int_eq(cb.seq_len, 8);
    ck_assert_int_eq(cb.batch, 3);
    ck_assert_int_eq(cb.eval_batches, 5);
    ck_assert_str_eq(cb.val, "elsewhere/val.bin");
    ck_assert_float_eq(cb.eval_capacity_factor, ca.eval_capacity_factor);
    ck_assert_float_eq(cb.capacity_factor, ca.capacity_factor);
    ck_assert_uint_eq(cb.seed, 1337); /* the other train.* stay the importing run's */
    ck_assert_str_eq(cb.train, "data/corpus/train.bin");
    model_init(&b, &cb, 2, 8);
    ck_assert_msg(memcmp(a.params, b.params, a.pt.total * sizeof(float)) != 0,
                  "both seeds gave the same weights: the test would prove nothing");
    ck_assert_msg(import_weights(&b, &st, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(memcmp(a.params, b.params, a.pt.total * sizeof(float)) == 0,
                  "weights differ after import");
    float la = fixed_loss(&a), lb = fixed_loss(&b);
    expect_close(lb, la, 0.0f, 0.0f, "loss after import");
    safetensors_free(&st);
    model_free(&a);
    model_free(&b);
}

START_TEST(test_round_trip_dense) {
    check_round_trip(0);
}
END_TEST

START_TEST(test_round_trip_moe) {
    check_round_trip(1);
}
END_TEST

/* ---- settings from shapes alone ------------------------------------------------------------- */

/* The model of settings ca exported without metadata and read back into st (the caller frees
 * it), its settings imported into c with model.n_head=4 given. */
static void import_bare(const Config *ca, SafeTensors *st, Config *c) {
    Model a;
    model_init(&a, ca, 2, 8);
    const char *path = tmp_path("bare-heads.safetensors");
    export_model(&a, path, 0);
    model_free(&a);
    ck_assert_msg(safetensors_read(st, path, err, sizeof err) == 0, "%s", err);
    config_defaults(c);
    set(c, "model.n_head=4");
    ck_assert_msg(import_config(c, st, MOE_GIVEN "model.n_head=4\n", err, sizeof err) == 0, "%s",
                  err);
}

/* The attention's heads from the shapes, n_head given: grouped key-value heads of their own
 * width with a gain over each head (or over the projection, or none), and the defaults as 0. */
START_TEST(test_heads_from_shapes) {
    static const struct {
        const char *kv, *dim, *norm;
        int want_kv, want_dim, want_norm;
    } CASES[] = {
        {"model.kv_heads=2", "model.head_dim=6", "model.qk_norm=head", 2, 6, MOE_QK_NORM_HEAD},
        {"model.kv_heads=1", "model.head_dim=0", "model.qk_norm=full", 1, 0, MOE_QK_NORM_FULL},
        {"model.kv_heads=4", "model.head_dim=0", "model.qk_norm=none", 0, 0, MOE_QK_NORM_NONE},
    };
    /* latent attention: its widths from its tensors, with and without the queries' latent */
    for (int qr = 0; qr < 2; qr++) {
        Config ca = small_config(0);
        set(&ca, "model.n_head=4"), set(&ca, "model.attention=mla"), set(&ca, "mla.kv_rank=6");
        set(&ca, "mla.rope_dim=4"), set(&ca, "mla.nope_dim=2"), set(&ca, "mla.v_dim=3");
        set(&ca, qr ? "mla.q_rank=5" : "mla.q_rank=0");
        SafeTensors st;
        Config c;
        import_bare(&ca, &st, &c);
        char why[256];
        ck_assert_msg(config_same_shape(&ca, &c, why, sizeof why) == 0, "%s", why);
        safetensors_free(&st);
    }
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        Config ca = small_config(0);
        set(&ca, "model.n_head=4");
        set(&ca, CASES[i].kv), set(&ca, CASES[i].dim), set(&ca, CASES[i].norm);
        SafeTensors st;
        Config c;
        import_bare(&ca, &st, &c);
        ck_assert_int_eq(c.kv_heads, CASES[i].want_kv);
        ck_assert_int_eq(c.head_dim, CASES[i].want_dim);
        ck_assert_int_eq(c.qk_norm, CASES[i].want_norm);
        Model b;
        model_init(&b, &c, 2, 8);
        ck_assert_msg(import_weights(&b, &st, err, sizeof err) == 0, "%s", err);
        model_free(&b);
        safetensors_free(&st);
    }
}
END_TEST

START_TEST(test_config_from_shapes) {
    Config ca = small_config(1);
    Model a;
    model_init(&a, &ca, 2, 8);
    const char *path = tmp_path("bare.safetensors");
    SafeTensors st;
    char why[256];

    /* no metadata at all: n_head is the caller's */
    export_model(&a, path, 0);
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.n_meta, 0);
    ck_assert_int_eq(st.checksum, 0);
    Config c;
    config_defaults(&c);
    set(&c, "model.n_head=4");
    ck_assert_msg(import_config(&c, &st, MOE_GIVEN "model.n_head=4\n", err, sizeof err) == 0, "%s",
                  err);
    ck_assert_msg(config_same_shape(&ca, &c, why, sizeof why) == 0, "n_head should differ");
    ck_assert_int_eq(c.n_head, 4);
    ck_assert_int_eq(c.d_model, 16);
    ck_assert_int_eq(c.n_layer, 4);
    ck_assert_int_eq(c.d_ff, 32);
    ck_assert_int_eq(c.num_experts, 4);
    ck_assert_int_eq(c.d_expert, 24);
    ck_assert_int_eq(c.num_shared, 1);
    ck_assert_int_eq(c.every, 2);
    ck_assert_int_eq(c.first_dense, 1);
    ck_assert_int_eq(c.tied, 0); /* a head tensor: its own head, whatever the caller said */
    Config claims_tied;
    config_defaults(&claims_tied);
    set(&claims_tied, "model.n_head=4");
    set(&claims_tied, "model.tied=1");
    const int claimed =
        import_config(&claims_tied, &st, MOE_GIVEN "model.n_head=4\n", err, sizeof err);
    ck_assert_msg(claimed == 0, "%s", err);
    ck_assert_int_eq(claims_tied.tied, 0);
    /* a head count that does not divide d_model = 16 is refused, naming model.n_head */
    Config bad;
    config_defaults(&bad);
    set(&bad, "model.n_head=3");
    Config before = bad;
    ck_assert_int_eq(import_config(&bad, &st, MOE_GIVEN "model.n_head=3", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.n_head") && strstr(err, path), "%s", err);
    ck_assert_msg(memcmp(&bad, &before, sizeof bad) == 0, "config changed on failure");
    safetensors_free(&st);

    /* the export's own metadata keys: n_head and top_k from the file */
    export_model(&a, path, META_BARE);
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    config_defaults(&c);
    set(&c, "moe.top_k=1");
    ck_assert_msg(import_config(&c, &st, MOE_GIVEN, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(config_same_shape(&ca, &c, why, sizeof why), "%s", why);
    ck_assert_int_eq(c.top_k, 2);
    safetensors_free(&st);
    model_free(&a);

    /* no head tensor: a tied model (model.tied), its logits from the embedding */
    Config ct = small_config(1);
    set(&ct, "model.tied=1");
    model_init(&a, &ct, 2, 8);
    export_model(&a, path, 0);
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_null(safetensors_find(&st, "head"));
    config_defaults(&c);
    set(&c, "model.n_head=2");
    ck_assert_msg(import_config(&c, &st, MOE_GIVEN "model.n_head=2\n", err, sizeof err) == 0, "%s",
                  err);
    ck_assert_int_eq(c.tied, 1);
    ck_assert_msg(config_same_shape(&ct, &c, why, sizeof why), "%s", why);
    safetensors_free(&st);
    model_free(&a);

    /* a dense file turns the defaults' 8 experts off */
    Config cd = small_config(0);
    model_init(&a, &cd, 2, 8);
    export_model(&a, path, 0);
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    config_defaults(&c);
    set(&c, "model.n_head=2");
    /* a dense model needs only the model.* function keys */
    const char *dense_given = "model.n_head=2\nmodel.seq_len=8\nmodel.rope_theta=10000\n";
    ck_assert_msg(import_config(&c, &st, dense_given, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.num_experts, 0);
    ck_assert_int_eq(c.d_model, 16);
    ck_assert_int_eq(c.n_layer, 4);
    ck_assert_int_eq(c.d_ff, 32);
    safetensors_free(&st);
    model_free(&a);
}
END_TEST

/* Each setting that changes the function, left out of an exported file's "config" (and of the
 * bare keys), is refused by name with the --set that supplies it; given by the caller it is
 * accepted. A capacity-bound expert-choice model needs its extra keys too. */
START_TEST(test_config_function_keys) {
    static const char *const keys[] = {
        "model.n_head",   "model.seq_len",  "model.rope_theta",        "moe.top_k",
        "moe.norm_topk",  "moe.score",      "moe.topk_before_softmax", "moe.route_scale",
        "moe.balance",    "moe.routing",    "moe.capacity_factor",     "moe.eval_capacity_factor",
        "moe.n_group",    "moe.topk_group", "moe.capacity_scope",      "moe.min_capacity",
        "moe.drop_policy"};
    Config ca = small_config(1);
    set(&ca, "moe.capacity_factor=1.25"); /* so the capacity keys apply */
    Model a;
    model_init(&a, &ca, 1, 8);
    TensorRef *e = (TensorRef *)calloc_check((size_t)a.pt.n + 1, sizeof(TensorRef));
    int n = model_entries(&a, e, NULL);
    char *text = config_to_text(&ca), *cut = (char *)malloc_check(strlen(text) + 1);
    const char *path = tmp_path("keys.safetensors");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        /* the config text without the line "key = value" */
        size_t len = strlen(keys[i]), k = 0;
        int dropped = 0;
        for (const char *line = text; *line;) {
            const char *end = strchr(line, '\n');
            size_t l = end ? (size_t)(end - line) + 1 : strlen(line);
            if (strncmp(line, keys[i], len) == 0 && line[len] == ' ')
                dropped = 1;
            else
                memcpy(cut + k, line, l), k += l;
            line += l;
        }
        cut[k] = 0;
        ck_assert_msg(dropped, "no line for %s", keys[i]);
        const char *mk[2] = {"format", "config"}, *mv[2] = {"moe.c", cut};
        ck_assert_msg(safetensors_write(path, e, n, mk, mv, 2, err, sizeof err) == 0, "%s", err);
        SafeTensors st;
        ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
        Config c;
        config_defaults(&c);
        Config before = c;
        ck_assert_int_eq(import_config(&c, &st, NULL, err, sizeof err), -1);
        char want[96];
        snprintf(want, sizeof want, "--set %s=", keys[i]);
        ck_assert_msg(strstr(err, keys[i]) && strstr(err, want) && strstr(err, "does not record"),
                      "%s: %s", keys[i], err);
        ck_assert_msg(memcmp(&c, &before, sizeof c) == 0, "config changed on failure");
        /* stated by the caller (a --set line), the same file imports */
        char given[96];
        snprintf(given, sizeof given, "%s=whatever the caller set\n", keys[i]);
        ck_assert_msg(import_config(&c, &st, given, err, sizeof err) == 0, "%s: %s", keys[i], err);
        safetensors_free(&st);
    }
    /* expert choice needs moe.ec_capacity */
    free(text);
    Config cx = ca;
    set(&cx, "moe.capacity_factor=0");
    set(&cx, "moe.routing=expert_choice");
    set(&cx, "moe.balance=none");
    text = config_to_text(&cx);
    char *at = strstr(text, "moe.ec_capacity = ");
    ck_assert(at != NULL);
    at[0] = '#'; /* the line becomes a comment */
    const char *mk[1] = {"config"}, *mv[1] = {text};
    ck_assert_msg(safetensors_write(path, e, n, mk, mv, 1, err, sizeof err) == 0, "%s", err);
    SafeTensors st;
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    Config c;
    config_defaults(&c);
    ck_assert_int_eq(import_config(&c, &st, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--set moe.ec_capacity=1") && !strstr(err, "moe.drop_policy"), "%s",
                  err);
    safetensors_free(&st);
    free(text);
    free(cut);
    free(e);
    model_free(&a);
}
END_TEST

/* An aux_free model's router biases travel with the weights: the imported model gives the same
 * loss, and would not without them. A file without them, or with them for another balance, is
 * refused. */
START_TEST(test_router_bias_round_trip) {
    Config ca = small_config(1);
    set(&ca, "moe.balance=aux_free");
    set(&ca, "moe.top_k=1");
    Model a, b;
    model_init(&a, &ca, 2, 8);
    ck_assert_int_eq(a.n_moe, 2);
    for (int i = 0; i < a.n_moe * ca.num_experts; i++) a.router_bias[i] = (float)(i % 4) - 1.5f;
    const char *path = tmp_path("aux_free.safetensors");
    ck_assert_msg(model_export(&a, path, err, sizeof err) == 0, "%s", err);
    SafeTensors st;
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.n, a.pt.n + 2);
    const TensorRef *t = safetensors_find(&st, "layers.3.moe.router_bias");
    ck_assert(t && t->ndim == 1 && t->shape[0] == 4);
    Config cb;
    config_defaults(&cb);
    ck_assert_msg(import_config(&cb, &st, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(cb.balance, ca.balance);
    model_init(&b, &cb, 2, 8);
    ck_assert_msg(import_weights(&b, &st, err, sizeof err) == 0, "%s", err);
    expect_close_arrays(b.router_bias, a.router_bias, 8, 0.0f, 0.0f, "router biases");
    float la = fixed_loss(&a), lb = fixed_loss(&b);
    expect_close(lb, la, 0.0f, 0.0f, "loss after import");
    memset(b.router_bias, 0, 8 * sizeof(float));
    ck_assert_msg(fixed_loss(&b) != la, "the biases do not change the loss: the test is blind");
    model_free(&b);
    safetensors_free(&st);

    /* without the biases: refused, pointing at moe.balance */
    TensorRef *e = (TensorRef *)calloc_check((size_t)a.pt.n + 1, sizeof(TensorRef));
    write_file(path, e, model_entries(&a, e, NULL), &ca, META_CONFIG);
    expect_weights_refused(path, &ca, "no tensor 'layers.1.moe.router_bias' (4)",
                           "--set moe.balance=none");
    /* with them, for a model that does not route with them */
    int n = model_entries(&a, e, NULL);
    e[n] = e[0];
    snprintf(e[n].name, sizeof e[n].name, "layers.1.moe.router_bias");
    e[n].ndim = 1, e[n].shape[0] = 4, e[n].shape[1] = 0, e[n].nbytes = 16;
    write_file(path, e, n + 1, &ca, META_CONFIG);
    Config aux = ca;
    set(&aux, "moe.balance=aux");
    expect_weights_refused(path, &aux, "'layers.1.moe.router_bias'", "not aux_free");
    /* the wrong size */
    e[n].shape[0] = 2, e[n].nbytes = 8;
    write_file(path, e, n + 1, &ca, META_CONFIG);
    expect_weights_refused(path, &ca, "'layers.1.moe.router_bias' has shape (2)", "is (4)");
    free(e);
    model_free(&a);
}
END_TEST

/* MoE blocks at layers 0, 1 and 3 of 4: no (every, first_dense) gives that. */
START_TEST(test_config_pattern_refused) {
    Config cm = small_config(1), cd = small_config(0);
    set(&cm, "moe.every=1");
    set(&cm, "moe.first_dense=0");
    Model m, d;
    model_init(&m, &cm, 1, 8);
    model_init(&d, &cd, 1, 8);
    TensorRef *e = (TensorRef *)calloc_check((size_t)(m.pt.n + d.pt.n), sizeof(TensorRef));
    TensorRef *em = e, *ed = e + m.pt.n;
    int nm = model_entries(&m, em, NULL), nd = model_entries(&d, ed, NULL), n = 0;
    for (int i = 0; i < nm; i++)
        if (strncmp(em[i].name, "layers.2.", 9) != 0) e[n++] = em[i];
    for (int i = 0; i < nd; i++)
        if (strncmp(ed[i].name, "layers.2.", 9) == 0) e[n++] = ed[i];
    const char *path = tmp_path("pattern.safetensors");
    write_file(path, e, n, &cm, META_BARE);
    SafeTensors st;
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    Config c;
    config_defaults(&c);
    ck_assert_int_eq(import_config(&c, &st, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "layers 0, 1, 3 of 4") && strstr(err, "moe.every"), "%s", err);
    safetensors_free(&st);
    free(e);
    model_free(&m);
    model_free(&d);
}
END_TEST

/* ---- weights that do not fit ---------------------------------------------------------------- */

/* import_weights of the file at path into a model of config c must fail, naming want and
 * want2, and leave the model's weights as they were. */
static void expect_weights_refused(const char *path, const Config *c, const char *want,
                                   const char *want2) {
    SafeTensors st;
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    Model m;
    model_init(&m, c, 1, 8);
    float *before = (float *)malloc_check(m.pt.total * sizeof(float));
    memcpy(before, m.params, m.pt.total * sizeof(float));
    ck_assert_int_eq(import_weights(&m, &st, err, sizeof err), -1);
    ck_assert_msg(strstr(err, want) && strstr(err, want2), "lacks '%s'/'%s': %s", want, want2, err);
    ck_assert_msg(memcmp(before, m.params, m.pt.total * sizeof(float)) == 0, "model changed");
    free(before);
    model_free(&m);
    safetensors_free(&st);
}

START_TEST(test_weights_refused) {
    Config c = small_config(1);
    Model m;
    model_init(&m, &c, 1, 8);
    const char *path = tmp_path("w.safetensors");
    TensorRef *e = (TensorRef *)calloc_check((size_t)m.pt.n + 1, sizeof(TensorRef));
    /* a missing tensor */
    write_file(path, e, model_entries(&m, e, "layers.1.moe.router"), &c, META_CONFIG);
    expect_weights_refused(path, &c, "no tensor 'layers.1.moe.router'", "(4, 16)");
    /* an extra tensor */
    int n = model_entries(&m, e, NULL);
    e[n] = e[0];
    snprintf(e[n].name, sizeof e[n].name, "layers.0.extra");
    write_file(path, e, n + 1, &c, META_CONFIG);
    expect_weights_refused(path, &c, "'layers.0.extra'", "settings may differ");
    /* the shared experts of the file are extras in a model without them */
    write_file(path, e, n, &c, META_CONFIG);
    Config no_shared = c;
    set(&no_shared, "moe.num_shared=0");
    expect_weights_refused(path, &no_shared, "'layers.1.moe.shared_gate'", "does not have");
    free(e);
    model_free(&m);
    /* a wrong shape: the file's dense blocks have d_ff = 48 */
    Config wide = c;
    set(&wide, "model.d_ff=48");
    model_init(&m, &wide, 1, 8);
    export_model(&m, path, META_CONFIG);
    expect_weights_refused(path, &c, "'layers.0.ffn.w_gate' has shape (48, 16)", "is (32, 16)");
    model_free(&m);
}
END_TEST

Suite *import_suite(void) {
    Suite *s = suite_create("import");
    TCase *tc = tcase_create("import");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_dir_remove);
    tcase_add_test(tc, test_round_trip_dense);
    tcase_add_test(tc, test_round_trip_moe);
    tcase_add_test(tc, test_config_from_shapes);
    tcase_add_test(tc, test_heads_from_shapes);
    tcase_add_test(tc, test_config_function_keys);
    tcase_add_test(tc, test_router_bias_round_trip);
    tcase_add_test(tc, test_config_pattern_refused);
    tcase_add_test(tc, test_weights_refused);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(import_suite)
