/*
 * bench_refs.c: the benchmark's reference configs (bench.h), which are also `--config`'s
 * presets and `moe info --presets`' list. A leaf: bench.c measures them and bench_report.c
 * names them, so neither calls the other for them.
 */
#include "measure/bench_report.h"

#include <string.h>

#include "base/util.h"
#include "model/params.h"

static const RefConfig REFS[] = {
    {"tiny", "tiny-dense", NULL, 256, 4, 4, 1024, 8, 512, 8, 256, 1, NULL},
    {"tiny-dense", NULL, NULL, 256, 4, 4, 1024, 0, 0, 8, 256, 1, NULL},
    {"small", "small-dense", NULL, 512, 4, 8, 2048, 8, 1024, 8, 256, 1, NULL},
    {"small-dense", NULL, NULL, 512, 4, 8, 2048, 0, 0, 8, 256, 1, NULL},
    /* tiny with 64 experts of the same size: the same active compute per token, 8 times the
     * expert parameters (where fine-grained MoEs go); run it with --config */
    {"tiny-e64", "tiny-dense", "tiny", 256, 4, 4, 1024, 64, 512, 8, 256, 0, NULL},
    {"test", "test-dense", NULL, 32, 2, 2, 64, 4, 32, 2, 32, 0, NULL},
    {"test-dense", NULL, NULL, 32, 2, 2, 64, 0, 0, 2, 32, 0, NULL},
    {"test-e16", "test-dense", "test", 32, 2, 2, 64, 16, 32, 2, 32, 0, NULL},
    /* a GPU's size: 16k tokens a step, about 36 TFLOP of products; run it with --config */
    {"gpu-medium", "gpu-medium-dense", NULL, 2048, 8, 16, 4096, 8, 2048, 8, 2048, 0, NULL},
    {"gpu-medium-dense", NULL, NULL, 2048, 8, 16, 4096, 0, 0, 8, 2048, 0, NULL},
    /* tiny's attention three ways, for bench --decode side by side: grouped-query heads (two
     * key-value heads for the four query heads, normed queries and keys) cache half of tiny's
     * keys and values; latent attention caches a latent of 128 channels and a rotated key of 32
     * a token and layer, under a third of tiny's, with about as many attention weights as tiny
     * (the heads' up-projections); run them with --config */
    {"tiny-gqa", NULL, NULL, 256, 4, 4, 1024, 8, 512, 8, 256, 0,
     "model.kv_heads = 2\nmodel.qk_norm = head\n"},
    {"tiny-mla", NULL, NULL, 256, 4, 4, 1024, 8, 512, 8, 256, 0,
     "model.attention = mla\nmla.kv_rank = 128\nmla.rope_dim = 32\nmla.nope_dim = 64\n"
     "mla.v_dim = 64\n"},
};
#define N_REFS ((int)(sizeof REFS / sizeof REFS[0]))

const RefConfig *bench_find_ref(const char *name) {
    for (int i = 0; i < N_REFS; i++)
        if (strcmp(REFS[i].name, name) == 0) return &REFS[i];
    return NULL;
}

int bench_listed_refs(const char **names) {
    int n = 0;
    for (int i = 0; i < N_REFS; i++)
        if (REFS[i].listed) names[n++] = REFS[i].name;
    return n;
}

/* What each reference config is for, in the order of REFS: moe info --presets. */
static const char *const REF_ABOUT[] = {
    "the CPU reference MoE: 8 experts, top-2",
    "tiny's dense twin (the FLOPs of its two experts)",
    "a wider CPU MoE",
    "small's dense twin",
    "tiny with 64 experts of the same size (fine-grained)",
    "shapes small enough for the tests",
    "test's dense twin",
    "test with 16 experts",
    "a GPU's size: 16k tokens a step",
    "gpu-medium's dense twin",
    "tiny with grouped-query attention (2 key-value heads) and qk_norm",
    "tiny with multi-head latent attention (kv_rank 128, rope_dim 32)",
};
_Static_assert(sizeof REF_ABOUT / sizeof REF_ABOUT[0] == sizeof REFS / sizeof REFS[0],
               "a description for every reference config");

void bench_preset_names(char *out, size_t len) {
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < N_REFS && n < len; i++)
        n += (size_t)snprintf(out + n, len - n, "%s%s", i ? ", " : "", REFS[i].name);
}

/* The settings are text, config_write's lines, so that a command can also show them or hand
 * them on as the settings it was given (moe import). */
int bench_preset_text(const char *name, char *text, size_t len) {
    const RefConfig *r = bench_find_ref(name);
    if (!r) return -1;
    const int n =
        snprintf(text, len,
                 "model.d_model = %d\nmodel.n_layer = %d\nmodel.n_head = %d\nmodel.d_ff = %d\n"
                 "moe.num_experts = %d\nmoe.top_k = 2\nmoe.d_expert = %d\nmoe.every = 1\n"
                 "moe.first_dense = 0\nmodel.seq_len = %d\ntrain.batch = %d\n%s",
                 r->d_model, r->n_layer, r->n_head, r->d_ff, r->num_experts, r->d_expert, r->T,
                 r->B, r->attention ? r->attention : "");
    /* a preset cut short would be a different model: the callers' buffers must hold it */
    if (n < 0 || (size_t)n >= len)
        moe_fatal("preset %s: its settings do not fit %zu bytes", name, len);
    return 0;
}

int bench_preset_apply(Config *c, const char *name, char *err, int errlen) {
    char text[512];
    int line = 0;
    if (bench_preset_text(name, text, sizeof text) != 0) {
        char names[256];
        bench_preset_names(names, sizeof names);
        return set_error(err, errlen, "unknown config '%s': the presets are %s", name, names);
    }
    if (config_apply_text(c, text, &line, err, errlen) != 0)
        moe_fatal("preset %s, line %d: %s", name, line, err);
    return 0;
}

void bench_presets_print(FILE *f) {
    fprintf(f, "%-17s %7s %6s %7s %5s %11s %7s  %s\n", "preset", "d_model", "layers", "experts",
            "top-k", "parameters", "B x T", "about");
    for (int i = 0; i < N_REFS; i++) {
        Config c;
        int B, T;
        char err[512];
        if (bench_config(&c, &B, &T, REFS[i].name, err, sizeof err) != 0) moe_fatal("%s", err);
        ParamTable pt;
        params_table_build(&pt, &c);
        char bt[32];
        snprintf(bt, sizeof bt, "%dx%d", B, T);
        fprintf(f, "%-17s %7d %6d %7d %5d %11zu %7s  %s\n", REFS[i].name, c.d_model, c.n_layer,
                c.num_experts, c.num_experts ? c.top_k : 0, params_count_total(&pt), bt,
                REF_ABOUT[i]);
        params_table_free(&pt);
    }
}

int bench_config(Config *c, int *B, int *T, const char *name, char *err, int errlen) {
    config_defaults(c);
    if (bench_preset_apply(c, name, err, errlen) != 0) return -1;
    *B = c->batch;
    *T = c->seq_len;
    char why[512];
    if (config_validate(c, why, sizeof why) != 0)
        moe_fatal("bench: reference config %s is invalid: %s", name, why);
    return 0;
}

/* ---- child processes --------------------------------------------------------------------- */
