/*
 * train_log.h: what the training loop writes into the run directory besides checkpoints:
 * router.csv (the router statistics of each optimizer step), domains.csv and val_router.csv
 * (routing over the validation set), dist.csv (each process's traffic), and the spikes of
 * train.csv (a step's loss or gradient norm far above the steps before it).
 */
#ifndef MOE_TRAIN_LOG_H
#define MOE_TRAIN_LOG_H

#include <stdio.h>

#include "io/data.h"
#include "model/model.h"
#include "parallel/dist.h"
#include "train/train.h"

/* ---- router.csv -------------------------------------------------------------------------------
 * One row per optimizer step and MoE block. Loads are averaged over the step's micro-batches,
 * then MaxVio and CV are taken of the averaged load: the balance of the whole step's batch;
 * maxvio_group the same over groups of experts (the groups of moe.balance_groups, else the
 * dist.ep members' shares: 0 when that is one group). max_logit and lse_mean are micro-batch
 * means of the largest |router logit| and of the mean logsumexp (what the z-loss squares). */
typedef struct {
    int n_moe, E, micro;
    int groups;        /* the expert groups of maxvio_group (moe.balance_groups, else dist.ep) */
    double *load;      /* (n_moe, E) summed over micro-batches */
    double *count;     /* (n_moe, E) assignments per expert, summed over micro-batches (and
                          processes): whole numbers, what the aux-free bias update compares */
    double *entropy;   /* (n_moe) */
    double *top1;      /* (n_moe) */
    double *drop;      /* (n_moe) */
    double *pad;       /* (n_moe) fraction of computed expert rows that are padding */
    double *edrop;     /* (n_moe, E) fraction of each expert's routed assignments dropped */
    double *max_logit; /* (n_moe) the largest |router logit| of each micro-batch, summed */
    double *lse;       /* (n_moe) the mean logsumexp of each micro-batch, summed */
    float *tmp;        /* (E) */
} RouterAccum;

void router_accum_init(RouterAccum *r, int n_moe, int E, int groups);
void router_accum_free(RouterAccum *r);
void router_accum_reset(RouterAccum *r);
/* what every MoE block of m's last forward routed (model_route_stats, route_face.h) */
void router_accum_add(RouterAccum *r, const Model *m);
/* across processes: every statistic becomes the mean over the processes (equal shares of the
 * batch), the counts their sum */
void router_accum_share(RouterAccum *r, Dist *d);
/* router.csv's header for E experts into buf (n bytes) */
void router_csv_header(char *buf, size_t n, int E);
void router_accum_write(const RouterAccum *r, const Model *m, FILE *f, int step);

/* ---- train.csv ---------------------------------------------------------------------------------
 * One row: step,loss,aux_loss,z_loss,lr,grad_norm,tok_per_s,val_loss,loss_spike,grad_spike,
 * then mtp1_loss .. mtpD_loss, the n_mtp values of mtp (model.mtp_depth D; none when 0), then
 * with a train.spike_action other than none `skipped` (1: the step's update was not applied;
 * skipped < 0: no such column); tok_s or val_loss NAN leaves its field empty (a step without an
 * evaluation, a diverged step). */
void train_csv_row(FILE *f, int step, double loss, double aux, double z, float lr, float norm,
                   double tok_s, float val_loss, int loss_spike, int grad_spike, const double *mtp,
                   int n_mtp, int skipped);

/* ---- domains.csv, val_router.csv (an evaluation's routing), dist.csv ---------------------------
 */
void domains_csv_write(FILE *f, const DomainCounts *dc, const Model *m, const Shard *val, int step);
void val_router_csv_write(FILE *f, const DomainCounts *dc, const Model *m, float *load, int step);
/* dist.csv's rows of this step: every process's traffic since step_start */
void dist_csv_write(FILE *f, const Model *m, Dist *d, const DistTally *step_start, int step);
/* pipe.csv's rows of this step (a pipeline, model/pipe.h): every action of every stage (its
 * first process's), when it started and ended in seconds from the step's start */
void pipe_csv_write(FILE *f, const Model *m, Dist *d, int step);

/* ---- spikes -----------------------------------------------------------------------------------
 * A spike is a step whose value x (the training loss, or the gradient norm before clipping)
 * exceeds the mean of the preceding `window` steps' values by more than k of their standard
 * deviations: x > mean + k std (train.spike_window, train.spike_k). The first `window` steps of
 * a run are not judged; a value that is not finite is no spike (it is a divergence). */
typedef struct {
    int window, n, head;
    float k;
    double *v; /* (window) the last values, a ring */
} SpikeWatch;

void spike_watch_init(SpikeWatch *s, int window, float k);
void spike_watch_free(SpikeWatch *s);
/* 1 when x is a spike against the values pushed before it; then x joins the window */
int spike_watch_push(SpikeWatch *s, double x);
/* A resumed run: push the loss and grad_norm of train.csv's rows up to step `upto` (the rows
 * the resumed run keeps), so that its judgement continues as if it had not stopped. A missing
 * file or column pushes nothing. */
void spike_watch_refill(SpikeWatch *loss, SpikeWatch *grad, const char *train_csv, int upto);

#endif
