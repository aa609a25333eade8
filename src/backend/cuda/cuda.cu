/*
 * cuda.cu: the CUDA backend's table (train.device=cuda, a build of `make cuda`): opening the
 * GPU, its memory, the one routing entry that still runs on the host, and the table itself.
 *
 * The table's entries are spread over four files:
 *   cuda.cu       memory; the table; domains.csv's counts, on the host (below)
 *   cuda_gemm.cu  the products through cuBLAS: linear layers, attention, the experts
 *   cuda_nn.cu    the elementwise and row-wise dense ops
 *   cuda_moe.cu   the MoE block on the device: scores, top-k, the balance and z losses, the
 *                 router's backward, the dropless plan, gather, combine, the statistics
 *   cuda_plans.cu the plans that choose: with a capacity, and chosen by the experts
 *   cuda_nccl.cu  NCCL on the GPU's memory across processes (dist.collectives=nccl)
 *
 * Which routing entries run where. Every routing decision is made on the device: scores,
 * top-k and gate weights, the balance and z losses (a float each, left in the GPU's memory),
 * the router's backward, the three dispatch plans (dropless, capacity, expert choice), gather,
 * combine and the statistics for router.csv (a few numbers per expert, read with the step's
 * losses in one copy: model_read_step) are kernels,
 * and no routing array goes through the host (the experts' products take their slice sizes
 * from the host, one small copy per call: cuda_gemm.cu; an unpadded capacity plan brings its
 * row count back). Only domains.csv's per-domain counts, read once per evaluation, run here
 * as the CPU's own function between a download and the host arrays it fills (a "host entry").
 *
 * Nothing of this file has run on a GPU yet (src/BACKENDS.md, "The CUDA backend").
 */
#include "backend/cuda/cuda.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory --------------------------------------------------------------------------------- */

static void *cu_alloc(const Backend *be, size_t bytes) {
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err != cudaSuccess)
        moe_fatal("CUDA: out of GPU memory: %zu bytes asked for (%s)", bytes,
                  cudaGetErrorString(err));
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_stream(be)));
    backend_bytes_allocated += bytes;
    return p;
}
static void cu_free(const Backend *be, void *p) {
    if (!p) return;
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be))); /* nothing in flight still uses it */
    CUDA_CHECK(cudaFree(p));
}
static void cu_zero(const Backend *be, void *p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_stream(be)));
}
static void cu_copy(const Backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream(be)));
}
/* From pageable host memory the copy has read the source when the call returns, so the caller
 * may reuse its buffer at once. */
static void cu_to_device(const Backend *be, void *dst, const void *host_src, size_t bytes) {
    if (bytes)
        CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cuda_stream(be)));
}
/* The host reads the bytes when this returns: a wait for the stream. */
static void cu_to_host(const Backend *be, void *host_dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream(be)));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
}
static void cu_sync(const Backend *be) {
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
}

void *cuda_scratch(const Backend *be, size_t bytes) {
    CudaCtx *c = cuda_ctx(be);
    if (bytes > c->scratch_bytes) {
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        if (c->scratch) CUDA_CHECK(cudaFree(c->scratch));
        CUDA_CHECK(cudaMalloc(&c->scratch, bytes));
        c->scratch_bytes = bytes;
    }
    return c->scratch;
}

void *cuda_draws(const Backend *be, size_t bytes) {
    CudaCtx *c = cuda_ctx(be);
    if (bytes > c->draws_bytes) {
        free(c->draws);
        c->draws = malloc_check(bytes);
        c->draws_bytes = bytes;
    }
    return c->draws;
}

/* Pinned host memory: the copies to and from it run asynchronously on the stream. */
void *cuda_stage(const Backend *be, size_t bytes) {
    CudaCtx *c = cuda_ctx(be);
    if (bytes > c->stage_bytes) {
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        if (c->stage) CUDA_CHECK(cudaFreeHost(c->stage));
        CUDA_CHECK(cudaMallocHost(&c->stage, bytes));
        c->stage_bytes = bytes;
    }
    return c->stage;
}

/* ---- the host entry: the CPU's function on downloaded routing arrays --------------------------
 * The pinned staging buffer is carved (cuda.cuh's Carve) into the host copies one call needs. */

static Carve stage_begin(const Backend *be, size_t total) {
    Carve st = {(char *)cuda_stage(be, total), 0};
    return st;
}
/* a host copy of n elements of size es at device src (NULL stays NULL) */
static void *down(const Backend *be, Carve *st, const void *src, size_t n, size_t es) {
    if (!src || !n) return NULL;
    void *h = carve(st, n * es);
    CUDA_CHECK(cudaMemcpyAsync(h, src, n * es, cudaMemcpyDeviceToHost, cuda_stream(be)));
    return h;
}
static void wait_stream(const Backend *be) {
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
}

/* A host mirror of a plan for N tokens: its arrays in the staging buffer. */
static size_t plan_bytes(int N, int A, int E, size_t slots) {
    return carve_round((size_t)E * sizeof(int)) + carve_round((size_t)(E + 1) * sizeof(int)) +
           carve_round((size_t)N * A * sizeof(int)) + carve_round(slots * sizeof(int));
}
static DispatchPlan plan_host(Carve *st, const DispatchPlan *p, int N, int A, size_t slots) {
    DispatchPlan h = *p;
    h.counts = (int *)carve(st, (size_t)p->E * sizeof(int));
    h.offsets = (int *)carve(st, (size_t)(p->E + 1) * sizeof(int));
    h.slot = (int *)carve(st, (size_t)N * A * sizeof(int));
    h.slot_token = (int *)carve(st, slots * sizeof(int));
    return h;
}
static void plan_down(const Backend *be, DispatchPlan *h, const DispatchPlan *p, int N, int A) {
    size_t E = (size_t)p->E;
    CUDA_CHECK(cudaMemcpyAsync(h->counts, p->counts, E * sizeof(int), cudaMemcpyDeviceToHost,
                               cuda_stream(be)));
    CUDA_CHECK(cudaMemcpyAsync(h->offsets, p->offsets, (E + 1) * sizeof(int),
                               cudaMemcpyDeviceToHost, cuda_stream(be)));
    if (N > 0)
        CUDA_CHECK(cudaMemcpyAsync(h->slot, p->slot, (size_t)N * A * sizeof(int),
                                   cudaMemcpyDeviceToHost, cuda_stream(be)));
    if (p->S > 0)
        CUDA_CHECK(cudaMemcpyAsync(h->slot_token, p->slot_token, (size_t)p->S * sizeof(int),
                                   cudaMemcpyDeviceToHost, cuda_stream(be)));
}
static void cuda_route_domains(const Backend *be, double *counts, double *drops,
                               const unsigned char *domains, int n_domains, const int *idx,
                               const DispatchPlan *p, int N, const MoeSpec *s) {
    const int E = s->num_experts, A = moe_assignments_per_token(s);
    size_t slots = p->S > 0 ? (size_t)p->S : 1;
    Carve st = stage_begin(be, plan_bytes(N, A, E, slots) + carve_round((size_t)N * A * 4));
    DispatchPlan hp = plan_host(&st, p, N, A, slots);
    plan_down(be, &hp, p, N, A);
    const int *hi = (const int *)down(be, &st, idx, (size_t)N * A, sizeof(int));
    wait_stream(be);
    route_domains(counts, drops, domains, n_domains, hi, &hp, N, s);
}

/* ---- opening the backend -------------------------------------------------------------------- */

static CudaCtx the_ctx;
static Backend the_backend;
static int opened; /* 1 once the GPU is set up, -1 after a failure (its message kept) */
static char open_error[512];

static void fill_table(Backend *b) {
    b->name = "cuda";
    b->about = "one NVIDIA GPU: cuBLAS for the products, CUDA kernels for the rest";
    b->ctx = &the_ctx;
    b->host_memory = 0;
    b->alloc = cu_alloc, b->free = cu_free, b->zero = cu_zero, b->copy = cu_copy;
    b->to_device = cu_to_device, b->to_host = cu_to_host, b->sync = cu_sync;
    /* every operation of backend/backend_ops.h: cuda_NAME (cuda_gemm.cu, cuda_nn.cu, cuda_moe.cu,
     * cuda_plans.cu; route_domains, the host entry, above) */
#define BACKEND_OP(name, params) b->name = cuda_##name;
#include "backend/backend_ops.h"
#undef BACKEND_OP
#if MOE_HAVE_NCCL
    b->coll_open = cuda_coll_open;
    b->coll_allreduce_sum_f_start = cuda_coll_allreduce_sum_f_start;
    b->coll_reduce_scatter_f_start = cuda_coll_reduce_scatter_f_start;
    b->coll_allgather_f_start = cuda_coll_allgather_f_start;
    b->coll_alltoallv_f_start = cuda_coll_alltoallv_f_start;
    b->coll_wait = cuda_coll_wait;
#endif
}

static const char *precision_name(int precision) {
    return precision == MOE_PRECISION_TF32   ? "tf32"
           : precision == MOE_PRECISION_BF16 ? "bf16"
                                             : "fp32";
}

/* This process's index among the processes of its node, as the launcher numbers them (Open
 * MPI's mpirun, Slurm's srun, MPICH's and Intel MPI's hydra, PMIx); 0 when it is alone. */
static int local_rank(void) {
    static const char *const VARS[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                       "MPI_LOCALRANKID", "PMIX_LOCAL_RANK", "PMI_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++) {
        const char *v = getenv(VARS[i]);
        if (v && *v) return atoi(v) > 0 ? atoi(v) : 0;
    }
    return 0;
}

static int open_gpu(void) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        snprintf(open_error, sizeof open_error,
                 "train.device=cuda: no GPU to run on (the CUDA driver says: %s). Run on a "
                 "machine with an NVIDIA GPU and its driver, or use train.device=cpu",
                 err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device found");
        return -1;
    }
    CudaCtx *c = &the_ctx;
    /* one process per GPU: the node's processes take its visible GPUs in turn (a launcher
     * that shows each process one GPU, srun --gpus-per-task=1, leaves n = 1); more processes
     * than GPUs share them */
    c->device = local_rank() % n;
    cudaDeviceProp prop;
    if ((err = cudaSetDevice(c->device)) != cudaSuccess ||
        (err = cudaGetDeviceProperties(&prop, c->device)) != cudaSuccess ||
        (err = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(open_error, sizeof open_error,
                 "train.device=cuda: the GPU could not be set up (the CUDA runtime says: %s)",
                 cudaGetErrorString(err));
        return -1;
    }
    cublasStatus_t st = cublasCreate(&c->blas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(open_error, sizeof open_error,
                 "train.device=cuda: cuBLAS could not start (it says: %s)",
                 cublasGetStatusString(st));
        return -1;
    }
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    /* no atomics inside cuBLAS's products: the same bits on every run */
    CUBLAS_CHECK(cublasSetAtomicsMode(c->blas, CUBLAS_ATOMICS_NOT_ALLOWED));
    const char *experts = getenv("MOE_CUDA_EXPERTS");
    c->experts_loop = experts && strcmp(experts, "loop") == 0;
    snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
    c->sm_count = prop.multiProcessorCount;
    fill_table(&the_backend);
    return 1;
}

extern "C" const Backend *backend_cuda_open(int precision, char *err, int errlen) {
    if (!opened) opened = open_gpu();
    if (opened < 0) {
        set_error(err, errlen, "%s", open_error);
        return NULL;
    }
    the_ctx.precision = precision;
    return &the_backend;
}

extern "C" const char *backend_cuda_describe(void) {
    static char line[400];
    if (opened <= 0) return NULL;
    snprintf(line, sizeof line, "%s (%d SMs), %s products", the_ctx.device_name, the_ctx.sm_count,
             precision_name(the_ctx.precision));
    return line;
}
