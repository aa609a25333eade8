/*
 * plan_util.h: what tests/test_plan.c and tests/test_plan_search.c share: a relative
 * comparison, a published run's inputs, and a tiny MoE on 8 GPUs small enough to cost by hand.
 */
#ifndef MOE_TESTS_PLAN_UTIL_H
#define MOE_TESTS_PLAN_UTIL_H

#include <math.h>

#include "plan/plan.h"
#include "testutil.h"

/* |got - want| <= rtol |want|, the message giving both */
#define EXPECT_REL(got, want, rtol, what)                                                          \
    do {                                                                                           \
        const double g_ = (got), w_ = (want);                                                      \
        ck_assert_msg(fabs(g_ - w_) <= (rtol)*fabs(w_), "%s: expected %.17g, got %.17g (rtol %g)", \
                      (what), w_, g_, (double)(rtol));                                             \
    } while (0)
#define EXPECT_EQ(got, want, what) EXPECT_REL((got), (want), 0.0, (what))
#define RTOL 1e-12

static inline void run_preset(PlanInput *in, const char *name) {
    char err[512];
    plan_defaults(in);
    ck_assert_msg(plan_preset(in, "run", name, err, sizeof err) == 0, "%s", err);
}

/* A tiny MoE (2 layers, the first dense; 4 experts of 32, top-2, 1 shared; 4 heads) on 8 GPUs in
 * nodes of 4, laid out tp 2, ep 2, dp 4, micro-batches of 2 out of 16 sequences. */
static inline void hand_input(PlanInput *in) {
    plan_defaults(in);
    in->m.c.vocab = 1000;
    Config *m = &in->m.c; /* the engine's keys of the model */
    m->d_model = 64, m->n_layer = 2, m->n_head = 4, m->d_ff = 128;
    m->first_dense = 1, m->every = 1, m->num_experts = 4, m->top_k = 2, m->d_expert = 32;
    m->num_shared = 1, m->seq_len = 16;
    PlanCluster *k = &in->k;
    k->gpus = 8, k->gpus_per_node = 4, k->memory_gb = 80, k->peak_tflops[PLAN_PREC_BF16] = 100;
    k->efficiency = 0.5, k->hbm_tbs = 2, k->intra_gbs = 100, k->inter_gbs = 10;
    in->t.global_batch = 16;
    in->t.overlap_dp = 0; /* the gradient sums all exposed */
    in->lay = (PlanLayout){
        .tp = 2, .pp = 1, .ep = 2, .vpp = 1, .micro_batch = 2, .recompute = PLAN_RC_NONE};
    char err[512];
    ck_assert_msg(plan_validate(in, err, sizeof err) == 0, "%s", err);
}

#endif
