/*
 * moe_block.c: the Mixture-of-Experts feed-forward block, forward and backward.
 *
 *   logits = x Wr^T (N, E) -> scores (softmax or sigmoid) -> idx, w = top-k     (router.c)
 *   aux_loss (the balance loss), z_loss of this routing, kept in MoeActs for the trainer
 *                                                                     (router_balance.c)
 *   plan = counting sort of idx by expert                             (permute.c)
 *          or, with moe.capacity_factor > 0, at most cap per expert   (capacity.c)
 *   xe = gather(x) (S, C) -> ye = experts(xe) (S, C)                  (permute.c, experts.c)
 *   y = sum_k w[n,k] ye[slot(n,k)] (N, C)                             (permute.c)
 *
 * With moe.routing=expert_choice the top-k and plan steps are one: each expert picks its
 * tokens (expert_choice.c), idx and w become (N, E) with a slot of -1 for the pairs not
 * picked, and everything after the plan runs unchanged.
 *
 * x reaches y along two paths: through the experts (the value) and through the router (the
 * weights w, and the aux and z losses). The backward pass follows both and adds the two input
 * gradients at the end.
 *
 * Every buffer is the backend's memory and every step one of its operations
 * (src/backend/backend.h), so the block runs unchanged on every backend.
 *
 * Accumulation rule (nn/ops.h): weight gradients in MoeGrads are added to (+=); dx is written.
 */
#include "model/moe_block.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/ep.h"
#include "model/profile.h"
#include "model/route_tape.h"

void moe_spec_from_config(MoeSpec *s, const Config *c, int seq_len) {
    *s = (MoeSpec){.d_model = c->d_model,
                   .num_experts = c->num_experts,
                   .top_k = c->top_k,
                   .d_expert = config_expert_hidden(c),
                   .norm_topk = c->norm_topk,
                   .aux_coef = c->aux_coef,
                   .z_coef = c->z_coef,
                   .score = c->score,
                   .topk_before_softmax = c->topk_before_softmax,
                   .route_scale = c->route_scale,
                   .balance = c->balance,
                   .jitter = c->jitter,
                   .noise = c->noise,
                   .routing = c->routing,
                   .ec_capacity = c->ec_capacity,
                   .capacity_factor = c->capacity_factor,
                   .capacity_scope = c->capacity_scope,
                   .min_capacity = c->min_capacity,
                   .drop_policy = c->drop_policy,
                   .padded = c->padded,
                   .eval_capacity_factor = c->eval_capacity_factor,
                   .second_expert_random = c->second_expert_random,
                   .router_precision = c->router_precision,
                   .balance_scope = c->balance_scope,
                   .balance_groups = c->balance_groups,
                   .n_group = c->n_group,
                   /* 0: every group, the ordinary top-k */
                   .topk_group = c->topk_group > 0 ? c->topk_group : c->n_group,
                   .ep_dispatch = c->dispatch,
                   .seq_len = seq_len};
}

/* The routing arrays idx, w, dw hold NA = N A entries (A = K, or E for expert choice: every
 * (token, expert) pair is a candidate); the slot buffers S rows (moe_slots_max). */
static size_t work_bytes_of(const MoeSpec *s, int N_max) {
    return (moe_work_bytes(s, N_max) + 3) / 4 * 4; /* whole 4-byte words */
}

void moe_acts_host_alloc(const Backend *be, MoeActs *a, const MoeSpec *s, Dist *dist, int N_max) {
    const int C = s->d_model, E = s->num_experts;
    const size_t N = (size_t)N_max;
    memset(a, 0, sizeof(*a));
    a->plan.E = E;
    a->plan.K = moe_assignments_per_token(s);
    a->work_bytes = work_bytes_of(s, N_max);
    route_stats_alloc(&a->route, E);
    if (!be->host_memory && (s->jitter > 0.0f || s->noise > 0.0f))
        a->drawn = (float *)malloc_check(N * (C > E ? C : E) * sizeof(float));
    if (moe_balance_f_outside(s, dist)) {
        a->global_f_host = floats_alloc((size_t)E);
        a->global_count = (double *)calloc_check((size_t)E + 1, sizeof(double));
        a->step_count = (double *)calloc_check((size_t)E + 1, sizeof(double));
        /* the ops read f where they run: a device's copy, or the host array itself */
        a->global_f = a->global_f_host;
        if (!be->host_memory) a->global_f = (float *)be->alloc(be, (size_t)E * sizeof(float));
        if (!be->host_memory) a->idx_host = (int *)malloc_check(N * s->top_k * sizeof(int));
    }
    if (dist && dist->ep > 1) {
        a->ep = (EpActs *)calloc_check(1, sizeof(EpActs));
        ep_acts_host_alloc(be, a->ep, s, dist->ep, N_max);
    }
}

void moe_acts_entries(ActTable *t, const char *pre, const MoeSpec *s, int ep, int N_max,
                      MoeActs *a) {
    const size_t C = (size_t)s->d_model, E = (size_t)s->num_experts, F = (size_t)s->d_expert;
    const size_t N = (size_t)N_max, NA = N * moe_assignments_per_token(s);
    const size_t S = moe_slots_max(s, N_max);
    /* logits: x router^T; scores: their softmax (or sigmoid); lse: the logsumexp per token,
     * for the z-loss */
    acts_add(t, ACT_FLOAT, ACT_FFN, N * E, ACT_FIELD(a, logits), "%s.logits", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, N * E, ACT_FIELD(a, scores), "%s.scores", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, N, ACT_FIELD(a, lse), "%s.lse", pre);
    /* idx (N, A) plus one spare word; w: the gate weights, one per (token, k) or, for expert
     * choice, per (token, expert) */
    acts_add(t, ACT_INT, ACT_INT_WORDS, NA + 1, ACT_FIELD(a, idx), "%s.idx", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, NA, ACT_FIELD(a, w), "%s.w", pre);
    /* the dispatch plan: counts (E), offsets (E + 1), slot (N A + 1) and slot_token (N A + 1,
     * or S + 1 when a padded capacity plan has more rows than assignments) */
    acts_add(t, ACT_INT, ACT_INT_WORDS, E, ACT_FIELD(a, plan.counts), "%s.plan.counts", pre);
    acts_add(t, ACT_INT, ACT_INT_WORDS, E + 1, ACT_FIELD(a, plan.offsets), "%s.plan.offsets", pre);
    acts_add(t, ACT_INT, ACT_INT_WORDS, NA + 1, ACT_FIELD(a, plan.slot), "%s.plan.slot", pre);
    acts_add(t, ACT_INT, ACT_INT_WORDS, (S > NA ? S : NA) + 1, ACT_FIELD(a, plan.slot_token),
             "%s.plan.slot_token", pre);
    /* xe, ye: the expert inputs (gathered) and outputs; g, u, h: gate, up, silu(g) * u per
     * slot */
    acts_add(t, ACT_FLOAT, ACT_FFN, S * C, ACT_FIELD(a, xe), "%s.xe", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, S * C, ACT_FIELD(a, ye), "%s.ye", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, S * F, ACT_FIELD(a, g), "%s.g", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, S * F, ACT_FIELD(a, u), "%s.u", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, S * F, ACT_FIELD(a, h), "%s.h", pre);
    /* jit, xj: the jitter factors and the router's jittered input (moe.jitter > 0) */
    if (s->jitter > 0.0f) {
        acts_add(t, ACT_FLOAT, ACT_FFN, N * C, ACT_FIELD(a, jit), "%s.jit", pre);
        acts_add(t, ACT_FLOAT, ACT_FFN, N * C, ACT_FIELD(a, xj), "%s.xj", pre);
    }
    /* xr, wr: the router's input and weights rounded to bf16 (moe.router_precision=bf16) */
    if (s->router_precision == MOE_ROUTER_BF16) {
        acts_add(t, ACT_FLOAT, ACT_FFN, N * C, ACT_FIELD(a, xr), "%s.xr", pre);
        acts_add(t, ACT_FLOAT, ACT_FFN, E * C, ACT_FIELD(a, wr), "%s.wr", pre);
    }
    /* noise: the logit noise drawn (moe.noise > 0) */
    if (s->noise > 0.0f)
        acts_add(t, ACT_FLOAT, ACT_FFN, N * E, ACT_FIELD(a, noise), "%s.noise", pre);
    /* work: the routing ops' scratch (moe_work_bytes: the balance loss, the router's backward,
     * the capacity or expert-choice ranking), whole 4-byte words */
    acts_add(t, ACT_BYTES, ACT_FFN, work_bytes_of(s, N_max), ACT_FIELD(a, work), "%s.work", pre);
    if (ep > 1) {
        char sub[ACT_NAME_MAX];
        snprintf(sub, sizeof sub, "%s.ep", pre);
        ep_acts_entries(t, sub, s, ep, N_max, a ? a->ep : NULL);
    }
}

void moe_acts_alloc(const Backend *be, MoeActs *a, const MoeSpec *s, Dist *dist, int N_max) {
    moe_acts_host_alloc(be, a, s, dist, N_max);
    ActTable t;
    acts_table_init(&t);
    moe_acts_entries(&t, "moe", s, dist && dist->ep > 1 ? dist->ep : 1, N_max, a);
    a->arena = acts_alloc(be, &t);
    acts_table_free(&t);
}

void moe_acts_free(const Backend *be, MoeActs *a) {
    route_stats_free(&a->route);
    free(a->drawn);
    if (a->global_f && a->global_f != a->global_f_host) be->free(be, a->global_f);
    free(a->global_f_host);
    free(a->idx_host);
    free(a->global_count);
    free(a->step_count);
    if (a->ep) ep_acts_free(be, a->ep);
    free(a->ep);
    if (a->arena) be->free(be, a->arena);
    memset(a, 0, sizeof(*a));
}

void moe_scratch_entries(ActTable *t, const char *pre, const MoeSpec *s, int N_max,
                         MoeScratch *scr) {
    const size_t C = (size_t)s->d_model, E = (size_t)s->num_experts, F = (size_t)s->d_expert;
    const size_t N = (size_t)N_max, NA = N * moe_assignments_per_token(s);
    const size_t S = moe_slots_max(s, N_max);
    /* the gradients of the router's logits, of w, of the slot rows xe, ye and of the experts'
     * SwiGLU g, u, h */
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * E, ACT_FIELD(scr, dlogits), "%s.dlogits", pre);
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, NA, ACT_FIELD(scr, dw), "%s.dw", pre);
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, S * C, ACT_FIELD(scr, dxe), "%s.dxe", pre);
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, S * C, ACT_FIELD(scr, dye), "%s.dye", pre);
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, S * F, ACT_FIELD(scr, dg), "%s.dg", pre);
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, S * F, ACT_FIELD(scr, du), "%s.du", pre);
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, S * F, ACT_FIELD(scr, dh), "%s.dh", pre);
    /* dx_router: the input gradient through the router */
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * C, ACT_FIELD(scr, dx_router), "%s.dx_router", pre);
}

void moe_scratch_alloc(const Backend *be, MoeScratch *scr, const MoeSpec *s, int N_max) {
    memset(scr, 0, sizeof(*scr));
    ActTable t;
    acts_table_init(&t);
    moe_scratch_entries(&t, "moe_scratch", s, N_max, scr);
    scr->arena = acts_alloc(be, &t);
    acts_table_free(&t);
}

void moe_scratch_free(const Backend *be, MoeScratch *scr) {
    if (scr->arena) be->free(be, scr->arena);
    memset(scr, 0, sizeof(*scr));
}

/* Exploration noise (training only). The numbers are drawn serially on the host from rng in a
 * fixed order, so a run is repeatable and a resumed run, whose checkpoint holds the stream,
 * continues it exactly; they land in the backend's buffer dst (in place when its memory is the
 * host's, else through the staging buffer). */
static void draw(const Backend *be, float *dst, float *staging, size_t n, Rng *rng, int normal,
                 float lo, float span) {
    float *h = be->host_memory ? dst : staging;
    for (size_t i = 0; i < n; i++)
        h[i] = normal ? span * rng_normal(rng) : lo + span * rng_uniform(rng);
    if (h != dst) be->to_device(be, dst, h, n * sizeof(float));
}

int moe_balance_f_outside(const MoeSpec *s, const Dist *dist) {
    return (dist && dist->world > 1) || s->balance_scope == MOE_SCOPE_GLOBAL ||
           s->balance_groups > 0;
}

/* a->global_f_host (E) = the aux loss's f when it is not the call's own fractions: the call's
 * assignments counted (exact: integers in doubles) and summed over the world's processes; with
 * moe.balance_scope=global added to the step's earlier micro-batches (x->micro 0 starts the
 * count again); then each expert's fraction, or with moe.balance_groups = G its group's
 * fraction times G / E, so that the loss E sum_e f_e P_e becomes G sum_g f_g P_g. */
static void balance_fractions(MoeActs *a, const int *idx, int N, const MoeSpec *s,
                              const MoeCtx *x) {
    const int E = s->num_experts, K = s->top_k;
    double *count = a->global_count; /* (E + 1): the experts', then the total */
    for (int e = 0; e < E; e++) count[e] = 0.0;
    for (size_t j = 0; j < (size_t)N * K; j++) count[idx[j]] += 1.0;
    count[E] = (double)N * K;
    if (x->dist && x->dist->world > 1) /* the batch's: the ranks of this block's stage */
        dist_allreduce_sum_d(x->dist, DIST_STAGE, count, (size_t)E + 1);
    if (s->balance_scope == MOE_SCOPE_GLOBAL) {
        if (x->micro <= 0) memset(a->step_count, 0, ((size_t)E + 1) * sizeof(double));
        for (int e = 0; e <= E; e++) a->step_count[e] += count[e];
        count = a->step_count;
    }
    float *f = a->global_f_host;
    if (s->balance_groups > 0) {
        const int G = s->balance_groups, per = E / G;
        for (int g = 0; g < G; g++) {
            double in_group = 0.0;
            for (int e = g * per; e < (g + 1) * per; e++) in_group += count[e];
            for (int e = g * per; e < (g + 1) * per; e++)
                f[e] = (float)((double)G / E * (in_group / count[E]));
        }
    } else {
        for (int e = 0; e < E; e++) f[e] = (float)(count[e] / count[E]);
    }
}

/* router_forward: the router's logits (N, E) and scores (N, E) for x (N, C), with the
 * training-time jitter on its input and noise on its logits, and the bf16 rounding of
 * moe.router_precision; rng is NULL outside training (no jitter, no noise). */
static void router_forward(const Backend *be, MoeActs *a, const float *x, const MoeWeights *wt,
                           const MoeSpec *s, Rng *rng, int N) {
    const int C = s->d_model, E = s->num_experts;
    const size_t NC = (size_t)N * C, NE = (size_t)N * E;
    /* jitter (Switch Transformer): xj = x * jit, jit ~ U(1 - jitter, 1 + jitter) elementwise;
     * the router sees a slightly different input each step, the experts do not */
    if (a->jittered)
        PROF(PROF_ROUTER,
             (draw(be, a->jit, a->drawn, NC, rng, 0, 1.0f - s->jitter, 2.0f * s->jitter),
              be->mul(be, a->xj, x, a->jit, NC)));
    /* a bf16 router (moe.router_precision), emulated: the product's operands rounded before it
     * (bf16), its logits after it (bf16 and bf16_logits), the scores after the softmax (bf16) */
    const float *xr = a->jittered ? a->xj : x, *wr = wt->router;
    if (s->router_precision == MOE_ROUTER_BF16)
        PROF(PROF_ROUTER, (be->round_bf16(be, a->xr, xr, NC),
                           be->round_bf16(be, a->wr, wr, (size_t)E * C), xr = a->xr, wr = a->wr));
    PROF(PROF_ROUTER, be->router_logits_forward(be, a->logits, xr, wr, N, C, E));
    if (s->router_precision != MOE_ROUTER_FP32)
        PROF(PROF_ROUTER, be->round_bf16(be, a->logits, a->logits, NE));
    /* logit noise: logits += N(0, noise^2), a constant as far as the gradient is concerned */
    if (rng && s->noise > 0.0f)
        PROF(PROF_ROUTER, (draw(be, a->noise, a->drawn, NE, rng, 1, 0.0f, s->noise),
                           be->add(be, a->logits, a->logits, a->noise, NE)));
    PROF(PROF_ROUTER, be->router_scores_forward(be, a->scores, a->lse, a->logits, N, s));
    if (s->router_precision == MOE_ROUTER_BF16)
        PROF(PROF_ROUTER, be->round_bf16(be, a->scores, a->scores, NE));
}

/* token_choice_forward: each token picks its experts (idx, w), the balance and z losses land
 * in out[0], out[1], and the plan is built, with drops under a capacity; cw->global_f is set
 * when the balance loss counts its fractions outside the call (balance_fractions). */
static void token_choice_forward(const Backend *be, MoeActs *a, float *out, const MoeWeights *wt,
                                 const MoeSpec *s, MoeCtx *cw, int N) {
    const int E = s->num_experts;
    PROF(PROF_ROUTER,
         be->router_gate_forward(be, a->idx, a->w, a->scores, a->logits, wt->bias, N, s));
    if (cw->tape) /* record the choice, or replace it with the recorded one */
        PROF(PROF_ROUTER, route_tape_apply(cw->tape, be, a->idx, a->w, a->scores, a->logits, N, s));
    if (a->global_f) { /* counted on the host, from a device's idx copied down */
        const int *idx = a->idx;
        if (a->idx_host) {
            be->to_host(be, a->idx_host, a->idx, (size_t)N * s->top_k * sizeof(int));
            idx = a->idx_host;
        }
        PROF(PROF_ROUTER, balance_fractions(a, idx, N, s, cw));
        if (a->global_f != a->global_f_host)
            be->to_device(be, a->global_f, a->global_f_host, (size_t)E * sizeof(float));
        cw->global_f = a->global_f;
    }
    PROF(PROF_ROUTER, be->router_balance_loss(be, out, a->scores, a->idx, N, s, cw));
    PROF(PROF_ROUTER, be->router_z_loss(be, out + 1, a->lse, N));
    if (cw->capacity_factor > 0.0f) /* capacity.c: drops (slot -1), maybe padding */
        PROF(PROF_PERMUTE,
             be->capacity_plan_build(be, &a->plan, a->idx, a->scores, a->w, N, s, cw));
    else
        PROF(PROF_PERMUTE, be->dispatch_plan_build(be, &a->plan, a->idx, N));
}

/* block_experts_forward: ye (S, C) = each expert's SwiGLU of its slice of xe (S, C), on the
 * members of the expert-parallel group, through a weight source, or here. Each slice: its
 * counts[e] kept rows, then any padding rows (a padded capacity plan; for every other plan
 * counts[e] is the whole slice). */
static void block_experts_forward(const Backend *be, MoeActs *a, const MoeWeights *wt,
                                  const MoeSpec *s, const MoeCtx *cw) {
    const int C = s->d_model, E = s->num_experts, F = s->d_expert;
    if (a->ep) /* the experts live on the members of the expert-parallel group */
        PROF(PROF_EXPERTS, ep_experts_forward(be, a->ye, a->ep, a->xe, &a->plan, wt->Wg, wt->Wu,
                                              wt->Wd, cw->dist));
    else if (wt->source) /* weights held elsewhere: quantized, or loaded on demand */
        PROF(PROF_EXPERTS, wt->source->forward(wt->source, wt->layer, be, a->ye, a->xe,
                                               a->plan.offsets, a->plan.counts, E, C, F));
    else
        PROF(PROF_EXPERTS, be->experts_forward(be, a->ye, a->g, a->u, a->h, a->xe, wt->Wg, wt->Wu,
                                               wt->Wd, a->plan.offsets, a->plan.counts, E, C, F));
}

void moe_block_forward(const Backend *be, float *y, MoeActs *a, const float *x,
                       const MoeWeights *wt, const MoeSpec *s, const MoeCtx *ctx, int N) {
    /* y (N, C) written, x (N, C); a holds every intermediate for the backward pass. */
    const int C = s->d_model;
    MoeCtx cw = *ctx; /* with the block's scratch: the routing ops allocate nothing */
    cw.work = a->work, cw.work_bytes = a->work_bytes;
    Rng *rng = cw.rng;
    /* the balance and z losses: where the backend writes them (aux, z) */
    float *out = a->losses ? a->losses : a->loss_here;
    if (!a->losses && !be->host_memory)
        moe_fatal("moe_block_forward: a block on %s needs MoeActs.losses in its memory", be->name);
    a->N = N;
    a->T = cw.T;
    a->jittered = rng && s->jitter > 0.0f;
    router_forward(be, a, x, wt, s, rng, N);
    if (s->routing == MOE_ROUTING_EXPERT_CHOICE) {
        /* the experts choose, and the choice is the plan; balanced by construction, so there
         * is no balance loss (aux_loss 0) */
        PROF(PROF_ROUTER,
             be->expert_choice_forward(be, a->idx, a->w, &a->plan, a->scores, N, s, &cw));
        be->zero(be, out, sizeof(float));
        PROF(PROF_ROUTER, be->router_z_loss(be, out + 1, a->lse, N));
    } else {
        token_choice_forward(be, a, out, wt, s, &cw, N);
    }
    /* what the routing did, for the trainer's router.csv (a few numbers per expert): left in
     * the step record while the step's numbers are read at its end */
    if (a->defer_losses && a->stats_rec)
        PROF(PROF_ROUTER, be->route_stats_record(be, a->stats_rec, a->scores, a->logits, a->lse,
                                                 a->idx, &a->plan, N, s));
    else
        PROF(PROF_ROUTER,
             be->route_stats(be, &a->route, a->scores, a->logits, a->lse, a->idx, &a->plan, N, s));
    if (a->ep && a->ep->tokens) { /* dist.dispatch=tokens: the members combine (ep.h) */
        PROF(PROF_EXPERTS, ep_tokens_forward(be, y, a->xe, a->ye, a->ep, x, a->idx, a->w, &a->plan,
                                             wt->Wg, wt->Wu, wt->Wd, cw.dist));
    } else {
        PROF(PROF_PERMUTE, be->permute_forward(be, a->xe, x, &a->plan, C));
        block_experts_forward(be, a, wt, s, &cw);
        PROF(PROF_PERMUTE, be->combine_forward(be, y, a->ye, a->w, &a->plan, C));
    }
    if (a->defer_losses) return; /* read with the step's other numbers (model_read_step) */
    float l[2];
    be->to_host(be, l, out, sizeof l);
    a->aux_loss = l[0], a->z_loss = l[1];
}

/* The expert path's backward: y = combine(ye, w) -> ye = experts(xe) -> xe = gather(x).
 * scr->dw (the gate weights' gradient), the experts' gradients in gr (accumulated) and dx (the
 * path's part of it, written; not computed when NULL). */
static void expert_path_backward(const Backend *be, float *dx, MoeGrads *gr, const float *dy,
                                 const MoeActs *a, const MoeWeights *wt, const MoeSpec *s,
                                 const MoeCtx *ctx, MoeScratch *scr) {
    const int C = s->d_model, E = s->num_experts, F = s->d_expert;
    float *gWg = gr ? gr->Wg : NULL, *gWu = gr ? gr->Wu : NULL, *gWd = gr ? gr->Wd : NULL;
    if (a->ep && a->ep->tokens) { /* the members combined, so they take the combine's backward */
        PROF(PROF_EXPERTS, ep_tokens_backward(be, dx, scr->dw, scr->dye, scr->dxe, gWg, gWu, gWd,
                                              dy, a->ep, wt->Wg, wt->Wu, wt->Wd, ctx->dist));
        return;
    }
    PROF(PROF_PERMUTE, be->combine_backward(be, scr->dye, scr->dw, dy, a->ye, a->w, &a->plan, C));
    if (a->ep)
        PROF(PROF_EXPERTS, ep_experts_backward(be, dx ? scr->dxe : NULL, gWg, gWu, gWd, scr->dye,
                                               a->ep, &a->plan, wt->Wg, wt->Wu, wt->Wd, ctx->dist));
    else
        PROF(PROF_EXPERTS,
             be->experts_backward(be, dx ? scr->dxe : NULL, gWg, gWu, gWd, scr->dg, scr->du,
                                  scr->dh, scr->dye, a->xe, a->g, a->u, a->h, wt->Wg, wt->Wu,
                                  wt->Wd, a->plan.offsets, a->plan.counts, E, C, F));
    if (dx) PROF(PROF_PERMUTE, be->permute_backward(be, dx, scr->dxe, &a->plan, C));
}

void moe_block_backward(const Backend *be, float *dx, MoeGrads *gr, const float *dy,
                        const MoeActs *a, const float *x, const MoeWeights *wt, const MoeSpec *s,
                        const MoeCtx *ctx, MoeScratch *scr, float loss_scale) {
    /* dx (N, C) written (may be NULL), dy (N, C), x (N, C); gr fields accumulated (each may be
     * NULL, as may gr itself).
     *
     * The scalar being differentiated is
     *   L = <dy, y> + loss_scale (moe_balance_coef aux_loss + z_coef z_loss),
     * so the balance and z gradients enter at the router with the same scaling as dy. */
    const int N = a->N, C = s->d_model, E = s->num_experts;
    const size_t NC = (size_t)N * C;
    float *gWr = gr ? gr->router : NULL;

    expert_path_backward(be, dx, gr, dy, a, wt, s, ctx, scr);

    /* router path: w, aux, z <- scores, lse <- logits = x Wr^T */
    MoeCtx cb = *ctx;
    cb.T = a->T;               /* the sequences of the forward pass */
    cb.global_f = a->global_f; /* across processes: the whole batch's f (else NULL) */
    cb.work = a->work, cb.work_bytes = a->work_bytes; /* the block's scratch */
    MoeSpec sb = *s;
    if (s->routing == MOE_ROUTING_EXPERT_CHOICE) {
        /* w[n, e] = route_scale scores[n, e] for every pair (dw = 0 where e did not pick n):
         * the gate backward of E "chosen" experts per token, unnormalised, no balance loss,
         * gives ds = route_scale dw, then the softmax (or sigmoid) and the z-loss terms */
        sb.top_k = E;
        sb.norm_topk = 0;
        sb.topk_before_softmax = 0;
        sb.balance = MOE_BALANCE_NONE;
    }
    PROF(PROF_ROUTER, be->router_gate_backward(
                          be, scr->dlogits, scr->dw, a->scores, a->lse, a->logits, a->idx, a->w, N,
                          &sb, &cb, moe_balance_coef(&sb) * loss_scale, s->z_coef * loss_scale));
    /* logits = xj Wr^T with xj = x * jit: dWr sees xj, and dx(router) = (dlogits Wr) * jit.
     * A bf16 router's roundings pass the gradients straight through: the product's backward
     * takes the rounded operands the forward multiplied */
    const int bf16 = s->router_precision == MOE_ROUTER_BF16;
    const float *xr = bf16 ? a->xr : a->jittered ? a->xj : x, *wr = bf16 ? a->wr : wt->router;
    PROF(PROF_ROUTER, be->router_logits_backward(be, dx ? scr->dx_router : NULL, gWr, scr->dlogits,
                                                 xr, wr, N, C, E));
    if (dx && a->jittered)
        PROF(PROF_ROUTER, be->mul(be, scr->dx_router, scr->dx_router, a->jit, NC));
    /* x feeds both paths: dx = dx(experts) + dx(router) */
    if (dx) PROF(PROF_RESIDUAL, be->add(be, dx, dx, scr->dx_router, NC));
}
