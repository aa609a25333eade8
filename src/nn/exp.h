/*
 * exp.h: exp for the elementwise loops (softmax, sigmoid, SwiGLU), written so that a loop
 * calling it vectorizes.
 *
 * The C library's expf is a call per element, which keeps the loops around it scalar: in a
 * SwiGLU pass over a few million elements, most of the time went to those calls. nn_expf is
 * the same function in a few lines of arithmetic that the compiler inlines and runs four lanes
 * at a time:
 *
 *   exp(x) = 2^n exp(r),  n = round(x / ln 2),  r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2]
 *
 * - n is rounded with the 1.5 x 2^23 trick: adding it pushes the fraction bits out of a
 *   float, in the current rounding mode (to nearest), and subtracting it back leaves round(y);
 * - r is taken in two steps, with ln 2 split into a part exact in a float (0.693359375) and
 *   the rest, so that n ln 2 is subtracted without losing r's bits (Cody and Waite);
 * - exp(r) = 1 + r + r^2 P(r), P the degree-5 polynomial of the Cephes library's expf
 *   (a minimax fit on that interval);
 * - 2^n is built in the exponent bits.
 * tests/test_ops.c measures it against exp in double over the whole range: at most 2 units in
 * the last place apart (expf itself is within 1).
 *
 * Edges: below -126 ln 2 (where exp(x) is a denormal float) it gives 0, above 127.5 ln 2
 * (within a factor 1.5 of float overflow) +inf; a NaN stays NaN. Every caller feeds it a
 * softmax's x - max <= 0 or a sigmoid's -g, for which both edges give the same result as expf
 * to float precision.
 *
 * The result depends only on x (no table, no rounding-mode change, no FMA in the baseline
 * instruction set), so runs stay bit-for-bit repeatable.
 */
#ifndef MOE_NN_EXP_H
#define MOE_NN_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float nn_expf(float x) {
    const float lo = -87.33654475f; /* -126 ln 2 */
    const float hi = 88.37626266f;  /* 127.5 ln 2: n <= 127 */
    float xc = x < lo ? lo : x; /* a NaN passes through both */
    xc = xc > hi ? hi : xc;
    const float round_magic = 12582912.0f;            /* 1.5 x 2^23 */
    const float n = (xc * 1.44269504088896341f + round_magic) - round_magic;
    const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float er = (p * r) * r + r + 1.0f;
    /* a NaN's n converts to no integer: 0 instead (er is already NaN, and so the result) */
    const int32_t bits = ((int32_t)(n == n ? n : 0.0f) + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    float y = er * two_n;
    y = x < lo ? 0.0f : y;
    y = x > hi ? (float)INFINITY : y;
    return y;
}

#endif
