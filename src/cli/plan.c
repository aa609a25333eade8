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

/* The command line of moe plan. */
typedef struct {
    const char *run, *model, *cluster, *config, *gpus;
    const char *sets[128];
    int n_sets, search, json, csv, header, top, list_presets;
} PlanArgs;

/* argv into p; 1 when the command is done already (--help, --keys printed). */
static int parse_plan_args(PlanArgs *p, int argc, char **argv) {
    *p = (PlanArgs){.header = 1, .top = 10};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(cli_help("plan"), stdout);
            return 1;
        }
        if (!cli_option_allowed("plan", a)) usage_error("plan", "unknown option '%s'", a);
        if (strcmp(a, "--keys") == 0) {
            plan_print_keys(stdout);
            return 1;
        }
        if (strcmp(a, "--presets") == 0) {
            p->list_presets = 1;
            continue;
        }
        if (strcmp(a, "--search") == 0) {
            p->search = 1;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            p->json = 1;
            continue;
        }
        if (strcmp(a, "--csv") == 0 || strcmp(a, "--csv-rows") == 0) {
            p->csv = 1;
            p->header = strcmp(a, "--csv") == 0;
            continue;
        }
        need(a, i, argc);
        const char *v = argv[++i];
        if (strcmp(a, "--run") == 0) p->run = v;
        if (strcmp(a, "--model") == 0) p->model = v;
        if (strcmp(a, "--cluster") == 0) p->cluster = v;
        if (strcmp(a, "--config") == 0) p->config = v;
        if (strcmp(a, "--gpus") == 0) p->gpus = v;
        if (strcmp(a, "--top") == 0) {
            char *end;
            p->top = (int)strtol(v, &end, 10);
            if (*end || p->top < 1 || p->top > 1000000)
                usage_error("plan", "--top needs a count from 1 to 1000000, not '%s'", v);
        }
        if (strcmp(a, "--set") == 0) {
            if (p->n_sets == (int)(sizeof p->sets / sizeof p->sets[0]))
                usage_error("plan", "%s", "at most 128 --set");
            p->sets[p->n_sets++] = v;
        }
    }
    return 0;
}

/* A moe.c model: the config file, changed by the --set of moe.c keys (marked in moec_sets),
 * into in. */
static void plan_config(PlanInput *in, const PlanArgs *p, int *moec_sets) {
    char err[512];
    Config c;
    config_defaults(&c);
    if (config_load_file(&c, p->config, err, sizeof err) != 0) moe_input_error("moe plan: %s", err);
    for (int s = 0; s < p->n_sets; s++) {
        if (!is_config_key(p->sets[s])) continue; /* the planner's own key */
        if (config_set(&c, p->sets[s], err, sizeof err) != 0) usage_error("plan", "--set: %s", err);
        moec_sets[s] = 1;
    }
    if (config_validate(&c, err, sizeof err) != 0) moe_input_error("moe plan: %s", err);
    plan_from_config(in, &c);
    /* the model's name: the file's, without its folder and extension */
    const char *base = strrchr(p->config, '/') ? strrchr(p->config, '/') + 1 : p->config;
    snprintf(in->model_name, sizeof in->model_name, "%.*s", (int)strcspn(base, "."), base);
}

/* The settings in their order: run preset, model preset or config, cluster, --gpus, --set. */
static void plan_settings(PlanInput *in, const PlanArgs *p) {
    char err[512];
    plan_defaults(in);
    if (p->run && plan_preset(in, "run", p->run, err, sizeof err) != 0)
        usage_error("plan", "%s", err);
    if (p->model && plan_preset(in, "model", p->model, err, sizeof err) != 0)
        usage_error("plan", "%s", err);
    int moec_sets[128] = {0};
    if (p->config) plan_config(in, p, moec_sets);
    if (p->cluster && plan_preset(in, "cluster", p->cluster, err, sizeof err) != 0)
        usage_error("plan", "%s", err);
    if (p->config && !p->gpus) { /* as many processes as one replica of the config's grid */
        char kv[64];
        snprintf(kv, sizeof kv, "cluster.gpus=%d", in->m.c.tp * in->m.c.ep * in->m.c.pp);
        plan_set(in, kv, err, sizeof err);
    }
    if (p->gpus) {
        char kv[64];
        snprintf(kv, sizeof kv, "cluster.gpus=%s", p->gpus);
        if (plan_set(in, kv, err, sizeof err) != 0) usage_error("plan", "--gpus: %s", err);
    }
    for (int s = 0; s < p->n_sets; s++)
        if (!moec_sets[s] && plan_set_fixed(in, p->sets[s], err, sizeof err) != 0)
            usage_error("plan", "--set: %s", err);
    if (plan_validate_model(in, err, sizeof err) != 0) moe_input_error("moe plan: %s", err);
}

/* The layouts planned: the search's best top, or the one given; their count returned, *r
 * allocated (free it), *searched the layouts the search ranked (0 without --search). */
static int plan_layouts(const PlanInput *in, const PlanArgs *p, PlanResult **r, int *searched) {
    int n;
    *searched = 0;
    if (p->search) {
        int room = 4096;
        *r = (PlanResult *)malloc_check((size_t)room * sizeof **r);
        while ((n = plan_search(in, *r, room)) > room) { /* more layouts than room: again */
            free(*r);
            room = n;
            *r = (PlanResult *)malloc_check((size_t)room * sizeof **r);
        }
        *searched = n;
        if (n == 0)
            moe_input_error("moe plan: no layout divides this model, batch and cluster (the "
                            "global batch must split over the data-parallel ranks: change "
                            "train.global_batch or --gpus)");
        if (n > p->top) n = p->top;
    } else {
        *r = (PlanResult *)malloc_check(sizeof **r);
        plan_layout(in, &in->lay, *r);
        if (!(*r)->valid) moe_input_error("moe plan: this layout cannot run: %s", (*r)->invalid);
        n = 1;
    }
    return n;
}

int cmd_plan(int argc, char **argv) {
    PlanArgs p;
    if (parse_plan_args(&p, argc, argv)) return 0;
    if (p.list_presets) {
        if (p.csv)
            plan_print_presets_csv(stdout);
        else
            plan_print_presets(stdout);
        return 0;
    }
    if (p.model && p.config)
        usage_error("plan", "a model preset or a moe.c config, not both (--config %s)", p.config);

    static PlanInput in;
    char err[512];
    plan_settings(&in, &p);
    /* the counts need the model alone: without a cluster or a batch, they are the answer */
    if (!plan_has_cluster(&in) || in.t.global_batch <= 0) {
        const char *missing = !plan_has_cluster(&in) ? "no cluster: give --cluster NAME (moe "
                                                       "plan --presets) and --gpus N"
                                                     : "no batch: give --set train.global_batch=N";
        if (p.search) moe_input_error("moe plan: --search ranks layouts on a cluster; %s", missing);
        if (p.csv) moe_input_error("moe plan: --csv writes a row a layout; %s", missing);
        if (plan_has_cluster(&in) && plan_validate_cluster(&in, err, sizeof err) != 0)
            moe_input_error("moe plan: %s", err); /* a cluster given in part */
        if (p.json)
            plan_print_json(stdout, &in, NULL, 0);
        else
            plan_print_counts(stdout, &in);
        return 0;
    }
    if (plan_validate(&in, err, sizeof err) != 0) moe_input_error("moe plan: %s", err);

    PlanResult *r;
    int searched;
    const int n = plan_layouts(&in, &p, &r, &searched);
    if (p.json && p.csv) usage_error("plan", "%s", "--json or --csv, not both");
    if (p.json)
        plan_print_json(stdout, &in, r, n);
    else if (p.csv)
        plan_print_csv(stdout, &in, r, n, p.header);
    else
        plan_print(stdout, &in, r, n, searched);
    const int fits = r[0].fits;
    free(r);
    return fits ? 0 : 1;
}
