/*
 * kernels_moe.h: the arithmetic of the CUDA backend's MoE kernels (cuda_moe.cu), written as
 * plain C bodies that nvcc compiles for the device and gcc for the host. The host test
 * (tests/test_kernels_moe.c) runs them in loops that walk each kernel's grid in the kernel's
 * order and compares the results with the reference ops of src/moe (router.c, permute.c).
 *
 * What each kernel does with them (launch shapes in cuda_moe.cu):
 *
 *   scores, gate   one thread per token: the token's row exactly as router.c walks it (the same
 *                  loops, sums in double in expert order), so the top-k, its ties (to the lower
 *                  expert) and the chosen experts are the reference's integers;
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
 *
 * No float atomics anywhere: every sum has one owner and a fixed order, so a result repeats
 * bit for bit. expf and log are the C library's (CUDA's on the device), not nn_expf: the
 * scores agree with the reference's to the float tolerance, the integers exactly.
 */
#ifndef MOE_BACKEND_KERNELS_MOE_H
#define MOE_BACKEND_KERNELS_MOE_H

#include <math.h>
#include <stddef.h>

#include "backend/hd.h"
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

/* One token's top-k: in (K) the K largest of key + bias (bias may be NULL), in descending order,
 * ties to the lower expert. K passes of "largest key not yet taken", scanning the experts in
 * increasing order with a strict >, as router.c does. The taken set is read back from in[0..k)
 * (the row this thread has just written) rather than held in a per-thread array: nothing
 * indexed at run time lives in registers, so nothing spills to local memory, and the choice
 * stays the reference's even for keys that do not order (NaN). */
MOE_HD void kmoe_topk_row(int *in, const float *key, const float *bias, int E, int K) {
    for (int k = 0; k < K; k++) {
        int best = -1;
        float best_key = 0.0f;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= in[j] == e;
            if (taken) continue;
            float ke = bias ? key[e] + bias[e] : key[e];
            if (best < 0 || ke > best_key) {
                best = e;
                best_key = ke;
            }
        }
        in[k] = best;
    }
}

/* One token's gate weights wn (K) for its chosen experts in (K), scores row p (E), logits row
 * l (E, read only when topk_first):
 *   topk_first  rs * softmax over the K chosen logits (shifted by their maximum; no bias);
 *   otherwise   rs * the chosen scores, renormalised to sum 1 over the K when norm_topk.
 * The normalising sums run in double in k order, as in router.c. */
MOE_HD void kmoe_gate_weights_row(float *wn, const int *in, const float *p, const float *l, int K,
                                  int topk_first, int norm_topk, float rs) {
    if (topk_first) {
        float m = l[in[0]];
        for (int k = 1; k < K; k++) m = l[in[k]] > m ? l[in[k]] : m;
        double z = 0.0;
        for (int k = 0; k < K; k++) {
            wn[k] = expf(l[in[k]] - m);
            z += wn[k];
        }
        float inv = (float)(1.0 / z);
        for (int k = 0; k < K; k++) wn[k] = wn[k] * inv * rs;
        return;
    }
    if (norm_topk) {
        double z = 0.0;
        for (int k = 0; k < K; k++) z += p[in[k]];
        float inv = (float)(1.0 / z);
        for (int k = 0; k < K; k++) wn[k] = p[in[k]] * inv;
    } else {
        for (int k = 0; k < K; k++) wn[k] = p[in[k]];
    }
    for (int k = 0; k < K; k++) wn[k] *= rs;
}

/* The whole gate of one token: top-k over scores + bias (logits + bias when topk_first), then
 * the weights. p, l: the token's scores and logits rows; l may be NULL unless topk_first. */
MOE_HD void kmoe_gate_row(int *in, float *wn, const float *p, const float *l, const float *bias,
                          int E, int K, int topk_first, int norm_topk, float rs) {
    kmoe_topk_row(in, topk_first ? l : p, bias, E, K);
    kmoe_gate_weights_row(wn, in, p, l, K, topk_first, norm_topk, rs);
}

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
 * token j / K. An expert id outside [0, E) (never from kmoe_topk_row) is marked dropped
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
