/*
 * test_kernels_moe.c: the CUDA MoE kernels' arithmetic (backend/kernels_moe.h), run on the host.
 *
 * Each emu_* function below is one entry of cuda_moe.cu or cuda_plans.cu with its kernels
 * replaced by loops that walk the grid in the kernel's order: the same blocks, the same threads
 * per block, the same chunks of the plan's scans, the same ballots (one mask per warp), the
 * same reduction trees. The bodies are the very text nvcc compiles for the device, so a machine
 * without a GPU still checks the kernels' math against the reference ops of src/moe:
 *
 *   - integers exactly: the top-k's idx (rows full of equal keys included: ties go to the
 *     lower expert), and the plan's counts, offsets, slot and slot_token;
 *   - floats under the one tolerance rule (TOL_F32_ATOL, TOL_F32_RTOL): the bodies use expf
 *     where the reference uses nn_expf, and the dw dot and the z-loss sum in another order.
 *
 * Sizes: E in {4, 8, 64}, K in {1, 2, 4}, N not a multiple of the block (300, 777), and C on
 * both sides of a row block (5, 64, 300). permute and combine also run on plans built
 * elsewhere: capacity plans with dropped assignments, padded ones with padding rows, and an
 * expert-choice plan (E assignments per token).
 *
 * The balance loss and the router's backward run every balance (aux, seq_aux over several
 * sequences, one not a multiple of the chunk, aux_free, none), softmax and sigmoid, with and
 * without global f, every gate mode (norm_topk, topk_before_softmax, route_scale) and the
 * block's expert-choice backward; route_stats runs on dropless, capacity, padded and
 * expert-choice plans: routed and dropped counts exactly, the rest under the tolerance.
 *
 * The capacity plan runs scope batch and sequence (several sequences, a shorter last one),
 * drop by position and by score (router scores rounded so that tokens tie at a budget's edge),
 * packed and padded, min_capacity binding and not, factors 0.5, 1, 1.25, every E and K, and
 * the random second expert with the same seeded stream on both sides; the expert-choice plan
 * ec_capacity 1 and 2, softmax and sigmoid scores full of ties. Both compare every integer of
 * the plan exactly, and each case counts that it met what it is for (drops, padding, ties at
 * the edge, random drops).
 */
#include <string.h>

#include "backend/backend.h"
#include "backend/kernels_moe.h"
#include "backend/kernels_route.h"
#include "base/util.h"
#include "moe/moe_ops.h"
#include "testutil.h"

/* ---- inputs -------------------------------------------------------------------------------- */

/* Logits (N, E) full of ties: uniform values rounded to halves in [-2, 2] (9 values, so rows
 * repeat them), row 0 all equal, row 1 with its two largest equal. */
static void fill_tied_logits(float *l, int N, int E, unsigned long long seed) {
    fill_uniform(l, (size_t)N * E, 2.0f, seed);
    for (size_t i = 0; i < (size_t)N * E; i++) l[i] = roundf(l[i] * 2.0f) / 2.0f;
    if (N > 0)
        for (int e = 0; e < E; e++) l[e] = 0.5f;
    if (N > 1) {
        for (int e = 0; e < E; e++) l[E + e] = -1.0f;
        l[E + E - 1] = l[E + 1] = 3.0f;
    }
}

/* Logits (N, E) that prefer the low experts: expert 0 is wanted by far more tokens than its
 * fair share, so a capacity plan drops assignments and the dropless plan's block for expert 0
 * sees hits in many chunks. */
static void fill_skewed_logits(float *l, int N, int E, unsigned long long seed) {
    fill_uniform(l, (size_t)N * E, 1.0f, seed);
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) l[(size_t)n * E + e] -= 0.5f * (float)e;
}

static MoeSpec spec_of(int E, int K, int score, int topk_first, int norm, float rs) {
    MoeSpec s = {.num_experts = E, .top_k = K, .norm_topk = norm};
    moe_spec_defaults(&s);
    s.score = score;
    s.topk_before_softmax = topk_first;
    s.route_scale = rs;
    return s;
}

static float *floats(size_t n) {
    return calloc_check(n ? n : 1, sizeof(float));
}
static int *ints(size_t n) {
    return calloc_check(n ? n : 1, sizeof(int));
}
static void fill_nan(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}
/* Check records every assertion that passes (a message to the parent process each), so the
 * elements are compared first and only a mismatch asserts. */
static void expect_ints(const int *got, const int *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            ck_assert_msg(0, "%s: element %zu: got %d want %d", what, i, got[i], want[i]);
}

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
            kmoe_gate_row(idx + (size_t)n * K, w + (size_t)n * K, scores + (size_t)n * E,
                          tf ? logits + (size_t)n * E : NULL, bias, E, K, tf, s->norm_topk,
                          s->route_scale);
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

/* k_plan_offsets: one block, chunks of Hillis-Steele steps (every thread reads its addend
 * before any writes: the barrier between) */
static void emu_plan_offsets(int *offsets, const int *counts, int E) {
    int carry = 0;
    for (int base = 0; base < E; base += KMOE_THREADS) {
        int v[KMOE_THREADS], sh[KMOE_THREADS], add[KMOE_THREADS];
        for (int t = 0; t < KMOE_THREADS; t++) sh[t] = v[t] = base + t < E ? counts[base + t] : 0;
        for (int d = 1; d < KMOE_THREADS; d *= 2) {
            for (int t = 0; t < KMOE_THREADS; t++) add[t] = kmoe_scan_addend(sh, t, d);
            for (int t = 0; t < KMOE_THREADS; t++) sh[t] += add[t];
        }
        for (int t = 0; t < KMOE_THREADS; t++)
            if (base + t < E) offsets[base + t] = carry + sh[t] - v[t];
        carry += sh[KMOE_THREADS - 1];
    }
    offsets[E] = carry;
}

/* cuda_dispatch_plan_build: k_plan_rank, k_plan_offsets, k_plan_place */
static void emu_plan_build(DispatchPlan *p, const int *idx, int N) {
    const int E = p->E, K = p->K;
    const size_t NK = (size_t)N * K;
    /* k_plan_rank: block e, chunk by chunk; a warp's ballot is one mask */
    for (int e = 0; e < E; e++) {
        int run = 0;
        for (size_t base = 0; base < NK; base += KMOE_THREADS) {
            int hit[KMOE_THREADS], warp_hits[KMOE_WARPS];
            unsigned mask[KMOE_WARPS] = {0};
            for (int t = 0; t < KMOE_THREADS; t++) {
                hit[t] = kmoe_plan_hit(idx, NK, base + t, e);
                mask[t / MOE_WARP] |= (unsigned)hit[t] << (t % MOE_WARP);
            }
            for (int w = 0; w < KMOE_WARPS; w++) warp_hits[w] = kmoe_popc32(mask[w]);
            for (int t = 0; t < KMOE_THREADS; t++)
                if (hit[t])
                    p->slot[base + t] = run + kmoe_warps_before(warp_hits, t / MOE_WARP) +
                                        kmoe_lane_rank(mask[t / MOE_WARP], t % MOE_WARP);
            run += kmoe_warps_before(warp_hits, KMOE_WARPS);
        }
        p->counts[e] = run;
    }
    emu_plan_offsets(p->offsets, p->counts, E);
    /* k_plan_place: a thread per assignment */
    for (int b = 0; b < (int)kmoe_grid(NK); b++)
        for (int t = 0; t < KMOE_THREADS; t++) {
            size_t j = (size_t)b * KMOE_THREADS + t;
            if (j < NK) kmoe_plan_place(p->slot, p->slot_token, idx, p->offsets, j, E, K);
        }
    p->N = N;
    p->S = (int)NK;
}

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

/* ---- capacity and expert-choice plans: the kernels on the host ----------------------------- */

/* chunk_rank: each warp's ballot of flag (one mask per warp), then every thread's rank among
 * the chunk's flagged threads in thread order; returns the chunk's total */
static int emu_chunk_rank(const int *flag, int *rank) {
    unsigned mask[KMOE_WARPS] = {0};
    int warp_hits[KMOE_WARPS];
    for (int t = 0; t < KMOE_THREADS; t++)
        mask[t / MOE_WARP] |= (unsigned)(flag[t] != 0) << (t % MOE_WARP);
    for (int w = 0; w < KMOE_WARPS; w++) warp_hits[w] = kmoe_popc32(mask[w]);
    for (int t = 0; t < KMOE_THREADS; t++)
        rank[t] = kmoe_warps_before(warp_hits, t / MOE_WARP) +
                  kmoe_lane_rank(mask[t / MOE_WARP], t % MOE_WARP);
    return kmoe_warps_before(warp_hits, KMOE_WARPS);
}

/* block_threshold: per pass the bins counted over the block's chunks (shared atomics: the
 * counts are the same in any order), the Hillis-Steele scan (every thread reads its addend
 * before any writes), and the one thread whose bin holds the krem-th key: exactly one, which
 * the kernel relies on and the test checks */
static int emu_block_threshold(const KmoeSel *sel, size_t i0, int cap, unsigned *tkey, int *r) {
    unsigned prefix = 0u;
    int krem = cap;
    for (int pass = 0; pass < KMOE_RADIX_PASSES; pass++) {
        int hist[KMOE_RADIX_BINS] = {0}, v[KMOE_THREADS], add[KMOE_THREADS];
        for (size_t base = i0; base < sel->end; base += KMOE_THREADS)
            for (int t = 0; t < KMOE_THREADS; t++) {
                unsigned key;
                if (kmoe_sel_item(&key, sel, base + t) && kmoe_radix_in(key, prefix, pass))
                    hist[kmoe_radix_bin(key, pass)]++;
            }
        for (int t = 0; t < KMOE_THREADS; t++) v[t] = hist[t];
        for (int d = 1; d < KMOE_THREADS; d *= 2) {
            for (int t = 0; t < KMOE_THREADS; t++) add[t] = kmoe_scan_addend(hist, t, d);
            for (int t = 0; t < KMOE_THREADS; t++) hist[t] += add[t];
        }
        if (pass == 0 && hist[KMOE_THREADS - 1] <= cap) return 0;
        int picks = 0, digit = 0, left = 0;
        for (int t = 0; t < KMOE_THREADS; t++)
            if (kmoe_radix_pick(hist[t] - v[t], hist[t], krem)) {
                picks++;
                digit = KMOE_RADIX_BINS - 1 - t;
                left = krem - (hist[t] - v[t]);
            }
        if (picks != 1) ck_assert_msg(0, "radix pass %d: %d bins claim the threshold", pass, picks);
        prefix |= (unsigned)digit << kmoe_radix_shift(pass);
        krem = left;
    }
    *tkey = prefix;
    *r = krem;
    return 1;
}

/* cuda_capacity_plan_build: the host's sizes and draws, then k_cap_flag (a thread per
 * assignment), k_cap_select (a block per (scope, expert), block index sc E + e), k_cap_rank
 * (a block per expert), k_plan_offsets (packed) , k_cap_place (a thread per assignment),
 * k_cap_pad_rows (padded: a thread per slot row); S from the sizes or offsets[E] */
static void emu_capacity_plan_build(DispatchPlan *p, const int *idx, const float *scores,
                                    const float *w, int N, const MoeSpec *s, const MoeCtx *x) {
    const int E = p->E, K = p->K;
    p->N = N;
    if (N <= 0 || E <= 0) {
        memset(p->counts, 0, (size_t)E * sizeof(int));
        memset(p->offsets, 0, (size_t)(E + 1) * sizeof(int));
        p->S = 0;
        return;
    }
    const KmoeCapSizes z = kmoe_cap_sizes(s, x, N, E);
    const size_t NK = (size_t)N * K;
    float *u = NULL;
    if (kmoe_cap_random(s, x, K)) {
        u = floats((size_t)N);
        kmoe_cap_draws(u, x->rng, N);
    }
    const float *du = u;
    for (size_t b = 0; b < kmoe_grid(NK); b++)
        for (int t = 0; t < KMOE_THREADS; t++) {
            const size_t j = b * KMOE_THREADS + t;
            if (j < NK) p->slot[j] = kmoe_cap_flag(idx, w, du, j, E, K);
        }
    const int by_score = s->drop_policy == MOE_DROP_SCORE;
    int hit[KMOE_THREADS], tie[KMOE_THREADS], rank[KMOE_THREADS];
    unsigned key[KMOE_THREADS];
    for (int b = 0; b < z.nscope * E; b++) {
        const int e = b % E, sc = b / E;
        size_t j0, j1;
        kmoe_cap_scope_items(&j0, &j1, sc, z.Ts, N, K);
        const KmoeSel sel = {idx, p->slot, by_score ? scores : NULL, j1, E, K, e};
        unsigned tkey = 0u;
        int r = z.cap;
        const int ranked = by_score ? emu_block_threshold(&sel, j0, z.cap, &tkey, &r) : 0;
        if (by_score && !ranked) continue;
        int run = 0;
        for (size_t base = j0; base < j1; base += KMOE_THREADS) {
            for (int t = 0; t < KMOE_THREADS; t++) {
                hit[t] = kmoe_sel_item(&key[t], &sel, base + t);
                tie[t] = kmoe_sel_tie(hit[t], key[t], tkey, ranked);
            }
            const int ties = emu_chunk_rank(tie, rank);
            for (int t = 0; t < KMOE_THREADS; t++)
                if (hit[t] && !kmoe_sel_keep(hit[t], key[t], tkey, ranked, run + rank[t], r))
                    p->slot[base + t] = -1;
            run += ties;
        }
    }
    for (int e = 0; e < E; e++) {
        const KmoeSel sel = {idx, p->slot, NULL, NK, E, K, e};
        int run = 0;
        for (size_t base = 0; base < NK; base += KMOE_THREADS) {
            for (int t = 0; t < KMOE_THREADS; t++) hit[t] = kmoe_sel_item(&key[t], &sel, base + t);
            const int hits = emu_chunk_rank(hit, rank);
            for (int t = 0; t < KMOE_THREADS; t++)
                if (hit[t]) p->slot[base + t] = run + rank[t];
            run += hits;
        }
        p->counts[e] = run;
        if (z.R > 0) {
            p->offsets[e] = e * z.R;
            if (e == E - 1) p->offsets[E] = E * z.R;
        }
    }
    if (z.R == 0) emu_plan_offsets(p->offsets, p->counts, E);
    for (size_t b = 0; b < kmoe_grid(NK); b++)
        for (int t = 0; t < KMOE_THREADS; t++) {
            const size_t j = b * KMOE_THREADS + t;
            if (j < NK) kmoe_cap_place(p->slot, p->slot_token, idx, p->offsets, j, K);
        }
    if (z.R > 0) {
        const size_t S = (size_t)E * z.R;
        for (size_t b = 0; b < kmoe_grid(S); b++)
            for (int t = 0; t < KMOE_THREADS; t++) {
                const size_t sl = b * KMOE_THREADS + t;
                if (sl < S) kmoe_cap_pad_row(p->slot_token, p->counts, sl, z.R);
            }
        p->S = (int)S;
    } else {
        p->S = p->offsets[E];
    }
    free(u);
}

/* cuda_expert_choice_forward: k_ec_fill (a thread per (n, e)), then k_ec_select (a block per
 * expert: the threshold, then per chunk the ties' ballot and the picks' ballot) */
static void emu_expert_choice_forward(int *idx, float *w, DispatchPlan *p, const float *scores,
                                      int N, const MoeSpec *s) {
    const int E = s->num_experts, cap = moe_ec_capacity(s, N);
    ck_assert_int_eq(p->K, E);
    p->N = N;
    p->S = E * cap;
    if (N <= 0 || E <= 0) {
        memset(p->counts, 0, (size_t)E * sizeof(int));
        memset(p->offsets, 0, (size_t)(E + 1) * sizeof(int));
        return;
    }
    const size_t NE = (size_t)N * E;
    float *col = floats(NE);
    for (size_t b = 0; b < kmoe_grid(NE); b++)
        for (int t = 0; t < KMOE_THREADS; t++) {
            const size_t i = b * KMOE_THREADS + t;
            if (i < NE) kmoe_ec_fill(idx, w, col, scores, i, N, E, s->route_scale);
        }
    int hit[KMOE_THREADS], tie[KMOE_THREADS], picked[KMOE_THREADS];
    int tie_rank[KMOE_THREADS], rank[KMOE_THREADS];
    unsigned key[KMOE_THREADS];
    for (int e = 0; e < E; e++) {
        const KmoeSel sel = {NULL, NULL, col + (size_t)e * N, (size_t)N, E, 1, e};
        unsigned tkey = 0u;
        int r = cap;
        const int ranked = emu_block_threshold(&sel, 0, cap, &tkey, &r);
        int run_tie = 0, run_pick = 0;
        for (int base = 0; base < N; base += KMOE_THREADS) {
            for (int t = 0; t < KMOE_THREADS; t++) {
                hit[t] = kmoe_sel_item(&key[t], &sel, (size_t)(base + t));
                tie[t] = kmoe_sel_tie(hit[t], key[t], tkey, ranked);
            }
            const int ties = emu_chunk_rank(tie, tie_rank);
            for (int t = 0; t < KMOE_THREADS; t++)
                picked[t] = kmoe_sel_keep(hit[t], key[t], tkey, ranked, run_tie + tie_rank[t], r);
            const int picks = emu_chunk_rank(picked, rank);
            for (int t = 0; t < KMOE_THREADS; t++)
                if (hit[t])
                    kmoe_ec_place(p->slot, p->slot_token, base + t, e, E, cap, picked[t],
                                  run_pick + rank[t]);
            run_tie += ties;
            run_pick += picks;
        }
        p->counts[e] = cap;
        p->offsets[e] = e * cap;
        if (e == E - 1) p->offsets[E] = E * cap;
    }
    free(col);
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

/* ---- dispatch plan --------------------------------------------------------------------------- */

static void expect_same_plan(const DispatchPlan *got, const DispatchPlan *want, const char *what) {
    ck_assert_msg(got->N == want->N && got->S == want->S, "%s: N %d S %d, want N %d S %d", what,
                  got->N, got->S, want->N, want->S);
    expect_ints(got->counts, want->counts, (size_t)want->E, what);
    expect_ints(got->offsets, want->offsets, (size_t)want->E + 1, what);
    expect_ints(got->slot, want->slot, (size_t)want->N * want->K, what);
    expect_ints(got->slot_token, want->slot_token, (size_t)want->S, what);
}

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

enum { PLAN_DROPLESS, PLAN_CAPACITY, PLAN_PADDED, PLAN_EXPERT_CHOICE, PLAN_KINDS };
static const char *plan_name[PLAN_KINDS] = {"dropless", "capacity", "padded", "expert choice"};

/* A plan of kind for N tokens over E experts, K per token, from skewed logits through score
 * (softmax or sigmoid); *w_out (N, A) its gate weights (A = p->K), and, when the pointers are
 * given, the scores (N, E) and idx (N, A) it was built from (else freed). The capacity plans
 * use factor 1 (expert 0 overflows); the padded one has room for E R slot rows. */
static void make_routing(DispatchPlan *p, float **w_out, float **sc_out, int **idx_out, int kind,
                         int N, int E, int K, int score) {
    float *l = floats((size_t)N * E), *sc = floats((size_t)N * E);
    int *idx;
    fill_skewed_logits(l, N, E, 600 + kind);
    MoeSpec s = spec_of(E, K, score, 0, 1, 1.0f);
    s.seq_len = N;
    router_scores_forward(sc, NULL, l, N, &s);
    MoeCtx x;
    if (kind == PLAN_EXPERT_CHOICE) {
        s.routing = MOE_ROUTING_EXPERT_CHOICE;
        moe_ctx_train(&x, &s, N, NULL);
        idx = ints((size_t)N * E);
        *w_out = floats((size_t)N * E);
        dispatch_plan_alloc(p, N, E, E);
        expert_choice_forward(idx, *w_out, p, sc, N, &s, &x);
    } else {
        idx = ints((size_t)N * K);
        *w_out = floats((size_t)N * K);
        router_gate_forward(idx, *w_out, sc, NULL, NULL, N, &s);
        if (kind == PLAN_DROPLESS) {
            dispatch_plan_alloc(p, N, E, K);
            emu_plan_build(p, idx, N);
        } else {
            s.capacity_factor = 1.0f;
            s.min_capacity = 1;
            s.padded = kind == PLAN_PADDED;
            moe_ctx_train(&x, &s, N, NULL);
            dispatch_plan_alloc(p, N, E, K);
            free(p->slot_token);
            p->slot_token = ints(moe_slots_max(&s, N) + 1);
            capacity_plan_build(p, idx, sc, *w_out, N, &s, &x);
        }
    }
    free(l);
    if (sc_out)
        *sc_out = sc;
    else
        free(sc);
    if (idx_out)
        *idx_out = idx;
    else
        free(idx);
}

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

/* ---- capacity and expert-choice plans -------------------------------------------------------- */

START_TEST(test_order_key) {
    /* the keys order as the floats do, -0 and +0 alike (the reference's > and < find them
     * equal), and the four digits of the radix passes rebuild a key */
    const float v[] = {-INFINITY, -3.5f,  -1.0f, -1e-30f, -0.0f,
                       0.0f,      1e-30f, 0.25f, 1.0f,    INFINITY};
    const int n = (int)(sizeof v / sizeof v[0]);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            const unsigned a = kmoe_order_key(v[i]), b = kmoe_order_key(v[j]);
            ck_assert_msg((v[i] < v[j]) == (a < b) && (v[i] == v[j]) == (a == b),
                          "keys of %g and %g: %08x %08x", (double)v[i], (double)v[j], a, b);
        }
    const unsigned key = kmoe_order_key(0.3f);
    unsigned prefix = 0u;
    for (int pass = 0; pass < KMOE_RADIX_PASSES; pass++) {
        ck_assert(kmoe_radix_in(key, prefix, pass));
        ck_assert(!kmoe_radix_in(key ^ 0x80000000u, prefix, pass) || pass == 0);
        prefix |= (unsigned)(KMOE_RADIX_BINS - 1 - kmoe_radix_bin(key, pass))
                  << kmoe_radix_shift(pass);
    }
    ck_assert_uint_eq(prefix, key);
}
END_TEST

/* A routing for the capacity cases: skewed logits (expert 0 overflows) rounded to halves, their
 * softmax scores rounded to 1/32 so that tokens tie for an expert, also at the edge of its
 * budget; top-k (ties to the lower expert) and the normalised gate weights of those scores. */
static void cap_routing(float *sc, int *idx, float *w, int N, int E, int K,
                        unsigned long long seed) {
    const size_t NE = (size_t)N * E;
    float *l = floats(NE);
    fill_skewed_logits(l, N, E, seed);
    for (size_t i = 0; i < NE; i++) l[i] = roundf(l[i] * 2.0f) / 2.0f;
    MoeSpec s = spec_of(E, K, MOE_SCORE_SOFTMAX, 0, 1, 1.0f);
    router_scores_forward(sc, NULL, l, N, &s);
    for (size_t i = 0; i < NE; i++) sc[i] = roundf(sc[i] * 32.0f) / 32.0f;
    router_gate_forward(idx, w, sc, NULL, NULL, N, &s);
    free(l);
}

/* A plan for N tokens whose slot_token holds slots rows (a padded plan may need more than
 * N K), its arrays full of stale values where the kernels must write. */
static void stale_plan_alloc(DispatchPlan *p, int N, int E, int K, size_t slots) {
    dispatch_plan_alloc(p, N, E, K);
    free(p->slot_token);
    p->slot_token = ints(slots);
    for (int e = 0; e < E; e++) p->counts[e] = p->offsets[e] = 99;
    p->offsets[E] = 99;
    for (size_t j = 0; j < (size_t)N * K; j++) p->slot[j] = 7;
    for (size_t i = 0; i < slots; i++) p->slot_token[i] = 7;
}

/* Whether a score-policy plan broke a tie at some budget's edge: in some (scope, expert) the
 * lowest kept score equals the highest dropped one (only the tie rule decided which stayed). */
static int cap_edge_ties(const DispatchPlan *p, const int *idx, const float *sc, int N, int Ts) {
    const int E = p->E, K = p->K;
    int ties = 0;
    for (int t0 = 0; t0 < N; t0 += Ts)
        for (int e = 0; e < E; e++) {
            float lo_kept = INFINITY, hi_dropped = -INFINITY;
            for (int n = t0; n < N && n < t0 + Ts; n++)
                for (int k = 0; k < K; k++) {
                    const size_t j = (size_t)n * K + k;
                    if (idx[j] != e) continue;
                    const float v = sc[(size_t)n * E + e];
                    if (p->slot[j] >= 0)
                        lo_kept = v < lo_kept ? v : lo_kept;
                    else
                        hi_dropped = v > hi_dropped ? v : hi_dropped;
                }
            ties += lo_kept == hi_dropped;
        }
    return ties;
}

/* One capacity case: the reference's plan into *want (allocated here, freed by the caller) and
 * the kernels' emulation, compared integer for integer. The emulation draws from a copy of
 * x's stream, if any, and both streams must end in the same state. */
static void cap_case(DispatchPlan *want, const MoeSpec *s, const MoeCtx *x, const float *sc,
                     const int *idx, const float *w, int N, const char *what) {
    const int E = s->num_experts, K = s->top_k;
    Rng rg;
    MoeCtx xg = *x;
    if (x->rng) rg = *x->rng, xg.rng = &rg;
    const size_t slots = (size_t)N * K + (size_t)E * kmoe_cap_sizes(s, x, N, E).R + 1;
    DispatchPlan got;
    stale_plan_alloc(want, N, E, K, slots);
    stale_plan_alloc(&got, N, E, K, slots);
    capacity_plan_build(want, idx, sc, w, N, s, x);
    emu_capacity_plan_build(&got, idx, sc, w, N, s, &xg);
    expect_same_plan(&got, want, what);
    if (x->rng) ck_assert_msg(memcmp(x->rng, &rg, sizeof rg) == 0, "%s: streams differ", what);
    dispatch_plan_free(&got);
}

START_TEST(test_capacity_plan) {
    /* every mode of capacity_plan_build but the random second expert (below), for E 4, 8, 64
     * and K 1, 2, 4: scope batch, and sequence over three sequences (T 100) and over a shorter
     * last one (T 128: 128, 128, 44); drop by position and by score; packed and padded;
     * min_capacity binding (24) or not (1); factors 0.5, 1 and 1.25 */
    enum { N = 300 };
    const int Es[] = {4, 8, 64}, Ks[] = {1, 2, 4}, Tsc[] = {100, 100, 128};
    const float factors[] = {0.5f, 1.0f, 1.25f};
    long drops = 0, padding = 0, edge_ties = 0, binding = 0, loose = 0;
    for (int ie = 0; ie < 3; ie++)
        for (int ik = 0; ik < 3; ik++) {
            const int E = Es[ie], K = Ks[ik];
            const size_t NE = (size_t)N * E, NK = (size_t)N * K;
            float *sc = floats(NE), *w = floats(NK);
            int *idx = ints(NK);
            cap_routing(sc, idx, w, N, E, K, 1000 + 10 * ie + ik);
            for (int v = 0; v < 72; v++) {
                const int scope = v % 3, pol = v / 3 % 2, padded = v / 6 % 2, im = v / 12 % 2;
                MoeSpec s = spec_of(E, K, MOE_SCORE_SOFTMAX, 0, 1, 1.0f);
                s.capacity_factor = factors[v / 24];
                s.capacity_scope = scope ? MOE_CAP_SEQUENCE : MOE_CAP_BATCH;
                s.drop_policy = pol ? MOE_DROP_SCORE : MOE_DROP_POSITION;
                s.padded = padded;
                s.min_capacity = im ? 24 : 1;
                s.seq_len = Tsc[scope];
                MoeCtx x;
                moe_ctx_train(&x, &s, Tsc[scope], NULL);
                char what[128];
                snprintf(what, sizeof what,
                         "capacity E %d K %d T %d scope %d %s padded %d min %d factor %g", E, K,
                         Tsc[scope], scope, pol ? "score" : "position", padded, s.min_capacity,
                         (double)s.capacity_factor);
                DispatchPlan want;
                cap_case(&want, &s, &x, sc, idx, w, N, what);
                const KmoeCapSizes z = kmoe_cap_sizes(&s, &x, N, E);
                MoeSpec s1 = s;
                s1.min_capacity = 1;
                if (im) { /* whether min_capacity decides this budget */
                    const int bound = z.cap > moe_capacity(&s1, s.capacity_factor, z.Ts);
                    binding += bound, loose += !bound;
                }
                for (size_t j = 0; j < NK; j++) drops += want.slot[j] < 0;
                for (int i = 0; i < want.S; i++) padding += want.slot_token[i] < 0;
                if (pol) edge_ties += cap_edge_ties(&want, idx, sc, N, z.Ts);
                dispatch_plan_free(&want);
            }
            free(sc), free(w), free(idx);
        }
    /* the cases exercise what they are for: drops, padding rows, ties at a budget's edge, and
     * min_capacity both deciding the budget and not */
    ck_assert_msg(drops > 1000 && padding > 1000, "%ld drops, %ld padding rows", drops, padding);
    ck_assert_msg(edge_ties > 50, "only %ld budgets with a tie at the edge", edge_ties);
    ck_assert_msg(binding > 20 && loose > 20, "min_capacity binding %ld, not %ld", binding, loose);
}
END_TEST

START_TEST(test_capacity_second_expert) {
    /* GShard's random second expert: the same seeded stream on both sides draws the same
     * uniforms, so the plans are equal and the streams end in the same state; at factor 4 the
     * capacity drops nothing and every drop is the draws'. Without a stream (evaluation), or
     * with K 4, nothing is drawn. */
    enum { N = 300 };
    const int Es[] = {4, 8, 64};
    long random_drops = 0;
    for (int ie = 0; ie < 3; ie++)
        for (int ik = 0; ik < 2; ik++) {
            const int E = Es[ie], K = ik ? 4 : 2;
            const size_t NE = (size_t)N * E, NK = (size_t)N * K;
            float *sc = floats(NE), *w = floats(NK);
            int *idx = ints(NK);
            cap_routing(sc, idx, w, N, E, K, 1100 + ie);
            for (int v = 0; v < 32; v++) {
                const int pol = v & 1, padded = (v >> 1) & 1, loose = (v >> 2) & 1;
                const int seq = (v >> 3) & 1, with_rng = v >> 4;
                MoeSpec s = spec_of(E, K, MOE_SCORE_SOFTMAX, 0, 1, 1.0f);
                s.capacity_factor = loose ? 4.0f : 1.0f;
                s.capacity_scope = seq ? MOE_CAP_SEQUENCE : MOE_CAP_BATCH;
                s.drop_policy = pol ? MOE_DROP_SCORE : MOE_DROP_POSITION;
                s.padded = padded;
                s.min_capacity = 1;
                s.second_expert_random = 1;
                s.seq_len = 100;
                Rng rng, r0;
                rng_seed(&rng, 77 + v), rng_seed(&r0, 77 + v);
                MoeCtx x;
                moe_ctx_train(&x, &s, 100, with_rng ? &rng : NULL);
                char what[128];
                snprintf(what, sizeof what,
                         "second expert E %d K %d seq %d %s padded %d factor %g rng %d", E, K, seq,
                         pol ? "score" : "position", padded, (double)s.capacity_factor, with_rng);
                DispatchPlan want;
                cap_case(&want, &s, &x, sc, idx, w, N, what);
                const int drew = memcmp(&rng, &r0, sizeof rng) != 0;
                ck_assert_msg(drew == (with_rng && K == 2), "%s: drew %d", what, drew);
                if (drew && loose)
                    for (int n = 0; n < N; n++) random_drops += want.slot[(size_t)n * K + 1] < 0;
                dispatch_plan_free(&want);
            }
            free(sc), free(w), free(idx);
        }
    ck_assert_msg(random_drops > 500, "only %ld second experts dropped at random", random_drops);
}
END_TEST

START_TEST(test_capacity_no_tokens) {
    enum { E = 8, K = 2 };
    MoeSpec s = spec_of(E, K, MOE_SCORE_SOFTMAX, 0, 1, 1.0f);
    s.capacity_factor = 1.0f;
    for (int padded = 0; padded < 2; padded++) {
        s.padded = padded;
        MoeCtx x;
        moe_ctx_train(&x, &s, 16, NULL);
        DispatchPlan want, got;
        stale_plan_alloc(&want, 1, E, K, 4);
        stale_plan_alloc(&got, 1, E, K, 4);
        capacity_plan_build(&want, NULL, NULL, NULL, 0, &s, &x);
        emu_capacity_plan_build(&got, NULL, NULL, NULL, 0, &s, &x);
        expect_same_plan(&got, &want, "capacity, no tokens");
        dispatch_plan_free(&want), dispatch_plan_free(&got);
    }
}
END_TEST

/* Experts whose pick broke a tie at the edge: the lowest picked score equals the highest
 * unpicked one. */
static int ec_edge_ties(const DispatchPlan *p, const float *sc, int N, int E) {
    int ties = 0;
    for (int e = 0; e < E; e++) {
        float lo = INFINITY, hi = -INFINITY;
        for (int n = 0; n < N; n++) {
            const float v = sc[(size_t)n * E + e];
            if (p->slot[(size_t)n * E + e] >= 0)
                lo = v < lo ? v : lo;
            else
                hi = v > hi ? v : hi;
        }
        ties += lo == hi;
    }
    return ties;
}

START_TEST(test_expert_choice_plan) {
    /* expert_choice_forward: E 4, 8, 64 with K 1, 2, 4, ec_capacity 1 and 2 (E 4 with K 2 or 4
     * at 2: every token picked), softmax and sigmoid scores of logits full of ties (sigmoid:
     * a column repeats 9 values), the softmax's also rounded to 1/64; route_scale 2.5. idx and
     * the plan exactly, w under the tolerance. */
    const int Es[] = {4, 8, 64}, Ks[] = {1, 2, 4}, Ns[] = {300, 77};
    long edge_ties = 0, all_picked = 0;
    for (int ie = 0; ie < 3; ie++)
        for (int ik = 0; ik < 3; ik++)
            for (int v = 0; v < 8; v++) {
                const int E = Es[ie], K = Ks[ik], score = v & 1, rounded = (v >> 1) & 1;
                const int iec = v >> 2, N = Ns[(ie + ik + v) % 2];
                const size_t NE = (size_t)N * E;
                float *l = floats(NE), *sc = floats(NE), *ww = floats(NE), *wg = floats(NE);
                int *iw = ints(NE), *ig = ints(NE);
                MoeSpec s = spec_of(E, K, score, 0, 0, 2.5f);
                s.routing = MOE_ROUTING_EXPERT_CHOICE, s.balance = MOE_BALANCE_NONE;
                s.ec_capacity = iec ? 2.0f : 1.0f;
                fill_tied_logits(l, N, E, 1200 + 10 * ie + ik);
                router_scores_forward(sc, NULL, l, N, &s);
                if (rounded)
                    for (size_t i = 0; i < NE; i++) sc[i] = roundf(sc[i] * 64.0f) / 64.0f;
                MoeCtx x;
                moe_ctx_train(&x, &s, N, NULL);
                const size_t slots = moe_slots_max(&s, N) + 1;
                DispatchPlan want, got;
                stale_plan_alloc(&want, N, E, E, slots);
                stale_plan_alloc(&got, N, E, E, slots);
                expert_choice_forward(iw, ww, &want, sc, N, &s, &x);
                memset(ig, 0xff, NE * sizeof(int));
                fill_nan(wg, NE);
                emu_expert_choice_forward(ig, wg, &got, sc, N, &s);
                char what[128];
                snprintf(what, sizeof what,
                         "expert choice E %d K %d N %d score %d rounded %d ec %g", E, K, N, score,
                         rounded, (double)s.ec_capacity);
                expect_ints(ig, iw, NE, what);
                expect_close_arrays(wg, ww, NE, TOL_F32_ATOL, TOL_F32_RTOL, what);
                expect_same_plan(&got, &want, what);
                edge_ties += ec_edge_ties(&want, sc, N, E);
                all_picked += moe_ec_capacity(&s, N) == N;
                dispatch_plan_free(&want), dispatch_plan_free(&got);
                free(l), free(sc), free(ww), free(wg), free(iw), free(ig);
            }
    ck_assert_msg(edge_ties > 100, "only %ld experts with a tie at the edge", edge_ties);
    ck_assert_msg(all_picked > 0, "no case where every token is picked");
    /* no tokens: cap 0, empty slices */
    enum { E = 8 };
    MoeSpec s = spec_of(E, 2, MOE_SCORE_SOFTMAX, 0, 0, 1.0f);
    s.routing = MOE_ROUTING_EXPERT_CHOICE;
    MoeCtx x;
    moe_ctx_train(&x, &s, 1, NULL);
    DispatchPlan want, got;
    stale_plan_alloc(&want, 1, E, E, 4);
    stale_plan_alloc(&got, 1, E, E, 4);
    expert_choice_forward(NULL, NULL, &want, NULL, 0, &s, &x);
    emu_expert_choice_forward(NULL, NULL, &got, NULL, 0, &s);
    expect_same_plan(&got, &want, "expert choice, no tokens");
    dispatch_plan_free(&want), dispatch_plan_free(&got);
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

/* The reference ops run one thread here: their results do not depend on the count (each row
 * has one owner), and the suite makes a few hundred small calls, each an OpenMP region whose
 * threads spin for milliseconds on a busy two-core machine. */
static void one_thread(void) {
    backend_set_threads(1);
}

static Suite *kernels_moe_suite(void) {
    Suite *s = suite_create("kernels_moe");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, one_thread, NULL);
    tcase_add_test(tc, test_scores_and_lse);
    tcase_add_test(tc, test_gate_every_mode);
    tcase_add_test(tc, test_gate_all_equal_row);
    tcase_add_test(tc, test_z_loss);
    tcase_add_test(tc, test_logit_stats);
    tcase_add_test(tc, test_dispatch_plan);
    tcase_add_test(tc, test_permute_combine);
    tcase_add_test(tc, test_balance_loss);
    tcase_add_test(tc, test_gate_backward);
    tcase_add_test(tc, test_gate_backward_expert_choice);
    tcase_add_test(tc, test_route_stats);
    tcase_add_test(tc, test_order_key);
    tcase_add_test(tc, test_capacity_plan);
    tcase_add_test(tc, test_capacity_second_expert);
    tcase_add_test(tc, test_capacity_no_tokens);
    tcase_add_test(tc, test_expert_choice_plan);
    tcase_add_test(tc, test_row_threads);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(kernels_moe_suite)
