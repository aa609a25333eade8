/*
 * health.c: the thresholds of a healthy run, and the live warnings of moe train (health.h).
 *
 * The defaults are set between the gallery's healthy runs and its broken ones
 * (chapters/06-troubleshooting/gallery.sh): every healthy run stays on the healthy side of
 * every threshold, every broken run crosses the one its failure is about.
 */
#include "train/health.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

const HealthThreshold HEALTH_THRESHOLDS[TH_COUNT] = {
    [TH_FINAL_WINDOW] = {"final_window", 0.2, "(all)",
                         "the end of a run, whose state is judged: this fraction of its logged "
                         "steps (at least 10)"},
    [TH_SETTLE] = {"settle", 0.2, "starving_experts, drop_storm, grad_spikes",
                   "the start of a run, while the router settles: this fraction of its steps is "
                   "not judged for starving experts and drop storms (live too) nor for "
                   "gradient-norm spikes"},
    [TH_LOSS_SPIKES] = {"loss_spikes", 2, "loss_spikes",
                        "loss spikes (train.csv loss_spike) in a run that make a warning (one "
                        "the loss stays up after, a stretch, makes it too)"},
    [TH_GRAD_SPIKES] = {"grad_spikes", 3, "grad_spikes",
                        "gradient-norm spikes per 100 steps judged (after the settling start and "
                        "the warm-up; fewer steps count as 100) that make a warning"},
    [TH_GRAD_SPIKE_RATIO] = {"grad_spike_ratio", 3, "grad_spikes",
                             "a gradient-norm spike: a gradient norm above this many times the "
                             "median of the train.spike_window steps before it"},
    [TH_LR_RISE] = {"lr_rise", 0.1, "loss_rising",
                    "nats the training loss (a mean over the final window) ends above its lowest "
                    "such mean after warm-up"},
    [TH_COLLAPSE_SHARE] = {"collapse_share", 0.7, "router_collapse",
                           "share of the assignments the busiest quarter of the experts (at least "
                           "top_k of them) take over the final window"},
    [TH_STARVE_SHARE] = {"starve_share", 0.1, "starving_experts",
                         "an expert starves below this fraction of its fair share 1/E of the "
                         "assignments"},
    [TH_STARVE_STEPS] = {"starve_steps", 50, "starving_experts",
                         "consecutive steps an expert starves before it is reported (live too)"},
    [TH_DROP_FRAC] = {"drop_frac", 0.1, "drop_storm",
                      "fraction of a layer's assignments dropped by the capacity"},
    [TH_DROP_STEPS] = {"drop_steps", 20, "drop_storm",
                       "consecutive steps over drop_frac before a layer is reported (live too)"},
    [TH_AUX_SHARE] = {"aux_share", 0.1, "balance_dominates",
                      "the balance term of the objective (aux_coef x MoE blocks x aux_loss) as a "
                      "fraction of the language-model loss"},
    [TH_LOGIT_MAX] = {"logit_max", 8, "logit_growth",
                      "largest |router logit| (router.csv max_logit, mean over the final window) "
                      "..."},
    [TH_LOGIT_GROWTH] = {"logit_growth", 1.5, "logit_growth",
                         "... and this many times its mean over the run's first steps (as many "
                         "as the final window)"},
    [TH_LOAD_CHURN] = {"load_churn", 0.25, "bias_oscillation",
                       "moe.balance=aux_free: share of the load that changes expert from one "
                       "step to the next (final window)"},
    [TH_BIAS_DRIFT] = {"bias_drift", 0.5, "bias_drift",
                       "moe.balance=aux_free: how fast the range of a layer's biases widened over "
                       "the second half of the run, as a fraction of the fastest the sign rule "
                       "allows (2 x moe.bias_rate a step)"},
    [TH_VAL_RISE] = {"val_rise", 0.1, "overfitting",
                     "nats the last validation loss lies above the lowest one"},
    [TH_EPOCHS] = {"epochs", 1, "data_repeated",
                   "passes over the training shard (tokens trained / tokens in the shard)"},
    [TH_EP_IMBALANCE] = {"ep_imbalance", 1.3, "ep_imbalance",
                         "rows the busiest process's experts compute over the mean of the "
                         "processes (dist.csv rows_in, final window)"},
    [TH_THROUGHPUT_DROP] = {"throughput_drop", 0.7, "throughput_drop",
                            "tokens per second at the end (median of the final window) over "
                            "those of the run's first steps after the fifth"},
};

void health_defaults(double th[TH_COUNT]) {
    for (int i = 0; i < TH_COUNT; i++) th[i] = HEALTH_THRESHOLDS[i].value;
}

/* the values threshold i can take, as a phrase for the message; 1 when v is one of them. A
 * fraction of the run or of the assignments is at most 1, a final window of nothing judges
 * nothing, and a number of steps is whole. */
static int threshold_in_range(int i, double v, const char **range) {
    switch (i) {
    case TH_FINAL_WINDOW: *range = "a fraction above 0 and at most 1"; return v > 0.0 && v <= 1.0;
    case TH_SETTLE: *range = "a fraction from 0 to below 1"; return v >= 0.0 && v < 1.0;
    case TH_COLLAPSE_SHARE:
    case TH_DROP_FRAC:
    case TH_LOAD_CHURN: *range = "a fraction from 0 to 1"; return v >= 0.0 && v <= 1.0;
    case TH_STARVE_STEPS:
    case TH_DROP_STEPS:
        *range = "a whole number of steps >= 0";
        return v >= 0.0 && v == floor(v) && v < 1e9;
    default: *range = "a number >= 0"; return v >= 0.0;
    }
}

int health_set(double th[TH_COUNT], const char *assignment, char *err, int errlen) {
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return set_error(err, errlen,
                         "'%s' is not NAME=VALUE (moe doctor --thresholds lists "
                         "the names)",
                         assignment);
    const size_t n = (size_t)(eq - assignment);
    for (int i = 0; i < TH_COUNT; i++) {
        if (strlen(HEALTH_THRESHOLDS[i].name) != n ||
            strncmp(HEALTH_THRESHOLDS[i].name, assignment, n) != 0)
            continue;
        char *end = NULL;
        double v = strtod(eq + 1, &end);
        const char *range = "";
        const int in_range = threshold_in_range(i, v, &range);
        if (end == eq + 1 || *end || !isfinite(v) || !in_range)
            return set_error(err, errlen, "threshold %.*s: '%s' is not %s", (int)n, assignment,
                             eq + 1, range);
        th[i] = v;
        return 0;
    }
    return set_error(err, errlen, "no threshold named '%.*s'; moe doctor --thresholds lists them",
                     (int)n, assignment);
}

void health_print(FILE *f) {
    fprintf(f,
            "| threshold | default | finding | what it measures |\n| --- | ---: | --- | --- |\n");
    for (int i = 0; i < TH_COUNT; i++)
        fprintf(f, "| `%s` | %g | %s | %s |\n", HEALTH_THRESHOLDS[i].name,
                HEALTH_THRESHOLDS[i].value, HEALTH_THRESHOLDS[i].finding,
                HEALTH_THRESHOLDS[i].help);
}

/* ---- live warnings -----------------------------------------------------------------------------
 */

void health_watch_init(HealthWatch *h, int n_moe, int E, const int *layer_of, int steps) {
    memset(h, 0, sizeof *h);
    h->n_moe = n_moe, h->E = E, h->layer_of = layer_of;
    health_defaults(h->th);
    h->settle = (int)ceil(h->th[TH_SETTLE] * steps);
    h->starve_run =
        (int *)calloc_check((size_t)(n_moe > 0 ? n_moe : 1) * (E > 0 ? E : 1), sizeof(int));
    h->drop_run = (int *)calloc_check((size_t)(n_moe > 0 ? n_moe : 1), sizeof(int));
}

void health_watch_free(HealthWatch *h) {
    free(h->starve_run);
    free(h->drop_run);
    memset(h, 0, sizeof *h);
}

enum { KIND_STARVE, KIND_DROP, KIND_GRAD };

/* one warning line of a kind, or the line that silences the rest of it */
static int say(HealthWatch *h, int kind, FILE *f, const char *lead, const char *line) {
    if (h->lines[kind] > HEALTH_MAX_LINES) return 0;
    if (h->lines[kind]++ == HEALTH_MAX_LINES) {
        static const char *const what[3] = {"starving-expert", "drop", "gradient"};
        fprintf(f,
                "%swarning: further %s warnings are silenced; moe doctor RUN_DIR lists every "
                "finding of the run\n",
                lead, what[kind]);
        return 1;
    }
    fprintf(f, "%swarning: %s\n", lead, line);
    return 1;
}

int health_watch_step(HealthWatch *h, const RouterAccum *ra, float grad_norm, int step, FILE *f,
                      const char *lead) {
    char line[512];
    int printed = 0;
    const int starve_steps = (int)h->th[TH_STARVE_STEPS], drop_steps = (int)h->th[TH_DROP_STEPS];
    const double fair = 1.0 / h->E;
    for (int b = 0; b < h->n_moe && ra->micro > 0 && step > h->settle; b++) {
        for (int e = 0; e < h->E; e++) {
            const double load = ra->load[b * h->E + e] / ra->micro;
            int *run = &h->starve_run[b * h->E + e];
            *run = load < h->th[TH_STARVE_SHARE] * fair ? *run + 1 : 0;
            if (*run != starve_steps) continue;
            snprintf(line, sizeof line,
                     "step %d: layer %d expert %d has had under %.2f %% of the assignments "
                     "(%.0f %% of its fair share) for %d steps, now %.2f %%; raise moe.aux_coef "
                     "or use moe.balance=aux_free (handbook 6.5)",
                     step, h->layer_of[b], e, 100.0 * h->th[TH_STARVE_SHARE] * fair,
                     100.0 * h->th[TH_STARVE_SHARE], starve_steps, 100.0 * load);
            printed += say(h, KIND_STARVE, f, lead, line);
        }
        const double drop = ra->drop[b] / ra->micro;
        int *run = &h->drop_run[b];
        *run = drop > h->th[TH_DROP_FRAC] ? *run + 1 : 0;
        if (*run == drop_steps) {
            snprintf(
                line, sizeof line,
                "step %d: layer %d has dropped over %.0f %% of its assignments for %d steps "
                "(now %.1f %%); raise moe.capacity_factor or balance the router (handbook 6.6)",
                step, h->layer_of[b], 100.0 * h->th[TH_DROP_FRAC], drop_steps, 100.0 * drop);
            printed += say(h, KIND_DROP, f, lead, line);
        }
    }
    const int bad = !isfinite(grad_norm);
    if (bad && !h->grad_bad) {
        snprintf(line, sizeof line,
                 "step %d: the gradient norm is %g: this step's update makes the weights %s; "
                 "lower train.lr or keep train.clip > 0 (handbook 6.1)",
                 step, grad_norm, "not finite");
        printed += say(h, KIND_GRAD, f, lead, line);
    }
    h->grad_bad = bad;
    return printed;
}
