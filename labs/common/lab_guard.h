/*
 * lab_guard.h: guarded outputs and the comparison of tables, for the graders' tests (labs 05,
 * 06 and 07). Each output buffer a task writes has LAB_GUARD_N extra floats after it, set to
 * LAB_GUARD: a write past the end shows, and the test says so before comparing the values.
 */
#ifndef LAB_GUARD_H
#define LAB_GUARD_H

#include <stdio.h>

#include "lab.h"

enum { LAB_GUARD_N = 4 };
#define LAB_GUARD 12345.0f
#define LAB_GUARD_MSG 640 /* the length of a comparison's message */

/* x[0 .. n) = value, then the guards */
static inline void lab_fill_guarded(float *x, size_t n, float value) {
    for (size_t i = 0; i < n; i++) x[i] = value;
    for (size_t i = n; i < n + LAB_GUARD_N; i++) x[i] = LAB_GUARD;
}

/* the guards after x[0 .. n) */
static inline void lab_add_guards(float *x, size_t n) {
    for (size_t i = n; i < n + LAB_GUARD_N; i++) x[i] = LAB_GUARD;
}

/* got vs want, both (rows, cols), under the float32 tolerance rule, and the guards after got
 * intact: 1 and the message in msg (LAB_GUARD_MSG) naming the row and column of the worst
 * element when they differ, else 0. */
static inline int lab_table_differs(char *msg, const float *got, const float *want, int rows,
                                    int cols, const char *name, const char *what) {
    size_t n = (size_t)rows * cols;
    for (size_t g = n; g < n + LAB_GUARD_N; g++)
        if (got[g] != LAB_GUARD) {
            snprintf(msg, LAB_GUARD_MSG,
                     "%s: %s was written past its end (element %zu; it holds %zu)", what, name, g,
                     n);
            return 1;
        }
    double ex;
    long i = tol_worst(got, want, n, TOL_F32_ATOL, TOL_F32_RTOL, &ex);
    if (i < 0) return 0;
    if (rows == 1)
        snprintf(msg, LAB_GUARD_MSG, "%s: %s[%ld]: got %.7g, want %.7g", what, name, i,
                 (double)got[i], (double)want[i]);
    else
        snprintf(msg, LAB_GUARD_MSG, "%s: %s[%ld, %ld]: got %.7g, want %.7g", what, name, i / cols,
                 i % cols, (double)got[i], (double)want[i]);
    return 1;
}
#define EXPECT_TABLE(got, want, rows, cols, name, what)                                            \
    do {                                                                                           \
        char m_[LAB_GUARD_MSG];                                                                    \
        if (lab_table_differs(m_, (got), (want), (rows), (cols), (name), (what)))                  \
            ck_abort_msg("%s", m_);                                                                \
    } while (0)

#endif
