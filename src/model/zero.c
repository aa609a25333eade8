/*
 * zero.c: the update, the norm and the checkpoints' gathers of sharded training state
 * (dist.zero, zero.h).
 */
#include "model/zero.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/profile.h"

size_t zero_shard_floats(const GradBucket *b, int n) {
    size_t floats = 0;
    for (int i = 0; i < n; i++) floats += b[i].hi - b[i].lo;
    return floats;
}

void zero_init(Zero *z, GradSync *s, const Dist *d, int stage) {
    grad_sync_shard(s, d, stage >= 2);
    z->stage = stage;
    z->at = calloc_check((size_t)s->n + 1, sizeof *z->at);
    z->floats = 0;
    for (int i = 0; i < s->n; i++) {
        z->at[i] = z->floats;
        z->floats += s->b[i].hi - s->b[i].lo;
    }
}

void zero_free(Zero *z) {
    free(z->at);
    memset(z, 0, sizeof *z);
}

/* AdamW on bucket b's shard, tensor by tensor where the shard meets it (each with its own
 * weight decay); mom: the bucket's shard of the moments. */
static void adamw_shard(Model *m, const GradBucket *b, size_t mom, AdamwStep s) {
    const Backend *be = m->be;
    for (int i = b->t0; i < b->t0 + b->nt; i++) {
        const ParamTensor *t = &m->pt.t[i];
        const size_t lo = t->offset > b->lo ? t->offset : b->lo;
        const size_t hi = t->offset + t->numel < b->hi ? t->offset + t->numel : b->hi;
        if (lo >= hi) continue;
        s.weight_decay = t->decay ? m->cfg.weight_decay : 0.0f;
        const size_t k = mom + (lo - b->lo);
        PROF(PROF_OPTIMIZER,
             be->adamw_update(be, m->params + lo, m->grads + lo, m->m + k, m->v + k, hi - lo, &s));
    }
}

/* Start the all-gather of bucket b of x (pt.total floats of the backend) over its group: in
 * place when the host may read x, else through the host copy (GradSync.host) with only this
 * member's shard brought down. */
static DistOp *gather_start(const Model *m, const GradBucket *b, float *x) {
    const GradSync *s = m->sync;
    if (!s->host) return dist_allgather_f_start(m->dist, b->group, x + b->offset, b->numel);
    m->be->to_host(m->be, s->host + b->lo, x + b->lo, (b->hi - b->lo) * sizeof(float));
    return dist_allgather_f_start(m->dist, b->group, s->host + b->offset, b->numel);
}

static void gather_finish(const Model *m, const GradBucket *b, float *x, DistOp *op) {
    const GradSync *s = m->sync;
    dist_wait(m->dist, op);
    if (s->host)
        m->be->to_device(m->be, x + b->offset, s->host + b->offset, b->numel * sizeof(float));
}

/* Every bucket of x gathered over its group, GRAD_SYNC_WINDOW in flight at once; before each
 * start, each_bucket (when not NULL) computes that bucket's shard. */
static void gather_all(Model *m, float *x, const AdamwStep *each_bucket) {
    const GradSync *s = m->sync;
    DistOp *flight[GRAD_SYNC_WINDOW];
    int bucket[GRAD_SYNC_WINDOW], head = 0, count = 0;
    for (int i = 0; i < s->n; i++) {
        if (each_bucket) adamw_shard(m, &s->b[i], m->zero->at[i], *each_bucket);
        if (count == GRAD_SYNC_WINDOW) {
            gather_finish(m, &s->b[bucket[head]], x, flight[head]);
            head = (head + 1) % GRAD_SYNC_WINDOW, count--;
        }
        const int slot = (head + count++) % GRAD_SYNC_WINDOW;
        flight[slot] = gather_start(m, &s->b[i], x);
        bucket[slot] = i;
    }
    for (; count > 0; head = (head + 1) % GRAD_SYNC_WINDOW, count--)
        gather_finish(m, &s->b[bucket[head]], x, flight[head]);
}

void zero_adamw_step(Model *m, const AdamwStep *s) {
    AdamwStep shard = *s;
    shard.clear_grad = 0; /* the whole buffer is cleared below, the other members' floats too */
    gather_all(m, m->params, &shard);
    m->be->zero(m->be, m->grads, m->pt.total * sizeof(float));
}

void zero_norm_record(const Model *m) {
    const Backend *be = m->be;
    const GradSync *s = m->sync;
    for (int i = 0; i < s->n; i++) {
        const GradBucket *b = &s->b[i];
        be->sum_squares(be, m->state.rec_norm + i, m->state.norm_partial, m->grads + b->lo,
                        b->hi - b->lo);
    }
}

double zero_norm_squares(const Model *m, const double *sq) {
    double ss = 0.0;
    for (int i = 0; i < m->sync->n; i++) ss += sq[i];
    dist_allreduce_sum_d(m->dist, DIST_WORLD, &ss, 1);
    return ss;
}

float *zero_whole(const Model *m, const float *shard) {
    const GradSync *s = m->sync;
    float *whole = be_floats(m->be, m->pt.total);
    for (int i = 0; i < s->n; i++)
        m->be->copy(m->be, whole + s->b[i].lo, shard + m->zero->at[i],
                    (s->b[i].hi - s->b[i].lo) * sizeof(float));
    gather_all((Model *)m, whole, NULL);
    return whole;
}

void zero_shard_of(const Model *m, const float *whole, float *shard) {
    const GradSync *s = m->sync;
    for (int i = 0; i < s->n; i++)
        m->be->copy(m->be, shard + m->zero->at[i], whole + s->b[i].lo,
                    (s->b[i].hi - s->b[i].lo) * sizeof(float));
}
