/*
 * test_safetensors.c: the safetensors reader and writer (io/safetensors.c).
 *
 *   - the checksum: every single-byte change of an exported file's header (two bit patterns
 *     per byte) and of sampled tensor bytes is refused by the reader;
 *   - the reader refuses damaged files (truncated, header length past the end, bad JSON,
 *     offsets out of range, overlaps, sizes that disagree with shapes, 4-d tensors, duplicate
 *     names, unsupported dtypes) with a message naming the problem, widens F16 and BF16, and
 *     metadata with quotes, backslashes, newlines and \u escapes survives the trip.
 *
 * Importing a model from such a file (import.c) is tested in test_import.c.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "convert/import.h"
#include "io/files.h"
#include "io/tensorfile.h"
#include "model/model.h"
#include "testutil.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static char err[1024];

static void tmp_setup(void) {
    tmp_dir_make("st");
}

static void set(Config *c, const char *assignment) {
    ck_assert_msg(config_set(c, assignment, err, sizeof err) == 0, "%s: %s", assignment, err);
}

/* A narrow MoE model of 2 blocks (C = 4, 4 experts of hidden size 4), or its dense twin: the
 * checksum test reads its exported file twice per header byte. */
static Config narrow_config(int moe) {
    Config c;
    config_defaults(&c);
    set(&c, "model.d_model=4");
    set(&c, "model.n_layer=2");
    set(&c, "model.n_head=2");
    set(&c, "model.d_ff=4");
    set(&c, "model.seq_len=8");
    set(&c, moe ? "moe.num_experts=4" : "moe.num_experts=0");
    set(&c, "moe.d_expert=4");
    return c;
}

/* Export a freshly initialised model of config c to path. */
static void export_new(const Config *c, const char *path) {
    Model m;
    model_init(&m, c, 1, 8);
    ck_assert_msg(model_export(&m, path, err, sizeof err) == 0, "%s", err);
    model_free(&m);
}

/* A file from a JSON header and data bytes, the header padded with spaces to a multiple of 8. */
static void write_raw(const char *path, const char *json, const void *data, size_t ndata) {
    size_t hlen = (strlen(json) + 7) / 8 * 8;
    char *h = (char *)malloc_check(hlen);
    memset(h, ' ', hlen);
    memcpy(h, json, strlen(json));
    uint8_t len8[8];
    le_put_u64(len8, hlen);
    FILE *f = fopen(path, "wb");
    ck_assert(f != NULL);
    ck_assert(fwrite(len8, 1, 8, f) == 8 && fwrite(h, 1, hlen, f) == hlen);
    ck_assert(ndata == 0 || fwrite(data, 1, ndata, f) == ndata);
    fclose(f);
    free(h);
}

/* safetensors_read must refuse path with a message containing want (and want2 when given). */
static void expect_refused(const char *path, const char *want, const char *want2) {
    SafeTensors st;
    err[0] = 0;
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == -1, "accepted, wanted '%s'",
                  want);
    ck_assert_msg(strstr(err, want) && (!want2 || strstr(err, want2)),
                  "message lacks '%s'/'%s': %s", want, want2 ? want2 : "", err);
    ck_assert_msg(strstr(err, path) != NULL, "message does not name the file: %s", err);
    ck_assert(st.n == 0 && st.entries == NULL && st.buffer == NULL);
}

/* ---- damaged files --------------------------------------------------------------------------- */

START_TEST(test_read_refuses_damage) {
    const char *path = tmp_path("bad.safetensors");
    float data[4] = {1, 2, 3, 4};
    SafeTensors st;
    /* the raw writer itself makes readable files */
    write_raw(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.n, 1);
    expect_close_arrays((const float *)safetensors_find(&st, "w")->data, data, 2, 0.0f, 0.0f, "w");
    safetensors_free(&st);

    /* an exported file truncated: inside the data, then inside the length field */
    Config c = narrow_config(0);
    export_new(&c, path);
    long size;
    FILE *f = fopen(path, "rb");
    ck_assert(f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0);
    fclose(f);
    ck_assert(truncate(path, size - 5) == 0);
    expect_refused(path, "truncated", "'head'");
    ck_assert(truncate(path, 5) == 0);
    expect_refused(path, "truncated", "8-byte");

    /* a header length past the end of the file */
    write_raw(path, "{}", NULL, 0);
    f = fopen(path, "r+b");
    uint8_t huge[8];
    le_put_u64(huge, 1ull << 40);
    ck_assert(f && fwrite(huge, 1, 8, f) == 8);
    fclose(f);
    expect_refused(path, "header length 1099511627776", NULL);

    static const struct {
        const char *json, *want, *want2;
        size_t ndata;
    } cases[] = {
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", "bad JSON", "'}'", 8},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", "bad JSON",
         "negative", 8},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", "bad JSON",
         "unknown field \"x\"", 8},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", "bad JSON", "lacks \"data_offsets\"", 8},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", "bad JSON",
         "after the header", 8},
        {"{\"__metadata__\":{\"k\":1}}", "bad JSON", "not a string", 0},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", "'w'", "outside", 8},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         "'b'", "overlap", 12},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "cover 8 of the 12",
         NULL, 12},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", "'w'", "need 12", 8},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,2],\"data_offsets\":[0,8]}}", "'w'",
         "4 dimensions", 8},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         "duplicate", "'w'", 8},
        {"{\"w\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", "dtype I64",
         "only F32", 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw(path, cases[i].json, data, cases[i].ndata);
        expect_refused(path, cases[i].want, cases[i].want2);
    }
}
END_TEST

/* Every single-byte change of an exported file's header (the length field and the JSON, two
 * bit patterns per byte: the lowest bit, which turns digits into digits, and the ASCII case
 * bit, which turns hex digits and names into other valid ones) and of sampled tensor bytes is
 * refused by the reader, whatever it hits: the checksum, its digits, or the names "moe.crc32"
 * and "moe.crc32_covers" themselves. A file without the checksum reads with checksum 0. */
START_TEST(test_checksum_mutations) {
    Config c = narrow_config(1);
    const char *path = tmp_path("crc.safetensors");
    export_new(&c, path);
    long size;
    FILE *f = fopen(path, "rb");
    ck_assert(f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 &&
              fseek(f, 0, SEEK_SET) == 0);
    uint8_t *orig = (uint8_t *)malloc_check((size_t)size);
    ck_assert(fread(orig, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    uint64_t hlen = le_get_u64(orig);
    ck_assert(8 + hlen < (uint64_t)size);
    ck_assert_msg(memmem(orig + 8, hlen, "\"moe.crc32\":\"", 13) != NULL, "no checksum written");
    SafeTensors st;
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.checksum, 1);
    safetensors_free(&st);

    /* rewrite one byte in place and read; then put it back */
    int fd = open(path, O_RDWR);
    ck_assert(fd >= 0);
    long positions = 0;
    static const uint8_t masks[2] = {0x01, 0x20};
    for (long i = 0; i < size; i++) {
        int in_header = i < (long)(8 + hlen);
        if (!in_header && (i - (long)(8 + hlen)) % 997 != 0 && i != size - 1) continue;
        for (int k = 0; k < 2; k++) {
            uint8_t b = orig[i] ^ masks[k];
            ck_assert(pwrite(fd, &b, 1, i) == 1);
            err[0] = 0;
            int rc = safetensors_read(&st, path, err, sizeof err);
            if (rc == 0) safetensors_free(&st);
            ck_assert_msg(rc == -1, "byte %ld ^ 0x%02x ('%c' -> '%c') was accepted", i, masks[k],
                          orig[i] >= 32 && orig[i] < 127 ? orig[i] : '?',
                          b >= 32 && b < 127 ? b : '?');
            ck_assert_msg(strstr(err, path) != NULL, "message does not name the file: %s", err);
            ck_assert(pwrite(fd, orig + i, 1, i) == 1);
        }
        positions++;
    }
    close(fd);
    ck_assert_int_gt(positions, (long)hlen);
    /* a tensor byte: the message says checksum */
    f = fopen(path, "r+b");
    ck_assert(f && fseek(f, size - 1, SEEK_SET) == 0 && fputc(orig[size - 1] ^ 0x40, f) != EOF);
    fclose(f);
    expect_refused(path, "checksum mismatch", "export it again");
    /* the file is intact again once the byte is back */
    f = fopen(path, "r+b");
    ck_assert(f && fseek(f, size - 1, SEEK_SET) == 0 && fputc(orig[size - 1], f) != EOF);
    fclose(f);
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    safetensors_free(&st);
    free(orig);
}
END_TEST

/* F16 and BF16 are widened exactly: 1, -2.5, 0.5 and the smallest F16 subnormal, 2^-24. */
START_TEST(test_read_half_precision) {
    const uint16_t h[4] = {0x3C00, 0xC100, 0x3800, 0x0001}, b[3] = {0x3F80, 0xC020, 0x3F00};
    uint8_t data[14];
    for (int i = 0; i < 4; i++) data[2 * i] = (uint8_t)h[i], data[2 * i + 1] = (uint8_t)(h[i] >> 8);
    for (int i = 0; i < 3; i++)
        data[8 + 2 * i] = (uint8_t)b[i], data[8 + 2 * i + 1] = (uint8_t)(b[i] >> 8);
    const char *path = tmp_path("half.safetensors");
    write_raw(path,
              "{\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]},"
              "\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}",
              data, sizeof data);
    SafeTensors st;
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    const TensorRef *th = safetensors_find(&st, "h"), *tb = safetensors_find(&st, "b");
    ck_assert(th && tb && th->dtype == TENSOR_F32 && th->nbytes == 16 && tb->nbytes == 12);
    ck_assert(th->ndim == 2 && th->shape[0] == 2 && th->shape[1] == 2);
    const float want_h[4] = {1.0f, -2.5f, 0.5f, 0x1p-24f}, want_b[3] = {1.0f, -2.5f, 0.5f};
    expect_close_arrays((const float *)th->data, want_h, 4, 0.0f, 0.0f, "F16");
    expect_close_arrays((const float *)tb->data, want_b, 3, 0.0f, 0.0f, "BF16");
    safetensors_free(&st);
}
END_TEST

START_TEST(test_metadata_escapes) {
    const char *path = tmp_path("meta.safetensors");
    float w[2] = {0.25f, -1.0f};
    TensorRef e = {
        .name = "w", .dtype = TENSOR_F32, .ndim = 1, .shape = {2}, .nbytes = 8, .data = w};
    const char *keys[3] = {"plain", "we\"ird\\key", "config"};
    const char *vals[3] = {"", "line1\nline2\ttab \"q\" back\\slash \x01 \r end",
                           "model.d_model = 16\nmoe.top_k = 2\n"};
    ck_assert_msg(safetensors_write(path, &e, 1, keys, vals, 3, err, sizeof err) == 0, "%s", err);
    /* the header spells the escapes the short way where JSON has one */
    char head[512] = {0};
    FILE *f = fopen(path, "rb");
    ck_assert(f && fread(head, 1, sizeof head - 1, f) > 8);
    fclose(f);
    const char *spelled = "\"line1\\nline2\\ttab \\\"q\\\" back\\\\slash \\u0001 \\r end\"";
    ck_assert_msg(strstr(head + 8, spelled), "expected %s in %s", spelled, head + 8);
    SafeTensors st;
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.n_meta, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(st.meta_keys[i], keys[i]);
        ck_assert_str_eq(safetensors_meta(&st, keys[i]), vals[i]);
    }
    expect_close_arrays((const float *)safetensors_find(&st, "w")->data, w, 2, 0.0f, 0.0f, "w");
    safetensors_free(&st);
    /* \u escapes, including a surrogate pair, become UTF-8 */
    write_raw(path, "{\"__metadata__\":{\"u\":\"\\u0041\\u00e9\\ud83d\\ude00\\/\"}}", NULL, 0);
    ck_assert_msg(safetensors_read(&st, path, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(safetensors_meta(&st, "u"), "A\xc3\xa9\xf0\x9f\x98\x80/");
    ck_assert_int_eq(st.n, 0);
    safetensors_free(&st);
}
END_TEST

Suite *safetensors_suite(void) {
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("safetensors");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_dir_remove);
    tcase_add_test(tc, test_read_refuses_damage);
    tcase_add_test(tc, test_checksum_mutations);
    tcase_add_test(tc, test_read_half_precision);
    tcase_add_test(tc, test_metadata_escapes);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(safetensors_suite)
