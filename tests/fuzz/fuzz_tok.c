/* fuzz_tok.c: the tokenizer (src/tok/): tokenizer.json read by tok_load, and any bytes encoded.
 * The first byte of the input chooses:
 *   even: the rest is a tokenizer.json. A refusal must say why; a tokenizer that loads must
 *         encode a text with every byte value, and decode it back to that text;
 *   odd:  the rest is text, encoded by a tokenizer of each split pattern (trained once, here,
 *         on a fixed text): the pieces of the pattern tile the text, every id decodes, and the
 *         ids decode to the text as UTF-8 reads it (ill-formed parts as U+FFFD). */
#include <string.h>

#include "fuzz.h"
#include "tok/tok.h"
#include "tok/unicode.h"

/* text (n bytes) encoded by t and decoded: the bytes of utf8_lossy(text) */
static void round_trip(Tokenizer *t, const char *text, size_t n) {
    TokIds ids = {NULL, 0, 0};
    tok_encode(t, text, n, &ids);
    char *want = (char *)malloc(3 * n + 1), *got = (char *)malloc(3 * n + 1);
    if (!want || !got) abort();
    const size_t m = utf8_lossy(text, n, want);
    size_t o = 0, len;
    for (size_t k = 0; k < ids.n; k++) {
        const char *b = tok_decode_id(t, ids.id[k], &len);
        if (!b || o + len > m) abort();
        memcpy(got + o, b, len);
        o += len;
    }
    if (o != m || memcmp(got, want, m) != 0) abort();
    /* the pieces of the pattern: each ends past where it starts, and they end at m */
    for (size_t i = 0; i < m;) {
        const size_t end = tok_piece_end(t->pattern, want, m, i);
        if (end <= i || end > m) abort();
        i = end;
    }
    free(want), free(got);
    tok_ids_free(&ids);
}

static void text_case(const char *text, size_t n) {
    static Tokenizer tok[TOK_N_PATTERNS];
    static int ready;
    if (!ready) {
        static const char TRAIN[] = "The quick brown fox's 12345 jumps\r\n  over\tthe lazy dog! "
                                    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 Gr\xc3\xb6\xc3\x9f"
                                    "e \xf0\x9f\xa6\x80 int x = 0x1F; // it'll do\n\n";
        for (int p = 0; p < TOK_N_PATTERNS; p++) {
            TokTrainer *tr = tok_trainer_new((TokPattern)p);
            for (int k = 0; k < 4; k++) tok_trainer_count(tr, TRAIN, sizeof TRAIN - 1);
            tok_trainer_run(tr, &tok[p], 400);
            tok_trainer_free(tr);
        }
        ready = 1;
    }
    for (int p = 0; p < TOK_N_PATTERNS; p++) round_trip(&tok[p], text, n);
}

static void file_case(const uint8_t *data, size_t n) {
    Tokenizer t;
    char err[1024] = "";
    if (tok_load(&t, fuzz_file(data, n), err, sizeof err) != 0) {
        if (!err[0]) abort();
        return;
    }
    char all[256];
    for (int b = 0; b < 256; b++) all[b] = (char)b;
    round_trip(&t, all, sizeof all);
    tok_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    if (data[0] & 1)
        text_case((const char *)data + 1, size - 1);
    else
        file_case(data + 1, size - 1);
    return 0;
}
