/*
 * lab_fixture.h: inputs and checks that several graders build the same way: a router's softmax
 * scores of random logits, from the engine (labs 01 and 02); norm gains near 1 (labs 05 and 06);
 * and a table of tokens compared under the float32 tolerance rule, its worst element named by
 * token and column (labs 01 and 02; lab_guard.h compares guarded outputs).
 */
#ifndef LAB_FIXTURE_H
#define LAB_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "moe/moe_ops.h"
#include "testutil.h"

#define LAB_FIXTURE_MSG 640 /* the length of a comparison's message */

/* scores (N, E): the engine's softmax of logits drawn uniform in [-scale, scale) from seed */
static inline void lab_softmax_scores(float *scores, int N, int E, float scale,
                                      unsigned long long seed) {
    float *logits = (float *)malloc((size_t)N * E * sizeof(float));
    if (!logits) ck_abort_msg("grader: no memory for %d x %d logits", N, E);
    fill_uniform(logits, (size_t)N * E, scale, seed);
    router_softmax_forward(scores, NULL, logits, N, E);
    free(logits);
}

/* w (C): gains near 1, as a trained norm's: 1 + uniform in [-0.5, 0.5) */
static inline void lab_fill_gain(float *w, int C, unsigned long long seed) {
    fill_uniform(w, (size_t)C, 0.5f, seed);
    for (int c = 0; c < C; c++) w[c] += 1.0f;
}

/* got vs want, both (rows, cols) with a token a row, under the float32 tolerance rule: 1 and the
 * message in msg (LAB_FIXTURE_MSG) "what: token i, col j: got .., want .." for the worst element
 * when they differ, else 0. col names the columns: "expert", "slot", "channel". */
static inline int lab_token_table_differs(char *msg, const float *got, const float *want, int rows,
                                          int cols, const char *col, const char *what) {
    double ex;
    long i = tol_worst(got, want, (size_t)rows * cols, TOL_F32_ATOL, TOL_F32_RTOL, &ex);
    if (i >= 0)
        snprintf(msg, LAB_FIXTURE_MSG, "%s: token %ld, %s %ld: got %.7g, want %.7g", what, i / cols,
                 col, i % cols, (double)got[i], (double)want[i]);
    return i >= 0;
}
/* A macro, so that Check reports the line of the test, not of the helper */
#define EXPECT_TOKEN_TABLE(got, want, rows, cols, col, what)                                       \
    do {                                                                                           \
        char m_[LAB_FIXTURE_MSG];                                                                  \
        if (lab_token_table_differs(m_, (got), (want), (rows), (cols), (col), (what)))             \
            ck_abort_msg("%s", m_);                                                                \
    } while (0)

#endif
