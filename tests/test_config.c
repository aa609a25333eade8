/*
 * test_config.c: the settings table: defaults, key=value parsing, config files, the config.txt
 * round trip, MoE layer placement and checkpoint shape checks (the checks across keys:
 * test_config_check.c).
 *
 * The test keeps its own list of every key with the Config field it must land in, so a key
 * wired to the wrong field, or a key added without a test value, fails here.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "config/config.h"
#include "moe/moe_ops.h"
#include "testutil.h"

typedef struct {
    const char *key;
    size_t off, size;
    int is_str;
    const char *value; /* a valid value different from the default */
} Field;

#define F(key, field, value)                                                                       \
    { key, offsetof(Config, field), sizeof(((Config *)0)->field), 0, value }
#define S(key, field, value)                                                                       \
    { key, offsetof(Config, field), MOE_PATH_MAX, 1, value }

static const Field FIELDS[] = {
    F("model.vocab", vocab, "1000"),
    F("model.d_model", d_model, "256"),
    F("model.n_layer", n_layer, "6"),
    F("model.n_head", n_head, "8"),
    F("model.kv_heads", kv_heads, "2"),
    F("model.head_dim", head_dim, "48"),
    F("model.qk_norm", qk_norm, "full"),
    F("model.attention", attention, "mla"),
    F("mla.q_rank", mla_q_rank, "96"),
    F("mla.kv_rank", mla_kv_rank, "64"),
    F("mla.rope_dim", mla_rope_dim, "16"),
    F("mla.nope_dim", mla_nope_dim, "32"),
    F("mla.v_dim", mla_v_dim, "40"),
    F("model.seq_len", seq_len, "64"),
    F("model.d_ff", d_ff, "1024"),
    F("model.rope_theta", rope_theta, "500000"),
    F("model.init_std", init_std, "0.0123456789"),
    F("model.norm", norm, "dssn"),
    F("model.init", init, "tiny"),
    F("model.init_scale", init_scale, "0.25"),
    F("model.tied", tied, "1"),
    F("model.mtp_depth", mtp_depth, "2"),
    F("model.mtp_coef", mtp_coef, "0.125"),
    F("moe.num_experts", num_experts, "16"),
    F("moe.top_k", top_k, "4"),
    F("moe.d_expert", d_expert, "0"),
    F("moe.every", every, "2"),
    F("moe.first_dense", first_dense, "1"),
    F("moe.norm_topk", norm_topk, "false"),
    F("moe.aux_coef", aux_coef, "0.0333333"),
    F("moe.z_coef", z_coef, "0"),
    F("moe.score", score, "sigmoid"),
    F("moe.topk_before_softmax", topk_before_softmax, "1"),
    F("moe.route_scale", route_scale, "2.5"),
    F("moe.balance", balance, "aux_free"),
    F("moe.bias_update", bias_update, "proportional"),
    F("moe.bias_rate", bias_rate, "0.01"),
    F("moe.jitter", jitter, "0.01"),
    F("moe.noise", noise, "0.5"),
    F("moe.num_shared", num_shared, "2"),
    F("moe.router_init_std", router_init_std, "0.5"),
    F("moe.routing", routing, "expert_choice"),
    F("moe.ec_capacity", ec_capacity, "1.25"),
    F("moe.capacity_factor", capacity_factor, "1.25"),
    F("moe.capacity_scope", capacity_scope, "sequence"),
    F("moe.min_capacity", min_capacity, "1"),
    F("moe.drop_policy", drop_policy, "score"),
    F("moe.second_expert_random", second_expert_random, "1"),
    F("moe.eval_capacity_factor", eval_capacity_factor, "2"),
    F("moe.padded", padded, "1"),
    F("moe.router_precision", router_precision, "bf16_logits"),
    F("moe.balance_scope", balance_scope, "global"),
    F("moe.balance_groups", balance_groups, "4"),
    F("moe.n_group", n_group, "8"),
    F("moe.topk_group", topk_group, "3"),
    F("train.batch", batch, "3"),
    F("train.accum", accum, "5"),
    F("train.steps", steps, "1234"),
    F("train.lr", lr, "0.00071"),
    F("train.min_lr", min_lr, "0.05"),
    F("train.warmup", warmup, "7"),
    F("train.weight_decay", weight_decay, "0.01"),
    F("train.beta1", beta1, "0.8"),
    F("train.beta2", beta2, "0.999"),
    F("train.eps", eps, "1.5e-7"),
    F("train.clip", clip, "0"),
    F("train.seed", seed, "18446744073709551615"),
    F("train.eval_every", eval_every, "0"),
    F("train.eval_batches", eval_batches, "2"),
    F("train.ckpt_every", ckpt_every, "0"),
    F("train.log_every", log_every, "1"),
    F("train.threads", threads, "2"),
    F("train.memory_gib", memory_gib, "1.5"),
    F("train.device", device, "cpu-ref"),
    F("train.precision", precision, "bf16"),
    F("train.spike_window", spike_window, "50"),
    F("train.spike_k", spike_k, "3.5"),
    F("train.spike_action", spike_action, "rollback"),
    F("train.spike_on", spike_on, "loss"),
    F("train.rollback_every", rollback_every, "25"),
    F("train.rollback_skip", rollback_skip, "0"),
    F("train.max_rollbacks", max_rollbacks, "7"),
    F("train.diverge_loss", diverge_loss, "9.5"),
    S("data.train", train, "some dir/train shard.bin"),
    S("data.val", val, "/tmp/v.bin"),
    S("data.mix", mix, "en:0.5,code:0"),
    F("data.mix_temperature", mix_temperature, "2"),
    S("data.mix_end", mix_end, "uniform"),
    F("data.mix_end_frac", mix_end_frac, "0.2"),
    F("data.corrupt_from", corrupt_from, "300"),
    F("data.corrupt_batches", corrupt_batches, "12"),
    F("dist.tp", tp, "2"),
    F("dist.ep", ep, "2"),
    F("dist.zero", zero, "2"),
    F("dist.pp", pp, "4"),
    F("dist.pp_schedule", pp_schedule, "gpipe"),
    S("dist.pp_layers", pp_layers, "2,4,4,2"),
    F("dist.timeout", timeout, "30"),
    F("dist.collectives", collectives, "teach"),
    F("dist.dispatch", dispatch, "tokens"),
    F("dist.overlap", overlap, "0"),
    F("dist.bucket_mb", bucket_mb, "0.5"),
};
#define NFIELDS ((int)(sizeof FIELDS / sizeof FIELDS[0]))

static int field_differs(const Field *f, const Config *a, const Config *b) {
    const char *pa = (const char *)a + f->off, *pb = (const char *)b + f->off;
    if (f->is_str) return strcmp(pa, pb) != 0;
    return memcmp(pa, pb, f->size) != 0; /* bitwise: floats must round-trip exactly */
}

static void expect_same_config(const Config *a, const Config *b, const char *what) {
    for (int i = 0; i < NFIELDS; i++)
        ck_assert_msg(!field_differs(&FIELDS[i], a, b), "%s: %s differs", what, FIELDS[i].key);
}

static void set_ok(Config *c, const char *assignment) {
    char err[512] = "";
    ck_assert_msg(config_set(c, assignment, err, sizeof err) == 0, "'%s' rejected: %s", assignment,
                  err);
}

/* config_set must fail, leave c unchanged, and say each of the given fragments. */
static void set_fails(const char *assignment, const char *frag1, const char *frag2) {
    Config c, before;
    config_defaults(&c);
    before = c;
    char err[512] = "";
    ck_assert_msg(config_set(&c, assignment, err, sizeof err) == -1, "'%s' accepted", assignment);
    expect_same_config(&c, &before, assignment);
    ck_assert_msg(strstr(err, frag1) != NULL, "'%s': message '%s' lacks '%s'", assignment, err,
                  frag1);
    if (frag2)
        ck_assert_msg(strstr(err, frag2) != NULL, "'%s': message '%s' lacks '%s'", assignment, err,
                      frag2);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen_check(path, "w");
    fputs(text, f);
    fclose(f);
}

static void temp_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/test_config_%ld_%s.txt", (long)getpid(), tag);
}

START_TEST(test_defaults_validate) {
    Config c;
    config_defaults(&c);
    char err[512] = "";
    ck_assert_msg(config_validate(&c, err, sizeof err) == 0, "defaults invalid: %s", err);
    ck_assert_int_eq(c.d_model, 128);
    ck_assert_int_eq(c.num_experts, 8);
    ck_assert_int_eq(c.top_k, 2);
    ck_assert(c.lr == 3e-3f);
    ck_assert(c.eps == 1e-8f);
    ck_assert(c.seed == 1337);
    ck_assert_str_eq(c.train, "data/corpus/train.bin");
    ck_assert_str_eq(c.val, "data/corpus/val.bin");
    ck_assert_int_eq(config_key_count(), NFIELDS);
}
END_TEST

START_TEST(test_each_key_sets_its_field) {
    Config def;
    config_defaults(&def);
    for (int i = 0; i < NFIELDS; i++) {
        Config c = def;
        char assignment[600];
        snprintf(assignment, sizeof assignment, "  %s =\t%s  ", FIELDS[i].key, FIELDS[i].value);
        set_ok(&c, assignment);
        for (int j = 0; j < NFIELDS; j++)
            ck_assert_msg(field_differs(&FIELDS[j], &c, &def) == (i == j), "setting %s changed %s",
                          FIELDS[i].key, FIELDS[j].key);
    }
}
END_TEST

START_TEST(test_write_load_round_trip) {
    Config c, back;
    config_defaults(&c);
    for (int i = 0; i < NFIELDS; i++) {
        char assignment[600];
        snprintf(assignment, sizeof assignment, "%s=%s", FIELDS[i].key, FIELDS[i].value);
        set_ok(&c, assignment);
    }
    char path[128], err[512] = "";
    temp_path(path, sizeof path, "roundtrip");
    FILE *f = fopen_check(path, "w");
    config_write(&c, f);
    fclose(f);

    /* one "key = value" line per key, in table order */
    f = fopen_check(path, "r");
    char line[1024];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        ck_assert_msg(lines < NFIELDS, "extra line '%s'", line);
        size_t n = strlen(FIELDS[lines].key);
        ck_assert_msg(strncmp(line, FIELDS[lines].key, n) == 0 && strncmp(line + n, " = ", 3) == 0,
                      "line %d is '%s', want key %s", lines + 1, line, FIELDS[lines].key);
        lines++;
    }
    fclose(f);
    ck_assert_int_eq(lines, config_key_count());

    /* floats take the fewest digits that read back exactly, so config.txt stays readable */
    FILE *mem = tmpfile();
    Config def;
    config_defaults(&def);
    config_write(&def, mem);
    rewind(mem);
    char text[8192];
    size_t got = fread(text, 1, sizeof text - 1, mem);
    text[got] = '\0';
    fclose(mem);
    ck_assert_msg(strstr(text, "\ntrain.lr = 0.003\n") && strstr(text, "\ntrain.eps = 1e-08\n") &&
                      strstr(text, "\nmodel.init_std = 0.02\n"),
                  "config_write output:\n%s", text);

    config_defaults(&back);
    ck_assert_msg(config_load_file(&back, path, err, sizeof err) == 0, "%s", err);
    expect_same_config(&back, &c, "round trip");
    for (int i = 0; i < NFIELDS; i++) {
        ck_assert_msg(field_differs(&FIELDS[i], &back, &def), "%s kept its default", FIELDS[i].key);
    }

    /* awkward fp32 values must survive %.9g bit-exactly */
    Rng r;
    rng_seed(&r, 7);
    for (int t = 0; t < 200; t++) {
        config_defaults(&c);
        c.lr = rng_uniform(&r) * 0.1f;
        c.eps = 1e-12f + rng_uniform(&r) * 1e-6f;
        c.init_std = 1e-4f + rng_uniform(&r) * 0.5f;
        c.rope_theta = 1.0f + rng_uniform(&r) * 1e6f;
        f = fopen_check(path, "w");
        config_write(&c, f);
        fclose(f);
        config_defaults(&back);
        ck_assert_msg(config_load_file(&back, path, err, sizeof err) == 0, "%s", err);
        expect_same_config(&back, &c, "random floats");
    }
    unlink(path);
}
END_TEST

START_TEST(test_accepted_forms) {
    Config c;
    config_defaults(&c);
    set_ok(&c, "moe.norm_topk = true");
    ck_assert_int_eq(c.norm_topk, 1);
    set_ok(&c, "moe.norm_topk=0");
    ck_assert_int_eq(c.norm_topk, 0);
    set_ok(&c, "train.lr=+1e-3");
    ck_assert(c.lr == 1e-3f);
    set_ok(&c, "model.d_model=0064");
    ck_assert_int_eq(c.d_model, 64);
    set_ok(&c, "train.min_lr=1"); /* both ends of an inclusive range */
    set_ok(&c, "train.min_lr=0");
    char path[MOE_PATH_MAX + 32];
    memset(path, 'a', sizeof path);
    memcpy(path, "data.train=", 11);
    path[11 + MOE_PATH_MAX - 1] = '\0'; /* the longest path that fits */
    set_ok(&c, path);
    ck_assert_uint_eq(strlen(c.train), MOE_PATH_MAX - 1);
}
END_TEST

START_TEST(test_unknown_key_suggests_nearest) {
    static const char *typos[][2] = {
        {"moe.topk=2", "'moe.top_k'"},
        {"train.stepz=10", "'train.steps'"},
        {"d_model=64", "'model.d_model'"},
        {"model.dmodel=64", "'model.d_model'"},
        {"lr=0.1", "'train.lr'"},
        {"train.warmpu=3", "'train.warmup'"},
        {"data.trian=x", "'data.train'"},
        {"moe.num_expert=4", "'moe.num_experts'"},
        {"modle.n_head=2", "'model.n_head'"},
        {"train.min-lr=0.2", "'train.min_lr'"},
        {"moe.lr=0.1", "'train.lr'"},
        {"weight_decay=0", "'train.weight_decay'"},
    };
    for (size_t i = 0; i < sizeof typos / sizeof typos[0]; i++)
        set_fails(typos[i][0], "did you mean", typos[i][1]);
    /* nothing close: no misleading suggestion, but a pointer to the list */
    set_fails("xyzzyplugh=1", "unknown key 'xyzzyplugh'", "--keys");
    Config c;
    config_defaults(&c);
    char err[512] = "";
    config_set(&c, "xyzzyplugh=1", err, sizeof err);
    ck_assert_msg(strstr(err, "did you mean") == NULL, "suggested for garbage: %s", err);
}
END_TEST

START_TEST(test_malformed_assignments) {
    set_fails("model.d_model 128", "=", NULL);
    set_fails("model.d_model", "model.d_model", "=");
    set_fails("=128", "key", NULL);
    set_fails("", "=", NULL);
}
END_TEST

START_TEST(test_wrong_types) {
    set_fails("model.n_layer=4.5", "model.n_layer expects an integer", "'4.5'");
    set_fails("model.d_model=abc", "expects an integer", "'abc'");
    set_fails("model.d_model=12abc", "expects an integer", "'12abc'");
    set_fails("model.d_model=0x10", "expects an integer", NULL);
    set_fails("model.d_model=", "model.d_model", "no value");
    set_fails("train.lr=   ", "train.lr", "no value");
    set_fails("model.d_model=99999999999999999999999", "model.d_model must be <=", NULL);
    set_fails("train.steps=4294967296", "train.steps must be <=", NULL); /* > INT_MAX */
    set_fails("train.lr=fast", "train.lr expects a number", "'fast'");
    set_fails("train.lr=1e-3x", "expects a number", NULL);
    set_fails("train.lr=nan", "finite", NULL);
    set_fails("train.lr=inf", "too large", NULL);
    set_fails("train.lr=1e39", "32-bit float", NULL);
    set_fails("train.eps=1e-50", "too small", NULL);
    set_fails("train.seed=-1", "train.seed expects a non-negative integer", NULL);
    set_fails("train.seed=18446744073709551616", "train.seed must be <=", NULL);
    set_fails("train.seed=12 34", "non-negative integer", NULL);
    set_fails("moe.norm_topk=yes", "moe.norm_topk expects 0, 1, true or false", "'yes'");
    set_fails("moe.norm_topk=2", "true or false", NULL);
    set_fails("moe.score=tanh", "moe.score expects one of softmax|sigmoid", "'tanh'");
    set_fails("moe.score=", "moe.score has no value", NULL);
    set_fails("moe.balance=loss", "moe.balance expects one of aux|seq_aux|aux_free|none", "'loss'");
    set_fails("moe.bias_rate=-1", "moe.bias_rate must be >= 0", NULL);
    set_fails("moe.jitter=1", "moe.jitter must be < 1", NULL);
    set_fails("moe.noise=-0.1", "moe.noise must be >= 0", NULL);
    set_fails("data.train=", "data.train", "empty");
    set_fails("data.val=a#b", "data.val", "'#'");
    char longpath[MOE_PATH_MAX + 32];
    memset(longpath, 'a', sizeof longpath);
    memcpy(longpath, "data.val=", 9);
    longpath[9 + MOE_PATH_MAX] = '\0'; /* one character too many */
    set_fails(longpath, "data.val", "at most 511");
}
END_TEST

START_TEST(test_out_of_range) {
    set_fails("train.lr=-1", "train.lr must be >= 0, got -1", NULL);
    set_fails("train.min_lr=1.5", "train.min_lr must be <= 1", NULL);
    set_fails("train.beta1=-0.1", "train.beta1 must be >= 0", NULL);
    set_fails("train.beta2=2", "train.beta2 must be < 1", NULL);
    set_fails("train.beta1=1", "train.beta1 must be < 1", NULL); /* the moment would freeze */
    set_fails("train.weight_decay=-0.1", "train.weight_decay must be >= 0", NULL);
    set_fails("moe.aux_coef=-1", "moe.aux_coef must be >= 0", NULL);
    set_fails("train.eps=0", "train.eps must be > 0", NULL);
    set_fails("model.init_std=0", "model.init_std must be > 0", NULL);
    set_fails("model.d_model=0", "model.d_model must be >= 1", NULL);
    set_fails("model.n_layer=-3", "model.n_layer must be >= 1", NULL);
    set_fails("moe.num_experts=-1", "moe.num_experts must be >= 0", NULL);
    set_fails("train.batch=0", "train.batch must be >= 1", NULL);
    set_fails("train.threads=-2", "train.threads must be >= 0", NULL);
    /* the capacity keys' own ranges */
    set_fails("moe.min_capacity=0", "moe.min_capacity must be >= 1", NULL);
    set_fails("moe.capacity_factor=-1", "moe.capacity_factor must be >= 0", NULL);
    set_fails("moe.drop_policy=random", "moe.drop_policy", "position|score");
}
END_TEST

START_TEST(test_config_file) {
    char path[128], err[768] = "";
    temp_path(path, sizeof path, "file");
    Config c;
    config_defaults(&c);

    write_file(path, "# a small run\n"
                     "\n"
                     "model.d_model = 64   # narrower\n"
                     "   \t\n"
                     "\tmoe.top_k=1\r\n"
                     "data.train = my data/train.bin\n"
                     "train.lr = 1e-3"); /* no final newline */
    ck_assert_msg(config_load_file(&c, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.d_model, 64);
    ck_assert_int_eq(c.top_k, 1);
    ck_assert_str_eq(c.train, "my data/train.bin");
    ck_assert(c.lr == 1e-3f);

    /* errors name the file and the line; a failed load changes nothing */
    Config before = c;
    char want[200];
    write_file(path, "# header\nmodel.n_head = 2\n\nmoe.topk = 2\n");
    ck_assert_int_eq(config_load_file(&c, path, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:4:", path);
    ck_assert_msg(strstr(err, want) && strstr(err, "'moe.top_k'"), "message: %s", err);
    expect_same_config(&c, &before, "failed load");

    write_file(path, "model.n_layer = 2\nmodel.n_layer 3\n");
    ck_assert_int_eq(config_load_file(&c, path, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:2:", path);
    ck_assert_msg(strstr(err, want) != NULL, "message: %s", err);

    write_file(path, "\n\n\nmodel.n_layer = 4.5\n");
    ck_assert_int_eq(config_load_file(&c, path, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:4: model.n_layer expects an integer", path);
    ck_assert_msg(strstr(err, want) != NULL, "message: %s", err);
    unlink(path);

    ck_assert_int_eq(config_load_file(&c, "/nonexistent/dir/run.cfg", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/nonexistent/dir/run.cfg") && strstr(err, strerror(ENOENT)),
                  "message: %s", err);
}
END_TEST

START_TEST(test_moe_layers) {
    Config c;
    config_defaults(&c);
    c.n_layer = 6;
    static const struct {
        int num_experts, every, first_dense;
        int want[6];
    } cases[] = {
        {8, 1, 0, {1, 1, 1, 1, 1, 1}}, {0, 1, 0, {0, 0, 0, 0, 0, 0}},
        {8, 2, 0, {1, 0, 1, 0, 1, 0}}, {8, 2, 1, {0, 1, 0, 1, 0, 1}},
        {4, 3, 0, {1, 0, 0, 1, 0, 0}}, {4, 1, 2, {0, 0, 1, 1, 1, 1}},
        {4, 2, 3, {0, 0, 0, 1, 0, 1}}, {2, 10, 5, {0, 0, 0, 0, 0, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.num_experts = cases[i].num_experts;
        c.every = cases[i].every;
        c.first_dense = cases[i].first_dense;
        for (int l = 0; l < 6; l++)
            ck_assert_msg(config_is_moe_layer(&c, l) == cases[i].want[l],
                          "E=%d every=%d first_dense=%d layer %d", c.num_experts, c.every,
                          c.first_dense, l);
    }
    c.d_ff = 512;
    c.d_expert = 0;
    ck_assert_int_eq(config_expert_hidden(&c), 512);
    c.d_expert = 96;
    ck_assert_int_eq(config_expert_hidden(&c), 96);
}
END_TEST

START_TEST(test_same_shape) {
    Config a, b;
    char err[512] = "";
    config_defaults(&a);
    static const char *shape_sets[] = {
        "model.d_model=256", "model.n_layer=5",  "model.n_head=8", "model.d_ff=256",
        "moe.num_experts=4", "moe.d_expert=128", "moe.every=2",    "moe.first_dense=1",
    };
    for (size_t i = 0; i < sizeof shape_sets / sizeof shape_sets[0]; i++) {
        b = a;
        set_ok(&b, shape_sets[i]);
        err[0] = '\0';
        ck_assert_msg(config_same_shape(&a, &b, err, sizeof err) == 0, "%s not seen",
                      shape_sets[i]);
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(strchr(shape_sets[i], '=') - shape_sets[i]),
                 shape_sets[i]);
        ck_assert_msg(strstr(err, key) != NULL, "message '%s' lacks %s", err, key);
    }
    b = a;
    set_ok(&b, "model.d_model=256");
    config_same_shape(&a, &b, err, sizeof err);
    ck_assert_msg(strstr(err, "model.d_model=128") && strstr(err, "256"), "message: %s", err);

    static const char *other_sets[] = {
        "model.seq_len=512", "train.lr=0.1", "moe.top_k=1",    "train.steps=5",
        "data.train=x.bin",  "train.seed=9", "moe.aux_coef=0", "model.rope_theta=1000",
    };
    b = a;
    for (size_t i = 0; i < sizeof other_sets / sizeof other_sets[0]; i++) set_ok(&b, other_sets[i]);
    ck_assert_msg(config_same_shape(&a, &b, err, sizeof err) == 1, "non-shape key: %s", err);
}
END_TEST

START_TEST(test_print_keys) {
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    config_print_keys(f);
    rewind(f);
    char line[1024];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        ck_assert_msg(lines < NFIELDS, "extra line '%s'", line);
        ck_assert_msg(strstr(line, FIELDS[lines].key) != NULL, "line %d '%s' lacks %s", lines, line,
                      FIELDS[lines].key);
        lines++;
    }
    fclose(f);
    ck_assert_int_eq(lines, config_key_count());
}
END_TEST

static Suite *config_suite(void) {
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_defaults_validate);
    tcase_add_test(tc, test_each_key_sets_its_field);
    tcase_add_test(tc, test_write_load_round_trip);
    tcase_add_test(tc, test_accepted_forms);
    tcase_add_test(tc, test_unknown_key_suggests_nearest);
    tcase_add_test(tc, test_malformed_assignments);
    tcase_add_test(tc, test_wrong_types);
    tcase_add_test(tc, test_out_of_range);
    tcase_add_test(tc, test_config_file);
    tcase_add_test(tc, test_moe_layers);
    tcase_add_test(tc, test_same_shape);
    tcase_add_test(tc, test_print_keys);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(config_suite)
