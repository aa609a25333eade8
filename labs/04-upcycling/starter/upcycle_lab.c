/*
 * upcycle_lab.c: your solution to lab 04, sparse upcycling of one layer
 * (assignment: labs/04-upcycling/README.md).
 *
 *   task 1: copy the dense SwiGLU into E experts       task 2: mean and std of a matrix
 *   task 3: choose n_drop distinct hidden units         task 4: re-draw those units
 *   task 5: fine-grained experts, one slice of F / G units each, down times G
 *
 * Each function below is a stub: it fills its outputs with NaN / -1 and calls lab_todo(),
 * which makes the grader report the task as not implemented. Replace the whole body of a
 * function (the lab_todo() call included) with your code, then grade it:
 *   make -C labs grade LAB=04-upcycling                     every task
 *   make -C labs grade LAB=04-upcycling TASK=task1_copy     one task
 * Matrices are row-major: (f, c) of an (F, C) matrix is [f * C + c], (c, f) of a (C, F) one
 * is [c * F + f]. Helper functions of your own should be `static`.
 */
#include "upcycle_lab.h"

#include <math.h>
#include <stddef.h>

void lab_copy_experts(float *e_gate, float *e_up, float *e_down, const float *w_gate,
                      const float *w_up, const float *w_down, int E, int F, int C) {
    /* TODO task 1: for every expert e, its (F, C) gate and up at e * F * C are copies of
     * w_gate and w_up, and its (C, F) down at e * C * F is a copy of w_down (C, F): the same
     * layout, not transposed. */
    for (size_t i = 0; i < (size_t)E * F * C; i++) e_gate[i] = e_up[i] = e_down[i] = NAN;
    lab_todo(1, "lab_copy_experts");
}

void lab_stats(float *mean, float *std, const float *w, int n) {
    /* TODO task 2: mean = (1/n) sum w_i, std = sqrt((1/n) sum (w_i - mean)^2), both summed in
     * double. Equal values must give std 0, never NaN. */
    *mean = *std = NAN;
    lab_todo(2, "lab_stats");
}

void lab_choose_units(int *units, int n_drop, int F, LabRng *rng) {
    /* TODO task 3: perm = 0, 1, ..., F - 1; for i = 0 .. n_drop - 1:
     *   j = i + lab_rng_below(rng, F - i); swap perm[i] and perm[j]; units[i] = perm[i].
     * Exactly n_drop calls of lab_rng_below, in that order. */
    for (int i = 0; i < n_drop; i++) units[i] = -1;
    lab_todo(3, "lab_choose_units");
}

void lab_drop_units(float *gate, float *up, float *down, const int *units, int n_drop, int F, int C,
                    const float stats[6], const float *z) {
    /* TODO task 4: for the i-th unit u = units[i] and every channel c:
     *   gate[u*C + c] = stats[0] + stats[1] * z[(3*i + 0)*C + c]
     *   up[u*C + c]   = stats[2] + stats[3] * z[(3*i + 1)*C + c]
     *   down[c*F + u] = stats[4] + stats[5] * z[(3*i + 2)*C + c]     (a column of down)
     * Leave every other element as it is. */
    for (size_t i = 0; i < (size_t)F * C; i++) gate[i] = up[i] = down[i] = NAN;
    lab_todo(4, "lab_drop_units");
}

void lab_split_experts(float *e_gate, float *e_up, float *e_down, const float *w_gate,
                       const float *w_up, const float *w_down, int E, int G, int F, int C) {
    /* TODO task 5: Fe = F / G. Expert e takes slice s = e % G, the dense units s*Fe .. s*Fe +
     * Fe - 1: its (Fe, C) gate and up are those rows of w_gate and w_up, and its (C, Fe) down
     * is those columns of w_down, multiplied by G. */
    for (size_t i = 0; i < (size_t)E * (F / G) * C; i++) e_gate[i] = e_up[i] = e_down[i] = NAN;
    lab_todo(5, "lab_split_experts");
}
