/*
 * alltoall_lab.c: your solution to lab 03, the dispatch of expert parallelism
 * (assignment: labs/03-all-to-all/README.md).
 *
 *   task 1: idx (N, K) -> send_counts (P), expert_counts (E)
 *   task 2: counts (P) -> displs (P), the exclusive prefix sum; returns the total
 *   task 3: expert_counts (E) --MPI_Alltoall--> recv_counts (P, El)
 *   task 4: x (N, C), idx -> sendbuf (N*K, C) by (rank, local expert, token), row (N*K)
 *   task 5: sendbuf --MPI_Alltoallv, then regroup--> recv (R, C) by (local expert, source)
 *
 * P ranks, E experts, El = E / P per rank: rank p holds experts [p El, (p+1) El). Each
 * function below is a stub: it fills its outputs with -1 / NaN and calls lab_todo(), which
 * makes the grader report the task as not implemented. Replace the whole body of a function
 * (the lab_todo() call included) with your code, then grade it:
 *   make -C labs grade LAB=03-all-to-all                         every task, 4 ranks
 *   make -C labs grade LAB=03-all-to-all TASK=task3_exchange NP=2   one task, 2 ranks
 * Assignment a = n * K + k is (token n, choice k); it goes to expert idx[a]. Helper functions
 * of your own should be `static`. You may call MPI (<mpi.h>) and the C library.
 */
#include "alltoall_lab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void lab_send_counts(int *send_counts, int *expert_counts, const int *idx, int N, int K, int E,
                     int P) {
    /* TODO task 1: expert_counts[e] = how many of the N*K assignments have idx[a] == e;
     * send_counts[p] = how many go to rank p, the rank holding expert idx[a] (experts are
     * spread in blocks of E / P). Do not assume anything about the outputs on entry. */
    for (int p = 0; p < P; p++) send_counts[p] = -1;
    for (int e = 0; e < E; e++) expert_counts[e] = -1;
    lab_todo(1, "lab_send_counts");
}

int lab_displacements(int *displs, const int *counts, int P) {
    /* TODO task 2: displs[0] = 0, displs[p] = counts[0] + ... + counts[p-1]; return the sum
     * of all P counts. */
    for (int p = 0; p < P; p++) displs[p] = -1;
    lab_todo(2, "lab_displacements");
    return -1;
}

int lab_exchange_counts(int *recv_counts, const int *expert_counts, int E, MPI_Comm comm) {
    /* TODO task 3: one MPI_Alltoall on comm. Rank p must get this rank's counts for p's
     * experts, expert_counts[p * El .. (p+1) * El); recv_counts[s * El + l] is what rank s
     * sends for local expert l. P = MPI_Comm_size(comm), El = E / P. Return its result. */
    for (int i = 0; i < E; i++) recv_counts[i] = -1; /* P * El = E ints */
    lab_todo(3, "lab_exchange_counts");
    return MPI_SUCCESS;
}

void lab_pack(float *sendbuf, int *row, const float *x, const int *idx, int N, int K, int C, int E,
              int P) {
    /* TODO task 4: sendbuf holds one row per assignment, x[a / K], sorted by destination rank,
     * then local expert, then a; row[a] = where assignment a went. Hint: count per expert,
     * prefix-sum the counts into each expert's first row, then place the assignments in order. */
    for (size_t i = 0; i < (size_t)N * K * C; i++) sendbuf[i] = NAN;
    for (int a = 0; a < N * K; a++) row[a] = -1;
    lab_todo(4, "lab_pack");
}

int lab_dispatch(float *recv, const float *sendbuf, const int *expert_counts,
                 const int *recv_counts, int C, int E, MPI_Comm comm) {
    /* TODO task 5: rows to each rank p = the sum of expert_counts over p's experts; rows from
     * each source s = the sum of recv_counts[s * El ..]; displacements from both (task 2);
     * one MPI_Alltoallv of floats (counts and displacements times C); then reorder what
     * arrived, grouped by source, into recv grouped by local expert, then source. */
    size_t R = 0;
    for (int i = 0; i < E; i++) R += (size_t)recv_counts[i];
    for (size_t i = 0; i < R * C; i++) recv[i] = NAN;
    lab_todo(5, "lab_dispatch");
    return MPI_SUCCESS;
}
