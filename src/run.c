/* run.c: see run.h. */
#include "run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "io/files.h"
#include "model.h"
#include "util.h"

/* written by the Makefile into build/version.c */
extern const char moe_git_commit[];

void run_path(char *out, size_t n, const char *dir, const char *file) {
    if ((size_t)snprintf(out, n, "%s/%s", dir, file) >= n)
        moe_input_error("path too long: %s/%s; use a shorter --out", dir, file);
}

static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                snprintf(out, n, "%s", colon + 2);
                out[strcspn(out, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

void run_write_provenance(const char *dir, const Config *c, const Shard *train, const Shard *val,
                          int threads, int resumed_at, const char *init_from, const Dist *d) {
    char path[MOE_PATH_MAX + 32];
    run_path(path, sizeof path, dir, "provenance.txt");
    /* a resumed run appends, so the history of every segment is kept */
    FILE *f = fopen_check(path, resumed_at > 0 ? "a" : "w");
    struct utsname u;
    uname(&u);
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(f, "started = %s\n", when);
    if (resumed_at > 0) fprintf(f, "resumed_at_step = %d\n", resumed_at);
    if (init_from) fprintf(f, "init_from = %s\n", init_from);
    fprintf(f, "commit = %s\n", moe_git_commit);
    fprintf(f, "data.train = %s crc32=%08x tokens=%llu\n", train->path, train->crc32,
            (unsigned long long)train->n_tokens);
    fprintf(f, "data.val = %s crc32=%08x tokens=%llu\n", val->path, val->crc32,
            (unsigned long long)val->n_tokens);
    fprintf(f, "data.train_unigram_entropy = %.4f\n", shard_unigram_entropy(train));
    fprintf(f, "seed = %llu\n", (unsigned long long)c->seed);
    fprintf(f, "threads = %d\n", threads);
    if (d) fprintf(f, "processes = %d (dist.ep = %d x data-parallel %d)\n", d->world, d->ep, d->dp);
    /* the training FLOPs of one token (model.h): the x axis of compute-matched comparisons */
    fprintf(f, "flops_per_token = %.6g\n", model_flops_per_token(c, c->seq_len));
    fprintf(f, "host = %s %s %s %s\n", u.nodename, u.sysname, u.release, u.machine);
    fprintf(f, "cpu = %s\n", cpu);
    fprintf(f, "cores_online = %ld\n\n", sysconf(_SC_NPROCESSORS_ONLN));
    fclose(f);
}

FILE *csv_open(const char *dir, const char *file, const char *header, int keep_until_step) {
    char path[MOE_PATH_MAX + 32];
    run_path(path, sizeof path, dir, file);
    if (keep_until_step >= 0 && file_exists(path)) {
        /* keep the header and every row of a step <= keep_until_step */
        FILE *in = fopen_check(path, "r");
        char tmp[MOE_PATH_MAX + 40];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *out = fopen_check(tmp, "w");
        char line[16384];
        int first = 1;
        while (fgets(line, sizeof line, in)) {
            if (first || atoi(line) <= keep_until_step) fputs(line, out);
            first = 0;
        }
        fclose(in);
        if (fclose(out) != 0 || rename(tmp, path) != 0)
            moe_fatal("cannot rewrite %s: %s", path, strerror(errno));
        return fopen_check(path, "a");
    }
    FILE *f = fopen_check(path, "w");
    fprintf(f, "%s\n", header);
    return f;
}
