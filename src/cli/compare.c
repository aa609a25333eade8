/*
 * compare.c: `moe compare RUN_DIR RUN_DIR... [--csv] [--plot FILE.png]`, runs side by side:
 * their final losses, balance, drops, speed and steps, and the settings in which they differ;
 * with --plot, one figure of their loss curves (gnuplot).
 *
 * The run directories are read by moe doctor's reader (measure/doctor_read.c, load_run), so a
 * missing run, a damaged CSV or a router.csv of another run is refused here with the same
 * message as there (exit 2), before anything is printed or drawn.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "io/files.h"
#include "measure/doctor_run.h"

#define COMPARE_MAX_RUNS 16 /* chapters/series.gp draws 16 series that all look different */
#define COMPARE_LAST 10     /* the final window: steps whose losses and routing are averaged */

typedef struct {
    const char *dir;
    char name[256];  /* the directory as given, without a trailing '/' */
    int steps;       /* the last step train.csv records */
    int window;      /* the steps the final figures average (COMPARE_LAST, or fewer) */
    double loss;     /* mean training loss of the final window */
    double val;      /* the last validation loss; NAN: no evaluation yet */
    double maxvio;   /* router.csv over the final window and every MoE block; NAN: dense */
    double cv;       /* the same, the coefficient of variation of the loads */
    double drop;     /* the same, the share of assignments dropped */
    double tok;      /* median tokens/s over every step that logged it; NAN: none */
    char *settings;  /* config_to_text: "key = value" lines */
    Run run;         /* the tables, as moe doctor reads them */
    DoctorReport *r; /* the config, as moe doctor reads it */
} Compared;

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the mean of column c of t over rows [from, to), empty fields left out; NAN when none */
static double mean_col(const CsvTable *t, int c, int from, int to) {
    double s = 0.0;
    int n = 0;
    for (int i = from; c >= 0 && i < to; i++)
        if (!t->empty[(size_t)i * t->n_col + c]) s += csv_at(t, i, c), n++;
    return n ? s / n : NAN;
}

static void summarize(Compared *x) {
    const CsvTable *t = &x->run.train;
    const int n = t->n_row;
    x->steps = n ? (int)csv_at(t, n - 1, x->run.c_step) : 0;
    x->window = n < COMPARE_LAST ? n : COMPARE_LAST;
    x->loss = mean_col(t, x->run.c_loss, n - x->window, n);
    x->val = NAN;
    for (int i = n - 1; i >= 0 && x->run.c_val >= 0 && isnan(x->val); i--)
        if (!t->empty[(size_t)i * t->n_col + x->run.c_val]) x->val = csv_at(t, i, x->run.c_val);
    /* router.csv: one row a step and MoE block (load_run keeps whole steps only) */
    const CsvTable *rt = &x->run.router;
    const int rows = x->run.n_moe > 0 ? x->window * x->run.n_moe : 0;
    const int from = rt->n_row > rows ? rt->n_row - rows : 0;
    x->maxvio = mean_col(rt, rt->n_col ? csv_col(rt, "maxvio") : -1, from, rt->n_row);
    x->cv = mean_col(rt, rt->n_col ? csv_col(rt, "cv") : -1, from, rt->n_row);
    x->drop = mean_col(rt, rt->n_col ? csv_col(rt, "drop_frac") : -1, from, rt->n_row);
    double *tok = (double *)malloc_check((size_t)(n ? n : 1) * sizeof(double));
    int k = 0;
    for (int i = 0; i < n && x->run.c_tok >= 0; i++)
        if (!t->empty[(size_t)i * t->n_col + x->run.c_tok]) tok[k++] = csv_at(t, i, x->run.c_tok);
    qsort(tok, (size_t)k, sizeof *tok, cmp_double);
    x->tok = k ? (k % 2 ? tok[k / 2] : 0.5 * (tok[k / 2 - 1] + tok[k / 2])) : NAN;
    free(tok);
}

/* the value of key in config_to_text's lines ("key = value\n"), into out; "" when absent */
static void setting_of(const char *text, const char *key, char *out, size_t len) {
    const size_t n = strlen(key);
    out[0] = '\0';
    for (const char *p = text; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
        if (strncmp(p, key, n) == 0 && strncmp(p + n, " = ", 3) == 0) {
            const size_t v = strcspn(p + n + 3, "\n");
            snprintf(out, len, "%.*s", (int)v, p + n + 3);
            return;
        }
}

/* The keys whose values are not the same in every run, in config_write's order, as one
 * malloc'ed list of names each ended by '\n'. */
static char *differing_keys(const Compared *x, int n) {
    char *keys = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&keys, &len);
    if (!f) moe_fatal("out of memory");
    for (const char *p = x[0].settings; *p;) {
        const size_t line = strcspn(p, "\n"), klen = strcspn(p, " =\n");
        char key[128], a[1024], b[1024];
        snprintf(key, sizeof key, "%.*s", (int)(klen < sizeof key ? klen : sizeof key - 1), p);
        setting_of(x[0].settings, key, a, sizeof a);
        for (int i = 1; i < n; i++) {
            setting_of(x[i].settings, key, b, sizeof b);
            if (strcmp(a, b) != 0) {
                fprintf(f, "%s\n", key);
                break;
            }
        }
        p += line + (p[line] == '\n');
    }
    fclose(f);
    return keys;
}

/* one figure: "%.4f" of v, or "-" when there is none (a dense run's balance, no evaluation) */
static const char *num(char *buf, size_t len, const char *fmt, double v) {
    if (isnan(v))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, fmt, v);
    return buf;
}

static void print_row(const char *label, const char *const *cells, int n, int width) {
    printf("%-22s", label);
    for (int i = 0; i < n; i++) printf("  %*s", width, cells[i]);
    printf("\n");
}

static void print_table(const Compared *x, int n, const char *keys) {
    int width = 10;
    for (int i = 0; i < n; i++)
        if ((int)strlen(x[i].name) > width) width = (int)strlen(x[i].name);
    char buf[COMPARE_MAX_RUNS][1024];
    const char *cells[COMPARE_MAX_RUNS];
    for (int i = 0; i < n; i++) cells[i] = x[i].name;
    print_row("run", cells, n, width);
    static const char *const LABELS[] = {"train loss (last N)", "val loss (last)",
                                         "maxvio (last N)",     "cv (last N)",
                                         "drop_frac (last N)",  "tok/s (median)"};
    for (int i = 0; i < n; i++) {
        snprintf(buf[i], sizeof buf[i], "%d", x[i].steps);
        cells[i] = buf[i];
    }
    print_row("steps", cells, n, width);
    for (int i = 0; i < n; i++) snprintf(buf[i], sizeof buf[i], "%d", x[i].window);
    print_row("N (final window)", cells, n, width);
    for (int row = 0; row < 6; row++) {
        for (int i = 0; i < n; i++) {
            const double v[6] = {x[i].loss, x[i].val, x[i].maxvio, x[i].cv, x[i].drop, x[i].tok};
            num(buf[i], sizeof buf[i], row == 5 ? "%.0f" : "%.4f", v[row]);
        }
        print_row(LABELS[row], cells, n, width);
    }
    printf("\nsettings that differ:%s\n", keys[0] ? "" : " none");
    for (const char *k = keys; *k; k += strcspn(k, "\n") + 1) {
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)strcspn(k, "\n"), k);
        for (int i = 0; i < n; i++) setting_of(x[i].settings, key, buf[i], sizeof buf[i]);
        print_row(key, cells, n, width);
    }
}

/* a CSV field: quoted when it holds a comma, a quote or a line break */
static void csv_field(const char *s) {
    if (!s[strcspn(s, ",\"\n\r")]) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    putchar('"');
}

static void print_csv(const Compared *x, int n, const char *keys) {
    printf("run,steps,window,train_loss,val_loss,maxvio,cv,drop_frac,tok_per_s");
    for (const char *k = keys; *k; k += strcspn(k, "\n") + 1)
        printf(",%.*s", (int)strcspn(k, "\n"), k);
    printf("\n");
    for (int i = 0; i < n; i++) {
        char b[6][64], v[1024];
        csv_field(x[i].name);
        /* an empty field: no such value (CsvTable's convention) */
        const double vals[6] = {x[i].loss, x[i].val, x[i].maxvio, x[i].cv, x[i].drop, x[i].tok};
        printf(",%d,%d", x[i].steps, x[i].window);
        for (int c = 0; c < 6; c++) {
            if (isnan(vals[c]))
                b[c][0] = '\0';
            else
                snprintf(b[c], sizeof b[c], c == 5 ? "%.0f" : "%.6f", vals[c]);
            printf(",%s", b[c]);
        }
        for (const char *k = keys; *k; k += strcspn(k, "\n") + 1) {
            char key[128];
            snprintf(key, sizeof key, "%.*s", (int)strcspn(k, "\n"), k);
            setting_of(x[i].settings, key, v, sizeof v);
            putchar(',');
            csv_field(v);
        }
        printf("\n");
    }
}

/* plots/NAME of the checkout this binary was built in (build/moe: ../plots), else of the
 * current folder; 0 when neither has it */
static int find_shared(char *out, size_t len, const char *rel) {
    char exe[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (int up = 0; up < 2; up++) { /* the binary's folder, then the one above */
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = '\0';
            if ((size_t)snprintf(out, len, "%s/%s", exe, rel) < len && file_exists(out)) return 1;
        }
    }
    snprintf(out, len, "%s", rel);
    return file_exists(out);
}

/* gnuplot's quoting: a single-quoted string with every ' doubled */
static void gp_string(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* --plot: every run's training loss (a line) and validation loss (points on a line of the
 * same type), one line type a run (chapters/series.gp's distinct(i)) */
static void plot(const Compared *x, int n, const char *png) {
    char style[PATH_MAX], series[PATH_MAX];
    if (!find_shared(style, sizeof style, "plots/style.gp") ||
        !find_shared(series, sizeof series, "chapters/series.gp"))
        moe_input_error("compare --plot: plots/style.gp or chapters/series.gp not found beside "
                        "the binary or in the current folder; run moe from the checkout it was "
                        "built in (nothing was drawn)");
    const char *tmp = getenv("TMPDIR");
    char tdir[PATH_MAX];
    if (!tmp || !*tmp || strlen(tmp) > sizeof tdir - 32) tmp = "/tmp";
    snprintf(tdir, sizeof tdir, "%s/moe-compare-XXXXXX", tmp);
    char *made = mkdtemp(tdir);
    if (!made) moe_fatal("compare --plot: cannot make a temporary folder: %s", strerror(errno));
    char script[PATH_MAX + 16], data[PATH_MAX + 32];
    snprintf(script, sizeof script, "%s/plot.gp", made);
    FILE *gp = fopen(script, "w");
    if (!gp) moe_fatal("compare --plot: cannot write %s: %s", script, strerror(errno));
    fprintf(gp, "out = ");
    gp_string(gp, png);
    fprintf(gp, "\nload ");
    gp_string(gp, style);
    fprintf(gp, "\nload ");
    gp_string(gp, series);
    fprintf(gp, "\nset title 'loss: training (lines) and validation (points)'\n"
                "set xlabel 'step'\nset ylabel 'loss (nats)'\nset key top right\nplot \\\n");
    for (int i = 0; i < n; i++) {
        snprintf(data, sizeof data, "%s/run%d.dat", made, i);
        FILE *d = fopen(data, "w");
        if (!d) moe_fatal("compare --plot: cannot write %s: %s", data, strerror(errno));
        const CsvTable *t = &x[i].run.train;
        for (int r = 0; r < t->n_row; r++) {
            const int c_val = x[i].run.c_val;
            const int has_val = c_val >= 0 && !t->empty[(size_t)r * t->n_col + c_val];
            fprintf(d, "%.0f %.9g ", csv_at(t, r, x[i].run.c_step), csv_at(t, r, x[i].run.c_loss));
            if (has_val)
                fprintf(d, "%.9g\n", csv_at(t, r, c_val));
            else
                fprintf(d, "nan\n"); /* style.gp: a missing value */
        }
        fclose(d);
        fprintf(gp, "%s  ", i ? ", \\\n" : "");
        gp_string(gp, data);
        fprintf(gp, " using 1:2 with lines lt distinct(%d) title ", i + 1);
        gp_string(gp, x[i].name);
        if (!isnan(x[i].val)) { /* a run not evaluated yet has no points to draw */
            fprintf(gp, ", \\\n  ");
            gp_string(gp, data);
            fprintf(gp, " using 1:3 with linespoints lt distinct(%d) lw 0.8 notitle", i + 1);
        }
    }
    fprintf(gp, "\n");
    fclose(gp);
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) moe_fatal("compare --plot: fork: %s", strerror(errno));
    if (pid == 0) {
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) moe_fatal("compare --plot: waitpid: %s", strerror(errno));
    for (int i = 0; i < n; i++) {
        snprintf(data, sizeof data, "%s/run%d.dat", made, i);
        remove(data);
    }
    remove(script);
    rmdir(made);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        moe_input_error("compare --plot: gnuplot is not installed (make deps installs it); the "
                        "table above is complete");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !file_exists(png))
        moe_input_error("compare --plot: gnuplot could not draw %s (its message is above): is "
                        "the folder there and writable?",
                        png);
    fprintf(stderr, "wrote %s\n", png);
}

int cmd_compare(int argc, char **argv) {
    const char *dirs[COMPARE_MAX_RUNS + 1], *png = NULL;
    int n = 0, csv = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(cli_help("compare"), stdout);
            return 0;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (n == COMPARE_MAX_RUNS)
                usage_error("compare", "at most 16 runs side by side, not also '%s'", a);
            dirs[n++] = a;
        } else if (!cli_option_allowed("compare", a)) {
            usage_error("compare", "unknown option '%s'", a);
        } else if (strcmp(a, "--csv") == 0) {
            csv = 1;
        } else { /* --plot FILE.png */
            if (i + 1 >= argc || !argv[i + 1][0]) usage_error("compare", "%s needs FILE.png", a);
            png = argv[++i];
            const size_t len = strlen(png);
            if (len < 4 || strcmp(png + len - 4, ".png") != 0)
                usage_error("compare", "--plot writes a PNG: name it FILE.png, not '%s'", png);
            char folder[PATH_MAX];
            snprintf(folder, sizeof folder, "%s", png);
            char *slash = strrchr(folder, '/');
            if (slash) *slash = '\0';
            struct stat st;
            if (slash && folder[0] && (stat(folder, &st) != 0 || !S_ISDIR(st.st_mode)))
                usage_error("compare", "--plot %s: no folder there to write it into; make it first",
                            png);
        }
    }
    if (n < 2)
        usage_error("compare", "%s",
                    n ? "one run has nothing to be compared with: name two or more"
                      : "name the run directories to compare (two or more)");
    Compared *x = (Compared *)calloc_check((size_t)n, sizeof *x);
    char err[1024];
    for (int i = 0; i < n; i++) {
        x[i].dir = dirs[i];
        snprintf(x[i].name, sizeof x[i].name, "%s", dirs[i]);
        for (size_t l = strlen(x[i].name); l > 1 && x[i].name[l - 1] == '/'; l--)
            x[i].name[l - 1] = '\0';
        x[i].r = (DoctorReport *)calloc_check(1, sizeof *x[i].r);
        if (load_run(x[i].r, &x[i].run, dirs[i], err, sizeof err) != 0)
            moe_input_error("moe compare: %s", err);
        summarize(&x[i]);
        x[i].settings = config_to_text(&x[i].r->cfg);
    }
    char *keys = differing_keys(x, n);
    if (csv)
        print_csv(x, n, keys);
    else
        print_table(x, n, keys);
    fflush(stdout);
    if (png) plot(x, n, png);
    free(keys);
    for (int i = 0; i < n; i++) {
        run_free(&x[i].run);
        free(x[i].r);
        free(x[i].settings);
    }
    free(x);
    return 0;
}
