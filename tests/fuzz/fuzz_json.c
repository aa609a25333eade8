/* fuzz_json.c: json_document, the JSON tree reader of a Hugging Face config.json (moe import
 * --format hf). A document it accepts must be a whole tree: every object's keys distinct and
 * found again by json_get, strings NUL-terminated, no node deeper than JSON_MAX_DEPTH; a
 * refusal must say why. */
#include <string.h>

#include "fuzz.h"
#include "io/json.h"

static int walk(const JsonValue *v, int depth) {
    if (depth > JSON_MAX_DEPTH + 1) abort();
    int nodes = 1;
    if (v->type == JSON_STRING && (!v->string || strlen(v->string) > (size_t)1 << 30)) abort();
    for (int k = 0; k < v->n; k++) {
        if (v->type == JSON_OBJECT) {
            if (!v->keys[k] || json_get(v, v->keys[k]) != &v->items[k]) abort();
        } else if (v->type != JSON_ARRAY) {
            abort();
        }
        nodes += walk(&v->items[k], depth + 1);
    }
    return nodes;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    JsonReader j = {(const char *)data, size, 0, ""};
    JsonValue v;
    if (json_document(&j, &v) != 0) {
        if (!j.msg[0]) abort();
        return 0;
    }
    walk(&v, 0);
    json_value_free(&v);
    return 0;
}
