/*
 * grad_sync.c: the gradients' sums in buckets, started as the backward finishes them
 * (grad_sync.h).
 */
#include "model/grad_sync.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* When the backward has finished tensor t of a table with L blocks: the head and the final
 * norm (after the blocks in the table) first, then the blocks from the last, the embedding
 * (before them) last. */
static int stage_of(const ParamTensor *t, int L, int after_blocks) {
    if (t->layer >= 0) return L - t->layer;
    return after_blocks ? 0 : L + 1;
}

/* The ranks whose gradients of t add up: the expert data-parallel group for experts, the
 * replicas of this tensor-parallel share (DIST_DATA) for a tensor split over tp > 1 ranks, the
 * pipeline stage for the rest (whole on every rank of the stage, each seeing its part of the
 * batch; without a pipeline the world). */
static DistGroup grad_group(const ParamTensor *t, int tp) {
    if (t->expert_dim) return DIST_DP;
    return t->tp_dim >= 0 && tp > 1 ? DIST_DATA : DIST_STAGE;
}

static int by_stage(const void *a, const void *b) {
    const GradBucket *x = a, *y = b;
    if (x->stage != y->stage) return x->stage < y->stage ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset; /* the table's order inside */
}

int grad_buckets(const ParamTable *pt, size_t bucket_floats, GradBucket **out) {
    GradBucket *b = calloc_check((size_t)pt->n + 1, sizeof *b);
    int n = 0, seen_block = 0;
    for (int i = 0; i < pt->n; i++) {
        const ParamTensor *t = &pt->t[i];
        seen_block |= t->layer >= 0;
        const GradBucket next = {.offset = t->offset,
                                 .numel = t->numel,
                                 .group = grad_group(t, pt->tp),
                                 .stage = stage_of(t, pt->n_layer, seen_block),
                                 .t0 = i,
                                 .nt = 1};
        GradBucket *last = n > 0 ? &b[n - 1] : NULL;
        if (last && last->stage == next.stage && last->group == next.group &&
            last->offset + last->numel == next.offset && last->numel + next.numel <= bucket_floats)
            last->numel += next.numel, last->nt++;
        else
            b[n++] = next;
    }
    for (int i = 0; i < n; i++) b[i].lo = b[i].offset, b[i].hi = b[i].offset + b[i].numel;
    qsort(b, (size_t)n, sizeof *b, by_stage);
    *out = b;
    return n;
}

void grad_sync_init(GradSync *s, const ParamTable *pt, size_t bucket_floats, const Backend *be,
                    int on_device) {
    memset(s, 0, sizeof *s);
    s->be = be;
    s->on_device = on_device;
    if (!be->host_memory && !on_device) s->host = floats_alloc(pt->total);
    s->n = grad_buckets(pt, bucket_floats, &s->b);
}

void grad_sync_shard(GradSync *s, const Dist *d, int scatter) {
    s->scatter = scatter;
    for (int i = 0; i < s->n; i++) {
        GradBucket *b = &s->b[i];
        dist_shard_range(b->numel, dist_group_size(d, b->group), dist_group_rank(d, b->group),
                         &b->lo, &b->hi);
        b->lo += b->offset, b->hi += b->offset;
    }
}

void grad_sync_free(GradSync *s) {
    free(s->b);
    free(s->host);
    memset(s, 0, sizeof *s);
}

/* Wait for the oldest sum in flight (and put a staged one back). */
static void finish_oldest(GradSync *s, Dist *d, float *grads) {
    if (s->on_device)
        s->be->coll_wait(s->be, d, s->flight[s->head]);
    else
        dist_wait(d, (DistOp *)s->flight[s->head]);
    if (s->host) { /* a reduce-scatter's sum is the shard's alone */
        const GradBucket *b = &s->b[s->bucket[s->head]];
        const size_t lo = s->scatter ? b->lo : b->offset;
        const size_t hi = s->scatter ? b->hi : b->offset + b->numel;
        s->be->to_device(s->be, grads + lo, s->host + lo, (hi - lo) * sizeof(float));
    }
    s->head = (s->head + 1) % GRAD_SYNC_WINDOW;
    s->count--;
}

/* Start bucket i, after waiting for the oldest sum in flight when the window is full. */
static void start(GradSync *s, Dist *d, float *grads, int i) {
    if (s->count == GRAD_SYNC_WINDOW) finish_oldest(s, d, grads);
    const GradBucket *b = &s->b[i];
    float *x = grads + b->offset;
    if (s->host) { /* staged: summed in the host copy */
        s->be->to_host(s->be, s->host + b->offset, x, b->numel * sizeof(float));
        x = s->host + b->offset;
    }
    const int slot = (s->head + s->count) % GRAD_SYNC_WINDOW;
    const int was = dist_purpose(d, DIST_FOR_GRADS);
    if (s->on_device)
        s->flight[slot] = s->be->coll_allreduce_sum_f_start(s->be, d, b->group, x, b->numel);
    else if (s->scatter)
        s->flight[slot] = dist_reduce_scatter_f_start(d, b->group, x, b->numel);
    else
        s->flight[slot] = dist_allreduce_sum_f_start(d, b->group, x, b->numel);
    dist_purpose(d, was);
    s->bucket[slot] = i;
    s->count++;
}

void grad_sync_ready(GradSync *s, Dist *d, float *grads, int stage) {
    while (s->next < s->n && s->b[s->next].stage <= stage) start(s, d, grads, s->next++);
    dist_progress(d);
}

void grad_sync_finish(GradSync *s, Dist *d, float *grads) {
    const double t0 = now_seconds();
    while (s->next < s->n) start(s, d, grads, s->next++);
    while (s->count > 0) finish_oldest(s, d, grads);
    s->next = 0;
    s->head = 0;
    s->wait_s = now_seconds() - t0;
}
