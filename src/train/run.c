/* run.c: see run.h. */
#include "train/run.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "base/omp_compat.h"

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
                          const char *tokenizer, const char *mix_lines, int threads, int resumed_at,
                          const char *init_from, const Dist *d) {
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
    if (tokenizer) fprintf(f, "tokenizer = %s crc32=%08x\n", tokenizer, train->tokenizer_crc32);
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
    fprintf(f, "blas = %s, %s kernels%s\n", backend_blas_library(), backend_blas_core(),
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

/* ---- the tokenizer ------------------------------------------------------------------------ */

static const FileSpec TOKENIZER_SPEC = {"tokenizer", "a tokenizer.json is a file (moe tokenizer)",
                                        "tokenizer.json", 1ull << 31};

int run_find_tokenizer(const char *dir, int resume, const Shard *train, const Shard *val,
                       char *path, size_t path_len, char *err, int errlen) {
    const uint32_t want = train->tokenizer_crc32;
    if (val->tokenizer_crc32 != want)
        return set_error(err, errlen,
                         "data.train %s is of the tokenizer of CRC-32 %08x, data.val %s of %08x "
                         "(00000000: bytes): a model learns one tokenizer's ids. Build both "
                         "with the same tokenizer (moe corpus --tokenizer FILE writes both)",
                         train->path, want, val->path, val->tokenizer_crc32);
    path[0] = '\0';
    if (want == 0) return 0;
    char mine[MOE_PATH_MAX + 32], why[1024];
    uint32_t crc;
    run_path(mine, sizeof mine, dir, "tokenizer.json");
    if (resume && file_exists(mine)) {
        if (file_crc32(mine, &TOKENIZER_SPEC, &crc, why, sizeof why) != 0)
            return set_error(err, errlen,
                             "%s; put the run's tokenizer.json back (nothing was changed)", why);
        if (crc != want)
            return set_error(err, errlen,
                             "%s (CRC-32 %08x) is not the tokenizer of data.train %s "
                             "(tokenizer_crc32 %08x): the run's model learned the ids of its "
                             "own tokenizer.json. Put that file back, or resume on shards of "
                             "it (--set data.train=... --set data.val=...), or start a new run "
                             "from the weights with another tokenizer: moe train --init "
                             "%s/ckpt.bin --out NEW_DIR (nothing was changed)",
                             mine, crc, train->path, want, dir);
        snprintf(path, path_len, "%s", mine);
        return 0;
    }
    /* beside the training shard, where moe corpus --tokenizer writes it */
    const char *slash = strrchr(train->path, '/');
    char from[MOE_PATH_MAX + 32];
    snprintf(from, sizeof from, "%.*s/tokenizer.json", slash ? (int)(slash - train->path) : 1,
             slash ? train->path : ".");
    if (!file_exists(from))
        return set_error(err, errlen,
                         "data.train %s was made by a tokenizer (tokenizer_crc32 %08x), but "
                         "there is no %s beside it: put the tokenizer.json the shards were "
                         "built with there (moe corpus --tokenizer copies it beside them)",
                         train->path, want, from);
    if (file_crc32(from, &TOKENIZER_SPEC, &crc, why, sizeof why) != 0)
        return set_error(err, errlen, "data.train's tokenizer: %s", why);
    if (crc != want)
        return set_error(err, errlen,
                         "%s (CRC-32 %08x) is not the tokenizer data.train %s was made with "
                         "(tokenizer_crc32 %08x): it was changed or replaced. Put back the "
                         "tokenizer.json the shards were built with, or build them again with "
                         "this one: moe corpus --tokenizer %s ... (nothing was written)",
                         from, crc, train->path, want, from);
    snprintf(path, path_len, "%s", from);
    return 0;
}

void run_copy_tokenizer(const char *dir, const char *from, uint32_t crc) {
    char to[MOE_PATH_MAX + 32], err[1024];
    run_path(to, sizeof to, dir, "tokenizer.json");
    if (same_file(from, to)) return;
    size_t n;
    char *bytes = file_read_all(from, &TOKENIZER_SPEC, &n, err, sizeof err);
    if (!bytes) moe_input_error("%s", err);
    /* the bytes copied are those checked: a file changed since is not copied */
    if (crc32_update(0, bytes, n) != crc)
        moe_input_error("%s changed while the run started (CRC-32 %08x, %08x before); run the "
                        "command again",
                        from, crc32_update(0, bytes, n), crc);
    const void *buf[1] = {bytes};
    const size_t len[1] = {n};
    const int rc = write_atomic(to, buf, len, 1, err, sizeof err);
    free(bytes);
    if (rc != 0) moe_input_error("--out %s: %s", dir, err);
}

/* The CRC-32 the last complete "KEY = PATH crc32=XXXXXXXX ..." line of provenance.txt
 * records: 2 when found, 1 when the KEY lines carry no checksum (a run from before the
 * checksums), 0 when there is no KEY line at all (a damaged file), -1 when there is no file. */
static int recorded_crc(const char *prov, const char *key, uint32_t *crc, char *shard,
                        size_t shard_len) {
    FILE *f = fopen(prov, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int found = 0;
    const size_t klen = strlen(key);
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n') break; /* a torn last line records nothing */
        if (strncmp(line, key, klen) != 0 || strncmp(line + klen, " = ", 3) != 0) continue;
        if (!found) found = 1;
        char *at = strstr(line, " crc32=");
        char *end = NULL;
        if (!at) continue;
        unsigned long v = strtoul(at + 7, &end, 16);
        if (end != at + 15 || (*end != ' ' && *end != '\n')) continue;
        *crc = (uint32_t)v;
        *at = '\0';
        snprintf(shard, shard_len, "%s", line + klen + 3);
        found = 2;
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
        const int found = recorded_crc(prov, keys[i], &crc, was, sizeof was);
        /* without the record there is nothing to compare with: resuming would train on
         * whatever data.train names now, unnoticed */
        if (found <= 0)
            return set_error(err, errlen,
                             "%s %s, so the data this run trained on cannot be checked. Put the "
                             "file back as it was, or pass --allow-data-change to continue on "
                             "the data given (%s; a new section of provenance.txt records it)",
                             prov,
                             found < 0 ? "is missing"
                                       : (i == 0 ? "records no data.train line (it is damaged)"
                                                 : "records no data.val line (it is damaged)"),
                             shards[i]->path);
        if (found == 1 || crc == shards[i]->crc32) continue;
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

/* ---- the lock, and the checks of a resume ------------------------------------------------- */

/* the descriptor that holds the run directory's lock, open until the process ends */
static int run_lock_fd = -1;

void run_lock(const char *dir) {
    if (run_lock_fd >= 0) return; /* held already */
    char path[MOE_PATH_MAX + 32];
    run_path(path, sizeof path, dir, "lock");
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        moe_input_error("cannot open %s for its lock: %s; a run directory must be writable "
                        "(fix its permissions, or choose another --out)",
                        path, strerror(errno));
    /* an fcntl lock belongs to the process and goes with it: a run killed with kill -9 leaves
     * the file, never the lock. The holder's pid comes from the kernel (F_GETLK), so nothing is
     * written into the file and it never goes stale. */
    for (int attempt = 0; attempt < 3; attempt++) {
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fcntl(fd, F_SETLK, &fl) == 0) {
            run_lock_fd = fd;
            return;
        }
        if (errno != EACCES && errno != EAGAIN) { /* a file system without locks */
            fprintf(stderr,
                    "warning: cannot lock %s (%s): nothing stops a second `moe train` "
                    "on %s while this one runs\n",
                    path, strerror(errno), dir);
            close(fd);
            return;
        }
        struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK) {
            close(fd);
            moe_input_error("%s is in use by process %ld (a `moe train` on it); wait for it to "
                            "end, or stop it (kill -INT %ld saves a checkpoint), then run the "
                            "command again (nothing was changed)",
                            dir, (long)who.l_pid, (long)who.l_pid);
        }
        /* the holder ended between the two calls: try again */
    }
    close(fd);
    moe_input_error("%s is in use by another process; run the command again when it has ended "
                    "(nothing was changed)",
                    dir);
}

void shell_word(char *out, size_t n, const char *s) {
    int safe = *s != '\0';
    for (const char *p = s; *p && safe; p++)
        safe = isalnum((unsigned char)*p) || strchr("/._-+=:,@%", *p) != NULL;
    if (safe) {
        snprintf(out, n, "%s", s);
        return;
    }
    /* 'it'\''s': a quote inside closes the quotes, adds an escaped one and opens them again */
    if (n < 3) {
        if (n) out[0] = '\0';
        return;
    }
    size_t k = 0;
    out[k++] = '\'';
    for (const char *p = s; *p && k + 6 < n; p++) {
        if (*p == '\'') {
            memcpy(out + k, "'\\''", 4);
            k += 4;
        } else
            out[k++] = *p;
    }
    out[k++] = '\'';
    out[k] = '\0';
}

/* The value of a "key = value" line of config_to_text, and the key's length. */
static const char *line_value(const char *line, size_t *klen) {
    const char *eq = strstr(line, " = ");
    *klen = eq ? (size_t)(eq - line) : strlen(line);
    return eq ? eq + 3 : "";
}

int run_check_config(const char *dir, const Config *stored, const Config *now, char *err,
                     int errlen) {
    char path[MOE_PATH_MAX + 32], why[1024];
    run_path(path, sizeof path, dir, "config.txt");
    if (!file_exists(path)) return 0; /* written again from the checkpoint's settings */
    Config file;
    config_defaults(&file);
    if (config_load_file(&file, path, why, sizeof why) != 0)
        return set_error(err, errlen,
                         "%s. config.txt records the run's settings and a resume keeps them: "
                         "put the file back as it was, or delete it to have it written again "
                         "from the checkpoint's settings (`moe info --ckpt %s/ckpt.bin` lists "
                         "them; nothing was changed)",
                         why, dir);
    char *text = config_to_text(&file), *was = config_to_text(stored);
    char *wanted = config_to_text(now);
    int rc = 0;
    /* equal to the checkpoint's, or to what this command resolved: a resume with --set that
     * was killed before its first checkpoint left config.txt ahead of ckpt.bin */
    if (strcmp(text, was) != 0 && strcmp(text, wanted) != 0) {
        /* every key is on one line, in the same order, in both texts */
        char diffs[640] = "", sets[640] = "", word[320], arg[300];
        int n = 0;
        size_t dl = 0, sl = 0;
        for (char *a = text, *b = was; *a && *b;) {
            char *na = strchr(a, '\n'), *nb = strchr(b, '\n');
            if (!na || !nb) break;
            *na = '\0', *nb = '\0';
            size_t ka, kb; /* the keys' lengths: equal, as the keys are */
            const char *va = line_value(a, &ka), *vb = line_value(b, &kb);
            if (strcmp(a, b) != 0 && n++ < 4 && dl < sizeof diffs && sl < sizeof sets) {
                dl += (size_t)snprintf(diffs + dl, sizeof diffs - dl,
                                       "%s%.*s = %s in config.txt, %s in the checkpoint",
                                       dl ? "; " : "", (int)ka, a, va, vb);
                snprintf(arg, sizeof arg, "%.*s=%s", (int)ka, a, va);
                shell_word(word, sizeof word, arg);
                if (sl < sizeof sets)
                    sl += (size_t)snprintf(sets + sl, sizeof sets - sl, " --set %s", word);
            }
            a = na + 1, b = nb + 1;
        }
        char cmd_dir[MOE_PATH_MAX + 8];
        shell_word(cmd_dir, sizeof cmd_dir, dir);
        rc = set_error(err, errlen,
                       "%s disagrees with the checkpoint's settings (%d key(s)): %s%s. A resume "
                       "trains with the checkpoint's settings and ignores edits to config.txt; "
                       "to change a setting, give it on the command line: moe train --resume "
                       "%s%s (a setting of the model's shape cannot change: start a new run with "
                       "--init %s/ckpt.bin), or put config.txt back (nothing was changed)",
                       path, n, diffs, n > 4 ? "; ..." : "", cmd_dir, sets, dir);
    }
    free(text);
    free(was);
    free(wanted);
    return rc;
}

/* The CSV files of a run directory (train.c writes them; dist.csv and replay.csv only when
 * their runs have them). */
static const char *const RUN_CSVS[] = {"train.csv",      "router.csv", "domains.csv",
                                       "val_router.csv", "mix.csv",    "val_domains.csv",
                                       "dist.csv",       "replay.csv"};

/* Is the first line of a CSV (len bytes, complete when it ends in a newline) a header of ours,
 * "step,..." of lowercase names, or the start of one torn by a kill? Binary junk, or another
 * file put in its place, is not. */
static int csv_header_ok(const char *line, size_t len) {
    const int complete = len > 0 && line[len - 1] == '\n';
    const size_t n = complete ? len - 1 : len;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)line[i]) || isdigit((unsigned char)line[i]) ||
              line[i] == '_' || line[i] == ','))
            return 0;
    return strncmp(line, "step,", n < 5 ? n : 5) == 0 && (!complete || n >= 5);
}

/* Read dir/file: 0 when it is missing, else 1 with *header_ok (csv_header_ok of its first line)
 * and *last_step / *has_step: the largest step of its complete rows (-1: none) and whether one
 * of them is of step want. */
static int csv_scan(const char *path, int want, int *header_ok, long *last_step, int *has_step) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    *header_ok = 1, *last_step = -1, *has_step = 0;
    for (int first = 1; (len = getline(&line, &cap, f)) > 0; first = 0) {
        if (first) {
            *header_ok = csv_header_ok(line, (size_t)len);
            continue;
        }
        if (line[len - 1] != '\n') break; /* a torn last row: cut on resume */
        const long s = row_step(line);
        if (s > *last_step) *last_step = s;
        if (s == want) *has_step = 1;
    }
    free(line);
    fclose(f);
    return 1;
}

int run_check_logs(const char *dir, int step, char *err, int errlen) {
    char path[MOE_PATH_MAX + 32];
    for (size_t i = 0; i < sizeof RUN_CSVS / sizeof RUN_CSVS[0]; i++) {
        run_path(path, sizeof path, dir, RUN_CSVS[i]);
        int header_ok, has_step;
        long last;
        const int exists = csv_scan(path, step, &header_ok, &last, &has_step);
        const char *wrong = NULL;
        if (exists && !header_ok)
            wrong = "is damaged: its first line is not the file's header (step,...)";
        else if (i == 0 && (!exists || !has_step))
            wrong = exists ? "has no row of that step: it is damaged, cut short or was replaced "
                             "(a step's rows are written before its checkpoint)"
                           : "is missing";
        if (!wrong) continue;
        /* appending to it would leave a log that no longer tells the run's story */
        return set_error(err, errlen,
                         "--resume %s: the checkpoint holds step %d, but %s %s. Restore the file "
                         "from a copy, or start a new run from the checkpoint's weights: moe "
                         "train --init %s/ckpt.bin --out NEW_DIR (nothing was changed)",
                         dir, step, path, wrong, dir);
    }
    return 0;
}

int run_check_restart(const char *dir, char *err, int errlen) {
    char path[MOE_PATH_MAX + 32], prov[MOE_PATH_MAX + 32], cfg[MOE_PATH_MAX + 32];
    run_path(path, sizeof path, dir, "train.csv");
    run_path(prov, sizeof prov, dir, "provenance.txt");
    run_path(cfg, sizeof cfg, dir, "config.txt");
    /* the settings the run had (not this command's --set): where its first checkpoint fell */
    Config c;
    config_defaults(&c);
    if (config_load_file(&c, cfg, err, errlen) != 0) return -1;
    int header_ok = 1, has_step;
    long last = -1;
    if (csv_scan(path, -2, &header_ok, &last, &has_step) && !header_ok)
        return set_error(err, errlen,
                         "--resume %s: %s is damaged (its first line is not the file's header) "
                         "and there is no ckpt.bin: what the run had done cannot be told, and "
                         "starting it again would overwrite its files. Restore them, or start a "
                         "new run with another --out (nothing was changed)",
                         dir, path);
    /* the first checkpoint is saved right after its step's rows: a row past that step means
     * it was written, and so does a resumed segment */
    const long first = c.ckpt_every > 0 && c.ckpt_every < c.steps ? c.ckpt_every : c.steps;
    int resumed = 0;
    FILE *f = fopen(prov, "r");
    if (f) {
        char line[256];
        while (!resumed && fgets(line, sizeof line, f))
            resumed = strncmp(line, "resumed_at_step = ", 18) == 0;
        fclose(f);
    }
    if (last <= first && !resumed) return 0;
    char why[160];
    if (last > first)
        snprintf(why, sizeof why,
                 "train.csv has rows up to step %ld, past its first checkpoint "
                 "(step %ld)",
                 last, first);
    else
        snprintf(why, sizeof why, "provenance.txt records a resumed segment");
    return set_error(err, errlen,
                     "--resume %s: there is no checkpoint %s/ckpt.bin, but the run had one (%s): "
                     "it was deleted or lost. Starting again from step 0 would overwrite the "
                     "run's logs; put ckpt.bin back, or start a new run with another --out "
                     "(nothing was changed)",
                     dir, dir, why);
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
