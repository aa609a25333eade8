/*
 * hf_tok.c: the tokenizer of a Hugging Face folder, read back for `moe import --format hf`
 * (hf.h): what to copy beside the imported checkpoint, what to say of what is not copied, and
 * what to refuse.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "convert/hf.h"
#include "io/files.h"

/* 1 when f holds the byte tokenizer hf_export writes for a model of bytes. */
static int is_byte_tokenizer(const TokFile *f) {
    char *bytes = hf_byte_tokenizer();
    const int same = strlen(bytes) == f->n && memcmp(bytes, f->data, f->n) == 0;
    free(bytes);
    return same;
}

int hf_tokenizer(const char *dir, int vocab, TokFile *f, char *note, int notelen, char *err,
                 int errlen) {
    char path[MOE_PATH_MAX + 32], why[1024];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    note[0] = 0;
    if (!file_exists(path)) return 0;
    if (tok_file_read(f, path, err, errlen) != 0) return -1;
    if (vocab == MOE_VOCAB && is_byte_tokenizer(f)) { /* a model of bytes: no file of its own */
        tok_file_free(f);
        return 0;
    }
    Tokenizer t;
    if (tok_load(&t, path, why, sizeof why) != 0) {
        snprintf(note, (size_t)notelen,
                 "the folder's tokenizer was not copied: moe.c reads byte-level BPE alone, and %s; "
                 "`moe sample` refuses the checkpoint without a tokenizer (`moe eval` measures "
                 "it on shards of the ids)",
                 why);
        tok_file_free(f);
        return 0;
    }
    const int n = t.n_vocab;
    tok_free(&t);
    if (n > vocab) {
        tok_file_free(f);
        return set_error(err, errlen,
                         "%s has %d tokens, but the model's vocab_size is %d: ids %d and above "
                         "have no row in its embedding, so this is not the model's tokenizer; "
                         "import the folder the model came in, or remove tokenizer.json to "
                         "import the weights alone (nothing was written)",
                         path, n, vocab, vocab);
    }
    if (n < vocab) {
        snprintf(note, (size_t)notelen,
                 "the folder's tokenizer was not copied: %s has %d tokens, the model's "
                 "vocab_size %d (rows padded past the tokenizer's), and `moe sample` needs them "
                 "equal; `moe eval` measures the checkpoint on shards of the ids",
                 path, n, vocab);
        tok_file_free(f);
        return 0;
    }
    return 1;
}
