#!/usr/bin/env bash
# csv_close.sh: csv_close A B [TOL], sourced by the scripts that compare two runs on two
# backends (tests/test_backends.sh, tests/gpu/run_device.sh): the columns 2.. of two train.csv
# files agree within a relative TOL (default 2e-3; tok_per_s, the speed, left out), row by
# row, and they have the same rows. It prints every difference over TOL and, last, the largest
# relative difference found; the status is 1 when any was over TOL.
csv_close() {
    awk -F, -v tol="${3:-2e-3}" '
        NR == FNR { for (i = 2; i <= NF; i++) a[FNR, i] = $i; n = FNR; next }
        FNR == 1 { for (i = 1; i <= NF; i++) if ($i == "tok_per_s") skip = i; next }
        { rows++; for (i = 2; i <= NF; i++) { if (i == skip) continue
            x = a[FNR, i]; y = $i; if (x == "" && y == "") continue
            d = x - y; if (d < 0) d = -d; s = (x < 0 ? -x : x); if (s < 1) s = 1
            if (d / s > worst) { worst = d / s; at = "row " FNR " column " i }
            if (d > tol * s) { printf "row %d column %d: %s against %s\n", FNR, i, x, y; bad = 1 } } }
        END { if (rows + 1 != n) { print "rows differ: " n - 1 " against " rows; bad = 1 }
              printf "largest relative difference %.3g%s\n", worst, at == "" ? "" : " (" at ")"
              exit bad }' "$1" "$2"
}
