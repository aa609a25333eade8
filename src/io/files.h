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

int file_exists(const char *path);
/* mkdir -p dir. Returns 0, or -1 with a message in err. */
int make_dirs(const char *dir, char *err, int errlen);
/* Write the n buffers buf[i] of len[i] bytes, in order, to path by the atomic protocol. */
int write_atomic(const char *path, const void *const *buf, const size_t *len, int n, char *err,
                 int errlen);

#endif
