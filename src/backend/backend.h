/*
 * backend.h: the table of operations a training step runs on.
 *
 * model.c, the MoE block (model/moe_block.c) and the expert exchange (model/ep.c) are written
 * once, against this table: they hold buffers the backend allocated and call its operations,
 * never a kernel or a BLAS routine by name. A backend is chosen at run time by its name
 * (train.device):
 *
 *   cpu-ref  the plain reference of every op (nn/, moe/): loops a reader can follow line by
 *            line, the version the tests check gradients on. Slow, and runnable end to end.
 *   cpu      the fast CPU versions (cpu/: sgemm-based products and attention, the
 *            experts as GEMMs over their slices) and, where an op has a single CPU version,
 *            the reference one.
 *
 *   cpu-fenced  cpu's operations on memory the host cannot read (mprotect) except through
 *            to_host / to_device, as a GPU's: a program that reads a device's memory directly
 *            stops here, on any machine, instead of on a GPU (cpu/fenced.c).
 *   cuda     one NVIDIA GPU (a build of `make cuda`: the .cu files of cuda/): cuBLAS for the
 *            products, CUDA kernels for the rest; its memory is the GPU's (host_memory 0).
 *
 * tests/test_backend_ops.c runs every op of every backend against cpu-ref with one tolerance
 * rule, forward and backward, and tests/test_backend_grad.c checks the gradients of each
 * faster version.
 *
 * Every operation takes the backend first (a device backend keeps its stream and library
 * handles in ctx), then follows the conventions of nn/ops.h: outputs first, then inputs, then
 * weights, then dimensions; row-major float32; parameter gradients are ADDED to, activation
 * gradients WRITTEN; a NULL gradient pointer means "not wanted". Pointers are the backend's
 * memory (alloc): on the CPU backends that is host memory, so data moves with plain copies.
 *
 * Which memory each pointer is in, for a backend whose memory is not the host's (a GPU):
 *   device (the backend's: alloc, filled with to_device): every array argument (float *,
 *            int *, double *) unless named below, also an offset into such a buffer; the
 *            arrays of a DispatchPlan (counts, offsets, slot, slot_token); and of a MoeCtx,
 *            global_f (the aux loss's f, E floats) and work (the ops' scratch). An op reads
 *            them where it runs: a GPU's kernels read them in place, never copy them up.
 *   host:    the structures passed by pointer (MoeSpec, MoeCtx, DispatchPlan, AdamwStep,
 *            RouteStats, Dist), a MoeCtx's rng, dist and tape; to_device's host_src and
 *            to_host's host_dst; route_stats' host_out with its arrays (load, routed,
 *            dropped); route_domains' host_counts, host_drops and host_domains;
 *            gemm_seconds' seconds; and the collectives' counts and displacements.
 * cpu-fenced checks every pointer of every call against this list and stops, naming the op
 * and the argument, at one in the other memory (cpu/fenced.c).
 */
#ifndef MOE_BACKEND_H
#define MOE_BACKEND_H

#include <stddef.h>

#include "config/config.h"
#include "moe/moe_ops.h"
#include "nn/ops.h"
#include "parallel/dist.h"

typedef struct Backend Backend;

/* BACKEND_PARAMS (a, b, c) is a, b, c: an operation's parenthesised arguments in
 * backend_ops.h, opened after the backend */
#define BACKEND_PARAMS(...) __VA_ARGS__

struct Backend {
    const char *name;  /* as train.device spells it */
    const char *about; /* one line: what it runs on */
    void *ctx;         /* the implementation's own state; NULL for the CPU backends */
    int host_memory;   /* 1: its memory is the host's (the CPU backends), so the host may read
                          and write its buffers in place; else only through to_host/to_device */

    /* ---- memory --------------------------------------------------------------------------
     * alloc returns zeroed memory (never NULL: it ends the program with a message instead);
     * copy moves bytes inside the backend's memory, to_device / to_host between it and the
     * host; sync waits until every operation issued so far has finished. */
    void *(*alloc)(const Backend *be, size_t bytes);
    void (*free)(const Backend *be, void *p);
    void (*zero)(const Backend *be, void *p, size_t bytes);
    void (*copy)(const Backend *be, void *dst, const void *src, size_t bytes);
    void (*to_device)(const Backend *be, void *dst, const void *host_src, size_t bytes);
    void (*to_host)(const Backend *be, void *host_dst, const void *src, size_t bytes);
    void (*sync)(const Backend *be);

    /* ---- the operations, from the one list of them (backend_ops.h), in its order */
#define BACKEND_OP(name, params) void (*name)(const Backend *be, BACKEND_PARAMS params);
#include "backend/backend_ops.h"
#undef BACKEND_OP

    /* ---- collectives on the backend's own memory, across processes (dist.collectives=nccl)
     * NULL where the backend has none (every CPU table): a device's buffers are then staged
     * through the host and summed or exchanged by d's MPI collectives (model/ep.c,
     * model/grad_sync.c). coll_open sets them up for d's processes and groups (0, or -1 with
     * a message); a start enqueues the collective behind the ops issued so far and returns its
     * handle, coll_wait waits for it (within d->timeout_s, else the job ends naming it) and
     * counts its bytes and seconds in d->stats, as dist.h's collectives do. The exchange's
     * counts and displacements are host arrays, in floats, as for dist_alltoallv_f. */
    int (*coll_open)(const Backend *be, Dist *d, char *err, int errlen);
    void *(*coll_allreduce_sum_f_start)(const Backend *be, Dist *d, DistGroup g, float *x,
                                        size_t n);
    /* the halves of a sum, in place, each member's range dist_shard_range's (dist.h's
     * dist_reduce_scatter_f and dist_allgather_f on the device's memory) */
    void *(*coll_reduce_scatter_f_start)(const Backend *be, Dist *d, DistGroup g, float *x,
                                         size_t n);
    void *(*coll_allgather_f_start)(const Backend *be, Dist *d, DistGroup g, float *x, size_t n);
    void *(*coll_alltoallv_f_start)(const Backend *be, Dist *d, const float *send,
                                    const int *send_counts, const int *send_displs, float *recv,
                                    const int *recv_counts, const int *recv_displs);
    void (*coll_wait)(const Backend *be, Dist *d, void *op);
};

/* The CPU backends (backend/cpu/cpu.c), and cpu's operations behind a device's fence
 * (backend/cpu/fenced.c). */
extern const Backend backend_cpu, backend_cpu_ref, backend_cpu_fenced;

/* The registry (registry.c). The backend train.device names ("cpu", "cpu-ref", "cpu-fenced",
 * "cuda"), its products at precision (MOE_PRECISION_*: a GPU's; the CPU backends compute fp32
 * whatever it says), or NULL with a message: an unknown name (listing the backends), cuda in a
 * build without it (naming make cuda), or no GPU to open (the driver's words). */
const Backend *backend_get(const char *name, int precision, char *err, int errlen);
/* 1 when this build has the backend train.device names, without opening it (a GPU is not
 * touched: a process that forks must not start CUDA before it does); else 0 and backend_get's
 * message. */
int backend_in_build(const char *name, char *err, int errlen);
/* The backend of a config: its train.device at its train.precision (backend_get). */
const Backend *backend_of_config(const Config *c, char *err, int errlen);

/* The CUDA backend (backend/cuda/cuda.cu), in a build of `make cuda` (MOE_HAVE_CUDA): the GPU
 * is opened on the first call (device 0, one stream, one cuBLAS handle), NULL and the driver's
 * message when it cannot be; later calls set the precision and return the same table.
 * backend_cuda_describe: the GPU's name, SMs and precision once opened, else NULL. */
#if MOE_HAVE_CUDA
const Backend *backend_cuda_open(int precision, char *err, int errlen);
const char *backend_cuda_describe(void);
#endif

/* Bytes every backend has handed out through alloc since the start (never decremented):
 * tests compare it with the memory formula (model/memory.c). */
extern size_t backend_bytes_allocated;

/* The times cpu-fenced has made the host wait as a GPU would (cpu/fenced.c, "host reads"): its
 * to_host calls and the entries whose CUDA versions wait for the device. Never decremented;
 * the other backends leave it alone. */
extern long long backend_host_reads;

/* Threads of the CPU backends (OpenMP, and OpenBLAS's own pool): threads > 0 sets them, 0
 * keeps OpenMP's default. Returns the number in use. A build without OpenMP runs its own loops
 * on one thread and sets only the BLAS's pool (OpenBLAS's; Accelerate sizes its own). */
int backend_set_threads(int threads);

/* OpenBLAS picks its kernels once, when it loads, by the CPU it recognises. A CPU newer than
 * the library (OpenBLAS 0.3.21, Debian 12's, on a recent Xeon) is taken for an old one and
 * gets SSE3 kernels: sgemm at a fifth of its speed. backend_blas_core is the kernel set in
 * use ("Prescott", "SkylakeX", ...); backend_blas_better_core names a faster set this CPU can
 * run when the one in use is such a fallback ("SkylakeX" with AVX-512, "Haswell" with AVX2
 * and FMA), else NULL. The library reads OPENBLAS_CORETYPE when it loads: a program sets it
 * and runs itself again (src/cli/moe.c). */
const char *backend_blas_core(void);
const char *backend_blas_better_core(void);
/* The BLAS the build links: "OpenBLAS", or "Accelerate" (macOS without OpenBLAS; its core is
 * "vecLib" and it has no better one). */
const char *backend_blas_library(void);

/* The bytes of one route_stats_record for E experts, in any backend's layout (a head of at
 * most 64 bytes, then at most three ints or floats per expert, and three ints): whole words. */
static inline size_t route_record_bytes(int E) {
    return (64 + (3 * (size_t)E + 3) * 4 + 7) / 8 * 8;
}

/* Allocation helpers: n elements of a type, zeroed. */
static inline float *be_floats(const Backend *be, size_t n) {
    return (float *)be->alloc(be, n * sizeof(float));
}
static inline int *be_ints(const Backend *be, size_t n) {
    return (int *)be->alloc(be, n * sizeof(int));
}

#endif
