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
 * Accumulation rule (nn/ops.h): weight gradients in MoeGrads are added to (+=); dx is written.
 */
#include "model/moe_block.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/ep.h"
#include "model/profile.h"
#include "nn/ops.h"

/* The routing arrays idx, w, dw hold NA = N A entries (A = K, or E for expert choice: every
 * (token, expert) pair is a candidate); the slot buffers S rows (moe_slots_max). */
void moe_acts_alloc(MoeActs *a, const MoeHyper *hp, int N_max) {
    const int A = moe_assignments_per_token(hp);
    size_t N = (size_t)N_max, NA = N * A, S = moe_slots_max(hp, N_max);
    memset(a, 0, sizeof(*a));
    a->logits = floats_alloc(N * hp->E);
    a->scores = floats_alloc(N * hp->E);
    a->lse = floats_alloc(N);
    a->idx = calloc_check(NA + 1, sizeof(int));
    a->w = floats_alloc(NA);
    dispatch_plan_alloc(&a->plan, N_max, hp->E, A);
    if (S > NA) { /* a padded capacity plan has more rows (slot_token entries) than assignments */
        free(a->plan.slot_token);
        a->plan.slot_token = calloc_check(S + 1, sizeof(int));
    }
    a->xe = floats_alloc(S * hp->C);
    a->ye = floats_alloc(S * hp->C);
    a->g = floats_alloc(S * hp->F);
    a->u = floats_alloc(S * hp->F);
    a->h = floats_alloc(S * hp->F);
    if (hp->jitter > 0.0f) {
        a->jit = floats_alloc(N * hp->C);
        a->xj = floats_alloc(N * hp->C);
    }
    if (hp->dist && hp->dist->world > 1) {
        a->global_f = floats_alloc((size_t)hp->E);
        a->global_count = (double *)calloc_check((size_t)hp->E + 1, sizeof(double));
    }
    if (hp->dist && hp->dist->ep > 1) {
        a->ep = (EpActs *)calloc_check(1, sizeof(EpActs));
        ep_acts_alloc(a->ep, hp, hp->dist->ep, (int)S);
    }
}

void moe_acts_free(MoeActs *a) {
    free(a->logits);
    free(a->scores);
    free(a->lse);
    free(a->idx);
    free(a->w);
    dispatch_plan_free(&a->plan);
    free(a->xe);
    free(a->ye);
    free(a->g);
    free(a->u);
    free(a->h);
    free(a->jit);
    free(a->xj);
    free(a->global_f);
    free(a->global_count);
    if (a->ep) ep_acts_free(a->ep);
    free(a->ep);
    memset(a, 0, sizeof(*a));
}

void moe_scratch_alloc(MoeScratch *s, const MoeHyper *hp, int N_max) {
    size_t N = (size_t)N_max, NA = N * moe_assignments_per_token(hp);
    size_t S = moe_slots_max(hp, N_max);
    s->dlogits = floats_alloc(N * hp->E);
    s->dw = floats_alloc(NA);
    s->dxe = floats_alloc(S * hp->C);
    s->dye = floats_alloc(S * hp->C);
    s->dg = floats_alloc(S * hp->F);
    s->du = floats_alloc(S * hp->F);
    s->dh = floats_alloc(S * hp->F);
    s->dx_router = floats_alloc(N * hp->C);
}

void moe_scratch_free(MoeScratch *s) {
    free(s->dlogits);
    free(s->dw);
    free(s->dxe);
    free(s->dye);
    free(s->dg);
    free(s->du);
    free(s->dh);
    free(s->dx_router);
    memset(s, 0, sizeof(*s));
}

/* Exploration noise (training only). Both draw serially from rng in a fixed order, so a run
 * is repeatable and a resumed run, whose checkpoint holds the stream, continues it exactly. */

/* xj (N, C) = x * jit, jit (N, C) ~ U(1 - jitter, 1 + jitter) elementwise (Switch
 * Transformer: the router sees a slightly different input each step; the experts do not). */
static void jitter_draw(float *xj, float *jit, const float *x, float jitter, Rng *rng, int N,
                        int C) {
    for (size_t i = 0; i < (size_t)N * C; i++) {
        jit[i] = 1.0f - jitter + 2.0f * jitter * rng_uniform(rng);
        xj[i] = x[i] * jit[i];
    }
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

/* logits (N, E) += N(0, noise^2): a constant as far as the gradient is concerned. */
static void logit_noise(float *logits, float noise, Rng *rng, int N, int E) {
    for (size_t i = 0; i < (size_t)N * E; i++) logits[i] += noise * rng_normal(rng);
}

void moe_block_forward(float *y, MoeActs *a, const float *x, const MoeWeights *wt,
                       const MoeHyper *hp, int N) {
    /* y (N, C) written, x (N, C); a holds every intermediate for the backward pass. */
    int C = hp->C, E = hp->E, F = hp->F;
    a->N = N;
    a->T = hp->T;
    a->jittered = hp->rng && hp->jitter > 0.0f;
    if (a->jittered) PROF(PROF_ROUTER, jitter_draw(a->xj, a->jit, x, hp->jitter, hp->rng, N, C));
    PROF(PROF_ROUTER, matmul_forward(a->logits, a->jittered ? a->xj : x, wt->router, N, C, E));
    if (hp->rng && hp->noise > 0.0f)
        PROF(PROF_ROUTER, logit_noise(a->logits, hp->noise, hp->rng, N, E));
    PROF(PROF_ROUTER, router_scores_forward(a->scores, a->lse, a->logits, N, hp));
    if (hp->routing == MOE_ROUTING_EXPERT_CHOICE) {
        /* the experts choose, and the choice is the plan; balanced by construction, so there
         * is no balance loss (aux_loss 0) */
        PROF(PROF_ROUTER, expert_choice_forward(a->idx, a->w, &a->plan, a->scores, N, hp));
        a->aux_loss = 0.0f;
        PROF(PROF_ROUTER, a->z_loss = router_z_loss(a->lse, N));
    } else {
        PROF(PROF_ROUTER, router_gate_forward(a->idx, a->w, a->scores, a->logits, wt->bias, N, hp));
        MoeHyper hpb = *hp;
        if (a->global_f) {
            PROF(PROF_ROUTER, global_fractions(a->global_f, a->global_count, a->idx, N, hp));
            hpb.global_f = a->global_f;
        }
        PROF(PROF_ROUTER, a->aux_loss = router_balance_loss(a->scores, a->idx, N, &hpb));
        PROF(PROF_ROUTER, a->z_loss = router_z_loss(a->lse, N));
        if (hp->capacity_factor > 0.0f) /* capacity.c: drops (slot -1), maybe padding */
            PROF(PROF_PERMUTE, capacity_plan_build(&a->plan, a->idx, a->scores, a->w, N, hp,
                                                   hp->second_random ? hp->rng : NULL));
        else
            PROF(PROF_PERMUTE, dispatch_plan_build(&a->plan, a->idx, N));
    }
    PROF(PROF_PERMUTE, permute_forward(a->xe, x, &a->plan, C));
    /* each slice: its counts[e] kept rows, then any padding rows (a padded capacity plan; for
     * every other plan counts[e] is the whole slice) */
    if (a->ep) /* the experts live on the members of the expert-parallel group */
        PROF(PROF_EXPERTS,
             ep_experts_forward(a->ye, a->ep, a->xe, &a->plan, wt->Wg, wt->Wu, wt->Wd, hp->dist));
    else
        PROF(PROF_EXPERTS,
             experts_forward_padded(a->ye, a->g, a->u, a->h, a->xe, wt->Wg, wt->Wu, wt->Wd,
                                    a->plan.offsets, a->plan.counts, E, C, F));
    PROF(PROF_PERMUTE, combine_forward(y, a->ye, a->w, &a->plan, C));
}

void moe_block_backward(float *dx, MoeGrads *gr, const float *dy, const MoeActs *a, const float *x,
                        const MoeWeights *wt, const MoeHyper *hp, MoeScratch *s, float loss_scale) {
    /* dx (N, C) written (may be NULL), dy (N, C), x (N, C); gr fields accumulated (each may be
     * NULL, as may gr itself).
     *
     * The scalar being differentiated is
     *   L = <dy, y> + loss_scale (moe_balance_coef aux_loss + z_coef z_loss),
     * so the balance and z gradients enter at the router with the same scaling as dy. */
    int N = a->N, C = hp->C, E = hp->E, F = hp->F;
    float *gWr = gr ? gr->router : NULL, *gWg = gr ? gr->Wg : NULL;
    float *gWu = gr ? gr->Wu : NULL, *gWd = gr ? gr->Wd : NULL;

    /* expert path: y = combine(ye, w) -> ye = experts(xe) -> xe = gather(x) */
    PROF(PROF_PERMUTE, combine_backward(s->dye, s->dw, dy, a->ye, a->w, &a->plan, C));
    if (a->ep)
        PROF(PROF_EXPERTS, ep_experts_backward(dx ? s->dxe : NULL, gWg, gWu, gWd, s->dye, a->ep,
                                               &a->plan, wt->Wg, wt->Wu, wt->Wd, hp->dist));
    else
        PROF(PROF_EXPERTS,
             experts_backward_padded(dx ? s->dxe : NULL, gWg, gWu, gWd, s->dg, s->du, s->dh, s->dye,
                                     a->xe, a->g, a->u, a->h, wt->Wg, wt->Wu, wt->Wd,
                                     a->plan.offsets, a->plan.counts, E, C, F));
    if (dx) PROF(PROF_PERMUTE, permute_backward(dx, s->dxe, &a->plan, C));

    /* router path: w, aux, z <- scores, lse <- logits = x Wr^T */
    MoeHyper hpa = *hp;
    hpa.T = a->T;               /* the sequences of the forward pass */
    hpa.global_f = a->global_f; /* across processes: the whole batch's f (else NULL) */
    if (hp->routing == MOE_ROUTING_EXPERT_CHOICE) {
        /* w[n, e] = route_scale scores[n, e] for every pair (dw = 0 where e did not pick n):
         * the gate backward of E "chosen" experts per token, unnormalised, no balance loss,
         * gives ds = route_scale dw, then the softmax (or sigmoid) and the z-loss terms */
        hpa.K = E;
        hpa.renorm = 0;
        hpa.topk_first = 0;
        hpa.balance = MOE_BALANCE_NONE;
    }
    PROF(PROF_ROUTER,
         router_gate_backward(s->dlogits, s->dw, a->scores, a->lse, a->logits, a->idx, a->w, N,
                              &hpa, moe_balance_coef(&hpa) * loss_scale, hp->z_coef * loss_scale));
    /* logits = xj Wr^T with xj = x * jit: dWr sees xj, and dx(router) = (dlogits Wr) * jit */
    const float *xr = a->jittered ? a->xj : x;
    PROF(PROF_ROUTER,
         matmul_backward(dx ? s->dx_router : NULL, gWr, s->dlogits, xr, wt->router, N, C, E));
    if (dx && a->jittered) {
        float *dr = s->dx_router;
        const float *jit = a->jit;
        double t0 = prof_clock();
#pragma omp parallel for
        for (size_t i = 0; i < (size_t)N * C; i++) dr[i] *= jit[i];
        if (prof_enabled) prof_add(PROF_ROUTER, prof_clock() - t0);
    }

    if (dx) {
        /* x feeds both paths: dx = dx(experts) + dx(router), elementwise, one owner each */
        size_t NC = (size_t)N * C;
        const float *dr = s->dx_router;
        double t0 = prof_clock();
#pragma omp parallel for
        for (size_t i = 0; i < NC; i++) dx[i] += dr[i];
        if (prof_enabled) prof_add(PROF_RESIDUAL, prof_clock() - t0);
    }
}
