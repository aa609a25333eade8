/* train_log.c: see train_log.h. */
#include "train/train_log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/inspect.h"
#include "model/pipe.h"
#include "model/route_face.h"

void router_accum_init(RouterAccum *r, int n_moe, int E, int groups) {
    memset(r, 0, sizeof *r);
    r->n_moe = n_moe, r->E = E, r->groups = groups > 0 ? groups : 1;
    const size_t nb = (size_t)n_moe + 1, ne = (size_t)n_moe * E + 1;
    r->load = (double *)calloc_check(ne, sizeof(double));
    r->count = (double *)calloc_check(ne, sizeof(double));
    r->edrop = (double *)calloc_check(ne, sizeof(double));
    r->entropy = (double *)calloc_check(nb, sizeof(double));
    r->top1 = (double *)calloc_check(nb, sizeof(double));
    r->drop = (double *)calloc_check(nb, sizeof(double));
    r->pad = (double *)calloc_check(nb, sizeof(double));
    r->max_logit = (double *)calloc_check(nb, sizeof(double));
    r->lse = (double *)calloc_check(nb, sizeof(double));
    r->tmp = floats_alloc((size_t)E);
}

void router_accum_free(RouterAccum *r) {
    free(r->load), free(r->count), free(r->edrop), free(r->entropy), free(r->top1);
    free(r->drop), free(r->pad), free(r->max_logit), free(r->lse), free(r->tmp);
    memset(r, 0, sizeof *r);
}

void router_csv_header(char *header, size_t size, int E) {
    int hl = snprintf(header, size, "step,layer,maxvio,cv,entropy,drop_frac");
    for (int e = 0; e < E && hl < (int)size - 16; e++)
        hl += snprintf(header + hl, size - (size_t)hl, ",load_%d", e);
    for (int e = 0; e < E && hl < (int)size - 16; e++)
        hl += snprintf(header + hl, size - (size_t)hl, ",bias_%d", e);
    hl += snprintf(header + hl, size - (size_t)hl, ",top1_score");
    for (int e = 0; e < E && hl < (int)size - 16; e++)
        hl += snprintf(header + hl, size - (size_t)hl, ",drop_%d", e);
    snprintf(header + hl, size - (size_t)hl,
             ",pad_frac,expert_sim,max_logit,lse_mean,maxvio_group");
}

/* MaxVio over G groups of E / G consecutive experts: each group's load the sum of its experts' */
static float group_maxvio(const float *load, int E, int G) {
    if (G <= 1 || E % G) return 0.0f;
    float gload[4096], maxvio, cv;
    const int per = E / G;
    for (int g = 0; g < G; g++) {
        gload[g] = 0.0f;
        for (int e = g * per; e < (g + 1) * per; e++) gload[g] += load[e];
    }
    model_load_balance(&maxvio, &cv, gload, G);
    return maxvio;
}

/* ---- train.csv --------------------------------------------------------------------------------
 */

void train_csv_row(FILE *f, int step, double loss, double aux, double z, float lr, float norm,
                   double tok_s, float val_loss, int loss_spike, int grad_spike, const double *mtp,
                   int n_mtp, int skipped) {
    fprintf(f, "%d,%.6f,%.6f,%.6f,%.6g,%.6f,", step, loss, aux, z, lr, norm);
    if (!isnan(tok_s)) fprintf(f, "%.1f", tok_s);
    fputc(',', f);
    if (!isnan(val_loss)) fprintf(f, "%.6f", val_loss);
    fprintf(f, ",%d,%d", loss_spike, grad_spike);
    for (int k = 0; k < n_mtp; k++) fprintf(f, ",%.6f", mtp[k]);
    if (skipped >= 0) fprintf(f, ",%d", skipped);
    fputc('\n', f);
}

/* ---- router.csv: the router statistics of one optimizer step ------------------------------ */

void router_accum_reset(RouterAccum *r) {
    memset(r->load, 0, (size_t)r->n_moe * r->E * sizeof(double));
    memset(r->count, 0, (size_t)r->n_moe * r->E * sizeof(double));
    memset(r->entropy, 0, (size_t)r->n_moe * sizeof(double));
    memset(r->top1, 0, (size_t)r->n_moe * sizeof(double));
    memset(r->drop, 0, (size_t)r->n_moe * sizeof(double));
    memset(r->pad, 0, (size_t)r->n_moe * sizeof(double));
    memset(r->edrop, 0, (size_t)r->n_moe * r->E * sizeof(double));
    memset(r->max_logit, 0, (size_t)r->n_moe * sizeof(double));
    memset(r->lse, 0, (size_t)r->n_moe * sizeof(double));
    r->micro = 0;
}

void router_accum_add(RouterAccum *r, const Model *m) {
    for (int l = 0, b = 0; l < m->cfg.n_layer; l++) {
        if (!model_is_moe(m, l)) continue;
        const RouteStatsView s = model_route_stats(m, l), *rs = &s;
        const int ec = rs->expert_choice;
        r->drop[b] += rs->drop;
        if (!ec) r->pad[b] += rs->pad;
        for (int e = 0; e < r->E; e++) {
            r->count[b * r->E + e] += rs->routed[e];
            if (!ec && rs->routed[e] > 0)
                r->edrop[b * r->E + e] += (double)rs->dropped[e] / rs->routed[e];
            r->load[b * r->E + e] += rs->load[e];
        }
        r->entropy[b] += rs->entropy;
        r->top1[b] += rs->top1;
        r->max_logit[b] += rs->max_logit;
        r->lse[b] += rs->lse_mean;
        b++;
    }
    r->micro++;
}

/* Across processes: every statistic of the step becomes the mean over the processes (their
 * batches are equal shares, so a mean of fractions is the fraction of the whole batch); under a
 * pipeline over the processes of the block's stage, the other stages adding 0. */
void router_accum_share(RouterAccum *r, Dist *d) {
    if (!d) return;
    const size_t nb = (size_t)r->n_moe, ne = nb * r->E;
    double *arrays[8] = {r->load, r->entropy, r->top1,      r->drop,
                         r->pad,  r->edrop,   r->max_logit, r->lse};
    const size_t lens[8] = {ne, nb, nb, nb, nb, ne, nb, nb};
    const int replicas = dist_group_size(d, DIST_STAGE);
    for (int i = 0; i < 8; i++) {
        dist_allreduce_sum_d(d, DIST_WORLD, arrays[i], lens[i]);
        for (size_t j = 0; j < lens[i]; j++) arrays[i][j] /= replicas;
    }
    dist_allreduce_sum_d(d, DIST_WORLD, r->count, ne); /* counts add up: the whole batch's */
}

/* One router.csv row per MoE block; the bias columns hold the aux-free bias after this
 * step's update (0 unless moe.balance=aux_free); drop_e and pad_frac are the micro-batch
 * means of each expert's dropped fraction and of the padding rows' share of the computed
 * rows (both 0 for expert choice, whose experts take exactly cap tokens each); expert_sim is
 * the mean cosine similarity of the block's experts after the step (how far upcycled copies
 * have moved apart). */
void router_accum_write(const RouterAccum *r, const Model *m, FILE *f, int step) {
    /* with expert parallelism (or dist.zero=3, which holds shards between steps, or a
     * pipeline, each stage its blocks') no process holds all the experts: expert_sim is nan */
    const size_t nb = (size_t)m->n_moe, E = (size_t)r->E;
    const int ep = m->dist && (m->dist->ep > 1 || m->cfg.zero >= 3 || m->dist->pp > 1);
    double *sims = model_router_record(m);
    const float *biases = (const float *)(sims + nb);
    for (int l = 0, b = 0; l < m->cfg.n_layer; l++) {
        if (!model_is_moe(m, l)) continue;
        for (int e = 0; e < r->E; e++) r->tmp[e] = (float)(r->load[b * r->E + e] / r->micro);
        float maxvio, cv;
        model_load_balance(&maxvio, &cv, r->tmp, r->E);
        fprintf(f, "%d,%d,%.6f,%.6f,%.6f,%.6f", step, l, maxvio, cv, r->entropy[b] / r->micro,
                r->drop[b] / r->micro);
        for (int e = 0; e < r->E; e++) fprintf(f, ",%.6f", r->tmp[e]);
        for (int e = 0; e < r->E; e++) fprintf(f, ",%.6g", biases[(size_t)b * E + e]);
        fprintf(f, ",%.6f", r->top1[b] / r->micro);
        for (int e = 0; e < r->E; e++) fprintf(f, ",%.6f", r->edrop[b * r->E + e] / r->micro);
        fprintf(f, ",%.6f,%.6f", r->pad[b] / r->micro, ep ? NAN : sims[b]);
        fprintf(f, ",%.6f,%.6f,%.6f\n", r->max_logit[b] / r->micro, r->lse[b] / r->micro,
                group_maxvio(r->tmp, r->E, r->groups));
        b++;
    }
    free(sims);
}

void domains_csv_write(FILE *f, const DomainCounts *dc, const Model *m, const Shard *val,
                       int step) {
    for (int l = 0, b = 0; l < m->cfg.n_layer; l++) {
        if (!model_is_moe(m, l)) continue;
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
void val_router_csv_write(FILE *f, const DomainCounts *dc, const Model *m, float *load, int step) {
    for (int l = 0, b = 0; l < m->cfg.n_layer; l++) {
        if (!model_is_moe(m, l)) continue;
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
        model_load_balance(&maxvio, &cv, load, dc->E);
        fprintf(f, "%d,%d,%.6f,%.6f", step, l, maxvio, cv);
        for (int e = 0; e < dc->E; e++) fprintf(f, ",%.6f", load[e]);
        const double *dr = dc->drops + 2 * b;
        fprintf(f, ",%.6f\n", dr[1] > 0.0 ? dr[0] / dr[1] : 0.0);
        b++;
    }
}

/* ---- dist.csv -------------------------------------------------------------------------------- */

/* dist.csv: this step's traffic and time of every process, one row per process and MoE block,
 * the multi-token prediction modules' (layers n_layer .. n_layer + mtp_depth - 1) after the
 * trunk's (layer -1: the step's other collectives: gradient sums, statistics; and sync_wait_s,
 * the seconds after the backward spent waiting for the gradients' sums). Gathered by a sum over
 * the world of arrays where each process fills only its own rows. */
enum {
    DIST_COLS = 12
}; /* bytes_sent, bytes_recv, comm_s, expert_s, rows_in, rows_out, rows_rin,
     sync_wait_s, grad_sent, weight_sent, tp_sent, pp_sent */
void dist_csv_write(FILE *f, const Model *m, Dist *d, const DistTally *step_start, int step) {
    const Config *c = &m->cfg;
    const int W = d->world, L = c->n_layer + c->mtp_depth;
    int nb = 1;
    for (int l = 0; l < L; l++) nb += config_is_moe_layer(c, l);
    double *all = (double *)calloc_check((size_t)W * nb * DIST_COLS, sizeof(double));
    double *mine = all + (size_t)d->rank * nb * DIST_COLS;
    double ep_sent = 0.0, ep_recv = 0.0, ep_comm = 0.0;
    for (int l = 0, b = 0; l < L; l++) {
        if (!config_is_moe_layer(c, l)) continue;
        double *row = mine + (size_t)(b + 1) * DIST_COLS;
        if (model_comm_stats(m, l, row)) {
            ep_sent += row[0];
            ep_recv += row[1];
            ep_comm += row[2];
        }
        b++;
    }
    /* everything else this process exchanged during the step */
    mine[0] = (double)(d->stats.bytes_sent - step_start->total.bytes_sent) - ep_sent;
    mine[1] = (double)(d->stats.bytes_recv - step_start->total.bytes_recv) - ep_recv;
    mine[2] = (d->stats.seconds - step_start->total.seconds) - ep_comm;
    mine[7] = model_sync_wait_s(m); /* what of the gradients' sums the backward did not hide */
    /* the bytes sent for each purpose the planner predicts (moe plan --config) */
    const int purposes[4] = {DIST_FOR_GRADS, DIST_FOR_WEIGHTS, DIST_FOR_TP, DIST_FOR_PIPE};
    for (int i = 0; i < 4; i++)
        mine[8 + i] =
            (double)(d->by[purposes[i]].bytes_sent - step_start->by[purposes[i]].bytes_sent);
    dist_allreduce_sum_d(d, DIST_WORLD, all, (size_t)W * nb * DIST_COLS);
    for (int r = 0; r < W; r++)
        for (int l = -1, b = 0; l < L; l++) {
            if (l >= 0 && !config_is_moe_layer(c, l)) continue;
            const double *row = all + ((size_t)r * nb + b) * DIST_COLS;
            fprintf(f, "%d,%d,%d,%.0f,%.0f,%.6f,%.6f,%.0f,%.0f,%.0f,%.6f,%.0f,%.0f,%.0f,%.0f\n",
                    step, l, r, row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7],
                    row[8], row[9], row[10], row[11]);
            b++;
        }
    free(all);
}

/* pipe.csv: each stage's actions (its first process's), gathered by a sum over the world of
 * arrays where each of those fills its own rows, as dist.csv's; and each stage's span. */
void pipe_csv_write(FILE *f, const Model *m, Dist *d, int step) {
    const Pipe *p = m->pipe;
    const int P = p->P, n = p->n_act;
    double *all = (double *)calloc_check((size_t)P * (2 * n + 1), sizeof(double));
    double *mine = all + (size_t)p->s * (2 * n + 1);
    if (dist_group_rank(d, DIST_STAGE) == 0) {
        for (int i = 0; i < n; i++) mine[2 * i] = p->t_start[i], mine[2 * i + 1] = p->t_end[i];
        mine[2 * n] = p->span;
    }
    dist_allreduce_sum_d(d, DIST_WORLD, all, (size_t)P * (2 * n + 1));
    for (int s = 0; s < P; s++) {
        PipeAction *a = (PipeAction *)malloc_check((size_t)n * sizeof *a);
        pipe_schedule(m->cfg.pp_schedule, P, p->M, s, a);
        const double *row = all + (size_t)s * (2 * n + 1);
        for (int i = 0; i < n; i++)
            fprintf(f, "%d,%d,%d,%c,%d,%.6f,%.6f,%.6f\n", step, s, i, a[i].op == PIPE_F ? 'F' : 'B',
                    a[i].micro, row[2 * i], row[2 * i + 1], row[2 * n]);
        free(a);
    }
    free(all);
}

/* ---- spikes -----------------------------------------------------------------------------------
 */

void spike_watch_init(SpikeWatch *s, int window, float k) {
    memset(s, 0, sizeof *s);
    s->window = window, s->k = k;
    s->v = (double *)calloc_check((size_t)window, sizeof(double));
}

void spike_watch_free(SpikeWatch *s) {
    free(s->v);
    memset(s, 0, sizeof *s);
}

int spike_watch_push(SpikeWatch *s, double x) {
    if (!isfinite(x)) return 0;
    int spike = 0;
    if (s->n >= s->window) {
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < s->window; i++) mean += s->v[i];
        mean /= s->window;
        for (int i = 0; i < s->window; i++) var += (s->v[i] - mean) * (s->v[i] - mean);
        spike = x > mean + s->k * sqrt(var / s->window);
    }
    s->v[s->head] = x;
    s->head = (s->head + 1) % s->window;
    s->n++;
    return spike;
}

void spike_watch_refill(SpikeWatch *loss, SpikeWatch *grad, const char *train_csv, int upto) {
    FILE *f = fopen(train_csv, "r");
    if (!f) return;
    char line[1024];
    int c_loss = -1, c_grad = -1;
    if (fgets(line, sizeof line, f)) { /* the header names the columns */
        int col = 0;
        for (char *tok = strtok(line, ",\n"); tok; tok = strtok(NULL, ",\n"), col++) {
            if (strcmp(tok, "loss") == 0) c_loss = col;
            if (strcmp(tok, "grad_norm") == 0) c_grad = col;
        }
    }
    while (c_loss >= 0 && c_grad >= 0 && fgets(line, sizeof line, f)) {
        double v[16] = {0};
        int col = 0, step = atoi(line);
        if (step > upto) break;
        for (char *p = line; col < 16; col++) {
            v[col] = strtod(p, NULL);
            if (!(p = strchr(p, ','))) break;
            p++;
        }
        if (c_loss < 16) spike_watch_push(loss, v[c_loss]);
        if (c_grad < 16) spike_watch_push(grad, v[c_grad]);
    }
    fclose(f);
}
