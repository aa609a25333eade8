/*
 * cuda_moe.cu: the MoE block's device steps: router scores, top-k and gate weights, the
 * balance loss and the z-loss, the router's backward, the dropless dispatch plan, the gather
 * (permute) and weighted scatter (combine) with their backward passes, and the routing
 * statistics. The other two plans (with a capacity, chosen by the experts) are in
 * cuda_plans.cu.
 *
 * The routing decision never leaves the device: scores, idx, w and the plan's arrays are
 * written by kernels and read by kernels, in stream order. The two losses stay in the GPU's
 * memory (a float each, where the caller says), and so do the statistics in training
 * (route_stats_record: a few sums and two ints per expert, finished on the host when the
 * trainer copies a step's numbers down at once, route_stats_read). Only route_stats, which
 * fills host numbers at once, and the slot rows of a packed capacity plan (one int: the caller
 * sizes the next ops by it) wait for the stream, once per call. The random second
 * expert's uniforms go the other way: drawn on the host from the run's stream, one copy up.
 *
 * The arithmetic lives in kernels_moe.h and kernels_route.h (shared with the host tests, which walk
 * each grid in the same order); here are only the launch shapes and the device's cooperation
 * (ballots, shuffles, shared memory, barriers). Every result is deterministic: no float atomics
 * (the only atomics are the radix select's integer bin counts, the same in any order), each output
 * element has one owner thread, and every sum runs in a fixed order; the plans' integers equal
 * the CPU reference's (permute.c, capacity.c, expert_choice.c), ties in the top-k go to the
 * lower expert as in router.c, ties for a budget to the lower token as in the plans' sorts.
 *
 * Launch order of each entry, all on cuda_stream(be):
 *   router_scores_forward  k_scores        kmoe_grid(N) x KMOE_THREADS, a thread per token
 *   router_gate_forward    k_gate          kmoe_grid(N) x KMOE_THREADS, a thread per token
 *   router_gate_weights    k_gate_weights  kmoe_grid(N) x KMOE_THREADS, a thread per token
 *   router_z_loss          k_zloss         1 x KMOE_THREADS, the float left in the GPU's memory
 *   dispatch_plan_build    k_plan_rank     E x KMOE_THREADS, a block per expert
 *                          k_plan_offsets  1 x KMOE_THREADS
 *                          k_plan_place    kmoe_grid(N K) x KMOE_THREADS
 *   permute_forward        k_permute       S x kmoe_row_threads(C), a block per slot row
 *   permute_backward       k_permute_back  N x kmoe_row_threads(C), a block per token
 *   combine_forward        k_combine       N x kmoe_row_threads(C), a block per token
 *   combine_backward       k_combine_dye   S x kmoe_row_threads(C), a block per slot row
 *                          k_combine_dw    ceil(N A / KMOE_WARPS) x KMOE_THREADS, a warp per
 *                                          assignment
 *   router_balance_loss    k_score_sums    kmoe_grid(N) x KMOE_THREADS (sigmoid only)
 *                          k_expert_parts  kmoe_grid(P) x KMOE_THREADS, a thread per part,
 *                                          P = rows x chunks x E
 *                          k_bal_loss      1 x KMOE_THREADS, the float left in the GPU's memory
 *   router_gate_backward   k_expert_parts  as above, hits only (aux and seq_aux, no global f)
 *                          k_bal_coef      kmoe_grid(rows E) x KMOE_THREADS (aux and seq_aux)
 *                          k_gate_back     kmoe_grid(N) x KMOE_THREADS, a thread per token
 *   route_stats            k_stats_tokens  kmoe_grid(N) x KMOE_THREADS, a thread per token
 *                          k_expert_parts  as above, one row, hits and drops (token choice)
 *                          k_stats_final   1 x KMOE_THREADS
 *                          k_logit_stats   1 x KMOE_THREADS, then one copy and a sync
 */
#include "backend/cuda/cuda.cuh"
#include "backend/cuda/kernels_moe.h"
#include "backend/cuda/kernels_route.h"

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
           int E, int K, int G, int KG, int topk_first, int norm_topk, float rs) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    /* the logits row only exists for topk_first (the caller may pass NULL otherwise) */
    router_gate_row(idx + (size_t)n * K, w + (size_t)n * K, scores + (size_t)n * E,
                    topk_first ? logits + (size_t)n * E : NULL, bias, E, K, G, KG, topk_first,
                    norm_topk, rs);
}

void cuda_router_gate_forward(const Backend *be, int *idx, float *w, const float *scores,
                              const float *logits, const float *bias, int N, const MoeSpec *s) {
    if (N <= 0) return;
    k_gate<<<kmoe_grid((size_t)N), KMOE_THREADS, 0, cuda_stream(be)>>>(
        idx, w, scores, logits, bias, N, s->num_experts, s->top_k, s->n_group, s->topk_group,
        s->topk_before_softmax, s->norm_topk, s->route_scale);
    CUDA_LAUNCHED();
}

/* The weights of chosen experts (a replay): the second half of k_gate. */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_gate_weights(float *w, const int *idx, const float *scores, const float *logits, int N, int E,
                   int K, int topk_first, int norm_topk, float rs) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    router_gate_weights_row(w + (size_t)n * K, idx + (size_t)n * K, scores + (size_t)n * E,
                            topk_first ? logits + (size_t)n * E : NULL, K, topk_first, norm_topk,
                            rs);
}

void cuda_router_gate_weights(const Backend *be, float *w, const int *idx, const float *scores,
                              const float *logits, int N, const MoeSpec *s) {
    if (N <= 0) return;
    k_gate_weights<<<kmoe_grid((size_t)N), KMOE_THREADS, 0, cuda_stream(be)>>>(
        w, idx, scores, logits, N, s->num_experts, s->top_k, s->topk_before_softmax, s->norm_topk,
        s->route_scale);
    CUDA_LAUNCHED();
}

/* One block: per-thread strided sums in double, then the shared-memory tree (kmoe_tree_sum's
 * pairing); thread 0 writes the loss (kmoe_zloss_final of the total). */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_zloss(float *out, const float *lse, int N) {
    __shared__ double sh[KMOE_THREADS];
    const int t = threadIdx.x;
    sh[t] = kmoe_zloss_part(lse, N, t, KMOE_THREADS);
    __syncthreads();
    for (int off = KMOE_THREADS / 2; off > 0; off /= 2) {
        if (t < off) sh[t] += sh[t + off];
        __syncthreads();
    }
    if (t == 0) *out = kmoe_zloss_final(sh[0], N);
}

/* The loss stays in the GPU's memory (out): nothing waits here; the trainer reads the step's
 * losses with one copy at its end (model_read_step). */
void cuda_router_z_loss(const Backend *be, float *out, const float *lse, int N) {
    cudaStream_t st = cuda_stream(be);
    if (N <= 0) {
        CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), st));
        return;
    }
    k_zloss<<<1, KMOE_THREADS, 0, st>>>(out, lse, N);
    CUDA_LAUNCHED();
}

/* One block, as k_zloss: each thread its tokens' largest |logit| and lse sum, then the shared
 * trees; thread 0 writes the maximum and the sum (into route_stats' head). */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_logit_stats(float *largest, double *total, const float *logits, const float *lse, int N,
                  int E) {
    __shared__ float shm[KMOE_THREADS];
    __shared__ double shs[KMOE_THREADS];
    const int t = threadIdx.x;
    kmoe_logit_stats_part(&shm[t], &shs[t], logits, lse, N, E, t, KMOE_THREADS);
    __syncthreads();
    for (int off = KMOE_THREADS / 2; off > 0; off /= 2) {
        if (t < off) shm[t] = fmaxf(shm[t], shm[t + off]), shs[t] += shs[t + off];
        __syncthreads();
    }
    if (t == 0) *largest = shm[0], *total = shs[0];
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

void cuda_plan_offsets(cudaStream_t st, int *offsets, const int *counts, int E) {
    k_plan_offsets<<<1, KMOE_THREADS, 0, st>>>(offsets, counts, E);
    CUDA_LAUNCHED();
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
        cuda_plan_offsets(st, p->offsets, p->counts, E);
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

/* ---- balance loss, the router's backward, route statistics ----------------------------------
 * The column sums of kernels_moe.h's "parts" and "totals" (a thread per (row, chunk, expert),
 * then a thread per (row, expert) over the chunks in order), a thread per token for the
 * backward, and one block's tree for each scalar. */

/* seq_aux needs whole sequences: the reference's check and words (router_balance.c) */
static void check_sequences(const MoeCtx *x, int N) {
    if (x->T <= 0 || N % x->T != 0)
        moe_fatal("seq_aux balance: %d tokens are not whole sequences of T = %d (set MoeCtx.T)", N,
                  x->T);
}

/* a thread per token: S = the sum of its scores (sigmoid's normaliser of q) */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_score_sums(double *ssum, const float *scores, int N, int E) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) ssum[n] = kmoe_row_sum(scores + (size_t)n * E, E);
}

/* a thread per part (row, chunk, expert): kmoe_expert_part */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_expert_parts(double *pq, int *ph, int *pd, const float *scores, const double *ssum,
                   const int *idx, const int *slot, size_t nparts, int Tr, int nchunk, int E,
                   int K) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nparts) kmoe_expert_part(pq, ph, pd, i, scores, ssum, idx, slot, Tr, nchunk, E, K);
}

/* One block: thread t's (row, expert) pairs in double (kmoe_bal_part), then the shared tree
 * (kmoe_tree_sum's pairing); thread 0 writes the total. */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_bal_loss(float *out, const double *pq, const int *ph, const float *gf, int rows, int Tr,
               int nchunk, int E, int K) {
    __shared__ double sh[KMOE_THREADS];
    const int t = threadIdx.x;
    sh[t] = kmoe_bal_part(pq, ph, gf, rows, Tr, nchunk, E, K, t, KMOE_THREADS);
    __syncthreads();
    for (int off = KMOE_THREADS / 2; off > 0; off /= 2) {
        if (t < off) sh[t] += sh[t + off];
        __syncthreads();
    }
    if (t == 0) *out = kmoe_bal_final(sh[0], rows, E);
}

/* The loss stays in the GPU's memory (out), as router_z_loss's. */
void cuda_router_balance_loss(const Backend *be, float *out, const float *scores, const int *idx,
                              int N, const MoeSpec *s, const MoeCtx *x) {
    if (N <= 0) {
        CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), cuda_stream(be)));
        return;
    }
    const int E = s->num_experts, K = s->top_k, sig = s->score == MOE_SCORE_SIGMOID;
    const int seq = s->balance == MOE_BALANCE_SEQ_AUX;
    if (seq) check_sequences(x, N);
    int Tr;
    const int rows = kmoe_bal_rows(seq, N, x->T, &Tr), nchunk = kmoe_chunks(Tr);
    const size_t nparts = (size_t)rows * nchunk * E;
    /* aux, aux_free and none: the Switch value, f from outside when given; seq_aux: its own.
     * MoeCtx.global_f is the backend's memory (backend.h): the kernels read it in place */
    const float *gf = seq ? NULL : x->global_f;
    Carve c = cuda_carve_begin(be, x,
                               carve_round(sig ? (size_t)N * sizeof(double) : 0) +
                                   carve_round(nparts * sizeof(double)) +
                                   carve_round(gf ? 0 : nparts * sizeof(int)));
    double *ssum = (double *)carve(&c, sig ? (size_t)N * sizeof(double) : 0);
    double *pq = (double *)carve(&c, nparts * sizeof(double));
    int *ph = (int *)carve(&c, gf ? 0 : nparts * sizeof(int));
    cudaStream_t st = cuda_stream(be);
    if (sig) {
        k_score_sums<<<kmoe_grid((size_t)N), KMOE_THREADS, 0, st>>>(ssum, scores, N, E);
        CUDA_LAUNCHED();
    }
    k_expert_parts<<<kmoe_grid(nparts), KMOE_THREADS, 0, st>>>(pq, ph, NULL, scores, ssum, idx,
                                                               NULL, nparts, Tr, nchunk, E, K);
    CUDA_LAUNCHED();
    k_bal_loss<<<1, KMOE_THREADS, 0, st>>>(out, pq, ph, gf, rows, Tr, nchunk, E, K);
    CUDA_LAUNCHED();
}

/* a thread per (row, expert): router_balance_coef's coefficient */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_bal_coef(float *coef, const int *ph, const float *gf, size_t ncoef, int Tr, int nchunk, int E,
               int K, float per) {
    const size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < ncoef) coef[j] = kmoe_bal_coef(ph, gf, j, Tr, nchunk, E, K, per);
}

/* a thread per token: kmoe_gate_back_row with its row of coefficients (row n / T of rows > 1:
 * seq_aux's sequences; row 0 otherwise; none without a balance loss) */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_gate_back(float *dlogits, const float *dw, const float *scores, const float *lse,
                const float *logits, const int *idx, const float *w, const float *coef, int N,
                int E, int K, int rows, int T, int sigmoid, int topk_first, int norm_topk, float rs,
                float z_per) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float *g = coef ? coef + (size_t)(rows > 1 ? n / T : 0) * E : NULL;
    /* the logits row only for sigmoid (the caller may pass NULL otherwise) */
    kmoe_gate_back_row(dlogits + (size_t)n * E, dw + (size_t)n * K, scores + (size_t)n * E,
                       sigmoid ? logits + (size_t)n * E : NULL, lse[n], idx + (size_t)n * K,
                       w + (size_t)n * K, g, E, K, sigmoid, topk_first, norm_topk, rs, z_per);
}

void cuda_router_gate_backward(const Backend *be, float *dlogits, const float *dw,
                               const float *scores, const float *lse, const float *logits,
                               const int *idx, const float *w, int N, const MoeSpec *s,
                               const MoeCtx *x, float bal_scale, float z_scale) {
    if (N <= 0) return;
    const int E = s->num_experts, K = s->top_k, sig = s->score == MOE_SCORE_SIGMOID;
    const int seq = s->balance == MOE_BALANCE_SEQ_AUX;
    const int has_loss = seq || s->balance == MOE_BALANCE_AUX;
    cudaStream_t st = cuda_stream(be);
    float *coef = NULL;
    int rows = 0;
    if (has_loss) {
        if (seq) check_sequences(x, N);
        int Tr;
        rows = kmoe_bal_rows(seq, N, x->T, &Tr);
        const int nchunk = kmoe_chunks(Tr);
        const size_t nparts = (size_t)rows * nchunk * E, ncoef = (size_t)rows * E;
        /* f from outside (the backend's memory, read in place), else counted here from idx */
        const float *gf = seq ? NULL : x->global_f;
        Carve c = cuda_carve_begin(
            be, x, carve_round(ncoef * sizeof(float)) + carve_round(gf ? 0 : nparts * sizeof(int)));
        coef = (float *)carve(&c, ncoef * sizeof(float));
        int *ph = (int *)carve(&c, gf ? 0 : nparts * sizeof(int));
        if (!gf) {
            k_expert_parts<<<kmoe_grid(nparts), KMOE_THREADS, 0, st>>>(
                NULL, ph, NULL, NULL, NULL, idx, NULL, nparts, Tr, nchunk, E, K);
            CUDA_LAUNCHED();
        }
        k_bal_coef<<<kmoe_grid(ncoef), KMOE_THREADS, 0, st>>>(
            coef, ph, gf, ncoef, Tr, nchunk, E, K, kmoe_coef_per(bal_scale, E, rows, Tr));
        CUDA_LAUNCHED();
    }
    const int T = seq ? x->T : N;
    k_gate_back<<<kmoe_grid((size_t)N), KMOE_THREADS, 0, st>>>(
        dlogits, dw, scores, lse, logits, idx, w, coef, N, E, K, rows, T, sig,
        s->topk_before_softmax, s->norm_topk, s->route_scale, z_scale * 2.0f / (float)N);
    CUDA_LAUNCHED();
}

/* The statistics' three sums over one block: thread t's values into the shared arrays, then
 * the pairwise tree (halves added, KMOE_THREADS / 2 first); the block's sums end in [0]. Every
 * thread of the block calls it (it holds __syncthreads). */
static __device__ void stats_tree(double *sh_ent, double *sh_top, int *sh_un, int t, double ent,
                                  double top, int un) {
    sh_ent[t] = ent, sh_top[t] = top, sh_un[t] = un;
    __syncthreads();
    for (int off = KMOE_THREADS / 2; off > 0; off /= 2) {
        if (t < off) {
            sh_ent[t] += sh_ent[t + off];
            sh_top[t] += sh_top[t + off];
            sh_un[t] += sh_un[t + off];
        }
        __syncthreads();
    }
}

/* A block of tokens, a thread per token: its entropy and top score (kmoe_token_stats) and,
 * given slot (expert choice, A per token), whether no expert picked it; each summed by the
 * block's tree (kmoe_tree_sum's pairing) into the block's partials. Threads past N add 0. */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_stats_tokens(double *bent, double *btop, int *bun, const float *scores, const int *slot,
                   int N, int E, int A) {
    __shared__ double sh_ent[KMOE_THREADS], sh_top[KMOE_THREADS];
    __shared__ int sh_un[KMOE_THREADS];
    const int t = threadIdx.x, n = blockIdx.x * blockDim.x + t;
    double ent = 0.0, top = 0.0;
    int un = 0;
    if (n < N) {
        kmoe_token_stats(&ent, &top, scores + (size_t)n * E, E);
        if (slot) un = !kmoe_token_picked(slot + (size_t)n * A, A);
    }
    stats_tree(sh_ent, sh_top, sh_un, t, ent, top, un);
    if (t == 0)
        bent[blockIdx.x] = sh_ent[0], btop[blockIdx.x] = sh_top[0], bun[blockIdx.x] = sh_un[0];
}

/* One block: the token blocks' partials (thread t: blocks t, t + KMOE_THREADS, ..., in order,
 * then the tree) into the head; and per expert e (threads e, e + KMOE_THREADS, ...) routed and
 * dropped from the parts' chunks in order, or, for expert choice, the plan's counts and 0. */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_stats_final(KmoeStatsHead *head, const double *bent, const double *btop, const int *bun,
                  int nblk, const int *ph, const int *pd, int nchunk, const int *counts, int E) {
    __shared__ double sh_ent[KMOE_THREADS], sh_top[KMOE_THREADS];
    __shared__ int sh_un[KMOE_THREADS];
    const int t = threadIdx.x;
    double ent = 0.0, top = 0.0;
    int un = 0;
    for (int b = t; b < nblk; b += KMOE_THREADS) ent += bent[b], top += btop[b], un += bun[b];
    stats_tree(sh_ent, sh_top, sh_un, t, ent, top, un);
    if (t == 0) head->ent = sh_ent[0], head->top1 = sh_top[0], head->unpicked = sh_un[0];
    int *routed = (int *)(head + 1), *dropped = routed + E;
    for (int e = t; e < E; e += KMOE_THREADS) {
        routed[e] = counts ? counts[e] : ph ? kmoe_part_count(ph, 0, e, nchunk, E) : 0;
        dropped[e] = !counts && pd ? kmoe_part_count(pd, 0, e, nchunk, E) : 0;
    }
}

/* route_stats' kernels: the head and the per-expert counts into out (in the GPU's memory, or
 * carved here when out is NULL); returns where they are. */
static KmoeStatsHead *route_stats_issue(const Backend *be, KmoeStatsHead *out, const float *scores,
                                        const float *logits, const float *lse, const int *idx,
                                        const DispatchPlan *p, int N, const MoeSpec *s) {
    const int E = s->num_experts, K = s->top_k, ec = s->routing == MOE_ROUTING_EXPERT_CHOICE;
    /* expert choice reads its plan's tokens (expert_choice_stats), token choice the call's */
    const int Nc = ec ? p->N : N, Nt = Nc > 0 ? Nc : 0;
    const int nblk = (int)kmoe_grid((size_t)Nt);
    const int nchunk = ec || Nt == 0 ? 0 : kmoe_chunks(Nt);
    const size_t nparts = (size_t)nchunk * E;
    const size_t out_bytes = sizeof(KmoeStatsHead) + 2 * (size_t)E * sizeof(int);
    Carve c = cuda_carve_begin(
        be, NULL,
        2 * carve_round((size_t)nblk * sizeof(double)) + carve_round((size_t)nblk * sizeof(int)) +
            2 * carve_round(nparts * sizeof(int)) + carve_round(out ? 0 : out_bytes));
    double *bent = (double *)carve(&c, (size_t)nblk * sizeof(double));
    double *btop = (double *)carve(&c, (size_t)nblk * sizeof(double));
    int *bun = (int *)carve(&c, (size_t)nblk * sizeof(int));
    int *ph = (int *)carve(&c, nparts * sizeof(int));
    int *pd = (int *)carve(&c, nparts * sizeof(int));
    KmoeStatsHead *d_out = out ? out : (KmoeStatsHead *)carve(&c, out_bytes);
    cudaStream_t st = cuda_stream(be);
    k_stats_tokens<<<nblk, KMOE_THREADS, 0, st>>>(bent, btop, bun, scores, ec ? p->slot : NULL, Nt,
                                                  E, p->K);
    CUDA_LAUNCHED();
    if (nparts) {
        k_expert_parts<<<kmoe_grid(nparts), KMOE_THREADS, 0, st>>>(
            NULL, ph, pd, NULL, NULL, idx, p->slot, nparts, Nt, nchunk, E, K);
        CUDA_LAUNCHED();
    }
    k_stats_final<<<1, KMOE_THREADS, 0, st>>>(d_out, bent, btop, bun, nblk, ph, pd, nchunk,
                                              ec ? p->counts : NULL, E);
    CUDA_LAUNCHED();
    /* the logits' statistics into the same head: one copy and one wait for both */
    k_logit_stats<<<1, KMOE_THREADS, 0, st>>>(&d_out->max_logit, &d_out->lse_sum, logits, lse,
                                              N > 0 ? N : 0, E);
    CUDA_LAUNCHED();
    return d_out;
}

void cuda_route_stats(const Backend *be, RouteStats *host_out, const float *scores,
                      const float *logits, const float *lse, const int *idx, const DispatchPlan *p,
                      int N, const MoeSpec *s) {
    const int E = s->num_experts;
    const size_t out_bytes = sizeof(KmoeStatsHead) + 2 * (size_t)E * sizeof(int);
    cudaStream_t st = cuda_stream(be);
    KmoeStatsHead *d_out = route_stats_issue(be, NULL, scores, logits, lse, idx, p, N, s);
    /* the few numbers in one copy to pinned staging, one wait, then the host's formulas */
    KmoeStatsHead *h = (KmoeStatsHead *)cuda_stage(be, out_bytes);
    CUDA_CHECK(cudaMemcpyAsync(h, d_out, out_bytes, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    const int *routed = (const int *)(h + 1);
    kmoe_route_stats_finish(host_out, h, routed, routed + E, p, N, s);
}

/* The record: the head and the counts as route_stats copies them down, then the three sizes
 * the host's formulas need (the call's tokens, the plan's rows and, for expert choice, its
 * tokens), which the host knows now. Nothing waits: the trainer reads a step's records with
 * its losses in one copy, and route_stats_read finishes them there. */
void cuda_route_stats_record(const Backend *be, void *rec, const float *scores, const float *logits,
                             const float *lse, const int *idx, const DispatchPlan *p, int N,
                             const MoeSpec *s) {
    const int E = s->num_experts;
    route_stats_issue(be, (KmoeStatsHead *)rec, scores, logits, lse, idx, p, N, s);
    const int sizes[3] = {N, p->S, p->N};
    char *tail = (char *)rec + sizeof(KmoeStatsHead) + 2 * (size_t)E * sizeof(int);
    /* from pageable memory: the copy has read sizes when the call returns */
    CUDA_CHECK(cudaMemcpyAsync(tail, sizes, sizeof sizes, cudaMemcpyHostToDevice, cuda_stream(be)));
}

void cuda_route_stats_read(const Backend *be, RouteStats *host_out, const void *rec,
                           const MoeSpec *s) {
    (void)be;
    const int E = s->num_experts;
    const KmoeStatsHead *h = (const KmoeStatsHead *)rec;
    const int *routed = (const int *)(h + 1), *sizes = routed + 2 * (size_t)E;
    DispatchPlan hp;
    memset(&hp, 0, sizeof hp);
    hp.E = E, hp.K = s->top_k, hp.S = sizes[1], hp.N = sizes[2];
    kmoe_route_stats_finish(host_out, h, routed, routed + E, &hp, sizes[0], s);
}

/* ---- router.csv's expert_sim ---------------------------------------------------------------
 * Block j of pairs + E: one dot product of two experts' vectors (their rows of the three
 * matrices end to end), pairs in experts_similarity's order; j >= pairs an expert's norm.
 * Per-thread strided sums in double, then the shared tree. One thread then adds the cosines
 * in experts_similarity's order: the number stays in the GPU's memory, no expert comes down. */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_expert_dots(double *dots, const float *Wg, const float *Wu, const float *Wd, int E,
                  size_t n) {
    __shared__ double sh[KMOE_THREADS];
    const int pairs = E * (E - 1) / 2, j = blockIdx.x, t = threadIdx.x;
    int a = j - pairs, b = a;
    if (j < pairs) { /* pair j in the order (0,1), (0,2) .. (0,E-1), (1,2) .. */
        int r = j;
        a = 0;
        while (r >= E - 1 - a) r -= E - 1 - a++;
        b = a + 1 + r;
    }
    double s = 0.0;
    for (int m = 0; m < 3; m++) {
        const float *w = m == 0 ? Wg : m == 1 ? Wu : Wd;
        const float *x = w + (size_t)a * n, *y = w + (size_t)b * n;
        for (size_t i = (size_t)t; i < n; i += KMOE_THREADS) s += (double)x[i] * y[i];
    }
    sh[t] = s;
    __syncthreads();
    for (int off = KMOE_THREADS / 2; off > 0; off /= 2) {
        if (t < off) sh[t] += sh[t + off];
        __syncthreads();
    }
    if (t == 0) dots[j] = j >= pairs ? sqrt(sh[0]) : sh[0];
}
static __global__ void k_expert_sim(double *out, const double *dots, int E) {
    const int pairs = E * (E - 1) / 2;
    const double *norms = dots + pairs;
    double sum = 0.0;
    for (int a = 0, j = 0; a < E; a++)
        for (int b = a + 1; b < E; b++, j++) {
            const double den = norms[a] * norms[b];
            sum += den > 0.0 ? dots[j] / den : 0.0;
        }
    *out = sum / pairs;
}

void cuda_experts_similarity(const Backend *be, double *out, const float *Wg, const float *Wu,
                             const float *Wd, int E, int C, int F) {
    cudaStream_t st = cuda_stream(be);
    if (E < 2) {
        CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), st));
        return;
    }
    const int pairs = E * (E - 1) / 2;
    double *dots = (double *)cuda_scratch(be, (size_t)(pairs + E) * sizeof(double));
    k_expert_dots<<<pairs + E, KMOE_THREADS, 0, st>>>(dots, Wg, Wu, Wd, E, (size_t)F * C);
    CUDA_LAUNCHED();
    k_expert_sim<<<1, 1, 0, st>>>(out, dots, E);
    CUDA_LAUNCHED();
}
