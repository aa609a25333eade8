/*
 * backend_util.h: what the backend tests share (test_backend_ops.c, test_backend_grad.c,
 * test_backend_coll.c, test_backend_cpu.c): the backends under test, and device buffers made
 * from host data.
 */
#ifndef MOE_TEST_BACKEND_UTIL_H
#define MOE_TEST_BACKEND_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/util.h"
#include "testutil.h"

/* Every backend of this build that can run here: the three CPU ones (cpu-fenced proves that
 * the tests move data only through to_device / to_host) and, in a CUDA build (make cuda), the
 * GPU's when a GPU is there. MOE_TEST_CUDA=1 (tests/gpu/run_device.sh) makes a GPU
 * that cannot be opened a failure instead of a skip. Filled on first use, inside a test: Check
 * runs each test in a child process, and a CUDA context does not survive a fork. */
static const Backend *backends_[4];
static int n_backends_ = -1;
static inline const Backend *const *backends_list(void) {
    if (n_backends_ >= 0) return backends_;
    n_backends_ = 0;
    backends_[n_backends_++] = &backend_cpu_ref;
    backends_[n_backends_++] = &backend_cpu;
    backends_[n_backends_++] = &backend_cpu_fenced;
#if MOE_HAVE_CUDA
    char err[512];
    const Backend *gpu = backend_get("cuda", MOE_PRECISION_FP32, err, sizeof err);
    const char *want = getenv("MOE_TEST_CUDA");
    if (gpu)
        backends_[n_backends_++] = gpu;
    else if (want && strcmp(want, "1") == 0)
        moe_fatal("MOE_TEST_CUDA=1, and the cuda backend does not open: %s", err);
#endif
    return backends_;
}
#define BACKENDS (backends_list())
#define N_BACKENDS ((void)backends_list(), n_backends_)

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
