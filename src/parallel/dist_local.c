/*
 * dist_local.c: the grid of one process (the default build, MOE_HAVE_MPI=0).
 *
 * Every axis is 1: every group is this process alone, so a sum over a group is the value
 * itself, a broadcast or a barrier does nothing, and an all-to-all or a gather is a copy from
 * the send buffer to the receive buffer. The training loop calls the same functions in both
 * builds; here they cost a copy and count no bytes (nothing leaves the process), while calls
 * and seconds are still counted so the per-step report has the same columns.
 */
#if !MOE_HAVE_MPI
#include "parallel/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

int dist_init(Dist *d, int *argc, char ***argv, DistAxes axes, int collectives, double timeout_s,
              const char *settings, char *err, int errlen) {
    (void)settings; /* one process agrees with itself */
    memset(d, 0, sizeof *d);
    const long need = (long)axes.tp * axes.ep * (axes.pp > 1 ? axes.pp : 1);
    if (axes.tp >= 1 && axes.ep >= 1 && need > 1)
        return set_error(err, errlen,
                         "dist.tp=%d x dist.ep=%d x dist.pp=%d needs %ld processes: build with "
                         "`make mpi` and start with mpirun -np %ld",
                         axes.tp, axes.ep, axes.pp > 1 ? axes.pp : 1, need, need);
    if (dist_grid_set(d, 1, 0, axes, err, errlen) != 0) return -1;
    d->timeout_s = timeout_s > 0 ? timeout_s : 60.0;
    d->collectives = collectives; /* one process: every engine is a copy */
    return 0;
}

void dist_finalize(Dist *d) {
    (void)d;
}

int dist_available(void) {
    return 0;
}

void dist_progress(Dist *d) {
    (void)d; /* nothing travels */
}

static void count_call(Dist *d, double t0) {
    dist_stats_add(d, d->purpose, 0, 0, now_seconds() - t0);
}

/* A collective in flight: here it is done when started; the handle only keeps the rule that
 * every start has its wait (and no more than DIST_MAX_IN_FLIGHT are open), as with MPI. */
struct DistOp {
    int busy, purpose;
    double seconds;
};
static DistOp local_ops[DIST_MAX_IN_FLIGHT];

static DistOp *op_begin(const Dist *d, double t0) {
    for (int i = 0; i < DIST_MAX_IN_FLIGHT; i++)
        if (!local_ops[i].busy) {
            local_ops[i].busy = 1;
            local_ops[i].seconds = now_seconds() - t0;
            local_ops[i].purpose = d->purpose;
            return &local_ops[i];
        }
    moe_fatal("dist: a %d-th collective started while %d are in flight: dist_wait one first",
              DIST_MAX_IN_FLIGHT + 1, DIST_MAX_IN_FLIGHT);
}

void dist_wait(Dist *d, DistOp *op) {
    if (!op || !op->busy) moe_fatal("dist_wait: a collective that is not in flight");
    dist_stats_add(d, op->purpose, 0, 0, op->seconds);
    op->busy = 0;
}

DistOp *dist_allreduce_sum_f_start(Dist *d, DistGroup g, float *x, size_t n) {
    return op_begin(d, now_seconds());
}

DistOp *dist_allreduce_sum_d_start(Dist *d, DistGroup g, double *x, size_t n) {
    return op_begin(d, now_seconds());
}

void dist_allreduce_sum_f(Dist *d, DistGroup g, float *x, size_t n) {
    dist_wait(d, dist_allreduce_sum_f_start(d, g, x, n));
}

void dist_allreduce_sum_d(Dist *d, DistGroup g, double *x, size_t n) {
    dist_wait(d, dist_allreduce_sum_d_start(d, g, x, n));
}

/* a group of one: its range is all of x, which holds its sum already */
DistOp *dist_reduce_scatter_f_start(Dist *d, DistGroup g, float *x, size_t n) {
    return op_begin(d, now_seconds());
}

DistOp *dist_allgather_f_start(Dist *d, DistGroup g, float *x, size_t n) {
    return op_begin(d, now_seconds());
}

void dist_reduce_scatter_f(Dist *d, DistGroup g, float *x, size_t n) {
    dist_wait(d, dist_reduce_scatter_f_start(d, g, x, n));
}

void dist_allgather_f(Dist *d, DistGroup g, float *x, size_t n) {
    dist_wait(d, dist_allgather_f_start(d, g, x, n));
}

/* A world of one has no pipeline neighbour: a call here is the caller's bug. */
DistOp *dist_send_f_start(Dist *d, DistGroup g, const float *x, size_t n, int to, int kind) {
    moe_fatal("dist_send_f_start: one process has no member %d of %s to send to", to,
              dist_group_name(g));
}

void dist_recv_f(Dist *d, DistGroup g, float *x, size_t n, int from, int kind) {
    moe_fatal("dist_recv_f: one process has no member %d of %s to receive from", from,
              dist_group_name(g));
}

int dist_test(Dist *d, DistOp *op) {
    dist_wait(d, op);
    return 1;
}

/* recv[0 .. count) = send[0 .. count) (int x count) */
void dist_alltoall_i(Dist *d, const int *send, int *recv, int count) {
    double t0 = now_seconds();
    if (count > 0) memmove(recv, send, (size_t)count * sizeof(int));
    count_call(d, t0);
}

void dist_check_self_counts(Dist *d, int sent_to_self, int expected_from_self) {
    (void)d;
    if (sent_to_self != expected_from_self)
        moe_fatal("dist_alltoallv_f: %d floats sent to itself but %d expected: the counts of the "
                  "exchange disagree",
                  sent_to_self, expected_from_self);
}

/* The only member is member 0: recv_counts[0] floats from send + send_displs[0]. */
DistOp *dist_alltoallv_f_start(Dist *d, const float *send, const int *send_counts,
                               const int *send_displs, float *recv, const int *recv_counts,
                               const int *recv_displs) {
    double t0 = now_seconds();
    dist_check_self_counts(d, send_counts[0], recv_counts[0]);
    if (recv_counts[0] > 0)
        memmove(recv + recv_displs[0], send + send_displs[0],
                (size_t)recv_counts[0] * sizeof(float));
    return op_begin(d, t0);
}

void dist_alltoallv_f(Dist *d, const float *send, const int *send_counts, const int *send_displs,
                      float *recv, const int *recv_counts, const int *recv_displs) {
    dist_wait(d, dist_alltoallv_f_start(d, send, send_counts, send_displs, recv, recv_counts,
                                        recv_displs));
}

void dist_broadcast_f(Dist *d, DistGroup g, float *x, size_t n) {
    count_call(d, now_seconds());
}

/* out (1 x n floats) = x */
void dist_gather_f(Dist *d, const float *x, size_t n, float *out) {
    double t0 = now_seconds();
    if (n > 0) memmove(out, x, n * sizeof(float));
    count_call(d, t0);
}

void dist_broadcast_bytes(Dist *d, void *x, size_t n) {
    count_call(d, now_seconds()); /* rank 0's bytes are already here */
}

void dist_barrier(Dist *d) {
    count_call(d, now_seconds());
}

void dist_abort(Dist *d, const char *why) {
    fprintf(stderr, "moe: %s; ending the run\n", why);
    fflush(stderr);
    exit(1);
}

#endif /* !MOE_HAVE_MPI */
