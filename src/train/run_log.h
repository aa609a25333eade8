/*
 * run_log.h: a training run's records in its run directory, behind one RunLog: train.csv,
 * router.csv, domains.csv, val_router.csv, val_domains.csv, mix.csv, dist.csv (more than one
 * process) and replay.csv (--replay-routing), opened together (cut back to the checkpoint on
 * resume), written at each step and evaluation, flushed with each checkpoint, closed at the
 * end. And the run's watches, behind calls of their own (RunWatch): the spikes train.csv
 * marks, and the live warnings of health.h.
 *
 * The files are written by the first process only; the others write to /dev/null, so the code
 * that fills them is the same everywhere. The rows themselves are train_log.h's.
 */
#ifndef MOE_TRAIN_RUN_LOG_H
#define MOE_TRAIN_RUN_LOG_H

#include <stdio.h>

#include "io/data.h"
#include "model/model.h"
#include "model/route_tape.h"
#include "parallel/dist.h"
#include "train/health.h"
#include "train/train.h"
#include "train/train_log.h"

/* What a run's records are made of: where, which steps, which data. */
typedef struct {
    const char *out_dir;
    Dist *d;         /* the processes (NULL: one) */
    int keep;        /* a resumed run's step (the rows it keeps); -1: a new run */
    int start, last; /* the steps [start, last) this command trains */
    const Shard *train, *val;
    Loader *loader;                                /* its windows drawn of each domain (mix.csv) */
    const double (*mix_target)[SHARD_MAX_DOMAINS]; /* (2) the mix's shares, before and after */
    int mix_end_step;        /* the step where the end mix takes over (INT_MAX: none) */
    const RouteTape *replay; /* --replay-routing's tape (replay.csv); NULL: none */
} RunLogSpec;

/* The values of one optimizer step as train.csv records them. */
typedef struct {
    int step;            /* the optimizer steps taken after it (Model.step) */
    double loss, aux, z; /* the batch's means */
    float lr, norm;      /* the learning rate, the gradient norm before clipping */
    double tok_s;        /* the whole batch's tokens a second; NAN: none */
    float val_loss;      /* NAN: no evaluation at this step */
    int loss_spike, grad_spike;
    int skipped;             /* 1: the update was not applied (train.spike_action=skip) */
    double mtp[MOE_MTP_MAX]; /* the multi-token prediction modules' losses, the batch's means */
    int n_mtp;               /* model.mtp_depth */
} StepValues;

typedef struct {
    RunLogSpec s;
    FILE *train, *router, *domains, *val_router, *mix, *val_domains, *dist, *pipe, *replay;
    RouterAccum ra;                         /* router.csv's statistics of the step */
    DomainCounts dc;                        /* an evaluation's routing and loss by domain */
    int mix_from;                           /* the step mix.csv's next row counts from */
    long long replay_choices, replay_flips; /* the tape's counts at the last replay.csv row */
    int with_skipped; /* train.csv has the column skipped (a train.spike_action) */
} RunLog;

/* Open every file (exit 2 on a run directory that cannot take them). */
void run_log_open(RunLog *g, const RunLogSpec *s, const Config *c, const Model *m);
/* An evaluation's counts, zeroed: evaluate() fills them, run_log_eval writes them. */
DomainCounts *run_log_domains(RunLog *g);
/* The rows of an evaluation at optimizer step `step`: val_domains.csv, domains.csv,
 * val_router.csv. */
void run_log_eval(RunLog *g, const Model *m, int step);
/* dist.csv's rows of the step: its traffic since step_start, before an evaluation adds its
 * own. Nothing in one process. */
void run_log_traffic(RunLog *g, const Model *m, const DistTally *step_start, int step);
/* The rows of a step: mix.csv (at an evaluation, where the end mix takes over, and at the end,
 * so that every row lies inside one mix), train.csv, router.csv, replay.csv. */
void run_log_step(RunLog *g, const Model *m, const StepValues *v);
/* A diverged step: its train.csv row, the files closed as they are, then exit 3 saying so. */
void run_log_diverged(RunLog *g, const StepValues *v, int root);
/* Before a checkpoint: everything written so far reaches the files. */
void run_log_flush(RunLog *g);
void run_log_close(RunLog *g);

/* ---- the watches ------------------------------------------------------------------------- */

typedef struct {
    SpikeWatch loss_spikes, grad_spikes;
    int n_loss_spikes, n_grad_spikes; /* the spikes of the steps this command trained */
    HealthWatch health;
    int *moe_layer;   /* (n_moe) the layer of each MoE block */
    int root;         /* only the first process prints warnings */
    const char *lead; /* before a warning: "\r\033[K" over a live line, else "" */
} RunWatch;

/* A resumed run (keep > 0) judges its first steps against the rows of train_csv it keeps. */
void run_watch_init(RunWatch *w, const Config *c, int n_moe, const char *train_csv, int keep,
                    int root, int live);
/* The spikes of a step's loss and gradient norm (judged against the steps before it, on the
 * values as train.csv records them: a resumed run judges as the unbroken one), into
 * v->loss_spike and v->grad_spike. */
void run_watch_spikes(RunWatch *w, StepValues *v);
/* The live warnings of health.h after the step (the step's RouterAccum). */
void run_watch_health(RunWatch *w, const RouterAccum *ra, float norm, int step);
/* The run's closing line on its spikes. */
void run_watch_report(const RunWatch *w, const Config *c);
void run_watch_free(RunWatch *w);

#endif
