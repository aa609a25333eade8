/*
 * csv_table.c: a CSV file of numbers with a header line, read whole (csv_table.h).
 */
#include "io/csv_table.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"
#include "io/files.h"

static const FileSpec CSV_SPEC = {
    .what = "CSV file",
    .hint = "moe doctor reads the CSV files `moe train` writes into a run directory",
    .in_dir = NULL,
    .max_bytes = (uint64_t)1 << 32, /* 4 GiB: far beyond any run's router.csv */
};

void csv_table_free(CsvTable *t) {
    for (int i = 0; i < t->n_col; i++) free(t->names[i]);
    free(t->names);
    free(t->v);
    memset(t, 0, sizeof *t);
}

int csv_col(const CsvTable *t, const char *name) {
    for (int i = 0; i < t->n_col; i++)
        if (strcmp(t->names[i], name) == 0) return i;
    return -1;
}

/* the header's names, split at commas (no quoting: moe.c's files have none) */
static int read_header(CsvTable *t, char *line, char *err, int errlen) {
    line[strcspn(line, "\r\n")] = '\0';
    if (!line[0])
        return set_error(err, errlen, "%s: the first line is empty, not a header", t->path);
    int n = 1;
    for (const char *p = line; *p; p++) n += *p == ',';
    t->names = (char **)calloc_check((size_t)n, sizeof(char *));
    char *tok = line;
    for (int i = 0; i < n; i++) {
        char *comma = strchr(tok, ',');
        if (comma) *comma = '\0';
        t->names[i] = strdup(tok);
        if (!t->names[i]) moe_fatal("out of memory");
        t->n_col = i + 1;
        tok = comma ? comma + 1 : tok + strlen(tok);
    }
    return 0;
}

int csv_table_read(CsvTable *t, const char *path, char *err, int errlen) {
    memset(t, 0, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s", path);
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return 0;
    uint64_t size = 0;
    FILE *f = open_regular(path, &CSV_SPEC, &size, err, errlen);
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0, rows_cap = 0;
    ssize_t len = getline(&line, &cap, f);
    int rc = 0;
    if (len <= 0) {
        rc = set_error(err, errlen, "%s is empty: no header line; the run wrote nothing to it",
                       path);
        goto done;
    }
    if ((rc = read_header(t, line, err, errlen)) != 0) goto done;
    for (long lineno = 2; (len = getline(&line, &cap, f)) > 0; lineno++) {
        if (line[len - 1] != '\n') break; /* a torn last line: the run was killed mid-write */
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0]) continue; /* a blank line, as a resume after a torn one may leave */
        if ((size_t)t->n_row == rows_cap) {
            rows_cap = rows_cap ? 2 * rows_cap : 256;
            double *grown = (double *)realloc(t->v, rows_cap * (size_t)t->n_col * sizeof(double));
            if (!grown) moe_fatal("out of memory reading %s", path);
            t->v = grown;
        }
        double *row = t->v + (size_t)t->n_row * t->n_col;
        const char *p = line;
        int c = 0;
        for (; c < t->n_col; c++) {
            const char *end = p + strcspn(p, ",");
            if (end == p) {
                row[c] = NAN; /* an empty field: a value the step did not have */
            } else {
                char *stop = NULL;
                errno = 0;
                row[c] = strtod(p, &stop);
                if (stop != end) {
                    rc = set_error(err, errlen,
                                   "%s:%ld: column '%s' holds '%.*s', which is not a number; "
                                   "the file is damaged or was not written by moe train",
                                   path, lineno, t->names[c], (int)(end - p), p);
                    goto done;
                }
            }
            if (!*end) {
                c++;
                break;
            }
            p = end + 1;
            if (c == t->n_col - 1) {
                rc = set_error(err, errlen,
                               "%s:%ld: more fields than the header's %d columns; the file is "
                               "damaged or was not written by moe train",
                               path, lineno, t->n_col);
                goto done;
            }
        }
        for (; c < t->n_col; c++) row[c] = NAN;
        t->n_row++;
    }
done:
    free(line);
    fclose(f);
    if (rc != 0) {
        csv_table_free(t);
        return -1;
    }
    return 1;
}
