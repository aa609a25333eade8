/*
 * test_pipe.c: pipeline parallelism's arithmetic, in one process (src/model/pipe.h,
 * config_pp_stage): the schedules, the micro-batches they hold, the bubble of their timeline,
 * the stages' layers, and the memory table of a stage.
 *
 *   - every schedule runs each micro-batch's forward once and its backward once, after the
 *     forward, in micro-batch order on every stage;
 *   - 1F1B holds min(P - s, M) micro-batches on stage s, GPipe all M;
 *   - with a forward of one unit and a backward of two, both schedules' timeline idles each
 *     stage (P - 1) / (M + P - 1) of the step, and no stage starts an action before the
 *     neighbour it waits for has finished its part; two stages of unequal cost: a slow last one
 *     sets the step under both schedules, a slow first one's backwards interleave under 1F1B;
 *   - dist.pp_layers "even" puts layer l on stage floor(l P / L); counts are read and refused
 *     with the numbers;
 *   - a stage's parameter table holds its blocks, the first stage's the embedding, the last's
 *     the head: together the whole model's tensors once; the memory formula of a stage counts
 *     its table once a micro-batch it holds;
 *   - the process grid with a pipeline axis: stages are blocks of tp x ep x dp ranks, every
 *     group but the pipeline's inside one, each group's members agreeing on who they are.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "config/config.h"
#include "model/acts.h"
#include "model/memory.h"
#include "model/params.h"
#include "model/pipe.h"
#include "testutil.h"

START_TEST(test_schedules) {
    for (int sched = DIST_PP_GPIPE; sched <= DIST_PP_1F1B; sched++)
        for (int P = 1; P <= 5; P++)
            for (int M = 1; M <= 7; M++)
                for (int s = 0; s < P; s++) {
                    PipeAction a[14];
                    const int n = pipe_schedule(sched, P, M, s, a);
                    ck_assert_int_eq(n, 2 * M);
                    int next_f = 0, next_b = 0;
                    for (int i = 0; i < n; i++) { /* in order, each backward after its forward */
                        if (a[i].op == PIPE_F) ck_assert_int_eq(a[i].micro, next_f++);
                        if (a[i].op == PIPE_B) ck_assert_int_eq(a[i].micro, next_b++);
                        ck_assert_int_le(next_b, next_f);
                    }
                    ck_assert_int_eq(next_f, M);
                    ck_assert_int_eq(next_b, M);
                    const int want = sched == DIST_PP_GPIPE ? M : (P - s < M ? P - s : M);
                    ck_assert_int_eq(pipe_held(a, n), want);
                }
}
END_TEST

START_TEST(test_bubble) {
    for (int sched = DIST_PP_GPIPE; sched <= DIST_PP_1F1B; sched++)
        for (int P = 1; P <= 6; P++)
            for (int M = 1; M <= 9; M++) {
                double start[6 * 18], end[6 * 18];
                const double span = pipe_simulate(sched, P, M, 1.0, 2.0, start, end);
                /* each stage busy 3 M of the span; the span is 3 (M + P - 1) */
                ck_assert_double_eq_tol(span, 3.0 * (M + P - 1), 1e-12);
                ck_assert_double_eq_tol(1.0 - 3.0 * M / span, (P - 1.0) / (M + P - 1.0), 1e-12);
                for (int s = 0; s < P; s++)
                    for (int i = 1; i < 2 * M; i++) /* a stage does one thing at a time */
                        ck_assert(start[s * 2 * M + i] >= end[s * 2 * M + i - 1] - 1e-12);
                /* the first forward of the last stage waits for every stage before it */
                ck_assert_double_eq_tol(start[(P - 1) * 2 * M], P - 1.0, 1e-12);
            }
}
END_TEST

/* Two stages of unequal cost. A slower last stage works without a pause under either
 * schedule, the first waiting for it at every micro-batch: the step is F0 + M (F1 + B1) + B0.
 * A slower first stage: GPipe's step is M (F0 + B0) + F1 + B1 (its backwards wait for the last
 * stage's), 1F1B's only M (F0 + B0) once the last stage keeps up, its backwards interleaved. */
START_TEST(test_unequal_stages) {
    const double slow_last[2][2] = {{1.0, 3.0}, {2.0, 5.0}},
                 slow_first[2][2] = {{2.5, 1.0}, {4.0, 1.5}};
    for (int M = 1; M <= 8; M++) {
        double start[2 * 16], end[2 * 16];
        const double *f = slow_last[0], *b = slow_last[1];
        for (int sched = DIST_PP_GPIPE; sched <= DIST_PP_1F1B; sched++)
            ck_assert_double_eq_tol(pipe_simulate_stages(sched, 2, M, f, b, start, end),
                                    f[0] + M * (f[1] + b[1]) + b[0], 1e-12);
        f = slow_first[0], b = slow_first[1];
        const double gpipe = pipe_simulate_stages(DIST_PP_GPIPE, 2, M, f, b, start, end);
        ck_assert_double_eq_tol(gpipe, M * (f[0] + b[0]) + f[1] + b[1], 1e-12);
        const double onefb = pipe_simulate_stages(DIST_PP_1F1B, 2, M, f, b, start, end);
        ck_assert_double_eq_tol(onefb, M == 1 ? gpipe : M * (f[0] + b[0]), 1e-12);
    }
}
END_TEST

static void small_config(Config *c, int L, int P) {
    config_defaults(c);
    char err[256];
    const char *sets[] = {"model.d_model=16",  "model.n_head=2",  "model.d_ff=32",
                          "moe.num_experts=4", "moe.top_k=2",     "moe.d_expert=8",
                          "moe.first_dense=1", "model.seq_len=8", "train.batch=2"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        ck_assert_msg(config_set(c, sets[i], err, sizeof err) == 0, "%s: %s", sets[i], err);
    c->n_layer = L, c->pp = P;
}

START_TEST(test_stages) {
    Config c;
    char err[512];
    int first, last;
    for (int L = 1; L <= 9; L++)
        for (int P = 1; P <= L; P++) {
            small_config(&c, L, P);
            for (int l = 0; l < L; l++) { /* layer l on stage floor(l P / L) */
                ck_assert_int_eq(config_pp_stage(&c, l * P / L, &first, &last, err, sizeof err), 0);
                ck_assert(first <= l && l < last);
            }
        }
    small_config(&c, 6, 3);
    snprintf(c.pp_layers, sizeof c.pp_layers, "1,3,2");
    ck_assert_int_eq(config_pp_stage(&c, 1, &first, &last, err, sizeof err), 0);
    ck_assert_int_eq(first, 1);
    ck_assert_int_eq(last, 4);
    const char *bad[] = {"1,3", "1,3,3", "0,3,3", "1,x,2", "1,,5", "6"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(c.pp_layers, sizeof c.pp_layers, "%s", bad[i]);
        ck_assert_msg(config_pp_stage(&c, 0, &first, &last, err, sizeof err) == -1, "%s", bad[i]);
        ck_assert_msg(strstr(err, "dist.pp_layers") != NULL, "%s: %s", bad[i], err);
    }
    small_config(&c, 2, 3); /* more stages than layers */
    ck_assert_int_eq(config_pp_stage(&c, 0, &first, &last, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.n_layer") != NULL, "%s", err);
}
END_TEST

START_TEST(test_stage_tables) {
    Config c;
    small_config(&c, 5, 3);
    ParamTable whole, st[3];
    params_table_build(&whole, &c);
    size_t total = 0;
    int tensors = 0;
    char err[256];
    for (int s = 0; s < 3; s++) {
        int first, last;
        ck_assert_int_eq(config_pp_stage(&c, s, &first, &last, err, sizeof err), 0);
        params_table_build_stage(&st[s], &c, 1, 1, first, last);
        total += st[s].total, tensors += st[s].n;
        ck_assert_int_eq(params_find(&st[s], "tok_emb") >= 0, s == 0);
        ck_assert_int_eq(params_find(&st[s], "head") >= 0, s == 2);
        for (int i = 0; i < st[s].n; i++) { /* in the whole model's order, with its shapes */
            const int j = params_find(&whole, st[s].t[i].name);
            ck_assert_int_ge(j, 0);
            ck_assert_int_eq(whole.t[j].numel, st[s].t[i].numel);
            ck_assert(st[s].t[i].layer < 0 ||
                      (st[s].t[i].layer >= first && st[s].t[i].layer < last));
        }
    }
    ck_assert_int_eq(tensors, whole.n);
    ck_assert_uint_eq(total, whole.total);
    for (int s = 0; s < 3; s++) params_table_free(&st[s]);
    params_table_free(&whole);

    /* the memory of the last stage under GPipe: 4 micro-batches' tables */
    c.accum = 4, c.pp_schedule = DIST_PP_GPIPE;
    MemoryBreakdown mb;
    model_memory_rank(&c, 2, 8, 1, 3, 2, &mb);
    ck_assert_int_eq(mb.held, 4);
    int first, last;
    ck_assert_int_eq(config_pp_stage(&c, 2, &first, &last, err, sizeof err), 0);
    ActTable t;
    acts_table_init(&t);
    model_acts_table_stage(&t, &c, 2, 8, 1, first, last, NULL);
    const size_t bytes = acts_layout(&t);
    acts_table_free(&t);
    ck_assert_uint_eq(4 * (mb.total_words - mb.params - mb.grads - mb.adam) + mb.pad_bytes,
                      4 * bytes);
    c.pp_schedule = DIST_PP_1F1B; /* the last stage holds one */
    model_memory_rank(&c, 2, 8, 1, 3, 2, &mb);
    ck_assert_int_eq(mb.held, 1);
}
END_TEST

/* The grid with a pipeline axis (dist_grid.c): every group's members, as world ranks, are the
 * ranks that share the group's colour, in member order, and the stages are blocks of S. */
START_TEST(test_grid) {
    const int axes[][4] = {{2, 1, 1, 2}, {8, 2, 2, 2}, {8, 1, 2, 4}, {12, 2, 1, 3}, {16, 2, 2, 2}};
    for (size_t a = 0; a < sizeof axes / sizeof axes[0]; a++) {
        const int W = axes[a][0];
        Dist *d = (Dist *)calloc_check((size_t)W, sizeof(Dist));
        char err[256];
        for (int r = 0; r < W; r++)
            ck_assert_int_eq(dist_grid_set(&d[r], W, r,
                                           (DistAxes){axes[a][1], axes[a][2], axes[a][3]}, err,
                                           sizeof err),
                             0);
        const int S = W / axes[a][3];
        for (int r = 0; r < W; r++) {
            ck_assert_int_eq(d[r].pp_rank, r / S);
            ck_assert_int_eq(dist_group_size(&d[r], DIST_STAGE), S);
            for (int g = 0; g < DIST_GROUPS; g++) {
                const int n = dist_group_size(&d[r], (DistGroup)g);
                for (int p = 0; p < n; p++) { /* member p agrees that it is member p */
                    const int q = dist_group_world_rank(&d[r], (DistGroup)g, p);
                    ck_assert_int_eq(dist_group_rank(&d[q], (DistGroup)g), p);
                    ck_assert_int_eq(dist_group_colour(&d[q], (DistGroup)g),
                                     dist_group_colour(&d[r], (DistGroup)g));
                    if (g != DIST_PP && g != DIST_WORLD) ck_assert_int_eq(q / S, r / S);
                }
                int same = 0; /* and nobody else has its colour */
                for (int q = 0; q < W; q++)
                    same += dist_group_colour(&d[q], (DistGroup)g) ==
                            dist_group_colour(&d[r], (DistGroup)g);
                ck_assert_int_eq(same, n);
            }
        }
        free(d);
    }
    Dist d;
    char err[256];
    ck_assert_int_eq(dist_grid_set(&d, 6, 0, (DistAxes){1, 1, 4}, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "dist.pp=4") != NULL, "%s", err);
    ck_assert_int_eq(dist_grid_set(&d, 6, 0, (DistAxes){4, 1, 2}, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "pipeline stage") != NULL, "%s", err);
}
END_TEST

static Suite *pipe_suite(void) {
    Suite *s = suite_create("pipe");
    TCase *tc = tcase_create("pipe");
    tcase_add_test(tc, test_schedules);
    tcase_add_test(tc, test_bubble);
    tcase_add_test(tc, test_unequal_stages);
    tcase_add_test(tc, test_stages);
    tcase_add_test(tc, test_stage_tables);
    tcase_add_test(tc, test_grid);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(pipe_suite)
