/*
 * csv_table.h: a run directory's CSV files (train.csv, router.csv, ...) read back as numbers,
 * for `moe doctor`. The first line names the columns; every later line is one row of numbers,
 * an empty field standing for a missing value (NAN). A last line without its newline (a run
 * killed in the middle of a write) is dropped, as a resume drops it. Anything else that is
 * not a number (a field that is text, a row with too many fields, a header name that is not a
 * word) is refused with the file, line and column, so a damaged file is named instead of
 * misread; the text it quotes is escaped (escape_text), never printed raw.
 */
#ifndef MOE_IO_CSV_TABLE_H
#define MOE_IO_CSV_TABLE_H

#include <stddef.h>

typedef struct {
    char path[1024];
    int n_col, n_row;
    char **names;         /* (n_col) */
    double *v;            /* (n_row, n_col) row-major; NAN where the field was empty or missing */
    unsigned char *empty; /* (n_row, n_col) 1 where the field was empty or missing: a written
                           * "nan" (a diverged step) is a value, an empty field is none */
    long *line;           /* (n_row) the file's line of each row, for messages */
} CsvTable;

/* Read path into t. Returns 1 when read, 0 when the file does not exist (t left empty), -1
 * with a message in err when it cannot be read or is not a table of numbers. Rows with fewer
 * fields than the header get NAN in the rest (a file from before a column was added). */
int csv_table_read(CsvTable *t, const char *path, char *err, int errlen);
void csv_table_free(CsvTable *t);
/* The index of column name, or -1. */
int csv_col(const CsvTable *t, const char *name);
static inline double csv_at(const CsvTable *t, int row, int col) {
    return t->v[(size_t)row * t->n_col + col];
}

#endif
