/*
 * hf_read.c: a Hugging Face folder (Llama, Mixtral, Qwen3-MoE, OLMoE or DeepSeek-V3 layout)
 * read as moe.c tensors and settings. See hf.h.
 *
 * config.json says what the model is; every field that changes what it computes is either
 * mapped to a moe.c setting or checked to be one moe.c computes (vocab_size is model.vocab,
 * one key-value head a query head, no biases, SiLU, RMSNorm's 1e-5, plain rotary positions,
 * full attention), and anything else is refused by name. A folder written by `moe export
 * --format hf` also carries moe_c_config, every moe.c setting: those are taken, after checking
 * that config.json still says the same sizes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"
#include "convert/hf.h"
#include "io/files.h"
#include "io/json.h"
#include "model/params.h"

#define HF_CONFIG_MAX (1u << 20) /* a config.json is a few KiB */

typedef struct {
    const JsonValue *root;
    const char *path; /* config.json's, for messages */
    char *err;
    int errlen;
} Fields;

/* A number field: 0 and *v, or -1 with a message (missing when required, not a number, not a
 * whole number in [lo, hi] when whole). A missing optional field leaves *v and returns 0. */
static int num(const Fields *f, const char *key, double *v, int required, int whole, double lo,
               double hi) {
    const JsonValue *x = json_get(f->root, key);
    if (!x || x->type == JSON_NULL) {
        if (!required) return 0;
        return set_error(f->err, f->errlen, "%s has no \"%s\", which a model of its kind needs",
                         f->path, key);
    }
    if (x->type != JSON_NUMBER)
        return set_error(f->err, f->errlen, "%s: \"%s\" is not a number", f->path, key);
    if (whole && (x->number != floor(x->number) || x->number < lo || x->number > hi))
        return set_error(f->err, f->errlen,
                         "%s: \"%s\" is %.15g, not a whole number in [%.15g, %.15g]", f->path, key,
                         x->number, lo, hi);
    *v = x->number;
    return 0;
}

/* 1 when key is there as true (a bool field), else 0. */
static int flag(const Fields *f, const char *key) {
    const JsonValue *x = json_get(f->root, key);
    return x && x->type == JSON_BOOL && x->number != 0;
}

/* A string field, or NULL. */
static const char *str(const Fields *f, const char *key) {
    const JsonValue *x = json_get(f->root, key);
    return x && x->type == JSON_STRING ? x->string : NULL;
}

/* A JSON type in words, for messages. */
static const char *kind_of(JsonType t) {
    return t == JSON_BOOL     ? "true or false"
           : t == JSON_NUMBER ? "a number"
           : t == JSON_STRING ? "a string"
           : t == JSON_ARRAY  ? "an array"
           : t == JSON_OBJECT ? "an object"
                              : "null";
}

/* A field read as other than a number, and the type it must have. */
typedef struct {
    const char *key;
    JsonType type;
    const char *hint; /* what to do, after the message */
} Typed;

/* flag() and str() pass over a field of another type as if it were missing: a "true" in
 * quotes would not be true, a moe_c_config that is a number would be ignored. So each field
 * they read is checked first, and one of another type is refused by name (null counts as
 * missing, as in num()). */
static int check_types(const Fields *f, const Typed *t, int n, const char *in) {
    for (int i = 0; i < n; i++) {
        const JsonValue *x = json_get(f->root, t[i].key);
        if (x && x->type != JSON_NULL && x->type != t[i].type)
            return set_error(f->err, f->errlen, "%s: \"%s%s\" is %s; it must be %s%s", f->path, in,
                             t[i].key, kind_of(x->type), kind_of(t[i].type), t[i].hint);
    }
    return 0;
}

/* The rotary base into *theta: rope_theta (read already), or (transformers 5) rope_parameters
 * {rope_theta, rope_type}; never a default, which differs between versions and models. */
static int rope_of(const Fields *f, double *theta, const char **rope_type) {
    const JsonValue *rp = json_get(f->root, "rope_parameters");
    if (rp && rp->type == JSON_OBJECT) {
        const Fields g = {rp, f->path, f->err, f->errlen};
        static const Typed NESTED[] = {{"rope_type", JSON_STRING, ""}};
        if (check_types(&g, NESTED, 1, "rope_parameters.") ||
            num(&g, "rope_theta", theta, 0, 0, 0, 1e30))
            return -1;
        *rope_type = str(&g, "rope_type");
    }
    if (*theta <= 0)
        return set_error(f->err, f->errlen,
                         "%s states no rope_theta (nor rope_parameters.rope_theta): the rotary "
                         "base changes what the model computes, and moe.c will not guess it",
                         f->path);
    return 0;
}

/* The messages with numbers, each of RELATION_MAX bytes ("" when the relation holds): each
 * states the relation the numbers have (key-value heads, head size, sliding window). */
#define RELATION_MAX 256
static void relations(char *heads, char *dims, char *span, double kv, double H, double hd, double C,
                      double window, double T) {
    if (kv > H || (kv > 0 && fmod(H, kv) != 0))
        snprintf(heads, RELATION_MAX,
                 "num_key_value_heads (%.0f) does not divide num_attention_heads (%.0f): each "
                 "key-value head serves an equal group of query heads",
                 kv, H);
    if (hd > 0 && fmod(hd, 2) != 0)
        snprintf(dims, RELATION_MAX,
                 "head_dim (%.0f) is odd: the rotary embedding turns pairs of channels", hd);
    else if (hd <= 0 && (fmod(C, H) != 0 || fmod(C / H, 2) != 0))
        snprintf(dims, RELATION_MAX,
                 "hidden_size (%.0f) / num_attention_heads (%.0f) is no even head size, and no "
                 "head_dim is given",
                 C, H);
    if (window >= 0 && window < T)
        snprintf(span, RELATION_MAX,
                 "sliding_window (%.0f) is below max_position_embeddings (%.0f): it limits "
                 "attention to fewer positions than the context",
                 window, T);
}

/* The fields read as other than numbers checked, and the family (model_type); any other
 * model_type is refused. */
static int layout_of(const Fields *f, HfFamily *fam) {
    static const Typed TYPED[] = {
        {"model_type", JSON_STRING, ""},
        {"hidden_act", JSON_STRING, ""},
        {"tie_word_embeddings", JSON_BOOL, ""},
        {"attention_bias", JSON_BOOL, ""},
        {"mlp_bias", JSON_BOOL, ""},
        {"norm_topk_prob", JSON_BOOL, ""},
        {"use_sliding_window", JSON_BOOL, ""},
        {"rope_interleave", JSON_BOOL, ""},
        {"mlp_only_layers", JSON_ARRAY, " of layer numbers"},
        {"rope_parameters", JSON_OBJECT, ""},
        {"moe_c_config", JSON_STRING,
         " (the \"key = value\" lines of every moe.c setting, as moe export writes it); remove "
         "it to import the model as the rest of config.json describes it"}};
    if (check_types(f, TYPED, (int)(sizeof TYPED / sizeof *TYPED), "")) return -1;
    const char *type = str(f, "model_type");
    for (int i = HF_LLAMA; type && i <= HF_DEEPSEEK_V3; i++)
        if (strcmp(type, hf_model_type((HfFamily)i)) == 0) {
            *fam = (HfFamily)i;
            return 0;
        }
    return set_error(f->err, f->errlen,
                     "%s: model_type \"%s\": moe.c reads the Mixtral, Qwen3-MoE, OLMoE and "
                     "DeepSeek-V3 (MoE) and Llama (dense) layouts",
                     f->path, type ? type : "(none)");
}

/* Qwen3-MoE's dense blocks (mlp_only_layers, and every block l with (l + 1) not a multiple of
 * decoder_sparse_step) as moe.first_dense and moe.every: the MoE blocks must be every every-th
 * from the first, as moe.c places them. */
static int qwen3_layers(const Fields *f, int L, int *first, int *every) {
    double step = 1;
    if (num(f, "decoder_sparse_step", &step, 0, 1, 1, 1024)) return -1;
    const JsonValue *only = json_get(f->root, "mlp_only_layers");
    char *moe = (char *)calloc_check((size_t)L, 1);
    for (int l = 0; l < L; l++) moe[l] = (l + 1) % (int)step == 0;
    for (int i = 0; only && only->type == JSON_ARRAY && i < only->n; i++) {
        const JsonValue *x = &only->items[i];
        if (x->type != JSON_NUMBER || x->number != floor(x->number) || x->number < 0 ||
            x->number >= L) {
            free(moe);
            return set_error(
                f->err, f->errlen,
                "%s: mlp_only_layers holds %s, not a layer number below "
                "num_hidden_layers (%d)",
                f->path, x->type == JSON_NUMBER ? "a number out of range" : kind_of(x->type), L);
        }
        moe[(int)x->number] = 0;
    }
    int n = 0, a = -1, b = -1;
    for (int l = 0; l < L; l++)
        if (moe[l]) a = a < 0 ? l : a, b = n == 1 ? l : b, n++;
    *first = a < 0 ? 0 : a;
    *every = b >= 0 ? b - a : L - a > 1 ? L - a : 1; /* one MoE block: none after it */
    int same = n > 0;
    for (int l = 0; l < L && same; l++)
        same = moe[l] == (l >= *first && (l - *first) % *every == 0);
    free(moe);
    if (!same)
        return set_error(f->err, f->errlen,
                         "%s: mlp_only_layers and decoder_sparse_step place the MoE blocks other "
                         "than every moe.every-th block from moe.first_dense on (or none); moe.c "
                         "cannot represent this model",
                         f->path);
    return 0;
}

/* An MoE family's routing and sizes, as moe.c settings. */
typedef struct {
    double E, K;
    double expert, dense; /* the experts' hidden size, the dense blocks' */
    double aux;
    int first, every; /* moe.first_dense, moe.every */
    int norm_topk;
    int qk_norm;    /* MOE_QK_NORM_*: the family's norm on queries and keys */
    char more[512]; /* DeepSeek-V3's latent attention and routing, as key=value lines */
} Moe;

/* A bool field, or dflt when it is missing (transformers' default for the family). */
static int flag_or(const Fields *f, const char *key, int dflt) {
    const JsonValue *x = json_get(f->root, key);
    return x && x->type == JSON_BOOL ? x->number != 0 : dflt;
}

/* DeepSeek-V3's latent attention (q_lora_rank null: queries straight from the stream) and its
 * router: sigmoid scores, the correction biases (read as moe.c's aux-free ones), n_group groups
 * of which each token keeps its topk_group best (1: no groups), routed_scaling_factor, shared
 * experts of n_shared_experts times moe_intermediate_size, dense blocks first. */
static int deepseek_of(const Fields *f, Moe *x) {
    double q = -1, kvr = 0, rope = 0, nope = 0, v = 0, shared = 0, scale = 0, G = 0, KG = 0;
    const JsonValue *qr = json_get(f->root, "q_lora_rank");
    if (!qr)
        return set_error(f->err, f->errlen,
                         "%s has no \"q_lora_rank\" (null for queries without a latent), which "
                         "a model of its kind needs",
                         f->path);
    if ((qr->type != JSON_NULL && num(f, "q_lora_rank", &q, 1, 1, 1, 1 << 20)) ||
        num(f, "kv_lora_rank", &kvr, 1, 1, 1, 1 << 20) ||
        num(f, "qk_rope_head_dim", &rope, 1, 1, 2, 4096) ||
        num(f, "qk_nope_head_dim", &nope, 1, 1, 1, 4096) ||
        num(f, "v_head_dim", &v, 1, 1, 1, 4096) ||
        num(f, "n_shared_experts", &shared, 1, 1, 1, 4096) ||
        num(f, "routed_scaling_factor", &scale, 1, 0, 0, 1e9) ||
        num(f, "n_group", &G, 1, 1, 1, 4096) || num(f, "topk_group", &KG, 1, 1, 1, 4096))
        return -1;
    snprintf(x->more, sizeof x->more,
             "model.attention=mla\nmla.q_rank=%.0f\nmla.kv_rank=%.0f\nmla.rope_dim=%.0f\n"
             "mla.nope_dim=%.0f\nmla.v_dim=%.0f\nmoe.score=sigmoid\nmoe.balance=aux_free\n"
             "moe.num_shared=%.0f\nmoe.route_scale=%.9g\nmoe.n_group=%.0f\nmoe.topk_group=%.0f\n",
             q > 0 ? q : 0, kvr, rope, nope, v, shared, scale, G > 1 ? G : 0, G > 1 ? KG : 0);
    x->norm_topk = flag_or(f, "norm_topk_prob", 1);
    return 0;
}

/* The number of experts: the family's own field (Mixtral's num_local_experts, Qwen3-MoE's and
 * OLMoE's num_experts, DeepSeek-V3's n_routed_experts) or the other name transformers takes
 * for it (num_local_experts, or num_experts for Mixtral), which its save_pretrained may write
 * instead; both there must agree. */
static int experts_of(const Fields *f, HfFamily fam, double *E) {
    const char *own = fam == HF_MIXTRAL       ? "num_local_experts"
                      : fam == HF_DEEPSEEK_V3 ? "n_routed_experts"
                                              : "num_experts";
    const char *alias = fam == HF_MIXTRAL ? "num_experts" : "num_local_experts";
    double a = -1, b = -1;
    if (num(f, own, &a, 0, 1, 1, 4096) || num(f, alias, &b, 0, 1, 1, 4096)) return -1;
    if (a < 0 && b < 0)
        return set_error(f->err, f->errlen,
                         "%s has no \"%s\" (nor \"%s\"), which a model of its kind needs", f->path,
                         own, alias);
    if (a >= 0 && b >= 0 && a != b)
        return set_error(f->err, f->errlen,
                         "%s: \"%s\" (%.0f) and \"%s\" (%.0f) are two names of the number of "
                         "experts, and they disagree; remove one",
                         f->path, own, a, alias, b);
    *E = a >= 0 ? a : b;
    return 0;
}

/* The routing of family fam (not Llama): Mixtral's experts are of intermediate_size,
 * renormalised always; Qwen3-MoE's of moe_intermediate_size (intermediate_size is its dense
 * blocks'), with a norm per head on the queries and keys; OLMoE's of intermediate_size, with a
 * norm over the whole projection, and no clipping of q, k, v (clip_qkv); both renormalise the
 * top-k as norm_topk_prob says (false when missing, transformers' default). DeepSeek-V3's are of
 * moe_intermediate_size after first_k_dense_replace dense blocks (deepseek_of). */
static int moe_of(const Fields *f, HfFamily fam, double L, Moe *x) {
    if (experts_of(f, fam, &x->E) || num(f, "num_experts_per_tok", &x->K, 1, 1, 1, 4096) ||
        num(f, "router_aux_loss_coef", &x->aux, 0, 0, 0, 1e9))
        return -1;
    if (fam == HF_MIXTRAL) return 0;
    if (fam == HF_DEEPSEEK_V3) {
        double first;
        if (num(f, "moe_intermediate_size", &x->expert, 1, 1, 1, 1 << 20) ||
            num(f, "first_k_dense_replace", &first, 1, 1, 0, L))
            return -1;
        x->first = (int)first;
        return deepseek_of(f, x);
    }
    x->norm_topk = flag(f, "norm_topk_prob");
    if (fam == HF_OLMOE) {
        const JsonValue *clip = json_get(f->root, "clip_qkv");
        if (clip && clip->type != JSON_NULL)
            return set_error(f->err, f->errlen,
                             "%s: clip_qkv clips the queries, keys and values; moe.c cannot "
                             "represent this model",
                             f->path);
        x->qk_norm = MOE_QK_NORM_FULL;
        return 0;
    }
    x->qk_norm = MOE_QK_NORM_HEAD;
    return num(f, "moe_intermediate_size", &x->expert, 1, 1, 1, 1 << 20) ||
           qwen3_layers(f, (int)L, &x->first, &x->every);
}

/* The settings of a model as key=value lines (malloc'd): its family, its MoE fields, and
 * v = {hidden_size, layers, heads, positions, key-value heads, head_dim, rotary base,
 * initializer_range} as config.json gives them (-1: not given). */
static char *settings_text(HfFamily fam, const Moe *xp, const double v[9], int tied) {
    const Moe x = *xp;
    const double C = v[0], L = v[1], H = v[2], T = v[3], kv = v[4], hd = v[5], theta = v[6];
    const double std = v[7], V = v[8];
    char *t = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&t, &len);
    if (!o) moe_fatal("out of memory");
    fprintf(o, "model.vocab=%.0f\n", V);
    fprintf(o, "model.d_model=%.0f\nmodel.n_layer=%.0f\nmodel.n_head=%.0f\nmodel.seq_len=%.0f\n", C,
            L, H, T);
    /* grouped key-value heads and a head size of their own, or 0: moe.c's defaults (as many
     * key-value heads as query heads, hidden_size / num_attention_heads) */
    fprintf(o, "model.kv_heads=%.0f\nmodel.head_dim=%.0f\n", kv > 0 && kv < H ? kv : 0,
            hd > 0 && hd * H != C ? hd : 0);
    fprintf(o, "model.rope_theta=%.9g\nmodel.d_ff=%.0f\nmodel.norm=pre\nmodel.init_std=%.9g\n",
            theta, x.dense, std > 0 ? std : 0.02);
    fprintf(o, "model.tied=%d\nmodel.qk_norm=%s\n", tied,
            x.qk_norm == MOE_QK_NORM_HEAD   ? "head"
            : x.qk_norm == MOE_QK_NORM_FULL ? "full"
                                            : "none");
    if (fam != HF_LLAMA)
        fprintf(o,
                "moe.num_experts=%.0f\nmoe.top_k=%.0f\nmoe.d_expert=%.0f\nmoe.first_dense=%d\n"
                "moe.every=%d\nmoe.num_shared=0\nmoe.score=softmax\nmoe.norm_topk=%d\n"
                "moe.route_scale=1\nmoe.balance=aux\nmoe.aux_coef=%.9g\nmoe.routing=token_choice\n"
                "moe.capacity_factor=0\nmoe.eval_capacity_factor=-1\nmoe.router_precision=fp32\n",
                x.E, x.K, x.expert, x.first, x.every, x.norm_topk, x.aux);
    else
        fprintf(o, "moe.num_experts=0\n");
    fputs(x.more, o); /* after the lines it changes */
    fclose(o);
    return t;
}

/* What moe.c computes, checked; then the settings as key=value lines into *text. */
static int settings_of(const Fields *f, char **text, HfFamily *fam, int *tied) {
    if (layout_of(f, fam)) return -1;
    double V, C, L, H, F, T, kv = -1, hd = -1, eps = 1e-5, window = -1, theta = -1;
    const double BIG = 1 << 20;
    if (num(f, "vocab_size", &V, 1, 1, 2, MOE_VOCAB_MAX) ||
        num(f, "hidden_size", &C, 1, 1, 1, 65536) ||
        num(f, "num_hidden_layers", &L, 1, 1, 1, 1024) ||
        num(f, "num_attention_heads", &H, 1, 1, 1, 1024) ||
        num(f, "intermediate_size", &F, 1, 1, 1, BIG) ||
        num(f, "max_position_embeddings", &T, 1, 1, 1, BIG) ||
        num(f, "num_key_value_heads", &kv, 0, 1, 1, 1024) ||
        num(f, "head_dim", &hd, 0, 1, 1, BIG) || num(f, "rms_norm_eps", &eps, 0, 0, 0, 1) ||
        num(f, "rope_theta", &theta, 0, 0, 0, 1e30) ||
        num(f, "sliding_window", &window, 0, 1, 0, 1e18))
        return -1;
    if (*fam == HF_QWEN3_MOE && !flag(f, "use_sliding_window")) window = -1; /* unused then */
    if (*fam == HF_DEEPSEEK_V3) kv = -1, hd = -1; /* latent attention's heads: deepseek_of's */
    const char *rope_type = NULL;
    if (rope_of(f, &theta, &rope_type)) return -1;
    const char *act = str(f, "hidden_act");
    const JsonValue *scaling = json_get(f->root, "rope_scaling");
    /* the messages with numbers: each states the relation the numbers have */
    char heads[RELATION_MAX] = "", dims[RELATION_MAX] = "", span[RELATION_MAX] = "";
    relations(heads, dims, span, kv, H, hd, C, window, T);
    if (*fam == HF_DEEPSEEK_V3) dims[0] = 0; /* its heads' sizes are deepseek_of's */
    const char *why = heads[0]                          ? heads
                      : dims[0]                         ? dims
                      : act && strcmp(act, "silu") != 0 ? "hidden_act is not silu (SwiGLU's)"
                      : fabs(eps - 1e-5) > 1e-12        ? "rms_norm_eps is not moe.c's 1e-5"
                      : scaling && scaling->type != JSON_NULL
                          ? "rope_scaling changes the rotary positions"
                      : rope_type && strcmp(rope_type, "default") != 0
                          ? "rope_parameters.rope_type is not default: it changes the rotary "
                            "positions"
                      : flag(f, "attention_bias") ? "attention_bias: moe.c's products have no bias"
                      : flag(f, "mlp_bias")       ? "mlp_bias: moe.c's products have no bias"
                      : span[0]                   ? span
                                                  : NULL;
    if (why)
        return set_error(f->err, f->errlen, "%s: %s; moe.c cannot represent this model", f->path,
                         why);
    Moe x = {0, 0, F, F, 0.01, 0, 1, 1, MOE_QK_NORM_NONE, ""};
    if (*fam != HF_LLAMA && moe_of(f, *fam, L, &x)) return -1;
    if (*fam == HF_OLMOE && hd > 0 && hd * H != C)
        return set_error(f->err, f->errlen,
                         "%s: head_dim (%.0f) is not hidden_size / num_attention_heads, which "
                         "OLMoE's norm on the queries (over hidden_size channels) needs",
                         f->path, hd);
    double std = 0.02;
    if (num(f, "initializer_range", &std, 0, 0, 0, 1)) return -1;
    *tied = flag(f, "tie_word_embeddings");
    *text = settings_text(*fam, &x, (const double[]){C, L, H, T, kv, hd, theta, std, V}, *tied);
    return 0;
}

/* The settings: config.json's, or (a folder of moe export) moe_c_config's, which must agree
 * with config.json on every size. */
static int hf_config(Config *c, const Fields *f, HfFamily *fam, int *half, int *tied) {
    char *text = NULL, msg[512];
    int line;
    if (settings_of(f, &text, fam, tied)) return -1;
    const int moe = *fam != HF_LLAMA;
    /* DeepSeek-V3 pairs the rotary channels as moe.c does unless rope_interleave is false */
    *half = *fam != HF_DEEPSEEK_V3 || !flag_or(f, "rope_interleave", 1);
    Config mapped;
    config_defaults(&mapped);
    int rc = config_apply_text(&mapped, text, &line, msg, sizeof msg);
    free(text);
    if (rc) return set_error(f->err, f->errlen, "%s: %s", f->path, msg);
    *c = mapped;
    const char *own = str(f, "moe_c_config");
    if (!own) return 0;
    config_defaults(c);
    if (config_apply_text(c, own, &line, msg, sizeof msg))
        return set_error(f->err, f->errlen, "%s: moe_c_config line %d: %s", f->path, line, msg);
    int same = c->vocab == mapped.vocab && c->d_model == mapped.d_model &&
               c->n_layer == mapped.n_layer && c->n_head == mapped.n_head &&
               c->seq_len == mapped.seq_len && config_kv_heads(c) == config_kv_heads(&mapped) &&
               config_head_dim(c) == config_head_dim(&mapped) && c->tied == mapped.tied &&
               c->rope_theta == mapped.rope_theta && c->num_experts == mapped.num_experts &&
               c->qk_norm == mapped.qk_norm && c->attention == mapped.attention &&
               c->mla_q_rank == mapped.mla_q_rank && c->mla_kv_rank == mapped.mla_kv_rank &&
               c->mla_rope_dim == mapped.mla_rope_dim && c->mla_nope_dim == mapped.mla_nope_dim &&
               c->mla_v_dim == mapped.mla_v_dim && c->num_shared == mapped.num_shared &&
               (moe ? c->top_k == mapped.top_k && config_expert_hidden(c) == mapped.d_expert
                    : c->d_ff == mapped.d_ff);
    for (int l = 0; l < c->n_layer && same; l++) /* the same blocks MoE, the dense ones as wide */
        same = config_is_moe_layer(c, l) == config_is_moe_layer(&mapped, l) &&
               (config_is_moe_layer(c, l) || c->d_ff == mapped.d_ff);
    if (!same)
        return set_error(f->err, f->errlen,
                         "%s: its moe_c_config (the settings moe export wrote) and its sizes "
                         "disagree: the file was edited; remove moe_c_config to import the model "
                         "as config.json describes it",
                         f->path);
    return 0;
}

/* The folder's config.json, parsed. */
static int read_config_json(JsonValue *root, const char *path, char *err, int errlen) {
    const FileSpec spec = {"Hugging Face config",
                           "pass a folder written by save_pretrained or moe export --format hf",
                           NULL, HF_CONFIG_MAX};
    return json_read_object_file(root, path, &spec, err, errlen);
}

/* The folder's weights: model.safetensors, with a message for the other ways to save them. */
static int read_weights(SafeTensors *hf, const char *dir, char *err, int errlen) {
    char path[MOE_PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!file_exists(path)) {
        char other[MOE_PATH_MAX];
        snprintf(other, sizeof other, "%s/model.safetensors.index.json", dir);
        if (file_exists(other))
            return set_error(err, errlen,
                             "%s holds a model split over several safetensors files; moe.c reads "
                             "one model.safetensors: save it again with a max_shard_size larger "
                             "than the model",
                             dir);
        return set_error(err, errlen,
                         "%s has no model.safetensors; moe.c reads safetensors only (save the "
                         "model with safe_serialization=True)",
                         dir);
    }
    return safetensors_read(hf, path, err, errlen);
}

/* A tied head (tie_word_embeddings: true) is the embedding: transformers makes lm_head the
 * embedding's own tensor, and moe.c's model.tied has no head tensor either. A file saved so
 * often holds a copy of it as lm_head.weight too, which must hold the embedding's bytes (then
 * it is marked read). One that differs makes the folder say two things at once, and loaders
 * resolve that differently (transformers has tied over it in some versions, kept it with a
 * warning in others), so it is refused rather than guessed. */
static int tied_head(const SafeTensors *hf, char *used, const char *dir, char *err, int errlen) {
    const TensorRef *emb = safetensors_find(hf, "model.embed_tokens.weight");
    const TensorRef *h = safetensors_find(hf, "lm_head.weight");
    if (!emb || !h) return 0; /* a missing embedding is named by its own lookup */
    if (h->nbytes != emb->nbytes || memcmp(h->data, emb->data, emb->nbytes) != 0)
        return set_error(err, errlen,
                         "%s: config.json ties the head to the embedding (tie_word_embeddings: "
                         "true), but model.safetensors also holds an lm_head.weight that differs "
                         "from model.embed_tokens.weight, and which of the two is the head "
                         "depends on the loader (transformers versions differ); moe.c will not "
                         "guess: set tie_word_embeddings to false to import that lm_head.weight "
                         "as the head, or remove it to import the tied model",
                         dir);
    used[h - hf->entries] = 1;
    return 0;
}

/* DeepSeek-V3's correction bias of MoE block l (model.layers.L.mlp.gate.e_score_correction_bias,
 * added to the scores for the top-k only) as moe.c's aux-free bias layers.L.moe.router_bias,
 * one more entry of st, its floats at biases + l E; for a model of moe.c's without (a
 * moe_c_config of another moe.balance), checked to be zeros, as export wrote it. */
static int correction_bias(SafeTensors *st, const SafeTensors *hf, const Config *c, int l,
                           float *biases, char *used, const char *dir, char *err, int errlen) {
    char name[TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
    const TensorRef *h = safetensors_find(hf, name);
    const int E = c->num_experts;
    if (!h || h->ndim != 1 || h->shape[0] != E)
        return set_error(err, errlen,
                         "%s/model.safetensors %s '%s', which this model (as config.json "
                         "describes it) has, of %d floats",
                         dir, h ? "has a misshapen tensor" : "has no tensor", name, E);
    used[h - hf->entries] = 1;
    if (c->balance != MOE_BALANCE_AUX_FREE) { /* moe_c_config's router has none: zeros here */
        for (int i = 0; i < E; i++)
            if (((const float *)h->data)[i] != 0.0f)
                return set_error(err, errlen,
                                 "%s/model.safetensors: '%s' is not zero, but config.json's "
                                 "moe_c_config routes without biases (moe.balance is not "
                                 "aux_free): the file was edited; remove moe_c_config to import "
                                 "the model as the rest of config.json describes it",
                                 dir, name);
        return 0;
    }
    TensorRef *e = &st->entries[st->n++];
    snprintf(e->name, sizeof e->name, "layers.%d.moe.router_bias", l);
    e->dtype = TENSOR_F32;
    e->ndim = 1;
    e->shape[0] = E;
    e->nbytes = (size_t)E * sizeof(float);
    e->data = biases + (size_t)l * E;
    memcpy(biases + (size_t)l * E, h->data, e->nbytes);
    return 0;
}

/* moe.c's tensors from the Hugging Face ones into st (entries and one buffer), marking each
 * tensor of hf that was read. */
static int gather(SafeTensors *st, const SafeTensors *hf, const Config *c, HfFamily fam, int half,
                  int tied, char *used, const char *dir, char *err, int errlen) {
    ParamTable pt;
    params_table_build(&pt, c);
    /* the parameters, then DeepSeek-V3's correction biases as moe.c's aux-free ones */
    const size_t biases = fam == HF_DEEPSEEK_V3 ? (size_t)c->n_layer * c->num_experts : 0;
    st->entries = (TensorRef *)calloc_check((size_t)pt.n + (size_t)c->n_layer, sizeof *st->entries);
    st->buffer = malloc_check((pt.total + biases) * sizeof(float));
    float *buf = (float *)st->buffer;
    int rc = 0;
    for (int i = 0; i < pt.n && rc == 0; i++, st->n++) {
        const ParamTensor *t = &pt.t[i];
        TensorRef *e = &st->entries[i];
        snprintf(e->name, sizeof e->name, "%s", t->name);
        e->dtype = TENSOR_F32;
        e->ndim = t->ndim;
        memcpy(e->shape, t->shape, sizeof t->shape);
        e->nbytes = t->numel * sizeof(float);
        e->data = buf + t->offset;
        const int stacked = t->ndim == 3, parts = stacked ? t->shape[0] : 1;
        const size_t each = t->numel / (size_t)parts;
        for (int x = 0; x < parts && rc == 0; x++) {
            char name[TENSOR_NAME_MAX];
            HfPlace p;
            hf_tensor_name(c, fam, half, t->name, x, name, sizeof name, &p);
            const TensorRef *h = safetensors_find(hf, name);
            if (!h) {
                rc = set_error(err, errlen,
                               "%s/model.safetensors has no tensor '%s', which this model (as "
                               "config.json describes it) has",
                               dir, name);
                break;
            }
            /* the Hugging Face tensor: the moe.c one (an expert of it), or rows around it */
            int same = h->ndim == t->ndim - stacked;
            for (int d = 0; same && d < h->ndim; d++)
                same = h->shape[d] == (d == 0 && p.rows ? p.rows : t->shape[d + stacked]);
            if (!same) {
                rc = set_error(err, errlen,
                               "%s/model.safetensors: tensor '%s' is not shaped as config.json "
                               "says this model's is (moe.c's '%s')",
                               dir, name, t->name);
                break;
            }
            used[h - hf->entries] = 1;
            float *dst = buf + t->offset + (size_t)x * each;
            const int C = t->ndim > 1 ? t->shape[t->ndim - 1] : 1;
            const float *src = (const float *)h->data + (size_t)p.row0 * C;
            if (p.heads)
                hf_rope_rows(dst, src, &p, C, 0);
            else
                memcpy(dst, src, each * sizeof(float));
            for (size_t j = 0; p.scale && j < each; j++) dst[j] = (float)(dst[j] / p.scale);
        }
    }
    for (int l = 0; l < c->n_layer && biases && rc == 0; l++)
        if (config_is_moe_layer(c, l))
            rc = correction_bias(st, hf, c, l, buf + pt.total, used, dir, err, errlen);
    params_table_free(&pt);
    return rc == 0 && tied ? tied_head(hf, used, dir, err, errlen) : rc;
}

int hf_read(SafeTensors *st, const char *dir, char *err, int errlen) {
    memset(st, 0, sizeof *st);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return set_error(err, errlen,
                         "%s is not a folder: a Hugging Face model is a folder holding "
                         "config.json and model.safetensors",
                         dir);
    char path[MOE_PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    JsonValue root;
    if (read_config_json(&root, path, err, errlen)) return -1;
    Fields f = {&root, path, err, errlen};
    Config c;
    HfFamily fam = HF_LLAMA;
    int tied = 0, half = 1;
    int rc = hf_config(&c, &f, &fam, &half, &tied);
    if (rc == 0) rc = config_validate(&c, err, errlen) ? -1 : 0;
    json_value_free(&root);
    if (rc) return -1;
    SafeTensors hf;
    if (read_weights(&hf, dir, err, errlen)) return -1;
    char *used = (char *)calloc_check((size_t)hf.n + 1, 1);
    rc = gather(st, &hf, &c, fam, half, tied, used, dir, err, errlen);
    for (int i = 0; i < hf.n && rc == 0; i++) {
        const char *name = hf.entries[i].name;
        const size_t n = strlen(name), k = strlen("rotary_emb.inv_freq");
        if (used[i] || (n >= k && strcmp(name + n - k, "rotary_emb.inv_freq") == 0)) continue;
        int l = -1, at = 0;
        if (fam == HF_DEEPSEEK_V3 && sscanf(name, "model.layers.%d.%n", &l, &at) == 1 && at &&
            l >= c.n_layer) {
            rc = set_error(err, errlen,
                           "%s/model.safetensors has '%s', a tensor of DeepSeek-V3's multi-token "
                           "prediction layer (model.layers.%d, num_nextn_predict_layers), which "
                           "moe.c does not import yet; remove that layer's tensors to import the "
                           "main model",
                           dir, name, l);
            break;
        }
        rc = set_error(err, errlen,
                       "%s/model.safetensors has a tensor '%s' that a moe.c model of these "
                       "settings does not have (config.json and the weights disagree, or the "
                       "model has a part moe.c lacks)",
                       dir, name);
    }
    free(used);
    if (rc == 0) {
        st->checksum = hf.checksum;
        st->path = strdup(dir);
        st->n_meta = 1;
        st->meta_keys = (char **)malloc_check(sizeof(char *));
        st->meta_values = (char **)malloc_check(sizeof(char *));
        st->meta_keys[0] = strdup("config");
        st->meta_values[0] = config_to_text(&c);
        if (!st->path || !st->meta_keys[0]) moe_fatal("out of memory");
    } else {
        safetensors_free(st);
    }
    safetensors_free(&hf);
    return rc;
}
