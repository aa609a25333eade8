/*
 * test_grad_sync.c: the buckets of the gradients' sums and the order they start in
 * (src/model/grad_sync.h), in one process (the collectives are copies; what is checked is
 * which ranges are summed, over which group, and when).
 *
 *   - every bucket list covers the gradient buffer once, each bucket whole tensors of one
 *     block (or of the head side, or the embedding) and one group, in the backward's order:
 *     head and final norm, the blocks from the last, the embedding; with a tied head, the
 *     embedding (the head's gradient with its own) once, over the stage (the world without a
 * pipeline), last;
 *   - dist.bucket_mb = 0 gives a bucket per tensor; a large one merges every run of
 *     neighbouring tensors of a stage and group; a cap in between is never exceeded by a merge;
 *   - during the backward, stage s has started exactly the buckets of the stages up to s, at
 *     most GRAD_SYNC_WINDOW are in flight, and the end waits for every one.
 */
#include <string.h>

#include "base/util.h"
#include "config/config.h"
#include "model/grad_sync.h"
#include "testutil.h"

/* An MoE model with a dense first block and shared experts: every kind of tensor and group
 * (tied: its head is the embedding, model.tied). */
static void table_of(ParamTable *pt, int tied) {
    Config c;
    config_defaults(&c);
    const char *sets[] = {"model.n_layer=3", "model.d_model=16",  "model.n_head=2",
                          "model.d_ff=32",   "moe.num_experts=4", "moe.top_k=2",
                          "moe.d_expert=8",  "moe.first_dense=1", "moe.num_shared=1"};
    char err[256];
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        ck_assert_msg(config_set(&c, sets[i], err, sizeof err) == 0, "%s: %s", sets[i], err);
    c.tied = tied;
    params_table_build(pt, &c);
}

static void table(ParamTable *pt) {
    table_of(pt, 0);
}

/* The tensors of bucket b: those inside its range, which must tile it exactly. */
static void check_bucket(const ParamTable *pt, const GradBucket *b, size_t cap) {
    size_t at = b->offset;
    int tensors = 0;
    for (int i = 0; i < pt->n; i++) {
        const ParamTensor *t = &pt->t[i];
        if (t->offset < b->offset || t->offset >= b->offset + b->numel) continue;
        ck_assert_msg(t->offset == at, "bucket at %zu: tensor %s starts at %zu, not %zu", b->offset,
                      t->name, t->offset, at);
        const int stage = t->layer >= 0 ? pt->n_layer - t->layer : b->stage;
        ck_assert_msg(stage == b->stage, "%s (block %d) in a bucket of stage %d", t->name, t->layer,
                      b->stage);
        ck_assert_msg((t->expert_dim ? DIST_DP : DIST_STAGE) == b->group, "%s summed over group %d",
                      t->name, b->group);
        at += t->numel;
        tensors++;
    }
    ck_assert_msg(at == b->offset + b->numel, "bucket at %zu ends inside a tensor", b->offset);
    ck_assert(tensors > 0);
    if (tensors > 1) ck_assert_msg(b->numel <= cap, "a merged bucket of %zu > %zu", b->numel, cap);
}

static void check_buckets(const ParamTable *pt, const GradSync *s, size_t cap) {
    unsigned char *covered = calloc_check(pt->total, 1);
    for (int i = 0; i < s->n; i++) {
        check_bucket(pt, &s->b[i], cap);
        if (i > 0) ck_assert_int_le(s->b[i - 1].stage, s->b[i].stage);
        for (size_t j = 0; j < s->b[i].numel; j++) covered[s->b[i].offset + j]++;
    }
    for (size_t j = 0; j < pt->total; j++)
        ck_assert_msg(covered[j] == 1, "gradient %zu summed %d times", j, covered[j]);
    free(covered);
    /* the head side first, the embedding last */
    ck_assert_int_eq(s->b[0].stage, 0);
    ck_assert_int_eq(s->b[s->n - 1].stage, pt->n_layer + 1);
}

START_TEST(test_buckets) {
    ParamTable pt;
    table(&pt);
    GradSync s;
    grad_sync_init(&s, &pt, 0, &backend_cpu, 0); /* a bucket per tensor */
    ck_assert_int_eq(s.n, pt.n);
    check_buckets(&pt, &s, 0);
    grad_sync_free(&s);
    grad_sync_init(&s, &pt, pt.total, &backend_cpu,
                   0); /* no cap: each run of a stage and group is one */
    check_buckets(&pt, &s, pt.total);
    /* the runs: head side (final norm, head); the embedding; per block, its non-expert
     * tensors around the experts (MoE blocks: 3 runs; the dense block: 1) */
    ck_assert_int_eq(s.n, 2 + 1 + 2 * 3);
    grad_sync_free(&s);
    const size_t cap = 600; /* between the small tensors and the large ones */
    grad_sync_init(&s, &pt, cap, &backend_cpu, 0);
    check_buckets(&pt, &s, cap);
    ck_assert(s.n > 2 + 1 + 2 * 3 && s.n < pt.n);
    grad_sync_free(&s);
    params_table_free(&pt);
}
END_TEST

/* model.tied: the head's gradient is the embedding's, summed once with it, over the stage, after
 * the embedding's own part (the last stage); the head side holds the final norm alone */
START_TEST(test_buckets_tied) {
    ParamTable pt;
    table_of(&pt, 1);
    GradSync s;
    grad_sync_init(&s, &pt, pt.total, &backend_cpu, 0);
    check_buckets(&pt, &s, pt.total);
    ck_assert_int_eq(s.n, 2 + 1 + 2 * 3); /* as untied: the head side is the final norm alone */
    const ParamTensor *emb = &pt.t[params_find(&pt, "tok_emb")];
    const GradBucket *last = &s.b[s.n - 1], *first = &s.b[0];
    ck_assert(last->offset == emb->offset && last->numel == emb->numel);
    ck_assert_int_eq(last->group, DIST_STAGE);
    ck_assert_uint_eq(first->numel, (size_t)pt.t[params_find(&pt, "final_norm")].numel);
    grad_sync_free(&s);
    params_table_free(&pt);
}
END_TEST

START_TEST(test_start_order) {
    ParamTable pt;
    table(&pt);
    GradSync s;
    grad_sync_init(&s, &pt, 0, &backend_cpu, 0);
    Dist d;
    char err[128];
    ck_assert_int_eq(dist_init(&d, NULL, NULL, (DistAxes){1, 1, 1}, DIST_COLL_TEACH, 10.0, NULL,
                               err, sizeof err),
                     0);
    float *grads = calloc_check(pt.total, sizeof(float));
    for (int step = 0; step < 2; step++) {
        const uint64_t calls0 = d.stats.calls;
        for (int stage = 0; stage <= pt.n_layer; stage++) {
            grad_sync_ready(&s, &d, grads, stage);
            int want = 0;
            while (want < s.n && s.b[want].stage <= stage) want++;
            ck_assert_int_eq(s.next, want);
            ck_assert_int_le(s.count, GRAD_SYNC_WINDOW);
            /* the waited ones are those the window pushed out */
            ck_assert_int_eq((int)(d.stats.calls - calls0), want - s.count);
        }
        grad_sync_finish(&s, &d, grads);
        ck_assert_int_eq((int)(d.stats.calls - calls0), s.n);
        ck_assert_int_eq(s.count, 0);
        ck_assert_int_eq(s.next, 0); /* ready for the next step */
        ck_assert(s.wait_s >= 0.0);
    }
    /* without overlap the end starts and waits for them all */
    const uint64_t calls0 = d.stats.calls;
    grad_sync_finish(&s, &d, grads);
    ck_assert_int_eq((int)(d.stats.calls - calls0), s.n);
    free(grads);
    dist_finalize(&d);
    grad_sync_free(&s);
    params_table_free(&pt);
}
END_TEST

static Suite *grad_sync_suite(void) {
    Suite *s = suite_create("grad_sync");
    TCase *tc = tcase_create("buckets");
    tcase_add_test(tc, test_buckets);
    tcase_add_test(tc, test_buckets_tied);
    tcase_add_test(tc, test_start_order);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(grad_sync_suite)
