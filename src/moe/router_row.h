/*
 * router_row.h: one token's top-k (in its best groups of experts with moe.n_group) and gate
 * weights, written once.
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

/* One token's top-k among the experts of the kept groups: in (K) the K largest of key + bias
 * (bias may be NULL), in descending order, over the groups g of per consecutive experts
 * [g per, (g + 1) per) whose bit g is set in kept (E / per <= 64 groups). K passes of "largest
 * key not yet taken": K is small (1..8), and scanning the experts in increasing order with a
 * strict > makes a tie go to the lower expert. The taken set is read back from in[0..k) (the
 * row just written) rather than held in an array of its own, and the kept groups are the bits
 * of one integer: on the GPU nothing indexed at run time lives in registers, so nothing spills
 * to local memory, and the choice is the same even for keys that do not order (NaN). The kept
 * groups must hold at least K experts (config_validate sees to it). */
MOE_HD void router_topk_kept_row(int *in, const float *key, const float *bias, int E, int K,
                                 int per, unsigned long long kept) {
    for (int k = 0; k < K; k++) {
        int best = -1;
        float best_key = 0.0f;
        for (int g = 0, e0 = 0; e0 < E; g++, e0 += per) {
            if (!((kept >> g) & 1u)) continue;
            for (int e = e0; e < e0 + per; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++) taken |= in[j] == e;
                if (taken) continue;
                float ke = bias ? key[e] + bias[e] : key[e];
                if (best < 0 || ke > best_key) {
                    best = e;
                    best_key = ke;
                }
            }
        }
        in[k] = best;
    }
}

/* One token's top-k over all E experts (one group, kept). */
MOE_HD void router_topk_row(int *in, const float *key, const float *bias, int E, int K) {
    router_topk_kept_row(in, key, bias, E, K, E, 1u);
}

/* A group's score: the sum of the two largest of key + bias over its experts [e0, e0 + n),
 * n >= 2 (DeepSeek-V3's: one expert that scores high does not carry a group alone). */
MOE_HD float router_group_score(const float *key, const float *bias, int e0, int n) {
    float a = 0.0f, b = 0.0f; /* the largest and the second */
    for (int e = e0; e < e0 + n; e++) {
        float v = bias ? key[e] + bias[e] : key[e];
        if (e == e0) {
            a = v;
        } else if (e == e0 + 1 || v > a) {
            b = v > a ? a : v; /* the second: the smaller of the two seen so far */
            a = v > a ? v : a;
        } else if (v > b) {
            b = v;
        }
    }
    return a + b;
}

/* The groups a token keeps: bit g set for each of its KG best of G groups of E / G experts (G
 * <= 64), by router_group_score. KG passes of "best group not yet kept", with a strict > over
 * the groups in increasing order: a tie goes to the lower group, and exactly KG bits are set
 * whatever the scores (NaN included). */
MOE_HD unsigned long long router_group_mask(const float *key, const float *bias, int E, int G,
                                            int KG) {
    const int per = E / G;
    unsigned long long kept = 0;
    for (int j = 0; j < KG; j++) {
        int best = -1;
        float best_score = 0.0f;
        for (int g = 0; g < G; g++) {
            if ((kept >> g) & 1u) continue;
            float sg = router_group_score(key, bias, g * per, per);
            if (best < 0 || sg > best_score) {
                best = g;
                best_score = sg;
            }
        }
        kept |= 1ull << best;
    }
    return kept;
}

/* One token's top-k with group-limited routing (moe.n_group = G, moe.topk_group = KG; G < 2:
 * none, KG outside 1..G: every group): the experts of the token's KG best groups only. With
 * KG = G every group is kept and the choice is router_topk_row's, bit for bit. */
MOE_HD void router_group_topk_row(int *in, const float *key, const float *bias, int E, int K, int G,
                                  int KG) {
    if (G < 2) {
        router_topk_row(in, key, bias, E, K);
        return;
    }
    KG = KG >= 1 && KG <= G ? KG : G;
    router_topk_kept_row(in, key, bias, E, K, E / G, router_group_mask(key, bias, E, G, KG));
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

/* The whole gate of one token: top-k over scores + bias (logits + bias when topk_first), in
 * its G, KG best groups when G >= 2 (router_group_topk_row), then the weights. p, l: the
 * token's scores and logits rows; l may be NULL unless topk_first. */
MOE_HD void router_gate_row(int *in, float *wn, const float *p, const float *l, const float *bias,
                            int E, int K, int G, int KG, int topk_first, int norm_topk, float rs) {
    router_group_topk_row(in, topk_first ? l : p, bias, E, K, G, KG);
    router_gate_weights_row(wn, in, p, l, K, topk_first, norm_topk, rs);
}

#endif
