/*
 * csv_table.c: a CSV file of numbers with a header line, read whole (csv_table.h).
 */
#include "io/csv_table.h"

#include <ctype.h>
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
    free(t->empty);
    free(t->line);
    memset(t, 0, sizeof *t);
}

int csv_col(const CsvTable *t, const char *name) {
    for (int i = 0; i < t->n_col; i++)
        if (strcmp(t->names[i], name) == 0) return i;
    return -1;
}

/* a column name as moe train writes them: letters, digits, '_' and '.' */
static int is_name(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '.') return 0;
    return 1;
}

/* the header's names, split at commas (no quoting: moe.c's files have none) */
static int read_header(CsvTable *t, char *line, ssize_t len, char *err, int errlen) {
    char shown[128];
    if (line[len - 1] != '\n' || memchr(line, '\0', (size_t)len))
        return set_error(err, errlen,
                         "%s:1: the header '%s' is not a line of column names; the file is "
                         "damaged or was not written by moe train",
                         t->path, escape_text(shown, sizeof shown, line, (size_t)len));
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
        if (!is_name(tok))
            return set_error(err, errlen,
                             "%s:1: column %d of the header is '%s', not a column name; the "
                             "file is damaged or was not written by moe train",
                             t->path, i + 1, escape_text(shown, sizeof shown, tok, strlen(tok)));
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
    if ((rc = read_header(t, line, len, err, errlen)) != 0) goto done;
    for (long lineno = 2; (len = getline(&line, &cap, f)) > 0; lineno++) {
        if (line[len - 1] != '\n') break; /* a torn last line: the run was killed mid-write */
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0]) continue; /* a blank line, as a resume after a torn one may leave */
        if ((size_t)t->n_row == rows_cap) {
            rows_cap = rows_cap ? 2 * rows_cap : 256;
            t->v = (double *)realloc_check(t->v, rows_cap * (size_t)t->n_col * sizeof(double));
            t->empty = (unsigned char *)realloc_check(t->empty, rows_cap * (size_t)t->n_col);
            t->line = (long *)realloc_check(t->line, rows_cap * sizeof(long));
        }
        double *row = t->v + (size_t)t->n_row * t->n_col;
        unsigned char *empty = t->empty + (size_t)t->n_row * t->n_col;
        t->line[t->n_row] = lineno;
        const char *p = line;
        int c = 0;
        for (; c < t->n_col; c++) {
            const char *end = p + strcspn(p, ",");
            empty[c] = end == p;
            if (end == p) {
                row[c] = NAN; /* an empty field: a value the step did not have */
            } else {
                char *stop = NULL;
                errno = 0;
                row[c] = strtod(p, &stop);
                if (stop != end) {
                    char shown[128];
                    rc = set_error(err, errlen,
                                   "%s:%ld: column '%s' holds '%s', which is not a number; "
                                   "the file is damaged or was not written by moe train",
                                   path, lineno, t->names[c],
                                   escape_text(shown, sizeof shown, p, (size_t)(end - p)));
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
        for (; c < t->n_col; c++) row[c] = NAN, empty[c] = 1;
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
