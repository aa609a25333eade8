/*
 * expert_choice.c: expert-choice routing (Zhou et al. 2022, "Mixture-of-Experts with Expert
 * Choice Routing").
 *
 * Token choice lets every token pick its top-k experts, so an expert may get far more tokens
 * than another and a balancing loss is needed. Expert choice turns the choice around: the
 * scores are the same (N, E) matrix (softmax over the experts of a token, or a sigmoid per
 * expert), but every EXPERT takes the column of its scores over the N tokens of the micro-batch
 * and keeps its cap best tokens:
 *
 *   cap        = ceil(ec_capacity * N * K / E), clamped to [1, N]   (K experts per token on
 *                                                                    average when ec_capacity 1)
 *   picked(n,e) = n is among the cap largest scores[., e]          (ties to the lower token)
 *   w[n, e]    = route_scale * scores[n, e]                       (no renormalisation)
 *   y[n]       = sum over the experts e that picked n of w[n, e] Expert_e(x[n])
 *
 * Every expert gets exactly cap tokens, so the load is balanced by construction; a token can be
 * picked by 0..E experts, and one picked by none passes the block with y = 0 (the residual
 * carries it on).
 *
 * The block reuses the token-choice machinery unchanged by listing EVERY (n, e) pair as a
 * candidate assignment: idx (N, E) with idx[n, e] = e, w (N, E), and a plan built with K = E
 * whose slot(n, e) is -1 for a pair the expert did not pick. permute and combine skip those
 * slots; combine_backward gives them dw = 0. Expert e owns slots [e cap, (e + 1) cap) and holds
 * its tokens in token order, like a token-choice slice.
 *
 * The cost: the ranking runs over the whole micro-batch, so in a causal language model the
 * routing of token t (and so its output) depends on the tokens after t. src/README.md has the
 * details of this leak.
 */
#include "moe/moe_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

int moe_assignments_per_token(const MoeSpec *s) {
    return s->routing == MOE_ROUTING_EXPERT_CHOICE ? s->num_experts : s->top_k;
}

int moe_ec_capacity(const MoeSpec *s, int N) {
    /* the same exact decimal ceil as moe_capacity (capacity.c): the factor read to
     * thousandths, the ceil taken in integers, so 1.1 x 20 / 2 gives 11, not 12; a factor that
     * asks for twice the tokens or more is all of them, decided before any integer overflows */
    const int E = s->num_experts, K = s->top_k;
    if (!((double)s->ec_capacity * K < 2.0 * E)) return N > 1 ? N : 1;
    long long p = llround((double)s->ec_capacity * 1000.0);
    long long num = p * N * K, den = 1000LL * E;
    long long want = (num + den - 1) / den;
    if (want < 1) want = 1;
    if (want > N) want = N;
    return (int)want;
}

size_t moe_slots_max(const MoeSpec *s, int N) {
    if (s->routing == MOE_ROUTING_EXPERT_CHOICE)
        return (size_t)s->num_experts * (size_t)moe_ec_capacity(s, N);
    /* token choice keeps at most N K assignments; a padded plan may hold more rows than that
     * (min_capacity, factor > 1), at whichever factor training or evaluation uses */
    const int T = s->seq_len;
    size_t S = (size_t)N * s->top_k, tr = moe_padded_slots(s, s->capacity_factor, T, N);
    size_t ev =
        s->eval_capacity_factor >= 0.0f ? moe_padded_slots(s, s->eval_capacity_factor, T, N) : 0;
    if (tr > S) S = tr;
    if (ev > S) S = ev;
    return S;
}

/* One candidate of an expert's ranking: its score and its token. */
typedef struct {
    float score;
    int token;
} Cand;

/* Descending score, then ascending token: a total order, so the ranking (and qsort, which
 * is not stable) is deterministic. */
static int cand_cmp(const void *pa, const void *pb) {
    const Cand *a = pa, *b = pb;
    if (a->score > b->score) return -1;
    if (a->score < b->score) return 1;
    return (a->token > b->token) - (a->token < b->token);
}

size_t expert_choice_work_bytes(const MoeSpec *s, int N) {
    /* every expert's ranking */
    return (size_t)s->num_experts * (size_t)(N > 0 ? N : 1) * sizeof(Cand);
}

void expert_choice_forward(int *idx, float *w, DispatchPlan *p, const float *scores, int N,
                           const MoeSpec *s, const MoeCtx *x) {
    /* idx (N, E), w (N, E), scores (N, E); p allocated for at least N tokens with K = E. */
    const int E = s->num_experts, cap = moe_ec_capacity(s, N);
    const float rs = s->route_scale;
    if (p->K != E)
        moe_fatal("expert_choice_forward: the plan holds %d assignments per token, expert "
                  "choice needs E = %d (allocate it with moe_acts_alloc)",
                  p->K, E);
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) {
            idx[(size_t)n * E + e] = e;
            w[(size_t)n * E + e] = rs * scores[(size_t)n * E + e];
        }
    void *owned;
    Cand *cand = (Cand *)moe_work(x, expert_choice_work_bytes(s, N), &owned); /* (E, N) */
    /* each expert owns its column of slot and its slice of slot_token: one thread each */
#pragma omp parallel for
    for (int e = 0; e < E; e++) {
        Cand *c = cand + (size_t)e * N;
        for (int n = 0; n < N; n++) c[n] = (Cand){scores[(size_t)n * E + e], n};
        qsort(c, (size_t)N, sizeof(Cand), cand_cmp);
        for (int n = 0; n < N; n++) p->slot[(size_t)n * E + e] = -1;
        for (int r = 0; r < cap; r++) p->slot[(size_t)c[r].token * E + e] = 0; /* picked */
        /* slots in token order: the slice is sorted like a token-choice slice */
        int next = e * cap;
        for (int n = 0; n < N; n++) {
            int *sl = &p->slot[(size_t)n * E + e];
            if (*sl < 0) continue;
            *sl = next;
            p->slot_token[next++] = n;
        }
        p->counts[e] = cap;
        p->offsets[e] = e * cap;
    }
    moe_work_done(owned);
    p->offsets[E] = E * cap;
    p->N = N;
    p->S = E * cap;
}

void expert_choice_stats(RouterStats *st, float *load, const float *scores, const DispatchPlan *p) {
    /* load (E), scores (N, E) */
    const int N = p->N, E = p->E, A = p->K;
    if (N <= 0 || p->S <= 0) {
        for (int e = 0; e < E; e++) load[e] = 0.0f;
        st->maxvio = st->cv = st->entropy = st->drop_frac = st->top1 = 0.0f;
        return;
    }
    for (int e = 0; e < E; e++) load[e] = (float)((double)p->counts[e] / p->S);
    load_balance(&st->maxvio, &st->cv, load, E);
    double ent = 0.0;
    int unpicked = 0;
    for (int n = 0; n < N; n++) {
        const float *s = scores + (size_t)n * E;
        double S = 0.0;
        for (int e = 0; e < E; e++) S += s[e];
        for (int e = 0; e < E; e++) {
            double q = s[e] / S;
            if (q > 0.0) ent -= q * log(q);
        }
        int picked = 0;
        for (int a = 0; a < A; a++) picked |= p->slot[(size_t)n * A + a] >= 0;
        unpicked += !picked;
    }
    st->entropy = (float)(ent / N);
    st->top1 = router_mean_top1(scores, N, E);
    st->drop_frac = (float)((double)unpicked / N);
}
