/*
 * moe_util.h: what the tests of the MoE block share (test_moe.c, test_moe_block.c,
 * test_router.c): the finite-difference step, expert weights, and the smallest gap between a
 * token's logits, which a gradient check through top-k asserts up front.
 */
#ifndef MOE_TEST_MOE_UTIL_H
#define MOE_TEST_MOE_UTIL_H

#include <math.h>
#include <stddef.h>

#include "testutil.h"

#define EPS 1e-3f /* finite-difference step */

/* Expert weights Wg, Wu (E, F, C) and Wd (E, C, F), uniform in [-0.5, 0.5). */
static inline void fill_experts(float *Wg, float *Wu, float *Wd, int E, int F, int C,
                                unsigned seed) {
    fill_uniform(Wg, (size_t)E * F * C, 0.5f, seed);
    fill_uniform(Wu, (size_t)E * F * C, 0.5f, seed + 1);
    fill_uniform(Wd, (size_t)E * C * F, 0.5f, seed + 2);
}

/* Smallest gap between any two logits of one token: top-k (and its order) cannot change
 * under a perturbation that moves every logit by less than half of it. */
static inline float min_logit_gap(const float *logits, int N, int E) {
    float gap = INFINITY;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < E; i++)
            for (int j = i + 1; j < E; j++) {
                float d = fabsf(logits[n * E + i] - logits[n * E + j]);
                gap = d < gap ? d : gap;
            }
    return gap;
}

#endif
