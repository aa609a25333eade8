/*
 * permute.c: the dispatch plan, and moving token rows to expert slots and back.
 *
 * The experts want their tokens contiguous, so that each expert runs ONE GEMM over its slice.
 * The plan is a counting sort of the N*K assignments (n, k) by expert:
 *
 *   counts[e]  = #{(n, k) : idx[n,k] = e}
 *   offsets[e] = counts[0] + ... + counts[e-1]          (offsets[E] = S)
 *   slot(n, k) = offsets[e] + (number of earlier assignments to e, in token order)
 *
 * Walking the assignments in (n, k) order makes the sort stable: inside an expert's slice the
 * tokens keep their original order, so the plan (and every sum over it) is deterministic.
 * A token never picks the same expert twice, so each slice holds distinct tokens.
 *
 *   permute:  xe[s]  = x[slot_token[s]]                       (gather, S rows)
 *   combine:  y[n]   = sum_k w[n,k] ye[slot(n,k)]             (weighted scatter back, N rows)
 *
 * Accumulation rule (nn/ops.h): nothing here has parameters; every gradient is written (=).
 * Every OpenMP loop runs over output rows, so each row is summed by one thread in order.
 */
#include "moe/moe_ops.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void dispatch_plan_alloc(DispatchPlan *p, int N_max, int E, int K) {
    p->N = 0;
    p->E = E;
    p->K = K;
    p->S = 0;
    p->counts = calloc_check((size_t)E, sizeof(int));
    p->offsets = calloc_check((size_t)E + 1, sizeof(int));
    p->slot = calloc_check((size_t)N_max * K + 1, sizeof(int));
    p->slot_token = calloc_check((size_t)N_max * K + 1, sizeof(int));
}

void dispatch_plan_free(DispatchPlan *p) {
    free(p->counts);
    free(p->offsets);
    free(p->slot);
    free(p->slot_token);
    memset(p, 0, sizeof(*p));
}

void dispatch_plan_build(DispatchPlan *p, const int *idx, int N) {
    /* idx (N, K), N <= the N_max of dispatch_plan_alloc (the plan does not record it).
     * Expert ids come from router_topk_forward, so one out of range is a bug in the caller,
     * not bad user input. */
    int E = p->E, K = p->K;
    size_t NK = (size_t)N * K;
    memset(p->counts, 0, (size_t)E * sizeof(int));
    for (size_t j = 0; j < NK; j++) {
        if (idx[j] < 0 || idx[j] >= E)
            moe_fatal("expert index %d at assignment %zu is outside [0, %d): the routing "
                      "indices are corrupt",
                      idx[j], j, E);
        p->counts[idx[j]]++;
    }
    p->offsets[0] = 0;
    for (int e = 0; e < E; e++) p->offsets[e + 1] = p->offsets[e] + p->counts[e];
    /* second pass: counts[e] doubles as the fill cursor of slice e and ends where it started */
    memset(p->counts, 0, (size_t)E * sizeof(int));
    for (size_t j = 0; j < NK; j++) {
        int e = idx[j];
        int s = p->offsets[e] + p->counts[e]++;
        p->slot[j] = s;
        p->slot_token[s] = (int)(j / (size_t)K);
    }
    p->N = N;
    p->S = p->offsets[E];
}

void permute_forward(float *xe, const float *x, const DispatchPlan *p, int C) {
    /* xe (S, C), x (N, C). A padding row of a padded capacity plan (slot_token -1) is zero:
     * the expert computes it and produces 0 (silu(0) * 0), which nobody reads. */
#pragma omp parallel for
    for (int s = 0; s < p->S; s++) {
        int n = p->slot_token[s];
        if (n < 0)
            memset(xe + (size_t)s * C, 0, (size_t)C * sizeof(float));
        else
            memcpy(xe + (size_t)s * C, x + (size_t)n * C, (size_t)C * sizeof(float));
    }
}

void permute_backward(float *dx, const float *dxe, const DispatchPlan *p, int C) {
    /* dx (N, C) written, dxe (S, C).
     * forward: xe[slot(n,k)] = x[n] for each kept k, so dx[n] = sum_k dxe[slot(n,k)].
     * Looping over tokens (not slots) gives each dx row one owner and a fixed k order. */
    int K = p->K;
#pragma omp parallel for
    for (int n = 0; n < p->N; n++) {
        float *dxn = dx + (size_t)n * C;
        memset(dxn, 0, (size_t)C * sizeof(float));
        for (int k = 0; k < K; k++) {
            int s = p->slot[(size_t)n * K + k];
            if (s < 0) continue;
            const float *src = dxe + (size_t)s * C;
            for (int c = 0; c < C; c++) dxn[c] += src[c];
        }
    }
}

void combine_forward(float *y, const float *ye, const float *w, const DispatchPlan *p, int C) {
    /* y (N, C) written, ye (S, C), w (N, K) */
    int K = p->K;
#pragma omp parallel for
    for (int n = 0; n < p->N; n++) {
        float *yn = y + (size_t)n * C;
        memset(yn, 0, (size_t)C * sizeof(float));
        for (int k = 0; k < K; k++) {
            int s = p->slot[(size_t)n * K + k];
            if (s < 0) continue;
            float wk = w[(size_t)n * K + k];
            const float *src = ye + (size_t)s * C;
            for (int c = 0; c < C; c++) yn[c] += wk * src[c];
        }
    }
}

void combine_backward(float *dye, float *dw, const float *dy, const float *ye, const float *w,
                      const DispatchPlan *p, int C) {
    /* dye (S, C) written, dw (N, K) written, dy (N, C), ye (S, C), w (N, K).
     * forward: y[n] = sum_k w[n,k] ye[slot(n,k)]
     *   dye[slot(n,k)] = w[n,k] dy[n]          (each slot belongs to exactly one (n, k))
     *   dw[n,k]        = dot(dy[n], ye[slot(n,k)]),   0 for a dropped assignment */
    int K = p->K;
#pragma omp parallel for
    for (int n = 0; n < p->N; n++) {
        const float *dyn = dy + (size_t)n * C;
        for (int k = 0; k < K; k++) {
            size_t j = (size_t)n * K + k;
            int s = p->slot[j];
            if (s < 0) {
                if (dw) dw[j] = 0.0f;
                continue;
            }
            const float *yes = ye + (size_t)s * C;
            if (dye) {
                float *d = dye + (size_t)s * C;
                for (int c = 0; c < C; c++) d[c] = w[j] * dyn[c];
            }
            if (dw) {
                double dot = 0.0;
                for (int c = 0; c < C; c++) dot += (double)dyn[c] * yes[c];
                dw[j] = (float)dot;
            }
        }
    }
    /* padding rows (slot_token -1) feed no output: dye = 0. Their h is 0, so any finite
     * value would vanish anyway, but scratch left by another block may hold inf or NaN, and
     * 0 * NaN is NaN */
    if (dye) {
#pragma omp parallel for
        for (int s = 0; s < p->S; s++)
            if (p->slot_token[s] < 0) memset(dye + (size_t)s * C, 0, (size_t)C * sizeof(float));
    }
}
