/*
 * alltoall_lab.c: the reference solution of lab 03, the dispatch of expert parallelism
 * (assignment: labs/03-all-to-all/README.md, signatures: alltoall_lab.h).
 *
 * Rank p holds experts [p El, (p+1) El), El = E / P. Because the experts are numbered rank
 * after rank, "sorted by destination rank, then by local expert" is the same order as "sorted
 * by global expert": the send buffer is a counting sort of the assignments by idx.
 */
#include "alltoall_lab.h"

#include <stdlib.h>
#include <string.h>

void lab_send_counts(int *send_counts, int *expert_counts, const int *idx, int N, int K, int E,
                     int P) {
    const int El = E / P;
    memset(send_counts, 0, (size_t)P * sizeof(int));
    memset(expert_counts, 0, (size_t)E * sizeof(int));
    for (int a = 0; a < N * K; a++) {
        const int e = idx[a];
        expert_counts[e]++;
        send_counts[e / El]++;
    }
}

int lab_displacements(int *displs, const int *counts, int P) {
    int total = 0;
    for (int p = 0; p < P; p++) {
        displs[p] = total;
        total += counts[p];
    }
    return total;
}

int lab_exchange_counts(int *recv_counts, const int *expert_counts, int E, MPI_Comm comm) {
    int P;
    int rc = MPI_Comm_size(comm, &P);
    if (rc != MPI_SUCCESS) return rc;
    const int El = E / P;
    /* block p of the send side (El ints) goes to rank p; block s of the receive side comes
     * from rank s: the (P, El) table of what each source holds for my experts */
    return MPI_Alltoall(expert_counts, El, MPI_INT, recv_counts, El, MPI_INT, comm);
}

void lab_pack(float *sendbuf, int *row, const float *x, const int *idx, int N, int K, int C, int E,
              int P) {
    /* sorting by (rank, local expert) is sorting by global expert e = rank * El + local.
     * next[e]: the next free row of expert e's block, which starts after every block of a
     * lower expert (an exclusive prefix sum of the per-expert counts) */
    int *next = calloc((size_t)E + 1, sizeof(int));
    for (int a = 0; a < N * K; a++) next[idx[a] + 1]++;
    for (int e = 0; e < E; e++) next[e + 1] += next[e];
    for (int a = 0; a < N * K; a++) {
        const int e = idx[a];
        int r = next[e]++;
        row[a] = r;
        memcpy(sendbuf + (size_t)r * C, x + (size_t)(a / K) * C, (size_t)C * sizeof(float));
    }
    free(next);
}

/* The exclusive prefix sum of task 2, written again here so that task 5 stands on its own. */
static int exclusive_sum(int *displs, const int *counts, int P) {
    int total = 0;
    for (int p = 0; p < P; p++) {
        displs[p] = total;
        total += counts[p];
    }
    return total;
}

int lab_dispatch(float *recv, const float *sendbuf, const int *expert_counts,
                 const int *recv_counts, int C, int E, MPI_Comm comm) {
    int P;
    int rc = MPI_Comm_size(comm, &P);
    if (rc != MPI_SUCCESS) return rc;
    const int El = E / P;
    /* rows per peer: my block for rank p is its El experts' rows; from source s I get the
     * rows of all my experts */
    int *scount = calloc((size_t)4 * P, sizeof(int));
    int *sdispl = scount + P, *rcount = scount + 2 * P, *rdispl = scount + 3 * P;
    for (int p = 0; p < P; p++)
        for (int l = 0; l < El; l++) {
            scount[p] += expert_counts[p * El + l];
            rcount[p] += recv_counts[p * El + l];
        }
    exclusive_sum(sdispl, scount, P);
    const int R = exclusive_sum(rdispl, rcount, P);
    /* MPI counts elements, not rows: a row is C floats (the four arrays, in one loop) */
    for (int i = 0; i < 4 * P; i++) scount[i] *= C;
    /* what arrives is grouped by source, then local expert: (s, l) blocks */
    float *bysrc = malloc(((size_t)R * C + 1) * sizeof(float));
    rc = MPI_Alltoallv(sendbuf, scount, sdispl, MPI_FLOAT, bysrc, rcount, rdispl, MPI_FLOAT, comm);
    if (rc == MPI_SUCCESS) {
        /* regroup to (l, s) blocks, so each local expert's rows are contiguous. Block (s, l)
         * starts in bysrc after all blocks of lower sources, and before it those of s's lower
         * experts. */
        size_t out = 0;
        for (int l = 0; l < El; l++)
            for (int s = 0; s < P; s++) {
                size_t in = (size_t)rdispl[s] / C;
                for (int j = 0; j < l; j++) in += recv_counts[s * El + j];
                const size_t n = (size_t)recv_counts[s * El + l];
                memcpy(recv + out * C, bysrc + in * C, n * C * sizeof(float));
                out += n;
            }
    }
    free(bysrc);
    free(scount);
    return rc;
}
