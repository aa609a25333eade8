/*
 * ep.c: the expert computation of an MoE block across an expert-parallel group. See ep.h.
 *
 * Two layouts of the rows a member receives:
 *   received order  source by source (as dist_alltoallv_f places them), and inside a source's
 *                   block expert by expert (the sender's plan order);
 *   expert order    expert by expert, and inside an expert source by source: what the grouped
 *                   GEMMs of experts.c want (one contiguous slice per expert).
 * perm maps the first to the second; it is a permutation of rows, so the backward pass uses
 * the same map the other way.
 */
#include "model/ep.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* dist.dispatch=tokens: the rows a sender sends at most (each holds a kept assignment, and a
 * token goes at most once to each member) and a receiver receives. */
static int sender_rows_max(int P, int N_max, int S_max) {
    const long long r = (long long)N_max * P;
    return r < S_max ? (int)r : S_max;
}

static int receiver_rows_max(int P, int N_max, int S_max) {
    return P * (N_max < S_max ? N_max : S_max);
}

void ep_acts_host_alloc(const Backend *be, EpActs *a, const MoeSpec *s, int P, int N_max) {
    const int S_max = (int)moe_slots_max(s, N_max);
    memset(a, 0, sizeof(*a));
    a->P = P;
    a->El = s->num_experts / P;
    a->C = s->d_model;
    a->F = s->d_expert;
    a->R_max = P * S_max;
    const size_t R = (size_t)a->R_max + 1;
    a->meta_send = (int *)calloc_check((size_t)P * 2 * a->El, sizeof(int));
    a->meta_recv = (int *)calloc_check((size_t)P * 2 * a->El, sizeof(int));
    a->scount = (int *)calloc_check((size_t)P, sizeof(int));
    a->sdispl = (int *)calloc_check((size_t)P, sizeof(int));
    a->rcount = (int *)calloc_check((size_t)P, sizeof(int));
    a->rdispl = (int *)calloc_check((size_t)P, sizeof(int));
    a->eoff = (int *)calloc_check((size_t)a->El + 1, sizeof(int));
    a->cursor = (int *)calloc_check((size_t)a->El + 1, sizeof(int));
    a->perm_host = (int *)calloc_check(R, sizeof(int));
    if (!be->host_memory) { /* a row buffer on either side: the larger of S_max and R_max */
        const size_t rows = (size_t)(S_max > a->R_max ? S_max : a->R_max) + 1;
        a->send_h = floats_alloc(rows * a->C);
        a->recv_h = floats_alloc(rows * a->C);
        a->plan_h = (int *)calloc_check(2 * (size_t)s->num_experts + 1, sizeof(int));
    }
    if (s->ep_dispatch != DIST_DISPATCH_TOKENS) return;
    a->tokens = 1;
    a->A = moe_assignments_per_token(s);
    a->Km = a->A < a->El ? a->A : a->El;
    a->U_max = receiver_rows_max(P, N_max, S_max);
    const size_t NA = (size_t)N_max * a->A, Us = (size_t)sender_rows_max(P, N_max, S_max);
    const size_t Ur = (size_t)a->U_max;
    dispatch_plan_alloc(&a->mp_host, N_max, P, P);
    dispatch_plan_alloc(&a->rp_host, a->U_max, a->El, a->Km);
    int **counts[] = {&a->ucount_s, &a->ucount_r, &a->mcount_s, &a->mdispl_s, &a->mcount_r,
                      &a->mdispl_r};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        *counts[i] = (int *)calloc_check((size_t)P, sizeof(int));
    a->w_h = floats_alloc(NA + 1);
    if (!be->host_memory) a->route_h = (int *)calloc_check(2 * NA + 1, sizeof(int));
    a->meta_s = floats_alloc(Us * 2 * a->Km + 1);
    a->meta_r = floats_alloc(Ur * 2 * a->Km + 1);
    a->wr_h = floats_alloc(Ur * a->Km + 1);
    a->dw_s = floats_alloc((Us > Ur ? Us : Ur) * a->Km + 1);
}

/* dist.dispatch=tokens: the member plan (N_max tokens, P members), the receiver plan (U_max
 * rows, El experts, Km assignments a row), and the received rows' weights and their
 * gradients. */
static void tokens_entries(ActTable *t, const char *pre, const MoeSpec *s, int P, int N_max,
                           int S_max, EpActs *a) {
    const int El = s->num_experts / P, A = moe_assignments_per_token(s), Km = A < El ? A : El;
    const size_t NP = (size_t)N_max * P + 1;
    const size_t UK = (size_t)receiver_rows_max(P, N_max, S_max) * Km + 1;
    acts_add(t, ACT_INT, ACT_INT_WORDS, (size_t)P, ACT_FIELD(a, mp.counts), "%s.mp.counts", pre);
    acts_add(t, ACT_INT, ACT_INT_WORDS, (size_t)P + 1, ACT_FIELD(a, mp.offsets), "%s.mp.offsets",
             pre);
    acts_add(t, ACT_INT, ACT_INT_WORDS, NP, ACT_FIELD(a, mp.slot), "%s.mp.slot", pre);
    acts_add(t, ACT_INT, ACT_INT_WORDS, NP, ACT_FIELD(a, mp.slot_token), "%s.mp.slot_token", pre);
    acts_add(t, ACT_INT, ACT_INT_WORDS, (size_t)El, ACT_FIELD(a, rp.counts), "%s.rp.counts", pre);
    acts_add(t, ACT_INT, ACT_INT_WORDS, (size_t)El + 1, ACT_FIELD(a, rp.offsets),
             "%s.rp.offsets", pre);
    acts_add(t, ACT_INT, ACT_INT_WORDS, UK, ACT_FIELD(a, rp.slot), "%s.rp.slot", pre);
    acts_add(t, ACT_INT, ACT_INT_WORDS, UK, ACT_FIELD(a, rp.slot_token), "%s.rp.slot_token", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, UK, ACT_FIELD(a, wr), "%s.wr", pre);
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, UK, ACT_FIELD(a, dwr), "%s.dwr", pre);
}

void ep_acts_entries(ActTable *t, const char *pre, const MoeSpec *s, int P, int N_max, EpActs *a) {
    const int S_max = (int)moe_slots_max(s, N_max);
    /* R_max + 1 rows: every slot of every sender, and one spare (dist.dispatch=tokens: the
     * rows received, at most R_max, come first) */
    const size_t R = (size_t)P * S_max + 1, C = (size_t)s->d_model, F = (size_t)s->d_expert;
    if (s->ep_dispatch == DIST_DISPATCH_TOKENS) {
        tokens_entries(t, pre, s, P, N_max, S_max, a);
    } else {
        /* perm: received row i sits at expert-order row perm[i] */
        acts_add(t, ACT_INT, ACT_INT_WORDS, R, ACT_FIELD(a, perm), "%s.perm", pre);
        /* eoff_dev: the expert-order offsets, for the backend's experts */
        acts_add(t, ACT_INT, ACT_INT_WORDS, (size_t)(s->num_experts / P) + 1,
                 ACT_FIELD(a, eoff_dev), "%s.eoff", pre);
    }
    /* xr, xo: the rows received, and in expert order; yo, yr: the experts' outputs in expert
     * order and in received order */
    acts_add(t, ACT_FLOAT, ACT_FFN, R * C, ACT_FIELD(a, xr), "%s.xr", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, R * C, ACT_FIELD(a, xo), "%s.xo", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, R * C, ACT_FIELD(a, yo), "%s.yo", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, R * C, ACT_FIELD(a, yr), "%s.yr", pre);
    /* g, u, h: the SwiGLU of this member's experts on those rows */
    acts_add(t, ACT_FLOAT, ACT_FFN, R * F, ACT_FIELD(a, g), "%s.g", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, R * F, ACT_FIELD(a, u), "%s.u", pre);
    acts_add(t, ACT_FLOAT, ACT_FFN, R * F, ACT_FIELD(a, h), "%s.h", pre);
    /* dg, du, dh: their gradients, backward scratch of this block */
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, R * F, ACT_FIELD(a, dg), "%s.dg", pre);
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, R * F, ACT_FIELD(a, du), "%s.du", pre);
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, R * F, ACT_FIELD(a, dh), "%s.dh", pre);
}

void ep_acts_alloc(const Backend *be, EpActs *a, const MoeSpec *s, int P, int N_max) {
    ep_acts_host_alloc(be, a, s, P, N_max);
    ActTable t;
    acts_table_init(&t);
    ep_acts_entries(&t, "ep", s, P, N_max, a);
    a->arena = acts_alloc(be, &t);
    acts_table_free(&t);
}

void ep_acts_free(const Backend *be, EpActs *a) {
    free(a->meta_send);
    free(a->meta_recv);
    free(a->scount);
    free(a->sdispl);
    free(a->rcount);
    free(a->rdispl);
    free(a->eoff);
    free(a->cursor);
    free(a->perm_host);
    free(a->send_h);
    free(a->recv_h);
    free(a->plan_h);
    if (a->tokens) {
        dispatch_plan_free(&a->mp_host);
        dispatch_plan_free(&a->rp_host);
        free(a->ucount_s), free(a->ucount_r);
        free(a->mcount_s), free(a->mdispl_s), free(a->mcount_r), free(a->mdispl_r);
        free(a->route_h), free(a->w_h), free(a->meta_s), free(a->meta_r);
        free(a->wr_h), free(a->dw_s);
    }
    if (a->arena) be->free(be, a->arena);
    memset(a, 0, sizeof(*a));
}

void ep_stats_reset(EpActs *a) {
    memset(&a->stats, 0, sizeof a->stats);
}

/* The block's stats += what d's collectives sent, received and waited since before. */
static void add_traffic(EpActs *a, const Dist *d, const DistStats *before) {
    a->stats.bytes_sent += (double)(d->stats.bytes_sent - before->bytes_sent);
    a->stats.bytes_recv += (double)(d->stats.bytes_recv - before->bytes_recv);
    a->stats.comm_seconds += d->stats.seconds - before->seconds;
}

/* One exchange of rows: C-float rows out of send (sender side counts/displs) into recv: by the
 * backend's own collectives in its memory (dist.collectives=nccl), by d's in place (host
 * memory), or staged. The displacements run from 0 without gaps on both sides (the plan's
 * slices, the received blocks), so a staged exchange copies the first sd[P-1] + sc[P-1]
 * floats down and the first rd[P-1] + rc[P-1] up; the copies count as the exchange's time. */
static void exchange_rows(const Backend *be, EpActs *a, Dist *d, const float *send, const int *sc,
                          const int *sd, float *recv, const int *rc, const int *rd) {
    const DistStats before = d->stats;
    if (d->collectives == DIST_COLL_NCCL && be->coll_alltoallv_f_start) { /* in the device's memory */
        be->coll_wait(be, d, be->coll_alltoallv_f_start(be, d, send, sc, sd, recv, rc, rd));
        add_traffic(a, d, &before);
        return;
    }
    if (!a->send_h) {
        dist_alltoallv_f(d, send, sc, sd, recv, rc, rd);
        add_traffic(a, d, &before);
        return;
    }
    const int P = a->P;
    const double t0 = seconds_now();
    be->to_host(be, a->send_h, send, (size_t)(sd[P - 1] + sc[P - 1]) * sizeof(float));
    dist_alltoallv_f(d, a->send_h, sc, sd, a->recv_h, rc, rd);
    be->to_device(be, recv, a->recv_h, (size_t)(rd[P - 1] + rc[P - 1]) * sizeof(float));
    add_traffic(a, d, &before);
    a->stats.comm_seconds += (seconds_now() - t0) - (d->stats.seconds - before.seconds);
}

/* count ints to each member of the group and from each (dist_alltoall_i), as the expert
 * exchange's traffic (its stats, and DIST_FOR_EXPERTS) */
static void exchange_counts(EpActs *a, Dist *d, const int *send, int *recv, int count) {
    const DistStats before = d->stats;
    const int was = dist_purpose(d, DIST_FOR_EXPERTS);
    dist_alltoall_i(d, send, recv, count);
    dist_purpose(d, was);
    add_traffic(a, d, &before);
}

/* exchange_rows, its bytes counted as the expert exchange's (DIST_FOR_EXPERTS) */
static void exchange(const Backend *be, EpActs *a, Dist *d, const float *send, const int *sc,
                     const int *sd, float *recv, const int *rc, const int *rd) {
    const int was = dist_purpose(d, DIST_FOR_EXPERTS);
    exchange_rows(be, a, d, send, sc, sd, recv, rc, rd);
    dist_purpose(d, was);
}

void ep_experts_forward(const Backend *be, float *ye, EpActs *a, const float *xe,
                        const DispatchPlan *plan, const float *Wg, const float *Wu, const float *Wd,
                        Dist *d) {
    /* ye, xe (S, C); plan over all E experts; Wg, Wu (El, F, C), Wd (El, C, F) */
    const int P = a->P, El = a->El, C = a->C, F = a->F, E = P * El;
    /* the plan's offsets and counts, read on the host (copied down from a device) */
    const int *offsets = plan->offsets, *counts = plan->counts;
    if (a->plan_h) {
        be->to_host(be, a->plan_h, plan->offsets, (size_t)(E + 1) * sizeof(int));
        be->to_host(be, a->plan_h + E + 1, plan->counts, (size_t)E * sizeof(int));
        offsets = a->plan_h, counts = a->plan_h + E + 1;
    }

    /* 1. counts first: rows (slice length, padding included) and kept rows of every expert,
     *    grouped by the member that holds it. Only the rows place anything: the receiver
     *    computes padding rows like token rows, as a fixed buffer would; the kept count rides
     *    along (8 bytes per expert and peer, in the cost model) for a receiver that would
     *    skip them. */
    for (int p = 0; p < P; p++)
        for (int j = 0; j < El; j++) {
            int e = p * El + j;
            a->meta_send[(p * El + j) * 2] = offsets[e + 1] - offsets[e];
            a->meta_send[(p * El + j) * 2 + 1] = counts[e];
        }
    exchange_counts(a, d, a->meta_send, a->meta_recv, 2 * El);

    /* 2. where everything goes: member p's experts are one run of the plan, from
     *    offsets[p El]; what comes from source q lands after what came from 0 .. q-1 */
    int R = 0;
    for (int p = 0; p < P; p++) {
        a->sdispl[p] = offsets[p * El] * C;
        a->scount[p] = (offsets[(p + 1) * El] - offsets[p * El]) * C;
        int rows = 0;
        for (int j = 0; j < El; j++) rows += a->meta_recv[(p * El + j) * 2];
        a->rdispl[p] = R * C;
        a->rcount[p] = rows * C;
        R += rows;
    }
    if (R > a->R_max)
        moe_fatal("expert parallelism: %d rows received, more than the %d allocated", R, a->R_max);
    a->R = R;
    /* expert-order offsets, and the row map: source q's rows for expert j follow those of
     * sources 0 .. q-1 for the same expert */
    a->eoff[0] = 0;
    for (int j = 0; j < El; j++) {
        int rows = 0;
        for (int q = 0; q < P; q++) rows += a->meta_recv[(q * El + j) * 2];
        a->eoff[j + 1] = a->eoff[j] + rows;
    }
    /* walking the received rows in order (source by source, expert by expert), each goes
     * to the next free row of its expert's slice */
    for (int j = 0; j < El; j++) a->cursor[j] = a->eoff[j];
    for (int q = 0, i = 0; q < P; q++)
        for (int j = 0; j < El; j++)
            for (int r = 0; r < a->meta_recv[(q * El + j) * 2]; r++)
                a->perm_host[i++] = a->cursor[j]++;
    be->to_device(be, a->perm, a->perm_host, (size_t)R * sizeof(int));
    be->to_device(be, a->eoff_dev, a->eoff, (size_t)(El + 1) * sizeof(int));

    /* 3. the rows out, the experts, the outputs back the same way */
    exchange(be, a, d, xe, a->scount, a->sdispl, a->xr, a->rcount, a->rdispl);
    const double t0 = seconds_now();
    be->permute_rows(be, a->xo, a->xr, a->perm, R, C, 0);
    /* padding rows are zeros and SwiGLU(0) = 0, so every row is computed alike: the cost of
     * a fixed buffer is paid where the experts are */
    be->experts_forward(be, a->yo, a->g, a->u, a->h, a->xo, Wg, Wu, Wd, a->eoff_dev, NULL, El, C,
                        F);
    be->permute_rows(be, a->yr, a->yo, a->perm, R, C, 1);
    a->stats.expert_seconds += seconds_now() - t0;
    a->stats.rows_in += R;
    {
        const int me = dist_group_rank(d, DIST_EP);
        a->stats.rows_out_remote += (double)(offsets[P * El] - (a->scount[me] / C));
        a->stats.rows_in_remote += (double)(R - a->rcount[me] / C);
    }
    exchange(be, a, d, a->yr, a->rcount, a->rdispl, ye, a->scount, a->sdispl);
}

void ep_experts_backward(const Backend *be, float *dxe, float *dWg, float *dWu, float *dWd,
                         const float *dye, EpActs *a, const DispatchPlan *plan, const float *Wg,
                         const float *Wu, const float *Wd, Dist *d) {
    /* dxe, dye (S, C); dW* (El, ...) accumulated; the forward's rows in a */
    (void)plan;
    const int El = a->El, C = a->C, F = a->F, R = a->R;
    /* dye rows travel like xe did; they land in yr (received order), then yo (expert order) */
    exchange(be, a, d, dye, a->scount, a->sdispl, a->yr, a->rcount, a->rdispl);
    const double t0 = seconds_now();
    be->permute_rows(be, a->yo, a->yr, a->perm, R, C, 0);
    /* dx rows (expert order) into xr's buffer, then back to received order in yr */
    be->experts_backward(be, dxe ? a->xr : NULL, dWg, dWu, dWd, a->dg, a->du, a->dh, a->yo, a->xo,
                         a->g, a->u, a->h, Wg, Wu, Wd, a->eoff_dev, NULL, El, C, F);
    if (dxe) be->permute_rows(be, a->yr, a->xr, a->perm, R, C, 1);
    a->stats.expert_seconds += seconds_now() - t0;
    if (dxe) exchange(be, a, d, a->yr, a->rcount, a->rdispl, dxe, a->scount, a->sdispl);
}

/* ---- dist.dispatch=tokens: a token once per member ---------------------------------------- */

/* a->mp_host, the member plan: token t goes to member p (slot(t, p) >= 0) when one of its kept
 * assignments (slot >= 0 in the block's plan) is to an expert p holds; a counting sort of those
 * (token, member) pairs by member, stable in token order. */
static void member_plan_build(EpActs *a, const int *idx, const int *slot, int N) {
    DispatchPlan *mp = &a->mp_host;
    const int P = a->P, El = a->El, A = a->A;
    const int NEEDED = -2; /* a pair to place, before it has its slot */
    memset(mp->counts, 0, (size_t)P * sizeof(int));
    for (size_t j = 0; j < (size_t)N * P; j++) mp->slot[j] = -1;
    for (int t = 0; t < N; t++)
        for (int k = 0; k < A; k++) {
            const size_t j = (size_t)t * A + k;
            if (slot[j] < 0) continue; /* dropped */
            int *to = &mp->slot[(size_t)t * P + idx[j] / El];
            if (*to == -1) *to = NEEDED, mp->counts[idx[j] / El]++;
        }
    mp->offsets[0] = 0;
    for (int p = 0; p < P; p++) mp->offsets[p + 1] = mp->offsets[p] + mp->counts[p];
    memset(mp->counts, 0, (size_t)P * sizeof(int)); /* again: each member's fill cursor */
    for (int t = 0; t < N; t++)
        for (int p = 0; p < P; p++) {
            int *to = &mp->slot[(size_t)t * P + p];
            if (*to != NEEDED) continue;
            *to = mp->offsets[p] + mp->counts[p]++;
            mp->slot_token[*to] = t;
        }
    mp->N = N;
    mp->S = mp->offsets[P];
}

/* The i-th of token t's kept assignments at member p, in k order: its k, or -1 past the last. */
static int nth_at_member(const EpActs *a, int t, int p, int i) {
    for (int k = 0; k < a->A; k++) {
        const size_t j = (size_t)t * a->A + k;
        if (a->route_slot[j] >= 0 && a->route_idx[j] / a->El == p && i-- == 0) return k;
    }
    return -1;
}

/* a->rp_host, the receiver plan, and a->wr_h: the U received rows' pairs meta_r (U, 2 Km) as
 * a dispatch plan over this member's El experts (a pair of expert -1 is no assignment). */
static void receiver_plan_build(EpActs *a, int U) {
    DispatchPlan *rp = &a->rp_host;
    const int El = a->El, Km = a->Km;
    const size_t UK = (size_t)U * Km;
    memset(rp->counts, 0, (size_t)El * sizeof(int));
    for (size_t j = 0; j < UK; j++) {
        const int e = (int)a->meta_r[2 * j];
        if (e >= El || e < -1)
            moe_fatal("expert parallelism: a received row names local expert %d of %d", e, El);
        if (e >= 0) rp->counts[e]++;
        a->wr_h[j] = a->meta_r[2 * j + 1];
    }
    rp->offsets[0] = 0;
    for (int e = 0; e < El; e++) rp->offsets[e + 1] = rp->offsets[e] + rp->counts[e];
    memset(rp->counts, 0, (size_t)El * sizeof(int));
    for (size_t j = 0; j < UK; j++) {
        const int e = (int)a->meta_r[2 * j];
        rp->slot[j] = -1;
        if (e < 0) continue;
        const int s = rp->offsets[e] + rp->counts[e]++;
        rp->slot[j] = s;
        rp->slot_token[s] = (int)(j / (size_t)Km);
    }
    rp->N = U;
    rp->S = rp->offsets[El];
}

/* A plan built on the host into the backend's copy: its sizes, then its arrays. */
static void plan_to_backend(const Backend *be, DispatchPlan *dst, const DispatchPlan *src) {
    dst->N = src->N, dst->E = src->E, dst->K = src->K, dst->S = src->S;
    be->to_device(be, dst->counts, src->counts, (size_t)src->E * sizeof(int));
    be->to_device(be, dst->offsets, src->offsets, (size_t)(src->E + 1) * sizeof(int));
    be->to_device(be, dst->slot, src->slot, (size_t)src->N * src->K * sizeof(int));
    be->to_device(be, dst->slot_token, src->slot_token, (size_t)src->S * sizeof(int));
}

/* counts[p] = per_row n[p], displs their running sum, for each of the P members. */
static void counts_of(int *counts, int *displs, const int *n, int per_row, int P) {
    for (int p = 0, at = 0; p < P; p++) {
        counts[p] = n[p] * per_row;
        displs[p] = at;
        at += counts[p];
    }
}

void ep_tokens_forward(const Backend *be, float *y, float *xs, float *zs, EpActs *a,
                       const float *x, const int *idx, const float *w, const DispatchPlan *plan,
                       const float *Wg, const float *Wu, const float *Wd, Dist *d) {
    /* y, x (N, C); xs, zs (S_max, C); idx, w (N, A); Wg, Wu (El, F, C), Wd (El, C, F) */
    const int P = a->P, El = a->El, C = a->C, F = a->F, A = a->A, Km = a->Km, N = plan->N;
    const size_t NA = (size_t)N * A;
    const int me = dist_group_rank(d, DIST_EP);
    /* 1. the routing on the host (copied down from a device), kept for the backward */
    a->route_idx = idx, a->route_slot = plan->slot;
    const float *wh = w;
    if (a->route_h) {
        be->to_host(be, a->route_h, idx, NA * sizeof(int));
        be->to_host(be, a->route_h + NA, plan->slot, NA * sizeof(int));
        be->to_host(be, a->w_h, w, NA * sizeof(float));
        a->route_idx = a->route_h, a->route_slot = a->route_h + NA, wh = a->w_h;
    }
    member_plan_build(a, a->route_idx, a->route_slot, N);
    plan_to_backend(be, &a->mp, &a->mp_host);
    /* 2. each row's pairs: its assignments at the member it goes to, then (-1, 0) */
    const DispatchPlan *mp = &a->mp_host;
    for (int p = 0; p < P; p++)
        for (int s = mp->offsets[p]; s < mp->offsets[p + 1]; s++) {
            const int t = mp->slot_token[s];
            for (int i = 0; i < Km; i++) {
                const int k = nth_at_member(a, t, p, i);
                float *pair = a->meta_s + ((size_t)s * Km + i) * 2;
                pair[0] = k < 0 ? -1.0f : (float)(a->route_idx[(size_t)t * A + k] - p * El);
                pair[1] = k < 0 ? 0.0f : wh[(size_t)t * A + k];
            }
        }
    /* 3. counts first, then the rows (a gather of x) and their pairs */
    for (int p = 0; p < P; p++) a->ucount_s[p] = mp->counts[p];
    exchange_counts(a, d, a->ucount_s, a->ucount_r, 1);
    counts_of(a->scount, a->sdispl, a->ucount_s, C, P);
    counts_of(a->rcount, a->rdispl, a->ucount_r, C, P);
    counts_of(a->mcount_s, a->mdispl_s, a->ucount_s, 2 * Km, P);
    counts_of(a->mcount_r, a->mdispl_r, a->ucount_r, 2 * Km, P);
    int U = 0;
    for (int p = 0; p < P; p++) U += a->ucount_r[p];
    if (U > a->U_max)
        moe_fatal("expert parallelism: %d tokens received, more than the %d allocated", U,
                  a->U_max);
    a->U = U;
    be->permute_forward(be, xs, x, &a->mp, C);
    exchange(be, a, d, xs, a->scount, a->sdispl, a->xr, a->rcount, a->rdispl);
    const DistStats before_meta = d->stats;
    const int was = dist_purpose(d, DIST_FOR_EXPERTS);
    dist_alltoallv_f(d, a->meta_s, a->mcount_s, a->mdispl_s, a->meta_r, a->mcount_r, a->mdispl_r);
    dist_purpose(d, was);
    add_traffic(a, d, &before_meta);

    /* 4. here: one row per assignment, the experts, each row's weighted sum */
    const double t0 = seconds_now();
    receiver_plan_build(a, U);
    const int R = a->rp_host.S;
    if (R > a->R_max)
        moe_fatal("expert parallelism: %d rows received, more than the %d allocated", R, a->R_max);
    a->R = R;
    plan_to_backend(be, &a->rp, &a->rp_host);
    be->to_device(be, a->wr, a->wr_h, (size_t)U * Km * sizeof(float));
    be->permute_forward(be, a->xo, a->xr, &a->rp, C);
    be->experts_forward(be, a->yo, a->g, a->u, a->h, a->xo, Wg, Wu, Wd, a->rp.offsets, NULL, El,
                        C, F);
    be->combine_forward(be, a->yr, a->yo, a->wr, &a->rp, C);
    a->stats.expert_seconds += seconds_now() - t0;
    a->stats.rows_in += R;
    a->stats.rows_out_remote += (double)(mp->S - a->ucount_s[me]);
    a->stats.rows_in_remote += (double)(U - a->ucount_r[me]);

    /* 5. the sums back; a token's output is what its members returned, member by member */
    exchange(be, a, d, a->yr, a->rcount, a->rdispl, zs, a->scount, a->sdispl);
    be->permute_backward(be, y, zs, &a->mp, C);
}

void ep_tokens_backward(const Backend *be, float *dx, float *dw, float *dys, float *dxs,
                        float *dWg, float *dWu, float *dWd, const float *dy, EpActs *a,
                        const float *Wg, const float *Wu, const float *Wd, Dist *d) {
    /* dx, dy (N, C); dw (N, A); dys, dxs (S_max, C); the forward's plans and rows in a */
    const int P = a->P, El = a->El, C = a->C, F = a->F, A = a->A, Km = a->Km, U = a->U;
    const DispatchPlan *mp = &a->mp_host;
    const int N = mp->N;
    /* 1. dy once per (token, member), as x went */
    be->permute_forward(be, dys, dy, &a->mp, C);
    exchange(be, a, d, dys, a->scount, a->sdispl, a->yr, a->rcount, a->rdispl);
    /* 2. here: dye = w dy and dw = dy . ye per assignment (into xr's buffer; yo holds ye),
     *    the experts' backward (dx rows into yo), the dx rows summed per received row */
    const double t0 = seconds_now();
    be->combine_backward(be, a->xr, a->dwr, a->yr, a->yo, a->wr, &a->rp, C);
    be->experts_backward(be, dx ? a->yo : NULL, dWg, dWu, dWd, a->dg, a->du, a->dh, a->xr, a->xo,
                         a->g, a->u, a->h, Wg, Wu, Wd, a->rp.offsets, NULL, El, C, F);
    if (dx) be->permute_backward(be, a->yr, a->yo, &a->rp, C);
    a->stats.expert_seconds += seconds_now() - t0;
    /* 3. the dx rows back and summed per token; the gate gradients back to their (t, k) */
    if (dx) {
        exchange(be, a, d, a->yr, a->rcount, a->rdispl, dxs, a->scount, a->sdispl);
        be->permute_backward(be, dx, dxs, &a->mp, C);
    }
    int *n_s = a->mcount_s, *o_s = a->mdispl_s, *n_r = a->mcount_r, *o_r = a->mdispl_r;
    counts_of(n_s, o_s, a->ucount_s, Km, P);
    counts_of(n_r, o_r, a->ucount_r, Km, P);
    be->to_host(be, a->wr_h, a->dwr, (size_t)U * Km * sizeof(float));
    const DistStats before = d->stats;
    const int was = dist_purpose(d, DIST_FOR_EXPERTS);
    dist_alltoallv_f(d, a->wr_h, n_r, o_r, a->dw_s, n_s, o_s);
    dist_purpose(d, was);
    add_traffic(a, d, &before);
    float *dwh = a->route_h ? a->w_h : dw;
    memset(dwh, 0, (size_t)N * A * sizeof(float));
    for (int p = 0; p < P; p++)
        for (int s = mp->offsets[p]; s < mp->offsets[p + 1]; s++)
            for (int i = 0; i < Km; i++) {
                const int k = nth_at_member(a, mp->slot_token[s], p, i);
                if (k >= 0) dwh[(size_t)mp->slot_token[s] * A + k] = a->dw_s[(size_t)s * Km + i];
            }
    if (dwh != dw) be->to_device(be, dw, dwh, (size_t)N * A * sizeof(float));
}
