/*
 * test_kernels_plan.c: the CUDA kernels of the dropless dispatch plan, permute and combine
 * (backend/cuda/kernels_moe.h), run on the host.
 *
 * The emu_* functions (here and in tests/kernels_moe_util.h) are entries of cuda_moe.cu whose
 * kernels are loops that walk the grid in the kernel's order, compared with permute.c: the
 * plan's counts, offsets, slot and slot_token exactly, floats under the one tolerance rule
 * (TOL_F32_ATOL, TOL_F32_RTOL): the dw dot sums in another order.
 *
 * Sizes: E in {4, 8, 64}, K in {1, 2, 4}, N not a multiple of the block (300, 777), and C on
 * both sides of a row block (5, 64, 300). permute and combine also run on plans built
 * elsewhere: capacity plans with dropped assignments, padded ones with padding rows, and an
 * expert-choice plan (E assignments per token).
 */
#include "kernels_moe_util.h"

/* ---- the kernels, on the host ---------------------------------------------------------------- */

/* k_permute: a block per slot row */
static void emu_permute_forward(float *xe, const float *x, const DispatchPlan *p, int C) {
    const int nt = kmoe_row_threads(C);
    for (int s = 0; s < p->S; s++)
        for (int t = 0; t < nt; t++)
            kmoe_permute_row(xe + (size_t)s * C, x, p->slot_token[s], C, t, nt);
}

/* k_permute_back: a block per token */
static void emu_permute_backward(float *dx, const float *dxe, const DispatchPlan *p, int C) {
    const int nt = kmoe_row_threads(C), A = p->K;
    for (int n = 0; n < p->N; n++)
        for (int t = 0; t < nt; t++)
            kmoe_permute_back_row(dx + (size_t)n * C, dxe, p->slot + (size_t)n * A, A, C, t, nt);
}

/* k_combine: a block per token */
static void emu_combine_forward(float *y, const float *ye, const float *w, const DispatchPlan *p,
                                int C) {
    const int nt = kmoe_row_threads(C), A = p->K;
    for (int n = 0; n < p->N; n++)
        for (int t = 0; t < nt; t++)
            kmoe_combine_row(y + (size_t)n * C, ye, w + (size_t)n * A, p->slot + (size_t)n * A, A,
                             C, t, nt);
}

/* k_combine_dye (a block per slot row), then k_combine_dw (a warp per assignment, its lanes'
 * double sums combined in the shuffle-down tree) */
static void emu_combine_backward(float *dye, float *dw, const float *dy, const float *ye,
                                 const float *w, const DispatchPlan *p, int C) {
    const int nt = kmoe_row_threads(C), A = p->K;
    if (dye)
        for (int s = 0; s < p->S; s++)
            for (int t = 0; t < nt; t++)
                kmoe_combine_dye_row(dye + (size_t)s * C, dy, w, p->slot, p->slot_token, s, A, C, t,
                                     nt);
    const size_t NA = (size_t)p->N * A;
    if (!dw || NA == 0) return;
    for (size_t b = 0; b < (NA + KMOE_WARPS - 1) / KMOE_WARPS; b++)
        for (int wp = 0; wp < KMOE_WARPS; wp++) {
            size_t j = b * KMOE_WARPS + wp;
            if (j >= NA) continue;
            int s = p->slot[j];
            if (s < 0) {
                dw[j] = 0.0f;
                continue;
            }
            size_t n = j / (size_t)A;
            double v[MOE_WARP];
            for (int lane = 0; lane < MOE_WARP; lane++)
                v[lane] = kmoe_dot_lane(dy + n * C, ye + (size_t)s * C, C, lane, MOE_WARP);
            dw[j] = (float)kmoe_tree_sum(v, MOE_WARP);
        }
}

/* ---- dispatch plan --------------------------------------------------------------------------- */

START_TEST(test_dispatch_plan) {
    const int Es[] = {4, 8, 64}, Ks[] = {1, 2, 4}, Ns[] = {0, 1, 300, 777};
    for (int ie = 0; ie < 3; ie++)
        for (int ik = 0; ik < 3; ik++)
            for (int in = 0; in < 4; in++)
                for (int skew = 0; skew < 2; skew++) {
                    const int E = Es[ie], K = Ks[ik], N = Ns[in];
                    float *l = floats((size_t)N * E), *p = floats((size_t)N * E);
                    float *w = floats((size_t)N * K);
                    int *idx = ints((size_t)N * K);
                    if (skew)
                        fill_skewed_logits(l, N, E, 400 + ie);
                    else
                        fill_tied_logits(l, N, E, 500 + ie);
                    MoeSpec s = spec_of(E, K, MOE_SCORE_SOFTMAX, 0, 1, 1.0f);
                    router_scores_forward(p, NULL, l, N, &s);
                    router_gate_forward(idx, w, p, NULL, NULL, N, &s);
                    DispatchPlan want, got;
                    dispatch_plan_alloc(&want, N, E, K);
                    dispatch_plan_alloc(&got, N, E, K);
                    dispatch_plan_build(&want, idx, N);
                    /* stale values where the kernels must write */
                    for (int e = 0; e < E; e++) got.counts[e] = 99;
                    for (size_t j = 0; j < (size_t)N * K; j++) got.slot[j] = got.slot_token[j] = 7;
                    emu_plan_build(&got, idx, N);
                    char what[64];
                    snprintf(what, sizeof what, "plan E %d K %d N %d skew %d", E, K, N, skew);
                    expect_same_plan(&got, &want, what);
                    if (skew && N == 777) /* expert 0's block found hits in many chunks */
                        ck_assert_int_gt(want.counts[0], KMOE_THREADS);
                    dispatch_plan_free(&want), dispatch_plan_free(&got);
                    free(l), free(p), free(w), free(idx);
                }
}
END_TEST

/* ---- permute and combine ------------------------------------------------------------------- */

static void make_plan(DispatchPlan *p, float **w_out, int kind, int N, int E, int K) {
    make_routing(p, w_out, NULL, NULL, kind, N, E, K, MOE_SCORE_SOFTMAX);
}

START_TEST(test_permute_combine) {
    const int Cs[] = {5, 64, 300};
    const int Es[] = {4, 8, 64}, Ks[] = {1, 2, 4}, Ns[] = {300, 77, 300};
    for (int kind = 0; kind < PLAN_KINDS; kind++)
        for (int ic = 0; ic < 3; ic++) {
            /* walk the sizes along with C: (E 4, K 1, N 300), (8, 2, 77), (64, 4, 300) */
            const int C = Cs[ic], E = Es[ic], K = Ks[ic], N = Ns[ic];
            DispatchPlan p;
            float *w;
            make_plan(&p, &w, kind, N, E, K);
            const int A = p.K, S = p.S;
            const size_t NC = (size_t)N * C, SC = (size_t)S * C, NA = (size_t)N * A;
            int dropped = 0, padding = 0;
            for (size_t j = 0; j < NA; j++) dropped += p.slot[j] < 0;
            for (int s = 0; s < S; s++) padding += p.slot_token[s] < 0;
            if (kind == PLAN_CAPACITY || kind == PLAN_EXPERT_CHOICE)
                ck_assert_msg(dropped > 0, "%s plan drops nothing", plan_name[kind]);
            if (kind == PLAN_PADDED)
                ck_assert_msg(dropped > 0 && padding > 0, "padded plan: %d dropped, %d padding",
                              dropped, padding);

            float *x = floats(NC), *dxe = floats(SC), *ye = floats(SC), *dy = floats(NC);
            fill_uniform(x, NC, 1.0f, 700);
            fill_uniform(dxe, SC, 1.0f, 701);
            fill_uniform(ye, SC, 1.0f, 702);
            fill_uniform(dy, NC, 1.0f, 703);
            float *want = floats(SC > NC ? SC : NC), *got = floats(SC > NC ? SC : NC);
            float *dw_w = floats(NA), *dw_g = floats(NA);
            char what[96];
#define WHAT(op)                                                                                   \
    (snprintf(what, sizeof what, "%s, %s plan, E %d K %d N %d C %d", (op), plan_name[kind], E, K,  \
              N, C),                                                                               \
     what)
            /* outputs start as NaN: a row the kernel forgets fails the comparison */
            permute_forward(want, x, &p, C);
            fill_nan(got, SC);
            emu_permute_forward(got, x, &p, C);
            expect_close_arrays(got, want, SC, TOL_F32_ATOL, TOL_F32_RTOL, WHAT("permute"));

            permute_backward(want, dxe, &p, C);
            fill_nan(got, NC);
            emu_permute_backward(got, dxe, &p, C);
            expect_close_arrays(got, want, NC, TOL_F32_ATOL, TOL_F32_RTOL,
                                WHAT("permute backward"));

            combine_forward(want, ye, w, &p, C);
            fill_nan(got, NC);
            emu_combine_forward(got, ye, w, &p, C);
            expect_close_arrays(got, want, NC, TOL_F32_ATOL, TOL_F32_RTOL, WHAT("combine"));

            combine_backward(want, dw_w, dy, ye, w, &p, C);
            fill_nan(got, SC);
            fill_nan(dw_g, NA);
            emu_combine_backward(got, dw_g, dy, ye, w, &p, C);
            expect_close_arrays(got, want, SC, TOL_F32_ATOL, TOL_F32_RTOL, WHAT("dye"));
            expect_close_arrays(dw_g, dw_w, NA, TOL_F32_ATOL, TOL_F32_RTOL, WHAT("dw"));

            /* either gradient alone (the other NULL) */
            fill_nan(got, SC);
            emu_combine_backward(got, NULL, dy, ye, w, &p, C);
            expect_close_arrays(got, want, SC, TOL_F32_ATOL, TOL_F32_RTOL, WHAT("dye alone"));
            fill_nan(dw_g, NA);
            emu_combine_backward(NULL, dw_g, dy, ye, w, &p, C);
            expect_close_arrays(dw_g, dw_w, NA, TOL_F32_ATOL, TOL_F32_RTOL, WHAT("dw alone"));
#undef WHAT
            free(x), free(dxe), free(ye), free(dy), free(want), free(got), free(dw_w), free(dw_g),
                free(w);
            dispatch_plan_free(&p);
        }
}
END_TEST

START_TEST(test_row_threads) {
    /* whole warps, never more than a block: the row kernels' launch shape */
    ck_assert_int_eq(kmoe_row_threads(1), MOE_WARP);
    ck_assert_int_eq(kmoe_row_threads(33), 2 * MOE_WARP);
    ck_assert_int_eq(kmoe_row_threads(64), 64);
    ck_assert_int_eq(kmoe_row_threads(1000), KMOE_THREADS);
}
END_TEST

static Suite *kernels_plan_suite(void) {
    Suite *s = suite_create("kernels_plan");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, one_thread, NULL);
    tcase_add_test(tc, test_dispatch_plan);
    tcase_add_test(tc, test_permute_combine);
    tcase_add_test(tc, test_row_threads);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(kernels_plan_suite)
