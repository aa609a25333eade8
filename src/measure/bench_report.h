/*
 * bench_report.h: what the parts of the benchmark share (bench_refs.c: the reference configs;
 * bench.c: the child processes, the measurement and the rounds; bench_report.c: the table, the
 * JSON and the profile CSV). Private to src/measure/: the rest of the engine sees bench.h only.
 */
#ifndef MOE_BENCH_REPORT_H
#define MOE_BENCH_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "measure/bench.h"
#include "model/memory.h"
#include "model/profile.h"

typedef struct {
    const char *name;
    const char *twin;  /* the dense twin of an MoE config, or NULL */
    const char *fewer; /* the same active compute with fewer experts (fine-grained), or NULL */
    int d_model, n_layer, n_head, d_ff, num_experts, d_expert, B, T;
    int listed; /* run when no --config is given */
    /* the attention's settings beyond multi-head attention of d_model / n_head channels a head
     * (config_write's lines), or NULL */
    const char *attention;
} RefConfig;

/* The median of n values (sorts x in place). */
double bench_median(double *x, int n);

/* GFLOP/s of work worth flops_per_token over tokens tokens, done in seconds. */
static inline double bench_gflops(double flops_per_token, double tokens, double seconds) {
    return flops_per_token * tokens / seconds / 1e9;
}

/* The reference configs (bench_refs.c): the one named name, or NULL; and the names of those run
 * when no --config is given, written to names (room for BENCH_MAX_CONFIGS), their count
 * returned. */
const RefConfig *bench_find_ref(const char *name);
int bench_listed_refs(const char **names);

typedef struct {
    int threads;
    int n;  /* the square product's size */
    int ok; /* the backend opened (the first child reports it; else err says why) */
    char err[512];
    char gpu[256]; /* a GPU's name, SMs and precision; "" on the CPU */
    double gflops_best, gflops_median;
    double gflops_low, gflops_high; /* over the rounds: the lowest and highest best */
} SgemmResult;

typedef struct {
    int threads;
    double step_median, step_min, step_max, step_mean; /* seconds */
    double fwd_mean, bwd_mean; /* seconds inside model_forward / model_backward */
    long peak_rss_kib;
    double device_mib; /* a GPU's memory the backend allocated (0 on the CPU backends) */
    double op_fwd[PROF_COUNT], op_bwd[PROF_COUNT]; /* seconds per step (with profile) */
} StepResult;

typedef struct {
    const RefConfig *ref;
    Config c;
    int B, T;
    size_t params_total, params_active;
    double flops_per_token;      /* model_flops_per_token: forward + backward matrix products */
    double op_flops[PROF_COUNT]; /* the same, by the op that runs them (model_flops_by_op) */
    MemoryBreakdown mem;
    StepResult r;
    double gflops, tokens_per_s, sgemm_frac;
    double moe_over_dense; /* step time over the dense twin's; NAN without one */
    double over_fewer;     /* tokens/s over the config with fewer experts; NAN without one */
} Row;

/* The report of n measured rows: the table (with the profile tables when asked), the JSON
 * object, and the per-op times as CSV. cpu and cores name the machine. */
void bench_print_text(FILE *out, const BenchOptions *o, const char *cpu, long cores,
                      const SgemmResult *sg, const Row *rows, int n);
void bench_print_json(FILE *out, const BenchOptions *o, const char *cpu, long cores,
                      const SgemmResult *sg, const Row *rows, int n);
void bench_write_profile_csv(FILE *f, const Row *rows, int n);

#endif
