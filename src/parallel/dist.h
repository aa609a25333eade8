/*
 * dist.h: the process grid and the collectives that training needs.
 *
 * The grid has four axes, tensor-parallel (tp), expert-parallel (ep), data-parallel (dp) and
 * pipeline (pp), world = tp x ep x dp x pp, tp innermost (the ranks of a tensor-parallel group
 * are neighbours, on one node, as Megatron orders them) and pp outermost:
 *
 *   rank = tp_rank + tp (ep_rank + ep (dp_rank + dp pp_rank))
 *
 *   tp = 2, ep = 2, dp = 2:   dp_rank 0: ep_rank 0: ranks 0 1   ep_rank 1: ranks 2 3
 *                             dp_rank 1: ep_rank 0: ranks 4 5   ep_rank 1: ranks 6 7
 *
 * A pipeline stage (pp_rank) is a block of S = tp x ep x dp consecutive ranks holding its
 * layers (model/pipe.h); every group below but DIST_PP lies inside one stage, as if the stage
 * were the whole world of a run without a pipeline.
 *
 * Each group a collective runs over is one set of ranks that differ along some axes and agree
 * on the others (dist_grid.c computes them; the model asks the grid, never the rank numbers):
 *
 *   DIST_WORLD  every rank: the weights every rank holds whole and sees only part of the
 *               batch through (the norms, the router): their gradients are summed here
 *   DIST_TP     the tp ranks of one (ep_rank, dp_rank): they split a block's heads and hidden
 *               channels, the vocabulary, and the sequence between blocks (sequence
 *               parallelism), and read the same micro-batch
 *   DIST_EP     the ep ranks of one (tp_rank, dp_rank): together they hold every expert once
 *               (ep_rank j holds experts [j E/ep, (j+1) E/ep)); tokens travel to their experts
 *               and back inside it, through all-to-all exchanges
 *   DIST_DP     the expert data-parallel group: the ranks of one ep_rank (tp x dp of them),
 *               which hold the same experts; their expert gradients are summed here
 *   DIST_DATA   the ranks of one tp_rank (ep x dp of them), which hold the same shard of the
 *               tensor-parallel weights; those gradients are summed here. With tp = 1 it is
 *               the stage.
 *   DIST_STAGE  the ranks of one pipeline stage (tp x ep x dp): with pp = 1 the world. The
 *               weights the stage holds whole are summed here, and so is what its MoE blocks
 *               count over the batch
 *   DIST_PP     the pp ranks of one (tp_rank, ep_rank, dp_rank), one a stage: activations go
 *               forward and their gradients back between neighbours, point to point
 *
 * Experts are never split across tp (expert tensor parallelism 1), and ep sits inside the
 * data-parallel ranks rather than folded across tp: between blocks the tp ranks hold
 * different tokens (sequence parallelism), so for an MoE block they are data-parallel
 * replicas, each routing its own share of the sequence, and the ranks of one tp group hold
 * the same experts. Folding ep across tp (Megatron's parallel folding: a tp group's ranks hold
 * different experts) would save the replicas' memory at the price of a second grid for the
 * MoE blocks; one grid keeps one exchange group and one rule for every block. Pipeline stages
 * are the outermost axis: a stage's neighbour is a whole replica-set of ranks away, so its
 * point-to-point traffic, the smallest of the four, is the one that crosses nodes.
 *
 * Without MPI (the default build, MOE_HAVE_MPI=0) there is one process: every axis is 1,
 * every collective is a copy, and nothing here needs an MPI library. `make mpi` builds with
 * mpicc and MOE_HAVE_MPI=1 (dist_mpi.c).
 *
 * The engines of the collectives of a multi-process run (dist.collectives):
 *   DIST_COLL_MPI    MPI's own nonblocking collectives (MPI_Iallreduce, MPI_Ialltoallv, ...),
 *                    the default: the library picks its algorithm (ring, tree, recursive
 *                    doubling) by size and network, as production runs do; their results repeat
 *                    for a given process count as far as the library's algorithm choice does.
 *   DIST_COLL_TEACH  the collectives built by hand from point-to-point messages
 *                    (dist_mpi_ops.c): linear patterns through member 0 and a reduction order we
 *                    fix, so a run repeats bit for bit at a given process count; what chapter 3
 *                    and lab 03 explain.
 *   DIST_COLL_NCCL   the GPU's buffers (the expert exchange, the gradients' sums) through
 *                    NCCL, by the CUDA backend (Backend.coll_*, backend/cuda/cuda_nccl.cu); every
 *                    collective of this file, on host buffers, is MPI's own as with
 *                    DIST_COLL_MPI.
 *
 * No silent hangs: every collective waits at most timeout_s (1.5 or 2 times that for the
 * waits of a sum or barrier that go through member 0, so that the rank waiting for a stopped
 * one directly is the first to speak). A rank whose peers have not answered by then prints
 * which ranks it was waiting for (the all-to-all exchanges know them peer by peer; MPI's own
 * collectives do not say, so with those it names the collective and its group) and ends the
 * whole job with a non-zero status (MPI_Abort). dist_init bounds the start of the job
 * (MPI_Init) by timeout_s too.
 *
 * Accounting: every collective adds the bytes this rank sent and received and the seconds it
 * spent inside the call to DistStats, so the training loop can report communication per step.
 * The exchanges' bytes are their payload with either engine. A sum's are what its algorithm
 * moves: teach's linear one, (P - 1) n at member 0 and n at the others, each way; with MPI's,
 * the 2 (P - 1) / P n of a bandwidth-optimal one (a ring), each way, which is the cost model the
 * library's large sums follow (it may choose another algorithm for small ones).
 */
#ifndef MOE_DIST_H
#define MOE_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h" /* DistCollectives, the values of dist.collectives */

typedef enum {
    DIST_WORLD = 0,
    DIST_EP = 1,
    DIST_DP = 2,
    DIST_TP = 3,
    DIST_DATA = 4,
    DIST_STAGE = 5,
    DIST_PP = 6
} DistGroup;
#define DIST_GROUPS 7

/* The sizes of the grid's axes a run asks for (dist.tp, dist.ep, dist.pp; pp 0 counts as 1);
 * dp is what the world leaves. */
typedef struct {
    int tp, ep, pp;
} DistAxes;

typedef struct {
    uint64_t bytes_sent, bytes_recv; /* payload bytes (counts included), summed over calls */
    double seconds;                  /* wall time inside collectives */
    uint64_t calls;
} DistStats;

/* What a collective is for, so that a step's traffic can be told apart and set against the
 * planner's (dist.csv's grad_sent, weight_sent, tp_sent): the caller says it with
 * dist_purpose before it starts a collective; every collective adds its bytes to the
 * purpose's DistStats as well as to the total. */
typedef enum {
    DIST_FOR_OTHER = 0,   /* statistics, losses, checkpoints, start and end */
    DIST_FOR_GRADS = 1,   /* the gradients' sums (grad_sync.h) */
    DIST_FOR_WEIGHTS = 2, /* sharded weights gathered (dist.zero) */
    DIST_FOR_TP = 3,      /* a block's tensor-parallel collectives */
    DIST_FOR_EXPERTS = 4, /* the expert exchange (ep.h) */
    DIST_FOR_PIPE = 5,    /* activations and their gradients between pipeline stages */
} DistPurpose;
#define DIST_PURPOSES 6

typedef struct Dist {
    int rank, world;               /* this process in the world */
    int tp, ep, dp, pp;            /* the grid: world = tp x ep x dp x pp */
    int tp_rank, ep_rank, dp_rank; /* rank = tp_rank + tp (ep_rank + ep (dp_rank + dp pp_rank)) */
    int pp_rank;                   /* the pipeline stage */
    double timeout_s;     /* longest wait for a peer before the job is ended */
    int collectives;      /* DistCollectives: which engine carries the collectives */
    DistStats stats;
    DistStats by[DIST_PURPOSES]; /* stats again, by what the collectives were for */
    int purpose;                 /* DistPurpose of the collectives started from now on */
    void *impl; /* the MPI communicators (dist_mpi.c); NULL in one process */
} Dist;

/* Everything a process has counted so far, for a difference over a step. */
typedef struct {
    DistStats total, by[DIST_PURPOSES];
} DistTally;

static inline DistTally dist_tally(const Dist *d) {
    DistTally t;
    t.total = d->stats;
    for (int i = 0; i < DIST_PURPOSES; i++) t.by[i] = d->by[i];
    return t;
}

/* Collectives started from now on are for p; returns the purpose before, to put back. */
static inline int dist_purpose(Dist *d, int p) {
    const int before = d->purpose;
    d->purpose = p;
    return before;
}

/* A finished collective's bytes and seconds, into the total and its purpose's. Every engine's
 * end of a collective calls it (the backends' own collectives too). */
static inline void dist_stats_add(Dist *d, int purpose, uint64_t sent, uint64_t recvd,
                                  double seconds) {
    DistStats *both[2] = {&d->stats, &d->by[purpose]};
    for (int i = 0; i < 2; i++) {
        both[i]->bytes_sent += sent;
        both[i]->bytes_recv += recvd;
        both[i]->seconds += seconds;
        both[i]->calls++;
    }
}

/* Start (MPI_Init when built with MPI) and build the grid of axes (dist_grid_set: tp x ep must
 * divide the world size); collectives (DistCollectives) chooses the engine.
 * settings (or NULL: nothing to compare) is what every process must agree on, as lines
 * "key = value" (config_write's format): before the grid is built, rank 0's text goes to every
 * rank, and when any rank's differs the job is refused on every rank: rank 0 prints a message
 * naming each key that differs, its values and the ranks that hold them ("train.lr is 0.003 on
 * rank 0 and 0.01 on rank 1"), and every rank gets -1 with an empty err (rank 0 has spoken for
 * the job). A process started with other settings (mpirun's `-np 1 moe ... : -np 1 moe ...`)
 * would otherwise train on with other numbers, or end in a message about truncated exchanges.
 * Returns 0, or -1 with a message (e.g. "dist.ep=3 does not divide the 4 processes: run with
 * mpirun -np 3 or 6, or set dist.ep to a divisor of 4"). Without MPI, only ep = 1 is valid
 * unless the world is 1 and ep is 1. */
int dist_init(Dist *d, int *argc, char ***argv, DistAxes axes, int collectives, double timeout_s,
              const char *settings, char *err, int errlen);

/* The grid of world processes with these axes, this process being rank (dist_grid.c, both
 * builds): d's sizes and indices set, or -1 with a message that does the arithmetic ("dist.tp=2
 * x dist.ep=4 = 8 processes a data-parallel replica, which does not divide the 12 processes:
 * ..."). */
int dist_grid_set(Dist *d, int world, int rank, DistAxes axes, char *err, int errlen);

/* Member p of this process's group g, as a world rank (for messages that name peers the way
 * mpirun numbers them); and which of the group's copies this process is in (0 .. world / size
 * - 1: the colour a communicator split gives it). */
int dist_group_world_rank(const Dist *d, DistGroup g, int p);
int dist_group_colour(const Dist *d, DistGroup g);

/* The share of member p of P of n elements: [n p / P, n (p + 1) / P), every element once. The
 * ranges of the reduce-scatter and all-gather below, and of sharded states (dist.zero). */
static inline void dist_shard_range(size_t n, int P, int p, size_t *lo, size_t *hi) {
    *lo = n * (size_t)p / (size_t)P;
    *hi = n * ((size_t)p + 1) / (size_t)P;
}
void dist_finalize(Dist *d);

/* 1 when this build can run more than one process (MOE_HAVE_MPI). */
int dist_available(void);

/* A group's name in messages ("the expert-parallel group"); dist_group_label: the same in
 * d's grid, where a pipeline stage without a pipeline is the world. */
static inline const char *dist_group_name(DistGroup g) {
    return g == DIST_EP      ? "the expert-parallel group"
           : g == DIST_DP    ? "the expert data-parallel group"
           : g == DIST_TP    ? "the tensor-parallel group"
           : g == DIST_DATA  ? "the data-parallel group"
           : g == DIST_STAGE ? "the pipeline stage"
           : g == DIST_PP    ? "the pipeline"
                             : "the world";
}

static inline const char *dist_group_label(const Dist *d, DistGroup g) {
    return g == DIST_STAGE && d->pp <= 1 ? "the world" : dist_group_name(g);
}

/* Size of a group and this rank's index in it. */
int dist_group_size(const Dist *d, DistGroup g);
int dist_group_rank(const Dist *d, DistGroup g);

/* ---- collectives in two halves ----------------------------------------------------------
 * A *_start call begins a collective and returns at once with its handle, which holds the
 * collective's own state (its requests, its place in a multi-step sum); dist_wait finishes
 * it. Between the two the caller may compute, or start more collectives (at most
 * DIST_MAX_IN_FLIGHT at once), and the buffers belong to the collective: a send buffer must
 * not change, a receive buffer not be read. Every rank must start the collectives of a group
 * in the same order (each gets its own message tags from that order); they may be waited in
 * any order. This is the shape a device collective library (NCCL: enqueue on a stream, then
 * wait for its event) slots into. The blocking calls below are start then wait. */
#define DIST_MAX_IN_FLIGHT 16
typedef struct DistOp DistOp;
DistOp *dist_allreduce_sum_f_start(Dist *d, DistGroup g, float *x, size_t n);
DistOp *dist_allreduce_sum_d_start(Dist *d, DistGroup g, double *x, size_t n);
DistOp *dist_alltoallv_f_start(Dist *d, const float *send, const int *send_counts,
                               const int *send_displs, float *recv, const int *recv_counts,
                               const int *recv_displs);
/* Finish op (and give its handle back): its results are in place afterwards. The seconds
 * spent in start and wait, and the bytes, go to d->stats. */
void dist_wait(Dist *d, DistOp *op);

/* Let the collectives in flight advance without waiting for any (MPI moves a nonblocking
 * collective only while the process is inside an MPI call): for a caller that computes between
 * a start and its wait. */
void dist_progress(Dist *d);

/* In-place sums over a group, the same result on every member (a fixed reduction order for a
 * given group size, so runs repeat bit for bit). */
void dist_allreduce_sum_f(Dist *d, DistGroup g, float *x, size_t n);
void dist_allreduce_sum_d(Dist *d, DistGroup g, double *x, size_t n);

/* The bytes member me of a group of P sends (*sent) and receives (*recvd) in one collective
 * of n floats, as the engine `collectives` counts them (dist_grid.c): the teaching engine's
 * messages through member 0, MPI's and NCCL's a ring's. What the planner predicts a step's
 * traffic from (model/traffic.h); the engines count their own calls with the same rule. */
typedef enum { DIST_ALLREDUCE = 0, DIST_REDUCE_SCATTER = 1, DIST_ALLGATHER = 2 } DistKind;
void dist_cost(int collectives, DistKind kind, int P, int me, size_t n, uint64_t *sent,
               uint64_t *recvd);

/* In place over group g of P members, with member p's range of x being dist_shard_range(n, P,
 * p): a reduce-scatter leaves the group's sum of x in this member's range (the rest of x is
 * unspecified afterwards); an all-gather sends this member's range to every member, so that x
 * is whole everywhere. Together they are an all-reduce (a ring's two halves), which is how
 * sharded states (dist.zero) and sequence parallelism split it. Bytes: the teaching engine's
 * linear pattern through member 0; MPI's, a ring's (P - 1) / P n each way. */
void dist_reduce_scatter_f(Dist *d, DistGroup g, float *x, size_t n);
void dist_allgather_f(Dist *d, DistGroup g, float *x, size_t n);
DistOp *dist_reduce_scatter_f_start(Dist *d, DistGroup g, float *x, size_t n);
DistOp *dist_allgather_f_start(Dist *d, DistGroup g, float *x, size_t n);

/* Inside the EP group (P = ep members): send[p * count .. (p+1) * count) goes to member p,
 * recv[p * count ..) comes from member p. For the counts of a dispatch. */
void dist_alltoall_i(Dist *d, const int *send, int *recv, int count);

/* Inside the EP group: member p gets send_counts[p] floats from send + send_displs[p], and this
 * rank receives recv_counts[p] floats from member p at recv + recv_displs[p]. Counts and
 * displacements in floats. Sent peer by peer, so a missing peer is named. */
void dist_alltoallv_f(Dist *d, const float *send, const int *send_counts, const int *send_displs,
                      float *recv, const int *recv_counts, const int *recv_displs);

/* An exchange's count of floats a member sends to itself must be the count it expects from
 * itself; when not, the ranks disagree on the counts, and the job ends saying so. For every
 * implementation of an exchange (this one's, and a backend's own collectives). */
void dist_check_self_counts(Dist *d, int sent_to_self, int expected_from_self);

/* Point to point inside group g (the pipeline's DIST_PP): n floats of x to member `to`, started
 * (x belongs to the send until dist_wait, or dist_test says it is done), and n floats from
 * member `from` into x, waited for (at most timeout_s of silence, then the job ends naming the
 * peer). kind tells apart the messages of one pair (0: activations forward, 1: their gradients
 * back); between one pair, messages of a kind arrive in the order they were sent. */
DistOp *dist_send_f_start(Dist *d, DistGroup g, const float *x, size_t n, int to, int kind);
void dist_recv_f(Dist *d, DistGroup g, float *x, size_t n, int from, int kind);
/* 1 when op has finished (and its handle is given back, as by dist_wait), 0 while it runs. */
int dist_test(Dist *d, DistOp *op);

/* Inside a group: member 0's n floats to every member. */
void dist_broadcast_f(Dist *d, DistGroup g, float *x, size_t n);

/* Inside the EP group: every member's n floats, in member order, into out (ep * n floats) on
 * member 0 (out may be NULL elsewhere). For checkpoints: the experts of a row, together. */
void dist_gather_f(Dist *d, const float *x, size_t n, float *out);

/* Every rank of the world gets rank 0's n bytes at x (a library's start-up token). */
void dist_broadcast_bytes(Dist *d, void *x, size_t n);

/* Wait until every rank of the world is here (with the same timeout). */
void dist_barrier(Dist *d);

/* End every rank of the job now, with a message from this one (exit status 1 without MPI). */
void dist_abort(Dist *d, const char *why);

#endif
