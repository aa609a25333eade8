/*
 * files.h: the file-system steps every writer shares.
 *
 * Atomic write protocol (shards, checkpoints, safetensors): everything goes to "<path>.tmp",
 * which is flushed, fsync'ed and closed, then renamed over <path>, then the folder is fsync'ed
 * so the rename itself survives a power cut. Until the rename the old file is untouched, so a
 * crash at any moment leaves either the old file or the complete new one.
 *
 * Every reader (checkpoints, shards, safetensors, config files) opens its input with
 * open_regular(), so a directory, a FIFO, a device or an oversized file is refused the same
 * way, with a message, before a single byte is read.
 */
#ifndef MOE_IO_FILES_H
#define MOE_IO_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What a reader expects, for open_regular's messages and limits. */
typedef struct {
    const char *what;   /* the file's role: "checkpoint", "shard", "config file" */
    const char *hint;   /* what to do instead, a clause: "pass a checkpoint written by ..." */
    const char *in_dir; /* the file a directory of this kind holds ("ckpt.bin"), or NULL */
    uint64_t max_bytes; /* larger files are refused; 0: no limit */
} FileSpec;

int file_exists(const char *path);
/* 1 when a and b name the same existing file (same device and inode), else 0. */
int same_file(const char *a, const char *b);
/* Open path for reading when it is a regular file (of at most spec->max_bytes), and never
 * block: the open is O_NONBLOCK, so a FIFO without a writer (or a device) cannot hang it, and
 * fstat then decides. A missing file, a directory (naming spec->in_dir inside it when that
 * exists), a FIFO, socket or device, and an oversized file are refused with a message that
 * names the path, what it is and spec->hint. Returns the stream and its length in *size, or
 * NULL with the message in err. */
FILE *open_regular(const char *path, const FileSpec *spec, uint64_t *size, char *err, int errlen);
/* The whole of the regular file path (open_regular's checks, by spec), with a NUL after its
 * last byte; its length in *n. Returns the bytes (free them), or NULL with a message in err. */
char *file_read_all(const char *path, const FileSpec *spec, size_t *n, char *err, int errlen);
/* The CRC-32 (crc32_update from 0) of the whole file path into *crc, the identity of a
 * tokenizer.json. Returns 0, or -1 with a message in err. */
int file_crc32(const char *path, const FileSpec *spec, uint32_t *crc, char *err, int errlen);
/* mkdir -p dir. Returns 0, or -1 with a message in err. */
int make_dirs(const char *dir, char *err, int errlen);
/* Write the n buffers buf[i] of len[i] bytes, in order, to path by the atomic protocol.
 * For crash tests, MOE_CRASH_IN_WRITE=NAME:K kills the process (SIGKILL) in the middle of its
 * K-th write of a file named NAME (counted from 1, in this process, copy_atomic's too): half
 * the buffers (a copy: all of it) are in "<path>.tmp" and the rename has not happened, the
 * state a power cut leaves. */
int write_atomic(const char *path, const void *const *buf, const size_t *len, int n, char *err,
                 int errlen);
/* Copy the file from to the file to by the atomic protocol. Returns 0, or -1 with a message. */
int copy_atomic(const char *from, const char *to, char *err, int errlen);

/* CRC-32 (crc32_update from 0) of the n bytes at p with the 4 bytes at offset hole taken as
 * zero: the checksum of a header that stores its own checksum at hole. */
uint32_t crc32_with_hole(const uint8_t *p, size_t n, size_t hole);

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
