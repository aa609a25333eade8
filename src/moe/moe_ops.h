/*
 * moe_ops.h: the Mixture-of-Experts feed-forward block, piece by piece.
 *
 *   x (N, C) --router--> logits (N, E) --softmax--> scores (N, E) --top-k--> idx, w (N, K)
 *     --dispatch plan--> slots (S = N*K when dropless) --permute--> xe (S, C)
 *     --experts (one SwiGLU per expert, one GEMM per expert slice)--> ye (S, C)
 *     --combine (weighted by w)--> y (N, C)
 *
 * Files: router.c (scores, top-k, aux and z losses, balance statistics), permute.c (dispatch
 * plan, gather and weighted scatter), experts.c (grouped SwiGLU), layer.c (the block).
 *
 * Dimension letters: N tokens, C channels, E experts, K experts per token (top-k),
 * F expert hidden size, S expert slots (rows of the permuted buffer).
 * Accumulation rule as in nn/ops.h: parameter gradients +=, activation gradients =.
 */
#ifndef MOE_MOE_OPS_H
#define MOE_MOE_OPS_H

/* ---- router ------------------------------------------------------------------------------- */

/* scores (N, E) = softmax(logits) row by row; lse (N) = logsumexp of each row (for z-loss). */
void router_softmax_forward(float *scores, float *lse, const float *logits, int N, int E);

/* Top-k per token: idx (N, K) the chosen experts in descending score order (ties go to the
 * lower expert index, so routing is deterministic); w (N, K) their weights: the scores
 * themselves, or renormalised to sum to 1 over the k chosen when renorm is non-zero. */
void router_topk_forward(int *idx, float *w, const float *scores, int N, int E, int K, int renorm);

/* Switch load-balancing loss, unscaled: E * sum_i f_i * P_i, with f_i the fraction of the N*K
 * assignments that went to expert i and P_i the mean score of expert i over the N tokens.
 * Equals 1 when routing is perfectly balanced. */
float router_aux_loss(const float *scores, const int *idx, int N, int E, int K);

/* Router z-loss, unscaled: mean over tokens of lse^2. */
float router_z_loss(const float *lse, int N);

/* Backward of the whole router from logits to w, plus both losses:
 *   dlogits (N, E) (written) = d/dlogits [ sum_{n,k} dw[n,k] * w[n,k]
 *                                         + aux_scale * aux_loss + z_scale * z_loss ]
 * aux_scale and z_scale are the loss coefficients times any loss scaling (1 / accum).
 * f_i in the aux loss is treated as a constant (it counts discrete choices). */
void router_backward(float *dlogits, const float *dw, const float *scores, const float *lse,
                     const int *idx, const float *w, int N, int E, int K, int renorm,
                     float aux_scale, float z_scale);

/* Balance statistics of one routing decision (docs: src/README.md, "router.csv"):
 * load (E) = fraction of the N*K assignments per expert; maxvio = (max load - mean) / mean;
 * cv = std(load) / mean(load); entropy = mean over tokens of the entropy of the score
 * distribution, in nats. */
typedef struct {
    float maxvio, cv, entropy, drop_frac;
} RouterStats;
/* maxvio and cv of a load vector (E) (fractions; an average of several batches' loads works) */
void load_balance(float *maxvio, float *cv, const float *load, int E);
void router_stats(RouterStats *st, float *load, const float *scores, const int *idx, int N, int E,
                  int K);

/* ---- dispatch plan and permutation ------------------------------------------------------- */

/* Where every assignment (n, k) goes in the expert-sorted slot buffer. Expert e owns slots
 * [offsets[e], offsets[e+1]); inside a slice, tokens keep their order (stable). A slot of -1
 * marks a dropped assignment (capacity mode; dropless plans drop nothing). */
typedef struct {
    int N, E, K;
    int S;           /* number of used slots, offsets[E] */
    int *counts;     /* (E) assignments kept per expert */
    int *offsets;    /* (E + 1) start of each expert's slice */
    int *slot;       /* (N * K) slot of assignment (n, k), or -1 if dropped */
    int *slot_token; /* (N * K) token n held in each slot s < S */
} DispatchPlan;

void dispatch_plan_alloc(DispatchPlan *p, int N_max, int E, int K);
void dispatch_plan_free(DispatchPlan *p);
/* Dropless plan for N tokens (N <= N_max) from idx (N, K). */
void dispatch_plan_build(DispatchPlan *p, const int *idx, int N);

/* Gather: xe (S, C), row s = x[slot_token[s]].  Backward: dx (N, C) (written) sums the
 * gradients of every slot that holds token n (zero for a token with no kept slot). */
void permute_forward(float *xe, const float *x, const DispatchPlan *p, int C);
void permute_backward(float *dx, const float *dxe, const DispatchPlan *p, int C);

/* Weighted scatter back: y (N, C) (written) = sum_k w[n,k] * ye[slot(n,k)], skipping dropped
 * assignments. Backward: dye (S, C) (written) = w * dy of the slot's token;
 * dw (N, K) (written) = dot(dy[n], ye[slot(n,k)]), 0 for dropped assignments. */
void combine_forward(float *y, const float *ye, const float *w, const DispatchPlan *p, int C);
void combine_backward(float *dye, float *dw, const float *dy, const float *ye, const float *w,
                      const DispatchPlan *p, int C);

/* ---- experts: one SwiGLU per expert over its contiguous slice ------------------------------
 * Weights stacked over experts: Wg, Wu (E, F, C); Wd (E, C, F). For the rows of expert e:
 *   g = xe Wg[e]^T, u = xe Wu[e]^T (S_e, F);  h = silu(g) * u;  ye = h Wd[e]^T (S_e, C).
 * g, u, h (S, F) are kept for the backward pass. An expert with no rows is skipped. */
void experts_forward(float *ye, float *g, float *u, float *h, const float *xe, const float *Wg,
                     const float *Wu, const float *Wd, const int *offsets, int E, int C, int F);
/* dxe (S, C) written; dWg, dWu, dWd accumulated; dg, du, dh (S, F) are scratch. */
void experts_backward(float *dxe, float *dWg, float *dWu, float *dWd, float *dg, float *du,
                      float *dh, const float *dye, const float *xe, const float *g, const float *u,
                      const float *h, const float *Wg, const float *Wu, const float *Wd,
                      const int *offsets, int E, int C, int F);

/* ---- the block ------------------------------------------------------------------------------ */

typedef struct {
    int C, E, K, F;
    int renorm;     /* renormalise top-k weights to sum to 1 */
    float aux_coef; /* Switch load-balancing loss coefficient (alpha) */
    float z_coef;   /* router z-loss coefficient (beta) */
} MoeHyper;

typedef struct {
    const float *router; /* (E, C) */
    const float *Wg;     /* (E, F, C) */
    const float *Wu;     /* (E, F, C) */
    const float *Wd;     /* (E, C, F) */
} MoeWeights;

typedef struct {
    float *router, *Wg, *Wu, *Wd; /* same shapes as MoeWeights; accumulated */
} MoeGrads;

/* Everything one block keeps between its forward and backward pass, for up to N_max tokens. */
typedef struct {
    int N;                  /* tokens of the last forward */
    float *logits, *scores; /* (N, E) */
    float *lse;             /* (N) */
    int *idx;               /* (N, K) */
    float *w;               /* (N, K) */
    DispatchPlan plan;
    float *xe, *ye;         /* (N*K, C) */
    float *g, *u, *h;       /* (N*K, F) */
    float aux_loss, z_loss; /* unscaled values of the last forward */
} MoeActs;

/* Backward temporaries, shared by all blocks of a model (used one block at a time). */
typedef struct {
    float *dlogits;      /* (N, E) */
    float *dw;           /* (N, K) */
    float *dxe, *dye;    /* (N*K, C) */
    float *dg, *du, *dh; /* (N*K, F) */
    float *dx_router;    /* (N, C) */
} MoeScratch;

void moe_acts_alloc(MoeActs *a, const MoeHyper *hp, int N_max);
void moe_acts_free(MoeActs *a);
void moe_scratch_alloc(MoeScratch *s, const MoeHyper *hp, int N_max);
void moe_scratch_free(MoeScratch *s);

/* y (N, C) (written) = MoE(x); fills a (routing, activations, aux_loss, z_loss). */
void moe_block_forward(float *y, MoeActs *a, const float *x, const MoeWeights *wt,
                       const MoeHyper *hp, int N);
/* dx (N, C) (written); grads accumulated. loss_scale multiplies the aux and z loss gradients
 * (1 / accum), matching the scaling of dy. */
void moe_block_backward(float *dx, MoeGrads *gr, const float *dy, const MoeActs *a, const float *x,
                        const MoeWeights *wt, const MoeHyper *hp, MoeScratch *s, float loss_scale);

#endif
