/*
 * capacity_lab.h: lab 02, expert capacity and drop policies (assignment: README.md).
 *
 *   task 1: capacity = how many assignments one expert may hold
 *   idx (N, K) --task 2: keep by position--> slot (N*K), counts (E)
 *   idx (N, K), scores (N, E) --task 3: keep by score--> slot (N*K), counts (E)
 *   ye (E, capacity, C) --task 4: combine, skipping dropped assignments--> y (N, C)
 *
 * Conventions (the same as the engine, src/moe/moe_ops.h): row-major arrays, so element
 * (n, k) of an (N, K) array is at [n * K + k]. Outputs come first, then inputs, then
 * dimensions. Dimension letters: N tokens, K experts chosen per token (top-k, the K experts of
 * a token are distinct), E experts, C channels. An assignment is one pair (token n, choice k),
 * numbered a = n * K + k; it goes to expert idx[a]. A slot of -1 marks a dropped assignment,
 * as in the engine's DispatchPlan.
 */
#ifndef CAPACITY_LAB_H
#define CAPACITY_LAB_H

#include "lab.h" /* lab_todo(), the marker of an unfinished task */

/* Task 1. Assignments one expert may hold, for `tokens` tokens routed top_k each over
 * num_experts experts:
 *   capacity = max(min_capacity, ceil(capacity_factor * tokens * top_k / num_experts))
 * then at most `tokens` (an expert never holds a token twice). capacity_factor is a decimal
 * setting with at most three digits after the point (1.25, 1.1, 0.3): the ceil is of that
 * exact decimal product, not of its float approximation. capacity_factor <= 0 means dropless:
 * the capacity is `tokens`. */
int lab_capacity(int tokens, int top_k, int num_experts, float capacity_factor, int min_capacity);

/* Task 2. Keep by position. idx (N, K) the experts chosen per token. Each expert keeps its
 * assignments in assignment order (token 0 first; inside a token, k = 0 first) until it holds
 * `capacity` of them; the rest are dropped.
 * slot (N * K) written: the position of the assignment in its expert's kept list
 * (0 .. capacity - 1), or -1 when dropped. counts (E) written: assignments kept per expert. */
void lab_keep_position(int *slot, int *counts, const int *idx, int N, int K, int E, int capacity);

/* Task 3. Keep by score. As task 2, but each expert keeps the `capacity` assignments with the
 * highest router score. scores (N, E) are the router's scores (softmax or sigmoid), before the
 * top-k renormalisation: assignment a = n * K + k of expert e = idx[a] has the score
 * scores[n * E + e], how much token n wants expert e (equal scores: the lower token first).
 * slot: the rank of the assignment among its expert's kept assignments in assignment order
 * (so each expert's kept list stays in token order), or -1 when dropped. counts (E). */
void lab_keep_score(int *slot, int *counts, const int *idx, const float *scores, int N, int K,
                    int E, int capacity);

/* Task 4. Combine. y (N, C) written:
 *   y[n, c] = sum over the kept k of w[n,k] * ye[(idx[n,k] * capacity + slot[n,k]) * C + c]
 * ye (E * capacity, C): the experts' outputs in a padded buffer, expert e's rows from
 * e * capacity (rows past counts[e] hold nothing). slot (N * K) from task 2 or 3, idx (N, K),
 * w (N, K). A dropped assignment (slot -1) adds nothing; a token with all K dropped gets 0. */
void lab_combine(float *y, const float *ye, const int *slot, const int *idx, const float *w, int N,
                 int K, int E, int capacity, int C);

#endif
