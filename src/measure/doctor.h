/*
 * doctor.h: `moe doctor RUN_DIR`, a diagnosis of a run directory after (or during) training.
 *
 * It reads what moe train wrote (config.txt, provenance.txt, train.csv, router.csv,
 * val_router.csv, dist.csv, rollbacks.csv, rolled_back.csv: whatever exists), judges it against the
 * thresholds of train/health.h, and reports each finding with its evidence (steps, layers, experts,
 * values), its likely causes, the settings to change and the handbook section to read. The rules
 * are in doctor.c; the findings' texts and the report's two forms (text, JSON) in doctor_report.c.
 *
 * Exit status: 0 healthy (notes only), 1 a warning, 3 a failure; 2 when the directory cannot
 * be read as a run or a file in it holds what moe train cannot have written (the message names
 * the file and line, and quotes it escaped).
 */
#ifndef MOE_MEASURE_DOCTOR_H
#define MOE_MEASURE_DOCTOR_H

#include <stdio.h>

#include "config/config.h"
#include "train/health.h"

typedef enum { SEV_NOTE, SEV_WARNING, SEV_FAILURE } Severity;

/* What moe doctor can find. The order is the report's. */
typedef enum {
    F_DIVERGENCE,
    F_ROLLBACK_LIMIT,
    F_NO_LEARNING,
    F_ROUTER_COLLAPSE,
    F_LOSS_RISING,
    F_LOSS_SPIKES,
    F_GRAD_SPIKES,
    F_SPIKE_ACTIONS,
    F_STARVING_EXPERTS,
    F_DROP_STORM,
    F_BALANCE_DOMINATES,
    F_LOGIT_GROWTH,
    F_BIAS_OSCILLATION,
    F_BIAS_DRIFT,
    F_OVERFITTING,
    F_DATA_CHANGED,
    F_DATA_REPEATED,
    F_EP_IMBALANCE,
    F_THROUGHPUT_DROP,
    F_INCOMPLETE,
    F_COUNT
} FindingId;

typedef struct {
    const char *id; /* "router_collapse": the name scripts and --json use */
    Severity severity;
    const char *title;    /* one line: what is wrong */
    const char *causes;   /* the likely causes, one sentence each */
    const char *fix;      /* what to change, settings by name */
    const char *settings; /* the keys whose values in this run the report shows, space-separated */
    const char *read;     /* the handbook section */
} FindingKind;

extern const FindingKind FINDINGS[F_COUNT];

#define DOCTOR_EVIDENCE 4096

typedef struct {
    FindingId id;
    char evidence[DOCTOR_EVIDENCE]; /* lines, each ending in '\n' */
    /* the fix this run calls for where the kind's general one does not fit (a spike's remedy
     * depends on what the run shows): "" for the kind's fix, NULL for the kind's settings */
    char fix[1024];
    const char *settings;
} Finding;

typedef struct {
    char dir[1024];
    Config cfg;
    int last_step, n_moe;         /* the last step train.csv records; MoE blocks */
    double final_loss, final_val; /* NAN when absent */
    int win_from;                 /* the first step of the final window */
    int settle_to;                /* the last step of the settling start (not in streaks) */
    char files[256];              /* the files read, for the report's first lines */
    Finding found[F_COUNT];
    int n_found;
} DoctorReport;

/* Diagnose dir with the thresholds th. Returns 0, or -1 with a message in err when dir is not a
 * run directory or a file in it cannot be read (the caller exits 2). */
int doctor_run(DoctorReport *r, const char *dir, const double th[TH_COUNT], char *err, int errlen);
/* 0 healthy, 1 a warning, 3 a failure */
int doctor_exit_status(const DoctorReport *r);
void doctor_print(const DoctorReport *r, FILE *f);
void doctor_print_json(const DoctorReport *r, FILE *f);
/* is finding `id` in the report (by its name)? */
int doctor_has(const DoctorReport *r, const char *id);

#endif
