/*
 * block.h: transformer block l of the model (Model.w.layers[l], Model.state.blocks[l]):
 *   resid_mid = in + attention(rmsnorm(in)) wo^T     (attn_block.h)
 *   out       = resid_mid + FFN(rmsnorm(resid_mid))
 * the FFN a dense SwiGLU or the MoE block (moe_block.h) with its shared experts; with
 * model.norm=sandwich or dssn each sublayer's output is normed again before it is added. The
 * main trunk's blocks are l = 0 .. n_layer - 1 (model.c); the multi-token prediction modules'
 * follow them.
 */
#ifndef MOE_MODEL_BLOCK_H
#define MOE_MODEL_BLOCK_H

#include "model/model.h"

/* Block l over B sequences of T tokens, from in into out (N, C); or with kv (a decoding step: B
 * sequences of one new token each, T 1) over the new tokens against kv's cache of the earlier
 * ones. The MoE blocks route as ctx says (NULL: evaluation). */
void block_forward(Model *m, int l, float *out, const float *in, int B, int T, const KvStep *kv,
                   const StepCtx *ctx);

/* Its backward, after the last forward: dx (N, C) = d/d(in), given dout (N, C) the gradient of
 * its output (dx may be dout); the weights' gradients added, the MoE block's loss terms scaled by
 * loss_scale. */
void block_backward(Model *m, int l, float *dx, const float *dout, const float *in,
                    float loss_scale, const StepCtx *ctx);

#endif
