/*
 * attn_block.h: a block's attention sublayer, from its input norm's output ln1 to the heads'
 * output atty (before the output projection wo), and back.
 *
 * Two kinds (model.attention):
 *   mha  q, k, v = ln1 Wq^T, ln1 Wk^T, ln1 Wv^T: n_head query heads, kv_heads key-value heads
 *        (grouped-query attention), heads of head_dim; model.qk_norm normalises q and k per
 *        head or over the projection; RoPE on all of q and k.
 *   mla  DeepSeek-V2/V3's multi-head latent attention: queries through a normed latent of
 *        mla.q_rank (or straight from ln1), keys and values from one normed latent of
 *        mla.kv_rank shared by the heads (kvb = latn Wkv_b^T, a key part of nope_dim and a value
 *        of v_dim a head), and a rotated key of rope_dim, ln1 Wk_rope^T, shared by the heads;
 *        a head's query and key are [nope_dim channels | rope_dim rotated ones].
 * Both then run the attention op over (H, Hkv, D, Dv) heads.
 */
#ifndef MOE_MODEL_ATTN_BLOCK_H
#define MOE_MODEL_ATTN_BLOCK_H

#include "model/model.h"

/* Block l's attention over B sequences of T tokens from its ln1 into its atty; with kv, a
 * decoding step (B sequences of one new token, T 1): the new keys and values appended to kv's
 * cache, the attention over the whole cache. */
void attn_block_forward(Model *m, int l, int B, int T, const KvStep *kv);

/* Its backward, after the last forward: from the state's datty (the gradient of atty) into its
 * dln (the gradient of ln1, written); the weights' gradients added. The scratch dq, dk, dv
 * (and datty itself) are used on the way. */
void attn_block_backward(Model *m, int l);

/* Latent attention's decoding cache after a prefill (a forward over the prompts): block l's N
 * rows of [latn | krope] into row rows[i] of cache; work holds (N, kv_rank + rope_dim). */
void mla_prefill_cache(Model *m, int l, float *cache, const int *rows, int N, float *work);

#endif
