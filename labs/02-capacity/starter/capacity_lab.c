/*
 * capacity_lab.c: your solution to lab 02, capacity and drop policies
 * (assignment: labs/02-capacity/README.md).
 *
 *   task 1: capacity = max(min_capacity, ceil(factor * tokens * top_k / E)), at most tokens
 *   task 2: keep by position   task 3: keep by router score   -> slot (N*K), counts (E)
 *   task 4: y (N, C) = sum over kept assignments of w * ye[expert, slot]
 *
 * Each function below is a stub: it fills its outputs with -1 / NaN and calls lab_todo(),
 * which makes the grader report the task as not implemented. Replace the whole body of a
 * function (the lab_todo() call included) with your code, then grade it:
 *   make -C labs grade LAB=02-capacity                        every task
 *   make -C labs grade LAB=02-capacity TASK=task1_capacity    one task
 * Assignment a = n * K + k is (token n, choice k); it goes to expert idx[a]. Helper functions
 * of your own should be `static`.
 */
#include "capacity_lab.h"

#include <math.h>
#include <stdlib.h>

int lab_capacity(int tokens, int top_k, int num_experts, float capacity_factor, int min_capacity) {
    /* TODO task 1: capacity_factor <= 0: return tokens (dropless). Otherwise
     *   max(min_capacity, ceil(capacity_factor * tokens * top_k / num_experts)), at most tokens.
     * The factor is a decimal with at most 3 digits after the point that float cannot hold
     * exactly (1.1f is 1.10000002...): 1.1 * 10 * 1 / 1 = 11 must give 11, not 12. Round the
     * factor to thousandths and do the ceil in integers (README.md, task 1). */
    lab_todo(1, "lab_capacity");
    return -1;
}

void lab_keep_position(int *slot, int *counts, const int *idx, int N, int K, int E, int capacity) {
    /* TODO task 2: walk the assignments a = 0 .. N*K-1 in order. If expert idx[a] holds fewer
     * than `capacity`, the assignment gets the next position of that expert (0, 1, ...);
     * otherwise slot[a] = -1. counts[e] = how many expert e kept. Do not assume anything about
     * the contents of slot and counts on entry. */
    for (int a = 0; a < N * K; a++) slot[a] = -1;
    for (int e = 0; e < E; e++) counts[e] = -1;
    lab_todo(2, "lab_keep_position");
}

void lab_keep_score(int *slot, int *counts, const int *idx, const float *scores, int N, int K,
                    int E, int capacity) {
    /* TODO task 3: assignment a = n * K + k of expert e = idx[a] has the router score
     * scores[n * E + e]. It is kept when fewer than `capacity` other assignments of e beat it:
     * a higher score, or an equal score and a lower index. Then number each expert's kept
     * assignments 0, 1, ... in assignment order (token order), as in task 2: slot[a] is that
     * number, -1 when dropped. counts (E). */
    for (int a = 0; a < N * K; a++) slot[a] = -1;
    for (int e = 0; e < E; e++) counts[e] = -1;
    lab_todo(3, "lab_keep_score");
}

void lab_combine(float *y, const float *ye, const int *slot, const int *idx, const float *w, int N,
                 int K, int E, int capacity, int C) {
    /* TODO task 4: y[n, c] = sum over k with slot[n*K+k] >= 0 of
     *   w[n*K+k] * ye[(idx[n*K+k] * capacity + slot[n*K+k]) * C + c]
     * Write every element of y (=, not +=): a token whose assignments were all dropped gets 0.
     * Never read ye with a slot of -1. */
    for (size_t i = 0; i < (size_t)N * C; i++) y[i] = NAN;
    lab_todo(4, "lab_combine");
}
