/*
 * tok.h: byte-level BPE, the tokenizer of GPT-2, Llama 3 and Qwen2 (src/README.md, "The
 * tokenizer"): text to token ids and back, read from and written to Hugging Face's
 * tokenizer.json (tok_json.c), and trained on text (train.c).
 *
 * Encoding, as the tokenizers library does it: the text as valid UTF-8 (unicode.h: ill-formed
 * bytes become U+FFFD), the added tokens matched whole (leftmost, then longest): first those
 * that are not normalized, then, in the text between them put in NFC when the tokenizer has
 * that normalizer, those that are (their own text in NFC); the text between them cut into
 * pieces by the split pattern (pretok.h), each piece's bytes as GPT-2's byte alphabet, one
 * token a byte, then the merges applied by rank (the pair of lowest rank
 * first, the leftmost of equal ones) until none applies. Decoding is exact: each id's bytes.
 * What encoding adds nothing of: a post-processor's tokens (Llama 3's <|begin_of_text|>), as
 * the library's encode(text, add_special_tokens=False).
 */
#ifndef MOE_TOK_TOK_H
#define MOE_TOK_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "tok/hash.h"
#include "tok/pretok.h"

/* Tokenizer.kind bits; TOK_NORMALIZED: an added token matched in the normalized text */
enum { TOK_NONE = 0, TOK_MODEL = 1, TOK_ADDED = 2, TOK_SPECIAL = 4, TOK_NORMALIZED = 8 };

typedef struct {
    TokPattern pattern;
    int ignore_merges; /* a piece that is a token of the vocabulary whole is that token, unmerged */
    int nfc;           /* the normalizer NFC: the text between added tokens is put in NFC */
    int n_vocab;       /* ids 0 .. n_vocab - 1 (the model's vocabulary and the added tokens) */
    int cap;           /* room for ids */
    char **token;      /* (n_vocab) each id's text as tokenizer.json writes it; NULL: unused */
    char **bytes;      /* (n_vocab) what each id decodes to (tok_finish) */
    uint32_t *n_bytes; /* (n_vocab) */
    uint8_t *kind;     /* (n_vocab) TOK_MODEL, TOK_ADDED (| TOK_SPECIAL), or both */
    int byte_id[256];  /* the token of each single byte */
    int n_merges;
    int (*merges)[3]; /* (n_merges) left id, right id, merged id, by rank */
    StrMap vocab;     /* the model's tokens -> id */
    PairMap rank;     /* (left, right) -> rank */
    int *added;       /* (n_added) the ids of the added tokens, in the file's order */
    int n_added;
    int *added_by_byte;  /* (n_added) the same ids by the first byte of their match (tok_finish) */
    int added_from[257]; /* those of first byte c: added_by_byte[added_from[c], added_from[c + 1])
                          */
    char **match;        /* (n_vocab) an added token's text as matched: in NFC when nfc and
                          * TOK_NORMALIZED, else its own text */
    StrMap cache;        /* a piece's bytes -> offset in cache_ids: a count, then the ids */
    int *cache_ids;
    size_t cache_len, cache_cap;
} Tokenizer;

/* A growing list of ids. */
typedef struct {
    int *id;
    size_t n, cap;
} TokIds;

void tok_ids_push(TokIds *v, int id);
void tok_ids_free(TokIds *v);

/* An empty tokenizer that cuts text by pattern. */
void tok_init(Tokenizer *t, TokPattern pattern);
/* Give id the token text (NUL-terminated): kind TOK_MODEL for model.vocab, TOK_ADDED (with
 * TOK_SPECIAL) for an added token; an id may be both when the texts agree. Returns 0, or -1
 * with the reason in err (an id twice with another text, a text twice). */
int tok_set_token(Tokenizer *t, int id, const char *text, int kind, char *err, int errlen);
/* The next merge by rank: the two model tokens left and right into the token left+right,
 * all three in the vocabulary. Returns 0, or -1 with the reason in err. */
int tok_add_merge(Tokenizer *t, const char *left, const char *right, char *err, int errlen);
/* The same by ids (the trainer's). */
void tok_add_merge_ids(Tokenizer *t, int left, int right, int merged);
/* After the tokens and merges: every byte must have its token (a byte-level vocabulary has
 * all 256). Returns 0, or -1 with the reason in err. */
int tok_finish(Tokenizer *t, char *err, int errlen);
void tok_free(Tokenizer *t);

/* The model token of text (len bytes, in the byte alphabet), or -1. */
int tok_lookup(const Tokenizer *t, const char *text, size_t len);

/* text (n bytes, any bytes) to ids, appended to out. */
void tok_encode(Tokenizer *t, const char *text, size_t n, TokIds *out);
/* The bytes id decodes to (*len of them), or NULL when id is none of the vocabulary's. */
const char *tok_decode_id(const Tokenizer *t, long id, size_t *len);

/* train.c: BPE trained on text. A trainer counts the words of the text it is given (cut by
 * pattern; any bytes, read as tok_encode reads them), then run makes t: the 256 bytes as ids
 * 0..255, then the merges by pair count until t has vocab tokens (fewer when the text has no
 * pair left), ties to the smaller pair of ids. Returns the merges made. */
typedef struct TokTrainer TokTrainer;
TokTrainer *tok_trainer_new(TokPattern pattern);
void tok_trainer_count(TokTrainer *tr, const char *text, size_t n);
int tok_trainer_run(TokTrainer *tr, Tokenizer *t, int vocab);
void tok_trainer_free(TokTrainer *tr);

/* tok_json.c: the tokenizer of a tokenizer.json file. Returns 0, or -1 with a message in err
 * that names the file, the JSON path of what is not supported and what is. */
int tok_load(Tokenizer *t, const char *path, char *err, int errlen);
/* tok_write.c: t as tokenizer.json at path (atomically). Returns 0, or -1 with err. */
int tok_save(const Tokenizer *t, const char *path, char *err, int errlen);

/* run.c: a run's tokenizer is the file tokenizer.json in the folder of its checkpoint (beside
 * ckpt.bin), and its identity the CRC-32 of the file's bytes (crc32_update from 0), which the
 * run's shards carry as tokenizer_crc32; a run of bytes (model.vocab 256) has none. */
#define TOK_RUN_FILE "tokenizer.json"
#define MOE_TOK_PATH_MAX 1100 /* a checkpoint's path (MOE_PATH_MAX) and "/tokenizer.json" */
/* The path of the tokenizer.json beside the file ckpt (in its folder) into out. */
void tok_run_path(const char *ckpt, char *out, size_t n);

/* A tokenizer file's bytes, as they are, and their CRC-32. */
typedef struct {
    char *data; /* (n) */
    size_t n;
    uint32_t crc;
} TokFile;
/* Read the file path (a regular file of at most 1 GiB) into f. Returns 0, or -1 with err. */
int tok_file_read(TokFile *f, const char *path, char *err, int errlen);
void tok_file_free(TokFile *f);

/* The CRC-32 of the run's tokenizer.json beside ckpt into *crc: returns 1, or 0 when the
 * folder has none (*crc 0), or -1 with err when it cannot be read. */
int tok_run_crc(const char *ckpt, uint32_t *crc, char *err, int errlen);
/* The run's tokenizer beside ckpt into t and its CRC-32 into *crc: returns 1 when loaded, 0
 * when the folder has none (t untouched, *crc 0), -1 with err (tok_load's message) when the
 * file is there but cannot be read or loaded. */
int tok_run_load(Tokenizer *t, const char *ckpt, uint32_t *crc, char *err, int errlen);

#endif
