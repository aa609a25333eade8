/*
 * moe_ops.h: the Mixture-of-Experts feed-forward block, piece by piece.
 *
 *   x (N, C) --router--> logits (N, E) --softmax or sigmoid--> scores (N, E)
 *     --top-k (+ aux-free bias)--> idx, w (N, K)
 *     --dispatch plan--> slots (S = N*K when dropless; capacity.c: at most cap per expert)
 *     --permute--> xe (S, C)
 *     --experts (one SwiGLU per expert, one GEMM per expert slice)--> ye (S, C)
 *     --combine (weighted by w)--> y (N, C)
 *
 * Files: router.c (scores, top-k and gate weights, z-loss), router_balance.c (aux and seq_aux
 * losses, the aux-free bias, balance statistics), expert_choice.c (moe.routing=expert_choice:
 * each expert picks its tokens instead), capacity.c (token choice with a capacity per expert:
 * drops and padding), permute.c (dispatch plan, gather and weighted scatter), experts.c
 * (grouped SwiGLU). The block that strings them together is src/model/moe_block.c
 * (model/moe_block.h); the shared experts (moe.num_shared) are a dense SwiGLU that model.c adds
 * next to it.
 *
 * Dimension letters: N tokens, C channels, E experts, K experts per token (top-k),
 * F expert hidden size, S expert slots (rows of the permuted buffer).
 * Accumulation rule as in nn/ops.h: parameter gradients +=, activation gradients =.
 */
#ifndef MOE_MOE_OPS_H
#define MOE_MOE_OPS_H

#include "base/util.h" /* Rng */

/* ---- router ------------------------------------------------------------------------------- */

/* How a router turns logits into scores, and how the experts are kept balanced
 * (config keys moe.score and moe.balance; src/README.md has the formulas). */
enum { MOE_SCORE_SOFTMAX = 0, MOE_SCORE_SIGMOID = 1 };
enum {
    MOE_BALANCE_AUX = 0,
    MOE_BALANCE_SEQ_AUX = 1,
    MOE_BALANCE_AUX_FREE = 2,
    MOE_BALANCE_NONE = 3
};
enum { MOE_BIAS_SIGN = 0, MOE_BIAS_PROPORTIONAL = 1 };
/* Who chooses (config key moe.routing): each token its top-k experts, or each expert its top
 * cap tokens of the micro-batch (expert_choice.c). */
enum { MOE_ROUTING_TOKEN_CHOICE = 0, MOE_ROUTING_EXPERT_CHOICE = 1 };
/* Token-choice capacity (capacity.c): over which tokens an expert's budget is counted (config
 * key moe.capacity_scope), and which assignments an over-full expert keeps (moe.drop_policy). */
enum { MOE_CAP_BATCH = 0, MOE_CAP_SEQUENCE = 1 };
enum { MOE_DROP_POSITION = 0, MOE_DROP_SCORE = 1 };
/* The router's arithmetic (moe.router_precision), emulated on any backend by rounding to
 * bfloat16 (round_bf16): fp32; bf16_logits, the logits rounded after an fp32 product; bf16,
 * the product's operands rounded before it, the logits after it and the scores after the
 * softmax. The backward passes gradients straight through the roundings. */
enum { MOE_ROUTER_FP32 = 0, MOE_ROUTER_BF16_LOGITS = 1, MOE_ROUTER_BF16 = 2 };
/* Over which tokens the aux loss counts f (moe.balance_scope): the micro-batch (of every
 * process together), or the optimizer step's whole batch so far (its micro-batches up to
 * this one: at the step's last micro-batch, the global batch). */
enum { MOE_SCOPE_MICRO = 0, MOE_SCOPE_GLOBAL = 1 };

/* The block's settings, split by lifetime:
 *
 *   MoeSpec  what is fixed for a model: its sizes, its routing and balancing methods, its
 *            capacity settings. Built once from the Config (moe_spec_from_config in
 *            model/moe_block.h; tests and chapter programs fill one by hand after
 *            moe_spec_defaults). Field names are the config keys without "model." / "moe.".
 *   MoeCtx   what one call runs with: the tokens per sequence of this forward, the capacity
 *            factor in force (training's or evaluation's), the exploration stream, the
 *            processes, the aux loss's f from outside, the scratch. Filled per forward or
 *            backward by its caller (moe_ctx_train / moe_ctx_eval, then dist if any).
 *
 * Inside the ops the sizes keep their math letters: C = d_model, E = num_experts,
 * K = top_k, F = d_expert, T = the context's tokens per sequence. */
typedef struct {
    int d_model;             /* C: channels */
    int num_experts;         /* E: experts (all of them, also under expert parallelism) */
    int top_k;               /* K: experts per token */
    int d_expert;            /* F: hidden size of one expert (config_expert_hidden) */
    int norm_topk;           /* renormalise the top-k weights to sum to 1 */
    float aux_coef;          /* coefficient of the aux or seq_aux balancing loss (alpha) */
    float z_coef;            /* router z-loss coefficient (beta) */
    int score;               /* MOE_SCORE_*: softmax over E, or an independent sigmoid per expert */
    int topk_before_softmax; /* softmax only: top-k on the logits, softmax over the k chosen
                                (Mixtral) */
    float route_scale;       /* multiplies the final gate weights */
    int balance;             /* MOE_BALANCE_* */
    float jitter;      /* router input times U(1 - jitter, 1 + jitter), when the call has rng */
    float noise;       /* N(0, noise^2) added to the logits, when the call has rng */
    int routing;       /* MOE_ROUTING_*: token choice (top-k per token) or expert choice */
    float ec_capacity; /* expert choice: cap = ceil(ec_capacity * N * K / E) tokens per expert */
    /* token-choice capacity (capacity.c); capacity_factor 0 = dropless */
    float capacity_factor;      /* training's factor: cap = max(min_capacity,
                                   ceil(factor * tokens * K / E)) */
    int capacity_scope;         /* MOE_CAP_*: tokens = N (batch), or T per sequence */
    int min_capacity;           /* lower bound of cap (values below 1 count as 1) */
    int drop_policy;            /* MOE_DROP_*: keep by token position, or by score */
    int padded;                 /* every expert computes exactly cap rows (zero padding) */
    float eval_capacity_factor; /* evaluation's factor (moe_ctx_eval); < 0: capacity_factor */
    int second_expert_random;   /* K = 2: dispatch the 2nd expert w.p. min(1, 2 w_2) (needs rng) */
    int router_precision;       /* MOE_ROUTER_*: fp32, or a bf16 router emulated (moe_block.c) */
    int balance_scope;          /* MOE_SCOPE_*: the aux loss's f over the micro-batch or the step */
    int balance_groups;         /* 0: balance each expert; G: G groups of E / G experts */
    /* group-limited routing (DeepSeek-V3): 0, or n_group groups of E / n_group consecutive
     * experts, of which each token keeps its topk_group best (1..n_group) for its top-k */
    int n_group;
    int topk_group;
    int ep_dispatch; /* DistDispatch (dist.dispatch): what the expert exchange sends */
    int seq_len; /* the T the buffers are sized for (moe_slots_max, moe_work_bytes): the
                    longest sequence a call may bring */
} MoeSpec;

/* One call of the block or of an op. */
typedef struct {
    int T;                 /* tokens per sequence of this call (seq_aux, capacity per sequence) */
    float capacity_factor; /* the factor in force: the spec's in training, its
                              eval_capacity_factor in evaluation when that is >= 0 */
    Rng *rng;              /* exploration noise stream; NULL: none (evaluation) */
    /* more than one process (src/parallel/dist.h; NULL: one). The balance loss then counts f over
     * the whole micro-batch of every process, and with dist->ep > 1 the experts live on the
     * members of the expert-parallel group (src/model/ep.h): the block's weights hold only
     * this member's E / ep experts. */
    struct Dist *dist;
    /* the aux loss's f (E) from outside (the whole batch across processes, the step's batch,
     * groups of experts: model/moe_block.c), in the memory the ops run on (a Backend's:
     * device memory on a GPU, backend.h); NULL: from idx */
    const float *global_f;
    /* moe.balance_scope=global: this call's micro-batch of the optimizer step (0: the first,
     * whose count starts the step's again) */
    int micro;
    /* scratch of the ops that need some (the balance loss, the router's backward, the
     * capacity and expert-choice plans): work_bytes >= moe_work_bytes(s, N) bytes, which the
     * MoE block allocates once (a Backend's memory, as global_f) so that a training step
     * allocates nothing. NULL: each such op allocates its own for the call (tests, one-off
     * callers). */
    void *work;
    size_t work_bytes;
    /* a recording of the routing to write, or to replay instead of the block's own top-k
     * (src/model/route_tape.h: comparing two backends' arithmetic); NULL: none */
    struct RouteTape *tape;
} MoeCtx;

/* The defaults of the method fields: softmax scores (not topk_before_softmax), the Switch aux
 * loss, route_scale 1, token choice (ec_capacity 1) without routing groups, dropless (capacity_factor 0, min_capacity
 * 4, eval_capacity_factor -1, no padding, no random second expert). The sizes, norm_topk, the
 * coefficients, jitter, noise and seq_len are left as they are. */
void moe_spec_defaults(MoeSpec *s);

/* x (written) = the context of a training call of T tokens per sequence: the spec's
 * capacity_factor, the exploration stream rng (may be NULL: no noise), no dist, no global_f,
 * no scratch. */
void moe_ctx_train(MoeCtx *x, const MoeSpec *s, int T, Rng *rng);
/* x (written) = the context of an evaluation call: no rng, and the capacity factor
 * eval_capacity_factor when that is >= 0 (0: dropless), else the spec's. */
void moe_ctx_eval(MoeCtx *x, const MoeSpec *s, int T);

/* Bytes of MoeCtx.work the ops of this block need for up to N tokens in sequences of
 * s->seq_len (the largest of router_balance_loss, router_gate_backward, capacity_plan_build
 * and expert_choice_forward). */
size_t moe_work_bytes(const MoeSpec *s, int N);
/* The scratch of one op (scratch.c): x->work when set (it must hold bytes: a smaller one is a
 * bug in the caller), else a fresh zeroed allocation that *owned keeps for moe_work_done. */
void *moe_work(const MoeCtx *x, size_t bytes, void **owned);
void moe_work_done(void *owned);
/* What each of those needs (moe_work_bytes is the largest); T is the tokens per sequence. */
size_t router_balance_work_bytes(const MoeSpec *s);
size_t router_backward_work_bytes(const MoeSpec *s, int T, int N);
size_t capacity_work_bytes(const MoeSpec *s, int N);
size_t expert_choice_work_bytes(const MoeSpec *s, int N);

/* Coefficient of MoeActs.aux_loss in the objective: aux_coef for aux and seq_aux, 0 for none
 * and aux_free (whose aux_loss is the Switch value, kept for monitoring only). */
float moe_balance_coef(const MoeSpec *s);

/* scores (N, E) = softmax(logits) row by row; lse (N) = logsumexp of each row (for z-loss). */
void router_softmax_forward(float *scores, float *lse, const float *logits, int N, int E);

/* scores (N, E) per s->score: softmax, or sigmoid(logits) per expert (DeepSeek-V3);
 * lse (N) = logsumexp of the logits in both modes (the z-loss penalises it either way). */
void router_scores_forward(float *scores, float *lse, const float *logits, int N, const MoeSpec *s);

/* Top-k choice and gate weights, every mode: idx (N, K) the K largest of key = scores + bias
 * (logits + bias when s->topk_before_softmax), in descending key order, ties to the lower index;
 * bias (E) may be NULL (aux-free balancing: it moves the choice, never the weights). With
 * s->n_group = G >= 2 (DeepSeek-V3's group-limited routing) the K come from the token's
 * s->topk_group best of G groups of E / G consecutive experts, a group scored by the sum of its
 * two largest keys (ties to the lower group); topk_group = G is the ordinary top-k, bit for bit.
 * The weights are computed from the chosen experts as without groups.
 * w (N, K) = route_scale * the chosen scores (renormalised to sum 1 over the K when
 * norm_topk), or route_scale * softmax over the K chosen logits when topk_before_softmax.
 * logits (N, E) is read only when topk_before_softmax. */
void router_gate_forward(int *idx, float *w, const float *scores, const float *logits,
                         const float *bias, int N, const MoeSpec *s);
/* The gate weights alone, for experts already chosen (idx (N, K)): router_gate_forward's
 * second half. A replay of recorded routing (src/model/route_tape.h) forces idx and then asks
 * for the weights the forced choice gets. */
void router_gate_weights(float *w, const int *idx, const float *scores, const float *logits, int N,
                         const MoeSpec *s);

/* The balancing loss of s->balance, unscaled, for N tokens (seq_aux: N / x->T sequences):
 *   aux (and, for monitoring, none and aux_free): E * sum_i f_i P_i (Switch);
 *   seq_aux: mean over sequences of sum_i f_i P_i, f_i = E / (K T) * tokens of the sequence
 *   routed to i, P_i the sequence's mean normalised score (DeepSeek-V3).
 * P uses the scores normalised per token to sum 1: the softmax scores themselves, or
 * s / sum_e s for sigmoid scores. Each equals 1 for perfectly balanced routing. */
float router_balance_loss(const float *scores, const int *idx, int N, const MoeSpec *s,
                          const MoeCtx *x);

/* dlogits (N, E) (written) = d/dlogits [ sum_{n,k} dw[n,k] w[n,k] + bal_scale * balance loss
 *                                        + z_scale * z_loss ]  for every mode of s.
 * f in the balance losses counts discrete choices and is a constant; balance none and
 * aux_free have no loss (bal_scale is ignored). logits (N, E) is read for sigmoid scores and
 * topk_before_softmax, and may be NULL otherwise. */
void router_gate_backward(float *dlogits, const float *dw, const float *scores, const float *lse,
                          const float *logits, const int *idx, const float *w, int N,
                          const MoeSpec *s, const MoeCtx *x, float bal_scale, float z_scale);

/* Gradient of the balance loss with respect to the normalised scores q (N, E) of s->balance,
 * times scale: dq[n, i] = coef[r * E + i] for token n of coefficient row r = n / x->T
 * (seq_aux) or r = 0. coef holds E * (N / x->T) floats for seq_aux, E otherwise. Returns
 * the number of rows (0 when the balance has no loss: then coef is untouched). */
int router_balance_coef(float *coef, const int *idx, int N, const MoeSpec *s, const MoeCtx *x,
                        float scale);

/* Aux-free balancing (Wang et al. 2024): after an optimizer step, with count (E) the step's
 * number of assignments per expert (whole numbers, held in doubles so that sums over
 * micro-batches and processes stay exact) and load_i = count_i / total, bias (E) moves
 * against the imbalance:
 *   sign:          b_i += rate * sign(1/E - load_i)
 *   proportional:  b_i += rate * (1/E - load_i) / (1/E)
 * The sign is decided on the integers (sign(total - E count_i)), so an expert with exactly
 * its fair share keeps its bias: with float fractions the mean of the loads rounds (48 of 384
 * is 0.125 but the mean of eight float loads can be 0.125000003) and such an expert would be
 * pushed. rule is MOE_BIAS_*. */
void router_bias_update(float *bias, const double *count, int E, int rule, float rate);

/* The plain softmax router (the lab's reference): router_gate_forward, router_balance_loss and
 * router_gate_backward with softmax scores, the Switch aux loss, no bias, route_scale 1.
 *
 * Top-k per token: idx (N, K) the chosen experts in descending score order (ties go to the
 * lower expert index, so routing is deterministic); w (N, K) their weights: the scores
 * themselves, or renormalised to sum to 1 over the k chosen when norm_topk is non-zero. */
void router_topk_forward(int *idx, float *w, const float *scores, int N, int E, int K,
                         int norm_topk);

/* Switch load-balancing loss, unscaled: E * sum_i f_i * P_i, with f_i the fraction of the N*K
 * assignments that went to expert i and P_i the mean score of expert i over the N tokens.
 * Equals 1 when routing is perfectly balanced. */
float router_aux_loss(const float *scores, const int *idx, int N, int E, int K);

/* Router z-loss, unscaled: mean over tokens of lse^2. */
float router_z_loss(const float *lse, int N);

/* Backward of the whole router from logits to w, plus both losses:
 *   dlogits (N, E) (written) = d/dlogits [ sum_{n,k} dw[n,k] * w[n,k]
 *                                         + aux_scale * aux_loss + z_scale * z_loss ]
 * aux_scale and z_scale are the loss coefficients times any loss scaling (1 / accum).
 * f_i in the aux loss is treated as a constant (it counts discrete choices). */
void router_backward(float *dlogits, const float *dw, const float *scores, const float *lse,
                     const int *idx, const float *w, int N, int E, int K, int norm_topk,
                     float aux_scale, float z_scale);

/* Balance statistics of one routing decision (docs: src/README.md, "router.csv"):
 * load (E) = fraction of the N*K assignments per expert; maxvio = (max load - mean) / mean;
 * cv = std(load) / mean(load); entropy = mean over tokens of the entropy of the score
 * distribution normalised to sum 1 (sigmoid scores do not), in nats. */
typedef struct {
    float maxvio, cv, entropy, drop_frac;
    float top1; /* mean over tokens of the highest score: how sure the router is */
} RouterStats;
/* maxvio and cv of a load vector (E) (fractions; an average of several batches' loads works);
 * with router_mean_top1, in balance_stats.c */
void load_balance(float *maxvio, float *cv, const float *load, int E);
/* Mean over the N tokens of the highest of each token's E scores (router.csv top1_score). */
float router_mean_top1(const float *scores, int N, int E);
void router_stats(RouterStats *st, float *load, const float *scores, const int *idx, int N, int E,
                  int K);

/* ---- dispatch plan and permutation ------------------------------------------------------- */

/* Where every assignment (n, k) goes in the expert-sorted slot buffer. Expert e owns slots
 * [offsets[e], offsets[e+1]); inside a slice, tokens keep their order (stable). A slot of -1
 * marks a dropped assignment (capacity mode; dropless plans drop nothing); a padded capacity
 * plan ends each slice with padding rows (slot_token -1, counts[e] < the slice's length). */
typedef struct {
    int N, E, K;
    int S;           /* number of used slots, offsets[E] */
    int *counts;     /* (E) assignments kept per expert */
    int *offsets;    /* (E + 1) start of each expert's slice */
    int *slot;       /* (N * K) slot of assignment (n, k), or -1 if dropped */
    int *slot_token; /* (S) token n held in each slot s < S, or -1 for a padding row */
} DispatchPlan;

void dispatch_plan_alloc(DispatchPlan *p, int N_max, int E, int K);
void dispatch_plan_free(DispatchPlan *p);
/* Dropless plan for N tokens (N <= N_max) from idx (N, K). */
void dispatch_plan_build(DispatchPlan *p, const int *idx, int N);

/* ---- what a routing decision did (router.csv, domains.csv) ---------------------------------
 * Everything the trainer reports of one routing decision of N tokens, so that it never reads
 * the routing arrays themselves: the MoE block fills one per forward (route_stats). */
typedef struct {
    int E;
    RouterStats st; /* maxvio, cv, entropy, top1 of this decision (st.drop_frac in float) */
    float *load;    /* (E) each expert's fraction of the routed (token choice) or kept (expert
                       choice) assignments */
    int *routed;    /* (E) assignments routed to each expert; expert choice: the kept ones */
    int *dropped;   /* (E) of those, dropped by a capacity (0 for expert choice) */
    double drop;    /* the dropped fraction: of the N K assignments (token choice), of the
                       tokens no expert picked (expert choice) */
    double pad;     /* the fraction of the plan's rows that are padding (token choice) */
    /* the router's logits (router_logit_stats): the largest |logit| of the call, and the mean
     * over its tokens of the logsumexp (what the z-loss squares) */
    float max_logit, lse_mean;
} RouteStats;

/* r->max_logit = max |logits| (N, E) (0 when N is 0), r->lse_mean = the mean of lse (N), summed
 * in double in token order; the rest of r untouched. */
void router_logit_stats(RouteStats *r, const float *logits, const float *lse, int N, int E);
void route_stats_alloc(RouteStats *r, int E);
void route_stats_free(RouteStats *r);
/* r (written) from the decision: scores (N, E), idx (N, A), the plan built from them. */
void route_stats(RouteStats *r, const float *scores, const int *idx, const DispatchPlan *p, int N,
                 const MoeSpec *s);
/* domains.csv: counts (n_domains, E) += each token's kept assignments, by the token's domain
 * (domains (N), host memory); drops (2) += the dropped assignments (token choice) or the
 * tokens no expert picked (expert choice), and out of how many. */
void route_domains(double *counts, double *drops, const unsigned char *domains, int n_domains,
                   const int *idx, const DispatchPlan *p, int N, const MoeSpec *s);

/* Gather: xe (S, C), row s = x[slot_token[s]] (0 for a padding row).  Backward: dx (N, C) (written)
 * sums the gradients of every slot that holds token n (zero for a token with no kept slot). */
void permute_forward(float *xe, const float *x, const DispatchPlan *p, int C);
void permute_backward(float *dx, const float *dxe, const DispatchPlan *p, int C);

/* Weighted scatter back: y (N, C) (written) = sum_k w[n,k] * ye[slot(n,k)], skipping dropped
 * assignments. Backward: dye (S, C) (written) = w * dy of the slot's token (0 for padding);
 * dw (N, K) (written) = dot(dy[n], ye[slot(n,k)]), 0 for dropped assignments. */
void combine_forward(float *y, const float *ye, const float *w, const DispatchPlan *p, int C);
void combine_backward(float *dye, float *dw, const float *dy, const float *ye, const float *w,
                      const DispatchPlan *p, int C);

/* ---- expert choice (Zhou et al. 2022; expert_choice.c) -------------------------------------
 * Every expert picks the cap tokens of the micro-batch with the highest score for it. The
 * block then treats every (token n, expert e) pair as a candidate assignment: A = E
 * assignments per token instead of K, a plan slot of -1 for a pair the expert did not pick. */

/* Assignments per token of the routing arrays idx, w and the plan's slot: K or E. */
int moe_assignments_per_token(const MoeSpec *s);
/* Tokens each expert picks from N: ceil(ec_capacity * N * K / E), clamped to [1, N]. */
int moe_ec_capacity(const MoeSpec *s, int N);
/* Rows of the slot buffers (xe, ye, g, u, h) for up to N tokens: N * K, or E * cap(N) for
 * expert choice; padded capacity mode also needs the padded rows (moe_padded_slots) of both
 * capacity_factor and eval_capacity_factor, in sequences of s->seq_len tokens. */
size_t moe_slots_max(const MoeSpec *s, int N);

/* ---- token-choice capacity (capacity.c) ----------------------------------------------------
 * With a capacity factor > 0 in force (MoeCtx.capacity_factor) every expert takes at most cap
 * assignments per scope (the N tokens of the micro-batch, or each sequence of T tokens), the
 * rest are dropped (slot -1). */

/* cap = max(min_capacity, ceil(factor * tokens * K / E)), clamped to [1, tokens]. */
int moe_capacity(const MoeSpec *s, float factor, int tokens);
/* Rows each expert owns in a padded plan of N tokens in sequences of T: cap(N), or
 * (N / T) cap(T) with capacity_scope sequence. */
int moe_expert_rows(const MoeSpec *s, float factor, int T, int N);
/* Slot rows of a padded plan at this factor: E * moe_expert_rows, or 0 when the plan would not
 * be padded (dropless factor, padded off, expert choice). */
size_t moe_padded_slots(const MoeSpec *s, float factor, int T, int N);

/* Capacity plan of N tokens from idx (N, K), scores (N, E) (drop_policy score), w (N, K)
 * (second_expert_random), at the context's capacity factor and T: expert e keeps at most cap
 * assignments per scope, by s->drop_policy; kept ones get slots in token order inside e's
 * slice, dropped ones slot -1. Unpadded, slices are packed (S = kept assignments); padded, e
 * owns [e R, (e + 1) R), R = moe_expert_rows, its unused rows have slot_token -1 and S = E R.
 * With s->second_expert_random, K = 2 and x->rng non-NULL, each token's second assignment is
 * first dropped with probability 1 - min(1, 2 w[n, 1]) (one uniform per token, drawn serially
 * in token order). p must hold moe_slots_max slot_token entries (moe_acts_alloc). */
void capacity_plan_build(DispatchPlan *p, const int *idx, const float *scores, const float *w,
                         int N, const MoeSpec *s, const MoeCtx *x);

/* idx (N, E) = e, w (N, E) = route_scale * scores (no renormalisation), and the plan p
 * (allocated with K = E): expert e picks its cap highest-scoring tokens (ties to the lower
 * token index) and owns slots [e cap, (e + 1) cap), its tokens in token order; slot(n, e) is
 * -1 for a pair e did not pick. scores (N, E). */
void expert_choice_forward(int *idx, float *w, DispatchPlan *p, const float *scores, int N,
                           const MoeSpec *s, const MoeCtx *x);

/* router.csv statistics of an expert-choice plan: load (E) = each expert's fraction of the
 * kept assignments (equal by construction), maxvio, cv, entropy as router_stats, and
 * drop_frac = the fraction of tokens no expert picked. scores (N, E). */
void expert_choice_stats(RouterStats *st, float *load, const float *scores, const DispatchPlan *p);

/* ---- experts: one SwiGLU per expert over its contiguous slice ------------------------------
 * Weights stacked over experts: Wg, Wu (E, F, C); Wd (E, C, F). For the rows of expert e,
 * [offsets[e], offsets[e + 1]):
 *   g = xe Wg[e]^T, u = xe Wu[e]^T (S_e, F);  h = silu(g) * u;  ye = h Wd[e]^T (S_e, C).
 * g, u, h (S, F) are kept for the backward pass. An expert with no rows is skipped. counts
 * (E), for a padded capacity plan, holds the kept rows at the start of each slice, the rest
 * being padding rows; each part is its own product, so the kept rows get bit for bit the
 * results of an unpadded plan, and the padding rows are still computed. NULL: every row is
 * kept. */
void experts_forward(float *ye, float *g, float *u, float *h, const float *xe, const float *Wg,
                     const float *Wu, const float *Wd, const int *offsets, const int *counts, int E,
                     int C, int F);
/* dxe (S, C) written; dWg, dWu, dWd accumulated; dg, du, dh (S, F) are scratch. */
void experts_backward(float *dxe, float *dWg, float *dWu, float *dWd, float *dg, float *du,
                      float *dh, const float *dye, const float *xe, const float *g, const float *u,
                      const float *h, const float *Wg, const float *Wu, const float *Wd,
                      const int *offsets, const int *counts, int E, int C, int F);

/* Mean cosine similarity over the E (E - 1) / 2 pairs of experts, each expert's weights taken
 * as one vector (its rows of Wg and Wu (E, F, C) and of Wd (E, C, F) end to end). 1 for
 * identical experts (copies of one dense FFN), near 0 for independent random ones. For
 * router.csv's expert_sim; 0 when E < 2. */
double experts_similarity(const float *Wg, const float *Wu, const float *Wd, int E, int C, int F);

#endif
