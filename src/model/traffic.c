/* traffic.c: see traffic.h. */
#include "model/traffic.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/grad_sync.h"
#include "model/params.h"
#include "model/pipe.h"

/* dist.zero=3's two windows (zero.h), replayed: stage g (a gradient stage of grad_sync.h: 0 the
 * head's, L - l block l's, L + 1 the embedding's) lives in window g mod 2, and a fetch gathers
 * it unless that window holds it already (a stage without tensors here gathers nothing, but
 * takes its window all the same). */
typedef struct {
    int held[2], L;
    uint64_t *count; /* (L + 2) the gathers of each stage */
} Windows;

static void fetch(Windows *w, int g) {
    if (g < 0 || g > w->L + 1 || w->held[g % 2] == g) return;
    w->held[g % 2] = g;
    w->count[g]++;
}

/* zero_weights(stage, next): the stage, then the next one's prefetch */
static void zero_weights_at(Windows *w, int g, int next) {
    fetch(w, g);
    fetch(w, next);
}

/* The calls of zero_weights in a forward, and in a backward, of the blocks [first, last)
 * (model.c: the embedding's with the first block, the head's with the last). */
static void forward_calls(Windows *w, int first, int last) {
    const int L = w->L;
    if (first == 0) zero_weights_at(w, L + 1, L);
    for (int l = first; l < last; l++) zero_weights_at(w, L - l, L - l - 1);
    if (last == L) zero_weights_at(w, 0, -1);
}

static void backward_calls(Windows *w, int first, int last) {
    const int L = w->L;
    if (last == L) zero_weights_at(w, 0, 1);
    for (int l = last - 1; l >= first; l--) zero_weights_at(w, L - l, l > 0 ? L - l + 1 : -1);
}

/* How many times a step gathers each stage's weights under dist.zero=3 (count (L + 2)): the
 * windows empty after the update, then each micro-batch's forward and backward in the order
 * the step runs them (a pipeline stage's schedule, pipe.h; else forward, backward, A times). */
static void zero3_gathers(const Config *c, const Dist *d, int first, int last, uint64_t *count) {
    const int A = c->accum > 1 ? c->accum : 1;
    Windows w = {{-1, -1}, c->n_layer, count};
    PipeAction *act = (PipeAction *)malloc_check(2 * (size_t)A * sizeof *act);
    int n = 0;
    if (d->pp > 1)
        n = pipe_schedule(c->pp_schedule, d->pp, A, d->pp_rank, act);
    else
        for (int j = 0; j < A; j++)
            act[n++] = (PipeAction){PIPE_F, j}, act[n++] = (PipeAction){PIPE_B, j};
    for (int i = 0; i < n; i++)
        if (act[i].op == PIPE_F)
            forward_calls(&w, first, last);
        else
            backward_calls(&w, first, last);
    free(act);
}

/* The bytes this process sends a step in tensor parallelism's collectives over DIST_TP (tp.h),
 * each of a replica's N rows of C floats (member p's range its own N / tp rows), a micro-batch:
 *   the embedding     forward a reduce-scatter of its partial rows, backward an all-gather of
 *                     the gradient's rows
 *   each sublayer     split over the ranks (the attention, a dense feed-forward, the shared
 *                     experts): forward an all-gather of the normed rows and a reduce-scatter
 *                     of the output projection's partial sums, backward the same two turned
 *                     round (an MoE block's routed experts run on the rank's rows: nothing)
 *   the head          forward an all-gather of the normed rows and two of the cross-entropy's
 *                     tp x N floats (each rank's log-sum-exps and losses), backward a
 *                     reduce-scatter of the rows' partial gradients */
static uint64_t tp_step_bytes(const Config *c, const Dist *d, int first, int last) {
    const int tp = d->tp, me = d->tp_rank, A = c->accum > 1 ? c->accum : 1;
    const int readers = dist_group_size(d, DIST_STAGE) / tp;
    const size_t N = (size_t)(c->batch / readers) * c->seq_len, rows = N * c->d_model;
    uint64_t ag = 0, rs = 0, ce = 0, r = 0;
    dist_cost(d->collectives, DIST_ALLGATHER, tp, me, rows, &ag, &r);
    dist_cost(d->collectives, DIST_REDUCE_SCATTER, tp, me, rows, &rs, &r);
    dist_cost(d->collectives, DIST_ALLGATHER, tp, me, (size_t)tp * N, &ce, &r);
    int split = 0; /* sublayers split over the ranks (a pipeline stage's: [first, last)) */
    for (int l = first; l < last; l++)
        split += 1 + (!config_is_moe_layer(c, l) || c->num_shared > 0);
    const uint64_t micro = (ag + rs) * (first == 0) + (ag + rs) * 2 * (uint64_t)split +
                           (ag + 2 * ce + rs) * (last == c->n_layer);
    return micro * (uint64_t)A;
}

/* A pipeline stage's messages (pipe.h): a micro-batch's rows of the stream, this rank's n C
 * floats, forward to the next stage (but from the last) and back to the one before (but from
 * the first). */
static uint64_t pipe_step_bytes(const Config *c, const Dist *d) {
    const int readers = dist_group_size(d, DIST_STAGE) / d->tp, A = c->accum > 1 ? c->accum : 1;
    const uint64_t n = (uint64_t)(c->batch / readers) * c->seq_len / d->tp;
    const int ways = (d->pp_rank < d->pp - 1) + (d->pp_rank > 0);
    return (uint64_t)A * ways * n * c->d_model * sizeof(float);
}

void model_traffic_step(const Config *c, const Dist *d, uint64_t sent[DIST_PURPOSES]) {
    memset(sent, 0, DIST_PURPOSES * sizeof *sent);
    if (d->world <= 1) return; /* one process: nothing leaves it */
    int first = 0, last = c->n_layer; /* a pipeline stage's layers */
    char err[256];
    if (d->pp > 1 && config_pp_stage(c, d->pp_rank, &first, &last, err, sizeof err) != 0) return;
    if (d->tp > 1) sent[DIST_FOR_TP] = tp_step_bytes(c, d, first, last);
    if (d->pp > 1) sent[DIST_FOR_PIPE] = pipe_step_bytes(c, d);
    ParamTable pt;
    params_table_build_stage(&pt, c, d->ep, d->tp, first, last);
    GradBucket *b = NULL;
    const int nb = grad_buckets(&pt, grad_bucket_floats(c), &b);
    uint64_t *gathers = (uint64_t *)calloc_check((size_t)c->n_layer + 2, sizeof(uint64_t));
    if (c->zero >= 3) zero3_gathers(c, d, first, last, gathers);
    for (int i = 0; i < nb; i++) {
        const int P = dist_group_size(d, b[i].group), me = dist_group_rank(d, b[i].group);
        uint64_t s = 0, r = 0;
        /* dist.zero >= 2: reduce-scatters; >= 1: the weights gathered after the update, or
         * (3) before the passes that use them */
        dist_cost(d->collectives, c->zero >= 2 ? DIST_REDUCE_SCATTER : DIST_ALLREDUCE, P, me,
                  b[i].numel, &s, &r);
        sent[DIST_FOR_GRADS] += s;
        if (c->zero < 1) continue;
        dist_cost(d->collectives, DIST_ALLGATHER, P, me, b[i].numel, &s, &r);
        sent[DIST_FOR_WEIGHTS] += s * (c->zero >= 3 ? gathers[b[i].stage] : 1);
    }
    free(gathers);
    free(b);
    params_table_free(&pt);
}
