/*
 * params.h: ONE table of parameter tensors, from which come sizes, offsets, checkpoint order,
 * exported tensor names and which tensors take weight decay.
 *
 * All parameters live in one float allocation; each tensor is a view at its offset.
 * Gradients and the AdamW moments use the same layout, so the optimizer is one flat loop
 * over tensors and never indexes anything by a magic number.
 */
#ifndef MOE_PARAMS_H
#define MOE_PARAMS_H

#include <stddef.h>

#include "config/config.h"

#define PARAM_NAME_MAX 64
#define PARAM_MAX_DIMS 3

typedef struct {
    char name[PARAM_NAME_MAX]; /* exported name, e.g. "layers.3.moe.experts.w_gate" */
    int ndim;
    int shape[PARAM_MAX_DIMS];
    size_t numel;
    size_t offset;  /* in floats, into the one parameter buffer */
    int decay;      /* 1: AdamW weight decay applies */
    int layer;      /* block index, or -1 for embedding / final norm / head; module k of
                       multi-token prediction: n_layer + k - 1 (named "mtp.k.*") */
    int expert_dim; /* 1 when dimension 0 indexes experts (stacked expert weights): with
                       expert parallelism, this process's num_experts / ep of them */
    int tp_dim;     /* the dimension tensor parallelism splits (the heads' rows of wq, wk, wv,
                       the hidden channels of w_gate, w_up, shared_gate, shared_up: 0; their
                       columns in wo, w_down, shared_down: 1), or -1 for a tensor every
                       tensor-parallel rank holds whole. shape is this rank's share: 1 / tp of
                       that dimension, whatever tp is */
} ParamTensor;

/* Pointers into one parameter-shaped buffer (weights, gradients or a moment). NULL for the
 * tensors a block does not have (a dense block has no router). */
typedef struct {
    float *attn_norm;       /* (C) */
    float *wq;              /* (H D, C): n_head query heads of head_dim D */
    float *wk, *wv;         /* (Hkv D, C): kv_heads key-value heads */
    float *q_norm, *k_norm; /* model.qk_norm: (D) shared by the heads, or (H D), (Hkv D) */
    float *wo;              /* (C, H Dv), Dv the value width (D but under latent attention) */
    /* model.attention=mla, D = nope_dim + rope_dim a head: the queries' latent (mla.q_rank > 0;
     * else wq), the keys' and values' latent, the rotated key, the heads' keys and values */
    float *wq_a, *q_a_norm, *wq_b; /* (q_rank, C), (q_rank), (H D, q_rank) */
    float *wkv_a, *kv_a_norm;      /* (kv_rank, C), (kv_rank) */
    float *wk_rope;                /* (rope_dim, C) */
    float *wkv_b;    /* (H (nope_dim + v_dim), kv_rank): head h's rows h (nope_dim + v_dim) ... are
                        its key's nope_dim, then its value's v_dim */
    float *ffn_norm; /* (C) */
    /* model.norm=sandwich or dssn: the norms on the attention's and the feed-forward's
     * outputs, before each residual add */
    float *attn_post_norm, *ffn_post_norm; /* (C) */
    /* dense feed-forward */
    float *w_gate, *w_up; /* (F, C) */
    float *w_down;        /* (C, F) */
    /* MoE feed-forward */
    float *router;        /* (E, C) */
    float *e_gate, *e_up; /* (E, F, C) */
    float *e_down;        /* (E, C, F) */
    /* shared experts of an MoE block (moe.num_shared > 0), Fs = num_shared * F */
    float *s_gate, *s_up; /* (Fs, C) */
    float *s_down;        /* (C, Fs) */
    /* a multi-token prediction module (the views after the n_layer blocks): the norms of its
     * two inputs, the main trunk's (or the previous module's) output and the embedding of the
     * token k ahead; the projection of the two, side by side, to C; its output norm */
    float *mtp_hnorm, *mtp_enorm; /* (C) */
    float *mtp_proj;              /* (C, 2 C) */
    float *mtp_norm;              /* (C) */
} LayerView;

typedef struct {
    float *tok_emb;    /* (V, C) */
    float *final_norm; /* (C) */
    float *head;       /* (V, C); NULL with model.tied (the head is tok_emb) */
    LayerView *layers; /* (L + mtp_depth): the blocks, then the multi-token prediction modules */
} ParamView;

typedef struct {
    int n;          /* tensors */
    ParamTensor *t; /* (n) in checkpoint order */
    size_t total;   /* floats in all */
    int n_layer;
    int n_mtp; /* multi-token prediction modules (model.mtp_depth): layers n_layer .. + n_mtp */
    int tp;    /* the tensor-parallel ranks the tensors with tp_dim >= 0 are split over */
} ParamTable;

void params_table_build(ParamTable *pt, const Config *c);
/* The table of one process of an expert-parallel group of ep: the stacked expert tensors hold
 * num_experts / ep experts (same names; the router still scores all E). ep = 1 is
 * params_table_build. */
void params_table_build_ep(ParamTable *pt, const Config *c, int ep);
/* The table of one process of a grid of tp x ep: the expert tensors as params_table_build_ep's,
 * and each tensor with tp_dim >= 0 its 1 / tp share of that dimension (dist.tp; the checks of
 * config_check_dist make it divide). tp = ep = 1 is params_table_build. */
void params_table_build_grid(ParamTable *pt, const Config *c, int ep, int tp);
/* The table of a pipeline stage of that grid: the blocks [first, last), the embedding when first
 * is 0, the final norm and head when last is n_layer (and the multi-token prediction modules
 * with them); the tensors keep their names, so a whole model's file loads by name. */
void params_table_build_stage(ParamTable *pt, const Config *c, int ep, int tp, int first, int last);
/* Between a tensor-parallel share (t's shape, numel floats) and the whole tensor (tp shares of
 * t's split dimension): take copies share p of whole into shard, put copies shard into its
 * place in whole. Rows (tp_dim 0) are one consecutive range of the whole; columns (tp_dim 1) a
 * range of every row. */
void params_tp_take(const ParamTensor *t, int tp, int p, const float *whole, float *shard);
void params_tp_put(const ParamTensor *t, int tp, int p, const float *shard, float *whole);
void params_table_free(ParamTable *pt);
/* Point every field of view into buf (a buffer of pt->total floats). */
void params_view(ParamView *view, const ParamTable *pt, float *buf);
void params_view_free(ParamView *view);
/* Point view's field of tensor i of pt at at (dist.zero=3: a block's weights, gathered). */
void params_view_point(ParamView *view, const ParamTable *pt, int i, float *at);
/* Index of a tensor by exported name, or -1. */
int params_find(const ParamTable *pt, const char *name);

/* Initialise weights from seed: norm gains 1 (the output norms of model.norm=dssn: the depth-
 * scaled constants below), every matrix normal(0, params_init_std): model.init=default gives
 * init_std, the output projections of each block (wo, w_down, e_down, shared_down) scaled by
 * 1/sqrt(2 L); model.init=tiny gives TinyInit's sqrt(1 / (2 C L)), the embedding 0.5. */
void params_init(const ParamTable *pt, float *buf, const Config *c, unsigned long long seed);
/* The std params_init draws matrix t with under c's model.init and model.init_scale. */
float params_init_std(const ParamTensor *t, const Config *c);
/* model.norm=dssn: the output norms' initial gains are these over sqrt(L) (Pangu Ultra) */
#define PARAMS_DSSN_ATTN 0.283f
#define PARAMS_DSSN_FFN 0.432f

/* Parameter counts: total, and active per token (an MoE block counts top_k of its experts, and
 * all of its shared experts). */
size_t params_count_total(const ParamTable *pt);
size_t params_count_active(const ParamTable *pt, const Config *c);

#endif
