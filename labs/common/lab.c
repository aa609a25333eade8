/* lab.c: see lab.h. */
#include <check.h>

#include "lab.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <dirent.h>
#include <sys/prctl.h>
#endif
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define LAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LAB_ASAN 1
#endif
#endif
#ifdef LAB_ASAN
#include <sanitizer/lsan_interface.h>
#endif

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

/* The tests run in child processes (Check's fork mode), each of which prints its stubs' TODO
 * lines: replay what they wrote to stderr with every repeated TODO line shown once. */
static void replay_stderr(FILE *f) {
    char line[4096];
    char *seen[64];
    int nseen = 0;
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        int dup = 0;
        if (strncmp(line, "TODO: ", 6) == 0) {
            for (int i = 0; i < nseen && !dup; i++) dup = strcmp(seen[i], line) == 0;
            if (!dup && nseen < 64) seen[nseen++] = strdup(line);
        }
        if (!dup) fputs(line, stderr);
    }
    for (int i = 0; i < nseen; i++) free(seen[i]);
    fflush(stderr);
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int lab_main_inline(Suite *suite, const char *title, const LabTask *tasks, int ntasks) {
    /* Every test takes milliseconds, also under AddressSanitizer: 10 s per test is plenty,
     * and an endless loop in the student's code ends soon in a clear "timed out". */
    setenv("CK_DEFAULT_TIMEOUT", "10", 0);
    const char *file = getenv("LAB_SOLUTION");
    printf("Grading %s (%s)\n", file ? file : "the linked solution", title);
    fflush(stdout); /* or every forked test would print the buffered text again */

    /* With CK_FORK=no (to run under a debugger) a crash ends the grader itself, and what
     * was captured would be lost with it: leave stderr alone then. */
    const char *fork_mode = getenv("CK_FORK");
    FILE *err = fork_mode && strcmp(fork_mode, "no") == 0 ? NULL : tmpfile();
    int saved = err ? dup(2) : -1;
    fflush(stderr);
    if (saved >= 0) dup2(fileno(err), 2);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_SILENT);
    fflush(stderr);
    if (saved >= 0) {
        dup2(saved, 2);
        close(saved);
        replay_stderr(err);
    }
    if (err) fclose(err);

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
            const char *where = base_name(tr_lfile(res[i]));
            if (strcmp(where, "grader.c") == 0)
                printf("          grader.c:%d: ", tr_lno(res[i]));
            else
                printf("          ");
            if (tr_rtype(res[i]) != CK_ERROR)
                printf("%s\n", tr_msg(res[i]));
            else if (strstr(tr_msg(res[i]), "timeout"))
                printf("timed out after %s s: an endless loop?\n", getenv("CK_DEFAULT_TIMEOUT"));
            else /* a signal, or an exit() inside the student's code */
                printf("crashed: %s (to find where: README.md, \"When the grader crashes\")\n",
                       tr_msg(res[i]));
        }
    }
    printf("\nTasks passed: %d of %d.", tasks_passed, tasks_run);
    if (todo_list[0]) printf(" Not implemented yet:%s.", todo_list);
    printf("\nScore: %d of %d points.\n", points, max_points);
    free(res);
    srunner_free(sr);
    return tasks_passed == tasks_run ? 0 : 1;
}

/* ---- lab_main: one process per task --------------------------------------------------------- */

/* What a task's child sends its parent down the pipe: fixed-size records, each written whole in
 * one write() (under PIPE_BUF, so never interleaved), the last one the end record. */
#define RECORD_TEXT 1000
#define OUTPUT_LIMIT_MB 64 /* the most a task may write, its output included */
typedef struct {
    char kind;      /* 'R' a test's result, 'L' memory leaked, 'T' a stub reached, 'E' the end */
    int rtype;      /* R: Check's result type; T: the task number */
    int line;       /* R: the line of the failure in its file */
    char where[64]; /* R: the base name of that file */
    char text[RECORD_TEXT]; /* R: Check's message; T: the function; E: the nonce */
} Record;

/* A task's outcome as the parent saw it. */
typedef struct {
    int finished;    /* the end record arrived with the task's nonce, and the child exited 0 */
    int run, passed; /* tests run and passed, when finished */
    int todo;        /* failed tests that reached a stub */
    int leaked;      /* LeakSanitizer found memory leaked (SANITIZE=1) */
    double seconds;
    char message[RECORD_TEXT + 128]; /* the first failure, "" when the task passed */
    Record *results;                 /* the records before the end, when finished */
    int nresults;
    FILE *output; /* what the student's code printed */
} Outcome;

typedef struct {
    int seconds;    /* CPU and wall-clock limit of one task */
    long memory_mb; /* address-space limit, 0 for none */
    int csv;
} Limits;

/* a positive whole number from the environment, `fallback` when unset, -1 (said) when bad */
static long env_long(const char *name, long fallback, long most, const char *unit) {
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

/* 32 hex digits from /dev/urandom: the number only this task's report may carry */
static int draw_nonce(char *hex) {
    unsigned char b[16];
    FILE *f = fopen("/dev/urandom", "rb");
    int ok = f && fread(b, 1, sizeof b, f) == sizeof b;
    if (f) fclose(f);
    for (int i = 0; i < 16; i++) sprintf(hex + 2 * i, "%02x", b[i]);
    return ok;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void send_record(int fd, const Record *r) {
    const char *p = (const char *)r;
    size_t left = sizeof *r;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(3);
        p += n;
        left -= (size_t)n;
    }
}

/* The child: limits, the student's output aside, the task's tests with Check in this process,
 * then the report. Only this function writes to `report`, and only after the tests returned. */
static void run_child(Suite *suite, const LabTask *task, int report, int output, const char *nonce,
                      const Limits *lim) {
    setpgid(0, 0); /* one group, killed whole by the parent: a stray grandchild goes with it */
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    dup2(output, 1);
    dup2(output, 2);
    struct rlimit cpu = {(rlim_t)lim->seconds, (rlim_t)lim->seconds + 1};
    setrlimit(RLIMIT_CPU, &cpu);
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    /* the student's output goes to a temporary file: a print in an endless loop must not fill
     * the disk */
    struct rlimit fsize = {(rlim_t)OUTPUT_LIMIT_MB << 20, (rlim_t)OUTPUT_LIMIT_MB << 20};
    setrlimit(RLIMIT_FSIZE, &fsize);
    if (lim->memory_mb > 0) {
        struct rlimit as = {(rlim_t)lim->memory_mb << 20, (rlim_t)lim->memory_mb << 20};
        setrlimit(RLIMIT_AS, &as);
    }
    in_task_child = 1;
    unsetenv("CK_RUN_SUITE");
    unsetenv("CK_RUN_CASE");
    unsetenv("CK_INCLUDE_TAGS");
    unsetenv("CK_EXCLUDE_TAGS");
    SRunner *sr = srunner_create(suite);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run(sr, NULL, task->tcase, CK_SILENT);
    fflush(stdout);
    fflush(stderr);

    int nrun = srunner_ntests_run(sr);
    TestResult **res = srunner_results(sr);
    for (int i = 0; i < nrun; i++) {
        Record r = {.kind = 'R', .rtype = tr_rtype(res[i]), .line = tr_lno(res[i])};
        snprintf(r.where, sizeof r.where, "%s",
                 base_name(tr_lfile(res[i]) ? tr_lfile(res[i]) : ""));
        snprintf(r.text, sizeof r.text, "%s", tr_msg(res[i]) ? tr_msg(res[i]) : "");
        send_record(report, &r);
    }
#ifdef LAB_ASAN
    /* _exit() below skips LeakSanitizer's check at exit: run it here */
    if (__lsan_do_recoverable_leak_check()) {
        Record r = {.kind = 'L'};
        snprintf(r.text, sizeof r.text,
                 "memory leaked: LeakSanitizer's report, in your output below, says where");
        send_record(report, &r);
    }
#endif
    for (int i = 0; i < ntodo; i++) {
        Record r = {.kind = 'T', .rtype = todo_tasks[i]};
        snprintf(r.text, sizeof r.text, "%s", todo_functions[i]);
        send_record(report, &r);
    }
    Record end = {.kind = 'E'};
    snprintf(end.text, sizeof end.text, "%s", nonce);
    send_record(report, &end);
    _exit(0); /* no atexit handler of the student's runs after the report */
}

static const char *signal_name(int sig) {
    static const struct {
        int sig;
        const char *name;
    } names[] = {{SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
                 {SIGILL, "SIGILL"},   {SIGABRT, "SIGABRT"}, {SIGKILL, "SIGKILL"},
                 {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"}, {SIGPIPE, "SIGPIPE"},
                 {SIGXFSZ, "SIGXFSZ"}, {SIGTRAP, "SIGTRAP"}, {SIGALRM, "SIGALRM"},
                 {SIGINT, "SIGINT"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig) return names[i].name;
    return "a signal";
}

/* Reads what `fd` holds now into *buf, record by record (a partial one kept in *cur); returns -1
 * when the pipe has ended, 0 otherwise. *ended becomes 1 at the end record carrying `nonce`, -1
 * at one carrying another number; nothing after an end record is kept. */
static int read_records(int fd, Record **buf, int *n, int *cap, size_t *partial, Record *cur,
                        const char *nonce, int *ended) {
    for (;;) {
        ssize_t got = read(fd, (char *)cur + *partial, sizeof *cur - *partial);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return got == 0 ? -1 : 0; /* -1: the pipe ended; 0: nothing more now */
        *partial += (size_t)got;
        if (*partial < sizeof *cur) continue;
        *partial = 0;
        if (*ended) continue;
        if (cur->kind == 'E') {
            cur->text[RECORD_TEXT - 1] = '\0';
            *ended = strcmp(cur->text, nonce) == 0 ? 1 : -1;
            continue;
        }
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 16;
            *buf = realloc(*buf, (size_t)*cap * sizeof **buf);
            if (!*buf) abort();
        }
        cur->text[RECORD_TEXT - 1] = '\0';
        cur->where[sizeof cur->where - 1] = '\0';
        (*buf)[(*n)++] = *cur;
    }
}

/* Kills and reaps what the student's code started and left behind, also a process that left
 * the task's process group: as the child subreaper (lab_main), the grader inherits them all. */
static void reap_strays(void) {
#ifdef __linux__
    for (int round = 0; round < 100; round++) {
        int found = 0;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char path[64], buf[512];
            int pid = atoi(e->d_name), ppid = 0;
            if (pid <= 0) continue;
            snprintf(path, sizeof path, "/proc/%d/stat", pid);
            FILE *f = fopen(path, "r");
            if (!f) continue;
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = '\0';
            const char *close_paren = strrchr(buf, ')'); /* the name may hold spaces */
            if (close_paren && sscanf(close_paren + 1, " %*c %d", &ppid) == 1 && ppid == getpid()) {
                kill(pid, SIGKILL);
                found = 1;
            }
        }
        if (d) closedir(d);
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        if (!found) break;
        usleep(1000);
    }
#else
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
#endif
}

/* Runs one task in a child and judges it from what the pipe carried and how the child ended. */
static void run_task(Suite *suite, const LabTask *task, const Limits *lim, Outcome *o) {
    memset(o, 0, sizeof *o);
    double t0 = now_seconds();
    if (!task->address) {
        snprintf(o->message, sizeof o->message, "function %s is not defined in your file",
                 task->function);
        return;
    }
    char nonce[33];
    int fds[2];
    o->output = tmpfile();
    if (!draw_nonce(nonce) || !o->output || pipe(fds) != 0) {
        snprintf(o->message, sizeof o->message, "grader: cannot start the task (%s)",
                 strerror(errno));
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(o->message, sizeof o->message, "grader: cannot fork (%s)", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return;
    }
    if (pid == 0) {
        close(fds[0]);
        run_child(suite, task, fds[1], fileno(o->output), nonce, lim);
    }
    close(fds[1]);
    setpgid(pid, pid);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);

    Record *recs = NULL, cur;
    int nrec = 0, cap = 0, ended = 0, status = 0, reaped = 0, timed_out = 0, open_pipe = 1;
    size_t partial = 0;
    double deadline = t0 + lim->seconds;
    while (!reaped) {
        if (open_pipe) {
            struct pollfd p = {fds[0], POLLIN, 0};
            poll(&p, 1, 20);
            if (read_records(fds[0], &recs, &nrec, &cap, &partial, &cur, nonce, &ended) < 0)
                open_pipe = 0;
        } else {
            usleep(20000);
        }
        reaped = waitpid(pid, &status, WNOHANG) == pid;
        if (!reaped && now_seconds() > deadline) {
            timed_out = 1;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            reaped = 1;
        }
    }
    if (open_pipe) read_records(fds[0], &recs, &nrec, &cap, &partial, &cur, nonce, &ended);
    close(fds[0]);
    kill(-pid, SIGKILL); /* whatever the student's code left running */
    reap_strays();
    o->seconds = now_seconds() - t0;

    int exited_0 = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ended == 1 && exited_0 && !timed_out) {
        o->finished = 1;
        o->results = recs;
        o->nresults = nrec;
        for (int i = 0; i < nrec; i++) {
            if (recs[i].kind == 'L' && !o->leaked++ && !o->message[0])
                snprintf(o->message, sizeof o->message, "%s", recs[i].text);
            if (recs[i].kind != 'R') continue;
            o->run++;
            if (recs[i].rtype == CK_PASS)
                o->passed++;
            else if (strstr(recs[i].text, "is not implemented yet"))
                o->todo++;
            else if (!o->message[0] && strcmp(recs[i].where, "grader.c") == 0)
                snprintf(o->message, sizeof o->message, "grader.c:%d: %s", recs[i].line,
                         recs[i].text);
            else if (!o->message[0])
                snprintf(o->message, sizeof o->message, "%s", recs[i].text);
        }
        if (o->run == 0)
            snprintf(o->message, sizeof o->message, "grader: no test of %s ran", task->tcase);
        else if (o->passed < o->run && !o->message[0])
            snprintf(o->message, sizeof o->message, "not implemented yet");
        return;
    }
    free(recs);
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    if (timed_out || sig == SIGXCPU)
        snprintf(o->message, sizeof o->message, "took over %d s: an endless loop?", lim->seconds);
    else if (sig == SIGXFSZ)
        snprintf(o->message, sizeof o->message,
                 "wrote more than %d MiB (its output, or a file): printing in a loop?",
                 OUTPUT_LIMIT_MB);
    else if (sig)
        snprintf(o->message, sizeof o->message,
                 "crashed: %s (%s) (to find where: README.md, \"When the grader crashes\")",
                 signal_name(sig), strsignal(sig));
    else if (ended == -1)
        snprintf(o->message, sizeof o->message,
                 "the task's report was forged: it did not come from the grader");
    else
        snprintf(o->message, sizeof o->message,
                 "exited before the task finished (exit status %d): your functions must return, "
                 "not exit%s",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1,
#ifdef LAB_ASAN
                 WIFEXITED(status) && WEXITSTATUS(status) != 0
                     ? "; a sanitizer's report, in your output below, may say why"
                     :
#endif
                     "");
}

/* The student's output under the task's line, each line marked so that none can pass for the
 * grader's own (at most 40 lines). */
static void show_output(FILE *to, FILE *output, const char *prefix) {
    char line[512];
    int shown = 0, more = 0;
    fflush(output);
    rewind(output);
    while (fgets(line, sizeof line, output)) {
        size_t len = strlen(line);
        int whole = len > 0 && line[len - 1] == '\n';
        if (shown < 40) {
            if (whole) line[len - 1] = '\0';
            fprintf(to, "%s%s%s\n", prefix, line, whole ? "" : " ...");
            shown++;
        } else if (whole) {
            more++;
        }
        if (!whole) /* the rest of a long line */
            while (fgets(line, sizeof line, output) && line[strlen(line) - 1] != '\n') {
            }
    }
    if (more) fprintf(to, "%s... and %d more lines\n", prefix, more);
}

/* a CSV field: quoted, its quotes doubled, its line breaks made spaces */
static void csv_field(FILE *to, const char *s) {
    fputc('"', to);
    for (; *s; s++) {
        if (*s == '"') fputc('"', to);
        fputc(*s == '\n' || *s == '\r' ? ' ' : *s, to);
    }
    fputc('"', to);
}

static void print_task(const LabTask *task, const Outcome *o, int pass, FILE *to) {
    int todo_only = o->finished && o->todo > 0 && o->todo == o->run - o->passed;
    if (!o->finished) {
        fprintf(to, "  FAIL  %-16s %-22s %s\n", task->tcase, task->function, o->message);
    } else {
        fprintf(to, "  %-4s  %-16s %-22s %d/%d checks pass%s\n", pass ? "ok" : "FAIL", task->tcase,
                task->function, o->passed, o->run, todo_only ? ": not implemented yet" : "");
        for (int i = 0; i < o->nresults && !todo_only; i++) {
            const Record *r = &o->results[i];
            if (r->kind == 'L') fprintf(to, "          %s\n", r->text);
            if (r->kind != 'R' || r->rtype == CK_PASS) continue;
            /* the test's line in grader.c; a shared helper's line would not help */
            if (strcmp(r->where, "grader.c") == 0)
                fprintf(to, "          grader.c:%d: %s\n", r->line, r->text);
            else
                fprintf(to, "          %s\n", r->text);
        }
    }
    if (o->output) show_output(to, o->output, "          | ");
}

int lab_main(Suite *suite, const char *title, const LabTask *tasks, int ntasks) {
    /* CK_FORK=no, to run the tests under a debugger: every task in this process, as before */
    const char *fork_mode = getenv("CK_FORK");
    if (fork_mode && strcmp(fork_mode, "no") == 0)
        return lab_main_inline(suite, title, tasks, ntasks);
    Limits lim = {(int)env_long("LAB_TIME_LIMIT", 10, 3600, "seconds"),
                  env_long("LAB_MEMORY_LIMIT_MB", 2048, 1 << 20, "MiB"), 0};
    if (lim.seconds < 0 || lim.memory_mb < 0) return 2;
    const char *format = getenv("GRADE_FORMAT");
    lim.csv = format && strcmp(format, "csv") == 0;
    if (format && *format && !lim.csv && strcmp(format, "text") != 0) {
        fprintf(stderr, "grader: GRADE_FORMAT=%s is not a format: use csv, or text (the default)\n",
                format);
        return 2;
    }
#ifdef LAB_ASAN
    lim.memory_mb = 0; /* AddressSanitizer's shadow memory needs terabytes of address space */
#endif
#ifdef __linux__
    /* orphans of the student's code become the grader's, to be killed (reap_strays); and, not
     * dumpable, the grader's /proc files (its open files, its memory) are closed to them */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    prctl(PR_SET_DUMPABLE, 0);
#endif
    const char *want = getenv("CK_RUN_CASE");
    int selected = 0;
    for (int t = 0; t < ntasks; t++)
        selected += !want || !*want || strcmp(want, tasks[t].tcase) == 0;
    if (selected == 0) {
        fprintf(stderr, "no task named '%s'. The tasks are:", want);
        for (int t = 0; t < ntasks; t++) fprintf(stderr, " %s", tasks[t].tcase);
        fprintf(stderr, "\n");
        return 2;
    }
    const char *file = getenv("LAB_SOLUTION");
    FILE *report = lim.csv ? stderr : stdout; /* the human report; stdout is the CSV's */
    fprintf(report, "Grading %s (%s)\n", file ? file : "the linked solution", title);
    if (lim.memory_mb)
        fprintf(report, "Each task runs alone, within %d s and %ld MiB of memory.\n", lim.seconds,
                lim.memory_mb);
    else
        fprintf(report,
                "Each task runs alone, within %d s (no memory limit under "
                "AddressSanitizer).\n",
                lim.seconds);

    /* Every task first, the report after: nothing is printed while the student's code runs,
     * and the report is the last thing written. */
    Outcome *outcomes = calloc((size_t)ntasks, sizeof *outcomes);
    if (!outcomes) return 2;
    for (int t = 0; t < ntasks; t++)
        if (!want || !*want || strcmp(want, tasks[t].tcase) == 0)
            run_task(suite, &tasks[t], &lim, &outcomes[t]);

    /* the stubs the tasks reached: their TODO lines, each once, before the tasks' lines */
    unsigned long long todo_said = 0;
    for (int t = 0; t < ntasks; t++)
        for (int i = 0; i < outcomes[t].nresults; i++) {
            const Record *r = &outcomes[t].results[i];
            if (r->kind != 'T' || (todo_said & (1ull << (r->rtype & 63)))) continue;
            todo_said |= 1ull << (r->rtype & 63);
            fprintf(stderr, "TODO: task %d (%s) is not implemented\n", r->rtype, r->text);
        }
    fflush(stderr);
    fprintf(report, "\n");

    int tasks_run = 0, tasks_passed = 0, points = 0, max_points = 0;
    char todo_list[1024] = "";
    for (int t = 0; t < ntasks; t++) {
        if (want && *want && strcmp(want, tasks[t].tcase) != 0) continue;
        Outcome *o = &outcomes[t];
        int pass = o->finished && o->run > 0 && o->passed == o->run && !o->leaked;
        tasks_run++;
        tasks_passed += pass;
        max_points += tasks[t].points;
        points += pass ? tasks[t].points : 0;
        print_task(&tasks[t], o, pass, report);
        if (o->finished && o->todo > 0 && o->todo == o->run - o->passed) {
            size_t len = strlen(todo_list);
            snprintf(todo_list + len, sizeof todo_list - len, " %s", tasks[t].tcase);
        }
        if (lim.csv) {
            printf("%s,%s,%d,%d,%.2f,", tasks[t].tcase, pass ? "pass" : "fail",
                   pass ? tasks[t].points : 0, tasks[t].points, o->seconds);
            csv_field(stdout, pass ? "" : o->message);
            printf("\n");
        }
        free(o->results);
        if (o->output) fclose(o->output);
    }
    free(outcomes);
    fprintf(report, "\nTasks passed: %d of %d.", tasks_passed, tasks_run);
    if (todo_list[0]) fprintf(report, " Not implemented yet:%s.", todo_list);
    fprintf(report, "\nScore: %d of %d points.\n", points, max_points);
    return tasks_passed == tasks_run ? 0 : 1;
}
