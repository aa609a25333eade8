/* lab.c: the grader's side of lab.h: it starts each task (a forked child, or an MPI job),
 * reads its report and prints the score; lab_task.c is the task's side. */
#include "lab_task.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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

/* ---- the grader: one process (or one MPI job) per task ---------------------------------------- */

/* A task's outcome as the grader saw it. */
typedef struct {
    int finished;    /* the end record arrived with the task's nonce, and the process exited 0 */
    int run, passed; /* tests run and passed, when finished */
    int todo;        /* failed tests that reached a stub */
    int leaked;      /* LeakSanitizer found memory leaked (SANITIZE=1) */
    int ended;       /* 1: the end record with the nonce came; -1: one with another number */
    int rank_ended;  /* a rank's watchdog or crash record came: its job is over */
    double seconds;
    char message[RECORD_TEXT + 200]; /* the first failure, "" when the task passed */
    Record *results;                 /* the records before the end */
    int nresults, cap;
    FILE *output; /* what the student's code printed */
} Outcome;

/* How a task runs: in a child process that runs `suite` (lab_main), or as an MPI job of its
 * own, `self` started by the shell command `mpirun` with `np` ranks (lab_main_mpi). */
typedef struct {
    Suite *suite;
    const char *self, *mpirun;
    int np;
} Runner;

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

/* One whole line of a task's report stream: a record of the task is kept (nothing after its
 * end), any other line is the student's output (or mpirun's). */
static void take_line(Outcome *o, const char *line, const char *nonce) {
    Record r;
    int kind = lab_parse_record(line, nonce, &r);
    if (kind == 0) {
        if (o->output) fputs(line, o->output);
        return;
    }
    if (o->ended == 1) return;
    if (kind < 0 || r.kind == 'E') {
        o->ended = kind < 0 ? -1 : 1;
        return;
    }
    if (o->nresults == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 16;
        o->results = realloc(o->results, (size_t)o->cap * sizeof *o->results);
        if (!o->results) abort();
    }
    o->results[o->nresults++] = r;
    o->rank_ended |= r.kind == 'W' || r.kind == 'C';
}

/* The lines `fd` holds now, each to take_line (a partial one kept in buf); -1 once the stream
 * has ended (its last partial line taken too), 0 otherwise. */
typedef struct {
    char text[RECORD_TEXT + 256];
    size_t len;
} LineBuffer;
static int read_lines(int fd, LineBuffer *lb, Outcome *o, const char *nonce) {
    for (;;) {
        ssize_t got = read(fd, lb->text + lb->len, sizeof lb->text - 1 - lb->len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return 0; /* nothing more now */
        if (got == 0) {        /* the end, perhaps after a last line without its \n */
            lb->text[lb->len] = '\0';
            if (lb->len > 0) take_line(o, lb->text, nonce);
            lb->len = 0;
            return -1;
        }
        lb->len += (size_t)got;
        char *start = lb->text, *nl;
        lb->text[lb->len] = '\0';
        while ((nl = memchr(start, '\n', lb->len - (size_t)(start - lb->text)))) {
            char saved = nl[1];
            nl[1] = '\0';
            take_line(o, start, nonce);
            nl[1] = saved;
            start = nl + 1;
        }
        lb->len -= (size_t)(start - lb->text);
        memmove(lb->text, start, lb->len);
        if (lb->len == sizeof lb->text - 1) { /* a line longer than any record: output */
            lb->text[lb->len] = '\0';
            take_line(o, lb->text, nonce);
            lb->len = 0;
        }
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

/* The child of an MPI lab's task: mpirun, which starts the ranks (this program with
 * --lab-task), the nonce on its stdin (rank 0's), its stdout the report stream, its stderr the
 * output. */
static void exec_job(const Runner *rn, const LabTask *task, int report, int output, int nonce_in,
                     const char *tmpdir) {
    setpgid(0, 0);
    /* Open MPI keeps a job's session files under TMPDIR, and a job that ends removes the
     * folder it shares with one starting beside it (grade-all grades several at a time) */
    if (tmpdir[0]) setenv("TMPDIR", tmpdir, 1);
    dup2(nonce_in, 0);
    dup2(report, 1);
    dup2(output, 2);
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    char script[1024], np[16];
    snprintf(script, sizeof script, "exec %s -np \"$0\" \"$1\" --lab-task \"$2\"", rn->mpirun);
    snprintf(np, sizeof np, "%d", rn->np);
    execl("/bin/sh", "sh", "-c", script, np, rn->self, task->tcase, (char *)NULL);
    fprintf(stderr, "grader: cannot run /bin/sh (%s)\n", strerror(errno));
    _exit(127);
}

/* A job's TMPDIR, made before it starts and removed, whole, after it ended. */
static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}
static void remove_tree(const char *dir) {
    if (dir[0]) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Ends a task's process group: mpirun is asked first (SIGTERM), so that it ends its ranks. */
static void end_group(pid_t pid, int *status, int gently) {
    if (gently) {
        kill(pid, SIGTERM);
        for (int i = 0; i < 100; i++) {
            if (waitpid(pid, status, WNOHANG) == pid) {
                kill(-pid, SIGKILL);
                return;
            }
            usleep(20000);
        }
    }
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
}

/* The message of a task that did not report its end. */
static void explain(Outcome *o, const Runner *rn, const Limits *lim, int status, int timed_out) {
    const Record *w = NULL, *c = NULL;
    for (int i = 0; i < o->nresults; i++) {
        if (o->results[i].kind == 'W' && !w) w = &o->results[i];
        if (o->results[i].kind == 'C' && !c) c = &o->results[i];
    }
    /* the signal that ended the child, or the one a rank said it crashed with */
    int sig = c ? c->b : WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    char rank[32] = "";
    if (c) snprintf(rank, sizeof rank, " on rank %d", c->a);
    if (w && !c) /* a crash comes first: the other ranks may have waited for the one that died */
        snprintf(o->message, sizeof o->message,
                 "took over %d s (rank %d's watchdog): some rank waits in an MPI call that another "
                 "rank never makes, or makes with other counts, or a loop never ends",
                 w->b, w->a);
    else if (timed_out || sig == SIGXCPU)
        snprintf(o->message, sizeof o->message, "took over %d s: an endless loop?", lim->seconds);
    else if (sig == SIGXFSZ)
        snprintf(o->message, sizeof o->message,
                 "wrote more than %d MiB (its output, or a file): printing in a loop?",
                 OUTPUT_LIMIT_MB);
    else if (sig)
        snprintf(o->message, sizeof o->message,
                 "crashed: %s (%s)%s (to find where: README.md, \"When the grader crashes\")",
                 signal_name(sig), strsignal(sig), rank);
    else if (o->ended == -1)
        snprintf(o->message, sizeof o->message,
                 "the task's report was forged: it did not come from the grader");
    else if (rn->suite)
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
    else
        snprintf(o->message, sizeof o->message,
                 "exited before the task finished (a rank ended without the grader's report; "
                 "mpirun's exit status %d): your functions must return, not exit or call "
                 "MPI_Abort or MPI_Finalize%s",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1,
#ifdef LAB_ASAN
                 "; a sanitizer's report, in your output below, may say why"
#else
                 ""
#endif
        );
}

/* The records of a task that reported its end: its tests' results and its first failure. */
static void tally(Outcome *o, const LabTask *task) {
    o->finished = 1;
    for (int i = 0; i < o->nresults; i++) {
        const Record *r = &o->results[i];
        if (r->kind == 'L' && !o->leaked++ && !o->message[0])
            snprintf(o->message, sizeof o->message, "%s", r->text);
        if (r->kind != 'R') continue;
        o->run++;
        if (r->a == CK_PASS)
            o->passed++;
        else if (strstr(r->text, "is not implemented yet"))
            o->todo++;
        else if (!o->message[0] && strcmp(r->where, "grader.c") == 0)
            snprintf(o->message, sizeof o->message, "grader.c:%d: %s", r->b, r->text);
        else if (!o->message[0])
            snprintf(o->message, sizeof o->message, "%s", r->text);
    }
    if (o->run == 0)
        snprintf(o->message, sizeof o->message, "grader: no test of %s ran", task->tcase);
    else if (o->passed < o->run && !o->message[0])
        snprintf(o->message, sizeof o->message, "not implemented yet");
}

/* Runs one task, in a child or an MPI job, and judges it from its report and how it ended. */
static void run_task(const Runner *rn, const LabTask *task, const Limits *lim, Outcome *o) {
    memset(o, 0, sizeof *o);
    double t0 = now_seconds();
    if (!task->address) {
        snprintf(o->message, sizeof o->message, "function %s is not defined in your file",
                 task->function);
        return;
    }
    char nonce[NONCE_HEX + 1], tmpdir[4096] = "";
    int fds[2], in[2] = {-1, -1};
    if (!rn->suite) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/moe_lab_job.XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) tmpdir[0] = '\0'; /* then the job shares the caller's */
    }
    o->output = tmpfile();
    if (!draw_nonce(nonce) || !o->output || pipe(fds) != 0 || (!rn->suite && pipe(in) != 0)) {
        snprintf(o->message, sizeof o->message, "grader: cannot start the task (%s)",
                 strerror(errno));
        remove_tree(tmpdir);
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(o->message, sizeof o->message, "grader: cannot fork (%s)", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        remove_tree(tmpdir);
        return;
    }
    if (pid == 0) {
        close(fds[0]);
        if (rn->suite) lab_run_child(rn->suite, task, fds[1], fileno(o->output), nonce, lim);
        close(in[1]);
        exec_job(rn, task, fds[1], fileno(o->output), in[0], tmpdir);
    }
    close(fds[1]);
    setpgid(pid, pid);
    if (!rn->suite) { /* rank 0 reads the nonce from its stdin */
        close(in[0]);
        char line[NONCE_HEX + 2];
        snprintf(line, sizeof line, "%s\n", nonce);
        if (write(in[1], line, strlen(line)) < 0) { /* the job ended at once: said below */
        }
        close(in[1]);
    }
    fcntl(fds[0], F_SETFL, O_NONBLOCK);

    LineBuffer lb = {.len = 0};
    int status = 0, reaped = 0, timed_out = 0, open_pipe = 1;
    /* an MPI job has the time its ranks take to start and end besides (their watchdog starts
     * once MPI is up) */
    double deadline = t0 + lim->seconds + (rn->suite ? 0 : 20);
    while (!reaped) {
        if (open_pipe) {
            struct pollfd p = {fds[0], POLLIN, 0};
            poll(&p, 1, 20);
            if (read_lines(fds[0], &lb, o, nonce) < 0) open_pipe = 0;
        } else {
            usleep(20000);
        }
        reaped = waitpid(pid, &status, WNOHANG) == pid;
        if (!reaped && (now_seconds() > deadline || o->rank_ended)) {
            timed_out = !o->rank_ended;
            end_group(pid, &status, !rn->suite);
            reaped = 1;
        }
    }
    kill(-pid, SIGKILL); /* whatever the student's code left running */
    reap_strays();
    remove_tree(tmpdir);
    if (open_pipe) read_lines(fds[0], &lb, o, nonce); /* what its writers, all gone, left */
    close(fds[0]);
    o->seconds = now_seconds() - t0;

    int exited_0 = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (o->ended == 1 && exited_0 && !timed_out)
        tally(o, task);
    else
        explain(o, rn, lim, status, timed_out);
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
            if (r->kind != 'R' || r->a == CK_PASS) continue;
            /* the test's line in grader.c; a shared helper's line would not help */
            if (strcmp(r->where, "grader.c") == 0)
                fprintf(to, "          grader.c:%d: %s\n", r->b, r->text);
            else
                fprintf(to, "          %s\n", r->text);
        }
    }
    if (o->output) show_output(to, o->output, "          | ");
}

/* lab_main and lab_main_mpi: every selected task run by `rn`, then the report. */
static int grade(const Runner *rn, const char *title, const LabTask *tasks, int ntasks) {
    Limits lim = lab_read_limits();
    if (lim.seconds < 0 || lim.memory_mb < 0) return 2;
    const char *format = getenv("GRADE_FORMAT");
    lim.csv = format && strcmp(format, "csv") == 0;
    if (format && *format && !lim.csv && strcmp(format, "text") != 0) {
        fprintf(stderr, "grader: GRADE_FORMAT=%s is not a format: use csv, or text (the default)\n",
                format);
        return 2;
    }
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
        fprintf(report, "Each task runs alone, within %d s and %ld MiB of memory%s.\n",
                lim.seconds, lim.memory_mb, rn->suite ? "" : " for each rank");
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
            run_task(rn, &tasks[t], &lim, &outcomes[t]);

    /* the stubs the tasks reached: their TODO lines, each once, before the tasks' lines */
    unsigned long long todo_said = 0;
    for (int t = 0; t < ntasks; t++)
        for (int i = 0; i < outcomes[t].nresults; i++) {
            const Record *r = &outcomes[t].results[i];
            if (r->kind != 'T' || (todo_said & (1ull << (r->a & 63)))) continue;
            todo_said |= 1ull << (r->a & 63);
            fprintf(stderr, "TODO: task %d (%s) is not implemented\n", r->a, r->text);
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

int lab_main(Suite *suite, const char *title, const LabTask *tasks, int ntasks) {
    /* CK_FORK=no, to run the tests under a debugger: every task in this process, as before */
    const char *fork_mode = getenv("CK_FORK");
    if (fork_mode && strcmp(fork_mode, "no") == 0)
        return lab_main_inline(suite, title, tasks, ntasks);
    Runner rn = {.suite = suite};
    return grade(&rn, title, tasks, ntasks);
}

int lab_main_mpi(const char *self, const char *title, const LabTask *tasks, int ntasks) {
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK")) {
        fprintf(stderr, "grader: run the grader itself, not under mpirun: it starts one mpirun "
                        "job per task (the command in LAB_MPIRUN, with LAB_NP ranks)\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN); /* a job that ended at once closes the pipe of its nonce */
    long np = lab_env_long("LAB_NP", 4, 256, "ranks");
    if (np < 0) return 2;
    const char *mpirun = getenv("LAB_MPIRUN");
    char path[4096];
    Runner rn = {.self = realpath(self, path) ? path : self,
                 .mpirun = mpirun && *mpirun ? mpirun : "mpirun -q",
                 .np = (int)np};
    char full_title[256];
    snprintf(full_title, sizeof full_title, "%s, %ld rank%s", title, np, np == 1 ? "" : "s");
    return grade(&rn, full_title, tasks, ntasks);
}
