/*
 * plan.h: `moe plan`, the cost of training a model on a cluster, worked out before anyone
 * launches it. Chapter 7 of the handbook derives every formula used here.
 *
 * Three descriptions go in, each a set of key=value settings (plan_keys.c lists them all;
 * the model's keys the engine also has are the engine's own, config/keys.c; presets are such
 * sets, plan_presets.c):
 *   - the model (PlanModel): vocabulary, width, depth, attention (multi-head with grouped
 *     key-value heads, or latent attention), dense layers first, experts, shared experts,
 *     expert hidden size, top-k, sequence length;
 *   - the cluster (PlanCluster): GPUs, GPUs per node, memory per GPU, peak FLOP/s of the
 *     products in fp32, bf16 and fp8, HBM bandwidth, bandwidth inside a node and between
 *     nodes, and the fraction of peak the products reach;
 *   - the training (PlanTrain): the products' precision, the global batch, the bytes of every
 *     kind of state, the sharding of the optimizer (ZeRO stage), the busiest expert's load, what
 *     the expert exchange can hide, node-limited routing; and the engine that trains:
 *     `moe.c` (this engine as built: fp32 everywhere, data and expert parallelism only, its
 *     memory the exact table of model/memory.h) or `mixed` (a bf16 mixed-precision framework
 *     at scale: tensor, pipeline, expert and data parallelism, flash attention).
 * A layout (PlanLayout: tp, pp, ep, vpp; dp follows from the GPU count) gives one PlanResult:
 * memory per GPU, the communication of each parallel dimension in bytes and seconds, the
 * pipeline bubble, the step time and the MFU. plan_search ranks every valid layout.
 *
 * Units: counts are doubles (exact up to 2^53), bytes are bytes, memory in GB (10^9 bytes),
 * bandwidths in GB/s one direction per GPU, time in seconds. A GPU sold as "80 GB" holds about
 * 80 GiB (85.9e9 bytes); the planner lets a layout use 80e9 of them, and the 7 % left stands for
 * what the runtime keeps (CUDA context, the communication library's buffers, the allocator's
 * fragmentation).
 */
#ifndef MOE_PLAN_PLAN_H
#define MOE_PLAN_PLAN_H

#include <stdio.h>

#include "config/config.h"

#define MAX_PLAN_LAYERS 1024 /* and so at most as many pipeline stages */
/* The planner's bounds on counts (plan_keys.c refuses a setting above them; the engine's keys
 * keep the engine's own, lower bounds): beyond any real cluster or model, and low enough that
 * a layout's sizes (dp, the replicas of an expert, a micro-batch) are exact ints and no
 * product of them wraps. */
#define PLAN_MAX_GPUS 1048576    /* 2^20 GPUs in all, and so in a node or a parallel group */
#define PLAN_MAX_BATCH 16777216  /* 2^24 sequences a step */
#define PLAN_MAX_WIDTH 1048576   /* 2^20: a width, hidden size, rank or head dimension */
#define PLAN_MAX_TOKENS 16777216 /* 2^24: a vocabulary, or the tokens of a sequence */
#define PLAN_MAX_HEADS 65536     /* 2^16 heads */

/* train.precision: the products' */
enum { PLAN_PREC_FP32, PLAN_PREC_BF16, PLAN_PREC_FP8 };
/* train.engine */
enum { PLAN_ENGINE_MOEC, PLAN_ENGINE_MIXED };
/* layout.recompute: nothing; norms and activation functions (and latent attention's
 * up-projections); that and the MoE blocks (their experts and exchange run again); whole
 * layers */
enum { PLAN_RC_NONE, PLAN_RC_SELECTIVE, PLAN_RC_EXPERTS, PLAN_RC_FULL };

typedef struct {
    /* The keys the engine has, in its own Config, with its names and types, read and checked
     * through its table (config/keys.c, config_set): model.vocab, model.d_model, model.n_layer,
     * model.n_head, model.kv_heads, model.head_dim, model.qk_norm, model.d_ff, model.seq_len,
     * model.norm, model.tied, moe.num_experts, moe.top_k, moe.d_expert (0: model.d_ff),
     * moe.num_shared, moe.first_dense, moe.every, train.accum. A model not
     * given has them at 0 (dense, every 1). With --config it is the whole config, whose
     * exact memory the moe.c engine plans. */
    Config c;
} PlanModel;

typedef struct {
    double gpus, gpus_per_node, memory_gb;
    double peak_tflops[3]; /* dense products a GPU, TFLOP/s, at each PLAN_PREC_* */
    double efficiency;     /* the fraction of peak the products reach (a stated assumption) */
    double hbm_tbs, intra_gbs, inter_gbs;
} PlanCluster;

typedef struct {
    int engine;
    int precision;       /* PLAN_PREC_*: the products' precision, whose peak the time and MFU use */
    double global_batch; /* sequences a step */
    double weight_bytes, grad_bytes, master_bytes, moment_bytes, act_bytes, a2a_bytes;
    int zero;          /* 0 none; 1 optimizer state, 2 and gradients, 3 and weights sharded over the
                          data-parallel ranks */
    double imbalance;  /* the busiest expert-parallel rank's rows over the mean (>= 1) */
    double overlap_ep; /* the fraction of the expert exchange hidden behind compute */
    double node_limit; /* > 0: a token's experts on at most this many nodes, a row sent once a
                          node (DeepSeek-V3's node-limited routing) */
    int overlap_dp;    /* 1: the gradients' sums run behind the last micro-batch's backward */
} PlanTrain;

/* One way to lay the run out: the parallel sizes (dp follows: gpus / (tp pp)), and the two
 * choices that trade memory for time, searched with them. */
typedef struct {
    int tp, pp, ep, vpp; /* vpp: virtual stages a GPU holds (interleaved schedule) */
    int micro_batch;     /* sequences a micro-batch */
    int recompute;       /* PLAN_RC_* */
} PlanLayout;

/* the fields of a layout a search may vary, as bits of PlanInput.fixed when stated */
enum {
    PLAN_FIX_TP = 1,
    PLAN_FIX_PP = 2,
    PLAN_FIX_EP = 4,
    PLAN_FIX_VPP = 8,
    PLAN_FIX_MB = 16,
    PLAN_FIX_RC = 32
};

/* Everything the key table can set: one plan's inputs. */
typedef struct {
    char model_name[64], cluster_name[64];
    PlanModel m;
    PlanCluster k;
    PlanTrain t;
    PlanLayout lay;  /* the layout to cost (defaults 1, micro-batch 1, no recomputation) */
    unsigned fixed;  /* PLAN_FIX_* bits: the fields stated on the command line, which a search
                        keeps */
    int moec_config; /* the model came from a moe.c config (m.c holds all of it) */
} PlanInput;

/* The model's parameters, counted from its shape: per layer kind and in total. */
typedef struct {
    double embed, head, final_norm;
    double attn, norms;                 /* one layer's attention (and q/k norms), its two norms */
    double dense_ffn;                   /* one dense layer's SwiGLU */
    double router, expert, shared;      /* one MoE layer: router, ONE routed expert, the shared */
    double n_dense, n_moe;              /* layers of each kind */
    /* moe.c's multi-token prediction modules (model.mtp_depth), in total and active: their
     * parameters, counted in total and active too */
    double mtp, mtp_active;
    double total, active, active_embed; /* active: what a token multiplies (the embedding is a
                                           lookup, not counted); active_embed counts it too */
    double flops_token;      /* model FLOPs per token, forward and backward (6 x active matmul
                                + causal attention), the numerator of MFU */
    double attn_flops_layer; /* forward FLOPs of one token's scores and weighted sum, a layer */
} PlanCounts;

/* One layout's cost. Per GPU, for the busiest pipeline stage (the one that sets the pace). */
typedef struct {
    PlanLayout lay;
    int dp, edp;       /* data-parallel size of dense weights; replicas of each expert */
    double micro;      /* micro-batches per step per pipeline (the accumulation) */
    int valid;         /* the layout divides the model and the batch */
    char invalid[200]; /* why not, when not */
    int fits;          /* memory_total <= the GPU's memory */
    /* memory, bytes */
    double mem_weights, mem_grads, mem_optim, mem_acts, mem_total;
    double busiest_rows; /* the busiest rank's expert rows a micro-batch and MoE layer */
    /* communication a step: bytes a GPU sends, and seconds */
    double tp_bytes, tp_s, ep_bytes, ep_inter_bytes, ep_s, pp_bytes, pp_s, dp_bytes, dp_s;
    int tp_inter, dp_inter, pp_inter; /* the group crosses nodes */
    /* the moe.c engine: the bytes process 0 sends a step in the gradients' sums, the weights'
     * gathers and the tensor-parallel collectives, exactly as it counts them (model/traffic.h;
     * dist.csv's grad_sent, weight_sent, tp_sent); 0 for the other engine */
    double moec_grad_sent, moec_weight_sent, moec_tp_sent, moec_pp_sent;
    /* time a step, seconds */
    double compute_s, recompute_s, ep_exposed_s, dp_exposed_s, bubble_s, optim_s, step_s;
    double tokens_per_s, mfu;
    int stage;       /* the busiest stage in time (memory: mem_stage) */
    int mem_stage;   /* the stage with the most memory, whose breakdown is above */
    double inflight; /* micro-batches whose activations that stage holds */
    char loses[240]; /* why it ranks below the best (plan_search) */
} PlanResult;

/* ---- keys, presets ------------------------------------------------------------------------ */

/* Defaults: the mixed engine's bytes (2, 4, 4, 4, 2, 2), ZeRO 1, no recomputation, imbalance
 * 1, nothing overlapped but the gradients' sums; no model and no cluster yet (zeros). */
void plan_defaults(PlanInput *in);

/* Apply "key=value"; 0, or -1 with a message that names the key (and the nearest one for a
 * typo) or says what the value must be. */
int plan_set(PlanInput *in, const char *kv, char *err, int errlen);

/* The same from the command line: a layout field set this way is kept by a search. */
int plan_set_fixed(PlanInput *in, const char *kv, char *err, int errlen);

/* Apply a preset's settings by name: a model (`--model`), a cluster (`--cluster`) or a
 * published run (`--run`: model, cluster and layout together). 0, or -1 naming the
 * presets of that kind. */
int plan_preset(PlanInput *in, const char *kind, const char *name, char *err, int errlen);

/* The model of a moe.c config (its own settings, model.vocab among them), with the
 * moe.c engine, batch and layout (dist.ep) of the config. */
void plan_from_config(PlanInput *in, const Config *c);

/* Every field given and consistent; -1 with a message that names the key. */
int plan_validate(const PlanInput *in, char *err, int errlen);
/* The model alone (what plan_count needs), or the cluster alone (every key a plan reads, and
 * a peak at the training's precision), given and consistent; -1 with a message. */
int plan_validate_model(const PlanInput *in, char *err, int errlen);
int plan_validate_cluster(const PlanInput *in, char *err, int errlen);
/* Some cluster.* key but cluster.gpus is given (a preset, or a key of one): 1, else 0. */
int plan_has_cluster(const PlanInput *in);

/* The keys with their help (moe plan --keys), and the presets with their settings and the
 * sources of their numbers (moe plan --presets). */
void plan_print_keys(FILE *f);
void plan_print_presets(FILE *f);
/* The same as CSV, with what plan_count makes of each model's shape. */
void plan_print_presets_csv(FILE *f);

typedef struct {
    const char *kind, *name, *what, *settings, *source;
    double total, active; /* the published parameter counts (0: none published), and */
    double round_to;      /* the unit of their last digit (1e9: "671B"); plan_count agrees when
                             within one unit (a figure may be rounded or cut) */
    int active_embed;     /* 1: the published active count includes the input embedding */
    int counts_agree;     /* 1: plan_count gives the published counts to their rounding; 0: it
                             does not, and handbook chapter 7 says why */
    /* a run's published results (0: not published): tokens/s a GPU, model TFLOP/s a GPU as
     * its authors count them, seconds a step, GB of weights and gradients a GPU */
    double tokens_gpu, tflops_gpu, step_s, states_gb;
} PlanPreset;
extern const PlanPreset PLAN_PRESETS[];
extern const int PLAN_N_PRESETS;

/* ---- the cost model (plan_model.c, plan_cost.c) ------------------------------------------ */

void plan_count(const PlanModel *m, PlanCounts *out);

/* The peak of the products at the training's precision, TFLOP/s a GPU. */
double plan_peak(const PlanInput *in);

/* One layout. Never fails: an impossible layout comes back with valid = 0 and the reason. */
void plan_layout(const PlanInput *in, const PlanLayout *lay, PlanResult *r);

/* The bytes one process of a moe.c expert-parallel group of P sends a step (chapter 3's
 * formula): rows of C floats out and back, forward and backward, with uniform routing, and the
 * counts. Exactly `model_bytes_per_step` of dist.csv's chapter. */
double plan_moec_ep_bytes(const PlanModel *m, double tokens_per_process, double P);
/* dist.dispatch=tokens, where a row goes per (token, member): the bytes above are those of
 * U = tokens (P - 1) q rows (ep.h's formula), q this share: the chance that a token reaches a
 * given other member under uniform routing (one of its top_k experts there) or, with
 * moe.n_group groups aligned to the members, one of its moe.topk_group groups there. */
double plan_moec_member_share(const Config *c, double P);

/* ---- search (plan_search.c) and report (plan_report.c) ----------------------------------- */

/* Every valid layout of in (the fields of in->fixed kept), ranked fastest first among those
 * that fit, then the others by memory; each with the reason it loses to the first. Returns the
 * count of valid layouts; when it exceeds max, out is not ranked and the caller asks again with
 * room for that many. */
int plan_search(const PlanInput *in, PlanResult *out, int max);

/* The model alone, when no cluster or batch is given: its parameters (total, active a token,
 * by part), the memory of its weights at train.weight_bytes, and what to add for a plan. */
void plan_print_counts(FILE *f, const PlanInput *in);
/* searched: the count of layouts a search costed (r holds the best n of them), or 0 for one
 * layout. */
void plan_print(FILE *f, const PlanInput *in, const PlanResult *r, int n, int searched);
/* n = 0 (r may be NULL): the model's counts and its weights' bytes, no layout. */
void plan_print_json(FILE *f, const PlanInput *in, const PlanResult *r, int n);
/* One CSV row a layout (sizes in GB, times in seconds), after a header line when header. */
void plan_print_csv(FILE *f, const PlanInput *in, const PlanResult *r, int n, int header);

#endif
