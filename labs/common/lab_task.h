/*
 * lab_task.h: what the two halves of a grader share (labs/common only; graders include lab.h).
 *
 *   lab_task.c  a task's own process: the stubs' record, the limits, the tests run with Check
 *               and their report (a forked child, or each rank of an MPI job)
 *   lab.c       the grader: it starts each task, reads its report and prints the score
 */
#ifndef LAB_TASK_H
#define LAB_TASK_H

#include <check.h>

#include "lab.h"

#if defined(__SANITIZE_ADDRESS__)
#define LAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LAB_ASAN 1
#endif
#endif

/* A task reports through lines of text, each "@NONCE KIND A B WHERE TEXT":
 *   R  a test's result: A is Check's result type, B the line of a failure in file WHERE
 *   L  memory leaked (LeakSanitizer)          T  a stub reached: A is its task
 *   W  the watchdog of an MPI rank: A is the rank, B the seconds it waited
 *   C  a crash in an MPI rank: A is the rank, B the signal
 *   E  the end: every test ran and reported
 * NONCE is a random number the grader draws for the task and no one else knows: the student's
 * code can write lines too (in an MPI job its output and the reports share mpirun's streams),
 * but none the grader takes for its own. WHERE has no spaces ("-" for none); TEXT runs to the
 * end of the line, its line breaks made spaces. Each line goes out in one write() of less than
 * PIPE_BUF bytes, so the lines of the ranks of a job never mix. */
#define NONCE_HEX 32
#define RECORD_TEXT 1000
#define OUTPUT_LIMIT_MB 64 /* the most a task may write, its output included */
typedef struct {
    char kind;
    int a, b;
    char where[64];
    char text[RECORD_TEXT];
} Record;

/* 1 when `line` is a record of the task with `nonce` (in *r), -1 when it has the form of an end
 * record with another number, 0 otherwise */
int lab_parse_record(const char *line, const char *nonce, Record *r);

typedef struct {
    int seconds;    /* CPU and wall-clock limit of one task */
    long memory_mb; /* address-space limit, 0 for none */
    int csv;
} Limits;

/* a positive whole number from the environment, `fallback` when unset, -1 (said) when bad */
long lab_env_long(const char *name, long fallback, long most, const char *unit);
/* LAB_TIME_LIMIT and LAB_MEMORY_LIMIT_MB; seconds or memory_mb -1 when bad */
Limits lab_read_limits(void);

/* The child of a task (lab_main), never returns: limits, the student's output to `output`, the
 * tests of task->tcase, the report to `report` carrying `nonce`. */
void lab_run_child(Suite *suite, const LabTask *task, int report, int output, const char *nonce,
                   const Limits *lim);

/* the last part of a path */
const char *lab_base_name(const char *path);

#endif
