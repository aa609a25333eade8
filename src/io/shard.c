/*
 * shard.c: reading, checking and writing token shards (format in data.h).
 *
 * A shard is read in three pieces (header, document records, tokens). The header is checked
 * first against its own CRC-32, then field by field; the CRC-32 of the payload (the document
 * records, then the tokens as stored) is accumulated on the way, compared with the header's
 * and kept in Shard.crc32 so a run can record exactly which data it trained on. The stored ids
 * (token_bytes each) are then widened to ints, each checked against the vocabulary. Every
 * check failure names the file, what is wrong and what to do; nothing here exits.
 */
#include "io/data.h"
#include "io/files.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REBUILD \
    "rebuild it with `make data` (the corpus) or `moe synth --out NEW_DIR` (synthetic data)"

/* Header field offsets (bytes); everything from HDR_RESERVED to 256 must be zero. */
enum {
    HDR_MAGIC = 0,
    HDR_VERSION = 8,
    HDR_TOKEN_BYTES = 12,
    HDR_N_TOKENS = 16,
    HDR_N_DOCS = 24,
    HDR_N_DOMAINS = 28,
    HDR_DOMAINS = 32,
    HDR_PAYLOAD_CRC = HDR_DOMAINS + SHARD_MAX_DOMAINS * SHARD_DOMAIN_NAME, /* 160 */
    HDR_HEADER_CRC = 164,
    HDR_VOCAB = 168,         /* version 3 */
    HDR_TOKENIZER_CRC = 172, /* version 3 */
    HDR_RESERVED = 176,
    HDR_RESERVED_V2 = 168,
    DOC_BYTES = 16,
};

uint32_t shard_token_bytes(uint32_t vocab) {
    uint32_t w = 1;
    while (w < 4 && (uint64_t)(vocab - 1) >> (8 * w)) w++;
    return w;
}

/* ---- reading ------------------------------------------------------------------------------- */

/* The header h checked (magic, version, its checksum, the vocabulary and the width of its ids,
 * the domains, the reserved bytes) and its counts, vocabulary and domain names read into s. */
static int check_header(Shard *s, const uint8_t *h, const char *path, char *err, int errlen) {
    if (memcmp(h + HDR_MAGIC, SHARD_MAGIC, sizeof(SHARD_MAGIC)) != 0) {
        return set_error(err, errlen,
                         "'%s' is not a moe.c token shard (bad magic, expected \"%s\"); pass a "
                         "shard written by `make data` or `moe synth`",
                         path, SHARD_MAGIC);
    }
    uint32_t version = le_get_u32(h + HDR_VERSION), token_bytes = le_get_u32(h + HDR_TOKEN_BYTES);
    if (version != SHARD_VERSION && version != SHARD_VERSION_BYTES) {
        return set_error(err, errlen,
                         "shard '%s' has format version %u but this program reads versions %d "
                         "and %d%s; " REBUILD,
                         path, version, SHARD_VERSION_BYTES, SHARD_VERSION,
                         version < SHARD_VERSION_BYTES ? " (older shards carry no checksums)" : "");
    }
    /* the header's own checksum before any field is believed */
    uint32_t hcrc = crc32_with_hole(h, SHARD_HEADER_BYTES, HDR_HEADER_CRC);
    if (hcrc != le_get_u32(h + HDR_HEADER_CRC)) {
        return set_error(err, errlen,
                         "shard '%s' is corrupt (header checksum mismatch: stored %08x, computed "
                         "%08x); " REBUILD,
                         path, le_get_u32(h + HDR_HEADER_CRC), hcrc);
    }
    /* version 2 holds bytes: no vocabulary field, the reserved bytes start where it is now */
    const int v2 = version == SHARD_VERSION_BYTES;
    s->vocab = v2 ? SHARD_BYTE_VOCAB : le_get_u32(h + HDR_VOCAB);
    s->tokenizer_crc32 = v2 ? 0 : le_get_u32(h + HDR_TOKENIZER_CRC);
    s->token_bytes = token_bytes;
    if (s->vocab < 2 || s->vocab > SHARD_MAX_VOCAB) {
        return set_error(err, errlen,
                         "shard '%s' declares a vocabulary of %u, expected 2..%u; " REBUILD, path,
                         s->vocab, SHARD_MAX_VOCAB);
    }
    if (token_bytes != shard_token_bytes(s->vocab)) {
        return set_error(err, errlen,
                         "shard '%s' stores %u-byte tokens but its vocabulary of %u takes %u-byte "
                         "ones; " REBUILD,
                         path, token_bytes, s->vocab, shard_token_bytes(s->vocab));
    }
    s->n_tokens = le_get_u64(h + HDR_N_TOKENS);
    s->n_docs = le_get_u32(h + HDR_N_DOCS);
    s->n_domains = le_get_u32(h + HDR_N_DOMAINS);
    if (s->n_domains < 1 || s->n_domains > SHARD_MAX_DOMAINS) {
        return set_error(err, errlen, "shard '%s' declares %u domains, expected 1..%d; " REBUILD,
                         path, s->n_domains, SHARD_MAX_DOMAINS);
    }
    for (uint32_t d = 0; d < SHARD_MAX_DOMAINS; d++) {
        const uint8_t *name = h + HDR_DOMAINS + d * SHARD_DOMAIN_NAME;
        int used = d < s->n_domains;
        if (used && (name[0] == 0 || name[SHARD_DOMAIN_NAME - 1] != 0)) {
            return set_error(err, errlen,
                             "shard '%s': domain name %u is empty or not NUL-terminated; " REBUILD,
                             path, d);
        }
        for (int i = 0; i < SHARD_DOMAIN_NAME; i++) {
            if (!used && name[i] != 0) {
                return set_error(err, errlen,
                                 "shard '%s': unused domain slot %u is not zero (the header is "
                                 "damaged); " REBUILD,
                                 path, d);
            }
        }
        memcpy(s->domain[d], name, SHARD_DOMAIN_NAME);
    }
    for (int i = v2 ? HDR_RESERVED_V2 : HDR_RESERVED; i < SHARD_HEADER_BYTES; i++) {
        if (h[i] != 0) {
            return set_error(err, errlen,
                             "shard '%s': reserved header byte %d is %u, not zero (damaged, or "
                             "written by a newer program); " REBUILD,
                             path, i, h[i]);
        }
    }
    return 0;
}

/* s's document records from docbuf: they tile the tokens, each of a domain the shard has;
 * each token's domain into s->tok_domain. */
static int read_docs(Shard *s, const uint8_t *docbuf, const char *path, char *err, int errlen) {
    /* Documents tile the tokens: doc i starts where doc i-1 ended, the last ends at n_tokens. */
    uint64_t next = 0;
    for (uint32_t i = 0; i < s->n_docs; i++) {
        ShardDoc *d = &s->docs[i];
        d->start = le_get_u64(docbuf + (size_t)i * DOC_BYTES);
        d->length = le_get_u32(docbuf + (size_t)i * DOC_BYTES + 8);
        d->domain = le_get_u32(docbuf + (size_t)i * DOC_BYTES + 12);
        if (d->start != next || d->length > s->n_tokens - next) {
            return set_error(
                err, errlen,
                "shard '%s': document %u covers tokens [%llu, %llu) but should start "
                "at %llu and stay within %llu tokens (records do not tile the tokens); " REBUILD,
                path, i, (unsigned long long)d->start, (unsigned long long)(d->start + d->length),
                (unsigned long long)next, (unsigned long long)s->n_tokens);
        }
        if (d->domain >= s->n_domains) {
            return set_error(err, errlen,
                             "shard '%s': document %u has domain %u but the shard has only %u "
                             "domains; " REBUILD,
                             path, i, d->domain, s->n_domains);
        }
        memset(s->tok_domain + next, (int)d->domain, d->length);
        next += d->length;
    }
    if (next != s->n_tokens) {
        return set_error(err, errlen,
                         "shard '%s': documents cover %llu of its %llu tokens (records do not "
                         "tile the tokens); " REBUILD,
                         path, (unsigned long long)next, (unsigned long long)s->n_tokens);
    }
    return 0;
}

/* s->tokens (n_tokens) from the stored ids raw (token_bytes each, little-endian), each checked
 * against the vocabulary: the first one outside is named with its position. */
static int read_ids(Shard *s, const uint8_t *raw, const char *path, char *err, int errlen) {
    const uint32_t w = s->token_bytes;
    for (uint64_t i = 0; i < s->n_tokens; i++) {
        const uint8_t *p = raw + i * w;
        uint32_t id = p[0];
        for (uint32_t b = 1; b < w; b++) id |= (uint32_t)p[b] << (8 * b);
        if (id >= s->vocab)
            return set_error(err, errlen,
                             "shard '%s': token %llu is id %u, outside its vocabulary of %u (ids "
                             "0..%u); the file is damaged or was written wrongly: " REBUILD,
                             path, (unsigned long long)i, id, s->vocab, s->vocab - 1);
        s->tokens[i] = (int)id;
    }
    return 0;
}

int shard_load(Shard *s, const char *path, char *err, int errlen) {
    memset(s, 0, sizeof(*s));
    snprintf(s->path, sizeof(s->path), "%s", path);
    static const FileSpec spec = {"shard",
                                  "build the corpus with `make data` (or synthetic shards with "
                                  "`moe synth`), or point data.train / data.val at a .bin shard",
                                  "train.bin", 0};
    uint64_t file_bytes;
    FILE *f = open_regular(path, &spec, &file_bytes, err, errlen);
    if (!f) return -1;
    uint8_t h[SHARD_HEADER_BYTES];
    if (file_bytes < SHARD_HEADER_BYTES || fread(h, 1, sizeof(h), f) != sizeof(h)) {
        fclose(f);
        return set_error(err, errlen,
                         "shard '%s' is truncated: expected at least a %d-byte header, "
                         "found %llu bytes; " REBUILD,
                         path, SHARD_HEADER_BYTES, (unsigned long long)file_bytes);
    }
    int rc = -1;
    uint8_t *docbuf = NULL, *raw = NULL;
    if (check_header(s, h, path, err, errlen) != 0) goto done;
    /* Exact size: compare piece by piece so a huge n_tokens cannot overflow the sum. */
    uint64_t docs_bytes = (uint64_t)s->n_docs * DOC_BYTES;
    uint64_t body = file_bytes - SHARD_HEADER_BYTES, w = s->token_bytes;
    if (body < docs_bytes || (body - docs_bytes) / w != s->n_tokens ||
        (body - docs_bytes) % w != 0) {
        int truncated = body < docs_bytes || (body - docs_bytes) / w < s->n_tokens;
        /* the size it promises, saturated where the count is beyond any file */
        const uint64_t tok_bytes = s->n_tokens > UINT64_MAX / 8 ? UINT64_MAX / 2 : s->n_tokens * w;
        unsigned long long want = (unsigned long long)SHARD_HEADER_BYTES + docs_bytes + tok_bytes;
        set_error(err, errlen,
                  "shard '%s' is %s: the header promises %u documents and %llu tokens of %u "
                  "bytes, i.e. %llu bytes, but the file has %llu bytes; " REBUILD,
                  path, truncated ? "truncated" : "too long (extra bytes after the tokens)",
                  s->n_docs, (unsigned long long)s->n_tokens, s->token_bytes, want,
                  (unsigned long long)file_bytes);
        goto done;
    }
    const size_t raw_bytes = (size_t)(s->n_tokens * w);
    docbuf = (uint8_t *)malloc_check(docs_bytes);
    raw = (uint8_t *)malloc_check(raw_bytes);
    s->docs = (ShardDoc *)malloc_check(s->n_docs * sizeof(ShardDoc));
    s->tokens = (int *)malloc_check(s->n_tokens * sizeof(int));
    s->tok_domain = (uint8_t *)malloc_check(s->n_tokens);
    if (fread(docbuf, 1, docs_bytes, f) != docs_bytes || fread(raw, 1, raw_bytes, f) != raw_bytes) {
        set_error(err, errlen, "shard '%s': read error (%s); check the disk and " REBUILD, path,
                  strerror(errno));
        goto done;
    }
    s->crc32 = crc32_update(crc32_update(0, docbuf, docs_bytes), raw, raw_bytes);
    if (s->crc32 != le_get_u32(h + HDR_PAYLOAD_CRC)) {
        set_error(err, errlen,
                  "shard '%s' is corrupt (payload checksum mismatch: the header says %08x, the "
                  "document records and tokens give %08x); " REBUILD,
                  path, le_get_u32(h + HDR_PAYLOAD_CRC), s->crc32);
        goto done;
    }
    if (read_docs(s, docbuf, path, err, errlen) != 0 || read_ids(s, raw, path, err, errlen) != 0)
        goto done;
    rc = 0;
done:
    free(docbuf);
    free(raw);
    fclose(f);
    if (rc != 0) shard_free(s);
    return rc;
}

void shard_free(Shard *s) {
    free(s->docs);
    free(s->tokens);
    free(s->tok_domain);
    s->docs = NULL;
    s->tokens = NULL;
    s->tok_domain = NULL;
    s->n_tokens = 0;
    s->n_docs = 0;
}

int shard_check_vocab(const Shard *s, int vocab, char *err, int errlen) {
    if (s->vocab == (uint32_t)vocab) return 0;
    return set_error(err, errlen,
                     "%s holds ids of a vocabulary of %u%s but the model's is model.vocab=%d; "
                     "train with model.vocab=%u, or use shards of the model's vocabulary%s",
                     s->path, s->vocab, s->vocab == SHARD_BYTE_VOCAB ? " (bytes)" : "", vocab,
                     s->vocab,
                     vocab == SHARD_BYTE_VOCAB ? " (make data, moe synth)"
                                               : " (moe synth --vocab N writes synthetic ones)");
}

static int cmp_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

double shard_unigram_entropy(const Shard *s) {
    /* H = -sum_v p_v log p_v with p_v the token frequencies: the cross-entropy of the best
     * model that ignores context, a floor every trained model should beat. Summed in id
     * order: from a count of each id, or, for a vocabulary larger than the shard, from the
     * runs of a sorted copy (no table of 2^24 counts for a small shard). */
    const double n = (double)s->n_tokens;
    double h = 0.0;
    if (s->vocab <= s->n_tokens) {
        uint64_t *count = (uint64_t *)calloc_check(s->vocab, sizeof(uint64_t));
        for (uint64_t i = 0; i < s->n_tokens; i++) count[s->tokens[i]]++;
        for (uint32_t v = 0; v < s->vocab; v++) {
            if (!count[v]) continue;
            const double p = (double)count[v] / n;
            h -= p * log(p);
        }
        free(count);
        return h;
    }
    int *sorted = (int *)malloc_check((size_t)s->n_tokens * sizeof(int) + 1);
    memcpy(sorted, s->tokens, (size_t)s->n_tokens * sizeof(int));
    qsort(sorted, (size_t)s->n_tokens, sizeof(int), cmp_int);
    for (uint64_t i = 0, j; i < s->n_tokens; i = j) {
        for (j = i + 1; j < s->n_tokens && sorted[j] == sorted[i];) j++;
        const double p = (double)(j - i) / n;
        h -= p * log(p);
    }
    free(sorted);
    return h;
}

/* ---- writing ------------------------------------------------------------------------------- */

int shard_write(const char *path, const int *tokens, uint64_t n_tokens, uint32_t vocab,
                uint32_t tokenizer_crc32, const ShardDoc *docs, uint32_t n_docs,
                const char domain[][SHARD_DOMAIN_NAME], uint32_t n_domains, char *err, int errlen) {
    if (n_domains < 1 || n_domains > SHARD_MAX_DOMAINS)
        return set_error(err, errlen, "shard_write '%s': %u domains, must be 1..%d", path,
                         n_domains, SHARD_MAX_DOMAINS);
    if (vocab < 2 || vocab > SHARD_MAX_VOCAB)
        return set_error(err, errlen, "shard_write '%s': a vocabulary of %u, must be 2..%u", path,
                         vocab, SHARD_MAX_VOCAB);
    const uint32_t w = shard_token_bytes(vocab);
    uint8_t h[SHARD_HEADER_BYTES] = {0};
    memcpy(h + HDR_MAGIC, SHARD_MAGIC, sizeof(SHARD_MAGIC));
    le_put_u32(h + HDR_VERSION, SHARD_VERSION);
    le_put_u32(h + HDR_TOKEN_BYTES, w);
    le_put_u64(h + HDR_N_TOKENS, n_tokens);
    le_put_u32(h + HDR_N_DOCS, n_docs);
    le_put_u32(h + HDR_N_DOMAINS, n_domains);
    le_put_u32(h + HDR_VOCAB, vocab);
    le_put_u32(h + HDR_TOKENIZER_CRC, tokenizer_crc32);
    for (uint32_t d = 0; d < n_domains; d++) {
        size_t len = strnlen(domain[d], SHARD_DOMAIN_NAME);
        if (len == 0 || len >= SHARD_DOMAIN_NAME)
            return set_error(err, errlen,
                             "shard_write '%s': domain name %u must be 1..%d characters", path, d,
                             SHARD_DOMAIN_NAME - 1);
        memcpy(h + HDR_DOMAINS + d * SHARD_DOMAIN_NAME, domain[d], len);
    }
    uint8_t *rec = (uint8_t *)malloc_check((size_t)n_docs * DOC_BYTES);
    uint64_t next = 0;
    for (uint32_t i = 0; i < n_docs; i++) {
        if (docs[i].start != next || docs[i].length > n_tokens - next ||
            docs[i].domain >= n_domains) {
            free(rec);
            return set_error(err, errlen,
                             "shard_write '%s': document %u (start %llu, length %u, domain "
                             "%u) does not follow the previous one or names a missing domain",
                             path, i, (unsigned long long)docs[i].start, docs[i].length,
                             docs[i].domain);
        }
        le_put_u64(rec + (size_t)i * DOC_BYTES, docs[i].start);
        le_put_u32(rec + (size_t)i * DOC_BYTES + 8, docs[i].length);
        le_put_u32(rec + (size_t)i * DOC_BYTES + 12, docs[i].domain);
        next += docs[i].length;
    }
    if (next != n_tokens) {
        free(rec);
        return set_error(err, errlen, "shard_write '%s': documents cover %llu of %llu tokens", path,
                         (unsigned long long)next, (unsigned long long)n_tokens);
    }
    /* the ids as stored: w bytes each, little-endian */
    uint8_t *raw = (uint8_t *)malloc_check((size_t)n_tokens * w);
    for (uint64_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= vocab) {
            free(rec), free(raw);
            return set_error(err, errlen,
                             "shard_write '%s': token %llu is id %d, outside the vocabulary of %u",
                             path, (unsigned long long)i, tokens[i], vocab);
        }
        for (uint32_t b = 0; b < w; b++) raw[i * w + b] = (uint8_t)((uint32_t)tokens[i] >> (8 * b));
    }
    le_put_u32(h + HDR_PAYLOAD_CRC, crc32_update(crc32_update(0, rec, (size_t)n_docs * DOC_BYTES),
                                                 raw, (size_t)n_tokens * w));
    le_put_u32(h + HDR_HEADER_CRC, crc32_with_hole(h, sizeof h, HDR_HEADER_CRC));
    const void *bufs[3] = {h, rec, raw};
    size_t lens[3] = {sizeof(h), (size_t)n_docs * DOC_BYTES, (size_t)n_tokens * w};
    int rc = write_atomic(path, bufs, lens, 3, err, errlen);
    free(rec);
    free(raw);
    return rc;
}

int shard_write_bytes(const char *path, const uint8_t *bytes, uint64_t n_tokens,
                      const ShardDoc *docs, uint32_t n_docs, const char domain[][SHARD_DOMAIN_NAME],
                      uint32_t n_domains, char *err, int errlen) {
    int *ids = (int *)malloc_check((size_t)n_tokens * sizeof(int) + 1);
    for (uint64_t i = 0; i < n_tokens; i++) ids[i] = bytes[i];
    int rc = shard_write(path, ids, n_tokens, SHARD_BYTE_VOCAB, 0, docs, n_docs, domain, n_domains,
                         err, errlen);
    free(ids);
    return rc;
}
