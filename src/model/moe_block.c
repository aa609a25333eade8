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

/* The routing arrays idx, w, dw hold NA = N A entries (A = K, or E for expert choice: every
 * (token, expert) pair is a candidate); the slot buffers S rows (moe_slots_max). */
void moe_acts_alloc(const Backend *be, MoeActs *a, const MoeHyper *hp, int N_max) {
    const int A = moe_assignments_per_token(hp);
    size_t N = (size_t)N_max, NA = N * A, S = moe_slots_max(hp, N_max);
    memset(a, 0, sizeof(*a));
    a->logits = be_floats(be, N * hp->E);
    a->scores = be_floats(be, N * hp->E);
    a->lse = be_floats(be, N);
    a->idx = be_ints(be, NA + 1);
    a->w = be_floats(be, NA);
    /* the dispatch plan; a padded capacity plan has more rows (slot_token entries) than
     * assignments */
    DispatchPlan *p = &a->plan;
    p->E = hp->E;
    p->K = A;
    p->counts = be_ints(be, (size_t)hp->E);
    p->offsets = be_ints(be, (size_t)hp->E + 1);
    p->slot = be_ints(be, NA + 1);
    p->slot_token = be_ints(be, (S > NA ? S : NA) + 1);
    a->xe = be_floats(be, S * hp->C);
    a->ye = be_floats(be, S * hp->C);
    a->g = be_floats(be, S * hp->F);
    a->u = be_floats(be, S * hp->F);
    a->h = be_floats(be, S * hp->F);
    if (hp->jitter > 0.0f) {
        a->jit = be_floats(be, N * hp->C);
        a->xj = be_floats(be, N * hp->C);
    }
    if (hp->noise > 0.0f) a->noise = be_floats(be, N * hp->E);
    a->work_bytes = (moe_work_bytes(hp, N_max) + 3) / 4 * 4; /* whole 4-byte words */
    a->work = be->alloc(be, a->work_bytes);
    route_stats_alloc(&a->route, hp->E);
    if (!be->host_memory && (hp->jitter > 0.0f || hp->noise > 0.0f))
        a->drawn = (float *)malloc_check(N * (hp->C > hp->E ? hp->C : hp->E) * sizeof(float));
    if (hp->dist && hp->dist->world > 1) {
        a->global_f = floats_alloc((size_t)hp->E);
        a->global_count = (double *)calloc_check((size_t)hp->E + 1, sizeof(double));
    }
    if (hp->dist && hp->dist->ep > 1) {
        a->ep = (EpActs *)calloc_check(1, sizeof(EpActs));
        ep_acts_alloc(be, a->ep, hp, hp->dist->ep, (int)S);
    }
}

void moe_acts_free(const Backend *be, MoeActs *a) {
    void *mine[] = {a->logits,
                    a->scores,
                    a->lse,
                    a->idx,
                    a->w,
                    a->plan.counts,
                    a->plan.offsets,
                    a->plan.slot,
                    a->plan.slot_token,
                    a->xe,
                    a->ye,
                    a->g,
                    a->u,
                    a->h,
                    a->jit,
                    a->xj,
                    a->noise,
                    a->work};
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        if (mine[i]) be->free(be, mine[i]);
    route_stats_free(&a->route);
    free(a->drawn);
    free(a->global_f);
    free(a->global_count);
    if (a->ep) ep_acts_free(be, a->ep);
    free(a->ep);
    memset(a, 0, sizeof(*a));
}

void moe_scratch_alloc(const Backend *be, MoeScratch *s, const MoeHyper *hp, int N_max) {
    size_t N = (size_t)N_max, NA = N * moe_assignments_per_token(hp);
    size_t S = moe_slots_max(hp, N_max);
    s->dlogits = be_floats(be, N * hp->E);
    s->dw = be_floats(be, NA);
    s->dxe = be_floats(be, S * hp->C);
    s->dye = be_floats(be, S * hp->C);
    s->dg = be_floats(be, S * hp->F);
    s->du = be_floats(be, S * hp->F);
    s->dh = be_floats(be, S * hp->F);
    s->dx_router = be_floats(be, N * hp->C);
}

void moe_scratch_free(const Backend *be, MoeScratch *s) {
    float *mine[] = {s->dlogits, s->dw, s->dxe, s->dye, s->dg, s->du, s->dh, s->dx_router};
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        if (mine[i]) be->free(be, mine[i]);
    memset(s, 0, sizeof(*s));
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

/* f (E) = the fraction of all the processes' assignments that chose each expert: the local
 * counts summed over the world (exact: integers in doubles), for the aux loss. */
static void global_fractions(float *f, double *count, const int *idx, int N, const MoeHyper *hp) {
    /* count (E + 1): scratch */
    for (int e = 0; e < hp->E; e++) count[e] = 0.0;
    for (size_t j = 0; j < (size_t)N * hp->K; j++) count[idx[j]] += 1.0;
    count[hp->E] = (double)N * hp->K;
    dist_allreduce_sum_d(hp->dist, DIST_WORLD, count, (size_t)hp->E + 1);
    for (int e = 0; e < hp->E; e++) f[e] = (float)(count[e] / count[hp->E]);
}

void moe_block_forward(const Backend *be, float *y, MoeActs *a, const float *x,
                       const MoeWeights *wt, const MoeHyper *hp, int N) {
    /* y (N, C) written, x (N, C); a holds every intermediate for the backward pass. */
    const int C = hp->C, E = hp->E, F = hp->F;
    MoeHyper hw = *hp; /* with the block's scratch: the routing ops allocate nothing */
    hw.work = a->work, hw.work_bytes = a->work_bytes;
    hp = &hw;
    const size_t NC = (size_t)N * C, NE = (size_t)N * E;
    a->N = N;
    a->T = hp->T;
    a->jittered = hp->rng && hp->jitter > 0.0f;
    /* jitter (Switch Transformer): xj = x * jit, jit ~ U(1 - jitter, 1 + jitter) elementwise;
     * the router sees a slightly different input each step, the experts do not */
    if (a->jittered)
        PROF(PROF_ROUTER,
             (draw(be, a->jit, a->drawn, NC, hp->rng, 0, 1.0f - hp->jitter, 2.0f * hp->jitter),
              be->mul(be, a->xj, x, a->jit, NC)));
    PROF(PROF_ROUTER,
         be->matmul_forward(be, a->logits, a->jittered ? a->xj : x, wt->router, N, C, E));
    /* logit noise: logits += N(0, noise^2), a constant as far as the gradient is concerned */
    if (hp->rng && hp->noise > 0.0f)
        PROF(PROF_ROUTER, (draw(be, a->noise, a->drawn, NE, hp->rng, 1, 0.0f, hp->noise),
                           be->add(be, a->logits, a->logits, a->noise, NE)));
    PROF(PROF_ROUTER, be->router_scores_forward(be, a->scores, a->lse, a->logits, N, hp));
    if (hp->routing == MOE_ROUTING_EXPERT_CHOICE) {
        /* the experts choose, and the choice is the plan; balanced by construction, so there
         * is no balance loss (aux_loss 0) */
        PROF(PROF_ROUTER, be->expert_choice_forward(be, a->idx, a->w, &a->plan, a->scores, N, hp));
        a->aux_loss = 0.0f;
        PROF(PROF_ROUTER, a->z_loss = be->router_z_loss(be, a->lse, N));
    } else {
        PROF(PROF_ROUTER,
             be->router_gate_forward(be, a->idx, a->w, a->scores, a->logits, wt->bias, N, hp));
        MoeHyper hpb = *hp; /* the scratch too */
        if (a->global_f) {
            PROF(PROF_ROUTER, global_fractions(a->global_f, a->global_count, a->idx, N, hp));
            hpb.global_f = a->global_f;
        }
        PROF(PROF_ROUTER, a->aux_loss = be->router_balance_loss(be, a->scores, a->idx, N, &hpb));
        PROF(PROF_ROUTER, a->z_loss = be->router_z_loss(be, a->lse, N));
        if (hp->capacity_factor > 0.0f) /* capacity.c: drops (slot -1), maybe padding */
            PROF(PROF_PERMUTE, be->capacity_plan_build(be, &a->plan, a->idx, a->scores, a->w, N, hp,
                                                       hp->second_random ? hp->rng : NULL));
        else
            PROF(PROF_PERMUTE, be->dispatch_plan_build(be, &a->plan, a->idx, N));
    }
    /* what the routing did, for the trainer's router.csv (a few numbers per expert) */
    PROF(PROF_ROUTER, be->route_stats(be, &a->route, a->scores, a->idx, &a->plan, N, hp));
    PROF(PROF_PERMUTE, be->permute_forward(be, a->xe, x, &a->plan, C));
    /* each slice: its counts[e] kept rows, then any padding rows (a padded capacity plan; for
     * every other plan counts[e] is the whole slice) */
    if (a->ep) /* the experts live on the members of the expert-parallel group */
        PROF(PROF_EXPERTS, ep_experts_forward(be, a->ye, a->ep, a->xe, &a->plan, wt->Wg, wt->Wu,
                                              wt->Wd, hp->dist));
    else
        PROF(PROF_EXPERTS, be->experts_forward(be, a->ye, a->g, a->u, a->h, a->xe, wt->Wg, wt->Wu,
                                               wt->Wd, a->plan.offsets, a->plan.counts, E, C, F));
    PROF(PROF_PERMUTE, be->combine_forward(be, y, a->ye, a->w, &a->plan, C));
}

void moe_block_backward(const Backend *be, float *dx, MoeGrads *gr, const float *dy,
                        const MoeActs *a, const float *x, const MoeWeights *wt, const MoeHyper *hp,
                        MoeScratch *s, float loss_scale) {
    /* dx (N, C) written (may be NULL), dy (N, C), x (N, C); gr fields accumulated (each may be
     * NULL, as may gr itself).
     *
     * The scalar being differentiated is
     *   L = <dy, y> + loss_scale (moe_balance_coef aux_loss + z_coef z_loss),
     * so the balance and z gradients enter at the router with the same scaling as dy. */
    const int N = a->N, C = hp->C, E = hp->E, F = hp->F;
    const size_t NC = (size_t)N * C;
    float *gWr = gr ? gr->router : NULL, *gWg = gr ? gr->Wg : NULL;
    float *gWu = gr ? gr->Wu : NULL, *gWd = gr ? gr->Wd : NULL;

    /* expert path: y = combine(ye, w) -> ye = experts(xe) -> xe = gather(x) */
    PROF(PROF_PERMUTE, be->combine_backward(be, s->dye, s->dw, dy, a->ye, a->w, &a->plan, C));
    if (a->ep)
        PROF(PROF_EXPERTS, ep_experts_backward(be, dx ? s->dxe : NULL, gWg, gWu, gWd, s->dye, a->ep,
                                               &a->plan, wt->Wg, wt->Wu, wt->Wd, hp->dist));
    else
        PROF(PROF_EXPERTS,
             be->experts_backward(be, dx ? s->dxe : NULL, gWg, gWu, gWd, s->dg, s->du, s->dh,
                                  s->dye, a->xe, a->g, a->u, a->h, wt->Wg, wt->Wu, wt->Wd,
                                  a->plan.offsets, a->plan.counts, E, C, F));
    if (dx) PROF(PROF_PERMUTE, be->permute_backward(be, dx, s->dxe, &a->plan, C));

    /* router path: w, aux, z <- scores, lse <- logits = x Wr^T */
    MoeHyper hpa = *hp;
    hpa.T = a->T;               /* the sequences of the forward pass */
    hpa.global_f = a->global_f; /* across processes: the whole batch's f (else NULL) */
    hpa.work = a->work, hpa.work_bytes = a->work_bytes; /* the block's scratch */
    if (hp->routing == MOE_ROUTING_EXPERT_CHOICE) {
        /* w[n, e] = route_scale scores[n, e] for every pair (dw = 0 where e did not pick n):
         * the gate backward of E "chosen" experts per token, unnormalised, no balance loss,
         * gives ds = route_scale dw, then the softmax (or sigmoid) and the z-loss terms */
        hpa.K = E;
        hpa.renorm = 0;
        hpa.topk_first = 0;
        hpa.balance = MOE_BALANCE_NONE;
    }
    PROF(PROF_ROUTER, be->router_gate_backward(
                          be, s->dlogits, s->dw, a->scores, a->lse, a->logits, a->idx, a->w, N,
                          &hpa, moe_balance_coef(&hpa) * loss_scale, hp->z_coef * loss_scale));
    /* logits = xj Wr^T with xj = x * jit: dWr sees xj, and dx(router) = (dlogits Wr) * jit */
    const float *xr = a->jittered ? a->xj : x;
    PROF(PROF_ROUTER, be->matmul_backward(be, dx ? s->dx_router : NULL, gWr, s->dlogits, xr,
                                          wt->router, N, C, E));
    if (dx && a->jittered) PROF(PROF_ROUTER, be->mul(be, s->dx_router, s->dx_router, a->jit, NC));
    /* x feeds both paths: dx = dx(experts) + dx(router) */
    if (dx) PROF(PROF_RESIDUAL, be->add(be, dx, dx, s->dx_router, NC));
}
