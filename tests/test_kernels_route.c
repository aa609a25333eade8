/*
 * test_kernels_route.c: the CUDA router kernels' arithmetic (backend/cuda/kernels_moe.h,
 * backend/cuda/kernels_route.h), run on the host: scores and lse, the gate's top-k and weights, the
 * z-loss, the logit statistics, the balance loss, the router's backward and route_stats.
 *
 * Each emu_* function below is one entry of cuda_moe.cu whose kernels are loops that walk the
 * grid in the kernel's order (tests/kernels_moe_util.h), compared with router.c and
 * router_balance.c: the top-k's idx exactly (rows full of equal keys included: ties go to the
 * lower expert), floats under the one tolerance rule (TOL_F32_ATOL, TOL_F32_RTOL): the bodies
 * use expf where the reference uses nn_expf, and the z-loss sum in another order.
 *
 * Sizes: E in {4, 8, 64}, K in {1, 2, 4}, N not a multiple of the block (300, 777); the
 * gate also with group-limited routing (moe.n_group, moe.topk_group).
 *
 * The balance loss and the router's backward run every balance (aux, seq_aux over several
 * sequences, one not a multiple of the chunk, aux_free, none), softmax and sigmoid, with and
 * without global f, every gate mode (norm_topk, topk_before_softmax, route_scale) and the
 * block's expert-choice backward; route_stats runs on dropless, capacity, padded and
 * expert-choice plans: routed and dropped counts exactly, the rest under the tolerance.
 */
#include "backend/cuda/kernels_route.h"
#include "kernels_moe_util.h"

/* ---- the kernels, on the host ---------------------------------------------------------------- */

/* k_scores: a thread per token */
static void emu_scores(float *scores, float *lse, const float *logits, int N, const MoeSpec *s) {
    const int E = s->num_experts, sig = s->score == MOE_SCORE_SIGMOID;
    for (int b = 0; b < (int)kmoe_grid((size_t)N); b++)
        for (int t = 0; t < KMOE_THREADS; t++) {
            int n = b * KMOE_THREADS + t;
            if (n >= N) continue;
            kmoe_scores_row(scores + (size_t)n * E, lse ? lse + n : NULL, logits + (size_t)n * E, E,
                            sig);
        }
}

/* k_gate: a thread per token; the logits row only for topk_first, as the kernel passes it */
static void emu_gate(int *idx, float *w, const float *scores, const float *logits,
                     const float *bias, int N, const MoeSpec *s) {
    const int E = s->num_experts, K = s->top_k, tf = s->topk_before_softmax;
    for (int b = 0; b < (int)kmoe_grid((size_t)N); b++)
        for (int t = 0; t < KMOE_THREADS; t++) {
            int n = b * KMOE_THREADS + t;
            if (n >= N) continue;
            router_gate_row(idx + (size_t)n * K, w + (size_t)n * K, scores + (size_t)n * E,
                            tf ? logits + (size_t)n * E : NULL, bias, E, K, s->n_group,
                            s->topk_group, tf, s->norm_topk, s->route_scale);
        }
}

/* k_zloss: one block, per-thread strided sums, the shared-memory tree */
static float emu_zloss(const float *lse, int N) {
    if (N <= 0) return 0.0f;
    double sh[KMOE_THREADS];
    for (int t = 0; t < KMOE_THREADS; t++) sh[t] = kmoe_zloss_part(lse, N, t, KMOE_THREADS);
    return kmoe_zloss_final(kmoe_tree_sum(sh, KMOE_THREADS), N);
}

/* k_logit_stats: one block, each thread's share, then the two trees */
static void emu_logit_stats(RouteStats *r, const float *logits, const float *lse, int N, int E) {
    float m[KMOE_THREADS];
    double sh[KMOE_THREADS];
    for (int t = 0; t < KMOE_THREADS; t++)
        kmoe_logit_stats_part(&m[t], &sh[t], logits, lse, N, E, t, KMOE_THREADS);
    r->max_logit = kmoe_tree_max(m, KMOE_THREADS);
    r->lse_mean = (float)(kmoe_tree_sum(sh, KMOE_THREADS) / N);
}

/* k_score_sums: a thread per token */
static void emu_score_sums(double *ssum, const float *scores, int N, int E) {
    for (int b = 0; b < (int)kmoe_grid((size_t)N); b++)
        for (int t = 0; t < KMOE_THREADS; t++) {
            int n = b * KMOE_THREADS + t;
            if (n < N) ssum[n] = kmoe_row_sum(scores + (size_t)n * E, E);
        }
}

/* k_expert_parts: a thread per (row, chunk, expert) part */
static void emu_expert_parts(double *pq, int *ph, int *pd, const float *scores, const double *ssum,
                             const int *idx, const int *slot, size_t nparts, int Tr, int nchunk,
                             int E, int K) {
    for (size_t b = 0; b < kmoe_grid(nparts); b++)
        for (int t = 0; t < KMOE_THREADS; t++) {
            size_t i = b * KMOE_THREADS + t;
            if (i < nparts)
                kmoe_expert_part(pq, ph, pd, i, scores, ssum, idx, slot, Tr, nchunk, E, K);
        }
}

static double *doubles(size_t n) {
    return calloc_check(n ? n : 1, sizeof(double));
}

/* cuda_router_balance_loss: k_score_sums (sigmoid), k_expert_parts (the hits only without
 * global f), then k_bal_loss's one block: per-thread strided pairs and the shared tree */
static float emu_balance_loss(const float *scores, const int *idx, int N, const MoeSpec *s,
                              const MoeCtx *x) {
    if (N <= 0) return 0.0f;
    const int E = s->num_experts, K = s->top_k, sig = s->score == MOE_SCORE_SIGMOID;
    const int seq = s->balance == MOE_BALANCE_SEQ_AUX;
    int Tr;
    const int rows = kmoe_bal_rows(seq, N, x->T, &Tr), nchunk = kmoe_chunks(Tr);
    const size_t nparts = (size_t)rows * nchunk * E;
    const float *gf = seq ? NULL : x->global_f;
    double *ssum = sig ? doubles((size_t)N) : NULL, *pq = doubles(nparts);
    int *ph = gf ? NULL : ints(nparts);
    if (sig) emu_score_sums(ssum, scores, N, E);
    emu_expert_parts(pq, ph, NULL, scores, ssum, idx, NULL, nparts, Tr, nchunk, E, K);
    double sh[KMOE_THREADS];
    for (int t = 0; t < KMOE_THREADS; t++)
        sh[t] = kmoe_bal_part(pq, ph, gf, rows, Tr, nchunk, E, K, t, KMOE_THREADS);
    const float loss = kmoe_bal_final(kmoe_tree_sum(sh, KMOE_THREADS), rows, E);
    free(ssum), free(pq), free(ph);
    return loss;
}

/* cuda_router_gate_backward: with a balance loss, the coefficients (k_expert_parts' hits, or
 * global f, then k_bal_coef, a thread per (row, expert)); then k_gate_back, a thread per token */
static void emu_gate_backward(float *dlogits, const float *dw, const float *scores,
                              const float *lse, const float *logits, const int *idx, const float *w,
                              int N, const MoeSpec *s, const MoeCtx *x, float bal_scale,
                              float z_scale) {
    if (N <= 0) return;
    const int E = s->num_experts, K = s->top_k, sig = s->score == MOE_SCORE_SIGMOID;
    const int seq = s->balance == MOE_BALANCE_SEQ_AUX;
    float *coef = NULL;
    int rows = 0;
    if (seq || s->balance == MOE_BALANCE_AUX) {
        int Tr;
        rows = kmoe_bal_rows(seq, N, x->T, &Tr);
        const int nchunk = kmoe_chunks(Tr);
        const size_t nparts = (size_t)rows * nchunk * E, ncoef = (size_t)rows * E;
        const float *gf = seq ? NULL : x->global_f;
        int *ph = gf ? NULL : ints(nparts);
        coef = floats(ncoef);
        if (!gf) emu_expert_parts(NULL, ph, NULL, NULL, NULL, idx, NULL, nparts, Tr, nchunk, E, K);
        const float per = kmoe_coef_per(bal_scale, E, rows, Tr);
        for (size_t b = 0; b < kmoe_grid(ncoef); b++)
            for (int t = 0; t < KMOE_THREADS; t++) {
                size_t j = b * KMOE_THREADS + t;
                if (j < ncoef) coef[j] = kmoe_bal_coef(ph, gf, j, Tr, nchunk, E, K, per);
            }
        free(ph);
    }
    const int T = seq ? x->T : N;
    const float z_per = z_scale * 2.0f / (float)N;
    for (int b = 0; b < (int)kmoe_grid((size_t)N); b++)
        for (int t = 0; t < KMOE_THREADS; t++) {
            int n = b * KMOE_THREADS + t;
            if (n >= N) continue;
            const float *g = coef ? coef + (size_t)(rows > 1 ? n / T : 0) * E : NULL;
            kmoe_gate_back_row(dlogits + (size_t)n * E, dw + (size_t)n * K, scores + (size_t)n * E,
                               sig ? logits + (size_t)n * E : NULL, lse[n], idx + (size_t)n * K,
                               w + (size_t)n * K, g, E, K, sig, s->topk_before_softmax,
                               s->norm_topk, s->route_scale, z_per);
        }
    free(coef);
}

/* cuda_route_stats: k_stats_tokens (a thread per token, each block's trees into its partials),
 * k_expert_parts (token choice: routed and dropped hits), k_stats_final (one block: the token
 * blocks' partials strided and the tree; per expert the chunks in order), then the host's end
 * (kmoe_route_stats_finish) */
static void emu_route_stats(RouteStats *r, const float *scores, const int *idx,
                            const DispatchPlan *p, int N, const MoeSpec *s) {
    const int E = s->num_experts, K = s->top_k, ec = s->routing == MOE_ROUTING_EXPERT_CHOICE;
    const int Nc = ec ? p->N : N, Nt = Nc > 0 ? Nc : 0, A = p->K;
    const int nblk = (int)kmoe_grid((size_t)Nt);
    const int nchunk = ec || Nt == 0 ? 0 : kmoe_chunks(Nt);
    const size_t nparts = (size_t)nchunk * E;
    double *bent = doubles((size_t)nblk), *btop = doubles((size_t)nblk);
    int *bun = ints((size_t)nblk), *ph = ints(nparts), *pd = ints(nparts);
    double se[KMOE_THREADS], sp[KMOE_THREADS];
    int su[KMOE_THREADS];
    for (int b = 0; b < nblk; b++) {
        for (int t = 0; t < KMOE_THREADS; t++) {
            const int n = b * KMOE_THREADS + t;
            se[t] = sp[t] = 0.0, su[t] = 0;
            if (n >= Nt) continue;
            kmoe_token_stats(&se[t], &sp[t], scores + (size_t)n * E, E);
            if (ec) su[t] = !kmoe_token_picked(p->slot + (size_t)n * A, A);
        }
        bent[b] = kmoe_tree_sum(se, KMOE_THREADS), btop[b] = kmoe_tree_sum(sp, KMOE_THREADS);
        bun[b] = kmoe_tree_sum_int(su, KMOE_THREADS);
    }
    if (nparts) emu_expert_parts(NULL, ph, pd, NULL, NULL, idx, p->slot, nparts, Nt, nchunk, E, K);
    for (int t = 0; t < KMOE_THREADS; t++) {
        se[t] = sp[t] = 0.0, su[t] = 0;
        for (int b = t; b < nblk; b += KMOE_THREADS)
            se[t] += bent[b], sp[t] += btop[b], su[t] += bun[b];
    }
    KmoeStatsHead h = {0};
    h.ent = kmoe_tree_sum(se, KMOE_THREADS), h.top1 = kmoe_tree_sum(sp, KMOE_THREADS);
    h.unpicked = kmoe_tree_sum_int(su, KMOE_THREADS);
    int *routed = ints((size_t)E), *dropped = ints((size_t)E);
    for (int e = 0; e < E; e++) {
        routed[e] = ec ? p->counts[e] : nparts ? kmoe_part_count(ph, 0, e, nchunk, E) : 0;
        dropped[e] = !ec && nparts ? kmoe_part_count(pd, 0, e, nchunk, E) : 0;
    }
    kmoe_route_stats_finish(r, &h, routed, dropped, p, N, s);
    free(bent), free(btop), free(bun), free(ph), free(pd), free(routed), free(dropped);
}

/* ---- router --------------------------------------------------------------------------------- */

START_TEST(test_scores_and_lse) {
    const int Es[] = {4, 8, 64}, Ns[] = {1, 300};
    for (int ie = 0; ie < 3; ie++)
        for (int in = 0; in < 2; in++)
            for (int score = 0; score < 2; score++)
                for (int with_lse = 0; with_lse < 2; with_lse++) {
                    const int E = Es[ie], N = Ns[in];
                    const size_t NE = (size_t)N * E;
                    float *l = floats(NE), *want = floats(NE), *got = floats(NE);
                    float *lse_w = floats(N), *lse_g = floats(N);
                    fill_uniform(l, NE, 4.0f, 11 + ie);
                    if (N > 2) {
                        /* a row of equal logits, and one far out where exp saturates */
                        for (int e = 0; e < E; e++) l[E + e] = 0.25f;
                        for (int e = 0; e < E; e++) l[2 * E + e] = e % 2 ? 100.0f : -100.0f;
                    }
                    MoeSpec s = spec_of(E, 1, score, 0, 0, 1.0f);
                    router_scores_forward(want, lse_w, l, N, &s);
                    fill_nan(got, NE);
                    fill_nan(lse_g, N);
                    emu_scores(got, with_lse ? lse_g : NULL, l, N, &s);
                    expect_close_arrays(got, want, NE, TOL_F32_ATOL, TOL_F32_RTOL,
                                        score ? "sigmoid scores" : "softmax scores");
                    if (with_lse)
                        expect_close_arrays(lse_g, lse_w, (size_t)N, TOL_F32_ATOL, TOL_F32_RTOL,
                                            "lse");
                    else
                        ck_assert_msg(isnan(lse_g[0]), "lse written although NULL was passed");
                    free(l), free(want), free(got), free(lse_w), free(lse_g);
                }
}
END_TEST

/* Whether token n's choice involved a tie: a chosen key equal to another expert's key. */
static int row_has_tie(const float *key, const float *bias, const int *in, int E, int K) {
    for (int k = 0; k < K; k++) {
        float kc = bias ? key[in[k]] + bias[in[k]] : key[in[k]];
        for (int e = 0; e < E; e++) {
            float ke = bias ? key[e] + bias[e] : key[e];
            if (e != in[k] && ke == kc) return 1;
        }
    }
    return 0;
}

START_TEST(test_gate_every_mode) {
    /* every mode of router_gate_forward (topk_before_softmax with softmax scores only, as the
     * config allows it), route_scale 2.5 in half of them, for each E and K; idx equal, w under
     * the tolerance. Few reference calls: each is an OpenMP region, slow on a busy machine. */
    enum { N = 300 };
    const int Es[] = {4, 8, 64}, Ks[] = {1, 2, 4};
    long ties = 0;
    for (int ie = 0; ie < 3; ie++) {
        const int E = Es[ie];
        float *l = floats((size_t)N * E), *p = floats((size_t)N * E), *bias = floats(E);
        fill_tied_logits(l, N, E, 100 + ie);
        /* quarter steps, so experts with equal scores often get equal keys too */
        fill_uniform(bias, (size_t)E, 0.5f, 200 + ie);
        for (int e = 0; e < E; e++) bias[e] = roundf(bias[e] * 4.0f) / 4.0f;
        for (int score = 0; score < 2; score++) {
            MoeSpec sp = spec_of(E, 1, score, 0, 0, 1.0f);
            router_scores_forward(p, NULL, l, N, &sp);
            for (int ik = 0; ik < 3; ik++)
                for (int mode = 0; mode < 8; mode++) {
                    const int K = Ks[ik], with_bias = mode & 1, tf = (mode >> 1) & 1;
                    const int norm = (mode >> 2) & 1;
                    const float rs = with_bias == tf ? 2.5f : 1.0f;
                    if (tf && score == MOE_SCORE_SIGMOID) continue;
                    const float *b = with_bias ? bias : NULL;
                    MoeSpec s = spec_of(E, K, score, tf, norm, rs);
                    int iw[N * 4], ig[N * 4];
                    float ww[N * 4], wg[N * 4];
                    router_gate_forward(iw, ww, p, l, b, N, &s);
                    memset(ig, 0xff, sizeof ig);
                    fill_nan(wg, (size_t)N * K);
                    emu_gate(ig, wg, p, l, b, N, &s);
                    char what[96];
                    snprintf(what, sizeof what, "E %d K %d score %d bias %d tf %d norm %d rs %g", E,
                             K, score, with_bias, tf, norm, (double)rs);
                    expect_ints(ig, iw, (size_t)N * K, what);
                    expect_close_arrays(wg, ww, (size_t)N * K, TOL_F32_ATOL, TOL_F32_RTOL, what);
                    for (int n = 0; n < N; n++)
                        ties +=
                            row_has_tie((tf ? l : p) + (size_t)n * E, b, iw + (size_t)n * K, E, K);
                }
        }
        free(l), free(p), free(bias);
    }
    /* the comparison above only proves the tie rule if ties happened */
    ck_assert_msg(ties > 1000, "only %ld rows with tied keys", ties);
}
END_TEST

START_TEST(test_gate_all_equal_row) {
    /* every key equal: the first K experts in order, whatever the mode */
    enum { E = 8, K = 4 };
    float l[E], p[E], w[K];
    int in[K];
    for (int e = 0; e < E; e++) l[e] = 1.0f;
    MoeSpec s = spec_of(E, K, MOE_SCORE_SOFTMAX, 0, 1, 1.0f);
    router_scores_forward(p, NULL, l, 1, &s);
    emu_gate(in, w, p, l, NULL, 1, &s);
    for (int k = 0; k < K; k++) {
        ck_assert_int_eq(in[k], k);
        CLOSE(w[k], 0.25f, "equal weights");
    }
}
END_TEST

START_TEST(test_gate_groups) {
    /* group-limited routing (moe.n_group, moe.topk_group) in k_gate's order against the
     * reference: idx exactly (tied keys, tied group scores), w under the tolerance; every
     * token's experts in at most topk_group groups, and the groups move some choices (else the
     * comparison would only be the plain top-k's) */
    enum { N = 777 };
    const int cases[][4] = {/* E, G, KG, K */
                            {8, 2, 1, 2},
                            {8, 4, 2, 2},
                            {64, 8, 4, 8},
                            {64, 8, 1, 4},
                            {64, 16, 3, 6}};
    long moved = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int E = cases[c][0], G = cases[c][1], KG = cases[c][2], K = cases[c][3];
        float *l = floats((size_t)N * E), *p = floats((size_t)N * E), *bias = floats(E);
        float *ww = floats((size_t)N * K), *wg = floats((size_t)N * K);
        int *iw = ints((size_t)N * K), *ig = ints((size_t)N * K), *flat = ints((size_t)N * K);
        fill_tied_logits(l, N, E, 500 + c);
        fill_uniform(bias, (size_t)E, 0.5f, 600 + c);
        for (int e = 0; e < E; e++) bias[e] = roundf(bias[e] * 4.0f) / 4.0f;
        for (int mode = 0; mode < 4; mode++) {
            const int score = mode & 1;
            const float *b = mode >> 1 ? bias : NULL;
            MoeSpec s = spec_of(E, K, score, 0, 1, 2.5f);
            router_scores_forward(p, NULL, l, N, &s);
            router_gate_forward(flat, ww, p, l, b, N, &s);
            s.n_group = G, s.topk_group = KG;
            router_gate_forward(iw, ww, p, l, b, N, &s);
            memset(ig, 0xff, (size_t)N * K * sizeof(int));
            fill_nan(wg, (size_t)N * K);
            emu_gate(ig, wg, p, l, b, N, &s);
            char what[96];
            snprintf(what, sizeof what, "E %d G %d KG %d K %d score %d bias %d", E, G, KG, K, score,
                     b != NULL);
            expect_ints(ig, iw, (size_t)N * K, what);
            expect_close_arrays(wg, ww, (size_t)N * K, TOL_F32_ATOL, TOL_F32_RTOL, what);
            for (int n = 0; n < N; n++) {
                unsigned long long groups = 0;
                for (int k = 0; k < K; k++) groups |= 1ull << (ig[n * K + k] / (E / G));
                ck_assert_msg(__builtin_popcountll(groups) <= KG, "%s: token %d in %d groups", what,
                              n, __builtin_popcountll(groups));
                moved += memcmp(ig + n * K, flat + n * K, (size_t)K * sizeof(int)) != 0;
            }
        }
        free(l), free(p), free(bias), free(ww), free(wg), free(iw), free(ig), free(flat);
    }
    ck_assert_msg(moved > 1000, "grouping changed only %ld tokens' choices", moved);
}
END_TEST

START_TEST(test_z_loss) {
    const int Ns[] = {1, 255, 300, 1000};
    for (int i = 0; i < 4; i++) {
        float *lse = floats(Ns[i]);
        fill_uniform(lse, (size_t)Ns[i], 5.0f, 300 + i);
        CLOSE(emu_zloss(lse, Ns[i]), router_z_loss(lse, Ns[i]), "z-loss");
        free(lse);
    }
    ck_assert(emu_zloss(NULL, 0) == 0.0f);
}
END_TEST

START_TEST(test_logit_stats) {
    const int Ns[] = {1, 255, 300, 1000}, E = 7;
    for (int i = 0; i < 4; i++) {
        float *l = floats((size_t)Ns[i] * E), *lse = floats(Ns[i]);
        fill_uniform(l, (size_t)Ns[i] * E, 3.0f, 400 + i);
        fill_uniform(lse, (size_t)Ns[i], 5.0f, 500 + i);
        l[(size_t)(Ns[i] - 1) * E + 3] = -9.5f; /* the largest magnitude, negative, last row */
        RouteStats want, got;
        router_logit_stats(&want, l, lse, Ns[i], E);
        emu_logit_stats(&got, l, lse, Ns[i], E);
        ck_assert(want.max_logit == 9.5f && got.max_logit == 9.5f);
        CLOSE(got.lse_mean, want.lse_mean, "mean lse");
        free(l), free(lse);
    }
}
END_TEST

/* ---- balance loss, router backward, route statistics -------------------------------------- */

/* Sizes of the balance cases: T divides N (several sequences, one not a multiple of the
 * chunk, and one sequence of the whole batch) */
static const struct {
    int E, K, N, T;
} bal_sizes[] = {{4, 1, 96, 32}, {8, 2, 300, 100}, {64, 4, 777, 259}, {8, 2, 77, 77}};
enum { BAL_SIZES = sizeof bal_sizes / sizeof bal_sizes[0] };
static const char *balance_name[] = {"aux", "seq_aux", "aux_free", "none"};

/* A token-choice routing of N tokens by s: logits (N, E), scores and lse, idx and w (N, K). */
static void route_tokens(float *l, float *sc, float *lse, int *idx, float *w, int N,
                         const MoeSpec *s, unsigned long long seed) {
    fill_uniform(l, (size_t)N * s->num_experts, 2.0f, seed);
    router_scores_forward(sc, lse, l, N, s);
    router_gate_forward(idx, w, sc, l, NULL, N, s);
}

/* global f: E positive fractions summing to 1, not the batch's own */
static void fill_global_f(float *gf, int E, unsigned long long seed) {
    double sum = 0.0;
    fill_uniform(gf, (size_t)E, 1.0f, seed);
    for (int e = 0; e < E; e++) sum += gf[e] = fabsf(gf[e]) + 0.05f;
    for (int e = 0; e < E; e++) gf[e] = (float)(gf[e] / sum);
}

START_TEST(test_balance_loss) {
    for (int iz = 0; iz < BAL_SIZES; iz++) {
        const int E = bal_sizes[iz].E, K = bal_sizes[iz].K, N = bal_sizes[iz].N;
        float *l = floats((size_t)N * E), *sc = floats((size_t)N * E), *lse = floats(N);
        float *w = floats((size_t)N * K), *gf = floats(E);
        int *idx = ints((size_t)N * K);
        fill_global_f(gf, E, 900 + iz);
        for (int score = 0; score < 2; score++) {
            MoeSpec s = spec_of(E, K, score, 0, 1, 1.0f);
            route_tokens(l, sc, lse, idx, w, N, &s, 800 + iz);
            for (int bal = 0; bal < 4; bal++)
                for (int with_gf = 0; with_gf < 2; with_gf++) {
                    s.balance = bal;
                    MoeCtx x;
                    moe_ctx_train(&x, &s, bal_sizes[iz].T, NULL);
                    x.global_f = with_gf ? gf : NULL;
                    char what[96];
                    snprintf(what, sizeof what, "balance loss E %d K %d N %d score %d %s gf %d", E,
                             K, N, score, balance_name[bal], with_gf);
                    const float want = router_balance_loss(sc, idx, N, &s, &x);
                    CLOSE(emu_balance_loss(sc, idx, N, &s, &x), want, what);
                }
        }
        free(l), free(sc), free(lse), free(w), free(gf), free(idx);
    }
    /* an expert-choice spec: the reference reads idx (N, E) as (N, K) rows, and so do the
     * bodies (the block never asks for it: its aux_loss is 0) */
    enum { E = 8, K = 2, N = 300 };
    DispatchPlan p;
    float *w, *sc;
    int *idx;
    make_routing(&p, &w, &sc, &idx, PLAN_EXPERT_CHOICE, N, E, K, MOE_SCORE_SOFTMAX);
    MoeSpec s = spec_of(E, K, MOE_SCORE_SOFTMAX, 0, 0, 1.0f);
    s.routing = MOE_ROUTING_EXPERT_CHOICE, s.balance = MOE_BALANCE_NONE;
    MoeCtx x;
    moe_ctx_train(&x, &s, N, NULL);
    CLOSE(emu_balance_loss(sc, idx, N, &s, &x), router_balance_loss(sc, idx, N, &s, &x),
          "balance loss, expert choice");
    ck_assert(emu_balance_loss(sc, idx, 0, &s, &x) == 0.0f);
    dispatch_plan_free(&p);
    free(w), free(sc), free(idx);
}
END_TEST

START_TEST(test_gate_backward) {
    /* every mode of router_gate_backward, bal_scale and z_scale non-zero; dw zero in half of
     * them, so that the balance and z terms alone are compared too */
    const float bal_scale = 3.0f, z_scale = 0.5f;
    for (int iz = 0; iz < BAL_SIZES; iz++) {
        const int E = bal_sizes[iz].E, K = bal_sizes[iz].K, N = bal_sizes[iz].N;
        const size_t NE = (size_t)N * E, NK = (size_t)N * K;
        float *l = floats(NE), *sc = floats(NE), *lse = floats(N), *w = floats(NK);
        float *dw = floats(NK), *gf = floats(E), *want = floats(NE), *got = floats(NE);
        int *idx = ints(NK);
        fill_global_f(gf, E, 910 + iz);
        for (int score = 0; score < 2; score++)
            for (int mode = 0; mode < 4; mode++) {
                const int tf = mode & 1, norm = (mode >> 1) & 1;
                if (tf && score == MOE_SCORE_SIGMOID) continue;
                const float rs = norm == tf ? 2.5f : 1.0f;
                MoeSpec s = spec_of(E, K, score, tf, norm, rs);
                route_tokens(l, sc, lse, idx, w, N, &s, 820 + iz);
                for (int bal = 0; bal < 4; bal++)
                    for (int v = 0; v < 4; v++) {
                        const int with_gf = v & 1, dw_zero = v >> 1;
                        if (dw_zero)
                            memset(dw, 0, NK * sizeof(float));
                        else
                            fill_uniform(dw, NK, 1.0f, 830 + v);
                        s.balance = bal;
                        MoeCtx x;
                        moe_ctx_train(&x, &s, bal_sizes[iz].T, NULL);
                        x.global_f = with_gf ? gf : NULL;
                        router_gate_backward(want, dw, sc, lse, l, idx, w, N, &s, &x, bal_scale,
                                             z_scale);
                        fill_nan(got, NE);
                        emu_gate_backward(got, dw, sc, lse, l, idx, w, N, &s, &x, bal_scale,
                                          z_scale);
                        char what[128];
                        snprintf(what, sizeof what,
                                 "dlogits E %d K %d N %d score %d tf %d norm %d rs %g %s gf %d "
                                 "dw0 %d",
                                 E, K, N, score, tf, norm, (double)rs, balance_name[bal], with_gf,
                                 dw_zero);
                        expect_close_arrays(got, want, NE, TOL_F32_ATOL, TOL_F32_RTOL, what);
                    }
            }
        free(l), free(sc), free(lse), free(w), free(dw), free(gf), free(want), free(got), free(idx);
    }
}
END_TEST

START_TEST(test_gate_backward_expert_choice) {
    /* the block's expert-choice backward (model/moe_block.c): E "chosen" experts per token,
     * unnormalised, no balance loss; dw 0 for the pairs no expert picked */
    enum { E = 8, K = 2, N = 300 };
    const size_t NE = (size_t)N * E;
    float *l = floats(NE), *sc = floats(NE), *lse = floats(N), *w = floats(NE), *dw = floats(NE);
    float *want = floats(NE), *got = floats(NE);
    int *idx = ints(NE);
    for (int score = 0; score < 2; score++)
        for (int ir = 0; ir < 2; ir++) {
            MoeSpec s = spec_of(E, K, score, 0, 1, ir ? 2.5f : 1.0f);
            s.routing = MOE_ROUTING_EXPERT_CHOICE, s.balance = MOE_BALANCE_NONE;
            MoeCtx x;
            moe_ctx_train(&x, &s, N, NULL);
            fill_skewed_logits(l, N, E, 840 + score);
            router_scores_forward(sc, lse, l, N, &s);
            DispatchPlan p;
            dispatch_plan_alloc(&p, N, E, E);
            expert_choice_forward(idx, w, &p, sc, N, &s, &x);
            fill_uniform(dw, NE, 1.0f, 850 + ir);
            int unpicked = 0;
            for (size_t j = 0; j < NE; j++)
                if (p.slot[j] < 0) dw[j] = 0.0f, unpicked++;
            ck_assert_int_gt(unpicked, 0);
            MoeSpec sb = s;
            sb.top_k = E, sb.norm_topk = 0, sb.topk_before_softmax = 0;
            router_gate_backward(want, dw, sc, lse, l, idx, w, N, &sb, &x, 0.0f, 0.5f);
            fill_nan(got, NE);
            emu_gate_backward(got, dw, sc, lse, l, idx, w, N, &sb, &x, 0.0f, 0.5f);
            char what[64];
            snprintf(what, sizeof what, "expert-choice dlogits score %d rs %d", score, ir);
            expect_close_arrays(got, want, NE, TOL_F32_ATOL, TOL_F32_RTOL, what);
            dispatch_plan_free(&p);
        }
    free(l), free(sc), free(lse), free(w), free(dw), free(want), free(got), free(idx);
}
END_TEST

static void expect_same_stats(const RouteStats *got, const RouteStats *want, const char *what) {
    const int E = want->E;
    expect_ints(got->routed, want->routed, (size_t)E, what);
    expect_ints(got->dropped, want->dropped, (size_t)E, what);
    expect_close_arrays(got->load, want->load, (size_t)E, TOL_F32_ATOL, TOL_F32_RTOL, what);
    CLOSE(got->drop, want->drop, what);
    CLOSE(got->pad, want->pad, what);
    CLOSE(got->st.maxvio, want->st.maxvio, what);
    CLOSE(got->st.cv, want->st.cv, what);
    CLOSE(got->st.entropy, want->st.entropy, what);
    CLOSE(got->st.top1, want->st.top1, what);
    CLOSE(got->st.drop_frac, want->st.drop_frac, what);
}

START_TEST(test_route_stats) {
    /* dropless, capacity (drops), padded (drops and padding rows) and expert-choice plans
     * (tokens no expert picked), softmax and sigmoid scores; N = 300 spans two token blocks */
    const int Es[] = {4, 8, 64}, Ks[] = {1, 2, 4}, Ns[] = {300, 77, 300};
    int ec_unpicked = 0;
    for (int kind = 0; kind < PLAN_KINDS; kind++)
        for (int score = 0; score < 2; score++)
            for (int iz = 0; iz < 3; iz++) {
                const int E = Es[iz], K = Ks[iz], N = Ns[iz];
                DispatchPlan p;
                float *w, *sc;
                int *idx;
                make_routing(&p, &w, &sc, &idx, kind, N, E, K, score);
                MoeSpec s = spec_of(E, K, score, 0, 1, 1.0f);
                if (kind == PLAN_EXPERT_CHOICE)
                    s.routing = MOE_ROUTING_EXPERT_CHOICE, s.balance = MOE_BALANCE_NONE;
                RouteStats want, got;
                route_stats_alloc(&want, E);
                route_stats_alloc(&got, E);
                route_stats(&want, sc, idx, &p, N, &s);
                emu_route_stats(&got, sc, idx, &p, N, &s);
                char what[96];
                snprintf(what, sizeof what, "route_stats, %s plan, score %d, E %d K %d N %d",
                         plan_name[kind], score, E, K, N);
                expect_same_stats(&got, &want, what);
                /* the cases exercise what they are for */
                if (kind == PLAN_CAPACITY || kind == PLAN_PADDED)
                    ck_assert_msg(want.drop > 0.0, "%s: nothing dropped", what);
                if (kind == PLAN_PADDED) ck_assert_msg(want.pad > 0.0, "%s: no padding", what);
                if (kind == PLAN_EXPERT_CHOICE) ec_unpicked += want.drop > 0.0;
                route_stats_free(&want), route_stats_free(&got);
                dispatch_plan_free(&p);
                free(w), free(sc), free(idx);
            }
    ck_assert_msg(ec_unpicked > 0, "no expert-choice case left a token unpicked");
    /* no tokens */
    enum { E = 4, K = 2 };
    MoeSpec s = spec_of(E, K, MOE_SCORE_SOFTMAX, 0, 1, 1.0f);
    DispatchPlan p;
    dispatch_plan_alloc(&p, 1, E, K);
    dispatch_plan_build(&p, NULL, 0);
    RouteStats want, got;
    route_stats_alloc(&want, E);
    route_stats_alloc(&got, E);
    route_stats(&want, NULL, NULL, &p, 0, &s);
    emu_route_stats(&got, NULL, NULL, &p, 0, &s);
    expect_same_stats(&got, &want, "route_stats, no tokens");
    route_stats_free(&want), route_stats_free(&got);
    dispatch_plan_free(&p);
}
END_TEST

static Suite *kernels_route_suite(void) {
    Suite *s = suite_create("kernels_route");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, one_thread, NULL);
    tcase_add_test(tc, test_scores_and_lse);
    tcase_add_test(tc, test_gate_every_mode);
    tcase_add_test(tc, test_gate_all_equal_row);
    tcase_add_test(tc, test_gate_groups);
    tcase_add_test(tc, test_z_loss);
    tcase_add_test(tc, test_logit_stats);
    tcase_add_test(tc, test_balance_loss);
    tcase_add_test(tc, test_gate_backward);
    tcase_add_test(tc, test_gate_backward_expert_choice);
    tcase_add_test(tc, test_route_stats);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(kernels_route_suite)
