/*
 * test_backend_coll.c: the optional collectives a backend may have on its own memory
 * (Backend.coll_*: NCCL on a GPU, dist.collectives=nccl), on every backend of the build
 * (tests/backend_util.h).
 *
 * All six entries or none; none on the CPU tables. Where a backend has them, over a world of
 * one process (the one check a single GPU allows: NCCL refuses two processes on one GPU), a
 * sum and its halves (reduce-scatter, all-gather) leave the buffer as it was, an exchange
 * copies its block, and each wait counts a call and no bytes. On a machine without a GPU only the
 * first half runs; tests/gpu/run_device.sh runs this suite's binary on a GPU.
 *
 * NCCL's start (backend/cuda/nccl_start.h), over a world of three ranks played in turn: rank 0's id
 * reaches every rank, and so does a failure of its draw, each rank returning the message
 * instead of waiting in a broadcast rank 0 never made.
 */
#include <stdio.h>

#include "backend/cuda/nccl_start.h"
#include "backend_util.h"

START_TEST(test_device_collectives) {
    for (int b = 0; b < N_BACKENDS; b++) {
        const Backend *be = BACKENDS[b];
        const int n_set = !!be->coll_open + !!be->coll_allreduce_sum_f_start +
                          !!be->coll_reduce_scatter_f_start + !!be->coll_allgather_f_start +
                          !!be->coll_alltoallv_f_start + !!be->coll_wait;
        ck_assert_msg(n_set == 0 || n_set == 6, "%s has %d of the 6 collectives", be->name, n_set);
        if (be->host_memory)
            ck_assert_msg(n_set == 0, "%s, a CPU table, has collectives", be->name);
        if (n_set == 0) continue;
        Dist d;
        char err[256];
        ck_assert_int_eq(dist_init(&d, NULL, NULL, (DistAxes){1, 1, 1}, DIST_COLL_NCCL, 10.0, NULL,
                                   err, sizeof err),
                         0);
        ck_assert_msg(be->coll_open(be, &d, err, sizeof err) == 0, "%s: %s", be->name, err);
        enum { n = 1000 };
        float *x = dev_rand(be, n, 1.0f, 40), *y = be_floats(be, n);
        float want[n], got[n];
        be->to_host(be, want, x, sizeof want);
        const uint64_t calls = d.stats.calls;
        be->coll_wait(be, &d, be->coll_allreduce_sum_f_start(be, &d, DIST_WORLD, x, n));
        be->to_host(be, got, x, sizeof got);
        ck_assert_mem_eq(got, want, sizeof got);
        be->coll_wait(be, &d, be->coll_reduce_scatter_f_start(be, &d, DIST_DP, x, n));
        be->coll_wait(be, &d, be->coll_allgather_f_start(be, &d, DIST_DATA, x, n));
        be->to_host(be, got, x, sizeof got);
        ck_assert_mem_eq(got, want, sizeof got);
        int count = n, displ = 0;
        be->coll_wait(be, &d,
                      be->coll_alltoallv_f_start(be, &d, x, &count, &displ, y, &count, &displ));
        be->to_host(be, got, y, sizeof got);
        ck_assert_mem_eq(got, want, sizeof got);
        ck_assert_uint_eq(d.stats.calls - calls, 4);
        ck_assert_uint_eq(d.stats.bytes_sent + d.stats.bytes_recv, 0);
        release(be, x), release(be, y);
        dist_finalize(&d);
    }
}
END_TEST

/* ---- NCCL's start (backend/cuda/nccl_start.h), its ranks played in turn ---------------------
 * A world of three ranks in one process: rank 0 runs first and its broadcast puts the bytes on
 * the wire, then ranks 1 and 2 run and theirs take them from it. A rank 0 that did not
 * broadcast leaves the wire empty: the others would wait there forever, which the fake
 * broadcast reports instead. */
typedef struct {
    int fail;         /* rank 0's draw fails with NCCL's status 2 (ncclSystemError) */
    int sends;        /* broadcasts rank 0 took part in */
    int waited_empty; /* a rank > 0 broadcast with nothing sent: it would hang */
    int rank;         /* the rank running */
    NcclStart wire;
} FakeWorld;

static int fake_draw(void *ctx, char *id, char *why, size_t whylen) {
    FakeWorld *w = (FakeWorld *)ctx;
    if (w->fail) {
        snprintf(why, whylen, "unhandled system error");
        return 2;
    }
    for (int i = 0; i < NCCL_START_ID_BYTES; i++) id[i] = (char)(i * 7 + 1);
    return 0;
}
static void fake_bcast(void *ctx, void *buf, size_t n) {
    FakeWorld *w = (FakeWorld *)ctx;
    ck_assert_uint_eq(n, sizeof w->wire);
    if (w->rank == 0) {
        memcpy(&w->wire, buf, n);
        w->sends++;
    } else if (!w->sends) {
        w->waited_empty = 1;
    } else {
        memcpy(buf, &w->wire, n);
    }
}

START_TEST(test_nccl_start_reaches_every_rank) {
    for (int fail = 0; fail < 2; fail++) {
        FakeWorld w = {.fail = fail};
        char id0[NCCL_START_ID_BYTES];
        for (w.rank = 0; w.rank < 3; w.rank++) {
            NcclStart s;
            char err[512] = "";
            const int rc = nccl_start_share(w.rank, &s, fake_draw, fake_bcast, &w, err, sizeof err);
            ck_assert_msg(!w.waited_empty,
                          "rank %d waits in the broadcast rank 0 never made (its draw %s)", w.rank,
                          fail ? "failed" : "worked");
            if (!fail) {
                ck_assert_msg(rc == 0, "rank %d: %s", w.rank, err);
                if (w.rank == 0) memcpy(id0, s.id, sizeof id0);
                ck_assert_mem_eq(s.id, id0, sizeof id0); /* one id for all */
                continue;
            }
            ck_assert_msg(rc == -1, "rank %d goes on after rank 0's draw failed", w.rank);
            ck_assert_msg(strstr(err, "NCCL could not start on rank 0") &&
                              strstr(err, "unhandled system error") &&
                              strstr(err, "dist.collectives=mpi"),
                          "rank %d's message: %s", w.rank, err);
        }
        ck_assert_int_eq(w.sends, 1);
    }
}
END_TEST

static Suite *backend_coll_suite(void) {
    Suite *s = suite_create("backend_coll");
    TCase *tc = tcase_create("coll");
    tcase_add_test(tc, test_device_collectives);
    tcase_add_test(tc, test_nccl_start_reaches_every_rank);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(backend_coll_suite)
