/*
 * options.c: the command line's words, read as every command does: usage_error (a mistake:
 * the message, the command's help, exit 2), the checked whole and real numbers, the
 * --opt=value form split into --opt value (cli_split_values) and parse_opts, which takes exactly
 * the options a command's help lists (help.c) into Opts (cli.h). The commands are in moe.c and
 * the other files of cli/.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "infer/quant.h"
#include "io/data.h"

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
        "--replay-routing", "--logits", "--prompts",     "--tokenizer"};
    for (size_t i = 0; i < sizeof PATHS / sizeof PATHS[0]; i++)
        if (strcmp(a, PATHS[i]) == 0) return 1;
    return 0;
}

/* The options of every command that take no value: the others take one (help.c). */
static int is_flag(const char *opt) {
    static const char FLAGS[] = " --help --quiet --allow-data-change --keys --json --profile "
                                "--decode --csv --no-cache --reference-attention --presets "
                                "--search --csv-rows --thresholds --docs --ids --layout "
                                "--print-schedule ";
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

/* The options' values when not given. */
static void opts_defaults(Opts *o) {
    memset(o, 0, sizeof(*o));
    o->tokens = 0; /* 0: the command's own default */
    o->temperature = 0.8;
    o->batches = -1;
    o->domains = 3;
    o->doc_len = 512;
    o->vocab = 256;
    o->val_frac = 0.05;
    o->steps = 5;
    o->warmup = 2;
    o->rounds = 1;
    o->router_std = -1.0; /* the upcycle default */
    o->split = 1;
}

/* Option a when it takes no value: set it, 1; else 0. */
static int take_flag(Opts *o, const char *a) {
    if (strcmp(a, "--quiet") == 0) {
        o->quiet = 1;
        return 1;
    }
    if (strcmp(a, "--allow-data-change") == 0) {
        o->allow_data_change = 1;
        return 1;
    }
    if (strcmp(a, "--print-schedule") == 0) {
        o->print_schedule = 1;
        return 1;
    }
    if (strcmp(a, "--keys") == 0 || strcmp(a, "--presets") == 0) {
        *(a[2] == 'k' ? &o->keys : &o->presets) = 1;
        return 1;
    }
    if (strcmp(a, "--json") == 0) {
        o->json = 1;
        return 1;
    }
    if (strcmp(a, "--profile") == 0) {
        o->profile = 1;
        return 1;
    }
    if (strcmp(a, "--layout") == 0) {
        o->layout = 1;
        return 1;
    }
    if (strcmp(a, "--decode") == 0 || strcmp(a, "--csv") == 0) {
        *(a[2] == 'd' ? &o->decode : &o->csv) = 1;
        return 1;
    }
    if (strcmp(a, "--no-cache") == 0 || strcmp(a, "--ids") == 0) {
        *(a[2] == 'n' ? &o->no_cache : &o->ids) = 1;
        return 1;
    }
    if (strcmp(a, "--reference-attention") == 0) {
        o->reference_attention = 1;
        return 1;
    }
    return 0;
}

/* The value v of option a when a takes a name, a path or a word: 1 when a is one of those. */
static int take_text(Opts *o, const char *cmd, const char *a, const char *v) {
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
    else if (strcmp(a, "--tokenizer") == 0)
        o->tokenizer = v;
    else if (strcmp(a, "--logits") == 0)
        o->logits_out = v;
    else if (strcmp(a, "--format") == 0) {
        if (strcmp(v, "safetensors") != 0 && strcmp(v, "hf") != 0)
            usage_error(cmd,
                        "--format is safetensors (moe.c's names) or hf (the Hugging Face "
                        "layout), not '%s'",
                        v);
        o->format_hf = strcmp(v, "hf") == 0;
    } else if (strcmp(a, "--ckpt") == 0) {
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
    } else if (strcmp(a, "--draft") == 0) {
        if (strcmp(v, "mtp") != 0)
            usage_error(cmd,
                        "--draft is mtp (the first multi-token prediction module guesses), not "
                        "'%s'",
                        v);
        o->draft = 1;
    } else if (strcmp(a, "--prompt") == 0)
        o->prompt = v;
    else if (strcmp(a, "--prompts") == 0)
        o->prompts = v;
    else if (strcmp(a, "--set") == 0) {
        if (o->n_sets >= 128) usage_error(cmd, "too many --set options (%s)", "max 128");
        o->sets[o->n_sets++] = v;
    } else
        return 0;
    return 1;
}

/* The value v of option a when a takes a number (range-checked): 1 when a is one of those. */
static int take_number(Opts *o, const char *cmd, const char *a, const char *v) {
    if (strcmp(a, "--noise") == 0)
        o->noise = parse_double(cmd, a, v, 0.0, 10.0);
    else if (strcmp(a, "--drop-ratio") == 0)
        o->drop_ratio = parse_double(cmd, a, v, 0.0, 1.0);
    else if (strcmp(a, "--router-std") == 0)
        o->router_std = parse_double(cmd, a, v, 0.0, 10.0);
    else if (strcmp(a, "--split") == 0)
        o->split = parse_int(cmd, a, v, 1, 1 << 16);
    else if (strcmp(a, "--offload") == 0)
        o->offload = parse_int(cmd, a, v, 1, 1 << 20);
    else if (strcmp(a, "--tokens") == 0)
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
    else if (strcmp(a, "--vocab") == 0)
        o->vocab = parse_int(cmd, a, v, 256, MOE_VOCAB_MAX);
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
        return 0;
    return 1;
}

/* The options a command takes are those its help text lists (help.c). */
void parse_opts(Opts *o, const char *cmd, int argc, char **argv) {
    opts_defaults(o);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(cli_help(cmd), stdout);
            exit(0);
        }
        if (!cli_option_allowed(cmd, a)) unknown_option(cmd, a);
        if (take_flag(o, a)) continue;
        if (i + 1 >= argc) usage_error(cmd, "%s needs a value", a);
        const char *v = argv[++i];
        if (is_path_option(a) && v[0] == '\0') usage_error(cmd, "%s needs a path, not ''", a);
        if (!take_text(o, cmd, a, v) && !take_number(o, cmd, a, v))
            moe_fatal("option %s is in the help of moe %s but not parsed", a, cmd);
    }
    /* infer/serve.h would refuse it too, but only once the model is built */
    if (o->quant && quant_format_parse(o->quant) != QUANT_FP32 && o->offload)
        usage_error(cmd,
                    "%s: the expert file holds fp32 experts; serve them quantized or offloaded, "
                    "not both",
                    "--quant and --offload");
}
