/*
 * model.h: the decoder-only transformer, forward and backward, backend-agnostic orchestration.
 *
 *   tokens -> tok_emb -> [ rmsnorm -> attention (RoPE) -> +res -> rmsnorm -> FFN -> +res ] x L
 *          -> rmsnorm -> head -> cross-entropy
 * Each FFN is a dense SwiGLU or an MoE block (config_is_moe_layer). The model owns its
 * parameters, gradients and AdamW moments (one allocation each, laid out by the parameter
 * table) and the activations of one micro-batch of up to B x T tokens (one allocation, laid
 * out by the table of acts.h).
 */
#ifndef MOE_MODEL_H
#define MOE_MODEL_H

#include <stdint.h>

#include "backend/backend.h"
#include "config/config.h"
#include "model/moe_block.h"
#include "model/params.h"
#include "model/profile.h"
#include "parallel/dist.h"

/* One decoding step's view of a key-value cache (src/infer/decode.h keeps one): N new tokens,
 * each of its own sequence and position: one a sequence (batched decoding), or several of one
 * sequence at consecutive positions (a speculative decoder's check), attending causally among
 * themselves, since each row's key and value enter the cache before any row attends. Buffers of
 * the model's backend. */
typedef struct {
    float **k, **v;  /* (L) x (S, Tc, Hkv D) and (S, Tc, Hkv Dv): each layer's keys (after RoPE)
                        and values of S sequences (and with a multi-token prediction draft,
                        model_mtp_draft, its block's: L + 1). Latent attention: k[l] (S, Tc,
                        kv_rank + rope_dim) each token's normed latent and rotated key, v[l] NULL */
    int Tc;          /* positions each sequence's cache holds */
    const int *pos;  /* (N) the new token's position t in its sequence s */
    const int *rows; /* (N) s Tc + t: its row of k[l] and v[l], attending to s Tc .. s Tc + t */
    float *att;      /* (N, H, Tc) the step's attention probabilities */
    float *work;     /* latent attention: (mla_decode_floats) a step's workspace; else NULL */
} KvStep;

/* The floats of KvStep.work for a step of N tokens of latent attention (0 without). */
size_t mla_decode_floats(const Config *c, int N);

/* Activations of one block, kept from forward for backward. */
typedef struct {
    float *ln1;             /* (N, C) rmsnorm of the block input */
    float *rstd1;           /* (N) */
    float *q, *k, *v;       /* q (N, H D), k, v (N, Hkv D); q and k after their norm and RoPE */
    float *qr, *kr;         /* model.qk_norm: q and k before their norm (else NULL) */
    float *rstd_q, *rstd_k; /* model.qk_norm: the norm's 1 / rms a row (a head, or a token) */
    /* model.attention=mla (else NULL): the queries' latent (N, q_rank) before and after its norm
     * and the norm's 1 / rms (mla.q_rank > 0); the keys' and values' latent (N, kv_rank) before
     * and after its norm, its 1 / rms; the shared rotated key (N, rope_dim) after RoPE; the
     * heads' keys without rotation and values (N, H (nope_dim + v_dim)), before q, k and v are
     * assembled from them */
    float *qlat, *qlatn, *rstd_qlat, *lat, *latn, *rstd_lat, *krope, *kvb;
    float *att;          /* (B, H, T, T) attention probabilities */
    float *atty;         /* (N, H D) attention output before wo */
    float *resid_mid;    /* (N, C) block input + attention branch */
    float *ln2;          /* (N, C) */
    float *rstd2;        /* (N) */
    float *fg, *fu, *fh; /* (N, F) dense SwiGLU: gate, up, silu(gate) * up; NULL in MoE blocks */
    MoeActs *moe;        /* MoE block activations; NULL in dense blocks */
    float *router_bias;  /* (E) this MoE block's aux-free bias, in Model.router_bias; else NULL */
    float *sg, *su, *sh; /* (N, Fs) shared experts of an MoE block (gate, up, silu(gate) * up),
                            Fs = num_shared * F; NULL without shared experts */
    /* model.norm=sandwich or dssn (else NULL): each sublayer's output before its output norm
     * (N, C), and that norm's 1 / rms (N): the attention's after wo, the feed-forward's */
    float *attn_out, *rstd_attn_out;
    float *ffn_out, *rstd_ffn_out;
} BlockActs;

/* Activations of multi-token prediction module k (model.mtp_depth, DeepSeek-V3): from h, the
 * main trunk's last output (k = 1) or module k - 1's, and the embedding of the token k ahead,
 * one block (BlockActs of layer n_layer + k - 1), then its norm and the shared head on the Nk =
 * B (T - k) positions whose target t[i + k + 1] lies in the window. Its block runs over all N
 * positions (the last k of each sequence with token 0 as the one ahead: causal attention keeps
 * them out of the others' outputs, and the loss leaves them out). */
typedef struct {
    int *tok;                 /* (N) the token k ahead of each position, t[i + k]; 0 past the end */
    int *rows;                /* (Nk) the positions with a target: their rows of the N */
    int *tgt;                 /* (Nk) their targets, t[i + k + 1] */
    float *hn, *rstd_h;       /* (N, C), (N): RMSNorm(h) with the module's hnorm */
    float *emb, *en, *rstd_e; /* (N, C) the embedding of tok, (N, C), (N) its RMSNorm (enorm) */
    float *cat;               /* (N, 2 C): each row [hn; en] */
    float *in, *out;          /* (N, C): the block's input (cat eh_proj^T) and its output */
    float *hc, *lnc, *rstdc;  /* (Nk, C): out's rows with a target, their norm, (Nk) its 1 / rms */
    float *logits;            /* (Nk, V); probabilities after the loss */
    float *losses;            /* (Nk) per-position cross-entropy */
} MtpActs;

/* What one forward and backward of up to B x T tokens write: the activations kept for backward,
 * the backward's scratch, the ops' workspace, the step record and the last forward's results.
 * llama2.c's RunState: the model's weights are apart from it (Model), and so is its
 * configuration (Config). */
typedef struct RunState {
    int B, T; /* capacity of the activation buffers */
    /* activations and backward scratch: the entries of the model's table (acts.h:
     * model_acts_table), all in one allocation of the backend, the arena */
    ActTable acts;
    void *arena; /* (acts.bytes) */

    /* activations. Under tensor parallelism (dist.tp, tp.h) the residual stream and the
     * losses hold this rank's n = N / tp rows of the replica's N, a block's buffers its heads'
     * and hidden channels' share of all N rows, lnf all N rows and logits (N, V / tp) the
     * columns of its share of the vocabulary (the token ids go through tp_ids instead) */
    int *inputs, *targets; /* (N) */
    float **resid;         /* (L + 1) x (N, C): input of each block, resid[L] the last output */
    BlockActs *blocks;     /* (L) */
    float *lnf, *rstdf;    /* (N, C), (N) */
    float *logits;         /* (N, V); probabilities after a forward with targets */
    float *losses;         /* (N) per-token cross-entropy */
    /* multi-token prediction (model.mtp_depth D; else NULL): the modules (their blocks are
     * blocks[L .. L + D)), mtp_cat (2 N) the rows 2n, then 2n + 1, that put hn and en side
     * by side in cat, mtp_host (3 N) the host's staging of a module's tok, rows and tgt */
    MtpActs *mtp; /* (D) */
    int *mtp_cat, *mtp_host;
    int mtp_ran; /* 1: the last forward ran the modules (a training forward with targets) */

    /* backward scratch */
    float *dresid, *dmid, *dln, *dtmp; /* (N, C) */
    float *dq;                         /* (N, H D) */
    float *datty;                      /* (N, H Dv) */
    float *dk;                         /* (N, Hkv D) */
    float *dv;                         /* (N, Hkv Dv) */
    /* latent attention (else NULL): kvb's gradient, the rotated parts' of q (N H, rope_dim) and
     * of the shared key (N, rope_dim), two latents' (N, max(q_rank, kv_rank)) */
    float *dkvb, *drope, *dkrope, *dlat, *dlatn;
    float *dfg, *dfu, *dfh; /* (N, F) */
    float *dlogits;         /* (N, V) */
    /* multi-token prediction: dmtp (N, C) the gradient of a module's input h, carried from
     * module k to k - 1 and into the main trunk's last output; dmtp_cat (N, 2 C) that of cat */
    float *dmtp, *dmtp_cat;
    /* the shared experts' SwiGLU, (N, Fs) each; NULL without shared experts */
    float *dsg, *dsu, *dsh;
    /* tensor parallelism (dist.tp > 1, tp.h; else NULL): a gradient's rows gathered from the
     * group and a row-parallel product's partial sum (N, C) each; tp_host (N, C) the host's
     * copy the group's collectives go through when the backend's memory is not the host's */
    float *tp_gath, *tp_part, *tp_host;
    /* the vocabulary split (tp_vocab.c; else NULL): tp_ids, tp_rows (N) the micro-batch's
     * tokens in this rank's rows of the vocabulary (tp_k of them) and their rows; tp_target,
     * tp_holder, tp_at, tp_pick (N) each row's target in this rank's columns (0 when another
     * rank holds it), the rank that holds it, its place in the logits (n V / tp + target) and
     * in tp_loss (holder N + n); tp_lse, tp_loss (tp, N) every rank's log-sum-exp and loss over
     * its columns, tp_lse_t (N, tp) the first transposed, tp_share (N, tp) each rank's share of
     * a row's probability; tp_a, tp_b (N) a row's scratch, tp_other (N) 1 where another rank
     * holds the target, tp_ones (V / tp) ones; tp_ints (4 N), tp_floats (max(N, V / tp)) their
     * host staging */
    int *tp_ids, *tp_rows, *tp_target, *tp_holder, *tp_at, *tp_pick, *tp_ints, tp_k;
    float *tp_lse, *tp_loss, *tp_lse_t, *tp_share, *tp_a, *tp_b, *tp_other, *tp_ones, *tp_floats;
    MoeScratch moe_scratch;
    /* workspace of the ops, sized once in model_init so that a step allocates nothing:
     * rope_cs (T, D/2, 2) the RoPE cos/sin table (rope_table); att_ws (n_att_ws, T, T) one dS
     * slice per thread of attention_backward, n_att_ws = omp_get_max_threads() at init;
     * norm_partial the chunk sums of model_grad_norm (vec_chunks of the parameters). They are
     * outside the analytic model memory of memory.c (the attention slices grow with the
     * thread count, not with the model): work_bytes, their size. */
    float *rope_cs, *att_ws;
    int n_att_ws;
    double *norm_partial;
    size_t work_bytes;
    /* the step record, part of the workspace: rec_loss (rec_slots) each micro-batch's sum of
     * token losses, rec_moe (rec_slots, n_moe, 2) each MoE block's balance and z loss, written
     * by the ops where they run. A GPU would wait for each value it returned; so while
     * defer_reads is 1 (the training loop) model_forward leaves them there, in slot StepCtx.micro,
     * and the step reads them all with one copy (model_read_step). Else model_forward reads them at
     * once (slot 0) into loss, aux_loss and z_loss. rec_slots = train.accum. rec_route (rec_slots,
     * n_moe) the blocks' routing statistics (route_stats_record, route_record_bytes each), read in
     * the same copy (rec_bytes in all) into rec_host (model_step_route). */
    double *rec_loss, *rec_norm; /* rec_norm (pt.n): model_grad_norm_record's sums */
    double *rec_mtp; /* (rec_slots, D) each micro-batch's sums of the modules' position losses */
    /* the modules' MoE blocks' balance and z losses (D, 2) and routing records (D of
     * route_record_bytes): where moe_block_forward writes them; outside the step's copy
     * (training reports the main blocks'), in the workspace. NULL without such blocks */
    char *mtp_moe_rec;
    float *rec_moe;
    char *rec_route, *rec_host;
    /* router.csv's numbers after a step, read with one copy (router_accum_write): log_rec
     * (n_moe) each block's expert_sim (the backend's experts_similarity), then (n_moe, E) the
     * aux-free biases copied beside them */
    double *log_rec;
    size_t rec_bytes;
    int rec_slots, defer_reads;

    /* results of the last forward */
    int N_last, B_last, T_last;
    float loss;     /* mean cross-entropy (the language-model loss) */
    float aux_loss; /* mean over MoE blocks of the unscaled Switch loss (1 = balanced) */
    float z_loss;   /* mean over MoE blocks of the unscaled z-loss */
    float mtp_loss[MOE_MTP_MAX]; /* each module's mean cross-entropy over its positions; NAN
                                    when the last forward did not run them */
} RunState;

/* A model: its configuration, its weights (the parameters with their gradients and AdamW
 * moments, laid out by the parameter table, and the state saved beside them) and its run state. */
typedef struct Model {
    Config cfg;
    const Backend *be; /* every buffer below is its memory; every op runs on it */
    int n_moe;         /* MoE blocks */
    MoeSpec spec;      /* the MoE blocks' specification (moe_spec_from_config) */

    /* the weights */
    ParamTable pt;
    float *params, *grads, *m, *v; /* (pt.total) each; m, v are the AdamW moments
                                      ((Zero.floats) under dist.zero, and params under
                                      dist.zero=3: zero.h) */
    ParamView w, g;                /* named views into params and grads (under dist.zero=3,
                                      w into the window of each stage in use) */
    /* aux-free balancing state (moe.balance=aux_free): one bias per expert and MoE block,
     * added to the scores for the top-k choice only. Not a parameter: no gradient, no AdamW;
     * updated by model_update_router_bias and saved in checkpoints ("router_bias/layers.L"). */
    float *router_bias;         /* (n_moe, E) */
    float *router_bias_host;    /* its host copy for the update, when the backend's memory is not
                                   the host's (a GPU's); else NULL */
    int router_bias_host_fresh; /* 1: router_bias_host holds router_bias (the update keeps it
                                   so; a checkpoint's load writes the biases and sets 0) */
    /* exploration noise (moe.jitter, moe.noise): drawn only in a training forward
     * (StepCtx.training), from a stream of its own seeded by train.seed and saved in
     * checkpoints ("rng/router") */
    Rng router_rng;
    int step;    /* optimizer steps taken */
    int skipped; /* of them, steps whose update was skipped (train.spike_action=skip): AdamW's
                    own count, which its bias correction reads, is step - skipped */
    /* inference with the experts held elsewhere (src/infer/: quantized, or loaded on demand);
     * NULL: the weights above. Forward only: owned by its caller. */
    ExpertSource *expert_source;

    /* the run state of up to B x T tokens */
    RunState state;

    /* more than one process (model_init_dist; NULL: one). With dist->ep > 1 the stacked
     * expert tensors hold this member's num_experts / ep experts (params_table_build_ep). */
    Dist *dist;
    /* the gradients' sums over the processes, in buckets (grad_sync.h; NULL in one process).
     * A backward with StepCtx.sync_in_backward starts each block's sums as soon as it is done. */
    struct GradSync *sync;
    /* dist.zero >= 1 across processes (zero.h; NULL: every state whole): m and v (and from
     * stage 3 params) hold this member's shard of each gradient bucket, Zero.floats in all */
    struct Zero *zero;
    /* a pipeline stage (dist.pp > 1, pipe.h): the layers [layer0, layer1) this process holds
     * and runs ([0, n_layer) without a pipeline), the embedding with the first stage (layer0
     * 0), the final norm, the head and the loss with the last (layer1 n_layer); pipe, the run
     * states of the micro-batches in flight and the messages between stages (NULL without) */
    int layer0, layer1;
    struct Pipe *pipe;
} Model;

/* Whether this process holds layer l, the embedding, the head (a pipeline stage's share). */
static inline int model_holds_layer(const Model *m, int l) {
    return l >= m->layer0 && l < m->layer1;
}
static inline int model_has_embed(const Model *m) {
    return m->layer0 == 0;
}
static inline int model_has_head(const Model *m) {
    return m->layer1 == m->cfg.n_layer;
}

/* The mode of one forward or backward: what the caller is doing with the model, not the
 * model's state, passed with each call. NULL (or all zero): evaluation and inference: no
 * exploration noise, evaluation's capacity, no tape. A training loop passes its own. */
typedef struct StepCtx {
    /* a training pass: exploration noise (moe.jitter, moe.noise) and training's capacity */
    int training;
    /* the micro-batch of the optimizer step (0 the first): its slot of the step record while
     * defer_reads, and where the MoE blocks' step-wide balance count (moe.balance_scope=global)
     * starts again at 0 */
    int micro;
    /* backward: start each block's gradient sums as soon as it is done (grad_sync.h); the
     * trainer sets it for the last micro-batch of a step with dist.overlap=1 */
    int sync_in_backward;
    /* a routing recording to write or replay in training passes (route_tape.h, owned by the
     * caller); NULL: none */
    struct RouteTape *route_tape;
} StepCtx;

/* Allocate a model for config c with activations for B x T tokens; weights initialised from
 * the config seed. */
void model_init(Model *m, const Config *c, int B, int T);
/* The same for one process of a run spread over d's processes (d NULL or a world of one:
 * model_init). The weights start as those of the one-process model, each member keeping its
 * share of the experts. */
void model_init_dist(Model *m, const Config *c, int B, int T, Dist *d);
/* The same on a backend of the caller's choice instead of the one train.device names. */
void model_init_backend(Model *m, const Config *c, int B, int T, Dist *d, const Backend *be);
/* After pipe_free when pipe_init made the model a pipeline stage (pipe.h). */
void model_free(Model *m);
/* Model.state's buffers (the table of acts.h for the stage's layers, in one arena): own, the
 * model's first run state (model_init's), which also counts the MoE blocks and holds the
 * aux-free biases; else a pipeline's further run state, the same buffers again (pipe.h). And
 * their release. */
void run_state_alloc(Model *m, int B, int T, int own);
void run_state_free(Model *m);

/* Forward over inputs (B, T) (T <= the T of model_init) in the mode of ctx (NULL: evaluation).
 * With targets, computes the loss (Model.state.loss, aux_loss, z_loss) and leaves probabilities in
 * logits; with targets NULL, leaves the logits. Returns the objective: loss + aux_coef * sum aux
 * + z_coef * sum z (the aux term only for moe.balance=aux or seq_aux). A training forward
 * (ctx->training) with targets also runs the multi-token prediction modules (model.mtp_depth D):
 * the objective adds mtp_coef / D times the sum over the modules of each one's loss (Model.state
 * .mtp_loss) and its MoE block's balance and z terms; evaluation leaves them out. */
float model_forward(Model *m, const int *inputs, const int *targets, int B, int T,
                    const StepCtx *ctx);
/* The step's losses after micro_batches forwards with defer_reads set (one copy from the step
 * record): *loss, *aux, *z (written) = the sums over the micro-batches of what Model.state.loss,
 * aux_loss and z_loss would have been after each, in the same float arithmetic, so that the
 * numbers are the ones an immediate read gives. */
void model_read_step(Model *m, int micro_batches, double *loss, double *aux, double *z);
/* After model_read_step: mtp (model.mtp_depth values written) = each module's loss summed over
 * the micro_batches micro-batches, as Model.state.mtp_loss would have been after each. */
void model_read_mtp(const Model *m, int micro_batches, double *mtp);
/* After model_read_step: each MoE block's MoeActs.route = what its forward of micro-batch
 * micro routed (route_stats_read of the copy), as route_stats would have filled it then. */
void model_step_route(Model *m, int micro);

/* A decoding step: tokens (N) new tokens at kv's positions and rows (one a sequence, or several
 * of one sequence in a row), whose sequences' earlier tokens are in kv's cache
 * (model_forward_cached writes each one's key and value there). Leaves the N next-token logits
 * in logits (N, V). The MoE blocks route dropless (every token kept), so for a token-choice
 * model whose evaluation is dropless the logits are those model_forward gives the same position
 * of the whole sequence. N <= B T of model_init. */
void model_forward_cached(Model *m, const int *tokens, int N, const KvStep *kv);

/* Multi-token prediction's first module as a draft of the token after next (moe sample --draft
 * mtp), on rows first .. first + B T - 1 of the main trunk's last output as the last
 * model_forward or model_forward_cached left them, tokens (B T) the token after each row's. With
 * kv, a decoding step of B rows (T 1) against kv's cache (rows of one sequence or of several, as
 * in model_forward_cached), whose layer n_layer holds the module block's keys and values (the
 * rows' written): the module's logits, (B, V), in Model.state.mtp[0].logits (B <= the B (T - 1)
 * rows of its positions). With kv NULL, B sequences of T through the module's block alone (a
 * prefill), its keys and values left in Model.state.blocks[n_layer].k and v for a cache to take,
 * and no logits. */
void model_mtp_draft(Model *m, const int *tokens, int first, int B, int T, const KvStep *kv);

/* Backward of the last forward (which must have had targets), in the mode ctx that forward
 * ran in (NULL: evaluation's); gradients are ADDED to m->grads, with every loss term scaled by
 * loss_scale (1 / accum for gradient accumulation). */
void model_backward(Model *m, float loss_scale, const StepCtx *ctx);

void model_zero_grad(Model *m);

/* A host copy of n floats of the model's backend memory at dev (malloc'd: the caller frees
 * it), or NULL when the host may read dev in place (the CPU backends). For the readers of
 * weights outside the step: checkpoints, router.csv. */
float *model_host_copy(const Model *m, const float *dev, size_t n);

/* Aux-free balancing, after an optimizer step: count (n_moe, E) the step's number of
 * assignments per expert of each MoE block (in layer order, summed over micro-batches and
 * processes) moves each block's bias per moe.bias_update and moe.bias_rate
 * (router_bias_update). Does nothing unless moe.balance=aux_free. */
void model_update_router_bias(Model *m, const double *count);

/* Global L2 norm of the gradients (summed in a fixed order: deterministic). Across processes,
 * after model_sync_grads: the norm of the whole model's gradient. */
float model_grad_norm(const Model *m);
/* The squares model_grad_norm adds, summed into the step record (before model_read_step, which
 * copies them down with the losses; model_grad_norm then reads that copy when defer_reads). */
void model_grad_norm_record(const Model *m);

/* Across processes: sum every gradient over the processes that hold a copy of its tensor
 * (non-expert tensors: all; expert tensors: the data-parallel replicas of the same experts):
 * the sums a backward with sync_in_backward has started, and the others. Each process's
 * backward must have scaled its loss by 1 / (accum x world) so that the sums are the gradient
 * of the whole batch's mean loss. No-op in one process. */
void model_sync_grads(Model *m);

/* One AdamW step with learning rate lr on all parameters; increments m->step. The update reads
 * the gradients multiplied by grad_scale (for clipping) and leaves them zero, each cleared in
 * the pass that reads it: the next step accumulates from zero without model_zero_grad. */
void model_adamw_step(Model *m, float lr, float grad_scale);
/* A step without its update (train.spike_action=skip): m->step and m->skipped go up, the
 * gradients are dropped, the weights, moments and aux-free biases stay as they are. Also what
 * a rollback does with the step that spiked, before it loads the checkpoint it returns to. */
void model_skip_update(Model *m);

/* Learning rate of step s (0-based): linear warm-up, then cosine down to min_lr * lr. */
float lr_schedule(const Config *c, int step);

/* Model FLOPs per token of one training step (forward + backward matrix products, useful
 * causal work only; the formula is written out in model.c). */
double model_flops_per_token(const Config *c, int T);
/* The same FLOPs split by the op that profile.h times them under (attention projections,
 * attention, dense FFN, router, experts, head; 0 for the others): per_op[PROF_COUNT] when not
 * NULL. Returns their sum, model_flops_per_token. */
double model_flops_by_op(const Config *c, int T, double per_op[PROF_COUNT]);

#endif
