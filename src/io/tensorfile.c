/*
 * tensorfile.c: checkpoints (moe.c's own format) and safetensors export (see tensorfile.h);
 * safetensors.c reads safetensors files.
 *
 * Both writers build the file as a list of buffers (header, directory, then each tensor's
 * bytes straight from the caller's memory) and hand it to write_atomic(), so a crash during a
 * save leaves the previous file untouched. The checkpoint reader trusts nothing: it checks the
 * header, the exact file length and the CRC-32 before it looks at a single directory record,
 * then checks every record, so a damaged file is reported as damaged, not misread.
 */
#include "io/tensorfile.h"
#include "io/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

/* Header and directory-record field offsets (bytes). */
enum {
    H_MAGIC = 0,
    H_VERSION = 8,
    H_N_ENTRIES = 12,
    H_STEP = 16,
    H_CONFIG = 24,
    H_PAYLOAD = 32,
    H_CRC = 40,
    H_HEADER_CRC = 44,
    H_RESERVED = 48,
    H_RESERVED_V1 = 44, /* version 1 had no header checksum */
    E_NAME = 0,
    E_DTYPE = 80,
    E_NDIM = 84,
    E_SHAPE = 88,
    E_RESERVED = 100,
    E_OFFSET = 104,
    E_NBYTES = 112,
    E_ZEROS = 120,
};

static size_t dtype_size(int dtype) {
    return dtype == TENSOR_F32 ? 4 : dtype == TENSOR_U8 ? 1 : 0;
}

/* nbytes implied by the shape (a 0-d tensor is one element); 0 when dtype or ndim is bad. */
static uint64_t shape_bytes(int dtype, int ndim, const uint32_t *shape) {
    if (ndim < 0 || ndim > 3) return 0;
    uint64_t n = dtype_size(dtype);
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

int ckpt_write(const char *path, uint64_t step, const char *config_text, const TensorRef *entries,
               int n, char *err, int errlen) {
    if (!config_text) config_text = "";
    size_t config_bytes = strlen(config_text);
    /* never write a file the reader would refuse */
    if (n < 0 || (uint32_t)n > CKPT_MAX_ENTRIES || step > CKPT_MAX_STEP ||
        config_bytes > CKPT_MAX_CONFIG_BYTES)
        return set_error(err, errlen,
                         "ckpt_write '%s': %d entries, step %llu, %zu bytes of config: outside "
                         "0..%u, 0..%u, 0..%u",
                         path, n, (unsigned long long)step, config_bytes, CKPT_MAX_ENTRIES,
                         CKPT_MAX_STEP, CKPT_MAX_CONFIG_BYTES);
    uint8_t *dir = (uint8_t *)calloc_check((size_t)n + 1, CKPT_ENTRY_BYTES);
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const TensorRef *e = &entries[i];
        uint32_t shape[3] = {0, 0, 0};
        for (int k = 0; k < e->ndim && k < 3; k++) shape[k] = (uint32_t)e->shape[k];
        size_t len = strnlen(e->name, TENSOR_NAME_MAX);
        const char *bad = NULL;
        if (len == 0 || len >= TENSOR_NAME_MAX)
            bad = "name empty or too long";
        else if (!dtype_size(e->dtype))
            bad = "unknown dtype";
        else if (e->ndim < 0 || e->ndim > 3)
            bad = "ndim outside 0..3";
        else if (shape_bytes(e->dtype, e->ndim, shape) != e->nbytes)
            bad = "nbytes != shape x dtype";
        else if (e->nbytes && !e->data)
            bad = "no data";
        for (int j = 0; j < i && !bad; j++)
            if (strcmp(entries[j].name, e->name) == 0) bad = "duplicate name";
        if (bad) {
            free(dir);
            return set_error(err, errlen, "ckpt_write '%s': entry %d ('%.*s'): %s", path, i,
                             TENSOR_NAME_MAX - 1, e->name, bad);
        }
        uint8_t *r = dir + (size_t)i * CKPT_ENTRY_BYTES;
        memcpy(r + E_NAME, e->name, len);
        le_put_u32(r + E_DTYPE, (uint32_t)e->dtype);
        le_put_u32(r + E_NDIM, (uint32_t)e->ndim);
        for (int k = 0; k < 3; k++) le_put_u32(r + E_SHAPE + 4 * k, shape[k]);
        le_put_u64(r + E_OFFSET, offset);
        le_put_u64(r + E_NBYTES, e->nbytes);
        offset += e->nbytes;
    }
    size_t dir_bytes = (size_t)n * CKPT_ENTRY_BYTES;
    uint32_t crc = crc32_update(0, config_text, config_bytes);
    crc = crc32_update(crc, dir, dir_bytes);
    for (int i = 0; i < n; i++) crc = crc32_update(crc, entries[i].data, entries[i].nbytes);

    uint8_t h[CKPT_HEADER_BYTES] = {0};
    memcpy(h + H_MAGIC, CKPT_MAGIC, sizeof(CKPT_MAGIC));
    le_put_u32(h + H_VERSION, CKPT_VERSION);
    le_put_u32(h + H_N_ENTRIES, (uint32_t)n);
    le_put_u64(h + H_STEP, step);
    le_put_u64(h + H_CONFIG, config_bytes);
    le_put_u64(h + H_PAYLOAD, offset);
    le_put_u32(h + H_CRC, crc);
    le_put_u32(h + H_HEADER_CRC, crc32_with_hole(h, CKPT_HEADER_BYTES, H_HEADER_CRC));

    const void **bufs = (const void **)malloc_check(sizeof(void *) * ((size_t)n + 3));
    size_t *lens = (size_t *)malloc_check(sizeof(size_t) * ((size_t)n + 3));
    bufs[0] = h, lens[0] = sizeof(h);
    bufs[1] = config_text, lens[1] = config_bytes;
    bufs[2] = dir, lens[2] = dir_bytes;
    for (int i = 0; i < n; i++) bufs[3 + i] = entries[i].data, lens[3 + i] = entries[i].nbytes;
    int rc = write_atomic(path, bufs, lens, n + 3, err, errlen);
    free(bufs);
    free(lens);
    free(dir);
    return rc;
}

#define CK_CORRUPT "it was damaged after writing; use an earlier checkpoint or retrain"
#define CK_FOREIGN "pass a checkpoint written by `moe train` (runs/NAME/ckpt.bin)"

/* Check directory record i of dir against the running payload offset; fills e. */
static const char *parse_entry(TensorRef *e, const uint8_t *r, uint64_t *offset, uint64_t payload,
                               uint64_t *entry_offset) {
    if (r[E_NAME] == 0 || r[E_NAME + TENSOR_NAME_MAX - 1] != 0) return "name empty or unterminated";
    size_t len = strlen((const char *)r + E_NAME);
    for (size_t k = len; k < TENSOR_NAME_MAX; k++)
        if (r[E_NAME + k]) return "name not NUL-padded";
    uint32_t dtype = le_get_u32(r + E_DTYPE), ndim = le_get_u32(r + E_NDIM), shape[3];
    if (!dtype_size((int)dtype)) return "unknown dtype";
    if (ndim > 3) return "ndim above 3";
    for (int k = 0; k < 3; k++) {
        shape[k] = le_get_u32(r + E_SHAPE + 4 * k);
        if ((uint32_t)k >= ndim && shape[k]) return "non-zero size beyond ndim";
        if (shape[k] > INT32_MAX) return "dimension too large";
    }
    if (le_get_u32(r + E_RESERVED)) return "non-zero reserved field";
    for (int k = E_ZEROS; k < CKPT_ENTRY_BYTES; k++)
        if (r[k]) return "non-zero padding";
    uint64_t off = le_get_u64(r + E_OFFSET), nbytes = le_get_u64(r + E_NBYTES);
    if (nbytes != shape_bytes((int)dtype, (int)ndim, shape)) return "nbytes != shape x dtype";
    if (off != *offset || nbytes > payload - off) return "offsets do not tile the payload";
    memcpy(e->name, r + E_NAME, TENSOR_NAME_MAX);
    e->dtype = (int)dtype;
    e->ndim = (int)ndim;
    for (int k = 0; k < 3; k++) e->shape[k] = (int)shape[k];
    e->nbytes = (size_t)nbytes;
    *entry_offset = off;
    *offset = off + nbytes;
    return NULL;
}

/* The header h of a checkpoint of file_bytes bytes checked (magic, version, checksum, reserved
 * bytes, every field within its bound, the sizes tiling the file) into *hd. */
typedef struct {
    uint32_t n; /* entries */
    uint64_t config_bytes, payload, step;
} CkptHeader;

static int check_header(CkptHeader *hd, const uint8_t *h, uint64_t file_bytes, const char *path,
                        char *err, int errlen) {
    if (memcmp(h + H_MAGIC, CKPT_MAGIC, sizeof(CKPT_MAGIC)) != 0)
        return set_error(err, errlen,
                         "'%s' is not a moe.c checkpoint (bad magic, expected \"%s\"); " CK_FOREIGN,
                         path, CKPT_MAGIC);
    uint32_t version = le_get_u32(h + H_VERSION);
    if (version != CKPT_VERSION && version != 1)
        return set_error(err, errlen,
                         "checkpoint '%s' has format version %u but this program reads versions 1 "
                         "and %d; use the moe.c version that wrote it, or retrain",
                         path, version, CKPT_VERSION);
    /* the header's own checksum first, so damage anywhere in it (the step included) is
     * reported as damage rather than read as a strange value */
    uint32_t hcrc = crc32_with_hole(h, CKPT_HEADER_BYTES, H_HEADER_CRC);
    if (version == CKPT_VERSION && hcrc != le_get_u32(h + H_HEADER_CRC))
        return set_error(
            err, errlen,
            "checkpoint '%s' is corrupt (header checksum mismatch: stored %08x, computed "
            "%08x): " CK_CORRUPT,
            path, le_get_u32(h + H_HEADER_CRC), hcrc);
    for (int i = version == 1 ? H_RESERVED_V1 : H_RESERVED; i < CKPT_HEADER_BYTES; i++) {
        if (h[i])
            return set_error(
                err, errlen,
                "checkpoint '%s' is corrupt (reserved header byte %d is not zero): " CK_CORRUPT,
                path, i);
    }
    const uint32_t n = le_get_u32(h + H_N_ENTRIES);
    const uint64_t config_bytes = le_get_u64(h + H_CONFIG), payload = le_get_u64(h + H_PAYLOAD);
    const uint64_t step = le_get_u64(h + H_STEP);
    /* every field within its bound before any size is computed from it */
    const struct {
        const char *name;
        uint64_t value, limit;
    } field[3] = {{"step", step, CKPT_MAX_STEP},
                  {"n_entries", n, CKPT_MAX_ENTRIES},
                  {"config_bytes", config_bytes, CKPT_MAX_CONFIG_BYTES}};
    for (int i = 0; i < 3; i++)
        if (field[i].value > field[i].limit)
            return set_error(err, errlen,
                             "checkpoint '%s' is corrupt (header field %s is %llu, above its limit "
                             "%llu): " CK_CORRUPT,
                             path, field[i].name, (unsigned long long)field[i].value,
                             (unsigned long long)field[i].limit);
    uint64_t body = file_bytes - CKPT_HEADER_BYTES, dir_bytes = (uint64_t)n * CKPT_ENTRY_BYTES;
    /* body == config + dir + payload, compared without overflowing on absurd header values */
    int short_file = body < config_bytes || body - config_bytes < dir_bytes ||
                     body - config_bytes - dir_bytes < payload;
    if (short_file || body - config_bytes - dir_bytes != payload)
        return set_error(
            err, errlen,
            "checkpoint '%s' is %s: the header promises %llu bytes of config, %u "
            "entries and %llu payload bytes, but the file has %llu bytes after the header; %s",
            path, short_file ? "truncated" : "too long (extra bytes at the end)",
            (unsigned long long)config_bytes, n, (unsigned long long)payload,
            (unsigned long long)body,
            short_file ? "the save was cut short; use an earlier checkpoint or retrain"
                       : CK_CORRUPT);
    *hd = (CkptHeader){.n = n, .config_bytes = config_bytes, .payload = payload, .step = step};
    return 0;
}

/* ck's n entries from the directory dir (each checked, no name twice, together tiling the
 * payload), their payload offsets into offs; then, when a float tensor sits at an offset that is
 * not a multiple of 4, the payload copied so that every entry starts 64-byte aligned. */
static int read_entries(Ckpt *ck, const uint8_t *dir, uint64_t payload, uint64_t *offs,
                        const char *path, char *err, int errlen) {
    const uint32_t n = (uint32_t)ck->n;
    uint64_t offset = 0;
    int misaligned = 0;
    for (uint32_t i = 0; i < n; i++) {
        const char *bad = parse_entry(&ck->entries[i], dir + (size_t)i * CKPT_ENTRY_BYTES, &offset,
                                      payload, &offs[i]);
        if (!bad)
            for (uint32_t j = 0; j < i && !bad; j++)
                if (strcmp(ck->entries[j].name, ck->entries[i].name) == 0) bad = "duplicate name";
        if (bad)
            return set_error(err, errlen,
                             "checkpoint '%s' is malformed (entry %u: %s); " CK_FOREIGN, path, i,
                             bad);
        misaligned |= ck->entries[i].dtype == TENSOR_F32 && offs[i] % 4 != 0;
    }
    if (offset != payload)
        return set_error(err, errlen,
                         "checkpoint '%s' is malformed (entries cover %llu of %llu payload "
                         "bytes); " CK_FOREIGN,
                         path, (unsigned long long)offset, (unsigned long long)payload);
    if (misaligned) {
        /* Back-to-back storage can leave a float tensor at an odd offset; give every entry a
         * 64-byte aligned home so callers may read entries as float arrays. */
        uint64_t total = 0;
        for (uint32_t i = 0; i < n; i++) total += (ck->entries[i].nbytes + 63) / 64 * 64;
        uint8_t *aligned = (uint8_t *)floats_alloc(total / 4 + 1), *p = aligned;
        for (uint32_t i = 0; i < n; i++) {
            memcpy(p, (uint8_t *)ck->buffer + offs[i], ck->entries[i].nbytes);
            offs[i] = (uint64_t)(p - aligned);
            p += (ck->entries[i].nbytes + 63) / 64 * 64;
        }
        free(ck->buffer);
        ck->buffer = aligned;
    }
    return 0;
}

static const FileSpec CKPT_FILE = {"checkpoint", CK_FOREIGN, "ckpt.bin", 0};

int ckpt_read_step(const char *path, uint64_t *step, char *err, int errlen) {
    uint64_t file_bytes;
    FILE *f = open_regular(path, &CKPT_FILE, &file_bytes, err, errlen);
    if (!f) return -1;
    uint8_t h[CKPT_HEADER_BYTES];
    CkptHeader hd = {0};
    int rc = -1;
    if (file_bytes < CKPT_HEADER_BYTES || fread(h, 1, sizeof(h), f) != sizeof(h))
        set_error(err, errlen, "checkpoint '%s' is truncated: less than its %d-byte header", path,
                  CKPT_HEADER_BYTES);
    else if (check_header(&hd, h, file_bytes, path, err, errlen) == 0)
        rc = 0, *step = hd.step;
    fclose(f);
    return rc;
}

int ckpt_read(Ckpt *ck, const char *path, char *err, int errlen) {
    memset(ck, 0, sizeof(*ck));
    uint64_t file_bytes;
    FILE *f = open_regular(path, &CKPT_FILE, &file_bytes, err, errlen);
    if (!f) return -1;
    uint8_t h[CKPT_HEADER_BYTES];
    int rc = -1;
    uint8_t *dir = NULL;
    uint64_t *offs = NULL;
    if (file_bytes < CKPT_HEADER_BYTES || fread(h, 1, sizeof(h), f) != sizeof(h)) {
        set_error(err, errlen,
                  "checkpoint '%s' is truncated: %llu bytes, less than its %d-byte header; "
                  "the save was cut short; use an earlier checkpoint or retrain",
                  path, (unsigned long long)file_bytes, CKPT_HEADER_BYTES);
        goto done;
    }
    CkptHeader hd = {0};
    if (check_header(&hd, h, file_bytes, path, err, errlen) != 0) goto done;
    const uint32_t n = hd.n;
    const uint64_t config_bytes = hd.config_bytes, payload = hd.payload, step = hd.step;
    const uint64_t dir_bytes = (uint64_t)n * CKPT_ENTRY_BYTES;
    ck->config_text = (char *)malloc_check(config_bytes + 1);
    dir = (uint8_t *)malloc_check(dir_bytes);
    ck->buffer = floats_alloc((payload + 3) / 4); /* 64-byte aligned */
    if (fread(ck->config_text, 1, config_bytes, f) != config_bytes ||
        fread(dir, 1, dir_bytes, f) != dir_bytes || fread(ck->buffer, 1, payload, f) != payload) {
        set_error(err, errlen, "checkpoint '%s': read error (%s); check the disk", path,
                  strerror(errno));
        goto done;
    }
    ck->config_text[config_bytes] = 0;
    uint32_t crc = crc32_update(0, ck->config_text, config_bytes);
    crc = crc32_update(crc, dir, dir_bytes);
    crc = crc32_update(crc, ck->buffer, payload);
    if (crc != le_get_u32(h + H_CRC)) {
        set_error(err, errlen,
                  "checkpoint '%s' is corrupt (checksum mismatch: stored %08x, computed "
                  "%08x): " CK_CORRUPT,
                  path, le_get_u32(h + H_CRC), crc);
        goto done;
    }
    if (strlen(ck->config_text) != config_bytes) {
        set_error(err, errlen,
                  "checkpoint '%s' is malformed (NUL byte inside the config text); " CK_FOREIGN,
                  path);
        goto done;
    }
    ck->step = step;
    ck->n = (int)n;
    ck->entries = (TensorRef *)calloc_check(n, sizeof(TensorRef));
    offs = (uint64_t *)malloc_check(sizeof(uint64_t) * (n + 1));
    if (read_entries(ck, dir, payload, offs, path, err, errlen) != 0) goto done;
    for (uint32_t i = 0; i < n; i++) ck->entries[i].data = (uint8_t *)ck->buffer + offs[i];
    rc = 0;
done:
    free(dir);
    free(offs);
    fclose(f);
    if (rc != 0) ckpt_free(ck);
    return rc;
}

const TensorRef *ckpt_find(const Ckpt *ck, const char *name) {
    for (int i = 0; i < ck->n; i++)
        if (strcmp(ck->entries[i].name, name) == 0) return &ck->entries[i];
    return NULL;
}

void ckpt_free(Ckpt *ck) {
    free(ck->config_text);
    free(ck->entries);
    free(ck->buffer);
    memset(ck, 0, sizeof(*ck));
}

/* ---- safetensors ---------------------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t len, cap;
} Text;

static void text_put(Text *t, const char *fmt, ...) MOE_PRINTF(2, 3);
static void text_put(Text *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < t->cap - t->len) {
            t->len += (size_t)k;
            return;
        }
        t->cap = 2 * t->cap + (size_t)(k > 0 ? k : 0) + 64;
        char *grown = (char *)realloc(t->s, t->cap);
        if (!grown) moe_fatal("out of memory building a safetensors header");
        t->s = grown;
    }
}

/* A JSON string literal: quotes and backslashes escaped, control characters as \n, \t, \r or
 * \u00XX, so any C string (a multi-line config text) reads back byte for byte. */
static void text_json_string(Text *t, const char *s) {
    text_put(t, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            text_put(t, "\\%c", c);
        else if (c == '\n')
            text_put(t, "\\n");
        else if (c == '\t')
            text_put(t, "\\t");
        else if (c == '\r')
            text_put(t, "\\r");
        else if (c < 0x20)
            text_put(t, "\\u%04x", c);
        else
            text_put(t, "%c", c);
    }
    text_put(t, "\"");
}

/* The two metadata entries of a checksummed file (tensorfile.h): the CRC-32 and what it covers.
 * The second is also a marker: a file with only one of the two was damaged. */
#define ST_CRC_COVERS "the whole file, with the 8 hex digits of moe.crc32 read as ASCII '0'"

static int write_st(const char *path, const TensorRef *entries, int n, const char *const *meta_keys,
                    const char *const *meta_values, int n_meta, int checksum, char *err,
                    int errlen) {
    Text t = {(char *)malloc_check(256), 0, 256};
    t.s[0] = 0;
    text_put(&t, "{\"__metadata__\":{");
    size_t digits = 0; /* where the 8 hex digits of moe.crc32 go in the header */
    if (checksum) {
        text_put(&t, "\"" ST_CRC_KEY "\":\"");
        digits = t.len;
        text_put(&t, "00000000\",\"" ST_CRC_COVERS_KEY "\":");
        text_json_string(&t, ST_CRC_COVERS);
    }
    for (int i = 0; i < n_meta; i++) {
        text_put(&t, i || checksum ? "," : "");
        text_json_string(&t, meta_keys[i]);
        text_put(&t, ":");
        text_json_string(&t, meta_values[i]);
    }
    text_put(&t, "}");
    const void **bufs = (const void **)malloc_check(sizeof(void *) * ((size_t)n + 2));
    size_t *lens = (size_t *)malloc_check(sizeof(size_t) * ((size_t)n + 2));
    int nb = 2, rc = -1;
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const TensorRef *e = &entries[i];
        if (e->dtype != TENSOR_F32) continue; /* only float tensors are exported */
        uint32_t shape[3] = {0, 0, 0};
        for (int k = 0; k < e->ndim && k < 3; k++) shape[k] = (uint32_t)e->shape[k];
        if (e->ndim < 0 || e->ndim > 3 || shape_bytes(e->dtype, e->ndim, shape) != e->nbytes ||
            (e->nbytes && !e->data)) {
            set_error(err, errlen,
                      "safetensors_write '%s': entry %d ('%.*s') has a bad shape, size or "
                      "no data",
                      path, i, TENSOR_NAME_MAX - 1, e->name);
            goto done;
        }
        text_put(&t, ",");
        text_json_string(&t, e->name);
        text_put(&t, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int k = 0; k < e->ndim; k++) text_put(&t, "%s%u", k ? "," : "", shape[k]);
        text_put(&t, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                 (unsigned long long)(offset + e->nbytes));
        offset += e->nbytes;
        bufs[nb] = e->data, lens[nb] = e->nbytes, nb++;
    }
    text_put(&t, "}");
    while (t.len % 8) text_put(&t, " "); /* the data section starts 8-byte aligned */
    uint8_t len8[8];
    le_put_u64(len8, t.len);
    bufs[0] = len8, lens[0] = 8;
    bufs[1] = t.s, lens[1] = t.len;
    if (checksum) { /* every byte of the file, the digits still "00000000" */
        uint32_t crc = 0;
        for (int b = 0; b < nb; b++) crc = crc32_update(crc, bufs[b], lens[b]);
        char hex[9];
        snprintf(hex, sizeof hex, "%08x", crc);
        memcpy(t.s + digits, hex, 8);
    }
    rc = write_atomic(path, bufs, lens, nb, err, errlen);
done:
    free(bufs);
    free(lens);
    free(t.s);
    return rc;
}

int safetensors_write(const char *path, const TensorRef *entries, int n,
                      const char *const *meta_keys, const char *const *meta_values, int n_meta,
                      char *err, int errlen) {
    return write_st(path, entries, n, meta_keys, meta_values, n_meta, 0, err, errlen);
}

int safetensors_write_checksummed(const char *path, const TensorRef *entries, int n,
                                  const char *const *meta_keys, const char *const *meta_values,
                                  int n_meta, char *err, int errlen) {
    return write_st(path, entries, n, meta_keys, meta_values, n_meta, 1, err, errlen);
}
