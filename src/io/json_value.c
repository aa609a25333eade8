/*
 * json_value.c: a whole JSON document as a tree (json.h), built from json.c's pieces.
 *
 * As strict as the rest of the reader: RFC 8259's grammar and nothing more (no comments, no
 * trailing commas, no NaN), a key twice in one object refused (a reader would otherwise have
 * to pick one), and a nesting depth limit so a hostile file cannot exhaust the stack.
 */
#include <stdlib.h>
#include <string.h>

#include "io/json.h"

static int value_at(JsonReader *j, JsonValue *v, int depth);

/* The characters of a number, checked against the grammar
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, then read by strtod. */
static int number(JsonReader *j, JsonValue *v) {
    const size_t start = j->i;
#define AT(c) (j->i < j->n && j->s[j->i] == (c))
#define DIGIT (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9')
    if (AT('-')) j->i++;
    if (AT('0')) {
        j->i++;
    } else if (DIGIT) {
        while (DIGIT) j->i++;
    } else {
        return json_fail(j, "expected a value");
    }
    if (AT('.')) {
        j->i++;
        if (!DIGIT) return json_fail(j, "a number's fraction has no digits");
        while (DIGIT) j->i++;
    }
    if (AT('e') || AT('E')) {
        j->i++;
        if (AT('+') || AT('-')) j->i++;
        if (!DIGIT) return json_fail(j, "a number's exponent has no digits");
        while (DIGIT) j->i++;
    }
    if (DIGIT) return json_fail(j, "a number with a leading zero");
#undef AT
#undef DIGIT
    char buf[64];
    const size_t len = j->i - start;
    if (len >= sizeof buf) return json_fail(j, "a number of more than 63 characters");
    memcpy(buf, j->s + start, len);
    buf[len] = 0;
    v->type = JSON_NUMBER;
    v->number = strtod(buf, NULL);
    return 0;
}

/* The literal word (true, false, null) at j. */
static int word(JsonReader *j, const char *w) {
    const size_t n = strlen(w);
    if (j->n - j->i < n || memcmp(j->s + j->i, w, n) != 0) return 0;
    j->i += n;
    return 1;
}

/* The keys of an object read so far, for the check that none comes twice: a hash table of
 * their indices once there are many (a tokenizer's vocabulary has a hundred thousand), so
 * that the check stays linear. */
typedef struct {
    int *slot;  /* (cap) an index into the keys + 1; 0: empty */
    size_t cap; /* a power of two, at least twice the keys; 0 while the object is small */
} KeyIndex;
#define KEY_INDEX_FROM 16 /* keys below this many are compared one by one */

static size_t key_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return (size_t)h;
}

/* 1 when key is one of keys[0..n); else 0, and key (to become keys[n]) is indexed */
static int key_seen(KeyIndex *ix, char *const *keys, int n, const char *key) {
    if (n < KEY_INDEX_FROM) {
        for (int k = 0; k < n; k++)
            if (strcmp(keys[k], key) == 0) return 1;
        if (n + 1 < KEY_INDEX_FROM) return 0;
    }
    if (2 * (size_t)(n + 1) > ix->cap) { /* (re)build the table from every key so far */
        free(ix->slot);
        ix->cap = ix->cap ? 2 * ix->cap : 4 * KEY_INDEX_FROM;
        ix->slot = (int *)calloc_check(ix->cap, sizeof *ix->slot);
        for (int k = 0; k < n; k++) {
            size_t i = key_hash(keys[k]) & (ix->cap - 1);
            while (ix->slot[i]) i = (i + 1) & (ix->cap - 1);
            ix->slot[i] = k + 1;
        }
    }
    size_t i = key_hash(key) & (ix->cap - 1);
    for (; ix->slot[i]; i = (i + 1) & (ix->cap - 1))
        if (strcmp(keys[ix->slot[i] - 1], key) == 0) return 1;
    ix->slot[i] = n + 1;
    return 0;
}

/* [v, v, ...] or {"k": v, ...}: items appended one at a time. */
static int items(JsonReader *j, JsonValue *v, int depth, int object, KeyIndex *ix) {
    int cap = 0;
    do {
        if (v->n == cap) {
            cap = cap ? 2 * cap : 8;
            v->items = (JsonValue *)realloc_check(v->items, (size_t)cap * sizeof *v->items);
            if (object) v->keys = (char **)realloc_check(v->keys, (size_t)cap * sizeof *v->keys);
        }
        if (object) {
            char *key;
            json_ws(j);
            if (json_string(j, &key)) return -1;
            if (key_seen(ix, v->keys, v->n, key)) {
                json_fail(j, "the key \"%.60s\" appears twice in one object", key);
                free(key);
                return -1;
            }
            v->keys[v->n] = key;
            if (json_expect(j, ':')) {
                v->items[v->n++] = (JsonValue){JSON_NULL, 0, NULL, 0, NULL, NULL};
                return -1;
            }
        }
        memset(&v->items[v->n], 0, sizeof v->items[v->n]);
        const int rc = value_at(j, &v->items[v->n], depth + 1);
        v->n++;
        if (rc) return -1;
    } while (json_take(j, ','));
    return json_expect(j, object ? '}' : ']');
}

static int container(JsonReader *j, JsonValue *v, int depth, int object) {
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    j->i++; /* [ or { */
    if (json_take(j, object ? '}' : ']')) return 0;
    KeyIndex ix = {NULL, 0};
    const int rc = items(j, v, depth, object, &ix);
    free(ix.slot);
    return rc;
}

static int value_at(JsonReader *j, JsonValue *v, int depth) {
    memset(v, 0, sizeof *v);
    if (depth > JSON_MAX_DEPTH) return json_fail(j, "nested deeper than %d", JSON_MAX_DEPTH);
    json_ws(j);
    if (j->i >= j->n) return json_fail(j, "expected a value but the text ended");
    const char c = j->s[j->i];
    if (c == '{' || c == '[') return container(j, v, depth, c == '{');
    if (c == '"') {
        v->type = JSON_STRING;
        return json_string(j, &v->string);
    }
    if (word(j, "true") || word(j, "false")) {
        v->type = JSON_BOOL;
        v->number = j->s[j->i - 1] == 'e' && j->s[j->i - 2] == 'u'; /* "true" ends in "ue" */
        return 0;
    }
    if (word(j, "null")) return 0; /* JSON_NULL */
    return number(j, v);
}

int json_value(JsonReader *j, JsonValue *v) {
    if (value_at(j, v, 0) == 0) return 0;
    json_value_free(v);
    return -1;
}

int json_document(JsonReader *j, JsonValue *v) {
    if (json_value(j, v)) return -1;
    json_ws(j);
    if (j->i < j->n) {
        json_value_free(v);
        return json_fail(j, "text after the end of the document");
    }
    return 0;
}

void json_value_free(JsonValue *v) {
    for (int k = 0; k < v->n; k++) {
        json_value_free(&v->items[k]);
        if (v->keys) free(v->keys[k]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
    memset(v, 0, sizeof *v);
}

const JsonValue *json_get(const JsonValue *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (int k = 0; k < obj->n; k++)
        if (strcmp(obj->keys[k], key) == 0) return &obj->items[k];
    return NULL;
}

int json_read_object_file(JsonValue *root, const char *path, const FileSpec *spec, char *err,
                          int errlen) {
    size_t n;
    char *text = file_read_all(path, spec, &n, err, errlen);
    if (!text) return -1;
    JsonReader j = {text, n, 0, ""};
    const int rc = json_document(&j, root);
    free(text);
    if (rc) return set_error(err, errlen, "%s is not valid JSON: %s (byte %zu)", path, j.msg, j.i);
    if (root->type != JSON_OBJECT) {
        json_value_free(root);
        return set_error(err, errlen, "%s is not a JSON object", path);
    }
    return 0;
}
