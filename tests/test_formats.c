/*
 * test_formats.c: what the readers refuse, byte by byte and file type by file type.
 *
 *   - every byte of a checkpoint's and a shard's 256-byte header, changed by XOR 0x01 and by
 *     XOR 0xFF, is refused with a message that names the file and the problem;
 *   - each header field's own bound or check, with the checksums made to match (as a crafted
 *     file would have them): a step of 2^62, absurd counts and sizes, reserved bytes, records
 *     that do not tile, a vocabulary and id width that disagree, an id outside the vocabulary;
 *     a version-1 checkpoint still reads, a version-1 shard does not, a version-2 (byte) shard
 *     does;
 *   - a FIFO, a directory, /dev/zero and /dev/null given to every reader (checkpoint, shard,
 *     safetensors, config file) are refused at once, never read or waited on;
 *   - config files with NUL bytes and over the size limit;
 *   - the shard size boundary: seq_len + 1 tokens are one window, seq_len are not.
 *
 * Everything is written into a fresh temporary folder, removed afterwards.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "config/config.h"
#include "io/data.h"
#include "io/files.h"
#include "io/tensorfile.h"
#include "testutil.h"
#include "train/checkpoint.h"

static char err[1024];

static void tmp_setup(void) {
    tmp_dir_make("formats");
    alarm(60); /* a reader that blocks fails the test instead of hanging the suite */
}

static void expect_in(const char *what) {
    ck_assert_msg(strstr(err, what) != NULL, "expected '%s' in: %s", what, err);
}

/* ---- fixtures ----------------------------------------------------------------------------- */

static const uint8_t TOKS[16] = "hello{int x;}bye";
static const ShardDoc DOCS[3] = {{0, 5, 0}, {5, 7, 1}, {12, 4, 0}};
static const char NAMES[2][SHARD_DOMAIN_NAME] = {"en", "code"};

static void write_shard(const char *path) {
    ck_assert_msg(shard_write_bytes(path, TOKS, 16, DOCS, 3, NAMES, 2, err, sizeof err) == 0, "%s",
                  err);
}

static const float W[6] = {1, -2, 3, -4, 5, -6};
static const uint8_t RNG_BYTES[32] = {7};
static const char *CONFIG = "train.steps=10\n";

static void write_ckpt(const char *path, uint64_t step) {
    TensorRef e[2] = {{"param/w", TENSOR_F32, 2, {2, 3, 0}, sizeof W, W},
                      {"rng/loader", TENSOR_U8, 1, {32, 0, 0}, 32, RNG_BYTES}};
    ck_assert_msg(ckpt_write(path, step, CONFIG, e, 2, err, sizeof err) == 0, "%s", err);
}

/* The checksums a crafted file would carry: the shard's payload and header CRCs, the
 * checkpoint's header CRC, recomputed over the bytes as they are. */
static void reseal_shard(uint8_t *b, long n) {
    le_put_u32(b + 160, crc32_update(0, b + 256, (size_t)n - 256));
    le_put_u32(b + 164, crc32_with_hole(b, 256, 164));
}
static void reseal_ckpt(uint8_t *b) {
    le_put_u32(b + 44, crc32_with_hole(b, 256, 44));
}

static int shard_refused(const char *path) {
    Shard s;
    err[0] = 0;
    int rc = shard_load(&s, path, err, sizeof err);
    if (rc == 0) shard_free(&s);
    return rc != 0 && s.tokens == NULL;
}

static int ckpt_refused(const char *path) {
    Ckpt ck;
    err[0] = 0;
    int rc = ckpt_read(&ck, path, err, sizeof err);
    if (rc == 0) ckpt_free(&ck);
    return rc != 0 && ck.buffer == NULL;
}

/* ---- the header sweeps -------------------------------------------------------------------- */

START_TEST(test_shard_header_sweep) {
    const char *good = tmp_path("good.bin"), *bad = tmp_path("bad.bin");
    write_shard(good);
    long n;
    uint8_t *b = slurp(good, &n);
    static const uint8_t masks[2] = {0x01, 0xFF};
    for (int i = 0; i < SHARD_HEADER_BYTES; i++)
        for (int m = 0; m < 2; m++) {
            b[i] ^= masks[m];
            spit(bad, b, n);
            b[i] ^= masks[m];
            ck_assert_msg(shard_refused(bad), "byte %d ^ 0x%02x accepted", i, masks[m]);
            ck_assert_msg(strstr(err, bad) && (strstr(err, "make data") || strstr(err, "synth")),
                          "byte %d ^ 0x%02x: message lacks the file or the remedy: %s", i, masks[m],
                          err);
            ck_assert_msg(strstr(err, "magic") || strstr(err, "version") ||
                              strstr(err, "header checksum mismatch"),
                          "byte %d ^ 0x%02x: unclear message: %s", i, masks[m], err);
        }
    free(b);
}
END_TEST

START_TEST(test_ckpt_header_sweep) {
    const char *good = tmp_path("good.ckpt"), *bad = tmp_path("bad.ckpt");
    write_ckpt(good, 5);
    long n;
    uint8_t *b = slurp(good, &n);
    static const uint8_t masks[2] = {0x01, 0xFF};
    for (int i = 0; i < CKPT_HEADER_BYTES; i++)
        for (int m = 0; m < 2; m++) {
            b[i] ^= masks[m];
            spit(bad, b, n);
            b[i] ^= masks[m];
            ck_assert_msg(ckpt_refused(bad), "byte %d ^ 0x%02x accepted", i, masks[m]);
            ck_assert_msg(strstr(err, bad) != NULL, "byte %d: message lacks the file: %s", i, err);
            ck_assert_msg(strstr(err, "magic") || strstr(err, "version") ||
                              strstr(err, "header checksum mismatch"),
                          "byte %d ^ 0x%02x: unclear message: %s", i, masks[m], err);
        }
    free(b);
}
END_TEST

/* ---- each field's own check, checksums matching --------------------------------------------- */

typedef struct {
    long off;
    uint64_t value;
    int width; /* bytes, little-endian */
    const char *want;
} Field;

static void put_le(uint8_t *p, uint64_t v, int width) {
    for (int k = 0; k < width; k++) p[k] = (uint8_t)(v >> (8 * k));
}

START_TEST(test_shard_fields) {
    const Field cases[] = {
        {12, 2, 4, "2-byte tokens"},
        {28, 0, 4, "0 domains"},
        {28, 9, 4, "9 domains"},
        {32 + 5 * 16, 'x', 1, "unused domain slot 5"},
        {32 + 1 * 16, 0, 1, "domain name 1 is empty"},
        {176, 1, 1, "reserved header byte 176"},
        {255, 1, 1, "reserved header byte 255"},
        {168, 1, 4, "vocabulary of 1,"},                  /* vocab below 2 */
        {168, 1ull << 31, 4, "vocabulary of 2147483648"}, /* ids beyond an int */
        {168, 300, 4, "vocabulary of 300 takes 2-byte"},  /* 1-byte ids of a wider vocab */
        {168, 100, 4, "token 0 is id 104, outside its vocabulary of 100"}, /* 'h' of "hello" */
        {16, 1ull << 62, 8, "truncated"},                                  /* n_tokens */
        {24, 0xFFFFFFFFu, 4, "truncated"},                                 /* n_docs */
        {16, 15, 8, "too long"},             /* one token fewer than the file holds */
        {256 + 16, 6, 8, "do not tile"},     /* doc 1 starts at 6, not 5 */
        {256 + 32 + 8, 3, 4, "do not tile"}, /* last doc ends at 15 of 16 */
        {256 + 16 + 12, 2, 4, "domain 2"},   /* doc 1 in domain 2 of 2 */
    };
    const char *path = tmp_path("f.bin");
    write_shard(path);
    long n;
    uint8_t *good = slurp(path, &n), *b = (uint8_t *)malloc_check((size_t)n);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(b, good, (size_t)n);
        put_le(b + cases[i].off, cases[i].value, cases[i].width);
        reseal_shard(b, n);
        spit(path, b, n);
        ck_assert_msg(shard_refused(path), "case %zu accepted", i);
        expect_in(cases[i].want);
        expect_in("make data");
    }
    /* a version-1 shard (no checksums) is refused with the way to rebuild it */
    memcpy(b, good, (size_t)n);
    put_le(b + 8, 1, 4);
    memset(b + 160, 0, 8);
    spit(path, b, n);
    ck_assert(shard_refused(path));
    expect_in("version 1");
    expect_in("make data");
    expect_in("moe synth");
    /* version 2 (bytes: no vocab or tokenizer fields, zeros from byte 168) still reads, as a
     * vocabulary of 256 with the same payload; a byte where the vocab field is now is refused */
    memcpy(b, good, (size_t)n);
    put_le(b + 8, 2, 4);
    memset(b + 168, 0, 8);
    reseal_shard(b, n);
    spit(path, b, n);
    Shard s;
    ck_assert_msg(shard_load(&s, path, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(s.vocab, 256);
    ck_assert_uint_eq(s.token_bytes, 1);
    ck_assert_uint_eq(s.tokenizer_crc32, 0);
    for (int i = 0; i < 16; i++) ck_assert_int_eq(s.tokens[i], TOKS[i]);
    shard_free(&s);
    put_le(b + 172, 1, 1);
    reseal_shard(b, n);
    spit(path, b, n);
    ck_assert(shard_refused(path));
    expect_in("reserved header byte 172");
    /* the reseal itself is right: the untouched file resealed still loads */
    memcpy(b, good, (size_t)n);
    reseal_shard(b, n);
    ck_assert_mem_eq(b, good, (size_t)n);
    free(b);
    free(good);
}
END_TEST

START_TEST(test_ckpt_fields) {
    const Field cases[] = {
        {16, 1ull << 62, 8, "header field step is 4611686018427387904, above its limit"},
        {16, (uint64_t)CKPT_MAX_STEP + 1, 8, "header field step"},
        {12, CKPT_MAX_ENTRIES + 1, 4, "header field n_entries"},
        {24, CKPT_MAX_CONFIG_BYTES + 1, 8, "header field config_bytes"},
        {24, 1ull << 40, 8, "header field config_bytes"},
        {32, 1ull << 62, 8, "truncated"}, /* payload_bytes */
        {12, 3, 4, "truncated"},          /* one more entry than the file holds */
        {100, 1, 1, "reserved header byte 100"},
        {48, 1, 1, "reserved header byte 48"},
    };
    const char *path = tmp_path("f.ckpt");
    write_ckpt(path, 5);
    long n;
    uint8_t *good = slurp(path, &n), *b = (uint8_t *)malloc_check((size_t)n);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(b, good, (size_t)n);
        put_le(b + cases[i].off, cases[i].value, cases[i].width);
        reseal_ckpt(b);
        spit(path, b, n);
        ck_assert_msg(ckpt_refused(path), "case %zu accepted", i);
        expect_in(cases[i].want);
    }
    memcpy(b, good, (size_t)n);
    reseal_ckpt(b);
    ck_assert_mem_eq(b, good, (size_t)n);

    /* version 1 (no header checksum, bytes 44..255 zero) still reads, bounds included */
    memcpy(b, good, (size_t)n);
    put_le(b + 8, 1, 4);
    memset(b + 44, 0, 4);
    spit(path, b, n);
    Ckpt ck;
    ck_assert_msg(ckpt_read(&ck, path, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(ck.step, 5);
    ck_assert_mem_eq(ckpt_find(&ck, "param/w")->data, W, sizeof W);
    ckpt_free(&ck);
    put_le(b + 16, 1ull << 62, 8);
    spit(path, b, n);
    ck_assert(ckpt_refused(path));
    expect_in("header field step");

    /* a step past the stored train.steps is damage too; the writer refuses out-of-range */
    write_ckpt(path, 11);
    Config c;
    ck_assert_int_eq(checkpoint_config(path, &c, err, sizeof err), -1);
    expect_in("claims step 11");
    expect_in("train.steps=10");
    write_ckpt(path, 10);
    ck_assert_msg(checkpoint_config(path, &c, err, sizeof err) == 0, "%s", err);
    /* its settings have no model.vocab line, as a checkpoint from before the key: bytes */
    ck_assert_int_eq(c.vocab, 256);
    TensorRef none[1];
    ck_assert_int_eq(ckpt_write(path, 1ull << 62, "", none, 0, err, sizeof err), -1);
    free(b);
    free(good);
}
END_TEST

/* ---- special files ------------------------------------------------------------------------ */

typedef int (*Reader)(const char *path);

static int read_ckpt(const char *p) {
    return ckpt_refused(p) ? -1 : 0;
}
static int read_shard(const char *p) {
    return shard_refused(p) ? -1 : 0;
}
static int read_st(const char *p) {
    SafeTensors st;
    err[0] = 0;
    int rc = safetensors_read(&st, p, err, sizeof err);
    if (rc == 0) safetensors_free(&st);
    return rc;
}
static int read_config(const char *p) {
    Config c;
    config_defaults(&c);
    err[0] = 0;
    return config_load_file(&c, p, err, sizeof err);
}

START_TEST(test_special_files) {
    const struct {
        const char *name;
        Reader read;
        const char *in_dir; /* what a directory of this kind holds */
    } readers[4] = {{"checkpoint", read_ckpt, "ckpt.bin"},
                    {"shard", read_shard, "train.bin"},
                    {"safetensors file", read_st, NULL},
                    {"config file", read_config, "config.txt"}};
    const char *fifo = tmp_path("pipe");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    const char *dir = tmp_path("run");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    for (int r = 0; r < 4; r++) {
        /* a FIFO with no writer: refused at once (a blocking open would hang here) */
        ck_assert_int_eq(readers[r].read(fifo), -1);
        expect_in(readers[r].name);
        expect_in("FIFO");
        expect_in(fifo);
        ck_assert_int_eq(readers[r].read("/dev/zero"), -1);
        expect_in("character device");
        ck_assert_int_eq(readers[r].read("/dev/null"), -1);
        expect_in("character device");
        /* a directory: said so, with the file it should have been when the folder holds it */
        ck_assert_int_eq(readers[r].read(dir), -1);
        expect_in("is a directory");
        ck_assert_msg(strstr(err, "truncated") == NULL, "%s", err);
        if (readers[r].in_dir) {
            char inside[300];
            snprintf(inside, sizeof inside, "%s/%s", dir, readers[r].in_dir);
            spit(inside, "x", 1);
            ck_assert_int_eq(readers[r].read(dir), -1);
            char want[320];
            snprintf(want, sizeof want, "did you mean '%s'", inside);
            expect_in(want);
            unlink(inside);
        }
    }
}
END_TEST

/* ---- config files ------------------------------------------------------------------------- */

START_TEST(test_config_nul_and_size) {
    const char *path = tmp_path("c.txt");
    Config c, before;
    config_defaults(&c);
    before = c;
    static const char junk[] = "train.steps=1\0junk\n";
    spit(path, junk, sizeof junk - 1);
    ck_assert_int_eq(config_load_file(&c, path, err, sizeof err), -1);
    char want[300];
    snprintf(want, sizeof want, "%s:1: NUL byte at column 14", path);
    expect_in(want);
    ck_assert_int_eq(c.steps, before.steps); /* nothing applied */
    static const char third[] = "# a\ntrain.steps=3\n\0\n";
    spit(path, third, sizeof third - 1);
    ck_assert_int_eq(config_load_file(&c, path, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:3: NUL byte", path);
    expect_in(want);
    char zeros[64] = {0};
    spit(path, zeros, sizeof zeros);
    ck_assert_int_eq(config_load_file(&c, path, err, sizeof err), -1);
    expect_in("NUL byte");

    /* exactly the limit is read; one byte more is refused before parsing */
    size_t n = MOE_CONFIG_MAX_BYTES;
    char *big = (char *)malloc_check(n + 1);
    memset(big, '#', n + 1);
    for (size_t i = 63; i < n + 1; i += 64) big[i] = '\n';
    memcpy(big, "train.steps=7\n", 14);
    spit(path, big, (long)n);
    ck_assert_msg(config_load_file(&c, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.steps, 7);
    spit(path, big, (long)n + 1);
    ck_assert_int_eq(config_load_file(&c, path, err, sizeof err), -1);
    expect_in("over the 1048576-byte limit");
    free(big);
}
END_TEST

/* ---- the window boundary ------------------------------------------------------------------ */

START_TEST(test_window_boundary) {
    const char *path = tmp_path("w.bin");
    write_shard(path); /* 16 tokens */
    Shard s;
    ck_assert_msg(shard_load(&s, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(shard_check_window(&s, 15, err, sizeof err), 0); /* 15 + 1 = 16 tokens */
    Loader l;
    loader_init(&l, &s, 2, 15, 1);
    int in[30], tg[30];
    uint8_t dom[30];
    loader_next(&l, in, tg, dom); /* the only window: tokens 0..15 */
    for (int t = 0; t < 15; t++) {
        ck_assert_int_eq(in[15 + t], TOKS[t]);
        ck_assert_int_eq(tg[15 + t], TOKS[t + 1]);
    }
    loader_val_batch(&s, 2, 15, 0, 1, in, tg, dom);
    ck_assert_int_eq(tg[14], TOKS[15]);
    ck_assert_int_eq(shard_check_window(&s, 16, err, sizeof err), -1);
    expect_in("holds 16 tokens, fewer than one window of model.seq_len + 1 = 17");
    expect_in(path);
    shard_free(&s);
}
END_TEST

Suite *formats_suite(void) {
    Suite *s = suite_create("formats");
    TCase *tc = tcase_create("formats");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_dir_remove);
    tcase_add_test(tc, test_shard_header_sweep);
    tcase_add_test(tc, test_ckpt_header_sweep);
    tcase_add_test(tc, test_shard_fields);
    tcase_add_test(tc, test_ckpt_fields);
    tcase_add_test(tc, test_special_files);
    tcase_add_test(tc, test_config_nul_and_size);
    tcase_add_test(tc, test_window_boundary);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(formats_suite)
