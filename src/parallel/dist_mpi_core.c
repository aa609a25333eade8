/*
 * dist_mpi_core.c: what every collective of the MPI build stands on (dist_mpi.h): the
 * requests of a collective in flight and their wait loop with its deadline, the messages that
 * name a silent peer, and the end of the job on an error. The collectives are in
 * dist_mpi_ops.c (dist.collectives=teach) and dist_mpi_lib.c (=mpi); the start and end of a
 * job in dist_mpi.c, whose opening comment says why the waits are built this way. This file
 * calls no other file of src/parallel/ but the grid's arithmetic (dist_grid.c), so that the
 * ones above it call down only.
 */
#if MOE_HAVE_MPI
#include "parallel/dist_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"

static DistMpi *impl_of(const Dist *d) {
    if (d == NULL || d->impl == NULL)
        moe_fatal("dist: a collective before dist_init (or after dist_finalize)");
    return (DistMpi *)d->impl;
}

static MOE_NORETURN void end_job(void) {
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1); /* MPI_Abort does not return; this is for the compiler */
}

/* With MPI_ERRORS_RETURN an MPI failure (a peer's connection lost, a truncated message) comes
 * back here as a code: say where, then end the whole job rather than leave peers waiting. */
static void mpi_check(const Dist *d, int rc, const char *op) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    fprintf(stderr,
            "moe: rank %d: MPI error in the %s: %s; a process has probably died; ending the job\n",
            d->rank, op, text);
    end_job();
}

/* ---- requests and the wait loop ---------------------------------------------------------- */

MPI_Comm dm_comm(const Dist *d, DistGroup g) {
    return impl_of(d)->comm[g];
}

void dm_check(const Dist *d, int rc, const char *op) {
    mpi_check(d, rc, op);
}

/* A free slot for an operation named name over group g, its tags drawn from g's start count;
 * or, for a point-to-point message (counted = 0), tag offset 0: the two ends of a pair start
 * other numbers of operations, so a message's tag cannot come from the count, and it leaves
 * the count alone for the group's collectives. */
static DistOp *op_begin(Dist *d, DistGroup g, const char *name, MPI_Datatype type, int counted) {
    DistMpi *m = impl_of(d);
    DistOp *op = NULL;
    for (int i = 0; i < DIST_MAX_IN_FLIGHT && !op; i++)
        if (!m->ops[i].busy) op = &m->ops[i];
    if (!op)
        moe_fatal("dist: a %d-th collective started while %d are in flight: dist_wait one first",
                  DIST_MAX_IN_FLIGHT + 1, DIST_MAX_IN_FLIGHT);
    op->busy = 1;
    op->g = g;
    op->name = name;
    op->type = type;
    op->tag = counted ? TAG_STRIDE * (int)(m->started[g]++ % TAG_SLOTS) : 0;
    op->kind = OP_ONCE;
    op->patience = WAIT_PEER;
    op->nreq = 0;
    op->seconds = 0.0;
    op->sent = op->recvd = 0;
    op->after_bytes = 0;
    op->purpose = d->purpose;
    return op;
}

DistOp *dm_op_begin(Dist *d, DistGroup g, const char *name, MPI_Datatype type) {
    return op_begin(d, g, name, type, 1);
}

DistOp *dm_message_begin(Dist *d, DistGroup g, const char *name, MPI_Datatype type) {
    return op_begin(d, g, name, type, 0);
}

void dm_op_end(Dist *d, DistOp *op) {
    dist_stats_add(d, op->purpose, op->sent, op->recvd, op->seconds);
    op->busy = 0;
}

void dm_post_recv(Dist *d, DistOp *op, DistGroup g, void *buf, int n, int p, int tag) {
    DistMpi *m = impl_of(d);
    int i = op->nreq++;
    mpi_check(d, MPI_Irecv(buf, n, op->type, p, tag + op->tag, m->comm[g], &op->req[i]), op->name);
    op->peer[i] = dist_group_world_rank(d, g, p);
    op->want[i] = n;
}

void dm_post_send(Dist *d, DistOp *op, DistGroup g, const void *buf, int n, int p, int tag) {
    DistMpi *m = impl_of(d);
    int i = op->nreq++;
    mpi_check(d, MPI_Isend(buf, n, op->type, p, tag + op->tag, m->comm[g], &op->req[i]),
              op->name);
    op->peer[i] = dist_group_world_rank(d, g, p);
    op->want[i] = -1;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The peers of the requests still open: those we wait to hear from (receives), or, when every
 * receive is in, those that have not taken our sends. Sorted, each once, as "1, 3". */
/* A collective of the MPI library (dist_mpi_lib.c) is one request for the whole group: it
 * cannot say which member is missing, so the message names the collective, the group and its
 * world ranks. */
static MOE_NORETURN void abort_timeout_lib(const Dist *d, const DistOp *op, double waited) {
    const int P = dist_group_size(d, op->g);
    char list[512] = "";
    size_t used = 0;
    for (int p = 0; p < P && used + 16 < sizeof list; p++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", p ? ", " : "",
                                 dist_group_world_rank(d, op->g, p));
    fprintf(stderr,
            "moe: rank %d: the %s over %s (world ranks %s) did not complete in %.1f s: a "
            "process of it has stopped or died (MPI's collectives do not say which; "
            "dist.collectives=teach names it); ending the job (dist timeout %.0f s)\n",
            d->rank, op->name, dist_group_label(d, op->g), list, waited, d->timeout_s);
    end_job();
}

static MOE_NORETURN void abort_timeout(const Dist *d, const DistOp *op, double waited) {
    int *ranks = malloc_check((size_t)(op->nreq + 1) * sizeof(int));
    int n = 0;
    for (int pass = 0; pass < 2 && n == 0; pass++)
        for (int i = 0; i < op->nreq; i++)
            if (op->req[i] != MPI_REQUEST_NULL && (pass == 1 || op->want[i] >= 0))
                ranks[n++] = op->peer[i];
    qsort(ranks, (size_t)n, sizeof(int), cmp_int);
    char list[512] = "";
    size_t used = 0;
    for (int i = 0; i < n && used + 16 < sizeof list; i++) {
        if (i > 0 && ranks[i] == ranks[i - 1]) continue;
        used +=
            (size_t)snprintf(list + used, sizeof list - used, "%s%d", used ? ", " : "", ranks[i]);
    }
    fprintf(stderr,
            "moe: rank %d: no answer from rank(s) %s (world ranks) in the %s after %.1f s; a "
            "process has stopped or died; ending the job (dist timeout %.0f s)\n",
            d->rank, list, op->name, waited, d->timeout_s);
    free(ranks);
    end_job();
}

/* Wait for every request op has posted. The clock restarts whenever one completes, so
 * timeout_s is the longest silence tolerated, not a limit on how long a big exchange may take.
 * It restarts too after a gap between two polls of over a quarter of the timeout: then this
 * process itself was not running (stopped, then continued by mpirun as it ends the job, or
 * starved of a core), and the silence is its own, not its peers'.
 * A receive that brings another number of elements than posted means the ranks disagree on
 * the counts of the exchange: stop with both numbers rather than compute with half a
 * message. */
void dm_wait_for(Dist *d, DistOp *op, double patience) {
    const struct timespec nap = {0, 100000}; /* 100 us */
    double start = now_seconds(), last = start, polled = start;
    int left = op->nreq;
    while (left > 0) {
        int got = 0;
        int rc = MPI_Testsome(op->nreq, op->req, &got, op->done_idx, op->st);
        if (rc == MPI_ERR_IN_STATUS)
            for (int k = 0; k < got; k++)
                if (op->st[k].MPI_ERROR != MPI_SUCCESS) rc = op->st[k].MPI_ERROR;
        mpi_check(d, rc, op->name);
        if (got == MPI_UNDEFINED) break; /* no active request left */
        for (int k = 0; k < got; k++) {
            int i = op->done_idx[k], elems = 0;
            if (op->want[i] < 0) continue;
            mpi_check(d, MPI_Get_count(&op->st[k], op->type, &elems), op->name);
            if (elems != op->want[i]) {
                fprintf(stderr,
                        "moe: rank %d: rank %d sent %d elements in the %s, %d were expected: the "
                        "ranks disagree on the counts of the exchange; ending the job\n",
                        d->rank, op->peer[i], elems, op->name, op->want[i]);
                end_job();
            }
        }
        left -= got;
        if (left == 0) break;
        const double now = now_seconds(), gap = now - polled;
        polled = now;
        if (got > 0 || gap > 0.25 * d->timeout_s)
            last = now;
        else if (now - last > patience * d->timeout_s && op->kind == OP_LIB)
            abort_timeout_lib(d, op, now - start);
        else if (now - last > patience * d->timeout_s)
            abort_timeout(d, op, now - start);
        else
            nanosleep(&nap, NULL);
    }
    op->nreq = 0;
}

/* An op posted whole at its start (OP_ONCE, OP_LIB: not a sum, whose wait posts its next
 * phase): wait with its own patience, its seconds counted, then its slot free again. */
void dm_wait(Dist *d, DistOp *op) {
    const double t0 = now_seconds();
    dm_wait_for(d, op, op->patience);
    if (op->after_bytes > 0) memcpy(op->after_dst, op->reduce_buf, op->after_bytes);
    op->seconds += now_seconds() - t0;
    dm_op_end(d, op);
}

void dist_abort(Dist *d, const char *why) {
    fprintf(stderr, "moe: rank %d: %s; ending the job\n", d != NULL ? d->rank : 0, why);
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized) end_job();
    exit(1);
}

#endif /* MOE_HAVE_MPI */
