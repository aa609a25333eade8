/*
 * test_backend_grad.c: the gradients of every faster version a backend brings.
 *
 * The reference ops have their gradient checks in test_ops.c, test_attention.c and
 * test_moe.c; test_backend_ops.c compares every entry of every backend with the reference. An entry
 * whose implementation differs from the reference's (the cpu backend's products, attention and
 * experts; later a GPU's kernels) is also checked here on its own backend: the backward against
 * central finite differences of that backend's own forward, of the scalar <R, y(x)> for a fixed
 * random R.
 */
#include <stdio.h>

#include "backend_util.h"

/* the shapes of test_backend_ops.c's matmul case */
enum { MM_N = 37, MM_IN = 29, MM_OUT = 23 };
/* the scalar <R, y(x)> of one op on one backend, with x a host array the check perturbs */
typedef struct {
    const Backend *be;
    int op; /* 0 matmul, 1 attention, 2 experts */
    float *x, *R;
    size_t nx, ny;
} GradCtx;

/* T = 70: two blocks of query rows in attention_gemm.c (ATT_BLOCK 64), the second partial */
/* attention: 4 query heads on 2 key-value heads (grouped-query), q (N, GA_QW), k, v (N, GA_KW) */
enum { GA_B = 1, GA_T = 70, GA_H = 4, GA_HKV = 2, GA_D = 4, GA_N = GA_B * GA_T };
enum { GA_QW = GA_H * GA_D, GA_KW = GA_HKV * GA_D };
/* five experts: with two threads the cpu backend runs them across the threads, each whole on
 * one (cpu_gemm.c), the path of the training runs */
enum { GE_E = 5, GE_C = 5, GE_F = 4 };
static const int GE_OFF[GE_E + 1] = {0, 3, 3, 7, 8, 12}; /* expert 1 has no rows */

/* y of op for the input x (host) on be; y (ny) written to host out */
static void grad_forward(const GradCtx *g, float *out) {
    const Backend *be = g->be;
    float *x = dev_copy(be, g->x, g->nx), *y = be_floats(be, g->ny);
    if (g->op == 0) {
        /* x holds the input (N, IN) then W (OUT, IN) */
        const size_t nin = (size_t)MM_N * MM_IN;
        be->matmul_forward(be, y, x, x + nin, MM_N, MM_IN, MM_OUT);
    } else if (g->op == 1) {
        /* x holds q, k, v */
        const size_t nq = (size_t)GA_N * GA_QW, nk = (size_t)GA_N * GA_KW;
        float *att = be_floats(be, (size_t)GA_B * GA_H * GA_T * GA_T);
        be->attention_forward(be, y, att, x, x + nq, x + nq + nk, GA_B, GA_T, GA_H, GA_HKV, GA_D,
                              GA_D);
        release(be, att);
    } else {
        /* x holds xe (S, C) then Wg, Wu (E, F, C) and Wd (E, C, F) */
        const int S = GE_OFF[GE_E];
        const size_t nxe = (size_t)S * GE_C, wn = (size_t)GE_E * GE_F * GE_C;
        float *h3 = be_floats(be, 3 * (size_t)S * GE_F);
        int *off = dev_copy_i(be, GE_OFF, GE_E + 1);
        be->experts_forward(be, y, h3, h3 + (size_t)S * GE_F, h3 + 2 * (size_t)S * GE_F, x, x + nxe,
                            x + nxe + wn, x + nxe + 2 * wn, off, NULL, GE_E, GE_C, GE_F);
        release(be, h3), release(be, off);
    }
    be->to_host(be, out, y, g->ny * sizeof(float));
    release(be, x), release(be, y);
}

static double grad_loss(void *p) {
    const GradCtx *g = (const GradCtx *)p;
    float *y = (float *)malloc_check(g->ny * sizeof(float));
    grad_forward(g, y);
    double s = dot_d(y, g->R, g->ny);
    free(y);
    return s;
}

/* the analytic gradient of <R, y> with respect to all of x, from the backend's backward */
static void grad_backward(const GradCtx *g, float *grad) {
    const Backend *be = g->be;
    float *x = dev_copy(be, g->x, g->nx), *R = dev_copy(be, g->R, g->ny);
    float *dx = be_floats(be, g->nx);
    if (g->op == 0) {
        const size_t nin = (size_t)MM_N * MM_IN;
        be->matmul_backward(be, dx, dx + nin, R, x, x + nin, MM_N, MM_IN, MM_OUT);
    } else if (g->op == 1) {
        const size_t nq = (size_t)GA_N * GA_QW, nk = (size_t)GA_N * GA_KW;
        float *out = be_floats(be, nq), *att = be_floats(be, (size_t)GA_B * GA_H * GA_T * GA_T);
        float *ws = be_floats(be, (size_t)GA_T * GA_T);
        const float *k = x + nq, *v = x + nq + nk;
        be->attention_forward(be, out, att, x, k, v, GA_B, GA_T, GA_H, GA_HKV, GA_D, GA_D);
        be->attention_backward(be, dx, dx + nq, dx + nq + nk, ws, R, att, x, k, v, GA_B, GA_T, GA_H,
                               GA_HKV, GA_D, GA_D, 1);
        release(be, out), release(be, att), release(be, ws);
    } else {
        const int S = GE_OFF[GE_E];
        const size_t nxe = (size_t)S * GE_C, wn = (size_t)GE_E * GE_F * GE_C, sf = (size_t)S * GE_F;
        float *y = be_floats(be, nxe), *a = be_floats(be, 6 * sf);
        int *off = dev_copy_i(be, GE_OFF, GE_E + 1);
        const float *Wg = x + nxe, *Wu = Wg + wn, *Wd = Wu + wn;
        be->experts_forward(be, y, a, a + sf, a + 2 * sf, x, Wg, Wu, Wd, off, NULL, GE_E, GE_C,
                            GE_F);
        be->experts_backward(be, dx, dx + nxe, dx + nxe + wn, dx + nxe + 2 * wn, a + 3 * sf,
                             a + 4 * sf, a + 5 * sf, R, x, a, a + sf, a + 2 * sf, Wg, Wu, Wd, off,
                             NULL, GE_E, GE_C, GE_F);
        release(be, y), release(be, a), release(be, off);
    }
    be->to_host(be, grad, dx, g->nx * sizeof(float));
    release(be, x), release(be, R), release(be, dx);
}

START_TEST(test_faster_versions_gradcheck) {
    const int threads_before = backend_set_threads(0);
    backend_set_threads(2);
    int checked = 0, cpu_checked = 0;
    for (int b = 0; b < N_BACKENDS; b++) {
        const Backend *be = BACKENDS[b];
        /* an op needs its own check only where the backend runs its own version */
        const int differs[3] = {be->matmul_backward != backend_cpu_ref.matmul_backward,
                                be->attention_backward != backend_cpu_ref.attention_backward,
                                be->experts_backward != backend_cpu_ref.experts_backward};
        for (int op = 0; op < 3; op++) {
            if (!differs[op]) continue;
            GradCtx g = {.be = be, .op = op};
            if (op == 0)
                g.nx = (size_t)MM_N * MM_IN + (size_t)MM_OUT * MM_IN, g.ny = (size_t)MM_N * MM_OUT;
            else if (op == 1)
                g.nx = (size_t)GA_N * (GA_QW + 2 * GA_KW), g.ny = (size_t)GA_N * GA_QW;
            else
                g.nx = (size_t)GE_OFF[GE_E] * GE_C + 3 * (size_t)GE_E * GE_F * GE_C,
                g.ny = (size_t)GE_OFF[GE_E] * GE_C;
            g.x = (float *)malloc_check(g.nx * sizeof(float));
            g.R = (float *)malloc_check(g.ny * sizeof(float));
            fill_uniform(g.x, g.nx, 0.5f, 50 + op);
            fill_uniform(g.R, g.ny, 1.0f, 60 + op);
            float *grad = (float *)malloc_check(g.nx * sizeof(float));
            grad_backward(&g, grad);
            char what[64];
            snprintf(what, sizeof what, "%s %s", be->name,
                     op == 0   ? "matmul"
                     : op == 1 ? "attention"
                               : "experts");
            gradcheck(grad_loss, &g, g.x, grad, g.nx, 1e-2f, 64, what);
            free(g.x), free(g.R), free(grad);
            checked++;
            cpu_checked += be == &backend_cpu;
        }
    }
    backend_set_threads(threads_before);
    /* cpu's three at least; the other backends' (cpu-fenced, a GPU's) besides */
    ck_assert_msg(cpu_checked == 3 && checked >= 3 * (N_BACKENDS - 1),
                  "%d versions checked, %d of them cpu's: want cpu's 3 (matmul, attention, "
                  "experts) and 3 for each backend other than cpu-ref",
                  checked, cpu_checked);
}
END_TEST

Suite *backend_grad_suite(void) {
    Suite *s = suite_create("backend_grad");
    TCase *tc = tcase_create("faster versions");
    tcase_add_test(tc, test_faster_versions_gradcheck);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(backend_grad_suite)
