/*
 * pipe.c: pipeline parallelism: the schedules, a stage's run states, its step (pipe.h).
 */
#include "model/pipe.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/tp.h"

/* ---- the schedules ------------------------------------------------------------------------ */

int pipe_schedule(int schedule, int P, int M, int s, PipeAction *a) {
    int n = 0;
    if (schedule == DIST_PP_GPIPE) {
        for (int j = 0; j < M; j++) a[n++] = (PipeAction){PIPE_F, j};
        for (int j = 0; j < M; j++) a[n++] = (PipeAction){PIPE_B, j};
        return n;
    }
    /* 1F1B: fill the pipeline below this stage, then one backward after each forward, then
     * the backwards left */
    const int warm = P - s - 1 < M ? P - s - 1 : M;
    for (int j = 0; j < warm; j++) a[n++] = (PipeAction){PIPE_F, j};
    for (int j = warm; j < M; j++) {
        a[n++] = (PipeAction){PIPE_F, j};
        a[n++] = (PipeAction){PIPE_B, j - warm};
    }
    for (int j = M - warm; j < M; j++) a[n++] = (PipeAction){PIPE_B, j};
    return n;
}

int pipe_held(const PipeAction *a, int n) {
    int held = 0, most = 0;
    for (int i = 0; i < n; i++) {
        held += a[i].op == PIPE_F ? 1 : -1;
        if (held > most) most = held;
    }
    return most;
}

double pipe_simulate(int schedule, int P, int M, double tf, double tb, double *start, double *end) {
    double *t = (double *)malloc_check(2 * (size_t)P * sizeof(double));
    for (int s = 0; s < P; s++) t[s] = tf, t[P + s] = tb;
    const double span = pipe_simulate_stages(schedule, P, M, t, t + P, start, end);
    free(t);
    return span;
}

double pipe_simulate_stages(int schedule, int P, int M, const double *tf, const double *tb,
                            double *start, double *end) {
    const int n = 2 * M;
    PipeAction *a = (PipeAction *)malloc_check((size_t)P * n * sizeof *a);
    /* done[(s, op, j)]: when stage s finished op of micro-batch j (< 0: not yet) */
    double *done = (double *)malloc_check((size_t)P * n * sizeof(double));
    int *next = (int *)calloc_check((size_t)P, sizeof(int));
    double *free_at = (double *)calloc_check((size_t)P, sizeof(double));
    for (int s = 0; s < P; s++) pipe_schedule(schedule, P, M, s, a + (size_t)s * n);
    for (int i = 0; i < P * n; i++) done[i] = -1.0;
    double span = 0.0;
    /* each round, every stage whose next action's input is there takes it */
    for (int left = P * n; left > 0;) {
        for (int s = 0; s < P; s++) {
            if (next[s] == n) continue;
            const PipeAction x = a[(size_t)s * n + next[s]];
            const int from = x.op == PIPE_F ? s - 1 : s + 1; /* the neighbour it waits for */
            double ready = free_at[s];
            if (from >= 0 && from < P) {
                const double d = done[((size_t)from * 2 + x.op) * M + x.micro];
                if (d < 0.0) continue;
                ready = ready > d ? ready : d;
            }
            const int i = next[s]++;
            start[(size_t)s * n + i] = ready;
            end[(size_t)s * n + i] = free_at[s] = ready + (x.op == PIPE_F ? tf[s] : tb[s]);
            done[((size_t)s * 2 + x.op) * M + x.micro] = free_at[s];
            span = span > free_at[s] ? span : free_at[s];
            left--;
        }
    }
    free(a), free(done), free(next), free(free_at);
    return span;
}

/* Stage s's row of the timeline: each unit of time a cell, "F3" or "B3" (a backward two cells),
 * ".." idle. */
static void print_timeline_row(FILE *f, int s, const double *start, const double *end,
                               const PipeAction *a, int n, int cells) {
    char *line = (char *)malloc_check(12 * (size_t)cells + 32); /* a cell: 9 characters at most */
    int len = snprintf(line, 32, "  stage %d |", s);
    for (int t = 0, i = 0; t < cells; t++) {
        while (i < n && end[i] <= t) i++;
        if (i < n && start[i] <= t)
            len += snprintf(line + len, 16, " %c%-2d", a[i].op == PIPE_F ? 'F' : 'B', a[i].micro);
        else
            len += snprintf(line + len, 16, " .. ");
    }
    while (len > 0 && line[len - 1] == ' ') len--; /* no blanks at the end of the line */
    fprintf(f, "%.*s\n", len, line);
    free(line);
}

void pipe_print(FILE *f, const Config *c) {
    const int P = c->pp, M = c->accum, n = 2 * M;
    const char *name = c->pp_schedule == DIST_PP_GPIPE ? "gpipe" : "1f1b";
    PipeAction *a = (PipeAction *)malloc_check((size_t)n * sizeof *a);
    double *start = (double *)malloc_check((size_t)P * n * sizeof(double));
    double *end = (double *)malloc_check((size_t)P * n * sizeof(double));
    fprintf(f, "dist.pp_schedule=%s: %d stages, %d micro-batches (train.accum)\n", name, P, M);
    for (int s = 0; s < P; s++) {
        int first = 0, last = 0;
        char err[256];
        if (config_pp_stage(c, s, &first, &last, err, sizeof err) != 0) moe_input_error("%s", err);
        pipe_schedule(c->pp_schedule, P, M, s, a);
        fprintf(f, "  stage %d (layers %d-%d%s%s), holds %d micro-batch(es):", s, first, last - 1,
                s == 0 ? ", embedding" : "", s == P - 1 ? ", head and loss" : "", pipe_held(a, n));
        for (int i = 0; i < n; i++) fprintf(f, " %c%d", a[i].op == PIPE_F ? 'F' : 'B', a[i].micro);
        fputc('\n', f);
    }
    const double span = pipe_simulate(c->pp_schedule, P, M, 1.0, 2.0, start, end);
    fprintf(f,
            "timeline, a forward one unit and a backward two (Fj, Bj: micro-batch j; .. idle):\n");
    for (int s = 0; s < P; s++) {
        pipe_schedule(c->pp_schedule, P, M, s, a);
        print_timeline_row(f, s, start + (size_t)s * n, end + (size_t)s * n, a, n, (int)span);
    }
    fprintf(f, "each stage busy %d of %.0f units: bubble %.3f, (P - 1) / (M + P - 1) = %.3f\n",
            3 * M, span, 1.0 - 3.0 * M / span, (double)(P - 1) / (M + P - 1));
    free(a), free(start), free(end);
}

/* ---- a stage's run states ----------------------------------------------------------------- */

/* What every run state of a model shares: the ops' workspace and the step record. */
static void share_workspace(RunState *to, const RunState *from) {
    to->rope_cs = from->rope_cs, to->att_ws = from->att_ws, to->n_att_ws = from->n_att_ws;
    to->norm_partial = from->norm_partial, to->work_bytes = from->work_bytes;
    to->rec_loss = from->rec_loss, to->rec_norm = from->rec_norm, to->rec_mtp = from->rec_mtp;
    to->mtp_moe_rec = from->mtp_moe_rec, to->rec_moe = from->rec_moe;
    to->rec_route = from->rec_route, to->rec_host = from->rec_host, to->log_rec = from->log_rec;
    to->rec_bytes = from->rec_bytes, to->rec_slots = from->rec_slots;
    to->defer_reads = from->defer_reads;
}

/* Model.state becomes run state k (the one it held kept in its place). */
static void use_state(Model *m, int k) {
    Pipe *p = m->pipe;
    if (k == p->cur) return;
    p->state[p->cur] = m->state;
    share_workspace(&p->state[k], &m->state); /* defer_reads may have changed */
    m->state = p->state[k];
    p->cur = k;
}

void pipe_init(Model *m) {
    const Config *c = &m->cfg;
    Pipe *p = m->pipe = (Pipe *)calloc_check(1, sizeof(Pipe));
    p->P = m->dist->pp, p->s = m->dist->pp_rank, p->M = c->accum;
    p->act = (PipeAction *)malloc_check(2 * (size_t)p->M * sizeof(PipeAction));
    p->n_act = pipe_schedule(c->pp_schedule, p->P, p->M, p->s, p->act);
    p->slots = pipe_held(p->act, p->n_act);
    p->t_start = (double *)calloc_check((size_t)p->n_act, sizeof(double));
    p->t_end = (double *)calloc_check((size_t)p->n_act, sizeof(double));
    p->state = (RunState *)calloc_check((size_t)p->slots, sizeof(RunState));
    p->state[0] = m->state;
    const RunState first = m->state;
    for (int k = 1; k < p->slots; k++) {
        memset(&m->state, 0, sizeof m->state);
        run_state_alloc(m, first.B, first.T, 0);
        share_workspace(&m->state, &first);
        p->state[k] = m->state;
    }
    m->state = first;
    int n, row0;
    tp_rows(m, first.B * first.T, &n, &row0);
    p->floats = (size_t)n * c->d_model;
    p->back = (float **)calloc_check((size_t)p->slots, sizeof(float *));
    for (int k = 0; k < p->slots && p->s > 0; k++) p->back[k] = floats_alloc(p->floats);
    if (m->be->host_memory) return;
    p->out = (float **)calloc_check((size_t)p->slots, sizeof(float *));
    for (int k = 0; k < p->slots && p->s < p->P - 1; k++) p->out[k] = floats_alloc(p->floats);
    p->in = floats_alloc(p->floats);
}

void pipe_free(Model *m) {
    Pipe *p = m->pipe;
    use_state(m, 0);
    const RunState first = m->state;
    for (int k = 1; k < p->slots; k++) {
        m->state = p->state[k];
        run_state_free(m);
    }
    m->state = first;
    for (int k = 0; k < p->slots; k++) {
        free(p->back[k]);
        if (p->out) free(p->out[k]);
    }
    free(p->back), free(p->out), free(p->in);
    free(p->act), free(p->state), free(p->t_start), free(p->t_end);
    free(p);
    m->pipe = NULL;
}

/* ---- the messages ------------------------------------------------------------------------- */

/* Wait for the oldest send in flight, and forget it. */
static void wait_oldest(Model *m) {
    Pipe *p = m->pipe;
    dist_wait(m->dist, p->sent[0].op);
    memmove(p->sent, p->sent + 1, (size_t)--p->n_sent * sizeof p->sent[0]);
}

/* Forget the sends that are done; with slot >= 0, wait for those of run state slot and kind
 * (their buffer is about to be written). */
static void settle_sends(Model *m, int slot, int kind) {
    Pipe *p = m->pipe;
    for (int i = 0; i < p->n_sent;) {
        const int mine = p->sent[i].slot == slot && p->sent[i].kind == kind;
        if (mine)
            dist_wait(m->dist, p->sent[i].op);
        else if (!dist_test(m->dist, p->sent[i].op)) {
            i++;
            continue;
        }
        memmove(p->sent + i, p->sent + i + 1, (size_t)(p->n_sent - i - 1) * sizeof p->sent[0]);
        p->n_sent--;
    }
}

/* Start sending x (run state slot's, of kind PIPE_F: on to the next stage; PIPE_B: back) from
 * the backend's memory, through the host's copy at host when the host cannot read it. */
static void send(Model *m, const float *x, float *host, int slot, int kind) {
    Pipe *p = m->pipe;
    const int was = dist_purpose(m->dist, DIST_FOR_PIPE);
    if (host && host != x) m->be->to_host(m->be, host, x, p->floats * sizeof(float));
    if (p->n_sent == PIPE_FLIGHT) wait_oldest(m);
    const int to = kind == PIPE_F ? p->s + 1 : p->s - 1;
    p->sent[p->n_sent].op =
        dist_send_f_start(m->dist, DIST_PP, host ? host : x, p->floats, to, kind);
    p->sent[p->n_sent].slot = slot, p->sent[p->n_sent].kind = kind;
    p->n_sent++;
    dist_purpose(m->dist, was);
}

/* Receive a message of kind (PIPE_F: from the stage before; PIPE_B: from the one after) into x. */
static void receive(Model *m, float *x, int kind) {
    Pipe *p = m->pipe;
    const int was = dist_purpose(m->dist, DIST_FOR_PIPE);
    const int from = kind == PIPE_F ? p->s - 1 : p->s + 1;
    dist_recv_f(m->dist, DIST_PP, p->in ? p->in : x, p->floats, from, kind);
    if (p->in) m->be->to_device(m->be, x, p->in, p->floats * sizeof(float));
    dist_purpose(m->dist, was);
}

/* ---- a step ------------------------------------------------------------------------------- */

/* Action i of the schedule: micro-batch j's forward or backward on its run state. */
static void run_action(Model *m, int i, const int *inputs, const int *targets, size_t stride, int B,
                       int T, float loss_scale, StepCtx *ctx, int overlap, double t0) {
    Pipe *p = m->pipe;
    const PipeAction x = p->act[i];
    const int k = x.micro % p->slots, first = p->s == 0, last = p->s == p->P - 1;
    use_state(m, k);
    RunState *rs = &m->state;
    ctx->micro = x.micro;
    if (x.op == PIPE_F) {
        settle_sends(m, k, PIPE_F); /* resid[layer1] is written again */
        if (!first) receive(m, rs->resid[m->layer0], PIPE_F);
        p->t_start[i] = now_seconds() - t0;
        model_forward(m, inputs + x.micro * stride, targets + x.micro * stride, B, T, ctx);
        p->t_end[i] = now_seconds() - t0;
        if (!last) send(m, rs->resid[m->layer1], p->out ? p->out[k] : NULL, k, PIPE_F);
        return;
    }
    if (!last) receive(m, rs->dresid, PIPE_B);
    ctx->sync_in_backward = overlap && i == p->n_act - 1;
    p->t_start[i] = now_seconds() - t0;
    model_backward(m, loss_scale, ctx);
    p->t_end[i] = now_seconds() - t0;
    ctx->sync_in_backward = 0;
    if (first) return;
    settle_sends(m, k, PIPE_B); /* the buffer of this run state's gradient is written again */
    m->be->to_host(m->be, p->back[k], rs->dresid, p->floats * sizeof(float));
    send(m, p->back[k], p->back[k], k, PIPE_B);
}

void pipe_step(Model *m, const int *inputs, const int *targets, size_t stride, int B, int T,
               float loss_scale, StepCtx *ctx, int overlap) {
    Pipe *p = m->pipe;
    const double t0 = now_seconds();
    for (int i = 0; i < p->n_act; i++)
        run_action(m, i, inputs, targets, stride, B, T, loss_scale, ctx, overlap, t0);
    settle_sends(m, -1, 0);
    while (p->n_sent > 0) wait_oldest(m);
    p->span = now_seconds() - t0;
    use_state(m, 0);
}

void pipe_forward(Model *m, const int *inputs, const int *targets, int B, int T) {
    Pipe *p = m->pipe;
    use_state(m, 0);
    RunState *rs = &m->state;
    if (p->s > 0) receive(m, rs->resid[m->layer0], PIPE_F);
    model_forward(m, inputs, targets, B, T, NULL);
    if (p->s == p->P - 1) return;
    send(m, rs->resid[m->layer1], p->out ? p->out[0] : NULL, 0, PIPE_F);
    while (p->n_sent > 0) wait_oldest(m);
}
