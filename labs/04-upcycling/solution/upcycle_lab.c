/*
 * upcycle_lab.c: reference solution of lab 04 (README.md in this folder has the assignment).
 *
 *   copy:  every expert = the dense SwiGLU, exactly (the upcycled layer computes the dense one)
 *   stats: mean and std of a dense matrix, the distribution re-drawn units come from
 *   choose: n_drop distinct hidden units, partial Fisher-Yates
 *   drop:  the chosen rows of gate and up, and columns of down, = mean + std * z
 *   split: fine-grained experts, one slice of F / G units each, down scaled by G
 *
 * Plain serial loops: the point is which weights go where.
 */
#include "upcycle_lab.h"

#include <math.h>
#include <string.h>

void lab_copy_experts(float *e_gate, float *e_up, float *e_down, const float *w_gate,
                      const float *w_up, const float *w_down, int E, int F, int C) {
    /* e_gate, e_up (E, F, C), e_down (E, C, F); w_gate, w_up (F, C), w_down (C, F).
     * An expert's matrices have exactly the dense shapes, so each is one contiguous copy;
     * down stays (C, F), it is not transposed. */
    size_t fc = (size_t)F * C;
    for (int e = 0; e < E; e++) {
        memcpy(e_gate + e * fc, w_gate, fc * sizeof(float));
        memcpy(e_up + e * fc, w_up, fc * sizeof(float));
        memcpy(e_down + e * fc, w_down, fc * sizeof(float));
    }
}

void lab_stats(float *mean, float *std, const float *w, int n) {
    /* Two passes in double: the mean first, then the squared deviations from it. The one-pass
     * form E[w^2] - E[w]^2 subtracts two nearly equal numbers when |mean| >> std, and can come
     * out slightly negative (sqrt gives NaN) for equal values. */
    double s = 0.0;
    for (int i = 0; i < n; i++) s += w[i];
    double m = s / n, ss = 0.0;
    for (int i = 0; i < n; i++) ss += ((double)w[i] - m) * ((double)w[i] - m);
    *mean = (float)m;
    *std = (float)sqrt(ss / n);
}

void lab_choose_units(int *units, int n_drop, int F, LabRng *rng) {
    /* units (n_drop). After step i, perm[0..i] is a uniform random ordered sample without
     * replacement: perm[i] is drawn uniformly from the F - i units not yet taken, which sit in
     * perm[i..F-1]. Only the first n_drop steps of the full shuffle are needed. */
    int perm[F > 0 ? F : 1];
    for (int f = 0; f < F; f++) perm[f] = f;
    for (int i = 0; i < n_drop; i++) {
        int j = i + lab_rng_below(rng, F - i);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        units[i] = perm[i];
    }
}

void lab_drop_units(float *gate, float *up, float *down, const int *units, int n_drop, int F, int C,
                    const float stats[6], const float *z) {
    /* gate, up (F, C), down (C, F) in place; units (n_drop); z (n_drop, 3, C).
     * Hidden unit u is row u of gate and up (what feeds it) and column u of down (what it
     * writes back to the C channels): re-drawing a unit replaces all three, so the unit is
     * a new random feature rather than a half-changed copy. */
    for (int i = 0; i < n_drop; i++) {
        int u = units[i];
        const float *zg = z + (size_t)(3 * i + 0) * C;
        const float *zu = z + (size_t)(3 * i + 1) * C;
        const float *zd = z + (size_t)(3 * i + 2) * C;
        for (int c = 0; c < C; c++) {
            gate[(size_t)u * C + c] = stats[0] + stats[1] * zg[c];
            up[(size_t)u * C + c] = stats[2] + stats[3] * zu[c];
            down[(size_t)c * F + u] = stats[4] + stats[5] * zd[c];
        }
    }
}

void lab_split_experts(float *e_gate, float *e_up, float *e_down, const float *w_gate,
                       const float *w_up, const float *w_down, int E, int G, int F, int C) {
    /* e_gate, e_up (E, Fe, C), e_down (E, C, Fe) with Fe = F / G; w_gate, w_up (F, C),
     * w_down (C, F). The dense FFN is a sum over its hidden units,
     *   FFN(x) = sum_f w_down[:, f] silu(w_gate[f] . x) (w_up[f] . x),
     * so it is the sum of the G slices' partial FFNs. With gate weights 1/G on the G slices,
     * sum_s (1/G) * G * slice_s(x) = FFN(x): the factor G undoes the averaging. */
    int Fe = F / G;
    for (int e = 0; e < E; e++) {
        int first = (e % G) * Fe; /* the slice's first dense unit */
        size_t off = (size_t)e * Fe * C;
        memcpy(e_gate + off, w_gate + (size_t)first * C, (size_t)Fe * C * sizeof(float));
        memcpy(e_up + off, w_up + (size_t)first * C, (size_t)Fe * C * sizeof(float));
        for (int c = 0; c < C; c++)
            for (int j = 0; j < Fe; j++)
                e_down[off + (size_t)c * Fe + j] = (float)G * w_down[(size_t)c * F + first + j];
    }
}
