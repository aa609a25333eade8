/* lab_task.c: a task's own process (lab_task.h): the stubs, the limits, the tests and their
 * report, in a forked child or in each rank of an MPI job (lab.h, lab_rank_*). */
#include "lab_task.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifdef LAB_ASAN
#include <sanitizer/lsan_interface.h>
#endif

_Static_assert(LAB_NONCE_SIZE == NONCE_HEX + 1, "lab.h's LAB_NONCE_SIZE holds a nonce");

int lab_todo_task = 0;
const char *lab_todo_function = "";

/* in a task's child process (lab_main): the stubs reached, reported to the parent, which prints
 * their TODO lines once */
static int in_task_child = 0;
static int todo_tasks[64];
static const char *todo_functions[64];
static int ntodo = 0;

void lab_todo(int task, const char *function) {
    /* once per task and process: without fork mode every test shares one process */
    static unsigned long long said;
    unsigned long long bit = 1ull << (task & 63);
    if (!(said & bit)) {
        if (!in_task_child)
            fprintf(stderr, "TODO: task %d (%s) is not implemented\n", task, function);
        else if (ntodo < 64) {
            todo_tasks[ntodo] = task;
            todo_functions[ntodo++] = function;
        }
    }
    said |= bit;
    if (!lab_todo_task) {
        lab_todo_task = task;
        lab_todo_function = function;
    }
}

const char *lab_base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* in a task's process: where its report goes, and the task's number */
static int report_fd = -1;
static char report_nonce[NONCE_HEX + 1];

static void write_all(int fd, const char *p, size_t left) {
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(3);
        p += n;
        left -= (size_t)n;
    }
}

static void send_record(char kind, int a, int b, const char *where, const char *text) {
    char line[RECORD_TEXT + 200], w[64];
    snprintf(w, sizeof w, "%s", where && *where ? where : "-");
    for (char *c = w; *c; c++)
        if (*c == ' ' || *c == '\n' || *c == '\r') *c = '_';
    int n = snprintf(line, sizeof line, "@%s %c %d %d %s ", report_nonce, kind, a, b, w);
    for (const char *c = text ? text : ""; *c && n < (int)sizeof line - 1; c++)
        line[n++] = *c == '\n' || *c == '\r' ? ' ' : *c;
    line[n++] = '\n';
    write_all(report_fd, line, (size_t)n);
}

int lab_parse_record(const char *line, const char *nonce, Record *r) {
    size_t hex = 0;
    while (hex < NONCE_HEX && line[0] == '@' && strchr("0123456789abcdef", line[1 + hex]) &&
           line[1 + hex])
        hex++;
    if (line[0] != '@' || hex != NONCE_HEX || line[1 + NONCE_HEX] != ' ') return 0;
    int at = 0;
    memset(r, 0, sizeof *r);
    if (sscanf(line + 2 + NONCE_HEX, "%c %d %d %63s %n", &r->kind, &r->a, &r->b, r->where, &at) <
            4 ||
        at == 0)
        return 0;
    if (strncmp(line + 1, nonce, NONCE_HEX) != 0) return r->kind == 'E' ? -1 : 0;
    snprintf(r->text, sizeof r->text, "%s", line + 2 + NONCE_HEX + at);
    size_t len = strlen(r->text);
    if (len > 0 && r->text[len - 1] == '\n') r->text[len - 1] = '\0';
    return 1;
}

long lab_env_long(const char *name, long fallback, long most, const char *unit) {
    const char *v = getenv(name);
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v) return fallback;
    if (*end || x <= 0 || x > most) {
        fprintf(stderr, "grader: %s=%s is not a whole number of %s from 1 to %ld (unset, %ld)\n",
                name, v, unit, most, fallback);
        return -1;
    }
    return x;
}

Limits lab_read_limits(void) {
    Limits lim = {(int)lab_env_long("LAB_TIME_LIMIT", 10, 3600, "seconds"),
                  lab_env_long("LAB_MEMORY_LIMIT_MB", 2048, 1 << 20, "MiB"), 0};
#ifdef LAB_ASAN
    if (lim.memory_mb > 0)
        lim.memory_mb = 0; /* AddressSanitizer's shadow memory needs terabytes of address space */
#endif
    return lim;
}

/* A task's process limits itself, before any of the student's code runs: CPU time, no core
 * file, no more than OUTPUT_LIMIT_MB written (the student's output goes to a temporary file: a
 * print in an endless loop must not fill the disk) and the address space. */
static void set_limits(const Limits *lim) {
    struct rlimit cpu = {(rlim_t)lim->seconds, (rlim_t)lim->seconds + 1};
    setrlimit(RLIMIT_CPU, &cpu);
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    struct rlimit fsize = {(rlim_t)OUTPUT_LIMIT_MB << 20, (rlim_t)OUTPUT_LIMIT_MB << 20};
    setrlimit(RLIMIT_FSIZE, &fsize);
    if (lim->memory_mb > 0) {
        struct rlimit as = {(rlim_t)lim->memory_mb << 20, (rlim_t)lim->memory_mb << 20};
        setrlimit(RLIMIT_AS, &as);
    }
}

/* Runs the tests of `tcase` with Check in this process and, when `report` is set, sends their
 * results, the leaks and the stubs reached. */
static void run_tests(Suite *suite, const char *tcase, int report) {
    in_task_child = 1;
    unsetenv("CK_RUN_SUITE");
    unsetenv("CK_RUN_CASE");
    unsetenv("CK_INCLUDE_TAGS");
    unsetenv("CK_EXCLUDE_TAGS");
    SRunner *sr = srunner_create(suite);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run(sr, NULL, tcase, CK_SILENT);
    fflush(stdout);
    fflush(stderr);
    if (!report) return;

    int nrun = srunner_ntests_run(sr);
    TestResult **res = srunner_results(sr);
    for (int i = 0; i < nrun; i++)
        send_record('R', tr_rtype(res[i]), tr_lno(res[i]),
                    lab_base_name(tr_lfile(res[i]) ? tr_lfile(res[i]) : ""),
                    tr_msg(res[i]) ? tr_msg(res[i]) : "");
#ifdef LAB_ASAN
    /* _exit() skips LeakSanitizer's check at exit: run it here */
    if (__lsan_do_recoverable_leak_check())
        send_record('L', 0, 0, "",
                    "memory leaked: LeakSanitizer's report, in your output below, says where");
#endif
    for (int i = 0; i < ntodo; i++) send_record('T', todo_tasks[i], 0, "", todo_functions[i]);
}

/* Only the grader's code writes to `report`, and only after the tests returned. */
void lab_run_child(Suite *suite, const LabTask *task, int report, int output, const char *nonce,
                   const Limits *lim) {
    setpgid(0, 0); /* one group, killed whole by the parent: a stray grandchild goes with it */
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    dup2(output, 1);
    dup2(output, 2);
    set_limits(lim);
    report_fd = report;
    snprintf(report_nonce, sizeof report_nonce, "%s", nonce);
    run_tests(suite, task->tcase, 1);
    send_record('E', 0, 0, "", "");
    _exit(0); /* no atexit handler of the student's runs after the report */
}

/* ---- the ranks of an MPI lab's task (lab_rank_*: lab.h) ---------------------------------------- */

static int rank_me = 0;
static Limits rank_limits;

const char *lab_rank_task(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--lab-task") == 0) return argv[i + 1];
    return NULL;
}

void lab_rank_read_nonce(char *nonce) {
    char line[NONCE_HEX + 8] = "";
    if (!fgets(line, sizeof line, stdin)) line[0] = '\0';
    line[strcspn(line, "\n")] = '\0';
    line[NONCE_HEX] = '\0';
    memcpy(nonce, line, NONCE_HEX + 1);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
}

/* The watchdog, a thread of its own (Check takes SIGALRM for itself): the task has not ended
 * in its time, a rank waiting for a call another never makes or a loop that never ends. And a
 * crash, said before the signal ends the rank as it would have. Each waits a little after its
 * record: once one rank ends, mpirun ends the others and may drop what is still on its way;
 * the grader ends the job as soon as the record comes. */
static volatile sig_atomic_t rank_done;
static void *rank_watchdog(void *arg) {
    (void)arg;
    struct timespec left = {rank_limits.seconds, 0};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
    if (rank_done) return NULL;
    send_record('W', rank_me, rank_limits.seconds, "", "");
    sleep(2);
    _exit(3);
}
static void on_rank_crash(int sig) {
    send_record('C', rank_me, sig, "", "");
    sleep(2);
    signal(sig, SIG_DFL);
    raise(sig);
}

void lab_rank_begin(int rank, const char *nonce) {
    rank_me = rank;
    snprintf(report_nonce, sizeof report_nonce, "%s", nonce);
    /* the report goes to stdout as it is now (mpirun's), the student's output to stderr */
    fflush(stdout);
    report_fd = dup(1);
    if (report_fd < 0) report_fd = 1;
    dup2(2, 1);
    rank_limits = lab_read_limits();
    if (rank_limits.seconds < 0) rank_limits.seconds = 10;
    if (rank_limits.memory_mb < 0) rank_limits.memory_mb = 0;
    /* the CPU limit a little past the watchdog's: a rank waiting in MPI spins */
    Limits cpu = rank_limits;
    cpu.seconds += 2;
    set_limits(&cpu);
    pthread_t watchdog;
    if (pthread_create(&watchdog, NULL, rank_watchdog, NULL) == 0) pthread_detach(watchdog);
    /* not the faults under AddressSanitizer, whose own report says more */
    const int crashes[] = {SIGABRT, SIGXCPU, SIGXFSZ,
#ifndef LAB_ASAN
                           SIGSEGV, SIGBUS,  SIGFPE,  SIGILL
#endif
    };
    for (size_t i = 0; i < sizeof crashes / sizeof crashes[0]; i++) signal(crashes[i], on_rank_crash);
}

void lab_rank_run(Suite *suite, const char *tcase, int report) {
    run_tests(suite, tcase, report);
}

void lab_rank_end(void) {
    rank_done = 1;
    send_record('E', 0, 0, "", "");
}

/* ---- every task in this process (CK_FORK=no, for a debugger) ----------------------------- */

/* A crash here ends the grader: that is the point, under a debugger. */
int lab_main_inline(Suite *suite, const char *title, const LabTask *tasks, int ntasks) {
    const char *file = getenv("LAB_SOLUTION");
    printf("Grading %s (%s)\n", file ? file : "the linked solution", title);
    fflush(stdout);

    SRunner *sr = srunner_create(suite);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_SILENT);
    fflush(stderr);

    int nrun = srunner_ntests_run(sr);
    TestResult **res = srunner_results(sr);
    if (nrun == 0) {
        const char *want = getenv("CK_RUN_CASE");
        fprintf(stderr, "no task named '%s'. The tasks are:", want ? want : "");
        for (int t = 0; t < ntasks; t++) fprintf(stderr, " %s", tasks[t].tcase);
        fprintf(stderr, "\n");
        free(res);
        srunner_free(sr);
        return 2;
    }

    int tasks_run = 0, tasks_passed = 0, points = 0, max_points = 0;
    char todo_list[1024] = "";
    printf("\n");
    for (int t = 0; t < ntasks; t++) {
        int run = 0, passed = 0, todo = 0;
        for (int i = 0; i < nrun; i++) {
            if (strcmp(tr_tcname(res[i]), tasks[t].tcase) != 0) continue;
            run++;
            if (tr_rtype(res[i]) == CK_PASS)
                passed++;
            else if (strstr(tr_msg(res[i]), "is not implemented yet"))
                todo++;
        }
        if (run == 0) continue; /* not selected by CK_RUN_CASE */
        tasks_run++;
        tasks_passed += passed == run;
        max_points += tasks[t].points;
        points += passed == run ? tasks[t].points : 0;
        printf("  %-4s  %-16s %-22s %d/%d checks pass%s\n", passed == run ? "ok" : "FAIL",
               tasks[t].tcase, tasks[t].function, passed, run,
               todo > 0 && todo == run - passed ? ": not implemented yet" : "");
        if (todo > 0 && todo == run - passed) {
            size_t len = strlen(todo_list);
            snprintf(todo_list + len, sizeof todo_list - len, " %s", tasks[t].tcase);
            continue; /* one line says it all */
        }
        for (int i = 0; i < nrun; i++) {
            if (strcmp(tr_tcname(res[i]), tasks[t].tcase) != 0 || tr_rtype(res[i]) == CK_PASS)
                continue;
            /* the test's line in grader.c; a shared helper's line would not help */
            const char *where = lab_base_name(tr_lfile(res[i]));
            if (strcmp(where, "grader.c") == 0)
                printf("          grader.c:%d: ", tr_lno(res[i]));
            else
                printf("          ");
            printf("%s\n", tr_msg(res[i]));
        }
    }
    printf("\nTasks passed: %d of %d.", tasks_passed, tasks_run);
    if (todo_list[0]) printf(" Not implemented yet:%s.", todo_list);
    printf("\nScore: %d of %d points.\n", points, max_points);
    free(res);
    srunner_free(sr);
    return tasks_passed == tasks_run ? 0 : 1;
}
