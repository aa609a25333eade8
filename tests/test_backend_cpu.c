/*
 * test_backend_cpu.c: what the CPU backends promise beyond the results of the reference
 * (test_backend_ops.c compares every entry of every backend with cpu-ref):
 *
 *   - threads: the cpu backend's experts give the same bits whatever the thread count, and
 *     the count sizes the BLAS's pool with OpenMP and without;
 *   - the fence: cpu-fenced's memory is closed to the host, so a direct read stops the program;
 *     and each entry checks its pointers against backend.h (the device's memory, or the host's),
 *     so a pointer of the wrong kind stops it too, naming the entry and the argument.
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend_util.h"

/* The cpu experts run whole on one thread each when there are at least two per thread, one
 * after another (each product on every thread) otherwise. An expert's products are the same
 * whichever thread runs them, so forward and backward give the same bits at 1, 2, 3 and 4
 * threads: uneven slices, an empty one, and a padded plan (kept rows then padding rows). */
START_TEST(test_experts_any_thread_count) {
    enum { E = 8, C = 24, F = 20 };
    static const int OFF[E + 1] = {0, 40, 41, 41, 90, 100, 160, 163, 200};
    static const int KEPT[E] = {30, 1, 0, 49, 10, 55, 3, 20};
    const int S = OFF[E], threads_before = backend_set_threads(0);
    const Backend *be = &backend_cpu;
    const size_t sc = (size_t)S * C, sf = (size_t)S * F, wn = (size_t)E * F * C;
    float *xe = dev_rand(be, sc, 1.0f, 81), *W = dev_rand(be, 3 * wn, 0.3f, 82);
    float *dye = dev_rand(be, sc, 1.0f, 83);
    for (int padded = 0; padded < 2; padded++) {
        float *first = NULL;
        const size_t nout = sc + 3 * sf + sc + 3 * wn + 3 * sf;
        for (int threads = 1; threads <= 4; threads++) {
            backend_set_threads(threads);
            float *out = be_floats(be, nout);
            float *ye = out, *act = ye + sc, *dxe = act + 3 * sf, *dW = dxe + sc;
            float *dact = dW + 3 * wn;
            be->experts_forward(be, ye, act, act + sf, act + 2 * sf, xe, W, W + wn, W + 2 * wn, OFF,
                                padded ? KEPT : NULL, E, C, F);
            be->experts_backward(be, dxe, dW, dW + wn, dW + 2 * wn, dact, dact + sf, dact + 2 * sf,
                                 dye, xe, act, act + sf, act + 2 * sf, W, W + wn, W + 2 * wn, OFF,
                                 padded ? KEPT : NULL, E, C, F);
            if (!first) {
                first = out;
                continue;
            }
            ck_assert_msg(memcmp(first, out, nout * sizeof(float)) == 0,
                          "experts (%s plan): %d threads give other bits than 1 thread",
                          padded ? "padded" : "dropless", threads);
            release(be, out);
        }
        release(be, first);
    }
    release(be, xe), release(be, W), release(be, dye);
    backend_set_threads(threads_before);
}
END_TEST

/* train.threads sizes the BLAS's pool with OpenMP and without: a build without OpenMP (make
 * HAVE_OPENMP=0) runs its own loops on one thread but once held OpenBLAS to one as well. */
START_TEST(test_threads_size_the_blas_pool) {
    const int before = backend_set_threads(0);
    ck_assert_int_eq(backend_set_threads(3), 3);
    ck_assert_int_eq(backend_set_threads(0), 3); /* 0 keeps the count set last */
    ck_assert_int_eq(backend_set_threads(1), 1);
    backend_set_threads(before);
}
END_TEST

/* cpu-fenced's memory is closed to the host: a direct read stops the program (SIGSEGV), which
 * is what makes its training runs (tests/test_backends.sh) a proof that the engine reads a
 * device's memory only through to_host. Open through an entry, the same bytes read back. */
START_TEST(test_fence_stops_a_host_read) {
    const Backend *be = &backend_cpu_fenced;
    float h[4] = {1, 2, 3, 4}, back[4];
    float *d = dev_copy(be, h, 4);
    be->to_host(be, back, d, sizeof back);
    ck_assert_msg(memcmp(h, back, sizeof h) == 0, "cpu-fenced: to_host gives other bytes");
    volatile float x = d[1]; /* the signal ends the test here */
    (void)x;
    ck_abort_msg("cpu-fenced: the host read its memory directly and went on");
}
END_TEST

/* cpu-fenced's other half: each entry checks its pointers against backend.h before it opens the
 * fence (an entry may read the backend's memory, so a pointer of the wrong kind would pass
 * unseen). Each misuse below runs in a child process, which must end with MOE_EXIT_FATAL and
 * a message naming the entry and the argument. */
typedef struct {
    const char *what;
    const char *says; /* what the message must hold */
    void (*misuse)(const Backend *be);
} Misuse;

/* the aux loss's f in host memory, where the balance loss reads the backend's */
static void global_f_on_the_host(const Backend *be) {
    MoeSpec sp = {.d_model = 4, .num_experts = 4, .top_k = 2, .d_expert = 4};
    moe_spec_defaults(&sp);
    sp.seq_len = 4;
    MoeCtx cx;
    moe_ctx_train(&cx, &sp, 4, NULL);
    static const float f[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    const int idx_h[8] = {0, 1, 2, 3, 0, 1, 2, 3};
    float *scores = dev_rand(be, 16, 1.0f, 84);
    int *idx = dev_copy_i(be, idx_h, 8);
    float *loss = be_floats(be, 1);
    cx.global_f = f;
    be->router_balance_loss(be, loss, scores, idx, 4, &sp, &cx);
}
/* a device buffer as to_host's destination */
static void device_as_host_dst(const Backend *be) {
    float *a = be_floats(be, 4), *b = be_floats(be, 4);
    be->to_host(be, b, a, 4 * sizeof(float));
}
/* a host array as an operand */
static void host_as_operand(const Backend *be) {
    float a_h[4] = {1, 2, 3, 4};
    float *y = be_floats(be, 4);
    be->add(be, y, a_h, y, 4);
}
/* the host numbers of route_stats in the backend's memory */
static void route_stats_in_device_memory(const Backend *be) {
    MoeSpec sp = {.d_model = 4, .num_experts = 4, .top_k = 1, .d_expert = 4};
    moe_spec_defaults(&sp);
    const int idx_h[4] = {0, 1, 2, 3};
    float *scores = dev_rand(be, 16, 1.0f, 85), *logits = dev_rand(be, 16, 1.0f, 86);
    float *lse = be_floats(be, 4);
    int *idx = dev_copy_i(be, idx_h, 4);
    DispatchPlan p = {.N = 4, .E = 4, .K = 1};
    p.counts = be_ints(be, 4), p.offsets = be_ints(be, 5), p.slot = be_ints(be, 4);
    p.slot_token = be_ints(be, 4);
    be->dispatch_plan_build(be, &p, idx, 4);
    RouteStats rs;
    route_stats_alloc(&rs, 4);
    rs.load = be_floats(be, 4);
    be->route_stats(be, &rs, scores, logits, lse, idx, &p, 4, &sp);
}

static const Misuse MISUSES[] = {
    {"MoeCtx.global_f in host memory", "router_balance_loss: x->global_f", global_f_on_the_host},
    {"a device buffer as to_host's destination", "to_host: host_dst", device_as_host_dst},
    {"a host array as add's operand", "add: a (", host_as_operand},
    {"RouteStats.load in the backend's memory", "route_stats: out->load",
     route_stats_in_device_memory},
};

START_TEST(test_fence_checks_each_pointer) {
    const Misuse *m = &MISUSES[_i];
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    fflush(NULL);
    const pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], STDERR_FILENO);
        m->misuse(&backend_cpu_fenced);
        _exit(0); /* went through: the check is missing */
    }
    close(fd[1]);
    char err[1024] = {0};
    size_t got = 0;
    for (ssize_t r; got < sizeof err - 1 && (r = read(fd[0], err + got, sizeof err - 1 - got)) > 0;)
        got += (size_t)r;
    close(fd[0]);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == MOE_EXIT_FATAL,
                  "%s: cpu-fenced went on (status %d), want exit %d", m->what, status,
                  MOE_EXIT_FATAL);
    ck_assert_msg(strstr(err, "cpu-fenced: ") && strstr(err, m->says),
                  "%s: the message does not name '%s': %s", m->what, m->says, err);
}
END_TEST

static Suite *backend_cpu_suite(void) {
    Suite *s = suite_create("backend_cpu");
    TCase *tc = tcase_create("cpu");
    tcase_add_test(tc, test_experts_any_thread_count);
    tcase_add_test(tc, test_threads_size_the_blas_pool);
    tcase_add_test_raise_signal(tc, test_fence_stops_a_host_read, SIGSEGV);
    tcase_add_loop_test(tc, test_fence_checks_each_pointer, 0,
                        (int)(sizeof MISUSES / sizeof MISUSES[0]));
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(backend_cpu_suite)
