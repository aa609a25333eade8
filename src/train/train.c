/* train.c: see train.h. */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "base/util.h"
#include "model/ep.h"
#include "model/grad_sync.h"
#include "model/memory.h"
#include "model/route_tape.h"
#include "train/checkpoint.h"
#include "train/run.h"

/* ---- evaluation --------------------------------------------------------------------------- */

float evaluate(Model *m, const Shard *val, int eval_batches, DomainCounts *dc) {
    const int B = m->B, T = m->T, N = B * T;
    /* across processes every one draws the whole batch (world x B sequences) and evaluates
     * its own B of them: the same windows as one process would */
    const int world = m->dist ? m->dist->world : 1, rank = m->dist ? m->dist->rank : 0;
    const size_t NW = (size_t)N * world, mine = (size_t)rank * N;
    const int training = m->training;
    m->training = 0; /* no exploration noise: evaluation sees the router as it is */
    int *inputs = (int *)malloc_check(NW * sizeof(int));
    int *targets = (int *)malloc_check(NW * sizeof(int));
    uint8_t *all_domains = (uint8_t *)malloc_check(NW);
    const uint8_t *domains = all_domains + mine;
    double total = 0.0;
    for (int i = 0; i < eval_batches; i++) {
        loader_val_batch(val, B * world, T, i, eval_batches, inputs, targets, all_domains);
        model_forward(m, inputs + mine, targets + mine, B, T);
        total += m->loss;
        if (!dc) continue;
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
        }
    }
    free(inputs);
    free(targets);
    free(all_domains);
    m->training = training;
    return (float)(total / eval_batches);
}

/* ---- router statistics of one optimizer step ------------------------------------------------
 * Loads are averaged over the step's micro-batches, then MaxVio and CV are taken of the
 * averaged load: the balance of the whole step's batch. */
typedef struct {
    int n_moe, E, micro;
    double *load;    /* (n_moe, E) summed over micro-batches */
    double *count;   /* (n_moe, E) assignments per expert, summed over micro-batches (and
                        processes): whole numbers, what the aux-free bias update compares */
    double *entropy; /* (n_moe) */
    double *top1;    /* (n_moe) */
    double *drop;    /* (n_moe) */
    double *pad;     /* (n_moe) fraction of computed expert rows that are padding */
    double *edrop;   /* (n_moe, E) fraction of each expert's routed assignments dropped */
    float *tmp;      /* (E) */
} RouterAccum;

static void raccum_reset(RouterAccum *r) {
    memset(r->load, 0, (size_t)r->n_moe * r->E * sizeof(double));
    memset(r->count, 0, (size_t)r->n_moe * r->E * sizeof(double));
    memset(r->entropy, 0, (size_t)r->n_moe * sizeof(double));
    memset(r->top1, 0, (size_t)r->n_moe * sizeof(double));
    memset(r->drop, 0, (size_t)r->n_moe * sizeof(double));
    memset(r->pad, 0, (size_t)r->n_moe * sizeof(double));
    memset(r->edrop, 0, (size_t)r->n_moe * r->E * sizeof(double));
    r->micro = 0;
}

static void raccum_add(RouterAccum *r, const Model *m) {
    const int ec = m->spec.routing == MOE_ROUTING_EXPERT_CHOICE;
    for (int l = 0, b = 0; l < m->cfg.n_layer; l++) {
        const MoeActs *a = m->blocks[l].moe;
        if (!a) continue;
        const RouteStats *rs = &a->route; /* what the block's last forward routed */
        r->drop[b] += rs->drop;
        if (!ec) r->pad[b] += rs->pad;
        for (int e = 0; e < r->E; e++) {
            r->count[b * r->E + e] += rs->routed[e];
            if (!ec && rs->routed[e] > 0)
                r->edrop[b * r->E + e] += (double)rs->dropped[e] / rs->routed[e];
            r->load[b * r->E + e] += rs->load[e];
        }
        r->entropy[b] += rs->st.entropy;
        r->top1[b] += rs->st.top1;
        b++;
    }
    r->micro++;
}

/* Across processes: every statistic of the step becomes the mean over the processes (their
 * batches are equal shares, so a mean of fractions is the fraction of the whole batch). */
static void raccum_share(RouterAccum *r, Dist *d) {
    if (!d) return;
    const size_t nb = (size_t)r->n_moe, ne = nb * r->E;
    double *arrays[6] = {r->load, r->entropy, r->top1, r->drop, r->pad, r->edrop};
    const size_t lens[6] = {ne, nb, nb, nb, nb, ne};
    for (int i = 0; i < 6; i++) {
        dist_allreduce_sum_d(d, DIST_WORLD, arrays[i], lens[i]);
        for (size_t j = 0; j < lens[i]; j++) arrays[i][j] /= d->world;
    }
    dist_allreduce_sum_d(d, DIST_WORLD, r->count, ne); /* counts add up: the whole batch's */
}

/* One router.csv row per MoE block; the bias columns hold the aux-free bias after this
 * step's update (0 unless moe.balance=aux_free); drop_e and pad_frac are the micro-batch
 * means of each expert's dropped fraction and of the padding rows' share of the computed
 * rows (both 0 for expert choice, whose experts take exactly cap tokens each); expert_sim is
 * the mean cosine similarity of the block's experts after the step (how far upcycled copies
 * have moved apart). */
static void raccum_write(const RouterAccum *r, const Model *m, FILE *f, int step) {
    for (int l = 0, b = 0; l < m->cfg.n_layer; l++) {
        if (!m->blocks[l].moe) continue;
        for (int e = 0; e < r->E; e++) r->tmp[e] = (float)(r->load[b * r->E + e] / r->micro);
        float maxvio, cv;
        load_balance(&maxvio, &cv, r->tmp, r->E);
        fprintf(f, "%d,%d,%.6f,%.6f,%.6f,%.6f", step, l, maxvio, cv, r->entropy[b] / r->micro,
                r->drop[b] / r->micro);
        for (int e = 0; e < r->E; e++) fprintf(f, ",%.6f", r->tmp[e]);
        float *bias = model_host_copy(m, m->blocks[l].router_bias, (size_t)r->E);
        for (int e = 0; e < r->E; e++)
            fprintf(f, ",%.6g", (bias ? bias : m->blocks[l].router_bias)[e]);
        free(bias);
        fprintf(f, ",%.6f", r->top1[b] / r->micro);
        for (int e = 0; e < r->E; e++) fprintf(f, ",%.6f", r->edrop[b * r->E + e] / r->micro);
        /* with expert parallelism no process holds all the experts: nan */
        const LayerView *w = &m->w.layers[l];
        const size_t ne = (size_t)r->E * m->cfg.d_model * config_expert_hidden(&m->cfg);
        float *hg = model_host_copy(m, w->e_gate, ne), *hu = model_host_copy(m, w->e_up, ne);
        float *hd = model_host_copy(m, w->e_down, ne);
        const double sim =
            m->dist && m->dist->ep > 1
                ? NAN
                : experts_similarity(hg ? hg : w->e_gate, hu ? hu : w->e_up, hd ? hd : w->e_down,
                                     r->E, m->cfg.d_model, config_expert_hidden(&m->cfg));
        free(hg), free(hu), free(hd);
        fprintf(f, ",%.6f,%.6f\n", r->pad[b] / r->micro, sim);
        b++;
    }
}

static void write_domains(FILE *f, const DomainCounts *dc, const Model *m, const Shard *val,
                          int step) {
    for (int l = 0, b = 0; l < m->cfg.n_layer; l++) {
        if (!m->blocks[l].moe) continue;
        for (int d = 0; d < dc->n_domains; d++) {
            const double *row = &dc->counts[((size_t)b * dc->n_domains + d) * dc->E];
            double total = 0.0;
            for (int e = 0; e < dc->E; e++) total += row[e];
            if (total == 0.0) continue; /* domain absent from the evaluated batches */
            for (int e = 0; e < dc->E; e++)
                fprintf(f, "%d,%d,%s,%d,%.6f\n", step, l, val->domain[d], e, row[e] / total);
        }
        b++;
    }
}

/* val_router.csv: the balance of every MoE block over the whole validation set of one
 * evaluation. The per-domain counts of dc summed over the domains are the block's loads over
 * all eval batches together (not a mean of per-batch statistics); drop_frac likewise divides
 * the dropped assignments (expert choice: unpicked tokens) of all batches by their total. */
static void write_val_router(FILE *f, const DomainCounts *dc, const Model *m, float *load,
                             int step) {
    for (int l = 0, b = 0; l < m->cfg.n_layer; l++) {
        if (!m->blocks[l].moe) continue;
        double total = 0.0;
        for (int e = 0; e < dc->E; e++) {
            double s = 0.0;
            for (int d = 0; d < dc->n_domains; d++)
                s += dc->counts[((size_t)b * dc->n_domains + d) * dc->E + e];
            load[e] = (float)s;
            total += s;
        }
        for (int e = 0; e < dc->E; e++) load[e] = total > 0.0 ? (float)(load[e] / total) : 0.0f;
        float maxvio, cv;
        load_balance(&maxvio, &cv, load, dc->E);
        fprintf(f, "%d,%d,%.6f,%.6f", step, l, maxvio, cv);
        for (int e = 0; e < dc->E; e++) fprintf(f, ",%.6f", load[e]);
        const double *dr = dc->drops + 2 * b;
        fprintf(f, ",%.6f\n", dr[1] > 0.0 ? dr[0] / dr[1] : 0.0);
        b++;
    }
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

/* The run directory's CSV files are written by the first process only; the others write to
 * /dev/null, so the code that fills them is the same everywhere. */
static FILE *run_csv(const Dist *d, const char *dir, const char *file, const char *header,
                     int keep) {
    if (d && d->rank != 0) return fopen_check("/dev/null", "w");
    return csv_open(dir, file, header, keep);
}

/* dist.csv: this step's traffic and time of every process, one row per process and MoE block
 * (layer -1: the step's other collectives: gradient sums, statistics; and sync_wait_s, the
 * seconds after the backward spent waiting for the gradients' sums). Gathered by a sum over
 * the world of arrays where each process fills only its own rows. */
enum { DIST_COLS = 8 }; /* bytes_sent, bytes_recv, comm_s, expert_s, rows_in, rows_out, rows_rin,
                          sync_wait_s */
static void write_dist(FILE *f, const Model *m, Dist *d, const DistStats *step_start, int step) {
    const int W = d->world, nb = m->n_moe + 1;
    double *all = (double *)calloc_check((size_t)W * nb * DIST_COLS, sizeof(double));
    double *mine = all + (size_t)d->rank * nb * DIST_COLS;
    double ep_sent = 0.0, ep_recv = 0.0, ep_comm = 0.0;
    for (int l = 0, b = 0; l < m->cfg.n_layer; l++) {
        const MoeActs *a = m->blocks[l].moe;
        if (!a) continue;
        double *row = mine + (size_t)(b + 1) * DIST_COLS;
        if (a->ep) {
            row[0] = a->ep->stats.bytes_sent;
            row[1] = a->ep->stats.bytes_recv;
            row[2] = a->ep->stats.comm_seconds;
            row[3] = a->ep->stats.expert_seconds;
            row[4] = a->ep->stats.rows_in;
            row[5] = a->ep->stats.rows_out_remote;
            row[6] = a->ep->stats.rows_in_remote;
            ep_sent += row[0];
            ep_recv += row[1];
            ep_comm += row[2];
        }
        b++;
    }
    /* everything else this process exchanged during the step */
    mine[0] = (double)(d->stats.bytes_sent - step_start->bytes_sent) - ep_sent;
    mine[1] = (double)(d->stats.bytes_recv - step_start->bytes_recv) - ep_recv;
    mine[2] = (d->stats.seconds - step_start->seconds) - ep_comm;
    mine[7] = m->sync->wait_s; /* what of the gradients' sums the backward did not hide */
    dist_allreduce_sum_d(d, DIST_WORLD, all, (size_t)W * nb * DIST_COLS);
    for (int r = 0; r < W; r++)
        for (int l = -1, b = 0; l < m->cfg.n_layer; l++) {
            if (l >= 0 && !m->blocks[l].moe) continue;
            const double *row = all + ((size_t)r * nb + b) * DIST_COLS;
            fprintf(f, "%d,%d,%d,%.0f,%.0f,%.6f,%.6f,%.0f,%.0f,%.0f,%.6f\n", step, l, r, row[0],
                    row[1], row[2], row[3], row[4], row[5], row[6], row[7]);
            b++;
        }
    free(all);
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

int train_run(Config *c, const TrainOptions *o) {
    char err[1024], ckpt_path[MOE_PATH_MAX + 32], path[MOE_PATH_MAX + 32];
    Dist *d = o->dist && o->dist->world > 1 ? o->dist : NULL;
    const int root = !d || d->rank == 0, world = d ? d->world : 1;
    if (d && config_check_dist(c, world, err, sizeof err) != 0) moe_input_error("%s", err);
    run_path(ckpt_path, sizeof ckpt_path, o->out_dir, "ckpt.bin");
    run_path(path, sizeof path, o->out_dir, "train.csv");
    if (!o->resume && file_exists(ckpt_path))
        moe_input_error("%s already holds a run; continue it with `moe train --resume %s`, or "
                        "choose another --out (nothing was changed)",
                        o->out_dir, o->out_dir);
    /* a run stopped before its first checkpoint has CSV files but nothing to resume from:
     * `--resume` starts it again from step 0 with its config.txt (o->restart) */
    if (!o->resume && !o->restart && file_exists(path))
        moe_input_error("%s holds a run that stopped before its first checkpoint; start it again "
                        "from step 0 with `moe train --resume %s` (its config.txt), or choose "
                        "another --out (nothing was changed)",
                        o->out_dir, o->out_dir);
    if (o->resume && !file_exists(ckpt_path))
        moe_input_error("--resume %s: no checkpoint %s to resume from; start the run without "
                        "--resume",
                        o->out_dir, ckpt_path);

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
    if (o->resume && checkpoint_load(&m, &loader.rng, ckpt_path, 1, err, sizeof err) != 0)
        moe_input_error("%s", err);
    /* --init: the weights (and aux-free biases) of another run, a fresh optimizer at step 0 */
    if (!o->resume && o->init && checkpoint_load(&m, NULL, o->init, 0, err, sizeof err) != 0)
        moe_input_error("--init: %s", err);
    const int start_step = m.step;
    m.training = 1; /* exploration noise on (moe.jitter, moe.noise); evaluate() turns it off */
    const int last = o->until > 0 && o->until < c->steps ? o->until : c->steps;
    if (start_step >= last)
        moe_input_error("%s is already at step %d of train.steps=%d; to train further, raise it "
                        "(--set train.steps=N)",
                        o->out_dir, start_step, c->steps);
    RouteTape tape;
    m.route_tape = open_route_tape(&tape, &m, c, o, world, start_step, last);

    /* every process has checked its inputs; only now does the first one write */
    if (d) dist_barrier(d);
    if (root && o->restart)
        printf("%s has no checkpoint yet (the run stopped before its first one): starting it "
               "again from step 0 with its config.txt\n",
               o->out_dir);
    if (root) {
        if (make_dirs(o->out_dir, err, sizeof err) != 0) moe_input_error("--out: %s", err);
        run_write_config(o->out_dir, c);
    }
    if (root)
        run_write_provenance(o->out_dir, c, &train, &val, threads, start_step,
                             o->resume ? NULL : o->init, d);

    const int keep = o->resume ? start_step : -1;
    FILE *ftrain = run_csv(d, o->out_dir, "train.csv",
                           "step,loss,aux_loss,z_loss,lr,grad_norm,tok_per_s,val_loss", keep);
    char header[8192];
    int hl = snprintf(header, sizeof header, "step,layer,maxvio,cv,entropy,drop_frac");
    for (int e = 0; e < c->num_experts && hl < (int)sizeof header - 16; e++)
        hl += snprintf(header + hl, sizeof header - (size_t)hl, ",load_%d", e);
    for (int e = 0; e < c->num_experts && hl < (int)sizeof header - 16; e++)
        hl += snprintf(header + hl, sizeof header - (size_t)hl, ",bias_%d", e);
    hl += snprintf(header + hl, sizeof header - (size_t)hl, ",top1_score");
    for (int e = 0; e < c->num_experts && hl < (int)sizeof header - 16; e++)
        hl += snprintf(header + hl, sizeof header - (size_t)hl, ",drop_%d", e);
    snprintf(header + hl, sizeof header - (size_t)hl, ",pad_frac,expert_sim");
    FILE *frouter = run_csv(d, o->out_dir, "router.csv", header, keep);
    FILE *fdomains =
        run_csv(d, o->out_dir, "domains.csv", "step,layer,domain,expert,fraction", keep);
    hl = snprintf(header, sizeof header, "step,layer,maxvio,cv");
    for (int e = 0; e < c->num_experts && hl < (int)sizeof header - 16; e++)
        hl += snprintf(header + hl, sizeof header - (size_t)hl, ",load_%d", e);
    snprintf(header + hl, sizeof header - (size_t)hl, ",drop_frac");
    FILE *fvalrouter = run_csv(d, o->out_dir, "val_router.csv", header, keep);
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
    RouterAccum ra = {.n_moe = m.n_moe, .E = E};
    ra.load = (double *)calloc_check((size_t)m.n_moe * E + 1, sizeof(double));
    ra.entropy = (double *)calloc_check((size_t)m.n_moe + 1, sizeof(double));
    ra.top1 = (double *)calloc_check((size_t)m.n_moe + 1, sizeof(double));
    ra.drop = (double *)calloc_check((size_t)m.n_moe + 1, sizeof(double));
    ra.pad = (double *)calloc_check((size_t)m.n_moe + 1, sizeof(double));
    ra.edrop = (double *)calloc_check((size_t)m.n_moe * E + 1, sizeof(double));
    ra.count = (double *)calloc_check((size_t)m.n_moe * E + 1, sizeof(double));
    ra.tmp = floats_alloc((size_t)E);
    DomainCounts dc = {.n_moe = m.n_moe, .n_domains = (int)val.n_domains, .E = E};
    dc.counts = (double *)calloc_check((size_t)m.n_moe * val.n_domains * E + 1, sizeof(double));
    dc.drops = (double *)calloc_check((size_t)m.n_moe * 2 + 1, sizeof(double));

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
    model_zero_grad(&m);
    for (int step = start_step; step < last; step++) {
        const double t0 = now_seconds();
        const DistStats step_start = d ? d->stats : (DistStats){0};
        for (int l = 0; l < c->n_layer; l++)
            if (m.blocks[l].moe && m.blocks[l].moe->ep) ep_stats_reset(m.blocks[l].moe->ep);
        /* the gradients are zero here: model_zero_grad before the first step, and after each
         * step model_adamw_step has cleared them in the pass that read them */
        raccum_reset(&ra);
        double loss = 0.0, aux = 0.0, z = 0.0;
        for (int micro = 0; micro < c->accum; micro++) {
            loader_next(&loader, inputs, targets, domains);
            model_forward(&m, inputs + mine, targets + mine, B, T);
            /* the step's last backward starts the gradients' sums block by block */
            m.sync_in_backward = m.dist && c->overlap && micro == c->accum - 1;
            /* each process's mean over its share, 1 / world of the batch's mean */
            model_backward(&m, 1.0f / (float)(c->accum * world));
            loss += m.loss;
            aux += m.aux_loss;
            z += m.z_loss;
            raccum_add(&ra, &m);
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
            raccum_share(&ra, d);
        }
        model_sync_grads(&m); /* across processes (or through NCCL alone); else nothing */
        if (!isfinite(loss))
            moe_fatal("the loss became %f at step %d; lower train.lr or raise train.warmup "
                      "(the last checkpoint in %s is intact)",
                      loss, step + 1, o->out_dir);
        const float norm = model_grad_norm(&m);
        const float scale = (c->clip > 0.0f && norm > c->clip) ? c->clip / norm : 1.0f;
        const float lr = lr_schedule(c, step);
        model_adamw_step(&m, lr, scale);
        model_update_router_bias(&m, ra.count); /* aux-free balancing; else nothing */
        const int s = m.step;
        /* the whole batch's tokens (every process's share): the run's speed */
        const double tok_s = (double)c->accum * c->batch * T / (now_seconds() - t0);

        /* the step's traffic, before an evaluation adds its own */
        if (d) write_dist(fdist, &m, d, &step_start, s);
        float val_loss = NAN;
        if (c->eval_every > 0 && (s % c->eval_every == 0 || s == c->steps)) {
            memset(dc.counts, 0, (size_t)m.n_moe * val.n_domains * E * sizeof(double));
            memset(dc.drops, 0, (size_t)m.n_moe * 2 * sizeof(double));
            val_loss = evaluate(&m, &val, c->eval_batches, &dc);
            write_domains(fdomains, &dc, &m, &val, s);
            fflush(fdomains);
            write_val_router(fvalrouter, &dc, &m, ra.tmp, s);
            fflush(fvalrouter);
            last_val = val_loss;
        }
        fprintf(ftrain, "%d,%.6f,%.6f,%.6f,%.6g,%.6f,%.1f,", s, loss, aux, z, lr, norm, tok_s);
        if (!isnan(val_loss)) fprintf(ftrain, "%.6f", val_loss);
        fputc('\n', ftrain);
        raccum_write(&ra, &m, frouter, s);
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

        if ((c->ckpt_every > 0 && s % c->ckpt_every == 0) || s == last) {
            fflush(ftrain);
            fflush(frouter);
            if (fdist) fflush(fdist);
            if (freplay) fflush(freplay);
            if (checkpoint_save(&m, &loader.rng, ckpt_path, err, sizeof err) != 0)
                moe_fatal("saving the checkpoint failed: %s", err);
        }
    }
    fclose(ftrain);
    fclose(frouter);
    fclose(fdomains);
    fclose(fvalrouter);
    if (fdist) fclose(fdist);
    if (freplay) fclose(freplay);
    if (m.route_tape) {
        if (o->replay_routing)
            printf("routing replayed from %s: this run's own top-k differed in %lld of %lld "
                   "choices (%.4f %%); replay.csv has them by step\n",
                   o->replay_routing, tape.flips, tape.choices,
                   tape.choices ? 100.0 * (double)tape.flips / (double)tape.choices : 0.0);
        else
            printf("routing recorded in %s: %lld MoE block calls\n", o->record_routing, tape.calls);
        route_tape_close(&tape);
        m.route_tape = NULL;
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
    }

    free(inputs);
    free(targets);
    free(domains);
    free(ra.load);
    free(ra.entropy);
    free(ra.top1);
    free(ra.drop);
    free(ra.pad);
    free(ra.edrop);
    free(ra.count);
    free(dc.drops);
    free(ra.tmp);
    free(dc.counts);
    model_free(&m);
    shard_free(&train);
    shard_free(&val);
    return 0;
}
