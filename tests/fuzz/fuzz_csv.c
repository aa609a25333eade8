/* fuzz_csv.c: csv_table_read, the reader of a run's CSV files (moe doctor). A table it accepts
 * must be whole: a name per column, n_row x n_col values, every column found by its name; a
 * refusal must say why. */
#include <string.h>

#include "fuzz.h"
#include "io/csv_table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    CsvTable t;
    char err[1024] = "";
    const int rc = csv_table_read(&t, fuzz_file(data, size), err, sizeof err);
    if (rc < 0) {
        if (!err[0]) abort();
        return 0;
    }
    if (rc == 0 || t.n_col < 1 || t.n_row < 0) abort();
    volatile double sum = 0.0;
    for (int r = 0; r < t.n_row; r++)
        for (int c = 0; c < t.n_col; c++) sum += csv_at(&t, r, c);
    for (int c = 0; c < t.n_col; c++) {
        const int found = csv_col(&t, t.names[c]);
        if (found < 0 || found > c || strcmp(t.names[found], t.names[c]) != 0) abort();
    }
    csv_table_free(&t);
    return 0;
}
