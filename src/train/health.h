/*
 * health.h: when a run counts as unhealthy. ONE table of thresholds, read by `moe doctor`
 * (which judges a whole run directory afterwards, measure/doctor.h) and by the live warnings
 * of `moe train` (which judge each step as it ends), so the two never disagree on what
 * "starving" or "a drop storm" means. `moe doctor --thresholds` prints the table; `moe doctor
 * --threshold NAME=VALUE` changes one for a diagnosis.
 */
#ifndef MOE_TRAIN_HEALTH_H
#define MOE_TRAIN_HEALTH_H

#include <stdio.h>

#include "train/train_log.h"

typedef enum {
    TH_FINAL_WINDOW, /* the end of a run, whose state is judged: this fraction of its steps */
    TH_SETTLE,       /* the start of a run, whose routing still settles: not judged for streaks */
    TH_LOSS_SPIKES,
    TH_GRAD_SPIKES,
    TH_GRAD_SPIKE_RATIO,
    TH_LR_RISE,
    TH_COLLAPSE_SHARE,
    TH_STARVE_SHARE,
    TH_STARVE_STEPS,
    TH_DROP_FRAC,
    TH_DROP_STEPS,
    TH_AUX_SHARE,
    TH_LOGIT_MAX,
    TH_LOGIT_GROWTH,
    TH_LOAD_CHURN,
    TH_BIAS_DRIFT,
    TH_VAL_RISE,
    TH_EPOCHS,
    TH_EP_IMBALANCE,
    TH_THROUGHPUT_DROP,
    TH_COUNT
} HealthKey;

typedef struct {
    const char *name;    /* as --threshold and --thresholds spell it */
    double value;        /* the default */
    const char *finding; /* the finding (or live warning) it decides */
    const char *help;    /* what it measures, one line */
} HealthThreshold;

extern const HealthThreshold HEALTH_THRESHOLDS[TH_COUNT];

/* th[i] = the defaults */
void health_defaults(double th[TH_COUNT]);
/* "NAME=VALUE" into th; 0, or -1 with a message naming the thresholds in err */
int health_set(double th[TH_COUNT], const char *assignment, char *err, int errlen);
/* the table as markdown (name | default | finding | what it measures) */
void health_print(FILE *f);

/* ---- live warnings of moe train ----------------------------------------------------------------
 * After every optimizer step past the first TH_SETTLE of train.steps: an expert below
 * TH_STARVE_SHARE of its fair share for
 * TH_STARVE_STEPS steps in a row, a layer dropping more than TH_DROP_FRAC of its assignments for
 * TH_DROP_STEPS steps in a row, a gradient norm that is not a finite number. One line on stderr
 * when a condition begins (not while it lasts), at most HEALTH_MAX_LINES lines of a kind, then
 * one line saying the rest are silenced: a run never floods its terminal. A resumed run counts
 * its streaks from the step it resumes at. */
#define HEALTH_MAX_LINES 3

typedef struct {
    int n_moe, E;
    double th[TH_COUNT];
    int *starve_run;     /* (n_moe, E) consecutive steps below the starving share */
    int *drop_run;       /* (n_moe) consecutive steps above the drop fraction */
    int lines[3];        /* lines printed of each kind: starving, drops, gradient */
    int grad_bad;        /* the previous step's gradient norm was not finite */
    int settle;          /* the steps up to this one are not judged for starving and drops */
    const int *layer_of; /* (n_moe) the model layer of each MoE block (for the messages) */
} HealthWatch;

/* steps: train.steps, whose first TH_SETTLE are the routing's settling */
void health_watch_init(HealthWatch *h, int n_moe, int E, const int *layer_of, int steps);
void health_watch_free(HealthWatch *h);
/* judge one optimizer step (its RouterAccum before the next reset); prints to f, each line
 * after `lead` ("\r\033[K" clears a live progress line first; "" otherwise). Returns the
 * number of lines printed. */
int health_watch_step(HealthWatch *h, const RouterAccum *ra, float grad_norm, int step, FILE *f,
                      const char *lead);

#endif
