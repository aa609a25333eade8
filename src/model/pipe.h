/*
 * pipe.h: pipeline parallelism (dist.pp): the layers split into stages, each stage's
 * micro-batches run in the order of a schedule, activations sent forward and their gradients
 * back between neighbouring stages.
 *
 * Stage s of P (the grid's pp_rank, dist.h) holds the blocks [layer0, layer1) (config_pp_stage:
 * dist.pp_layers), the first stage the embedding too, the last the final norm, the head and the
 * loss. A step's train.accum = M micro-batches go through every stage:
 *   F(j)  forward of micro-batch j: receive resid[layer0] from stage s - 1 (the first embeds
 *         the tokens instead), run the blocks, send resid[layer1] to stage s + 1 (the last
 *         computes the loss instead);
 *   B(j)  its backward: receive the gradient of resid[layer1] from stage s + 1 (the last
 *         starts from the loss), run the blocks backward, send the gradient of resid[layer0]
 *         to stage s - 1 (the first ends in the embedding).
 * F(j) keeps micro-batch j's activations until B(j): each micro-batch in flight has a run state
 * of its own (RunState: the stage's table of acts.h again), so a stage's activation memory is
 * its table times the most micro-batches its schedule holds at once.
 *
 * A schedule is the list of actions each stage takes, in order (pipe_schedule):
 *   gpipe  every forward, then every backward: F(0) .. F(M-1), B(0) .. B(M-1). It holds all M
 *          micro-batches' activations.
 *   1f1b   (PipeDream's flush schedule, Megatron's default) w = min(P - s - 1, M) forwards to
 *          fill the pipeline, then a backward after each forward, F(w) B(0) F(w+1) B(1) ..,
 *          then the last w backwards. It holds at most min(P - s, M) micro-batches.
 * Both leave the same bubble, (P - 1) / (M + P - 1) of a step idle on each stage when every
 * stage takes equal time (a forward and a backward of every micro-batch on P stages take
 * M + P - 1 slots each, of which each stage is busy M): 1F1B saves memory, not time.
 * `moe train --print-schedule` prints the lists and a timeline of unit-time actions
 * (pipe_print).
 *
 * The messages: a forward's send is started and left in flight (its buffer is the run state's
 * resid[layer1], untouched until the micro-batch's run state is used again); a backward's
 * gradient is copied to a buffer of its micro-batch and sent likewise; receives wait. At most
 * PIPE_FLIGHT sends are in flight (the oldest is waited for beyond that), and every one is done
 * by the end of the step. Every stage runs its actions in micro-batch order, so the messages of
 * a kind between two neighbours arrive in the order they are needed. A stage that stops is
 * named by its neighbour's receive after dist.timeout (dist.h). On a backend whose memory the
 * host cannot read, the messages go through host copies, as tensor parallelism's do.
 *
 * What the engine measures (Pipe): each action's start and end within the step, a stage's busy
 * time (its actions) against the step's span (the bubble: the rest); `moe train` writes them to
 * the run's pipe.csv. What a stage holds is its schedule's (pipe_held), allocated at the start.
 */
#ifndef MOE_PIPE_H
#define MOE_PIPE_H

#include <stdio.h>

#include "model/model.h"

/* sends in flight at once (dist.h's DIST_MAX_IN_FLIGHT shared with the gradients' sums and the
 * weights' gathers) */
#define PIPE_FLIGHT (DIST_MAX_IN_FLIGHT / 2 - 1)

enum { PIPE_F = 0, PIPE_B = 1 };

typedef struct {
    int op;    /* PIPE_F or PIPE_B */
    int micro; /* the micro-batch, 0 .. M - 1 */
} PipeAction;

/* The 2 M actions stage s of P takes under schedule (DistPipeSchedule) for M micro-batches, in
 * order, into a (2 M). Returns their count. */
int pipe_schedule(int schedule, int P, int M, int s, PipeAction *a);
/* The most micro-batches held at once (forwards done whose backward is not) along n actions. */
int pipe_held(const PipeAction *a, int n);
/* Every stage's actions run with a forward taking tf and a backward tb, each as early as its
 * stage and its neighbour allow: start and end (P, 2 M) of each action, in the stage's order.
 * Returns the step's span. pipe_simulate_stages: stage s's forward takes tf[s] and its
 * backward tb[s] (stages of unequal cost: a stage with the head, dense first blocks). */
double pipe_simulate(int schedule, int P, int M, double tf, double tb, double *start, double *end);
double pipe_simulate_stages(int schedule, int P, int M, const double *tf, const double *tb,
                            double *start, double *end);
/* The schedule of c (dist.pp, dist.pp_schedule, train.accum) as each stage's list of actions
 * and a timeline of forwards of one unit and backwards of two, with its bubble against
 * (P - 1) / (M + P - 1). */
void pipe_print(FILE *f, const Config *c);

typedef struct Pipe {
    int P, s, M;     /* stages, this one, micro-batches a step */
    PipeAction *act; /* (n_act) this stage's schedule */
    int n_act;
    int slots;       /* run states: the most micro-batches held (pipe_held) */
    RunState *state; /* (slots) the run states, [0] the model's own between steps */
    int cur;         /* the one Model.state holds now */
    size_t floats;   /* a message: this rank's rows of the stream, n C */
    float **back;    /* (slots) host buffers of the gradients sent back (n C each) */
    float **out;     /* (slots) host copies of the activations sent on, when the backend's
                        memory is not the host's (else NULL, sent from resid[layer1]) */
    float *in;       /* (n C) a receive's host copy, likewise */
    struct {
        DistOp *op;
        int slot, kind;
    } sent[PIPE_FLIGHT]; /* sends in flight, oldest first */
    int n_sent;
    /* the last step's measures: each action's start and end (seconds from the step's start,
     * in the order of act), and the step's span */
    double *t_start, *t_end, span;
} Pipe;

/* A stage's Pipe for model m, which model_init_dist made a stage of dist.pp > 1 (its layers, its
 * first run state): its schedule and the run states of its other micro-batches in flight, each
 * the table of its layers. pipe_free before model_free. */
void pipe_init(Model *m);
void pipe_free(Model *m);

/* One step's M micro-batches, forward and backward, in the schedule's order: micro-batch j's
 * tokens at inputs + j stride and targets + j stride (B x T of this process's share), every
 * loss scaled by loss_scale; the last backward starts the gradients' sums (ctx's
 * sync_in_backward when overlap). ctx->micro is each pass's micro-batch. Afterwards Model.state
 * is run state 0 again, and the step record holds every micro-batch's losses, as after the
 * loop of one process. */
void pipe_step(Model *m, const int *inputs, const int *targets, size_t stride, int B, int T,
               float loss_scale, StepCtx *ctx, int overlap);
/* A forward alone through the stages (evaluation): the last stage's losses in Model.state. */
void pipe_forward(Model *m, const int *inputs, const int *targets, int B, int T);

#endif
