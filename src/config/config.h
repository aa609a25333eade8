/*
 * config.h: every setting of a run, with its defaults, its key=value name and its checks.
 *
 * Settings come, later winning, from: the embedded defaults, a config file of key=value lines
 * (`--config FILE`, '#' starts a comment), and `--set key=value` overrides. The table in
 * config.c names every key once (name, type, field, range, help); parsing, validation,
 * config.txt and `moe info` all read that one table.
 */
#ifndef MOE_CONFIG_H
#define MOE_CONFIG_H

#include <stdint.h>
#include <stdio.h>

/* The byte vocabulary: the corpus, synthetic data, `moe sample`'s text and the byte tokenizer
 * an HF export writes. A model's own vocabulary is model.vocab (Config.vocab), 256 by default. */
#define MOE_VOCAB 256
#define MOE_VOCAB_MAX (1 << 24) /* model.vocab's largest value: ids fit 3 shard bytes */
/* model.mtp_depth's largest value: the modules' losses are a row of train.csv each */
#define MOE_MTP_MAX 8
#define MOE_PATH_MAX 512

/* train.device: which backend runs the ops (src/backend/backend.h). Not a setting of the
 * model: a checkpoint trained on one continues on another. */
enum { MOE_DEVICE_CPU = 0, MOE_DEVICE_CPU_REF = 1, MOE_DEVICE_CUDA = 2, MOE_DEVICE_CPU_FENCED = 3 };
/* train.precision: the arithmetic of the large products on a GPU (tensor cores); weights,
 * gradients and AdamW moments stay fp32 in every mode, and the CPU backends compute in fp32
 * whatever it says. Not a setting of the model either. */
enum { MOE_PRECISION_FP32 = 0, MOE_PRECISION_TF32 = 1, MOE_PRECISION_BF16 = 2 };
/* train.spike_action: what a run does at a step whose loss or gradient norm is a spike */
enum { MOE_SPIKE_NONE = 0, MOE_SPIKE_SKIP = 1, MOE_SPIKE_ROLLBACK = 2 };
/* train.spike_on: the spikes it acts on, of the loss or the gradient norm, or one of them */
enum { MOE_SPIKE_ON_EITHER = 0, MOE_SPIKE_ON_LOSS = 1, MOE_SPIKE_ON_GRAD = 2 };
/* dist.collectives: the engine that carries the collectives of a multi-process run (each is
 * described in src/parallel/dist.h, which uses this enum). */
typedef enum { DIST_COLL_MPI = 0, DIST_COLL_TEACH = 1, DIST_COLL_NCCL = 2 } DistCollectives;
/* dist.dispatch: what the expert exchange sends (model/ep.h): one row per (token, expert), or
 * one per (token, member), the member summing its experts' weighted outputs */
typedef enum { DIST_DISPATCH_ROWS = 0, DIST_DISPATCH_TOKENS = 1 } DistDispatch;
/* dist.pp_schedule: the order of a pipeline stage's micro-batches (model/pipe.h) */
typedef enum { DIST_PP_GPIPE = 0, DIST_PP_1F1B = 1 } DistPipeSchedule;
/* model.norm: where each block's RMSNorms sit (model.c). pre: one norm before each sublayer;
 * sandwich: a second one on the sublayer's output, before the residual add; dssn: sandwich
 * with that second norm's gain initialised to a depth-scaled constant (Pangu Ultra). */
enum { MOE_NORM_PRE = 0, MOE_NORM_SANDWICH = 1, MOE_NORM_DSSN = 2 };
/* model.qk_norm: an RMSNorm with a gain on the queries and keys before RoPE, over each head's
 * channels (Qwen3) or over the whole projection (OLMoE) */
enum { MOE_QK_NORM_NONE = 0, MOE_QK_NORM_HEAD = 1, MOE_QK_NORM_FULL = 2 };
/* model.attention: multi-head (with grouped key-value heads by model.kv_heads), or DeepSeek's
 * multi-head latent attention (mla.*) */
enum { MOE_ATTN_MHA = 0, MOE_ATTN_MLA = 1 };
/* model.init: the std of the matrices (params.c). default: model.init_std, the output
 * projections divided by sqrt(2 L); tiny: TinyInit, sqrt(1 / (2 C L)) for every matrix and 0.5
 * for the token embedding (Pangu Ultra). model.init_scale multiplies either. */
enum { MOE_INIT_DEFAULT = 0, MOE_INIT_TINY = 1 };

typedef struct {
    /* model.* */
    int vocab;     /* V: token ids 0 .. V - 1; 256: bytes (MOE_VOCAB) */
    int d_model;   /* C: channels of the residual stream */
    int n_layer;   /* L: transformer blocks */
    int n_head;    /* H: query heads */
    int kv_heads;  /* Hkv: key-value heads, dividing H (grouped-query attention); 0: H */
    int head_dim;  /* D: channels of a head; 0: C / H (config_head_dim) */
    int qk_norm;   /* MOE_QK_NORM_*: an RMSNorm on queries and keys before RoPE */
    int attention; /* MOE_ATTN_*: multi-head or multi-head latent attention */
    /* mla.*: latent attention's widths. Queries through a latent of q_rank (0: straight from
     * the stream), keys and values from one latent of kv_rank shared by the heads; a head's
     * query and key are nope_dim channels without rotation and rope_dim rotated (the rotated
     * key shared by the heads), its value v_dim. */
    int mla_q_rank, mla_kv_rank, mla_rope_dim, mla_nope_dim, mla_v_dim;
    int seq_len;      /* T: context length in tokens */
    int d_ff;         /* hidden size of a dense SwiGLU feed-forward */
    float rope_theta; /* RoPE base */
    float init_std;   /* std of the normal init of matrices */
    int norm;         /* MOE_NORM_*: pre-norm, sandwich or depth-scaled sandwich */
    int init;         /* MOE_INIT_*: the default init or TinyInit */
    float init_scale; /* multiplies the std of every matrix (Switch-style init sweeps) */
    int tied;         /* 1: the head is the embedding's transpose, no tensor of its own */
    int mtp_depth;    /* D: multi-token prediction modules (DeepSeek-V3); 0: none */
    float mtp_coef;   /* lambda: the modules' mean loss enters the objective times this */

    /* moe.* */
    int num_experts; /* E: experts per MoE block; 0 makes every block dense */
    int top_k;       /* K: experts per token */
    int d_expert;    /* F: hidden size of one expert; 0 means d_ff */
    int every;       /* an MoE block every this many layers ... */
    int first_dense; /* ... after this many dense layers at the bottom */
    int norm_topk;   /* renormalise the top-k weights to sum to 1 */
    float aux_coef;  /* coefficient of the aux or seq_aux load-balancing loss */
    float z_coef;    /* router z-loss coefficient */

    /* moe.* routing and balancing methods (src/README.md); the enums are in moe/moe_ops.h */
    int score;                  /* MOE_SCORE_*: softmax or sigmoid router scores */
    int topk_before_softmax;    /* top-k on the logits, softmax over the k chosen (Mixtral) */
    float route_scale;          /* multiplies the final gate weights */
    int balance;                /* MOE_BALANCE_*: aux, seq_aux, aux_free or none */
    int bias_update;            /* MOE_BIAS_*: aux-free bias rule, sign or proportional */
    float bias_rate;            /* aux-free bias update rate */
    float jitter;               /* training: router input times U(1 - jitter, 1 + jitter) */
    float noise;                /* training: N(0, noise^2) added to the router logits */
    int num_shared;             /* always-on shared experts per MoE block (one SwiGLU) */
    float router_init_std;      /* std of the router's init; 0: the matrices' (model.init) */
    int routing;                /* MOE_ROUTING_*: token choice or expert choice */
    float ec_capacity;          /* expert choice: cap = ceil(ec_capacity * N * top_k / E) */
    float capacity_factor;      /* token choice: per-expert capacity factor; 0 = dropless */
    int capacity_scope;         /* MOE_CAP_*: capacity over the micro-batch or per sequence */
    int min_capacity;           /* lower bound of the capacity */
    int drop_policy;            /* MOE_DROP_*: keep by position or by score when over capacity */
    int second_expert_random;   /* GShard: dispatch the 2nd expert w.p. min(1, 2 w_2) */
    float eval_capacity_factor; /* evaluation's factor; < 0 = capacity_factor, 0 = dropless */
    int padded;                 /* every expert computes exactly capacity rows */
    int router_precision;       /* MOE_ROUTER_*: fp32, or the router rounded to bf16 */
    int balance_scope;          /* MOE_SCOPE_*: the aux loss's f over the micro-batch or the
                                   optimizer step's whole batch */
    int balance_groups;         /* 0: the aux loss balances each expert; G: G groups of E / G */
    int n_group;                /* 0: no routing groups; G: the experts in G groups of E / G */
    int topk_group;             /* n_group: the groups a token may choose from; 0 = all */

    /* train.* */
    int batch;    /* B: sequences per micro-batch */
    int accum;    /* micro-batches per optimizer step */
    int steps;    /* optimizer steps */
    float lr;     /* peak learning rate */
    float min_lr; /* learning rate at the end of the cosine, as a fraction of lr */
    int warmup;   /* linear warm-up steps */
    float weight_decay;
    float beta1, beta2, eps; /* AdamW */
    float clip;              /* global gradient norm clip; 0 disables */
    uint64_t seed;
    int eval_every;     /* steps between validation evals; 0 disables */
    int eval_batches;   /* micro-batches per validation eval */
    int ckpt_every;     /* steps between checkpoints; 0 = only at the end */
    int log_every;      /* steps between progress lines */
    int threads;        /* 0 = OpenMP's default */
    float memory_gib;   /* a process's memory budget (train.memory_gib); 0: the machine's */
    int device;         /* MOE_DEVICE_*: the backend a step runs on (src/backend/backend.h) */
    int precision;      /* MOE_PRECISION_*: the large products' arithmetic on a GPU */
    int spike_window;   /* the trailing steps a spike is measured against */
    float spike_k;      /* a spike: a value above the window's mean + spike_k std */
    int spike_action;   /* MOE_SPIKE_*: nothing, the update skipped, or a rollback */
    int spike_on;       /* MOE_SPIKE_ON_*: the spikes it acts on */
    int rollback_every; /* steps between the checkpoints a rollback returns to */
    int rollback_skip;  /* a rollback skips its undone steps' batches and this many more */
    int max_rollbacks;  /* a spike after this many rollbacks ends the run (exit status 3) */
    float diverge_loss; /* a loss above this (or not finite) ends the run as diverged; 0: only
                           a loss that is not finite */

    /* data.* */
    char train[MOE_PATH_MAX];   /* training shard */
    char val[MOE_PATH_MAX];     /* validation shard */
    char mix[MOE_PATH_MAX];     /* the domains' shares of the training windows (io/mix.h) */
    float mix_temperature;      /* > 0: shares proportional to size^(1 / mix_temperature) */
    char mix_end[MOE_PATH_MAX]; /* the mix of the last mix_end_frac of the steps, or none */
    float mix_end_frac;
    int corrupt_from;    /* the first of data.corrupt_batches corrupted batches; -1: none */
    int corrupt_batches; /* batches of the data stream made random tokens (a spike's cause) */

    /* dist.* (src/parallel/dist.h): how a run is spread over processes. Not shape keys: a
     * checkpoint holds every expert and loads at any dist.ep. */
    int tp;          /* processes per tensor-parallel group (dist.tp) */
    int ep;          /* processes per expert-parallel group (each holds E / ep experts) */
    int zero;        /* ZeRO stage 0..3: what is sharded over each tensor's group (zero.h) */
    int pp;          /* pipeline stages (dist.pp): each holds consecutive layers (model/pipe.h) */
    int pp_schedule; /* DistPipeSchedule: gpipe or 1f1b */
    char pp_layers[MOE_PATH_MAX]; /* each stage's layer count, "2,4,4,2", or "even" */
    float timeout;   /* longest wait for a peer, seconds */
    int collectives; /* DistCollectives: the engine of the collectives (parallel/dist.h) */
    int dispatch;    /* DistDispatch: rows per (token, expert) or per (token, member) */
    int overlap;     /* 1: a block's gradient sums start when its backward is done */
    float bucket_mb; /* the largest bucket of gradients summed as one (MiB; 0: one tensor) */
} Config;

/* The embedded defaults (the model `moe train` trains with no arguments). */
void config_defaults(Config *c);

/* Apply one "key=value" assignment. On error returns -1 and writes a message that names the
 * problem and what to do into err (size errlen), e.g. the nearest valid key for a typo. */
int config_set(Config *c, const char *assignment, char *err, int errlen);

/* Apply every key=value line of a file; errors name the file and line. Only a regular file of
 * at most MOE_CONFIG_MAX_BYTES of text is read (a NUL byte is an error). */
#define MOE_CONFIG_MAX_BYTES (1u << 20)
int config_load_file(Config *c, const char *path, char *err, int errlen);

/* Apply every "key = value" line of text (blank lines and # comments skipped), config_write's
 * format; -1 at the first line refused, its number in *bad_line and config_set's message in err. */
int config_apply_text(Config *c, const char *text, int *bad_line, char *err, int errlen);

/* Cross-field checks (top_k <= num_experts, d_model % n_head == 0, positive sizes, ...). */
int config_validate(const Config *c, char *err, int errlen);

/* The cross-field half of config_validate (config_check.c): settings that only make sense
 * together. Returns 0, or -1 with a message naming the keys involved. */
int config_check_combinations(const Config *c, char *err, int errlen);

/* The checks that depend on the number of processes, world (config_check.c): dist.ep divides
 * it and moe.num_experts, train.batch splits evenly over it, and with world > 1 no setting
 * whose result would depend on how the batch is split. config_validate runs it with
 * world = dist.ep; the trainer again with the real count. */
int config_check_dist(const Config *c, int world, char *err, int errlen);

/* Write every resolved setting as key=value lines (the format config_load_file reads). */
void config_write(const Config *c, FILE *f);
/* The same text as a malloc'ed, NUL-terminated string (checkpoints, safetensors metadata). */
char *config_to_text(const Config *c);

/* Derived quantities. */
/* Whether block `layer` is an MoE block; a multi-token prediction module's block (layer
 * n_layer + k - 1, module k) is of the last layer's kind. */
int config_is_moe_layer(const Config *c, int layer);
int config_expert_hidden(const Config *c); /* d_expert, or d_ff when d_expert is 0 */
/* The attention's widths a head: key-value heads (kv_heads, or n_head when it is 0 or under
 * latent attention), query and key channels (head_dim, or d_model / n_head when it is 0;
 * nope_dim + rope_dim under latent attention), value channels (the same, v_dim under latent
 * attention) and rotated channels (all of a head's, rope_dim under latent attention). */
static inline int config_kv_heads(const Config *c) { /* inline: config_check.c reads it too */
    return c->kv_heads && c->attention != MOE_ATTN_MLA ? c->kv_heads : c->n_head;
}
int config_head_dim(const Config *c);
int config_value_dim(const Config *c);
int config_rope_dim(const Config *c);

/* Settings that fix the shapes of the parameters: two configs with equal shapes can share
 * checkpoints. Returns 1 when equal, otherwise 0 and a message naming the first difference. */
int config_same_shape(const Config *a, const Config *b, char *err, int errlen);

/* Pipeline stage s of dist.pp: its layers [*first, *last). dist.pp_layers gives each stage's
 * count; "even" splits model.n_layer as evenly as it goes, layer l on stage floor(l pp / n_layer)
 * (the first holds the embedding too, the last the head and the loss). Returns 0, or -1 with
 * a message when dist.pp_layers is not dist.pp counts of 1 or more adding up to model.n_layer. */
int config_pp_stage(const Config *c, int s, int *first, int *last, char *err, int errlen);

/* `moe info --keys`: one line per key with its default, help and range, in table order. */
void config_print_keys(FILE *f);
int config_key_count(void); /* number of keys in the table (lines config_write writes) */

#endif
