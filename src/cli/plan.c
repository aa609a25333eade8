/*
 * plan.c: `moe plan`, the cost of a training run before it is launched (plan/plan.h).
 *
 *   moe plan [--run NAME | --model NAME | --config FILE] [--cluster NAME] [--gpus N]
 *            [--set key=value]... [--search [--top N]] [--json | --csv] | --keys | --presets
 *
 * The settings come in this order: a run preset (model, machine, layout and batch), a model
 * preset or a moe.c config, a machine preset, --gpus, then each --set. With --config, a --set
 * of a moe.c key (moe info --keys) changes the config, whose exact memory the moe.c engine
 * plans; the other keys are the planner's (moe plan --keys). Without it, the model's keys
 * moe.c has are read through the same rows (plan/plan_keys.c). Exit status: 0 the layout (or
 * the search's best) fits in memory, 1 it does not, 2 a mistake in the input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/keys.h"
#include "plan/plan.h"

/* key=value names a setting of moe.c's config (moe info --keys). */
static int is_config_key(const char *kv) {
    const size_t n = strcspn(kv, "=");
    for (int i = 0; i < CONFIG_NKEYS; i++)
        if (strlen(CONFIG_KEYS[i].name) == n && strncmp(CONFIG_KEYS[i].name, kv, n) == 0) return 1;
    return 0;
}

static void need(const char *opt, int i, int argc) {
    if (i + 1 >= argc) usage_error("plan", "%s needs a value", opt);
}

int cmd_plan(int argc, char **argv) {
    const char *run = NULL, *model = NULL, *cluster = NULL, *config = NULL, *gpus = NULL;
    const char *sets[128];
    int n_sets = 0, search = 0, json = 0, csv = 0, header = 1, top = 10, list_presets = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(cli_help("plan"), stdout);
            return 0;
        }
        if (!cli_option_allowed("plan", a)) usage_error("plan", "unknown option '%s'", a);
        if (strcmp(a, "--keys") == 0) {
            plan_print_keys(stdout);
            return 0;
        }
        if (strcmp(a, "--presets") == 0) {
            list_presets = 1;
            continue;
        }
        if (strcmp(a, "--search") == 0) {
            search = 1;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (strcmp(a, "--csv") == 0 || strcmp(a, "--csv-rows") == 0) {
            csv = 1;
            header = strcmp(a, "--csv") == 0;
            continue;
        }
        need(a, i, argc);
        const char *v = argv[++i];
        if (strcmp(a, "--run") == 0) run = v;
        if (strcmp(a, "--model") == 0) model = v;
        if (strcmp(a, "--cluster") == 0) cluster = v;
        if (strcmp(a, "--config") == 0) config = v;
        if (strcmp(a, "--gpus") == 0) gpus = v;
        if (strcmp(a, "--top") == 0) {
            char *end;
            top = (int)strtol(v, &end, 10);
            if (*end || top < 1 || top > 1000000)
                usage_error("plan", "--top needs a count from 1 to 1000000, not '%s'", v);
        }
        if (strcmp(a, "--set") == 0) {
            if (n_sets == (int)(sizeof sets / sizeof sets[0]))
                usage_error("plan", "%s", "at most 128 --set");
            sets[n_sets++] = v;
        }
    }
    if (list_presets) {
        if (csv)
            plan_print_presets_csv(stdout);
        else
            plan_print_presets(stdout);
        return 0;
    }
    if (model && config)
        usage_error("plan", "a model preset or a moe.c config, not both (--config %s)", config);

    static PlanInput in;
    char err[512];
    plan_defaults(&in);
    if (run && plan_preset(&in, "run", run, err, sizeof err) != 0) usage_error("plan", "%s", err);
    if (model && plan_preset(&in, "model", model, err, sizeof err) != 0)
        usage_error("plan", "%s", err);
    int moec_sets[128] = {0};
    if (config) { /* a moe.c model: its config, changed by the --set of moe.c keys */
        Config c;
        config_defaults(&c);
        if (config_load_file(&c, config, err, sizeof err) != 0)
            moe_input_error("moe plan: %s", err);
        for (int s = 0; s < n_sets; s++) {
            if (!is_config_key(sets[s])) continue; /* the planner's own key */
            if (config_set(&c, sets[s], err, sizeof err) != 0)
                usage_error("plan", "--set: %s", err);
            moec_sets[s] = 1;
        }
        if (config_validate(&c, err, sizeof err) != 0) moe_input_error("moe plan: %s", err);
        plan_from_config(&in, &c);
        /* the model's name: the file's, without its folder and extension */
        const char *base = strrchr(config, '/') ? strrchr(config, '/') + 1 : config;
        snprintf(in.model_name, sizeof in.model_name, "%.*s", (int)strcspn(base, "."), base);
    }
    if (cluster && plan_preset(&in, "cluster", cluster, err, sizeof err) != 0)
        usage_error("plan", "%s", err);
    if (config && !gpus) { /* as many processes as the config's expert group, unless told */
        char kv[64];
        snprintf(kv, sizeof kv, "cluster.gpus=%d", in.m.c.ep);
        plan_set(&in, kv, err, sizeof err);
    }
    if (gpus) {
        char kv[64];
        snprintf(kv, sizeof kv, "cluster.gpus=%s", gpus);
        if (plan_set(&in, kv, err, sizeof err) != 0) usage_error("plan", "--gpus: %s", err);
    }
    for (int s = 0; s < n_sets; s++)
        if (!moec_sets[s] && plan_set_fixed(&in, sets[s], err, sizeof err) != 0)
            usage_error("plan", "--set: %s", err);
    if (plan_validate_model(&in, err, sizeof err) != 0) moe_input_error("moe plan: %s", err);
    /* the counts need the model alone: without a cluster or a batch, they are the answer */
    if (!plan_has_cluster(&in) || in.t.global_batch <= 0) {
        const char *missing = !plan_has_cluster(&in) ? "no cluster: give --cluster NAME (moe "
                                                       "plan --presets) and --gpus N"
                                                     : "no batch: give --set train.global_batch=N";
        if (search) moe_input_error("moe plan: --search ranks layouts on a cluster; %s", missing);
        if (csv) moe_input_error("moe plan: --csv writes a row a layout; %s", missing);
        if (plan_has_cluster(&in) && plan_validate_cluster(&in, err, sizeof err) != 0)
            moe_input_error("moe plan: %s", err); /* a cluster given in part */
        if (json)
            plan_print_json(stdout, &in, NULL, 0);
        else
            plan_print_counts(stdout, &in);
        return 0;
    }
    if (plan_validate(&in, err, sizeof err) != 0) moe_input_error("moe plan: %s", err);

    PlanResult *r;
    int n, searched = 0;
    if (search) {
        int room = 4096;
        r = (PlanResult *)malloc_check((size_t)room * sizeof *r);
        while ((n = plan_search(&in, r, room)) > room) { /* more layouts than room: again */
            free(r);
            room = n;
            r = (PlanResult *)malloc_check((size_t)room * sizeof *r);
        }
        searched = n;
        if (n == 0)
            moe_input_error("moe plan: no layout divides this model, batch and cluster (the "
                            "global batch must split over the data-parallel ranks: change "
                            "train.global_batch or --gpus)");
        if (n > top) n = top;
    } else {
        r = (PlanResult *)malloc_check(sizeof *r);
        plan_layout(&in, &in.lay, r);
        if (!r->valid) moe_input_error("moe plan: this layout cannot run: %s", r->invalid);
        n = 1;
    }
    if (json && csv) usage_error("plan", "%s", "--json or --csv, not both");
    if (json)
        plan_print_json(stdout, &in, r, n);
    else if (csv)
        plan_print_csv(stdout, &in, r, n, header);
    else
        plan_print(stdout, &in, r, n, searched);
    const int fits = r[0].fits;
    free(r);
    return fits ? 0 : 1;
}
