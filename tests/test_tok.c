/*
 * test_tok.c: byte-level BPE (src/tok/) against what the tokenizers library gives.
 *
 *   - the fixtures of plots/tok/compare.sh (tests/data/tok/): two tokenizer.json files the
 *     library trained (GPT-2's layout and Llama 3's, vocabulary 1000), fifteen texts (Russian,
 *     German, code, digits, white space, apostrophes, CRLF, emoji, ill-formed UTF-8, the special
 *     token) and the ids and text the library gave for them: moe.c's encoding id for id, and
 *     its decoding byte for byte; the GPT-2 one also with its merges as "a b" strings; and
 *     each file written back by tok_save is the library's, byte for byte;
 *   - the split patterns piece by piece on the cases where they differ, the character classes
 *     (Unicode 16.0) and the byte alphabet, and UTF-8 read as the library reads it (U+FFFD for
 *     each maximal ill-formed part);
 *   - decoding undoes encoding;
 *   - training: the same text gives the same file; ids 0..255 are the bytes; the most frequent
 *     pair first and ties to the smaller pair of ids; the file written loads and encodes alike;
 *   - what tokenizer.json may not hold is refused, naming its JSON path;
 *   - a run's tokenizer: the tokenizer.json in its checkpoint's folder (the current one for a
 *     bare name), none there is none, its CRC-32 that of the file's bytes, a file that does not
 *     load refused with tok_load's message.
 * Run from the repository's root (make test does), which holds tests/data/tok/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/json.h"
#include "testutil.h"
#include "tok/tok.h"
#include "tok/unicode.h"

#define FIXTURES "tests/data/tok/"
#define MAX_TEXTS 64

static char err[1024];

static void tmp_setup(void) {
    tmp_dir_make("tok");
}

/* the NUL-ended parts of a file: *n of them, each pointing into *buf (free it) */
static int split_nul(const char *path, char **buf, const char **part, size_t *len) {
    long n;
    *buf = (char *)slurp(path, &n);
    int k = 0;
    for (long i = 0, start = 0; i < n; i++)
        if ((*buf)[i] == '\0') {
            ck_assert_int_lt(k, MAX_TEXTS);
            part[k] = *buf + start, len[k] = (size_t)(i - start), k++;
            start = i + 1;
        }
    return k;
}

static void load(Tokenizer *t, const char *path) {
    ck_assert_msg(tok_load(t, path, err, sizeof err) == 0, "%s", err);
}

/* the ids of text as a line "1 2 3" */
static void ids_line(Tokenizer *t, const char *text, size_t n, char *out, size_t cap) {
    TokIds ids = {NULL, 0, 0};
    tok_encode(t, text, n, &ids);
    size_t o = 0;
    out[0] = '\0';
    for (size_t k = 0; k < ids.n; k++)
        o += (size_t)snprintf(out + o, cap - o, k ? " %d" : "%d", ids.id[k]);
    tok_ids_free(&ids);
}

/* the tokenizer FIXTURES/name.json against the library's ids FIXTURES/ids.ids of the texts
 * FIXTURES/texts_bin, and its decoded texts FIXTURES/decoded_bin */
static void check_fixture_of(const char *name, const char *ids, const char *texts_bin,
                             const char *decoded_bin) {
    char path[256], *texts, *decoded;
    const char *text[MAX_TEXTS], *want_text[MAX_TEXTS];
    size_t len[MAX_TEXTS], want_len[MAX_TEXTS];
    snprintf(path, sizeof path, FIXTURES "%s", texts_bin);
    const int n = split_nul(path, &texts, text, len);
    snprintf(path, sizeof path, FIXTURES "%s", decoded_bin);
    ck_assert_int_eq(split_nul(path, &decoded, want_text, want_len), n);
    Tokenizer t;
    snprintf(path, sizeof path, FIXTURES "%s.json", name);
    load(&t, path);
    snprintf(path, sizeof path, FIXTURES "%s.ids", ids);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    static char want[65536], got[65536];
    for (int k = 0; k < n; k++) {
        ck_assert_ptr_nonnull(fgets(want, sizeof want, f));
        want[strcspn(want, "\n")] = '\0';
        ids_line(&t, text[k], len[k], got, sizeof got);
        ck_assert_msg(strcmp(got, want) == 0, "%s, text %d: got %s, the library %s", name, k, got,
                      want);
        /* decoded: the library's text, byte for byte */
        size_t o = 0, l;
        for (char *w = strtok(want, " "); w; w = strtok(NULL, " ")) {
            const char *b = tok_decode_id(&t, atol(w), &l);
            ck_assert_ptr_nonnull(b);
            ck_assert_msg(o + l <= want_len[k] && memcmp(want_text[k] + o, b, l) == 0,
                          "%s, text %d: decodes differently at byte %zu", name, k, o);
            o += l;
        }
        ck_assert_uint_eq(o, want_len[k]);
    }
    fclose(f);
    free(texts), free(decoded);
    tok_free(&t);
}

static void check_fixture(const char *name, const char *ids) {
    check_fixture_of(name, ids, "texts.bin", "decoded.bin");
}

START_TEST(test_fixture_gpt2) {
    check_fixture("gpt2", "gpt2");
}
END_TEST

START_TEST(test_fixture_llama3) {
    check_fixture("llama3", "llama3");
}
END_TEST

/* Qwen2's layout: the normalizer NFC, an added token normalized and one not (compare.py) */
START_TEST(test_fixture_qwen2_nfc) {
    check_fixture_of("qwen2-nfc", "qwen2-nfc", "nfc_texts.bin", "nfc_decoded.bin");
}
END_TEST

/* the NFC of s (C escapes), or s itself when tok_nfc finds nothing to do */
static const char *nfc(const char *s) {
    static char out[256];
    size_t len;
    char *r = tok_nfc(s, strlen(s), &len);
    if (!r) return s;
    ck_assert_uint_lt(len, sizeof out);
    memcpy(out, r, len);
    out[len] = '\0';
    free(r);
    return out;
}

START_TEST(test_nfc) {
    ck_assert_str_eq(nfc("cafe\xcc\x81"), "caf\xc3\xa9"); /* e U+0301: U+00E9 */
    ck_assert_str_eq(nfc("\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab"), "\xed\x95\x9c"); /* L V T */
    ck_assert_str_eq(nfc("\xe1\x84\x92\xe1\x85\xa1"), "\xed\x95\x98");             /* L V */
    ck_assert_str_eq(nfc("\xed\x95\x9c"), "\xed\x95\x9c"); /* a syllable stays */
    /* U+0958 (a composition exclusion) stays decomposed: U+0915 U+093C */
    ck_assert_str_eq(nfc("\xe0\xa5\x98"), "\xe0\xa4\x95\xe0\xa4\xbc");
    ck_assert_str_eq(nfc("\xe0\xa4\x95\xe0\xa4\xbc"), "\xe0\xa4\x95\xe0\xa4\xbc");
    ck_assert_str_eq(nfc("\xe2\x84\xab"), "\xc3\x85"); /* the singleton U+212B: U+00C5 */
    ck_assert_str_eq(nfc("\xe2\x84\xa6"), "\xce\xa9"); /* U+2126: U+03A9 */
    /* q U+0307 (230) U+0323 (220): the marks reordered, q has no composite */
    ck_assert_str_eq(nfc("q\xcc\x87\xcc\xa3"), "q\xcc\xa3\xcc\x87");
    /* e U+0323 U+0301 and e U+0301 U+0323: both U+1EB9 U+0301 (ẹ, then the acute) */
    ck_assert_str_eq(nfc("e\xcc\xa3\xcc\x81"), "\xe1\xba\xb9\xcc\x81");
    ck_assert_str_eq(nfc("e\xcc\x81\xcc\xa3"), "\xe1\xba\xb9\xcc\x81");
    /* U+0344 (a non-starter decomposition): U+0308 U+0301 */
    ck_assert_str_eq(nfc("\xcd\x84"), "\xcc\x88\xcc\x81");
    /* Vietnamese: ê U+0323 (dot below after the circumflex) is U+1EC7 */
    ck_assert_str_eq(nfc("\xc3\xaa\xcc\xa3"), "\xe1\xbb\x87");
    /* a composition newer than the library's data (Unicode 16.0's U+11383) is not made */
    ck_assert_str_eq(nfc("\xf0\x91\x8e\x82\xf0\x91\x8f\x89"), "\xf0\x91\x8e\x82\xf0\x91\x8f\x89");
    size_t len;
    ck_assert_ptr_null(tok_nfc("plain ASCII", 11, &len)); /* the fast paths: nothing to do */
    ck_assert_ptr_null(tok_nfc("caf\xc3\xa9 \xed\x95\x9c", 9, &len));
}
END_TEST

/* GPT-2's own form: merges as "a b" strings, a ByteLevel post-processor (no token added) */
START_TEST(test_fixture_strings) {
    check_fixture("gpt2_strings", "gpt2");
}
END_TEST

/* a file the library wrote, loaded and written back: the same bytes (the library's layout) */
START_TEST(test_save_layout) {
    static const char *const NAMES[] = {FIXTURES "gpt2.json", FIXTURES "llama3.json",
                                        FIXTURES "qwen2-nfc.json"};
    for (int k = 0; k < 3; k++) {
        Tokenizer t;
        load(&t, NAMES[k]);
        ck_assert_msg(tok_save(&t, tmp_path("again.json"), err, sizeof err) == 0, "%s", err);
        long na, nb;
        uint8_t *a = slurp(NAMES[k], &na), *b = slurp(tmp_path("again.json"), &nb);
        long at = 0;
        while (at < na && at < nb && a[at] == b[at]) at++;
        ck_assert_msg(na == nb && at == na, "%s written back differs at byte %ld: %.60s", NAMES[k],
                      at, (const char *)b + (at > 20 ? at - 20 : 0));
        free(a), free(b);
        tok_free(&t);
    }
}
END_TEST

/* the pieces of s under pattern p, joined by '|' */
static const char *pieces(TokPattern p, const char *s) {
    static char out[512];
    size_t o = 0, n = strlen(s);
    for (size_t i = 0; i < n;) {
        const size_t end = tok_piece_end(p, s, n, i);
        ck_assert_uint_gt(end, i);
        o += (size_t)snprintf(out + o, sizeof out - o, "%s%.*s", i ? "|" : "", (int)(end - i),
                              s + i);
        i = end;
    }
    out[o] = '\0';
    return out;
}

/* (each case's pieces are the library's: its Split pre-tokenizer by the same regex) */
#define PIECES(p, s, want) ck_assert_str_eq(pieces(p, s), want)

START_TEST(test_patterns) {
    PIECES(TOK_GPT2, "Hello  world's 'S", "Hello| | world|'s| '|S");
    PIECES(TOK_GPT2, "12345 x  \n", "12345| x|  \n");
    PIECES(TOK_GPT2, "a  b", "a| | b");
    PIECES(TOK_GPT2, "foo!!! ?? bar", "foo|!!!| ??| bar");
    PIECES(TOK_LLAMA3, "12345678", "123|456|78");
    PIECES(TOK_QWEN2, "1234", "1|2|3|4");
    PIECES(TOK_LLAMA3, "  \n  x", "  \n| | x");
    PIECES(TOK_LLAMA3, "\t\tfoo", "\t|\tfoo");
    PIECES(TOK_LLAMA3, "x'S 'LL 'Ll 'rEx", "x|'S| '|LL| '|Ll| '|rEx");
    PIECES(TOK_LLAMA3, "x'rEx", "x|'rE|x");
    PIECES(TOK_LLAMA3,
           "'\xc5\xbf"
           "a x'hello",
           "'\xc5\xbf|a| x|'hello"); /* U+017F folds to s */
    PIECES(TOK_LLAMA3, " !!\n\n a", " !!\n\n| a");
    PIECES(TOK_LLAMA3, "a\r\n\r\nb", "a|\r\n\r\n|b");
    PIECES(TOK_LLAMA3, "x \xe2\x80\xa8y",
           "x| |\xe2\x80\xa8y"); /* U+2028: white space, no line break */
    PIECES(TOK_LLAMA3, "\xd0\x9f\xd1\x80\xd0\xb8, 42", "\xd0\x9f\xd1\x80\xd0\xb8|,| |42");
}
END_TEST

/* s (n bytes) read as the library reads bytes: want */
static void lossy(const char *s, size_t n, const char *want) {
    char out[64];
    const size_t m = utf8_lossy(s, n, out);
    ck_assert_msg(m == strlen(want) && memcmp(out, want, m) == 0, "%zu bytes read as %.*s", n,
                  (int)m, out);
}

#define FFFD "\xef\xbf\xbd"

START_TEST(test_utf8_lossy) {
    lossy("a\xff"
          "b",
          3, "a" FFFD "b");
    lossy("\xe2\x82", 2, FFFD); /* a truncated sequence: one */
    lossy("\xe2\x82"
          "a",
          3, FFFD "a");
    lossy("\xf0\x80\x80", 3, FFFD FFFD FFFD);          /* F0 80: no sequence starts so */
    lossy("\xed\xa0\x80", 3, FFFD FFFD FFFD);          /* a surrogate */
    lossy("\xc0\xaf", 2, FFFD FFFD);                   /* overlong */
    lossy("\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD); /* past U+10FFFF */
    lossy("\xf0\x9f\xa6\x80", 4, "\xf0\x9f\xa6\x80");  /* well-formed stays */
    lossy("\xf0\x9f\xa6", 3, FFFD);
}
END_TEST

/* the character classes, with code points new in Unicode 16.0 (the library's version) */
START_TEST(test_classes) {
    static const struct {
        uint32_t cp;
        char cls; /* L, N, S (white space) or - (none) */
    } CASES[] = {{'a', 'L'},    {0x16A0, 'L'}, {0x1C89, 'L'},  {0x16D40, 'L'}, {'7', 'N'},
                 {0x0663, 'N'}, {0x2460, 'N'}, {0x10D40, 'N'}, {0x1CCF0, 'N'}, {' ', 'S'},
                 {0x0B, 'S'},   {0x85, 'S'},   {0xA0, 'S'},    {0x2028, 'S'},  {0x3000, 'S'},
                 {'_', '-'},    {0x200B, '-'}, {0x1F980, '-'}, {0x1C, '-'},    {0x10FFFF, '-'}};
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        const uint32_t c = CASES[k].cp;
        const char got = tok_is_letter(c)   ? 'L'
                         : tok_is_number(c) ? 'N'
                         : tok_is_space(c)  ? 'S'
                                            : '-';
        ck_assert_msg(got == CASES[k].cls, "U+%04X: %c, not %c", c, got, CASES[k].cls);
    }
    for (int b = 0; b < 256; b++) { /* the byte alphabet: one character a byte, and back */
        const uint32_t c = tok_byte_char((uint8_t)b);
        ck_assert_int_eq(tok_char_byte(c), b);
        ck_assert(!tok_is_space(c) && c > 0x20 && c != 0x7F && c != 0xAD);
    }
    ck_assert_int_eq(tok_byte_char(' '), 0x120);
    ck_assert_int_eq(tok_byte_char('\n'), 0x10A);
    ck_assert_int_eq(tok_char_byte(0x144), -1);
}
END_TEST

START_TEST(test_round_trip) {
    Tokenizer t;
    load(&t, FIXTURES "llama3.json");
    uint64_t s = 12345;
    static const char *const PARTS[] = {"a",
                                        "Z",
                                        " ",
                                        "\n",
                                        "\r\n",
                                        "\t",
                                        "7",
                                        "'",
                                        "!",
                                        "\xc3\xa4",
                                        "\xd0\xb6",
                                        "\xe2\x82\xac",
                                        "\xf0\x9f\xa6\x80",
                                        "<|endoftext|>"};
    for (int round = 0; round < 200; round++) {
        char text[512];
        size_t n = 0;
        const int parts = 1 + (int)(s % 40);
        for (int k = 0; k < parts; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const char *p = PARTS[(s >> 33) % (sizeof PARTS / sizeof PARTS[0])];
            memcpy(text + n, p, strlen(p));
            n += strlen(p);
        }
        TokIds ids = {NULL, 0, 0};
        tok_encode(&t, text, n, &ids);
        char back[1024];
        size_t o = 0, l;
        for (size_t k = 0; k < ids.n; k++) {
            const char *b = tok_decode_id(&t, ids.id[k], &l);
            memcpy(back + o, b, l);
            o += l;
        }
        ck_assert_msg(o == n && memcmp(back, text, n) == 0, "round %d: %.*s", round, (int)n, text);
        tok_ids_free(&ids);
    }
    size_t l;
    ck_assert_ptr_null(tok_decode_id(&t, t.n_vocab, &l));
    ck_assert_ptr_null(tok_decode_id(&t, -1, &l));
    tok_free(&t);
}
END_TEST

/* a tokenizer of vocab tokens trained on text by pattern p, written to path */
static int train(const char *text, TokPattern p, int vocab, const char *path, Tokenizer *t) {
    TokTrainer *tr = tok_trainer_new(p);
    tok_trainer_count(tr, text, strlen(text));
    const int merges = tok_trainer_run(tr, t, vocab);
    tok_trainer_free(tr);
    if (path) ck_assert_msg(tok_save(t, path, err, sizeof err) == 0, "%s", err);
    return merges;
}

START_TEST(test_train) {
    long n;
    char *text = (char *)slurp(FIXTURES "texts.bin", &n);
    for (long i = 0; i < n; i++) text[i] = text[i] ? text[i] : '\n';
    Tokenizer a, b, c;
    ck_assert_int_eq(train(text, TOK_LLAMA3, 500, tmp_path("a.json"), &a), 500 - 256);
    train(text, TOK_LLAMA3, 500, tmp_path("b.json"), &b);
    long na, nb;
    uint8_t *fa = slurp(tmp_path("a.json"), &na), *fb = slurp(tmp_path("b.json"), &nb);
    ck_assert_msg(na == nb && memcmp(fa, fb, (size_t)na) == 0,
                  "two trainings wrote different files");
    for (int byte = 0; byte < 256; byte++) { /* ids 0..255: the bytes */
        size_t l;
        const char *d = tok_decode_id(&a, byte, &l);
        ck_assert_msg(l == 1 && (uint8_t)d[0] == byte, "id %d is not its byte", byte);
    }
    load(&c, tmp_path("a.json"));
    ck_assert_int_eq(c.n_merges, a.n_merges);
    char x[65536], y[65536];
    ids_line(&a, text, strlen(text), x, sizeof x);
    ids_line(&c, text, strlen(text), y, sizeof y);
    ck_assert_str_eq(x, y);
    free(text), free(fa), free(fb);
    tok_free(&a), tok_free(&b), tok_free(&c);
}
END_TEST

START_TEST(test_train_order) {
    Tokenizer t;
    /* gpt2: the words "ab" and " cd", every pair once: ties to the smaller pair, ' ' (32) < 'a' */
    ck_assert_int_eq(train("ab cd", TOK_GPT2, 300, NULL, &t), 3);
    ck_assert_str_eq(t.token[256], "\xc4\xa0"
                                   "c"); /* "Ġc" */
    ck_assert_str_eq(t.token[257], "ab");
    ck_assert_str_eq(t.token[258], "\xc4\xa0"
                                   "cd");
    tok_free(&t);
    /* the most frequent pair first, however large its ids */
    ck_assert_int_eq(train("zz zz zz ab", TOK_GPT2, 258, NULL, &t), 2);
    ck_assert_str_eq(t.token[256], "zz");
    ck_assert_str_eq(t.token[257], "\xc4\xa0"
                                   "zz");
    tok_free(&t);
    ck_assert_int_eq(train("abc", TOK_GPT2, 256, NULL, &t), 0); /* 256: the bytes alone */
    ck_assert_int_eq(t.n_vocab, 256);
    tok_free(&t);
}
END_TEST

/* the gpt2 fixture with one text replaced, loaded: its error */
static const char *refused(const char *fixture, const char *from, const char *to) {
    long n;
    char *s = (char *)slurp(fixture, &n);
    char *at = strstr(s, from);
    ck_assert_msg(at != NULL, "'%s' is not in %s", from, fixture);
    FILE *f = fopen(tmp_path("bad.json"), "w");
    fwrite(s, 1, (size_t)(at - s), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(s);
    Tokenizer t;
    err[0] = '\0';
    ck_assert_msg(tok_load(&t, tmp_path("bad.json"), err, sizeof err) != 0, "%s -> %s loaded", from,
                  to);
    return err;
}

#define REFUSED(fixture, from, to, want)                                                           \
    ck_assert_msg(strstr(refused(FIXTURES fixture, from, to), want), "%s -> %s: %s", from, to, err)

START_TEST(test_refusals) {
    REFUSED("gpt2.json", "\"type\": \"BPE\"", "\"type\": \"Unigram\"", "model.type is \"Unigram\"");
    REFUSED("gpt2.json", "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFKC\"}",
            "normalizer is of type \"NFKC\"");
    REFUSED("gpt2.json", "\"normalizer\": null", "\"normalizer\": {\"type\": \"Lowercase\"}",
            "normalizer is of type \"Lowercase\"");
    REFUSED("gpt2.json", "\"use_regex\": true\n  },\n  \"post",
            "\"use_regex\": false\n  },\n  \"post", "pre_tokenizer is of type ByteLevel");
    REFUSED("gpt2.json", "\"add_prefix_space\": false", "\"add_prefix_space\": true",
            "pre_tokenizer.add_prefix_space is true");
    REFUSED("gpt2.json", "\"byte_fallback\": false", "\"byte_fallback\": true",
            "model.byte_fallback");
    REFUSED("gpt2.json", "\"!\": 1,", "\"!!!!\": 1,", "no token for the byte 0x21");
    REFUSED("gpt2.json", "\"merges\": [", "\"merges\": [[\"q\", \"zq\"], ", "model.merges[0]");
    REFUSED("gpt2.json", "\"merges\": [", "\"merges\": [\"qz\", ", "model.merges[0]");
    REFUSED("gpt2.json", "\"lstrip\": false", "\"lstrip\": true", "added_tokens[0]");
    REFUSED("gpt2.json", "\"decoder\": {", "\"decoder\": null, \"x\": {", "decoder is null");
    REFUSED("gpt2.json", "\"version\"", "\"truncation\": 1, \"v\"", "appears twice");
    REFUSED("gpt2.json", "{", "[", "not valid JSON");
    REFUSED("llama3.json", "\\\\p{N}{1,3}", "\\\\p{N}{1,2}",
            "pre_tokenizer.pretokenizers[0].pattern.Regex");
    REFUSED("llama3.json", "\"Isolated\"", "\"Removed\"", "behavior \"Isolated\"");
    Tokenizer t;
    ck_assert_int_ne(tok_load(&t, tmp_path("none.json"), err, sizeof err), 0);
    ck_assert_msg(strstr(err, "none.json"), "%s", err);
}
END_TEST

/* an object of many keys (a vocabulary's): parsed, and a key twice refused wherever it is */
START_TEST(test_json_many_keys) {
    for (int dup = -1; dup < 3000; dup += 1000) {
        char *s = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&s, &len);
        fputc('{', f);
        for (int k = 0; k < 3000; k++) fprintf(f, "%s\"k%d\": %d", k ? ", " : "", k, k);
        if (dup >= 0) fprintf(f, ", \"k%d\": 0", dup);
        fputc('}', f);
        fclose(f);
        JsonReader j = {s, len, 0, ""};
        JsonValue v;
        const int rc = json_document(&j, &v);
        if (dup < 0) {
            ck_assert_msg(rc == 0, "%s", j.msg);
            ck_assert_int_eq(v.n, 3000);
            json_value_free(&v);
        } else {
            ck_assert_msg(rc != 0 && strstr(j.msg, "appears twice"), "k%d twice: %s", dup, j.msg);
        }
        free(s);
    }
}
END_TEST

START_TEST(test_run_tokenizer) {
    char path[MOE_TOK_PATH_MAX];
    tok_run_path("runs/a/ckpt.bin", path, sizeof path);
    ck_assert_str_eq(path, "runs/a/tokenizer.json");
    tok_run_path("ckpt.bin", path, sizeof path);
    ck_assert_str_eq(path, "tokenizer.json");
    tok_run_path("/ckpt.bin", path, sizeof path);
    ck_assert_str_eq(path, "/tokenizer.json");
    Tokenizer t;
    uint32_t crc = 1;
    const char *ckpt = tmp_path("ckpt.bin");
    ck_assert_int_eq(tok_run_load(&t, ckpt, &crc, err, sizeof err), 0); /* none: bytes */
    ck_assert_uint_eq(crc, 0);
    long n;
    uint8_t *bytes = slurp(FIXTURES "gpt2.json", &n);
    FILE *f = fopen(tmp_path("tokenizer.json"), "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    ck_assert_msg(tok_run_load(&t, ckpt, &crc, err, sizeof err) == 1, "%s", err);
    ck_assert_uint_eq(crc, crc32_update(0, bytes, (size_t)n));
    ck_assert_int_eq(t.n_vocab, 1000);
    tok_free(&t);
    f = fopen(tmp_path("tokenizer.json"), "wb");
    fputs("{\"model\": {\"type\": \"WordPiece\"}}", f);
    fclose(f);
    ck_assert_int_eq(tok_run_load(&t, ckpt, &crc, err, sizeof err), -1);
    ck_assert_msg(strstr(err, tmp_path("tokenizer.json")) && strstr(err, "supported"), "%s", err);
    free(bytes);
}
END_TEST

Suite *tok_suite(void) {
    Suite *s = suite_create("tok");
    TCase *tc = tcase_create("tok");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_dir_remove);
    tcase_add_test(tc, test_fixture_gpt2);
    tcase_add_test(tc, test_fixture_llama3);
    tcase_add_test(tc, test_fixture_strings);
    tcase_add_test(tc, test_fixture_qwen2_nfc);
    tcase_add_test(tc, test_nfc);
    tcase_add_test(tc, test_save_layout);
    tcase_add_test(tc, test_patterns);
    tcase_add_test(tc, test_utf8_lossy);
    tcase_add_test(tc, test_classes);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_train);
    tcase_add_test(tc, test_train_order);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_json_many_keys);
    tcase_add_test(tc, test_run_tokenizer);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(tok_suite)
