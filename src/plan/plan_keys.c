/*
 * plan_keys.c: the settings `moe plan` reads (model, cluster, training, layout), with their
 * checks; defaults; the presets by name (their settings are in plan_presets.c).
 *
 * A key the engine has is the engine's: its row of config/keys.c (name, type, range, message)
 * reads it into PlanModel.c through config_set, and nothing here repeats it (ENGINE_KEYS lists
 * which: the model's shape, and train.accum). The table below holds the rest: the model keys
 * the engine does not have yet, in one marked block and named as it will name them, then the
 * cluster, the training and the layout, which are the planner's alone. train.precision is the
 * planner's own row under the engine's name: the same setting (the products' precision), with
 * the values a plan at scale needs (fp8, which the engine does not train; not tf32, whose peak
 * no preset gives).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "config/keys.h"
#include "moe/moe_ops.h"
#include "plan/plan.h"

enum { K_NUM, K_INT, K_CHOICE }; /* a double, an int, an int chosen by name */

typedef struct {
    const char *name;
    int type;
    size_t off, size;  /* the field: its offset into PlanInput and its size */
    double lo, hi;     /* K_NUM, K_INT: the range */
    int whole;         /* K_NUM: a whole number */
    const char *names; /* K_CHOICE: "a|b|c", the values 0, 1, 2 */
    unsigned fix;      /* the PLAN_FIX_* bit a command-line setting of it sets */
    const char *help;
    int above;       /* 1: the value must be more than lo (lo itself is refused) */
    const char *why; /* why the range is what it is, said when a value falls outside it */
} PlanKey;

/* The keys the engine has: read through its own rows (config/keys.c) into PlanModel.c, listed
 * first by --keys, in this order. */
static const char *const ENGINE_KEYS[] = {
    "model.vocab",    "model.d_model",   "model.n_layer",   "model.n_head",   "model.d_ff",
    "model.seq_len",  "model.norm",      "moe.num_experts", "moe.top_k",      "moe.d_expert",
    "moe.num_shared", "moe.first_dense", "moe.every",       "model.kv_heads", "model.head_dim",
    "model.qk_norm",  "model.tied",      "model.attention", "mla.q_rank",     "mla.kv_rank",
    "mla.rope_dim",   "mla.nope_dim",    "mla.v_dim",       "train.accum",    "model.mtp_depth"};
#define N_ENGINE_KEYS ((int)(sizeof ENGINE_KEYS / sizeof ENGINE_KEYS[0]))

/* The planner's former names of keys the engine has under its own: refused with the new one. */
static const struct {
    const char *old, *now, *how;
} RENAMED[] = {
    {"model.post_norm", "model.norm",
     "model.post_norm=1 is model.norm=sandwich (or dssn: the same parameters), "
     "model.post_norm=0 is model.norm=pre"},
};

#define FIELD(f) offsetof(PlanInput, f), sizeof(((PlanInput *)0)->f)
#define C(f) FIELD(k.f)
#define T(f) FIELD(t.f)
#define L(f) FIELD(lay.f)
/* the reasons of the ranges */
#define W_COUNT "more than any real cluster or model has (the planner's bound, plan.h)"
#define W_LAYERS "the planner's bound on layers, and so on stages"
#define W_BYTES "a stored value takes at least one bit (0.125 bytes) and at most 16 bytes"
#define W_LINK "a link of 0 GB/s never delivers: every transfer over it would take forever"

static const PlanKey KEYS[] = {
    /* ---- the planner's own model keys: none now (a key the engine gains moves to
     * config/keys.c and its name to ENGINE_KEYS, as model.vocab did) ------------------------ */
    /* ---- the planner's alone ------------------------------------------------------------ */
    {"cluster.gpus", K_NUM, C(gpus), 1, PLAN_MAX_GPUS, 1, 0, 0, "GPUs in all", 0, W_COUNT},
    {"cluster.gpus_per_node", K_NUM, C(gpus_per_node), 1, PLAN_MAX_GPUS, 1, 0, 0,
     "GPUs a node shares the fast link between", 0, W_COUNT},
    {"cluster.memory_gb", K_NUM, C(memory_gb), 0, 1e15, 0, 0, 0, "memory a GPU, GB (10^9 bytes)", 1,
     "a GPU without memory holds no weight"},
    {"cluster.peak_fp32_tflops", K_NUM, C(peak_tflops[PLAN_PREC_FP32]), 0, 1e15, 0, 0, 0,
     "dense peak of fp32 products, TFLOP/s a GPU", 0, NULL},
    {"cluster.peak_bf16_tflops", K_NUM, C(peak_tflops[PLAN_PREC_BF16]), 0, 1e15, 0, 0, 0,
     "dense peak of bf16 products, TFLOP/s a GPU", 0, NULL},
    {"cluster.peak_fp8_tflops", K_NUM, C(peak_tflops[PLAN_PREC_FP8]), 0, 1e15, 0, 0, 0,
     "dense peak of fp8 products, TFLOP/s a GPU; 0: none", 0, NULL},
    {"cluster.efficiency", K_NUM, C(efficiency), 0, 1, 0, 0, 0,
     "fraction of the peak the products reach (an assumption, stated)", 1,
     "the products reach some part of the peak, at most all of it; at 0 they never finish"},
    {"cluster.hbm_tbs", K_NUM, C(hbm_tbs), 0, 1e15, 0, 0, 0, "memory bandwidth, TB/s a GPU", 1,
     "the optimizer step and the recomputed passes read memory at this rate: at 0 they never "
     "finish"},
    {"cluster.intra_gbs", K_NUM, C(intra_gbs), 0, 1e15, 0, 0, 0,
     "bandwidth to the GPUs of the same node, GB/s one direction", 1, W_LINK},
    {"cluster.inter_gbs", K_NUM, C(inter_gbs), 0, 1e15, 0, 0, 0,
     "bandwidth to other nodes, GB/s one direction a GPU", 1, W_LINK},
    {"train.engine", K_CHOICE, T(engine), 0, 0, 0, "moe.c|mixed", 0,
     "moe.c: this engine (fp32, data and expert parallel); mixed: bf16 mixed precision at scale", 0,
     NULL},
    {"train.precision", K_CHOICE, T(precision), 0, 0, 0, "fp32|bf16|fp8", 0,
     "the products' precision: its peak sets their time and the MFU", 0, NULL},
    {"train.global_batch", K_NUM, T(global_batch), 1, PLAN_MAX_BATCH, 1, 0, 0, "sequences a step",
     0, W_COUNT},
    {"train.weight_bytes", K_NUM, T(weight_bytes), 0.125, 16, 0, 0, 0, "bytes of a weight", 0,
     W_BYTES},
    {"train.grad_bytes", K_NUM, T(grad_bytes), 0.125, 16, 0, 0, 0, "bytes of a gradient", 0,
     W_BYTES},
    {"train.master_bytes", K_NUM, T(master_bytes), 0, 16, 0, 0, 0,
     "bytes of a master copy of a weight; 0: none (the weights are fp32)", 0, W_BYTES},
    {"train.moment_bytes", K_NUM, T(moment_bytes), 0.125, 16, 0, 0, 0, "bytes of each AdamW moment",
     0, W_BYTES},
    {"train.act_bytes", K_NUM, T(act_bytes), 0.125, 16, 0, 0, 0, "bytes of a kept activation", 0,
     W_BYTES},
    {"train.a2a_bytes", K_NUM, T(a2a_bytes), 0.125, 16, 0, 0, 0,
     "bytes of a value the expert exchange sends", 0, W_BYTES},
    {"train.zero", K_INT, T(zero), 0, 3, 0, 0, 0,
     "sharded over the data-parallel ranks: 1 optimizer state, 2 and gradients, 3 and weights", 0,
     NULL},
    {"train.imbalance", K_NUM, T(imbalance), 1, 1e15, 0, 0, 0,
     "the busiest expert-parallel rank's rows over the mean", 0, NULL},
    {"train.overlap_ep", K_NUM, T(overlap_ep), 0, 1, 0, 0, 0,
     "fraction of the expert exchange hidden behind compute", 0, NULL},
    {"train.overlap_dp", K_INT, T(overlap_dp), 0, 1, 0, 0, 0,
     "1: the gradients' sums run behind the last micro-batch's backward", 0, NULL},
    {"train.node_limit", K_NUM, T(node_limit), 0, PLAN_MAX_GPUS, 1, 0, 0,
     "> 0: a token's experts on at most this many nodes, a row sent once a node", 0, W_COUNT},
    {"layout.tp", K_INT, L(tp), 1, PLAN_MAX_GPUS, 0, 0, PLAN_FIX_TP, "tensor-parallel GPUs", 0,
     W_COUNT},
    {"layout.pp", K_INT, L(pp), 1, MAX_PLAN_LAYERS, 0, 0, PLAN_FIX_PP, "pipeline stages", 0,
     W_LAYERS},
    {"layout.ep", K_INT, L(ep), 1, PLAN_MAX_GPUS, 0, 0, PLAN_FIX_EP, "expert-parallel GPUs", 0,
     W_COUNT},
    {"layout.vpp", K_INT, L(vpp), 1, MAX_PLAN_LAYERS, 0, 0, PLAN_FIX_VPP,
     "virtual stages a GPU (interleaved pipeline)", 0, W_LAYERS},
    {"layout.micro_batch", K_INT, L(micro_batch), 1, PLAN_MAX_BATCH, 0, 0, PLAN_FIX_MB,
     "sequences a micro-batch (the mixed engine)", 0, W_COUNT},
    {"layout.recompute", K_CHOICE, L(recompute), 0, 0, 0, "none|selective|experts|full",
     PLAN_FIX_RC,
     "recomputed in the backward: nothing; norms and activation functions; and the MoE "
     "blocks; whole layers",
     0, NULL},
};
#define N_KEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

void plan_defaults(PlanInput *in) {
    memset(in, 0, sizeof *in);
    /* the engine's keys of a model: none given yet, a shape of zeros and no experts; its other
     * settings at their defaults (a --config replaces them all) */
    Config *c = &in->m.c;
    config_defaults(c);
    c->vocab = c->d_model = c->n_layer = c->n_head = c->d_ff = c->seq_len = 0;
    c->num_experts = c->top_k = c->d_expert = c->num_shared = c->first_dense = 0;
    c->every = 1;
    c->norm = MOE_NORM_PRE;
    in->k.efficiency = 0.7;
    PlanTrain *t = &in->t;
    t->engine = PLAN_ENGINE_MIXED;
    t->precision = PLAN_PREC_BF16;
    t->weight_bytes = 2, t->grad_bytes = 4, t->master_bytes = 4, t->moment_bytes = 4;
    t->act_bytes = 2, t->a2a_bytes = 2;
    t->zero = 1;
    t->imbalance = 1;
    t->overlap_dp = 1;
    in->lay = (PlanLayout){1, 1, 1, 1, 1, PLAN_RC_NONE};
}

static int same_name(const char *key, const char *name, size_t len) {
    return strlen(key) == len && strncmp(key, name, len) == 0;
}

static const PlanKey *find_key(const char *name, size_t len) {
    for (int i = 0; i < N_KEYS; i++)
        if (same_name(KEYS[i].name, name, len)) return &KEYS[i];
    return NULL;
}

/* The engine's row of a key of ENGINE_KEYS, or NULL. */
static const Key *engine_row(const char *name, size_t len) {
    for (int i = 0; i < N_ENGINE_KEYS; i++)
        if (same_name(ENGINE_KEYS[i], name, len))
            for (int j = 0; j < CONFIG_NKEYS; j++)
                if (strcmp(CONFIG_KEYS[j].name, ENGINE_KEYS[i]) == 0) return &CONFIG_KEYS[j];
    return NULL;
}

/* The index of word in "a|b|c", or -1. */
static int choice_index(const char *names, const char *word) {
    int i = 0;
    for (const char *p = names;; i++) {
        const char *bar = strchr(p, '|');
        const size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (strlen(word) == n && strncmp(p, word, n) == 0) return i;
        if (!bar) return -1;
        p = bar + 1;
    }
}

int plan_set(PlanInput *in, const char *kv, char *err, int errlen) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv) return set_error(err, errlen, "'%s' is not key=value", kv);
    const size_t len = (size_t)(eq - kv);
    if (engine_row(kv, len)) return config_set(&in->m.c, kv, err, errlen);
    for (int i = 0; i < (int)(sizeof RENAMED / sizeof RENAMED[0]); i++)
        if (same_name(RENAMED[i].old, kv, len))
            return set_error(err, errlen, "%s is now %s, the engine's key: %s (moe plan --keys)",
                             RENAMED[i].old, RENAMED[i].now, RENAMED[i].how);
    const PlanKey *k = find_key(kv, len);
    if (!k) {
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)len, kv);
        const char *best = NULL;
        int bd = 4;
        for (int i = 0; i < N_ENGINE_KEYS + N_KEYS; i++) {
            const char *other = i < N_ENGINE_KEYS ? ENGINE_KEYS[i] : KEYS[i - N_ENGINE_KEYS].name;
            const int dd = levenshtein(name, other);
            if (dd < bd) bd = dd, best = other;
        }
        return set_error(err, errlen, "unknown plan key '%s'%s%s%s (moe plan --keys lists them)",
                         name, best ? "; did you mean '" : "", best ? best : "", best ? "'?" : "");
    }
    const char *v = eq + 1;
    char *base = (char *)in;
    if (k->size != (k->type == K_NUM ? sizeof(double) : sizeof(int)))
        return set_error(err, errlen, "%s: internal error, the key's type is not its field's",
                         k->name);
    if (k->type == K_CHOICE) {
        const int i = choice_index(k->names, v);
        if (i < 0)
            return set_error(err, errlen, "%s must be one of %s, not '%s'", k->name, k->names, v);
        *(int *)(base + k->off) = i;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    const double x = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(x))
        return set_error(err, errlen, "%s needs a number, not '%s'", k->name, v);
    const int whole = k->type == K_INT || k->whole;
    if (whole && x != floor(x))
        return set_error(err, errlen, "%s needs a whole number, not '%s'", k->name, v);
    if (k->above && (x <= k->lo || x > k->hi)) {
        char hi[48] = ""; /* a bound of 1e15 stands for none */
        if (k->hi < 1e15) snprintf(hi, sizeof hi, " and at most %.15g", k->hi);
        return set_error(err, errlen, "%s must be more than %.15g%s, not %s%s%s", k->name, k->lo,
                         hi, v, k->why ? ": " : "", k->why ? k->why : "");
    }
    if (x < k->lo || x > k->hi)
        return set_error(err, errlen, "%s must be in [%.15g, %.15g], not %s%s%s", k->name, k->lo,
                         k->hi, v, k->why ? ": " : "", k->why ? k->why : "");
    if (k->type == K_INT)
        *(int *)(base + k->off) = (int)x;
    else
        *(double *)(base + k->off) = x;
    return 0;
}

int plan_set_fixed(PlanInput *in, const char *kv, char *err, int errlen) {
    if (plan_set(in, kv, err, errlen) != 0) return -1;
    const PlanKey *k = find_key(kv, strcspn(kv, "=")); /* NULL: a key of the engine */
    if (k) in->fixed |= k->fix;
    return 0;
}

/* Apply a preset's settings, one blank-separated key=value at a time. */
static int apply(PlanInput *in, const char *settings, const char *name, char *err, int errlen) {
    char kv[160];
    for (const char *p = settings; *p;) {
        while (*p == ' ') p++;
        const size_t n = strcspn(p, " ");
        if (n == 0) break;
        snprintf(kv, sizeof kv, "%.*s", (int)n, p);
        if (kv[0] == '@') { /* @kind:name, another preset */
            char *colon = strchr(kv, ':');
            if (!colon) return set_error(err, errlen, "preset %s: bad reference %s", name, kv);
            *colon = 0;
            if (plan_preset(in, kv + 1, colon + 1, err, errlen) != 0) return -1;
        } else if (plan_set(in, kv, err, errlen) != 0) {
            return -1;
        }
        p += n;
    }
    return 0;
}

int plan_preset(PlanInput *in, const char *kind, const char *name, char *err, int errlen) {
    for (int i = 0; i < PLAN_N_PRESETS; i++) {
        const PlanPreset *p = &PLAN_PRESETS[i];
        if (strcmp(p->kind, kind) != 0 || strcmp(p->name, name) != 0) continue;
        if (strcmp(kind, "model") == 0) snprintf(in->model_name, sizeof in->model_name, "%s", name);
        if (strcmp(kind, "cluster") == 0)
            snprintf(in->cluster_name, sizeof in->cluster_name, "%s", name);
        return apply(in, p->settings, name, err, errlen);
    }
    char list[512] = "";
    for (int i = 0; i < PLAN_N_PRESETS; i++)
        if (strcmp(PLAN_PRESETS[i].kind, kind) == 0 && strlen(list) + 40 < sizeof list) {
            if (list[0]) strcat(list, ", ");
            strcat(list, PLAN_PRESETS[i].name);
        }
    return set_error(err, errlen, "no %s preset '%s'; the %s presets: %s", kind, name, kind,
                     list[0] ? list : "none");
}

/* The cluster's keys a plan needs, in the order a message names the first one missing. */
static const char *const CLUSTER_KEYS[] = {"cluster.gpus_per_node", "cluster.memory_gb",
                                           "cluster.efficiency",    "cluster.hbm_tbs",
                                           "cluster.intra_gbs",     "cluster.inter_gbs"};

static double key_value(const PlanInput *in, const char *name) {
    const PlanKey *k = find_key(name, strlen(name));
    return *(const double *)((const char *)in + k->off);
}

int plan_has_cluster(const PlanInput *in) {
    const PlanCluster *k = &in->k;
    if (k->peak_tflops[0] > 0 || k->peak_tflops[1] > 0 || k->peak_tflops[2] > 0) return 1;
    for (int i = 0; i < (int)(sizeof CLUSTER_KEYS / sizeof CLUSTER_KEYS[0]); i++)
        if (strcmp(CLUSTER_KEYS[i], "cluster.efficiency") != 0 &&
            key_value(in, CLUSTER_KEYS[i]) > 0)
            return 1;
    return 0;
}

int plan_validate_model(const PlanInput *in, char *err, int errlen) {
    const PlanModel *m = &in->m;
    const Config *c = &m->c;
    if (c->d_model <= 0 || c->n_layer <= 0 || c->n_head <= 0 || c->vocab <= 0 || c->seq_len <= 0)
        return set_error(err, errlen,
                         "no model: give --model NAME (moe plan --presets), --config FILE or "
                         "the model.* keys (model.vocab, model.d_model, model.n_layer, "
                         "model.n_head, model.seq_len)");
    if (m->c.attention == MOE_ATTN_MHA && m->c.head_dim == 0 && c->d_model % c->n_head != 0)
        return set_error(err, errlen,
                         "model.n_head = %d does not divide model.d_model = %d; "
                         "set model.head_dim",
                         c->n_head, c->d_model);
    if (m->c.attention == MOE_ATTN_MHA && c->kv_heads > 0 && c->n_head % c->kv_heads != 0)
        return set_error(err, errlen, "model.kv_heads = %d does not divide model.n_head = %d",
                         c->kv_heads, c->n_head);
    if (m->c.attention == MOE_ATTN_MLA &&
        (m->c.mla_kv_rank <= 0 || m->c.mla_nope_dim + m->c.mla_rope_dim <= 0 ||
         m->c.mla_v_dim <= 0))
        return set_error(err, errlen,
                         "model.attention=mla needs mla.kv_rank, mla.nope_dim (or "
                         "mla.rope_dim) and mla.v_dim");
    /* as in the engine, a dense model (moe.num_experts=0) ignores the other moe.* keys */
    if (c->num_experts > 0 &&
        (c->top_k < 1 || c->top_k > c->num_experts || config_expert_hidden(c) <= 0))
        return set_error(err, errlen,
                         "an MoE model needs 1 <= moe.top_k <= moe.num_experts "
                         "(%d, %d) and moe.d_expert > 0 (or model.d_ff, which moe.d_expert=0 "
                         "stands for)",
                         c->top_k, c->num_experts);
    if ((c->num_experts == 0 || c->first_dense > 0 || c->every > 1) && c->d_ff <= 0)
        return set_error(err, errlen, "the model has dense layers: set model.d_ff");
    return 0;
}

int plan_validate_cluster(const PlanInput *in, char *err, int errlen) {
    if (!plan_has_cluster(in))
        return set_error(err, errlen,
                         "no cluster: give --cluster NAME (moe plan --presets) and "
                         "cluster.gpus, or every cluster.* key (moe plan --keys)");
    /* a cluster given in part: the first key it lacks (a zero set on purpose is refused by
     * plan_set with its reason) */
    for (int i = 0; i < (int)(sizeof CLUSTER_KEYS / sizeof CLUSTER_KEYS[0]); i++)
        if (key_value(in, CLUSTER_KEYS[i]) <= 0)
            return set_error(err, errlen,
                             "%s is not set, and a plan needs it above 0: give --cluster NAME "
                             "(moe plan --presets) or --set %s=VALUE (moe plan --keys)",
                             CLUSTER_KEYS[i], CLUSTER_KEYS[i]);
    if (in->k.gpus <= 0) return set_error(err, errlen, "cluster.gpus is not set: give --gpus N");
    if (plan_peak(in) <= 0) {
        static const char *const P[] = {"fp32", "bf16", "fp8"};
        return set_error(err, errlen,
                         "the cluster has no %s peak: set cluster.peak_%s_tflops, or another "
                         "train.precision",
                         P[in->t.precision], P[in->t.precision]);
    }
    return 0;
}

int plan_validate(const PlanInput *in, char *err, int errlen) {
    if (plan_validate_model(in, err, errlen) != 0) return -1;
    if (plan_validate_cluster(in, err, errlen) != 0) return -1;
    if (in->t.global_batch <= 0)
        return set_error(err, errlen, "train.global_batch: how many sequences a step?");
    return 0;
}

void plan_print_keys(FILE *f) {
    for (int i = 0; i < N_ENGINE_KEYS; i++) { /* the engine's rows, as `moe info --keys` */
        const Key *k = engine_row(ENGINE_KEYS[i], strlen(ENGINE_KEYS[i]));
        const char *kind = k->type == T_ENUM   ? k->choices
                           : k->type == T_INT  ? "whole"
                           : k->type == T_BOOL ? "0|1"
                                               : "number";
        fprintf(f, "%-22s %-20s %s\n", k->name, kind, k->help);
    }
    for (int i = 0; i < N_KEYS; i++) {
        const PlanKey *k = &KEYS[i];
        if (k->type == K_CHOICE)
            fprintf(f, "%-22s %-20s %s\n", k->name, k->names, k->help);
        else
            fprintf(f, "%-22s %-20s %s\n", k->name,
                    k->type == K_INT || k->whole ? "whole" : "number", k->help);
    }
}

void plan_print_presets(FILE *f) {
    for (int i = 0; i < PLAN_N_PRESETS; i++) {
        const PlanPreset *p = &PLAN_PRESETS[i];
        fprintf(f, "--%s %s: %s\n  %s\n", p->kind, p->name, p->what, p->settings);
        if (p->total > 0)
            fprintf(f, "  published: %.4g total, %.4g active parameters\n", p->total, p->active);
        fprintf(f, "  source: %s\n", p->source);
    }
}

void plan_print_presets_csv(FILE *f) {
    fputs("kind,name,published_total,published_active,round_to,active_embed,counts_agree,"
          "total,active,active_embed_count,tokens_gpu,tflops_gpu,step_s,states_gb\n",
          f);
    for (int i = 0; i < PLAN_N_PRESETS; i++) {
        const PlanPreset *p = &PLAN_PRESETS[i];
        PlanCounts c = {0};
        if (strcmp(p->kind, "cluster") != 0) {
            PlanInput in;
            char err[256];
            plan_defaults(&in);
            if (plan_preset(&in, p->kind, p->name, err, sizeof err) == 0) plan_count(&in.m, &c);
        }
        fprintf(f, "%s,%s,%.0f,%.0f,%.0f,%d,%d,%.0f,%.0f,%.0f,%g,%g,%g,%g\n", p->kind, p->name,
                p->total, p->active, p->round_to, p->active_embed, p->counts_agree, c.total,
                c.active, c.active_embed, p->tokens_gpu, p->tflops_gpu, p->step_s, p->states_gb);
    }
}
