/* run.c: see run.h. */
#include "train/run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/backend.h"
#include "base/util.h"
#include "io/files.h"
#include "model/model.h"

/* written by the Makefile into build/version.c */
extern const char moe_git_commit[];

void run_path(char *out, size_t n, const char *dir, const char *file) {
    if ((size_t)snprintf(out, n, "%s/%s", dir, file) >= n)
        moe_input_error("path too long: %s/%s; use a shorter --out", dir, file);
}

/* A write into the run directory failed (full disk, permissions): say what to do. Whatever
 * failed was written beside its file or appended, so the run directory still resumes. */
static MOE_NORETURN void write_failed(const char *path, int errnum) {
    moe_input_error("cannot write %s: %s; free some disk space (or fix the folder's "
                    "permissions) and run the command again: the run directory is intact",
                    path, strerror(errnum));
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

void run_write_config(const char *dir, const Config *c) {
    char path[MOE_PATH_MAX + 32], err[1024];
    run_path(path, sizeof path, dir, "config.txt");
    char *text = config_to_text(c);
    const void *buf[1] = {text};
    const size_t len[1] = {strlen(text)};
    /* atomically: a crash or a full disk never leaves a truncated config.txt behind */
    int rc = write_atomic(path, buf, len, 1, err, sizeof err);
    free(text);
    if (rc != 0) moe_input_error("--out %s: %s", dir, err);
}

/* Does the file end in a newline (or is it empty)? A section appended after a torn last line
 * (a kill in the middle of the previous append) starts on a line of its own. */
static int ends_in_newline(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 1;
    int last = '\n';
    if (fseek(f, -1, SEEK_END) == 0) last = fgetc(f);
    fclose(f);
    return last == '\n' || last == EOF;
}

void run_write_provenance(const char *dir, const Config *c, const Shard *train, const Shard *val,
                          const char *mix_lines, int threads, int resumed_at, const char *init_from,
                          const Dist *d) {
    char path[MOE_PATH_MAX + 32];
    run_path(path, sizeof path, dir, "provenance.txt");
    struct utsname u;
    uname(&u);
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    /* the section is formatted in memory and appended with one write, so a kill leaves at
     * most one torn line at the end, which the next section steps over */
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) moe_fatal("out of memory");
    if (resumed_at > 0 && !ends_in_newline(path)) fputc('\n', f);
    fprintf(f, "started = %s\n", when);
    if (resumed_at > 0) fprintf(f, "resumed_at_step = %d\n", resumed_at);
    if (init_from) fprintf(f, "init_from = %s\n", init_from);
    fprintf(f, "commit = %s\n", moe_git_commit);
    fprintf(f, "data.train = %s crc32=%08x tokens=%llu\n", train->path, train->crc32,
            (unsigned long long)train->n_tokens);
    fprintf(f, "data.val = %s crc32=%08x tokens=%llu\n", val->path, val->crc32,
            (unsigned long long)val->n_tokens);
    fprintf(f, "data.train_unigram_entropy = %.4f\n", shard_unigram_entropy(train));
    if (mix_lines) fputs(mix_lines, f);
    fprintf(f, "seed = %llu\n", (unsigned long long)c->seed);
    fprintf(f, "threads = %d\n", threads);
#ifdef _OPENMP
    /* the places the threads are bound to (OMP_PLACES, OMP_PROC_BIND); 0: not bound */
    fprintf(f, "omp_places = %d\n", omp_get_num_places());
#endif
    if (d) fprintf(f, "processes = %d (dist.ep = %d x data-parallel %d)\n", d->world, d->ep, d->dp);
    /* the training FLOPs of one token (model.h): the x axis of compute-matched comparisons */
    fprintf(f, "flops_per_token = %.6g\n", model_flops_per_token(c, c->seq_len));
    fprintf(f, "host = %s %s %s %s\n", u.nodename, u.sysname, u.release, u.machine);
    fprintf(f, "cpu = %s\n", cpu);
    /* the sgemm kernels sum in their own order: a run repeats bit for bit on the same set */
    fprintf(f, "blas = OpenBLAS, %s kernels%s\n", backend_blas_core(),
            getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE)" : "");
    fprintf(f, "cores_online = %ld\n\n", sysconf(_SC_NPROCESSORS_ONLN));
    fclose(f);
    /* a resumed run appends, so the history of every segment is kept; a run started again
     * from step 0 (no checkpoint yet) starts the file afresh */
    FILE *out = fopen(path, resumed_at > 0 ? "a" : "w");
    if (!out) write_failed(path, errno);
    int ok = fwrite(text, 1, n, out) == n && fflush(out) == 0;
    int saved = errno;
    ok = fclose(out) == 0 && ok;
    free(text);
    if (!ok) write_failed(path, saved ? saved : errno);
}

/* The CRC-32 the last complete "KEY = PATH crc32=XXXXXXXX ..." line of provenance.txt
 * records; 0 when there is none (a run from before the checksums), 1 when found. */
static int recorded_crc(const char *prov, const char *key, uint32_t *crc, char *shard,
                        size_t shard_len) {
    FILE *f = fopen(prov, "r");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int found = 0;
    const size_t klen = strlen(key);
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n') break; /* a torn last line records nothing */
        if (strncmp(line, key, klen) != 0 || strncmp(line + klen, " = ", 3) != 0) continue;
        char *at = strstr(line, " crc32=");
        char *end = NULL;
        if (!at) continue;
        unsigned long v = strtoul(at + 7, &end, 16);
        if (end != at + 15 || (*end != ' ' && *end != '\n')) continue;
        *crc = (uint32_t)v;
        *at = '\0';
        snprintf(shard, shard_len, "%s", line + klen + 3);
        found = 1;
    }
    free(line);
    fclose(f);
    return found;
}

int run_check_data(const char *dir, const Shard *train, const Shard *val, char *err, int errlen) {
    char prov[MOE_PATH_MAX + 32];
    run_path(prov, sizeof prov, dir, "provenance.txt");
    const char *keys[2] = {"data.train", "data.val"};
    const Shard *shards[2] = {train, val};
    for (int i = 0; i < 2; i++) {
        uint32_t crc = 0;
        char was[1024];
        if (!recorded_crc(prov, keys[i], &crc, was, sizeof was) || crc == shards[i]->crc32)
            continue;
        return set_error(err, errlen,
                         "%s: %s (crc32=%08x) is not the data this run trained on: %s records "
                         "%s crc32=%08x. Resume with that data (--set %s=PATH), or pass "
                         "--allow-data-change to continue on the new data",
                         keys[i], shards[i]->path, shards[i]->crc32, prov, was, crc, keys[i]);
    }
    return 0;
}

/* The step of a CSV row: its first field, a whole number followed by a comma or the end of
 * the line; -1 when the row does not start with one (the row is then dropped). */
static long row_step(const char *line) {
    char *end = NULL;
    errno = 0;
    long v = strtol(line, &end, 10);
    if (errno || end == line || (*end != ',' && *end != '\n')) return -1;
    return v;
}

FILE *csv_open(const char *dir, const char *file, const char *header, int keep_until_step) {
    char path[MOE_PATH_MAX + 32];
    run_path(path, sizeof path, dir, file);
    if (keep_until_step >= 0 && file_exists(path)) {
        /* keep the header and every complete row of a step <= keep_until_step: rows written
         * after the checkpoint go, and so does a torn last row (a kill in the middle of a
         * write), which has no newline yet */
        FILE *in = fopen(path, "r");
        if (!in)
            moe_input_error("cannot read %s: %s; check the run directory's permissions", path,
                            strerror(errno));
        char tmp[MOE_PATH_MAX + 40];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *out = fopen(tmp, "w");
        if (!out) {
            fclose(in);
            write_failed(tmp, errno);
        }
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        int first = 1, ok = 1;
        while (ok && (len = getline(&line, &cap, in)) > 0) {
            const int complete = line[len - 1] == '\n';
            if (first && !complete) break; /* a torn header: written afresh below */
            if (first || (complete && row_step(line) >= 0 && row_step(line) <= keep_until_step))
                ok = fwrite(line, 1, (size_t)len, out) == (size_t)len;
            if (first) ok = ok && fflush(out) == 0;
            first = 0;
        }
        free(line);
        fclose(in);
        if (first) ok = ok && fprintf(out, "%s\n", header) > 0; /* empty or torn header */
        ok = ok && fflush(out) == 0;
        int saved = errno;
        ok = fclose(out) == 0 && ok;
        if (!ok || rename(tmp, path) != 0) {
            if (ok) saved = errno;
            unlink(tmp);
            write_failed(path, saved);
        }
    } else {
        /* the header goes to disk at once: a kill before the first row leaves a file that
         * already says what its columns are */
        FILE *f = fopen(path, "w");
        int ok = f && fprintf(f, "%s\n", header) > 0 && fflush(f) == 0;
        int saved = errno;
        if (f && !ok) fclose(f);
        if (!ok) write_failed(path, saved);
        return f;
    }
    FILE *f = fopen(path, "a");
    if (!f) write_failed(path, errno);
    return f;
}
