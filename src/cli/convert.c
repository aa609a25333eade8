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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cli/cli.h"
#include "import.h"
#include "io/files.h"
#include "io/tensorfile.h"
#include "upcycle.h"

static void refuse_existing(const char *cmd, const char *path) {
    if (file_exists(path))
        moe_input_error("%s: %s already exists; choose another --out or remove it first "
                        "(nothing was changed)",
                        cmd, path);
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

/* The tensors under their parameter-table names, every setting in the metadata "config" (so
 * `moe import` rebuilds the same model), and the main shape settings as separate keys for
 * readers that do not parse it. */
int cmd_export(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "export", argc, argv);
    if (!o.ckpt || !o.out) usage_error("export", "%s", "--ckpt PATH and --out FILE are required");
    Config c;
    load_ckpt_config(&c, o.ckpt);
    Model m;
    load_model(&m, &c, o.ckpt, 1, 1);
    TensorRef *e = (TensorRef *)calloc_check((size_t)m.pt.n, sizeof(TensorRef));
    for (int i = 0; i < m.pt.n; i++) {
        const ParamTensor *t = &m.pt.t[i];
        snprintf(e[i].name, sizeof e[i].name, "%s", t->name);
        e[i].dtype = TENSOR_F32;
        e[i].ndim = t->ndim;
        memcpy(e[i].shape, t->shape, sizeof t->shape);
        e[i].nbytes = t->numel * sizeof(float);
        e[i].data = m.params + t->offset;
    }
    char v[8][32];
    snprintf(v[0], 32, "%d", c.d_model);
    snprintf(v[1], 32, "%d", c.n_layer);
    snprintf(v[2], 32, "%d", c.n_head);
    snprintf(v[3], 32, "%d", c.num_experts);
    snprintf(v[4], 32, "%d", c.top_k);
    snprintf(v[5], 32, "%g", c.rope_theta);
    snprintf(v[6], 32, "%d", c.norm_topk);
    char *text = config_to_text(&c);
    const char *keys[] = {"d_model",    "n_layer",   "n_head", "num_experts", "top_k",
                          "rope_theta", "norm_topk", "format", "config"};
    const char *vals[] = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], "moe.c", text};
    char err[1024];
    if (safetensors_write(o.out, e, m.pt.n, keys, vals, 9, err, sizeof err) != 0)
        moe_input_error("export: %s", err);
    printf("wrote %s: %d tensors, %zu parameters\n", o.out, m.pt.n, m.pt.total);
    free(text);
    free(e);
    model_free(&m);
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
    char err[1024];
    SafeTensors st;
    if (safetensors_read(&st, o.from, err, sizeof err) != 0) moe_input_error("import: %s", err);
    Config c;
    config_defaults(&c);
    build_config(&c, &o, "import");
    if (import_config(&c, &st, err, sizeof err) != 0) moe_input_error("import: %s", err);
    build_config(&c, &o, "import");
    Model m;
    require_memory(&c, 1, 1);
    model_init(&m, &c, 1, 1);
    if (import_weights(&m, &st, err, sizeof err) != 0) moe_input_error("import: %s", err);
    save_or_exit("import", &m, o.out);
    printf("imported %s: %d tensors, %zu parameters, %d blocks (%d MoE); wrote %s\n", o.from,
           m.pt.n, m.pt.total, c.n_layer, m.n_moe, o.out);
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
    Config dense, moe;
    load_ckpt_config(&dense, o.from);
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
