/*
 * cuda_plans.cu: the dispatch plans that choose: with a capacity (capacity_plan_build: every
 * expert keeps at most cap of its candidates) and chosen by the experts
 * (expert_choice_forward: every expert takes its cap highest-scoring tokens). The dropless
 * plan, and what the three share (the offsets' scan), are in cuda_moe.cu; its opening comment
 * holds for these too: the arithmetic in kernels_moe.h, the launch shapes here, the CPU
 * reference's integers (capacity.c, expert_choice.c), no float atomics.
 *
 * Launch order of each entry, all on cuda_stream(be):
 *   capacity_plan_build    (the random second expert: N uniforms up from the host first)
 *                          k_cap_flag      kmoe_grid(N K) x KMOE_THREADS, a thread per assignment
 *                          k_cap_select    scopes E x KMOE_THREADS, a block per (scope, expert)
 *                          k_cap_rank      E x KMOE_THREADS, a block per expert
 *                          k_plan_offsets  1 x KMOE_THREADS (packed only)
 *                          k_cap_place     kmoe_grid(N K) x KMOE_THREADS
 *                          k_cap_pad_rows  kmoe_grid(E R) x KMOE_THREADS (padded only); packed:
 *                                          a copy of offsets[E] (4 bytes) and a sync
 *   expert_choice_forward  k_ec_fill       kmoe_grid(N E) x KMOE_THREADS, a thread per (n, e)
 *                          k_ec_select     E x KMOE_THREADS, a block per expert
 */
#include "backend/cuda/cuda.cuh"
#include "backend/cuda/kernels_moe.h"

#define FULL_MASK 0xffffffffu

/* ---- capacity and expert-choice plans --------------------------------------------------------
 * kernels_moe.h's radix select: a block per group of candidates ((scope, expert) for a
 * capacity, an expert for expert choice) finds the cap-th largest key in four counting
 * passes, then keeps in one walk in item order the candidates above it and the first of its
 * ties. Every result is an integer fixed by the inputs alone: the bins' shared counts are the
 * only atomics, and a count is the same in any order. */

/* One chunk's ranks of a flag over the block: the flagged threads' rank among the chunk's
 * flagged threads in thread order (the warps' ballots, as in k_plan_rank), and the chunk's
 * total in *total, the same in every thread. Called by every thread of the block alike (the
 * ballot is full-mask, the barriers are the block's); warp_hits is rewritten by the next call
 * only after the closing barrier. */
static __device__ __forceinline__ int chunk_rank(int flag, int *warp_hits, int *total) {
    const int t = threadIdx.x, lane = t % MOE_WARP, wid = t / MOE_WARP;
    const unsigned mask = __ballot_sync(FULL_MASK, flag);
    if (lane == 0) warp_hits[wid] = kmoe_popc32(mask);
    __syncthreads();
    const int rank = kmoe_warps_before(warp_hits, wid) + kmoe_lane_rank(mask, lane);
    *total = kmoe_warps_before(warp_hits, KMOE_WARPS);
    __syncthreads();
    return rank;
}

/* The block's radix select over sel's items [i0, sel.end): 0 when the group has cap or fewer
 * candidates (all kept: no threshold), else 1 with *tkey the cap-th largest key and *r how
 * many candidates of that key to keep. Per pass: the bins counted (shared integer atomics),
 * the Hillis-Steele scan of k_plan_offsets over them (largest digit first), and the one
 * thread whose bin holds the krem-th key publishes its digit and what remains to take. Called
 * by every thread alike; every branch is uniform over the block (the total is read by all
 * after the scan's last barrier). */
static __device__ int block_threshold(const KmoeSel &sel, size_t i0, int cap, unsigned *tkey,
                                      int *r, int *hist, int *pick) {
    const int t = threadIdx.x;
    unsigned prefix = 0u;
    int krem = cap;
    for (int pass = 0; pass < KMOE_RADIX_PASSES; pass++) {
        hist[t] = 0;
        __syncthreads();
        for (size_t base = i0; base < sel.end; base += KMOE_THREADS) {
            unsigned key;
            if (kmoe_sel_item(&key, &sel, base + t) && kmoe_radix_in(key, prefix, pass))
                atomicAdd(&hist[kmoe_radix_bin(key, pass)], 1);
        }
        __syncthreads();
        const int v = hist[t];
        for (int d = 1; d < KMOE_THREADS; d *= 2) {
            const int add = kmoe_scan_addend(hist, t, d);
            __syncthreads();
            hist[t] += add;
            __syncthreads();
        }
        const int incl = hist[t], total = hist[KMOE_THREADS - 1];
        if (pass == 0 && total <= cap) return 0;
        if (kmoe_radix_pick(incl - v, incl, krem)) {
            pick[0] = KMOE_RADIX_BINS - 1 - t; /* the digit */
            pick[1] = krem - (incl - v);
        }
        __syncthreads();
        prefix |= (unsigned)pick[0] << kmoe_radix_shift(pass);
        krem = pick[1];
        __syncthreads(); /* pick and hist are rewritten by the next pass */
    }
    *tkey = prefix;
    *r = krem;
    return 1;
}

/* a thread per assignment: its flag before the capacity (0 candidate, -1 dropped) */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_cap_flag(int *slot, const int *idx, const float *w, const float *u, size_t NK, int E, int K) {
    const size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < NK) slot[j] = kmoe_cap_flag(idx, w, u, j, E, K);
}

/* Block (scope sc, expert e) = blockIdx.x = sc E + e: the budget of cap. By score (scores
 * given), the threshold first, and a group that fits drops nothing; by position (scores
 * NULL) every candidate is a tie and the first cap stay. The final walk turns the flag of
 * each candidate it does not keep into -1; a kept one stays 0. Only this block reads or writes
 * the slots of its scope's assignments to e. */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_cap_select(int *slot, const int *idx, const float *scores, int N, int E, int K, int Ts,
                 int cap) {
    __shared__ int warp_hits[KMOE_WARPS], hist[KMOE_RADIX_BINS], pick[2];
    const int e = blockIdx.x % E, sc = blockIdx.x / E;
    size_t j0, j1;
    kmoe_cap_scope_items(&j0, &j1, sc, Ts, N, K);
    const KmoeSel sel = {idx, slot, scores, j1, E, K, e};
    unsigned tkey = 0u;
    int r = cap;
    const int ranked = scores ? block_threshold(sel, j0, cap, &tkey, &r, hist, pick) : 0;
    if (scores && !ranked) return; /* uniform: every thread got the same answer */
    int run = 0;
    for (size_t base = j0; base < j1; base += KMOE_THREADS) {
        const size_t j = base + threadIdx.x;
        unsigned key;
        const int hit = kmoe_sel_item(&key, &sel, j);
        int ties;
        const int rank = run + chunk_rank(kmoe_sel_tie(hit, key, tkey, ranked), warp_hits, &ties);
        if (hit && !kmoe_sel_keep(hit, key, tkey, ranked, rank, r)) slot[j] = -1;
        run += ties;
    }
}

/* Block e: the rank of each kept assignment to e among them in (n, k) order, into slot[j]
 * (k_cap_place adds the offset), counts[e]; and, padded (R > 0), offsets[e] = e R (and
 * offsets[E] from the last block). */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_cap_rank(int *counts, int *offsets, int *slot, const int *idx, size_t NK, int E, int K,
               int R) {
    __shared__ int warp_hits[KMOE_WARPS];
    const int e = blockIdx.x;
    const KmoeSel sel = {idx, slot, NULL, NK, E, K, e};
    int run = 0;
    for (size_t base = 0; base < NK; base += KMOE_THREADS) {
        const size_t j = base + threadIdx.x;
        unsigned key;
        const int hit = kmoe_sel_item(&key, &sel, j);
        int hits;
        const int rank = run + chunk_rank(hit, warp_hits, &hits);
        if (hit) slot[j] = rank;
        run += hits;
    }
    if (threadIdx.x == 0) {
        counts[e] = run;
        if (R > 0) {
            offsets[e] = e * R;
            if (e == E - 1) offsets[E] = E * R;
        }
    }
}

static __global__ void __launch_bounds__(KMOE_THREADS)
    k_cap_place(int *slot, int *slot_token, const int *idx, const int *offsets, size_t NK, int K) {
    const size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < NK) kmoe_cap_place(slot, slot_token, idx, offsets, j, K);
}

/* a thread per slot row of a padded plan: the padding rows' token -1 */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_cap_pad_rows(int *slot_token, const int *counts, size_t S, int R) {
    const size_t s = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s < S) kmoe_cap_pad_row(slot_token, counts, s, R);
}

void cuda_capacity_plan_build(const Backend *be, DispatchPlan *p, const int *idx,
                              const float *scores, const float *w, int N, const MoeSpec *s,
                              const MoeCtx *x) {
    /* idx, w (N, K), scores (N, E): capacity.c's plan, the same integers. An expert id outside
     * [0, E), where capacity.c stops with a message, is dropped instead (as the dropless plan's
     * kernels do): stopping would cost a wait for the stream in every call. */
    const int E = p->E, K = p->K;
    cudaStream_t st = cuda_stream(be);
    p->N = N;
    if (N <= 0 || E <= 0) { /* the reference's plan of no tokens: empty slices */
        if (E > 0) CUDA_CHECK(cudaMemsetAsync(p->counts, 0, (size_t)E * sizeof(int), st));
        CUDA_CHECK(cudaMemsetAsync(p->offsets, 0, (size_t)(E > 0 ? E + 1 : 1) * sizeof(int), st));
        p->S = 0;
        return;
    }
    const KmoeCapSizes z = kmoe_cap_sizes(s, x, N, E);
    const size_t NK = (size_t)N * K;
    /* the random second expert: the host draws from x->rng as capacity.c does, in token
     * order, into the backend's reusable draws buffer (cuda_draws: nothing allocated per step) */
    float *du = NULL;
    if (kmoe_cap_random(s, x, K)) {
        float *hu = (float *)cuda_draws(be, (size_t)N * sizeof(float));
        kmoe_cap_draws(hu, x->rng, N);
        Carve c = cuda_carve_begin(be, x, carve_round((size_t)N * sizeof(float)));
        du = (float *)carve(&c, (size_t)N * sizeof(float));
        CUDA_CHECK(cudaMemcpyAsync(du, hu, (size_t)N * sizeof(float), cudaMemcpyHostToDevice, st));
    }
    k_cap_flag<<<kmoe_grid(NK), KMOE_THREADS, 0, st>>>(p->slot, idx, w, du, NK, E, K);
    CUDA_LAUNCHED();
    const int by_score = s->drop_policy == MOE_DROP_SCORE;
    const unsigned groups = (unsigned)z.nscope * (unsigned)E; /* (scope, expert) */
    k_cap_select<<<groups, KMOE_THREADS, 0, st>>>(p->slot, idx, by_score ? scores : NULL, N, E, K,
                                                  z.Ts, z.cap);
    CUDA_LAUNCHED();
    k_cap_rank<<<E, KMOE_THREADS, 0, st>>>(p->counts, p->offsets, p->slot, idx, NK, E, K, z.R);
    CUDA_LAUNCHED();
    if (z.R == 0) {
        cuda_plan_offsets(st, p->offsets, p->counts, E);
    }
    k_cap_place<<<kmoe_grid(NK), KMOE_THREADS, 0, st>>>(p->slot, p->slot_token, idx, p->offsets, NK,
                                                        K);
    CUDA_LAUNCHED();
    if (z.R > 0) {
        /* padded: the slot rows follow from the sizes alone, nothing comes back */
        const size_t S = (size_t)E * z.R;
        k_cap_pad_rows<<<kmoe_grid(S), KMOE_THREADS, 0, st>>>(p->slot_token, p->counts, S, z.R);
        CUDA_LAUNCHED();
        p->S = (int)S;
    } else {
        /* packed: S is the kept assignments, offsets[E], which the caller sizes the gather,
         * the experts and the combine by: one int comes down, the one wait of this entry */
        int S = 0;
        CUDA_CHECK(cudaMemcpyAsync(&S, p->offsets + E, sizeof S, cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        p->S = S;
    }
}

/* a thread per (n, e): idx, w and the transposed column (kmoe_ec_fill) */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_ec_fill(int *idx, float *w, float *col, const float *scores, size_t NE, int N, int E,
              float rs) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < NE) kmoe_ec_fill(idx, w, col, scores, i, N, E, rs);
}

/* Block e: the threshold of e's column (every token a candidate), then one walk in token
 * order: the ties' ranks decide which of them are picked, the picked ones' ranks are their
 * slots in e's slice [e cap, (e + 1) cap). counts[e] = cap, offsets[e] = e cap (offsets[E]
 * from the last block). */
static __global__ void __launch_bounds__(KMOE_THREADS)
    k_ec_select(int *counts, int *offsets, int *slot, int *slot_token, const float *col, int N,
                int E, int cap) {
    __shared__ int warp_hits[KMOE_WARPS], hist[KMOE_RADIX_BINS], pick[2];
    const int e = blockIdx.x;
    const KmoeSel sel = {NULL, NULL, col + (size_t)e * N, (size_t)N, E, 1, e};
    unsigned tkey = 0u;
    int r = cap;
    const int ranked = block_threshold(sel, 0, cap, &tkey, &r, hist, pick);
    int run_tie = 0, run_pick = 0;
    for (int base = 0; base < N; base += KMOE_THREADS) {
        const int n = base + threadIdx.x;
        unsigned key;
        const int hit = kmoe_sel_item(&key, &sel, (size_t)n);
        int ties, picks;
        const int tie_rank =
            run_tie + chunk_rank(kmoe_sel_tie(hit, key, tkey, ranked), warp_hits, &ties);
        const int picked = kmoe_sel_keep(hit, key, tkey, ranked, tie_rank, r);
        const int rank = run_pick + chunk_rank(picked, warp_hits, &picks);
        if (hit) kmoe_ec_place(slot, slot_token, n, e, E, cap, picked, rank);
        run_tie += ties;
        run_pick += picks;
    }
    if (threadIdx.x == 0) {
        counts[e] = cap;
        offsets[e] = e * cap;
        if (e == E - 1) offsets[E] = E * cap;
    }
}

void cuda_expert_choice_forward(const Backend *be, int *idx, float *w, DispatchPlan *p,
                                const float *scores, int N, const MoeSpec *s, const MoeCtx *x) {
    /* idx, w (N, E), scores (N, E): expert_choice.c's outputs, the plan's integers the same */
    const int E = s->num_experts, cap = moe_ec_capacity(s, N);
    if (p->K != E)
        moe_fatal("expert_choice_forward: the plan holds %d assignments per token, expert "
                  "choice needs E = %d (allocate it with moe_acts_alloc)",
                  p->K, E);
    cudaStream_t st = cuda_stream(be);
    p->N = N;
    p->S = E * cap;         /* known on the host: nothing comes back */
    if (N <= 0 || E <= 0) { /* cap 0: empty slices */
        if (E > 0) CUDA_CHECK(cudaMemsetAsync(p->counts, 0, (size_t)E * sizeof(int), st));
        CUDA_CHECK(cudaMemsetAsync(p->offsets, 0, (size_t)(E > 0 ? E + 1 : 1) * sizeof(int), st));
        return;
    }
    const size_t NE = (size_t)N * E;
    Carve c = cuda_carve_begin(be, x, carve_round(NE * sizeof(float)));
    float *col = (float *)carve(&c, NE * sizeof(float));
    k_ec_fill<<<kmoe_grid(NE), KMOE_THREADS, 0, st>>>(idx, w, col, scores, NE, N, E,
                                                      s->route_scale);
    CUDA_LAUNCHED();
    k_ec_select<<<E, KMOE_THREADS, 0, st>>>(p->counts, p->offsets, p->slot, p->slot_token, col, N,
                                            E, cap);
    CUDA_LAUNCHED();
}
