/*
 * tensorfile.h: named tensors on disk: moe.c checkpoints and safetensors export.
 *
 * Checkpoint file format (little-endian), version 1:
 *   header, 256 bytes:
 *     char     magic[8]        "MOECKPT\0"
 *     uint32   version         1
 *     uint32   n_entries
 *     uint64   step            optimizer steps taken
 *     uint64   config_bytes    length of the config text that follows the header
 *     uint64   payload_bytes   length of the entry data after the directory
 *     uint32   crc32           CRC-32 of everything after the header
 *     zeros up to byte 256
 *   config text: the run's resolved settings, key=value lines (config.txt's format)
 *   n_entries directory records, 128 bytes each:
 *     char     name[80]        NUL-padded, e.g. "param/layers.0.attn.wq", "adam_m/...",
 * "rng/loader" uint32   dtype           TENSOR_F32 or TENSOR_U8 uint32   ndim            0 .. 3
 *     uint32   shape[3]
 *     uint32   reserved        0
 *     uint64   offset          bytes from the start of the payload
 *     uint64   nbytes
 *     zeros up to 128 bytes
 *   payload: entry data, back to back in directory order.
 * Written atomically: to "<path>.tmp", flushed, fsync'ed, then renamed over <path>; a crash
 * at any moment leaves either the old file or the new one, never a torn one.
 */
#ifndef MOE_IO_TENSORFILE_H
#define MOE_IO_TENSORFILE_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MAGIC "MOECKPT"
#define CKPT_VERSION 1
#define CKPT_HEADER_BYTES 256
#define CKPT_ENTRY_BYTES 128
#define TENSOR_NAME_MAX 80

enum { TENSOR_F32 = 0, TENSOR_U8 = 1 };

typedef struct {
    char name[TENSOR_NAME_MAX];
    int dtype;
    int ndim;
    int shape[3];
    size_t nbytes;
    const void *data; /* for writing: caller's memory; after reading: inside Ckpt.buffer */
} TensorRef;

typedef struct {
    uint64_t step;
    char *config_text; /* NUL-terminated */
    int n;
    TensorRef *entries; /* (n) */
    void *buffer;       /* owns the payload */
} Ckpt;

int ckpt_write(const char *path, uint64_t step, const char *config_text, const TensorRef *entries,
               int n, char *err, int errlen);
/* Reads and checks everything (magic, version, reserved zeros, sizes, file length, CRC).
 * On failure returns -1 with a message saying what is wrong and what to do. */
int ckpt_read(Ckpt *ck, const char *path, char *err, int errlen);
const TensorRef *ckpt_find(const Ckpt *ck, const char *name);
void ckpt_free(Ckpt *ck);

/* safetensors: 8-byte little-endian header length, a JSON header
 *   {"__metadata__": {k: v, ...}, "<name>": {"dtype": "F32", "shape": [...],
 *    "data_offsets": [begin, end]}, ...}
 * padded with spaces to a multiple of 8, then the raw data. Only F32 entries are written. */
int safetensors_write(const char *path, const TensorRef *entries, int n,
                      const char *const *meta_keys, const char *const *meta_values, int n_meta,
                      char *err, int errlen);

#endif
