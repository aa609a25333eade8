/*
 * test_backend_coll.c: the optional collectives a backend may have on its own memory
 * (Backend.coll_*: NCCL on a GPU, dist.collectives=nccl), on every backend of the build
 * (tests/backend_util.h).
 *
 * All four entries or none; none on the CPU tables. Where a backend has them, over a world of
 * one process (the one check a single GPU allows: NCCL refuses two processes on one GPU), a
 * sum leaves the buffer as it was, an exchange copies its block, and each wait counts a call
 * and no bytes. On a machine without a GPU only the first half runs; tests/gpu/run_device.sh
 * runs this suite's binary on a GPU.
 */
#include "backend_util.h"

START_TEST(test_device_collectives) {
    for (int b = 0; b < N_BACKENDS; b++) {
        const Backend *be = BACKENDS[b];
        const int n_set = !!be->coll_open + !!be->coll_allreduce_sum_f_start +
                          !!be->coll_alltoallv_f_start + !!be->coll_wait;
        ck_assert_msg(n_set == 0 || n_set == 4, "%s has %d of the 4 collectives", be->name, n_set);
        if (be->host_memory)
            ck_assert_msg(n_set == 0, "%s, a CPU table, has collectives", be->name);
        if (n_set == 0) continue;
        Dist d;
        char err[256];
        ck_assert_int_eq(dist_init(&d, NULL, NULL, 1, DIST_COLL_NCCL, 10.0, NULL, err, sizeof err),
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
        int count = n, displ = 0;
        be->coll_wait(be, &d,
                      be->coll_alltoallv_f_start(be, &d, x, &count, &displ, y, &count, &displ));
        be->to_host(be, got, y, sizeof got);
        ck_assert_mem_eq(got, want, sizeof got);
        ck_assert_uint_eq(d.stats.calls - calls, 2);
        ck_assert_uint_eq(d.stats.bytes_sent + d.stats.bytes_recv, 0);
        release(be, x), release(be, y);
        dist_finalize(&d);
    }
}
END_TEST

static Suite *backend_coll_suite(void) {
    Suite *s = suite_create("backend_coll");
    TCase *tc = tcase_create("coll");
    tcase_add_test(tc, test_device_collectives);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(backend_coll_suite)
