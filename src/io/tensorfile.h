/*
 * tensorfile.h: named tensors on disk: moe.c checkpoints and safetensors files, written
 * (tensorfile.c) and read (checkpoints: tensorfile.c; safetensors: safetensors.c).
 *
 * Checkpoint file format (little-endian), version 2:
 *   header, 256 bytes:
 *     off  type     field
 *     0    char[8]  magic           "MOECKPT\0"
 *     8    uint32   version         2
 *     12   uint32   n_entries       0 .. CKPT_MAX_ENTRIES
 *     16   uint64   step            optimizer steps taken, 0 .. CKPT_MAX_STEP
 *     24   uint64   config_bytes    length of the config text, 0 .. CKPT_MAX_CONFIG_BYTES
 *     32   uint64   payload_bytes   length of the entry data after the directory
 *     40   uint32   crc32           CRC-32 of everything after the header
 *     44   uint32   header_crc32    CRC-32 of the 256 header bytes, bytes 44..47 taken as 0
 *     48   zeros up to byte 256 (readers reject non-zero reserved bytes)
 *   config text: the run's resolved settings, key=value lines (config.txt's format), no NUL
 *   n_entries directory records, 128 bytes each:
 *     0    char[80] name            NUL-padded, e.g. "param/layers.0.attn.wq", "rng/loader"
 *     80   uint32   dtype           TENSOR_F32 or TENSOR_U8
 *     84   uint32   ndim            0 .. 3
 *     88   uint32   shape[3]        0 beyond ndim
 *     100  uint32   reserved        0
 *     104  uint64   offset          bytes from the start of the payload
 *     112  uint64   nbytes          shape x dtype size
 *     120  zeros up to 128 bytes
 *   payload: entry data, back to back in directory order.
 * The file size must be exactly 256 + config_bytes + 128 n_entries + payload_bytes. Version 1
 * (before the header checksum: bytes 44..255 zero) is still read, with every other check.
 * Written atomically: to "<path>.tmp", flushed, fsync'ed, then renamed over <path>; a crash
 * at any moment leaves either the old file or the new one, never a torn one.
 */
#ifndef MOE_IO_TENSORFILE_H
#define MOE_IO_TENSORFILE_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MAGIC "MOECKPT"
#define CKPT_VERSION 2
#define CKPT_MAX_STEP 2147483647u       /* a step is an int everywhere else */
#define CKPT_MAX_ENTRIES (1u << 20)      /* a model has a few per tensor */
#define CKPT_MAX_CONFIG_BYTES (1u << 20) /* the settings' text is a few KiB */
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
    const void *data; /* writing: caller's memory; after reading: in Ckpt/SafeTensors.buffer */
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
/* Reads and checks everything (a regular file; magic, version, the header's CRC, reserved
 * zeros, every header field against its bound, file length, the body's CRC).
 * On failure returns -1 with a message saying what is wrong and what to do. */
int ckpt_read(Ckpt *ck, const char *path, char *err, int errlen);
/* The step of a checkpoint's header, read and checked as ckpt_read checks it (the body is not
 * read). Returns 0, or -1 with a message. */
int ckpt_read_step(const char *path, uint64_t *step, char *err, int errlen);
const TensorRef *ckpt_find(const Ckpt *ck, const char *name);
void ckpt_free(Ckpt *ck);

/* safetensors: 8-byte little-endian header length, a JSON header
 *   {"__metadata__": {k: v, ...}, "<name>": {"dtype": "F32", "shape": [...],
 *    "data_offsets": [begin, end]}, ...}
 * padded with spaces to a multiple of 8, then the raw data; begin and end count bytes from the
 * start of the data. Only F32 entries are written. Metadata keys and values are written as JSON
 * strings, so quotes, backslashes and newlines (a multi-line config text) survive the trip.
 * safetensors_write writes the file as any writer would, without a checksum. */
int safetensors_write(const char *path, const TensorRef *entries, int n,
                      const char *const *meta_keys, const char *const *meta_values, int n_meta,
                      char *err, int errlen);

/* The same file with a checksum (what `moe export` writes): the metadata starts with
 *   "moe.crc32": "hhhhhhhh"         CRC-32 (crc32_update: IEEE, reflected 0xEDB88320) of every
 *                                   byte of the file (length field, header with its padding,
 *                                   data) computed with these 8 digits written as "00000000";
 *                                   8 lowercase hex digits, spelled literally (no \u escapes)
 *   "moe.crc32_covers": "..."       a fixed sentence saying what the CRC covers. It is also a
 *                                   marker: one byte changed in the name "moe.crc32" leaves it,
 *                                   so the reader still knows the file was checksummed.
 * safetensors_read verifies it: a file with neither entry is read unchecked (SafeTensors.checksum
 * = 0); one with a single entry, a malformed value or a wrong CRC is refused. */
#define ST_CRC_KEY "moe.crc32"
#define ST_CRC_COVERS_KEY "moe.crc32_covers"
int safetensors_write_checksummed(const char *path, const TensorRef *entries, int n,
                                  const char *const *meta_keys, const char *const *meta_values,
                                  int n_meta, char *err, int errlen);

/* A safetensors file read into memory (safetensors.c). Every tensor comes back as float32:
 * F32 as stored, F16 and BF16 widened exactly; any other dtype is refused. */
typedef struct {
    int n;
    TensorRef *entries; /* (n) in header order; dtype TENSOR_F32, data in buffer */
    int n_meta;
    char **meta_keys, **meta_values; /* (n_meta) the "__metadata__" map, NUL-terminated */
    void *buffer;                    /* owns the tensor data, each tensor 64-byte aligned */
    char *path;                      /* the file that was read, for messages */
    int checksum; /* 1: its moe.crc32 was verified; 0: the file has none (not from moe export) */
} SafeTensors;

/* Reads and checks everything: the header length against the file size, the JSON (a strict
 * parser for exactly this format), dtypes, at most 3 dimensions, byte counts against shapes,
 * data_offsets that tile the data section exactly (in range, no overlap, no gap) and unique
 * names, and the moe.crc32 checksum when the file carries one (before any tensor is checked).
 * On failure returns -1 (st left empty) with a message naming the file, the problem and what
 * to do. */
int safetensors_read(SafeTensors *st, const char *path, char *err, int errlen);
void safetensors_free(SafeTensors *st);
const TensorRef *safetensors_find(const SafeTensors *st, const char *name);
/* The metadata value of key, or NULL when absent. */
const char *safetensors_meta(const SafeTensors *st, const char *key);

#endif
