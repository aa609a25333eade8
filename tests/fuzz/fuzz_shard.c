/* fuzz_shard.c: shard_load, then what uses a loaded shard: the unigram entropy and, when it
 * holds a window, a validation batch. Each input is read as it is and with both CRC-32s
 * recomputed (payload at 160, header at 164), so mutations reach the checks behind them. */
#include "base/util.h"
#include "fuzz.h"
#include "io/data.h"

static void read_once(const uint8_t *data, size_t size) {
    Shard s;
    char err[1024] = "";
    if (shard_load(&s, fuzz_file(data, size), err, sizeof err) != 0) {
        if (!err[0]) abort();
        return;
    }
    volatile double h = shard_unigram_entropy(&s);
    (void)h;
    enum { B = 2, T = 8 };
    if (shard_check_window(&s, T, err, sizeof err) == 0) {
        int in[B * T], tg[B * T];
        uint8_t dom[B * T];
        loader_val_batch(&s, B, T, 0, 2, in, tg, dom);
        for (int i = 0; i < B * T; i++)
            if (in[i] < 0 || (uint32_t)in[i] >= s.vocab || tg[i] < 0 ||
                (uint32_t)tg[i] >= s.vocab || dom[i] >= s.n_domains)
                abort();
    }
    shard_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    read_once(data, size);
    if (size >= SHARD_HEADER_BYTES) {
        uint8_t *b = fuzz_copy(data, size);
        le_put_u32(b + 160, crc32_update(0, b + SHARD_HEADER_BYTES, size - SHARD_HEADER_BYTES));
        le_put_u32(b + 164, crc32_with_hole(b, SHARD_HEADER_BYTES, 164));
        read_once(b, size);
        free(b);
    }
    return 0;
}
