/* train.c: see train.h. */
#include "train/train.h"

#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "base/omp_compat.h"

#include "base/util.h"
#include "io/mix.h"
#include "model/inspect.h"
#include "model/memory.h"
#include "model/pipe.h"
#include "model/route_face.h"
#include "model/route_tape.h"
#include "model/tp.h"
#include "train/checkpoint.h"
#include "train/run.h"
#include "train/run_log.h"
#include "train/spike.h"

/* ---- evaluation --------------------------------------------------------------------------- */

float evaluate(Model *m, const Shard *val, int eval_batches, DomainCounts *dc) {
    RunState *rs = &m->state;
    const int B = rs->B, T = rs->T, N = B * T;
    /* across processes every one draws the whole batch (readers x B sequences, the tensor-
     * parallel ranks of a replica reading the same B) and evaluates its own B of them: the same
     * windows as one process would; a tensor-parallel rank's losses are its n rows of them */
    /* a pipeline: the ranks of each stage share the batch (one stage's ranks are a world of
     * their own here), and the first stage's rank at a place sends its rows on to the next's */
    const int world = m->dist ? dist_group_size(m->dist, DIST_STAGE) : 1;
    const int rank = m->dist ? dist_group_rank(m->dist, DIST_STAGE) : 0;
    const int tp = m->dist ? m->dist->tp : 1;
    const size_t NW = (size_t)N * (world / tp), mine = (size_t)(rank / tp) * N;
    int n, row0;
    tp_rows(m, N, &n, &row0);
    const int defer = rs->defer_reads;
    rs->defer_reads = 0; /* each batch's loss is read as it comes */
    int *inputs = (int *)malloc_check(NW * sizeof(int));
    int *targets = (int *)malloc_check(NW * sizeof(int));
    uint8_t *all_domains = (uint8_t *)malloc_check(NW);
    const uint8_t *domains = all_domains + mine + row0;
    float *token_loss = (float *)malloc_check((size_t)n * sizeof(float));
    double total = 0.0;
    for (int i = 0; i < eval_batches; i++) {
        loader_val_batch(val, B * (world / tp), T, i, eval_batches, inputs, targets, all_domains);
        /* no context: no exploration noise, evaluation sees the router as it is */
        if (m->pipe)
            pipe_forward(m, inputs + mine, targets + mine, B, T);
        else
            model_forward(m, inputs + mine, targets + mine, B, T, NULL);
        total += rs->loss; /* 0 on a pipeline's stages before the last */
        if (!dc) continue;
        if (dc->loss_sum && model_has_head(m)) { /* each token's loss to its domain */
            m->be->to_host(m->be, token_loss, rs->losses, (size_t)n * sizeof(float));
            for (int t = 0; t < n; t++) {
                dc->loss_sum[domains[t]] += token_loss[t];
                dc->tokens[domains[t]] += 1.0;
            }
        }
        for (int l = 0, b = 0; l < m->cfg.n_layer; l++) {
            if (!model_is_moe(m, l)) continue;
            if (!model_holds_layer(m, l)) { /* another pipeline stage's: it counts them */
                b++;
                continue;
            }
            double drops[2] = {0.0, 0.0};
            model_route_domains(m, l, dc->counts + (size_t)b * dc->n_domains * dc->E, drops,
                                domains, dc->n_domains);
            if (dc->drops) dc->drops[2 * b] += drops[0], dc->drops[2 * b + 1] += drops[1];
            b++;
        }
    }
    if (m->dist) { /* equal shares: the mean of the processes' means is the batch's mean (the
                      last stage's processes': the others' add 0) */
        dist_allreduce_sum_d(m->dist, DIST_WORLD, &total, 1);
        total /= world;
        if (dc) {
            dist_allreduce_sum_d(m->dist, DIST_WORLD, dc->counts,
                                 (size_t)dc->n_moe * dc->n_domains * dc->E);
            if (dc->drops)
                dist_allreduce_sum_d(m->dist, DIST_WORLD, dc->drops, 2 * (size_t)dc->n_moe);
            if (dc->loss_sum) {
                dist_allreduce_sum_d(m->dist, DIST_WORLD, dc->loss_sum, (size_t)dc->n_domains);
                dist_allreduce_sum_d(m->dist, DIST_WORLD, dc->tokens, (size_t)dc->n_domains);
            }
        }
    }
    free(inputs);
    free(targets);
    free(all_domains);
    free(token_loss);
    rs->defer_reads = defer;
    return (float)(total / eval_batches);
}

/* ---- progress ----------------------------------------------------------------------------- */

static void format_eta(char *out, size_t n, double seconds) {
    int s = (int)(seconds + 0.5);
    if (s >= 3600)
        snprintf(out, n, "%dh%02dm", s / 3600, (s / 60) % 60);
    else
        snprintf(out, n, "%dm%02ds", s / 60, s % 60);
}

static void progress(const Config *c, int step, float loss, float val_loss, double tok_s,
                     double elapsed, int start_step, int tty) {
    char eta[32];
    double per_step = elapsed / (double)(step - start_step);
    format_eta(eta, sizeof eta, per_step * (c->steps - step));
    char val[48] = "";
    if (!isnan(val_loss)) snprintf(val, sizeof val, " | val %.4f", val_loss);
    if (tty) {
        fprintf(stderr, "\rstep %d/%d | loss %.4f%s | %.0f tok/s | ETA %s   ", step, c->steps, loss,
                val, tok_s, eta);
        if (step == c->steps) fputc('\n', stderr);
        fflush(stderr);
    } else if (step % c->log_every == 0 || step == c->steps || !isnan(val_loss)) {
        printf("step %d/%d loss %.4f%s tok/s %.0f eta %s\n", step, c->steps, loss, val, tok_s, eta);
        fflush(stdout);
    }
}

/* ---- the run ------------------------------------------------------------------------------ */

/* A shard of windows of T + 1 tokens from the model's vocabulary V, or exit 2 naming key. */
static void load_shard_or_exit(Shard *s, const char *path, const char *key, int T, int V) {
    char err[1024];
    if (shard_load(s, path, err, sizeof err) != 0 ||
        shard_check_vocab(s, V, err, sizeof err) != 0 ||
        shard_check_window(s, T, err, sizeof err) != 0)
        moe_input_error("%s: %s", key, err);
}

/* The domain mix of the training windows (data.mix, data.mix_temperature, data.mix_end;
 * io/mix.h), set on the loader; nothing for the natural mix, which draws as it always has.
 * target gets the shares of the mix in force at each step's start (its end mix from end_step),
 * lines the resolved shares for provenance.txt ("" for the natural mix alone); a name the shard
 * lacks, or shares that leave nothing to draw, exit 2. */
static void setup_mix(Loader *l, const Config *c, const Shard *train,
                      double target[2][SHARD_MAX_DOMAINS], int *end_step, char *lines, size_t n) {
    char err[1024];
    MixSpec m, me;
    uint64_t size[SHARD_MAX_DOMAINS];
    shard_domain_starts(train, c->seq_len, size);
    const int end = strcmp(c->mix_end, "none") != 0;
    *end_step = end ? c->steps - (int)lround(c->mix_end_frac * c->steps) : INT_MAX;
    if (mix_parse(c->mix, &m, err, sizeof err) ||
        mix_resolve(&m, c->mix_temperature, train, size, target[0], err, sizeof err))
        moe_input_error("%s", err);
    memcpy(target[1], target[0], sizeof target[1]);
    if (end && (mix_parse(c->mix_end, &me, err, sizeof err) ||
                mix_resolve(&me, 0.0, train, size, target[1], err, sizeof err)))
        moe_input_error("data.mix_end: %s", err);
    const int mixed = m.kind != MIX_NATURAL || c->mix_temperature > 0;
    char shares[2][512];
    mix_format(train, target[0], shares[0], sizeof shares[0]);
    mix_format(train, target[1], shares[1], sizeof shares[1]);
    snprintf(lines, n, "%s%s%s%s%s%s", mixed ? "data.mix_shares = " : "", mixed ? shares[0] : "",
             mixed ? "\n" : "", end ? "data.mix_end_shares = " : "", end ? shares[1] : "",
             end ? "\n" : "");
    if (!mixed && !end) return; /* as it always was */
    loader_set_mix(l, target[0], end ? target[1] : NULL, *end_step);
}

/* --record-routing / --replay-routing: open the tape for the steps [start, last) of a run from
 * step 0 on one process, or exit 2 saying why not. Returns the tape, or NULL when neither is
 * asked for. */
static RouteTape *open_route_tape(RouteTape *t, const Model *m, const Config *c,
                                  const TrainOptions *o, int world, int start, int last) {
    const char *path = o->replay_routing ? o->replay_routing : o->record_routing;
    const char *opt = o->replay_routing ? "--replay-routing" : "--record-routing";
    char err[1024];
    if (!path) return NULL;
    if (world > 1)
        moe_input_error("%s: a routing recording belongs to a run on one process; drop mpirun "
                        "or the option",
                        opt);
    if (start > 0 || o->init)
        moe_input_error("%s: a routing recording covers a fresh run from its step 0 (not "
                        "--resume, not --init)",
                        opt);
    if (c->spike_action == MOE_SPIKE_ROLLBACK)
        moe_input_error("%s: a routing recording covers each step once, in order, and "
                        "train.spike_action=rollback trains steps again; drop one of them",
                        opt);
    if (m->n_moe == 0 || c->routing == MOE_ROUTING_EXPERT_CHOICE)
        moe_input_error("%s: it records token-choice routing, and this model has %s", opt,
                        m->n_moe == 0 ? "no MoE block" : "moe.routing=expert_choice");
    const long long calls = (long long)(last - start) * c->accum * m->n_moe;
    if (route_tape_open(t, path, o->replay_routing != NULL, c->num_experts, c->top_k,
                        m->state.B * m->state.T, m->n_moe, calls, err, sizeof err) != 0)
        moe_input_error("%s", err);
    return t;
}

/* ---- stopping on a signal ------------------------------------------------------------------ */

/* The signal (SIGINT, SIGTERM) that asked the run to stop, 0 for none. The handler only sets
 * it (all a handler may safely do); the loop looks at it after each step. */
static volatile sig_atomic_t stop_signal = 0;

static void on_stop_signal(int sig) {
    stop_signal = sig;
}

/* Ctrl-C and kill stop the run at the end of its step, with a checkpoint. Caught even where a
 * script's shell started the run in the background with SIGINT ignored, so that `kill -INT`
 * stops it the same way. */
static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    /* SA_RESETHAND: a second Ctrl-C finds the default action and ends the process at once;
     * SA_RESTART: a system call the signal lands in carries on instead of failing */
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The signal on which every process stops after this step, or 0: one process's signal stops
 * them all, at the same step. */
static int stop_requested(Dist *d) {
    const int sig = stop_signal;
    if (!d) return sig;
    double v[2] = {sig == SIGINT, sig == SIGTERM};
    dist_allreduce_sum_d(d, DIST_WORLD, v, 2);
    return v[0] > 0 ? SIGINT : v[1] > 0 ? SIGTERM : 0;
}

/* A new run (not --resume) is refused where one exists, before and again once it holds the
 * directory's lock (another command may have started one there in between). */
static void refuse_existing_run(const TrainOptions *o, const char *ckpt_path, const char *csv) {
    if (o->resume || o->restart) return;
    if (file_exists(ckpt_path))
        moe_input_error("%s already holds a run; continue it with `moe train --resume %s`, or "
                        "choose another --out (nothing was changed)",
                        o->out_dir, o->out_dir);
    /* a run stopped before its first checkpoint has CSV files but nothing to resume from:
     * `--resume` starts it again from step 0 with its config.txt (o->restart) */
    if (file_exists(csv))
        moe_input_error("%s holds a run that stopped before its first checkpoint; start it again "
                        "from step 0 with `moe train --resume %s` (its config.txt), or choose "
                        "another --out (nothing was changed)",
                        o->out_dir, o->out_dir);
}

/* ---- a run's state ------------------------------------------------------------------------ */

/* Everything one command's run holds: its settings, its data and model, where it writes, and
 * the context of its training passes. */
typedef struct {
    const Config *c;
    const TrainOptions *o;
    Dist *d; /* more than one process; else NULL */
    int root, world, B, T, threads;
    int tty;     /* the live progress line on a terminal */
    size_t mine; /* this process's first token of the whole batch */
    char ckpt_path[MOE_PATH_MAX + 32], csv_path[MOE_PATH_MAX + 32];
    Shard train, val;
    Model m;
    Loader loader;
    double mix_target[2][SHARD_MAX_DOMAINS];
    int mix_end_step;
    char mix_lines[1200];
    char tokenizer[MOE_PATH_MAX + 32]; /* the shards' tokenizer.json; "": bytes */
    RouteTape tape;
    StepCtx ctx;           /* the training passes' mode, and the tape */
    SpikeGuard guard;      /* train.spike_action, and the batches rollbacks skipped */
    int start_step, last;  /* the steps [start_step, last) this command trains */
    int *inputs, *targets; /* (batch, T) the whole batch (every process draws it) */
    uint8_t *domains;      /* (batch, T) */
    /* across processes: the bytes the model of the largest process allocated (weights,
     * gradients, moments, activations; not the ops' workspace), its rank, and what
     * model_memory_rank counts for that rank */
    double mem_bytes, mem_formula;
    int mem_rank;
    /* the resident memory's peak over the steps alone (MiB; -1: the system cannot say): the
     * kernel's high-water mark, set back after the start and after each checkpoint's writing,
     * read before each checkpoint and at the end */
    double steps_peak;
    double whole_peak; /* the high-water marks read before each reset: the start's, the
                          checkpoints' (the kernel's lifetime peak is reset with them) */
} Trainer;

/* The run directory before anything is read: its lock, and what a new run or a resume
 * requires of it (exit 2 when it does not fit). */
static void check_run_dir(Trainer *t) {
    const Config *c = t->c;
    const TrainOptions *o = t->o;
    char err[1024];
    if (t->d && config_check_dist(c, t->world, err, sizeof err) != 0) moe_input_error("%s", err);
    run_path(t->ckpt_path, sizeof t->ckpt_path, o->out_dir, "ckpt.bin");
    run_path(t->csv_path, sizeof t->csv_path, o->out_dir, "train.csv");
    /* one command at a time on a run directory: the first process, which writes it, holds its
     * lock. A directory that has a lock file (or a run to continue) is locked before it is
     * read; a new one once its folder exists, so that a refused command creates nothing. */
    char lock_path[MOE_PATH_MAX + 32];
    run_path(lock_path, sizeof lock_path, o->out_dir, "lock");
    if (t->root && (o->resume || o->restart || file_exists(lock_path))) run_lock(o->out_dir);
    refuse_existing_run(o, t->ckpt_path, t->csv_path);
    if (o->resume && !file_exists(t->ckpt_path))
        moe_input_error("--resume %s: no checkpoint %s to resume from; start the run without "
                        "--resume",
                        o->out_dir, t->ckpt_path);
    if (o->resume && o->stored && run_check_config(o->out_dir, o->stored, c, err, sizeof err) != 0)
        moe_input_error("%s", err);
    if (o->resume && spike_check_columns(t->csv_path, c, err, sizeof err) != 0)
        moe_input_error("--resume %s: %s", o->out_dir, err);
    if (o->restart && run_check_restart(o->out_dir, err, sizeof err) != 0)
        moe_input_error("%s", err);
}

/* Across processes: the largest process's allocation (each one's is bytes) and the formula's
 * count of it (memory.h), for the banner. Each rank's shards differ by a float or so. */
static void measure_memory(Trainer *t, size_t bytes) {
    const int W = t->world;
    double *all = (double *)calloc_check(2 * (size_t)W, sizeof(double));
    MemoryBreakdown mb;
    model_memory_rank(t->c, t->B, t->T, t->d->ep, W, t->d->rank, &mb);
    all[t->d->rank] = (double)bytes;
    all[W + t->d->rank] = 4.0 * (double)mb.total_words + (double)mb.pad_bytes;
    dist_allreduce_sum_d(t->d, DIST_WORLD, all, 2 * (size_t)W);
    t->mem_rank = 0;
    for (int r = 1; r < W; r++)
        if (all[r] > all[t->mem_rank]) t->mem_rank = r;
    t->mem_bytes = all[t->mem_rank], t->mem_formula = all[W + t->mem_rank];
    free(all);
}

/* The data, the model (from the checkpoint on resume, or --init's weights), the loader and
 * its mix, and the steps to train; exit 2 on any of them that does not fit. */
static void load_run(Trainer *t) {
    const Config *c = t->c;
    const TrainOptions *o = t->o;
    char err[1024];
    /* train.batch is the whole batch; each process trains on its equal share of it, drawn by
     * the same loader on every process (the one-process sequences, whatever the world); the
     * dist.tp ranks of a replica read the same share, and each keeps its rows of it (tp.h) */
    /* under a pipeline each stage's processes share the batch so, and a rank's rows go on to
     * the rank at its place in the next stage */
    const int tp = t->d ? t->d->tp : 1;
    const int rank = t->d ? dist_group_rank(t->d, DIST_STAGE) : 0;
    const int readers = (t->d ? dist_group_size(t->d, DIST_STAGE) : 1) / tp;
    t->B = c->batch / readers, t->T = c->seq_len;
    t->mine = (size_t)(rank / tp) * t->B * t->T;
    load_shard_or_exit(&t->train, c->train, "data.train", t->T, c->vocab);
    load_shard_or_exit(&t->val, c->val, "data.val", t->T, c->vocab);
    if (run_find_tokenizer(o->out_dir, o->resume || o->restart, &t->train, &t->val, t->tokenizer,
                           sizeof t->tokenizer, err, sizeof err) != 0)
        moe_input_error("%s", err);
    /* a resumed run continues on the data it trained on, unless told otherwise */
    if (o->resume && !o->allow_data_change &&
        run_check_data(o->out_dir, &t->train, &t->val, err, sizeof err) != 0)
        moe_input_error("%s", err);
    /* the whole model fits in this machine's memory (memory.h), or nothing is allocated */
    if (memory_check(c, t->B, t->T, t->d ? t->d->ep : 1, t->world, err, sizeof err) != 0)
        moe_input_error("%s", err);

    /* the thread count first: the model sizes its per-thread buffers by it */
    t->threads = backend_set_threads(c->threads);
    Model *m = &t->m;
    const size_t before = backend_bytes_allocated;
    model_init_dist(m, c, t->B, t->T, o->dist); /* it keeps one process's dist only for NCCL */
    if (t->d && t->d->pp > 1) pipe_init(m);     /* a stage's run states of its micro-batches */
    if (t->d) measure_memory(t, backend_bytes_allocated - before - m->state.work_bytes);
    loader_init(&t->loader, &t->train, c->batch, t->T, c->seed);
    setup_mix(&t->loader, c, &t->train, t->mix_target, &t->mix_end_step, t->mix_lines,
              sizeof t->mix_lines);
    if (c->corrupt_from >= 0)
        loader_corrupt(&t->loader, c->corrupt_from, c->corrupt_batches, c->vocab);
    if (o->resume && checkpoint_load(m, &t->loader.rng, t->ckpt_path, 1, err, sizeof err) != 0)
        moe_input_error("%s", err);
    /* the CSVs are cut back to the checkpoint and appended to: they must be the run's own */
    if (o->resume && run_check_logs(o->out_dir, m->step, err, sizeof err) != 0)
        moe_input_error("%s", err);
    /* --init: the weights (and aux-free biases) of another run, a fresh optimizer at step 0 */
    if (!o->resume && o->init && checkpoint_load(m, NULL, o->init, 0, err, sizeof err) != 0)
        moe_input_error("--init: %s", err);
    t->start_step = m->step;
    t->last = o->until > 0 && o->until < c->steps ? o->until : c->steps;
    if (t->start_step >= t->last)
        moe_input_error("%s is already at step %d of train.steps=%d; to train further, raise it "
                        "(--set train.steps=N)",
                        o->out_dir, t->start_step, c->steps);
    /* exploration noise on (moe.jitter, moe.noise) in the step's passes; evaluate() runs
     * without it */
    t->ctx = (StepCtx){.training = 1};
    t->ctx.route_tape = open_route_tape(&t->tape, m, c, o, t->world, t->start_step, t->last);
}

/* Every process has checked its inputs; only now does the first one write: the folder, its
 * lock, config.txt and provenance.txt. */
static void claim_run_dir(Trainer *t) {
    const TrainOptions *o = t->o;
    char err[1024];
    if (t->d) dist_barrier(t->d);
    if (!t->root) return;
    if (o->restart)
        printf("%s has no checkpoint yet (the run stopped before its first one): starting it "
               "again from step 0 with its config.txt\n",
               o->out_dir);
    if (make_dirs(o->out_dir, err, sizeof err) != 0) moe_input_error("--out: %s", err);
    run_lock(o->out_dir);
    refuse_existing_run(o, t->ckpt_path, t->csv_path);
    run_write_config(o->out_dir, t->c);
    /* the run's tokenizer is its own tokenizer.json, there before the first step */
    if (t->tokenizer[0]) run_copy_tokenizer(o->out_dir, t->tokenizer, t->train.tokenizer_crc32);
    run_write_provenance(o->out_dir, t->c, &t->train, &t->val,
                         t->tokenizer[0] ? t->tokenizer : NULL, t->mix_lines, t->threads,
                         t->start_step, o->resume ? NULL : o->init, t->d);
}

static void trainer_open(Trainer *t, const Config *c, const TrainOptions *o) {
    memset(t, 0, sizeof *t);
    t->c = c, t->o = o;
    t->d = o->dist && o->dist->world > 1 ? o->dist : NULL;
    t->root = !t->d || t->d->rank == 0, t->world = t->d ? t->d->world : 1;
    check_run_dir(t);
    load_run(t);
    claim_run_dir(t);
    /* a pipeline draws the step's micro-batches before its schedule runs them */
    const size_t micro = t->m.pipe ? (size_t)c->accum : 1;
    t->inputs = (int *)malloc_check(micro * c->batch * t->T * sizeof(int));
    t->targets = (int *)malloc_check(micro * c->batch * t->T * sizeof(int));
    t->domains = (uint8_t *)malloc_check(micro * c->batch * t->T);
    t->tty = t->root && !o->quiet && isatty(STDERR_FILENO);
}

/* What the run trains, once its files are open. */
static void print_banner(const Trainer *t) {
    const Config *c = t->c;
    const TrainOptions *o = t->o;
    if (!t->root) return;
    printf("training %s: %d steps of %d micro-batch(es) of %d x %d tokens, %d threads%s\n",
           o->out_dir, c->steps, c->accum, c->batch, t->T, t->threads,
           o->resume ? " (resumed)" : "");
    if (t->d && t->d->tp == 1)
        printf("  %d processes: dist.ep=%d (each holds %d of %d experts) x %d data-parallel, "
               "%d sequences each\n",
               t->world, t->d->ep, c->num_experts / t->d->ep, c->num_experts, t->d->dp, t->B);
    static const char *const sharded[4] = {"nothing sharded", "AdamW moments sharded",
                                           "AdamW moments and gradients sharded",
                                           "moments, gradients and weights sharded"};
    if (t->d)
        printf("  dist.zero=%d (%s): the model of the largest process (rank %d) holds %.0f "
               "bytes, memory.h's formula %.0f\n",
               c->zero, sharded[c->zero], t->mem_rank, t->mem_bytes, t->mem_formula);
    if (t->d && t->d->tp > 1)
        printf("  %d processes: dist.tp=%d (each holds 1/%d of the heads and hidden channels, "
               "and of a replica's %d sequences' tokens between blocks) x dist.ep=%d (each "
               "holds %d of %d experts) x %d data-parallel\n",
               t->world, t->d->tp, t->d->tp, t->B, t->d->ep, c->num_experts / t->d->ep,
               c->num_experts, t->d->dp);
    fflush(stdout);
}

/* ---- one optimizer step ------------------------------------------------------------------- */

/* A pipeline stage's micro-batches of the step (pipe.h): all of them drawn, then run in the
 * schedule's order. */
static void pipe_passes(Trainer *t, int step, float scale) {
    const Config *c = t->c;
    const size_t stride = (size_t)c->batch * t->T;
    for (int micro = 0; micro < c->accum; micro++)
        loader_next(&t->loader, t->inputs + micro * stride, t->targets + micro * stride,
                    t->domains + micro * stride);
    pipe_step(&t->m, t->inputs + t->mine, t->targets + t->mine, stride, t->B, t->T, scale, &t->ctx,
              c->overlap);
}

/* The step's micro-batches forward and backward, the gradients summed over the processes, and
 * the step's values: the batch's mean losses, the gradient norm, router.csv's statistics in
 * ra (shared over the processes). */
static void step_passes(Trainer *t, int step, RouterAccum *ra, StepValues *v) {
    const Config *c = t->c;
    Model *m = &t->m;
    model_comm_stats_reset(m);
    /* the gradients are zero here: model_zero_grad before the first step, and after each
     * step model_adamw_step has cleared them in the pass that read them */
    router_accum_reset(ra);
    double loss = 0.0, aux = 0.0, z = 0.0;
    /* each process's mean over its share, 1 / replicas of the batch's mean: the processes of a
     * pipeline stage (without one, the world) */
    const int replicas = t->d ? dist_group_size(t->d, DIST_STAGE) : 1;
    const float scale = 1.0f / (float)(c->accum * replicas);
    /* the step's batch of the data stream: past the batches rollbacks skipped (spike.h) */
    loader_set_step(&t->loader, step, spike_guard_batch(&t->guard, step));
    loader_skip(&t->loader, (long long)spike_guard_skip_at(&t->guard, step) * c->accum * c->batch);
    if (m->pipe) pipe_passes(t, step, scale);
    for (int micro = 0; micro < c->accum && !m->pipe; micro++) {
        loader_next(&t->loader, t->inputs, t->targets, t->domains);
        t->ctx.micro = micro;
        model_forward(m, t->inputs + t->mine, t->targets + t->mine, t->B, t->T, &t->ctx);
        /* the step's last backward starts the gradients' sums block by block */
        t->ctx.sync_in_backward = m->dist && c->overlap && micro == c->accum - 1;
        model_backward(m, scale, &t->ctx);
    }
    model_sync_grads(m); /* across processes (or through NCCL alone); else nothing */
    model_grad_norm_record(m);
    /* one copy for the step's losses, routing statistics and gradient norm */
    model_read_step(m, c->accum, &loss, &aux, &z);
    for (int micro = 0; micro < c->accum; micro++) {
        model_step_route(m, micro);
        router_accum_add(ra, m);
    }
    loss /= c->accum;
    aux /= c->accum;
    z /= c->accum;
    const int D = c->mtp_depth;
    double s[3 + MOE_MTP_MAX];
    model_read_mtp(m, c->accum, s + 3);
    for (int k = 0; k < D; k++) s[3 + k] /= c->accum;
    if (t->d) { /* the batch's values: the mean over the processes' equal shares (a pipeline's
                   stages each add their blocks' and the last its loss) */
        s[0] = loss, s[1] = aux, s[2] = z;
        dist_allreduce_sum_d(t->d, DIST_WORLD, s, 3 + D);
        for (int i = 0; i < 3 + D; i++) s[i] /= replicas;
        loss = s[0], aux = s[1], z = s[2];
        router_accum_share(ra, t->d);
    }
    *v = (StepValues){.step = step + 1,
                      .loss = loss,
                      .aux = aux,
                      .z = z,
                      .lr = lr_schedule(c, step),
                      .norm = model_grad_norm(m), /* the step's copy */
                      .tok_s = NAN,
                      .val_loss = NAN,
                      .n_mtp = D};
    memcpy(v->mtp, s + 3, (size_t)D * sizeof(double));
}

/* One optimizer step: its passes; unless the loss diverged (then its row is recorded and the
 * run ends, exit 3), its spikes judged (spike.h) and then, by the verdict (*verdict), its update
 * (clipped to train.clip), the update skipped, or nothing yet (a rollback, a stop). */
static StepValues train_step(Trainer *t, int step, RunLog *log, RunWatch *watch, int *verdict) {
    const Config *c = t->c;
    const double t0 = now_seconds();
    StepValues v;
    step_passes(t, step, &log->ra, &v);
    if (!isfinite(v.loss) || (c->diverge_loss > 0.0f && v.loss > c->diverge_loss))
        run_log_diverged(log, &v, t->root);
    run_watch_spikes(watch, &v); /* on the step's values, before its update */
    *verdict = spike_guard_verdict(&t->guard, &v);
    if (*verdict == MOE_SPIKE_SKIP) {
        model_skip_update(&t->m);
    } else if (*verdict == MOE_SPIKE_NONE) {
        const float scale = (c->clip > 0.0f && v.norm > c->clip) ? c->clip / v.norm : 1.0f;
        model_adamw_step(&t->m, v.lr, scale);
        model_update_router_bias(&t->m, log->ra.count); /* aux-free balancing; else nothing */
    }
    v.step = *verdict == MOE_SPIKE_NONE || *verdict == MOE_SPIKE_SKIP ? t->m.step : step + 1;
    /* the whole batch's tokens (every process's share): the run's speed */
    v.tok_s = (double)c->accum * c->batch * t->T / (now_seconds() - t0);
    return v;
}

/* Set the high-water mark of the resident memory back (resident_peak_reset), the mark before
 * it kept in whole_peak; 0, or -1 where the system cannot. */
static int steps_peak_reset(Trainer *t) {
    const double before = resident_peak_mib();
    if (before > t->whole_peak) t->whole_peak = before;
    return resident_peak_reset();
}

/* The steps' peak so far, with the high-water mark since its last reset (steps_peak). */
static void steps_peak_note(Trainer *t) {
    const double now = t->steps_peak >= 0.0 ? resident_peak_mib() : -1.0;
    if (now > t->steps_peak) t->steps_peak = now;
}

/* rollback.bin: the state a rollback returns to (spike.h), written now */
static void keep_rollback(Trainer *t) {
    char err[1024];
    if (checkpoint_save(&t->m, &t->loader.rng, t->guard.rollback_path, err, sizeof err) != 0)
        moe_fatal("saving rollback.bin failed: %s", err);
    t->guard.kept = 1;
}

/* A checkpoint at its cadence, at the last step and when a signal asks the run to stop; then,
 * on a signal, the run ends (exit 128 + N) saying how to continue it. */
static void checkpoint_or_stop(Trainer *t, RunLog *log, int s) {
    const Config *c = t->c;
    char err[1024];
    const int stop = stop_requested(t->d);
    if ((c->ckpt_every > 0 && s % c->ckpt_every == 0) || s == t->last || stop) {
        run_log_flush(log);
        steps_peak_note(t); /* the steps' peak before the checkpoint's gathers */
        if (checkpoint_save(&t->m, &t->loader.rng, t->ckpt_path, err, sizeof err) != 0)
            moe_fatal("saving the checkpoint failed: %s", err);
        if (t->steps_peak >= 0.0) steps_peak_reset(t);
    }
    if (spike_guard_keep(&t->guard, s)) keep_rollback(t);
    if (!stop || s >= t->last) return;
    if (t->root) {
        char dir[MOE_PATH_MAX + 8], mpirun[32] = "";
        shell_word(dir, sizeof dir, t->o->out_dir);
        if (t->d) snprintf(mpirun, sizeof mpirun, "mpirun -np %d ", t->world);
        fprintf(stderr,
                "%sstopped by %s after step %d of %d: the checkpoint %s holds it. "
                "Continue with: %smoe train --resume %s\n",
                t->tty ? "\n" : "", stop == SIGINT ? "SIGINT" : "SIGTERM", s, t->last, t->ckpt_path,
                mpirun, dir);
    }
    /* every file is flushed; the exit status says which signal it was (128 + N) */
    if (t->o->dist) dist_finalize(t->o->dist);
    exit(128 + stop);
}

/* ---- a rollback (spike.h) ------------------------------------------------------------------ */

/* The guard of train.spike_action at the run's start; with rollbacks and no rollback.bin to
 * return to, one kept now when the run starts at a multiple of train.rollback_every (a later
 * one otherwise). */
static void open_guard(Trainer *t) {
    SpikeGuard *g = &t->guard;
    spike_guard_open(g, t->c, t->d, t->o->out_dir, t->start_step, !t->o->resume);
    if (!g->kept && t->start_step > 0 && spike_guard_keep(g, t->start_step)) keep_rollback(t);
}

/* The spiking step's rows written, rollback.bin loaded, the rollback recorded, and the run's
 * files, watches and guard opened again as a resume opens them at the step returned to, which
 * is returned. */
static int roll_back(Trainer *t, RunLog *log, RunWatch *watch, const StepValues *v) {
    const Config *c = t->c;
    Model *m = &t->m;
    char err[1024];
    run_log_step(log, m, v);
    run_log_flush(log);
    model_skip_update(m); /* the step's gradients dropped */
    if (checkpoint_load(m, &t->loader.rng, t->guard.rollback_path, 1, err, sizeof err) != 0)
        moe_input_error("the rollback: %s", err);
    const int to = m->step, k = t->guard.n_skip + 1;
    spike_guard_record(&t->guard, v->step, to);
    if (t->d) dist_barrier(t->d); /* the files are the first process's */
    RunLogSpec spec = log->s;
    spec.keep = spec.start = to;
    run_log_close(log);
    run_log_open(log, &spec, c, m);
    const int n[2] = {watch->n_loss_spikes, watch->n_grad_spikes};
    const int live = watch->lead[0] != '\0';
    run_watch_free(watch);
    run_watch_init(watch, c, m->n_moe, t->csv_path, to, t->root, live);
    watch->n_loss_spikes = n[0], watch->n_grad_spikes = n[1];
    spike_guard_rewind(&t->guard, to);
    uint64_t drawn[SHARD_MAX_DOMAINS]; /* a resume counts the windows drawn from here */
    loader_take_drawn(&t->loader, drawn);
    if (t->root)
        fprintf(stderr,
                "%srollback %d of at most %d (train.max_rollbacks): step %d spiked (loss %.4f, "
                "gradient norm %.4f); back to step %d, %d batches skipped (steps %d-%d's and "
                "train.rollback_skip=%d more)\n",
                watch->lead, k, c->max_rollbacks, v->step, v->loss, (double)v->norm, to,
                t->guard.skip[k - 1].batches, to + 1, v->step, c->rollback_skip);
    return to;
}

/* A spike after train.max_rollbacks rollbacks: its row written, the run ends (exit 3). */
static void spike_stop(Trainer *t, RunLog *log, const StepValues *v) {
    const Config *c = t->c;
    run_log_step(log, &t->m, v);
    run_log_close(log);
    if (t->root)
        fprintf(stderr,
                "spike at step %d (loss %.4f, gradient norm %.4f) after %d rollbacks "
                "(train.max_rollbacks=%d): the run stops, its last checkpoint in ckpt.bin. "
                "rollbacks.csv and rolled_back.csv in %s list the rollbacks. Lower train.lr, try "
                "train.beta2 "
                "or train.eps (chapter 6), or raise train.max_rollbacks and resume\n",
                v->step, v->loss, (double)v->norm, t->guard.n_skip, c->max_rollbacks,
                t->o->out_dir);
    if (t->o->dist) dist_finalize(t->o->dist);
    exit(MOE_EXIT_DIVERGED);
}

/* ---- the end ------------------------------------------------------------------------------ */

static void close_route_tape(Trainer *t) {
    const TrainOptions *o = t->o;
    const RouteTape *tape = &t->tape;
    if (!t->ctx.route_tape) return;
    if (o->replay_routing)
        printf("routing replayed from %s: this run's own top-k differed in %lld of %lld "
               "choices (%.4f %%); replay.csv has them by step\n",
               o->replay_routing, tape->flips, tape->choices,
               tape->choices ? 100.0 * (double)tape->flips / (double)tape->choices : 0.0);
    else
        printf("routing recorded in %s: %lld MoE block calls\n", o->record_routing, tape->calls);
    route_tape_close(&t->tape);
    t->ctx.route_tape = NULL;
}

static void report_done(const Trainer *t, float last_loss, float last_val, double seconds) {
    char val_text[96];
    if (isnan(last_val))
        snprintf(val_text, sizeof val_text, "no evaluation ran at train.eval_every=%d",
                 t->c->eval_every);
    else
        snprintf(val_text, sizeof val_text, "val loss %.4f", last_val);
    printf("done: step %d, train loss %.4f, %s (unigram entropy of the training data %.4f "
           "nats), %.1f s; run directory %s\n",
           t->m.step, last_loss, val_text, shard_unigram_entropy(&t->train), seconds,
           t->o->out_dir);
}

/* The memory the processes held at their peak (resident sets, from the kernel): over the
 * steps alone, and over the whole command (the start draws the whole model's weights before a
 * process keeps its share, a checkpoint gathers whole tensors), beside what the engine's
 * table of one process says (memory.h); printed by the first process, the largest over the
 * processes with its own. */
static void report_memory(Trainer *t) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    steps_peak_note(t);
    const int W = t->world;
    double *all = (double *)calloc_check(2 * (size_t)W, sizeof(double));
    double *mine = all + 2 * (size_t)(t->d ? t->d->rank : 0), most[2] = {0.0, 0.0};
    mine[0] = t->steps_peak, mine[1] = (double)ru.ru_maxrss / 1024.0; /* MiB */
    for (int k = 0; k < 2; k++) /* the marks before the resets, and the kernel's two counts */
        mine[1] = fmax(mine[1], k ? t->whole_peak : mine[0]);
    if (t->d) dist_allreduce_sum_d(t->d, DIST_WORLD, all, 2 * (size_t)W);
    for (int r = 0; r < W; r++)
        for (int k = 0; k < 2; k++) most[k] = all[2 * r + k] > most[k] ? all[2 * r + k] : most[k];
    MemoryBreakdown mb;
    model_memory_process(t->c, t->B, t->T, t->d ? t->d->ep : 1, W, &mb);
    const double MiB = 1024.0 * 1024.0;
    const double table = (4.0 * (double)mb.total_words + (double)mb.pad_bytes) / MiB;
    if (t->root && !t->o->quiet && mine[0] >= 0.0)
        printf("memory: the steps' peak resident %.1f MiB (the largest over %d process%s %.1f "
               "MiB); with the start and the checkpoints %.1f MiB (the largest %.1f MiB); ",
               mine[0], W, W > 1 ? "es" : "", most[0], mine[1], most[1]);
    else if (t->root && !t->o->quiet)
        printf("memory: peak resident %.1f MiB (the largest over %d process%s %.1f MiB); ", mine[1],
               W, W > 1 ? "es" : "", most[1]);
    if (t->root && !t->o->quiet)
        printf("the engine's table of a process %.1f MiB, of it weights, gradients and moments "
               "%.1f MiB\n",
               table, 4.0 * (double)(mb.params + mb.grads + mb.adam) / MiB);
    free(all);
}

static void trainer_free(Trainer *t) {
    if (t->m.pipe) pipe_free(&t->m);
    free(t->inputs);
    free(t->targets);
    free(t->domains);
    model_free(&t->m);
    shard_free(&t->train);
    shard_free(&t->val);
}

/* The run's closing lines, and everything it holds released. */
static void train_end(Trainer *t, RunWatch *watch, float last_loss, float last_val,
                      double seconds) {
    loader_free(&t->loader);
    close_route_tape(t);
    if (t->root) {
        report_done(t, last_loss, last_val, seconds);
        run_watch_report(watch, t->c);
        spike_guard_report(&t->guard);
    }
    spike_guard_close(&t->guard);
    report_memory(t); /* every process takes part */
    run_watch_free(watch);
    trainer_free(t);
}

/* ---- the loop ----------------------------------------------------------------------------- */

int train_run(Config *c, const TrainOptions *o) {
    Trainer t;
    trainer_open(&t, c, o);
    Model *m = &t.m;
    const RunLogSpec spec = {.out_dir = o->out_dir,
                             .d = t.d,
                             .keep = o->resume ? t.start_step : -1,
                             .start = t.start_step,
                             .last = t.last,
                             .train = &t.train,
                             .val = &t.val,
                             .loader = &t.loader,
                             .mix_target = (const double(*)[SHARD_MAX_DOMAINS])t.mix_target,
                             .mix_end_step = t.mix_end_step,
                             .replay = o->replay_routing ? &t.tape : NULL};
    RunLog log;
    run_log_open(&log, &spec, c, m);
    RunWatch watch;
    run_watch_init(&watch, c, m->n_moe, t.csv_path, spec.keep, t.root, t.tty && !o->quiet);
    open_guard(&t);
    print_banner(&t);

    const double t_start = now_seconds();
    double eta_from = t_start; /* the ETA's clock, set again by a rollback */
    float last_loss = NAN, last_val = NAN;
    /* MOE_HOST_READS=1: each step's host reads on stderr (a count only cpu-fenced keeps:
     * backend_host_reads), its evaluation's apart; tests/test_backends.sh bounds them */
    const int show_reads = getenv("MOE_HOST_READS") && strcmp(getenv("MOE_HOST_READS"), "1") == 0;
    catch_stop_signals();
    t.steps_peak = steps_peak_reset(&t) == 0 ? 0.0 : -1.0; /* the steps' peak from here */
    model_zero_grad(m);
    m->state.defer_reads = 1; /* the losses stay on the backend until the step's end */
    for (int step = t.start_step; step < t.last; step++) {
        const DistTally step_start = t.d ? dist_tally(t.d) : (DistTally){{0}, {{0}}};
        const long long reads_start = backend_host_reads;
        long long eval_reads = 0;
        int verdict;
        StepValues v = train_step(&t, step, &log, &watch, &verdict);
        if (verdict == SPIKE_STOP) spike_stop(&t, &log, &v);
        if (verdict == MOE_SPIKE_ROLLBACK) {
            t.start_step = roll_back(&t, &log, &watch, &v);
            eta_from = now_seconds();
            step = t.start_step - 1; /* the loop goes on from the step returned to */
            continue;
        }
        const int s = v.step;
        run_log_traffic(&log, m, &step_start, s); /* before an evaluation adds its own */
        if (c->eval_every > 0 && (s % c->eval_every == 0 || s == c->steps)) {
            DomainCounts *dc = run_log_domains(&log);
            eval_reads = backend_host_reads;
            v.val_loss = evaluate(m, &t.val, c->eval_batches, dc);
            eval_reads = backend_host_reads - eval_reads;
            run_log_eval(&log, m, s);
            last_val = v.val_loss;
        }
        run_log_step(&log, m, &v);
        run_watch_health(&watch, &log.ra, v.norm, s);
        if (show_reads)
            fprintf(stderr, "host reads: step %d: %lld, evaluation %lld\n", s,
                    backend_host_reads - reads_start - eval_reads, eval_reads);
        last_loss = (float)v.loss;
        if (t.root && !o->quiet)
            /* the live line keeps showing the last validation loss; plain lines show it once */
            progress(c, s, last_loss, t.tty ? last_val : v.val_loss, v.tok_s,
                     now_seconds() - eta_from, t.start_step, t.tty);
        checkpoint_or_stop(&t, &log, s);
    }
    run_log_close(&log);
    train_end(&t, &watch, last_loss, last_val, now_seconds() - t_start);
    return 0;
}
