/*
 * capacity.c: token-choice routing with a capacity per expert (GShard, Switch Transformer).
 *
 * Dropless routing gives every expert as many rows as tokens chose it, so the work per expert
 * follows the router. An accelerator wants fixed shapes instead: every expert gets a buffer of
 *
 *   cap = max(min_capacity, ceil(capacity_factor * tokens * K / E)),  clamped to [1, tokens]
 *   (capacity_factor read as a decimal to thousandths, the ceil taken exactly)
 *
 * rows, tokens = N (moe.capacity_scope=batch) or T (=sequence: each sequence of T tokens has
 * its own budget of cap per expert). factor 1 is the balanced load; above 1 leaves slack.
 * An expert chosen by more assignments than its budget keeps cap of them and drops the rest:
 *
 *   position: in token order (earlier tokens first), so late tokens of a batch drop first;
 *   score:    the cap highest router scores[n, e] (ties to the lower token), so the tokens that
 *             want the expert most keep it.
 *
 * A dropped assignment gets slot -1: permute and combine skip it, so it adds nothing to y,
 * and a token with every assignment dropped has y = 0 (only the residual carries it on). The
 * gate weights of the kept assignments are NOT renormalised after a drop (the GShard / Switch
 * convention): a token keeps exactly the contribution it would have had, minus the lost one.
 * combine_backward gives dropped pairs dw = 0, so the router learns only through kept pairs
 * and the balance losses.
 *
 * Padded execution (moe.padded=1) lays the slices out as a fixed buffer would be: expert e owns
 * rows [e R, (e + 1) R), R = cap (or sequences x cap), kept rows first in token order, then
 * zero rows (slot_token -1) that the experts compute anyway and nobody reads. Because the kept
 * rows sit in the same order as unpadded and are their own product (experts_forward_padded),
 * and the padding rows are zero in and zero out, the results are the same bit for bit; only
 * the cost changes.
 *
 * GShard's random second expert (moe.second_expert_random): with K = 2, the second choice is
 * dispatched with probability min(1, 2 w_2) during training, so a token that barely wants its
 * second expert rarely spends a slot on it.
 */
#include "moe/moe_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

int moe_capacity(const MoeSpec *s, float factor, int tokens) {
    /* The factor is a decimal (1.1, 1.25) that float only approximates: 1.1f * 20 / 2 is
     * 11.0000002, whose ceil would be 12. Read it to thousandths (float's relative error,
     * below 6e-8, is far from half a thousandth for any sane factor) and take the ceil of the
     * exact fraction p N K / (1000 E) in integers. */
    /* A factor with factor K >= 2 E asks for at least twice the tokens: the answer is all of
     * them, decided in double before anything is rounded to an integer (a huge factor such as
     * 3e38 would overflow p and the product). Below that, p <= 2000 E / K + 1 and the product
     * p tokens K stays far inside a long long. */
    const int E = s->num_experts, K = s->top_k;
    if (!((double)factor * K < 2.0 * E)) return tokens > 1 ? tokens : 1;
    long long p = llround((double)factor * 1000.0);
    long long num = p * tokens * K, den = 1000LL * E;
    long long want = (num + den - 1) / den;
    long long lo = s->min_capacity > 1 ? s->min_capacity : 1;
    if (want < lo) want = lo;
    if (want > tokens) want = tokens;
    if (want < 1) want = 1;
    return (int)want;
}

/* Tokens per scope: N, or T per sequence (a shorter last scope keeps the same cap). */
static int scope_tokens(const MoeSpec *s, int T, int N) {
    return s->capacity_scope == MOE_CAP_SEQUENCE && T > 0 && T < N ? T : N;
}

int moe_expert_rows(const MoeSpec *s, float factor, int T, int N) {
    int Ts = scope_tokens(s, T, N);
    return (N + Ts - 1) / Ts * moe_capacity(s, factor, Ts);
}

size_t moe_padded_slots(const MoeSpec *s, float factor, int T, int N) {
    if (s->routing != MOE_ROUTING_TOKEN_CHOICE || !s->padded || !(factor > 0.0f) || N <= 0)
        return 0;
    return (size_t)s->num_experts * (size_t)moe_expert_rows(s, factor, T, N);
}

/* One assignment competing for an expert's budget: its expert, score, token and index j. */
typedef struct {
    int e;
    float score;
    int n, j;
} Cand;

/* Expert, then descending score, then ascending token: a total order, so qsort (not stable)
 * ranks deterministically. */
static int cand_cmp(const void *pa, const void *pb) {
    const Cand *a = pa, *b = pb;
    if (a->e != b->e) return (a->e > b->e) - (a->e < b->e);
    if (a->score > b->score) return -1;
    if (a->score < b->score) return 1;
    return (a->n > b->n) - (a->n < b->n);
}

size_t capacity_work_bytes(const MoeSpec *s, int N) {
    /* the candidates of the score policy, then the experts' used budgets */
    return ((size_t)(N > 0 ? N : 0) * s->top_k + 1) * sizeof(Cand) +
           (size_t)s->num_experts * sizeof(int);
}

void capacity_plan_build(DispatchPlan *p, const int *idx, const float *scores, const float *w,
                         int N, const MoeSpec *s, const MoeCtx *x) {
    /* idx (N, K), scores (N, E), w (N, K); p with K = s->top_k. p->slot doubles as the keep
     * flag (0 kept, -1 dropped) until the final pass turns the kept ones into slots. */
    const int E = p->E, K = p->K;
    const int Ts = scope_tokens(s, x->T, N), cap = moe_capacity(s, x->capacity_factor, Ts);
    const size_t NK = (size_t)N * K;
    for (size_t j = 0; j < NK; j++) {
        if (idx[j] < 0 || idx[j] >= E)
            moe_fatal("expert index %d at assignment %zu is outside [0, %d): the routing "
                      "indices are corrupt",
                      idx[j], j, E);
        p->slot[j] = 0;
    }
    if (s->second_expert_random && K == 2 && x->rng) {
        /* GShard: dispatch the second expert with probability min(1, 2 w_2), one draw per
         * token in token order (the stream stays deterministic) */
        for (int n = 0; n < N; n++) {
            float u = rng_uniform(x->rng);
            if (u >= 2.0f * w[(size_t)n * 2 + 1]) p->slot[(size_t)n * 2 + 1] = -1;
        }
    }
    void *owned;
    Cand *cand = (Cand *)moe_work(x, capacity_work_bytes(s, N), &owned); /* (N K + 1) */
    int *used = (int *)(cand + NK + 1);                                  /* (E) */
    for (int t0 = 0; t0 < N; t0 += Ts) {
        const int t1 = t0 + Ts < N ? t0 + Ts : N;
        memset(used, 0, (size_t)E * sizeof(int));
        if (s->drop_policy == MOE_DROP_POSITION) {
            /* (n, k) order: earlier tokens claim the budget first */
            for (size_t j = (size_t)t0 * K; j < (size_t)t1 * K; j++) {
                if (p->slot[j] < 0) continue;
                if (used[idx[j]] < cap)
                    used[idx[j]]++;
                else
                    p->slot[j] = -1;
            }
        } else {
            size_t m = 0;
            for (size_t j = (size_t)t0 * K; j < (size_t)t1 * K; j++) {
                if (p->slot[j] < 0) continue;
                int n = (int)(j / (size_t)K);
                cand[m++] = (Cand){idx[j], scores[(size_t)n * E + idx[j]], n, (int)j};
            }
            qsort(cand, m, sizeof(Cand), cand_cmp);
            for (size_t i = 0; i < m; i++) {
                if (used[cand[i].e] < cap)
                    used[cand[i].e]++;
                else
                    p->slot[cand[i].j] = -1;
            }
        }
    }
    /* slices: packed by kept counts, or R rows each when padded */
    memset(p->counts, 0, (size_t)E * sizeof(int));
    for (size_t j = 0; j < NK; j++)
        if (p->slot[j] == 0) p->counts[idx[j]]++;
    const int R = (int)(moe_padded_slots(s, x->capacity_factor, x->T, N) / (size_t)E);
    p->offsets[0] = 0;
    for (int e = 0; e < E; e++) p->offsets[e + 1] = p->offsets[e] + (R > 0 ? R : p->counts[e]);
    /* kept assignments take their slots in (n, k) order: stable, like dispatch_plan_build */
    memset(used, 0, (size_t)E * sizeof(int));
    for (size_t j = 0; j < NK; j++) {
        if (p->slot[j] < 0) continue;
        int e = idx[j], sl = p->offsets[e] + used[e]++;
        p->slot[j] = sl;
        p->slot_token[sl] = (int)(j / (size_t)K);
    }
    /* padding rows: no token (permute zero-fills them, combine never reads them) */
    for (int e = 0; e < E; e++)
        for (int sl = p->offsets[e] + p->counts[e]; sl < p->offsets[e + 1]; sl++)
            p->slot_token[sl] = -1;
    moe_work_done(owned);
    p->N = N;
    p->S = p->offsets[E];
}
