/*
 * files.h: the file-system steps every writer shares.
 *
 * Atomic write protocol (shards, checkpoints, safetensors): everything goes to "<path>.tmp",
 * which is flushed, fsync'ed and closed, then renamed over <path>, then the folder is fsync'ed
 * so the rename itself survives a power cut. Until the rename the old file is untouched, so a
 * crash at any moment leaves either the old file or the complete new one.
 */
#ifndef MOE_IO_FILES_H
#define MOE_IO_FILES_H

#include <stddef.h>
#include <stdint.h>

int file_exists(const char *path);
/* mkdir -p dir. Returns 0, or -1 with a message in err. */
int make_dirs(const char *dir, char *err, int errlen);
/* Write the n buffers buf[i] of len[i] bytes, in order, to path by the atomic protocol. */
int write_atomic(const char *path, const void *const *buf, const size_t *len, int n, char *err,
                 int errlen);

/* Little-endian integers in file headers, byte by byte: the same bytes on any host. */
static inline uint32_t le_get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t le_get_u64(const uint8_t *p) {
    return le_get_u32(p) | (uint64_t)le_get_u32(p + 4) << 32;
}
static inline void le_put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void le_put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#endif
