/*
 * testutil.h: what every Check suite shares.
 *
 *   - ONE tolerance rule for every comparison: |got - want| <= atol + rtol * |want|.
 *     expect_close_arrays() fails the test at the worst element and names it.
 *   - A finite-difference gradient check for any scalar function of a float vector.
 *   - A scratch directory per test: tmp_dir_make() and tmp_dir_remove() (a checked fixture's
 *     two halves), tmp_path() for a file inside it.
 *   - TEST_MAIN(suite_fn): a main() that runs one suite and exits non-zero on any failure.
 *
 * Tolerances for float32: a forward op against a reference, TOL_F32_ATOL / TOL_F32_RTOL;
 * a gradient against central finite differences (eps = 1e-3 in float32 loses about three
 * digits), TOL_GRAD_ATOL / TOL_GRAD_RTOL.
 */
#ifndef MOE_TESTUTIL_H
#define MOE_TESTUTIL_H

#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define TOL_F32_ATOL 1e-5f
#define TOL_F32_RTOL 1e-4f
#define TOL_GRAD_ATOL 2e-3f
#define TOL_GRAD_RTOL 2e-2f

/* Index of the worst violation of the tolerance rule, or -1 when all elements pass.
 * *excess gets the worst |got - want| - (atol + rtol |want|). NaN counts as a violation. */
long tol_worst(const float *got, const float *want, size_t n, float atol, float rtol,
               double *excess);

#define expect_close_arrays(got, want, n, atol, rtol, what)                                        \
    do {                                                                                           \
        double ex_;                                                                                \
        long i_ = tol_worst((got), (want), (n), (atol), (rtol), &ex_);                             \
        ck_assert_msg(i_ < 0, "%s: element %ld: got %.7g want %.7g (atol %g rtol %g)", (what), i_, \
                      i_ < 0 ? 0.0 : (double)(got)[i_ < 0 ? 0 : i_],                               \
                      i_ < 0 ? 0.0 : (double)(want)[i_ < 0 ? 0 : i_], (double)(atol),              \
                      (double)(rtol));                                                             \
    } while (0)

#define expect_close(got, want, atol, rtol, what)                                                  \
    do {                                                                                           \
        float g_ = (float)(got), w_ = (float)(want);                                               \
        expect_close_arrays(&g_, &w_, 1, (atol), (rtol), (what));                                  \
    } while (0)

/* Forward values against hand-computed ones: the float32 tolerance above. */
#define CLOSE(got, want, what) expect_close((got), (want), TOL_F32_ATOL, TOL_F32_RTOL, (what))
#define CLOSE_ARRAYS(got, want, n, what)                                                           \
    expect_close_arrays((got), (want), (n), TOL_F32_ATOL, TOL_F32_RTOL, (what))

/* sum_i a[i] b[i] in double; max_i |a[i]|. */
double dot_d(const float *a, const float *b, size_t n);
float max_abs(const float *a, size_t n);

/* Scalar function of the n floats at x (x may be read and temporarily changed by the check). */
typedef double (*ScalarFn)(void *ctx);

/* Central finite differences of fn with respect to x[0..n) (every element when n <= max_probe,
 * otherwise max_probe elements spread evenly), compared with analytic (n) under the
 * gradient tolerance. Fails the test (naming `what`) at the first element out of tolerance. */
void gradcheck(ScalarFn fn, void *ctx, float *x, const float *analytic, size_t n, float eps,
               size_t max_probe, const char *what);

/* Fill with uniform values in [-scale, scale) from a fixed seed. */
/* A whole file's bytes (n its size, one NUL byte after them), or write n bytes as a file; either
 * fails the test when the file cannot be read or written. */
uint8_t *slurp(const char *path, long *n);
void spit(const char *path, const void *b, long n);

void fill_uniform(float *x, size_t n, float scale, unsigned long long seed);
/* n input and n target tokens, uniform over the 256 byte values, from seed */
void random_tokens(int *inputs, int *targets, int n, unsigned long long seed);

/* A fresh directory /tmp/moe_test_TAG_XXXXXX for the running test (Check runs each test in its
 * own process, so one at a time per process); tmp_dir_remove() deletes it with everything
 * under it. tmp_path("name") is a path inside it, in one of 4 rotating buffers (so up to 4
 * paths can be held at once). */
const char *tmp_dir_make(const char *tag);
void tmp_dir_remove(void);
const char *tmp_path(const char *name);

#define TEST_MAIN(suite_fn)                                                                        \
    int main(void) {                                                                               \
        /* Check's 4 s default fails gradient checks on a loaded machine or under ASan */ \
        setenv("CK_DEFAULT_TIMEOUT", "300", 0);                                                    \
        SRunner *sr_ = srunner_create(suite_fn());                                                 \
        srunner_run_all(sr_, CK_NORMAL);                                                           \
        int failed_ = srunner_ntests_failed(sr_);                                                  \
        srunner_free(sr_);                                                                         \
        return failed_ == 0 ? 0 : 1;                                                               \
    }

#endif
