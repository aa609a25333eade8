/* train.c: see train.h. */
#include "train/train.h"

#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/omp_compat.h"

#include "base/util.h"
#include "io/mix.h"
#include "model/ep.h"
#include "model/grad_sync.h"
#include "model/memory.h"
#include "model/route_tape.h"
#include "train/checkpoint.h"
#include "train/run.h"
#include "train/health.h"
#include "train/train_log.h"

/* ---- evaluation --------------------------------------------------------------------------- */

float evaluate(Model *m, const Shard *val, int eval_batches, DomainCounts *dc) {
    const int B = m->B, T = m->T, N = B * T;
    /* across processes every one draws the whole batch (world x B sequences) and evaluates
     * its own B of them: the same windows as one process would */
    const int world = m->dist ? m->dist->world : 1, rank = m->dist ? m->dist->rank : 0;
    const size_t NW = (size_t)N * world, mine = (size_t)rank * N;
    const int defer = m->defer_reads;
    m->defer_reads = 0; /* each batch's loss is read as it comes */
    int *inputs = (int *)malloc_check(NW * sizeof(int));
    int *targets = (int *)malloc_check(NW * sizeof(int));
    uint8_t *all_domains = (uint8_t *)malloc_check(NW);
    const uint8_t *domains = all_domains + mine;
    float *token_loss = (float *)malloc_check((size_t)N * sizeof(float));
    double total = 0.0;
    for (int i = 0; i < eval_batches; i++) {
        loader_val_batch(val, B * world, T, i, eval_batches, inputs, targets, all_domains);
        /* no context: no exploration noise, evaluation sees the router as it is */
        model_forward(m, inputs + mine, targets + mine, B, T, NULL);
        total += m->loss;
        if (!dc) continue;
        if (dc->loss_sum) { /* each token's loss to its domain */
            m->be->to_host(m->be, token_loss, m->losses, (size_t)N * sizeof(float));
            for (int t = 0; t < N; t++) {
                dc->loss_sum[domains[t]] += token_loss[t];
                dc->tokens[domains[t]] += 1.0;
            }
        }
        for (int l = 0, b = 0; l < m->cfg.n_layer; l++) {
            const MoeActs *a = m->blocks[l].moe;
            if (!a) continue;
            double drops[2] = {0.0, 0.0};
            m->be->route_domains(m->be, dc->counts + (size_t)b * dc->n_domains * dc->E, drops,
                                 domains, dc->n_domains, a->idx, &a->plan, N, &m->spec);
            if (dc->drops) dc->drops[2 * b] += drops[0], dc->drops[2 * b + 1] += drops[1];
            b++;
        }
    }
    if (m->dist) { /* equal shares: the mean of the processes' means is the batch's mean */
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
    m->defer_reads = defer;
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

static void load_shard_or_exit(Shard *s, const char *path, const char *key, int T) {
    char err[1024];
    if (shard_load(s, path, err, sizeof err) != 0 || shard_check_window(s, T, err, sizeof err) != 0)
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

/* mix.csv: the windows drawn of each domain since the last row, against the mix's share. */
static void mix_csv_write(FILE *f, Loader *l, const Shard *train, const double *target, int from,
                          int step) {
    uint64_t drawn[SHARD_MAX_DOMAINS], total = 0;
    loader_take_drawn(l, drawn);
    for (uint32_t d = 0; d < train->n_domains; d++) total += drawn[d];
    for (uint32_t d = 0; d < train->n_domains && total; d++)
        fprintf(f, "%d,%d,%s,%llu,%.6f,%.6f\n", step, from, train->domain[d],
                (unsigned long long)drawn[d], (double)drawn[d] / (double)total, target[d]);
}

/* The run directory's CSV files are written by the first process only; the others write to
 * /dev/null, so the code that fills them is the same everywhere. */
static FILE *run_csv(const Dist *d, const char *dir, const char *file, const char *header,
                     int keep) {
    if (d && d->rank != 0) return fopen_check("/dev/null", "w");
    return csv_open(dir, file, header, keep);
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
    if (m->n_moe == 0 || c->routing == MOE_ROUTING_EXPERT_CHOICE)
        moe_input_error("%s: it records token-choice routing, and this model has %s", opt,
                        m->n_moe == 0 ? "no MoE block" : "moe.routing=expert_choice");
    const long long calls = (long long)(last - start) * c->accum * m->n_moe;
    if (route_tape_open(t, path, o->replay_routing != NULL, c->num_experts, c->top_k, m->B * m->T,
                        m->n_moe, calls, err, sizeof err) != 0)
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

int train_run(Config *c, const TrainOptions *o) {
    char err[1024], ckpt_path[MOE_PATH_MAX + 32], path[MOE_PATH_MAX + 32];
    Dist *d = o->dist && o->dist->world > 1 ? o->dist : NULL;
    const int root = !d || d->rank == 0, world = d ? d->world : 1;
    if (d && config_check_dist(c, world, err, sizeof err) != 0) moe_input_error("%s", err);
    run_path(ckpt_path, sizeof ckpt_path, o->out_dir, "ckpt.bin");
    run_path(path, sizeof path, o->out_dir, "train.csv");
    /* one command at a time on a run directory: the first process, which writes it, holds its
     * lock. A directory that has a lock file (or a run to continue) is locked before it is
     * read; a new one once its folder exists, so that a refused command creates nothing. */
    char lock_path[MOE_PATH_MAX + 32];
    run_path(lock_path, sizeof lock_path, o->out_dir, "lock");
    if (root && (o->resume || o->restart || file_exists(lock_path))) run_lock(o->out_dir);
    refuse_existing_run(o, ckpt_path, path);
    if (o->resume && !file_exists(ckpt_path))
        moe_input_error("--resume %s: no checkpoint %s to resume from; start the run without "
                        "--resume",
                        o->out_dir, ckpt_path);
    if (o->resume && o->stored && run_check_config(o->out_dir, o->stored, c, err, sizeof err) != 0)
        moe_input_error("%s", err);
    if (o->restart && run_check_restart(o->out_dir, err, sizeof err) != 0)
        moe_input_error("%s", err);

    /* train.batch is the whole batch; each process trains on its equal share of it, drawn by
     * the same loader on every process (the one-process sequences, whatever the world) */
    const int B = c->batch / world, T = c->seq_len;
    const size_t mine = (d ? (size_t)d->rank : 0) * B * T;
    Shard train, val;
    load_shard_or_exit(&train, c->train, "data.train", T);
    load_shard_or_exit(&val, c->val, "data.val", T);
    /* a resumed run continues on the data it trained on, unless told otherwise */
    if (o->resume && !o->allow_data_change &&
        run_check_data(o->out_dir, &train, &val, err, sizeof err) != 0)
        moe_input_error("%s", err);
    /* the whole model fits in this machine's memory (memory.h), or nothing is allocated */
    if (memory_check(c, B, T, d ? d->ep : 1, err, sizeof err) != 0) moe_input_error("%s", err);

    /* the thread count first: the model sizes its per-thread buffers by it */
    const int threads = backend_set_threads(c->threads);
    Model m;
    model_init_dist(&m, c, B, T, o->dist); /* it keeps one process's dist only for NCCL */
    Loader loader;
    loader_init(&loader, &train, c->batch, T, c->seed);
    double mix_target[2][SHARD_MAX_DOMAINS];
    int mix_end_step;
    char mix_lines[1200];
    setup_mix(&loader, c, &train, mix_target, &mix_end_step, mix_lines, sizeof mix_lines);
    if (o->resume && checkpoint_load(&m, &loader.rng, ckpt_path, 1, err, sizeof err) != 0)
        moe_input_error("%s", err);
    /* the CSVs are cut back to the checkpoint and appended to: they must be the run's own */
    if (o->resume && run_check_logs(o->out_dir, m.step, err, sizeof err) != 0)
        moe_input_error("%s", err);
    /* --init: the weights (and aux-free biases) of another run, a fresh optimizer at step 0 */
    if (!o->resume && o->init && checkpoint_load(&m, NULL, o->init, 0, err, sizeof err) != 0)
        moe_input_error("--init: %s", err);
    const int start_step = m.step;
    const int last = o->until > 0 && o->until < c->steps ? o->until : c->steps;
    if (start_step >= last)
        moe_input_error("%s is already at step %d of train.steps=%d; to train further, raise it "
                        "(--set train.steps=N)",
                        o->out_dir, start_step, c->steps);
    RouteTape tape;
    /* exploration noise on (moe.jitter, moe.noise) in the step's passes; evaluate() runs
     * without it */
    StepCtx ctx = {.training = 1};
    ctx.route_tape = open_route_tape(&tape, &m, c, o, world, start_step, last);

    /* every process has checked its inputs; only now does the first one write */
    if (d) dist_barrier(d);
    if (root && o->restart)
        printf("%s has no checkpoint yet (the run stopped before its first one): starting it "
               "again from step 0 with its config.txt\n",
               o->out_dir);
    if (root) {
        if (make_dirs(o->out_dir, err, sizeof err) != 0) moe_input_error("--out: %s", err);
        run_lock(o->out_dir);
        refuse_existing_run(o, ckpt_path, path);
        run_write_config(o->out_dir, c);
    }
    if (root)
        run_write_provenance(o->out_dir, c, &train, &val, mix_lines, threads, start_step,
                             o->resume ? NULL : o->init, d);

    const int keep = o->resume ? start_step : -1;
    FILE *ftrain = run_csv(
        d, o->out_dir, "train.csv",
        "step,loss,aux_loss,z_loss,lr,grad_norm,tok_per_s,val_loss,loss_spike,grad_spike", keep);
    char header[8192];
    router_csv_header(header, sizeof header, c->num_experts);
    FILE *frouter = run_csv(d, o->out_dir, "router.csv", header, keep);
    FILE *fdomains =
        run_csv(d, o->out_dir, "domains.csv", "step,layer,domain,expert,fraction", keep);
    int hl = snprintf(header, sizeof header, "step,layer,maxvio,cv");
    for (int e = 0; e < c->num_experts && hl < (int)sizeof header - 16; e++)
        hl += snprintf(header + hl, sizeof header - (size_t)hl, ",load_%d", e);
    snprintf(header + hl, sizeof header - (size_t)hl, ",drop_frac");
    FILE *fvalrouter = run_csv(d, o->out_dir, "val_router.csv", header, keep);
    FILE *fmix =
        run_csv(d, o->out_dir, "mix.csv", "step,from_step,domain,windows,share,target", keep);
    FILE *fvaldom = run_csv(d, o->out_dir, "val_domains.csv", "step,domain,val_loss,tokens", keep);
    int mix_from = start_step;
    FILE *fdist = d ? run_csv(d, o->out_dir, "dist.csv",
                              "step,layer,rank,bytes_sent,bytes_recv,comm_s,expert_s,rows_in,"
                              "rows_out_remote,rows_in_remote,sync_wait_s",
                              keep)
                    : NULL;

    /* a replay's flips per step: the choices this run's own top-k would have made otherwise */
    FILE *freplay = o->replay_routing
                        ? run_csv(d, o->out_dir, "replay.csv", "step,choices,flipped", keep)
                        : NULL;
    long long replay_choices = 0, replay_flips = 0;

    const int E = c->num_experts > 0 ? c->num_experts : 1;
    RouterAccum ra;
    router_accum_init(&ra, m.n_moe, E, c->balance_groups > 0 ? c->balance_groups : c->ep);
    /* the spikes of train.csv; a resumed run judges its first steps against the rows it keeps */
    SpikeWatch loss_spikes, grad_spikes;
    spike_watch_init(&loss_spikes, c->spike_window, c->spike_k);
    spike_watch_init(&grad_spikes, c->spike_window, c->spike_k);
    if (keep > 0) spike_watch_refill(&loss_spikes, &grad_spikes, path, keep);
    int n_loss_spikes = 0, n_grad_spikes = 0;
    /* the live warnings: starving experts, drop storms, a gradient that is not finite */
    int *moe_layer = (int *)calloc_check((size_t)m.n_moe + 1, sizeof(int));
    for (int l = 0, b = 0; l < c->n_layer; l++)
        if (config_is_moe_layer(c, l)) moe_layer[b++] = l;
    HealthWatch health;
    health_watch_init(&health, m.n_moe, E, moe_layer, c->steps);
    DomainCounts dc = {.n_moe = m.n_moe, .n_domains = (int)val.n_domains, .E = E};
    dc.counts = (double *)calloc_check((size_t)m.n_moe * val.n_domains * E + 1, sizeof(double));
    dc.drops = (double *)calloc_check((size_t)m.n_moe * 2 + 1, sizeof(double));
    dc.loss_sum = (double *)calloc_check((size_t)val.n_domains, sizeof(double));
    dc.tokens = (double *)calloc_check((size_t)val.n_domains, sizeof(double));

    /* the whole batch (every process draws it), of which this process trains its share */
    int *inputs = (int *)malloc_check((size_t)c->batch * T * sizeof(int));
    int *targets = (int *)malloc_check((size_t)c->batch * T * sizeof(int));
    uint8_t *domains = (uint8_t *)malloc_check((size_t)c->batch * T);
    const int tty = root && !o->quiet && isatty(STDERR_FILENO);
    if (root) {
        printf("training %s: %d steps of %d micro-batch(es) of %d x %d tokens, %d threads%s\n",
               o->out_dir, c->steps, c->accum, c->batch, T, threads, o->resume ? " (resumed)" : "");
        if (d)
            printf("  %d processes: dist.ep=%d (each holds %d of %d experts) x %d data-parallel, "
                   "%d sequences each\n",
                   world, d->ep, c->num_experts / d->ep, c->num_experts, d->dp, B);
        fflush(stdout);
    }

    const double t_start = now_seconds();
    float last_loss = NAN, last_val = NAN;
    /* MOE_HOST_READS=1: each step's host reads on stderr (a count only cpu-fenced keeps:
     * backend_host_reads), its evaluation's apart; tests/test_backends.sh bounds them */
    const int show_reads = getenv("MOE_HOST_READS") && strcmp(getenv("MOE_HOST_READS"), "1") == 0;
    catch_stop_signals();
    model_zero_grad(&m);
    m.defer_reads = 1; /* the losses stay on the backend until the step's end */
    for (int step = start_step; step < last; step++) {
        const double t0 = now_seconds();
        const DistStats step_start = d ? d->stats : (DistStats){0};
        const long long reads_start = backend_host_reads;
        long long eval_reads = 0;
        for (int l = 0; l < c->n_layer; l++)
            if (m.blocks[l].moe && m.blocks[l].moe->ep) ep_stats_reset(m.blocks[l].moe->ep);
        /* the gradients are zero here: model_zero_grad before the first step, and after each
         * step model_adamw_step has cleared them in the pass that read them */
        router_accum_reset(&ra);
        double loss = 0.0, aux = 0.0, z = 0.0;
        for (int micro = 0; micro < c->accum; micro++) {
            loader_set_step(&loader, step);
            loader_next(&loader, inputs, targets, domains);
            ctx.micro = micro;
            model_forward(&m, inputs + mine, targets + mine, B, T, &ctx);
            /* the step's last backward starts the gradients' sums block by block */
            ctx.sync_in_backward = m.dist && c->overlap && micro == c->accum - 1;
            /* each process's mean over its share, 1 / world of the batch's mean */
            model_backward(&m, 1.0f / (float)(c->accum * world), &ctx);
        }
        model_sync_grads(&m); /* across processes (or through NCCL alone); else nothing */
        model_grad_norm_record(&m);
        /* one copy for the step's losses, routing statistics and gradient norm */
        model_read_step(&m, c->accum, &loss, &aux, &z);
        for (int micro = 0; micro < c->accum; micro++) {
            model_step_route(&m, micro);
            router_accum_add(&ra, &m);
        }
        loss /= c->accum;
        aux /= c->accum;
        z /= c->accum;
        if (d) { /* the batch's values: the mean over the processes' equal shares */
            double v[3] = {loss, aux, z};
            dist_allreduce_sum_d(d, DIST_WORLD, v, 3);
            loss = v[0] / world;
            aux = v[1] / world;
            z = v[2] / world;
            router_accum_share(&ra, d);
        }
        const float norm = model_grad_norm(&m); /* from the step's copy */
        if (!isfinite(loss) || (c->diverge_loss > 0.0f && loss > c->diverge_loss)) {
            /* the step is recorded, not taken: the run ends as diverged (exit status 3) */
            train_csv_row(ftrain, step + 1, loss, aux, z, lr_schedule(c, step), norm, NAN, NAN, 0,
                          0);
            fclose(ftrain);
            fclose(frouter);
            if (root)
                fprintf(stderr,
                        "diverged: the training loss is %g at step %d (%s); train.csv records "
                        "it, the checkpoint in %s holds the last step saved. Lower train.lr, "
                        "raise train.warmup or try the methods of chapter 5\n",
                        loss, step + 1,
                        isfinite(loss) ? "above train.diverge_loss" : "not a finite number",
                        o->out_dir);
            exit(MOE_EXIT_DIVERGED);
        }
        /* a spike is judged on the step's values before this step's update */
        const int loss_spike = spike_watch_push(&loss_spikes, loss);
        const int grad_spike = spike_watch_push(&grad_spikes, norm);
        n_loss_spikes += loss_spike, n_grad_spikes += grad_spike;
        const float scale = (c->clip > 0.0f && norm > c->clip) ? c->clip / norm : 1.0f;
        const float lr = lr_schedule(c, step);
        model_adamw_step(&m, lr, scale);
        model_update_router_bias(&m, ra.count); /* aux-free balancing; else nothing */
        const int s = m.step;
        /* the whole batch's tokens (every process's share): the run's speed */
        const double tok_s = (double)c->accum * c->batch * T / (now_seconds() - t0);

        /* the step's traffic, before an evaluation adds its own */
        if (d) dist_csv_write(fdist, &m, d, &step_start, s);
        float val_loss = NAN;
        if (c->eval_every > 0 && (s % c->eval_every == 0 || s == c->steps)) {
            memset(dc.counts, 0, (size_t)m.n_moe * val.n_domains * E * sizeof(double));
            memset(dc.drops, 0, (size_t)m.n_moe * 2 * sizeof(double));
            memset(dc.loss_sum, 0, (size_t)val.n_domains * sizeof(double));
            memset(dc.tokens, 0, (size_t)val.n_domains * sizeof(double));
            eval_reads = backend_host_reads;
            val_loss = evaluate(&m, &val, c->eval_batches, &dc);
            eval_reads = backend_host_reads - eval_reads;
            for (uint32_t v = 0; v < val.n_domains; v++)
                if (dc.tokens[v] > 0)
                    fprintf(fvaldom, "%d,%s,%.6f,%.0f\n", s, val.domain[v],
                            dc.loss_sum[v] / dc.tokens[v], dc.tokens[v]);
            fflush(fvaldom);
            domains_csv_write(fdomains, &dc, &m, &val, s);
            fflush(fdomains);
            val_router_csv_write(fvalrouter, &dc, &m, ra.tmp, s);
            fflush(fvalrouter);
            last_val = val_loss;
        }
        /* the windows drawn since the last row: at each evaluation, where the end mix takes
         * over, and at the end, so that every row lies inside one mix */
        if (!isnan(val_loss) || s == mix_end_step || s == last) {
            mix_csv_write(fmix, &loader, &train, mix_target[mix_from >= mix_end_step], mix_from, s);
            fflush(fmix);
            mix_from = s;
        }
        train_csv_row(ftrain, s, loss, aux, z, lr, norm, tok_s, val_loss, loss_spike, grad_spike);
        router_accum_write(&ra, &m, frouter, s);
        if (root)
            health_watch_step(&health, &ra, norm, s, stderr, tty && !o->quiet ? "\r\033[K" : "");
        if (show_reads)
            fprintf(stderr, "host reads: step %d: %lld, evaluation %lld\n", s,
                    backend_host_reads - reads_start - eval_reads, eval_reads);
        if (freplay) {
            fprintf(freplay, "%d,%lld,%lld\n", s, tape.choices - replay_choices,
                    tape.flips - replay_flips);
            replay_choices = tape.choices, replay_flips = tape.flips;
        }
        last_loss = (float)loss;
        if (root && !o->quiet)
            /* the live line keeps showing the last validation loss; plain lines show it once */
            progress(c, s, last_loss, tty ? last_val : val_loss, tok_s, now_seconds() - t_start,
                     start_step, tty);

        const int stop = stop_requested(d);
        if ((c->ckpt_every > 0 && s % c->ckpt_every == 0) || s == last || stop) {
            fflush(ftrain);
            fflush(frouter);
            if (fdist) fflush(fdist);
            if (freplay) fflush(freplay);
            if (checkpoint_save(&m, &loader.rng, ckpt_path, err, sizeof err) != 0)
                moe_fatal("saving the checkpoint failed: %s", err);
        }
        if (stop && s < last) {
            if (root) {
                char dir[MOE_PATH_MAX + 8], mpirun[32] = "";
                shell_word(dir, sizeof dir, o->out_dir);
                if (d) snprintf(mpirun, sizeof mpirun, "mpirun -np %d ", world);
                fprintf(stderr,
                        "%sstopped by %s after step %d of %d: the checkpoint %s holds it. "
                        "Continue with: %smoe train --resume %s\n",
                        tty ? "\n" : "", stop == SIGINT ? "SIGINT" : "SIGTERM", s, last, ckpt_path,
                        mpirun, dir);
            }
            /* every file is flushed; the exit status says which signal it was (128 + N) */
            if (o->dist) dist_finalize(o->dist);
            exit(128 + stop);
        }
    }
    fclose(ftrain);
    fclose(frouter);
    fclose(fdomains);
    fclose(fmix);
    fclose(fvaldom);
    free(dc.loss_sum);
    free(dc.tokens);
    loader_free(&loader);
    fclose(fvalrouter);
    if (fdist) fclose(fdist);
    if (freplay) fclose(freplay);
    if (ctx.route_tape) {
        if (o->replay_routing)
            printf("routing replayed from %s: this run's own top-k differed in %lld of %lld "
                   "choices (%.4f %%); replay.csv has them by step\n",
                   o->replay_routing, tape.flips, tape.choices,
                   tape.choices ? 100.0 * (double)tape.flips / (double)tape.choices : 0.0);
        else
            printf("routing recorded in %s: %lld MoE block calls\n", o->record_routing, tape.calls);
        route_tape_close(&tape);
    }
    if (root) {
        char val_text[96];
        if (isnan(last_val))
            snprintf(val_text, sizeof val_text, "no evaluation ran at train.eval_every=%d",
                     c->eval_every);
        else
            snprintf(val_text, sizeof val_text, "val loss %.4f", last_val);
        printf("done: step %d, train loss %.4f, %s (unigram entropy of the training data %.4f "
               "nats), %.1f s; run directory %s\n",
               m.step, last_loss, val_text, shard_unigram_entropy(&train), now_seconds() - t_start,
               o->out_dir);
        printf("spikes in the steps this command trained (a value above the mean of the %d "
               "steps before it plus %g std): %d of the loss, %d of the gradient norm; train.csv "
               "marks them\n",
               c->spike_window, (double)c->spike_k, n_loss_spikes, n_grad_spikes);
    }

    free(inputs);
    free(targets);
    free(domains);
    router_accum_free(&ra);
    spike_watch_free(&loss_spikes);
    spike_watch_free(&grad_spikes);
    health_watch_free(&health);
    free(moe_layer);
    free(dc.drops);
    free(dc.counts);
    model_free(&m);
    shard_free(&train);
    shard_free(&val);
    return 0;
}
