/*
 * doctor_read.c: a run directory read for moe doctor (doctor_run.h): config.txt through the
 * settings table (so a typo in it is named as in any config), every CSV file that exists, and
 * provenance.txt; and the checks that the files belong together (a rollback run's
 * rollbacks.csv and rolled_back.csv with its train.csv among them).
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

/* the whole of f (closed), and its length in *n: a NUL inside it is the caller's to see */
static char *read_text(FILE *f, size_t *len) {
    char *text = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&text, &n);
    if (!m) moe_fatal("out of memory");
    char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, k, m);
    fclose(m);
    fclose(f);
    *len = n;
    return text;
}

/* a domain's name: text without a control character or a comma (the shard allows UTF-8) */
static int is_domain_name(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f || *s == ',') return 0;
    return 1;
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
    static const char HEADER[] = "step,layer,domain,expert,fraction\n";
    char shown[128];
    for (long lineno = 1; (len = getline(&line, &cap, f)) > 0; lineno++) {
        if (lineno == 1) { /* the header, written whole when the file is made */
            if (strcmp(line, HEADER) == 0) continue;
            rc = set_error(err, errlen,
                           "%s:1: the header is '%s', not step,layer,domain,expert,fraction; the "
                           "file is damaged or was not written by moe train",
                           path, escape_text(shown, sizeof shown, line, (size_t)len));
            break;
        }
        if (line[len - 1] != '\n') break; /* a torn last line */
        char name[32];
        int step, layer, e, used = 0;
        double frac;
        if (sscanf(line, "%d,%d,%31[^,],%d,%lf%n", &step, &layer, name, &e, &frac, &used) != 5 ||
            line[used] != '\n' || layer < 0 || layer >= r->cfg.n_layer || layer >= 1024 ||
            block_of[layer] < 0 || e < 0 || e >= run->E || step < d->step ||
            !(frac >= 0.0 && frac <= 1.0) || !is_domain_name(name)) {
            rc = set_error(err, errlen,
                           "%s:%ld: '%s' is not a row of a domains.csv of this run (step,layer,"
                           "domain,expert,fraction, a fraction from 0 to 1); the file is damaged "
                           "or was not written by moe train",
                           path, lineno, escape_text(shown, sizeof shown, line, (size_t)len - 1));
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

/* ---- what the files may hold -------------------------------------------------------------------
 * A value moe train cannot have written (a negative load or gradient norm, a validation loss
 * that is not a finite number, an empty gradient norm) means a damaged file: the rules would
 * read it as a finding (a nan as a divergence, a huge load as a collapse), so it is refused
 * with its file, line and column instead. */

enum {
    COL_REQUIRED = 1, /* the header must name it: a rule reads it */
    COL_NEEDED = 2,   /* every row has a value (moe train never leaves it empty) */
    COL_NAN = 4,      /* nan is a value: a diverged step's, or expert_sim under dist.ep */
    COL_INF = 8,      /* +inf is a value: a diverged step's */
    COL_FLAG = 16,    /* 0 or 1 and nothing between: a spike's mark, a skipped update */
};
#define COL_DIVERGES (COL_NAN | COL_INF)

typedef struct {
    const char *name; /* a column, or a prefix ending in '_' ("load_") of one per expert */
    unsigned what;    /* COL_* */
    double lo, hi;    /* the range of its finite values */
} ColumnRule;

#define ANY -INFINITY, INFINITY
#define NONNEG 0.0, INFINITY
#define SHARE 0.0, 1.0

static const ColumnRule TRAIN_COLUMNS[] = {
    {"step", COL_REQUIRED | COL_NEEDED, NONNEG},
    {"loss", COL_REQUIRED | COL_NEEDED | COL_DIVERGES, NONNEG},
    {"aux_loss", COL_DIVERGES, NONNEG},
    {"z_loss", COL_DIVERGES, NONNEG},
    {"lr", 0, NONNEG},
    {"grad_norm", COL_REQUIRED | COL_NEEDED | COL_DIVERGES, NONNEG},
    {"tok_per_s", 0, NONNEG},
    {"val_loss", 0, NONNEG},
    {"loss_spike", COL_FLAG, SHARE},
    {"grad_spike", COL_FLAG, SHARE},
    {"skipped", COL_NEEDED | COL_FLAG, SHARE}, /* under a train.spike_action only */
};

/* rollbacks.csv, whose header is these columns in this order (spike.h; check_rollbacks) */
static const ColumnRule ROLLBACK_COLUMNS[] = {
    {"rollback", COL_NEEDED, 1.0, INFINITY},
    {"spike_step", COL_NEEDED, 1.0, INFINITY},
    {"to_step", COL_NEEDED, NONNEG},
    {"skip_at", COL_NEEDED, NONNEG},
    {"skip_batches", COL_NEEDED, 1.0, INFINITY},
};

/* router.csv and val_router.csv */
static const ColumnRule ROUTER_COLUMNS[] = {
    {"step", COL_NEEDED, NONNEG}, {"layer", COL_NEEDED, NONNEG},
    {"maxvio", 0, NONNEG},        {"cv", 0, NONNEG},
    {"entropy", 0, NONNEG},       {"drop_frac", 0, SHARE},
    {"load_", COL_NEEDED, SHARE}, {"bias_", 0, ANY},
    {"top1_score", 0, ANY},       {"drop_", 0, NONNEG},
    {"pad_frac", 0, SHARE},       {"expert_sim", COL_NAN, ANY},
    {"max_logit", 0, NONNEG},     {"lse_mean", 0, ANY},
    {"maxvio_group", 0, NONNEG},
};

/* dist.csv: every other column is bytes, rows or seconds, none negative */
static const ColumnRule DIST_COLUMNS[] = {
    {"step", COL_NEEDED, NONNEG},
    {"layer", COL_NEEDED, -1.0, INFINITY}, /* -1: the step's gradient synchronisation */
    {"rank", COL_NEEDED, NONNEG},
};

/* the rule of column `name` (a prefix rule matches name_0, name_1, ...), or NULL */
static const ColumnRule *column_rule(const ColumnRule *rules, int n, const char *name) {
    for (int i = 0; i < n; i++) {
        const size_t len = strlen(rules[i].name);
        if (rules[i].name[len - 1] != '_') {
            if (strcmp(rules[i].name, name) == 0) return &rules[i];
        } else if (strncmp(rules[i].name, name, len) == 0 && name[len] &&
                   strspn(name + len, "0123456789") == strlen(name + len)) {
            return &rules[i];
        }
    }
    return NULL;
}

/* every value of t against its column's rule; a column without one holds finite numbers in
 * [lo, hi]. 0, or -1 naming the file, line and column. */
static int check_table(const CsvTable *t, const ColumnRule *rules, int n_rules, double lo,
                       double hi, char *err, int errlen) {
    static const char *const DAMAGED = "the file is damaged or was not written by moe train";
    if (!t->n_col) return 0; /* no such file */
    for (int i = 0; i < n_rules; i++)
        if ((rules[i].what & COL_REQUIRED) && csv_col(t, rules[i].name) < 0)
            return set_error(err, errlen, "%s: the header has no column '%s'; %s", t->path,
                             rules[i].name, DAMAGED);
    for (int c = 0; c < t->n_col; c++) {
        const ColumnRule fallback = {t->names[c], 0, lo, hi};
        const ColumnRule *rule = column_rule(rules, n_rules, t->names[c]);
        if (!rule) rule = &fallback;
        for (int i = 0; i < t->n_row; i++) {
            const double v = csv_at(t, i, c);
            if (t->empty[(size_t)i * t->n_col + c]) {
                if (!(rule->what & COL_NEEDED)) continue;
                return set_error(err, errlen, "%s:%ld: column '%s' is empty; %s", t->path,
                                 t->line[i], t->names[c], DAMAGED);
            }
            if (((rule->what & COL_NAN) && isnan(v)) || ((rule->what & COL_INF) && v == INFINITY))
                continue;
            if (!isfinite(v))
                return set_error(err, errlen,
                                 "%s:%ld: column '%s' holds %g, not a finite number; %s", t->path,
                                 t->line[i], t->names[c], v, DAMAGED);
            if (v < rule->lo || v > rule->hi)
                return set_error(err, errlen, "%s:%ld: column '%s' holds %g: it is never %s %g; %s",
                                 t->path, t->line[i], t->names[c], v,
                                 v < rule->lo ? "below" : "above",
                                 v < rule->lo ? rule->lo : rule->hi, DAMAGED);
            if ((rule->what & COL_FLAG) && v != 0.0 && v != 1.0)
                return set_error(err, errlen, "%s:%ld: column '%s' holds %g: it is 0 or 1; %s",
                                 t->path, t->line[i], t->names[c], v, DAMAGED);
        }
    }
    return 0;
}

#undef ANY
#undef NONNEG
#undef SHARE

/* provenance.txt: sections of "key = value" lines, each ended by an empty line. A kill while a
 * section was written leaves one torn line, which the next section (its "started = " line)
 * or the end of the file follows; anything else, or a control character, is a damaged file. */
static int check_provenance(const char *text, size_t n, const char *path, char *err, int errlen) {
    char shown[128];
    const char *nul = (const char *)memchr(text, '\0', n);
    if (nul) {
        int line = 1;
        for (const char *p = text; p < nul; p++) line += *p == '\n';
        return set_error(err, errlen,
                         "%s:%d: a NUL byte: not the text moe train writes; the file is damaged",
                         path, line);
    }
    int lineno = 1;
    for (const char *p = text; *p; lineno++) {
        const char *eol = strchr(p, '\n');
        const size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const size_t key = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_.");
        int bad = lineno == 1 && strncmp(p, "started = ", 10) != 0;
        for (size_t i = 0; i < len && !bad; i++) /* a tab may be in a CPU's name */
            bad = ((unsigned char)p[i] < 0x20 && p[i] != '\t') || p[i] == 0x7f;
        const int torn = !eol || strncmp(eol + 1, "started = ", 10) == 0;
        if (!bad && len && !torn) bad = key == 0 || strncmp(p + key, " = ", 3) != 0;
        if (bad)
            return set_error(err, errlen,
                             "%s:%d: '%s' is not a \"key = value\" line of a run's provenance; "
                             "the file is damaged or was not written by moe train",
                             path, lineno, escape_text(shown, sizeof shown, p, len));
        p = eol ? eol + 1 : p + len;
    }
    return 0;
}

void run_free(Run *run) {
    free(run->dom.share);
    csv_table_free(&run->train);
    csv_table_free(&run->router);
    csv_table_free(&run->val_router);
    csv_table_free(&run->dist);
    csv_table_free(&run->rollbacks);
    csv_table_free(&run->rolled_back);
    free(run->prov);
}

/* does dir's config.txt (read by config_load_file already) set anything? */
static int has_setting(const char *dir) {
    char path[1100], err[256];
    FILE *f = open_run_file(dir, "config.txt", path, sizeof path, err, sizeof err);
    if (!f) return 0;
    size_t n = 0;
    char *text = read_text(f, &n);
    int found = 0;
    for (const char *p = text; *p && !found;) {
        p += strspn(p, " \t\r\n");
        found = *p && *p != '#';
        p += strcspn(p, "\n");
    }
    free(text);
    return found;
}

/* a whole number in [0, below) */
static int whole(double v, double below) {
    return v >= 0.0 && v < below && v == floor(v);
}

/* The run's CSV files read (their names appended to files) and their columns checked. */
static int read_tables(Run *run, const char *dir, char *files, char *err, int errlen) {
    if (read_table(&run->train, dir, "train.csv", files, err, errlen) ||
        read_table(&run->router, dir, "router.csv", files, err, errlen) ||
        read_table(&run->val_router, dir, "val_router.csv", files, err, errlen) ||
        read_table(&run->dist, dir, "dist.csv", files, err, errlen) ||
        read_table(&run->rollbacks, dir, "rollbacks.csv", files, err, errlen) ||
        read_table(&run->rolled_back, dir, "rolled_back.csv", files, err, errlen))
        return -1;
#define N_RULES(a) (int)(sizeof a / sizeof a[0])
    if (check_table(&run->train, TRAIN_COLUMNS, N_RULES(TRAIN_COLUMNS), 0.0, INFINITY, err,
                    errlen) ||
        check_table(&run->router, ROUTER_COLUMNS, N_RULES(ROUTER_COLUMNS), -INFINITY, INFINITY, err,
                    errlen) ||
        check_table(&run->val_router, ROUTER_COLUMNS, N_RULES(ROUTER_COLUMNS), -INFINITY, INFINITY,
                    err, errlen) ||
        check_table(&run->dist, DIST_COLUMNS, N_RULES(DIST_COLUMNS), 0.0, INFINITY, err, errlen) ||
        check_table(&run->rollbacks, ROLLBACK_COLUMNS, N_RULES(ROLLBACK_COLUMNS), 0.0, INFINITY,
                    err, errlen) ||
        check_table(&run->rolled_back, TRAIN_COLUMNS, N_RULES(TRAIN_COLUMNS), 0.0, INFINITY, err,
                    errlen)) /* its column rollback: a number >= 0, checked below */
        return -1;
#undef N_RULES
    return 0;
}

/* router.csv against the config: its load_ and bias_ columns for E experts, and every row's
 * layer that of its place among the n_moe blocks of a step (a last step cut short dropped). */
static int check_router(Run *run, const Config *cfg, const char *dir, char *err, int errlen) {
    const int c_load = csv_col(&run->router, "load_0");
    char last[32];
    snprintf(last, sizeof last, "load_%d", run->E - 1);
    if (run->E <= 0 || run->E > MAX_E || run->n_moe <= 0 || c_load < 0 ||
        csv_col(&run->router, "step") != 0 || csv_col(&run->router, last) != c_load + run->E - 1 ||
        csv_col(&run->router, "bias_0") != c_load + run->E)
        return set_error(err, errlen,
                         "%s/router.csv does not match config.txt (%d MoE blocks of %d "
                         "experts); was it copied from another run?",
                         dir, run->n_moe, run->E);
    /* a run still training may have written only some blocks of its last step */
    run->router.n_row -= run->router.n_row % run->n_moe;
    for (int i = 0; i < run->router.n_row; i++) {
        const double layer = csv_at(&run->router, i, 1);
        if (!whole(layer, cfg->n_layer) || !whole(csv_at(&run->router, i, 0), INT_MAX) ||
            layer != csv_at(&run->router, i % run->n_moe, 1))
            return set_error(err, errlen,
                             "%s/router.csv:%d: step %g, layer %g is not the layer of a row "
                             "of its place; the file is damaged or was not written by moe "
                             "train",
                             dir, i + 2, csv_at(&run->router, i, 0), layer);
    }
    return 0;
}

static const char *spike_action_name(int action) {
    return action == MOE_SPIKE_SKIP ? "skip" : action == MOE_SPIKE_ROLLBACK ? "rollback" : "none";
}

/* train.csv's column skipped: there exactly when config.txt names a train.spike_action (moe
 * train refuses to resume into the other), and 1 only on a step it marks as a spike */
static int check_skipped(Run *run, const Config *cfg, char *err, int errlen) {
    const CsvTable *t = &run->train;
    run->c_skipped = csv_col(t, "skipped");
    if ((run->c_skipped >= 0) != (cfg->spike_action != MOE_SPIKE_NONE))
        return set_error(err, errlen,
                         "%s: %s column 'skipped', which moe train writes exactly under a "
                         "train.spike_action, and config.txt says train.spike_action=%s; are "
                         "config.txt and train.csv from different runs?",
                         t->path, run->c_skipped >= 0 ? "the header has a" : "the header has no",
                         spike_action_name(cfg->spike_action));
    if (run->c_skipped < 0 || run->c_lspike < 0 || run->c_gspike < 0) return 0;
    for (int i = 0; i < t->n_row; i++)
        if (csv_at(t, i, run->c_skipped) == 1.0 && csv_at(t, i, run->c_lspike) != 1.0 &&
            csv_at(t, i, run->c_gspike) != 1.0)
            return set_error(err, errlen,
                             "%s:%ld: column 'skipped' is 1 at step %g, which loss_spike and "
                             "grad_spike do not mark as a spike: moe train skips a spike's "
                             "update only; the file is damaged or was not written by moe train",
                             t->path, t->line[i], csv_at(t, i, run->c_step));
    return 0;
}

/* The column of rollbacks.csv's row i that no rollback can have written, its value in *v and
 * the reason in *why; NULL when the row is one. Rows are numbered 1, 2, ... in order, each
 * returns to a step before its spike and skips there at least the batches of the steps it
 * undid; rollback.bin only moves forward, so neither does to_step. */
static const char *rollback_fault(const CsvTable *t, int i, double *v, const char **why) {
    for (int c = 0; c < t->n_col; c++)
        if (!whole(*v = csv_at(t, i, c), INT_MAX)) {
            *why = "not a whole number";
            return t->names[c];
        }
    const double k = csv_at(t, i, 0), spike = csv_at(t, i, 1), to = csv_at(t, i, 2),
                 at = csv_at(t, i, 3), batches = csv_at(t, i, 4);
    const char *col = NULL;
    if (k != i + 1)
        col = "rollback", *v = k, *why = "the rollbacks are numbered 1, 2, ... in order";
    else if (to >= spike)
        col = "to_step", *v = to, *why = "a rollback returns to a step before its spike_step";
    else if (at != to)
        col = "skip_at", *v = at, *why = "a rollback skips batches at the step it returns to";
    else if (batches < spike - to)
        col = "skip_batches", *v = batches,
        *why = "a rollback skips at least the batches of the steps it undid";
    else if (i > 0 && to < csv_at(t, i - 1, 2))
        col = "to_step", *v = to,
        *why = "no earlier than the rollback before it returned to (rollback.bin only moves "
               "forward)";
    return col;
}

/* rollbacks.csv: its header, and every row one a rollback writes (a torn last row was
 * dropped, as a resume drops it) */
static int check_rollbacks(const Run *run, char *err, int errlen) {
    static const char *const DAMAGED = "the file is damaged or was not written by moe train";
    const CsvTable *t = &run->rollbacks;
    const int n_cols = (int)(sizeof ROLLBACK_COLUMNS / sizeof ROLLBACK_COLUMNS[0]);
    if (!t->n_col) return 0;
    int header_ok = t->n_col == n_cols;
    for (int c = 0; c < n_cols && header_ok; c++)
        header_ok = strcmp(t->names[c], ROLLBACK_COLUMNS[c].name) == 0;
    if (!header_ok)
        return set_error(err, errlen,
                         "%s: the header is not rollback,spike_step,to_step,skip_at,skip_batches; "
                         "%s",
                         t->path, DAMAGED);
    for (int i = 0; i < t->n_row; i++) {
        const char *why = "";
        double v = 0.0;
        const char *col = rollback_fault(t, i, &v, &why);
        if (col)
            return set_error(err, errlen, "%s:%ld: column '%s' holds %g: %s; %s", t->path,
                             t->line[i], col, v, why, DAMAGED);
    }
    return 0;
}

/* rolled_back.csv: "rollback," then train.csv's columns; each row a step that rollback undid
 * (to_step < step <= spike_step). Rows of the rollback after the last of rollbacks.csv are a
 * rollback cut short by a kill, which the resume makes again: read, not judged. */
static int check_rolled_back(const Run *run, char *err, int errlen) {
    static const char *const DAMAGED = "the file is damaged or was not written by moe train";
    const CsvTable *t = &run->rolled_back, *train = &run->train;
    if (!t->n_col) return 0;
    int header_ok = t->n_col == train->n_col + 1 && strcmp(t->names[0], "rollback") == 0;
    for (int c = 0; c < train->n_col && header_ok; c++)
        header_ok = strcmp(t->names[c + 1], train->names[c]) == 0;
    if (!header_ok)
        return set_error(err, errlen,
                         "%s: the header is not 'rollback' and then train.csv's columns; %s",
                         t->path, DAMAGED);
    const int n_rb = run->rollbacks.n_row, c_step = run->c_step + 1;
    for (int i = 0; i < t->n_row; i++) {
        const double k = csv_at(t, i, 0), step = csv_at(t, i, c_step);
        if (!whole(k, n_rb + 2.0) || k < 1.0)
            return set_error(err, errlen,
                             "%s:%ld: column 'rollback' holds %g: not a rollback of "
                             "rollbacks.csv (%d) or the one after them; %s",
                             t->path, t->line[i], k, n_rb, DAMAGED);
        if (k > n_rb) continue;
        const double spike = csv_at(&run->rollbacks, (int)k - 1, 1),
                     to = csv_at(&run->rollbacks, (int)k - 1, 2);
        if (!whole(step, INT_MAX) || step <= to || step > spike)
            return set_error(err, errlen,
                             "%s:%ld: column 'step' holds %g: rollback %g undid steps %g-%g "
                             "(rollbacks.csv); %s",
                             t->path, t->line[i], step, k, to + 1, spike, DAMAGED);
    }
    return 0;
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
    char cerr[512], shown[1024];
    if (config_load_file(&r->cfg, path, cerr, sizeof cerr) != 0) /* it may quote the file */
        return set_error(err, errlen, "%s: %s", path,
                         escape_text(shown, sizeof shown, cerr, strlen(cerr)));
    if (!has_setting(dir))
        return set_error(err, errlen,
                         "%s holds no setting: moe train writes every setting of a run there, "
                         "and the defaults need not be the run's; the file is damaged (copy "
                         "the settings the run was trained with back into it)",
                         path);
    snprintf(r->files, sizeof r->files, "config.txt");
    if (read_tables(run, dir, r->files, err, errlen) != 0) return -1;
    FILE *prov = open_run_file(dir, "provenance.txt", path, sizeof path, err, errlen);
    if (!prov && err[0]) return -1;
    size_t prov_len = 0;
    run->prov = prov ? read_text(prov, &prov_len) : NULL;
    if (run->prov && check_provenance(run->prov, prov_len, path, err, errlen) != 0) return -1;
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
    if (run->router.n_col && run->n_moe == 0 && run->router.n_row == 0) {
        /* a dense model's: the header alone, no load_ columns (it routes nothing) */
        csv_table_free(&run->router);
    }
    /* router.csv must match the config's experts and blocks */
    if (run->router.n_col && check_router(run, &r->cfg, dir, err, errlen) != 0) return -1;
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
    if (check_skipped(run, &r->cfg, err, errlen) || check_rollbacks(run, err, errlen) ||
        check_rolled_back(run, err, errlen))
        return -1;
    return 0;
}
