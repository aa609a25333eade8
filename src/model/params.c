/*
 * params.c: the parameter table. See params.h.
 *
 * The table below is the only place that knows which tensors a model has. Shapes are given
 * with symbolic dimensions that are resolved from the config, so adding a tensor is one line.
 */
#include "model/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* Symbolic dimensions. */
/* DIM_E: all experts (the router scores them all); DIM_EL: the experts this process holds
 * (all of them unless expert parallelism spreads them: num_experts / ep). */
/* DIM_Q: the query heads' channels (n_head head_dim), DIM_KV: the key-value heads'
 * (kv_heads head_dim); DIM_QN, DIM_KN: the gains of model.qk_norm (head_dim, shared by the
 * heads, or the whole DIM_Q / DIM_KV). */
enum {
    DIM_NONE = 0,
    DIM_V,
    DIM_C,
    DIM_F,
    DIM_E,
    DIM_EL,
    DIM_FE,
    DIM_FS,
    DIM_Q,
    DIM_KV,
    DIM_QN,
    DIM_KN,
    DIM_O,    /* the attention's output: n_head heads of the value width */
    DIM_QR,   /* latent attention: the queries' latent (mla.q_rank) */
    DIM_KVR,  /* the keys' and values' latent (mla.kv_rank) */
    DIM_ROPE, /* the rotated key shared by the heads (mla.rope_dim) */
    DIM_KVB,  /* the heads' keys without rotation and values, n_head (nope_dim + v_dim) */
    DIM_C2    /* 2 C: a multi-token prediction module's projection reads two rows of C */
};

/* Which blocks have the tensor. */
enum {
    IN_GLOBAL_FIRST,
    IN_GLOBAL_LAST,
    IN_UNTIED_LAST, /* after the last block, unless model.tied makes the embedding the head */
    IN_EVERY_LAYER,
    IN_DENSE_LAYER,
    IN_MOE_LAYER,
    IN_SHARED_LAYER,   /* MoE blocks with moe.num_shared > 0 */
    IN_SANDWICH_LAYER, /* every block of model.norm=sandwich or dssn */
    IN_QK_NORM_LAYER,  /* every block of model.qk_norm=head or full */
    IN_QPROJ_LAYER,    /* queries straight from the stream: multi-head, or mla.q_rank = 0 */
    IN_QRANK_LAYER,    /* latent attention's queries through a latent (mla.q_rank > 0) */
    IN_MHA_LAYER,      /* every block of model.attention=mha */
    IN_MLA_LAYER,      /* every block of model.attention=mla */
    IN_MTP_IN,         /* a multi-token prediction module, before its block */
    IN_MTP_OUT         /* a multi-token prediction module, after its block */
};

typedef struct {
    const char *name; /* with "layers.%d." prefixed for per-layer tensors */
    int where;
    int dims[PARAM_MAX_DIMS];
    int decay;
    int is_output_proj; /* writes into the residual stream: init scaled by 1/sqrt(2L) */
    size_t view_offset; /* offsetof in LayerView, or in ParamView for global tensors */
} ParamSpec;

#define LV(field) offsetof(LayerView, field)
#define PV(field) offsetof(ParamView, field)

static const ParamSpec SPECS[] = {
    {"tok_emb", IN_GLOBAL_FIRST, {DIM_V, DIM_C}, 1, 0, PV(tok_emb)},
    {"attn_norm", IN_EVERY_LAYER, {DIM_C}, 0, 0, LV(attn_norm)},
    {"attn.wq", IN_QPROJ_LAYER, {DIM_Q, DIM_C}, 1, 0, LV(wq)},
    {"attn.wq_a", IN_QRANK_LAYER, {DIM_QR, DIM_C}, 1, 0, LV(wq_a)},
    {"attn.q_a_norm", IN_QRANK_LAYER, {DIM_QR}, 0, 0, LV(q_a_norm)},
    {"attn.wq_b", IN_QRANK_LAYER, {DIM_Q, DIM_QR}, 1, 0, LV(wq_b)},
    {"attn.wk", IN_MHA_LAYER, {DIM_KV, DIM_C}, 1, 0, LV(wk)},
    {"attn.wv", IN_MHA_LAYER, {DIM_KV, DIM_C}, 1, 0, LV(wv)},
    {"attn.wkv_a", IN_MLA_LAYER, {DIM_KVR, DIM_C}, 1, 0, LV(wkv_a)},
    {"attn.wk_rope", IN_MLA_LAYER, {DIM_ROPE, DIM_C}, 1, 0, LV(wk_rope)},
    {"attn.kv_a_norm", IN_MLA_LAYER, {DIM_KVR}, 0, 0, LV(kv_a_norm)},
    {"attn.wkv_b", IN_MLA_LAYER, {DIM_KVB, DIM_KVR}, 1, 0, LV(wkv_b)},
    {"attn.q_norm", IN_QK_NORM_LAYER, {DIM_QN}, 0, 0, LV(q_norm)},
    {"attn.k_norm", IN_QK_NORM_LAYER, {DIM_KN}, 0, 0, LV(k_norm)},
    {"attn.wo", IN_EVERY_LAYER, {DIM_C, DIM_O}, 1, 1, LV(wo)},
    {"attn_post_norm", IN_SANDWICH_LAYER, {DIM_C}, 0, 0, LV(attn_post_norm)},
    {"ffn_norm", IN_EVERY_LAYER, {DIM_C}, 0, 0, LV(ffn_norm)},
    {"ffn.w_gate", IN_DENSE_LAYER, {DIM_F, DIM_C}, 1, 0, LV(w_gate)},
    {"ffn.w_up", IN_DENSE_LAYER, {DIM_F, DIM_C}, 1, 0, LV(w_up)},
    {"ffn.w_down", IN_DENSE_LAYER, {DIM_C, DIM_F}, 1, 1, LV(w_down)},
    {"moe.router", IN_MOE_LAYER, {DIM_E, DIM_C}, 1, 0, LV(router)},
    {"moe.w_gate", IN_MOE_LAYER, {DIM_EL, DIM_FE, DIM_C}, 1, 0, LV(e_gate)},
    {"moe.w_up", IN_MOE_LAYER, {DIM_EL, DIM_FE, DIM_C}, 1, 0, LV(e_up)},
    {"moe.w_down", IN_MOE_LAYER, {DIM_EL, DIM_C, DIM_FE}, 1, 1, LV(e_down)},
    {"moe.shared_gate", IN_SHARED_LAYER, {DIM_FS, DIM_C}, 1, 0, LV(s_gate)},
    {"moe.shared_up", IN_SHARED_LAYER, {DIM_FS, DIM_C}, 1, 0, LV(s_up)},
    {"moe.shared_down", IN_SHARED_LAYER, {DIM_C, DIM_FS}, 1, 1, LV(s_down)},
    {"ffn_post_norm", IN_SANDWICH_LAYER, {DIM_C}, 0, 0, LV(ffn_post_norm)},
    {"final_norm", IN_GLOBAL_LAST, {DIM_C}, 0, 0, PV(final_norm)},
    {"head", IN_UNTIED_LAST, {DIM_V, DIM_C}, 1, 0, PV(head)},
    /* model.mtp_depth: module k's tensors ("mtp.k.*"), its block's from the lines above */
    {"hnorm", IN_MTP_IN, {DIM_C}, 0, 0, LV(mtp_hnorm)},
    {"enorm", IN_MTP_IN, {DIM_C}, 0, 0, LV(mtp_enorm)},
    {"eh_proj", IN_MTP_IN, {DIM_C, DIM_C2}, 1, 0, LV(mtp_proj)},
    {"norm", IN_MTP_OUT, {DIM_C}, 0, 0, LV(mtp_norm)},
};
#define N_SPECS ((int)(sizeof(SPECS) / sizeof(SPECS[0])))

/* The dimensions tensor parallelism splits: the heads (query, key-value, output), the hidden
 * channels of the dense and the shared feed-forward, and the vocabulary (the embedding's and the
 * head's rows). */
static int dim_tp_split(int d) {
    return d == DIM_Q || d == DIM_KV || d == DIM_O || d == DIM_F || d == DIM_FS || d == DIM_V;
}

static int resolve_dim_whole(int d, const Config *c, int ep);

/* A dimension's size in one process of tp x ep: tp splits those of dim_tp_split */
static int resolve_dim(int d, const Config *c, int ep, int tp) {
    return resolve_dim_whole(d, c, ep) / (dim_tp_split(d) ? tp : 1);
}

static int resolve_dim_whole(int d, const Config *c, int ep) {
    switch (d) {
    case DIM_V: return c->vocab;
    case DIM_C: return c->d_model;
    case DIM_C2: return 2 * c->d_model;
    case DIM_F: return c->d_ff;
    case DIM_E: return c->num_experts;
    case DIM_EL: return c->num_experts / ep;
    case DIM_FE: return config_expert_hidden(c);
    case DIM_FS: return c->num_shared * config_expert_hidden(c);
    case DIM_Q: return c->n_head * config_head_dim(c);
    case DIM_KV: return config_kv_heads(c) * config_head_dim(c);
    case DIM_QN:
        return c->qk_norm == MOE_QK_NORM_HEAD ? config_head_dim(c)
                                              : resolve_dim_whole(DIM_Q, c, ep);
    case DIM_KN:
        return c->qk_norm == MOE_QK_NORM_HEAD ? config_head_dim(c)
                                              : resolve_dim_whole(DIM_KV, c, ep);
    case DIM_O: return c->n_head * config_value_dim(c);
    case DIM_QR: return c->mla_q_rank;
    case DIM_KVR: return c->mla_kv_rank;
    case DIM_ROPE: return c->mla_rope_dim;
    case DIM_KVB: return c->n_head * (c->mla_nope_dim + c->mla_v_dim);
    default: return 0;
    }
}

static int spec_in_layer(const ParamSpec *s, const Config *c, int layer) {
    switch (s->where) {
    case IN_EVERY_LAYER: return 1;
    case IN_DENSE_LAYER: return !config_is_moe_layer(c, layer);
    case IN_MOE_LAYER: return config_is_moe_layer(c, layer);
    case IN_SHARED_LAYER: return config_is_moe_layer(c, layer) && c->num_shared > 0;
    case IN_SANDWICH_LAYER: return c->norm != MOE_NORM_PRE;
    case IN_QK_NORM_LAYER: return c->qk_norm != MOE_QK_NORM_NONE;
    case IN_QPROJ_LAYER: return c->attention != MOE_ATTN_MLA || c->mla_q_rank == 0;
    case IN_QRANK_LAYER: return c->attention == MOE_ATTN_MLA && c->mla_q_rank > 0;
    case IN_MHA_LAYER: return c->attention != MOE_ATTN_MLA;
    case IN_MLA_LAYER: return c->attention == MOE_ATTN_MLA;
    default: return 0;
    }
}

static void add_tensor(ParamTable *pt, int cap, const ParamSpec *s, const Config *c, int layer,
                       int ep, int tp) {
    if (pt->n >= cap) moe_fatal("parameter table overflow");
    ParamTensor *t = &pt->t[pt->n++];
    memset(t, 0, sizeof(*t));
    if (layer >= c->n_layer) /* multi-token prediction module k = layer - n_layer + 1 */
        snprintf(t->name, sizeof t->name, "mtp.%d.%s", layer - c->n_layer + 1, s->name);
    else if (layer >= 0)
        snprintf(t->name, sizeof t->name, "layers.%d.%s", layer, s->name);
    else
        snprintf(t->name, sizeof t->name, "%s", s->name);
    t->numel = 1;
    t->tp_dim = -1;
    for (int d = 0; d < PARAM_MAX_DIMS && s->dims[d] != DIM_NONE; d++) {
        t->shape[d] = resolve_dim(s->dims[d], c, ep, tp);
        if (dim_tp_split(s->dims[d])) t->tp_dim = d;
        t->numel *= (size_t)t->shape[d];
        t->ndim = d + 1;
    }
    t->offset = pt->total;
    t->decay = s->decay;
    t->layer = layer;
    t->expert_dim = s->dims[0] == DIM_EL;
    pt->total += t->numel;
}

void params_table_build(ParamTable *pt, const Config *c) {
    params_table_build_ep(pt, c, 1);
}

void params_table_build_ep(ParamTable *pt, const Config *c, int ep) {
    params_table_build_grid(pt, c, ep, 1);
}

void params_table_build_grid(ParamTable *pt, const Config *c, int ep, int tp) {
    params_table_build_stage(pt, c, ep, tp, 0, c->n_layer);
}

void params_table_build_stage(ParamTable *pt, const Config *c, int ep, int tp, int first,
                              int last) {
    int cap = N_SPECS * (c->n_layer + 1 + c->mtp_depth);
    pt->t = (ParamTensor *)calloc_check((size_t)cap, sizeof(ParamTensor));
    pt->n = 0;
    pt->total = 0;
    pt->n_layer = c->n_layer;
    pt->n_mtp = c->mtp_depth;
    pt->tp = tp;
    for (int i = 0; i < N_SPECS && first == 0; i++)
        if (SPECS[i].where == IN_GLOBAL_FIRST) add_tensor(pt, cap, &SPECS[i], c, -1, ep, tp);
    for (int l = first; l < last; l++)
        for (int i = 0; i < N_SPECS; i++)
            if (spec_in_layer(&SPECS[i], c, l)) add_tensor(pt, cap, &SPECS[i], c, l, ep, tp);
    if (last < c->n_layer) return;
    for (int i = 0; i < N_SPECS; i++)
        if (SPECS[i].where == IN_GLOBAL_LAST || (SPECS[i].where == IN_UNTIED_LAST && !c->tied))
            add_tensor(pt, cap, &SPECS[i], c, -1, ep, tp);
    /* the multi-token prediction modules after the main model, so that its tensors keep their
     * offsets and initial values: module k's input norms and projection, its block (layer
     * n_layer + k - 1, of the last layer's kind), its output norm */
    for (int l = c->n_layer; l < c->n_layer + c->mtp_depth; l++) {
        for (int i = 0; i < N_SPECS; i++)
            if (SPECS[i].where == IN_MTP_IN) add_tensor(pt, cap, &SPECS[i], c, l, ep, tp);
        for (int i = 0; i < N_SPECS; i++)
            if (spec_in_layer(&SPECS[i], c, l)) add_tensor(pt, cap, &SPECS[i], c, l, ep, tp);
        for (int i = 0; i < N_SPECS; i++)
            if (SPECS[i].where == IN_MTP_OUT) add_tensor(pt, cap, &SPECS[i], c, l, ep, tp);
    }
}

/* The floats of each of t's rows that are one tensor-parallel share (its numel if it splits
 * rows: the share is one range), and the rows (1 then). */
static size_t tp_run(const ParamTensor *t, size_t *rows) {
    *rows = t->tp_dim == 0 ? 1 : (size_t)t->shape[0];
    return t->numel / *rows;
}

void params_tp_take(const ParamTensor *t, int tp, int p, const float *whole, float *shard) {
    size_t rows, cols = tp_run(t, &rows);
    for (size_t r = 0; r < rows; r++) /* share p of row r, of tp shares a row */
        memcpy(shard + r * cols, whole + (r * (size_t)tp + (size_t)p) * cols, cols * sizeof(float));
}

void params_tp_put(const ParamTensor *t, int tp, int p, const float *shard, float *whole) {
    size_t rows, cols = tp_run(t, &rows);
    for (size_t r = 0; r < rows; r++)
        memcpy(whole + (r * (size_t)tp + (size_t)p) * cols, shard + r * cols, cols * sizeof(float));
}

void params_table_free(ParamTable *pt) {
    free(pt->t);
    memset(pt, 0, sizeof(*pt));
}

/* The spec a tensor came from: its name with any "layers.N." prefix removed. */
static const ParamSpec *spec_of(const ParamTensor *t) {
    const char *base = t->name;
    if (t->layer >= 0) base = strchr(strchr(t->name, '.') + 1, '.') + 1;
    for (int i = 0; i < N_SPECS; i++)
        if (strcmp(SPECS[i].name, base) == 0) return &SPECS[i];
    moe_fatal("tensor '%s' has no spec", t->name);
}

void params_view(ParamView *view, const ParamTable *pt, float *buf) {
    memset(view, 0, sizeof(*view));
    view->layers = (LayerView *)calloc_check((size_t)(pt->n_layer + pt->n_mtp), sizeof(LayerView));
    for (int i = 0; i < pt->n; i++) params_view_point(view, pt, i, buf + pt->t[i].offset);
}

void params_view_point(ParamView *view, const ParamTable *pt, int i, float *at) {
    const ParamTensor *t = &pt->t[i];
    char *base = t->layer >= 0 ? (char *)&view->layers[t->layer] : (char *)view;
    float **slot = (float **)(base + spec_of(t)->view_offset);
    *slot = at;
}

void params_view_free(ParamView *view) {
    free(view->layers);
    view->layers = NULL;
}

int params_find(const ParamTable *pt, const char *name) {
    for (int i = 0; i < pt->n; i++)
        if (strcmp(pt->t[i].name, name) == 0) return i;
    return -1;
}

/* The initial gain of a norm: 1, except the output norms of model.norm=dssn, whose gains
 * start at c / sqrt(L) (Pangu Ultra: c = 0.283 after attention, 0.432 after the feed-forward)
 * so that a deep stack's residual updates start small. */
static float norm_gain(const ParamTensor *t, const Config *c) {
    if (c->norm != MOE_NORM_DSSN) return 1.0f;
    const float depth = sqrtf((float)c->n_layer);
    if (strcmp(spec_of(t)->name, "attn_post_norm") == 0) return PARAMS_DSSN_ATTN / depth;
    if (strcmp(spec_of(t)->name, "ffn_post_norm") == 0) return PARAMS_DSSN_FFN / depth;
    return 1.0f;
}

/* The std a matrix is drawn with. default: init_std, output projections / sqrt(2 L).
 * tiny (TinyInit, Pangu Ultra): sqrt(1 / (2 C L)) for every matrix, the token embedding 0.5
 * (an embedding feeds a norm first, so its scale is free). init_scale multiplies both.
 * moe.router_init_std, when set, is the router's std itself. */
float params_init_std(const ParamTensor *t, const Config *c) {
    const ParamSpec *s = spec_of(t);
    if (c->router_init_std > 0.0f && strcmp(s->name, "moe.router") == 0) return c->router_init_std;
    float std;
    if (c->init == MOE_INIT_TINY)
        std = strcmp(s->name, "tok_emb") == 0
                  ? 0.5f
                  : sqrtf(1.0f / (2.0f * (float)c->d_model * (float)c->n_layer));
    else
        std = c->init_std * (s->is_output_proj ? 1.0f / sqrtf(2.0f * (float)c->n_layer) : 1.0f);
    return std * c->init_scale;
}

void params_init(const ParamTable *pt, float *buf, const Config *c, unsigned long long seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < pt->n; i++) {
        const ParamTensor *t = &pt->t[i];
        float *p = buf + t->offset;
        if (t->ndim == 1) { /* norm gains */
            const float gain = norm_gain(t, c);
            for (size_t j = 0; j < t->numel; j++) p[j] = gain;
            continue;
        }
        const float std = params_init_std(t, c);
        for (size_t j = 0; j < t->numel; j++) p[j] = std * rng_normal(&r);
    }
}

size_t params_count_total(const ParamTable *pt) {
    return pt->total;
}

size_t params_count_active(const ParamTable *pt, const Config *c) {
    size_t active = 0;
    for (int i = 0; i < pt->n; i++) {
        const ParamTensor *t = &pt->t[i];
        /* a token passes through top_k of the E stacked experts */
        active += t->expert_dim ? t->numel / (size_t)t->shape[0] * (size_t)c->top_k : t->numel;
    }
    return active;
}
