/*
 * upcycle.h: turn a trained dense model into an MoE (sparse upcycling).
 *
 * Every block that the MoE config makes an MoE block (moe.every, moe.first_dense) gets
 * num_experts experts made from that block's dense SwiGLU (w_gate, w_up: (F, C); w_down:
 * (C, F)). Everything else (embedding, attention, norms, the dense blocks that stay dense,
 * the head) is carried over unchanged. The router is new: normal(0, router_std^2), or zeros.
 *
 * How an expert is made from the dense FFN, by option:
 *   copy            expert e = the dense FFN, exactly (noise 0, drop_ratio 0, split 1)
 *   noise           expert e = the dense FFN + N(0, (noise * std(W))^2) elementwise, with
 *                   std(W) the standard deviation of the dense matrix W being copied
 *   drop-upcycling  expert e = the dense FFN, except round(drop_ratio * Fe) hidden units
 *                   chosen at random for each expert (the same units in w_gate, w_up and
 *                   w_down): their rows of w_gate and w_up and their column of w_down are
 *                   drawn anew from N(mean(W), std(W)^2) of that dense matrix W.
 *                   drop_ratio 1 re-draws every unit (dense statistics, no dense weights).
 *   fine-grained    split G > 1: the dense hidden units are cut into G slices of Fe = F / G;
 *                   expert e takes slice e % G (so num_experts must be a multiple of G), and
 *                   its w_down slice is multiplied by G, so that a token whose gate weights are
 *                   spread evenly over the G slices gets the dense output back.
 * noise and drop_ratio apply after the copy or the slice, drop_ratio to the expert's Fe units.
 *
 * With exact copies (noise 0, drop_ratio 0, split 1), top-k weights that sum to 1
 * (moe.norm_topk=1, or moe.topk_before_softmax=1), route_scale 1, no shared experts and no
 * drops, the MoE block computes sum_k w_k FFN(x) = FFN(x): the upcycled model is its dense
 * parent, whatever the router says (tests/test_upcycle.c checks the loss).
 *
 * Library functions: no exit on bad input; -1 and a message in err saying what is wrong and
 * what to do.
 */
#ifndef MOE_UPCYCLE_H
#define MOE_UPCYCLE_H

#include <stdint.h>

#include "base/util.h"
#include "config/config.h"
#include "model/model.h"

typedef struct {
    float noise;      /* relative std of the noise added to the copies; 0 = none */
    float drop_ratio; /* fraction of each expert's hidden units re-drawn, in [0, 1] */
    int split;        /* fine-grained: slices per dense FFN (1 = whole copies) */
    float router_std; /* std of the new router weights; 0 = all zeros */
    uint64_t seed;    /* the noise, the re-drawn units and the router */
} UpcycleOptions;

/* Defaults: exact copies (noise 0, drop_ratio 0, split 1), router_std 0.02, seed 1. */
void upcycle_options_default(UpcycleOptions *o);

/* Mean and standard deviation (population, 1/n) of n floats, summed in double. */
void upcycle_stats(float *mean, float *std, const float *w, size_t n);

/* Experts of one MoE block from one dense SwiGLU.
 *   e_gate, e_up (E, Fe, C), e_down (E, C, Fe): written
 *   w_gate, w_up (F, C), w_down (C, F): the dense FFN
 * Fe = F / o->split. rng draws the noise and the re-drawn units, expert by expert in order
 * (expert 0 first), so the result depends only on the seed. */
void upcycle_ffn(float *e_gate, float *e_up, float *e_down, const float *w_gate, const float *w_up,
                 const float *w_down, int E, int F, int C, const UpcycleOptions *o, Rng *rng);

/* Drop-upcycling of one expert in place: choose n_drop distinct hidden units out of F uniformly
 * at random (partial Fisher-Yates over 0..F-1), and re-draw their rows of gate and up (F, C)
 * and their column of down (C, F) from N(mean, std^2) with the given per-matrix statistics
 * (stats[0..1] for gate, [2..3] for up, [4..5] for down: mean, std). The chosen units are
 * written to units (n_drop) when not NULL, in the order drawn. */
void upcycle_drop_units(float *gate, float *up, float *down, int *units, int n_drop, int F, int C,
                        const float stats[6], Rng *rng);

/* Whether a dense model of config dense can become a model of config moe with options o:
 * dense has no MoE block (moe.num_experts=0); moe has num_experts >= 1, no shared experts, the
 * same model.* shape (d_model, n_layer, n_head, d_ff); the expert hidden size equals
 * d_ff / split (split divides d_ff and num_experts); noise >= 0, drop_ratio in [0, 1],
 * router_std >= 0. Returns 0, or -1 with a message naming the setting and what to do. */
int upcycle_check(const Config *dense, const Config *moe, const UpcycleOptions *o, char *err,
                  int errlen);

/* Fill the parameters of dst (a model built for the MoE config) from src (the dense model):
 * upcycle_check first, then every tensor of dst, in parameter-table order. The AdamW moments
 * and the aux-free biases of dst are zeroed and its step set to 0. */
int upcycle_model(Model *dst, const Model *src, const UpcycleOptions *o, char *err, int errlen);

#endif
