/*
 * kernels_moe_util.h: what the host tests of the CUDA MoE kernels share (test_kernels_route.c,
 * test_kernels_plan.c, test_kernels_capacity.c): their inputs, the integer comparisons, the
 * dropless plan's kernels on the host (the other plans' offsets and the test routings use them),
 * and a routing for each kind of plan.
 *
 * Each emu_* function of those tests is one entry of cuda_moe.cu or cuda_plans.cu with its
 * kernels replaced by loops that walk the grid in the kernel's order: the same blocks, the same
 * threads per block, the same chunks of the plan's scans, the same ballots (one mask per warp),
 * the same reduction trees. The bodies are the very text nvcc compiles for the device, so a
 * machine without a GPU still checks the kernels' math against the reference ops of src/moe:
 *
 *   - integers exactly: the top-k's idx (rows full of equal keys included: ties go to the
 *     lower expert), and the plan's counts, offsets, slot and slot_token;
 *   - floats under the one tolerance rule (TOL_F32_ATOL, TOL_F32_RTOL): the bodies use expf
 *     where the reference uses nn_expf, and the dw dot and the z-loss sum in another order.
 */
#ifndef MOE_TEST_KERNELS_MOE_UTIL_H
#define MOE_TEST_KERNELS_MOE_UTIL_H

#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/kernels_moe.h"
#include "base/util.h"
#include "moe/moe_ops.h"
#include "testutil.h"

/* ---- inputs -------------------------------------------------------------------------------- */

/* Logits (N, E) full of ties: uniform values rounded to halves in [-2, 2] (9 values, so rows
 * repeat them), row 0 all equal, row 1 with its two largest equal. */
static inline void fill_tied_logits(float *l, int N, int E, unsigned long long seed) {
    fill_uniform(l, (size_t)N * E, 2.0f, seed);
    for (size_t i = 0; i < (size_t)N * E; i++) l[i] = roundf(l[i] * 2.0f) / 2.0f;
    if (N > 0)
        for (int e = 0; e < E; e++) l[e] = 0.5f;
    if (N > 1) {
        for (int e = 0; e < E; e++) l[E + e] = -1.0f;
        l[E + E - 1] = l[E + 1] = 3.0f;
    }
}

/* Logits (N, E) that prefer the low experts: expert 0 is wanted by far more tokens than its
 * fair share, so a capacity plan drops assignments and the dropless plan's block for expert 0
 * sees hits in many chunks. */
static inline void fill_skewed_logits(float *l, int N, int E, unsigned long long seed) {
    fill_uniform(l, (size_t)N * E, 1.0f, seed);
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) l[(size_t)n * E + e] -= 0.5f * (float)e;
}

static inline MoeSpec spec_of(int E, int K, int score, int topk_first, int norm, float rs) {
    MoeSpec s = {.num_experts = E, .top_k = K, .norm_topk = norm};
    moe_spec_defaults(&s);
    s.score = score;
    s.topk_before_softmax = topk_first;
    s.route_scale = rs;
    return s;
}

static inline float *floats(size_t n) {
    return calloc_check(n ? n : 1, sizeof(float));
}
static inline int *ints(size_t n) {
    return calloc_check(n ? n : 1, sizeof(int));
}
static inline void fill_nan(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}
/* Check records every assertion that passes (a message to the parent process each), so the
 * elements are compared first and only a mismatch asserts. */
static inline void expect_ints(const int *got, const int *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            ck_assert_msg(0, "%s: element %zu: got %d want %d", what, i, got[i], want[i]);
}

/* ---- the dispatch plan's kernels, on the host ------------------------------------------------ */

/* k_plan_offsets: one block, chunks of Hillis-Steele steps (every thread reads its addend
 * before any writes: the barrier between) */
static inline void emu_plan_offsets(int *offsets, const int *counts, int E) {
    int carry = 0;
    for (int base = 0; base < E; base += KMOE_THREADS) {
        int v[KMOE_THREADS], sh[KMOE_THREADS], add[KMOE_THREADS];
        for (int t = 0; t < KMOE_THREADS; t++) sh[t] = v[t] = base + t < E ? counts[base + t] : 0;
        for (int d = 1; d < KMOE_THREADS; d *= 2) {
            for (int t = 0; t < KMOE_THREADS; t++) add[t] = kmoe_scan_addend(sh, t, d);
            for (int t = 0; t < KMOE_THREADS; t++) sh[t] += add[t];
        }
        for (int t = 0; t < KMOE_THREADS; t++)
            if (base + t < E) offsets[base + t] = carry + sh[t] - v[t];
        carry += sh[KMOE_THREADS - 1];
    }
    offsets[E] = carry;
}

/* cuda_dispatch_plan_build: k_plan_rank, k_plan_offsets, k_plan_place */
static inline void emu_plan_build(DispatchPlan *p, const int *idx, int N) {
    const int E = p->E, K = p->K;
    const size_t NK = (size_t)N * K;
    /* k_plan_rank: block e, chunk by chunk; a warp's ballot is one mask */
    for (int e = 0; e < E; e++) {
        int run = 0;
        for (size_t base = 0; base < NK; base += KMOE_THREADS) {
            int hit[KMOE_THREADS], warp_hits[KMOE_WARPS];
            unsigned mask[KMOE_WARPS] = {0};
            for (int t = 0; t < KMOE_THREADS; t++) {
                hit[t] = kmoe_plan_hit(idx, NK, base + t, e);
                mask[t / MOE_WARP] |= (unsigned)hit[t] << (t % MOE_WARP);
            }
            for (int w = 0; w < KMOE_WARPS; w++) warp_hits[w] = kmoe_popc32(mask[w]);
            for (int t = 0; t < KMOE_THREADS; t++)
                if (hit[t])
                    p->slot[base + t] = run + kmoe_warps_before(warp_hits, t / MOE_WARP) +
                                        kmoe_lane_rank(mask[t / MOE_WARP], t % MOE_WARP);
            run += kmoe_warps_before(warp_hits, KMOE_WARPS);
        }
        p->counts[e] = run;
    }
    emu_plan_offsets(p->offsets, p->counts, E);
    /* k_plan_place: a thread per assignment */
    for (int b = 0; b < (int)kmoe_grid(NK); b++)
        for (int t = 0; t < KMOE_THREADS; t++) {
            size_t j = (size_t)b * KMOE_THREADS + t;
            if (j < NK) kmoe_plan_place(p->slot, p->slot_token, idx, p->offsets, j, E, K);
        }
    p->N = N;
    p->S = (int)NK;
}

static inline void expect_same_plan(const DispatchPlan *got, const DispatchPlan *want,
                                    const char *what) {
    ck_assert_msg(got->N == want->N && got->S == want->S, "%s: N %d S %d, want N %d S %d", what,
                  got->N, got->S, want->N, want->S);
    expect_ints(got->counts, want->counts, (size_t)want->E, what);
    expect_ints(got->offsets, want->offsets, (size_t)want->E + 1, what);
    expect_ints(got->slot, want->slot, (size_t)want->N * want->K, what);
    expect_ints(got->slot_token, want->slot_token, (size_t)want->S, what);
}

/* ---- a routing of each kind of plan --------------------------------------------------------- */

enum { PLAN_DROPLESS, PLAN_CAPACITY, PLAN_PADDED, PLAN_EXPERT_CHOICE, PLAN_KINDS };
static const char *const plan_name[PLAN_KINDS] = {"dropless", "capacity", "padded",
                                                  "expert choice"};

/* A plan of kind for N tokens over E experts, K per token, from skewed logits through score
 * (softmax or sigmoid); *w_out (N, A) its gate weights (A = p->K), and, when the pointers are
 * given, the scores (N, E) and idx (N, A) it was built from (else freed). The capacity plans
 * use factor 1 (expert 0 overflows); the padded one has room for E R slot rows. */
static inline void make_routing(DispatchPlan *p, float **w_out, float **sc_out, int **idx_out,
                                int kind, int N, int E, int K, int score) {
    float *l = floats((size_t)N * E), *sc = floats((size_t)N * E);
    int *idx;
    fill_skewed_logits(l, N, E, 600 + kind);
    MoeSpec s = spec_of(E, K, score, 0, 1, 1.0f);
    s.seq_len = N;
    router_scores_forward(sc, NULL, l, N, &s);
    MoeCtx x;
    if (kind == PLAN_EXPERT_CHOICE) {
        s.routing = MOE_ROUTING_EXPERT_CHOICE;
        moe_ctx_train(&x, &s, N, NULL);
        idx = ints((size_t)N * E);
        *w_out = floats((size_t)N * E);
        dispatch_plan_alloc(p, N, E, E);
        expert_choice_forward(idx, *w_out, p, sc, N, &s, &x);
    } else {
        idx = ints((size_t)N * K);
        *w_out = floats((size_t)N * K);
        router_gate_forward(idx, *w_out, sc, NULL, NULL, N, &s);
        if (kind == PLAN_DROPLESS) {
            dispatch_plan_alloc(p, N, E, K);
            emu_plan_build(p, idx, N);
        } else {
            s.capacity_factor = 1.0f;
            s.min_capacity = 1;
            s.padded = kind == PLAN_PADDED;
            moe_ctx_train(&x, &s, N, NULL);
            dispatch_plan_alloc(p, N, E, K);
            free(p->slot_token);
            p->slot_token = ints(moe_slots_max(&s, N) + 1);
            capacity_plan_build(p, idx, sc, *w_out, N, &s, &x);
        }
    }
    free(l);
    if (sc_out)
        *sc_out = sc;
    else
        free(sc);
    if (idx_out)
        *idx_out = idx;
    else
        free(idx);
}

/* The reference ops run one thread here: their results do not depend on the count (each row
 * has one owner), and the suites make a few hundred small calls each, every one an OpenMP
 * region whose threads spin for milliseconds on a busy two-core machine. */
static inline void one_thread(void) {
    backend_set_threads(1);
}

#endif
