/*
 * tp.c: tensor parallelism's gathers and sums over the rows of a replica (tp.h).
 */
#include "model/tp.h"

#include "model/profile.h"

int model_tp(const Model *m) {
    return m->dist ? m->dist->tp : 1;
}

void tp_rows(const Model *m, int N, int *n, int *row0) {
    const int tp = model_tp(m);
    *n = N / tp;
    *row0 = tp > 1 ? m->dist->tp_rank * *n : 0;
}

/* An all-gather (gather 1) or reduce-scatter (0) of x (N, C) over DIST_TP, through the host's
 * copy rs->tp_host when the backend's memory is not the host's (a GPU's). Member p's range of
 * the N C floats is rows [p N / tp, (p + 1) N / tp): its own rows. */
static void tp_collective(Model *m, float *x, int N, int C, int gather) {
    const Backend *be = m->be;
    const size_t n = (size_t)N * C;
    float *h = be->host_memory ? x : m->state.tp_host;
    if (h != x) be->to_host(be, h, x, n * sizeof(float));
    const int was = dist_purpose(m->dist, DIST_FOR_TP);
    if (gather)
        dist_allgather_f(m->dist, DIST_TP, h, n);
    else
        dist_reduce_scatter_f(m->dist, DIST_TP, h, n);
    dist_purpose(m->dist, was);
    if (h != x) be->to_device(be, x, h, n * sizeof(float));
}

void tp_gather_rows(Model *m, float *x, int N, int C) {
    if (model_tp(m) > 1) tp_collective(m, x, N, C, 1);
}

const float *tp_gather_grad(Model *m, const float *dy, int N, int C) {
    if (model_tp(m) == 1) return dy;
    RunState *rs = &m->state;
    int n, row0;
    tp_rows(m, N, &n, &row0);
    PROF(PROF_RESIDUAL,
         m->be->copy_block(m->be, rs->tp_gath + (size_t)row0 * C, C, dy, C, n, C, 0));
    tp_gather_rows(m, rs->tp_gath, N, C);
    return rs->tp_gath;
}

float *tp_sum_rows(Model *m, float *x, int N, int C) {
    if (model_tp(m) == 1) return x;
    int n, row0;
    tp_rows(m, N, &n, &row0);
    tp_collective(m, x, N, C, 0);
    return x + (size_t)row0 * C;
}

float *tp_partial(Model *m, float *out) {
    return model_tp(m) == 1 ? out : m->state.tp_part;
}

void tp_sum_into(Model *m, float *out, float *part, int N, int C) {
    if (part == out) return;
    const float *mine = tp_sum_rows(m, part, N, C);
    PROF(PROF_RESIDUAL, m->be->copy_block(m->be, out, C, mine, C, N / model_tp(m), C, 0));
}
