/*
 * doctor_report.c: what each finding of `moe doctor` means (its causes, its fix, where the
 * handbook explains it), and the report as text or JSON (doctor.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "measure/doctor.h"

/* The "read" column names sections of handbook.md's chapter 6 (tests/test_doctor.sh checks that
 * each exists). */
const FindingKind FINDINGS[F_COUNT] = {
    [F_DIVERGENCE] = {"divergence", SEV_FAILURE,
                      "the run diverged: the loss left the finite numbers",
                      "a learning rate too high for the model's depth and init, or reached too "
                      "fast (a short warm-up); the router's logits overflowing in a low precision",
                      "lower train.lr or raise train.warmup; try "
                      "model.norm=dssn, model.init=tiny and moe.z_coef=1e-3 (chapter 5); resume "
                      "from the last checkpoint with the change",
                      "train.lr train.warmup train.clip model.norm model.init moe.z_coef",
                      "6.1 Divergence and NaN"},
    [F_ROLLBACK_LIMIT] = {"rollback_limit", SEV_FAILURE,
                          "the run stopped at a spike after train.max_rollbacks rollbacks",
                          "spikes that rollbacks do not cure: a bad stretch of data longer than "
                          "the batches each rollback skips, or a learning rate at the edge of "
                          "stability, which spikes on clean data too",
                          "a rollback's spike soon after the step the one before returned to: "
                          "raise train.rollback_skip; spikes far apart: lower train.lr, or "
                          "train.beta2 lower or train.eps larger; then moe train --resume "
                          "RUN_DIR --set train.max_rollbacks=N with N above the rollbacks so far",
                          "train.max_rollbacks train.rollback_skip train.rollback_every train.lr "
                          "train.beta2 train.eps",
                          "6.4 Loss and gradient spikes"},
    [F_NO_LEARNING] = {"no_learning", SEV_FAILURE,
                       "the model learned nothing: its loss is no better than a uniform guess",
                       "a learning rate of 0 or a schedule that never leaves it; a checkpoint "
                       "(--resume, --init) whose weights are broken (enormous logits); a "
                       "train.csv that another program wrote",
                       "check train.lr and train.warmup; start from a fresh init or an earlier "
                       "checkpoint; set train.diverge_loss so such a run stops at once",
                       "train.lr train.warmup train.diverge_loss", "6.14 Reading a report"},
    [F_ROUTER_COLLAPSE] = {"router_collapse", SEV_FAILURE,
                           "router collapse: a few experts take most of the tokens",
                           "no balancing or too weak a balance loss; a large router init that "
                           "makes the first choices stick; too high a learning rate on the router",
                           "moe.balance=aux with moe.aux_coef=1e-2 (or moe.balance=aux_free); "
                           "moe.z_coef=1e-3; a smaller model.init_scale",
                           "moe.balance moe.aux_coef moe.z_coef model.init_scale train.lr",
                           "6.2 Router collapse"},
    [F_LOSS_RISING] = {"loss_rising", SEV_WARNING,
                       "the training loss rises after warm-up: the learning rate is too high",
                       "a peak learning rate beyond what the model tolerates; too short a warm-up; "
                       "no decay (train.min_lr=1)",
                       "lower train.lr (by 2 to 4x); raise train.warmup; let train.min_lr decay",
                       "train.lr train.warmup train.min_lr", "6.3 Loss rising after warm-up"},
    [F_LOSS_SPIKES] = {"loss_spikes", SEV_WARNING, "loss spikes",
                       "updates too large for a moment: a learning rate near the edge of "
                       "stability, a router that flips many tokens at once, a bad batch",
                       "lower train.lr; keep train.clip at 1; model.norm=dssn; moe.z_coef=1e-3",
                       "train.lr train.clip model.norm moe.z_coef", "6.4 Loss and gradient spikes"},
    [F_GRAD_SPIKES] = {"grad_spikes", SEV_WARNING, "gradient-norm spikes",
                       "the same as loss spikes, one step earlier: updates that jump",
                       "lower train.lr; keep train.clip at 1 (an outlying gradient then weighs no "
                       "more in AdamW's running means than one of norm 1); model.norm=dssn",
                       "train.lr train.clip model.norm", "6.4 Loss and gradient spikes"},
    [F_SPIKE_ACTIONS] = {"spike_actions", SEV_NOTE,
                         "spikes were acted on: updates skipped or steps rolled back",
                         "spikes of what train.spike_on names, met with train.spike_action; a "
                         "rollback's undone steps are in rolled_back.csv, not train.csv, whose "
                         "curve therefore looks clean",
                         "nothing while they are few; spikes that recur: see loss_spikes and "
                         "grad_spikes, and lower train.lr",
                         "train.spike_action train.spike_on train.rollback_every "
                         "train.rollback_skip train.max_rollbacks",
                         "6.4 Loss and gradient spikes"},
    [F_STARVING_EXPERTS] = {"starving_experts", SEV_WARNING,
                            "starving experts: some experts get almost no tokens for a long span",
                            "no balancing or too weak a balance; experts that lost the race early "
                            "and never get a gradient to recover",
                            "moe.balance=aux or aux_free; raise moe.aux_coef; moe.jitter or "
                            "moe.noise early on",
                            "moe.balance moe.aux_coef moe.bias_rate", "6.5 Starving experts"},
    [F_DROP_STORM] = {"drop_storm", SEV_WARNING,
                      "drop storm: the capacity drops a large share of the assignments",
                      "moe.capacity_factor too small for the router's imbalance; an imbalanced "
                      "router (the busiest expert overflows first)",
                      "raise moe.capacity_factor (1.25 to 2) or train dropless "
                      "(moe.capacity_factor=0); balance the router",
                      "moe.capacity_factor moe.min_capacity moe.drop_policy moe.balance",
                      "6.6 Drop storms"},
    [F_BALANCE_DOMINATES] = {"balance_dominates", SEV_WARNING,
                             "the balancing loss dominates the language-model loss",
                             "moe.aux_coef far above 1e-2: the router is trained to be uniform, "
                             "not to route well; or a language-model loss so small (a memorised "
                             "training set) that even a usual coefficient outweighs it",
                             "moe.aux_coef=1e-2 or lower (1e-3); or moe.balance=aux_free, which "
                             "adds no loss",
                             "moe.balance moe.aux_coef", "6.7 A balance loss that dominates"},
    [F_LOGIT_GROWTH] = {"logit_growth", SEV_WARNING, "the router's logits grew large",
                        "no z-loss (moe.z_coef=0) or too small a one, with a high learning rate: "
                        "large logits make the softmax brittle and, in bf16, inexact",
                        "moe.z_coef=1e-3; lower train.lr",
                        "moe.z_coef train.lr moe.router_precision", "6.8 Growing router logits"},
    [F_BIAS_OSCILLATION] = {"bias_oscillation", SEV_WARNING,
                            "aux-free biases oscillate: the load swings between experts step to "
                            "step",
                            "moe.bias_rate too large for the spread of the router's scores: each "
                            "update overshoots",
                            "lower moe.bias_rate (1e-3); moe.bias_update=proportional",
                            "moe.bias_rate moe.bias_update moe.score", "6.9 Aux-free biases"},
    [F_BIAS_DRIFT] = {"bias_drift", SEV_WARNING, "aux-free biases drift without bound",
                      "the router's logits run away from the biases (no z-loss, high learning "
                      "rate), so the biases chase them",
                      "moe.z_coef=1e-3; lower train.lr; moe.bias_update=proportional",
                      "moe.bias_rate moe.bias_update moe.z_coef train.lr", "6.9 Aux-free biases"},
    [F_OVERFITTING] = {"overfitting", SEV_WARNING,
                       "overfitting: the validation loss rises while the training loss falls",
                       "too little training data for the steps (see data_repeated); a model too "
                       "large for the data",
                       "more data (data.train); fewer train.steps; more train.weight_decay",
                       "data.train train.steps train.weight_decay", "6.10 Train/validation gap"},
    [F_DATA_CHANGED] = {"data_changed", SEV_WARNING, "the data changed during the run",
                        "a resume with --allow-data-change, or a shard rebuilt in place: the "
                        "run's steps before and after saw different data",
                        "resume with the run's own shards; if the change was meant, start a new "
                        "run (or say so where the run is reported)",
                        "data.train data.val", "6.11 Data problems"},
    [F_DATA_REPEATED] = {"data_repeated", SEV_WARNING, "the run repeats its training data",
                         "a shard smaller than the tokens the run trains on",
                         "a larger data.train (moe corpus, moe synth --tokens); fewer "
                         "train.steps",
                         "data.train train.steps train.batch model.seq_len", "6.11 Data problems"},
    [F_EP_IMBALANCE] = {"ep_imbalance", SEV_WARNING,
                        "expert-parallel imbalance: one process computes most rows, the others "
                        "wait in the exchange",
                        "an imbalanced router: the busiest experts' process sets every step's "
                        "pace, and dropless training (moe.capacity_factor=0) puts no bound on it",
                        "balance the router (moe.balance, moe.aux_coef; moe.balance_groups=dist.ep "
                        "balances the processes themselves); or moe.capacity_factor to bound "
                        "the busiest",
                        "dist.ep moe.balance moe.aux_coef moe.balance_groups moe.capacity_factor",
                        "6.12 Expert-parallel imbalance"},
    [F_THROUGHPUT_DROP] = {"throughput_drop", SEV_WARNING, "throughput fell during the run",
                           "fewer threads or cores after a resume, another job on the machine, "
                           "thermal throttling; a growing imbalance of the experts",
                           "compare provenance.txt's segments (threads, host); give the run the "
                           "machine (train.threads = the cores)",
                           "train.threads", "6.13 Falling throughput"},
    [F_INCOMPLETE] = {"incomplete", SEV_NOTE, "the run has not reached train.steps",
                      "it was stopped (--until, a kill) or is still running",
                      "moe train --resume RUN_DIR continues it", "train.steps",
                      "6.14 Reading a report"},
};

static const char *const SEVERITY[3] = {"note", "warning", "failure"};
static const char *const SEVERITY_HEAD[3] = {"NOTE", "WARNING", "FAILURE"}; /* the text report's */

int doctor_exit_status(const DoctorReport *r) {
    Severity worst = SEV_NOTE;
    for (int i = 0; i < r->n_found; i++)
        if (FINDINGS[r->found[i].id].severity > worst) worst = FINDINGS[r->found[i].id].severity;
    return worst == SEV_FAILURE ? 3 : worst == SEV_WARNING ? 1 : 0;
}

int doctor_has(const DoctorReport *r, const char *id) {
    for (int i = 0; i < r->n_found; i++)
        if (strcmp(FINDINGS[r->found[i].id].id, id) == 0) return 1;
    return 0;
}

/* "key=value ..." of the settings named in keys (space-separated) in this run, from the text
 * of its settings (config_to_text: "key = value" lines) */
static void settings_of(const char *text, const char *keys, char *out, size_t n) {
    out[0] = '\0';
    const char *s = keys;
    while (*s) {
        const size_t len = strcspn(s, " ");
        for (const char *line = text; line && *line;) {
            const char *eol = strchr(line, '\n');
            if (strncmp(line, s, len) == 0 && strncmp(line + len, " = ", 3) == 0) {
                const size_t used = strlen(out);
                snprintf(out + used, n - used, "%s%.*s=%.*s", used ? " " : "", (int)len, s,
                         (int)((eol ? eol : line + strlen(line)) - line - len - 3), line + len + 3);
                break;
            }
            line = eol ? eol + 1 : NULL;
        }
        s += len;
        while (*s == ' ') s++;
    }
}

/* the verdict's word, from the exit status */
static const char *verdict(const DoctorReport *r) {
    const int rc = doctor_exit_status(r);
    return rc == 3 ? "failure" : rc == 1 ? "warning" : "healthy";
}

static int count(const DoctorReport *r, Severity s) {
    int n = 0;
    for (int i = 0; i < r->n_found; i++) n += FINDINGS[r->found[i].id].severity == s;
    return n;
}

void doctor_print(const DoctorReport *r, FILE *f) {
    fprintf(f, "moe doctor %s: step %d of %d; read %s\n", r->dir, r->last_step, r->cfg.steps,
            r->files);
    if (isfinite(r->final_loss))
        fprintf(f, "last training loss %.4f%s", r->final_loss, isfinite(r->final_val) ? "" : "\n");
    if (isfinite(r->final_val)) fprintf(f, ", last validation loss %.4f\n", r->final_val);
    char *text = config_to_text(&r->cfg);
    for (int i = 0; i < r->n_found; i++) {
        const Finding *found = &r->found[i];
        const FindingKind *k = &FINDINGS[found->id];
        char settings[1024];
        settings_of(text, found->settings ? found->settings : k->settings, settings,
                    sizeof settings);
        fprintf(f, "\n%s %s: %s\n", SEVERITY_HEAD[k->severity], k->id, k->title);
        for (const char *line = r->found[i].evidence; *line;) {
            const char *eol = strchr(line, '\n');
            fprintf(f, "  seen:     %.*s\n", (int)(eol - line), line);
            line = eol + 1;
        }
        fprintf(f, "  causes:   %s\n  fix:      %s\n  settings: %s\n  read:     handbook %s\n",
                k->causes, found->fix[0] ? found->fix : k->fix, settings, k->read);
    }
    free(text);
    const int fail = count(r, SEV_FAILURE), warn = count(r, SEV_WARNING);
    fprintf(f, "\nverdict: %s (%d failure%s, %d warning%s); exit status %d\n", verdict(r), fail,
            fail == 1 ? "" : "s", warn, warn == 1 ? "" : "s", doctor_exit_status(r));
}

static void json_number(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
}

void doctor_print_json(const DoctorReport *r, FILE *f) {
    fputs("{\"run\": ", f);
    json_write_string(f, r->dir);
    fprintf(f, ", \"step\": %d, \"steps\": %d, \"final_loss\": ", r->last_step, r->cfg.steps);
    json_number(f, r->final_loss);
    fputs(", \"final_val_loss\": ", f);
    json_number(f, r->final_val);
    fprintf(f, ", \"verdict\": \"%s\", \"exit_status\": %d, \"findings\": [", verdict(r),
            doctor_exit_status(r));
    char *text = config_to_text(&r->cfg);
    for (int i = 0; i < r->n_found; i++) {
        const Finding *found = &r->found[i];
        const FindingKind *k = &FINDINGS[found->id];
        char settings[1024];
        settings_of(text, found->settings ? found->settings : k->settings, settings,
                    sizeof settings);
        fprintf(f, "%s\n  {\"id\": \"%s\", \"severity\": \"%s\", \"title\": ", i ? "," : "", k->id,
                SEVERITY[k->severity]);
        json_write_string(f, k->title);
        fputs(", \"evidence\": [", f);
        int first = 1;
        for (const char *line = r->found[i].evidence; *line;) {
            const char *eol = strchr(line, '\n');
            char buf[DOCTOR_EVIDENCE];
            snprintf(buf, sizeof buf, "%.*s", (int)(eol - line), line);
            fputs(first ? "" : ", ", f);
            json_write_string(f, buf);
            first = 0;
            line = eol + 1;
        }
        fputs("], \"causes\": ", f);
        json_write_string(f, k->causes);
        fputs(", \"fix\": ", f);
        json_write_string(f, found->fix[0] ? found->fix : k->fix);
        fputs(", \"settings\": ", f);
        json_write_string(f, settings);
        fputs(", \"read\": ", f);
        json_write_string(f, k->read);
        fputs("}", f);
    }
    free(text);
    fputs(r->n_found ? "\n]}\n" : "]}\n", f);
}
