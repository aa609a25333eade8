/*
 * doctor_read.c: a run directory read for moe doctor (doctor_run.h): config.txt through the
 * settings table (so a typo in it is named as in any config), every CSV file that exists, and
 * provenance.txt; and the checks that the files belong together.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/files.h"
#include "measure/doctor_run.h"

/* ---- reading the run ----------------------------------------------------------------------------
 */

static int read_table(CsvTable *t, const char *dir, const char *name, char *files, char *err,
                      int errlen) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const int rc = csv_table_read(t, path, err, errlen);
    if (rc > 0) {
        const size_t n = strlen(files);
        snprintf(files + n, 256 - n, "%s%s", n ? ", " : "", name);
    }
    return rc < 0 ? -1 : 0;
}

static const FileSpec RUN_FILE = {
    .what = "run file",
    .hint = "moe doctor reads the files `moe train` writes into a run directory",
    .in_dir = NULL,
    .max_bytes = (uint64_t)1 << 32,
};

/* dir/name opened as every reader opens its input (open_regular: a FIFO or a directory is
 * refused, never waited on); NULL with err empty when the run has no such file */
static FILE *open_run_file(const char *dir, const char *name, char *path, size_t path_len,
                           char *err, int errlen) {
    snprintf(path, path_len, "%s/%s", dir, name);
    err[0] = '\0';
    if (!file_exists(path)) return NULL;
    uint64_t size = 0;
    return open_regular(path, &RUN_FILE, &size, err, errlen);
}

static char *read_text(FILE *f) {
    char *text = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&text, &n);
    if (!m) moe_fatal("out of memory");
    char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, k, m);
    fclose(m);
    fclose(f);
    return text;
}

/* domains.csv: "step,layer,domain,expert,fraction" rows; the last step's are kept. The domain
 * is a name, which the numeric table reader refuses, so the rows are read here. */
static int read_domains(Run *run, const DoctorReport *r, const char *dir, char *files, char *err,
                        int errlen) {
    char path[1100];
    FILE *f = open_run_file(dir, "domains.csv", path, sizeof path, err, errlen);
    if (!f) return err[0] ? -1 : 0;
    int block_of[1024];
    for (int l = 0, b = 0; l < r->cfg.n_layer && l < 1024; l++)
        block_of[l] = config_is_moe_layer(&r->cfg, l) ? b++ : -1;
    Domains *d = &run->dom;
    d->share =
        (double *)calloc_check((size_t)run->n_moe * MAX_DOMAINS * run->E + 1, sizeof(double));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    for (long lineno = 1; (len = getline(&line, &cap, f)) > 0; lineno++) {
        if (line[len - 1] != '\n') break; /* a torn last line */
        if (lineno == 1) continue;        /* the header */
        char name[32];
        int step, layer, e, used = 0;
        double frac;
        if (sscanf(line, "%d,%d,%31[^,],%d,%lf%n", &step, &layer, name, &e, &frac, &used) != 5 ||
            line[used] != '\n' || layer < 0 || layer >= r->cfg.n_layer || layer >= 1024 ||
            block_of[layer] < 0 || e < 0 || e >= run->E || step < d->step) {
            rc = set_error(err, errlen,
                           "%s:%ld: not a row of a domains.csv of this run (step,layer,domain,"
                           "expert,fraction); the file is damaged or was not written by moe train",
                           path, lineno);
            break;
        }
        if (step > d->step) { /* a later evaluation: it replaces the one before */
            d->step = step, d->n_domains = 0;
            memset(d->share, 0, (size_t)run->n_moe * MAX_DOMAINS * run->E * sizeof(double));
        }
        int k = 0;
        while (k < d->n_domains && strcmp(d->names[k], name) != 0) k++;
        if (k == d->n_domains) {
            if (k == MAX_DOMAINS) continue; /* more domains than a report lists */
            snprintf(d->names[k], sizeof d->names[k], "%s", name);
            d->n_domains++;
        }
        d->share[((size_t)block_of[layer] * MAX_DOMAINS + k) * run->E + e] = frac;
    }
    free(line);
    fclose(f);
    if (!rc && d->step) {
        const size_t n = strlen(files);
        snprintf(files + n, 256 - n, ", domains.csv");
    }
    return rc;
}

void run_free(Run *run) {
    free(run->dom.share);
    csv_table_free(&run->train);
    csv_table_free(&run->router);
    csv_table_free(&run->val_router);
    csv_table_free(&run->dist);
    free(run->prov);
}

/* a whole number in [0, below) */
static int whole(double v, double below) {
    return v >= 0.0 && v < below && v == floor(v);
}

int load_run(DoctorReport *r, Run *run, const char *dir, char *err, int errlen) {
    char path[1100];
    memset(run, 0, sizeof *run);
    snprintf(path, sizeof path, "%s/config.txt", dir);
    if (!file_exists(dir))
        return set_error(err, errlen, "no run directory '%s'; name one that moe train --out made",
                         dir);
    if (!file_exists(path))
        return set_error(err, errlen,
                         "'%s' is not a run directory: it has no config.txt; name a directory "
                         "that moe train --out made",
                         dir);
    config_defaults(&r->cfg);
    char cerr[512];
    if (config_load_file(&r->cfg, path, cerr, sizeof cerr) != 0)
        return set_error(err, errlen, "%s: %s", path, cerr);
    snprintf(r->files, sizeof r->files, "config.txt");
    if (read_table(&run->train, dir, "train.csv", r->files, err, errlen) ||
        read_table(&run->router, dir, "router.csv", r->files, err, errlen) ||
        read_table(&run->val_router, dir, "val_router.csv", r->files, err, errlen) ||
        read_table(&run->dist, dir, "dist.csv", r->files, err, errlen))
        return -1;
    FILE *prov = open_run_file(dir, "provenance.txt", path, sizeof path, err, errlen);
    if (!prov && err[0]) return -1;
    run->prov = prov ? read_text(prov) : NULL;
    if (run->prov) {
        const size_t n = strlen(r->files);
        snprintf(r->files + n, sizeof r->files - n, ", provenance.txt");
    }
    const CsvTable *t = &run->train;
    run->c_step = csv_col(t, "step"), run->c_loss = csv_col(t, "loss");
    run->c_aux = csv_col(t, "aux_loss"), run->c_grad = csv_col(t, "grad_norm");
    run->c_tok = csv_col(t, "tok_per_s"), run->c_val = csv_col(t, "val_loss");
    run->c_lspike = csv_col(t, "loss_spike"), run->c_gspike = csv_col(t, "grad_spike");
    if (t->n_col == 0 || run->c_step < 0 || run->c_loss < 0)
        return set_error(err, errlen,
                         "%s/train.csv is missing or has no step and loss columns: the run has "
                         "not logged a step yet",
                         dir);
    run->E = r->cfg.num_experts, run->K = r->cfg.top_k;
    for (int l = 0; l < r->cfg.n_layer; l++) run->n_moe += config_is_moe_layer(&r->cfg, l);
    r->n_moe = run->n_moe;
    if (run->router.n_col) { /* router.csv must match the config's experts and blocks */
        const int c_load = csv_col(&run->router, "load_0");
        char last[32];
        snprintf(last, sizeof last, "load_%d", run->E - 1);
        if (run->E <= 0 || run->E > MAX_E || run->n_moe <= 0 || c_load < 0 ||
            csv_col(&run->router, "step") != 0 ||
            csv_col(&run->router, last) != c_load + run->E - 1 ||
            csv_col(&run->router, "bias_0") != c_load + run->E)
            return set_error(err, errlen,
                             "%s/router.csv does not match config.txt (%d MoE blocks of %d "
                             "experts); was it copied from another run?",
                             dir, run->n_moe, run->E);
        /* a run still training may have written only some blocks of its last step */
        run->router.n_row -= run->router.n_row % run->n_moe;
        for (int i = 0; i < run->router.n_row; i++) {
            const double layer = csv_at(&run->router, i, 1);
            if (!whole(layer, r->cfg.n_layer) || !whole(csv_at(&run->router, i, 0), INT_MAX) ||
                layer != csv_at(&run->router, i % run->n_moe, 1))
                return set_error(err, errlen,
                                 "%s/router.csv:%d: step %g, layer %g is not the layer of a row "
                                 "of its place; the file is damaged or was not written by moe "
                                 "train",
                                 dir, i + 2, csv_at(&run->router, i, 0), layer);
        }
    }
    if (read_domains(run, r, dir, r->files, err, errlen) != 0) return -1;
    /* every step a whole number, in order: the rules index by them */
    for (int i = 0; i < t->n_row; i++) {
        const double step = csv_at(t, i, run->c_step);
        if (!whole(step, INT_MAX) || (i > 0 && step <= csv_at(t, i - 1, run->c_step)))
            return set_error(err, errlen,
                             "%s/train.csv:%d: step '%g' is not a whole number after the step "
                             "before it; the file is damaged or was not written by moe train",
                             dir, i + 2, step);
    }
    return 0;
}
