/*
 * capacity_lab.c: reference solution of lab 02 (README.md in this folder has the assignment).
 *
 *   capacity = max(min_capacity, ceil(factor * tokens * top_k / E)), at most tokens
 *   keep by position: first come, first served, in token order
 *   keep by score: each expert keeps its highest router scores, listed in token order
 *   combine: y (N, C) = sum over kept assignments of w * ye[expert e, slot], from e * capacity
 *
 * Plain serial loops: the point is which assignments survive and where they land.
 */
#include "capacity_lab.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int lab_capacity(int tokens, int top_k, int num_experts, float capacity_factor, int min_capacity) {
    /* The factor is a decimal setting (1.25, 1.1, 0.3) that float holds only approximately:
     * 1.1f = 1.10000002384, so 1.1f * 10 in double is 11.0000002 and its ceil 12, one slot
     * more than 1.1 * 10 = 11. Rounding the factor to thousandths recovers the decimal
     * exactly (the float error is far below 0.0005), and the ceil of a quotient of integers
     * is exact:  ceil(p / q) = (p + q - 1) / q  for p >= 0, q > 0. */
    if (capacity_factor <= 0.0f) return tokens; /* dropless */
    long long permille = llround((double)capacity_factor * 1000.0);
    long long num = permille * tokens * top_k, den = 1000LL * num_experts;
    long long cap = (num + den - 1) / den;
    if (cap < min_capacity) cap = min_capacity;
    if (cap > tokens) cap = tokens;
    return (int)cap;
}

void lab_keep_position(int *slot, int *counts, const int *idx, int N, int K, int E, int capacity) {
    /* slot (N * K) written, counts (E) written, idx (N, K).
     * counts[e] is both the number kept so far and the next free position of expert e, so
     * walking the assignments in order hands out 0, 1, 2, ... until the expert is full. */
    for (int e = 0; e < E; e++) counts[e] = 0;
    for (int a = 0; a < N * K; a++) {
        int e = idx[a];
        slot[a] = counts[e] < capacity ? counts[e]++ : -1;
    }
}

/* One assignment in the ranking of task 3. */
typedef struct {
    int expert;
    float score; /* scores[n, expert]: how much token n wants this expert */
    int a;       /* n * K + k */
} Ranked;

/* By expert, then descending score, then ascending assignment index: a total order (every
 * assignment index is distinct), so qsort, which is not stable, still gives one answer. */
static int ranked_cmp(const void *pa, const void *pb) {
    const Ranked *x = pa, *y = pb;
    if (x->expert != y->expert) return x->expert < y->expert ? -1 : 1;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->a > y->a) - (x->a < y->a);
}

void lab_keep_score(int *slot, int *counts, const int *idx, const float *scores, int N, int K,
                    int E, int capacity) {
    /* slot (N * K) written, counts (E) written, idx (N, K), scores (N, E).
     * The key of assignment a = n * K + k is the router's score of its expert for its token,
     * scores[n * E + idx[a]]: the token's affinity to that one expert, comparable across
     * tokens (a renormalised gate weight would also depend on the token's other choices).
     * Two passes. First decide who stays: sort the assignments by (expert, score down,
     * index up); the first `capacity` of each expert's run are kept (slot[a] = 0 marks them
     * for now). Then number the kept ones in assignment order, as task 2 does, so an expert's
     * rows in the buffer stay in token order whichever policy chose them. */
    int NK = N * K;
    Ranked *r = malloc((size_t)(NK > 0 ? NK : 1) * sizeof(Ranked));
    if (!r) {
        fprintf(stderr, "capacity_lab: out of memory\n");
        exit(1);
    }
    for (int a = 0; a < NK; a++) r[a] = (Ranked){idx[a], scores[(size_t)(a / K) * E + idx[a]], a};
    qsort(r, (size_t)NK, sizeof(Ranked), ranked_cmp);
    for (int i = 0, rank = 0; i < NK; i++) {
        rank = i > 0 && r[i].expert == r[i - 1].expert ? rank + 1 : 0; /* place in its run */
        slot[r[i].a] = rank < capacity ? 0 : -1;
    }
    free(r);

    for (int e = 0; e < E; e++) counts[e] = 0;
    for (int a = 0; a < NK; a++)
        if (slot[a] == 0) slot[a] = counts[idx[a]]++;
}

void lab_combine(float *y, const float *ye, const int *slot, const int *idx, const float *w, int N,
                 int K, int E, int capacity, int C) {
    /* y (N, C) written, ye (E * capacity, C), slot (N * K), idx (N, K), w (N, K).
     * A dropped assignment has no row in ye (slot -1 would read the previous expert's last
     * row, or before the buffer), so it is skipped: its share of the token's output is lost,
     * and a token with every assignment dropped gets y = 0. In the model the block's output is
     * added to the residual stream, x + moe(x), so that token passes through unchanged. */
    for (int n = 0; n < N; n++) {
        float *yn = y + (size_t)n * C;
        for (int c = 0; c < C; c++) yn[c] = 0.0f;
        for (int k = 0; k < K; k++) {
            int a = n * K + k;
            if (slot[a] < 0) continue;
            const float *row = ye + ((size_t)idx[a] * capacity + slot[a]) * C;
            for (int c = 0; c < C; c++) yn[c] += w[a] * row[c];
        }
    }
}
