/*
 * cli.h: what the command files of `moe` share (options.c: the option parser; settings.c: the
 * settings and a checkpoint's model; help.c: every command's help text, which lists its
 * options; convert.c: the commands that turn one model file into another).
 *
 * Every mistake on the command line ends in usage_error or moe_input_error: a message on
 * stderr and exit status 2, before anything is written.
 */
#ifndef MOE_CLI_H
#define MOE_CLI_H

#include "base/util.h"
#include "config/config.h"
#include "io/data.h"
#include "measure/bench.h"
#include "model/model.h"

extern const char *const USAGE;

/* Options of all commands; each command accepts its own subset. */
typedef struct {
    const char *config, *out, *resume, *ckpt, *prompt, *init, *from;
    const char *tokenizer;  /* corpus --tokenizer FILE */
    int format_hf;          /* export, import: --format hf (the Hugging Face layout) */
    const char *logits_out; /* eval --logits FILE */
    const char *prompts;    /* sample --prompts FILE */
    int no_cache;           /* sample --no-cache */
    int ids;                /* sample --ids */
    int draft;              /* sample --draft mtp */
    int decode, csv;        /* bench --decode, --csv */
    int layout;             /* bench --layout */
    const char *batch_list; /* bench --batch 1,4,16,64 */
    const char *ckpts[BENCH_MAX_CONFIGS]; /* every --ckpt (bench --decode takes several) */
    int n_ckpts;
    int steps_given;
    const char *quant; /* eval, sample, bench --decode: --quant int8 | int4 */
    long offload;      /* the same: --offload SLOTS (0: the experts resident) */
    const char *sets[128];
    int n_sets;
    long long tokens;
    long batches, domains, doc_len, until, vocab;
    double temperature, val_frac;
    long long seed;
    int seed_given, quiet, keys, presets, allow_data_change, print_schedule;
    /* bench: --config may repeat there (reference config names) */
    const char *configs[BENCH_MAX_CONFIGS];
    int n_configs, json, profile, reference_attention;
    long steps, warmup, threads, rounds;
    const char *profile_out;
    const char *device;                          /* bench --device */
    const char *precision;                       /* bench --precision */
    const char *record_routing, *replay_routing; /* train */
    /* upcycle */
    double noise, drop_ratio, router_std; /* router_std < 0: not given */
    long split;
} Opts;

/* "error: moe CMD: " + fmt with arg, then the usage; exit 2. */
MOE_NORETURN void usage_error(const char *cmd, const char *fmt, const char *arg);

/* Parse argv into o: the options this command's help text lists (help.c), whole numbers and
 * numbers range-checked; --help or -h prints the help and exits 0. Anything else ends in
 * usage_error. */
void parse_opts(Opts *o, const char *cmd, int argc, char **argv);

/* argv (argc words) with every --opt=value of an option cmd takes as the two words --opt value
 * (the value: all after the first '='), so each parser reads one form; a word that is an
 * option's value stays whole. --flag=x of an option without a value ends in usage_error. A
 * new array (argc updated), one block to free; the words are argv's, or held in it. */
char **cli_split_values(const char *cmd, int *argc, char **argv);

/* The help text of a command (usage, then one line per option); NULL for an unknown one. */
const char *cli_help(const char *cmd);

/* 1 when opt ("--name") is one of cmd's options: a line of its help starts "  --name". */
int cli_option_allowed(const char *cmd, const char *opt);

/* Exit 2 with a message when a model of settings c for B x T tokens would not fit in the
 * memory available (memory.h), before anything is allocated. */
void require_memory(const Config *c, int B, int T);

/* Settings: c as given (defaults, or a checkpoint's), then --config, then each --set; then
 * validated. --config NAME is a settings file, or when no file NAME exists a preset's name
 * (bench.h, moe info --presets); neither is exit 2 with the presets' names. */
void build_config(Config *c, const Opts *o, const char *cmd);

/* 1 when --config name means a preset: no file of that name, and a preset's name. */
int config_is_preset(const char *name);

/* The settings stored in a checkpoint; exits 2 with a message when it is missing or bad. */
void load_ckpt_config(Config *c, const char *path);

/* A model with settings c (a checkpoint's, perhaps with shape-preserving overrides) and the
 * checkpoint's weights, activations for B x T tokens. */
void load_model(Model *m, Config *c, const char *path, int B, int T);

int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_upcycle(int argc, char **argv);
int cmd_doctor(int argc, char **argv); /* doctor.c */
int cmd_plan(int argc, char **argv);   /* plan.c */
int cmd_eval(int argc, char **argv);   /* eval.c */
int cmd_sample(int argc, char **argv); /* eval.c */
int cmd_bench(int argc, char **argv);  /* bench.c */
/* compare.c */
int cmd_compare(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv); /* tokenizer.c */
/* moe corpus --tokenizer: ct encodes with the tokenizer.json at path and holds the file's bytes
 * and CRC-32 (exit 2 when it cannot be read or is not one moe.c reads); corpus_tokenizer_close
 * frees it all. */
void corpus_tokenizer_open(CorpusTokenizer *ct, const char *path);
void corpus_tokenizer_close(CorpusTokenizer *ct);

#endif
