/*
 * Chapter 3, collectives.c: the hand-built collectives against MPI's own, side by side.
 *
 *   make MPI=1 chapters && mpirun -np 4 build/mpi/chapters/03-expert-parallel/collectives
 *   ... collectives --csv            (one line per measurement, for collectives.sh)
 *
 * Every process takes part in two sums of gradient-sized buffers and two exchanges, once over
 * each engine of src/parallel/dist.h (dist.collectives):
 *
 *   teach  the chapter's collectives from point-to-point messages: a sum goes up to member 0,
 *          which adds the P - 1 others' values in member order and sends the result back down
 *          (linear: member 0 moves (P - 1) n floats each way, the others n); an exchange is
 *          P - 1 sends and receives a member;
 *   mpi    MPI_Iallreduce and MPI_Ialltoallv: the library's choice, for a large sum a ring
 *          (each member sends and receives 2 (P - 1) / P n, the same for all).
 *
 * For each engine, operation and size: the median seconds of REPS calls (each started after a
 * barrier, timed on rank 0), and the bytes member 0 and member 1 sent in one call as
 * dist.csv counts them (the teaching collectives count what they send; MPI's are counted as
 * the ring's cost model, since the library does not report its traffic). The sums are checked
 * against the exact result on every process, the exchange against the values sent.
 *
 * Besides src/moe.h it includes src/parallel/dist.h: the collectives themselves are what it
 * measures, and training reaches them only from inside a step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"

#include "parallel/dist.h" /* the collectives this program measures */

enum { REPS = 7 };
static const size_t SIZES[] = {(size_t)1 << 10, (size_t)1 << 16, (size_t)1 << 20, (size_t)1 << 22};
#define N_SIZES (sizeof SIZES / sizeof SIZES[0])

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The bytes this process sent in the last call, [0] and [1] of every process gathered at rank
 * 0 (out: 2 P doubles); every process takes part. */
static void sent_by_member(Dist *d, double mine, double *out) {
    for (int p = 0; p < 2 * d->world; p++) out[p] = 0.0;
    out[d->rank] = mine;
    dist_allreduce_sum_d(d, DIST_WORLD, out, (size_t)d->world);
}

/* One measurement: REPS calls of op (0: sum, 1: exchange) on n floats per process. Returns 0,
 * or 1 when a result was wrong (on any process). */
static int measure(Dist *d, const char *engine, int op, size_t n, int csv, float *x, float *y,
                   int *sc, int *sd, int *rc, int *rd) {
    const int P = d->world, me = d->rank;
    double t[REPS], sent = 0.0;
    int bad = 0;
    /* an exchange sends n / P floats to each member */
    const int part = (int)(n / (size_t)P);
    for (int p = 0; p < P; p++) sc[p] = rc[p] = part, sd[p] = rd[p] = p * part;
    for (int r = 0; r < REPS; r++) {
        for (size_t i = 0; i < n; i++) x[i] = (float)((me + 1) * (int)(i % 97)); /* exact sums */
        dist_barrier(d);
        const uint64_t before = d->stats.bytes_sent;
        const double t0 = now_seconds();
        if (op == 0)
            dist_allreduce_sum_f(d, DIST_WORLD, x, n);
        else
            dist_alltoallv_f(d, x, sc, sd, y, rc, rd);
        t[r] = now_seconds() - t0;
        sent = (double)(d->stats.bytes_sent - before);
        const float tri = (float)(P * (P + 1) / 2);
        for (size_t i = 0; i < n && !bad; i++) {
            if (op == 0)
                bad = x[i] != tri * (float)(int)(i % 97);
            else if (i < (size_t)part * P) /* from member i / part, its block for me */
                bad = y[i] !=
                      (float)((int)(i / part) + 1) * (float)(int)((me * part + i % part) % 97);
        }
    }
    double wrong = bad, by[64];
    dist_allreduce_sum_d(d, DIST_WORLD, &wrong, 1);
    sent_by_member(d, sent, by);
    qsort(t, REPS, sizeof t[0], by_value);
    if (me == 0) {
        const char *name = op == 0 ? "sum" : "exchange";
        if (csv)
            printf("%s,%s,%d,%zu,%.6g,%.0f,%.0f\n", engine, name, P, n, t[REPS / 2], by[0],
                   P > 1 ? by[1] : 0.0);
        else
            printf("  %-5s %-8s %9zu floats  %10.6f s  member 0 sent %11.0f bytes, member 1 "
                   "%11.0f\n",
                   engine, name, n, t[REPS / 2], by[0], P > 1 ? by[1] : 0.0);
    }
    return wrong > 0;
}

int main(int argc, char **argv) {
    int csv = argc > 1 && strcmp(argv[1], "--csv") == 0;
    if (argc > 2 || (argc == 2 && !csv)) {
        fprintf(stderr, "usage: [mpirun -np P] collectives [--csv]\n");
        return MOE_EXIT_INPUT;
    }
    char err[512];
    /* The process count is known once MPI has started: a first grid (ep = 1, which starts and
     * later ends MPI) says it; each engine gets a grid of one expert-parallel group of every
     * process inside it, so that the exchange spans the world. */
    Dist world, engines[2];
    const char *names[2] = {"teach", "mpi"};
    const int kinds[2] = {DIST_COLL_TEACH, DIST_COLL_MPI};
    if (dist_init(&world, &argc, &argv, (DistAxes){1, 1, 1}, DIST_COLL_TEACH, 60.0, NULL, err,
                  sizeof err) != 0) {
        fprintf(stderr, "collectives: %s\n", err);
        return MOE_EXIT_INPUT;
    }
    for (int k = 0; k < 2; k++)
        if (dist_init(&engines[k], &argc, &argv, (DistAxes){1, world.world, 1}, kinds[k], 60.0, NULL,
                      err, sizeof err)) {
            fprintf(stderr, "collectives: %s\n", err);
            return MOE_EXIT_INPUT;
        }
    Dist *d0 = &engines[0];
    const int P = d0->world;
    if (P > 32) {
        if (d0->rank == 0) fprintf(stderr, "collectives: at most 32 processes\n");
        return MOE_EXIT_INPUT;
    }
    const size_t nmax = SIZES[N_SIZES - 1];
    float *x = floats_alloc(nmax), *y = floats_alloc(nmax);
    int *sc = calloc_check((size_t)P, sizeof(int)), *sd = calloc_check((size_t)P, sizeof(int));
    int *rc = calloc_check((size_t)P, sizeof(int)), *rd = calloc_check((size_t)P, sizeof(int));
    if (d0->rank == 0) {
        if (csv)
            printf("engine,op,processes,floats,seconds,member0_sent_bytes,member1_sent_bytes\n");
        else
            printf("collectives: %d process%s, the median of %d calls each\n", P,
                   P == 1 ? "" : "es", REPS);
    }
    int bad = 0;
    for (int op = 0; op < 2; op++)
        for (size_t s = 0; s < N_SIZES; s++)
            for (int k = 0; k < 2; k++)
                bad |= measure(&engines[k], names[k], op, SIZES[s], csv, x, y, sc, sd, rc, rd);
    if (bad && d0->rank == 0) fprintf(stderr, "collectives: a result was wrong\n");
    free(x), free(y), free(sc), free(sd), free(rc), free(rd);
    dist_finalize(&engines[1]);
    dist_finalize(&engines[0]);
    dist_finalize(&world);
    return bad ? 1 : 0;
}
