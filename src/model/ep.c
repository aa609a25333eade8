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

void ep_acts_host_alloc(const Backend *be, EpActs *a, const MoeSpec *s, int P, int S_max) {
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
}

void ep_acts_entries(ActTable *t, const char *pre, const MoeSpec *s, int P, int S_max, EpActs *a) {
    /* R_max + 1 rows: every slot of every sender, and one spare */
    const size_t R = (size_t)P * S_max + 1, C = (size_t)s->d_model, F = (size_t)s->d_expert;
    /* perm: received row i sits at expert-order row perm[i] */
    acts_add(t, ACT_INT, ACT_INT_WORDS, R, ACT_FIELD(a, perm), "%s.perm", pre);
    /* eoff_dev: the expert-order offsets, for the backend's experts */
    acts_add(t, ACT_INT, ACT_INT_WORDS, (size_t)(s->num_experts / P) + 1, ACT_FIELD(a, eoff_dev),
             "%s.eoff", pre);
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

void ep_acts_alloc(const Backend *be, EpActs *a, const MoeSpec *s, int P, int S_max) {
    ep_acts_host_alloc(be, a, s, P, S_max);
    ActTable t;
    acts_table_init(&t);
    ep_acts_entries(&t, "ep", s, P, S_max, a);
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
static void exchange(const Backend *be, EpActs *a, Dist *d, const float *send, const int *sc,
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
    const DistStats before = d->stats;
    dist_alltoall_i(d, a->meta_send, a->meta_recv, 2 * El);
    add_traffic(a, d, &before);

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
