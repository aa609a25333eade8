/*
 * Chapter 3, a2a.c: one dispatch and combine of an MoE block across processes.
 *
 *   make MPI=1 chapters && mpirun -np 4 build/mpi/chapters/03-expert-parallel/a2a
 *   make chapters && build/chapters/03-expert-parallel/a2a      (one process: P = 1)
 *
 * Every process is one member of a single expert-parallel group (dist.ep = the number of
 * processes P): it holds El = E / P of the E experts and routes its own N tokens. One forward
 * pass of the block's experts, step by step:
 *
 *   1. the grid                 which experts each process holds
 *   2. routing                  each process's top-k choice, its dispatch plan: the rows it
 *                                sends to each member (one run of the plan per member)
 *   3. the count exchange       rows per local expert from each source, and where they land
 *   4. the rows exchanged       bytes sent and received against the cost model
 *   5. the combine              the outputs back home, against a one-process reference
 *   6. the load                 rows each member's experts processed, and the imbalance
 *
 * The weights come from one fixed seed, the same on every process (each keeps the slice of its
 * experts, and all of them for the reference); the tokens from a seed that depends on the rank.
 * Every process fills a small record of numbers; rank 0 gathers them (dist_gather_f) and prints
 * them in rank order. Every function it calls is the engine's own: dist_init and the
 * collectives (src/parallel/dist.h; the hand-built ones the chapter explains,
 * dist.collectives=teach), the router, dispatch plan, permutation, experts and combine
 * (src/moe/moe_ops.h), ep_experts_forward (src/model/ep.h).
 *
 * Besides src/moe.h it includes those three headers (and through them the backend's table of
 * ops, whose products it calls): the exchange inside one MoE block, step by step, is what this
 * program shows, and no model-level function runs it a piece at a time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"

#include "model/ep.h"      /* the expert exchange: counts, rows out, experts, rows back */
#include "moe/moe_ops.h"   /* the router, dispatch plan, permutation and combine */
#include "parallel/dist.h" /* the process grid and the collectives */

enum { E = 8, K = 2, C = 16, F = 32, N = 12 }; /* experts, top-k, channels, hidden, tokens */
#define WEIGHT_SEED 1234u                      /* the same on every process */
#define TOKEN_SEED 5000u                       /* plus the rank */

/* One process's record, in floats (exact for the small integers here): where each field
 * starts for a group of P members with El experts each. */
typedef struct {
    int P, El, len;
    int send;    /* (P) rows sent to each member (the send counts, in rows) */
    int per_e;   /* (E) rows per expert of this process's plan */
    int recv;    /* (P, El) rows received from each source for each local expert */
    int rdispl;  /* (P) where each source's rows start in the receive buffer (rows) */
    int scalars; /* the S_* values below */
} Layout;
enum { S_SENT, S_RECV, S_OUT, S_IN, S_DSENT, S_DRECV, S_DIFF, S_LOAD, S_COUNT };

static Layout layout(int P) {
    Layout l = {.P = P, .El = E / P};
    l.send = 0;
    l.per_e = l.send + P;
    l.recv = l.per_e + E;
    l.rdispl = l.recv + P * l.El;
    l.scalars = l.rdispl + P;
    l.len = l.scalars + S_COUNT;
    return l;
}

static void fill_normal(float *x, size_t n, float std, Rng *rng) {
    for (size_t i = 0; i < n; i++) x[i] = std * rng_normal(rng);
}

static void bar(double rows, double scale) {
    for (int i = 0; i < (int)(rows * scale + 0.5) && i < 60; i++) putchar('#');
}

/* The record of rank r among the gathered ones. */
static const float *at(const float *rec, const Layout *l, int r) {
    return rec + (size_t)r * l->len;
}

/* Rank 0 prints the records rec (P records of l->len floats, rank order). */
static void print_report(const float *rec, const Layout *l, const Dist *d) {
    const int P = l->P, El = l->El;
    printf("1. the grid: world %d = dp %d x ep %d; each process holds El = E / ep = %d of the "
           "E = %d experts\n",
           d->world, d->dp, d->ep, El, E);
    for (int r = 0; r < P; r++)
        printf("   rank %d  ep_rank %d  experts %d-%d\n", r, r % P, r * El, r * El + El - 1);

    printf("\n2. routing: each process's N = %d tokens, top-%d of E = %d: rows sent to each "
           "member, rows per expert\n",
           N, K, E);
    printf("   rank  send to:");
    for (int p = 0; p < P; p++) printf(" %4d", p);
    printf("  total |  per expert:");
    for (int e = 0; e < E; e++) printf(" %3d", e);
    printf("\n");
    for (int r = 0; r < P; r++) {
        const float *me = at(rec, l, r);
        int total = 0;
        printf("   rank %d   sends", r);
        for (int p = 0; p < P; p++) {
            printf(" %4d", (int)me[l->send + p]);
            total += (int)me[l->send + p];
        }
        printf("  %5d |  per expert:", total);
        for (int e = 0; e < E; e++) printf(" %3d", (int)me[l->per_e + e]);
        printf("\n");
    }
    printf("   (a plan lists its rows expert by expert: member p's rows are one run of it)\n");

    printf("\n3. the count exchange: rows received from each source, per local expert, and "
           "where they land\n");
    for (int r = 0; r < P; r++) {
        const float *me = at(rec, l, r);
        for (int q = 0; q < P; q++) {
            int total = 0;
            printf("   rank %d <- rank %d:", r, q);
            for (int j = 0; j < El; j++) {
                printf("  e%d %2d", r * El + j, (int)me[l->recv + q * El + j]);
                total += (int)me[l->recv + q * El + j];
            }
            printf("  = %2d rows  at row %2d\n", total, (int)me[l->rdispl + q]);
        }
    }
    printf("   (counts go first, %d ints per peer: the rows and kept rows of each of its experts;\n"
           "    the receiver sizes and places the rows before they come)\n",
           2 * El);

    printf("\n4. the rows exchanged (forward): bytes = C x 4 (rows out + rows in) + 2 El x 4 "
           "(P - 1)\n");
    for (int r = 0; r < P; r++) {
        const float *sc = at(rec, l, r) + l->scalars;
        int out = (int)sc[S_OUT], in = (int)sc[S_IN];
        long model = 4L * C * (out + in) + 4L * 2 * El * (P - 1);
        printf("   rank %d  rows out %2d in %2d  sent %6.0f B  received %6.0f B  model %6ld B  "
               "DistStats %6.0f %6.0f\n",
               r, out, in, sc[S_SENT], sc[S_RECV], model, sc[S_DSENT], sc[S_DRECV]);
    }
    printf("   (rows out go to the other members' experts and come back as outputs; rows in come\n"
           "    from the others and go back as outputs; a process's rows for itself stay home)\n");

    printf("\n5. the combine: each process's y (N, C) against a one-process reference with all "
           "%d experts\n",
           E);
    for (int r = 0; r < P; r++)
        printf("   rank %d  max |y - y_ref| = %.3e\n", r, at(rec, l, r)[l->scalars + S_DIFF]);

    printf("\n6. the load: rows each process's experts processed\n");
    double max = 0.0, sum = 0.0;
    for (int r = 0; r < P; r++) {
        double load = at(rec, l, r)[l->scalars + S_LOAD];
        sum += load;
        max = fmax(max, load);
    }
    const double mean = sum / P;
    for (int r = 0; r < P; r++) {
        double load = at(rec, l, r)[l->scalars + S_LOAD];
        printf("   rank %d  %3.0f rows  ", r, load);
        bar(load, 40.0 / (max > 0 ? max : 1));
        printf("\n");
    }
    printf("   total %.0f rows = P x N x K = %d; imbalance max / mean = %.0f / %.2f = %.3f\n", sum,
           P * N * K, max, mean, mean > 0 ? max / mean : 0.0);
    printf("   (the busiest member sets the pace: every member waits for its outputs)\n");
}

int main(int argc, char **argv) {
    char err[512];
    /* The process count is known once MPI has started: a first grid (ep = 1) says it, and the
     * grid of the chapter (ep = every process) is built inside it. */
    Dist world, d;
    if (dist_init(&world, &argc, &argv, (DistAxes){1, 1, 1}, DIST_COLL_TEACH, 30.0, NULL, err,
                  sizeof err) != 0) {
        fprintf(stderr, "a2a: %s\n", err);
        return MOE_EXIT_INPUT;
    }
    const int P = world.world;
    if (argc > 1 || E % P != 0) {
        if (world.rank == 0) {
            if (argc > 1)
                fprintf(stderr, "usage: [mpirun -np P] a2a (no options; P divides %d)\n", E);
            else
                fprintf(stderr,
                        "a2a: %d processes do not divide the E = %d experts: run with mpirun -np "
                        "1, 2, 4 or 8\n",
                        P, E);
        }
        dist_finalize(&world);
        return MOE_EXIT_INPUT;
    }
    if (dist_init(&d, &argc, &argv, (DistAxes){1, P, 1}, DIST_COLL_TEACH, 30.0, NULL, err,
                  sizeof err) != 0) {
        fprintf(stderr, "a2a: %s\n", err);
        dist_finalize(&world);
        return MOE_EXIT_INPUT;
    }
    const int El = E / P, me = d.ep_rank;
    const Layout l = layout(P);
    if (d.rank == 0) {
        printf("a2a: one MoE block's experts over %d process%s (E = %d, top-%d, C = %d, F = %d, "
               "N = %d tokens per process)\n",
               P, P == 1 ? "" : "es", E, K, C, F, N);
        if (P == 1)
            printf("one process: nothing leaves it. To see the exchange: make MPI=1 chapters && "
                   "mpirun -np 4 build/mpi/chapters/03-expert-parallel/a2a\n");
        printf("\n");
    }

    /* ---- the weights (one seed: all E experts on every process) and the tokens ----------- */
    MoeSpec spec = {.d_model = C, .num_experts = E, .top_k = K, .d_expert = F, .norm_topk = 1};
    moe_spec_defaults(&spec);
    float *router = floats_alloc((size_t)E * C); /* (E, C) */
    float *Wg = floats_alloc((size_t)E * F * C); /* (E, F, C) */
    float *Wu = floats_alloc((size_t)E * F * C); /* (E, F, C) */
    float *Wd = floats_alloc((size_t)E * C * F); /* (E, C, F) */
    float *x = floats_alloc((size_t)N * C);      /* (N, C) */
    Rng rng;
    rng_seed(&rng, WEIGHT_SEED);
    fill_normal(router, (size_t)E * C, 1.0f, &rng);
    fill_normal(Wg, (size_t)E * F * C, 1.0f / sqrtf((float)C), &rng);
    fill_normal(Wu, (size_t)E * F * C, 1.0f / sqrtf((float)C), &rng);
    fill_normal(Wd, (size_t)E * C * F, 1.0f / sqrtf((float)F), &rng);
    rng_seed(&rng, TOKEN_SEED + (uint64_t)d.rank);
    fill_normal(x, (size_t)N * C, 1.0f, &rng);
    /* this member's experts: El consecutive ones, a contiguous slice of each stack */
    const size_t per_expert = (size_t)F * C;
    const float *myWg = Wg + (size_t)me * El * per_expert;
    const float *myWu = Wu + (size_t)me * El * per_expert;
    const float *myWd = Wd + (size_t)me * El * per_expert;

    /* ---- routing: where the tokens are, over all E experts ------------------------------ */
    float *logits = floats_alloc((size_t)N * E), *scores = floats_alloc((size_t)N * E);
    float *lse = floats_alloc(N), *w = floats_alloc((size_t)N * K);
    int *idx = (int *)calloc_check((size_t)N * K, sizeof(int));
    const Backend *be = &backend_cpu; /* the engine's fast CPU ops (src/backend/backend.h) */
    be->matmul_forward(be, logits, x, router, N, C, E);
    router_softmax_forward(scores, lse, logits, N, E);
    router_topk_forward(idx, w, scores, N, E, K, spec.norm_topk);
    DispatchPlan plan;
    dispatch_plan_alloc(&plan, N, E, K);
    dispatch_plan_build(&plan, idx, N);
    const int S = plan.S;
    float *xe = floats_alloc((size_t)S * C), *ye = floats_alloc((size_t)S * C);
    permute_forward(xe, x, &plan, C);

    /* ---- the experts, across the group: counts, rows out, experts, rows back ------------ */
    EpActs ep;
    ep_acts_alloc(be, &ep, &spec, P, N);
    const DistStats before = d.stats;
    ep_experts_forward(be, ye, &ep, xe, &plan, myWg, myWu, myWd, &d);
    const DistStats after = d.stats;
    float *y = floats_alloc((size_t)N * C);
    combine_forward(y, ye, w, &plan, C);

    /* ---- the reference: the same plan through all E experts in this one process --------- */
    float *ye_ref = floats_alloc((size_t)S * C), *y_ref = floats_alloc((size_t)N * C);
    float *g = floats_alloc((size_t)S * F), *u = floats_alloc((size_t)S * F);
    float *h = floats_alloc((size_t)S * F);
    be->experts_forward(be, ye_ref, g, u, h, xe, Wg, Wu, Wd, plan.offsets, NULL, E, C, F);
    combine_forward(y_ref, ye_ref, w, &plan, C);
    double diff = 0.0;
    /* a comparison rather than fmax: GCC 12 for aarch64 stops with an internal error when it
     * vectorizes this loop as an fmax reduction */
    for (int i = 0; i < N * C; i++) {
        const double gap = fabs((double)y[i] - (double)y_ref[i]);
        if (gap > diff) diff = gap;
    }

    /* ---- this process's record, gathered to rank 0 ------------------------------------- */
    float *rec = floats_alloc((size_t)l.len);
    for (int p = 0; p < P; p++)
        rec[l.send + p] = (float)(plan.offsets[(p + 1) * El] - plan.offsets[p * El]);
    for (int e = 0; e < E; e++) rec[l.per_e + e] = (float)plan.counts[e];
    for (int q = 0; q < P; q++) {
        for (int j = 0; j < El; j++)
            rec[l.recv + q * El + j] = (float)ep.meta_recv[(q * El + j) * 2];
        rec[l.rdispl + q] = (float)(ep.rdispl[q] / C);
    }
    float *sc = rec + l.scalars;
    sc[S_SENT] = (float)ep.stats.bytes_sent;
    sc[S_RECV] = (float)ep.stats.bytes_recv;
    sc[S_OUT] = (float)ep.stats.rows_out_remote;
    sc[S_IN] = (float)ep.stats.rows_in_remote;
    sc[S_DSENT] = (float)(after.bytes_sent - before.bytes_sent);
    sc[S_DRECV] = (float)(after.bytes_recv - before.bytes_recv);
    sc[S_DIFF] = (float)diff;
    sc[S_LOAD] = (float)ep.stats.rows_in;
    float *all = d.rank == 0 ? floats_alloc((size_t)P * l.len) : NULL;
    dist_gather_f(&d, rec, (size_t)l.len, all);
    if (d.rank == 0) {
        print_report(all, &l, &d);
        fflush(stdout);
    }

    free(all);
    free(rec);
    free(g), free(u), free(h), free(ye_ref), free(y_ref), free(y);
    ep_acts_free(&backend_cpu, &ep);
    free(xe), free(ye);
    dispatch_plan_free(&plan);
    free(idx), free(w), free(lse), free(scores), free(logits);
    free(x), free(Wd), free(Wu), free(Wg), free(router);
    dist_finalize(&d);
    dist_finalize(&world);
    return 0;
}
