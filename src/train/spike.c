/* spike.c: see spike.h. */
#include "train/spike.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "io/files.h"
#include "train/checkpoint.h"
#include "train/run.h"

#define ROLLBACKS_HEADER "rollback,spike_step,to_step,skip_at,skip_batches"

/* v (n) as the first process has them, on every process */
static void share_ints(Dist *d, int root, int *v, int n) {
    if (!d) return;
    double buf[8];
    for (int i = 0; i < n; i++) buf[i] = root ? v[i] : 0.0;
    dist_allreduce_sum_d(d, DIST_WORLD, buf, (size_t)n);
    for (int i = 0; i < n; i++) v[i] = (int)buf[i];
}

static void add_skip(SpikeGuard *g, SpikeSkip s) {
    g->skip = (SpikeSkip *)realloc_check(g->skip, (size_t)(g->n_skip + 1) * sizeof *g->skip);
    g->skip[g->n_skip++] = s;
}

/* rollbacks.csv's complete rows into g->skip (a torn last row has no newline: left out) */
static void read_rollbacks(SpikeGuard *g, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[256];
    int first = 1;
    while (fgets(line, sizeof line, f)) {
        const size_t n = strlen(line);
        if (first || n == 0 || line[n - 1] != '\n') {
            first = 0;
            continue;
        }
        int k, spike, to, at, batches;
        if (sscanf(line, "%d,%d,%d,%d,%d", &k, &spike, &to, &at, &batches) != 5 ||
            k != g->n_skip + 1 || at != to || at >= spike || batches < spike - at)
            moe_input_error("%s: the row '%.*s' is not a rollback's (%s); restore the file "
                            "from a copy (nothing was changed)",
                            path, (int)n - 1, line, ROLLBACKS_HEADER);
        add_skip(g, (SpikeSkip){at, batches});
    }
    fclose(f);
}

/* The last step up to `upto` that train.csv marks as a spike of the kind train.spike_on
 * names (on: MOE_SPIKE_ON_*), or 0. */
static int last_spike_of(const char *train_csv, int upto, int on) {
    FILE *f = fopen(train_csv, "r");
    if (!f) return 0;
    char line[4096];
    int c_loss = -1, c_grad = -1, last = 0;
    if (fgets(line, sizeof line, f)) {
        int col = 0;
        for (char *tok = strtok(line, ",\n"); tok; tok = strtok(NULL, ",\n"), col++) {
            if (strcmp(tok, "loss_spike") == 0) c_loss = col;
            if (strcmp(tok, "grad_spike") == 0) c_grad = col;
        }
    }
    if (on == MOE_SPIKE_ON_LOSS) c_grad = c_loss; /* the one column judged, twice */
    if (on == MOE_SPIKE_ON_GRAD) c_loss = c_grad;
    while (c_loss >= 0 && c_grad >= 0 && fgets(line, sizeof line, f)) {
        const int step = atoi(line);
        if (step > upto || line[strlen(line) - 1] != '\n') break;
        int col = 0, spike = 0;
        for (char *p = line; p; p = strchr(p, ','), col++) {
            if (*p == ',') p++;
            if ((col == c_loss || col == c_grad) && atoi(p) == 1) spike = 1;
        }
        if (spike) last = step;
    }
    fclose(f);
    return last;
}

void spike_guard_open(SpikeGuard *g, const Config *c, Dist *d, const char *dir, int step,
                      int fresh) {
    memset(g, 0, sizeof *g);
    g->c = c, g->d = d;
    g->root = !d || d->rank == 0;
    snprintf(g->dir, sizeof g->dir, "%s", dir);
    run_path(g->rollback_path, sizeof g->rollback_path, dir, "rollback.bin");
    char path[MOE_PATH_MAX + 32];
    int n[3] = {0, 0, 0}; /* the rollbacks, the last spike, rollback.bin kept */
    if (g->root) {
        run_path(path, sizeof path, dir, "rollbacks.csv");
        if (!fresh) read_rollbacks(g, path);
        /* the rows read, a torn one cut; only a run that rolls back keeps the file */
        if (c->spike_action == MOE_SPIKE_ROLLBACK || g->n_skip > 0)
            g->rollbacks = csv_open(dir, "rollbacks.csv", ROLLBACKS_HEADER, fresh ? -1 : INT_MAX);
        run_path(path, sizeof path, dir, "rolled_back.csv");
        if (!fresh && file_exists(path)) /* the rows of the rollbacks recorded */
            fclose(csv_open(dir, "rolled_back.csv", "rollback", g->n_skip));
        run_path(path, sizeof path, dir, "train.csv");
        n[0] = g->n_skip, n[1] = fresh ? 0 : last_spike_of(path, step, c->spike_on);
        /* not one of a later step: a run resumed from before it reaches the same state again */
        const long long kept = checkpoint_step(g->rollback_path);
        n[2] = !fresh && c->spike_action == MOE_SPIKE_ROLLBACK && kept >= 0 && kept <= step;
    }
    share_ints(d, g->root, n, 3);
    g->last_spike = n[1], g->kept = n[2];
    for (int i = 0; i < n[0]; i++) { /* the first process's rows, one at a time */
        int row[2] = {0, 0};
        if (g->root) row[0] = g->skip[i].at, row[1] = g->skip[i].batches;
        share_ints(d, g->root, row, 2);
        if (!g->root) add_skip(g, (SpikeSkip){row[0], row[1]});
    }
}

void spike_guard_rewind(SpikeGuard *g, int step) {
    const Config *c = g->c;
    Dist *d = g->d;
    char dir[MOE_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", g->dir);
    const int counts[2] = {g->n_skipped, g->n_rolled};
    spike_guard_close(g);
    spike_guard_open(g, c, d, dir, step, 0);
    g->n_skipped = counts[0], g->n_rolled = counts[1];
}

void spike_guard_close(SpikeGuard *g) {
    if (g->rollbacks) fclose(g->rollbacks);
    free(g->skip);
    memset(g, 0, sizeof *g);
}

long long spike_guard_batch(const SpikeGuard *g, int step) {
    long long batch = step;
    for (int i = 0; i < g->n_skip; i++)
        if (g->skip[i].at <= step) batch += g->skip[i].batches;
    return batch;
}

int spike_guard_skip_at(const SpikeGuard *g, int step) {
    int n = 0;
    for (int i = 0; i < g->n_skip; i++)
        if (g->skip[i].at == step) n += g->skip[i].batches;
    return n;
}

int spike_guard_verdict(SpikeGuard *g, StepValues *v) {
    const int kept = g->kept;
    const Config *c = g->c;
    v->skipped = 0;
    if (c->spike_action == MOE_SPIKE_NONE) return MOE_SPIKE_NONE;
    int f[2] = {v->loss_spike, v->grad_spike};
    share_ints(g->d, g->root, f, 2);
    v->loss_spike = f[0], v->grad_spike = f[1];
    if (!(c->spike_on != MOE_SPIKE_ON_GRAD && f[0]) && !(c->spike_on != MOE_SPIKE_ON_LOSS && f[1]))
        return MOE_SPIKE_NONE;
    g->last_spike = v->step; /* rollback.bin waits for a stretch without one */
    g->spike_loss = (float)v->loss, g->spike_norm = v->norm;
    if (c->spike_action == MOE_SPIKE_ROLLBACK && !kept && g->root)
        fprintf(stderr,
                "\nstep %d spiked before the first rollback.bin (train.rollback_every=%d): its "
                "update is skipped instead\n",
                v->step, c->rollback_every);
    if (c->spike_action == MOE_SPIKE_SKIP || !kept) {
        g->n_skipped++;
        v->skipped = 1;
        return MOE_SPIKE_SKIP;
    }
    return g->n_skip >= c->max_rollbacks ? SPIKE_STOP : MOE_SPIKE_ROLLBACK;
}

int spike_guard_keep(const SpikeGuard *g, int step) {
    const int R = g->c->rollback_every;
    return g->c->spike_action == MOE_SPIKE_ROLLBACK && step % R == 0 && g->last_spike <= step - R;
}

/* rolled_back.csv gets train.csv's rows (to_step, spike_step], each behind rollback k */
static void save_undone(const SpikeGuard *g, int k, int to_step, int spike_step) {
    char path[MOE_PATH_MAX + 32], line[4096];
    run_path(path, sizeof path, g->dir, "train.csv");
    FILE *in = fopen_check(path, "r");
    if (!fgets(line, sizeof line, in)) line[0] = '\0';
    char header[4200];
    snprintf(header, sizeof header, "rollback,%.*s", (int)strcspn(line, "\n"), line);
    FILE *out = csv_open(g->dir, "rolled_back.csv", header, k - 1);
    while (fgets(line, sizeof line, in)) {
        const int step = atoi(line);
        if (step > to_step && step <= spike_step && line[strlen(line) - 1] == '\n')
            fprintf(out, "%d,%s", k, line);
    }
    fclose(in);
    if (fflush(out) != 0 || fsync(fileno(out)) != 0)
        moe_fatal("writing %s: %s", header, strerror(errno));
    fclose(out);
}

void spike_guard_record(SpikeGuard *g, int spike_step, int to_step) {
    const Config *c = g->c;
    const SpikeSkip s = {to_step, spike_step - to_step + c->rollback_skip};
    const int k = g->n_skip + 1;
    if (g->root) {
        char from[MOE_PATH_MAX + 32], to[MOE_PATH_MAX + 32], err[1024];
        save_undone(g, k, to_step, spike_step);
        run_path(from, sizeof from, g->dir, "rollback.bin");
        run_path(to, sizeof to, g->dir, "ckpt.bin");
        if (copy_atomic(from, to, err, sizeof err) != 0) moe_fatal("the rollback: %s", err);
        fprintf(g->rollbacks, "%d,%d,%d,%d,%d\n", k, spike_step, to_step, s.at, s.batches);
        if (fflush(g->rollbacks) != 0 || fsync(fileno(g->rollbacks)) != 0)
            moe_fatal("writing rollbacks.csv in %s: %s", g->dir, strerror(errno));
        run_path(to, sizeof to, g->dir, "provenance.txt");
        FILE *p = fopen_check(to, "a");
        fprintf(p,
                "rollback = %d: a spike at step %d, back to step %d (rollback.bin); %d batches "
                "of %d x %d windows skipped, those of steps %d-%d and the %d after them\n",
                k, spike_step, to_step, s.batches, c->accum, c->batch, to_step + 1, spike_step,
                c->rollback_skip);
        fclose(p);
    }
    add_skip(g, s);
    g->n_rolled++;
}

int spike_check_columns(const char *train_csv, const Config *c, char *err, int errlen) {
    FILE *f = fopen(train_csv, "r");
    if (!f) return 0; /* run_check_logs says what is wrong */
    char line[8192];
    const int got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!got) return 0;
    line[strcspn(line, "\r\n")] = '\0';
    const size_t n = strlen(line);
    const int has = n >= 8 && strcmp(line + n - 8, ",skipped") == 0;
    const int wants = c->spike_action != MOE_SPIKE_NONE;
    if (has == wants) return 0;
    return set_error(err, errlen,
                     "train.spike_action=%s %s train.csv's column skipped, which the run %s; "
                     "continue with the run's own train.spike_action (drop the --set), or start "
                     "a new run from its weights with moe train --init DIR/ckpt.bin (nothing "
                     "was changed)",
                     wants ? (c->spike_action == MOE_SPIKE_SKIP ? "skip" : "rollback") : "none",
                     wants ? "needs" : "has no place for", has ? "has" : "has not");
}

void spike_guard_report(const SpikeGuard *g) {
    if (g->c->spike_action == MOE_SPIKE_SKIP)
        printf("train.spike_action=skip: %d update%s skipped in the steps this command trained "
               "(train.csv's column skipped)\n",
               g->n_skipped, g->n_skipped == 1 ? "" : "s");
    if (g->c->spike_action == MOE_SPIKE_ROLLBACK)
        printf("train.spike_action=rollback: %d rollback%s by this command, %d in the run "
               "(rollbacks.csv, rolled_back.csv)\n",
               g->n_rolled, g->n_rolled == 1 ? "" : "s", g->n_skip);
}
