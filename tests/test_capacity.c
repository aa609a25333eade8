/*
 * test_capacity.c: token-choice capacity (moe.capacity_factor, moe/capacity.c).
 *
 *   - the capacity arithmetic: tiny batches, a factor below 1, top_k > 1, min_capacity
 *     winning, the clamp to the tokens of the scope, per-sequence scope, padded slot counts;
 *   - both drop policies on hand-made routings: exactly which assignments are kept, in batch
 *     and in sequence scope, and the slot layout (token order inside a slice, padding rows);
 *   - a token whose every assignment is dropped: block output exactly 0;
 *   - the backward pass of the block in capacity mode against finite differences (scores far
 *     enough apart that no drop changes under the perturbation), both policies;
 *   - dropless and a capacity that drops nothing give bit-identical outputs and gradients;
 *     padded and unpadded execution too, batch and sequence scope, also at sizes where sgemm
 *     changes kernels with the row count;
 *   - GShard's random second expert: the dispatched fraction matches E[min(1, 2 w_2)], nothing
 *     is drawn in evaluation.
 * Whole models in capacity mode: test_capacity_model.c.
 */
#include <math.h>
#include <string.h>

#include "model/moe_block.h"
#include "testutil.h"

#define EPS 1e-3f

static MoeSpec cap_spec(int C, int E, int K, int F, float factor, int min_cap) {
    MoeSpec sp = {.d_model = C, .num_experts = E, .top_k = K, .d_expert = F};
    moe_spec_defaults(&sp);
    sp.capacity_factor = factor;
    sp.min_capacity = min_cap;
    return sp;
}

/* A training call on sequences of sp->seq_len tokens (0, as cap_spec leaves it: no sequence
 * scope), at the spec's capacity factor; rng may be NULL. */
static MoeCtx call_ctx(const MoeSpec *sp, Rng *rng) {
    MoeCtx cx;
    moe_ctx_train(&cx, sp, sp->seq_len, rng);
    return cx;
}

START_TEST(test_capacity_arithmetic) {
    MoeSpec sp = cap_spec(2, 4, 1, 2, 1.0f, 1);
    ck_assert_int_eq(moe_capacity(&sp, 1.0f, 16), 4);  /* 16 * 1 / 4 */
    ck_assert_int_eq(moe_capacity(&sp, 0.5f, 16), 2);  /* a factor below 1 */
    ck_assert_int_eq(moe_capacity(&sp, 1.1f, 16), 5);  /* ceil(4.4) */
    ck_assert_int_eq(moe_capacity(&sp, 0.01f, 16), 1); /* never below 1 */
    sp.min_capacity = 4;
    ck_assert_int_eq(moe_capacity(&sp, 0.5f, 16), 4); /* min_capacity wins over 2 */
    ck_assert_int_eq(moe_capacity(&sp, 1.0f, 3), 3);  /* tiny batch: clamped to the tokens */
    ck_assert_int_eq(moe_capacity(&sp, 1.0f, 1), 1);
    ck_assert_int_eq(moe_capacity(&sp, 10.0f, 16), 16); /* clamped to the tokens */
    sp = cap_spec(2, 4, 2, 2, 1.25f, 1);
    ck_assert_int_eq(moe_capacity(&sp, 1.25f, 10), 7); /* top_k 2: ceil(1.25 * 10 * 2 / 4) */
    ck_assert_int_eq(moe_capacity(&sp, 1.0f, 10), 5);
    /* decimal factors that float only approximates: the ceil of the exact product */
    sp = cap_spec(2, 2, 1, 2, 1.1f, 1);
    ck_assert_int_eq(moe_capacity(&sp, 1.1f, 20), 11); /* 1.1f * 20 / 2 = 11.0000002 */
    ck_assert_int_eq(moe_capacity(&sp, 1.1f, 21), 12); /* ceil(11.55) */
    sp = cap_spec(2, 9, 4, 2, 1.2f, 1);
    ck_assert_int_eq(moe_capacity(&sp, 1.2f, 90), 48); /* 1.2f * 90 * 4 / 9 = 48.000004 */
    sp = cap_spec(2, 4, 1, 2, 0.1f, 1);
    ck_assert_int_eq(moe_capacity(&sp, 0.1f, 40), 1);
    /* huge factors mean every token, never an overflow down to min_capacity: 3e38 (near
     * FLT_MAX), the largest float, and factors just above and below where the shortcut starts
     * (factor K = 2 E) give what the exact integer ceil gives */
    sp = cap_spec(2, 8, 1, 2, 3e38f, 4);
    ck_assert_int_eq(moe_capacity(&sp, 3e38f, 1024), 1024);
    ck_assert_int_eq(moe_capacity(&sp, 3.4028235e38f, 1024), 1024);
    ck_assert_int_eq(moe_capacity(&sp, 1e9f, 1 << 30), 1 << 30);
    ck_assert_int_eq(moe_capacity(&sp, 16.0f, 1024), 1024);
    ck_assert_int_eq(moe_capacity(&sp, 15.9f, 1024), 1024);
    ck_assert_int_eq(moe_capacity(&sp, 4.0f, 1024), 512);

    /* scope: 12 tokens, sequences of 4, E = 2, K = 1 */
    sp = cap_spec(2, 2, 1, 2, 1.0f, 1);
    ck_assert_int_eq(moe_expert_rows(&sp, 1.0f, 4, 12), 6); /* batch: cap(12) = 6 */
    sp.capacity_scope = MOE_CAP_SEQUENCE;
    ck_assert_int_eq(moe_expert_rows(&sp, 1.0f, 4, 12), 6);  /* 3 sequences x cap(4) = 2 */
    ck_assert_int_eq(moe_expert_rows(&sp, 0.25f, 4, 12), 3); /* 3 x max(1, ceil(0.5)) */
    sp.min_capacity = 3;
    ck_assert_int_eq(moe_expert_rows(&sp, 0.25f, 4, 12), 9); /* min_capacity per sequence */
    /* moe_slots_max sizes for sequences of seq_len */
    sp.padded = 1;
    sp.seq_len = 4;
    ck_assert_uint_eq(moe_slots_max(&sp, 12), 2 * 9);

    /* slots: unpadded never more than N K; padded E x rows, the larger of train and eval */
    sp = cap_spec(2, 2, 1, 2, 2.0f, 1);
    ck_assert_uint_eq(moe_slots_max(&sp, 8), 8);
    ck_assert_uint_eq(moe_padded_slots(&sp, 2.0f, 8, 8), 0); /* not padded */
    sp.padded = 1;
    ck_assert_uint_eq(moe_padded_slots(&sp, 2.0f, 8, 8), 16); /* cap 8 (clamped) per expert */
    ck_assert_uint_eq(moe_slots_max(&sp, 8), 16);
    sp.capacity_factor = 0.5f; /* cap 2: 4 padded rows, fewer than N K: N K stays */
    ck_assert_uint_eq(moe_slots_max(&sp, 8), 8);
    sp.eval_capacity_factor = 3.0f;
    ck_assert_uint_eq(moe_slots_max(&sp, 8), 16);
    ck_assert_uint_eq(moe_padded_slots(&sp, 0.0f, 8, 8), 0); /* dropless is never padded */
}
END_TEST

/* Plan for hand-made idx (N, K) and scores (N, E); returns p's slots in keep (N K): 1 kept. */
static void plan_keep(int *keep, DispatchPlan *p, const int *idx, const float *scores, int N,
                      const MoeSpec *sp) {
    const MoeCtx cx = call_ctx(sp, NULL);
    dispatch_plan_alloc(p, N, sp->num_experts, sp->top_k);
    capacity_plan_build(p, idx, scores, NULL, N, sp, &cx);
    for (int j = 0; j < N * sp->top_k; j++) keep[j] = p->slot[j] >= 0;
}

static void expect_keep(const int *got, const int *want, int n, const char *what) {
    for (int j = 0; j < n; j++)
        ck_assert_msg(got[j] == want[j], "%s: assignment %d kept %d, want %d", what, j, got[j],
                      want[j]);
}

START_TEST(test_policies_top1) {
    enum { N = 6, E = 2, K = 1 };
    /* every token's expert, and its score there: expert 0 is wanted by t0 (0.6), t1 (0.7),
     * t3 (0.9), t4 (0.7); expert 1 by t2 and t5. cap = max(min_capacity 2, ceil(0.01 ...)) */
    const int idx[N] = {0, 0, 1, 0, 0, 1};
    const float scores[N * E] = {0.6f, 0.4f, 0.7f, 0.3f, 0.2f, 0.8f,
                                 0.9f, 0.1f, 0.7f, 0.3f, 0.3f, 0.7f};
    MoeSpec sp = cap_spec(2, E, K, 2, 0.01f, 2);
    DispatchPlan p;
    int keep[N];

    /* position: expert 0 keeps its first two tokens t0, t1 */
    plan_keep(keep, &p, idx, scores, N, &sp);
    expect_keep(keep, (const int[N]){1, 1, 1, 0, 0, 1}, N, "position");
    ck_assert_int_eq(p.S, 4);
    ck_assert_int_eq(p.counts[0], 2);
    ck_assert_int_eq(p.slot[1], 1); /* t1 second in expert 0's slice */
    ck_assert_int_eq(p.slot[5], 3); /* t5 second in expert 1's slice */
    dispatch_plan_free(&p);

    /* score: expert 0 keeps t3 (0.9), then t1 over t4 (0.7 each: the lower token) */
    sp.drop_policy = MOE_DROP_SCORE;
    plan_keep(keep, &p, idx, scores, N, &sp);
    expect_keep(keep, (const int[N]){0, 1, 1, 1, 0, 1}, N, "score");
    /* the kept tokens sit in token order in the slice, not in score order */
    ck_assert_int_eq(p.slot[1], 0);
    ck_assert_int_eq(p.slot[3], 1);
    ck_assert_int_eq(p.slot_token[0], 1);
    ck_assert_int_eq(p.slot_token[1], 3);
    dispatch_plan_free(&p);

    /* padded: cap = min_capacity 3 rows per expert whatever the counts: expert 0 keeps t0 t1
     * t3 (position), expert 1 holds t2 t5 and one padding row */
    sp = cap_spec(2, E, K, 2, 0.01f, 3);
    sp.padded = 1;
    plan_keep(keep, &p, idx, scores, N, &sp);
    expect_keep(keep, (const int[N]){1, 1, 1, 1, 0, 1}, N, "padded position");
    ck_assert_int_eq(p.S, 6);
    ck_assert_int_eq(p.offsets[1], 3);
    const int want_tok[6] = {0, 1, 3, 2, 5, -1};
    for (int s = 0; s < 6; s++) ck_assert_int_eq(p.slot_token[s], want_tok[s]);
    dispatch_plan_free(&p);
}
END_TEST

START_TEST(test_policies_top2_scope) {
    enum { N = 4, E = 2, K = 2 };
    /* scores (N, E) and the top-2 order they give: t0 (1, 0), t1 (0, 1), t2 (0, 1), t3 (1, 0) */
    const float scores[N * E] = {0.3f, 0.7f, 0.6f, 0.4f, 0.8f, 0.2f, 0.1f, 0.9f};
    const int idx[N * K] = {1, 0, 0, 1, 0, 1, 1, 0};
    DispatchPlan p;
    int keep[N * K];

    /* batch: cap = max(1, ceil(0.5 * 4 * 2 / 2)) = 2 per expert. position: t0 and t1 fill both
     * experts (t0's k = 0 goes to expert 1, its k = 1 to expert 0), t2 and t3 drop entirely */
    MoeSpec sp = cap_spec(2, E, K, 2, 0.5f, 1);
    plan_keep(keep, &p, idx, scores, N, &sp);
    expect_keep(keep, (const int[N * K]){1, 1, 1, 1, 0, 0, 0, 0}, N * K, "batch position");
    dispatch_plan_free(&p);
    /* score: expert 0 keeps 0.8 (t2), 0.6 (t1); expert 1 keeps 0.9 (t3), 0.7 (t0) */
    sp.drop_policy = MOE_DROP_SCORE;
    plan_keep(keep, &p, idx, scores, N, &sp);
    expect_keep(keep, (const int[N * K]){1, 0, 1, 0, 1, 0, 1, 0}, N * K, "batch score");
    dispatch_plan_free(&p);

    /* sequence scope, T = 2: cap = max(1, ceil(0.5 * 2 * 2 / 2)) = 1 per expert per sequence.
     * position: t0 takes both experts of sequence 0, t2 both of sequence 1 */
    sp = cap_spec(2, E, K, 2, 0.5f, 1);
    sp.capacity_scope = MOE_CAP_SEQUENCE;
    sp.seq_len = 2;
    plan_keep(keep, &p, idx, scores, N, &sp);
    expect_keep(keep, (const int[N * K]){1, 1, 0, 0, 1, 1, 0, 0}, N * K, "sequence position");
    dispatch_plan_free(&p);
    /* score: sequence 0: expert 0 t1 (0.6 > 0.3), expert 1 t0 (0.7 > 0.4); sequence 1:
     * expert 0 t2 (0.8), expert 1 t3 (0.9) */
    sp.drop_policy = MOE_DROP_SCORE;
    plan_keep(keep, &p, idx, scores, N, &sp);
    expect_keep(keep, (const int[N * K]){1, 0, 1, 0, 1, 0, 1, 0}, N * K, "sequence score");
    dispatch_plan_free(&p);
}
END_TEST

/* ---- the block ------------------------------------------------------------------------------ */

enum { GN = 8, GC = 8, GE = 4, GK = 2, GF = 6 };

typedef struct {
    float x[GN * GC], Wr[GE * GC], Wg[GE * GF * GC], Wu[GE * GF * GC], Wd[GE * GC * GF];
    float R[GN * GC];
} BlockData;

static void block_data(BlockData *d, unsigned long long seed) {
    fill_uniform(d->x, GN * GC, 1.0f, seed);
    fill_uniform(d->Wr, GE * GC, 1.5f, seed + 1);
    fill_uniform(d->Wg, GE * GF * GC, 0.5f, seed + 2);
    fill_uniform(d->Wu, GE * GF * GC, 0.5f, seed + 3);
    fill_uniform(d->Wd, GE * GC * GF, 0.5f, seed + 4);
    fill_uniform(d->R, GN * GC, 1.0f, seed + 5);
}

/* Forward and backward of the block: y (GN, GC), dx (GN, GC), grads (zeroed here). */
typedef struct {
    float y[GN * GC], dx[GN * GC];
    float gWr[GE * GC], gWg[GE * GF * GC], gWu[GE * GF * GC], gWd[GE * GC * GF];
    int dropped;
} BlockRun;

static void block_run(BlockRun *r, const BlockData *d, const MoeSpec *sp) {
    const MoeCtx cx = call_ctx(sp, NULL);
    MoeWeights wt = {.router = d->Wr, .Wg = d->Wg, .Wu = d->Wu, .Wd = d->Wd};
    MoeActs a;
    MoeScratch s;
    moe_acts_alloc(&backend_cpu, &a, sp, NULL, GN);
    moe_scratch_alloc(&backend_cpu, &s, sp, GN);
    /* scratch as a previous block may leave it: NaN. A padding row's dye must be written (0),
     * or NaN * h = NaN reaches the expert weight gradients */
    for (size_t i = 0; i < moe_slots_max(sp, GN) * GC; i++) s.dye[i] = NAN;
    memset(r, 0, sizeof(*r));
    MoeGrads gr = {r->gWr, r->gWg, r->gWu, r->gWd};
    moe_block_forward(&backend_cpu, r->y, &a, d->x, &wt, sp, &cx, GN);
    moe_block_backward(&backend_cpu, r->dx, &gr, d->R, &a, d->x, &wt, sp, &cx, &s, 1.0f);
    for (int j = 0; j < GN * GK; j++) r->dropped += a.plan.slot[j] < 0;
    moe_scratch_free(&backend_cpu, &s);
    moe_acts_free(&backend_cpu, &a);
}

static void expect_same_run(const BlockRun *a, const BlockRun *b, const char *what) {
    ck_assert_msg(memcmp(a->y, b->y, sizeof a->y) == 0, "%s: outputs differ", what);
    ck_assert_msg(memcmp(a->dx, b->dx, sizeof a->dx) == 0, "%s: dx differs", what);
    ck_assert_msg(memcmp(a->gWr, b->gWr, sizeof a->gWr) == 0, "%s: d router differs", what);
    ck_assert_msg(memcmp(a->gWg, b->gWg, sizeof a->gWg) == 0, "%s: dWg differs", what);
    ck_assert_msg(memcmp(a->gWu, b->gWu, sizeof a->gWu) == 0, "%s: dWu differs", what);
    ck_assert_msg(memcmp(a->gWd, b->gWd, sizeof a->gWd) == 0, "%s: dWd differs", what);
}

START_TEST(test_dropped_token_output_is_zero) {
    enum { N = 6, C = 2, E = 2, K = 1, F = 3 };
    /* router = identity: every token prefers expert 0 (logit 1 vs 0); cap = 2, so with the
     * position policy tokens 2..5 are dropped and their block output is exactly 0 */
    float x[N * C], y[N * C];
    for (int n = 0; n < N; n++) x[n * C] = 1.0f + 0.1f * n, x[n * C + 1] = 0.0f;
    const float Wr[E * C] = {1.0f, 0.0f, 0.0f, 1.0f};
    float Wg[E * F * C], Wu[E * F * C], Wd[E * C * F];
    fill_uniform(Wg, E * F * C, 1.0f, 21);
    fill_uniform(Wu, E * F * C, 1.0f, 22);
    fill_uniform(Wd, E * C * F, 1.0f, 23);
    MoeSpec sp = cap_spec(C, E, K, F, 0.01f, 2);
    const MoeCtx cx = call_ctx(&sp, NULL);
    MoeWeights wt = {.router = Wr, .Wg = Wg, .Wu = Wu, .Wd = Wd};
    MoeActs a;
    moe_acts_alloc(&backend_cpu, &a, &sp, NULL, N);
    moe_block_forward(&backend_cpu, y, &a, x, &wt, &sp, &cx, N);
    for (int n = 0; n < N; n++) {
        int kept = a.plan.slot[n] >= 0, nonzero = y[n * C] != 0.0f || y[n * C + 1] != 0.0f;
        ck_assert_msg(kept == (n < 2), "token %d kept %d", n, kept);
        ck_assert_msg(nonzero == kept, "token %d: kept %d but output non-zero %d", n, kept,
                      nonzero);
    }
    moe_acts_free(&backend_cpu, &a);
}
END_TEST

typedef struct {
    MoeSpec sp;
    MoeCtx cx;
    MoeWeights wt;
    MoeActs *a;
    float *x, *y, *R;
    const int *slot0; /* (GN, GK) the plan of the unperturbed forward */
} GradCtx;

/* L = sum y R + aux_coef aux + z_coef z: what the backward differentiates (dy = R, scale 1) */
static double cap_loss(void *vc) {
    GradCtx *c = vc;
    moe_block_forward(&backend_cpu, c->y, c->a, c->x, &c->wt, &c->sp, &c->cx, GN);
    for (int j = 0; j < GN * GK; j++)
        ck_assert_msg(c->a->plan.slot[j] == c->slot0[j], "a drop changed under perturbation");
    double L = 0.0;
    for (int i = 0; i < GN * GC; i++) L += (double)c->y[i] * c->R[i];
    return L + c->sp.aux_coef * (double)c->a->aux_loss + c->sp.z_coef * (double)c->a->z_loss;
}

START_TEST(test_block_gradcheck_capacity) {
    BlockData d;
    block_data(&d, 301);
    for (int policy = MOE_DROP_POSITION; policy <= MOE_DROP_SCORE; policy++) {
        MoeSpec sp = cap_spec(GC, GE, GK, GF, 0.5f, 1); /* cap = ceil(0.5 * 8 * 2 / 4) = 2 */
        sp.drop_policy = policy;
        sp.aux_coef = 0.1f;
        sp.z_coef = 0.05f;
        BlockRun r;
        block_run(&r, &d, &sp);
        ck_assert_msg(r.dropped > 0 && r.dropped < GN * GK, "policy %d dropped %d", policy,
                      r.dropped);

        MoeWeights wt = {.router = d.Wr, .Wg = d.Wg, .Wu = d.Wu, .Wd = d.Wd};
        const MoeCtx cx = call_ctx(&sp, NULL);
        MoeActs a;
        moe_acts_alloc(&backend_cpu, &a, &sp, NULL, GN);
        float y[GN * GC];
        int slot0[GN * GK];
        moe_block_forward(&backend_cpu, y, &a, d.x, &wt, &sp, &cx, GN);
        memcpy(slot0, a.plan.slot, sizeof slot0);
        GradCtx c = {sp, cx, wt, &a, d.x, y, d.R, slot0};
        struct {
            float *v;
            const float *grad;
            int n;
            const char *name;
        } checks[] = {{d.x, r.dx, GN * GC, "dx"},
                      {d.Wr, r.gWr, GE * GC, "d router"},
                      {d.Wg, r.gWg, GE * GF * GC, "dWg"},
                      {d.Wu, r.gWu, GE * GF * GC, "dWu"},
                      {d.Wd, r.gWd, GE * GC * GF, "dWd"}};
        for (int i = 0; i < 5; i++) {
            char what[64];
            snprintf(what, sizeof what, "capacity block %s (policy %d)", checks[i].name, policy);
            gradcheck(cap_loss, &c, checks[i].v, checks[i].grad, (size_t)checks[i].n, EPS,
                      (size_t)checks[i].n, what);
        }
        moe_acts_free(&backend_cpu, &a);
    }
}
END_TEST

START_TEST(test_no_drop_capacity_equals_dropless) {
    BlockData d;
    block_data(&d, 411);
    MoeSpec sp = cap_spec(GC, GE, GK, GF, 0.0f, 4);
    sp.aux_coef = 0.1f;
    sp.z_coef = 0.05f;
    BlockRun ref, run;
    block_run(&ref, &d, &sp);
    ck_assert_int_eq(ref.dropped, 0);
    sp.capacity_factor = (float)GE; /* cap = N: nothing can drop */
    for (int policy = MOE_DROP_POSITION; policy <= MOE_DROP_SCORE; policy++) {
        sp.drop_policy = policy;
        block_run(&run, &d, &sp);
        ck_assert_int_eq(run.dropped, 0);
        expect_same_run(&ref, &run, "large capacity vs dropless");
    }
}
END_TEST

START_TEST(test_padded_equals_unpadded) {
    BlockData d;
    block_data(&d, 523);
    for (int scope = MOE_CAP_BATCH; scope <= MOE_CAP_SEQUENCE; scope++)
        for (int fi = 0; fi < 2; fi++) {
            /* 0.5 drops; 2.0 pads more rows than there are assignments */
            MoeSpec sp = cap_spec(GC, GE, GK, GF, fi ? 2.0f : 0.5f, 1);
            sp.capacity_scope = scope;
            sp.seq_len = 4;
            sp.aux_coef = 0.1f;
            sp.z_coef = 0.05f;
            BlockRun plain, pad;
            block_run(&plain, &d, &sp);
            sp.padded = 1;
            block_run(&pad, &d, &sp);
            ck_assert_int_eq(plain.dropped, pad.dropped);
            expect_same_run(&plain, &pad, scope ? "padded, sequence scope" : "padded, batch");
            /* the padded plan really has E x rows slots, padding rows zero in and out */
            MoeWeights wt = {.router = d.Wr, .Wg = d.Wg, .Wu = d.Wu, .Wd = d.Wd};
            const MoeCtx cx = call_ctx(&sp, NULL);
            MoeActs a;
            float y[GN * GC];
            moe_acts_alloc(&backend_cpu, &a, &sp, NULL, GN);
            moe_block_forward(&backend_cpu, y, &a, d.x, &wt, &sp, &cx, GN);
            ck_assert_int_eq(a.plan.S, GE * moe_expert_rows(&sp, sp.capacity_factor, 4, GN));
            int pads = 0;
            for (int s = 0; s < a.plan.S; s++) {
                if (a.plan.slot_token[s] >= 0) continue;
                pads++;
                for (int ch = 0; ch < GC; ch++) ck_assert(a.ye[(size_t)s * GC + ch] == 0.0f);
            }
            ck_assert_int_eq(pads, a.plan.S - (GN * GK - pad.dropped));
            if (fi) ck_assert(pads > 0); /* factor 2: more rows than assignments */
            moe_acts_free(&backend_cpu, &a);
        }
}
END_TEST

/* Sizes where sgemm's kernel choice depends on the row count: a padded expert's kept rows must
 * still round exactly as unpadded (they are a product of their own). */
START_TEST(test_padded_equals_unpadded_large) {
    enum { N = 512, C = 128, E = 4, K = 2, F = 256 };
    float *x = malloc(sizeof(float) * N * C), *Wr = malloc(sizeof(float) * E * C);
    float *Wg = malloc(sizeof(float) * E * F * C), *Wu = malloc(sizeof(float) * E * F * C);
    float *Wd = malloc(sizeof(float) * E * C * F), *R = malloc(sizeof(float) * N * C);
    fill_uniform(x, N * C, 1.0f, 601);
    fill_uniform(Wr, E * C, 0.5f, 602);
    fill_uniform(Wg, E * F * C, 0.2f, 603);
    fill_uniform(Wu, E * F * C, 0.2f, 604);
    fill_uniform(Wd, E * C * F, 0.2f, 605);
    fill_uniform(R, N * C, 1.0f, 606);
    MoeWeights wt = {.router = Wr, .Wg = Wg, .Wu = Wu, .Wd = Wd};
    float *out[2][5];
    for (int padded = 0; padded <= 1; padded++) {
        MoeSpec sp = cap_spec(C, E, K, F, 1.25f, 4); /* cap 320 of 256 on average */
        sp.padded = padded;
        const MoeCtx cx = call_ctx(&sp, NULL);
        MoeActs a;
        MoeScratch s;
        moe_acts_alloc(&backend_cpu, &a, &sp, NULL, N);
        moe_scratch_alloc(&backend_cpu, &s, &sp, N);
        float **o = out[padded];
        o[0] = calloc((size_t)N * C, sizeof(float));
        o[1] = calloc((size_t)N * C, sizeof(float));
        o[2] = calloc((size_t)E * F * C, sizeof(float));
        o[3] = calloc((size_t)E * F * C, sizeof(float));
        o[4] = calloc((size_t)E * C * F, sizeof(float));
        MoeGrads gr = {NULL, o[2], o[3], o[4]};
        moe_block_forward(&backend_cpu, o[0], &a, x, &wt, &sp, &cx, N);
        moe_block_backward(&backend_cpu, o[1], &gr, R, &a, x, &wt, &sp, &cx, &s, 1.0f);
        if (padded) ck_assert_int_eq(a.plan.S, E * 320);
        moe_scratch_free(&backend_cpu, &s);
        moe_acts_free(&backend_cpu, &a);
    }
    const size_t n[5] = {N * C, N * C, E * F * C, E * F * C, E * C * F};
    const char *name[5] = {"y", "dx", "dWg", "dWu", "dWd"};
    for (int i = 0; i < 5; i++) {
        ck_assert_msg(memcmp(out[0][i], out[1][i], n[i] * sizeof(float)) == 0,
                      "padded %s differs from unpadded", name[i]);
        free(out[0][i]);
        free(out[1][i]);
    }
    free(x), free(Wr), free(Wg), free(Wu), free(Wd), free(R);
}
END_TEST

/* The experts alone, at slice sizes where sgemm's small-matrix kernels round differently from
 * its large ones (a few kept rows in a slice of 48): experts_*_padded must give the kept rows
 * and the weight gradients of experts_* on the packed slices, bit for bit. */
START_TEST(test_padded_experts_small_slices) {
    enum { E = 4, C = 128, F = 256, R = 48 };
    const int counts[E] = {2, 3, 4, 40};
    int packed_off[E + 1] = {0}, padded_off[E + 1] = {0};
    for (int e = 0; e < E; e++) {
        packed_off[e + 1] = packed_off[e] + counts[e];
        padded_off[e + 1] = padded_off[e] + R;
    }
    const int Sp = packed_off[E], S = E * R;
    float *W = malloc(sizeof(float) * 3 * E * F * C);
    float *Wg = W, *Wu = W + E * F * C, *Wd = W + 2 * E * F * C;
    fill_uniform(W, 3 * (size_t)E * F * C, 0.2f, 701);
    /* slot buffers: [0] packed, [1] padded (kept rows copied to the start of each slice) */
    float *xe[2], *dye[2], *ye[2], *g[2], *u[2], *h[2], *dxe[2], *dg[2], *du[2], *dh[2], *dW[2];
    for (int v = 0; v < 2; v++) {
        size_t rows = v ? S : Sp;
        xe[v] = calloc(rows * C, sizeof(float)), dye[v] = calloc(rows * C, sizeof(float));
        ye[v] = calloc(rows * C, sizeof(float)), dxe[v] = calloc(rows * C, sizeof(float));
        g[v] = calloc(rows * F, sizeof(float)), u[v] = calloc(rows * F, sizeof(float));
        h[v] = calloc(rows * F, sizeof(float)), dg[v] = calloc(rows * F, sizeof(float));
        du[v] = calloc(rows * F, sizeof(float)), dh[v] = calloc(rows * F, sizeof(float));
        dW[v] = calloc(3 * (size_t)E * F * C, sizeof(float));
    }
    fill_uniform(xe[0], (size_t)Sp * C, 1.0f, 702);
    fill_uniform(dye[0], (size_t)Sp * C, 1.0f, 703);
    for (int e = 0; e < E; e++) {
        size_t n = (size_t)counts[e] * C;
        memcpy(xe[1] + (size_t)padded_off[e] * C, xe[0] + (size_t)packed_off[e] * C, n * 4);
        memcpy(dye[1] + (size_t)padded_off[e] * C, dye[0] + (size_t)packed_off[e] * C, n * 4);
    }
    /* on each CPU backend: the reference loops and the sgemm products */
    const Backend *bes[2] = {&backend_cpu_ref, &backend_cpu};
    size_t wn = (size_t)E * F * C;
    for (int b = 0; b < 2; b++) {
        const Backend *be = bes[b];
        float *gW0 = dW[0], *gW1 = dW[1];
        memset(gW0, 0, 3 * wn * sizeof(float));
        memset(gW1, 0, 3 * wn * sizeof(float));
        be->experts_forward(be, ye[0], g[0], u[0], h[0], xe[0], Wg, Wu, Wd, packed_off, NULL, E, C,
                            F);
        be->experts_forward(be, ye[1], g[1], u[1], h[1], xe[1], Wg, Wu, Wd, padded_off, counts, E,
                            C, F);
        be->experts_backward(be, dxe[0], gW0, gW0 + wn, gW0 + 2 * wn, dg[0], du[0], dh[0], dye[0],
                             xe[0], g[0], u[0], h[0], Wg, Wu, Wd, packed_off, NULL, E, C, F);
        be->experts_backward(be, dxe[1], gW1, gW1 + wn, gW1 + 2 * wn, dg[1], du[1], dh[1], dye[1],
                             xe[1], g[1], u[1], h[1], Wg, Wu, Wd, padded_off, counts, E, C, F);
        for (int e = 0; e < E; e++) {
            size_t n = (size_t)counts[e] * C, a = (size_t)packed_off[e] * C;
            size_t q = (size_t)padded_off[e] * C;
            ck_assert_msg(memcmp(ye[0] + a, ye[1] + q, n * 4) == 0, "%s, expert %d: kept ye differ",
                          be->name, e);
            ck_assert_msg(memcmp(dxe[0] + a, dxe[1] + q, n * 4) == 0,
                          "%s, expert %d: kept dxe differ", be->name, e);
            for (size_t i = q + n; i < (size_t)padded_off[e + 1] * C; i++)
                ck_assert(ye[1][i] == 0.0f && dxe[1][i] == 0.0f); /* padding: zero in, zero out */
        }
        ck_assert_msg(memcmp(dW[0], dW[1], 3 * wn * sizeof(float)) == 0,
                      "%s: weight gradients differ", be->name);
    }
    for (int v = 0; v < 2; v++) {
        free(xe[v]), free(dye[v]), free(ye[v]), free(dxe[v]), free(g[v]), free(u[v]);
        free(h[v]), free(dg[v]), free(du[v]), free(dh[v]), free(dW[v]);
    }
    free(W);
}
END_TEST

/* ---- GShard's random second expert ---------------------------------------------------------- */

START_TEST(test_second_expert_random) {
    enum { N = 4000, E = 4, K = 2 };
    int *idx = malloc(sizeof(int) * N * K);
    float *w = malloc(sizeof(float) * N * K), *scores = calloc((size_t)N * E, sizeof(float));
    float u[N];
    fill_uniform(u, N, 0.5f, 77);
    double want = 0.0;
    for (int n = 0; n < N; n++) {
        idx[n * K] = n % E, idx[n * K + 1] = (n + 1) % E;
        w[n * K + 1] = 0.35f + u[n]; /* in [-0.15, 0.85): min(1, 2 w) covers 0, (0, 1), 1 */
        w[n * K] = 1.0f - w[n * K + 1];
        want += fmin(1.0, fmax(0.0, 2.0 * w[n * K + 1]));
    }
    want /= N;
    MoeSpec sp = cap_spec(2, E, K, 2, (float)E, 1); /* cap = N: only the coin drops */
    sp.second_expert_random = 1;
    DispatchPlan p;
    dispatch_plan_alloc(&p, N, E, K);
    Rng rng;
    rng_seed(&rng, 99);
    const MoeCtx train = call_ctx(&sp, &rng);
    capacity_plan_build(&p, idx, scores, w, N, &sp, &train);
    int first = 0, second = 0;
    for (int n = 0; n < N; n++) first += p.slot[n * K] >= 0, second += p.slot[n * K + 1] >= 0;
    ck_assert_int_eq(first, N); /* the first choice is never dropped */
    /* binomial std <= sqrt(N / 4) / N = 0.008: 0.03 is about 4 std */
    expect_close((double)second / N, want, 0.03f, 0.0f, "dispatched fraction of 2nd experts");
    ck_assert(want > 0.3 && want < 0.9);
    /* evaluation: no stream, nothing drawn, nothing dropped */
    MoeCtx eval;
    moe_ctx_eval(&eval, &sp, sp.seq_len);
    ck_assert(eval.rng == NULL);
    capacity_plan_build(&p, idx, scores, w, N, &sp, &eval);
    for (int j = 0; j < N * K; j++) ck_assert_int_ge(p.slot[j], 0);
    dispatch_plan_free(&p);
    free(idx);
    free(w);
    free(scores);
}
END_TEST

static Suite *capacity_suite(void) {
    Suite *s = suite_create("capacity");
    TCase *tc = tcase_create("capacity");
    tcase_add_test(tc, test_capacity_arithmetic);
    tcase_add_test(tc, test_policies_top1);
    tcase_add_test(tc, test_policies_top2_scope);
    tcase_add_test(tc, test_dropped_token_output_is_zero);
    tcase_add_test(tc, test_block_gradcheck_capacity);
    tcase_add_test(tc, test_no_drop_capacity_equals_dropless);
    tcase_add_test(tc, test_padded_equals_unpadded);
    tcase_add_test(tc, test_padded_equals_unpadded_large);
    tcase_add_test(tc, test_padded_experts_small_slices);
    tcase_add_test(tc, test_second_expert_random);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(capacity_suite)
