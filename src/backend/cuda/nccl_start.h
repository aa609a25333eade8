/*
 * nccl_start.h: how the processes of a dist.collectives=nccl run agree on NCCL's start
 * (cuda_nccl.cu's coll_open), in plain C that the host tests run without NCCL, MPI or a GPU.
 *
 * Rank 0 draws NCCL's unique id (ncclGetUniqueId) and every rank receives it in one broadcast
 * over MPI. The draw can fail (NCCL finds no network interface it can use, ...), and rank 0
 * must broadcast all the same: a rank that returned before the broadcast would leave every
 * other one waiting in it forever. So what rank 0 sends is its status and its words along with
 * the id, and every rank, once it has received them, returns the same failure, or goes on
 * with the id.
 */
#ifndef MOE_BACKEND_NCCL_START_H
#define MOE_BACKEND_NCCL_START_H

#include <stddef.h>
#include <string.h>

#include "base/util.h" /* set_error */

#define NCCL_START_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES: the size of an ncclUniqueId */

/* What rank 0 broadcasts: one block of bytes, the same on every rank. */
typedef struct {
    int status;    /* 0: id holds NCCL's unique id; else rank 0's ncclResult_t */
    char why[160]; /* rank 0's words for a failure (ncclGetErrorString), else empty */
    char id[NCCL_START_ID_BYTES];
} NcclStart;

/* draw: rank 0's ncclGetUniqueId: the id into id, returning 0; or NCCL's status, with its words
 * in why. bcast: n bytes from rank 0 to every rank of the world (dist_broadcast_bytes). */
typedef int (*NcclDraw)(void *ctx, char *id, char *why, size_t whylen);
typedef void (*NcclBcast)(void *ctx, void *buf, size_t n);

/* Every rank's part of the start: rank 0 draws; then every rank, rank 0 whatever its draw gave,
 * takes part in the one broadcast. Returns 0 with the id in s->id, or -1 on every rank with the
 * message in err. */
static inline int nccl_start_share(int rank, NcclStart *s, NcclDraw draw, NcclBcast bcast,
                                   void *ctx, char *err, int errlen) {
    memset(s, 0, sizeof *s);
    if (rank == 0) {
        s->status = draw(ctx, s->id, s->why, sizeof s->why);
        s->why[sizeof s->why - 1] = '\0';
    }
    bcast(ctx, s, sizeof *s);
    if (s->status == 0) return 0;
    s->why[sizeof s->why - 1] = '\0'; /* whatever came over the wire */
    return set_error(err, errlen,
                     "dist.collectives=nccl: NCCL could not start on rank 0 (NCCL error %d: "
                     "%s); use dist.collectives=mpi, which stages the GPU's buffers through "
                     "the host",
                     s->status, s->why[0] ? s->why : "no words");
}

#endif
