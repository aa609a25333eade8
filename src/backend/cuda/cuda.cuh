/*
 * cuda.cuh: what the CUDA backend's files share (cuda.cu, cuda_gemm.cu, cuda_nn.cu,
 * cuda_moe.cu, cuda_plans.cu, cuda_nccl.cu): the backend's state, the error check, the launch
 * shape, and the entries each file defines for the table that cuda.cu fills.
 *
 * One stream and one cuBLAS handle per backend: every operation is issued on that stream in
 * program order, so results repeat bit for bit for a build, a GPU model and its SM count.
 * Nothing here is included by a C file: the rest of the engine sees the backend only through
 * its table (backend.h) and backend_cuda_open.
 */
#ifndef MOE_BACKEND_CUDA_CUH
#define MOE_BACKEND_CUDA_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "backend/backend.h"
#include "base/util.h"
#include "moe/moe_ops.h"
#include "nn/ops.h"
}

/* The backend's state (Backend.ctx). */
typedef struct {
    int device;            /* the CUDA device ordinal */
    cudaStream_t stream;   /* every kernel, copy and cuBLAS call runs on it, in order */
    cublasHandle_t blas;   /* bound to stream */
    int precision;         /* MOE_PRECISION_*: the compute type of the large products */
    char device_name[256]; /* cudaDeviceProp.name */
    int sm_count;          /* multiprocessors */
    /* host staging for the entries that run on the host (the routing decisions of
     * cuda_route.cu): grown on first use to the largest call, then reused */
    void *stage;
    size_t stage_bytes;
    /* pageable host memory for values drawn on the host and copied up (the capacity plan's
     * uniforms): grown on first use, then reused; a copy from pageable memory has read it when
     * cudaMemcpyAsync returns, so the next call may write it at once */
    void *draws;
    size_t draws_bytes;
    /* device scratch of the entries that need some (rmsnorm's partial sums, a sum's result):
     * grown on first use, then reused */
    void *scratch;
    size_t scratch_bytes;
    /* the experts' grouped products (cuda_gemm.cu): their argument lists on the host, their
     * pointer arrays in pinned memory and on the device; grown on first use, then reused */
    void *group_host, *group_pinned, *group_dev;
    size_t group_host_bytes, group_pinned_bytes, group_dev_bytes;
    int experts_loop; /* MOE_CUDA_EXPERTS=loop: a product per expert instead (the first rung) */
} CudaCtx;

static inline CudaCtx *cuda_ctx(const Backend *be) {
    return (CudaCtx *)be->ctx;
}
static inline cudaStream_t cuda_stream(const Backend *be) {
    return cuda_ctx(be)->stream;
}

/* A failing CUDA or cuBLAS call is an internal failure: the message names the call and the
 * library's reason, and the program ends (moe_fatal). */
#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess)                                                                   \
            moe_fatal_at(__FILE__, __LINE__, "CUDA: %s: %s", #call, cudaGetErrorString(err_));     \
    } while (0)
#define CUBLAS_CHECK(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                          \
            moe_fatal_at(__FILE__, __LINE__, "cuBLAS: %s: %s", #call, cublasGetStatusString(st_)); \
    } while (0)
/* after a kernel launch: a bad launch configuration is reported where it happened */
#define CUDA_LAUNCHED() CUDA_CHECK(cudaGetLastError())

/* Threads per block of the one-dimensional kernels, and the blocks that cover n items. */
#define CUDA_THREADS 256
static inline unsigned cuda_blocks(size_t n) {
    size_t b = (n + CUDA_THREADS - 1) / CUDA_THREADS;
    return (unsigned)(b ? b : 1);
}

/* Scratch of the backend's memory, at least bytes, valid until the next call of either:
 * grown (after a sync) when too small. */
void *cuda_scratch(const Backend *be, size_t bytes);
void *cuda_stage(const Backend *be, size_t bytes);
void *cuda_draws(const Backend *be, size_t bytes);

/* A buffer cut into the pieces one call needs, each at a multiple of 64 bytes: carve takes the
 * next piece (0 bytes: NULL, nothing taken). carve_round is a piece's room, for sizing. */
typedef struct {
    char *base;
    size_t used;
} Carve;

static inline size_t carve_round(size_t bytes) {
    return (bytes + 63) / 64 * 64;
}
static inline void *carve(Carve *c, size_t bytes) {
    if (!bytes) return NULL;
    void *p = c->base + c->used;
    c->used += carve_round(bytes);
    return p;
}

/* One MoE entry's device scratch, carved into 64-byte aligned pieces: the block's MoeCtx.work
 * when the call brings one large enough (the memory formula counts it, and a step then
 * allocates nothing), else the backend's own scratch (tests and one-off callers pass no work). */
static inline Carve cuda_carve_begin(const Backend *be, const MoeCtx *x, size_t total) {
    Carve c = {NULL, 0};
    if (x && x->work && x->work_bytes >= total)
        c.base = (char *)x->work;
    else
        c.base = (char *)cuda_scratch(be, total);
    return c;
}

/* cuda_moe.cu: a plan's offsets (E + 1), the exclusive scan of its counts (E), one block on st
 * (the dropless and the capacity plan share it) */
void cuda_plan_offsets(cudaStream_t st, int *offsets, const int *counts, int E);

/* ---- the entries, by file ------------------------------------------------------------------ */

/* cuda_gemm.cu: the products through cuBLAS */
void cuda_matmul_forward(const Backend *be, float *y, const float *x, const float *W, int N, int IN,
                         int OUT);
void cuda_matmul_backward(const Backend *be, float *dx, float *dW, const float *dy, const float *x,
                          const float *W, int N, int IN, int OUT);
void cuda_router_logits_forward(const Backend *be, float *logits, const float *x, const float *Wr,
                                int N, int C, int E);
void cuda_router_logits_backward(const Backend *be, float *dx, float *dWr, const float *dlogits,
                                 const float *x, const float *Wr, int N, int C, int E);
void cuda_attention_forward(const Backend *be, float *out, float *att, const float *q,
                            const float *k, const float *v, int B, int T, int H, int Hkv, int D,
                            int Dv);
void cuda_attention_backward(const Backend *be, float *dq, float *dk, float *dv, float *ws,
                             const float *dout, const float *att, const float *q, const float *k,
                             const float *v, int B, int T, int H, int Hkv, int D, int Dv, int n_ws);
void cuda_experts_forward(const Backend *be, float *ye, float *g, float *u, float *h,
                          const float *xe, const float *Wg, const float *Wu, const float *Wd,
                          const int *offsets, const int *counts, int E, int C, int F);
void cuda_experts_backward(const Backend *be, float *dxe, float *dWg, float *dWu, float *dWd,
                           float *dg, float *du, float *dh, const float *dye, const float *xe,
                           const float *g, const float *u, const float *h, const float *Wg,
                           const float *Wu, const float *Wd, const int *offsets, const int *counts,
                           int E, int C, int F);
void cuda_gemm_seconds(const Backend *be, int n, int reps, double *seconds);

/* cuda_nn.cu: the elementwise and row-wise dense ops */
void cuda_add(const Backend *be, float *y, const float *a, const float *b, size_t n);
void cuda_mul(const Backend *be, float *y, const float *a, const float *b, size_t n);
void cuda_scale(const Backend *be, float *x, float s, size_t n);
void cuda_round_bf16(const Backend *be, float *y, const float *x, size_t n);
void cuda_sum(const Backend *be, double *out, const float *x, size_t n);
void cuda_sum_squares(const Backend *be, double *out, double *partial, const float *x, size_t n);
void cuda_embed_forward(const Backend *be, float *x, const int *tokens, const float *emb, int N,
                        int C);
void cuda_embed_backward(const Backend *be, float *demb, const float *dx, const int *tokens, int N,
                         int C, int V);
void cuda_copy_block(const Backend *be, float *dst, int ldd, const float *src, int lds, int rows,
                     int width, int add);
void cuda_permute_rows(const Backend *be, float *out, const float *in, const int *to, int n, int C,
                       int back);
void cuda_rmsnorm_forward(const Backend *be, float *y, float *rstd, const float *x, const float *w,
                          int N, int C);
void cuda_rmsnorm_backward(const Backend *be, float *dx, float *dw, const float *dy, const float *x,
                           const float *w, const float *rstd, int N, int C);
void cuda_rope_forward(const Backend *be, float *x, const float *cs, int B, int T, int H, int D);
void cuda_rope_backward(const Backend *be, float *dx, const float *cs, int B, int T, int H, int D);
void cuda_rope_forward_at(const Backend *be, float *x, const float *cs, const int *pos, int N,
                          int H, int D);
void cuda_attention_decode(const Backend *be, float *out, float *att, const float *q,
                           const float *kc, const float *vc, const int *rows, int N, int H, int Hkv,
                           int D, int Dv, int Tc);
void cuda_swiglu_forward(const Backend *be, float *h, const float *g, const float *u, int N, int F);
void cuda_swiglu_backward(const Backend *be, float *dg, float *du, const float *dh, const float *g,
                          const float *u, int N, int F);
void cuda_crossentropy_forward(const Backend *be, float *losses, float *probs, const float *logits,
                               const int *targets, int N, int V);
void cuda_crossentropy_backward(const Backend *be, float *dlogits, const float *probs,
                                const int *targets, float scale, int N, int V);
void cuda_adamw_update(const Backend *be, float *p, float *g, float *m, float *v, size_t n,
                       const AdamwStep *s);

/* cuda_moe.cu: the MoE block's device steps */
void cuda_router_scores_forward(const Backend *be, float *scores, float *lse, const float *logits,
                                int N, const MoeSpec *s);
void cuda_router_gate_forward(const Backend *be, int *idx, float *w, const float *scores,
                              const float *logits, const float *bias, int N, const MoeSpec *s);
/* cuda_nccl.cu (MOE_HAVE_NCCL): the Backend.coll_* entries, NCCL on the GPU's memory */
int cuda_coll_open(const Backend *be, Dist *d, char *err, int errlen);
void *cuda_coll_allreduce_sum_f_start(const Backend *be, Dist *d, DistGroup g, float *x, size_t n);
void *cuda_coll_reduce_scatter_f_start(const Backend *be, Dist *d, DistGroup g, float *x, size_t n);
void *cuda_coll_allgather_f_start(const Backend *be, Dist *d, DistGroup g, float *x, size_t n);
void *cuda_coll_alltoallv_f_start(const Backend *be, Dist *d, const float *send,
                                  const int *send_counts, const int *send_displs, float *recv,
                                  const int *recv_counts, const int *recv_displs);
void cuda_coll_wait(const Backend *be, Dist *d, void *op);
void cuda_router_gate_weights(const Backend *be, float *w, const int *idx, const float *scores,
                              const float *logits, int N, const MoeSpec *s);
void cuda_router_z_loss(const Backend *be, float *out, const float *lse, int N);
void cuda_dispatch_plan_build(const Backend *be, DispatchPlan *p, const int *idx, int N);
void cuda_permute_forward(const Backend *be, float *xe, const float *x, const DispatchPlan *p,
                          int C);
void cuda_permute_backward(const Backend *be, float *dx, const float *dxe, const DispatchPlan *p,
                           int C);
void cuda_combine_forward(const Backend *be, float *y, const float *ye, const float *w,
                          const DispatchPlan *p, int C);
void cuda_combine_backward(const Backend *be, float *dye, float *dw, const float *dy,
                           const float *ye, const float *w, const DispatchPlan *p, int C);
void cuda_router_balance_loss(const Backend *be, float *out, const float *scores, const int *idx,
                              int N, const MoeSpec *s, const MoeCtx *x);
void cuda_router_gate_backward(const Backend *be, float *dlogits, const float *dw,
                               const float *scores, const float *lse, const float *logits,
                               const int *idx, const float *w, int N, const MoeSpec *s,
                               const MoeCtx *x, float bal_scale, float z_scale);
void cuda_route_stats(const Backend *be, RouteStats *host_out, const float *scores,
                      const float *logits, const float *lse, const int *idx, const DispatchPlan *p,
                      int N, const MoeSpec *s);
void cuda_route_stats_record(const Backend *be, void *rec, const float *scores, const float *logits,
                             const float *lse, const int *idx, const DispatchPlan *p, int N,
                             const MoeSpec *s);
void cuda_route_stats_read(const Backend *be, RouteStats *host_out, const void *rec,
                           const MoeSpec *s);
void cuda_experts_similarity(const Backend *be, double *out, const float *Wg, const float *Wu,
                             const float *Wd, int E, int C, int F);
/* cuda_plans.cu: the plans that choose */
void cuda_capacity_plan_build(const Backend *be, DispatchPlan *p, const int *idx,
                              const float *scores, const float *w, int N, const MoeSpec *s,
                              const MoeCtx *x);
void cuda_expert_choice_forward(const Backend *be, int *idx, float *w, DispatchPlan *p,
                                const float *scores, int N, const MoeSpec *s, const MoeCtx *x);

#endif
