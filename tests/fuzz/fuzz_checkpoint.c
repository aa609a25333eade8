/* fuzz_checkpoint.c: ckpt_read, then the stored settings through config_set line by line (as
 * checkpoint.c reads them). Each input is read twice: as it is, which mostly exercises the
 * header checks and the checksums, and with both CRC-32s recomputed (header at 44, body at
 * 40), so mutations reach the directory and payload checks behind them. */
#include <string.h>

#include "base/util.h"
#include "config/config.h"
#include "fuzz.h"
#include "io/tensorfile.h"

static void read_once(const uint8_t *data, size_t size) {
    Ckpt ck;
    char err[1024] = "";
    if (ckpt_read(&ck, fuzz_file(data, size), err, sizeof err) != 0) {
        if (!err[0]) abort();
        return;
    }
    volatile uint8_t sink = 0;
    for (int i = 0; i < ck.n; i++) {
        const uint8_t *b = (const uint8_t *)ck.entries[i].data;
        for (size_t k = 0; k < ck.entries[i].nbytes; k++) sink ^= b[k];
        if (ckpt_find(&ck, ck.entries[i].name) != &ck.entries[i]) abort();
    }
    (void)sink;
    Config c;
    config_defaults(&c);
    char *save = NULL;
    for (char *line = strtok_r(ck.config_text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save))
        if (line[0] != '#' && config_set(&c, line, err, sizeof err) != 0) break;
    ckpt_free(&ck);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    read_once(data, size);
    if (size >= CKPT_HEADER_BYTES) {
        uint8_t *b = fuzz_copy(data, size);
        le_put_u32(b + 40, crc32_update(0, b + CKPT_HEADER_BYTES, size - CKPT_HEADER_BYTES));
        le_put_u32(b + 44, crc32_with_hole(b, CKPT_HEADER_BYTES, 44));
        read_once(b, size);
        free(b);
    }
    return 0;
}
