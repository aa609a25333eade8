/*
 * kernels_route.h: the arithmetic of the CUDA backend's routing statistics (cuda_moe.cu): the
 * balance loss, the router's backward, route_stats and router_logit_stats, as plain C bodies
 * that nvcc compiles for the device and gcc for the host (tests/test_kernels_route.c walks each
 * kernel's grid on the host against router.c and router_balance.c). kernels_moe.h holds the
 * rest of the MoE kernels and what both share (KMOE_THREADS, kmoe_tree_sum).
 *
 *   balance loss   per (row, chunk of KMOE_CHUNK tokens, expert) a thread sums its chunk in
 *                  token order (q and the hits), then one block: each thread its (row, expert)
 *                  pairs' chunks in order, then the shared tree; the host reads one double;
 *   router back    the coefficients of router_balance_coef from the same chunk sums, a thread
 *                  per (row, expert); then a thread per token walks router.c's backward;
 *   route stats    a thread per token (entropy, top score, picked) summed by each block's
 *                  tree, the blocks' partials and the per-expert chunk counts by one block;
 *                  the host finishes with the reference's formulas (kmoe_route_stats_finish);
 *   logit stats    one block: each thread its tokens' largest |logit| and lse sum, then the
 *                  block's trees (kmoe_tree_max, kmoe_tree_sum's pairing).
 */
#ifndef MOE_BACKEND_KERNELS_ROUTE_H
#define MOE_BACKEND_KERNELS_ROUTE_H

#include "backend/cuda/kernels_moe.h"

/* ---- balance loss, the router's backward, route statistics ---------------------------------
 * The balance loss needs, per row of tokens (the batch, or each sequence of seq_aux) and per
 * expert e, the sum of the normalised scores q[n, e] and the count of assignments to e; its
 * gradient needs those counts; route_stats the assignments and the dropped ones per expert.
 * All are column sums over an (N, E) or (N, K) layout, summed in two fixed steps:
 *   parts   a thread per (row r, chunk c of KMOE_CHUNK tokens, expert e), part index
 *           i = (r nchunk + c) E + e: the chunk's tokens in order. Neighbouring threads take
 *           neighbouring experts of the same tokens, so a warp's score loads coalesce;
 *   totals  one thread per (row, expert) adds its chunks' partials in chunk order.
 * The integers are exact whatever the order; the float sums differ from router_balance.c's
 * serial ones by rounding only. */

#define KMOE_CHUNK 32

/* Rows of the per-expert sums: the N / T sequences of seq_aux, or one row of N tokens; *Tr the
 * tokens of a row. T must divide N (the host checks it first, as router_balance.c does). */
MOE_HD int kmoe_bal_rows(int seq_aux, int N, int T, int *Tr) {
    *Tr = seq_aux ? T : N;
    return seq_aux ? N / T : 1;
}
/* chunks of KMOE_CHUNK tokens in a row of Tr */
MOE_HD int kmoe_chunks(int Tr) {
    return (Tr + KMOE_CHUNK - 1) / KMOE_CHUNK;
}

/* S = sum_e sn[e] of one token's scores, in double in expert order: what a sigmoid row is
 * divided by to make q (and what the entropy normalises by). */
MOE_HD double kmoe_row_sum(const float *sn, int E) {
    double S = 0.0;
    for (int e = 0; e < E; e++) S += sn[e];
    return S;
}

/* Part i (see above) over rows of Tr tokens: q_part[i] = sum of q[n, e] over the chunk's
 * tokens, in token order in double (q = the score, or score / ssum[n] when ssum is given:
 * sigmoid); hit_part[i] = the assignments idx[n K + k] == e of those tokens, and drop_part[i]
 * those of them with slot -1. Any output may be NULL (then its inputs are not read). An
 * expert id outside [0, E) matches no expert. */
MOE_HD void kmoe_expert_part(double *q_part, int *hit_part, int *drop_part, size_t i,
                             const float *scores, const double *ssum, const int *idx,
                             const int *slot, int Tr, int nchunk, int E, int K) {
    const int e = (int)(i % (size_t)E);
    const size_t rc = i / (size_t)E;
    const int r = (int)(rc / (size_t)nchunk), c = (int)(rc % (size_t)nchunk);
    const int n0 = r * Tr + c * KMOE_CHUNK, end = (r + 1) * Tr;
    const int n1 = n0 + KMOE_CHUNK < end ? n0 + KMOE_CHUNK : end;
    if (q_part) {
        double a = 0.0;
        for (int n = n0; n < n1; n++) {
            const double v = scores[(size_t)n * E + e];
            a += ssum ? v / ssum[n] : v;
        }
        q_part[i] = a;
    }
    if (hit_part) {
        int hits = 0, drops = 0;
        for (size_t j = (size_t)n0 * K; j < (size_t)n1 * K; j++)
            if (idx[j] == e) {
                hits++;
                drops += slot && slot[j] < 0;
            }
        hit_part[i] = hits;
        if (drop_part) drop_part[i] = drops;
    }
}

/* (row r, expert e)'s totals: its chunks' partials in chunk order */
MOE_HD double kmoe_part_total(const double *part, int r, int e, int nchunk, int E) {
    double a = 0.0;
    for (int c = 0; c < nchunk; c++) a += part[((size_t)r * nchunk + c) * E + e];
    return a;
}
MOE_HD int kmoe_part_count(const int *part, int r, int e, int nchunk, int E) {
    int a = 0;
    for (int c = 0; c < nchunk; c++) a += part[((size_t)r * nchunk + c) * E + e];
    return a;
}

/* the fraction of a row's Tr K assignments that hits are, in float as router_balance.c's
 * assignment_fractions computes it (a float count, exact below 2^24, times 1 / (Tr K)) */
MOE_HD float kmoe_fraction(int hits, int Tr, int K) {
    return (float)hits * (1.0f / ((float)Tr * (float)K));
}

/* Thread t's share of the balance loss over the (row, expert) pairs j = t, t + nt, ... of
 * rows E (row j / E, expert j % E): f_e (the fraction of the row's assignments, or gf[e], the
 * global fractions, when given) times the row's mean q_e, in double. */
MOE_HD double kmoe_bal_part(const double *pq, const int *ph, const float *gf, int rows, int Tr,
                            int nchunk, int E, int K, int t, int nt) {
    double a = 0.0;
    for (int j = t; j < rows * E; j += nt) {
        const int r = j / E, e = j % E;
        const float f = gf ? gf[e] : kmoe_fraction(kmoe_part_count(ph, r, e, nchunk, E), Tr, K);
        a += (double)f * (kmoe_part_total(pq, r, e, nchunk, E) / Tr);
    }
    return a;
}
/* the loss from the block's total: E sum_i f_i P_i, averaged over the rows (sequences) */
MOE_HD float kmoe_bal_final(double total, int rows, int E) {
    return (float)((double)E * total / rows);
}

/* The factor of router_balance_coef's coefficients, in its float order: scale E / N (aux, one
 * row of N) or scale E / (nseq T) (seq_aux). */
MOE_HD float kmoe_coef_per(float scale, int E, int rows, int Tr) {
    return scale * (float)E / ((float)rows * (float)Tr); /* (float)1 * N is N exactly */
}
/* coefficient j (row j / E, expert j % E): per times f (the row's fraction, or gf[e]) */
MOE_HD float kmoe_bal_coef(const int *ph, const float *gf, size_t j, int Tr, int nchunk, int E,
                           int K, float per) {
    const int r = (int)(j / (size_t)E), e = (int)(j % (size_t)E);
    const float f = gf ? gf[e] : kmoe_fraction(kmoe_part_count(ph, r, e, nchunk, E), Tr, K);
    return per * f;
}

/* One token's router backward, router.c's router_gate_backward step for step: dl (E) written
 * from dwn, wn (K), its chosen experts in (K), scores p (E), logits l (E, read for sigmoid
 * only), lse_n, and its row g (E) of balance coefficients (NULL: no balance loss, as zeros).
 * z_per = z_scale 2 / N. The sums run in double in expert or k order, as in the reference;
 * expf stands for nn_expf. dl holds ds first and becomes dl in place (nothing indexed at run
 * time in registers: no local memory). */
MOE_HD void kmoe_gate_back_row(float *dl, const float *dwn, const float *p, const float *l,
                               float lse_n, const int *in, const float *wn, const float *g, int E,
                               int K, int sigmoid, int topk_first, int norm_topk, float rs,
                               float z_per) {
    if (sigmoid) {
        /* q = s / S: ds_j = (g_j - sum_i g_i q_i) / S */
        double S = 0.0, gq = 0.0;
        for (int e = 0; e < E; e++) S += p[e];
        for (int e = 0; e < E; e++) gq += (double)(g ? g[e] : 0.0f) * p[e];
        gq /= S;
        for (int e = 0; e < E; e++) dl[e] = (float)(((g ? g[e] : 0.0f) - gq) / S);
    } else {
        for (int e = 0; e < E; e++) dl[e] = g ? g[e] : 0.0f;
    }
    double dot = 0.0;
    for (int k = 0; k < K; k++) dot += (double)dwn[k] * wn[k];
    if (!topk_first) {
        if (norm_topk) {
            double z = 0.0;
            for (int k = 0; k < K; k++) z += p[in[k]];
            for (int k = 0; k < K; k++) dl[in[k]] += (float)((rs * dwn[k] - dot) / z);
        } else {
            for (int k = 0; k < K; k++) dl[in[k]] += rs * dwn[k];
        }
    }
    const float zl = z_per * lse_n;
    if (sigmoid) {
        for (int e = 0; e < E; e++) dl[e] = dl[e] * p[e] * (1.0f - p[e]) + zl * expf(l[e] - lse_n);
    } else {
        double pdp = 0.0; /* sum_i p_i ds_i */
        for (int e = 0; e < E; e++) pdp += (double)p[e] * dl[e];
        for (int e = 0; e < E; e++) dl[e] = p[e] * (dl[e] - (float)pdp) + zl * p[e];
    }
    if (topk_first) /* the weights' own softmax over the K chosen logits, a = w / rs */
        for (int k = 0; k < K; k++)
            dl[in[k]] += (float)((double)(wn[k] / rs) * (rs * dwn[k] - dot));
}

/* One token's entropy of its scores normalised to sum 1 (nats, 0 log 0 = 0) into *ent, and
 * its highest score into *top1, as router_stats and router_mean_top1 walk a row. */
MOE_HD void kmoe_token_stats(double *ent, double *top1, const float *sn, int E) {
    const double S = kmoe_row_sum(sn, E);
    double h = 0.0;
    float best = sn[0];
    for (int e = 0; e < E; e++) {
        const double q = sn[e] / S;
        if (q > 0.0) h -= q * log(q);
        best = sn[e] > best ? sn[e] : best;
    }
    *ent = h;
    *top1 = best;
}
/* whether any of a token's A slots keeps its assignment (an expert picked it) */
MOE_HD int kmoe_token_picked(const int *slot_n, int A) {
    int picked = 0;
    for (int a = 0; a < A; a++) picked |= slot_n[a] >= 0;
    return picked;
}
/* kmoe_tree_sum's pairing over ints (exact in any order; the order is still the device's) */
MOE_HD int kmoe_tree_sum_int(int *v, int n) {
    for (int off = n / 2; off > 0; off /= 2)
        for (int t = 0; t < off; t++) v[t] += v[t + off];
    return v[0];
}

/* What route_stats' kernels bring to the host in one copy: this head, then routed (E) and
 * dropped (E) ints right after it. */
typedef struct {
    double ent, top1; /* sums over the tokens of the entropy and of the top score */
    double lse_sum;   /* the sum of the call's lse (router_logit_stats) */
    float max_logit;  /* the call's largest |logit| (router_logit_stats) */
    int unpicked;     /* expert choice: the tokens no expert picked */
} KmoeStatsHead;

/* The host's end of route_stats (not MOE_HD: it calls load_balance): r from the head and the
 * per-expert counts, with router_balance.c's and expert_choice.c's formulas. N is the call's
 * tokens (token choice); an expert-choice plan brings its own (p->N). */
static inline void kmoe_route_stats_finish(RouteStats *r, const KmoeStatsHead *h, const int *routed,
                                           const int *dropped, const DispatchPlan *p, int N,
                                           const MoeSpec *s) {
    const int E = s->num_experts, K = s->top_k;
    RouterStats *st = &r->st;
    r->max_logit = h->max_logit;
    r->lse_mean = N > 0 ? (float)(h->lse_sum / N) : 0.0f;
    r->pad = 0.0;
    if (s->routing == MOE_ROUTING_EXPERT_CHOICE) {
        const int Np = p->N;
        if (Np <= 0 || p->S <= 0) {
            for (int e = 0; e < E; e++) r->load[e] = 0.0f;
            st->maxvio = st->cv = st->entropy = st->drop_frac = st->top1 = 0.0f;
        } else {
            for (int e = 0; e < E; e++) r->load[e] = (float)((double)routed[e] / p->S);
            load_balance(&st->maxvio, &st->cv, r->load, E);
            st->entropy = (float)(h->ent / Np);
            st->top1 = (float)(h->top1 / Np);
            st->drop_frac = (float)((double)h->unpicked / Np);
        }
        for (int e = 0; e < E; e++) r->routed[e] = routed[e], r->dropped[e] = 0;
        r->drop = st->drop_frac;
        return;
    }
    if (N <= 0) {
        for (int e = 0; e < E; e++) r->load[e] = 0.0f;
        st->maxvio = st->cv = st->entropy = st->drop_frac = st->top1 = 0.0f;
    } else {
        const float inv = 1.0f / ((float)N * (float)K);
        for (int e = 0; e < E; e++) r->load[e] = (float)routed[e] * inv;
        st->top1 = (float)(h->top1 / N);
        load_balance(&st->maxvio, &st->cv, r->load, E);
        st->entropy = (float)(h->ent / N);
    }
    long long drops = 0;
    for (int e = 0; e < E; e++) {
        r->routed[e] = routed[e], r->dropped[e] = dropped[e];
        drops += dropped[e];
    }
    const long long kept = (long long)(N > 0 ? N : 0) * K - drops;
    r->drop = N > 0 ? (double)drops / ((double)N * K) : 0.0;
    st->drop_frac = (float)r->drop;
    if (p->S > 0) r->pad = (double)(p->S - kept) / p->S;
}

/* ---- logit statistics ------------------------------------------------------------------------ */

/* Thread t's share of router_logit_stats over the tokens n = t, t + nt, ...: the largest
 * |logit| of their rows (any order gives the same maximum) into *largest, the sum of their lse
 * in token order, in double, into *sum. */
MOE_HD void kmoe_logit_stats_part(float *largest, double *sum, const float *logits,
                                  const float *lse, int N, int E, int t, int nt) {
    float m = 0.0f;
    double a = 0.0;
    for (int n = t; n < N; n += nt) {
        for (int e = 0; e < E; e++) m = fmaxf(m, fabsf(logits[(size_t)n * E + e]));
        a += lse[n];
    }
    *largest = m;
    *sum = a;
}
/* kmoe_tree_sum's pairing for a maximum */
MOE_HD float kmoe_tree_max(float *v, int n) {
    for (int off = n / 2; off > 0; off /= 2)
        for (int t = 0; t < off; t++) v[t] = fmaxf(v[t], v[t + off]);
    return v[0];
}

#endif
