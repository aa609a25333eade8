/*
 * memory.h: what a training step holds in memory, worked out from the config alone.
 *
 * A model for B x T tokens owns four kinds of memory (model.h):
 *   - parameters P, their gradients P and the two AdamW moments 2P: 4P floats whatever B, T;
 *   - activations: what forward keeps for backward, proportional to the N = B * T tokens,
 *     except the attention probabilities, B * H * T * T (quadratic in T);
 *   - backward scratch: gradient buffers shared by all blocks, used one block at a time;
 *   - integer buffers: the token ids and, in MoE blocks, the routing indices and the
 *     dispatch plan. They are 4-byte words (int), so a word is the size of a float.
 *
 * The activations, the scratch and the integer buffers are the entries of the model's table
 * (acts.h, model_acts_table in acts.c: each entry says what its buffer is and how big), and
 * model_memory_floats() sums that table by kind, with no call to model_init: the buffers the
 * formula counts are the buffers model_init allocates, one list for both, and a buffer added
 * to the table is counted. The table's arena starts every buffer at a multiple of ACTS_ALIGN
 * bytes; that padding, a few bytes per buffer, is reported apart (pad_bytes), so the words
 * below are the buffers' own sizes. tests/test_memory.c checks the arena against the table
 * and the formula against counts done by hand.
 */
#ifndef MOE_MEMORY_H
#define MOE_MEMORY_H

#include <stddef.h>

#include "config/config.h"

/* Floats (4 bytes each) by kind. The float fields add up to the return value of
 * model_memory_floats(); int_words, the integer buffers (4-byte ints), are counted apart. */
typedef struct {
    size_t params;      /* P: every tensor of the parameter table; under dist.zero=3 the
                           process's shards S and two windows of the largest stage */
    size_t grads;       /* P: same layout as params; under dist.zero >= 2 too, since the
                           backward accumulates every gradient whole (zero.h) */
    size_t adam;        /* 2P: first and second moments; 2 S under dist.zero >= 1, S the
                           floats of the process's shards of the gradient buckets */
    size_t grad_shard;  /* S under dist.zero >= 2: the part of grads the process keeps summed
                           after the backward's reduce-scatters (inside grads, not added);
                           else P */
    size_t acts_resid;  /* (L + 1) x (N, C): the residual stream at every block boundary */
    size_t acts_attn;   /* per block: norm, q, k, v, probabilities, attention output, ... */
    size_t acts_ffn;    /* per block: dense SwiGLU activations or the MoE block's MoeActs */
    size_t acts_head;   /* final norm, logits (N, V), per-token losses */
    size_t scratch;     /* backward scratch, shared by the blocks */
    size_t int_words;   /* 4-byte integer words: token ids, routing indices, dispatch plans */
    size_t floats;      /* sum of the float fields above (the return value) */
    size_t total_words; /* floats + int_words: bytes = 4 * total_words */
    size_t pad_bytes;   /* bytes of the activation arena's alignment padding (acts.h), apart:
                           model_init allocates 4 * total_words + pad_bytes */
    int held;           /* run states: the micro-batches a pipeline stage holds at once (its
                           activations and scratch are the stage's table that many times,
                           pipe.h); 1 without a pipeline */
} MemoryBreakdown;

/* Floats that model_init(c, B, T) allocates (parameters, gradients, moments, activations,
 * backward scratch); the breakdown, with the integer words and the arena's padding, goes to
 * *out when out is not NULL. Metadata (the parameter and activation tables, pointer arrays,
 * struct headers, the MoE blocks' host-side statistics) and the ops' workspace
 * (Model.state.work_bytes) are not counted: they are a few KiB. */
size_t model_memory_floats(const Config *c, int B, int T, MemoryBreakdown *out);

/* The same for one process of a run of world processes in expert-parallel groups of ep
 * (dist.ep): its num_experts / ep experts (params_table_build_ep) and its activation table with
 * the expert exchange's buffers, for its B sequences of the batch, and under dist.zero (c->zero,
 * world > 1) the moments of its shards; what model_init_dist allocates there. The shards of
 * rank world - 1, the last member of each of its groups, are the largest (dist_shard_range):
 * this is the largest process. With c->tp > 1 (dist.tp) one process of the tensor-parallel
 * grid: its shares of the heads and hidden channels (params_table_build_grid), its N / tp rows
 * of the stream and the head, its heads' and channels' activations, and tensor parallelism's
 * scratch (model/tp.h), B then being the replica's sequences. ep = world = 1 (and tp = 1) is
 * model_memory_floats. */
size_t model_memory_process(const Config *c, int B, int T, int ep, int world, MemoryBreakdown *out);
/* The same for rank (0 .. world - 1): its own shards. */
size_t model_memory_rank(const Config *c, int B, int T, int ep, int world, int rank,
                         MemoryBreakdown *out);

/* Before a model is built: 0 when model_init(c, B, T) fits in the memory this process may
 * still use (the memory available plus free swap, within any cgroup limit, and within
 * train.memory_gib when that is set and smaller), else -1 with a
 * message giving both sizes and the settings to lower. ep > 1: each process holds
 * num_experts / ep experts (expert parallelism); world, the processes (the largest one's
 * shards under dist.zero). Settings so large that the sizes would not
 * fit in a size_t are refused from an estimate in double, without overflow. */
int memory_check(const Config *c, int B, int T, int ep, int world, char *err, int errlen);

#endif
