/*
 * registry.c: the backends by name (backend.h): the tables this build holds, and the CUDA
 * backend, opened on its first call, in a build of `make cuda`. A new backend joins the list
 * here; its table lives in a subfolder of its own (cpu/, cuda/).
 */
#include "backend/backend.h"

#include <string.h>

#include "base/util.h"
#include "config/config.h"

static const Backend *const BACKENDS[] = {&backend_cpu, &backend_cpu_ref, &backend_cpu_fenced};
#define N_BACKENDS ((int)(sizeof BACKENDS / sizeof BACKENDS[0]))

const Backend *backend_get(const char *name, int precision, char *err, int errlen) {
    for (int i = 0; i < N_BACKENDS; i++)
        if (strcmp(BACKENDS[i]->name, name) == 0) return BACKENDS[i];
    if (strcmp(name, "cuda") == 0) {
#if MOE_HAVE_CUDA
        return backend_cuda_open(precision, err, errlen);
#else
        set_error(
            err, errlen,
            "train.device=cuda: this binary was built without CUDA. Build the GPU one with "
            "`make cuda` (it needs the CUDA toolkit: nvcc and cuBLAS) and run build/cuda/moe");
        return NULL;
#endif
    }
    set_error(err, errlen,
              "no backend '%s': the backends are cpu (the default), cpu-ref, cpu-fenced and cuda",
              name);
    return NULL;
}

int backend_in_build(const char *name, char *err, int errlen) {
    for (int i = 0; i < N_BACKENDS; i++)
        if (strcmp(BACKENDS[i]->name, name) == 0) return 1;
    if (MOE_HAVE_CUDA && strcmp(name, "cuda") == 0) return 1;
    return backend_get(name, MOE_PRECISION_FP32, err, errlen) != NULL; /* its message */
}

const Backend *backend_of_config(const Config *c, char *err, int errlen) {
    static const char *const NAMES[] = {"cpu", "cpu-ref", "cuda", "cpu-fenced"};
    if (c->device < 0 || c->device > MOE_DEVICE_CPU_FENCED) {
        set_error(err, errlen, "train.device: no such backend (%d)", c->device);
        return NULL;
    }
    return backend_get(NAMES[c->device], c->precision, err, errlen);
}
