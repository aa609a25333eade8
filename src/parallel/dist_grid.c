/*
 * dist_grid.c: the process grid's arithmetic (dist.h): which rank sits where on the axes
 * tp x ep x dp x pp, and which ranks make up each group. Both builds use it (one process is the
 * grid of axes 1 x 1 x 1); it calls nothing else of src/parallel/, so every other file may call
 * it.
 */
#include "parallel/dist.h"

#include "base/util.h"

int dist_grid_set(Dist *d, int world, int rank, DistAxes a, char *err, int errlen) {
    if (a.pp == 0) a.pp = 1;
    if (a.tp < 1 || a.ep < 1 || a.pp < 1)
        return set_error(err, errlen,
                         "dist.tp=%d, dist.ep=%d, dist.pp=%d: each axis of the process grid is 1 "
                         "or more processes",
                         a.tp, a.ep, a.pp);
    if (world % a.pp != 0)
        return set_error(err, errlen,
                         "dist.pp=%d pipeline stages do not divide the %d processes (the world is "
                         "dist.pp stages of dist.tp x dist.ep x data-parallel processes each): run "
                         "with mpirun -np %d or %d, or set dist.pp to a divisor of %d",
                         a.pp, world, a.pp, 2 * a.pp, world);
    const int stage = world / a.pp;         /* the processes of one pipeline stage */
    const long replica = (long)a.tp * a.ep; /* the processes of one data-parallel replica */
    if (stage % replica != 0 && a.pp > 1)
        return set_error(err, errlen,
                         "dist.tp=%d x dist.ep=%d = %ld processes a data-parallel replica, which "
                         "does not divide the %d processes of a pipeline stage (%d processes / "
                         "dist.pp=%d): run with mpirun -np %ld, or change dist.tp, dist.ep or "
                         "dist.pp",
                         a.tp, a.ep, replica, stage, world, a.pp, replica * a.pp);
    if (world % replica != 0) {
        const char *what = a.tp > 1 && a.ep > 1 ? "dist.tp x dist.ep"
                           : a.tp > 1           ? "dist.tp"
                                                : "dist.ep";
        if (a.tp > 1 && a.ep > 1)
            return set_error(err, errlen,
                             "dist.tp=%d x dist.ep=%d = %ld processes a data-parallel replica, "
                             "which does not divide the %d processes (the world is dist.tp x "
                             "dist.ep x data-parallel): run with mpirun -np %ld or %ld, or set "
                             "%s to a divisor of %d",
                             a.tp, a.ep, replica, world, replica, 2 * replica, what, world);
        return set_error(err, errlen,
                         "%s=%ld does not divide the %d processes: run with mpirun -np %ld or "
                         "%ld, or set %s to a divisor of %d",
                         what, replica, world, replica, 2 * replica, what, world);
    }
    d->world = world;
    d->rank = rank;
    d->tp = a.tp;
    d->ep = a.ep;
    d->pp = a.pp;
    d->dp = stage / (int)replica;
    d->tp_rank = rank % a.tp;
    d->ep_rank = rank / a.tp % a.ep;
    d->dp_rank = rank % stage / (int)replica;
    d->pp_rank = rank / stage;
    return 0;
}

/* The processes of one pipeline stage, tp x ep x dp. */
static int stage_size(const Dist *d) {
    return d->tp * d->ep * d->dp;
}

int dist_group_size(const Dist *d, DistGroup g) {
    switch (g) {
    case DIST_TP: return d->tp;
    case DIST_EP: return d->ep;
    case DIST_DP: return d->tp * d->dp;
    case DIST_DATA: return d->ep * d->dp;
    case DIST_STAGE: return stage_size(d);
    case DIST_PP: return d->pp;
    default: return d->world;
    }
}

int dist_group_rank(const Dist *d, DistGroup g) {
    switch (g) {
    case DIST_TP: return d->tp_rank;
    case DIST_EP: return d->ep_rank;
    case DIST_DP: return d->tp_rank + d->tp * d->dp_rank;
    case DIST_DATA: return d->ep_rank + d->ep * d->dp_rank;
    case DIST_STAGE: return d->rank % stage_size(d);
    case DIST_PP: return d->pp_rank;
    default: return d->rank;
    }
}

/* The grid's formula, rank = tp_rank + tp (ep_rank + ep (dp_rank + dp pp_rank)), at other
 * indices of this process's stage. */
static int rank_at(const Dist *d, int tp_rank, int ep_rank, int dp_rank) {
    return tp_rank + d->tp * (ep_rank + d->ep * dp_rank) + stage_size(d) * d->pp_rank;
}

int dist_group_world_rank(const Dist *d, DistGroup g, int p) {
    switch (g) {
    case DIST_TP: return rank_at(d, p, d->ep_rank, d->dp_rank);
    case DIST_EP: return rank_at(d, d->tp_rank, p, d->dp_rank);
    case DIST_DP: return rank_at(d, p % d->tp, d->ep_rank, p / d->tp);
    case DIST_DATA: return rank_at(d, d->tp_rank, p % d->ep, p / d->ep);
    case DIST_STAGE: return p + stage_size(d) * d->pp_rank;
    case DIST_PP: return d->rank % stage_size(d) + stage_size(d) * p;
    default: return p;
    }
}

/* Which copy of a group this process is in: numbered inside its stage, then stage by stage
 * (each stage holds per_stage copies of a group that lies inside one). */
int dist_group_colour(const Dist *d, DistGroup g) {
    const int per_stage = stage_size(d) / dist_group_size(d, g);
    switch (g) {
    case DIST_TP: return d->ep_rank + d->ep * d->dp_rank + per_stage * d->pp_rank;
    case DIST_EP: return d->tp_rank + d->tp * d->dp_rank + per_stage * d->pp_rank;
    case DIST_DP: return d->ep_rank + per_stage * d->pp_rank;
    case DIST_DATA: return d->tp_rank + per_stage * d->pp_rank;
    case DIST_STAGE: return d->pp_rank;
    case DIST_PP: return d->rank % stage_size(d);
    default: return 0;
    }
}

/* A ring's bytes each way: (P - 1) / P n floats for each half of a sum, rounded once. */
static uint64_t ring(int P, size_t n, int halves) {
    return P > 1 ? (uint64_t)(halves * (double)(P - 1) / P * (double)n * sizeof(float) + 0.5) : 0;
}

void dist_cost(int collectives, DistKind kind, int P, int me, size_t n, uint64_t *sent,
               uint64_t *recvd) {
    *sent = *recvd = 0;
    if (P <= 1) return;
    if (collectives != DIST_COLL_TEACH) {
        *sent = *recvd = ring(P, n, kind == DIST_ALLREDUCE ? 2 : 1);
        return;
    }
    /* through member 0: the whole buffer up (a sum) or each range up (a gather); the whole
     * buffer down (an all-reduce, a gather) or each range down (a reduce-scatter) */
    size_t lo, hi, l0, h0;
    dist_shard_range(n, P, me, &lo, &hi);
    dist_shard_range(n, P, 0, &l0, &h0);
    const uint64_t f = sizeof(float), others = (uint64_t)(P - 1);
    const uint64_t up = kind == DIST_ALLGATHER ? (hi - lo) * f : n * f;
    const uint64_t down = kind == DIST_REDUCE_SCATTER ? (hi - lo) * f : n * f;
    if (me == 0) { /* the others' ups in, their downs out */
        *recvd = kind == DIST_ALLGATHER ? (n - (h0 - l0)) * f : others * n * f;
        *sent = kind == DIST_REDUCE_SCATTER ? (n - (h0 - l0)) * f : others * n * f;
    } else {
        *sent = up;
        *recvd = down;
    }
}
