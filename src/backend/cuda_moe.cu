/*
 * cuda_moe.cu: the MoE block's device steps: router scores, top-k and gate weights, the
 * z-loss, the dropless dispatch plan, and the gather (permute) and weighted scatter (combine)
 * with their backward passes.
 *
 * The routing decision never leaves the device: scores, idx, w and the plan's arrays are
 * written by kernels and read by kernels, in stream order. Only the z-loss, a float the
 * caller wants on the host, waits for the stream once.
 *
 * The arithmetic lives in kernels_moe.h (shared with the host test, which walks each grid in
 * the same order); here are only the launch shapes and the device's cooperation (ballots,
 * shuffles, shared memory, barriers). Every result is deterministic: no atomics, each output
 * element has one owner thread, and every sum runs in a fixed order; the plan's integers equal
 * the CPU reference's (permute.c), ties in the top-k go to the lower expert as in router.c.
 *
 * Launch order of each entry, all on cuda_stream(be):
 *   router_scores_forward  k_scores        kmoe_grid(N) x KMOE_THREADS, a thread per token
 *   router_gate_forward    k_gate          kmoe_grid(N) x KMOE_THREADS, a thread per token
 *   router_z_loss          k_zloss         1 x KMOE_THREADS, then a copy of 8 bytes and a sync
 *   dispatch_plan_build    k_plan_rank     E x KMOE_THREADS, a block per expert
 *                          k_plan_offsets  1 x KMOE_THREADS
 *                          k_plan_place    kmoe_grid(N K) x KMOE_THREADS
 *   permute_forward        k_permute       S x kmoe_row_threads(C), a block per slot row
 *   permute_backward       k_permute_back  N x kmoe_row_threads(C), a block per token
 *   combine_forward        k_combine       N x kmoe_row_threads(C), a block per token
 *   combine_backward       k_combine_dye   S x kmoe_row_threads(C), a block per slot row
 *                          k_combine_dw    ceil(N A / KMOE_WARPS) x KMOE_THREADS, a warp per
 *                                          assignment
 */
#include "backend/cuda.cuh"
#include "backend/kernels_moe.h"

#define FULL_MASK 0xffffffffu

/* ---- router ------------------------------------------------------------------------------- */

static __global__ void __launch_bounds__(KMOE_THREADS)
    k_scores(float *scores, float *lse, const float *logits, int N, int E, int sigmoid) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    kmoe_scores_row(scores + (size_t)n * E, lse ? lse + n : NULL, logits + (size_t)n * E, E,
                    sigmoid);
}

void cuda_router_scores_forward(const Backend *be, float *scores, float *lse, const float *logits,
                                int N, const MoeSpec *s) {
    if (N <= 0) return;
    k_scores<<<kmoe_grid((size_t)N), KMOE_THREADS, 0, cuda_stream(be)>>>(
        scores, lse, logits, N, s->num_experts, s->score == MOE_SCORE_SIGMOID);
    CUDA_LAUNCHED();
}

static __global__ void __launch_bounds__(KMOE_THREADS)
    k_gate(int *idx, float *w, const float *scores, const float *logits, const float *bias, int N,
           int E, int K, int topk_first, int norm_topk, float rs) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    /* the logits row only exists for topk_first (the caller may pass NULL otherwise) */
    kmoe_gate_row(idx + (size_t)n * K, w + (size_t)n * K, scores + (size_t)n * E,
                  topk_first ? logits + (size_t)n * E : NULL, bias, E, K, topk_first, norm_topk,
                  rs);
}

void cuda_router_gate_forward(const Backend *be, int *idx, float *w, const float *scores,
                              const float *logits, const float *bias, int N, const MoeSpec *s) {
    if (N <= 0) return;
    k_gate<<<kmoe_grid((size_t)N), KMOE_THREADS, 0, cuda_stream(be)>>>(
        idx, w, scores, logits, bias, N, s->num_experts, s->top_k, s->topk_before_softmax,
        s->norm_topk, s->route_scale);
    CUDA_LAUNCHED();
}

/* One block: per-thread strided sums in double, then the shared-memory tree (kmoe_tree_sum's
 * pairing); thread 0 writes the total. */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_zloss(double *total, const float *lse, int N) {
    __shared__ double sh[KMOE_THREADS];
    const int t = threadIdx.x;
    sh[t] = kmoe_zloss_part(lse, N, t, KMOE_THREADS);
    __syncthreads();
    for (int off = KMOE_THREADS / 2; off > 0; off /= 2) {
        if (t < off) sh[t] += sh[t + off];
        __syncthreads();
    }
    if (t == 0) *total = sh[0];
}

float cuda_router_z_loss(const Backend *be, const float *lse, int N) {
    if (N <= 0) return 0.0f;
    cudaStream_t st = cuda_stream(be);
    double *d_total = (double *)cuda_scratch(be, sizeof(double));
    k_zloss<<<1, KMOE_THREADS, 0, st>>>(d_total, lse, N);
    CUDA_LAUNCHED();
    /* one value: a pageable copy on the stream, then the one sync this entry allows itself */
    double total = 0.0;
    CUDA_CHECK(cudaMemcpyAsync(&total, d_total, sizeof total, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    return kmoe_zloss_final(total, N);
}

/* ---- dispatch plan ------------------------------------------------------------------------ */

/* Block e: the rank of each assignment to e among all assignments to e, in (n, k) order, into
 * slot[j] (k_plan_place adds the slice's offset), and counts[e]. The chunk loop is uniform
 * over the block (every thread runs every iteration), so the full-mask ballot and the barriers
 * are legal. */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_plan_rank(int *counts, int *slot, const int *idx, size_t NK) {
    __shared__ int warp_hits[KMOE_WARPS];
    const int e = blockIdx.x, t = threadIdx.x, lane = t % MOE_WARP, wid = t / MOE_WARP;
    int run = 0; /* hits in the chunks before; the same in every thread */
    for (size_t base = 0; base < NK; base += KMOE_THREADS) {
        const size_t j = base + t;
        const int hit = kmoe_plan_hit(idx, NK, j, e);
        const unsigned mask = __ballot_sync(FULL_MASK, hit);
        if (lane == 0) warp_hits[wid] = kmoe_popc32(mask);
        __syncthreads();
        if (hit) slot[j] = run + kmoe_warps_before(warp_hits, wid) + kmoe_lane_rank(mask, lane);
        run += kmoe_warps_before(warp_hits, KMOE_WARPS);
        __syncthreads(); /* warp_hits is rewritten by the next chunk */
    }
    if (t == 0) counts[e] = run;
}

/* offsets (E + 1) = exclusive scan of counts (E), chunks of KMOE_THREADS in order, each an
 * inclusive Hillis-Steele scan in shared memory plus the carry of the chunks before. */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_plan_offsets(int *offsets, const int *counts, int E) {
    __shared__ int sh[KMOE_THREADS];
    const int t = threadIdx.x;
    int carry = 0;
    for (int base = 0; base < E; base += KMOE_THREADS) {
        const int v = base + t < E ? counts[base + t] : 0;
        sh[t] = v;
        __syncthreads();
        for (int d = 1; d < KMOE_THREADS; d *= 2) {
            const int add = kmoe_scan_addend(sh, t, d);
            __syncthreads();
            sh[t] += add;
            __syncthreads();
        }
        if (base + t < E) offsets[base + t] = carry + sh[t] - v;
        carry += sh[KMOE_THREADS - 1];
        __syncthreads(); /* everyone has read sh before the next chunk writes it */
    }
    if (t == 0) offsets[E] = carry;
}

static __global__ void __launch_bounds__(KMOE_THREADS)
    k_plan_place(int *slot, int *slot_token, const int *idx, const int *offsets, size_t NK, int E,
                 int K) {
    const size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < NK) kmoe_plan_place(slot, slot_token, idx, offsets, j, E, K);
}

void cuda_dispatch_plan_build(const Backend *be, DispatchPlan *p, const int *idx, int N) {
    /* the host struct records the sizes (as dispatch_plan_build does: S = offsets[E] = N K,
     * every assignment kept); its arrays are filled on the device */
    const int E = p->E, K = p->K;
    const size_t NK = (size_t)(N > 0 ? N : 0) * (size_t)K;
    cudaStream_t st = cuda_stream(be);
    if (E > 0) {
        k_plan_rank<<<E, KMOE_THREADS, 0, st>>>(p->counts, p->slot, idx, NK);
        CUDA_LAUNCHED();
        k_plan_offsets<<<1, KMOE_THREADS, 0, st>>>(p->offsets, p->counts, E);
        CUDA_LAUNCHED();
        if (NK > 0) {
            k_plan_place<<<kmoe_grid(NK), KMOE_THREADS, 0, st>>>(p->slot, p->slot_token, idx,
                                                                 p->offsets, NK, E, K);
            CUDA_LAUNCHED();
        }
    }
    p->N = N > 0 ? N : 0;
    p->S = (int)NK;
}

/* ---- permute and combine -------------------------------------------------------------------
 * Every kernel reads the plan the way permute.c does: A = p->K assignments per token (top_k,
 * or E for an expert-choice plan), slot -1 for a dropped one, slot_token -1 for a padding row,
 * p->N tokens and p->S slot rows. */

static __global__ void __launch_bounds__(KMOE_THREADS)
    k_permute(float *xe, const float *x, const int *slot_token, int C) {
    const int s = blockIdx.x;
    kmoe_permute_row(xe + (size_t)s * C, x, slot_token[s], C, threadIdx.x, blockDim.x);
}

void cuda_permute_forward(const Backend *be, float *xe, const float *x, const DispatchPlan *p,
                          int C) {
    if (p->S <= 0 || C <= 0) return;
    k_permute<<<p->S, kmoe_row_threads(C), 0, cuda_stream(be)>>>(xe, x, p->slot_token, C);
    CUDA_LAUNCHED();
}

static __global__ void __launch_bounds__(KMOE_THREADS)
    k_permute_back(float *dx, const float *dxe, const int *slot, int A, int C) {
    const int n = blockIdx.x;
    kmoe_permute_back_row(dx + (size_t)n * C, dxe, slot + (size_t)n * A, A, C, threadIdx.x,
                          blockDim.x);
}

void cuda_permute_backward(const Backend *be, float *dx, const float *dxe, const DispatchPlan *p,
                           int C) {
    if (p->N <= 0 || C <= 0) return;
    k_permute_back<<<p->N, kmoe_row_threads(C), 0, cuda_stream(be)>>>(dx, dxe, p->slot, p->K, C);
    CUDA_LAUNCHED();
}

static __global__ void __launch_bounds__(KMOE_THREADS)
    k_combine(float *y, const float *ye, const float *w, const int *slot, int A, int C) {
    const int n = blockIdx.x;
    kmoe_combine_row(y + (size_t)n * C, ye, w + (size_t)n * A, slot + (size_t)n * A, A, C,
                     threadIdx.x, blockDim.x);
}

void cuda_combine_forward(const Backend *be, float *y, const float *ye, const float *w,
                          const DispatchPlan *p, int C) {
    if (p->N <= 0 || C <= 0) return;
    k_combine<<<p->N, kmoe_row_threads(C), 0, cuda_stream(be)>>>(y, ye, w, p->slot, p->K, C);
    CUDA_LAUNCHED();
}

static __global__ void __launch_bounds__(KMOE_THREADS)
    k_combine_dye(float *dye, const float *dy, const float *w, const int *slot,
                  const int *slot_token, int A, int C) {
    const int s = blockIdx.x;
    kmoe_combine_dye_row(dye + (size_t)s * C, dy, w, slot, slot_token, s, A, C, threadIdx.x,
                         blockDim.x);
}

/* A warp per assignment j = (n, k): lane sums in double, then the shuffle-down tree; lane 0
 * writes dw[j] (0 for a dropped assignment). The early return is per warp, so the full-mask
 * shuffles always see all 32 lanes. */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_combine_dw(float *dw, const float *dy, const float *ye, const int *slot, size_t NA, int A,
                 int C) {
    const int lane = threadIdx.x % MOE_WARP;
    const size_t j = (size_t)blockIdx.x * KMOE_WARPS + threadIdx.x / MOE_WARP;
    if (j >= NA) return;
    const int s = slot[j];
    if (s < 0) {
        if (lane == 0) dw[j] = 0.0f;
        return;
    }
    const size_t n = j / (size_t)A;
    double v = kmoe_dot_lane(dy + n * C, ye + (size_t)s * C, C, lane, MOE_WARP);
    for (int off = MOE_WARP / 2; off > 0; off /= 2) v += __shfl_down_sync(FULL_MASK, v, off);
    if (lane == 0) dw[j] = (float)v;
}

void cuda_combine_backward(const Backend *be, float *dye, float *dw, const float *dy,
                           const float *ye, const float *w, const DispatchPlan *p, int C) {
    cudaStream_t st = cuda_stream(be);
    const int A = p->K;
    if (dye && p->S > 0 && C > 0) {
        k_combine_dye<<<p->S, kmoe_row_threads(C), 0, st>>>(dye, dy, w, p->slot, p->slot_token, A,
                                                            C);
        CUDA_LAUNCHED();
    }
    const size_t NA = (size_t)(p->N > 0 ? p->N : 0) * (size_t)A;
    if (dw && NA > 0) {
        const size_t blocks = (NA + KMOE_WARPS - 1) / KMOE_WARPS;
        k_combine_dw<<<(unsigned)blocks, KMOE_THREADS, 0, st>>>(dw, dy, ye, p->slot, NA, A, C);
        CUDA_LAUNCHED();
    }
}
