/* files.c: see files.h. */
#include "io/files.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

uint32_t crc32_with_hole(const uint8_t *p, size_t n, size_t hole) {
    static const uint8_t zero[4] = {0, 0, 0, 0};
    uint32_t crc = crc32_update(0, p, hole);
    crc = crc32_update(crc, zero, 4);
    return crc32_update(crc, p + hole + 4, n - hole - 4);
}

static const char *kind_of(mode_t m) {
    return S_ISFIFO(m)   ? "a FIFO (named pipe)"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

FILE *open_regular(const char *path, const FileSpec *spec, uint64_t *size, char *err, int errlen) {
    *size = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        set_error(err, errlen, "cannot open %s '%s': %s; %s", spec->what, path, strerror(errno),
                  spec->hint);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        set_error(err, errlen, "cannot inspect %s '%s': %s; %s", spec->what, path,
                  strerror(errno), spec->hint);
        close(fd);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        char inside[1100];
        snprintf(inside, sizeof inside, "%s/%s", path, spec->in_dir ? spec->in_dir : "");
        if (spec->in_dir && file_exists(inside))
            set_error(err, errlen, "%s '%s' is a directory, not a file; did you mean '%s'?",
                      spec->what, path, inside);
        else
            set_error(err, errlen, "%s '%s' is a directory, not a file; %s", spec->what, path,
                      spec->hint);
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        set_error(err, errlen, "%s '%s' is %s, which moe.c does not read; %s", spec->what, path,
                  kind_of(st.st_mode), spec->hint);
        close(fd);
        return NULL;
    }
    if (spec->max_bytes && (uint64_t)st.st_size > spec->max_bytes) {
        set_error(err, errlen, "%s '%s' is %llu bytes, over the %llu-byte limit for a %s; %s",
                  spec->what, path, (unsigned long long)st.st_size,
                  (unsigned long long)spec->max_bytes, spec->what, spec->hint);
        close(fd);
        return NULL;
    }
    /* a regular file never blocks; clear the flag anyway so reads behave as usual */
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        set_error(err, errlen, "cannot read %s '%s': %s", spec->what, path, strerror(errno));
        close(fd);
        return NULL;
    }
    *size = (uint64_t)st.st_size;
    return f;
}

char *file_read_all(const char *path, const FileSpec *spec, size_t *n, char *err, int errlen) {
    uint64_t size;
    FILE *f = open_regular(path, spec, &size, err, errlen);
    if (!f) return NULL;
    char *bytes = (char *)malloc_check((size_t)size + 1);
    errno = 0;
    *n = size ? fread(bytes, 1, (size_t)size, f) : 0;
    const int bad = ferror(f) || *n != size;
    fclose(f);
    if (bad) {
        free(bytes);
        set_error(err, errlen, "cannot read %s '%s' whole: %s", spec->what, path,
                  errno ? strerror(errno) : "it changed while being read");
        return NULL;
    }
    bytes[*n] = '\0';
    return bytes;
}

int file_crc32(const char *path, const FileSpec *spec, uint32_t *crc, char *err, int errlen) {
    size_t n;
    char *bytes = file_read_all(path, spec, &n, err, errlen);
    if (!bytes) return -1;
    *crc = crc32_update(0, bytes, n);
    free(bytes);
    return 0;
}

int make_dirs(const char *dir, char *err, int errlen) {
    char buf[1024];
    if (dir[0] == '\0') return set_error(err, errlen, "an empty path is not a directory; name one");
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return set_error(err, errlen, "path too long: %s", dir);
    for (char *p = buf + 1;; p++) {
        char saved = *p;
        if (saved == '/' || saved == '\0') {
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return set_error(err, errlen,
                                 "cannot create directory '%s': %s; check the path and its "
                                 "permissions",
                                 buf, strerror(errno));
            *p = saved;
        }
        if (saved == '\0') break;
    }
    return 0;
}

/* MOE_CRASH_IN_WRITE (files.h): 1 when this write of path is the one to die in */
static int crash_here(const char *path) {
    static int writes = 0; /* this process's writes of the named file so far */
    const char *spec = getenv("MOE_CRASH_IN_WRITE");
    const char *colon = spec ? strrchr(spec, ':') : NULL;
    if (!colon) return 0;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (strlen(base) != (size_t)(colon - spec) || strncmp(base, spec, strlen(base)) != 0) return 0;
    return ++writes == atoi(colon + 1);
}

/* The buffers of a write_atomic, as atomic_write's fill */
typedef struct {
    const void *const *buf;
    const size_t *len;
    int n;
    const char *path;
} Buffers;

static int fill_buffers(FILE *f, void *ctx) {
    const Buffers *b = (const Buffers *)ctx;
    int ok = 1;
    const int crash = crash_here(b->path);
    for (int i = 0; i < b->n && ok; i++) {
        ok = b->len[i] == 0 || fwrite(b->buf[i], 1, b->len[i], f) == b->len[i];
        if (crash && i == b->n / 2 && fflush(f) == 0) raise(SIGKILL);
    }
    return ok;
}

/* copy_atomic's fill: the whole of the open file ctx */
static int fill_copy(FILE *f, void *ctx) {
    FILE *in = (FILE *)ctx;
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, in)) > 0)
        if (fwrite(chunk, 1, got, f) != got) return 0;
    return !ferror(in);
}

/* The atomic protocol (files.h) with what fill(f, ctx) writes (1: all of it, 0: failed). */
static int atomic_write(const char *path, int (*fill)(FILE *, void *), void *ctx, char *err,
                        int errlen) {
    char parent[1024];
    snprintf(parent, sizeof parent, "%s", path);
    char *cut = strrchr(parent, '/');
    if (cut && cut != parent) {
        *cut = '\0';
        if (make_dirs(parent, err, errlen) != 0) return -1;
    }
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return set_error(err, errlen,
                         "cannot write '%s': %s; check the folder exists and is writable", tmp,
                         strerror(errno));
    errno = 0;
    int ok = fill(f, ctx);
    if (fill == fill_copy && crash_here(path) && fflush(f) == 0) raise(SIGKILL); /* files.h */
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) saved = errno;
        unlink(tmp);
        return set_error(err, errlen,
                         "writing '%s' failed: %s; check free disk space and permissions", path,
                         strerror(saved));
    }
    /* Make the rename itself durable; some file systems refuse fsync on a folder, which only
     * weakens durability, so it is not an error. */
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof(dir), ".");
    int fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    return 0;
}

int write_atomic(const char *path, const void *const *buf, const size_t *len, int n, char *err,
                 int errlen) {
    Buffers b = {buf, len, n, path};
    return atomic_write(path, fill_buffers, &b, err, errlen);
}

int copy_atomic(const char *from, const char *to, char *err, int errlen) {
    FILE *in = fopen(from, "rb");
    if (!in)
        return set_error(err, errlen, "cannot read '%s': %s; check that it exists", from,
                         strerror(errno));
    const int rc = atomic_write(to, fill_copy, in, err, errlen);
    fclose(in);
    return rc;
}
