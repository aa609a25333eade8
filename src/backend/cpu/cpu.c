/*
 * cpu.c: the two CPU backends' tables, and the CPU's threads and BLAS (backend.h).
 *
 *   cpu-ref  every entry is the reference of nn/ or moe/: plain loops.
 *   cpu      the same table with the fast versions of this folder where one exists (matmul,
 *            attention, the experts: sgemm); the other entries are shared.
 *
 * Each entry is a one-line adapter from the table's signature (the backend first) to the
 * function that does the work; the CPU backends keep no state of their own (ctx is NULL), and
 * their memory is host memory.
 */
#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

#include "backend/cpu/cpu.h"
#include "base/util.h"
#include "config/config.h"

#include "base/omp_compat.h"
#include "backend/cpu/blas.h" /* openblas_set_num_threads; last, for its macro I */

size_t backend_bytes_allocated = 0;

/* ---- memory: the host's --------------------------------------------------------------------- */

/* A block of at least HUGE_PAGE bytes starts on a 2 MiB boundary and is offered to the kernel
 * for transparent huge pages (madvise MADV_HUGEPAGE, for kernels that give them only on
 * request). The parameters, gradients, AdamW's moments and the activations are such blocks,
 * and a step streams through all of them: on 4 KiB pages that is a TLB miss every 4 KiB. The
 * kernel may decline; the memory and every result are the same either way. */
#define HUGE_PAGE ((size_t)2 << 20)

static void *host_alloc(const Backend *be, size_t bytes) {
    (void)be;
    backend_bytes_allocated += bytes;
#ifdef MADV_HUGEPAGE
    if (bytes >= HUGE_PAGE) {
        void *p = NULL;
        if (posix_memalign(&p, HUGE_PAGE, bytes) != 0)
            moe_fatal("out of memory allocating %zu bytes; use a smaller model or batch", bytes);
        madvise(p, bytes / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* whole 2 MiB pages only */
        return memset(p, 0, bytes);
    }
#endif
    return calloc_check(bytes ? bytes : 1, 1);
}
static void host_free(const Backend *be, void *p) {
    (void)be, free(p);
}
static void host_zero(const Backend *be, void *p, size_t bytes) {
    (void)be, memset(p, 0, bytes);
}
static void host_copy(const Backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (dst != src && bytes) memmove(dst, src, bytes);
}
static void host_sync(const Backend *be) {
    (void)be;
}

/* ---- the shared entries: one CPU version (nn/, moe/) ----------------------------------------- */

static void ref_add(const Backend *be, float *y, const float *a, const float *b, size_t n) {
    (void)be, vec_add(y, a, b, n);
}
static void ref_mul(const Backend *be, float *y, const float *a, const float *b, size_t n) {
    (void)be, vec_mul(y, a, b, n);
}
static void ref_scale(const Backend *be, float *x, float s, size_t n) {
    (void)be, vec_scale(x, s, n);
}
static void ref_round_bf16(const Backend *be, float *y, const float *x, size_t n) {
    (void)be, vec_round_bf16(y, x, n);
}
static void ref_sum(const Backend *be, double *out, const float *x, size_t n) {
    (void)be, *out = vec_sum(x, n);
}
static void ref_sum_squares(const Backend *be, double *out, double *partial, const float *x,
                            size_t n) {
    (void)be, *out = vec_sum_squares(partial, x, n);
}
static void ref_embed_forward(const Backend *be, float *x, const int *tokens, const float *emb,
                              int N, int C) {
    (void)be, embed_forward(x, tokens, emb, N, C);
}
static void ref_embed_backward(const Backend *be, float *demb, const float *dx, const int *tokens,
                               int N, int C, int V) {
    (void)be, (void)V, embed_backward(demb, dx, tokens, N, C);
}
static void ref_copy_block(const Backend *be, float *dst, int ldd, const float *src, int lds,
                           int rows, int width, int add) {
    (void)be, copy_block(dst, ldd, src, lds, rows, width, add);
}
static void ref_permute_rows(const Backend *be, float *out, const float *in, const int *to, int n,
                             int C, int back) {
    (void)be, permute_rows(out, in, to, n, C, back);
}
static void ref_matmul_forward(const Backend *be, float *y, const float *x, const float *W, int N,
                               int IN, int OUT) {
    (void)be, matmul_forward(y, x, W, N, IN, OUT);
}
static void ref_matmul_backward(const Backend *be, float *dx, float *dW, const float *dy,
                                const float *x, const float *W, int N, int IN, int OUT) {
    (void)be, matmul_backward(dx, dW, dy, x, W, N, IN, OUT);
}
/* the router's product: matmul's, in fp32 as every CPU product */
static void ref_router_logits_forward(const Backend *be, float *logits, const float *x,
                                      const float *Wr, int N, int C, int E) {
    ref_matmul_forward(be, logits, x, Wr, N, C, E);
}
static void ref_router_logits_backward(const Backend *be, float *dx, float *dWr,
                                       const float *dlogits, const float *x, const float *Wr, int N,
                                       int C, int E) {
    ref_matmul_backward(be, dx, dWr, dlogits, x, Wr, N, C, E);
}
static void ref_rmsnorm_forward(const Backend *be, float *y, float *rstd, const float *x,
                                const float *w, int N, int C) {
    (void)be, rmsnorm_forward(y, rstd, x, w, N, C);
}
static void ref_rmsnorm_backward(const Backend *be, float *dx, float *dw, const float *dy,
                                 const float *x, const float *w, const float *rstd, int N, int C) {
    (void)be, rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
}
static void ref_rope_forward(const Backend *be, float *x, const float *cs, int B, int T, int H,
                             int D) {
    (void)be, rope_forward(x, cs, B, T, H, D);
}
static void ref_rope_backward(const Backend *be, float *dx, const float *cs, int B, int T, int H,
                              int D) {
    (void)be, rope_backward(dx, cs, B, T, H, D);
}
static void ref_attention_forward(const Backend *be, float *out, float *att, const float *q,
                                  const float *k, const float *v, int B, int T, int H, int Hkv,
                                  int D, int Dv) {
    (void)be, attention_forward(out, att, q, k, v, B, T, H, Hkv, D, Dv);
}
static void ref_attention_backward(const Backend *be, float *dq, float *dk, float *dv, float *ws,
                                   const float *dout, const float *att, const float *q,
                                   const float *k, const float *v, int B, int T, int H, int Hkv,
                                   int D, int Dv, int n_ws) {
    (void)be, attention_backward(dq, dk, dv, ws, dout, att, q, k, v, B, T, H, Hkv, D, Dv, n_ws);
}
static void ref_rope_forward_at(const Backend *be, float *x, const float *cs, const int *pos, int N,
                                int H, int D) {
    (void)be, rope_forward_at(x, cs, pos, N, H, D);
}
static void ref_attention_decode(const Backend *be, float *out, float *att, const float *q,
                                 const float *kc, const float *vc, const int *rows, int N, int H,
                                 int Hkv, int D, int Dv, int Tc) {
    (void)be, attention_decode(out, att, q, kc, vc, rows, N, H, Hkv, D, Dv, Tc);
}
static void ref_swiglu_forward(const Backend *be, float *h, const float *g, const float *u, int N,
                               int F) {
    (void)be, swiglu_forward(h, g, u, N, F);
}
static void ref_swiglu_backward(const Backend *be, float *dg, float *du, const float *dh,
                                const float *g, const float *u, int N, int F) {
    (void)be, swiglu_backward(dg, du, dh, g, u, N, F);
}
static void ref_crossentropy_forward(const Backend *be, float *losses, float *probs,
                                     const float *logits, const int *targets, int N, int V) {
    (void)be, crossentropy_forward(losses, probs, logits, targets, N, V);
}
static void ref_crossentropy_backward(const Backend *be, float *dlogits, const float *probs,
                                      const int *targets, float scale, int N, int V) {
    (void)be, crossentropy_backward(dlogits, probs, targets, scale, N, V);
}
static void ref_adamw_update(const Backend *be, float *p, float *g, float *m, float *v, size_t n,
                             const AdamwStep *s) {
    (void)be, adamw_update(p, g, m, v, n, s);
}
static void ref_router_scores_forward(const Backend *be, float *scores, float *lse,
                                      const float *logits, int N, const MoeSpec *s) {
    (void)be, router_scores_forward(scores, lse, logits, N, s);
}
static void ref_router_gate_forward(const Backend *be, int *idx, float *w, const float *scores,
                                    const float *logits, const float *bias, int N,
                                    const MoeSpec *s) {
    (void)be, router_gate_forward(idx, w, scores, logits, bias, N, s);
}
static void ref_router_gate_weights(const Backend *be, float *w, const int *idx,
                                    const float *scores, const float *logits, int N,
                                    const MoeSpec *s) {
    (void)be, router_gate_weights(w, idx, scores, logits, N, s);
}
static void ref_router_balance_loss(const Backend *be, float *out, const float *scores,
                                    const int *idx, int N, const MoeSpec *s, const MoeCtx *x) {
    (void)be, *out = router_balance_loss(scores, idx, N, s, x);
}
static void ref_router_z_loss(const Backend *be, float *out, const float *lse, int N) {
    (void)be, *out = router_z_loss(lse, N);
}
static void ref_router_gate_backward(const Backend *be, float *dlogits, const float *dw,
                                     const float *scores, const float *lse, const float *logits,
                                     const int *idx, const float *w, int N, const MoeSpec *s,
                                     const MoeCtx *x, float bal_scale, float z_scale) {
    (void)be,
        router_gate_backward(dlogits, dw, scores, lse, logits, idx, w, N, s, x, bal_scale, z_scale);
}
static void ref_dispatch_plan_build(const Backend *be, DispatchPlan *p, const int *idx, int N) {
    (void)be, dispatch_plan_build(p, idx, N);
}
static void ref_capacity_plan_build(const Backend *be, DispatchPlan *p, const int *idx,
                                    const float *scores, const float *w, int N, const MoeSpec *s,
                                    const MoeCtx *x) {
    (void)be, capacity_plan_build(p, idx, scores, w, N, s, x);
}
static void ref_expert_choice_forward(const Backend *be, int *idx, float *w, DispatchPlan *p,
                                      const float *scores, int N, const MoeSpec *s,
                                      const MoeCtx *x) {
    (void)be, expert_choice_forward(idx, w, p, scores, N, s, x);
}
static void ref_permute_forward(const Backend *be, float *xe, const float *x, const DispatchPlan *p,
                                int C) {
    (void)be, permute_forward(xe, x, p, C);
}
static void ref_permute_backward(const Backend *be, float *dx, const float *dxe,
                                 const DispatchPlan *p, int C) {
    (void)be, permute_backward(dx, dxe, p, C);
}
static void ref_combine_forward(const Backend *be, float *y, const float *ye, const float *w,
                                const DispatchPlan *p, int C) {
    (void)be, combine_forward(y, ye, w, p, C);
}
static void ref_combine_backward(const Backend *be, float *dye, float *dw, const float *dy,
                                 const float *ye, const float *w, const DispatchPlan *p, int C) {
    (void)be, combine_backward(dye, dw, dy, ye, w, p, C);
}
static void ref_experts_forward(const Backend *be, float *ye, float *g, float *u, float *h,
                                const float *xe, const float *Wg, const float *Wu, const float *Wd,
                                const int *offsets, const int *counts, int E, int C, int F) {
    (void)be, experts_forward(ye, g, u, h, xe, Wg, Wu, Wd, offsets, counts, E, C, F);
}
static void ref_experts_backward(const Backend *be, float *dxe, float *dWg, float *dWu, float *dWd,
                                 float *dg, float *du, float *dh, const float *dye, const float *xe,
                                 const float *g, const float *u, const float *h, const float *Wg,
                                 const float *Wu, const float *Wd, const int *offsets,
                                 const int *counts, int E, int C, int F) {
    (void)be, experts_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd,
                               offsets, counts, E, C, F);
}

static void ref_route_stats(const Backend *be, RouteStats *out, const float *scores,
                            const float *logits, const float *lse, const int *idx,
                            const DispatchPlan *p, int N, const MoeSpec *s) {
    (void)be;
    route_stats(out, scores, idx, p, N, s);
    router_logit_stats(out, logits, lse, N, s->num_experts);
}
/* The CPU's record: route_stats' numbers themselves, so that reading them back is a copy. */
typedef struct {
    RouterStats st;
    float max_logit, lse_mean;
    double drop, pad;
} CpuRouteHead;
_Static_assert(sizeof(CpuRouteHead) <= 64, "route_record_bytes' head");
static RouteStats cpu_route_view(const void *rec, int E) {
    char *base = (char *)rec + 64;
    return (RouteStats){.E = E,
                        .load = (float *)base,
                        .routed = (int *)(base + (size_t)E * 4),
                        .dropped = (int *)(base + (size_t)E * 8)};
}
static void ref_route_stats_record(const Backend *be, void *rec, const float *scores,
                                   const float *logits, const float *lse, const int *idx,
                                   const DispatchPlan *p, int N, const MoeSpec *s) {
    RouteStats r = cpu_route_view(rec, s->num_experts);
    ref_route_stats(be, &r, scores, logits, lse, idx, p, N, s);
    *(CpuRouteHead *)rec = (CpuRouteHead){
        .st = r.st, .max_logit = r.max_logit, .lse_mean = r.lse_mean, .drop = r.drop, .pad = r.pad};
}
static void ref_route_stats_read(const Backend *be, RouteStats *out, const void *rec,
                                 const MoeSpec *s) {
    (void)be;
    const int E = s->num_experts;
    const CpuRouteHead *h = (const CpuRouteHead *)rec;
    const RouteStats r = cpu_route_view(rec, E);
    out->st = h->st, out->max_logit = h->max_logit, out->lse_mean = h->lse_mean;
    out->drop = h->drop, out->pad = h->pad;
    memcpy(out->load, r.load, (size_t)E * sizeof(float));
    memcpy(out->routed, r.routed, (size_t)E * sizeof(int));
    memcpy(out->dropped, r.dropped, (size_t)E * sizeof(int));
}
static void ref_experts_similarity(const Backend *be, double *out, const float *Wg, const float *Wu,
                                   const float *Wd, int E, int C, int F) {
    (void)be, *out = experts_similarity(Wg, Wu, Wd, E, C, F);
}
static void ref_route_domains(const Backend *be, double *counts, double *drops,
                              const unsigned char *domains, int n_domains, const int *idx,
                              const DispatchPlan *p, int N, const MoeSpec *s) {
    (void)be, route_domains(counts, drops, domains, n_domains, idx, p, N, s);
}

/* ---- the fast entries of cpu (cpu_gemm.c, attention_gemm.c) ---------------------------------- */

static void fast_matmul_forward(const Backend *be, float *y, const float *x, const float *W, int N,
                                int IN, int OUT) {
    (void)be, cpu_matmul_forward(y, x, W, N, IN, OUT);
}
static void fast_matmul_backward(const Backend *be, float *dx, float *dW, const float *dy,
                                 const float *x, const float *W, int N, int IN, int OUT) {
    (void)be, cpu_matmul_backward(dx, dW, dy, x, W, N, IN, OUT);
}
static void fast_attention_forward(const Backend *be, float *out, float *att, const float *q,
                                   const float *k, const float *v, int B, int T, int H, int Hkv,
                                   int D, int Dv) {
    (void)be, cpu_attention_forward(out, att, q, k, v, B, T, H, Hkv, D, Dv);
}
static void fast_attention_backward(const Backend *be, float *dq, float *dk, float *dv, float *ws,
                                    const float *dout, const float *att, const float *q,
                                    const float *k, const float *v, int B, int T, int H, int Hkv,
                                    int D, int Dv, int n_ws) {
    (void)be, cpu_attention_backward(dq, dk, dv, ws, dout, att, q, k, v, B, T, H, Hkv, D, Dv, n_ws);
}
static void fast_experts_forward(const Backend *be, float *ye, float *g, float *u, float *h,
                                 const float *xe, const float *Wg, const float *Wu, const float *Wd,
                                 const int *offsets, const int *counts, int E, int C, int F) {
    (void)be, cpu_experts_forward(ye, g, u, h, xe, Wg, Wu, Wd, offsets, counts, E, C, F);
}
static void fast_experts_backward(const Backend *be, float *dxe, float *dWg, float *dWu, float *dWd,
                                  float *dg, float *du, float *dh, const float *dye,
                                  const float *xe, const float *g, const float *u, const float *h,
                                  const float *Wg, const float *Wu, const float *Wd,
                                  const int *offsets, const int *counts, int E, int C, int F) {
    (void)be, cpu_experts_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd,
                                   offsets, counts, E, C, F);
}
/* the yardstick of both tables: sgemm, whichever table runs the products */
static void ref_gemm_seconds(const Backend *be, int n, int reps, double *seconds) {
    (void)be, cpu_sgemm_seconds(n, reps, seconds);
}

/* ---- the tables ----------------------------------------------------------------------------- */

/* memory, the host's, in both CPU tables */
#define CPU_MEMORY                                                                                 \
    .host_memory = 1, .alloc = host_alloc, .free = host_free, .zero = host_zero,                   \
    .copy = host_copy, .to_device = host_copy, .to_host = host_copy, .sync = host_sync

/* every operation of backend_ops.h as its reference, ref_NAME */
#define BACKEND_OP(name, params) .name = ref_##name,

const Backend backend_cpu_ref = {
    .name = "cpu-ref",
    .about = "the plain reference loops of every op (slow; the teaching version)",
    CPU_MEMORY,
#include "backend/backend_ops.h"
};

/* cpu: the reference's entries, then the fast versions over the eight that have one (a later
 * designator of the same member wins, C11 6.7.9: the warning for it is off here alone) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"
const Backend backend_cpu = {
    .name = "cpu",
    .about = "the CPU with OpenBLAS sgemm for the products and attention",
    CPU_MEMORY,
#include "backend/backend_ops.h"
    .matmul_forward = fast_matmul_forward,
    .matmul_backward = fast_matmul_backward,
    .router_logits_forward = fast_matmul_forward,
    .router_logits_backward = fast_matmul_backward,
    .attention_forward = fast_attention_forward,
    .attention_backward = fast_attention_backward,
    .experts_forward = fast_experts_forward,
    .experts_backward = fast_experts_backward,
};
#pragma GCC diagnostic pop
#undef BACKEND_OP

/* OpenBLAS's pool follows OpenMP's count. Without OpenMP the elementwise loops run on one
 * thread and BLAS keeps a pool of its own, which threads > 0 sizes where the library can be told
 * (OpenBLAS; Accelerate decides for itself). */
int backend_set_threads(int threads) {
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads(threads);
    const int n = omp_get_max_threads();
#if MOE_BLAS_OPENBLAS
    openblas_set_num_threads(n);
#endif
    return n;
#elif MOE_BLAS_OPENBLAS
    if (threads > 0) openblas_set_num_threads(threads);
    return openblas_get_num_threads();
#else
    return threads > 0 ? threads : 1;
#endif
}

const char *backend_blas_library(void) {
    return MOE_BLAS_OPENBLAS ? "OpenBLAS" : "Accelerate";
}

const char *backend_blas_core(void) {
#if MOE_BLAS_OPENBLAS
    return openblas_get_corename();
#else
    return "vecLib"; /* Accelerate's BLAS, which picks its kernels without telling */
#endif
}

#if MOE_BLAS_OPENBLAS && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The kernel sets of OpenBLAS's runtime choice (its dynamic.c) that have no AVX2 code: on a
 * CPU with AVX2 and FMA, the library fell back to one of them because it did not know the
 * model. (An x86 question: other processors keep the library's own choice.) */
static const char *const PRE_AVX2_CORES[] = {
    "unknown",   "katmai", "coppermine",  "northwood", "prescott",  "banias",     "atom",
    "core2",     "penryn", "dunnington",  "nehalem",   "athlon",    "opteron",    "opteron_sse3",
    "barcelona", "nano",   "sandybridge", "bobcat",    "bulldozer", "piledriver", "steamroller"};
#endif

const char *backend_blas_better_core(void) {
#if MOE_BLAS_OPENBLAS && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const char *core = openblas_get_corename();
    int fallback = 0;
    for (size_t i = 0; core && i < sizeof PRE_AVX2_CORES / sizeof PRE_AVX2_CORES[0]; i++)
        if (strcasecmp(core, PRE_AVX2_CORES[i]) == 0) fallback = 1;
    if (!fallback) return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return NULL;
}
