/* fuzz_config.c: config_load_file (key=value text, size limit, NUL bytes) and, for what it
 * accepts, config_validate. Any input must give 0 or -1 with a message, never a crash. */
#include <string.h>

#include "config/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static Config defaults; /* built once: the embedded defaults cost as much as a file */
    static int have_defaults = 0;
    if (!have_defaults) config_defaults(&defaults), have_defaults = 1;
    Config c = defaults;
    char err[1024] = "";
    if (config_load_file(&c, fuzz_file(data, size), err, sizeof err) == 0)
        (void)config_validate(&c, err, sizeof err);
    else if (!err[0])
        abort(); /* a refusal must say why */
    return 0;
}
