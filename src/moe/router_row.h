/*
 * router_row.h: one token's top-k and gate weights, written once.
 *
 * router.c runs these rows in a loop over the tokens (the reference, every CPU backend's), and
 * the CUDA backend's gate kernels (backend/cuda/cuda_moe.cu) run one per thread: nvcc compiles
 * the same text for the device (MOE_HD, base/hd.h), so the two cannot drift apart. The exp of
 * the Mixtral weights is nn_expf on the host, the reference's bits, and CUDA's expf on the
 * device (nn/exp.h's bit tricks are a CPU vectorizer's answer; the GPU's weights agree to the
 * float tolerance, tests/test_backend_ops.c).
 */
#ifndef MOE_ROUTER_ROW_H
#define MOE_ROUTER_ROW_H

#include <math.h>

#include "base/hd.h"
#include "nn/exp.h"

#ifdef __CUDA_ARCH__
#define ROUTER_ROW_EXPF expf
#else
#define ROUTER_ROW_EXPF nn_expf
#endif

/* One token's top-k: in (K) the K largest of key + bias (bias may be NULL), in descending
 * order. K passes of "largest key not yet taken": K is small (1..8), and scanning the experts
 * in increasing order with a strict > makes a tie go to the lower expert. The taken set is read
 * back from in[0..k) (the row just written) rather than held in an array of its own: on the
 * GPU nothing indexed at run time lives in registers, so nothing spills to local memory, and
 * the choice is the same even for keys that do not order (NaN). */
MOE_HD void router_topk_row(int *in, const float *key, const float *bias, int E, int K) {
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
 * The normalising sums run in double in k order. */
MOE_HD void router_gate_weights_row(float *wn, const int *in, const float *p, const float *l, int K,
                                    int topk_first, int norm_topk, float rs) {
    if (topk_first) {
        float m = l[in[0]];
        for (int k = 1; k < K; k++) m = l[in[k]] > m ? l[in[k]] : m;
        double z = 0.0;
        for (int k = 0; k < K; k++) {
            wn[k] = ROUTER_ROW_EXPF(l[in[k]] - m);
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
MOE_HD void router_gate_row(int *in, float *wn, const float *p, const float *l, const float *bias,
                            int E, int K, int topk_first, int norm_topk, float rs) {
    router_topk_row(in, topk_first ? l : p, bias, E, K);
    router_gate_weights_row(wn, in, p, l, K, topk_first, norm_topk, rs);
}

#endif
