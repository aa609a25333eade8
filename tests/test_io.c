/*
 * test_io.c: shards, the batch loader, synthetic data, checkpoints and safetensors.
 *
 * Every on-disk check is exercised by writing a good file into a fresh temporary folder,
 * damaging one thing, and requiring that the reader refuses it with a message that names
 * the problem. corpus_build reads system files, so it is run by hand, not here.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "io/data.h"
#include "io/tensorfile.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static char err[512];

static void tmp_setup(void) {
    tmp_dir_make("io");
}

/* Overwrite len bytes of the file at off. */
static void patch(const char *path, long off, const void *bytes, long len) {
    long n;
    uint8_t *b = slurp(path, &n);
    ck_assert(off + len <= n);
    memcpy(b + off, bytes, (size_t)len);
    spit(path, b, n);
    free(b);
}

/* Cut delta bytes off the end (delta < 0) or append delta zero bytes. */
static void resize(const char *path, long delta) {
    long n;
    uint8_t *b = slurp(path, &n);
    uint8_t *c = (uint8_t *)calloc_check((size_t)(n + (delta > 0 ? delta : 0)), 1);
    memcpy(c, b, (size_t)(delta < 0 ? n + delta : n));
    spit(path, c, n + delta);
    free(b);
    free(c);
}

/* The test shard: 3 documents (lengths 5, 7, 4) in domains 0, 1, 0 of "en" and "code". */
static const uint8_t TOKS[16] = "hello{int x;}bye";
static const ShardDoc DOCS[3] = {{0, 5, 0}, {5, 7, 1}, {12, 4, 0}};
static const char NAMES[2][SHARD_DOMAIN_NAME] = {"en", "code"};

static void write_good_shard(const char *path) {
    ck_assert_msg(shard_write_bytes(path, TOKS, 16, DOCS, 3, NAMES, 2, err, sizeof(err)) == 0, "%s",
                  err);
}

/* ---- shards -------------------------------------------------------------------------------- */

START_TEST(test_shard_round_trip) {
    const char *path = tmp_path("sub/dir/a.bin"); /* parent folders are created */
    write_good_shard(path);
    Shard s;
    ck_assert_msg(shard_load(&s, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(s.n_tokens, 16);
    ck_assert_uint_eq(s.n_docs, 3);
    ck_assert_uint_eq(s.n_domains, 2);
    ck_assert_str_eq(s.domain[0], "en");
    ck_assert_str_eq(s.domain[1], "code");
    for (int i = 0; i < 16; i++) ck_assert_int_eq(s.tokens[i], TOKS[i]);
    ck_assert_uint_eq(s.vocab, 256);
    ck_assert_uint_eq(s.token_bytes, 1);
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(s.docs[i].start, DOCS[i].start);
        ck_assert_uint_eq(s.docs[i].length, DOCS[i].length);
        ck_assert_uint_eq(s.docs[i].domain, DOCS[i].domain);
    }
    static const uint8_t want_dom[16] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
    ck_assert_mem_eq(s.tok_domain, want_dom, 16);
    long n;
    uint8_t *bytes = slurp(path, &n);
    ck_assert_int_eq(n, SHARD_HEADER_BYTES + 3 * 16 + 16);
    /* the payload's checksum: document records and tokens, not the header */
    ck_assert_uint_eq(s.crc32,
                      crc32_update(0, bytes + SHARD_HEADER_BYTES, (size_t)n - SHARD_HEADER_BYTES));
    free(bytes);
    ck_assert_int_eq(access(tmp_path("sub/dir/a.bin.tmp"), F_OK), -1); /* no temp file left */
    shard_free(&s);
    unlink(path);
    rmdir(tmp_path("sub/dir"));
    rmdir(tmp_path("sub"));
}
END_TEST

/* Load must fail, and the message must name the file, the problem and the remedy. */
static void expect_shard_error(const char *path, const char *what) {
    Shard s;
    err[0] = 0;
    ck_assert_int_eq(shard_load(&s, path, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, what) != NULL, "expected '%s' in: %s", what, err);
    ck_assert_msg(strstr(err, path) != NULL, "message does not name the file: %s", err);
    ck_assert_msg(strstr(err, "make data") || strstr(err, "moe synth"), "no remedy in: %s", err);
    ck_assert_ptr_null(s.tokens);
}

/* One damage per row: patch len bytes at off, or change the length by resize bytes. */
typedef struct {
    long off;
    const char *bytes;
    long len, resize;
    const char *want; /* expected in the message */
} Damage;

static void apply_damage(const char *path, const Damage *d) {
    if (d->len) patch(path, d->off, d->bytes, d->len);
    if (d->resize) resize(path, d->resize);
}

START_TEST(test_shard_rejects_damage) {
    static const Damage cases[] = {
        {0, "MOETOKX", 7, 0, "bad magic"},
        {8, "\x04", 1, 0, "version 4"},
        {8, "\x01", 1, 0, "version 1"},
        /* any other header field: the header checksum (test_formats.c: each field's own check
         * with the checksums made to match) */
        {12, "\x02", 1, 0, "header checksum mismatch"}, /* token_bytes 2 */
        {28, "\x09", 1, 0, "header checksum mismatch"}, /* n_domains 9 */
        {200, "\x01", 1, 0, "header checksum mismatch"},
        {0, NULL, 0, -1, "truncated"},               /* last token missing */
        {0, NULL, 0, -(48 + 16 + 100), "truncated"}, /* not even a header */
        {0, NULL, 0, 3, "extra bytes"},
        /* the document records and the tokens: the payload checksum */
        {256 + 16, "\x06", 1, 0, "payload checksum mismatch"},
        {256 + 16 + 12, "\x00", 1, 0, "payload checksum mismatch"}, /* doc 1 domain 0 */
        {256 + 48 + 3, "L", 1, 0, "payload checksum mismatch"},     /* a token */
    };
    const char *path = tmp_path("bad.bin");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_good_shard(path);
        apply_damage(path, &cases[i]);
        expect_shard_error(path, cases[i].want);
    }
    expect_shard_error(tmp_path("missing.bin"), "cannot open");
}
END_TEST

START_TEST(test_shard_write_rejects_bad_docs) {
    const ShardDoc gap[2] = {{0, 5, 0}, {6, 10, 0}};
    ck_assert_int_eq(
        shard_write_bytes(tmp_path("x.bin"), TOKS, 16, gap, 2, NAMES, 2, err, sizeof(err)), -1);
    const ShardDoc bad_domain[1] = {{0, 16, 2}};
    ck_assert_int_eq(
        shard_write_bytes(tmp_path("x.bin"), TOKS, 16, bad_domain, 1, NAMES, 2, err, sizeof(err)),
        -1);
    const ShardDoc short_[1] = {{0, 15, 0}};
    ck_assert_int_eq(
        shard_write_bytes(tmp_path("x.bin"), TOKS, 16, short_, 1, NAMES, 2, err, sizeof(err)), -1);
    ck_assert_int_eq(access(tmp_path("x.bin"), F_OK), -1);
}
END_TEST

START_TEST(test_unigram_entropy) {
    uint8_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = i % 2 ? 'a' : 'b';
    const ShardDoc doc[1] = {{0, 64, 0}};
    ck_assert_int_eq(
        shard_write_bytes(tmp_path("h.bin"), toks, 64, doc, 1, NAMES, 1, err, sizeof(err)), 0);
    Shard s;
    ck_assert_msg(shard_load(&s, tmp_path("h.bin"), err, sizeof(err)) == 0, "%s", err);
    expect_close(shard_unigram_entropy(&s), log(2.0), TOL_F32_ATOL, TOL_F32_RTOL, "H(50/50)");
    for (int i = 0; i < 64; i++) s.tokens[i] = 'a';
    expect_close(shard_unigram_entropy(&s), 0.0, TOL_F32_ATOL, TOL_F32_RTOL, "H(constant)");
    shard_free(&s);
}
END_TEST

/* Ids of vocabularies other than the bytes': each stored in the narrowest width that holds
 * vocab - 1 (1 to 4 bytes), read back as written with the vocabulary and the tokenizer's
 * CRC-32; shard_write refuses an id outside the vocabulary and writes nothing. */
START_TEST(test_shard_wide_ids) {
    static const struct {
        uint32_t vocab, width;
    } cases[] = {{2, 1}, {300, 2}, {65536, 2}, {65537, 3}, {16777216, 3}, {16777217, 4}};
    const ShardDoc docs[2] = {{0, 5, 0}, {5, 3, 1}};
    const char *path = tmp_path("wide.bin");
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int V = (int)cases[k].vocab, w = (int)cases[k].width;
        const int ids[8] = {0, 1, V - 1, V / 2, 1, V - 2, 0, V - 1};
        ck_assert_uint_eq(shard_token_bytes(cases[k].vocab), cases[k].width);
        ck_assert_msg(shard_write(path, ids, 8, (uint32_t)V, 0xC0FFEEu, docs, 2, NAMES, 2, err,
                                  sizeof err) == 0,
                      "%s", err);
        long n;
        free(slurp(path, &n));
        ck_assert_int_eq(n, SHARD_HEADER_BYTES + 2 * 16 + 8 * w);
        Shard s;
        ck_assert_msg(shard_load(&s, path, err, sizeof err) == 0, "vocab %d: %s", V, err);
        ck_assert_uint_eq(s.vocab, (uint32_t)V);
        ck_assert_uint_eq(s.token_bytes, (uint32_t)w);
        ck_assert_uint_eq(s.tokenizer_crc32, 0xC0FFEEu);
        for (int i = 0; i < 8; i++) ck_assert_int_eq(s.tokens[i], ids[i]);
        /* ids 0, 1 and V - 1 twice each, V / 2 and V - 2 once (distinct from V = 300 on) */
        if (V >= 300)
            expect_close(shard_unigram_entropy(&s), -0.75 * log(0.25) - 0.25 * log(0.125),
                         TOL_F32_ATOL, TOL_F32_RTOL, "H of the wide ids");
        shard_free(&s);
        unlink(path);
    }
    const int bad[8] = {0, 1, 2, 299, 300, 5, 6, 7}, negative[8] = {0, -1, 2, 3, 4, 5, 6, 7};
    ck_assert_int_eq(shard_write(path, bad, 8, 300, 0, docs, 2, NAMES, 2, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "token 4 is id 300") && strstr(err, "vocabulary of 300"), "%s", err);
    ck_assert_int_eq(shard_write(path, negative, 8, 300, 0, docs, 2, NAMES, 2, err, sizeof err),
                     -1);
    ck_assert_msg(strstr(err, "token 1 is id -1"), "%s", err);
    ck_assert_int_eq(shard_write(path, bad, 8, 1, 0, docs, 2, NAMES, 2, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "vocabulary of 1"), "%s", err);
    ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

/* A shard serves a model of its own vocabulary alone: the message names both and the fix. */
START_TEST(test_shard_check_vocab) {
    const char *path = tmp_path("v.bin");
    write_good_shard(path);
    Shard s;
    ck_assert_msg(shard_load(&s, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(shard_check_vocab(&s, 256, err, sizeof err), 0);
    ck_assert_int_eq(shard_check_vocab(&s, 1000, err, sizeof err), -1);
    ck_assert_msg(strstr(err, path) && strstr(err, "vocabulary of 256") &&
                      strstr(err, "model.vocab=1000") && strstr(err, "model.vocab=256"),
                  "%s", err);
    shard_free(&s);
}
END_TEST

/* ---- loader -------------------------------------------------------------------------------- */

/* Random bytes in documents of 37 tokens, domains cycling 0, 1, 2. */
static void make_random_shard(Shard *s, uint64_t n) {
    uint8_t *t = (uint8_t *)malloc_check(n);
    uint32_t nd = (uint32_t)((n + 36) / 37);
    ShardDoc *d = (ShardDoc *)malloc_check(sizeof(ShardDoc) * nd);
    Rng r;
    rng_seed(&r, 99);
    for (uint64_t i = 0; i < n; i++) t[i] = (uint8_t)rng_below(&r, 256);
    for (uint32_t k = 0; k < nd; k++)
        d[k] = (ShardDoc){37ull * k, (uint32_t)(n - 37ull * k < 37 ? n - 37ull * k : 37), k % 3};
    const char names[3][SHARD_DOMAIN_NAME] = {"a", "b", "c"};
    ck_assert_int_eq(shard_write_bytes(tmp_path("r.bin"), t, n, d, nd, names, 3, err, sizeof(err)),
                     0);
    ck_assert_msg(shard_load(s, tmp_path("r.bin"), err, sizeof(err)) == 0, "%s", err);
    free(t);
    free(d);
}

/* Row b of a batch is the window at `start`: inputs, targets shifted by one, input domains
 * (looked up from the document records, independently of tok_domain). */
static void expect_window(const Shard *s, uint64_t start, int T, const int *in, const int *tg,
                          const uint8_t *dom) {
    ck_assert_uint_le(start + (uint64_t)T, s->n_tokens - 1);
    for (int t = 0; t < T; t++) {
        ck_assert_int_eq(in[t], s->tokens[start + t]);
        ck_assert_int_eq(tg[t], s->tokens[start + t + 1]);
        if (t + 1 < T) ck_assert_int_eq(tg[t], in[t + 1]);
        ck_assert_uint_eq(dom[t], ((start + t) / 37) % 3);
    }
}

START_TEST(test_loader_windows) {
    enum { B = 4, T = 16 };
    Shard s;
    make_random_shard(&s, 1000);
    Loader l;
    loader_init(&l, &s, B, T, 7);
    Rng ref; /* the documented rule: one start per row, uniform in [0, n - T) */
    rng_seed(&ref, 7);
    int in[B * T], tg[B * T];
    uint8_t dom[B * T];
    for (int step = 0; step < 50; step++) {
        loader_next(&l, in, tg, dom);
        for (int b = 0; b < B; b++)
            expect_window(&s, rng_below(&ref, s.n_tokens - T), T, in + b * T, tg + b * T,
                          dom + b * T);
    }
    shard_free(&s);

    /* n_tokens = T + 1: the only window is the whole shard */
    make_random_shard(&s, T + 1);
    loader_init(&l, &s, B, T, 3);
    loader_next(&l, in, tg, dom);
    for (int b = 0; b < B; b++) expect_window(&s, 0, T, in + b * T, tg + b * T, dom + b * T);
    shard_free(&s);
}
END_TEST

START_TEST(test_loader_determinism) {
    enum { B = 3, T = 8, N = B * T };
    Shard s;
    make_random_shard(&s, 500);
    Loader a, b, c;
    loader_init(&a, &s, B, T, 11);
    loader_init(&b, &s, B, T, 11);
    loader_init(&c, &s, B, T, 12);
    int ia[N], ta[N], ib[N], tb[N], ic[N], tc[N];
    uint8_t da[N], db[N], dc[N];
    int differs = 0;
    for (int step = 0; step < 5; step++) {
        loader_next(&a, ia, ta, da);
        loader_next(&b, ib, tb, db);
        loader_next(&c, ic, tc, dc);
        ck_assert_mem_eq(ia, ib, sizeof(ia));
        ck_assert_mem_eq(ta, tb, sizeof(ta));
        ck_assert_mem_eq(da, db, sizeof(da));
        differs |= memcmp(ia, ic, sizeof(ia)) != 0;
    }
    ck_assert_msg(differs, "a different seed gave the same batches");

    /* Resume: a loader whose Rng is a copy of a's continues exactly like a. */
    Loader r;
    loader_init(&r, &s, B, T, 999);
    r.rng = a.rng;
    for (int step = 0; step < 5; step++) {
        loader_next(&a, ia, ta, da);
        loader_next(&r, ib, tb, db);
        ck_assert_mem_eq(ia, ib, sizeof(ia));
        ck_assert_mem_eq(ta, tb, sizeof(ta));
        ck_assert_mem_eq(da, db, sizeof(da));
    }
    shard_free(&s);
}
END_TEST

START_TEST(test_loader_val) {
    enum { B = 4, T = 16, N = B * T, BATCHES = 3 };
    Shard s;
    make_random_shard(&s, 100); /* 84 valid starts for 12 windows: evenly spaced, 7 apart */
    int in[N], tg[N], in2[N], tg2[N];
    uint8_t dom[N], dom2[N];
    for (int batch = 0; batch < BATCHES; batch++) {
        loader_val_batch(&s, B, T, batch, BATCHES, in, tg, dom);
        loader_val_batch(&s, B, T, batch, BATCHES, in2, tg2, dom2);
        ck_assert_mem_eq(in, in2, sizeof(in));
        ck_assert_mem_eq(tg, tg2, sizeof(tg));
        ck_assert_mem_eq(dom, dom2, sizeof(dom));
        for (int b = 0; b < B; b++) {
            uint64_t i = (uint64_t)(batch * B + b);
            expect_window(&s, i * (100 - T) / (BATCHES * B), T, in + b * T, tg + b * T,
                          dom + b * T);
        }
    }
    /* the last window starts at 11 * 84 / 12 = 77, within the last valid start 83 */
    loader_val_batch(&s, B, T, 2, BATCHES, in, tg, dom);
    ck_assert_int_eq(in[3 * T], s.tokens[77]);
    ck_assert_int_eq(tg[3 * T + T - 1], s.tokens[77 + T]);
    shard_free(&s);
}
END_TEST

/* One row per domain: the first document long enough, skipping shorter ones and other
 * domains; with targets one token more is needed. */
START_TEST(test_domain_batch) {
    /* en "ab" (2), code "{int}" (5), en "hello" (5), code "x;" (2), en "byebye" (6), code
     * "f(a,b)" (6) */
    const uint8_t toks[26] = "ab{int}hellox;byebyef(a,b)";
    const ShardDoc docs[6] = {{0, 2, 0}, {2, 5, 1}, {7, 5, 0}, {12, 2, 1}, {14, 6, 0}, {20, 6, 1}};
    ck_assert_int_eq(
        shard_write_bytes(tmp_path("d.bin"), toks, 26, docs, 6, NAMES, 2, err, sizeof(err)), 0);
    Shard s;
    ck_assert_msg(shard_load(&s, tmp_path("d.bin"), err, sizeof(err)) == 0, "%s", err);
    int in[2 * 6], tg[2 * 6];
    ck_assert_int_eq(shard_domain_batch(&s, 5, in, NULL, err, sizeof(err)), 0);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(in[i], "hello{int}"[i]);
    /* with targets a row of 5 needs 6 tokens: the later documents */
    ck_assert_int_eq(shard_domain_batch(&s, 5, in, tg, err, sizeof(err)), 0);
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(in[i], "byebyf(a,b"[i]);
        ck_assert_int_eq(tg[i], "yebye(a,b)"[i]);
    }
    /* rows of 6 with targets: no document of 7 tokens */
    err[0] = 0;
    ck_assert_int_eq(shard_domain_batch(&s, 6, in, tg, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "domain en has no document of 7 tokens") && strstr(err, "d.bin"),
                  "%s", err);
    shard_free(&s);
}
END_TEST

/* ---- synthetic data ------------------------------------------------------------------------ */

START_TEST(test_synth) {
    const char *p1 = tmp_path("s1.bin"), *p2 = tmp_path("s2.bin"), *p3 = tmp_path("s3.bin");
    ck_assert_msg(synth_write(p1, 4, 20000, 100, 256, 5, 5, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(synth_write(p2, 4, 20000, 100, 256, 5, 5, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(synth_write(p3, 4, 20000, 100, 256, 6, 6, err, sizeof(err)) == 0, "%s", err);
    long n1, n2, n3;
    uint8_t *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2), *b3 = slurp(p3, &n3);
    ck_assert_int_eq(n1, n2);
    ck_assert_mem_eq(b1, b2, (size_t)n1);
    ck_assert_msg(n1 == n3 && memcmp(b1, b3, (size_t)n1) != 0, "seed does not change the data");
    free(b1);
    free(b2);
    free(b3);

    Shard s;
    ck_assert_msg(shard_load(&s, p1, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(s.n_tokens, 20000);
    ck_assert_uint_eq(s.n_docs, 200);
    ck_assert_uint_eq(s.n_domains, 4);
    ck_assert_str_eq(s.domain[3], "syn3");
    /* Each domain stays in its own 32-byte slice, and each symbol's successors are sparse:
     * the most frequent successor takes well over 1/32 of the transitions. */
    static uint32_t pairs[256][256];
    memset(pairs, 0, sizeof(pairs));
    for (uint64_t i = 0; i < s.n_tokens; i++) {
        int d = s.tok_domain[i];
        ck_assert_uint_lt((uint8_t)(s.tokens[i] - 65 - 32 * d), 32);
        if (i + 1 < s.n_tokens && s.tok_domain[i + 1] == d) pairs[s.tokens[i]][s.tokens[i + 1]]++;
    }
    for (int a = 0; a < 256; a++) {
        uint32_t total = 0, best = 0;
        for (int b = 0; b < 256; b++) {
            total += pairs[a][b];
            best = pairs[a][b] > best ? pairs[a][b] : best;
        }
        if (total >= 100)
            ck_assert_msg(best > 0.4 * total, "symbol %d: top successor %u of %u", a, best, total);
    }
    ck_assert(shard_unigram_entropy(&s) < log(128.0));
    shard_free(&s);
    ck_assert_int_eq(synth_write(p1, 9, 100, 10, 256, 1, 1, err, sizeof(err)), -1);
}
END_TEST

/* ---- checkpoints --------------------------------------------------------------------------- */

static float W[6] = {1, -2, 3.5f, 4, 5, -6.25f};
static float V3[24];
static float SCALAR = 0.125f;
static uint8_t RNG_BYTES[32];

static int make_entries(TensorRef *e) {
    for (int i = 0; i < 24; i++) V3[i] = 0.5f * (float)i - 3.0f;
    for (int i = 0; i < 32; i++) RNG_BYTES[i] = (uint8_t)(7 * i + 1);
    memset(e, 0, 4 * sizeof(TensorRef));
    e[0] = (TensorRef){"param/w", TENSOR_F32, 2, {2, 3, 0}, sizeof(W), W};
    e[1] = (TensorRef){"rng/loader", TENSOR_U8, 1, {32, 0, 0}, 32, RNG_BYTES};
    e[2] = (TensorRef){"adam_m/v", TENSOR_F32, 3, {2, 3, 4}, sizeof(V3), V3};
    e[3] = (TensorRef){"scale", TENSOR_F32, 0, {0, 0, 0}, 4, &SCALAR};
    return 4;
}

static const char *CONFIG = "model.d_model=64\ntrain.steps=10\n";

static void write_good_ckpt(const char *path, uint64_t step) {
    TensorRef e[4];
    int n = make_entries(e);
    ck_assert_msg(ckpt_write(path, step, CONFIG, e, n, err, sizeof(err)) == 0, "%s", err);
}

START_TEST(test_ckpt_round_trip) {
    const char *path = tmp_path("ck.bin");
    write_good_ckpt(path, 1234);
    TensorRef want[4];
    int n = make_entries(want);
    Ckpt ck;
    ck_assert_msg(ckpt_read(&ck, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(ck.step, 1234);
    ck_assert_str_eq(ck.config_text, CONFIG);
    ck_assert_int_eq(ck.n, n);
    for (int i = 0; i < n; i++) {
        const TensorRef *e = &ck.entries[i];
        ck_assert_str_eq(e->name, want[i].name);
        ck_assert_int_eq(e->dtype, want[i].dtype);
        ck_assert_int_eq(e->ndim, want[i].ndim);
        for (int k = 0; k < 3; k++) ck_assert_int_eq(e->shape[k], want[i].shape[k]);
        ck_assert_uint_eq(e->nbytes, want[i].nbytes);
        ck_assert_mem_eq(e->data, want[i].data, want[i].nbytes);
        ck_assert_ptr_eq(ckpt_find(&ck, want[i].name), e);
    }
    ck_assert_ptr_null(ckpt_find(&ck, "param/missing"));
    ckpt_free(&ck);

    /* A float tensor after an odd-sized byte tensor still comes back 4-byte aligned. */
    uint8_t three[3] = {1, 2, 3};
    TensorRef odd[2] = {{"odd", TENSOR_U8, 1, {3, 0, 0}, 3, three},
                        {"w", TENSOR_F32, 2, {2, 3, 0}, sizeof(W), W}};
    ck_assert_msg(ckpt_write(path, 1, "", odd, 2, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(ckpt_read(&ck, path, err, sizeof(err)) == 0, "%s", err);
    const TensorRef *w = ckpt_find(&ck, "w");
    ck_assert_uint_eq((uintptr_t)w->data % 4, 0);
    expect_close_arrays((const float *)w->data, W, 6, 0.0f, 0.0f, "w after odd entry");
    ck_assert_mem_eq(ckpt_find(&ck, "odd")->data, three, 3);
    ckpt_free(&ck);

    /* bad entries are refused at write time */
    TensorRef e[4];
    make_entries(e);
    e[0].nbytes = 20;
    ck_assert_int_eq(ckpt_write(path, 1, "", e, 4, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "param/w") != NULL, "%s", err);
    make_entries(e);
    snprintf(e[2].name, TENSOR_NAME_MAX, "param/w");
    ck_assert_int_eq(ckpt_write(path, 1, "", e, 4, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "duplicate") != NULL, "%s", err);
}
END_TEST

static void expect_ckpt_error(const char *path, const char *what) {
    Ckpt ck;
    err[0] = 0;
    ck_assert_int_eq(ckpt_read(&ck, path, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, what) != NULL, "expected '%s' in: %s", what, err);
    ck_assert_msg(strstr(err, path) != NULL, "message does not name the file: %s", err);
    ck_assert_ptr_null(ck.entries);
    ck_assert_ptr_null(ck.buffer);
}

START_TEST(test_ckpt_rejects_damage) {
    const char *path = tmp_path("ck.bin");
    write_good_ckpt(path, 5);
    long n;
    uint8_t *b = slurp(path, &n);
    char flip[2] = {(char)(b[n - 1] ^ 0x10), 0};
    free(b);
    const Damage cases[] = {
        {n - 1, flip, 1, 0, "corrupt (checksum mismatch"},                /* last payload byte */
        {256 + (long)strlen(CONFIG) + 5, "Q", 1, 0, "checksum mismatch"}, /* a directory name */
        {0, NULL, 0, -7, "truncated"},
        {0, NULL, 0, -(n - 100), "truncated"}, /* not even a header */
        {0, NULL, 0, 4, "extra bytes"},
        {0, "MOETOKS", 7, 0, "not a moe.c checkpoint (bad magic"},
        {8, "\x07", 1, 0, "version 7"},
        {100, "\x01", 1, 0, "header checksum mismatch"}, /* a reserved byte */
        {16, "\x06", 1, 0, "header checksum mismatch"},  /* the step */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_good_ckpt(path, 5);
        apply_damage(path, &cases[i]);
        expect_ckpt_error(path, cases[i].want);
        if (i == 0) ck_assert_msg(strstr(err, "earlier checkpoint") != NULL, "no remedy: %s", err);
    }
    expect_ckpt_error(tmp_path("nope.bin"), "cannot open");
}
END_TEST

START_TEST(test_ckpt_interrupted_save) {
    const char *path = tmp_path("ck.bin");
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    write_good_ckpt(path, 10);
    /* a save that died half-way left a torn temp file behind */
    spit(tmp, (const uint8_t *)"MOECKPT\0garbage, half a checkpoint", 34);
    Ckpt ck;
    ck_assert_msg(ckpt_read(&ck, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(ck.step, 10);
    ckpt_free(&ck);
    /* the next save overwrites the stale temp file and then replaces the checkpoint */
    write_good_ckpt(path, 11);
    ck_assert_int_eq(access(tmp, F_OK), -1);
    ck_assert_msg(ckpt_read(&ck, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(ck.step, 11);
    expect_close_arrays((const float *)ckpt_find(&ck, "param/w")->data, W, 6, 0.0f, 0.0f,
                        "param/w after resave");
    ckpt_free(&ck);
}
END_TEST

/* ---- safetensors --------------------------------------------------------------------------- */

START_TEST(test_safetensors) {
    const char *path = tmp_path("m.safetensors");
    TensorRef e[4];
    int n = make_entries(e);
    const char *keys[2] = {"format", "note"}, *vals[2] = {"pt", "say \"hi\""};
    ck_assert_msg(safetensors_write(path, e, n, keys, vals, 2, err, sizeof(err)) == 0, "%s", err);
    long size;
    uint8_t *b = slurp(path, &size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    ck_assert_uint_eq(hlen % 8, 0);
    ck_assert_uint_le(8 + hlen, (uint64_t)size);
    char *json = (char *)malloc_check(hlen + 1);
    memcpy(json, b + 8, hlen);
    json[hlen] = 0;
    ck_assert_msg(json[0] == '{', "%s", json);
    ck_assert_msg(strstr(json, "\"__metadata__\":{\"format\":\"pt\",\"note\":\"say \\\"hi\\\"\"}"),
                  "metadata missing or unescaped: %s", json);
    ck_assert_msg(strstr(json, "rng/loader") == NULL, "a U8 entry was exported: %s", json);
    const uint8_t *data = b + 8 + hlen;
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].dtype != TENSOR_F32) continue;
        char key[160];
        snprintf(key, sizeof(key), "\"%.79s\":{\"dtype\":\"F32\",\"shape\":[", e[i].name);
        const char *p = strstr(json, key);
        ck_assert_msg(p != NULL, "no entry for %s in %s", e[i].name, json);
        p += strlen(key);
        int shape[3] = {0, 0, 0}, nd = 0;
        while (*p != ']') {
            ck_assert_int_lt(nd, 3);
            shape[nd++] = (int)strtol(p, (char **)&p, 10);
            if (*p == ',') p++;
        }
        ck_assert_int_eq(nd, e[i].ndim);
        for (int k = 0; k < nd; k++) ck_assert_int_eq(shape[k], e[i].shape[k]);
        unsigned long long lo, hi;
        ck_assert_int_eq(sscanf(p, "],\"data_offsets\":[%llu,%llu]}", &lo, &hi), 2);
        ck_assert_uint_eq(lo, total);
        ck_assert_uint_eq(hi - lo, e[i].nbytes);
        ck_assert_uint_le(8 + hlen + hi, (uint64_t)size);
        float got[24];
        memcpy(got, data + lo, e[i].nbytes);
        expect_close_arrays(got, (const float *)e[i].data, e[i].nbytes / 4, 0.0f, 0.0f, e[i].name);
        total = hi;
    }
    ck_assert_uint_eq(8 + hlen + total, (uint64_t)size);
    free(json);
    free(b);
}
END_TEST

Suite *io_suite(void) {
    Suite *s = suite_create("io");
    TCase *tc = tcase_create("io");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_dir_remove);
    tcase_add_test(tc, test_shard_round_trip);
    tcase_add_test(tc, test_shard_rejects_damage);
    tcase_add_test(tc, test_shard_write_rejects_bad_docs);
    tcase_add_test(tc, test_shard_wide_ids);
    tcase_add_test(tc, test_shard_check_vocab);
    tcase_add_test(tc, test_unigram_entropy);
    tcase_add_test(tc, test_loader_windows);
    tcase_add_test(tc, test_loader_determinism);
    tcase_add_test(tc, test_loader_val);
    tcase_add_test(tc, test_domain_batch);
    tcase_add_test(tc, test_synth);
    tcase_add_test(tc, test_ckpt_round_trip);
    tcase_add_test(tc, test_ckpt_rejects_damage);
    tcase_add_test(tc, test_ckpt_interrupted_save);
    tcase_add_test(tc, test_safetensors);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(io_suite)
