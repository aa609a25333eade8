/*
 * plan_search.c: every layout of a plan, costed and ranked, each with the reason it loses to
 * the best. See plan.h; handbook chapter 7, "Searching the layouts".
 *
 * The fields stated on the command line (PlanInput.fixed) stay; the others range over:
 * tp a power of two up to a node and the heads; pp a divisor of the GPUs left, up to the
 * layers; vpp 1 or 2; ep a divisor of the experts and of a stage's tp x dp GPUs; micro-batches
 * of 1, 2, 4 or 8 sequences; no, selective, experts or full recomputation. The moe.c engine has
 * data and expert parallelism only: its search is over ep.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

/* Fitting layouts first, fastest first; then those that do not fit, smallest first. */
static int by_rank(const void *a, const void *b) {
    const PlanResult *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    const double u = x->fits ? x->step_s : x->mem_total, v = y->fits ? y->step_s : y->mem_total;
    if (u != v) return u < v ? -1 : 1;
    /* equal: the simpler layout first (fewer stages, less tensor parallelism) */
    if (x->lay.pp != y->lay.pp) return x->lay.pp - y->lay.pp;
    if (x->lay.tp != y->lay.tp) return x->lay.tp - y->lay.tp;
    if (x->lay.vpp != y->lay.vpp) return x->lay.vpp - y->lay.vpp;
    if (x->lay.ep != y->lay.ep) return x->lay.ep - y->lay.ep;
    if (x->lay.micro_batch != y->lay.micro_batch) return x->lay.micro_batch - y->lay.micro_batch;
    return x->lay.recompute - y->lay.recompute;
}

/* Why r is slower than best: the term of the step that grew the most. */
static void why_slower(PlanResult *r, const PlanResult *best) {
    static const char *const NAMES[] = {
        "compute",          "recomputation",   "tensor-parallel traffic", "expert exchange",
        "pipeline traffic", "pipeline bubble", "gradient sums",           "optimizer step"};
    const double a[] = {r->compute_s, r->recompute_s, r->tp_s,         r->ep_exposed_s,
                        r->pp_s,      r->bubble_s,    r->dp_exposed_s, r->optim_s};
    const double b[] = {best->compute_s, best->recompute_s, best->tp_s,         best->ep_exposed_s,
                        best->pp_s,      best->bubble_s,    best->dp_exposed_s, best->optim_s};
    int worst = 0;
    for (int i = 1; i < 8; i++)
        if (a[i] - b[i] > a[worst] - b[worst]) worst = i;
    const double slower = r->step_s / best->step_s - 1;
    if (slower < 0.005) /* a tie: what sets them apart is the memory left */
        snprintf(r->loses, sizeof r->loses, "as fast to 0.5%%: %s %.1f GB a GPU against %.1f",
                 r->mem_total < best->mem_total ? "less memory," : "more memory,",
                 r->mem_total / 1e9, best->mem_total / 1e9);
    else
        snprintf(r->loses, sizeof r->loses, "%.0f%% slower: %s %+.3g s a step", 100.0 * slower,
                 NAMES[worst], a[worst] - b[worst]);
}

/* The values one field of the layout takes: the stated one, or the candidates. */
typedef struct {
    int v[MAX_PLAN_LAYERS];
    int n;
} Choices;

static void choose(Choices *c, int fixed, int stated, int lo, int hi, int doubling) {
    c->n = 0;
    if (fixed) {
        c->v[c->n++] = stated;
        return;
    }
    for (int x = lo; x <= hi && c->n < MAX_PLAN_LAYERS; x = doubling ? 2 * x : x + 1)
        c->v[c->n++] = x;
}

int plan_search(const PlanInput *in, PlanResult *out, int max) {
    const double G = in->k.gpus, E = in->m.c.num_experts, L = in->m.c.n_layer;
    const int moec = in->t.engine == PLAN_ENGINE_MOEC;
    const unsigned fx = in->fixed;
    const PlanLayout *st = &in->lay;
    static Choices tp, pp, vpp, ep, mb, rc; /* 24 KB: not on the stack */
    choose(&tp, fx & PLAN_FIX_TP, st->tp, 1, (int)in->k.gpus_per_node, 1);
    choose(&pp, fx & PLAN_FIX_PP, st->pp, 1, (int)fmin(L, MAX_PLAN_LAYERS), 0);
    choose(&vpp, fx & PLAN_FIX_VPP, st->vpp, 1, moec ? 1 : 2, 0);
    choose(&ep, fx & PLAN_FIX_EP, st->ep, 1, E > 0 ? (int)fmin(E, G) : 1, 0);
    choose(&mb, fx & PLAN_FIX_MB, st->micro_batch, 1, moec ? 1 : 8, 1);
    choose(&rc, fx & PLAN_FIX_RC, st->recompute, 0, moec ? 0 : PLAN_RC_FULL, 0);
    int n = 0;
    PlanLayout l;
    PlanResult one;
    for (int a = 0; a < tp.n; a++)
        for (int b = 0; b < pp.n; b++) {
            l.tp = tp.v[a], l.pp = pp.v[b];
            if (fmod(G, (double)l.tp * l.pp) != 0) continue; /* not a grid: skipped quietly */
            for (int c = 0; c < vpp.n; c++)
                for (int e = 0; e < ep.n; e++) {
                    const double dp = G / ((double)l.tp * l.pp);
                    const int x = ep.v[e]; /* what plan_layout would refuse, skipped quietly */
                    if (E > 0 && (fmod(E, x) != 0 || fmod(dp * l.tp, x) != 0)) continue;
                    for (int f = 0; f < mb.n; f++)
                        for (int g = 0; g < rc.n; g++) {
                            l.vpp = vpp.v[c], l.ep = ep.v[e];
                            l.micro_batch = mb.v[f], l.recompute = rc.v[g];
                            plan_layout(in, &l, &one);
                            if (one.valid && n < max) out[n] = one;
                            n += one.valid;
                        }
                }
        }
    if (n > max) return n; /* no room for them all: the caller asks again with more */
    qsort(out, (size_t)n, sizeof *out, by_rank);
    for (int i = 1; i < n; i++) {
        if (!out[i].fits)
            snprintf(out[i].loses, sizeof out[i].loses,
                     "does not fit: %.1f GB a GPU of %.0f (activations %.1f GB)",
                     out[i].mem_total / 1e9, in->k.memory_gb, out[i].mem_acts / 1e9);
        else
            why_slower(&out[i], &out[0]);
    }
    if (n > 0 && !out[0].fits)
        snprintf(out[0].loses, sizeof out[0].loses, "does not fit: %.1f GB a GPU of %.0f",
                 out[0].mem_total / 1e9, in->k.memory_gb);
    return n;
}
