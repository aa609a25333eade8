/*
 * safetensors.c: reading safetensors files (see tensorfile.h; the writer is in tensorfile.c).
 *
 * The reader trusts nothing in the file. It checks the 8-byte header length against the file
 * size before reading the header, parses the header with a strict JSON parser that accepts
 * exactly what the format needs (one object of objects, strings, arrays of non-negative
 * integers), then checks every tensor: a known dtype, at most 3 dimensions, end - begin equal
 * to numel x element size, and offsets that tile the data section from byte 0 to its last
 * byte with no overlap and no gap (the format's own rule: every data byte belongs to exactly
 * one tensor). A file from `moe export` carries a CRC-32 of all its bytes (moe.crc32,
 * tensorfile.h), checked right after the header is parsed. Only then is any tensor data read.
 */
#include "io/files.h"
#include "io/json.h"
#include "io/tensorfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#define ST_HEADER_MAX (100u << 20) /* larger JSON headers are refused as implausible */
#define ST_REDO "the file is damaged or not safetensors: write it again (e.g. with `moe export`)"

/* ---- the header ----------------------------------------------------------------------------- */

/* One tensor as the header describes it. */
typedef struct {
    char *name, *dtype;
    int ndim; /* may exceed 3 (refused later, with a message) */
    uint64_t shape[3], begin, end;
    int seen; /* bit mask of the fields read: 1 dtype, 2 shape, 4 data_offsets */
} Raw;

typedef struct {
    Raw *t;
    int n, cap;
    char **mk, **mv;
    int nm, mcap;
    size_t crc_at, crc_end; /* the moe.crc32 value's bytes in the JSON, quotes included; 0: none */
} Header;

static void header_free(Header *h) {
    for (int i = 0; i < h->n; i++) free(h->t[i].name), free(h->t[i].dtype);
    for (int i = 0; i < h->nm; i++) free(h->mk[i]), free(h->mv[i]);
    free(h->t), free(h->mk), free(h->mv);
    memset(h, 0, sizeof(*h));
}

static void *grow(void *p, int *cap, size_t elem) {
    *cap = *cap ? 2 * *cap : 16;
    void *q = realloc(p, (size_t)*cap * elem);
    if (!q) moe_fatal("out of memory reading a safetensors header");
    return q;
}

/* {"__metadata__": {"k": "v", ...}} */
static int parse_metadata(JsonReader *j, Header *h) {
    if (h->mk) return json_fail(j, "\"__metadata__\" appears twice");
    h->mk = (char **)grow(NULL, &h->mcap, sizeof(char *));
    h->mv = (char **)malloc_check((size_t)h->mcap * sizeof(char *));
    if (json_expect(j, '{')) return -1;
    if (json_take(j, '}')) return 0;
    do {
        if (h->nm == h->mcap) {
            int cap = h->mcap;
            h->mk = (char **)grow(h->mk, &h->mcap, sizeof(char *));
            h->mv = (char **)grow(h->mv, &cap, sizeof(char *));
        }
        char *k, *v;
        if (json_string(j, &k)) return -1;
        if (json_expect(j, ':') || (json_ws(j), j->i < j->n && j->s[j->i] != '"')) {
            json_fail(j, "metadata value of \"%.60s\" is not a string", k);
            return free(k), -1;
        }
        size_t at = j->i;
        if (json_string(j, &v)) return free(k), -1;
        if (strcmp(k, ST_CRC_KEY) == 0) h->crc_at = at, h->crc_end = j->i;
        for (int i = 0; i < h->nm; i++)
            if (strcmp(h->mk[i], k) == 0) {
                json_fail(j, "metadata key \"%.60s\" appears twice", k);
                return free(k), free(v), -1;
            }
        h->mk[h->nm] = k, h->mv[h->nm] = v, h->nm++;
    } while (json_take(j, ','));
    return json_expect(j, '}');
}

/* {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]} in any order. */
static int parse_tensor(JsonReader *j, Raw *r) {
    if (json_expect(j, '{')) return -1;
    do {
        char *f;
        if (json_string(j, &f) || json_expect(j, ':')) return free(f), -1;
        int bit = !strcmp(f, "dtype")          ? 1
                  : !strcmp(f, "shape")        ? 2
                  : !strcmp(f, "data_offsets") ? 4
                                               : 0;
        if (!bit || (r->seen & bit)) {
            json_fail(j, "tensor \"%.60s\": %s field \"%.40s\"", r->name,
                      bit ? "repeated" : "unknown", f);
            return free(f), -1;
        }
        free(f);
        r->seen |= bit;
        uint64_t off[2];
        int count;
        if (bit == 1 && json_string(j, &r->dtype)) return -1;
        if (bit == 2 && json_uint_array(j, r->shape, 3, &r->ndim)) return -1;
        if (bit == 4) {
            if (json_uint_array(j, off, 2, &count)) return -1;
            if (count != 2)
                return json_fail(j, "tensor \"%.60s\": data_offsets has %d numbers, not 2", r->name,
                                 count);
            r->begin = off[0], r->end = off[1];
        }
    } while (json_take(j, ','));
    if (json_expect(j, '}')) return -1;
    if (r->seen != 7)
        return json_fail(j, "tensor \"%.60s\" lacks \"%s\"", r->name,
                         !(r->seen & 1)   ? "dtype"
                         : !(r->seen & 2) ? "shape"
                                          : "data_offsets");
    return 0;
}

static int parse_header(JsonReader *j, Header *h) {
    if (json_expect(j, '{')) return -1;
    if (!json_take(j, '}')) {
        do {
            char *key;
            if (json_string(j, &key)) return -1;
            if (json_expect(j, ':')) return free(key), -1;
            if (strcmp(key, "__metadata__") == 0) {
                free(key);
                if (parse_metadata(j, h)) return -1;
                continue;
            }
            if (h->n == h->cap) h->t = (Raw *)grow(h->t, &h->cap, sizeof(Raw));
            Raw *r = &h->t[h->n++];
            memset(r, 0, sizeof(*r));
            r->name = key;
            if (parse_tensor(j, r)) return -1;
        } while (json_take(j, ','));
        if (json_expect(j, '}')) return -1;
    }
    json_ws(j); /* the writer pads with spaces */
    if (j->i < j->n) return json_fail(j, "unexpected '%c' after the header object", j->s[j->i]);
    return 0;
}

/* ---- the checksum ---------------------------------------------------------------------------- */

static const char *header_meta(const Header *h, const char *key) {
    for (int i = 0; i < h->nm; i++)
        if (strcmp(h->mk[i], key) == 0) return h->mv[i];
    return NULL;
}

/* The moe.crc32 of safetensors_write_checksummed (tensorfile.h): CRC-32 of the whole file with
 * the value's 8 digits as '0'. json (hlen bytes) is the header as read; its digits are zeroed
 * here. Sets *verified to 1 when checked, 0 when the file has no checksum at all. */
static int check_crc(const Header *h, char *json, uint64_t hlen, const uint8_t *len8, FILE *f,
                     uint64_t data_bytes, const char *path, int *verified, char *err, int errlen) {
    const char *crc = header_meta(h, ST_CRC_KEY), *covers = header_meta(h, ST_CRC_COVERS_KEY);
    *verified = 0;
    if (!crc && !covers) return 0;
    if (!crc || !covers)
        return set_error(err, errlen,
                         "safetensors '%s' has the metadata \"%s\" but not \"%s\": the "
                         "checksum entries of `moe export` were damaged; " ST_REDO,
                         path, crc ? ST_CRC_KEY : ST_CRC_COVERS_KEY,
                         crc ? ST_CRC_COVERS_KEY : ST_CRC_KEY);
    int hex = strlen(crc) == 8 && h->crc_end - h->crc_at == 10;
    for (int i = 0; i < 8 && hex; i++)
        hex = (crc[i] >= '0' && crc[i] <= '9') || (crc[i] >= 'a' && crc[i] <= 'f');
    if (!hex)
        return set_error(err, errlen,
                         "safetensors '%s': metadata \"%s\" is \"%.20s\", not 8 lowercase hex "
                         "digits as `moe export` writes them; " ST_REDO,
                         path, ST_CRC_KEY, crc);
    memset(json + h->crc_at + 1, '0', 8);
    uint32_t sum = crc32_update(crc32_update(0, len8, 8), json, (size_t)hlen);
    uint8_t *buf = (uint8_t *)malloc_check(1 << 16);
    for (uint64_t left = data_bytes; left > 0;) {
        size_t k = left < (1u << 16) ? (size_t)left : (size_t)1 << 16;
        if (fread(buf, 1, k, f) != k) {
            free(buf);
            return set_error(err, errlen, "safetensors '%s': read error (%s); check the disk", path,
                             strerror(errno));
        }
        sum = crc32_update(sum, buf, k);
        left -= k;
    }
    free(buf);
    uint32_t stored = (uint32_t)strtoul(crc, NULL, 16);
    if (sum != stored)
        return set_error(err, errlen,
                         "safetensors '%s' is corrupt (checksum mismatch: %s %08x, computed "
                         "%08x): it was changed or damaged after `moe export` wrote it; export "
                         "it again from its checkpoint",
                         path, ST_CRC_KEY, stored, sum);
    *verified = 1;
    return 0;
}

/* ---- checking and loading the tensors ------------------------------------------------------- */

/* float16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; every value is exact in float32. */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = h >> 10 & 0x1F, m = h & 0x3FF, bits;
    if (e == 0x1F) {
        bits = sign | 0x7F800000u | m << 13; /* inf, nan */
    } else if (e) {
        bits = sign | (e + 112) << 23 | m << 13; /* rebias 15 -> 127 */
    } else if (m) {                              /* subnormal: m * 2^-24, normalised */
        e = 113;
        while (!(m & 0x400)) m <<= 1, e--;
        bits = sign | e << 23 | (m & 0x3FF) << 13;
    } else {
        bits = sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* bfloat16 is the top half of a float32. */
static float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Bytes per element of a dtype this reader converts, 0 otherwise. */
static int dtype_bytes(const char *d) {
    return !strcmp(d, "F32") ? 4 : (!strcmp(d, "F16") || !strcmp(d, "BF16")) ? 2 : 0;
}

static int by_begin(const void *a, const void *b) {
    const Raw *x = *(Raw *const *)a, *y = *(Raw *const *)b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
           : x->end < y->end     ? -1
                                 : x->end > y->end;
}

/* Every tensor's own checks, then the tiling of data_bytes. */
static int check_tensors(const Header *h, const char *path, uint64_t data_bytes, char *err,
                         int errlen) {
    for (int i = 0; i < h->n; i++) {
        const Raw *r = &h->t[i];
        size_t len = strlen(r->name);
        if (len == 0 || len >= TENSOR_NAME_MAX)
            return set_error(err, errlen,
                             "safetensors '%s': tensor name '%.60s' is %s (moe.c names have 1 to "
                             "%d characters); rename the tensor when exporting",
                             path, r->name, len ? "too long" : "empty", TENSOR_NAME_MAX - 1);
        for (int k = 0; k < i; k++)
            if (!strcmp(h->t[k].name, r->name))
                return set_error(err, errlen,
                                 "safetensors '%s': duplicate tensor name '%s'; " ST_REDO, path,
                                 r->name);
        int eb = dtype_bytes(r->dtype);
        if (!eb)
            return set_error(err, errlen,
                             "safetensors '%s': tensor '%s' has dtype %.20s; only F32 is supported "
                             "(F16 and BF16 are widened to F32): convert the weights to float32 "
                             "before saving (e.g. in PyTorch, "
                             "save_file({k: v.float() for k, v in sd.items()}, path))",
                             path, r->name, r->dtype);
        if (r->ndim > 3)
            return set_error(err, errlen,
                             "safetensors '%s': tensor '%s' has %d dimensions; moe.c tensors "
                             "have at most 3: this is not a moe.c model (`moe info` lists the "
                             "tensors it expects)",
                             path, r->name, r->ndim);
        uint64_t bytes = (uint64_t)eb;
        for (int k = 0; k < r->ndim; k++) {
            if (r->shape[k] > INT32_MAX || (r->shape[k] && bytes > UINT64_MAX / r->shape[k]))
                return set_error(err, errlen,
                                 "safetensors '%s': tensor '%s' has a dimension "
                                 "too large to load; " ST_REDO,
                                 path, r->name);
            bytes *= r->shape[k];
        }
        if (r->begin > r->end || r->end > data_bytes)
            return set_error(err, errlen,
                             "safetensors '%s': tensor '%s' has data_offsets [%llu, %llu] outside "
                             "the %llu data bytes after the header; the file is truncated or "
                             "damaged: write it again (e.g. with `moe export`)",
                             path, r->name, (unsigned long long)r->begin,
                             (unsigned long long)r->end, (unsigned long long)data_bytes);
        if (r->end - r->begin != bytes)
            return set_error(err, errlen,
                             "safetensors '%s': tensor '%s' has %llu data bytes but its shape and "
                             "dtype %s need %llu; " ST_REDO,
                             path, r->name, (unsigned long long)(r->end - r->begin), r->dtype,
                             (unsigned long long)bytes);
    }
    Raw **order = (Raw **)malloc_check(sizeof(Raw *) * ((size_t)h->n + 1));
    for (int i = 0; i < h->n; i++) order[i] = &h->t[i];
    qsort(order, (size_t)h->n, sizeof(Raw *), by_begin);
    uint64_t at = 0;
    int rc = 0;
    for (int i = 0; i < h->n && !rc; i++) {
        if (order[i]->begin != at)
            rc = set_error(
                err, errlen,
                "safetensors '%s': tensor '%s' starts at data byte %llu, but the "
                "tensors before it end at %llu: tensors overlap or leave a gap; " ST_REDO,
                path, order[i]->name, (unsigned long long)order[i]->begin, (unsigned long long)at);
        at = order[i]->end;
    }
    if (!rc && at != data_bytes)
        rc = set_error(err, errlen,
                       "safetensors '%s': the tensors cover %llu of the %llu data bytes (extra "
                       "bytes at the end); " ST_REDO,
                       path, (unsigned long long)at, (unsigned long long)data_bytes);
    free(order);
    return rc;
}

/* Copy the tensors out of the file into one buffer as float32, each 64-byte aligned. */
static int load_tensors(SafeTensors *st, const Header *h, FILE *f, uint64_t data_start, char *err,
                        int errlen) {
    size_t total = 0;
    for (int i = 0; i < h->n; i++) {
        size_t numel =
            (size_t)((h->t[i].end - h->t[i].begin) / (uint64_t)dtype_bytes(h->t[i].dtype));
        total += (numel * 4 + 63) / 64 * 64;
    }
    st->buffer = floats_alloc(total / 4 + 1);
    st->entries = (TensorRef *)calloc_check((size_t)h->n + 1, sizeof(TensorRef));
    st->n = h->n;
    uint8_t *p = (uint8_t *)st->buffer, *tmp = NULL;
    for (int i = 0; i < h->n; i++) {
        const Raw *r = &h->t[i];
        TensorRef *e = &st->entries[i];
        size_t bytes = (size_t)(r->end - r->begin), eb = (size_t)dtype_bytes(r->dtype);
        snprintf(e->name, sizeof e->name, "%s", r->name);
        e->dtype = TENSOR_F32;
        e->ndim = r->ndim;
        for (int k = 0; k < r->ndim; k++) e->shape[k] = (int)r->shape[k];
        e->nbytes = bytes / eb * 4;
        e->data = p;
        uint8_t *dst = eb == 4 ? p : (tmp = (uint8_t *)malloc_check(bytes));
        if (fseeko(f, (off_t)(data_start + r->begin), SEEK_SET) != 0 ||
            fread(dst, 1, bytes, f) != bytes) {
            free(eb == 4 ? NULL : tmp);
            return set_error(err, errlen,
                             "safetensors '%s': read error in tensor '%s' (%s); "
                             "check the disk",
                             st->path, r->name, strerror(errno));
        }
        if (eb == 2) { /* little-endian 16-bit values widened to float32 */
            int bf = !strcmp(r->dtype, "BF16");
            float *out = (float *)p;
            for (size_t k = 0; k < bytes / 2; k++) {
                uint16_t v = (uint16_t)(tmp[2 * k] | tmp[2 * k + 1] << 8);
                out[k] = bf ? bf16_to_f32(v) : f16_to_f32(v);
            }
            free(tmp);
        }
        p += (e->nbytes + 63) / 64 * 64;
    }
    return 0;
}

int safetensors_read(SafeTensors *st, const char *path, char *err, int errlen) {
    memset(st, 0, sizeof(*st));
    static const FileSpec spec = {"safetensors file",
                                  "pass a .safetensors file (e.g. one written by `moe export`)",
                                  NULL, 0};
    uint64_t file_bytes;
    FILE *f = open_regular(path, &spec, &file_bytes, err, errlen);
    if (!f) return -1;
    uint8_t len8[8];
    Header h = {0};
    char *json = NULL;
    int rc = -1;
    st->path = strdup(path);
    if (!st->path) moe_fatal("out of memory");
    if (file_bytes < 8 || fread(len8, 1, 8, f) != 8) {
        set_error(err, errlen,
                  "safetensors '%s' is truncated: %llu bytes, shorter than the 8-byte header "
                  "length; write it again (e.g. with `moe export`)",
                  path, (unsigned long long)file_bytes);
        goto done;
    }
    uint64_t hlen = le_get_u64(len8);
    if (hlen > file_bytes - 8 || hlen < 2 || hlen > ST_HEADER_MAX) {
        set_error(err, errlen,
                  "safetensors '%s': header length %llu is impossible in a file of %llu bytes%s; "
                  "the file is truncated or not safetensors: write it again (e.g. with `moe "
                  "export`)",
                  path, (unsigned long long)hlen, (unsigned long long)file_bytes,
                  hlen > ST_HEADER_MAX ? " and is over the 100 MiB limit" : "");
        goto done;
    }
    json = (char *)malloc_check((size_t)hlen + 1);
    if (fread(json, 1, (size_t)hlen, f) != hlen) {
        set_error(err, errlen, "safetensors '%s': read error in the header (%s); check the disk",
                  path, strerror(errno));
        goto done;
    }
    JsonReader j = {json, (size_t)hlen, 0, ""};
    if (parse_header(&j, &h) != 0) {
        set_error(err, errlen,
                  "safetensors '%s': bad JSON header at byte %zu of %llu: %s; " ST_REDO, path, j.i,
                  (unsigned long long)hlen, j.msg);
        goto done;
    }
    /* the layout first, so that a truncated export is called truncated, then the checksum */
    if (check_tensors(&h, path, file_bytes - 8 - hlen, err, errlen) != 0) goto done;
    if (check_crc(&h, json, hlen, len8, f, file_bytes - 8 - hlen, path, &st->checksum, err,
                  errlen) != 0)
        goto done;
    if (load_tensors(st, &h, f, 8 + hlen, err, errlen) != 0) goto done;
    st->n_meta = h.nm;
    st->meta_keys = h.mk, st->meta_values = h.mv;
    h.mk = h.mv = NULL, h.nm = 0; /* now owned by st */
    rc = 0;
done:
    header_free(&h);
    free(json);
    fclose(f);
    if (rc != 0) safetensors_free(st);
    return rc;
}

void safetensors_free(SafeTensors *st) {
    for (int i = 0; i < st->n_meta; i++) free(st->meta_keys[i]), free(st->meta_values[i]);
    free(st->meta_keys);
    free(st->meta_values);
    free(st->entries);
    free(st->buffer);
    free(st->path);
    memset(st, 0, sizeof(*st));
}

const TensorRef *safetensors_find(const SafeTensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->entries[i].name, name) == 0) return &st->entries[i];
    return NULL;
}

const char *safetensors_meta(const SafeTensors *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}
