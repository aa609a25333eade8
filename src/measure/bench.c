/*
 * bench.c: the training-step benchmark. See bench.h.
 *
 * The parent checks the options, forks one child for the sgemm measurement and one per
 * config, gathers their results and writes the report. It never calls into OpenMP or
 * OpenBLAS itself: only arithmetic on the config (parameter counts, FLOPs, memory formula).
 * Each child sets the threads, measures, writes one plain struct into a pipe and _exits.
 *
 * Step time is the median over the timed steps (robust to a step disturbed by other work on
 * the machine); the per-op profile is the mean over the same steps, as a share of the mean
 * step time, so that its rows add up to 100%.
 *
 * With --rounds R the whole measurement (the sgemm, then every config) runs R times in turn,
 * so that a machine whose speed drifts (shared with other work) slows every config alike.
 * Each figure is then the median over the rounds of that round's figure: a config's step
 * time, its fraction of the sgemm measured in the same round, and its ratio to its twin's
 * step in the same round. The profile is the mean over the rounds.
 */
#include "measure/bench_report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "model/memory.h"
#include "model/model.h"
#include "model/params.h"
#include "model/profile.h"
#include "train/train.h"

typedef void (*ChildFn)(void *result, const void *arg);

/* Run fn(result, arg) in a forked child and copy its result (size bytes) back. */
static void in_child(ChildFn fn, const void *arg, void *result, size_t size, const char *what) {
    int fd[2];
    if (pipe(fd) != 0) moe_fatal("bench: pipe: %s", strerror(errno));
    fflush(NULL); /* or buffered output would be written twice */
    pid_t pid = fork();
    if (pid < 0) moe_fatal("bench: fork: %s", strerror(errno));
    if (pid == 0) {
        close(fd[0]);
        memset(result, 0, size);
        fn(result, arg);
        const char *p = (const char *)result;
        for (size_t left = size; left > 0;) {
            ssize_t w = write(fd[1], p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) _exit(MOE_EXIT_FATAL);
            p += w;
            left -= (size_t)w;
        }
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd[0], (char *)result + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) moe_fatal("bench: waitpid: %s", strerror(errno));
    if (WIFSIGNALED(status))
        moe_fatal("bench: the measurement of %s was killed by signal %d (out of memory?)", what,
                  WTERMSIG(status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != size)
        moe_fatal("bench: the measurement of %s failed (exit status %d); see the messages above",
                  what, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n values (sorts them); bench_report.h. */
double bench_median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* C (n, n) = A B with the backend's own product (cpu: OpenBLAS sgemm): 2 n^3 FLOPs per
 * product. One warm-up product (the thread pool starts, pages fault in), then
 * BENCH_SGEMM_REPS timed ones. */
static void sgemm_child(void *result, const void *arg) {
    const BenchOptions *o = (const BenchOptions *)arg;
    SgemmResult *r = (SgemmResult *)result;
    r->threads = backend_set_threads(o->threads);
    /* the backend of the steps opens here, in a child: a GPU that is not there is a message
     * for the parent, and CUDA never starts in the parent, which forks the other children */
    const Backend *be =
        backend_get(o->device ? o->device : "cpu", o->precision, r->err, sizeof r->err);
    if (!be) return;
    r->ok = 1;
#if MOE_HAVE_CUDA
    if (!be->host_memory && backend_cuda_describe())
        snprintf(r->gpu, sizeof r->gpu, "%s", backend_cuda_describe());
#endif
    /* the CPU backends' yardstick is OpenBLAS sgemm (cpu-fenced's too); a GPU's, cuBLAS */
    if (strcmp(be->name, "cuda") != 0) be = &backend_cpu;
    const int n = be == &backend_cpu ? BENCH_SGEMM_N : BENCH_GPU_GEMM_N;
    r->n = n;
    double t[BENCH_SGEMM_REPS];
    be->gemm_seconds(be, n, BENCH_SGEMM_REPS, t);
    const double flops = 2.0 * n * (double)n * n, med = bench_median(t, BENCH_SGEMM_REPS);
    double best = t[0];
    for (int i = 1; i < BENCH_SGEMM_REPS; i++) best = t[i] < best ? t[i] : best;
    r->gflops_best = flops / best / 1e9;
    r->gflops_median = flops / med / 1e9;
}

typedef struct {
    const BenchOptions *o;
    const char *name;
    Config c;
    int B, T;
} StepArg;

/* Warm-up, then the timed training steps of one config on random tokens. */
static void step_child(void *result, const void *arg) {
    const StepArg *a = (const StepArg *)arg;
    StepResult *r = (StepResult *)result;
    const Config *c = &a->c;
    const int B = a->B, T = a->T, N = B * T, steps = a->o->steps, warmup = a->o->warmup;
    r->threads = backend_set_threads(a->o->threads);
    /* --device, and --reference-attention: that backend with the loop reference attention of
     * cpu-ref */
    char err[512];
    const Backend *chosen =
        backend_get(a->o->device ? a->o->device : "cpu", a->o->precision, err, sizeof err);
    if (!chosen) moe_fatal("bench: %s", err);
    Backend be = *chosen;
    if (a->o->reference_attention) {
        be.attention_forward = backend_cpu_ref.attention_forward;
        be.attention_backward = backend_cpu_ref.attention_backward;
    }
    Model m;
    model_init_backend(&m, c, B, T, NULL, &be);
    prof_backend = &be; /* a GPU's ops are timed done, not queued */
    int *in = (int *)malloc_check((size_t)N * sizeof(int));
    int *tg = (int *)malloc_check((size_t)N * sizeof(int));
    Rng rng;
    rng_seed(&rng, 4242);
    for (int i = 0; i < N; i++) {
        in[i] = (int)rng_below(&rng, (uint64_t)c->vocab);
        tg[i] = (int)rng_below(&rng, (uint64_t)c->vocab);
    }
    double *times = (double *)malloc_check((size_t)steps * sizeof(double));
    double fwd = 0.0, bwd = 0.0, sum = 0.0;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            prof_reset();
            prof_enabled = a->o->profile;
        }
        /* the gradients are zero here: model_init allocates them zeroed, and each AdamW step
         * clears them in the pass that reads them (model.h), as in training */
        double t0 = now_seconds();
        float obj = model_forward(&m, in, tg, B, T, NULL);
        double t2 = now_seconds();
        model_backward(&m, 1.0f, NULL);
        be.sync(&be); /* a GPU's work is queued: time it done (on the CPU, nothing to wait for) */
        double t3 = now_seconds();
        float norm = model_grad_norm(&m);
        float scale = c->clip > 0.0f && norm > c->clip ? c->clip / norm : 1.0f;
        model_adamw_step(&m, c->lr, scale);
        be.sync(&be);
        double t4 = now_seconds();
        if (!isfinite(obj) || !isfinite(norm))
            moe_fatal("bench: %s: step %d gave a loss of %g and a gradient norm of %g", a->name, s,
                      (double)obj, (double)norm);
        if (s < warmup) continue;
        times[s - warmup] = t4 - t0;
        sum += t4 - t0;
        fwd += t2 - t0;
        bwd += t3 - t2;
    }
    prof_enabled = 0;
    r->step_mean = sum / steps;
    r->fwd_mean = fwd / steps;
    r->bwd_mean = bwd / steps;
    r->step_median = bench_median(times, steps); /* sorts times */
    r->step_min = times[0];
    r->step_max = times[steps - 1];
    for (int op = 0; op < PROF_COUNT; op++) {
        r->op_fwd[op] = prof_total.fwd[op] / steps;
        r->op_bwd[op] = prof_total.bwd[op] / steps;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r->peak_rss_kib = ru.ru_maxrss;
    /* a GPU's memory: what its backend allocated (every buffer of the model, and the ops'
     * scratch), the counterpart of the analytical formula; cuBLAS's own workspace is not in it */
    if (strcmp(be.name, "cuda") == 0) r->device_mib = backend_bytes_allocated / (1024.0 * 1024.0);
    free(times);
    free(in);
    free(tg);
    model_free(&m);
}

/* ---- results and reports ------------------------------------------------------------------ */

/* ---- the rounds combined ------------------------------------------------------------------ */

static SgemmResult combine_sgemm(const SgemmResult *sg, int R) {
    double best[BENCH_MAX_ROUNDS], med[BENCH_MAX_ROUNDS];
    SgemmResult out = sg[0];
    out.gflops_low = out.gflops_high = sg[0].gflops_best;
    for (int r = 0; r < R; r++) {
        best[r] = sg[r].gflops_best;
        med[r] = sg[r].gflops_median;
        out.gflops_low = fmin(out.gflops_low, best[r]);
        out.gflops_high = fmax(out.gflops_high, best[r]);
    }
    out.gflops_best = bench_median(best, R);
    out.gflops_median = bench_median(med, R);
    return out;
}

static int row_named(const Row *rows, int n, const char *name) {
    for (int j = 0; name && j < n; j++)
        if (strcmp(rows[j].ref->name, name) == 0) return j;
    return -1;
}

/* Row i from its R rounds (step[r * n + i]): the medians over the rounds of its step time,
 * its fraction of the same round's sgemm and its ratios to the same round's twin and
 * fewer-experts config; the min and max over all rounds; the means of the rest. */
static void combine_rows(Row *rows, int n, int i, const StepResult *step, const SgemmResult *sg,
                         int R) {
    Row *w = &rows[i];
    const double tokens = (double)w->B * w->T;
    const int twin = row_named(rows, n, w->ref->twin), fewer = row_named(rows, n, w->ref->fewer);
    double med[BENCH_MAX_ROUNDS], frac[BENCH_MAX_ROUNDS], dense[BENCH_MAX_ROUNDS],
        few[BENCH_MAX_ROUNDS];
    StepResult *c = &w->r;
    *c = step[i];
    for (int op = 0; op < PROF_COUNT; op++) c->op_fwd[op] = c->op_bwd[op] = 0.0;
    c->step_mean = c->fwd_mean = c->bwd_mean = 0.0;
    for (int r = 0; r < R; r++) {
        const StepResult *s = &step[(size_t)r * n + i];
        med[r] = s->step_median;
        frac[r] = bench_gflops(w->flops_per_token, tokens, s->step_median) / sg[r].gflops_best;
        if (twin >= 0) dense[r] = s->step_median / step[(size_t)r * n + twin].step_median;
        if (fewer >= 0) few[r] = step[(size_t)r * n + fewer].step_median / s->step_median;
        c->step_min = fmin(c->step_min, s->step_min);
        c->step_max = fmax(c->step_max, s->step_max);
        c->peak_rss_kib = s->peak_rss_kib > c->peak_rss_kib ? s->peak_rss_kib : c->peak_rss_kib;
        c->step_mean += s->step_mean / R;
        c->fwd_mean += s->fwd_mean / R;
        c->bwd_mean += s->bwd_mean / R;
        for (int op = 0; op < PROF_COUNT; op++) {
            c->op_fwd[op] += s->op_fwd[op] / R;
            c->op_bwd[op] += s->op_bwd[op] / R;
        }
    }
    c->step_median = bench_median(med, R);
    w->tokens_per_s = tokens / c->step_median;
    w->gflops = bench_gflops(w->flops_per_token, tokens, c->step_median);
    w->sgemm_frac = bench_median(frac, R);
    w->moe_over_dense = twin >= 0 ? bench_median(dense, R) : NAN;
    w->over_fewer = fewer >= 0 ? bench_median(few, R) : NAN;
}

/* The CPU model, from /proc/cpuinfo (or "unknown CPU"). */
static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon += 1 + strspn(colon + 1, " \t");
        colon[strcspn(colon, "\r\n")] = '\0';
        snprintf(buf, n, "%s", colon);
        break;
    }
    fclose(f);
}

/* A row's figures from its config alone: parameters, FLOPs and the memory formula. */
static void count_row(Row *w) {
    ParamTable pt;
    params_table_build(&pt, &w->c);
    w->params_total = params_count_total(&pt);
    w->params_active = params_count_active(&pt, &w->c);
    params_table_free(&pt);
    w->flops_per_token = model_flops_by_op(&w->c, w->T, w->op_flops);
    model_memory_floats(&w->c, w->B, w->T, &w->mem);
}

/* R rounds, each the sgemm then every row's steps, in children: sg_r (R) and step_r (R, n)
 * filled. -1 with err set when the backend did not open. */
static int run_rounds(const BenchOptions *o, const Row *rows, int n, int R, SgemmResult *sg_r,
                      StepResult *step_r, char *err, int errlen) {
    for (int r = 0; r < R; r++) {
        char round[48] = "";
        if (R > 1) snprintf(round, sizeof round, "round %d of %d: ", r + 1, R);
        const int on_gpu = o->device && strcmp(o->device, "cuda") == 0;
        const int gn = on_gpu ? BENCH_GPU_GEMM_N : BENCH_SGEMM_N;
        fprintf(stderr, "bench: %s%s %dx%dx%d ...\n", round, on_gpu ? "cuBLAS" : "sgemm", gn, gn,
                gn);
        in_child(sgemm_child, o, &sg_r[r], sizeof sg_r[r], "sgemm");
        if (!sg_r[r].ok)
            return set_error(err, errlen, "--device %s: %s", o->device ? o->device : "cpu",
                             sg_r[r].err);
        for (int i = 0; i < n; i++) {
            const Row *w = &rows[i];
            fprintf(stderr, "bench: %s%s: %d warm-up + %d timed steps of %d x %d tokens ...\n",
                    round, w->ref->name, o->warmup, o->steps, w->B, w->T);
            StepArg arg = {.o = o, .name = w->ref->name, .c = w->c, .B = w->B, .T = w->T};
            StepResult *res = &step_r[(size_t)r * n + i];
            in_child(step_child, &arg, res, sizeof *res, w->ref->name);
            fprintf(stderr, "bench: %s%s: %.1f ms per step\n", round, w->ref->name,
                    1e3 * res->step_median);
        }
    }
    return 0;
}

int bench_run(const BenchOptions *o, FILE *out, char *err, int errlen) {
    const char *names[BENCH_MAX_CONFIGS];
    int n = 0;
    if (o->n_configs > BENCH_MAX_CONFIGS)
        return set_error(err, errlen, "at most %d configs per run", BENCH_MAX_CONFIGS);
    if (o->n_configs > 0)
        for (int i = 0; i < o->n_configs; i++) names[n++] = o->configs[i];
    else
        n = bench_listed_refs(names);
    if (o->steps < 1 || o->warmup < 0 || o->threads < 0)
        return set_error(err, errlen, "steps must be >= 1, warmup and threads >= 0");

    Row *rows = (Row *)calloc_check((size_t)n, sizeof(Row));
    for (int i = 0; i < n; i++) {
        Row *w = &rows[i];
        if (bench_config(&w->c, &w->B, &w->T, names[i], err, errlen) != 0) {
            free(rows);
            return -1;
        }
        w->ref = bench_find_ref(names[i]);
    }
    FILE *csv = NULL;
    if (o->profile && o->profile_out) {
        csv = fopen(o->profile_out, "w");
        if (!csv) {
            int e = errno;
            free(rows);
            return set_error(err, errlen,
                             "cannot write the profile CSV %s: %s; pass --profile-out with a "
                             "path in an existing, writable folder",
                             o->profile_out, strerror(e));
        }
    }

    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 0; i < n; i++) count_row(&rows[i]);
    const int R = o->rounds > 1 ? o->rounds : 1;
    SgemmResult *sg_r = (SgemmResult *)calloc_check((size_t)R, sizeof(SgemmResult));
    StepResult *step_r = (StepResult *)calloc_check((size_t)R * n, sizeof(StepResult));
    if (run_rounds(o, rows, n, R, sg_r, step_r, err, errlen) != 0) {
        free(sg_r), free(step_r), free(rows);
        if (csv) fclose(csv);
        return -1;
    }
    SgemmResult sg = combine_sgemm(sg_r, R);
    for (int i = 0; i < n; i++) combine_rows(rows, n, i, step_r, sg_r, R);
    free(sg_r);
    free(step_r);

    if (o->json)
        bench_print_json(out, o, cpu, cores, &sg, rows, n);
    else
        bench_print_text(out, o, cpu, cores, &sg, rows, n);
    if (csv) {
        bench_write_profile_csv(csv, rows, n);
        if (fclose(csv) != 0) moe_fatal("bench: writing %s failed", o->profile_out);
        if (!o->json) fprintf(out, "\nwrote %s\n", o->profile_out);
    }
    free(rows);
    return 0;
}
