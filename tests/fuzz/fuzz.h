/*
 * fuzz.h: what the libFuzzer harnesses share (tests/fuzz/fuzz_*.c, built by `make fuzz`).
 *
 * Each harness hands its input to a reader that takes a path. The input goes into one
 * anonymous in-memory file (memfd_create), reached as /proc/self/fd/N: a regular file to
 * open_regular(), and nothing is ever written to the file system.
 */
#ifndef MOE_FUZZ_H
#define MOE_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/files.h"

/* The path of a file that holds exactly data[0..n). */
static inline const char *fuzz_file(const uint8_t *data, size_t n) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("moe_fuzz", 0);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (n && pwrite(fd, data, n, 0) != (ssize_t)n)) {
        perror("fuzz_file");
        abort();
    }
    return path;
}

/* A copy of the input for a harness to fix up (checksums) before a second read. */
static inline uint8_t *fuzz_copy(const uint8_t *data, size_t n) {
    uint8_t *c = (uint8_t *)malloc(n ? n : 1);
    if (!c) abort();
    for (size_t i = 0; i < n; i++) c[i] = data[i];
    return c;
}

#endif
