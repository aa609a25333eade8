/*
 * moe: the command line.
 *
 *   moe train   [--config FILE|PRESET] [--set key=value]... [--out DIR] [--resume DIR]
 *               [--until STEP] [--init CKPT] [--allow-data-change] [--quiet]
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
 *   moe corpus  [--from [NAME=]FILE...] [--out DIR] [--seed N] [--val-frac X]
 *   moe synth   --out DIR [--domains N] [--tokens N] [--doc-len N] [--seed N]
 *   moe bench   [--config NAME]... [--steps N] [--warmup N] [--threads N] [--json]
 *               [--profile] [--profile-out FILE.csv] [--device NAME] [--precision P]
 *               [--reference-attention]
 *   moe doctor  RUN_DIR [--json] [--threshold NAME=VALUE]... | --thresholds   (doctor.c)
 *   moe compare RUN_DIR RUN_DIR... [--csv] [--plot FILE.png]                   (compare.c)
 *   moe plan    [--run NAME | --model NAME | --config FILE] [--cluster NAME] [--gpus N]
 *               [--set key=value]... [--search [--top N]] [--json | --csv] | --keys | --presets
 * (plan.c) moe help    [CMD]             (and moe CMD --help: each command's options, help.c)
 *   moe version                         (or moe --version: the commit and the build's features)
 *
 * Every option that takes a value takes it after a space or an '=' (--out DIR, --out=DIR):
 * cli_split_values turns the second form into the first before any command parses it.
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
    "  corpus  [--from [NAME=]FILE...] [--out DIR] [--seed N] [--val-frac X]\n"
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
    "  help    [CMD]\n"
    "  version (or --version: the commit built from, the backends, CUDA, MPI)\n"
    "An option's value follows a space or an '=' (--out DIR, --out=DIR).\n"
    "The key=value settings are listed by `moe info --keys`.\n";

MOE_NORETURN void usage_error(const char *cmd, const char *fmt, const char *arg) {
    fprintf(stderr, "error: moe %s: ", cmd);
    fprintf(stderr, fmt, arg);
    const char *help = cli_help(cmd);
    fprintf(stderr, "\n\n%s", help ? help : USAGE);
    exit(MOE_EXIT_INPUT);
}

/* Every whole-number option goes through here: the full text must be a number (no spaces, no
 * trailing characters), inside long long (ERANGE) and inside [lo, hi], so nothing wraps when
 * the caller narrows it to the type it uses. */
static long long parse_int(const char *cmd, const char *opt, const char *s, long long lo,
                           long long hi) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *s == '\0' || isspace((unsigned char)*s) || *end != '\0' || v < lo || v > hi) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s expects a whole number in [%lld, %lld], got '%%s'", opt, lo,
                 hi);
        usage_error(cmd, msg, s);
    }
    return v;
}

static double parse_double(const char *cmd, const char *opt, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *s == '\0' || isspace((unsigned char)*s) || *end != '\0' ||
        !(v >= lo && v <= hi)) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s expects a number in [%g, %g], got '%%s'", opt, lo, hi);
        usage_error(cmd, msg, s);
    }
    return v;
}

/* An option this command does not take: say why when the mistake is a common one. */
static MOE_NORETURN void unknown_option(const char *cmd, const char *a) {
    if (strchr(a, ' '))
        usage_error(cmd, "unknown option '%s': an option is one word; is a quote around two?", a);
    usage_error(cmd, "unknown option '%s' (the options of this command are below)", a);
}

/* Options that name a file or folder: an empty one would mean the current folder or nothing */
static int is_path_option(const char *a) {
    static const char *const PATHS[] = {
        "--config",         "--out",    "--resume",      "--init",
        "--from",           "--ckpt",   "--profile-out", "--record-routing",
        "--replay-routing", "--logits", "--prompts"};
    for (size_t i = 0; i < sizeof PATHS / sizeof PATHS[0]; i++)
        if (strcmp(a, PATHS[i]) == 0) return 1;
    return 0;
}

/* The options of every command that take no value: the others take one (help.c). */
static int is_flag(const char *opt) {
    static const char FLAGS[] = " --help --quiet --allow-data-change --keys --json --profile "
                                "--decode --csv --no-cache --reference-attention --presets "
                                "--search --csv-rows --thresholds ";
    const size_t n = strlen(opt);
    for (const char *p = strstr(FLAGS, opt); p; p = strstr(p + 1, opt))
        if (p[-1] == ' ' && p[n] == ' ') return 1;
    return 0;
}

char **cli_split_values(const char *cmd, int *argc, char **argv) {
    /* one block, freed whole: out (at most 2 argc + 1 pointers), each word or an --opt=value as
     * its two, then the split names' characters */
    size_t chars = 0;
    for (int i = 0; i < *argc; i++) chars += strlen(argv[i]) + 1;
    const size_t n_ptrs = (size_t)(2 * *argc + 1);
    char **out = (char **)malloc_check(n_ptrs * sizeof(char *) + chars);
    char *names = (char *)(out + n_ptrs);
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        char *a = argv[i], *eq = strchr(a, '=');
        const size_t len = eq ? (size_t)(eq - a) : 0;
        char name[64];
        if (strncmp(a, "--", 2) != 0 || len >= sizeof name) {
            out[n++] = a;
            continue;
        }
        snprintf(name, sizeof name, "%.*s", (int)len, a);
        if (!eq || !cli_option_allowed(cmd, name)) {
            out[n++] = a;
            /* the value that follows is taken as it is, even --like=this */
            if (!eq && !is_flag(a) && cli_option_allowed(cmd, a) && i + 1 < *argc)
                out[n++] = argv[++i];
            continue; /* an unknown option is the parser's to name */
        }
        if (is_flag(name)) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s takes no value; write %s alone, not '%%s'", name, name);
            usage_error(cmd, msg, a);
        }
        out[n++] = memcpy(names, name, len + 1); /* the name alone */
        names += len + 1;
        out[n++] = eq + 1; /* all after the first '=': --set=train.steps=4 */
    }
    out[n] = NULL;
    *argc = n;
    return out;
}

/* The options a command takes are those its help text lists (help.c). */
void parse_opts(Opts *o, const char *cmd, int argc, char **argv) {
    memset(o, 0, sizeof(*o));
    o->tokens = 0; /* 0: the command's own default */
    o->temperature = 0.8;
    o->batches = -1;
    o->domains = 3;
    o->doc_len = 512;
    o->val_frac = 0.05;
    o->steps = 5;
    o->warmup = 2;
    o->rounds = 1;
    o->router_std = -1.0; /* the upcycle default */
    o->split = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(cli_help(cmd), stdout);
            exit(0);
        }
        if (!cli_option_allowed(cmd, a)) unknown_option(cmd, a);
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
            continue;
        }
        if (strcmp(a, "--allow-data-change") == 0) {
            o->allow_data_change = 1;
            continue;
        }
        if (strcmp(a, "--keys") == 0 || strcmp(a, "--presets") == 0) {
            *(a[2] == 'k' ? &o->keys : &o->presets) = 1;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
            continue;
        }
        if (strcmp(a, "--profile") == 0) {
            o->profile = 1;
            continue;
        }
        if (strcmp(a, "--decode") == 0 || strcmp(a, "--csv") == 0) {
            *(a[2] == 'd' ? &o->decode : &o->csv) = 1;
            continue;
        }
        if (strcmp(a, "--no-cache") == 0) {
            o->no_cache = 1;
            continue;
        }
        if (strcmp(a, "--reference-attention") == 0) {
            o->reference_attention = 1;
            continue;
        }
        if (i + 1 >= argc) usage_error(cmd, "%s needs a value", a);
        const char *v = argv[++i];
        if (is_path_option(a) && v[0] == '\0') usage_error(cmd, "%s needs a path, not ''", a);
        if (strcmp(a, "--config") == 0) {
            o->config = v;
            if (o->n_configs >= BENCH_MAX_CONFIGS)
                usage_error(cmd, "too many --config options (%s)", "max 16");
            o->configs[o->n_configs++] = v;
        } else if (strcmp(a, "--profile-out") == 0)
            o->profile_out = v;
        else if (strcmp(a, "--device") == 0)
            o->device = v;
        else if (strcmp(a, "--precision") == 0)
            o->precision = v;
        else if (strcmp(a, "--record-routing") == 0)
            o->record_routing = v;
        else if (strcmp(a, "--replay-routing") == 0)
            o->replay_routing = v;
        else if (strcmp(a, "--out") == 0)
            o->out = v;
        else if (strcmp(a, "--resume") == 0)
            o->resume = v;
        else if (strcmp(a, "--init") == 0)
            o->init = v;
        else if (strcmp(a, "--from") == 0)
            o->from = v;
        else if (strcmp(a, "--logits") == 0)
            o->logits_out = v;
        else if (strcmp(a, "--format") == 0) {
            if (strcmp(v, "safetensors") != 0 && strcmp(v, "hf") != 0)
                usage_error(cmd,
                            "--format is safetensors (moe.c's names) or hf (the Hugging Face "
                            "layout), not '%s'",
                            v);
            o->format_hf = strcmp(v, "hf") == 0;
        } else if (strcmp(a, "--noise") == 0)
            o->noise = parse_double(cmd, a, v, 0.0, 10.0);
        else if (strcmp(a, "--drop-ratio") == 0)
            o->drop_ratio = parse_double(cmd, a, v, 0.0, 1.0);
        else if (strcmp(a, "--router-std") == 0)
            o->router_std = parse_double(cmd, a, v, 0.0, 10.0);
        else if (strcmp(a, "--split") == 0)
            o->split = parse_int(cmd, a, v, 1, 1 << 16);
        else if (strcmp(a, "--ckpt") == 0) {
            o->ckpt = v;
            if (o->n_ckpts >= BENCH_MAX_CONFIGS)
                usage_error(cmd, "too many --ckpt options (%s)", "max 16");
            o->ckpts[o->n_ckpts++] = v;
        } else if (strcmp(a, "--batch") == 0)
            o->batch_list = v;
        else if (strcmp(a, "--quant") == 0) {
            if (quant_format_parse(v) < 0)
                usage_error(cmd,
                            "--quant is fp32, int8 (per output channel) or int4 (groups of "
                            "32), not '%s'",
                            v);
            o->quant = v;
        } else if (strcmp(a, "--offload") == 0)
            o->offload = parse_int(cmd, a, v, 1, 1 << 20);
        else if (strcmp(a, "--prompt") == 0)
            o->prompt = v;
        else if (strcmp(a, "--prompts") == 0)
            o->prompts = v;
        else if (strcmp(a, "--set") == 0) {
            if (o->n_sets >= 128) usage_error(cmd, "too many --set options (%s)", "max 128");
            o->sets[o->n_sets++] = v;
        } else if (strcmp(a, "--tokens") == 0)
            /* sample keeps a window of the context, so its count is only a loop bound; synth
             * writes that many tokens to disk */
            o->tokens =
                parse_int(cmd, a, v, 1, strcmp(cmd, "sample") == 0 ? 1000000000000LL : 1LL << 40);
        else if (strcmp(a, "--until") == 0)
            o->until = parse_int(cmd, a, v, 1, 1 << 30);
        else if (strcmp(a, "--batches") == 0)
            o->batches = parse_int(cmd, a, v, 1, 1 << 20);
        else if (strcmp(a, "--domains") == 0)
            o->domains = parse_int(cmd, a, v, 1, SHARD_MAX_DOMAINS);
        else if (strcmp(a, "--doc-len") == 0)
            o->doc_len = parse_int(cmd, a, v, 2, 1 << 24);
        else if (strcmp(a, "--temperature") == 0)
            o->temperature = parse_double(cmd, a, v, 0.0, 100.0);
        else if (strcmp(a, "--steps") == 0) {
            o->steps = parse_int(cmd, a, v, 1, 1 << 20);
            o->steps_given = 1;
        } else if (strcmp(a, "--warmup") == 0)
            o->warmup = parse_int(cmd, a, v, 0, 1 << 20);
        else if (strcmp(a, "--rounds") == 0)
            o->rounds = parse_int(cmd, a, v, 1, BENCH_MAX_ROUNDS);
        else if (strcmp(a, "--threads") == 0)
            o->threads = parse_int(cmd, a, v, 0, 4096);
        else if (strcmp(a, "--val-frac") == 0)
            o->val_frac = parse_double(cmd, a, v, 0.001, 0.5);
        else if (strcmp(a, "--seed") == 0) {
            o->seed = parse_int(cmd, a, v, 0, 0x7fffffffL);
            o->seed_given = 1;
        } else
            moe_fatal("option %s is in the help of moe %s but not parsed", a, cmd);
    }
    /* infer/serve.h would refuse it too, but only once the model is built */
    if (o->quant && quant_format_parse(o->quant) != QUANT_FP32 && o->offload)
        usage_error(cmd,
                    "%s: the expert file holds fp32 experts; serve them quantized or offloaded, "
                    "not both",
                    "--quant and --offload");
}

int config_is_preset(const char *name) {
    char text[512];
    return !file_exists(name) && bench_preset_text(name, text, sizeof text) == 0;
}

/* --config NAME: the file NAME; when there is none, the preset NAME (bench.h); else neither. */
static void apply_config_option(Config *c, const char *name) {
    char err[1024];
    if (config_is_preset(name)) {
        if (bench_preset_apply(c, name, err, sizeof err) != 0) moe_fatal("%s", err);
        return;
    }
    if (!file_exists(name) && !strchr(name, '/')) {
        char names[256];
        bench_preset_names(names, sizeof names);
        moe_input_error("--config: no file %s and no preset %s; the presets are: %s (moe info "
                        "--presets)",
                        name, name, names);
    }
    if (config_load_file(c, name, err, sizeof err) != 0) moe_input_error("--config: %s", err);
}

/* Settings: defaults (or a checkpoint's), then --config, then each --set; then validated. */
void build_config(Config *c, const Opts *o, const char *cmd) {
    char err[1024];
    if (o->config) apply_config_option(c, o->config);
    for (int i = 0; i < o->n_sets; i++)
        if (config_set(c, o->sets[i], err, sizeof err) != 0) moe_input_error("--set: %s", err);
    if (config_validate(c, err, sizeof err) != 0) moe_input_error("%s", err);
    /* the backend now, before anything is written: a GPU that is not there, or a binary
     * without CUDA, is a clear message and exit 2 */
    if (!backend_of_config(c, err, sizeof err)) moe_input_error("%s", err);
    (void)cmd;
}

void load_ckpt_config(Config *c, const char *path) {
    char err[1024];
    if (!file_exists(path))
        moe_input_error("no checkpoint at %s; train a run first (moe train --out DIR writes "
                        "DIR/ckpt.bin)",
                        path);
    if (checkpoint_config(path, c, err, sizeof err) != 0) moe_input_error("%s", err);
}

/* A model with the checkpoint's settings (and any shape-preserving overrides) and weights. */
void require_memory(const Config *c, int B, int T) {
    char err[1024];
    if (memory_check(c, B, T, 1, err, sizeof err) != 0) moe_input_error("%s", err);
}

void load_model(Model *m, Config *c, const char *path, int B, int T) {
    char err[1024];
    require_memory(c, B, T);
    model_init(m, c, B, T);
    if (checkpoint_load(m, NULL, path, 0, err, sizeof err) != 0) moe_input_error("%s", err);
}

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
    /* under mpirun every process parses the same command line into the same settings; then
     * the process grid (dist.ep) */
    Dist d;
    char err[1024];
    _Static_assert((int)MOE_COLLECTIVES_MPI == (int)DIST_COLL_MPI &&
                       (int)MOE_COLLECTIVES_TEACH == (int)DIST_COLL_TEACH &&
                       (int)MOE_COLLECTIVES_NCCL == (int)DIST_COLL_NCCL,
                   "dist.collectives and DistCollectives");
    char *settings = job_settings(&c, &o);
    const int refused =
        dist_init(&d, NULL, NULL, c.ep, c.collectives, c.timeout, settings, err, sizeof err);
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
    int rc = n_files ? corpus_build_from(out, files, n_files, seed, o.val_frac, err, sizeof err)
                     : corpus_build(out, seed, o.val_frac, err, sizeof err);
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
    if (synth_write(train, (int)o.domains, tokens, (int)o.doc_len, seed, 2 * seed, err,
                    sizeof err) != 0 ||
        synth_write(val, (int)o.domains, tokens / 10 > 4096 ? tokens / 10 : 4096, (int)o.doc_len,
                    seed, 2 * seed + 1, err, sizeof err) != 0)
        moe_input_error("synth: %s", err);
    printf("wrote %s and %s: %llu training tokens from %ld Markov sources\n", train, val,
           (unsigned long long)tokens, o.domains);
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
    } CMDS[] = {{"train", cmd_train},     {"eval", cmd_eval},      {"sample", cmd_sample},
                {"export", cmd_export},   {"info", cmd_info},      {"corpus", cmd_corpus},
                {"synth", cmd_synth},     {"bench", cmd_bench},    {"import", cmd_import},
                {"upcycle", cmd_upcycle}, {"doctor", cmd_doctor},  {"plan", cmd_plan},
                {"compare", cmd_compare}, {"version", cmd_version}};
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
