/*
 * cuda_nccl.cu: collectives on the GPU's memory across processes, through NCCL
 * (dist.collectives=nccl; the Backend.coll_* entries of the cuda table). Built where the CUDA
 * toolkit has NCCL (MOE_HAVE_NCCL); without it the entries stay NULL and a GPU run across
 * processes stages its buffers through the host (model/ep.c, model/grad_sync.c).
 *
 * Start-up (coll_open): rank 0 draws NCCL's unique id, every rank gets it over MPI
 * (dist_broadcast_bytes; with rank 0's status, so that a failed draw ends every rank with its
 * message instead of leaving them in the broadcast: nccl_start.h), and together they make a
 * communicator of the world, split like d's grid into the expert-parallel rows (colour
 * dp_rank, key ep_rank) and the data-parallel columns (colour ep_rank, key dp_rank), so a
 * member's index in a communicator is its index in d's group.
 *
 * An exchange is enqueued on the backend's stream, behind the kernels that made its input and
 * before those that read its output, and an event is recorded after it: the start costs the
 * host nothing, and the wait polls the event. A sum (the gradients' buckets, started while the
 * backward goes on: model/grad_sync.c) runs on a stream of its own, so that it overlaps the
 * backward's later kernels as the MPI path's sums overlap it on the host: an event recorded on
 * the backend's stream at the start (the bucket's gradients are complete there: the backward
 * has finished the blocks that write them, and nothing later writes them until the update)
 * orders the sum after them, and at the wait the backend's stream is made to wait for the
 * sum's own event, so that the optimizer and anything after it read the summed values. The
 * two streams are ordered only by these events; every process issues its sums and exchanges
 * in the same program order, as NCCL requires of several communicators in use at once. A
 * sum is ncclAllReduce in place; an exchange
 * (counts that differ per peer) is one group of ncclSend / ncclRecv to and from every other
 * member, its own block copied on the stream. While it waits, the host asks every communicator
 * for an asynchronous error (a peer's connection lost); an error, or dist.timeout seconds
 * without the event, aborts the communicators (ncclCommAbort) and ends the job with a message
 * naming the collective and its group (NCCL, like MPI's own collectives, cannot say which
 * member is missing).
 *
 * Bytes are counted as dist.h counts MPI's own: an exchange's payload, a sum's ring
 * 2 (P - 1) / P n each way.
 */
#include "backend/cuda/cuda.cuh"

#if MOE_HAVE_NCCL
#include <nccl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/nccl_start.h"
#include "base/util.h"

/* One collective in flight: the event after it (ready: for a sum, where its input was complete
 * on the backend's stream), and what it will add to d->stats. */
typedef struct {
    int busy;
    cudaEvent_t ready, done;
    const char *name;
    DistGroup g;
    double seconds;
    uint64_t sent, recvd;
    int purpose; /* DistPurpose: d->purpose when it started */
} NcclOp;

static struct {
    int open;
    ncclComm_t comm[DIST_GROUPS]; /* indexed by DistGroup */
    cudaStream_t sums;  /* the gradients' sums, beside the backend's stream */
    NcclOp ops[DIST_MAX_IN_FLIGHT];
} nccl;

/* End the job: every communicator aborted (so that no kernel of NCCL waits on), then the
 * message and MPI_Abort (dist_abort). */
static void abort_all(Dist *d, const char *why) {
    for (int g = DIST_GROUPS - 1; g >= DIST_WORLD; g--)
        if (nccl.comm[g]) ncclCommAbort(nccl.comm[g]);
    dist_abort(d, why);
}

static void nccl_check(Dist *d, ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return;
    char why[512];
    snprintf(why, sizeof why, "NCCL: %s: %s (%s)", what, ncclGetErrorString(r),
             ncclGetLastError(NULL));
    abort_all(d, why);
}

static_assert(sizeof(ncclUniqueId) == NCCL_START_ID_BYTES, "nccl_start.h: the size of an id");

/* nccl_start_share's two halves: rank 0's draw, and the broadcast over MPI */
static int draw_id(void *ctx, char *id, char *why, size_t whylen) {
    (void)ctx;
    ncclUniqueId u;
    const ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        snprintf(why, whylen, "%s", ncclGetErrorString(r));
        return (int)r;
    }
    memcpy(id, &u, sizeof u);
    return 0;
}
static void broadcast_start(void *ctx, void *buf, size_t n) {
    dist_broadcast_bytes((Dist *)ctx, buf, n);
}

int cuda_coll_open(const Backend *be, Dist *d, char *err, int errlen) {
    if (nccl.open) return 0;
    /* rank 0's id, or its failure, reaches every rank (nccl_start.h), so that all return */
    NcclStart start;
    if (nccl_start_share(d->rank, &start, draw_id, broadcast_start, d, err, errlen) != 0) return -1;
    ncclUniqueId id;
    memcpy(&id, start.id, sizeof id);
    CUDA_CHECK(cudaSetDevice(cuda_ctx(be)->device));
    ncclResult_t r = ncclCommInitRank(&nccl.comm[DIST_WORLD], d->world, id, d->rank);
    if (r != ncclSuccess)
        return set_error(err, errlen,
                         "dist.collectives=nccl: the communicator of the %d processes could not "
                         "be made (NCCL says: %s; it refuses two processes on one GPU: give "
                         "each its own, or use dist.collectives=mpi)",
                         d->world, ncclGetErrorString(r));
    /* a communicator for each group of the grid, as dist_mpi.c splits MPI's (dist_grid.c) */
    for (int g = DIST_WORLD + 1; g < DIST_GROUPS; g++)
        nccl_check(d,
                   ncclCommSplit(nccl.comm[DIST_WORLD], dist_group_colour(d, (DistGroup)g),
                                 dist_group_rank(d, (DistGroup)g), &nccl.comm[g], NULL),
                   "ncclCommSplit");
    for (int i = 0; i < DIST_MAX_IN_FLIGHT; i++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&nccl.ops[i].ready, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&nccl.ops[i].done, cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&nccl.sums, cudaStreamNonBlocking));
    nccl.open = 1;
    return 0;
}

static NcclOp *op_begin(const Dist *d, const char *name, DistGroup g) {
    for (int i = 0; i < DIST_MAX_IN_FLIGHT; i++)
        if (!nccl.ops[i].busy) {
            NcclOp *op = &nccl.ops[i];
            op->busy = 1, op->name = name, op->g = g, op->purpose = d->purpose;
            op->seconds = 0.0, op->sent = op->recvd = 0;
            return op;
        }
    moe_fatal("NCCL: a %d-th collective started while %d are in flight: wait one first",
              DIST_MAX_IN_FLIGHT + 1, DIST_MAX_IN_FLIGHT);
}

void *cuda_coll_allreduce_sum_f_start(const Backend *be, Dist *d, DistGroup g, float *x, size_t n) {
    const double t0 = now_seconds();
    NcclOp *op = op_begin(d, "allreduce_sum_f", g);
    const int P = dist_group_size(d, g);
    /* after the kernels issued so far on the backend's stream, on the sums' own */
    CUDA_CHECK(cudaEventRecord(op->ready, cuda_stream(be)));
    CUDA_CHECK(cudaStreamWaitEvent(nccl.sums, op->ready, 0));
    if (n > 0)
        nccl_check(d, ncclAllReduce(x, x, n, ncclFloat32, ncclSum, nccl.comm[g], nccl.sums),
                   "ncclAllReduce");
    CUDA_CHECK(cudaEventRecord(op->done, nccl.sums));
    op->sent = op->recvd =
        P > 1 ? (uint64_t)(2.0 * (P - 1) / P * (double)n * sizeof(float) + 0.5) : 0;
    op->seconds = now_seconds() - t0;
    return op;
}

/* The halves of a sum over g on the sums' stream, after the kernels issued so far. NCCL's own
 * ncclReduceScatter and ncclAllGather need equal ranges; dist_shard_range's differ by one
 * element when P does not divide n, so each member's range is its own collective, all of them
 * one group of NCCL calls: a reduce to member p of its range (reduce-scatter), or a broadcast
 * of it from member p (all-gather). Bytes: a ring's, as dist_cost counts. */
static void *halves_start(const Backend *be, Dist *d, DistGroup g, float *x, size_t n,
                          DistKind kind) {
    const double t0 = now_seconds();
    const int P = dist_group_size(d, g), me = dist_group_rank(d, g);
    NcclOp *op = op_begin(d, kind == DIST_REDUCE_SCATTER ? "reduce_scatter_f" : "allgather_f", g);
    CUDA_CHECK(cudaEventRecord(op->ready, cuda_stream(be)));
    CUDA_CHECK(cudaStreamWaitEvent(nccl.sums, op->ready, 0));
    nccl_check(d, ncclGroupStart(), "ncclGroupStart");
    for (int p = 0; P > 1 && p < P; p++) {
        size_t lo, hi;
        dist_shard_range(n, P, p, &lo, &hi);
        if (hi == lo) continue;
        if (kind == DIST_REDUCE_SCATTER)
            nccl_check(d,
                       ncclReduce(x + lo, x + lo, hi - lo, ncclFloat32, ncclSum, p, nccl.comm[g],
                                  nccl.sums),
                       "ncclReduce");
        else
            nccl_check(
                d, ncclBroadcast(x + lo, x + lo, hi - lo, ncclFloat32, p, nccl.comm[g], nccl.sums),
                "ncclBroadcast");
    }
    nccl_check(d, ncclGroupEnd(), "ncclGroupEnd");
    CUDA_CHECK(cudaEventRecord(op->done, nccl.sums));
    dist_cost(DIST_COLL_NCCL, kind, P, me, n, &op->sent, &op->recvd);
    op->seconds = now_seconds() - t0;
    return op;
}

void *cuda_coll_reduce_scatter_f_start(const Backend *be, Dist *d, DistGroup g, float *x,
                                       size_t n) {
    return halves_start(be, d, g, x, n, DIST_REDUCE_SCATTER);
}

void *cuda_coll_allgather_f_start(const Backend *be, Dist *d, DistGroup g, float *x, size_t n) {
    return halves_start(be, d, g, x, n, DIST_ALLGATHER);
}

void *cuda_coll_alltoallv_f_start(const Backend *be, Dist *d, const float *send,
                                  const int *send_counts, const int *send_displs, float *recv,
                                  const int *recv_counts, const int *recv_displs) {
    const double t0 = now_seconds();
    const int P = d->ep, me = d->ep_rank;
    cudaStream_t stream = cuda_stream(be);
    dist_check_self_counts(d, send_counts[me], recv_counts[me]);
    NcclOp *op = op_begin(d, "alltoallv_f", DIST_EP);
    if (recv_counts[me] > 0)
        CUDA_CHECK(cudaMemcpyAsync(recv + recv_displs[me], send + send_displs[me],
                                   (size_t)recv_counts[me] * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream));
    /* the counts came from the exchange of counts: both sides skip the same empty messages */
    nccl_check(d, ncclGroupStart(), "ncclGroupStart");
    for (int p = 0; p < P; p++) {
        if (p == me) continue;
        if (send_counts[p] > 0)
            nccl_check(d,
                       ncclSend(send + send_displs[p], (size_t)send_counts[p], ncclFloat32, p,
                                nccl.comm[DIST_EP], stream),
                       "ncclSend");
        if (recv_counts[p] > 0)
            nccl_check(d,
                       ncclRecv(recv + recv_displs[p], (size_t)recv_counts[p], ncclFloat32, p,
                                nccl.comm[DIST_EP], stream),
                       "ncclRecv");
        op->sent += (uint64_t)send_counts[p] * sizeof(float);
        op->recvd += (uint64_t)recv_counts[p] * sizeof(float);
    }
    nccl_check(d, ncclGroupEnd(), "ncclGroupEnd");
    CUDA_CHECK(cudaEventRecord(op->done, stream));
    op->seconds = now_seconds() - t0;
    return op;
}

void cuda_coll_wait(const Backend *be, Dist *d, void *handle) {
    NcclOp *op = (NcclOp *)handle;
    if (!op || !op->busy) moe_fatal("NCCL: a wait for a collective that is not in flight");
    const struct timespec nap = {0, 100000}; /* 100 us */
    const double start = now_seconds();
    for (;;) {
        cudaError_t q = cudaEventQuery(op->done);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) CUDA_CHECK(q);
        for (int g = DIST_WORLD; g < DIST_GROUPS; g++) {
            ncclResult_t async = ncclSuccess;
            nccl_check(d, ncclCommGetAsyncError(nccl.comm[g], &async), "ncclCommGetAsyncError");
            if (async != ncclSuccess && async != ncclInProgress) {
                char why[256];
                snprintf(why, sizeof why,
                         "NCCL failed in the %s over %s: %s; a process has "
                         "probably died",
                         op->name, dist_group_label(d, op->g), ncclGetErrorString(async));
                abort_all(d, why);
            }
        }
        const double waited = now_seconds() - start;
        if (waited > d->timeout_s) {
            char why[320];
            snprintf(why, sizeof why,
                     "the %s over %s (NCCL) did not complete in %.1f s: a process of it has "
                     "stopped or died (NCCL does not say which; dist.collectives=teach names it) "
                     "(dist timeout %.0f s)",
                     op->name, dist_group_label(d, op->g), waited, d->timeout_s);
            abort_all(d, why);
        }
        nanosleep(&nap, NULL);
    }
    /* what the backend's stream runs from now on comes after the collective (a sum ran on the
     * sums' stream: the update reads its result) */
    CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(be), op->done, 0));
    op->seconds += now_seconds() - start;
    dist_stats_add(d, op->purpose, op->sent, op->recvd, op->seconds);
    op->busy = 0;
}

#endif /* MOE_HAVE_NCCL */
