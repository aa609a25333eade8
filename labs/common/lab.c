/* lab.c: see lab.h. */
#include <check.h>

#include "lab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int lab_todo_task = 0;
const char *lab_todo_function = "";

void lab_todo(int task, const char *function) {
    /* once per task and process: without fork mode every test shares one process */
    static unsigned long long said;
    unsigned long long bit = 1ull << (task & 63);
    if (!(said & bit)) fprintf(stderr, "TODO: task %d (%s) is not implemented\n", task, function);
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

int lab_main(Suite *suite, const char *title, const LabTask *tasks, int ntasks) {
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

    int tasks_run = 0, tasks_passed = 0;
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
    printf("\n");
    free(res);
    srunner_free(sr);
    return tasks_passed == tasks_run ? 0 : 1;
}
