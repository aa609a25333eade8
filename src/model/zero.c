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

size_t zero_window_floats(const GradBucket *b, int n) {
    size_t largest = 0;
    for (int i = 0; i < n;) { /* the buckets are in stage order */
        size_t floats = 0;
        const int stage = b[i].stage;
        for (; i < n && b[i].stage == stage; i++) floats += b[i].numel;
        if (floats > largest) largest = floats;
    }
    return largest;
}

/* dist.zero=3: each stage's buckets, their places in its window, and the two windows. */
static void windows_init(Zero *z, const GradSync *s, const Backend *be) {
    if (s->n == 0 || s->b[0].stage < 0)
        moe_fatal("dist.zero=3: weights outside the stages 0 .. L + 1 (multi-token prediction)");
    z->be = be;
    z->n_stages = s->b[s->n - 1].stage + 1;
    z->first = calloc_check((size_t)z->n_stages + 1, sizeof *z->first);
    z->pos = calloc_check((size_t)s->n + 1, sizeof *z->pos);
    for (int st = 0, i = 0; st <= z->n_stages; st++) {
        z->first[st] = i;
        for (size_t at = 0; i < s->n && s->b[i].stage == st; i++) {
            z->pos[i] = at;
            at += s->b[i].numel;
        }
    }
    z->win_floats = zero_window_floats(s->b, s->n);
    for (int w = 0; w < 2; w++) {
        z->win[w] = be_floats(be, z->win_floats);
        z->win_host[w] = be->host_memory ? NULL : floats_alloc(z->win_floats);
        z->held[w] = -1;
    }
}

void zero_init(Zero *z, GradSync *s, const Dist *d, int stage, const Backend *be) {
    memset(z, 0, sizeof *z);
    grad_sync_shard(s, d, stage >= 2);
    z->stage = stage;
    z->at = calloc_check((size_t)s->n + 1, sizeof *z->at);
    z->floats = 0;
    for (int i = 0; i < s->n; i++) {
        z->at[i] = z->floats;
        z->floats += s->b[i].hi - s->b[i].lo;
    }
    if (stage >= 3) windows_init(z, s, be);
}

void zero_free(Zero *z) {
    for (int w = 0; w < 2; w++) {
        if (z->win[w]) z->be->free(z->be, z->win[w]);
        free(z->win_host[w]);
    }
    free(z->first);
    free(z->pos);
    free(z->at);
    memset(z, 0, sizeof *z);
}

/* AdamW on bucket b's shard, tensor by tensor where the shard meets it (each with its own
 * weight decay); mom: the bucket's shard of the moments. */
static void adamw_shard(Model *m, const GradBucket *b, size_t mom, AdamwStep s) {
    const Backend *be = m->be;
    const int shards = m->zero->stage >= 3; /* the weights are the shards, as the moments */
    for (int i = b->t0; i < b->t0 + b->nt; i++) {
        const ParamTensor *t = &m->pt.t[i];
        const size_t lo = t->offset > b->lo ? t->offset : b->lo;
        const size_t hi = t->offset + t->numel < b->hi ? t->offset + t->numel : b->hi;
        if (lo >= hi) continue;
        s.weight_decay = t->decay ? m->cfg.weight_decay : 0.0f;
        const size_t k = mom + (lo - b->lo);
        PROF(PROF_OPTIMIZER, be->adamw_update(be, m->params + (shards ? k : lo), m->grads + lo,
                                              m->m + k, m->v + k, hi - lo, &s));
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

/* ---- dist.zero=3: the windows --------------------------------------------------------------- */

/* Start the gather of bucket i of window w's stage: this member's shard to its place in the
 * window (through the host copy when staged), then the all-gather over the bucket's group. */
static void window_start(Model *m, int w, int i) {
    Zero *z = m->zero;
    const GradBucket *b = &m->sync->b[i];
    float *x = z->win[w] + z->pos[i];
    const float *shard = m->params + z->at[i];
    const size_t mine = b->lo - b->offset, n = b->hi - b->lo;
    if (z->win_host[w]) {
        x = z->win_host[w] + z->pos[i];
        m->be->to_host(m->be, x + mine, shard, n * sizeof(float));
    } else {
        m->be->copy(m->be, x + mine, shard, n * sizeof(float));
    }
    const int was = dist_purpose(m->dist, DIST_FOR_WEIGHTS);
    z->op[w][z->nop[w]] = dist_allgather_f_start(m->dist, b->group, x, b->numel);
    dist_purpose(m->dist, was);
    z->op_bucket[w][z->nop[w]++] = i;
}

/* Finish window w's gathers in flight (and put the staged ones up). */
static void window_wait(Model *m, int w) {
    Zero *z = m->zero;
    for (int j = 0; j < z->nop[w]; j++) {
        dist_wait(m->dist, z->op[w][j]);
        const int i = z->op_bucket[w][j];
        if (z->win_host[w])
            m->be->to_device(m->be, z->win[w] + z->pos[i], z->win_host[w] + z->pos[i],
                             m->sync->b[i].numel * sizeof(float));
    }
    z->nop[w] = 0;
}

/* Start gathering stage into its window, ZERO_FLIGHT buckets at most (nothing when the
 * window holds it already or stage is none). */
static void window_fetch(Model *m, int stage) {
    Zero *z = m->zero;
    if (stage < 0 || stage >= z->n_stages) return;
    const int w = stage % 2;
    if (z->held[w] == stage) return;
    window_wait(m, w); /* (a stage abandoned half way: none in the passes' order) */
    z->held[w] = stage;
    z->next[w] = z->first[stage];
    while (z->nop[w] < ZERO_FLIGHT && z->next[w] < z->first[stage + 1])
        window_start(m, w, z->next[w]++);
}

void zero_weights(Model *m, int stage, int next) {
    Zero *z = m->zero;
    if (!z || z->stage < 3) return;
    window_fetch(m, stage);
    const int w = stage % 2;
    do { /* the gathers in flight, then the rest ZERO_FLIGHT at a time */
        window_wait(m, w);
        while (z->nop[w] < ZERO_FLIGHT && z->next[w] < z->first[stage + 1])
            window_start(m, w, z->next[w]++);
    } while (z->nop[w] > 0);
    for (int i = z->first[stage]; i < z->first[stage + 1]; i++) {
        const GradBucket *b = &m->sync->b[i];
        for (int t = b->t0; t < b->t0 + b->nt; t++)
            params_view_point(&m->w, &m->pt, t,
                              z->win[w] + z->pos[i] + (m->pt.t[t].offset - b->offset));
    }
    window_fetch(m, next);
    dist_progress(m->dist);
}

void zero_adamw_step(Model *m, const AdamwStep *s) {
    AdamwStep shard = *s;
    shard.clear_grad = 0; /* the whole buffer is cleared below, the other members' floats too */
    Zero *z = m->zero;
    if (z->stage < 3) {
        const int was = dist_purpose(m->dist, DIST_FOR_WEIGHTS);
        gather_all(m, m->params, &shard);
        dist_purpose(m->dist, was);
    } else { /* the shards change: what the windows hold is stale */
        for (int i = 0; i < m->sync->n; i++) adamw_shard(m, &m->sync->b[i], z->at[i], shard);
        zero_release(m);
    }
    m->be->zero(m->be, m->grads, m->pt.total * sizeof(float));
}

void zero_release(Model *m) {
    Zero *z = m->zero;
    if (!z || z->stage < 3) return;
    for (int w = 0; w < 2; w++) {
        window_wait(m, w);
        z->held[w] = -1;
    }
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
    dist_allreduce_sum_d(m->dist, DIST_STAGE, &ss, 1); /* the stage's; model_grad_norm adds the
                                                         other stages' */
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

void zero_shard_of_host(const Model *m, const float *whole, float *shard) {
    const GradSync *s = m->sync;
    for (int i = 0; i < s->n; i++)
        m->be->to_device(m->be, shard + m->zero->at[i], whole + s->b[i].lo,
                         (s->b[i].hi - s->b[i].lo) * sizeof(float));
}

void zero_shard_of(const Model *m, const float *whole, float *shard) {
    const GradSync *s = m->sync;
    for (int i = 0; i < s->n; i++)
        m->be->copy(m->be, shard + m->zero->at[i], whole + s->b[i].lo,
                    (s->b[i].hi - s->b[i].lo) * sizeof(float));
}
