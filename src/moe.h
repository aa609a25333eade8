/*
 * moe.h: the engine's public interface, the one header a program built on libmoe includes.
 *
 * Every chapter program (chapters/) includes this and the standard headers, and nothing else
 * of src/ unless its opening comment names the piece it takes apart (src/README.md, "The
 * public header", lists those). What is public, by the header that declares it:
 *
 *   base/util.h        moe_input_error (exit 2) and moe_fatal (exit 1), set_error; checked
 *                      allocation (malloc_check, calloc_check, floats_alloc, fopen_check);
 *                      the xoshiro256** RNG (rng_seed, rng_uniform, rng_normal, rng_below);
 *                      now_seconds
 *   io/files.h         file_exists, make_dirs (and the atomic writes)
 *   config/config.h    Config, every setting: config_defaults, config_load_file,
 *                      config_validate, config_expert_hidden
 *   io/data.h          token shards (shard_load, shard_write, shard_check_window), the batches
 *                      of training (loader_*) and validation (loader_val_batch), one sequence
 *                      of each domain (shard_domain_batch)
 *   io/mix.h           a domain mix (data.mix): mix_parse, mix_resolve
 *   model/model.h      Model: model_init, model_forward, model_backward (a StepCtx, the
 *                      mode of the pass: NULL for evaluation), model_free. Its
 *                      public fields: cfg, spec (the MoE blocks' MoeSpec), B and T (the sizes
 *                      of model_init), n_moe, pt (the parameter table: names and shapes,
 *                      params_find, params_count_total, params_count_active), the results of
 *                      the last forward (loss, aux_loss, z_loss, logits) and expert_source
 *                      (experts served from elsewhere: infer/ below); the rest is the
 *                      orchestration's own
 *   model/inspect.h    what the last forward computed, block by block: model_is_moe,
 *                      model_block_view (the residual stream), model_attn_view (the queries
 *                      and keys the attention took), model_route_view (the router's
 *                      logits and choices, each expert's assignments), model_router_logits,
 *                      model_moe_weights, model_expert_similarity
 *   model/profile.h    the op profiler: prof_enabled, prof_reset, prof_total, prof_name
 *   model/pipe.h       a pipeline's schedules (dist.pp): pipe_schedule (a stage's actions),
 *                      pipe_held, pipe_simulate and pipe_simulate_stages (their timeline),
 *                      pipe_print (moe train --print-schedule)
 *   train/checkpoint.h checkpoint_config (a checkpoint's settings), checkpoint_load
 *   train/train.h      train_run (a whole run into a run directory), evaluate
 *   convert/upcycle.h  a dense model as an MoE: upcycle_options_default, upcycle_check,
 *                      upcycle_model
 *   infer/decode.h     decoding with a key-value cache: decoder_init, decoder_prefill,
 *                      decoder_step, decoder_free
 *   infer/quant.h      the experts quantized (int8, int4): quant_experts_*
 *   infer/offload.h    the experts in a file with a cache of resident ones: expert_file_*,
 *                      expert_cache_*, lru_hit_rate
 */
#ifndef MOE_H
#define MOE_H

#include "base/util.h"
#include "config/config.h"
#include "convert/upcycle.h"
#include "infer/decode.h"
#include "infer/offload.h"
#include "infer/quant.h"
#include "io/data.h"
#include "io/files.h"
#include "io/mix.h"
#include "model/inspect.h"
#include "model/model.h"
#include "model/pipe.h"
#include "model/profile.h"
#include "train/checkpoint.h"
#include "train/train.h"

#endif
