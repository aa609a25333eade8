/*
 * kernels_moe.h: the arithmetic of the CUDA backend's MoE kernels (cuda_moe.cu, cuda_plans.cu),
 * written as plain C bodies that nvcc compiles for the device and gcc for the host. The host
 * tests (tests/test_kernels_route.c, test_kernels_plan.c, test_kernels_capacity.c) run them in
 * loops that walk each kernel's grid in the kernel's order and compare the results with the
 * reference ops of src/moe (router.c, permute.c, router_balance.c, capacity.c, expert_choice.c).
 *
 * What each kernel does with them (launch shapes in cuda_moe.cu and cuda_plans.cu):
 *
 *   scores, gate   one thread per token: the token's row exactly as router.c walks it (the same
 *                  loops, sums in double in expert order; the gate's are router.c's own rows,
 *                  moe/router_row.h), so the top-k, its ties (to the lower expert) and the
 *                  chosen experts are the reference's integers;
 *   z-loss         one block: thread t sums lse^2 over n = t, t + KMOE_THREADS, ... in double,
 *                  then the block's tree (kmoe_tree_sum) in a fixed pairing;
 *   dispatch plan  (a) one block per expert e walks the N K assignments in chunks of
 *                  KMOE_THREADS, in order: each thread flags whether its assignment goes to e,
 *                  the warps' ballots and the warps before it give its rank among the chunk's
 *                  hits, and the running count carries over the chunks. The rank (the slot
 *                  inside e's slice) is stable: assignments keep their (n, k) order. The
 *                  block's final count is counts[e].
 *                  (b) one block: offsets = exclusive scan of counts, chunk by chunk, each
 *                  chunk by Hillis-Steele steps (kmoe_scan_addend).
 *                  (c) one thread per assignment: slot = offsets[e] + rank, slot_token[slot].
 *                  Every number is an integer, so any order would be exact; the order is still
 *                  fixed so that the host can walk it step for step;
 *   rows           permute, combine and their backward: one block per output row, thread t
 *                  takes the columns c = t, t + blockDim, ... (kmoe_row_threads): each output
 *                  element has one owner and sums over the assignments in k order;
 *   dw             one warp per assignment: lane l sums dy * ye over c = l, l + 32, ... in
 *                  double, then the warp's shuffle-down tree (kmoe_tree_sum's pairing).
 *   balance loss, the router's backward, route and logit statistics: kernels_route.h;
 *   capacity and   a radix select per group of candidates ((scope, expert): the assignments
 *   expert choice  a capacity budget ranks; or an expert's column of N tokens): one block
 *                  counts the keys' digits in four passes to find the cap-th key, then one
 *                  walk keeps what is above it and the first of its ties in token order (the
 *                  ballots of the dropless plan); a capacity plan's slots then come from the
 *                  dropless plan's steps over the kept assignments. See the section below.
 *
 * No float atomics anywhere: every sum has one owner and a fixed order, so a result repeats
 * bit for bit (the radix select's integer bin counts are the only atomics: a count is the
 * same in any order). expf and log are the C library's (CUDA's on the device), not nn_expf: the
 * scores agree with the reference's to the float tolerance, the integers exactly. The gate's
 * rows (top-k and weights) are the reference's own, moe/router_row.h.
 */
#ifndef MOE_BACKEND_KERNELS_MOE_H
#define MOE_BACKEND_KERNELS_MOE_H

#include <math.h>
#include <stddef.h>
#include <string.h> /* memcpy: a float's bits on the host */

#include "base/hd.h"
#include "moe/router_row.h"
#ifdef __cplusplus
extern "C" {
#endif
#include "moe/moe_ops.h" /* MOE_SCORE_SIGMOID */
#ifdef __cplusplus
}
#endif

/* Threads of the fixed-size blocks (z-loss, the plan's kernels, the per-token kernels, the dw
 * warps' blocks): the host walks the same chunks, so both sides take the number from here. */
#define KMOE_THREADS 256
#define KMOE_WARPS (KMOE_THREADS / MOE_WARP)

/* Blocks of KMOE_THREADS that cover n items, at least one (cuda_blocks, for this block size). */
MOE_HD unsigned kmoe_grid(size_t n) {
    size_t b = (n + KMOE_THREADS - 1) / KMOE_THREADS;
    return (unsigned)(b ? b : 1);
}

/* ---- router ------------------------------------------------------------------------------- */

/* One token's scores row sn (E) from its logits l (E), and *lse_n = logsumexp(l) unless lse_n
 * is NULL. Softmax: exp(l - max), summed in double in expert order, then scaled by 1 / sum.
 * Sigmoid: 1 / (1 + exp(-l)) per expert (exp overflows to inf below -88, giving 0), and the
 * lse of the logits all the same (the z-loss penalises it in both modes). */
MOE_HD void kmoe_scores_row(float *sn, float *lse_n, const float *l, int E, int sigmoid) {
    float m = l[0];
    for (int e = 1; e < E; e++) m = l[e] > m ? l[e] : m;
    double sum = 0.0;
    if (sigmoid) {
        for (int e = 0; e < E; e++) sn[e] = 1.0f / (1.0f + expf(-l[e]));
        if (lse_n)
            for (int e = 0; e < E; e++) sum += expf(l[e] - m);
    } else {
        for (int e = 0; e < E; e++) {
            sn[e] = expf(l[e] - m);
            sum += sn[e];
        }
        float inv = (float)(1.0 / sum);
        for (int e = 0; e < E; e++) sn[e] *= inv;
    }
    /* the sum is a double (as in router.c), so its log is taken in double too */
    if (lse_n) *lse_n = m + (float)log(sum);
}

/* One token's top-k and gate weights: moe/router_row.h (router_gate_row), the reference's own
 * rows, which router.c runs per token and k_gate per thread. */

/* Thread t's share of the z-loss's sum over lse (N): lse[n]^2 for n = t, t + nt, ..., in
 * double. */
MOE_HD double kmoe_zloss_part(const float *lse, int N, int t, int nt) {
    double a = 0.0;
    for (int n = t; n < N; n += nt) a += (double)lse[n] * lse[n];
    return a;
}
/* the mean from the block's total */
MOE_HD float kmoe_zloss_final(double total, int N) {
    return N > 0 ? (float)(total / N) : 0.0f;
}

/* The host's walk of a device tree reduction over v (n, a power of 2): for off = n/2, ..., 1,
 * v[t] += v[t + off] for t < off; returns v[0]. It is the pairing of both device trees: the
 * z-loss's over shared memory (if (t < off) sh[t] += sh[t + off]) and the dw warp's
 * __shfl_down_sync (lane 0 reads only lanes whose values the host loop keeps). */
MOE_HD double kmoe_tree_sum(double *v, int n) {
    for (int off = n / 2; off > 0; off /= 2)
        for (int t = 0; t < off; t++) v[t] += v[t + off];
    return v[0];
}

/* ---- dispatch plan (dropless) ------------------------------------------------------------- */

/* whether assignment j (of NK) goes to expert e: the flag of one thread of a chunk */
MOE_HD int kmoe_plan_hit(const int *idx, size_t NK, size_t j, int e) {
    return j < NK && idx[j] == e;
}
/* bits set in x (the device's __popc) */
MOE_HD int kmoe_popc32(unsigned x) {
#ifdef __CUDA_ARCH__
    return __popc(x);
#else
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    x = (x + (x >> 4)) & 0x0f0f0f0fu;
    return (int)((x * 0x01010101u) >> 24);
#endif
}
/* lane's rank among its warp's hits: the hits of the lanes below it in the ballot mask */
MOE_HD int kmoe_lane_rank(unsigned mask, int lane) {
    return kmoe_popc32(mask & ((1u << lane) - 1u));
}
/* hits of the warps before warp w, from each warp's count (w = KMOE_WARPS: the chunk's total) */
MOE_HD int kmoe_warps_before(const int *warp_hits, int w) {
    int s = 0;
    for (int i = 0; i < w; i++) s += warp_hits[i];
    return s;
}
/* Step d (1, 2, 4, ...) of the block's Hillis-Steele inclusive scan over v (KMOE_THREADS):
 * what thread t adds to its value, read before anyone writes (the kernel syncs between). */
MOE_HD int kmoe_scan_addend(const int *v, int t, int d) {
    return t >= d ? v[t - d] : 0;
}
/* Assignment j's final slot, from its rank in slot[j] and its expert's offset, and the slot's
 * token j / K. An expert id outside [0, E) (never from router_topk_row) is marked dropped
 * rather than written out of bounds. */
MOE_HD void kmoe_plan_place(int *slot, int *slot_token, const int *idx, const int *offsets,
                            size_t j, int E, int K) {
    int e = idx[j];
    if (e < 0 || e >= E) {
        slot[j] = -1;
        return;
    }
    int s = offsets[e] + slot[j];
    slot[j] = s;
    slot_token[s] = (int)(j / (size_t)K);
}

/* ---- capacity and expert-choice plans ------------------------------------------------------
 * Both plans keep, per group of candidates, the cap best by a key (the router score) with ties
 * to the earlier candidate, as capacity.c's and expert_choice.c's comparators order them:
 *
 *   capacity       a group is (scope, expert e): the assignments j of the scope's tokens with
 *                  idx[j] == e still kept after the random second expert (slot[j] 0, not -1),
 *                  in (n, k) order; keyed by scores[n, e] (drop_policy score) or not keyed at
 *                  all (position: the first cap in order are kept);
 *   expert choice  a group is expert e's column: every token n, keyed by scores[n, e].
 *
 * One block per group finds the cap-th largest key without sorting (a radix select): the keys
 * are the scores' bits made unsigned-orderable (kmoe_order_key), four passes of 8 bits each
 * count the candidates whose higher bits equal the prefix found so far into 256 bins (shared
 * integer counts: exact in any order), and a scan over the bins from the top names the bin
 * that holds the cap-th key and how many of that bin are still wanted. After the four passes
 * tkey is the cap-th key itself and r the number of candidates with key == tkey to keep. A
 * last walk in item order keeps every candidate above tkey and the first r equal to it (their
 * rank among the ties by the same ballots as the dropless plan's), which is exactly "the cap
 * largest, ties to the lower token". A group of cap or fewer candidates keeps them all; the
 * position policy is that walk with every candidate a tie and r = cap. The cost is five walks
 * over the group's items whatever the skew of the router (a sort or a pairwise rank would grow
 * with the square of the busiest expert's candidates). */

/* The radix select's bins: one per thread of a block (thread t holds bin t, digit 255 - t, so
 * that the block's inclusive scan over the bins counts from the largest digit down). */
#define KMOE_RADIX_PASSES 4
#define KMOE_RADIX_BINS 256
#if KMOE_THREADS != KMOE_RADIX_BINS
#error "the radix select holds one bin per thread: KMOE_THREADS must be 256"
#endif

/* v's bits as an unsigned that orders as v does (a larger float, a larger key): the sign bit
 * flipped for v >= 0, every bit for v < 0. -0 becomes +0 first, since the reference's
 * comparisons (> and <) find them equal and break the tie by token. A NaN, which the
 * reference's comparators cannot order (its sort is then undefined), ranks beyond the infinity
 * of its sign. */
MOE_HD unsigned kmoe_order_key(float v) {
    unsigned u;
#ifdef __CUDA_ARCH__
    u = __float_as_uint(v);
#else
    memcpy(&u, &v, sizeof u);
#endif
    if ((u << 1) == 0u) u = 0u; /* -0 -> +0 */
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

/* Pass p (0 ..) of the select looks at bits [32 - 8 (p + 1), 32 - 8 p) of a key. */
MOE_HD int kmoe_radix_shift(int pass) {
    return 32 - 8 * (pass + 1);
}
/* whether key's bits above pass's digit equal prefix's (every key at pass 0) */
MOE_HD int kmoe_radix_in(unsigned key, unsigned prefix, int pass) {
    return pass == 0 || ((key ^ prefix) >> (32 - 8 * pass)) == 0u;
}
/* the bin of key's digit at pass: the largest digit in bin 0 */
MOE_HD int kmoe_radix_bin(unsigned key, int pass) {
    return KMOE_RADIX_BINS - 1 - (int)((key >> kmoe_radix_shift(pass)) & 0xffu);
}
/* Whether the bin whose counts before it (excl) and up to it (incl) are those of the block's
 * scan holds the krem-th largest key: exactly one bin does when krem <= the bins' total. */
MOE_HD int kmoe_radix_pick(int excl, int incl, int krem) {
    return excl < krem && krem <= incl;
}

/* The items a selection block walks and how one becomes a candidate with its key.
 * Capacity (idx set): item j is an assignment, a candidate of expert e when idx[j] == e and
 * slot[j] >= 0 (not dropped by the random second expert), keyed by vals = scores (N, E) at
 * (j / K, e); vals NULL (the position policy) gives every candidate key 0. Expert choice (idx
 * NULL): item n is a token, always a candidate, keyed by vals = e's column of scores (N). */
typedef struct {
    const int *idx, *slot;
    const float *vals;
    size_t end; /* items past the group's last are not candidates */
    int E, K, e;
} KmoeSel;

/* Whether item i of sel is a candidate, and its key in *key (0 when not keyed). idx[i] is read
 * before slot[i], so a block reads only the slots of its own expert, which no other block
 * writes. */
MOE_HD int kmoe_sel_item(unsigned *key, const KmoeSel *sel, size_t i) {
    *key = 0u;
    if (i >= sel->end) return 0;
    if (sel->idx) {
        if (sel->idx[i] != sel->e || sel->slot[i] < 0) return 0;
        if (sel->vals)
            *key = kmoe_order_key(sel->vals[(i / (size_t)sel->K) * (size_t)sel->E + sel->e]);
    } else {
        *key = kmoe_order_key(sel->vals[i]);
    }
    return 1;
}
/* Whether a candidate is one of the ties the final walk ranks in item order: its key equals
 * the threshold (ranked), or every candidate (not ranked: the position policy, or a group
 * whose candidates all fit). */
MOE_HD int kmoe_sel_tie(int hit, unsigned key, unsigned tkey, int ranked) {
    return hit && (!ranked || key == tkey);
}
/* Whether a candidate is kept: above the threshold, or a tie of rank below r (ranked);
 * among the first r in item order (not ranked, r = cap). */
MOE_HD int kmoe_sel_keep(int hit, unsigned key, unsigned tkey, int ranked, int tie_rank, int r) {
    if (!hit) return 0;
    if (ranked && key > tkey) return 1;
    return kmoe_sel_tie(hit, key, tkey, ranked) && tie_rank < r;
}

/* Token-choice capacity. The host's sizes, capacity.c's formulas: the tokens of a scope Ts
 * (T with capacity_scope sequence and 0 < T < N, else N), the budget cap per scope and expert,
 * the scopes (the last may be shorter, with the same cap), and R, the rows per expert of a
 * padded plan (0: packed by the kept counts). Not MOE_HD: the host computes them per call. */
typedef struct {
    int Ts, cap, nscope, R;
} KmoeCapSizes;
static inline KmoeCapSizes kmoe_cap_sizes(const MoeSpec *s, const MoeCtx *x, int N, int E) {
    KmoeCapSizes z;
    z.Ts = s->capacity_scope == MOE_CAP_SEQUENCE && x->T > 0 && x->T < N ? x->T : N;
    z.cap = moe_capacity(s, x->capacity_factor, z.Ts);
    z.nscope = z.Ts > 0 ? (N + z.Ts - 1) / z.Ts : 0;
    z.R = E > 0 ? (int)(moe_padded_slots(s, x->capacity_factor, x->T, N) / (size_t)E) : 0;
    return z;
}
/* GShard's random second expert, as capacity.c decides and draws it: on with K = 2 and a
 * stream (training); then u (N) gets one uniform per token, in token order, from the stream.
 * The host draws and the device compares, so the run's stream advances exactly as on the CPU
 * (and a resumed run repeats it). Not MOE_HD. */
static inline int kmoe_cap_random(const MoeSpec *s, const MoeCtx *x, int K) {
    return s->second_expert_random && K == 2 && x->rng;
}
static inline void kmoe_cap_draws(float *u, Rng *rng, int N) {
    for (int n = 0; n < N; n++) u[n] = rng_uniform(rng);
}

/* Assignment j's flag before the capacity: 0 (a candidate) or -1 (dropped): an expert id
 * outside [0, E) (the reference stops on it; here it joins no expert and is never written out
 * of bounds), or, with the draws u (N, K = 2; NULL: none), a second choice with
 * u[n] >= 2 w[n, 1] (dispatched with probability min(1, 2 w_2)). */
MOE_HD int kmoe_cap_flag(const int *idx, const float *w, const float *u, size_t j, int E, int K) {
    const int e = idx[j];
    if (e < 0 || e >= E) return -1;
    if (u && j % (size_t)K == 1 && u[j / (size_t)K] >= 2.0f * w[j]) return -1;
    return 0;
}
/* Scope sc's assignments [*j0, *j1) of N tokens, K each, in scopes of Ts tokens */
MOE_HD void kmoe_cap_scope_items(size_t *j0, size_t *j1, int sc, int Ts, int N, int K) {
    const int t0 = sc * Ts, t1 = t0 + Ts < N ? t0 + Ts : N;
    *j0 = (size_t)t0 * K;
    *j1 = (size_t)t1 * K;
}
/* A kept assignment's final slot from its rank in its expert's kept ones (slot[j]) and the
 * expert's offset, and the slot's token j / K; a dropped one (-1) stays dropped. */
MOE_HD void kmoe_cap_place(int *slot, int *slot_token, const int *idx, const int *offsets, size_t j,
                           int K) {
    const int rank = slot[j];
    if (rank < 0) return;
    const int s = offsets[idx[j]] + rank;
    slot[j] = s;
    slot_token[s] = (int)(j / (size_t)K);
}
/* Slot row s of a padded plan (R rows per expert): a padding row (token -1) past its expert's
 * kept rows; a kept row is k_cap_place's. */
MOE_HD void kmoe_cap_pad_row(int *slot_token, const int *counts, size_t s, int R) {
    const int e = (int)(s / (size_t)R);
    if ((int)(s - (size_t)e * R) >= counts[e]) slot_token[s] = -1;
}

/* Expert choice. Element i = (n, e) of the (N, E) layout: idx = e, w = rs scores (the
 * reference's product, so the same bits), and e's column col (E, N) of the scores, which the
 * selection walks with coalesced reads. */
MOE_HD void kmoe_ec_fill(int *idx, float *w, float *col, const float *scores, size_t i, int N,
                         int E, float rs) {
    const int e = (int)(i % (size_t)E);
    const size_t n = i / (size_t)E;
    idx[i] = e;
    w[i] = rs * scores[i];
    col[(size_t)e * N + n] = scores[i];
}
/* Token n's slot of expert e: e cap + its rank among e's picked tokens (token order), and that
 * slot's token; -1 when e did not pick it. */
MOE_HD void kmoe_ec_place(int *slot, int *slot_token, int n, int e, int E, int cap, int picked,
                          int rank) {
    if (!picked) {
        slot[(size_t)n * E + e] = -1;
        return;
    }
    const int s = e * cap + rank;
    slot[(size_t)n * E + e] = s;
    slot_token[s] = n;
}

/* ---- rows: permute, combine and their backward ---------------------------------------------
 * A is the plan's assignments per token (p->K: top_k, or E for an expert-choice plan); slot_n
 * is token n's A slots (-1: dropped). Each body is one thread's columns c = c0, c0 + step, ...
 * of one output row. */

/* Threads of a row kernel's block for rows of C columns: whole warps, at most KMOE_THREADS. */
MOE_HD int kmoe_row_threads(int C) {
    int t = (C + MOE_WARP - 1) / MOE_WARP * MOE_WARP;
    return t < MOE_WARP ? MOE_WARP : t > KMOE_THREADS ? KMOE_THREADS : t;
}

/* xe row s = x[n] (n = slot_token[s]), or 0 for a padding row (n < 0) */
MOE_HD void kmoe_permute_row(float *xe_s, const float *x, int n, int C, int c0, int step) {
    for (int c = c0; c < C; c += step) xe_s[c] = n < 0 ? 0.0f : x[(size_t)n * C + c];
}

/* dx row n = sum over k of dxe[slot(n, k)], k in order, dropped assignments skipped */
MOE_HD void kmoe_permute_back_row(float *dx_n, const float *dxe, const int *slot_n, int A, int C,
                                  int c0, int step) {
    for (int c = c0; c < C; c += step) {
        float acc = 0.0f;
        for (int k = 0; k < A; k++) {
            int s = slot_n[k];
            if (s >= 0) acc += dxe[(size_t)s * C + c];
        }
        dx_n[c] = acc;
    }
}

/* y row n = sum over k of w[n, k] ye[slot(n, k)], k in order, dropped assignments skipped */
MOE_HD void kmoe_combine_row(float *y_n, const float *ye, const float *w_n, const int *slot_n,
                             int A, int C, int c0, int step) {
    for (int c = c0; c < C; c += step) {
        float acc = 0.0f;
        for (int k = 0; k < A; k++) {
            int s = slot_n[k];
            if (s >= 0) acc += w_n[k] * ye[(size_t)s * C + c];
        }
        y_n[c] = acc;
    }
}

/* which of token n's assignments holds slot s (slot_n: its A slots), or -1 */
MOE_HD int kmoe_slot_assignment(const int *slot_n, int A, int s) {
    for (int k = 0; k < A; k++)
        if (slot_n[k] == s) return k;
    return -1;
}

/* dye row s = w[n, k] dy[n] for the one assignment (n, k) the slot holds; 0 for a padding row
 * (slot_token -1) and for a row no assignment points at (then nothing downstream reads it, and
 * 0 keeps NaN left in scratch from reaching the experts' backward) */
MOE_HD void kmoe_combine_dye_row(float *dye_s, const float *dy, const float *w, const int *slot,
                                 const int *slot_token, int s, int A, int C, int c0, int step) {
    int n = slot_token[s];
    int k = n < 0 ? -1 : kmoe_slot_assignment(slot + (size_t)n * A, A, s);
    if (k < 0) {
        for (int c = c0; c < C; c += step) dye_s[c] = 0.0f;
        return;
    }
    float wk = w[(size_t)n * A + k];
    for (int c = c0; c < C; c += step) dye_s[c] = wk * dy[(size_t)n * C + c];
}

/* lane's share of dw[n, k] = dot(dy[n], ye[slot(n, k)]): c = lane, lane + lanes, ..., in double */
MOE_HD double kmoe_dot_lane(const float *dy_n, const float *ye_s, int C, int lane, int lanes) {
    double a = 0.0;
    for (int c = lane; c < C; c += lanes) a += (double)dy_n[c] * ye_s[c];
    return a;
}

#endif
