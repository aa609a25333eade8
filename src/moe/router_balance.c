/*
 * router_balance.c: keeping the experts evenly loaded, and measuring how even they are.
 *
 * Three ways to push the router towards balance (moe.balance):
 *   - aux (Switch Transformer): L = E * sum_i f_i P_i over the batch, f_i the fraction of the
 *     N*K assignments that chose expert i, P_i the mean normalised score of expert i.
 *     Minimal (= 1) when both are uniform; a router that sends everything to one expert
 *     scores up to E.
 *   - seq_aux (DeepSeek-V3): the same product per sequence of T tokens, averaged over the
 *     sequences, with f_i = E / (K T) * (tokens of the sequence routed to i) (1 when uniform)
 *     and P_i the sequence's mean normalised score. It balances each sequence, not only the
 *     batch as a whole.
 *   - aux_free (Wang et al. 2024, DeepSeek-V3): no loss. A per-expert bias b is added to the
 *     scores for the top-k choice only, and after each optimizer step it moves against the
 *     step's imbalance (router_bias_update); the gate weights never see it.
 * The normalised score q[n, i] is the softmax score itself, or for sigmoid scores
 * s[n, i] / sum_e s[n, e], so that P is a distribution over experts in both cases.
 * f counts discrete choices: it is a constant for the gradient.
 *
 * The statistics (router.csv) also live here: per-expert load, MaxVio, CV, score entropy; MaxVio,
 * CV and the top-1 score come from balance_stats.c, which expert choice's statistics share.
 */
#include "moe/moe_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

float moe_balance_coef(const MoeSpec *s) {
    return s->balance == MOE_BALANCE_AUX || s->balance == MOE_BALANCE_SEQ_AUX ? s->aux_coef : 0.0f;
}

/* f (E) = fraction of the n*K assignments idx (n, K) per expert. Counting integers, so it
 * is exact. */
static void assignment_fractions(float *f, const int *idx, int n, int E, int K) {
    for (int e = 0; e < E; e++) f[e] = 0.0f;
    for (size_t j = 0; j < (size_t)n * K; j++) f[idx[j]] += 1.0f;
    float inv = 1.0f / ((float)n * (float)K);
    for (int e = 0; e < E; e++) f[e] *= inv;
}

/* P (E) += the normalised scores of n tokens (scores (n, E)), summed in token order. */
static void add_normalised_scores(double *P, const float *scores, int n, int E, int sigmoid) {
    for (int t = 0; t < n; t++) {
        const float *s = scores + (size_t)t * E;
        if (!sigmoid) {
            for (int e = 0; e < E; e++) P[e] += s[e];
            continue;
        }
        double S = 0.0;
        for (int e = 0; e < E; e++) S += s[e];
        for (int e = 0; e < E; e++) P[e] += s[e] / S;
    }
}

/* Sequences of seq_aux: N / T, checked (a caller that forgot MoeCtx.T is a bug). */
static int n_sequences(const MoeCtx *x, int N) {
    if (x->T <= 0 || N % x->T != 0)
        moe_fatal("seq_aux balance: %d tokens are not whole sequences of T = %d (set MoeCtx.T)", N,
                  x->T);
    return N / x->T;
}

size_t router_balance_work_bytes(const MoeSpec *s) {
    return (size_t)s->num_experts * (sizeof(double) + sizeof(float));
}

float router_balance_loss(const float *scores, const int *idx, int N, const MoeSpec *s,
                          const MoeCtx *x) {
    /* scores (N, E), idx (N, K). Serial sums in a fixed order: this is O(N E), small next to
     * the expert GEMMs. */
    if (N <= 0) return 0.0f;
    const int E = s->num_experts, K = s->top_k, sig = s->score == MOE_SCORE_SIGMOID;
    void *owned;
    double *P = (double *)moe_work(x, router_balance_work_bytes(s), &owned); /* (E) */
    float *f = (float *)(P + E);                                             /* (E) */
    for (int e = 0; e < E; e++) P[e] = 0.0;
    double loss = 0.0;
    if (s->balance == MOE_BALANCE_SEQ_AUX) {
        const int T = x->T, nseq = n_sequences(x, N);
        for (int b = 0; b < nseq; b++) {
            /* f_i = E / (K T) count_i = E * (fraction of the sequence's T*K assignments) */
            assignment_fractions(f, idx + (size_t)b * T * K, T, E, K);
            for (int e = 0; e < E; e++) P[e] = 0.0;
            add_normalised_scores(P, scores + (size_t)b * T * E, T, E, sig);
            double seq = 0.0;
            for (int e = 0; e < E; e++) seq += (double)E * f[e] * (P[e] / T);
            loss += seq;
        }
        loss /= nseq;
    } else {
        /* across processes f is the whole batch's (each process's P is its own tokens'; their
         * mean over processes of equal batches is the batch's P) */
        if (x->global_f)
            for (int e = 0; e < E; e++) f[e] = x->global_f[e];
        else
            assignment_fractions(f, idx, N, E, K);
        add_normalised_scores(P, scores, N, E, sig);
        for (int e = 0; e < E; e++) loss += (double)f[e] * (P[e] / N);
        loss *= E;
    }
    moe_work_done(owned);
    return (float)loss;
}

int router_balance_coef(float *coef, const int *idx, int N, const MoeSpec *s, const MoeCtx *x,
                        float scale) {
    /* coef (rows, E). With f constant, each loss is linear in q:
     *   aux:     L = E sum_i f_i (1/N) sum_n q[n,i]          -> dL/dq[n,i] = E f_i / N
     *   seq_aux: L = (1/B) sum_b sum_i E f_i^b (1/T) sum_{n in b} q[n,i]
     *                                                         -> dL/dq[n,i] = E f_i^b / (B T)
     * (f here the fraction of assignments, so E f_i is the f_i of the formulas above). */
    const int E = s->num_experts, K = s->top_k;
    if (N <= 0 || (s->balance != MOE_BALANCE_AUX && s->balance != MOE_BALANCE_SEQ_AUX)) return 0;
    if (s->balance == MOE_BALANCE_AUX) {
        float per = scale * (float)E / (float)N;
        if (x->global_f)
            for (int e = 0; e < E; e++) coef[e] = x->global_f[e];
        else
            assignment_fractions(coef, idx, N, E, K);
        for (int e = 0; e < E; e++) coef[e] = per * coef[e];
        return 1;
    }
    const int T = x->T, nseq = n_sequences(x, N);
    float per = scale * (float)E / ((float)nseq * (float)T);
    for (int b = 0; b < nseq; b++) {
        float *row = coef + (size_t)b * E;
        assignment_fractions(row, idx + (size_t)b * T * K, T, E, K);
        for (int e = 0; e < E; e++) row[e] = per * row[e];
    }
    return nseq;
}

void router_bias_update(float *bias, const double *count, int E, int rule, float rate) {
    /* bias (E), count (E): whole numbers, so total and E * count_i are exact in a double */
    double total = 0.0;
    for (int e = 0; e < E; e++) total += count[e];
    if (total <= 0.0) return;
    for (int e = 0; e < E; e++) {
        const double excess = total - (double)E * count[e]; /* E total (1/E - load_e) */
        if (rule == MOE_BIAS_SIGN)
            bias[e] += rate * (float)((excess > 0.0) - (excess < 0.0));
        else
            bias[e] += rate * (float)(excess / total); /* (1/E - load_e) / (1/E) */
    }
}

void router_stats(RouterStats *st, float *load, const float *scores, const int *idx, int N, int E,
                  int K) {
    /* load (E), scores (N, E), idx (N, K). The mean load is always 1/E (the loads sum to 1),
     * so maxvio and cv are relative to the perfectly balanced value. */
    if (N <= 0) {
        for (int e = 0; e < E; e++) load[e] = 0.0f;
        st->maxvio = st->cv = st->entropy = st->drop_frac = st->top1 = 0.0f;
        return;
    }
    assignment_fractions(load, idx, N, E, K);
    st->top1 = router_mean_top1(scores, N, E);
    load_balance(&st->maxvio, &st->cv, load, E);
    double ent = 0.0;
    for (int n = 0; n < N; n++) {
        /* normalised to sum 1: a no-op up to rounding for softmax scores, needed for sigmoid */
        const float *s = scores + (size_t)n * E;
        double S = 0.0;
        for (int e = 0; e < E; e++) S += s[e];
        for (int e = 0; e < E; e++) {
            double p = s[e] / S;
            if (p > 0.0) ent -= p * log(p); /* 0 log 0 = 0 */
        }
    }
    st->entropy = (float)(ent / N);
    st->drop_frac = 0.0f; /* no plan here: a capacity-mode caller fills this in */
}

/* ---- what a routing decision did ------------------------------------------------------------ */

void router_logit_stats(RouteStats *r, const float *logits, const float *lse, int N, int E) {
    float largest = 0.0f;
    double sum = 0.0;
    for (int n = 0; n < N; n++) {
        for (int e = 0; e < E; e++) largest = fmaxf(largest, fabsf(logits[(size_t)n * E + e]));
        sum += lse[n];
    }
    r->max_logit = largest;
    r->lse_mean = N > 0 ? (float)(sum / N) : 0.0f;
}

void route_stats_alloc(RouteStats *r, int E) {
    memset(r, 0, sizeof *r);
    r->E = E;
    r->load = (float *)calloc_check((size_t)E + 1, sizeof(float));
    r->routed = (int *)calloc_check((size_t)E + 1, sizeof(int));
    r->dropped = (int *)calloc_check((size_t)E + 1, sizeof(int));
}

void route_stats_free(RouteStats *r) {
    free(r->load);
    free(r->routed);
    free(r->dropped);
    memset(r, 0, sizeof *r);
}

void route_stats(RouteStats *r, const float *scores, const int *idx, const DispatchPlan *p, int N,
                 const MoeSpec *s) {
    const int E = s->num_experts, K = s->top_k;
    r->pad = 0.0;
    if (s->routing == MOE_ROUTING_EXPERT_CHOICE) {
        /* each expert keeps exactly cap tokens: nothing is routed and then dropped; drop is
         * the fraction of tokens no expert picked */
        expert_choice_stats(&r->st, r->load, scores, p);
        for (int e = 0; e < E; e++) r->routed[e] = p->counts[e], r->dropped[e] = 0;
        r->drop = r->st.drop_frac;
        return;
    }
    router_stats(&r->st, r->load, scores, idx, N, E, K);
    /* a slot of -1 marks a dropped assignment; a padded plan's rows past each expert's kept
     * ones are padding */
    int dropped = 0, kept = 0;
    for (int e = 0; e < E; e++) r->routed[e] = r->dropped[e] = 0;
    for (int j = 0; j < N * K; j++) {
        int e = idx[j], d = p->slot[j] < 0;
        r->routed[e]++;
        r->dropped[e] += d;
        dropped += d;
        kept += !d;
    }
    r->drop = N > 0 ? (double)dropped / ((double)N * K) : 0.0;
    r->st.drop_frac = (float)r->drop;
    if (p->S > 0) r->pad = (double)(p->S - kept) / p->S;
}

void route_domains(double *counts, double *drops, const unsigned char *domains, int n_domains,
                   const int *idx, const DispatchPlan *p, int N, const MoeSpec *s) {
    /* A assignments per token (K, or E for expert choice); only the kept ones count: an
     * expert-choice pair the expert did not pick has slot -1 */
    const int A = p->K, E = s->num_experts, ec = s->routing == MOE_ROUTING_EXPERT_CHOICE;
    int dropped = 0;
    for (int n = 0; n < N; n++) {
        int kept = 0;
        for (int k = 0; k < A; k++)
            if (p->slot[(size_t)n * A + k] >= 0) {
                kept++;
                counts[(size_t)domains[n] * E + idx[(size_t)n * A + k]] += 1.0;
            }
        dropped += ec ? kept == 0 : A - kept;
    }
    (void)n_domains;
    drops[0] += dropped;
    drops[1] += ec ? N : (double)N * A;
}
