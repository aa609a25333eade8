/*
 * dist_mpi.h: what the files of the MPI build share (dist_mpi_core.c: the requests and their
 * wait loop; dist_mpi.c: the grid, start and end; dist_mpi_ops.c and dist_mpi_lib.c: the
 * collectives). Private to src/parallel/: the rest of the engine sees dist.h only.
 */
#ifndef MOE_DIST_MPI_H
#define MOE_DIST_MPI_H

#include <mpi.h>

#include "parallel/dist.h"

enum {
    TAG_REDUCE_UP = 101,   /* member -> member 0: the addend */
    TAG_REDUCE_DOWN = 102, /* member 0 -> member: the sum */
    TAG_ALLTOALL_I = 103,
    TAG_ALLTOALLV_F = 104,
    TAG_BROADCAST = 105,
    TAG_GATHER = 106,
    TAG_BARRIER_UP = 107,
    TAG_BARRIER_DOWN = 108,
    /* a pipeline's point-to-point messages (dist_send_f_start, dist_recv_f): a fixed tag a
     * kind, outside every collective's base + TAG_STRIDE x slot, since the two ends of a pair
     * start other numbers of operations on the group */
    TAG_PIPE = 1,
};

/* Collectives in flight at once get distinct tags, so their messages never match each other's
 * receives: tag = base + TAG_STRIDE x slot, slot = the collective's start number in its group
 * mod TAG_SLOTS (every member starts a group's collectives in the same order, so both ends
 * compute the same slot). */
#define TAG_STRIDE 16
#define TAG_SLOTS 512

/* Elements per message of an allreduce: member 0 holds (P - 1) chunks of addends at once, so a
 * gradient of any size costs at most (P - 1) x 8 MiB of scratch, not (P - 1) copies of itself. */
#define REDUCE_CHUNK ((size_t)1 << 20)

/* Who is to blame when a rank stops: the rank that waits for it directly can name it; one
 * that waits for a rank that is itself waiting would name the wrong one. So the waits are
 * tiered by how far they are from the peer they depend on, and the nearest times out first:
 *   WAIT_PEER (1 x timeout)    a message straight from the peer (all-to-alls, a broadcast's
 *                              receivers);
 *   WAIT_ROOT (1.5 x timeout)  member 0 of a sum, barrier or gather, collecting from every
 *                              member (one of them may be stuck in an exchange with the
 *                              stopped rank);
 *   WAIT_HUB (3 x timeout)     the other members of a sum or barrier, waiting for member 0,
 *                              which itself waits for all of them.
 * The first message ends the job (MPI_Abort) before the later deadlines come. The hubs' tier
 * leaves the abort 1.5 x timeout to reach them: with half of that (2 x timeout), four processes
 * on two busy cores were seen to blame member 0 before its abort arrived. */
#define WAIT_PEER 1.0
#define WAIT_ROOT 1.5
#define WAIT_HUB 3.0

/* One collective in flight: its requests (at most 2 per peer: req[i] talks to world rank
 * peer[i]; a receive must bring want[i] elements, a send has want[i] = -1), and for a sum the
 * chunk it is at. */
struct DistOp {
    int busy;
    int kind;            /* OP_SUM: driven chunk by chunk in dist_wait; OP_ONCE, OP_LIB: one
                            wait */
    double patience;     /* OP_ONCE: its tier (WAIT_PEER, ...) */
    const char *name;    /* "allreduce_sum_f", for messages */
    int tag;             /* this op's tag offset: TAG_STRIDE x (its start number mod TAG_SLOTS) */
    MPI_Datatype type;
    MPI_Request *req;
    MPI_Status *st;
    int *peer, *want, *done_idx;
    int nreq;
    double seconds;        /* inside start and wait */
    uint64_t sent, recvd;  /* payload bytes */
    /* a sum: group, buffer, element size, the chunk posted [off, off + len), its phase */
    DistGroup g;
    char *x;
    size_t n, elem, off, len;
    int phase;             /* SUM_UP: addends travel to member 0; SUM_DOWN: the sum back */
    int mode;              /* SUM_ALL, SUM_SCATTER or SUM_GATHER (dist_mpi_ops.c) */
    int purpose;           /* DistPurpose: d->purpose when it started */
    char *reduce_buf;      /* member 0's addends of one chunk: (P - 1) x chunk elements; or
                              an MPI reduce-scatter's result before it goes to its place */
    size_t reduce_cap;     /* its bytes, grown on demand and kept with the slot */
    int *counts, *displs;  /* (world) an MPI v-collective's counts and displacements */
    char *after_dst;       /* after the wait: after_bytes from reduce_buf to here (or none) */
    size_t after_bytes;
};

enum { SUM_UP = 0, SUM_DOWN = 1 };
enum { SUM_ALL = 0, SUM_SCATTER = 1, SUM_GATHER = 2 }; /* all-reduce, reduce-scatter, all-gather */
enum { OP_ONCE = 0, OP_SUM = 1, OP_LIB = 2 }; /* OP_LIB: one request of MPI's own collective */

typedef struct {
    MPI_Comm comm[DIST_GROUPS]; /* indexed by DistGroup: the world's duplicate, then splits */
    int owns_mpi;     /* 1 when dist_init called MPI_Init, so dist_finalize ends it */
    DistOp ops[DIST_MAX_IN_FLIGHT];
    unsigned started[DIST_GROUPS]; /* collectives started so far per group: their tags */
} DistMpi;

/* A free slot for a collective named name over group g, its tags drawn from g's start count;
 * and its end: its bytes and seconds into d->stats, the slot free again. */
DistOp *dm_op_begin(Dist *d, DistGroup g, const char *name, MPI_Datatype type);
/* The same for one point-to-point message: its tag offset 0, g's start count untouched. */
DistOp *dm_message_begin(Dist *d, DistGroup g, const char *name, MPI_Datatype type);
void dm_op_end(Dist *d, DistOp *op);

/* Post a receive of n elements from member p of group g (tag: its base; the op adds its own
 * offset), or a send of n elements to it. */
void dm_post_recv(Dist *d, DistOp *op, DistGroup g, void *buf, int n, int p, int tag);
void dm_post_send(Dist *d, DistOp *op, DistGroup g, const void *buf, int n, int p, int tag);

/* Wait for every request op has posted, with patience x timeout_s of silence at most. */
void dm_wait_for(Dist *d, DistOp *op, double patience);
/* The whole wait of an op posted at its start (not a sum): dm_wait_for with its own patience,
 * then dm_op_end. */
void dm_wait(Dist *d, DistOp *op);

/* The communicator of group g; an MPI return code checked (an error ends the job, naming op). */
MPI_Comm dm_comm(const Dist *d, DistGroup g);
void dm_check(const Dist *d, int rc, const char *op);

/* dist.collectives=mpi: the collectives of dist.h as MPI's own nonblocking ones
 * (dist_mpi_lib.c), each one request that the same wait loop tests against the deadline. */
DistOp *lib_sum_start(Dist *d, DistGroup g, void *x, size_t n, int is_double, const char *name);
DistOp *lib_alltoallv_f_start(Dist *d, const float *send, const int *send_counts,
                              const int *send_displs, float *recv, const int *recv_counts,
                              const int *recv_displs);
void lib_alltoall_i(Dist *d, const int *send, int *recv, int count);
/* dist_reduce_scatter_f_start and dist_allgather_f_start: MPI_Ireduce_scatter (through a copy:
 * MPI puts a member's block at the start of its buffer) and MPI_Iallgatherv in place */
DistOp *lib_reduce_scatter_f_start(Dist *d, DistGroup g, float *x, size_t n);
DistOp *lib_allgather_f_start(Dist *d, DistGroup g, float *x, size_t n);
/* member 0's n elements (of type, elem bytes each) to every member of g */
void lib_broadcast(Dist *d, DistGroup g, void *x, int n, MPI_Datatype type, size_t elem,
                   const char *name);
void lib_gather_f(Dist *d, const float *x, int n, float *out);
void lib_barrier(Dist *d);

#endif
