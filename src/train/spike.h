/*
 * spike.h: what a run does at a spike (train.spike_action), and the batches a rollback skips.
 *
 * A spike (train_log.h) is a step whose training loss or gradient norm (before clipping) lies
 * above the mean of the train.spike_window steps before it plus train.spike_k standard
 * deviations. It is judged after the step's passes and before its update, on the values as
 * train.csv records them (six decimals), so that a resumed run judges as the unbroken one did;
 * the first process judges, and the others follow its verdict. Then, for a spike of what
 * train.spike_on names (the loss, the gradient norm, or either), by train.spike_action:
 *
 *   none      train.csv marks it (loss_spike, grad_spike) and the update is applied.
 *   skip      the update is not applied (model_skip_update): the weights, the AdamW moments and
 *             the aux-free biases stay as they were and the gradients are dropped; AdamW's
 *             own step count, which its bias correction reads, counts the updates applied
 *             (Model.skipped). train.csv's column `skipped` is 1 at that step.
 *   rollback  the run returns to rollback.bin, the checkpoint kept for it: written after
 *             each multiple of train.rollback_every with no spike (of spike_on's kind) in the
 *             rollback_every steps up to it (a spike before the first is skipped instead). The batches of the
 *             steps it undoes (the spike's among them) are skipped, and train.rollback_skip
 *             batches after them (a bad stretch of data seldom ends where a spike shows), and
 *             the steps go on from the step returned to. After train.max_rollbacks rollbacks
 *             a spike ends the run (exit status 3, its row in train.csv).
 *
 * The data stream. Step s (0-based) trains on batch s of the loader's stream unless rollbacks
 * skipped batches: each row of rollbacks.csv (rollback,spike_step,to_step,skip_at,
 * skip_batches) says that at the start of step skip_at (= to_step) the run draws skip_batches
 * batches and throws them away (loader_skip): those the undone steps to_step .. spike_step - 1
 * trained on, and train.rollback_skip more. A later step s trains on batch s + (the batches
 * skipped at steps <= s). Every row holds for the rest of the run, whichever step a later
 * rollback returns to. data.corrupt_from counts batches of this stream, so a corrupted stretch
 * a rollback skipped is not met again.
 *
 * A rollback, in the order that survives a crash at any moment (train.c's roll_back):
 *   1. the spiking step's rows are written; every process loads rollback.bin (its step is
 *      to_step);
 *   2. the first process appends the undone steps' rows of train.csv (to_step .. spike_step]
 *      to rolled_back.csv, each behind the rollback's number;
 *   3. it copies rollback.bin over ckpt.bin;
 *   4. it appends the rollback's row to rollbacks.csv, then a line to provenance.txt;
 *   5. the run's files are cut back to to_step as a resume cuts them, and the steps go on.
 * Killed before 4, the run resumes from a checkpoint of the undone steps, or of to_step,
 * without the rollback: it trains the same steps again, spikes at the same step and rolls back
 * the same way (rolled_back.csv keeps only the rows of the rollbacks rollbacks.csv records).
 * Killed after 4, it resumes from to_step with the skip, as the unbroken run goes on.
 */
#ifndef MOE_TRAIN_SPIKE_H
#define MOE_TRAIN_SPIKE_H

#include <stdio.h>

#include "config/config.h"
#include "parallel/dist.h"
#include "train/run_log.h"

/* A verdict on a step that spiked, beside MOE_SPIKE_NONE/SKIP/ROLLBACK: the run stops */
#define SPIKE_STOP (-1)

/* One rollback's skip: at the start of step `at`, `batches` batches thrown away */
typedef struct {
    int at, batches;
} SpikeSkip;

typedef struct {
    const Config *c;
    Dist *d;
    int root;
    char dir[MOE_PATH_MAX];
    char rollback_path[MOE_PATH_MAX + 32]; /* rollback.bin */
    int kept;         /* rollback.bin holds a state to return to (the first process's word) */
    SpikeSkip *skip;  /* (n_skip) rollbacks.csv's rows, in order */
    int n_skip;       /* the rollbacks so far */
    int last_spike;   /* the last step judged a spike of spike_on's kind (its Model.step after
                         it); 0: none */
    FILE *rollbacks;  /* rollbacks.csv (the first process; NULL elsewhere) */
    int n_skipped;    /* updates this command skipped */
    int n_rolled;     /* rollbacks this command made */
    float spike_loss; /* the values of the last spike, for the stop's message */
    float spike_norm;
} SpikeGuard;

/* The guard of a run at step `step` of directory dir: a new run (fresh) starts its
 * rollbacks.csv; a resumed one reads it (a torn last row cut), the last spike of train.csv up
 * to step, and whether rollback.bin is kept (one of step or before). The first process reads,
 * the others get its numbers. */
void spike_guard_open(SpikeGuard *g, const Config *c, Dist *d, const char *dir, int step,
                      int fresh);
void spike_guard_close(SpikeGuard *g);
/* The guard opened again at `step` as a resume opens it (after a rollback's records), this
 * command's counts kept. */
void spike_guard_rewind(SpikeGuard *g, int step);

/* The batch of the data stream step trains on, and the batches thrown away at its start. */
long long spike_guard_batch(const SpikeGuard *g, int step);
int spike_guard_skip_at(const SpikeGuard *g, int step);

/* What the run does with step v->step, whose spikes run_watch_spikes judged: the first
 * process's verdict, set in v on every process (v->skipped too). MOE_SPIKE_NONE (no spike, or
 * spike_action=none), MOE_SPIKE_SKIP (also a rollback's spike while no rollback.bin is kept),
 * MOE_SPIKE_ROLLBACK, or SPIKE_STOP (a spike after train.max_rollbacks rollbacks). */
int spike_guard_verdict(SpikeGuard *g, StepValues *v);

/* 1 when rollback.bin is to hold the state after step (spike_action=rollback). */
int spike_guard_keep(const SpikeGuard *g, int step);

/* A rollback's records, by the first process (steps 2-4 above; rollback.bin already loaded,
 * at to_step): the undone rows, ckpt.bin, rollbacks.csv and provenance.txt. Every process
 * then knows the new skip. */
void spike_guard_record(SpikeGuard *g, int spike_step, int to_step);

/* 0 when train.csv's header fits c (its column skipped there exactly with a spike_action),
 * else -1 with a message: the resume would write rows of other columns. */
int spike_check_columns(const char *train_csv, const Config *c, char *err, int errlen);

/* The closing line: the updates skipped and the rollbacks of this command. */
void spike_guard_report(const SpikeGuard *g);

#endif
