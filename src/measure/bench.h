/*
 * bench.h: how fast the CPU training step runs, measured against the machine's sgemm.
 *
 * `moe bench` times full training steps (zero grad, forward, backward, gradient norm, AdamW)
 * of reference models on random tokens and reports, per model: the median step time,
 * tokens/s, model FLOP/s (model_flops_per_token) and their fraction of what one large
 * OpenBLAS sgemm reaches on the same threads, the MoE step time over its dense twin's, and
 * the peak resident memory against the analytical memory of memory.h. With profiling, also
 * the time of every op (profile.h), forward and backward.
 *
 * On a machine shared with other work, --rounds R repeats the sgemm and every config R times
 * in turn and reports the medians, each ratio taken within its round (bench.c).
 *
 * Each measurement runs in a forked child process: peak RSS is then per model, and the
 * parent never starts an OpenMP or OpenBLAS thread pool (libgomp is not fork-safe once its
 * pool exists). Results come back through a pipe.
 *
 * Reference configs (byte vocabulary, T = 256, B = 8, SwiGLU; MoE: every block, E = 8,
 * top-2). Each dense twin has d_ff = 2 x the expert hidden size, so the dense FFN does the
 * FLOPs of the two experts a token visits:
 *   tiny         C 256, 4 layers, 4 heads, experts of hidden 512
 *   tiny-dense   C 256, 4 layers, 4 heads, d_ff 1024
 *   small        C 512, 4 layers, 8 heads, experts of hidden 1024
 *   small-dense  C 512, 4 layers, 8 heads, d_ff 2048
 *   test, test-dense  (not run by default) C 32, 2 layers, T 32, B 2, 4 experts of hidden
 *                     32 / d_ff 64: shapes small enough for the tests
 *   gpu-medium, gpu-medium-dense  (not run by default) C 2048, 8 layers, 16 heads, experts of
 *                     hidden 2048 / d_ff 4096, T 2048, B 8 (16k tokens a step): a GPU's size
 *
 * On a GPU (--device cuda) the yardstick is a cuBLAS product of BENCH_GPU_GEMM_N at the run's
 * precision (--precision), and the report adds the model FLOP/s as a fraction of the GPU's
 * datasheet peak for that precision (MFU) when the GPU is one it knows.
 */
#ifndef MOE_BENCH_H
#define MOE_BENCH_H

#include <stdio.h>

#include "config/config.h"

#define BENCH_MAX_CONFIGS 16
#define BENCH_SGEMM_N 2048    /* the square sgemm that measures the machine */
#define BENCH_GPU_GEMM_N 8192 /* the square cuBLAS product that measures a GPU */
#define BENCH_SGEMM_REPS 5    /* timed products after one warm-up; the best one is reported */
#define BENCH_MAX_ROUNDS 50
#define BENCH_MAX_BATCHES 8

typedef struct {
    int steps;               /* timed steps per config; the median is reported */
    int warmup;              /* untimed steps before them */
    int rounds;              /* the sgemm and every config, measured this many times in turn */
    int threads;             /* OpenMP and OpenBLAS threads; 0 = OpenMP's default */
    int json;                /* write one JSON object instead of the tables */
    int profile;             /* per-op times */
    int reference_attention; /* time the loop reference attention instead of the GEMM one */
    const char *device;      /* the backend the steps run on (train.device); NULL = cpu */
    int precision;           /* MOE_PRECISION_*: a GPU's products (train.precision) */
    const char *profile_out; /* CSV of the per-op times (with profile); NULL = none */
    int n_configs;           /* 0 = the four reference configs */
    const char *configs[BENCH_MAX_CONFIGS];
    /* --decode (bench_decode.c): the serving benchmark instead of the training step */
    int decode;
    int csv;       /* a CSV table instead of the text table */
    int n_batches; /* 0: batches 1, 4, 16, 64 */
    int batches[BENCH_MAX_BATCHES];
    int quant;   /* QUANT_*: the experts' format (infer/quant.h) */
    int offload; /* > 0: experts through a cache of this many */
    int n_ckpts; /* trained models to serve, besides configs */
    const char *ckpts[BENCH_MAX_CONFIGS];
} BenchOptions;

/* The reference config named name: the model in c (defaults for everything else), the
 * batch in B x T. Returns 0, or -1 with a message listing the names in err. */
int bench_config(Config *c, int *B, int *T, const char *name, char *err, int errlen);

/* The reference configs are also presets of `moe train --config NAME` (and of every command
 * whose --config names a settings file): the model's shape and the batch, over the settings c
 * holds. Returns 0, or -1 with a message that lists the names in err. */
int bench_preset_apply(Config *c, const char *name, char *err, int errlen);

/* The same settings as "key = value" lines (config_write's format) in text; -1 for an unknown
 * name. */
int bench_preset_text(const char *name, char *text, size_t len);

/* The names, separated by ", ", in out (truncated to len). */
void bench_preset_names(char *out, size_t len);

/* A table of the presets: name, d_model, layers, experts, top-k, parameters, batch, and what
 * each is for (moe info --presets). */
void bench_presets_print(FILE *f);

/* Run the benchmark and write the report to out. Returns 0, or -1 with a message in err on
 * bad options (an unknown config name, a profile CSV that cannot be written); nothing is
 * measured then. A child process that fails is an internal error (moe_fatal). */
int bench_run(const BenchOptions *o, FILE *out, char *err, int errlen);

/* `moe bench --decode`: decoding speed (bench_decode.c). For each batch size, each model in
 * turn (checkpoints, then configs; default the tiny MoE and its dense twin): a prefill of B
 * prompts of T / 2 tokens, warmup steps, then steps timed one by one (the median reported):
 * prefill and decode tokens/s, the distinct experts a step touches against the uniform
 * expectation, the weight bytes read per token, and the step against the memory bound (the
 * memory bandwidth measured in the same run: a copy within the backend's memory). A table, or
 * CSV, or one JSON object per row. --quant and --offload serve the experts so (infer/serve.h). Runs
 * in this process. Returns 0, or -1 with a message in err. */
int bench_decode_run(const BenchOptions *o, FILE *out, char *err, int errlen);

/* `moe bench --layout` under mpirun (bench_layout.c): each config (o->configs, or the four
 * reference configs) with the settings sets (key=value: dist.tp, dist.ep, dist.zero, ...)
 * trained o->warmup + o->steps steps across the job's processes; one row a config, from the
 * first process: the median step, tokens/s, the engine's table of the largest process, the
 * largest peak resident memory over the timed steps, and the bytes process 0 sent a step in
 * the gradients' sums, weight gathers, tensor-parallel collectives and expert exchanges, and
 * whether the first three are the planner's count. Returns 0, or -1 with a message in err
 * (a setting, a grid that does not fit the processes). */
int bench_layout_run(const BenchOptions *o, const char *const *sets, int n_sets, FILE *out,
                     char *err, int errlen);

#endif
