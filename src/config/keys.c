/*
 * keys.c: the one table of settings (config.c reads it; the header comment there says how).
 *
 * Each row names a setting once: its key=value name, its type, where it lives in Config
 * (offsetof), its default as text, its inclusive range and its help. A new setting is one
 * new row here plus its Config field.
 */
#include "config/keys.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>

#include "config/config.h"
#include "moe/moe_ops.h"

/* The enum keys store the index of their name in the row's choices: keep the orders equal. */
_Static_assert(MOE_SCORE_SOFTMAX == 0 && MOE_SCORE_SIGMOID == 1, "moe.score choices");
_Static_assert(MOE_DEVICE_CPU == 0 && MOE_DEVICE_CPU_REF == 1 && MOE_DEVICE_CUDA == 2 &&
                   MOE_DEVICE_CPU_FENCED == 3,
               "train.device choices");
_Static_assert(DIST_COLL_MPI == 0 && DIST_COLL_TEACH == 1 && DIST_COLL_NCCL == 2,
               "dist.collectives choices");
_Static_assert(DIST_DISPATCH_ROWS == 0 && DIST_DISPATCH_TOKENS == 1, "dist.dispatch choices");
_Static_assert(DIST_PP_GPIPE == 0 && DIST_PP_1F1B == 1, "dist.pp_schedule choices");
_Static_assert(MOE_PRECISION_FP32 == 0 && MOE_PRECISION_TF32 == 1 && MOE_PRECISION_BF16 == 2,
               "train.precision choices");
_Static_assert(MOE_BALANCE_AUX == 0 && MOE_BALANCE_SEQ_AUX == 1 && MOE_BALANCE_AUX_FREE == 2 &&
                   MOE_BALANCE_NONE == 3,
               "moe.balance choices");
_Static_assert(MOE_BIAS_SIGN == 0 && MOE_BIAS_PROPORTIONAL == 1, "moe.bias_update choices");
_Static_assert(MOE_ROUTING_TOKEN_CHOICE == 0 && MOE_ROUTING_EXPERT_CHOICE == 1,
               "moe.routing choices");
_Static_assert(MOE_CAP_BATCH == 0 && MOE_CAP_SEQUENCE == 1, "moe.capacity_scope choices");
_Static_assert(MOE_DROP_POSITION == 0 && MOE_DROP_SCORE == 1, "moe.drop_policy choices");
_Static_assert(MOE_ATTN_MHA == 0 && MOE_ATTN_MLA == 1, "model.attention choices");
_Static_assert(MOE_QK_NORM_NONE == 0 && MOE_QK_NORM_HEAD == 1 && MOE_QK_NORM_FULL == 2,
               "model.qk_norm choices");
_Static_assert(MOE_NORM_PRE == 0 && MOE_NORM_SANDWICH == 1 && MOE_NORM_DSSN == 2,
               "model.norm choices");
_Static_assert(MOE_INIT_DEFAULT == 0 && MOE_INIT_TINY == 1, "model.init choices");
_Static_assert(MOE_ROUTER_FP32 == 0 && MOE_ROUTER_BF16_LOGITS == 1 && MOE_ROUTER_BF16 == 2,
               "moe.router_precision choices");
_Static_assert(MOE_SCOPE_MICRO == 0 && MOE_SCOPE_GLOBAL == 1, "moe.balance_scope choices");

#define NOMAX HUGE_VAL
#define ENUM_ROW(name, field, def, choices, help)                                                  \
    { name, T_ENUM, offsetof(Config, field), def, 0, 0, 0, help, choices }
#define ROW(type, name, field, def, lo, hi, flags, help)                                           \
    { name, type, offsetof(Config, field), def, lo, hi, flags, help, NULL }

const Key CONFIG_KEYS[] = {
    ROW(T_INT, "model.vocab", vocab, "256", 2, MOE_VOCAB_MAX, K_SHAPE,
        "V: token ids 0 .. V - 1, the rows of the embedding and the head; 256: bytes (the corpus, "
        "moe synth). The shards' vocabulary must be V; a model of any other V needs a tokenizer "
        "to print text"),
    ROW(T_INT, "model.d_model", d_model, "128", 1, 65536, K_SHAPE,
        "C: channels of the residual stream"),
    ROW(T_INT, "model.n_layer", n_layer, "4", 1, 1024, K_SHAPE, "L: transformer blocks"),
    ROW(T_INT, "model.n_head", n_head, "4", 1, 1024, K_SHAPE, "H: attention (query) heads"),
    ROW(T_INT, "model.kv_heads", kv_heads, "0", 0, 1024, K_SHAPE,
        "key-value heads, dividing n_head: grouped-query attention (1: multi-query); 0: as many "
        "as n_head (multi-head)"),
    ROW(T_INT, "model.head_dim", head_dim, "0", 0, 65536, K_SHAPE,
        "D: channels of a head (even: RoPE rotates pairs); 0: d_model / n_head"),
    {"model.qk_norm", T_ENUM, offsetof(Config, qk_norm), "none", 0, 0, K_SHAPE,
     "an RMSNorm with a gain on queries and keys before RoPE: none, head (over each head's "
     "channels, one gain of head_dim shared by the heads: Qwen3) or full (over the whole "
     "projection: OLMoE)",
     "none|head|full"},
    {"model.attention", T_ENUM, offsetof(Config, attention), "mha", 0, 0, K_SHAPE,
     "mha: multi-head attention (grouped key-value heads with model.kv_heads); mla: DeepSeek's "
     "multi-head latent attention (mla.*): keys and values from one latent shared by the heads",
     "mha|mla"},
    ROW(T_INT, "mla.q_rank", mla_q_rank, "0", 0, 65536, K_SHAPE,
        "latent attention: the queries' latent width (an RMSNorm on it); 0: queries straight from "
        "the stream"),
    ROW(T_INT, "mla.kv_rank", mla_kv_rank, "0", 0, 65536, K_SHAPE,
        "latent attention: the keys' and values' latent width, shared by the heads (an RMSNorm on "
        "it); what decoding caches, with mla.rope_dim"),
    ROW(T_INT, "mla.rope_dim", mla_rope_dim, "0", 0, 65536, K_SHAPE,
        "latent attention: a head's rotated query and key channels (even); the rotated key is one, "
        "shared by the heads"),
    ROW(T_INT, "mla.nope_dim", mla_nope_dim, "0", 0, 65536, K_SHAPE,
        "latent attention: a head's query and key channels without rotation"),
    ROW(T_INT, "mla.v_dim", mla_v_dim, "0", 0, 65536, K_SHAPE,
        "latent attention: a head's value channels"),
    ROW(T_INT, "model.seq_len", seq_len, "128", 1, 1 << 20, 0, "T: context length in tokens"),
    ROW(T_INT, "model.d_ff", d_ff, "512", 1, 1 << 20, K_SHAPE,
        "hidden size of a dense SwiGLU feed-forward"),
    ROW(T_FLOAT, "model.rope_theta", rope_theta, "10000", 0, NOMAX, K_OPEN_MIN, "RoPE base"),
    ROW(T_FLOAT, "model.init_std", init_std, "0.02", 0, 1, K_OPEN_MIN,
        "std of the normal init of matrices"),
    {"model.norm", T_ENUM, offsetof(Config, norm), "pre", 0, 0, K_SHAPE,
     "RMSNorm placement: pre (before each sublayer), sandwich (and on its output) or dssn "
     "(sandwich, the output norm's gain starting at 0.283 / sqrt(L) after attention and 0.432 / "
     "sqrt(L) after the feed-forward: Pangu Ultra's depth-scaled sandwich norm)",
     "pre|sandwich|dssn"},
    ENUM_ROW("model.init", init, "default", "default|tiny",
             "init of the matrices: default (model.init_std, output projections / sqrt(2 L)) "
             "or tiny (TinyInit: std sqrt(1 / (2 d_model L)) for all, 0.5 for the embedding)"),
    ROW(T_FLOAT, "model.init_scale", init_scale, "1", 0, NOMAX, K_OPEN_MIN,
        "multiplies the init std of every matrix (Switch Transformer's init-scale sweep)"),
    ROW(T_BOOL, "model.tied", tied, "0", 0, 1, K_SHAPE,
        "1: the head is the embedding's transpose (logits = lnf tok_emb^T; no head tensor, the "
        "embedding's gradient gets the head's too); 0: a head of its own (V, C)"),
    ROW(T_INT, "model.mtp_depth", mtp_depth, "0", 0, MOE_MTP_MAX, K_SHAPE,
        "D: multi-token prediction modules (DeepSeek-V3), in training only: at position i, "
        "module k predicts token i + k + 1 from module k - 1's output (the main trunk's for k = 1) "
        "and token i + k's embedding, through one block of the last layer's kind; 0: none"),
    ROW(T_FLOAT, "model.mtp_coef", mtp_coef, "0.3", 0, NOMAX, 0,
        "lambda: the objective adds lambda / mtp_depth times the sum of the modules' losses"),

    ROW(T_INT, "moe.num_experts", num_experts, "8", 0, 4096, K_SHAPE,
        "E: experts per MoE block; 0 makes every block dense"),
    ROW(T_INT, "moe.top_k", top_k, "2", 1, 4096, 0, "K: experts per token"),
    ROW(T_INT, "moe.d_expert", d_expert, "256", 0, 1 << 20, K_SHAPE,
        "F: hidden size of one expert; 0 means model.d_ff"),
    ROW(T_INT, "moe.every", every, "1", 1, 1024, K_SHAPE,
        "an MoE block every this many layers (after moe.first_dense)"),
    ROW(T_INT, "moe.first_dense", first_dense, "0", 0, 1024, K_SHAPE,
        "dense blocks at the bottom before the first MoE block"),
    ROW(T_BOOL, "moe.norm_topk", norm_topk, "1", 0, 1, 0,
        "renormalise the top-k router weights to sum to 1 (0/1)"),
    ROW(T_FLOAT, "moe.aux_coef", aux_coef, "0.01", 0, NOMAX, 0,
        "coefficient of the aux or seq_aux load-balancing loss (moe.balance)"),
    ROW(T_FLOAT, "moe.z_coef", z_coef, "0.001", 0, NOMAX, 0, "router z-loss coefficient"),
    ENUM_ROW("moe.score", score, "softmax", "softmax|sigmoid",
             "router scores: softmax over the experts, or a sigmoid per expert (DeepSeek-V3)"),
    ROW(T_BOOL, "moe.topk_before_softmax", topk_before_softmax, "0", 0, 1, 0,
        "top-k on the logits, then softmax over the k chosen (Mixtral); softmax scores only"),
    ROW(T_FLOAT, "moe.route_scale", route_scale, "1", 0, NOMAX, K_OPEN_MIN,
        "multiplies the final gate weights"),
    ENUM_ROW("moe.balance", balance, "aux", "aux|seq_aux|aux_free|none",
             "load balancing: Switch aux loss, per-sequence aux loss, aux-free bias, or none"),
    ENUM_ROW("moe.bias_update", bias_update, "sign", "sign|proportional",
             "aux_free bias step: rate * sign(mean - load), or rate * (mean - load) / mean"),
    ROW(T_FLOAT, "moe.bias_rate", bias_rate, "1e-3", 0, NOMAX, 0,
        "aux_free bias update rate per optimizer step"),
    ROW(T_FLOAT, "moe.jitter", jitter, "0", 0, 1, K_OPEN_MAX,
        "training only: multiply the router input by U(1 - jitter, 1 + jitter) (Switch)"),
    ROW(T_FLOAT, "moe.noise", noise, "0", 0, NOMAX, 0,
        "training only: add N(0, noise^2) to the router logits"),
    ROW(T_INT, "moe.num_shared", num_shared, "0", 0, 4096, K_SHAPE,
        "shared experts every token passes through (one SwiGLU of hidden num_shared * F)"),
    ROW(T_FLOAT, "moe.router_init_std", router_init_std, "0", 0, NOMAX, 0,
        "std of the router's init; 0: as every matrix (model.init, model.init_scale). A large "
        "one makes the first routing choices stick (chapter 6's collapse)"),
    ENUM_ROW("moe.routing", routing, "token_choice", "token_choice|expert_choice",
             "each token picks its top_k experts, or each expert its best tokens of the "
             "micro-batch (sees later tokens: not causal)"),
    ROW(T_FLOAT, "moe.ec_capacity", ec_capacity, "1", 0, NOMAX, K_OPEN_MIN,
        "expert_choice: each expert picks ceil(ec_capacity * tokens * top_k / num_experts)"),
    ROW(T_FLOAT, "moe.capacity_factor", capacity_factor, "0", 0, NOMAX, 0,
        "token_choice: each expert takes at most max(min_capacity, ceil(capacity_factor * "
        "tokens * top_k / num_experts)) assignments, the rest drop; 0 = dropless"),
    ENUM_ROW("moe.capacity_scope", capacity_scope, "batch", "batch|sequence",
             "capacity over the micro-batch's tokens, or per sequence of seq_len tokens"),
    ROW(T_INT, "moe.min_capacity", min_capacity, "4", 1, INT_MAX, 0,
        "lower bound of the per-expert capacity (capacity_factor > 0)"),
    ENUM_ROW("moe.drop_policy", drop_policy, "position", "position|score",
             "an over-full expert keeps its earliest tokens, or its highest-scoring ones"),
    ROW(T_BOOL, "moe.second_expert_random", second_expert_random, "0", 0, 1, 0,
        "training, top_k 2, capacity_factor > 0: dispatch the 2nd expert w.p. min(1, 2 w_2)"),
    ROW(T_FLOAT, "moe.eval_capacity_factor", eval_capacity_factor, "-1", -1, NOMAX, 0,
        "capacity factor of evaluation; -1 = capacity_factor, 0 = dropless"),
    ROW(T_BOOL, "moe.padded", padded, "0", 0, 1, 0,
        "capacity_factor > 0: every expert computes exactly capacity rows (zero padding)"),
    ENUM_ROW("moe.router_precision", router_precision, "fp32", "fp32|bf16_logits|bf16",
             "the router's arithmetic, emulated by rounding to bfloat16: fp32; bf16_logits (the "
             "logits rounded); bf16 (its input and weights, logits and scores rounded)"),
    ENUM_ROW("moe.balance_scope", balance_scope, "micro", "micro|global",
             "moe.balance=aux counts f over each micro-batch, or over the optimizer step's "
             "micro-batches so far (the global batch at its last one)"),
    ROW(T_INT, "moe.balance_groups", balance_groups, "0", 0, 4096, 0,
        "0: the aux loss balances every expert; G >= 2: it balances G groups of num_experts / "
        "G consecutive experts (as G devices hold them), free inside a group"),
    ROW(T_INT, "moe.n_group", n_group, "0", 0, 64, 0,
        "group-limited routing (DeepSeek-V3): 0 = none; G >= 2 splits the experts into G "
        "groups of num_experts / G consecutive ones, each scored by the sum of its two best "
        "scores (aux_free bias included), and a token picks its top_k only in its "
        "moe.topk_group best groups"),
    ROW(T_INT, "moe.topk_group", topk_group, "0", 0, 64, 0,
        "with moe.n_group: the groups each token may pick its experts from, 1 to n_group "
        "(n_group: ordinary top-k); 0 = all"),

    ROW(T_INT, "train.batch", batch, "16", 1, 1 << 20, 0, "B: sequences per micro-batch"),
    ROW(T_INT, "train.accum", accum, "1", 1, 1 << 20, 0, "micro-batches per optimizer step"),
    ROW(T_INT, "train.steps", steps, "600", 1, INT_MAX, 0, "optimizer steps"),
    ROW(T_FLOAT, "train.lr", lr, "3e-3", 0, NOMAX, 0, "peak learning rate"),
    ROW(T_FLOAT, "train.min_lr", min_lr, "0.1", 0, 1, 0,
        "learning rate at the end of the cosine, as a fraction of train.lr"),
    ROW(T_INT, "train.warmup", warmup, "50", 0, INT_MAX, 0, "linear warm-up steps"),
    ROW(T_FLOAT, "train.weight_decay", weight_decay, "0.1", 0, NOMAX, 0,
        "AdamW decoupled weight decay"),
    ROW(T_FLOAT, "train.beta1", beta1, "0.9", 0, 1, K_OPEN_MAX, "AdamW first-moment decay"),
    ROW(T_FLOAT, "train.beta2", beta2, "0.95", 0, 1, K_OPEN_MAX, "AdamW second-moment decay"),
    ROW(T_FLOAT, "train.eps", eps, "1e-8", 0, NOMAX, K_OPEN_MIN, "AdamW denominator epsilon"),
    ROW(T_FLOAT, "train.clip", clip, "1.0", 0, NOMAX, 0, "global gradient-norm clip; 0 disables"),
    ROW(T_U64, "train.seed", seed, "1337", 0, 0, 0, "seed of init, data order and sampling"),
    ROW(T_INT, "train.eval_every", eval_every, "100", 0, INT_MAX, 0,
        "steps between validation evals; 0 disables"),
    ROW(T_INT, "train.eval_batches", eval_batches, "8", 1, INT_MAX, 0,
        "micro-batches per validation eval"),
    ROW(T_INT, "train.ckpt_every", ckpt_every, "200", 0, INT_MAX, 0,
        "steps between checkpoints; 0 = only at the end"),
    ROW(T_INT, "train.log_every", log_every, "10", 1, INT_MAX, 0, "steps between progress lines"),
    ROW(T_INT, "train.threads", threads, "0", 0, 4096, 0, "OpenMP threads; 0 = OpenMP's default"),
    ROW(T_FLOAT, "train.memory_gib", memory_gib, "0", 0, NOMAX, 0,
        "a process's memory budget in GiB: a run whose table of one process's memory (weights, "
        "gradients, moments, activations) exceeds it is refused before anything is allocated; "
        "0: the memory the machine has available"),
    ENUM_ROW("train.device", device, "cpu", "cpu|cpu-ref|cuda|cpu-fenced",
             "the backend of the ops: cpu (fast, OpenBLAS), cpu-ref (the plain reference loops, "
             "slow), cuda (one NVIDIA GPU; a build of make cuda) or cpu-fenced (cpu's ops with "
             "a device's memory, unreadable by the host: a check of the engine)"),
    ENUM_ROW("train.precision", precision, "fp32", "fp32|tf32|bf16",
             "the large products' arithmetic on a GPU: fp32, tf32 or bf16 tensor cores (fp32 "
             "weights, gradients and moments in every mode; the CPU computes fp32)"),
    ROW(T_INT, "train.spike_window", spike_window, "20", 2, INT_MAX, 0,
        "a loss or gradient-norm spike is measured against this many preceding steps"),
    ROW(T_FLOAT, "train.spike_k", spike_k, "4", 0, NOMAX, K_OPEN_MIN,
        "a spike: a step's value above the window's mean plus spike_k standard deviations"),
    ENUM_ROW("train.spike_action", spike_action, "none", "none|skip|rollback",
             "at a step whose loss or gradient norm is a spike: nothing (train.csv marks it), "
             "skip its update (weights and AdamW moments untouched), or roll back to the last "
             "checkpoint kept for it and skip the batches that spiked"),
    ENUM_ROW("train.spike_on", spike_on, "either", "either|loss|grad",
             "the spikes train.spike_action acts on: of the loss or the gradient norm (either), "
             "of the loss alone, or of the gradient norm alone"),
    ROW(T_INT, "train.rollback_every", rollback_every, "50", 1, INT_MAX, 0,
        "spike_action=rollback: steps between the checkpoints a rollback returns to "
        "(rollback.bin, kept at each multiple with no spike of train.spike_on's kind in the "
        "rollback_every steps up to it; a spike before the first is skipped instead)"),
    ROW(T_INT, "train.rollback_skip", rollback_skip, "10", 0, INT_MAX, 0,
        "spike_action=rollback: a rollback skips the batches of the steps it undoes (the "
        "spike's among them) and this many batches after them"),
    ROW(T_INT, "train.max_rollbacks", max_rollbacks, "3", 0, INT_MAX, 0,
        "spike_action=rollback: a spike after this many rollbacks ends the run (exit status 3)"),
    ROW(T_FLOAT, "train.diverge_loss", diverge_loss, "0", 0, NOMAX, 0,
        "a training loss above this ends the run as diverged (exit status 3); 0: only a loss "
        "that is not a finite number"),

    ROW(T_STR, "data.train", train, "data/corpus/train.bin", 0, 0, K_PATH, "training shard"),
    ROW(T_STR, "data.val", val, "data/corpus/val.bin", 0, 0, K_PATH, "validation shard"),
    ROW(T_STR, "data.mix", mix, "natural", 0, 0, 0,
        "each domain's share of the training windows: natural (the shard as it is), uniform, or "
        "name:weight,... (en:0.4,code:0.2: the domains not named share the rest by size; "
        "name:0 leaves one out)"),
    ROW(T_FLOAT, "data.mix_temperature", mix_temperature, "0", 0, NOMAX, 0,
        "> 0: each domain's share proportional to its size^(1/T) (1 natural, large nearly "
        "uniform), with data.mix=natural; 0: data.mix decides"),
    ROW(T_STR, "data.mix_end", mix_end, "none", 0, 0, 0,
        "the mix of the last data.mix_end_frac of train.steps (as data.mix), or none"),
    ROW(T_FLOAT, "data.mix_end_frac", mix_end_frac, "0", 0, 1, K_OPEN_MAX,
        "the fraction of train.steps at the end drawn with data.mix_end"),
    ROW(T_INT, "data.corrupt_from", corrupt_from, "-1", -1, INT_MAX, 0,
        "a spike made on purpose: the batches data.corrupt_from .. + data.corrupt_batches - 1 "
        "of the data stream (the batch of step s is batch s, but for batches a rollback skipped) "
        "are random tokens, as a corrupted stretch of a corpus; -1: none"),
    ROW(T_INT, "data.corrupt_batches", corrupt_batches, "0", 0, INT_MAX, 0,
        "with data.corrupt_from: how many batches are corrupted"),

    ROW(T_INT, "dist.tp", tp, "1", 1, 4096, 0,
        "tensor parallelism: processes that split each block's heads and the dense and "
        "shared feed-forward's hidden channels, the vocabulary, and the sequence between "
        "blocks (divides model.n_head, model.kv_heads, model.d_ff, model.vocab and a "
        "replica's tokens; the process count is dist.tp x dist.ep x data-parallel)"),
    ROW(T_INT, "dist.ep", ep, "1", 1, 4096, 0,
        "expert parallelism: processes that share one copy of the experts (divides the "
        "mpirun process count and moe.num_experts)"),
    ROW(T_INT, "dist.zero", zero, "0", 0, 3, 0,
        "sharding over each tensor's data-parallel group: 0 replicated states, 1 AdamW moments "
        "sharded, 2 also gradients reduce-scattered, 3 also weights sharded and gathered a "
        "block at a time"),
    ROW(T_INT, "dist.pp", pp, "1", 1, 1024, 0,
        "pipeline parallelism: stages that each hold consecutive layers (the first the "
        "embedding, the last the head), activations sent forward and gradients back between "
        "neighbours, train.accum micro-batches in flight (the process count is dist.pp x "
        "dist.tp x dist.ep x data-parallel)"),
    ENUM_ROW("dist.pp_schedule", pp_schedule, "1f1b", "gpipe|1f1b",
             "the order of a stage's micro-batches: gpipe (every forward, then every backward: "
             "train.accum micro-batches' activations held) or 1f1b (a backward after each "
             "forward once the pipeline is full: at most dist.pp held); `moe train "
             "--print-schedule` lists it"),
    ROW(T_STR, "dist.pp_layers", pp_layers, "even", 0, 0, 0,
        "each pipeline stage's layer count, first stage first (2,4,4,2: adding up to "
        "model.n_layer), or even"),
    ROW(T_FLOAT, "dist.timeout", timeout, "120", 0, NOMAX, K_OPEN_MIN,
        "seconds a process waits for a peer before it names the peer and ends the job"),
    ENUM_ROW("dist.collectives", collectives, "mpi", "mpi|teach|nccl",
             "the collectives of a multi-process run: mpi (MPI's own: the library's ring and "
             "tree algorithms), teach (chapter 3's, built from point-to-point messages: "
             "linear, bit for bit repeatable, names a silent peer) or nccl (train.device=cuda: "
             "NCCL on the GPUs' memory, MPI's for the host's; a build of make cuda MPI=1)"),
    ENUM_ROW("dist.dispatch", dispatch, "rows", "rows|tokens",
             "what the expert exchange sends: rows (a row per token and expert, chapter 3) or "
             "tokens (a token once per process holding any of its experts, which returns their "
             "weighted sum: fewer bytes when a token's experts share a process, as "
             "moe.n_group arranges)"),
    ROW(T_INT, "dist.overlap", overlap, "1", 0, 1, 0,
        "1: sum a block's gradients over the processes while the earlier blocks' backward "
        "runs; 0: all after the backward"),
    ROW(T_FLOAT, "dist.bucket_mb", bucket_mb, "25", 0, NOMAX, 0,
        "neighbouring gradient tensors of a block are summed as one bucket of up to this many "
        "MiB; 0: each tensor alone"),
};

const int CONFIG_NKEYS = (int)(sizeof CONFIG_KEYS / sizeof CONFIG_KEYS[0]);
