/*
 * test_tp_grad.c: one step's gradients under tensor parallelism are the one-process model's.
 *
 * Every rank builds two models of one config (a dense first block, MoE blocks with a shared
 * expert and the aux loss, grouped-query heads with qk-norm per head): the one-process model,
 * which runs the whole batch, and its own process of the grid read from the environment
 * (MOE_TEST_TP, MOE_TEST_EP; the data-parallel axis is what the world leaves; MOE_TEST_TIED=1
 * ties the head to the embedding), which runs its
 * replica's sequences. After one forward and backward each, and the gradients' sums over the
 * processes, every tensor's gradient of the grid model must be its share of the one-process
 * gradient (its tp share of a split tensor, its experts, or the whole tensor) to 1e-5 of the
 * tensor's largest value, as must the loss. Run by tests/mpi/test_tp.sh under mpirun (2 and 4
 * processes); as one process (make test's unit suites) both models are one process's, and the
 * comparison still runs. Prints the worst tensor; exits 1 when any rank finds a difference.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/model.h"
#include "parallel/dist.h"

/* An integer setting from the environment, or fallback. */
static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

static Config tiny_config(int tp, int ep) {
    Config c;
    config_defaults(&c);
    c.d_model = 32, c.n_layer = 3, c.n_head = 8, c.kv_heads = 4, c.qk_norm = MOE_QK_NORM_HEAD;
    c.d_ff = 24, c.seq_len = 8, c.vocab = 64, c.batch = 4;
    c.num_experts = 4, c.top_k = 2, c.d_expert = 8, c.first_dense = 1, c.num_shared = 1;
    c.balance = MOE_BALANCE_AUX, c.z_coef = 1e-3f;
    c.tp = tp, c.ep = ep;
    c.tied =
        env_int("MOE_TEST_TIED", 0); /* the embedding as the head: one split tensor, two uses */
    return c;
}

/* The largest |x| of n floats, and the largest |x - y|. */
static void compare(const float *x, const float *y, size_t n, double *scale, double *diff) {
    *scale = 0.0, *diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        *scale = fmax(*scale, fabs((double)y[i]));
        *diff = fmax(*diff, fabs((double)x[i] - (double)y[i]));
    }
}

/* Compares every tensor of m's gradients with its share of one's; returns the failures and
 * prints the first and the worst. */
static int compare_grads(const Model *m, const Model *one, const Dist *d) {
    int failures = 0;
    double worst = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < m->pt.n; i++) {
        const ParamTensor *t = &m->pt.t[i];
        const ParamTensor *f = &one->pt.t[params_find(&one->pt, t->name)];
        float *want = floats_alloc(t->numel);
        if (t->tp_dim >= 0 && m->pt.tp > 1)
            params_tp_take(t, m->pt.tp, d->tp_rank, one->grads + f->offset, want);
        else
            memcpy(want, one->grads + f->offset + (t->expert_dim ? d->ep_rank * t->numel : 0),
                   t->numel * sizeof(float));
        double scale, diff;
        compare(m->grads + t->offset, want, t->numel, &scale, &diff);
        free(want);
        const double rel = diff / (scale > 0.0 ? scale : 1.0);
        if (rel > worst) worst = rel, worst_name = t->name;
        if (rel > 1e-5 || scale == 0.0) {
            if (failures++ == 0)
                fprintf(stderr, "test_tp_grad: rank %d: %s differs by %g of its largest %g\n",
                        d->rank, t->name, diff, scale);
        }
    }
    if (d->rank == 0)
        printf("test_tp_grad: worst tensor %s, %.2g of its largest gradient\n", worst_name, worst);
    return failures;
}

int main(int argc, char **argv) {
    const int tp = env_int("MOE_TEST_TP", 1), ep = env_int("MOE_TEST_EP", 1);
    Dist d;
    char err[256];
    if (dist_init(&d, &argc, &argv, (DistAxes){tp, ep, 1}, DIST_COLL_TEACH, 30, NULL, err,
                  sizeof err)) {
        fprintf(stderr, "test_tp_grad: %s\n", err);
        return 2;
    }
    const Config c = tiny_config(tp, ep), c1 = tiny_config(1, 1);
    if (config_check_dist(&c, d.world, err, sizeof err) != 0) {
        fprintf(stderr, "test_tp_grad: %s\n", err);
        return 2;
    }
    const int T = c.seq_len, N = c.batch * T, B = c.batch / (d.world / tp);
    int *tok = (int *)malloc_check((size_t)(N + 1) * sizeof(int));
    for (int i = 0; i <= N; i++) tok[i] = (int)((i * 37u + 11u) % (unsigned)c.vocab);
    const StepCtx ctx = {.training = 1};
    Model one, m;
    model_init(&one, &c1, c.batch, T);
    model_forward(&one, tok, tok + 1, c.batch, T, &ctx);
    model_backward(&one, 1.0f, &ctx);
    model_init_dist(&m, &c, B, T, &d);
    const size_t mine = (size_t)(d.rank / tp) * B * T;
    model_forward(&m, tok + mine, tok + 1 + mine, B, T, &ctx);
    model_backward(&m, 1.0f / (float)d.world, &ctx);
    model_sync_grads(&m);
    double loss = m.state.loss, aux = m.state.aux_loss;
    double sums[2] = {loss, aux};
    if (m.dist) dist_allreduce_sum_d(&d, DIST_WORLD, sums, 2);
    double failures = compare_grads(&m, &one, &d);
    const double want[2] = {one.state.loss, one.state.aux_loss};
    for (int k = 0; k < 2; k++)
        if (fabs(sums[k] / d.world - want[k]) > 1e-5 * fabs(want[k])) {
            fprintf(stderr, "test_tp_grad: rank %d: %s %.7f, one process %.7f\n", d.rank,
                    k ? "aux loss" : "loss", sums[k] / d.world, want[k]);
            failures++;
        }
    if (m.dist) dist_allreduce_sum_d(&d, DIST_WORLD, &failures, 1);
    if (d.rank == 0)
        printf("test_tp_grad: %d process(es), tp %d x ep %d x dp %d: every gradient and the loss "
               "= one process's: %s\n",
               d.world, d.tp, d.ep, d.dp, failures == 0 ? "passed" : "FAILED");
    model_free(&m);
    model_free(&one);
    free(tok);
    dist_finalize(&d);
    return failures == 0 ? 0 : 1;
}
