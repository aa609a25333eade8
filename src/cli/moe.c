/*
 * moe: the command line.
 *
 *   moe train   [--config FILE|PRESET] [--set key=value]... [--out DIR] [--resume DIR]
 *               [--until STEP] [--init CKPT] [--allow-data-change] [--quiet]
 *               [--print-schedule]
 *   moe eval    --ckpt PATH [--set key=value]... [--batches N] [--logits FILE]
 *               [--quant int8|int4 | --offload SLOTS]
 *   moe sample  --ckpt PATH [--prompt TEXT | --prompts FILE] [--tokens N] [--temperature X]
 *               [--seed N] [--no-cache] [--quant int8|int4 | --offload SLOTS]
 *   moe export  --ckpt PATH --out FILE.safetensors | --format hf --out DIR
 *   moe import  --from FILE.safetensors | --format hf --from DIR  --out CKPT [--config FILE]
 *               [--set key=value]...
 *   moe upcycle --from DENSE_CKPT --out MOE_CKPT [--config FILE] [--set key=value]...
 *               [--noise X] [--drop-ratio R] [--split G] [--router-std S] [--seed N]
 *   moe info    --ckpt PATH | --keys | --presets
 *   moe corpus  [--from [NAME=]FILE...] [--tokenizer FILE] [--out DIR] [--seed N]
 *               [--val-frac X]
 *   moe synth   --out DIR [--domains N] [--tokens N] [--doc-len N] [--seed N]
 *   moe bench   [--config NAME]... [--steps N] [--warmup N] [--threads N] [--json]
 *               [--profile] [--profile-out FILE.csv] [--device NAME] [--precision P]
 *               [--reference-attention]
 *   moe doctor  RUN_DIR [--json] [--threshold NAME=VALUE]... | --thresholds   (doctor.c)
 *   moe compare RUN_DIR RUN_DIR... [--csv] [--plot FILE.png]                   (compare.c)
 *   moe plan    [--run NAME | --model NAME | --config FILE] [--cluster NAME] [--gpus N]
 *               [--set key=value]... [--search [--top N]] [--json | --csv] | --keys | --presets
 * (plan.c)
 *   moe tokenizer train --vocab N --from FILE... --out FILE [--pattern gpt2|llama3|qwen2]
 *   moe tokenizer encode|decode --tokenizer FILE [--docs]                  (tokenizer.c)
 *   moe help    [CMD]             (and moe CMD --help: each command's options, help.c)
 *   moe version                         (or moe --version: the commit and the build's features)
 *
 * Every option that takes a value takes it after a space or an '=' (--out DIR, --out=DIR):
 * cli_split_values (options.c) turns the second form into the first before any command parses it.
 *
 * Every mistake on the command line, in a config, a data file or a checkpoint ends with a
 * message on stderr and exit status 2; nothing is written before the inputs have been checked.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/omp_compat.h"

#include "backend/backend.h"
#include "base/util.h"
#include "cli/cli.h"
#include "io/data.h"
#include "io/files.h"
#include "infer/quant.h"
#include "io/tensorfile.h"
#include "measure/bench.h"
#include "model/memory.h"
#include "model/pipe.h"
#include "train/checkpoint.h"
#include "train/run.h"
#include "train/train.h"

const char *const USAGE =
    "usage: moe <command> [options]   (moe help CMD or moe CMD --help: its options)\n"
    "  train   [--config FILE|PRESET] [--set key=value]... [--out DIR] [--resume DIR]\n"
    "          [--until STEP] [--init CKPT] [--allow-data-change] [--quiet]\n"
    "  eval    --ckpt PATH [--set key=value]... [--batches N] [--logits FILE]\n"
    "          [--quant int8|int4 | --offload SLOTS]\n"
    "  sample  --ckpt PATH [--prompt TEXT | --prompts FILE] [--tokens N] [--temperature X]\n"
    "          [--seed N] [--no-cache] [--quant int8|int4 | --offload SLOTS]\n"
    "  export  --ckpt PATH --out FILE.safetensors | --format hf --out DIR\n"
    "  import  --from FILE.safetensors | --format hf --from DIR  --out CKPT [--config FILE]\n"
    "          [--set key=value]...\n"
    "  upcycle --from DENSE_CKPT --out MOE_CKPT [--config FILE] [--set key=value]...\n"
    "          [--noise X] [--drop-ratio R] [--split G] [--router-std S] [--seed N]\n"
    "  info    --ckpt PATH | --keys | --presets\n"
    "  corpus  [--from [NAME=]FILE...] [--tokenizer FILE] [--out DIR] [--seed N]\n"
    "          [--val-frac X]\n"
    "  synth   --out DIR [--domains N] [--tokens N] [--doc-len N] [--seed N]\n"
    "  bench   [--config NAME]... [--steps N] [--warmup N] [--threads N] [--json]\n"
    "          [--profile] [--profile-out FILE.csv] [--device NAME] [--precision P]\n"
    "          [--reference-attention]\n"
    "  bench   --decode [--config NAME | --ckpt PATH]... [--batch 1,4,16,64] [--csv | --json]\n"
    "          [--quant int8|int4 | --offload SLOTS]\n"
    "          NAME: tiny, tiny-dense, small, small-dense (default: all four), tiny-e64,\n"
    "          gpu-medium, gpu-medium-dense\n"
    "  doctor  RUN_DIR [--json] [--threshold NAME=VALUE]... | --thresholds\n"
    "  compare RUN_DIR RUN_DIR... [--csv] [--plot FILE.png]\n"
    "  plan    [--run NAME | --model NAME | --config FILE] [--cluster NAME] [--gpus N]\n"
    "          [--set key=value]... [--search [--top N]] [--json | --csv] | --keys | --presets\n"
    "  tokenizer train --vocab N --from FILE... --out FILE [--pattern gpt2|llama3|qwen2]\n"
    "  tokenizer encode|decode --tokenizer FILE [--docs]\n"
    "  help    [CMD]\n"
    "  version (or --version: the commit built from, the backends, CUDA, MPI)\n"
    "An option's value follows a space or an '=' (--out DIR, --out=DIR).\n"
    "The key=value settings are listed by `moe info --keys`.\n";

/* What every process of a multi-process run must share, as "key = value" lines for dist_init
 * to compare across the ranks: every setting but train.threads (each machine may give its
 * process its own share of cores; a thread count changes no shape, batch or step of the
 * training), and the options that decide what a process loads and how far it trains. */
static char *job_settings(const Config *c, const Opts *o) {
    Config same = *c;
    same.threads = 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) moe_fatal("out of memory");
    config_write(&same, f);
    const char *none = "(not given)";
    fprintf(f, "--resume = %s\n", o->resume ? o->resume : none);
    fprintf(f, "--init = %s\n", o->init ? o->init : none);
    if (o->until > 0)
        fprintf(f, "--until = %ld\n", o->until);
    else
        fprintf(f, "--until = %s\n", none);
    fprintf(f, "--replay-routing = %s\n", o->replay_routing ? o->replay_routing : none);
    fprintf(f, "--allow-data-change = %s\n", o->allow_data_change ? "given" : none);
    fclose(f);
    return text;
}

/* moe train --print-schedule: the pipeline's schedule alone, without processes. */
static int print_schedule(const Config *c) {
    if (c->pp < 2)
        moe_input_error("--print-schedule: dist.pp=%d is one stage, which has no pipeline "
                        "schedule; add --set dist.pp=2 (or more)",
                        c->pp);
    pipe_print(stdout, c);
    return 0;
}

static int cmd_train(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "train", argc, argv);
    if (o.resume && o.out && strcmp(o.resume, o.out) != 0)
        usage_error("train", "--resume continues the run in its own directory; drop --out %s",
                    o.out);
    if (o.resume && o.init)
        usage_error("train", "--init %s starts a new run; --resume continues one: use one of them",
                    o.init);
    if (o.record_routing && o.replay_routing)
        usage_error("train", "%s: a run records its routing or replays one, not both",
                    "--record-routing and --replay-routing");
    if (o.allow_data_change && !o.resume)
        usage_error("train", "%s: a new run has no data to compare with; drop it",
                    "--allow-data-change is for --resume");
    Config c, stored; /* stored: a resumed checkpoint's settings, before --set */
    char dir[MOE_PATH_MAX];
    int restart = 0;
    if (o.resume) {
        char ckpt[MOE_PATH_MAX + 32], cfg[MOE_PATH_MAX + 32], err[1024];
        run_path(ckpt, sizeof ckpt, o.resume, "ckpt.bin");
        run_path(cfg, sizeof cfg, o.resume, "config.txt");
        if (file_exists(ckpt) || !file_exists(cfg)) {
            if (!file_exists(ckpt))
                moe_input_error("--resume %s: no checkpoint %s and no config.txt there: it holds "
                                "no run to resume; start one with `moe train --out %s`",
                                o.resume, ckpt, o.resume);
            load_ckpt_config(&c, ckpt);
            stored = c;
        } else {
            /* stopped before its first checkpoint: the run starts again from step 0 with the
             * settings it was started with (config.txt is written before anything else) */
            config_defaults(&c);
            if (config_load_file(&c, cfg, err, sizeof err) != 0) moe_input_error("%s", err);
            restart = 1;
        }
        snprintf(dir, sizeof dir, "%s", o.resume);
    } else {
        /* --init: the checkpoint's settings (its model shape), then --config and --set */
        if (o.init)
            load_ckpt_config(&c, o.init);
        else
            config_defaults(&c);
        if (o.out) {
            snprintf(dir, sizeof dir, "%s", o.out);
        } else {
            time_t now = time(NULL);
            strftime(dir, sizeof dir, "runs/run-%Y%m%d-%H%M%S", localtime(&now));
        }
    }
    build_config(&c, &o, "train");
    if (o.print_schedule) return print_schedule(&c);
    /* under mpirun every process parses the same command line into the same settings; then
     * the process grid (dist.tp, dist.ep, dist.pp) */
    Dist d;
    char err[1024];
    char *settings = job_settings(&c, &o);
    const int refused = dist_init(&d, NULL, NULL, (DistAxes){.tp = c.tp, .ep = c.ep, .pp = c.pp},
                                  c.collectives, c.timeout, settings, err, sizeof err);
    free(settings);
    if (refused && err[0]) moe_input_error("%s", err);
    if (refused) exit(MOE_EXIT_INPUT); /* settings that differ: rank 0 has said which */
    TrainOptions to = {.out_dir = dir,
                       .resume = o.resume != NULL && !restart,
                       .restart = restart,
                       .allow_data_change = o.allow_data_change,
                       .stored = o.resume && !restart ? &stored : NULL,
                       .quiet = o.quiet,
                       .until = (int)o.until,
                       .init = o.init,
                       .record_routing = o.record_routing,
                       .replay_routing = o.replay_routing,
                       .dist = &d};
    int rc = train_run(&c, &to);
    dist_finalize(&d);
    return rc;
}

static int cmd_info(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "info", argc, argv);
    if (o.keys) {
        config_print_keys(stdout);
        return 0;
    }
    if (o.presets) {
        bench_presets_print(stdout);
        printf(
            "\nmoe train, import and upcycle take a preset as --config NAME: its model shape and\n"
            "batch over the settings they start from (moe info --keys); a file NAME in the\n"
            "current folder is read instead. moe bench --config NAME measures one.\n");
        return 0;
    }
    if (!o.ckpt) usage_error("info", "%s", "--ckpt PATH, --keys or --presets is required");
    Config c;
    load_ckpt_config(&c, o.ckpt);
    char err[1024];
    Ckpt ck;
    if (ckpt_read(&ck, o.ckpt, err, sizeof err) != 0) moe_input_error("%s", err);
    ParamTable pt;
    params_table_build(&pt, &c);
    printf("checkpoint %s\nstep %llu\n", o.ckpt, (unsigned long long)ck.step);
    printf("parameters: %zu total, %zu active per token\n", params_count_total(&pt),
           params_count_active(&pt, &c));
    printf("training FLOPs per token: %.6g (forward + backward matrix products)\n",
           model_flops_per_token(&c, c.seq_len));
    printf("blocks:");
    for (int l = 0; l < c.n_layer; l++) printf(" %s", config_is_moe_layer(&c, l) ? "moe" : "dense");
    if (c.mtp_depth > 0) /* their blocks are of the last layer's kind */
        printf("\nmulti-token prediction: %d module%s, %s blocks (training only)", c.mtp_depth,
               c.mtp_depth > 1 ? "s" : "", config_is_moe_layer(&c, c.n_layer) ? "moe" : "dense");
    printf("\n\n[config]\n");
    config_write(&c, stdout);
    printf("\n[tensors]\n");
    for (int i = 0; i < pt.n; i++) {
        const ParamTensor *t = &pt.t[i];
        printf("%-28s", t->name);
        for (int d = 0; d < t->ndim; d++) printf("%s%d", d ? " x " : " ", t->shape[d]);
        printf("  (%zu)\n", t->numel);
    }
    params_table_free(&pt);
    ckpt_free(&ck);
    return 0;
}

/* --from FILE [FILE]...: every word after --from up to the next option is one more file, so
 * a shell's glob of files works after it. They go to files; the other words to rest. */
static int take_from_files(int argc, char **argv, const char **files, char **rest, int *n_rest) {
    int n = 0;
    *n_rest = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--from") != 0) {
            rest[(*n_rest)++] = argv[i];
            continue;
        }
        if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
            usage_error("corpus", "%s needs at least one file", "--from");
        while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) files[n++] = argv[++i];
    }
    return n;
}

static int cmd_corpus(int argc, char **argv) {
    /* one block: the files and the other words, each at most argc */
    const char **files = (const char **)malloc_check(2 * (size_t)(argc + 1) * sizeof(char *));
    char **rest = (char **)(files + argc + 1);
    int n_rest;
    int n_files = take_from_files(argc, argv, files, rest, &n_rest);
    Opts o;
    parse_opts(&o, "corpus", n_rest, rest);
    char err[1536];
    const char *out = o.out ? o.out : "data/corpus";
    uint64_t seed = o.seed_given ? (uint64_t)o.seed : 1234;
    CorpusTokenizer ct;
    if (o.tokenizer) corpus_tokenizer_open(&ct, o.tokenizer);
    const CorpusTokenizer *tok = o.tokenizer ? &ct : NULL;
    int rc = n_files
                 ? corpus_build_from(out, files, n_files, seed, o.val_frac, tok, err, sizeof err)
                 : corpus_build(out, seed, o.val_frac, tok, err, sizeof err);
    if (tok) corpus_tokenizer_close(&ct);
    free(files);
    if (rc != 0) moe_input_error("%s", err);
    return 0;
}

static int cmd_synth(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "synth", argc, argv);
    if (!o.out) usage_error("synth", "%s", "--out DIR is required");
    char err[1024], train[MOE_PATH_MAX + 32], val[MOE_PATH_MAX + 32];
    run_path(train, sizeof train, o.out, "train.bin");
    run_path(val, sizeof val, o.out, "val.bin");
    /* both checked before either is written, so a refusal leaves the folder as it was */
    for (int i = 0; i < 2; i++)
        if (file_exists(i ? val : train))
            moe_input_error("synth: %s already exists; choose another --out or remove the old "
                            "shards first (nothing was written)",
                            i ? val : train);
    uint64_t tokens = o.tokens > 0 ? (uint64_t)o.tokens : 200000;
    uint64_t seed = o.seed_given ? (uint64_t)o.seed : 1;
    /* the same sources (seed), independent streams: validation is held-out text of the
     * same distribution, a tenth the size of the training shard */
    const int V = (int)o.vocab;
    if (synth_write(train, (int)o.domains, tokens, (int)o.doc_len, V, seed, 2 * seed, err,
                    sizeof err) != 0 ||
        synth_write(val, (int)o.domains, tokens / 10 > 4096 ? tokens / 10 : 4096, (int)o.doc_len, V,
                    seed, 2 * seed + 1, err, sizeof err) != 0)
        moe_input_error("synth: %s", err);
    printf("wrote %s and %s: %llu training tokens from %ld Markov sources", train, val,
           (unsigned long long)tokens, o.domains);
    if (V != 256) printf(", ids of a vocabulary of %d (train with model.vocab=%d)", V, V);
    printf("\n");
    return 0;
}

/* The training-step benchmark (bench.h): every option is checked before anything runs. */
/* Two settings that libraries read once, when they load, so the only way to change them from
 * inside is to run ourselves again with them set (one exec, before anything else happens; a
 * setting already in the environment is respected):
 *   - OMP_WAIT_POLICY. OpenMP threads that wait actively spin on their core. Training's
 *     parallel regions are short and many, and OpenBLAS (the OpenMP build) shares the pool,
 *     so when anything else runs on the machine the spinning threads steal the cores the
 *     working ones need: a step measured 20x slower on a busy 2-core machine, and no faster
 *     when idle. So passive, except for decoding (moe sample, moe bench --decode): a decoding
 *     step is a few hundred regions of microseconds each, and a sleeping thread takes longer
 *     than that to wake: a step of the small reference MoE at batch 1 took 6.8 ms passive and
 *     1.7 ms active on a quiet 2-core machine (handbook chapter 9).
 *   - OPENBLAS_CORETYPE, when OpenBLAS took this CPU for an older one and chose kernels
 *     without AVX2 (backend.h, backend_blas_better_core): the sgemm of a 2-core Xeon with
 *     AVX-512 measured 65 GFLOP/s so, 315 with the SkylakeX kernels. */
static int decodes(char **argv) {
    if (!argv[1]) return 0;
    if (strcmp(argv[1], "sample") == 0) return 1;
    if (strcmp(argv[1], "bench") != 0) return 0;
    for (int i = 2; argv[i]; i++)
        if (strcmp(argv[i], "--decode") == 0) return 1;
    return 0;
}

/* With OMP_PROC_BIND or OMP_PLACES set (chapter 3's Slurm scripts set both), libgomp binds
 * the first thread to its first place as it loads, and an exec keeps that narrowed affinity:
 * the new process would see a single place and run every thread on one core (the tiny bench
 * step took 1.8 times as long on 2 cores). So before the exec the process gets back the union
 * of its places, which libgomp computed from the CPUs the process was given (by taskset,
 * srun or mpirun): the binding then happens again, in the new process, over all of them. */
static void unbind_before_exec(void) {
#if defined(_OPENMP) && defined(__linux__) /* cpu_set_t is Linux's; macOS binds no threads */
    const int n_places = omp_get_num_places();
    if (n_places <= 0) return;
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    for (int p = 0; p < n_places; p++) {
        const int n = omp_get_place_num_procs(p);
        int *ids = malloc_check((size_t)(n > 0 ? n : 1) * sizeof(int));
        omp_get_place_proc_ids(p, ids);
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < CPU_SETSIZE) CPU_SET(ids[i], &cpus);
        free(ids);
    }
    if (CPU_COUNT(&cpus) > 0) sched_setaffinity(0, sizeof cpus, &cpus);
#endif
}

static void prepare_environment(char **argv) {
    int again = 0;
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", decodes(argv) ? "active" : "passive", 1);
        again = 1;
    }
    const char *core = getenv("OPENBLAS_CORETYPE") ? NULL : backend_blas_better_core();
    if (core) {
        setenv("OPENBLAS_CORETYPE", core, 1);
        again = 1;
    }
    if (again) {
        unbind_before_exec();
        execv("/proc/self/exe", argv);
    }
    /* exec failed (no /proc): carry on with the library defaults */
}

extern const char moe_git_commit[]; /* build/version.c (Makefile): the commit, -dirty if changed */

/* moe version, moe --version: what this binary is, for a bug report or a run's comparison */
static int cmd_version(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "version", argc, argv);
    static const char *const BACKENDS[] = {"cpu", "cpu-ref", "cpu-fenced", "cuda"};
    char err[512];
    printf("moe.c %s\nfeatures: backends", moe_git_commit);
    for (size_t i = 0; i < sizeof BACKENDS / sizeof BACKENDS[0]; i++)
        if (backend_in_build(BACKENDS[i], err, sizeof err)) printf(" %s", BACKENDS[i]);
    printf("; CUDA %s; NCCL %s; MPI %s; OpenMP %s; BLAS %s\n", MOE_HAVE_CUDA ? "yes" : "no",
           MOE_HAVE_NCCL ? "yes" : "no", MOE_HAVE_MPI ? "yes" : "no",
           MOE_HAVE_OPENMP ? "yes" : "no", backend_blas_library());
    return 0;
}

int main(int argc, char **argv) {
    prepare_environment(argv);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        (strcmp(argv[1], "help") == 0 && argc == 2)) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? MOE_EXIT_INPUT : 0;
    }
    if (strcmp(argv[1], "help") == 0) { /* moe help CMD */
        const char *help = argc == 3 ? cli_help(argv[2]) : NULL;
        if (help) {
            fputs(help, stdout);
            return 0;
        }
        fprintf(stderr, "error: moe help: %s '%s'\n\n%s",
                argc == 3 ? "unknown command" : "one command, not", argv[argc - 1], USAGE);
        return MOE_EXIT_INPUT;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } CMDS[] = {{"train", cmd_train},     {"eval", cmd_eval},       {"sample", cmd_sample},
                {"export", cmd_export},   {"info", cmd_info},       {"corpus", cmd_corpus},
                {"synth", cmd_synth},     {"bench", cmd_bench},     {"import", cmd_import},
                {"upcycle", cmd_upcycle}, {"doctor", cmd_doctor},   {"plan", cmd_plan},
                {"compare", cmd_compare}, {"version", cmd_version}, {"tokenizer", cmd_tokenizer}};
    const char *cmd = strcmp(argv[1], "--version") == 0 ? "version" : argv[1];
    for (size_t i = 0; i < sizeof CMDS / sizeof CMDS[0]; i++)
        if (strcmp(cmd, CMDS[i].name) == 0) {
            int n = argc - 2;
            char **args = cli_split_values(cmd, &n, argv + 2);
            const int status = CMDS[i].fn(n, args);
            free(args);
            return status;
        }
    fprintf(stderr, "error: unknown command '%s'\n\n%s", argv[1], USAGE);
    return MOE_EXIT_INPUT;
}
