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

    /* ---- elementwise steps and sums (nn/vec.c) ----------------------------------------- */
    void (*add)(const Backend *be, float *y, const float *a, const float *b, size_t n);
    void (*mul)(const Backend *be, float *y, const float *a, const float *b, size_t n);
    void (*scale)(const Backend *be, float *x, float s, size_t n);
    /* y = x rounded to the nearest bfloat16, kept in float (vec_round_bf16): a bf16 router
     * emulated on any backend (moe.router_precision) */
    void (*round_bf16)(const Backend *be, float *y, const float *x, size_t n);
    /* *out (one double of the backend's memory) = the sum of x[0 .. n) in index order, in
     * double (the loss over the tokens): left where it is, so that a training step reads its
     * micro-batches' losses with one copy (model_read_step), not one wait each */
    void (*sum)(const Backend *be, double *out, const float *x, size_t n);
    /* *out (one double of the backend's memory) = the sum of squares, deterministic for any
     * thread count: fixed chunks of VEC_CHUNK into partial (vec_chunks(n) doubles of the
     * backend's memory), then the chunks in order. Left there, as sum's: the gradient norm
     * comes down with the step's other numbers (model_read_step) */
    void (*sum_squares)(const Backend *be, double *out, double *partial, const float *x, size_t n);
    /* x (N, C): x[n] = emb[tokens[n]]; backward demb (V, C) += dx scattered by token */
    void (*embed_forward)(const Backend *be, float *x, const int *tokens, const float *emb, int N,
                          int C);
    void (*embed_backward)(const Backend *be, float *demb, const float *dx, const int *tokens,
                           int N, int C);
    /* rows (n, C): out[to[i]] = in[i], or out[i] = in[to[i]] when back is set */
    void (*permute_rows)(const Backend *be, float *out, const float *in, const int *to, int n,
                         int C, int back);

    /* ---- the dense ops (nn/ops.h, same arguments) ----------------------------------------- */
    void (*matmul_forward)(const Backend *be, float *y, const float *x, const float *W, int N,
                           int IN, int OUT);
    void (*matmul_backward)(const Backend *be, float *dx, float *dW, const float *dy,
                            const float *x, const float *W, int N, int IN, int OUT);
    /* The router's product, logits (N, E) = x (N, C) Wr (E, C)^T, and its backward: matmul's
     * arguments, kept apart so that a backend computing the large products at a lower
     * precision (a GPU's tf32, bf16) computes this one in fp32 (selective precision: top-k is
     * decided on these logits). The CPU backends run their matmul. */
    void (*router_logits_forward)(const Backend *be, float *logits, const float *x, const float *Wr,
                                  int N, int C, int E);
    void (*router_logits_backward)(const Backend *be, float *dx, float *dWr, const float *dlogits,
                                   const float *x, const float *Wr, int N, int C, int E);
    void (*rmsnorm_forward)(const Backend *be, float *y, float *rstd, const float *x,
                            const float *w, int N, int C);
    void (*rmsnorm_backward)(const Backend *be, float *dx, float *dw, const float *dy,
                             const float *x, const float *w, const float *rstd, int N, int C);
    void (*rope_forward)(const Backend *be, float *x, const float *cs, int B, int T, int H, int D);
    void (*rope_backward)(const Backend *be, float *dx, const float *cs, int B, int T, int H,
                          int D);
    void (*attention_forward)(const Backend *be, float *out, float *att, const float *q,
                              const float *k, const float *v, int B, int T, int C, int H);
    void (*attention_backward)(const Backend *be, float *dq, float *dk, float *dv, float *ws,
                               const float *dout, const float *att, const float *q, const float *k,
                               const float *v, int B, int T, int C, int H, int n_ws);
    void (*swiglu_forward)(const Backend *be, float *h, const float *g, const float *u, int N,
                           int F);
    void (*swiglu_backward)(const Backend *be, float *dg, float *du, const float *dh,
                            const float *g, const float *u, int N, int F);
    void (*crossentropy_forward)(const Backend *be, float *losses, float *probs,
                                 const float *logits, const int *targets, int N, int V);
    void (*crossentropy_backward)(const Backend *be, float *dlogits, const float *probs,
                                  const int *targets, float scale, int N, int V);
    void (*adamw_update)(const Backend *be, float *p, float *g, float *m, float *v, size_t n,
                         const AdamwStep *s);

    /* ---- decoding (src/infer/decode.c): one new token per sequence; nothing trains, so these
     * have no backward. nn/ops.h's rope_forward_at and attention_decode, with pos and lens
     * (N) in the backend's memory. */
    void (*rope_forward_at)(const Backend *be, float *x, const float *cs, const int *pos, int N,
                            int H, int D);
    void (*attention_decode)(const Backend *be, float *out, float *att, const float *q,
                             const float *kc, const float *vc, const int *lens, int N, int C, int H,
                             int Tc);

    /* ---- the MoE ops (moe/moe_ops.h, same arguments) ------------------------------------
     * s, x and p are host structs; a plan's arrays, x->global_f and x->work are device memory,
     * x->rng, x->dist and x->tape host memory (the list at the top of this file) */
    void (*router_scores_forward)(const Backend *be, float *scores, float *lse, const float *logits,
                                  int N, const MoeSpec *s);
    void (*router_gate_forward)(const Backend *be, int *idx, float *w, const float *scores,
                                const float *logits, const float *bias, int N, const MoeSpec *s);
    /* the gate weights of experts already chosen (a replay of recorded routing) */
    void (*router_gate_weights)(const Backend *be, float *w, const int *idx, const float *scores,
                                const float *logits, int N, const MoeSpec *s);
    /* the balance and z losses into *out, one float of the backend's memory (read with the
     * step's other numbers: model_read_step) */
    void (*router_balance_loss)(const Backend *be, float *out, const float *scores, const int *idx,
                                int N, const MoeSpec *s, const MoeCtx *x);
    void (*router_z_loss)(const Backend *be, float *out, const float *lse, int N);
    void (*router_gate_backward)(const Backend *be, float *dlogits, const float *dw,
                                 const float *scores, const float *lse, const float *logits,
                                 const int *idx, const float *w, int N, const MoeSpec *s,
                                 const MoeCtx *x, float bal_scale, float z_scale);
    /* the dispatch plan: dropless, with a capacity, or chosen by the experts */
    void (*dispatch_plan_build)(const Backend *be, DispatchPlan *p, const int *idx, int N);
    void (*capacity_plan_build)(const Backend *be, DispatchPlan *p, const int *idx,
                                const float *scores, const float *w, int N, const MoeSpec *s,
                                const MoeCtx *x);
    void (*expert_choice_forward)(const Backend *be, int *idx, float *w, DispatchPlan *p,
                                  const float *scores, int N, const MoeSpec *s, const MoeCtx *x);
    void (*permute_forward)(const Backend *be, float *xe, const float *x, const DispatchPlan *p,
                            int C);
    void (*permute_backward)(const Backend *be, float *dx, const float *dxe, const DispatchPlan *p,
                             int C);
    void (*combine_forward)(const Backend *be, float *y, const float *ye, const float *w,
                            const DispatchPlan *p, int C);
    void (*combine_backward)(const Backend *be, float *dye, float *dw, const float *dy,
                             const float *ye, const float *w, const DispatchPlan *p, int C);
    /* All E experts' SwiGLU over their slices of the slot buffer, as one operation: expert e
     * owns rows [offsets[e], offsets[e + 1]); counts (E), when not NULL, is the number of kept
     * rows at the start of each slice (a padded plan: the rest are padding rows, computed as
     * their own product so that the kept rows round exactly as in an unpadded plan). */
    void (*experts_forward)(const Backend *be, float *ye, float *g, float *u, float *h,
                            const float *xe, const float *Wg, const float *Wu, const float *Wd,
                            const int *offsets, const int *counts, int E, int C, int F);
    void (*experts_backward)(const Backend *be, float *dxe, float *dWg, float *dWu, float *dWd,
                             float *dg, float *du, float *dh, const float *dye, const float *xe,
                             const float *g, const float *u, const float *h, const float *Wg,
                             const float *Wu, const float *Wd, const int *offsets,
                             const int *counts, int E, int C, int F);

    /* what a routing decision did, as host numbers (router.csv, domains.csv): the trainer
     * reads these, never the routing arrays. route_stats fills all of host_out (a host struct
     * with host arrays): route_stats of the decision, and the router_logit_stats of its logits
     * (N, E) and lse (N); route_domains adds to host_counts and host_drops by host_domains (N),
     * all three host arrays */
    void (*route_stats)(const Backend *be, RouteStats *host_out, const float *scores,
                        const float *logits, const float *lse, const int *idx,
                        const DispatchPlan *p, int N, const MoeSpec *s);
    /* route_stats left in the backend's memory, for a training step to read with its losses
     * in one copy (model_read_step): route_stats_record writes what route_stats would report
     * into rec (route_record_bytes(E) bytes of the backend's memory, in the backend's own
     * layout); route_stats_read turns a host copy of such a record into host_out, the numbers
     * route_stats fills, bit for bit. */
    void (*route_stats_record)(const Backend *be, void *rec, const float *scores,
                               const float *logits, const float *lse, const int *idx,
                               const DispatchPlan *p, int N, const MoeSpec *s);
    void (*route_stats_read)(const Backend *be, RouteStats *host_out, const void *host_rec,
                             const MoeSpec *s);
    void (*route_domains)(const Backend *be, double *host_counts, double *host_drops,
                          const unsigned char *host_domains, int n_domains, const int *idx,
                          const DispatchPlan *p, int N, const MoeSpec *s);

    /* router.csv's expert_sim of one MoE block into *out (one double of the backend's memory):
     * moe/experts.c's experts_similarity of Wg, Wu (E, F, C) and Wd (E, C, F), computed where
     * the weights are, so that a step does not copy every expert down to log one number */
    void (*experts_similarity)(const Backend *be, double *out, const float *Wg, const float *Wu,
                               const float *Wd, int E, int C, int F);

    /* ---- measurement ------------------------------------------------------------------------
     * The backend's own square product C (n, n) = A B (2 n^3 FLOPs), timed: one warm-up, then
     * reps products, seconds[r] (host memory) the wall time of each. The yardstick `moe bench`
     * measures a training step against. */
    void (*gemm_seconds)(const Backend *be, int n, int reps, double *seconds);

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
