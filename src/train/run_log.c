/* run_log.c: a training run's records and watches (see run_log.h). */
#include "train/run_log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "train/run.h"

/* The run directory's CSV files are written by the first process only; the others write to
 * /dev/null, so the code that fills them is the same everywhere. */
static FILE *run_csv(const Dist *d, const char *dir, const char *file, const char *header,
                     int keep) {
    if (d && d->rank != 0) return fopen_check("/dev/null", "w");
    return csv_open(dir, file, header, keep);
}

void run_log_open(RunLog *g, const RunLogSpec *s, const Config *c, const Model *m) {
    memset(g, 0, sizeof *g);
    g->s = *s;
    const char *dir = s->out_dir;
    Dist *d = s->d;
    const int keep = s->keep;
    char header[8192];
    /* multi-token prediction's modules' losses last, only with modules: other runs' train.csv
     * keeps its columns */
    int hl = snprintf(header, sizeof header,
                      "step,loss,aux_loss,z_loss,lr,grad_norm,tok_per_s,val_loss,loss_spike,"
                      "grad_spike");
    for (int k = 1; k <= c->mtp_depth; k++)
        hl += snprintf(header + hl, sizeof header - (size_t)hl, ",mtp%d_loss", k);
    g->with_skipped = c->spike_action != MOE_SPIKE_NONE; /* only then: other runs keep theirs */
    if (g->with_skipped) snprintf(header + hl, sizeof header - (size_t)hl, ",skipped");
    g->train = run_csv(d, dir, "train.csv", header, keep);
    router_csv_header(header, sizeof header, c->num_experts);
    g->router = run_csv(d, dir, "router.csv", header, keep);
    g->domains = run_csv(d, dir, "domains.csv", "step,layer,domain,expert,fraction", keep);
    hl = snprintf(header, sizeof header, "step,layer,maxvio,cv");
    for (int e = 0; e < c->num_experts && hl < (int)sizeof header - 16; e++)
        hl += snprintf(header + hl, sizeof header - (size_t)hl, ",load_%d", e);
    snprintf(header + hl, sizeof header - (size_t)hl, ",drop_frac");
    g->val_router = run_csv(d, dir, "val_router.csv", header, keep);
    g->mix = run_csv(d, dir, "mix.csv", "step,from_step,domain,windows,share,target", keep);
    g->val_domains = run_csv(d, dir, "val_domains.csv", "step,domain,val_loss,tokens", keep);
    g->mix_from = s->start;
    g->dist =
        d ? run_csv(d, dir, "dist.csv",
                    "step,layer,rank,bytes_sent,bytes_recv,comm_s,expert_s,rows_in,"
                    "rows_out_remote,rows_in_remote,sync_wait_s,grad_sent,weight_sent,tp_sent,"
                    "pp_sent",
                    keep)
          : NULL;
    g->pipe = d && d->pp > 1 ? run_csv(d, dir, "pipe.csv",
                                       "step,stage,action,op,micro,start_s,end_s,span_s", keep)
                             : NULL;
    /* a replay's flips per step: the choices this run's own top-k would have made otherwise */
    g->replay = s->replay ? run_csv(d, dir, "replay.csv", "step,choices,flipped", keep) : NULL;

    const int E = c->num_experts > 0 ? c->num_experts : 1;
    router_accum_init(&g->ra, m->n_moe, E, c->balance_groups > 0 ? c->balance_groups : c->ep);
    const size_t nd = s->val->n_domains;
    g->dc = (DomainCounts){.n_moe = m->n_moe, .n_domains = (int)nd, .E = E};
    g->dc.counts = (double *)calloc_check((size_t)m->n_moe * nd * E + 1, sizeof(double));
    g->dc.drops = (double *)calloc_check((size_t)m->n_moe * 2 + 1, sizeof(double));
    g->dc.loss_sum = (double *)calloc_check(nd, sizeof(double));
    g->dc.tokens = (double *)calloc_check(nd, sizeof(double));
}

DomainCounts *run_log_domains(RunLog *g) {
    DomainCounts *dc = &g->dc;
    memset(dc->counts, 0, (size_t)dc->n_moe * dc->n_domains * dc->E * sizeof(double));
    memset(dc->drops, 0, (size_t)dc->n_moe * 2 * sizeof(double));
    memset(dc->loss_sum, 0, (size_t)dc->n_domains * sizeof(double));
    memset(dc->tokens, 0, (size_t)dc->n_domains * sizeof(double));
    return dc;
}

void run_log_eval(RunLog *g, const Model *m, int step) {
    const DomainCounts *dc = &g->dc;
    const Shard *val = g->s.val;
    for (uint32_t v = 0; v < val->n_domains; v++)
        if (dc->tokens[v] > 0)
            fprintf(g->val_domains, "%d,%s,%.6f,%.0f\n", step, val->domain[v],
                    dc->loss_sum[v] / dc->tokens[v], dc->tokens[v]);
    fflush(g->val_domains);
    domains_csv_write(g->domains, dc, m, val, step);
    fflush(g->domains);
    val_router_csv_write(g->val_router, dc, m, g->ra.tmp, step);
    fflush(g->val_router);
}

void run_log_traffic(RunLog *g, const Model *m, const DistTally *step_start, int step) {
    if (g->s.d) dist_csv_write(g->dist, m, g->s.d, step_start, step);
    if (g->pipe) pipe_csv_write(g->pipe, m, g->s.d, step);
}

/* mix.csv: the windows drawn of each domain since the last row, against the mix's share. */
static void mix_csv_write(RunLog *g, int step) {
    const Shard *train = g->s.train;
    const double *target = g->s.mix_target[g->mix_from >= g->s.mix_end_step];
    uint64_t drawn[SHARD_MAX_DOMAINS], total = 0;
    loader_take_drawn(g->s.loader, drawn);
    for (uint32_t d = 0; d < train->n_domains; d++) total += drawn[d];
    for (uint32_t d = 0; d < train->n_domains && total; d++)
        fprintf(g->mix, "%d,%d,%s,%llu,%.6f,%.6f\n", step, g->mix_from, train->domain[d],
                (unsigned long long)drawn[d], (double)drawn[d] / (double)total, target[d]);
    fflush(g->mix);
    g->mix_from = step;
}

void run_log_step(RunLog *g, const Model *m, const StepValues *v) {
    const int s = v->step;
    if (!isnan(v->val_loss) || s == g->s.mix_end_step || s == g->s.last) mix_csv_write(g, s);
    train_csv_row(g->train, s, v->loss, v->aux, v->z, v->lr, v->norm, v->tok_s, v->val_loss,
                  v->loss_spike, v->grad_spike, v->mtp, v->n_mtp,
                  g->with_skipped ? v->skipped : -1);
    router_accum_write(&g->ra, m, g->router, s);
    if (g->replay) {
        const RouteTape *t = g->s.replay;
        fprintf(g->replay, "%d,%lld,%lld\n", s, t->choices - g->replay_choices,
                t->flips - g->replay_flips);
        g->replay_choices = t->choices, g->replay_flips = t->flips;
    }
}

void run_log_diverged(RunLog *g, const StepValues *v, int root) {
    /* the step is recorded, not taken: the run ends as diverged (exit status 3) */
    train_csv_row(g->train, v->step, v->loss, v->aux, v->z, v->lr, v->norm, NAN, NAN, 0, 0, v->mtp,
                  v->n_mtp, g->with_skipped ? 0 : -1);
    fclose(g->train);
    fclose(g->router);
    if (root)
        fprintf(stderr,
                "diverged: the training loss is %g at step %d (%s); train.csv records "
                "it, the checkpoint in %s holds the last step saved. Lower train.lr, "
                "raise train.warmup or try the methods of chapter 5\n",
                v->loss, v->step,
                isfinite(v->loss) ? "above train.diverge_loss" : "not a finite number",
                g->s.out_dir);
    exit(MOE_EXIT_DIVERGED);
}

void run_log_flush(RunLog *g) {
    fflush(g->train);
    fflush(g->router);
    if (g->dist) fflush(g->dist);
    if (g->pipe) fflush(g->pipe);
    if (g->replay) fflush(g->replay);
}

void run_log_close(RunLog *g) {
    FILE *files[] = {g->train,      g->router, g->domains, g->mix,   g->val_domains,
                     g->val_router, g->dist,   g->pipe,    g->replay};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (files[i]) fclose(files[i]);
    free(g->dc.loss_sum);
    free(g->dc.tokens);
    free(g->dc.drops);
    free(g->dc.counts);
    router_accum_free(&g->ra);
    memset(g, 0, sizeof *g);
}

/* ---- the watches ------------------------------------------------------------------------- */

void run_watch_init(RunWatch *w, const Config *c, int n_moe, const char *train_csv, int keep,
                    int root, int live) {
    memset(w, 0, sizeof *w);
    /* the spikes of train.csv; a resumed run judges its first steps against the rows it keeps */
    spike_watch_init(&w->loss_spikes, c->spike_window, c->spike_k);
    spike_watch_init(&w->grad_spikes, c->spike_window, c->spike_k);
    if (keep > 0) spike_watch_refill(&w->loss_spikes, &w->grad_spikes, train_csv, keep);
    /* the live warnings: starving experts, drop storms, a gradient that is not finite */
    w->moe_layer = (int *)calloc_check((size_t)n_moe + 1, sizeof(int));
    for (int l = 0, b = 0; l < c->n_layer; l++)
        if (config_is_moe_layer(c, l)) w->moe_layer[b++] = l;
    const int E = c->num_experts > 0 ? c->num_experts : 1;
    health_watch_init(&w->health, n_moe, E, w->moe_layer, c->steps);
    w->root = root;
    w->lead = live ? "\r\033[K" : "";
}

/* x as train.csv's six decimals read back */
static double as_recorded(double x) {
    char text[400]; /* room for every finite double */
    snprintf(text, sizeof text, "%.6f", x);
    return strtod(text, NULL);
}

void run_watch_spikes(RunWatch *w, StepValues *v) {
    v->loss_spike = spike_watch_push(&w->loss_spikes, as_recorded(v->loss));
    v->grad_spike = spike_watch_push(&w->grad_spikes, as_recorded(v->norm));
    w->n_loss_spikes += v->loss_spike, w->n_grad_spikes += v->grad_spike;
}

void run_watch_health(RunWatch *w, const RouterAccum *ra, float norm, int step) {
    if (w->root) health_watch_step(&w->health, ra, norm, step, stderr, w->lead);
}

void run_watch_report(const RunWatch *w, const Config *c) {
    printf("spikes in the steps this command trained (a value above the mean of the %d "
           "steps before it plus %g std): %d of the loss, %d of the gradient norm; train.csv "
           "marks them\n",
           c->spike_window, (double)c->spike_k, w->n_loss_spikes, w->n_grad_spikes);
}

void run_watch_free(RunWatch *w) {
    spike_watch_free(&w->loss_spikes);
    spike_watch_free(&w->grad_spikes);
    health_watch_free(&w->health);
    free(w->moe_layer);
    memset(w, 0, sizeof *w);
}
