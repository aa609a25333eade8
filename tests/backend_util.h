/*
 * backend_util.h: what the backend tests share (test_backend_ops.c, test_backend_grad.c): the
 * backends under test, and device buffers made from host data.
 */
#ifndef MOE_TEST_BACKEND_UTIL_H
#define MOE_TEST_BACKEND_UTIL_H

#include <stdlib.h>

#include "backend/backend.h"
#include "base/util.h"
#include "testutil.h"

/* Every backend of this build; a later one (a GPU's) joins here. */
static const Backend *const BACKENDS[] = {&backend_cpu_ref, &backend_cpu};
#define N_BACKENDS ((int)(sizeof BACKENDS / sizeof BACKENDS[0]))

/* Device buffers: a copy of host data, or uniform noise in [-scale, scale]; and release. */
static inline float *dev_copy(const Backend *be, const float *host, size_t n) {
    float *d = be_floats(be, n);
    be->to_device(be, d, host, n * sizeof(float));
    return d;
}
static inline int *dev_copy_i(const Backend *be, const int *host, size_t n) {
    int *d = be_ints(be, n);
    be->to_device(be, d, host, n * sizeof(int));
    return d;
}
static inline float *dev_rand(const Backend *be, size_t n, float scale, unsigned long long seed) {
    float *h = (float *)malloc_check(n * sizeof(float));
    fill_uniform(h, n, scale, seed);
    float *d = dev_copy(be, h, n);
    free(h);
    return d;
}
static inline void release(const Backend *be, void *p) {
    be->free(be, p);
}

#endif
