/*
 * test_kernels_capacity.c: the CUDA kernels of the capacity and expert-choice plans
 * (backend/cuda/kernels_moe.h's radix select), run on the host.
 *
 * Each emu_* function below is one entry of cuda_plans.cu whose kernels are loops that walk the
 * grid in the kernel's order (tests/kernels_moe_util.h), compared with capacity.c and
 * expert_choice.c: the plan's counts, offsets, slot and slot_token exactly, and the expert
 * choice's idx too; its weights under the one tolerance rule (TOL_F32_ATOL, TOL_F32_RTOL).
 *
 * The capacity plan runs scope batch and sequence (several sequences, a shorter last one),
 * drop by position and by score (router scores rounded so that tokens tie at a budget's edge),
 * packed and padded, min_capacity binding and not, factors 0.5, 1, 1.25, every E and K (E in
 * {4, 8, 64}, K in {1, 2, 4}), and the random second expert with the same seeded stream on
 * both sides; the expert-choice plan ec_capacity 1 and 2, softmax and sigmoid scores full of
 * ties. Both compare every integer of the plan exactly, and each case counts that it met what
 * it is for (drops, padding, ties at the edge, random drops).
 */
#include "kernels_moe_util.h"

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

static Suite *kernels_capacity_suite(void) {
    Suite *s = suite_create("kernels_capacity");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, one_thread, NULL);
    tcase_add_test(tc, test_order_key);
    tcase_add_test(tc, test_capacity_plan);
    tcase_add_test(tc, test_capacity_second_expert);
    tcase_add_test(tc, test_capacity_no_tokens);
    tcase_add_test(tc, test_expert_choice_plan);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(kernels_capacity_suite)
