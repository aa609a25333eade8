/*
 * dist_mpi_lib.c: the collectives of dist.h as MPI's own nonblocking ones (dist.collectives=mpi,
 * the default of a multi-process run).
 *
 * Each collective is a single request of the library (MPI_Iallreduce, MPI_Ialltoallv, ...),
 * tested by the wait loop of dist_mpi_core.c, so it keeps the deadline of every wait: a group
 * that does not complete within dist.timeout ends the job, naming the collective and the
 * group (the library cannot say which member is missing; the hand-built collectives of
 * dist_mpi_ops.c can, peer by peer). What the library gains over those: it chooses the
 * algorithm by message size and network (a ring or a tree for the sums instead of everything
 * through member 0, pairwise exchanges for the all-to-alls), and an MPI built for the
 * cluster's network (InfiniBand, shared memory inside a node) uses it directly.
 *
 * The bytes each rank sends and receives are counted as the algorithm's cost model says, since
 * the library does not report them: an exchange's payload; a sum of n elements over P members,
 * 2 (P - 1) / P n each way (reduce-scatter then all-gather around a ring: the bandwidth-optimal
 * algorithm a library uses for large messages); a broadcast or gather, the payload of a tree,
 * n per member that receives (or sends) it.
 */
#if MOE_HAVE_MPI
#include "parallel/dist_mpi.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* MPI counts are int: a larger buffer is a caller's mistake worth a clear stop. */
static int count_of(Dist *d, size_t n, const char *why) {
    if (n > (size_t)INT_MAX) dist_abort(d, why);
    return (int)n;
}

/* op's one request: the library's, from rc; no peer to name, no count to check. */
static void lib_posted(Dist *d, DistOp *op, int rc) {
    dm_check(d, rc, op->name);
    op->kind = OP_LIB;
    op->peer[0] = -1;
    op->want[0] = -1;
    op->nreq = 1;
}

/* a ring's bytes each way for a sum of n elements of elem bytes over P members */
static uint64_t ring_bytes(int P, size_t n, size_t elem) {
    return P > 1 ? (uint64_t)(2.0 * (P - 1) / P * (double)n * (double)elem + 0.5) : 0;
}

DistOp *lib_sum_start(Dist *d, DistGroup g, void *x, size_t n, int is_double, const char *name) {
    const double t0 = now_seconds();
    const MPI_Datatype type = is_double ? MPI_DOUBLE : MPI_FLOAT;
    const int P = dist_group_size(d, g);
    const int cnt = count_of(d, n, "allreduce: more than 2^31 - 1 elements in one call: split it");
    DistOp *op = dm_op_begin(d, g, name, type);
    lib_posted(d, op,
               MPI_Iallreduce(MPI_IN_PLACE, x, cnt, type, MPI_SUM, dm_comm(d, g), &op->req[0]));
    op->sent = op->recvd = ring_bytes(P, n, is_double ? sizeof(double) : sizeof(float));
    op->seconds += now_seconds() - t0;
    return op;
}

/* op's counts and displacements: each member's range of n floats over P members (in ints:
 * one range over 2^31 - 1 floats ends the job with a message) */
static void shard_counts(Dist *d, DistOp *op, int P, size_t n) {
    for (int p = 0; p < P; p++) {
        size_t lo, hi;
        dist_shard_range(n, P, p, &lo, &hi);
        op->counts[p] = count_of(d, hi - lo,
                                 "reduce-scatter or all-gather: a member's range of "
                                 "more than 2^31 - 1 floats: split it");
        op->displs[p] = count_of(d, lo,
                                 "reduce-scatter or all-gather: more than 2^31 - 1 "
                                 "floats in one call: split it");
    }
}

DistOp *lib_reduce_scatter_f_start(Dist *d, DistGroup g, float *x, size_t n) {
    const double t0 = now_seconds();
    const int P = dist_group_size(d, g), me = dist_group_rank(d, g);
    DistOp *op = dm_op_begin(d, g, "reduce_scatter_f", MPI_FLOAT);
    shard_counts(d, op, P, n);
    const size_t mine = (size_t)op->counts[me] * sizeof(float);
    if (mine > op->reduce_cap) {
        free(op->reduce_buf);
        op->reduce_cap = mine;
        op->reduce_buf = malloc_check(mine);
    }
    lib_posted(d, op,
               MPI_Ireduce_scatter(x, op->reduce_buf, op->counts, MPI_FLOAT, MPI_SUM, dm_comm(d, g),
                                   &op->req[0]));
    op->after_dst = (char *)(x + op->displs[me]); /* MPI writes it at the buffer's start */
    op->after_bytes = mine;
    dist_cost(DIST_COLL_MPI, DIST_REDUCE_SCATTER, P, me, n, &op->sent, &op->recvd);
    op->seconds += now_seconds() - t0;
    return op;
}

DistOp *lib_allgather_f_start(Dist *d, DistGroup g, float *x, size_t n) {
    const double t0 = now_seconds();
    const int P = dist_group_size(d, g);
    DistOp *op = dm_op_begin(d, g, "allgather_f", MPI_FLOAT);
    shard_counts(d, op, P, n);
    lib_posted(d, op,
               MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, op->counts, op->displs,
                               MPI_FLOAT, dm_comm(d, g), &op->req[0]));
    dist_cost(DIST_COLL_MPI, DIST_ALLGATHER, P, dist_group_rank(d, g), n, &op->sent, &op->recvd);
    op->seconds += now_seconds() - t0;
    return op;
}

DistOp *lib_alltoallv_f_start(Dist *d, const float *send, const int *send_counts,
                              const int *send_displs, float *recv, const int *recv_counts,
                              const int *recv_displs) {
    const double t0 = now_seconds();
    DistOp *op = dm_op_begin(d, DIST_EP, "alltoallv_f", MPI_FLOAT);
    lib_posted(d, op,
               MPI_Ialltoallv(send, send_counts, send_displs, MPI_FLOAT, recv, recv_counts,
                              recv_displs, MPI_FLOAT, dm_comm(d, DIST_EP), &op->req[0]));
    for (int p = 0; p < d->ep; p++)
        if (p != d->ep_rank) {
            op->sent += (uint64_t)send_counts[p] * sizeof(float);
            op->recvd += (uint64_t)recv_counts[p] * sizeof(float);
        }
    op->seconds += now_seconds() - t0;
    return op;
}

void lib_alltoall_i(Dist *d, const int *send, int *recv, int count) {
    const double t0 = now_seconds();
    DistOp *op = dm_op_begin(d, DIST_EP, "alltoall_i", MPI_INT);
    lib_posted(d, op,
               MPI_Ialltoall(send, count, MPI_INT, recv, count, MPI_INT, dm_comm(d, DIST_EP),
                             &op->req[0]));
    op->sent = op->recvd = (uint64_t)(d->ep - 1) * (uint64_t)count * sizeof(int);
    op->seconds += now_seconds() - t0;
    dm_wait(d, op);
}

void lib_broadcast(Dist *d, DistGroup g, void *x, int n, MPI_Datatype type, size_t elem,
                   const char *name) {
    const double t0 = now_seconds();
    DistOp *op = dm_op_begin(d, g, name, type);
    lib_posted(d, op, MPI_Ibcast(x, n, type, 0, dm_comm(d, g), &op->req[0]));
    const uint64_t bytes = (uint64_t)n * elem;
    if (dist_group_rank(d, g) == 0)
        op->sent = bytes; /* a tree: member 0 sends it once, each other member receives it */
    else
        op->recvd = bytes;
    op->seconds += now_seconds() - t0;
    dm_wait(d, op);
}

void lib_gather_f(Dist *d, const float *x, int n, float *out) {
    const double t0 = now_seconds();
    DistOp *op = dm_op_begin(d, DIST_EP, "gather_f", MPI_FLOAT);
    lib_posted(
        d, op,
        MPI_Igather(x, n, MPI_FLOAT, out, n, MPI_FLOAT, 0, dm_comm(d, DIST_EP), &op->req[0]));
    const uint64_t bytes = (uint64_t)n * sizeof(float);
    if (d->ep_rank == 0)
        op->recvd = (uint64_t)(d->ep - 1) * bytes;
    else
        op->sent = bytes;
    op->seconds += now_seconds() - t0;
    dm_wait(d, op);
}

void lib_barrier(Dist *d) {
    const double t0 = now_seconds();
    DistOp *op = dm_op_begin(d, DIST_WORLD, "barrier", MPI_BYTE);
    lib_posted(d, op, MPI_Ibarrier(dm_comm(d, DIST_WORLD), &op->req[0]));
    op->seconds += now_seconds() - t0;
    dm_wait(d, op);
}

#endif /* MOE_HAVE_MPI */
