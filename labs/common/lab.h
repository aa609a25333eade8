/*
 * lab.h: what every lab's starter file and grader share.
 *
 *   - lab_todo(): the call inside every unfinished function of a starter file. It prints
 *     "TODO: task N (function) is not implemented" and makes the grader fail that task with a
 *     message saying so, instead of a confusing numerical mismatch.
 *   - LAB_CALL(): how a grader calls the student's code, so that a lab_todo() fails the test.
 *   - lab_main(): the grader's main(). It runs each task (one Check TCase) in a process of its
 *     own under a time and memory limit, counts a task only when the grader's own code in that
 *     process reports its end, and prints one line per task and the score (or CSV lines).
 *     CK_RUN_CASE=task2_topk runs one task.
 *   - lab_main_mpi() and lab_rank_*(): the same for a lab that is an MPI program, whose ranks
 *     cannot fork per task: each task runs as an MPI job of its own.
 *   - lab_main_inline(): every task in the grader's own process (Check's CK_FORK=no), for a
 *     debugger; it guards against nothing.
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

/* The address of a student's function, NULL when the file lacks it: graders declare the lab's
 * functions weak (#pragma weak lab_softmax_forward), so that a missing one fails its task with
 * "function X is not defined in your file" instead of failing the link. */
typedef void (*LabFunction)(void);

/* One graded task: the Check TCase that tests it, the function the student writes and its
 * points (the table in the lab's README.md). */
typedef struct {
    const char *tcase;    /* e.g. "task1_softmax" */
    const char *function; /* e.g. "lab_softmax_forward" */
    LabFunction address;  /* the student's function, NULL when the file does not define it */
    int points;
} LabTask;
#define LAB_TASK(tcase, function, points)                                                          \
    { tcase, #function, (LabFunction)(function), points }

/* The grader's main(): runs `suite` (honouring CK_RUN_CASE), prints each task's result and the
 * failures, and returns 0 when every task that ran passed, 1 otherwise, 2 when CK_RUN_CASE
 * names no task. `title` names the lab; the environment variable LAB_SOLUTION (set by
 * labs/Makefile) names the graded file.
 *
 * Each task runs in a child process of its own (fork), under RLIMIT_CPU and a wall-clock limit
 * of LAB_TIME_LIMIT seconds (10 unless set) and RLIMIT_AS of LAB_MEMORY_LIMIT_MB (2048 unless
 * set; none under AddressSanitizer, which reserves terabytes of address space). The child runs
 * the task's tests with Check in its own process (CK_NOFORK), then the grader's code, never the
 * student's, writes the results and a random number drawn by the parent for this task down a
 * pipe. A task passes only when that report arrives whole with the right number and every test
 * passed: a child that exits, aborts, crashes or runs out of time before the report fails the
 * task, saying which. The student's output is kept apart and shown under the task's line.
 * GRADE_FORMAT=csv prints one CSV line per task instead: task,pass|fail,points,max_points,
 * seconds,message. */
#ifdef CHECK_H
int lab_main(Suite *suite, const char *title, const LabTask *tasks, int ntasks);
int lab_main_inline(Suite *suite, const char *title, const LabTask *tasks, int ntasks);

/* An MPI lab's grader runs in two roles, told apart by lab_rank_task():
 *
 *   - Started by the Makefile, without mpirun, it grades (lab_main_mpi): each task is one job,
 *     `$LAB_MPIRUN -np $LAB_NP SELF --lab-task TASK` (LAB_MPIRUN "mpirun -q" and LAB_NP 4
 *     unless set), its own process group, ended after LAB_TIME_LIMIT seconds and the ranks'
 *     start. A random number drawn for the task goes to the job's stdin, which mpirun hands to
 *     rank 0 alone. The job's stdout carries the report, its stderr the student's output. The
 *     task passes only when rank 0's report ends with that number (after every rank reached
 *     the end) and mpirun exits 0; the report, the score and GRADE_FORMAT=csv are lab_main's.
 *     `self` is argv[0]; `title` gets ", N ranks" appended.
 *   - Run by that job as one rank (argv holds --lab-task TASK), main() calls MPI_Init, then:
 *     rank 0 lab_rank_read_nonce(), every rank the number broadcast and lab_rank_begin()
 *     (the limits; stdout kept for the report, the student's output sent to stderr; a
 *     watchdog of LAB_TIME_LIMIT seconds and crash handlers that report before the rank
 *     dies), lab_rank_run() (rank 0 reports the results, which its tests agree on over every
 *     rank), a barrier, lab_rank_end() on rank 0, MPI_Finalize. */
int lab_main_mpi(const char *self, const char *title, const LabTask *tasks, int ntasks);
#endif
#define LAB_NONCE_SIZE 33 /* 32 hex digits and the end */
const char *lab_rank_task(int argc, char **argv); /* the task of --lab-task, NULL for none */
void lab_rank_read_nonce(char *nonce /* LAB_NONCE_SIZE */);
void lab_rank_begin(int rank, const char *nonce);
void lab_rank_end(void);
#ifdef CHECK_H
void lab_rank_run(Suite *suite, const char *tcase, int report);

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
