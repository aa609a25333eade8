/*
 * inspect.h: what a model's last forward computed, block by block, read through functions
 * instead of the model's own fields (Model.state.blocks, Model.state.resid, Model.w), which are its
 * orchestration's to change. The public way to look inside a forward (src/moe.h): the chapter
 * programs read the router's input, logits and choices, the residual stream and the expert
 * weights through these.
 *
 * Every pointer is the model's backend memory (the host's on the CPU backends, which the
 * chapter programs run on) and holds the last forward's N = B x T tokens until the next
 * forward or model_free; C is model.d_model, E moe.num_experts, K moe.top_k.
 */
#ifndef MOE_MODEL_INSPECT_H
#define MOE_MODEL_INSPECT_H

#include "model/model.h"

/* 1 when block `layer` of m is an MoE block, 0 when it is dense or out of range. */
int model_is_moe(const Model *m, int layer);

/* Block `layer`'s activations in the last forward. */
typedef struct {
    const float *input;  /* (N, C) the residual stream the block reads */
    const float *mid;    /* (N, C) input + the attention branch */
    const float *ffn_in; /* (N, C) rmsnorm(mid): the FFN's input, the router's in an MoE block */
    const float *output; /* (N, C) mid + the FFN branch: the next block's input */
    /* model.norm=sandwich or dssn: each sublayer's output before its output norm (N, C);
     * NULL with model.norm=pre */
    const float *attn_out, *ffn_out;
} BlockView;
BlockView model_block_view(const Model *m, int layer);

/* Block `layer`'s queries and keys in the last forward, as the attention op took them: after
 * model.qk_norm and RoPE, latent attention's assembled from its latents. A logit is
 * q[n, h] . k[n', h / (H / Hkv)] / sqrt(D). */
typedef struct {
    int N, H, Hkv, D; /* tokens, query heads, key heads, channels of a query or key head */
    const float *q;   /* (N, H D) */
    const float *k;   /* (N, Hkv D) */
} AttnView;
AttnView model_attn_view(const Model *m, int layer);

/* MoE block `layer`'s routing in the last forward (every field 0 or NULL in a dense block). */
typedef struct {
    int N, E, A;         /* tokens, experts, assignments a token (K; E with expert choice) */
    const float *logits; /* (N, E) the router's logits, as the block used them */
    const int *idx;      /* (N, A) the experts each token was routed to */
    const int *routed;   /* (E) assignments routed to each expert (host memory) */
    float max_logit;     /* the largest |logit| */
} RouteView;
RouteView model_route_view(const Model *m, int layer);

/* logits (N, E) = the router's input of the last forward (BlockView.ffn_in) times its weights
 * W_r^T, with the model's own product: the fp32 logits of MoE block `layer`, whatever
 * moe.router_precision and moe.noise made of them in the block. */
void model_router_logits(const Model *m, int layer, float *logits);

/* MoE block `layer`'s weights as moe_block_forward takes them (the aux-free bias with
 * moe.balance=aux_free), to run the block again on its input at other settings. */
MoeWeights model_moe_weights(const Model *m, int layer);

/* MoE block `layer`'s aux-free bias (E) in the backend's memory (moe.balance=aux_free; else,
 * and for a dense block, NULL): what checkpoints save and load. */
float *model_router_bias(const Model *m, int layer);

/* The mean cosine similarity of MoE block `layer`'s experts (experts_similarity): 1 for
 * copies of one FFN; 0 for a dense block. */
double model_expert_similarity(const Model *m, int layer);

#endif
