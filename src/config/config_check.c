/*
 * config_check.c: the checks that involve more than one setting (config_validate in
 * config.c checks each key against its own range first, then calls these). Each message
 * names every key involved and what to change.
 */
#include "config/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/mix.h"
#include "moe/moe_ops.h"

/* data.mix, data.mix_temperature, data.mix_end: their syntax, and that they go together (the
 * names are checked against the shard when training starts, io/mix.h). */
static int check_mix(const Config *c, char *err, int errlen) {
    MixSpec m;
    if (mix_parse(c->mix, &m, err, errlen)) return -1;
    if (c->mix_temperature > 0 && m.kind != MIX_NATURAL)
        return set_error(err, errlen,
                         "data.mix=%s and data.mix_temperature=%g both set the shares; use one "
                         "(data.mix=natural with a temperature)",
                         c->mix, (double)c->mix_temperature);
    const int end = strcmp(c->mix_end, "none") != 0;
    char msg[400];
    if (end && mix_parse(c->mix_end, &m, msg, sizeof msg))
        return set_error(err, errlen, "data.mix_end: %s", msg);
    if (end != (c->mix_end_frac > 0))
        return set_error(err, errlen,
                         "data.mix_end and data.mix_end_frac go together: the mix of the last "
                         "fraction of the steps, and that fraction (e.g. data.mix_end=uniform "
                         "data.mix_end_frac=0.2)");
    /* the end mix takes the last round(frac * steps) updates, in float as setup_mix
     * (train/train.c) computes them; none would leave it unused without a word */
    if (end && lround(c->mix_end_frac * c->steps) < 1) {
        char least[32];
        for (double f = 0.5 / c->steps;; f *= 1.01) { /* the smallest, as written, that works */
            snprintf(least, sizeof least, "%.3g", f);
            if (lround(strtof(least, NULL) * c->steps) >= 1) break;
        }
        return set_error(err, errlen,
                         "data.mix_end_frac=%g of train.steps=%d gives data.mix_end no step (it "
                         "takes the last round(%g x %d) = 0); set data.mix_end_frac=%s or more "
                         "for one step, or data.mix_end=none",
                         (double)c->mix_end_frac, c->steps, (double)c->mix_end_frac, c->steps,
                         least);
    }
    return 0;
}

/* The attention heads: n_head query heads in kv_heads groups, each head of an even size
 * (RoPE's pairs): model.head_dim, or d_model split into n_head heads. */
/* Latent attention's widths, and none of multi-head attention's own settings beside them. */
static int check_latent(const Config *c, char *err, int errlen) {
    const int mla = c->attention == MOE_ATTN_MLA;
    const int set =
        c->mla_q_rank || c->mla_kv_rank || c->mla_rope_dim || c->mla_nope_dim || c->mla_v_dim;
    if (!mla)
        return set ? set_error(err, errlen,
                               "mla.* is set but model.attention=mha: the latent widths are "
                               "latent attention's; set model.attention=mla, or leave mla.* at 0")
                   : 0;
    if (c->kv_heads || c->head_dim || c->qk_norm != MOE_QK_NORM_NONE)
        return set_error(err, errlen,
                         "model.attention=mla with model.kv_heads, model.head_dim or "
                         "model.qk_norm: latent attention's heads take their widths from mla.* "
                         "and share one latent (normed) for keys and values; leave those at 0 "
                         "and none");
    if (c->mla_kv_rank < 1 || c->mla_v_dim < 1 || c->mla_rope_dim < 2 || c->mla_rope_dim % 2)
        return set_error(err, errlen,
                         "model.attention=mla needs mla.kv_rank >= 1, mla.v_dim >= 1 and an even "
                         "mla.rope_dim >= 2 (RoPE rotates pairs; got kv_rank %d, v_dim %d, "
                         "rope_dim %d)",
                         c->mla_kv_rank, c->mla_v_dim, c->mla_rope_dim);
    return 0;
}

static int check_heads(const Config *c, char *err, int errlen) {
    if (c->attention == MOE_ATTN_MLA) return check_latent(c, err, errlen);
    if (check_latent(c, err, errlen)) return -1;
    if (c->kv_heads > c->n_head || (c->kv_heads > 0 && c->n_head % c->kv_heads != 0))
        return set_error(err, errlen,
                         "model.kv_heads=%d does not divide model.n_head=%d: each key-value head "
                         "serves an equal group of query heads; choose a divisor of n_head (1 "
                         "for multi-query, 0 or %d for multi-head)",
                         c->kv_heads, c->n_head, c->n_head);
    if (c->head_dim > 0) {
        if (c->head_dim % 2 != 0)
            return set_error(err, errlen,
                             "model.head_dim=%d is odd, but RoPE rotates pairs of channels; "
                             "choose an even head size (e.g. model.head_dim=%d)",
                             c->head_dim, c->head_dim + 1);
        return 0;
    }
    /* a suggestion that also passes the next check: a multiple of 2 * n_head */
    int even_mult = (c->d_model / (2 * c->n_head)) * 2 * c->n_head;
    if (even_mult == 0) even_mult = 2 * c->n_head;
    if (c->d_model % c->n_head != 0)
        return set_error(err, errlen,
                         "model.d_model=%d is not divisible by model.n_head=%d; change "
                         "one of them (e.g. model.d_model=%d)",
                         c->d_model, c->n_head, even_mult);
    if ((c->d_model / c->n_head) % 2 != 0)
        return set_error(err, errlen,
                         "head size model.d_model/model.n_head = %d/%d = %d is odd, but "
                         "RoPE rotates pairs of channels; choose model.d_model and model.n_head so "
                         "the head size is even (e.g. model.d_model=%d)",
                         c->d_model, c->n_head, c->d_model / c->n_head, even_mult);
    return 0;
}

/* The routing and its balancing: which settings of moe. go together. */
static int check_routing(const Config *c, char *err, int errlen) {
    if (c->num_experts == 1)
        return set_error(
            err, errlen,
            "moe.num_experts=1: an MoE block with one expert is just a "
            "dense feed-forward; set moe.num_experts=0 for a dense model or >= 2 for MoE");
    if (c->num_experts > 0 && c->top_k > c->num_experts)
        return set_error(err, errlen,
                         "moe.top_k=%d exceeds moe.num_experts=%d; lower moe.top_k or "
                         "add experts",
                         c->top_k, c->num_experts);
    if (c->topk_before_softmax && c->score != MOE_SCORE_SOFTMAX)
        return set_error(err, errlen,
                         "moe.topk_before_softmax=1 takes a softmax over the chosen logits, but "
                         "moe.score=sigmoid has no softmax; set moe.score=softmax or "
                         "moe.topk_before_softmax=0");
    if (c->topk_before_softmax && !c->norm_topk)
        return set_error(err, errlen,
                         "moe.topk_before_softmax=1 always gives weights that sum to 1 over the "
                         "chosen experts, so moe.norm_topk=0 would be ignored; set "
                         "moe.norm_topk=1 (or moe.topk_before_softmax=0 for unnormalised weights)");
    if (c->routing == MOE_ROUTING_EXPERT_CHOICE && c->balance != MOE_BALANCE_NONE)
        return set_error(err, errlen,
                         "moe.routing=expert_choice gives every expert the same number of "
                         "tokens, so it needs no balancing, but moe.balance is not none; set "
                         "moe.balance=none (moe.z_coef still applies)");
    if (c->routing == MOE_ROUTING_EXPERT_CHOICE && c->topk_before_softmax)
        return set_error(err, errlen,
                         "moe.topk_before_softmax=1 picks experts per token, but "
                         "moe.routing=expert_choice lets the experts pick the tokens; set "
                         "moe.topk_before_softmax=0 (or moe.routing=token_choice)");
    if ((c->balance_scope != MOE_SCOPE_MICRO || c->balance_groups > 0) &&
        (c->balance != MOE_BALANCE_AUX || c->routing != MOE_ROUTING_TOKEN_CHOICE))
        return set_error(err, errlen,
                         "moe.balance_scope=global and moe.balance_groups change the Switch aux "
                         "loss of token choice, but moe.balance is not aux (or moe.routing is "
                         "not token_choice); set moe.balance=aux, or moe.balance_scope=micro "
                         "and moe.balance_groups=0");
    if (c->balance_groups == 1 || (c->balance_groups > 1 && c->num_experts % c->balance_groups))
        return set_error(err, errlen,
                         "moe.balance_groups=%d must be 0 (every expert) or a divisor >= 2 of "
                         "moe.num_experts=%d (groups of equal size)",
                         c->balance_groups, c->num_experts);
    return 0;
}

/* Group-limited routing (moe.n_group, moe.topk_group): groups of equal size, each with the two
 * scores its group score sums, and enough experts in the groups a token keeps for its top-k. */
static int check_groups(const Config *c, char *err, int errlen) {
    const int G = c->n_group, E = c->num_experts;
    if (G == 0) {
        if (c->topk_group > 0)
            return set_error(err, errlen,
                             "moe.topk_group=%d limits a token to its best groups of experts, but "
                             "moe.n_group is 0 (no groups); set moe.n_group (e.g. moe.n_group=%d) "
                             "or moe.topk_group=0",
                             c->topk_group, c->topk_group > 1 ? c->topk_group : 2);
        return 0;
    }
    if (E == 0) return 0; /* a dense model routes nothing */
    if (G == 1 || E % G != 0)
        return set_error(err, errlen,
                         "moe.n_group=%d must be 0 (no groups) or a divisor >= 2 of "
                         "moe.num_experts=%d (groups of equal size)",
                         G, E);
    if (E / G < 2)
        return set_error(err, errlen,
                         "moe.n_group=%d leaves %d expert a group, but a group's score is the "
                         "sum of its two best scores; use at most moe.n_group=%d groups",
                         G, E / G, E / 2);
    if (c->topk_group > G)
        return set_error(err, errlen,
                         "moe.topk_group=%d exceeds moe.n_group=%d; a token keeps 1 to %d groups "
                         "(0: all)",
                         c->topk_group, G, G);
    const int kept = (c->topk_group > 0 ? c->topk_group : G) * (E / G);
    if (c->top_k > kept)
        return set_error(err, errlen,
                         "moe.top_k=%d experts cannot be chosen from moe.topk_group=%d groups of "
                         "%d experts (%d in all); raise moe.topk_group or lower moe.top_k",
                         c->top_k, c->topk_group, E / G, kept);
    if (c->routing == MOE_ROUTING_EXPERT_CHOICE)
        return set_error(err, errlen,
                         "moe.n_group limits the experts each token picks, but "
                         "moe.routing=expert_choice lets the experts pick the tokens; set "
                         "moe.n_group=0 (or moe.routing=token_choice)");
    return 0;
}

/* The capacity settings: what each routing and capacity mode can take. */
static int check_capacity(const Config *c, char *err, int errlen) {
    if (c->eval_capacity_factor < 0.0f && c->eval_capacity_factor != -1.0f)
        return set_error(err, errlen,
                         "moe.eval_capacity_factor=%g: use -1 (the training capacity_factor), 0 "
                         "(dropless) or a positive factor",
                         c->eval_capacity_factor);
    if (c->second_expert_random && c->num_experts > 0 &&
        (c->top_k != 2 || !(c->capacity_factor > 0.0f)))
        return set_error(err, errlen,
                         "moe.second_expert_random=1 drops second experts in capacity mode "
                         "with two experts per token, but moe.top_k=%d and "
                         "moe.capacity_factor=%g; set moe.top_k=2 and moe.capacity_factor > 0 "
                         "(or moe.second_expert_random=0)",
                         c->top_k, c->capacity_factor);
    if (c->padded && c->num_experts > 0 && !(c->capacity_factor > 0.0f) &&
        !(c->eval_capacity_factor > 0.0f))
        return set_error(err, errlen,
                         "moe.padded=1 pads every expert to its capacity, but moe.capacity_factor "
                         "is 0 (dropless: no fixed buffer to pad); set moe.capacity_factor > 0 "
                         "or moe.padded=0");
    if (c->routing == MOE_ROUTING_EXPERT_CHOICE &&
        (c->capacity_factor > 0.0f || c->eval_capacity_factor > 0.0f))
        return set_error(err, errlen,
                         "moe.capacity_factor and moe.eval_capacity_factor apply to token "
                         "choice; expert choice sizes its experts with moe.ec_capacity: set "
                         "them to 0 and -1 (or moe.routing=token_choice)");
    return 0;
}

int config_check_combinations(const Config *c, char *err, int errlen) {
    if (check_mix(c, err, errlen) || check_heads(c, err, errlen) || check_routing(c, err, errlen) ||
        check_groups(c, err, errlen) || check_capacity(c, err, errlen))
        return -1;
    if (c->num_experts > 0 && c->first_dense >= c->n_layer)
        return set_error(err, errlen,
                         "moe.first_dense=%d leaves no MoE block among model.n_layer=%d "
                         "layers; lower moe.first_dense or set moe.num_experts=0 for a dense model",
                         c->first_dense, c->n_layer);
    if (c->mtp_depth >= c->seq_len)
        return set_error(err, errlen,
                         "model.mtp_depth=%d leaves module %d no position whose target lies in a "
                         "window of model.seq_len=%d tokens; lower model.mtp_depth below "
                         "model.seq_len",
                         c->mtp_depth, c->mtp_depth, c->seq_len);
    if (c->warmup > c->steps)
        return set_error(err, errlen,
                         "train.warmup=%d is longer than train.steps=%d; lower "
                         "train.warmup or raise train.steps",
                         c->warmup, c->steps);
    /* a run needs at least dist.tp x dist.ep x dist.pp processes: what holds for that many is
     * checked here */
    return config_check_dist(c, c->tp * c->ep * c->pp, err, errlen);
}

/* The model's widths that dist.tp splits: the heads and the key-value heads. */
static int check_tensor_parallel(const Config *c, char *err, int errlen) {
    if (c->n_head % c->tp != 0)
        return set_error(err, errlen,
                         "dist.tp=%d splits the attention by heads, but model.n_head=%d heads "
                         "do not split into %d equal shares (%d / %d leaves %d); choose dist.tp "
                         "dividing %d",
                         c->tp, c->n_head, c->tp, c->n_head, c->tp, c->n_head % c->tp, c->n_head);
    const int kv = config_kv_heads(c);
    if (kv % c->tp != 0)
        return set_error(err, errlen,
                         "dist.tp=%d splits the attention by heads, but the model's %d key-value "
                         "heads (model.kv_heads) do not split into %d equal shares; choose "
                         "dist.tp dividing %d, or more key-value heads",
                         c->tp, kv, c->tp, kv);
    return 0;
}

/* dist.zero=3 gathers a stage's weights at a time (model/zero.h): a tied head (the
 * embedding's weights, used by the head) and multi-token prediction (the head's, used by the
 * modules) use weights of two stages. */
static int check_zero_weights(const Config *c, char *err, int errlen) {
    if (!c->tied && c->mtp_depth == 0) return 0;
    return set_error(err, errlen,
                     "dist.zero=3 gathers the weights a stage at a time, and %s uses weights of "
                     "two stages: use dist.zero=2, or %s",
                     c->tied ? "a tied head (model.tied=1)" : "multi-token prediction",
                     c->tied ? "model.tied=0" : "model.mtp_depth=0");
}

/* The widths dist.tp splits besides the heads: the dense feed-forward's and the shared
 * experts' hidden channels; and the rows of a replica's micro-batch, which it splits between
 * blocks (sequence parallelism), whole sequences where the MoE block counts by sequence. */
static int check_tp_rows(const Config *c, int world, char *err, int errlen) {
    const int hidden = c->num_shared * (c->d_expert ? c->d_expert : c->d_ff);
    /* a dense block: below moe.first_dense, between the MoE blocks of moe.every > 1, or all */
    const int dense = c->num_experts == 0 || c->first_dense > 0 ||
                      (c->every > 1 && c->n_layer - c->first_dense > 1);
    if (dense && c->d_ff % c->tp != 0)
        return set_error(err, errlen,
                         "dist.tp=%d splits the dense feed-forward's hidden channels, but "
                         "model.d_ff=%d does not split into %d equal shares; choose dist.tp "
                         "dividing %d",
                         c->tp, c->d_ff, c->tp, c->d_ff);
    if (c->vocab % c->tp != 0)
        return set_error(err, errlen,
                         "dist.tp=%d splits the vocabulary (the embedding's and the head's rows), "
                         "but model.vocab=%d does not split into %d equal shares; choose dist.tp "
                         "dividing %d, or a vocabulary it divides",
                         c->tp, c->vocab, c->tp, c->vocab);
    if (c->num_experts > 0 && hidden % c->tp != 0)
        return set_error(err, errlen,
                         "dist.tp=%d splits the shared experts' %d hidden channels "
                         "(moe.num_shared x moe.d_expert), which do not split into %d equal "
                         "shares; choose dist.tp dividing %d",
                         c->tp, hidden, c->tp, hidden);
    const int B = c->batch / (world / c->tp); /* a replica's sequences */
    if ((long long)B * c->seq_len % c->tp != 0)
        return set_error(err, errlen,
                         "dist.tp=%d splits a replica's %d x %d tokens between its ranks "
                         "(sequence parallelism), and %d does not split into %d equal shares; "
                         "change train.batch or model.seq_len",
                         c->tp, B, c->seq_len, B * c->seq_len, c->tp);
    const int by_sequence = c->balance == MOE_BALANCE_SEQ_AUX || c->capacity_factor > 0.0f ||
                            c->eval_capacity_factor > 0.0f;
    if (c->num_experts > 0 && by_sequence && B % c->tp != 0)
        return set_error(err, errlen,
                         "dist.tp=%d gives each rank %d x %d / %d tokens of a replica's %d "
                         "sequences, not whole sequences, which moe.balance=seq_aux and a "
                         "capacity (moe.capacity_factor, moe.eval_capacity_factor) count by; "
                         "make train.batch / (processes / dist.tp) a multiple of %d, or train "
                         "dropless without seq_aux",
                         c->tp, B, c->seq_len, c->tp, B, c->tp);
    return 0;
}

/* What the model does not split over dist.tp yet. */
static int check_tp_settings(const Config *c, char *err, int errlen) {
    const char *what = c->attention == MOE_ATTN_MLA       ? "model.attention=mla"
                       : c->qk_norm == MOE_QK_NORM_FULL   ? "model.qk_norm=full"
                       : c->mtp_depth > 0                 ? "model.mtp_depth > 0"
                       : c->collectives == DIST_COLL_NCCL ? "dist.collectives=nccl"
                       : c->device == MOE_DEVICE_CUDA     ? "train.device=cuda"
                                                          : NULL;
    if (!what) return 0;
    return set_error(err, errlen,
                     "dist.tp=%d: %s is not split over tensor-parallel ranks (multi-head or "
                     "grouped-query attention with qk-norm per head or none, dense and MoE "
                     "blocks, on the CPU backends with MPI's or teach's collectives are); "
                     "set dist.tp=1, or change that setting",
                     c->tp, what);
}

int config_pp_stage(const Config *c, int s, int *first, int *last, char *err, int errlen) {
    const int P = c->pp > 0 ? c->pp : 1, L = c->n_layer;
    if (strcmp(c->pp_layers, "even") == 0) {
        if (L < P)
            return set_error(err, errlen,
                             "dist.pp=%d stages need a layer each, and the model has %d "
                             "(model.n_layer); use at most %d stages",
                             P, L, L);
        /* layer l on stage floor(l P / L), as moe plan splits them */
        *first = (int)(((long)L * s + P - 1) / P);
        *last = (int)(((long)L * (s + 1) + P - 1) / P);
        return 0;
    }
    /* "2,4,4,2": stage s starts after the counts before it */
    const char *p = c->pp_layers;
    int stages = 0, sum = 0;
    *first = *last = 0;
    while (*p) {
        char *end = NULL;
        const long n = strtol(p, &end, 10);
        if (end == p || n < 1 || n > L || (*end != ',' && *end != '\0'))
            return set_error(err, errlen,
                             "dist.pp_layers=%s: write each stage's layer count, 1 or more, "
                             "separated by commas (2,4,4,2), or even",
                             c->pp_layers);
        if (stages == s) *first = sum, *last = sum + (int)n;
        sum += (int)n, stages++;
        p = *end ? end + 1 : end;
    }
    if (stages != P || sum != L)
        return set_error(
            err, errlen,
            "dist.pp_layers=%s gives %d stages %d layers, and the model has dist.pp=%d "
            "stages of model.n_layer=%d layers; give %d counts adding up to %d",
            c->pp_layers, stages, sum, P, L, P, L);
    return 0;
}

/* What a pipeline needs: dist.pp dividing the processes, its layers split over the stages,
 * and none of the settings whose weights or losses span two stages. */
static int check_pipeline(const Config *c, int world, char *err, int errlen) {
    if (world % c->pp != 0)
        return set_error(err, errlen,
                         "dist.pp=%d pipeline stages do not divide the %d processes (the world is "
                         "dist.pp stages of dist.tp x dist.ep x data-parallel processes); start "
                         "a multiple of %d processes (mpirun -np N) or change dist.pp",
                         c->pp, world, c->pp);
    int first, last;
    for (int s = 0; s < c->pp; s++)
        if (config_pp_stage(c, s, &first, &last, err, errlen) != 0) return -1;
    const char *what = c->tied            ? "a tied head (model.tied=1)"
                       : c->mtp_depth > 0 ? "multi-token prediction (model.mtp_depth)"
                       : c->collectives == DIST_COLL_NCCL ? "dist.collectives=nccl"
                       : c->device == MOE_DEVICE_CUDA     ? "train.device=cuda"
                                                          : NULL;
    if (!what) return 0;
    return set_error(err, errlen,
                     "dist.pp=%d: %s is not run over pipeline stages yet (%s); use dist.pp=1, "
                     "or %s",
                     c->pp, what,
                     c->tied || c->mtp_depth > 0 ? "it uses the embedding or head of the first "
                                                   "and the last stage together"
                                                 : "the stages' messages go through the host's MPI",
                     c->tied                        ? "model.tied=0"
                     : c->mtp_depth > 0             ? "model.mtp_depth=0"
                     : c->device == MOE_DEVICE_CUDA ? "train.device=cpu"
                                                    : "dist.collectives=mpi");
}

int config_check_dist(const Config *c, int world, char *err, int errlen) {
    if (c->zero == 3 && check_zero_weights(c, err, errlen) != 0) return -1;
    if (c->pp > 1 && check_pipeline(c, world, err, errlen) != 0) return -1;
    /* every check below is of one pipeline stage, which is a world of its own to them */
    if (c->pp > 1) world /= c->pp;
    const int replica = c->tp * c->ep; /* the processes of one data-parallel replica */
    if (world % replica != 0 && c->tp > 1)
        return set_error(err, errlen,
                         "dist.tp=%d x dist.ep=%d = %d processes a data-parallel replica does "
                         "not divide the %d processes (the world is dist.tp x dist.ep x "
                         "data-parallel); start a multiple of %d processes (mpirun -np N) or "
                         "change dist.tp or dist.ep",
                         c->tp, c->ep, replica, world, replica);
    if (world % c->ep != 0)
        return set_error(err, errlen,
                         "dist.ep=%d does not divide the %d processes; start a multiple of %d "
                         "processes (mpirun -np N) or set dist.ep to a divisor of %d",
                         c->ep, world, c->ep, world);
    if (c->tp > 1 && check_tensor_parallel(c, err, errlen) != 0) return -1;
    if (c->ep > 1 && c->num_experts == 0)
        return set_error(err, errlen,
                         "dist.ep=%d spreads the experts over processes, but the model is dense "
                         "(moe.num_experts=0); set dist.ep=1",
                         c->ep);
    if (c->num_experts > 0 && c->num_experts % c->ep != 0)
        return set_error(err, errlen,
                         "moe.num_experts=%d cannot be shared evenly by dist.ep=%d processes; "
                         "choose dist.ep dividing %d",
                         c->num_experts, c->ep, c->num_experts);
    /* the tensor-parallel ranks of a replica read the same sequences */
    const int readers = world / c->tp;
    if (c->batch % readers != 0)
        return set_error(err, errlen,
                         "train.batch=%d sequences cannot be split evenly over %d data-parallel "
                         "readers (%d processes / dist.tp=%d; train.batch is the global batch); "
                         "use a multiple of %d",
                         c->batch, readers, world, c->tp, readers);
    if (c->ep > 1 && c->num_experts > 0 && c->n_group > 0 && c->n_group % c->ep != 0)
        return set_error(err, errlen,
                         "moe.n_group=%d groups do not line up with the dist.ep=%d processes that "
                         "hold the experts (each holds moe.num_experts / dist.ep consecutive "
                         "ones); choose moe.n_group a multiple of dist.ep, so that each process "
                         "holds whole groups and a token's rows go to at most moe.topk_group "
                         "processes",
                         c->n_group, c->ep);
    if (c->ep > 1 && c->num_experts > 0 && c->dispatch == DIST_DISPATCH_TOKENS && c->padded)
        return set_error(err, errlen,
                         "dist.dispatch=tokens sends each token once to a process and returns "
                         "its experts' weighted sum, but moe.padded=1 pads every expert with "
                         "rows that belong to no token; set moe.padded=0 or dist.dispatch=rows");
    if (c->tp > 1 && check_tp_rows(c, world, err, errlen) != 0) return -1;
    if (c->tp > 1 && check_tp_settings(c, err, errlen) != 0) return -1;
    if (world == 1 || c->num_experts == 0) return 0;
    /* the settings whose result would depend on how the batch is split */
    if (c->routing == MOE_ROUTING_EXPERT_CHOICE)
        return set_error(err, errlen,
                         "moe.routing=expert_choice ranks all tokens of the batch together, "
                         "which %d processes each holding part of it cannot do; use "
                         "moe.routing=token_choice or one process",
                         world);
    if ((c->capacity_factor > 0.0f || c->eval_capacity_factor > 0.0f) &&
        c->capacity_scope == MOE_CAP_BATCH)
        return set_error(err, errlen,
                         "moe.capacity_scope=batch counts each expert's tokens over the whole "
                         "batch, which %d processes each hold part of; use "
                         "moe.capacity_scope=sequence (each sequence lives on one process), "
                         "dropless (moe.capacity_factor=0) or one process",
                         world);
    if (c->jitter > 0.0f || c->noise > 0.0f || c->second_expert_random)
        return set_error(err, errlen,
                         "moe.jitter, moe.noise and moe.second_expert_random draw from one "
                         "random stream over the batch, which %d processes cannot share; set "
                         "them to 0 or use one process",
                         world);
    return 0;
}
