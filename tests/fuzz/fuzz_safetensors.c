/* fuzz_safetensors.c: safetensors_read, which includes the strict JSON header parser
 * (io/json.c). What it accepts is walked: every tensor's floats and every metadata value. */
#include <string.h>

#include "fuzz.h"
#include "io/tensorfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    SafeTensors st;
    char err[1024] = "";
    if (safetensors_read(&st, fuzz_file(data, size), err, sizeof err) != 0) {
        if (!err[0]) abort();
        return 0;
    }
    volatile float sink = 0.0f;
    for (int i = 0; i < st.n; i++) {
        const float *x = (const float *)st.entries[i].data;
        for (size_t k = 0; k < st.entries[i].nbytes / 4; k++) sink += x[k];
        if (safetensors_find(&st, st.entries[i].name) != &st.entries[i]) abort();
    }
    for (int i = 0; i < st.n_meta; i++)
        if (strcmp(safetensors_meta(&st, st.meta_keys[i]), st.meta_values[i]) != 0) abort();
    (void)sink;
    safetensors_free(&st);
    return 0;
}
