/* traffic.c: see traffic.h. */
#include "model/traffic.h"

#include <stdlib.h>
#include <string.h>

#include "model/grad_sync.h"
#include "model/params.h"

/* How many times a step of A micro-batches gathers stage s's weights under dist.zero=3
 * (zero.h, zero_weights; L blocks): every stage in the first micro-batch's forward (the update
 * before released the windows), each later forward every stage but L (its window kept from
 * the backward before), and each backward stages 2 .. L (the head's and the last block's kept
 * from the forward; the embedding's backward needs none). */
static uint64_t zero3_gathers(int s, int L, int A) {
    return 1 + (uint64_t)(A - 1) * (s != L) + (uint64_t)A * (s >= 2 && s <= L);
}

void model_traffic_step(const Config *c, const Dist *d, uint64_t sent[DIST_PURPOSES]) {
    memset(sent, 0, DIST_PURPOSES * sizeof *sent);
    if (d->world <= 1) return; /* one process: nothing leaves it */
    ParamTable pt;
    params_table_build_ep(&pt, c, d->ep);
    GradBucket *b = NULL;
    const int nb = grad_buckets(&pt, grad_bucket_floats(c), &b);
    const int A = c->accum > 1 ? c->accum : 1;
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
        sent[DIST_FOR_WEIGHTS] += s * (c->zero >= 3 ? zero3_gathers(b[i].stage, c->n_layer, A) : 1);
    }
    free(b);
    params_table_free(&pt);
}
