/*
 * dist_mpi_ops.c: the collectives of the MPI build (dist.h), on the requests and the wait loop
 * of dist_mpi_core.c (read dist_mpi.c's opening comment first: why point-to-point, the
 * deadlines, the reduction order, the tags). These are dist.collectives=teach, built by hand;
 * each entry hands the other engines (mpi, and nccl for host buffers) to MPI's own
 * collectives (dist_mpi_lib.c) first.
 */
#if MOE_HAVE_MPI
#include "parallel/dist_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* MPI counts are int: larger buffers are a caller's mistake worth a clear stop. */
static int count_of(Dist *d, size_t n, const char *op) {
    if (n > (size_t)INT_MAX) dist_abort(d, op); /* op says which call and what to do */
    return (int)n;
}

/* ---- sums, and their two halves ----------------------------------------------------------- */

/* x (n elements of elem bytes, float or double) over group g, in place, chunk by chunk, every
 * message through member 0, in two phases a chunk:
 *   all-reduce      UP: each member's chunk to member 0, which adds the addends in member
 *                   order into its own x; DOWN: the sum back to every member. Bytes: member 0
 *                   sends and receives (P - 1) n elem, the others n elem.
 *   reduce-scatter  UP as the all-reduce's (the same sum, in the same order: the same bits);
 *                   DOWN: member p gets its range (dist_shard_range) of the sum only.
 *   all-gather      UP: member p's range to member 0, into its place in member 0's x; DOWN:
 *                   the whole chunk back to every member.
 * A chunk's share of member p's range is its intersection with the chunk (often empty: then
 * neither end posts a message, as both compute the same intersection). */

/* The part of member p's range of op's buffer inside the chunk at op->off: [lo, hi). */
static void chunk_share(const DistOp *op, int P, int p, size_t *lo, size_t *hi) {
    dist_shard_range(op->n, P, p, lo, hi);
    const size_t c0 = op->off, c1 = op->off + op->len;
    *lo = *lo > c0 ? *lo : c0;
    *hi = *hi < c1 ? *hi : c1;
    if (*hi < *lo) *hi = *lo;
}

/* What member q and member 0 exchange in op's current phase: [lo, hi) of the buffer. */
static void phase_span(const DistOp *op, int P, int q, size_t *lo, size_t *hi) {
    const int whole = op->phase == SUM_UP ? op->mode != SUM_GATHER : op->mode != SUM_SCATTER;
    if (whole) {
        *lo = op->off;
        *hi = op->off + op->len;
    } else {
        chunk_share(op, P, q, lo, hi);
    }
}

/* Post the messages of op's current phase for the chunk at op->off. */
static void sum_post(Dist *d, DistOp *op) {
    const int P = dist_group_size(d, op->g), me = dist_group_rank(d, op->g);
    const int tag = op->phase == SUM_UP ? TAG_REDUCE_UP : TAG_REDUCE_DOWN;
    size_t lo, hi;
    for (int p = 1; me == 0 && p < P; p++) {
        phase_span(op, P, p, &lo, &hi);
        if (hi == lo) continue;
        if (op->phase == SUM_UP && op->mode != SUM_GATHER)
            dm_post_recv(d, op, op->g, op->reduce_buf + (size_t)(p - 1) * op->len * op->elem,
                         (int)(hi - lo), p, tag);
        else if (op->phase == SUM_UP)
            dm_post_recv(d, op, op->g, op->x + lo * op->elem, (int)(hi - lo), p, tag);
        else
            dm_post_send(d, op, op->g, op->x + lo * op->elem, (int)(hi - lo), p, tag);
    }
    if (me == 0) return;
    /* the send must be complete before the sum overwrites the same buffer: DOWN is posted
     * only after UP has finished */
    phase_span(op, P, me, &lo, &hi);
    if (hi == lo) return;
    if (op->phase == SUM_UP)
        dm_post_send(d, op, op->g, op->x + lo * op->elem, (int)(hi - lo), 0, tag);
    else
        dm_post_recv(d, op, op->g, op->x + lo * op->elem, (int)(hi - lo), 0, tag);
}

/* Member 0: the addends of the chunk, in member order, into its own x. */
static void sum_add(Dist *d, DistOp *op) {
    const int P = dist_group_size(d, op->g);
    char *xs = op->x + op->off * op->elem;
    for (int p = 1; p < P; p++) {
        const char *b = op->reduce_buf + (size_t)(p - 1) * op->len * op->elem;
        if (op->elem == sizeof(double))
            for (size_t i = 0; i < op->len; i++) ((double *)xs)[i] += ((const double *)b)[i];
        else
            for (size_t i = 0; i < op->len; i++) ((float *)xs)[i] += ((const float *)b)[i];
    }
}

static DistOp *sum_start(Dist *d, DistGroup g, void *x, size_t n, int is_double, int mode,
                         const char *name) {
    const double t0 = now_seconds();
    DistOp *op = dm_op_begin(d, g, name, is_double ? MPI_DOUBLE : MPI_FLOAT);
    const int P = dist_group_size(d, g), me = dist_group_rank(d, g);
    op->kind = OP_SUM;
    op->mode = mode;
    op->g = g;
    op->x = (char *)x;
    op->n = P > 1 ? n : 0; /* a group of one: nothing to send */
    op->elem = is_double ? sizeof(double) : sizeof(float);
    op->off = 0;
    op->len = op->n < REDUCE_CHUNK ? op->n : REDUCE_CHUNK;
    op->phase = SUM_UP;
    size_t need = mode == SUM_GATHER ? 0 : (size_t)(P - 1) * op->len * op->elem;
    if (me == 0 && need > op->reduce_cap) {
        free(op->reduce_buf);
        op->reduce_cap = need;
        op->reduce_buf = malloc_check(need);
    }
    if (op->len > 0) sum_post(d, op);
    op->seconds += now_seconds() - t0;
    return op;
}

/* The bytes of op's phase just finished, into its counts: member 0's with every member, the
 * others' with member 0. */
static void phase_bytes(const Dist *d, DistOp *op) {
    const int P = dist_group_size(d, op->g), me = dist_group_rank(d, op->g);
    uint64_t elems = 0;
    size_t lo, hi;
    for (int q = me == 0 ? 1 : me; q < (me == 0 ? P : me + 1); q++) {
        phase_span(op, P, q, &lo, &hi);
        elems += hi - lo;
    }
    const uint64_t bytes = elems * op->elem;
    const int receives = (op->phase == SUM_UP) == (me == 0);
    if (receives)
        op->recvd += bytes;
    else
        op->sent += bytes;
}

/* Drive a sum through its chunks: each chunk's UP, then its DOWN, then the next chunk. */
static void sum_finish(Dist *d, DistOp *op) {
    const int me = dist_group_rank(d, op->g);
    const double patience = me == 0 ? WAIT_ROOT : WAIT_HUB;
    while (op->off < op->n) {
        dm_wait_for(d, op, patience);
        phase_bytes(d, op);
        if (op->phase == SUM_UP) {
            if (me == 0 && op->mode != SUM_GATHER) sum_add(d, op);
            op->phase = SUM_DOWN;
        } else {
            op->off += op->len;
            op->len = op->n - op->off < op->len ? op->n - op->off : op->len;
            op->phase = SUM_UP;
            if (op->off >= op->n) break;
        }
        sum_post(d, op);
    }
}

DistOp *dist_allreduce_sum_f_start(Dist *d, DistGroup g, float *x, size_t n) {
    if (d->collectives != DIST_COLL_TEACH) return lib_sum_start(d, g, x, n, 0, "allreduce_sum_f");
    return sum_start(d, g, x, n, 0, SUM_ALL, "allreduce_sum_f");
}

DistOp *dist_allreduce_sum_d_start(Dist *d, DistGroup g, double *x, size_t n) {
    if (d->collectives != DIST_COLL_TEACH) return lib_sum_start(d, g, x, n, 1, "allreduce_sum_d");
    return sum_start(d, g, x, n, 1, SUM_ALL, "allreduce_sum_d");
}

DistOp *dist_reduce_scatter_f_start(Dist *d, DistGroup g, float *x, size_t n) {
    if (d->collectives != DIST_COLL_TEACH) return lib_reduce_scatter_f_start(d, g, x, n);
    return sum_start(d, g, x, n, 0, SUM_SCATTER, "reduce_scatter_f");
}

DistOp *dist_allgather_f_start(Dist *d, DistGroup g, float *x, size_t n) {
    if (d->collectives != DIST_COLL_TEACH) return lib_allgather_f_start(d, g, x, n);
    return sum_start(d, g, x, n, 0, SUM_GATHER, "allgather_f");
}

void dist_allreduce_sum_f(Dist *d, DistGroup g, float *x, size_t n) {
    dist_wait(d, dist_allreduce_sum_f_start(d, g, x, n));
}

void dist_allreduce_sum_d(Dist *d, DistGroup g, double *x, size_t n) {
    dist_wait(d, dist_allreduce_sum_d_start(d, g, x, n));
}

void dist_reduce_scatter_f(Dist *d, DistGroup g, float *x, size_t n) {
    dist_wait(d, dist_reduce_scatter_f_start(d, g, x, n));
}

void dist_allgather_f(Dist *d, DistGroup g, float *x, size_t n) {
    dist_wait(d, dist_allgather_f_start(d, g, x, n));
}

/* ---- all-to-all inside the EP row --------------------------------------------------------- */

void dist_alltoall_i(Dist *d, const int *send, int *recv, int count) {
    if (d->collectives != DIST_COLL_TEACH) {
        lib_alltoall_i(d, send, recv, count);
        return;
    }
    const double t0 = now_seconds();
    DistOp *op = dm_op_begin(d, DIST_EP, "alltoall_i", MPI_INT);
    int P = d->ep, me = d->ep_rank;
    if (count > 0)
        memcpy(recv + (size_t)me * count, send + (size_t)me * count, (size_t)count * sizeof(int));
    for (int p = 0; p < P; p++)
        if (p != me) dm_post_recv(d, op, DIST_EP, recv + (size_t)p * count, count, p, TAG_ALLTOALL_I);
    for (int p = 0; p < P; p++)
        if (p != me) dm_post_send(d, op, DIST_EP, send + (size_t)p * count, count, p, TAG_ALLTOALL_I);
    op->sent = op->recvd = (uint64_t)(P - 1) * (uint64_t)count * sizeof(int);
    op->seconds += now_seconds() - t0;
    dist_wait(d, op);
}

/* A message goes to every peer even when its count is 0: each exchange then hears from the
 * whole row (a dead peer is named at the next exchange, whatever the routing did) and checks
 * that sender and receiver agree on every count. */
void dist_check_self_counts(Dist *d, int sent_to_self, int expected_from_self) {
    if (sent_to_self == expected_from_self) return;
    char why[160];
    snprintf(why, sizeof why,
             "alltoallv_f: %d floats to itself but %d expected from itself: the counts of the "
             "exchange disagree",
             sent_to_self, expected_from_self);
    dist_abort(d, why);
}

DistOp *dist_alltoallv_f_start(Dist *d, const float *send, const int *send_counts,
                               const int *send_displs, float *recv, const int *recv_counts,
                               const int *recv_displs) {
    const double t0 = now_seconds();
    int P = d->ep, me = d->ep_rank;
    dist_check_self_counts(d, send_counts[me], recv_counts[me]);
    if (d->collectives != DIST_COLL_TEACH)
        return lib_alltoallv_f_start(d, send, send_counts, send_displs, recv, recv_counts,
                                     recv_displs);
    DistOp *op = dm_op_begin(d, DIST_EP, "alltoallv_f", MPI_FLOAT);
    if (recv_counts[me] > 0)
        memcpy(recv + recv_displs[me], send + send_displs[me],
               (size_t)recv_counts[me] * sizeof(float));
    for (int p = 0; p < P; p++)
        if (p != me) {
            dm_post_recv(d, op, DIST_EP, recv + recv_displs[p], recv_counts[p], p, TAG_ALLTOALLV_F);
            op->recvd += (uint64_t)recv_counts[p] * sizeof(float);
        }
    for (int p = 0; p < P; p++)
        if (p != me) {
            dm_post_send(d, op, DIST_EP, send + send_displs[p], send_counts[p], p, TAG_ALLTOALLV_F);
            op->sent += (uint64_t)send_counts[p] * sizeof(float);
        }
    op->seconds += now_seconds() - t0;
    return op;
}

void dist_alltoallv_f(Dist *d, const float *send, const int *send_counts, const int *send_displs,
                      float *recv, const int *recv_counts, const int *recv_displs) {
    dist_wait(d, dist_alltoallv_f_start(d, send, send_counts, send_displs, recv, recv_counts,
                                        recv_displs));
}

/* A probe enters the library's progress engine, which moves every request and every schedule
 * of a nonblocking collective in flight, and completes none of them: the waits still check
 * them. A teaching sum's next phase is posted by its wait (sum_finish). */
void dist_progress(Dist *d) {
    int flag = 0;
    dm_check(d, MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, dm_comm(d, DIST_WORLD), &flag,
                           MPI_STATUS_IGNORE),
             "progress");
}

void dist_wait(Dist *d, DistOp *op) {
    if (!op || !op->busy) moe_fatal("dist_wait: a collective that is not in flight");
    if (op->kind != OP_SUM) {
        dm_wait(d, op);
        return;
    }
    const double t0 = now_seconds();
    sum_finish(d, op);
    op->seconds += now_seconds() - t0;
    dm_op_end(d, op);
}

/* ---- point to point ---------------------------------------------------------------------- */

/* Both engines send a pipeline's activations as plain MPI messages, a fixed tag a kind
 * (dm_message_begin), so that what one end sends the other's receive matches whatever else
 * each has started on the group. */
DistOp *dist_send_f_start(Dist *d, DistGroup g, const float *x, size_t n, int to, int kind) {
    const double t0 = now_seconds();
    int cnt = count_of(d, n, "send_f: more than 2^31 - 1 floats in one message: split it");
    DistOp *op = dm_message_begin(d, g, "pipeline send", MPI_FLOAT);
    dm_post_send(d, op, g, x, cnt, to, TAG_PIPE + kind);
    op->sent = (uint64_t)n * sizeof(float);
    op->seconds += now_seconds() - t0;
    return op;
}

void dist_recv_f(Dist *d, DistGroup g, float *x, size_t n, int from, int kind) {
    const double t0 = now_seconds();
    int cnt = count_of(d, n, "recv_f: more than 2^31 - 1 floats in one message: split it");
    DistOp *op = dm_message_begin(d, g, "pipeline receive", MPI_FLOAT);
    dm_post_recv(d, op, g, x, cnt, from, TAG_PIPE + kind);
    op->recvd = (uint64_t)n * sizeof(float);
    op->seconds += now_seconds() - t0;
    dist_wait(d, op);
}

int dist_test(Dist *d, DistOp *op) {
    if (!op || !op->busy || op->kind == OP_SUM)
        moe_fatal("dist_test: a point-to-point operation that is not in flight");
    int done = 0;
    dm_check(d, MPI_Testall(op->nreq, op->req, &done, MPI_STATUSES_IGNORE), op->name);
    if (!done) return 0;
    op->nreq = 0;
    dm_op_end(d, op);
    return 1;
}

/* ---- one to all, all to one --------------------------------------------------------------- */

void dist_broadcast_f(Dist *d, DistGroup g, float *x, size_t n) {
    const double t0 = now_seconds();
    int P = dist_group_size(d, g), me = dist_group_rank(d, g);
    int cnt = count_of(d, n, "broadcast_f: more than 2^31 - 1 floats in one call: split it");
    if (d->collectives != DIST_COLL_TEACH) {
        lib_broadcast(d, g, x, cnt, MPI_FLOAT, sizeof(float), "broadcast_f");
        return;
    }
    DistOp *op = dm_op_begin(d, g, "broadcast_f", MPI_FLOAT);
    if (me == 0) {
        for (int p = 1; p < P; p++) dm_post_send(d, op, g, x, cnt, p, TAG_BROADCAST);
        op->sent = (uint64_t)(P - 1) * n * sizeof(float);
    } else {
        dm_post_recv(d, op, g, x, cnt, 0, TAG_BROADCAST);
        op->recvd = (uint64_t)n * sizeof(float);
    }
    op->seconds += now_seconds() - t0;
    dist_wait(d, op);
}

void dist_gather_f(Dist *d, const float *x, size_t n, float *out) {
    const double t0 = now_seconds();
    int P = d->ep, me = d->ep_rank;
    int cnt = count_of(d, n, "gather_f: more than 2^31 - 1 floats in one call: split it");
    if (d->collectives != DIST_COLL_TEACH) {
        lib_gather_f(d, x, cnt, out);
        return;
    }
    DistOp *op = dm_op_begin(d, DIST_EP, "gather_f", MPI_FLOAT);
    if (me == 0) {
        if (n > 0) memcpy(out, x, n * sizeof(float));
        for (int p = 1; p < P; p++)
            dm_post_recv(d, op, DIST_EP, out + (size_t)p * n, cnt, p, TAG_GATHER);
        op->recvd = (uint64_t)(P - 1) * n * sizeof(float);
        op->patience = WAIT_ROOT;
    } else {
        dm_post_send(d, op, DIST_EP, x, cnt, 0, TAG_GATHER);
        op->sent = (uint64_t)n * sizeof(float);
    }
    op->seconds += now_seconds() - t0;
    dist_wait(d, op);
}

/* Empty messages: every rank reports to rank 0 (which names whoever is missing), then rank 0
 * releases them all. One collective in two phases: the release is posted only once every
 * report is in. */
void dist_broadcast_bytes(Dist *d, void *x, size_t n) {
    lib_broadcast(d, DIST_WORLD, x, count_of(d, n, "broadcast_bytes: more than 2^31 - 1 bytes"),
                  MPI_BYTE, 1, "broadcast_bytes");
}

void dist_barrier(Dist *d) {
    if (d->collectives != DIST_COLL_TEACH) {
        lib_barrier(d);
        return;
    }
    const double t0 = now_seconds();
    const int root = d->rank == 0;
    const double patience = root ? WAIT_ROOT : WAIT_HUB;
    DistOp *op = dm_op_begin(d, DIST_WORLD, "barrier", MPI_BYTE);
    for (int p = 1; root && p < d->world; p++)
        dm_post_recv(d, op, DIST_WORLD, NULL, 0, p, TAG_BARRIER_UP);
    if (!root) dm_post_send(d, op, DIST_WORLD, NULL, 0, 0, TAG_BARRIER_UP);
    dm_wait_for(d, op, patience);
    for (int p = 1; root && p < d->world; p++)
        dm_post_send(d, op, DIST_WORLD, NULL, 0, p, TAG_BARRIER_DOWN);
    if (!root) dm_post_recv(d, op, DIST_WORLD, NULL, 0, 0, TAG_BARRIER_DOWN);
    dm_wait_for(d, op, patience);
    op->seconds += now_seconds() - t0;
    dm_op_end(d, op);
}

#endif /* MOE_HAVE_MPI */
