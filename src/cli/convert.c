/*
 * convert.c: the commands that turn one model file into another.
 *
 *   moe export  --ckpt PATH --out FILE.safetensors
 *   moe import  --from FILE.safetensors --out CKPT [--config FILE] [--set key=value]...
 *   moe upcycle --from DENSE_CKPT --out MOE_CKPT [--config FILE] [--set key=value]...
 *               [--noise X] [--drop-ratio R] [--split G] [--router-std S] [--seed N]
 *
 * Each reads and checks all of its input, refuses an --out that already exists, and only
 * then writes (atomically: io/files.h). The checkpoints written by import and upcycle hold
 * weights only, at step 0 with zero AdamW moments: `moe train --init CKPT` trains from them.
 * A run's tokenizer (the tokenizer.json beside its checkpoint, tok/tok.h) goes with it into a
 * Hugging Face folder, and comes back beside the checkpoint imported from one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "convert/hf.h"
#include "convert/import.h"
#include "convert/upcycle.h"
#include "io/files.h"
#include "io/tensorfile.h"
#include "moe/moe_ops.h"
#include "tok/tok.h"
#include "train/checkpoint.h"

static void refuse_existing(const char *cmd, const char *path) {
    if (file_exists(path))
        moe_input_error("%s: %s already exists; choose another --out or remove it first "
                        "(nothing was changed)",
                        cmd, path);
}

/* The writers go through "<out>.tmp" (io/files.h), so that name must not be the input either. */
static void refuse_input_as_output(const char *cmd, const char *out, const char *in) {
    char tmp[MOE_PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    if (same_file(tmp, in))
        moe_input_error("%s: writing --out %s goes through %s, which is the input; choose "
                        "another --out (nothing was changed)",
                        cmd, out, tmp);
}

/* A failed write (a full disk, a folder that cannot be written) leaves no file behind (the
 * atomic protocol removes its .tmp), so the user can free space or pick another --out. */
static void save_or_exit(const char *cmd, const Model *m, const char *path) {
    char err[1024];
    if (checkpoint_save(m, NULL, path, err, sizeof err) != 0)
        moe_input_error("%s: %s (nothing was written: choose another --out, or free disk space "
                        "and run it again)",
                        cmd, err);
}

/* The tensors under their parameter-table names (and the aux-free biases), every setting in the
 * metadata "config" (so `moe import` rebuilds the same model), the main shape settings as
 * separate keys for readers that do not parse it, and a checksum (model_export). */
/* Conversions work on the weights in host memory: the CPU backend, whatever device a
 * checkpoint was trained on (the device is not a setting of the model). The files they write
 * keep the setting as cpu: a run started from one picks its device with --set train.device. */
static void on_host(Config *c) {
    c->device = MOE_DEVICE_CPU;
    c->precision = MOE_PRECISION_FP32;
}

/* export --format hf: the run's tokenizer.json beside ckpt into f, checked: it loads, and its
 * vocabulary is the model's (else its ids are another model's). 1, or 0 when there is none. */
static int export_tokenizer(TokFile *f, const Config *c, const char *ckpt) {
    char err[1024], path[MOE_TOK_PATH_MAX];
    Tokenizer t;
    uint32_t crc;
    const int rc = tok_run_load(&t, ckpt, &crc, err, sizeof err);
    if (rc < 0)
        moe_input_error("export --format hf: the run's tokenizer %s (nothing was written)", err);
    if (rc == 0) return 0;
    const int n = t.n_vocab;
    tok_free(&t);
    tok_run_path(ckpt, path, sizeof path);
    if (n != c->vocab)
        moe_input_error("export --format hf: %s has model.vocab=%d, but the tokenizer beside it, "
                        "%s, has %d tokens: it is not the tokenizer of this model's ids; put the "
                        "run's own there (nothing was written)",
                        ckpt, c->vocab, path, n);
    if (tok_file_read(f, path, err, sizeof err) != 0)
        moe_input_error("export --format hf: %s (nothing was written)", err);
    return 1;
}

int cmd_export(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "export", argc, argv);
    if (!o.ckpt || !o.out) usage_error("export", "%s", "--ckpt PATH and --out FILE are required");
    if (!o.format_hf) refuse_existing("export", o.out); /* also an --out that is the --ckpt */
    refuse_input_as_output("export", o.out, o.ckpt);
    Config c;
    load_ckpt_config(&c, o.ckpt);
    on_host(&c);
    char err[1024];
    if (o.format_hf && hf_export_check(&c, err, sizeof err) != 0) /* before loading anything */
        moe_input_error("export --format hf: %s (nothing was written)", err);
    TokFile tok = {0};
    const int has_tok = o.format_hf && export_tokenizer(&tok, &c, o.ckpt);
    Model m;
    load_model(&m, &c, o.ckpt, 1, 1);
    if (o.format_hf) {
        if (hf_export(&m, o.out, has_tok ? &tok : NULL, err, sizeof err) != 0)
            moe_input_error("export --format hf: %s", err);
        printf("wrote %s: config.json (%s), model.safetensors (%zu parameters)%s\n", o.out,
               hf_architecture(hf_family(&c)), m.pt.total,
               has_tok                ? ", the run's tokenizer.json, tokenizer_config.json"
               : c.vocab == MOE_VOCAB ? ", a byte-level tokenizer.json, tokenizer_config.json"
                                      : ", no tokenizer (the run has no tokenizer.json)");
        tok_file_free(&tok);
        model_free(&m);
        return 0;
    }
    if (model_export(&m, o.out, err, sizeof err) != 0) moe_input_error("export: %s", err);
    printf("wrote %s: %d tensors, %zu parameters%s\n", o.out, m.pt.n, m.pt.total,
           c.balance == MOE_BALANCE_AUX_FREE && m.n_moe ? ", and the aux-free router biases" : "");
    model_free(&m);
    return 0;
}

/* The caller's own settings as key=value lines: the --config file's text, then each --set. They
 * name the keys the command line states, which the file's metadata then need not. */
static char *given_text(const Opts *o) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) moe_fatal("out of memory");
    char preset[512]; /* a preset's settings are given as its text */
    const int is_preset = o->config && config_is_preset(o->config);
    if (is_preset && bench_preset_text(o->config, preset, sizeof preset) == 0) fputs(preset, f);
    FILE *in = o->config && !is_preset ? fopen(o->config, "r") : NULL;
    if (o->config && !is_preset && !in)
        moe_input_error("--config: cannot open %s; check the path", o->config);
    for (int ch; in && (ch = fgetc(in)) != EOF;) fputc(ch, f);
    if (in) fclose(in);
    fputc('\n', f);
    for (int i = 0; i < o->n_sets; i++) fprintf(f, "%s\n", o->sets[i]);
    fclose(f);
    return text;
}

/* import --format hf: the folder's tokenizer to copy to path (beside --out) into f (hf_tokenizer,
 * its note a warning): 1 to copy, 0 for nothing to do. A tokenizer.json already at path that is
 * not the folder's is refused before anything is written: it would pass for the checkpoint's. */
static int import_tokenizer(const Opts *o, int vocab, TokFile *f, const char *path) {
    char err[1024], note[2048];
    const int copy = hf_tokenizer(o->from, vocab, f, note, sizeof note, err, sizeof err);
    if (copy < 0) moe_input_error("import --format hf: %s", err);
    if (note[0]) fprintf(stderr, "warning: %s\n", note);
    if (!file_exists(path)) return copy;
    TokFile there;
    const int same = copy && tok_file_read(&there, path, err, sizeof err) == 0 && there.n == f->n &&
                     memcmp(there.data, f->data, f->n) == 0;
    if (copy && same) tok_file_free(&there);
    if (!same)
        moe_input_error("import: %s already exists beside --out %s and is not the folder's "
                        "tokenizer: it would be taken for this checkpoint's; choose an --out in "
                        "another folder or remove it first (nothing was changed)",
                        path, o->out);
    tok_file_free(f); /* the same file is there already */
    return 0;
}

/* Settings: the defaults and --config/--set (so a file without metadata can name n_head), then
 * the file's metadata and the shapes of its tensors (import_config), then --config/--set once
 * more, so that what the command line says wins. */
int cmd_import(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "import", argc, argv);
    if (!o.from || !o.out)
        usage_error("import", "%s", "--from FILE.safetensors and --out CKPT are required");
    refuse_existing("import", o.out);
    refuse_input_as_output("import", o.out, o.from);
    char err[1024];
    SafeTensors st;
    if (o.format_hf ? hf_read(&st, o.from, err, sizeof err)
                    : safetensors_read(&st, o.from, err, sizeof err))
        moe_input_error("import%s: %s", o.format_hf ? " --format hf" : "", err);
    if (!st.checksum)
        fprintf(stderr,
                "note: %s has no moe.crc32 checksum (it was not written by `moe export`): its "
                "bytes are taken as they are, unchecked\n",
                o.from);
    Config c;
    config_defaults(&c);
    build_config(&c, &o, "import");
    char *given = given_text(&o);
    if (import_config(&c, &st, given, err, sizeof err) != 0) moe_input_error("import: %s", err);
    free(given);
    build_config(&c, &o, "import");
    on_host(&c);
    TokFile tok = {0};
    char tpath[MOE_TOK_PATH_MAX];
    tok_run_path(o.out, tpath, sizeof tpath);
    const int copy = o.format_hf && import_tokenizer(&o, c.vocab, &tok, tpath);
    Model m;
    require_memory(&c, 1, 1);
    model_init(&m, &c, 1, 1);
    if (import_weights(&m, &st, err, sizeof err) != 0) moe_input_error("import: %s", err);
    save_or_exit("import", &m, o.out);
    const void *buf[1] = {tok.data};
    if (copy && write_atomic(tpath, buf, &tok.n, 1, err, sizeof err) != 0) {
        remove(o.out); /* the checkpoint without its tokenizer would sample bytes or nothing */
        moe_input_error("import: %s (nothing was written: free disk space and run it again)", err);
    }
    printf("imported %s: %d tensors, %zu parameters, %d blocks (%d MoE); wrote %s%s%s\n", o.from,
           m.pt.n, m.pt.total, c.n_layer, m.n_moe, o.out, copy ? " and its tokenizer " : "",
           copy ? tpath : "");
    tok_file_free(&tok);
    safetensors_free(&st);
    model_free(&m);
    return 0;
}

/* Settings: the dense checkpoint's, then --config/--set, which must make it an MoE
 * (moe.num_experts, moe.top_k, ...); with --split G and no moe.d_expert given, the experts
 * are d_ff / G wide. */
int cmd_upcycle(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "upcycle", argc, argv);
    if (!o.from || !o.out)
        usage_error("upcycle", "%s", "--from DENSE_CKPT and --out MOE_CKPT are required");
    if (strcmp(o.from, o.out) == 0)
        usage_error("upcycle", "--out %s would overwrite the dense checkpoint; choose another",
                    o.out);
    refuse_existing("upcycle", o.out);
    refuse_input_as_output("upcycle", o.out, o.from);
    Config dense, moe;
    load_ckpt_config(&dense, o.from);
    on_host(&dense);
    moe = dense;
    if (o.split > 1 && dense.d_ff % o.split == 0) moe.d_expert = dense.d_ff / (int)o.split;
    build_config(&moe, &o, "upcycle");

    UpcycleOptions uo;
    upcycle_options_default(&uo);
    uo.noise = (float)o.noise;
    uo.drop_ratio = (float)o.drop_ratio;
    uo.split = (int)o.split;
    if (o.router_std >= 0.0) uo.router_std = (float)o.router_std;
    if (o.seed_given) uo.seed = (uint64_t)o.seed;
    char err[1024];
    if (upcycle_check(&dense, &moe, &uo, err, sizeof err) != 0) moe_input_error("upcycle: %s", err);

    on_host(&moe);
    Model src, dst;
    load_model(&src, &dense, o.from, 1, 1);
    require_memory(&moe, 1, 1);
    model_init(&dst, &moe, 1, 1);
    if (upcycle_model(&dst, &src, &uo, err, sizeof err) != 0) moe_input_error("upcycle: %s", err);
    save_or_exit("upcycle", &dst, o.out);

    printf("upcycled %s into %s\n  blocks:", o.from, o.out);
    for (int l = 0; l < moe.n_layer; l++)
        printf(" %s", config_is_moe_layer(&moe, l) ? "moe" : "dense");
    printf("\n  experts: %d per MoE block, top-%d, hidden %d (dense d_ff %d), split %d, noise %g, "
           "drop ratio %g, router std %g, seed %llu\n",
           moe.num_experts, moe.top_k, config_expert_hidden(&moe), dense.d_ff, uo.split,
           (double)uo.noise, (double)uo.drop_ratio, (double)uo.router_std,
           (unsigned long long)uo.seed);
    printf("  parameters: %zu -> %zu total, %zu -> %zu active per token\n",
           params_count_total(&src.pt), params_count_total(&dst.pt),
           params_count_active(&src.pt, &dense), params_count_active(&dst.pt, &moe));
    printf("train it with: moe train --init %s --out DIR [--set train.steps=N ...]\n", o.out);
    model_free(&src);
    model_free(&dst);
    return 0;
}
