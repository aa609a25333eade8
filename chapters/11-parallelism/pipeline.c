/*
 * Chapter 11: a pipeline's schedules, simulated, and a run's stages against them.
 *
 *   build/chapters/11-parallelism/pipeline              the schedules of 4 stages and 8
 *                                                       micro-batches, on stages of equal cost
 *                                                       and with a last stage three times the
 *                                                       others (the head's)
 *   build/chapters/11-parallelism/pipeline --run DIR    a pipeline run (dist.pp): each stage's
 *                                                       mean forward and backward from its
 *                                                       pipe.csv, the schedule simulated with
 *                                                       them, against the idle share measured
 *
 * A schedule is a list of actions for each stage (pipe_schedule); pipe_simulate_stages runs
 * every stage's list with its own forward and backward times, each action as early as its
 * stage and the neighbour it waits for allow. The idle share of a stage is the step's span less
 * its actions, over the span: (P - 1) / (M + P - 1) for equal stages, more when one stage is
 * slower, since the others wait for it at every micro-batch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"

#define MAX_STAGES 64

/* The idle share of each stage of a simulated step (spans of 2 M actions each) into idle (P);
 * returns their mean. */
static double idle_shares(int P, int M, const double *start, const double *end, double span,
                          double *idle) {
    double mean = 0.0;
    for (int s = 0; s < P; s++) {
        double busy = 0.0;
        for (int i = 0; i < 2 * M; i++)
            busy += end[(size_t)s * 2 * M + i] - start[(size_t)s * 2 * M + i];
        idle[s] = 1.0 - busy / span;
        mean += idle[s] / P;
    }
    return mean;
}

/* One schedule of P stages and M micro-batches with stage times tf, tb: a line a stage (what it
 * holds, its idle share) and the mean against the equal-stage formula. */
static void show(int schedule, int P, int M, const double *tf, const double *tb, const char *unit) {
    double *start = (double *)malloc_check((size_t)P * 2 * M * sizeof(double));
    double *end = (double *)malloc_check((size_t)P * 2 * M * sizeof(double));
    PipeAction *a = (PipeAction *)malloc_check((size_t)2 * M * sizeof(PipeAction));
    double idle[MAX_STAGES];
    const double span = pipe_simulate_stages(schedule, P, M, tf, tb, start, end);
    const double mean = idle_shares(P, M, start, end, span, idle);
    for (int s = 0; s < P; s++) {
        pipe_schedule(schedule, P, M, s, a);
        printf("    stage %d: forward %.2f, backward %.2f; holds %d micro-batch(es), idle %.3f\n",
               s, tf[s], tb[s], pipe_held(a, 2 * M), idle[s]);
    }
    printf("    the step %.2f %s, mean idle share %.3f; (P - 1) / (M + P - 1) = %.3f\n", span, unit,
           mean, (double)(P - 1) / (M + P - 1));
    free(start), free(end), free(a);
}

static void schedules(void) {
    const int P = 4, M = 8;
    double tf[4] = {1, 1, 1, 1}, tb[4] = {2, 2, 2, 2};
    const char *names[2] = {"gpipe", "1f1b"};
    for (int k = 0; k < 2; k++) {
        printf("%s, %d stages, %d micro-batches, equal stages:\n", names[k], P, M);
        show(k, P, M, tf, tb, "units");
    }
    tf[P - 1] = 3, tb[P - 1] = 6; /* the last stage three times the others: the head's */
    for (int k = 0; k < 2; k++) {
        printf("%s, %d stages, %d micro-batches, the last stage three times the others:\n",
               names[k], P, M);
        show(k, P, M, tf, tb, "units");
    }
}

/* A run's stages: its settings (config.txt) and each stage's mean forward and backward from
 * pipe.csv over the steps after the second, and each stage's measured idle share. */
static void run(const char *dir) {
    char path[MOE_PATH_MAX + 32], err[1024];
    Config c;
    config_defaults(&c);
    snprintf(path, sizeof path, "%s/config.txt", dir);
    if (config_load_file(&c, path, err, sizeof err) != 0) moe_input_error("--run: %s", err);
    const int P = c.pp, M = c.accum;
    if (P < 2 || P > MAX_STAGES)
        moe_input_error("--run %s: dist.pp=%d: not a pipeline run of 2 to %d stages", dir, P,
                        MAX_STAGES);
    snprintf(path, sizeof path, "%s/pipe.csv", dir);
    FILE *f = fopen(path, "r");
    if (!f) moe_input_error("--run %s: no %s: the run has no pipeline records", dir, path);
    double t[2][MAX_STAGES] = {{0}}, busy[MAX_STAGES] = {0}, spans[MAX_STAGES] = {0};
    int n[2][MAX_STAGES] = {{0}}, steps[MAX_STAGES] = {0}, last_step[MAX_STAGES];
    char line[256], op;
    int step, s, i, micro;
    double t0, t1, span;
    for (int k = 0; k < MAX_STAGES; k++) last_step[k] = -1;
    if (!fgets(line, sizeof line, f)) moe_input_error("--run %s: %s is empty", dir, path);
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%d,%d,%d,%c,%d,%lf,%lf,%lf", &step, &s, &i, &op, &micro, &t0, &t1,
                   &span) != 8 ||
            s < 0 || s >= P || (op != 'F' && op != 'B'))
            moe_input_error("--run %s: %s: a line that is not a pipeline action: %s", dir, path,
                            line);
        if (step <= 2) continue; /* the first steps warm the caches */
        t[op == 'B'][s] += t1 - t0, n[op == 'B'][s]++, busy[s] += t1 - t0;
        if (step != last_step[s]) spans[s] += span, steps[s]++, last_step[s] = step;
    }
    fclose(f);
    double tf[MAX_STAGES], tb[MAX_STAGES], measured = 0.0;
    for (s = 0; s < P; s++) {
        if (!n[0][s] || !n[1][s])
            moe_input_error(
                "--run %s: stage %d has no actions after step 2 in %s: train more steps", dir, s,
                path);
        tf[s] = 1000.0 * t[0][s] / n[0][s], tb[s] = 1000.0 * t[1][s] / n[1][s];
        measured += (1.0 - busy[s] / spans[s]) / P;
    }
    printf("%s: dist.pp=%d, %s, %d micro-batches; a stage's mean forward and backward (ms), the "
           "schedule simulated with them:\n",
           dir, P, c.pp_schedule == DIST_PP_GPIPE ? "gpipe" : "1f1b", M);
    show(c.pp_schedule, P, M, tf, tb, "ms");
    printf("    measured: mean idle share %.3f\n", measured);
}

int main(int argc, char **argv) {
    if (argc == 1) {
        schedules();
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--run") == 0) {
        run(argv[2]);
        return 0;
    }
    fprintf(stderr, "usage: %s [--run RUN_DIR]\n", argv[0]);
    return 2;
}
