/*
 * alltoall_lab.h: lab 03, the dispatch of expert parallelism (assignment: README.md).
 *
 * P ranks form one expert-parallel group and hold E experts between them (P divides E): rank p
 * holds the El = E / P experts [p El, (p+1) El), its local experts 0 .. El-1. Every rank has N
 * tokens of its own (N may differ between ranks, and may be 0), routed top-K: idx (N, K) holds
 * global expert ids. The dispatch sends every assignment's token row to the rank that holds
 * its expert:
 *
 *   idx --task 1--> send_counts (P), expert_counts (E)
 *   counts (P) --task 2--> displs (P): where each rank's block starts (exclusive prefix sum)
 *   expert_counts (E) --task 3: MPI_Alltoall--> recv_counts (P, El): rows from each source for
 *                                               each local expert
 *   x (N, C), idx --task 4: pack--> sendbuf (N*K, C) by destination rank, then local expert,
 *                                   then token; row (N*K): where each assignment went
 *   sendbuf --task 5: MPI_Alltoallv + regroup--> recv (R, C) by local expert, then source
 *
 * Conventions (the same as the engine, src/moe/moe_ops.h): row-major arrays, so element
 * (n, k) of an (N, K) array is at [n * K + k]. Outputs come first, then inputs, then
 * dimensions; outputs are written in full (=). Dimension letters: N tokens, K experts chosen
 * per token (distinct), E experts, C channels, P ranks. An assignment is one pair (token n,
 * choice k), numbered a = n * K + k; it goes to expert idx[a], held by rank idx[a] / (E / P).
 * Tasks 3 and 5 are collective: every rank of comm calls them together. They return
 * MPI_SUCCESS, or the error code of the MPI call that failed.
 */
#ifndef ALLTOALL_LAB_H
#define ALLTOALL_LAB_H

#include <mpi.h>

#include "lab.h" /* lab_todo(), the marker of an unfinished task */

/* Task 1. Count this rank's outgoing assignments. idx (N, K) global expert ids in [0, E).
 * expert_counts (E) written: assignments per expert. send_counts (P) written: assignments per
 * destination rank (the rank holding the expert: expert e lives on rank e / (E / P)). */
void lab_send_counts(int *send_counts, int *expert_counts, const int *idx, int N, int K, int E,
                     int P);

/* Task 2. displs (P) written: the exclusive prefix sum of counts (P), displs[p] = counts[0] +
 * ... + counts[p-1] (displs[0] = 0): where block p starts in a buffer that holds the blocks
 * one after the other. Returns the total, counts[0] + ... + counts[P-1] (the buffer's size). */
int lab_displacements(int *displs, const int *counts, int P);

/* Task 3. The count exchange (collective on comm, P = its size, E divisible by P).
 * expert_counts (E): this rank's assignments per global expert (task 1); the block
 * [p El, (p+1) El) is what it sends to rank p. recv_counts (P, El) written:
 * recv_counts[s * El + l] = how many rows rank s will send for this rank's local expert l. */
int lab_exchange_counts(int *recv_counts, const int *expert_counts, int E, MPI_Comm comm);

/* Task 4. Pack the send buffer. x (N, C) this rank's tokens, idx (N, K). sendbuf (N*K, C)
 * written: one row per assignment, x[n] for a = n * K + k, sorted by destination rank, inside
 * a rank by local expert, inside an expert by assignment order (a ascending). row (N*K)
 * written: row[a] = the row of sendbuf that holds assignment a (the combine needs it to bring
 * the expert's output back to its token). */
void lab_pack(float *sendbuf, int *row, const float *x, const int *idx, int N, int K, int C, int E,
              int P);

/* Task 5. The dispatch (collective on comm, P = its size). sendbuf (N*K, C) packed as in task
 * 4, with expert_counts (E) this rank's assignments per global expert (task 1); recv_counts
 * (P, El) from task 3. recv (R, C) written, R = the sum of recv_counts: the rows this rank's
 * experts receive, grouped by local expert l = 0 .. El-1, inside an expert by source rank
 * s = 0 .. P-1, inside a source in the order the source packed them. */
int lab_dispatch(float *recv, const float *sendbuf, const int *expert_counts,
                 const int *recv_counts, int C, int E, MPI_Comm comm);

#endif
