/*
 * data.h: token shards, the batch loader, the corpus builder and synthetic data.
 *
 * Shard file format (little-endian), version 3 (src/REFERENCE.md, "Token shards", has the same
 * table):
 *   header, 256 bytes:
 *     off  type         field
 *     0    char[8]      magic           "MOETOKS\0"
 *     8    uint32       version         3
 *     12   uint32       token_bytes     1, 2, 3 or 4: the narrowest width that holds vocab - 1
 *     16   uint64       n_tokens
 *     24   uint32       n_docs
 *     28   uint32       n_domains       1 .. SHARD_MAX_DOMAINS
 *     32   char[8][16]  domain          NUL-padded domain names ("en", "de", ..., "code");
 *                                       unused slots all zero
 *     160  uint32       payload_crc32   CRC-32 (crc32_update from 0) of the document records
 *                                       followed by the tokens (Shard.crc32, provenance.txt)
 *     164  uint32       header_crc32    CRC-32 of the 256 header bytes, bytes 164..167 as 0
 *     168  uint32       vocab           2 .. SHARD_MAX_VOCAB: every id is below it (256: bytes)
 *     172  uint32       tokenizer_crc32 CRC-32 of the tokenizer that made the ids; 0: bytes
 *     176  zeros up to byte 256 (readers reject non-zero reserved bytes)
 *   n_docs document records, 16 bytes each:
 *     0    uint64       start           offset of the document's first token
 *     8    uint32       length          tokens
 *     12   uint32       domain          index into the domain names
 *   n_tokens ids of token_bytes each (little-endian), documents back to back in record order.
 * The file size must be exactly 256 + 16 n_docs + token_bytes n_tokens; documents must tile
 * the tokens; every id must be below vocab. Version 2 (the same without vocab and
 * tokenizer_crc32, zeros from byte 168) still reads, as vocab 256 of 1-byte tokens; readers
 * refuse every other version (version 1 had no checksums: rebuild those shards).
 */
#ifndef MOE_IO_DATA_H
#define MOE_IO_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

#define SHARD_MAGIC "MOETOKS"
#define SHARD_VERSION 3
#define SHARD_VERSION_BYTES 2       /* the oldest version read: bytes, no vocab field */
#define SHARD_MAX_VOCAB 2147483647u /* every id fits an int */
#define SHARD_BYTE_VOCAB 256        /* bytes: the corpus, and every version 2 shard */
#define SHARD_HEADER_BYTES 256
#define SHARD_MAX_DOMAINS 8
#define SHARD_DOMAIN_NAME 16

typedef struct {
    uint64_t start;
    uint32_t length;
    uint32_t domain;
} ShardDoc;

typedef struct {
    char path[512];
    uint64_t n_tokens;
    uint32_t n_docs, n_domains;
    uint32_t vocab;           /* every id is below it; 256: bytes */
    uint32_t token_bytes;     /* the stored width of an id, 1 .. 4 */
    uint32_t tokenizer_crc32; /* the tokenizer that made the ids; 0: bytes */
    char domain[SHARD_MAX_DOMAINS][SHARD_DOMAIN_NAME];
    ShardDoc *docs;      /* (n_docs) */
    int *tokens;         /* (n_tokens) the ids, each in [0, vocab) */
    uint8_t *tok_domain; /* (n_tokens) domain of every token, derived from docs */
    uint32_t crc32;      /* CRC-32 of the payload (document records, then tokens), for provenance */
} Shard;

/* Read and check a shard (every id below its vocab: a message names the shard, the id and its
 * position). Returns 0, or -1 with a message saying what is wrong with the file and what to do
 * (e.g. "run make data") in err. */
int shard_load(Shard *s, const char *path, char *err, int errlen);
void shard_free(Shard *s);

/* The narrowest width in bytes (1 .. 4) that holds every id below vocab. */
uint32_t shard_token_bytes(uint32_t vocab);

/* Write a shard atomically (temporary file, fsync, rename): ids tokens (n_tokens), each below
 * vocab (2 .. SHARD_MAX_VOCAB), from the tokenizer whose CRC-32 is tokenizer_crc32 (0: bytes),
 * in shard_token_bytes(vocab) bytes each. docs must tile tokens. */
int shard_write(const char *path, const int *tokens, uint64_t n_tokens, uint32_t vocab,
                uint32_t tokenizer_crc32, const ShardDoc *docs, uint32_t n_docs,
                const char domain[][SHARD_DOMAIN_NAME], uint32_t n_domains, char *err, int errlen);
/* The same for bytes (vocab 256, no tokenizer): the corpus and the tests' shards. */
int shard_write_bytes(const char *path, const uint8_t *bytes, uint64_t n_tokens,
                      const ShardDoc *docs, uint32_t n_docs, const char domain[][SHARD_DOMAIN_NAME],
                      uint32_t n_domains, char *err, int errlen);

/* 0 when s's ids come from a vocabulary of `vocab` (model.vocab), else -1 with a message naming
 * the shard, both vocabularies and what to do in err. */
int shard_check_vocab(const Shard *s, int vocab, char *err, int errlen);

/* Entropy in nats of the shard's token frequencies (the loss of the best unigram model). */
double shard_unigram_entropy(const Shard *s);

/* ---- batches ---------------------------------------------------------------------------------
 * A training batch is B windows of T+1 consecutive tokens at random offsets drawn from the
 * loader's own RNG, so the loader's whole position is its RNG state (saved in checkpoints).
 * inputs (B, T) and targets (B, T) are the window shifted by one; domains (B, T) are the
 * domains of the input tokens. Validation batches are fixed and spread evenly over the whole
 * shard, so that every domain is evaluated (shards store their domains one after another):
 * of M = n_batches * B windows, window i = batch_index * B + b starts at
 * floor(i * (n_tokens - T) / M). Requires n_tokens > T (the loader stops with moe_fatal if
 * not). */
typedef struct {
    const Shard *shard;
    int B, T;
    Rng rng;
    /* a domain mix (loader_set_mix, io/mix.h); mixed = 0: windows anywhere in the shard, the
     * natural mix, drawn exactly as without one */
    int mixed;
    double cum[2][SHARD_MAX_DOMAINS]; /* the mix's cumulative shares, and the end mix's */
    int end_step, step;               /* from step end_step on, the end mix (loader_set_step) */
    uint64_t size[SHARD_MAX_DOMAINS]; /* window starts inside each domain's runs */
    int n_runs[SHARD_MAX_DOMAINS];
    uint64_t *run_first[SHARD_MAX_DOMAINS], *run_cum[SHARD_MAX_DOMAINS]; /* a domain's runs of
                                          consecutive documents: first token, starts up to it */
    uint64_t drawn[SHARD_MAX_DOMAINS]; /* windows drawn of each domain (of its first token
                                          without a mix) since loader_take_drawn */
    /* data.corrupt_from/_batches (loader_corrupt): the batches [corrupt_from, corrupt_to) of
     * the stream are random tokens below vocab; batch is the one loader_next draws now */
    long long batch, corrupt_from, corrupt_to;
    int vocab;
    uint64_t seed; /* train.seed, which the corrupted tokens are drawn from */
} Loader;

/* 0 when s holds at least one window of T + 1 tokens, else -1 with a message (naming the
 * shard, its token count and model.seq_len) in err: the check callers make before a loader. */
int shard_check_window(const Shard *s, int T, char *err, int errlen);

void loader_init(Loader *l, const Shard *s, int B, int T, uint64_t seed);
void loader_next(Loader *l, int *inputs, int *targets, uint8_t *domains);
void loader_free(Loader *l);

/* The window starts of each domain of s for windows of T + 1 tokens that stay inside it (inside
 * one run of its consecutive documents): the sizes a mix is worked out from (io/mix.h). */
void shard_domain_starts(const Shard *s, int T, uint64_t *size);

/* Draw from now on by domain: each window's domain from share (n_domains, summing to 1), then
 * a start inside that domain's runs, both from the loader's RNG (so a resume restores the
 * stream); from step end_step on (loader_set_step) by end_share instead (NULL: none). */
void loader_set_mix(Loader *l, const double *share, const double *end_share, int end_step);
/* The optimizer step the next windows are for (the end mix starts at end_step), and which
 * batch of the data stream they are: the step's own, unless a rollback skipped batches before
 * it (train/spike.h). */
void loader_set_step(Loader *l, int step, long long batch);
/* Draw n windows and throw them away (the RNG moves on as loader_next's would; nothing is
 * counted): the batches a rollback skips. */
void loader_skip(Loader *l, long long n);
/* A corrupted stretch of the stream, made on purpose (data.corrupt_from, data.corrupt_batches):
 * the windows of batches [from, from + n) are drawn as ever, then their tokens replaced by
 * random ids below vocab (a function of the window's start and the seed). n = 0: none. */
void loader_corrupt(Loader *l, long long from, long long n, int vocab);
/* The windows drawn of each domain since the last call, into drawn (n_domains); counting
 * starts again. */
void loader_take_drawn(Loader *l, uint64_t *drawn);
void loader_val_batch(const Shard *s, int B, int T, int batch_index, int n_batches, int *inputs,
                      int *targets, uint8_t *domains);

/* One sequence of each domain of s, to look at what a model does by domain (the chapter
 * programs' batch): row d of inputs (n_domains, T) holds the first T tokens of the first
 * document of domain d with at least T tokens, or T + 1 when targets (n_domains, T) is not
 * NULL, which gets the same tokens shifted by one. Returns 0, or -1 with a message naming the
 * domain that has no such document in err. */
int shard_domain_batch(const Shard *s, int T, int *inputs, int *targets, char *err, int errlen);

/* ---- corpus and synthetic data ------------------------------------------------------------- */

/* The tokenizer a corpus is encoded with (moe corpus --tokenizer). io/ knows no tokenizer
 * (tok/ comes after it), so the command passes its encoder in: encode returns the ids of the n
 * bytes of text (*n_ids of them, each below vocab) in a buffer of ctx's, valid until the next
 * call. file (file_len bytes) is the tokenizer file itself, written beside the shards as
 * tokenizer.json; crc32 is its CRC-32, the shards' tokenizer_crc32. */
typedef struct {
    const int *(*encode)(void *ctx, const uint8_t *text, size_t n, size_t *n_ids);
    void *ctx;
    uint32_t vocab, crc32;
    const char *file; /* (file_len) */
    size_t file_len;
} CorpusTokenizer;

/* Build train.bin and val.bin in out_dir from the Debian text packages (fortunes in English,
 * German, Spanish, Italian and Russian; C headers from /usr/include). Documents go to the
 * validation shard with probability val_frac, decided by a hash of (seed, document): the
 * split is deterministic. Prints a table of documents and tokens per domain. tok NULL: the
 * tokens are the bytes (vocab 256); else each document is encoded whole with tok, the shards
 * are of its vocabulary and tokenizer_crc32, out_dir gets tok's file as tokenizer.json, and
 * the table adds each domain's bytes per token. The documents and the split are the same. */
int corpus_build(const char *out_dir, uint64_t seed, double val_frac, const CorpusTokenizer *tok,
                 char *err, int errlen);

/* Build train.bin and val.bin in out_dir from the user's files (moe corpus --from), each spec
 * "[NAME=]PATH": a PATH ending in .jsonl holds one JSON object per line with a "text" string
 * (one document) and an optional "domain" string; any other file is plain text, cut into
 * paragraphs (at blank lines; longer ones at line boundaries into pieces of at most 8 KiB).
 * A document's domain is its "domain", else NAME, else the file's name without its extension;
 * domains are numbered in the order they first appear, at most SHARD_MAX_DOMAINS. Every
 * document is kept (no balancing); the split is corpus_build's. Every file is read and
 * checked first: a missing or unreadable file, a NUL byte, a bad JSONL line, a file without
 * text, a ninth domain or an empty split returns -1 with a message naming the file (and line)
 * before anything is written. tok: as corpus_build's. */
int corpus_build_from(const char *out_dir, const char *const *specs, int n_specs, uint64_t seed,
                      double val_frac, const CorpusTokenizer *tok, char *err, int errlen);

/* Write a synthetic shard of n_tokens from n_domains Markov sources (one per domain, each a
 * random sparse first-order chain over its own part of the alphabet) in documents of doc_len
 * tokens. The alphabet is the bytes at vocab 256, else vocab ids (at least 256), the bytes'
 * symbols spread over them (synth.c). The chains are drawn from seed, the token stream from
 * stream_seed: a train and a validation shard of the same sources share seed and differ in
 * stream_seed. */
int synth_write(const char *path, int n_domains, uint64_t n_tokens, int doc_len, int vocab,
                uint64_t seed, uint64_t stream_seed, char *err, int errlen);

#endif
