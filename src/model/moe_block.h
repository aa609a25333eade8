/*
 * moe_block.h: the Mixture-of-Experts feed-forward block, the pieces of src/moe/moe_ops.h strung
 * together (moe_block.c): router, top-k, dispatch plan, gather, experts (here, or across the
 * processes of an expert-parallel group: ep.h), weighted combine; forward and backward.
 */
#ifndef MOE_MODEL_MOE_BLOCK_H
#define MOE_MODEL_MOE_BLOCK_H

#include "backend/backend.h"
#include "config/config.h"
#include "model/acts.h"
#include "moe/moe_ops.h"

/* ---- the block's specification ---------------------------------------------------------------
 * s (written) = the MoE block of the config c, its buffers sized for sequences of seq_len
 * tokens: every moe.* key of the block under its own name, d_model, and d_expert =
 * config_expert_hidden(c). The one place a MoeSpec is built from a Config (model.c, the
 * memory formula, the chapter programs), so they cannot disagree. */
void moe_spec_from_config(MoeSpec *s, const Config *c, int seq_len);

/* ---- the block's weights, activations and scratch -------------------------------------------- */

/* Where an inference's experts come from when they are not the model's resident fp32 tensors
 * (src/infer/: quantized, or loaded on demand from a file). forward writes ye (S, C), every
 * expert e's slice [offsets[e], offsets[e + 1]) of xe (S, C) through expert e of MoE layer
 * `layer` (the model's block index), as the backend's experts_forward does (counts: its
 * meaning there). Evaluation only: a block run with a source has no backward. */
typedef struct ExpertSource ExpertSource;
struct ExpertSource {
    void (*forward)(ExpertSource *src, int layer, const Backend *be, float *ye, const float *xe,
                    const int *offsets, const int *counts, int E, int C, int F);
};

typedef struct {
    const float *router;  /* (E, C) */
    const float *Wg;      /* (E, F, C) */
    const float *Wu;      /* (E, F, C) */
    const float *Wd;      /* (E, C, F) */
    const float *bias;    /* (E) aux-free selection bias, or NULL: no gradient */
    ExpertSource *source; /* NULL: the experts are Wg, Wu, Wd; else this source's (layer) */
    int layer;
} MoeWeights;

typedef struct {
    float *router, *Wg, *Wu, *Wd; /* same shapes as MoeWeights; accumulated */
} MoeGrads;

/* Everything one block keeps between its forward and backward pass, for up to N_max tokens. */
typedef struct {
    int N;                  /* tokens of the last forward */
    float *logits, *scores; /* (N, E) */
    float *lse;             /* (N) */
    int *idx;               /* (N, A), A = moe_assignments_per_token: K, or E (expert choice) */
    float *w;               /* (N, A) */
    DispatchPlan plan;      /* its K is A */
    float *xe, *ye;         /* (S, C), S = moe_slots_max: N*K, or E*cap (expert choice) */
    float *g, *u, *h;       /* (S, F) */
    float aux_loss, z_loss; /* unscaled values of the last forward (unless defer_losses) */
    /* where the forward writes them, aux then z: two floats of the model's step record (the
     * backend's memory), or NULL: loss_here (a block on its own, on a backend whose memory is
     * the host's). With defer_losses set they stay there (the model reads them once a step:
     * model_read_step) and aux_loss, z_loss are not updated. */
    float *losses, loss_here[2];
    int defer_losses;
    /* with defer_losses: where the forward records its routing statistics instead of filling
     * route (route_stats_record, route_record_bytes of the backend's memory; model.h) */
    void *stats_rec;
    int T;                  /* MoeCtx.T of the last forward (seq_aux backward) */
    /* jitter (allocated when s->jitter > 0): the router reads xj = x * jit instead of x */
    float *jit, *xj; /* (N, C) the factors drawn, the jittered input */
    int jittered;    /* the last forward used xj */
    float *noise;    /* (N, E) the logit noise drawn (allocated when s->noise > 0) */
    /* moe.router_precision=bf16: the router's input (N, C) and weights (E, C) rounded */
    float *xr, *wr;
    float *drawn;     /* host staging of the draws, (N, max(C, E)), for a backend whose memory
                         is not the host's (NULL otherwise: the draws land in place) */
    RouteStats route; /* what the last forward's routing did (host numbers, route_stats) */
    void *work;       /* the routing ops' scratch (MoeCtx.work), work_bytes of it */
    size_t work_bytes;
    /* when moe_balance_f_outside: the aux loss's f (E; in the backend's memory, where the
     * balance loss reads it), counted on the host in global_f_host from idx (or its host copy
     * idx_host (N K) when the backend's memory is not the host's): over the whole batch of
     * every process, the step's micro-batches, or groups of experts. With expert parallelism,
     * ep: the rows this member's experts received (ep.h) */
    float *global_f, *global_f_host;
    int *idx_host;
    double *global_count; /* (E + 1) the counts summed across processes, then the total */
    double *step_count;   /* (E + 1) moe.balance_scope=global: the step's counts so far */
    struct EpActs *ep;
    void *arena; /* the backend buffers above, one allocation (moe_acts_alloc); NULL when a
                    model's arena holds them (model_init) */
} MoeActs;

/* Backward temporaries, shared by all blocks of a model (used one block at a time). */
typedef struct {
    float *dlogits;      /* (N, E) */
    float *dw;           /* (N, A) */
    float *dxe, *dye;    /* (S, C) */
    float *dg, *du, *dh; /* (S, F) */
    float *dx_router;    /* (N, C) */
    void *arena;         /* their one allocation (moe_scratch_alloc), or NULL: a model's */
} MoeScratch;

/* The buffers are the backend's memory (be->alloc), allocated once, for up to N_max tokens
 * in sequences of s->seq_len. dist: the processes the block will run over (the same as every
 * call's MoeCtx.dist), or NULL for one. moe_acts_alloc is moe_acts_host_alloc, then the
 * block's table (moe_acts_entries, acts.h) in an arena of its own; a model puts the entries in
 * its own table instead. moe_acts_free frees the host arrays, and the arena when the block
 * has one. */
void moe_acts_alloc(const Backend *be, MoeActs *a, const MoeSpec *s, struct Dist *dist, int N_max);
void moe_acts_free(const Backend *be, MoeActs *a);
/* 1 when the aux loss's f comes from outside the balance loss (MoeCtx.global_f): more than one
 * process, moe.balance_scope=global, or moe.balance_groups > 0. */
int moe_balance_f_outside(const MoeSpec *s, const struct Dist *dist);
void moe_scratch_alloc(const Backend *be, MoeScratch *scr, const MoeSpec *s, int N_max);
void moe_scratch_free(const Backend *be, MoeScratch *scr);
/* The host side of a MoeActs (zeroed first): the plan's E and K, work_bytes, the routing
 * statistics, the noise staging, global_f and its counts when moe_balance_f_outside, and with
 * expert parallelism the EpActs (ep_acts_host_alloc). */
void moe_acts_host_alloc(const Backend *be, MoeActs *a, const MoeSpec *s, struct Dist *dist,
                         int N_max);
/* The block's backend buffers as entries of t, named "<prefix>.<field>", filling a's fields
 * (a NULL: only counted); ep > 1 adds the expert exchange's ("<prefix>.ep.<field>"). */
void moe_acts_entries(ActTable *t, const char *prefix, const MoeSpec *s, int ep, int N_max,
                      MoeActs *a);
/* The backward scratch's buffers as entries of t (scr NULL: only counted). */
void moe_scratch_entries(ActTable *t, const char *prefix, const MoeSpec *s, int N_max,
                         MoeScratch *scr);

/* y (N, C) (written) = MoE(x); fills a (routing, activations, aux_loss, z_loss). ctx is this
 * call's context (its work is ignored: the block brings its own scratch; with several
 * processes, so is its global_f: the block counts f over them). With ctx->rng
 * set (training), draws the jitter factors (N*C uniforms, token-major), then the logit noise
 * (N*E normals), then (capacity mode, second_expert_random, K = 2) one uniform per token for
 * the second expert, serially: the stream is deterministic. */
void moe_block_forward(const Backend *be, float *y, MoeActs *a, const float *x,
                       const MoeWeights *wt, const MoeSpec *s, const MoeCtx *ctx, int N);
/* dx (N, C) (written); grads accumulated. loss_scale multiplies the aux and z loss gradients
 * (1 / accum), matching the scaling of dy. ctx gives the processes (dist); the router's
 * backward runs with the forward's T, f and scratch, kept in a. */
void moe_block_backward(const Backend *be, float *dx, MoeGrads *gr, const float *dy,
                        const MoeActs *a, const float *x, const MoeWeights *wt, const MoeSpec *s,
                        const MoeCtx *ctx, MoeScratch *scr, float loss_scale);

#endif
