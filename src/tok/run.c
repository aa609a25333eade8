/*
 * run.c: a run's tokenizer (tok.h): the file tokenizer.json in the folder of the run's
 * checkpoint, its identity the CRC-32 of the file's bytes (the shards' tokenizer_crc32).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/files.h"
#include "tok/tok.h"

#define TOK_FILE_MAX (1ull << 30) /* tok_json.c's limit: Llama 3's is 9 MB */

void tok_run_path(const char *ckpt, char *out, size_t n) {
    const char *slash = strrchr(ckpt, '/');
    if (!slash)
        snprintf(out, n, "%s", TOK_RUN_FILE);
    else
        snprintf(out, n, "%.*s/%s", (int)(slash - ckpt), ckpt, TOK_RUN_FILE);
}

int tok_file_read(TokFile *f, const char *path, char *err, int errlen) {
    const FileSpec spec = {"tokenizer", "pass a tokenizer.json (Hugging Face's tokenizers layout)",
                           NULL, TOK_FILE_MAX};
    f->data = file_read_all(path, &spec, &f->n, err, errlen);
    if (!f->data) return -1;
    f->crc = crc32_update(0, f->data, f->n);
    return 0;
}

void tok_file_free(TokFile *f) {
    free(f->data);
    f->data = NULL;
    f->n = 0;
}

int tok_run_crc(const char *ckpt, uint32_t *crc, char *err, int errlen) {
    char path[MOE_TOK_PATH_MAX];
    tok_run_path(ckpt, path, sizeof path);
    TokFile f;
    *crc = 0;
    if (!file_exists(path)) return 0;
    if (tok_file_read(&f, path, err, errlen) != 0) return -1;
    *crc = f.crc;
    tok_file_free(&f);
    return 1;
}

int tok_run_load(Tokenizer *t, const char *ckpt, uint32_t *crc, char *err, int errlen) {
    char path[MOE_TOK_PATH_MAX];
    const int rc = tok_run_crc(ckpt, crc, err, errlen);
    if (rc <= 0) return rc;
    tok_run_path(ckpt, path, sizeof path);
    return tok_load(t, path, err, errlen) == 0 ? 1 : -1;
}
