/*
 * ops_util.h: what the dense-op tests share (test_ops.c, test_attention.c): random and NaN
 * buffers, the RoPE table and attention workspace as a model sizes them, and the weighted
 * sum L = sum(y * R) their gradient checks differentiate.
 */
#ifndef MOE_TEST_OPS_UTIL_H
#define MOE_TEST_OPS_UTIL_H

#include <math.h>
#include "base/omp_compat.h"
#include <stddef.h>

#include "base/util.h"
#include "nn/ops.h"
#include "testutil.h"

#define FD_EPS 1e-3f    /* finite-difference step */
#define ALL_PROBES 4096 /* sizes here are small: probe every element */

static inline float *rand_floats(size_t n, float scale, unsigned long long seed) {
    float *x = floats_alloc(n);
    fill_uniform(x, n, scale, seed);
    return x;
}

/* An activation-gradient buffer before backward: NaN everywhere, so an op that reads or
 * accumulates into it instead of writing it fails every comparison. */
static inline float *garbage_floats(size_t n) {
    float *x = floats_alloc(n);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

/* The RoPE cos/sin table (T_max, D/2, 2) of rope_table. */
static inline float *rope_cs_alloc(int T_max, int D, float theta) {
    float *cs = floats_alloc((size_t)T_max * D);
    rope_table(cs, T_max, D, theta);
    return cs;
}

/* Attention backward workspace: one (T, T) slice per thread, as a model sizes it. */
static inline int n_ws_threads(void) {
    return omp_get_max_threads();
}
static inline float *attn_ws_alloc(int T, int n_ws) {
    return floats_alloc((size_t)n_ws * T * T);
}

static inline double weighted_sum(const float *y, const float *R, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)y[i] * R[i];
    return s;
}

static inline void scale_copy(float *dst, const float *src, size_t n, float s) {
    for (size_t i = 0; i < n; i++) dst[i] = s * src[i];
}

#endif
