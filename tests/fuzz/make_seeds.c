/*
 * make_seeds.c: the fuzzers' seed corpora (tests/fuzz/seeds/<harness>/), written by the
 * project's own writers so they follow the current formats. `make fuzz-seeds` runs it; the
 * seeds are committed, so `make fuzz` does not need it.
 *
 *   make_seeds DIR   writes DIR/config/, DIR/checkpoint/, DIR/shard/, DIR/safetensors/
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "config/config.h"
#include "io/data.h"
#include "io/files.h"
#include "io/tensorfile.h"

static void put(const char *dir, const char *name, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen_check(path, "wb");
    fputs(text, f);
    fclose(f);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    char err[1024], d[1024], p[1100];
    const char *sub[4] = {"config", "checkpoint", "shard", "safetensors"};
    for (int i = 0; i < 4; i++) {
        snprintf(d, sizeof d, "%s/%s", argv[1], sub[i]);
        if (make_dirs(d, err, sizeof err) != 0) moe_fatal("%s", err);
    }

    Config c;
    config_defaults(&c);
    char *text = config_to_text(&c);
    snprintf(d, sizeof d, "%s/config", argv[1]);
    put(d, "defaults.txt", text);
    put(d, "small.txt", "# a small run\nmodel.d_model = 64  # narrower\n\tmoe.top_k=1\r\n"
                        "moe.balance = aux_free\ndata.train = my data/train.bin\ntrain.lr = 1e-3");
    put(d, "bad.txt", "model.n_layr = 2\nmoe.capacity_factor=1.25\n");

    /* two tensors and a byte entry; the settings text kept short */
    static const float w[6] = {1, -2, 3, -4, 5, -6}, g[2] = {1, 1};
    static const uint8_t rng[32] = {1, 2, 3};
    TensorRef e[3] = {{"param/w", TENSOR_F32, 2, {2, 3, 0}, sizeof w, w},
                      {"param/g", TENSOR_F32, 1, {2, 0, 0}, sizeof g, g},
                      {"rng/loader", TENSOR_U8, 1, {32, 0, 0}, 32, rng}};
    snprintf(p, sizeof p, "%s/checkpoint/tiny.ckpt", argv[1]);
    if (ckpt_write(p, 3, "model.d_model=64\ntrain.steps=10\n", e, 3, err, sizeof err) != 0)
        moe_fatal("%s", err);

    static const uint8_t toks[16] = "hello{int x;}bye";
    static const ShardDoc docs[3] = {{0, 5, 0}, {5, 7, 1}, {12, 4, 0}};
    static const char names[2][SHARD_DOMAIN_NAME] = {"en", "code"};
    snprintf(p, sizeof p, "%s/shard/tiny.bin", argv[1]);
    if (shard_write_bytes(p, toks, 16, docs, 3, names, 2, err, sizeof err) != 0)
        moe_fatal("%s", err);
    /* ids of a vocabulary of 70000: 3 bytes each, the last id among them */
    static const int wide[16] = {0, 1, 69999, 300, 65536, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 5};
    snprintf(p, sizeof p, "%s/shard/wide.bin", argv[1]);
    if (shard_write(p, wide, 16, 70000, 0x1234abcdu, docs, 3, names, 2, err, sizeof err) != 0)
        moe_fatal("%s", err);

    const char *keys[2] = {"format", "config"}, *vals[2] = {"moe.c", "model.d_model = 64\n"};
    snprintf(p, sizeof p, "%s/safetensors/tiny.safetensors", argv[1]);
    if (safetensors_write(p, e, 2, keys, vals, 2, err, sizeof err) != 0) moe_fatal("%s", err);
    /* a hand-written header: F16 and BF16 tensors, an escape, no metadata */
    static const char hdr[] = "{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                              "\"b\\u00e9\":{\"dtype\":\"BF16\",\"shape\":[1,1],"
                              "\"data_offsets\":[4,6]}}";
    uint8_t file[8 + sizeof hdr - 1 + 6];
    le_put_u64(file, sizeof hdr - 1);
    memcpy(file + 8, hdr, sizeof hdr - 1);
    memcpy(file + 8 + sizeof hdr - 1, "\x00\x3c\x00\xc0\x80\x3f", 6);
    snprintf(p, sizeof p, "%s/safetensors/half.safetensors", argv[1]);
    const void *bufs[1] = {file};
    size_t lens[1] = {sizeof file};
    if (write_atomic(p, bufs, lens, 1, err, sizeof err) != 0) moe_fatal("%s", err);
    free(text);
    printf("wrote the seed corpora under %s\n", argv[1]);
    return 0;
}
