/*
 * bench_layout.c: `moe bench --layout` (bench.h): the training step of each config across the
 * processes of an mpirun job, in the grid its settings give (dist.tp, dist.ep, dist.pp,
 * dist.zero, from --set), timed in one process per rank rather than in forked children (a
 * process that has started MPI may not fork), on random tokens.
 *
 * A step is the training loop's: every reader's share of the batch forward and backward (the
 * tensor-parallel ranks of a replica read the same sequences; a pipeline stage runs its
 * schedule's train.accum micro-batches of them, pipe.h), the gradients' sums started in the
 * backward (dist.overlap), the norm, the update. Each step starts after a barrier, so the
 * time of a step is its slowest process's. Reported by the first process: the median step, the
 * batch's tokens a second, the engine's table of the largest process and the largest peak
 * resident memory over the timed steps, and what process 0 sent a step by what for, beside
 * the planner's count (model/traffic.h).
 */
#include "measure/bench_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/util.h"
#include "model/memory.h"
#include "model/pipe.h"
#include "model/model.h"
#include "model/traffic.h"
#include "parallel/dist.h"

/* What one config's measurement gives the report. */
typedef struct {
    double step_s, tokens_s, table_mib, peak_mib;
    double sent[DIST_PURPOSES], planned[DIST_PURPOSES];
} LayoutResult;

/* c's settings from the preset name, then each of sets (key=value), checked (with world
 * processes: 0, the grid's axes alone, before the grid is built); 0, or -1 with err. */
static int layout_config(Config *c, int *B, int *T, const char *name, const char *const *sets,
                         int n_sets, int world, char *err, int errlen) {
    if (bench_config(c, B, T, name, err, errlen) != 0) return -1;
    for (int i = 0; i < n_sets; i++)
        if (config_set(c, sets[i], err, errlen) != 0) return -1;
    *B = c->batch;
    if (world == 0) return 0;
    if (config_validate(c, err, errlen) != 0) return -1;
    return config_check_dist(c, world, err, errlen);
}

/* The timed steps of model m on this reader's tokens; their median into r->step_s and the
 * bytes a step into r->sent. */
static void time_steps(Model *m, Dist *d, const BenchOptions *o, const int *in, const int *tg,
                       int B, int T, LayoutResult *r) {
    const Config *c = &m->cfg;
    StepCtx ctx = {.training = 1, .sync_in_backward = c->overlap};
    double *times = (double *)malloc_check((size_t)o->steps * sizeof(double));
    DistTally before = dist_tally(d);
    for (int s = 0; s < o->warmup + o->steps; s++) {
        if (s == o->warmup) {
            before = dist_tally(d);
            resident_peak_reset();
        }
        dist_barrier(d);
        const double t0 = now_seconds();
        const float scale = 1.0f / (float)dist_group_size(d, DIST_STAGE);
        if (m->pipe) { /* a pipeline stage: train.accum micro-batches of these tokens */
            pipe_step(m, in, tg, 0, B, T, scale / (float)c->accum, &ctx, c->overlap);
        } else {
            model_forward(m, in, tg, B, T, &ctx);
            model_backward(m, scale, &ctx);
        }
        model_sync_grads(m);
        const float norm = model_grad_norm(m);
        model_adamw_step(m, c->lr, c->clip > 0.0f && norm > c->clip ? c->clip / norm : 1.0f);
        m->be->sync(m->be);
        dist_barrier(d);
        if (!isfinite(norm)) moe_fatal("bench --layout: step %d: a gradient norm of %g", s, norm);
        if (s >= o->warmup) times[s - o->warmup] = now_seconds() - t0;
    }
    for (int p = 0; p < DIST_PURPOSES; p++)
        r->sent[p] = (double)(d->by[p].bytes_sent - before.by[p].bytes_sent) / o->steps;
    r->step_s = bench_median(times, o->steps);
    free(times);
}

/* One config over the job's processes into r (every process takes part). */
static void measure_layout(const Config *c, int B, int T, Dist *d, const BenchOptions *o,
                           LayoutResult *r) {
    const int readers = dist_group_size(d, DIST_STAGE) / d->tp, Bl = B / readers;
    const size_t N = (size_t)B * T;
    int *in = (int *)malloc_check(N * sizeof(int)), *tg = (int *)malloc_check(N * sizeof(int));
    Rng rng; /* the same tokens on every process; each reader takes its sequences */
    rng_seed(&rng, 4242);
    for (size_t i = 0; i < N; i++) {
        in[i] = (int)rng_below(&rng, (uint64_t)c->vocab);
        tg[i] = (int)rng_below(&rng, (uint64_t)c->vocab);
    }
    const size_t mine = (size_t)(dist_group_rank(d, DIST_STAGE) / d->tp) * Bl * T;
    Model m;
    model_init_dist(&m, c, Bl, T, d);
    if (d->pp > 1) pipe_init(&m);
    time_steps(&m, d, o, in + mine, tg + mine, Bl, T, r);
    if (m.pipe) pipe_free(&m);
    model_free(&m);
    free(in);
    free(tg);
    double *peaks = (double *)calloc_check((size_t)d->world, sizeof(double));
    peaks[d->rank] = resident_peak_mib();
    dist_allreduce_sum_d(d, DIST_WORLD, peaks, (size_t)d->world);
    r->peak_mib = 0.0;
    for (int p = 0; p < d->world; p++) r->peak_mib = fmax(r->peak_mib, peaks[p]);
    free(peaks);
    MemoryBreakdown mb;
    model_memory_process(c, Bl, T, d->ep, d->world, &mb);
    r->table_mib = (4.0 * (double)mb.total_words + (double)mb.pad_bytes) / (1024.0 * 1024.0);
    r->tokens_s = (double)B * T / r->step_s;
    uint64_t planned[DIST_PURPOSES];
    model_traffic_step(c, d, planned);
    for (int p = 0; p < DIST_PURPOSES; p++) r->planned[p] = (double)planned[p];
}

static void report_row(FILE *out, const char *name, const Config *c, const Dist *d,
                       const LayoutResult *r) {
    char grid[64];
    snprintf(grid, sizeof grid, "%d.%d.%d.%d z%d", d->tp, d->ep, d->dp, d->pp, c->zero);
    fprintf(out, "%-12s %-12s %9.4f %10.0f %9.1f %9.1f %12.0f %12.0f %12.0f %12.0f %12.0f  %s\n",
            name, grid, r->step_s, r->tokens_s, r->table_mib, r->peak_mib, r->sent[DIST_FOR_GRADS],
            r->sent[DIST_FOR_WEIGHTS], r->sent[DIST_FOR_TP], r->sent[DIST_FOR_PIPE],
            r->sent[DIST_FOR_EXPERTS],
            r->sent[DIST_FOR_GRADS] == r->planned[DIST_FOR_GRADS] &&
                    r->sent[DIST_FOR_WEIGHTS] == r->planned[DIST_FOR_WEIGHTS] &&
                    r->sent[DIST_FOR_TP] == r->planned[DIST_FOR_TP] &&
                    r->sent[DIST_FOR_PIPE] == r->planned[DIST_FOR_PIPE]
                ? "the same"
                : "DIFFERS");
}

int bench_layout_run(const BenchOptions *o, const char *const *sets, int n_sets, FILE *out,
                     char *err, int errlen) {
    static const char *const refs[] = {"tiny", "tiny-dense", "small", "small-dense"};
    const int n = o->n_configs ? o->n_configs : 4;
    Config c;
    int B, T;
    if (layout_config(&c, &B, &T, o->n_configs ? o->configs[0] : refs[0], sets, n_sets, 0, err,
                      errlen) != 0)
        return -1;
    Dist d;
    if (dist_init(&d, NULL, NULL, (DistAxes){.tp = c.tp, .ep = c.ep, .pp = c.pp}, c.collectives,
                  c.timeout, NULL, err, errlen) != 0)
        return -1;
    backend_set_threads(o->threads);
    if (d.rank == 0)
        fprintf(out, "%-12s %-12s %9s %10s %9s %9s %12s %12s %12s %12s %12s  %s\n", "config",
                "tp.ep.dp.pp", "step (s)", "tokens/s", "table MiB", "peak MiB", "grad B",
                "weight B", "tp B", "pp B", "expert B", "moe plan's count");
    for (int i = 0; i < n; i++) {
        const char *name = o->n_configs ? o->configs[i] : refs[i];
        if (layout_config(&c, &B, &T, name, sets, n_sets, d.world, err, errlen) != 0) {
            dist_finalize(&d);
            return -1;
        }
        LayoutResult r;
        measure_layout(&c, B, T, &d, o, &r);
        if (d.rank == 0) report_row(out, name, &c, &d, &r);
    }
    dist_finalize(&d);
    return 0;
}
