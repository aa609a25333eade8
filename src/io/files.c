/* files.c: see files.h. */
#include "io/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
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

int write_atomic(const char *path, const void *const *buf, const size_t *len, int n, char *err,
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
    int ok = 1;
    for (int i = 0; i < n && ok; i++) ok = len[i] == 0 || fwrite(buf[i], 1, len[i], f) == len[i];
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
