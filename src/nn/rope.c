/*
 * rope.c: rotary position embedding (RoPE), in place on q or k laid out (B, T, H, D).
 *
 * Each head vector of D channels is read as D/2 pairs (x[2i], x[2i+1]), i.e. points in a
 * plane, and pair i at position t is rotated by the angle
 *
 *   a(t, i) = t * theta^(-2i / D)
 *
 *   x'[2i]   = x[2i] cos a - x[2i+1] sin a
 *   x'[2i+1] = x[2i] sin a + x[2i+1] cos a
 *
 * After rotating both q and k, q_t . k_s depends on the positions only through t - s, which
 * is how attention learns relative positions. Low pairs (i near 0) turn fast, high pairs
 * slowly, like the hands of a clock. D must be even.
 *
 * A rotation is orthogonal, so its transpose (the backward pass) is its inverse: the
 * rotation by -a, applied in place to the gradient.
 */
#include "nn/ops.h"

#include <math.h>

/* The angles are computed in double (t * freq reaches thousands of radians at long context,
 * where float loses the fraction), once per (t, i): the table is shared by every batch row,
 * head and call. */
void rope_table(float *cs, int T_max, int D, float theta) {
    /* cs (T_max, D/2, 2): cos a(t, i), sin a(t, i) */
    const int half = D / 2;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T_max; t++)
        for (int i = 0; i < half; i++) {
            double a = t * pow((double)theta, -2.0 * i / D);
            cs[((size_t)t * half + i) * 2] = (float)cos(a);
            cs[((size_t)t * half + i) * 2 + 1] = (float)sin(a);
        }
}

/* Rotate every pair of x (B, T, H, D) by sign * a(t, i), sign = +-1: cos(-a) = cos a and
 * sin(-a) = -sin a, so the opposite rotation only flips the sign of the table's sines (exact
 * in floating point). */
static void rope_rotate(float *x, const float *cs, int B, int T, int H, int D, float sign) {
    const int half = D / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *cst = cs + (size_t)t * half * 2;
            for (int h = 0; h < H; h++) {
                float *p = x + (((size_t)b * T + t) * H + h) * D;
                for (int i = 0; i < half; i++) {
                    float c = cst[2 * i], s = sign * cst[2 * i + 1];
                    float x0 = p[2 * i], x1 = p[2 * i + 1];
                    p[2 * i] = x0 * c - x1 * s;
                    p[2 * i + 1] = x0 * s + x1 * c;
                }
            }
        }
    }
}

void rope_forward(float *x, const float *cs, int B, int T, int H, int D) {
    /* x (B, T, H, D), rotated in place; cs (T, D/2, 2) from rope_table */
    rope_rotate(x, cs, B, T, H, D, 1.0f);
}

void rope_backward(float *dx, const float *cs, int B, int T, int H, int D) {
    /* dx (B, T, H, D): on entry dL/dx', on return dL/dx, in place; cs (T, D/2, 2).
     * forward: x' = R(a) x, so dx = R(a)^T dx' = R(-a) dx' -- written (overwritten in place) */
    rope_rotate(dx, cs, B, T, H, D, -1.0f);
}

void rope_forward_at(float *x, const float *cs, const int *pos, int N, int H, int D) {
    /* x (N, H, D): row n holds the heads of one token at position pos[n] */
    const int half = D / 2;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *cst = cs + (size_t)pos[n] * half * 2;
        for (int h = 0; h < H; h++) {
            float *p = x + ((size_t)n * H + h) * D;
            for (int i = 0; i < half; i++) {
                float c = cst[2 * i], s = cst[2 * i + 1];
                float x0 = p[2 * i], x1 = p[2 * i + 1];
                p[2 * i] = x0 * c - x1 * s;
                p[2 * i + 1] = x0 * s + x1 * c;
            }
        }
    }
}
