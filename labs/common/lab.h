/*
 * lab.h: what every lab's starter file and grader share.
 *
 *   - lab_todo(): the call inside every unfinished function of a starter file. It prints
 *     "TODO: task N (function) is not implemented" and makes the grader fail that task with a
 *     message saying so, instead of a confusing numerical mismatch.
 *   - LAB_CALL(): how a grader calls the student's code, so that a lab_todo() fails the test.
 *   - lab_main(): the grader's main(). It runs the Check suite (one TCase per task, so
 *     CK_RUN_CASE=task2_topk runs one task) and prints one line per task.
 */
#ifndef LAB_H
#define LAB_H

/* Marks task `task` (implemented by `function`) as not done. Remove the call when you write the
 * function. */
void lab_todo(int task, const char *function);

/* the task of the last lab_todo() call since LAB_CALL started, 0 for none (graders only) */
extern int lab_todo_task;
extern const char *lab_todo_function;

/* Run one call into the student's code; fail the test if it reached a lab_todo() stub. */
#define LAB_CALL(call)                                                                             \
    do {                                                                                           \
        lab_todo_task = 0;                                                                         \
        call;                                                                                      \
        if (lab_todo_task)                                                                         \
            ck_abort_msg("task %d (%s) is not implemented yet: write it in your file, in place "   \
                         "of the lab_todo() call",                                                 \
                         lab_todo_task, lab_todo_function);                                        \
    } while (0)

/* One graded task: the Check TCase that tests it and the function the student writes. */
typedef struct {
    const char *tcase;    /* e.g. "task1_softmax" */
    const char *function; /* e.g. "lab_softmax_forward" */
} LabTask;

/* The grader's main(): runs `suite` (honouring CK_RUN_CASE), prints each task's result and the
 * failures, and returns 0 when every task that ran passed, 1 otherwise, 2 when CK_RUN_CASE
 * names no task. `title` names the lab; the environment variable LAB_SOLUTION (set by
 * labs/Makefile) names the graded file. */
#ifdef CHECK_H
int lab_main(Suite *suite, const char *title, const LabTask *tasks, int ntasks);

/* A grader's check of one number under the project's tolerance rule (tests/testutil.h):
 * |got - want| <= TOL_F32_ATOL + TOL_F32_RTOL |want|, else the test fails naming both. */
#define EXPECT_VALUE(got, want, what)                                                              \
    do {                                                                                           \
        float g_ = (got), w_ = (want);                                                             \
        double e_;                                                                                 \
        if (tol_worst(&g_, &w_, 1, TOL_F32_ATOL, TOL_F32_RTOL, &e_) >= 0)                          \
            ck_abort_msg("%s: got %.7g, want %.7g", (what), (double)g_, (double)w_);               \
    } while (0)
#endif

#endif
