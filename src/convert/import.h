/*
 * import.h: a model from a safetensors file (written by `moe export` or by another trainer
 * that uses moe.c's tensor names) turned into moe.c settings and weights.
 *
 * The order a caller follows:
 *   1. c = the caller's config: the defaults, --config FILE, then the --set overrides (so that a
 *      model.n_head the file does not record is there when import_config validates);
 *   2. import_config(&c, st, given, ...): the file's settings and the shapes of its tensors
 *      (given: the caller's --config and --set lines, for the keys the file must state);
 *   3. the --set overrides once more, so they win over the file's settings too (non-shape keys
 *      such as moe.top_k; a --set that changes a shape makes step 5 fail, naming the tensor
 *      that no longer fits), then config_validate;
 *   4. model_init(&m, &c, B, T);
 *   5. import_weights(&m, st, ...).
 *
 * Tensor names and shapes are those of the parameter table (`moe info` lists them):
 *   tok_emb (V, C), layers.L.attn.{wq,wk,wv,wo} (C, C), layers.L.{attn,ffn}_norm (C),
 *   layers.L.ffn.{w_gate,w_up} (F, C), layers.L.ffn.w_down (C, F) in dense blocks,
 *   layers.L.moe.router (E, C), layers.L.moe.{w_gate,w_up} (E, F, C),
 *   layers.L.moe.w_down (E, C, F), layers.L.moe.shared_{gate,up} (Fs, C),
 *   layers.L.moe.shared_down (C, Fs) in MoE blocks, final_norm (C), head (V, C) (none with
 *   model.tied: the embedding is the head);
 *   and, with moe.balance=aux_free only, layers.L.moe.router_bias (E) in MoE blocks: the
 *   aux-free biases (Model.router_bias; not parameters, but they steer the top-k choice).
 */
#ifndef MOE_IMPORT_H
#define MOE_IMPORT_H

#include "config/config.h"
#include "io/tensorfile.h"
#include "model/model.h"

/* Settings for a model read from safetensors. c starts as the caller's config; then
 *   - the metadata keys `moe export` writes by themselves (n_head, top_k, rope_theta,
 *     norm_topk) are applied;
 *   - the metadata "config" (key=value lines, config_write's format), if present, is applied,
 *     its model.* and moe.* lines and the keys that decide what an evaluation reads
 *     (train.batch, train.eval_batches, data.val), so that the imported model evaluates as the
 *     exported one did; the other training and data settings belong to the importing run;
 *   - the shapes of the tensors override the shape keys: model.d_model from tok_emb (V, C),
 *     model.n_layer from the highest layer index, model.tied from whether there is a head,
 *     model.d_ff from a dense block's ffn.w_gate,
 *     moe.num_experts and moe.d_expert from moe.w_gate (E, F, C), moe.num_shared from
 *     moe.shared_gate (num_shared * F, C), moe.every and moe.first_dense from which layers
 *     have moe.* tensors (an error when moe.c cannot place MoE blocks that way).
 * model.n_head cannot be inferred from shapes: it comes from the metadata or the caller.
 * The settings that change what the model computes and that no shape shows (model.n_head,
 * model.seq_len, model.rope_theta; in an MoE model moe.top_k, norm_topk, score,
 * topk_before_softmax, route_scale, balance, routing, capacity_factor, eval_capacity_factor,
 * and ec_capacity, capacity_scope, min_capacity, drop_policy where they apply) must each be
 * stated by the metadata or named in given (key=value lines: the caller's --config file and
 * --set options; NULL for none): a missing one is refused, the message naming it and the
 * --set that supplies it, never filled in from the defaults. `moe export` writes all of them.
 * Ends with config_validate. Returns 0, or -1 with a message (c unchanged). */
int import_config(Config *c, const SafeTensors *st, const char *given, char *err, int errlen);

/* Copy every tensor of m's parameter table from st, and the aux-free biases (which must be
 * there exactly when moe.balance=aux_free; other models get zero biases). Every name must be
 * present with the same shape, and st may hold no other tensor; otherwise -1 and a message
 * naming the first tensor that is missing, has another shape, or is extra (m is unchanged). */
int import_weights(Model *m, const SafeTensors *st, char *err, int errlen);

/* `moe export`: m's parameters under their table names, the aux-free biases (aux_free only),
 * and the metadata: d_model, n_layer, n_head, num_experts, top_k, rope_theta, norm_topk as
 * bare keys, "format" = "moe.c", "config" = every setting (config_write), and the moe.crc32
 * checksum (safetensors_write_checksummed). Returns 0, or -1 with a message. */
int model_export(const Model *m, const char *path, char *err, int errlen);

#endif
