/*
 * settings.c: the settings and the model a command starts from (cli.h): --config (a file or a
 * preset) and --set over defaults or a checkpoint's, and a checkpoint's model once the memory
 * is known to hold it. A leaf of cli/: moe.c's train and the commands of eval.c, bench.c and
 * convert.c all take their settings here, so none of those calls back into moe.c, which
 * dispatches to them.
 */
#include <string.h>

#include "backend/backend.h"
#include "base/util.h"
#include "cli/cli.h"
#include "io/files.h"
#include "measure/bench.h"
#include "model/memory.h"
#include "train/checkpoint.h"

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
    Config one = *c; /* one process: the whole model, whatever grid its checkpoint was saved on */
    one.tp = 1;
    if (memory_check(&one, B, T, 1, 1, err, sizeof err) != 0) moe_input_error("%s", err);
}

void load_model(Model *m, Config *c, const char *path, int B, int T) {
    char err[1024];
    require_memory(c, B, T);
    model_init(m, c, B, T);
    if (checkpoint_load(m, NULL, path, 0, err, sizeof err) != 0) moe_input_error("%s", err);
}
