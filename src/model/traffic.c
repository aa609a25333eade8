/* traffic.c: see traffic.h. */
#include "model/traffic.h"

#include <stdlib.h>
#include <string.h>

#include "model/grad_sync.h"
#include "model/params.h"

void model_traffic_step(const Config *c, const Dist *d, uint64_t sent[DIST_PURPOSES]) {
    memset(sent, 0, DIST_PURPOSES * sizeof *sent);
    if (d->world <= 1) return; /* one process: nothing leaves it */
    ParamTable pt;
    params_table_build_ep(&pt, c, d->ep);
    GradBucket *b = NULL;
    const int nb = grad_buckets(&pt, (size_t)(c->bucket_mb * (1 << 20) / sizeof(float)), &b);
    for (int i = 0; i < nb; i++) {
        uint64_t s = 0, r = 0;
        dist_cost(d->collectives, DIST_ALLREDUCE, dist_group_size(d, b[i].group),
                  dist_group_rank(d, b[i].group), b[i].numel, &s, &r);
        sent[DIST_FOR_GRADS] += s;
    }
    free(b);
    params_table_free(&pt);
}
