/*
 * json.h: the pieces of a strict JSON reader, enough for a safetensors header: whitespace,
 * punctuation, strings with every JSON escape, and non-negative integers and arrays of them.
 * The caller writes the grammar (which objects and fields it expects) out of these pieces.
 *
 * Each function returns 0 (or 1/0 for json_take) and advances past what it read; on failure
 * it returns -1 and the first failure's description is kept in JsonReader.msg, with i the
 * byte where it was found.
 */
#ifndef MOE_IO_JSON_H
#define MOE_IO_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/util.h"
#include "io/files.h"

typedef struct {
    const char *s; /* the text, n bytes, not necessarily NUL-terminated */
    size_t n, i;   /* length, and the next byte to read */
    char msg[160]; /* the first failure, "" while there is none */
} JsonReader;

/* Record a failure (only the first one is kept); returns -1. */
int json_fail(JsonReader *j, const char *fmt, ...) MOE_PRINTF(2, 3);
void json_ws(JsonReader *j);
/* After whitespace: 1 and consumed when the next byte is c, else 0 and nothing consumed. */
int json_take(JsonReader *j, char c);
/* After whitespace, the byte c, or a failure naming what was found instead. */
int json_expect(JsonReader *j, char c);
/* A string literal into a new NUL-terminated buffer (*out, free it; NULL on failure). Escapes
 * \" \\ \/ \b \f \n \r \t and \uXXXX (surrogate pairs joined) become UTF-8; raw control
 * characters and \u0000 are refused. */
int json_string(JsonReader *j, char **out);
/* A non-negative integer: no sign, fraction, exponent or leading zeros; must fit 64 bits. */
int json_uint(JsonReader *j, uint64_t *v);
/* [u, u, ...]: the first max values go to v; *count gets how many there were (may be > max). */
int json_uint_array(JsonReader *j, uint64_t *v, int max, int *count);

/* ---- a whole JSON document as a tree (json_value.c): for config files such as a Hugging Face
 * config.json. Numbers are RFC 8259's (sign, fraction, exponent) read as double; objects keep
 * their keys in order, and a key twice is refused; nesting deeper than JSON_MAX_DEPTH is
 * refused. */
typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;
#define JSON_MAX_DEPTH 32

typedef struct JsonValue {
    JsonType type;
    double number;            /* JSON_NUMBER; JSON_BOOL: 0 or 1 */
    char *string;             /* JSON_STRING */
    int n;                    /* JSON_ARRAY, JSON_OBJECT: how many items */
    char **keys;              /* JSON_OBJECT: (n) */
    struct JsonValue *items;  /* JSON_ARRAY, JSON_OBJECT: (n) */
} JsonValue;

/* One value (after whitespace) into *v; on failure -1, v holds nothing to free. */
int json_value(JsonReader *j, JsonValue *v);
/* A whole document: one value and nothing after it but whitespace. */
int json_document(JsonReader *j, JsonValue *v);
void json_value_free(JsonValue *v);
/* The file path (read whole, as spec describes it: io/files.h), a JSON object, into *root.
 * Returns 0, or -1 with a message naming the file in err (unreadable, not JSON, not an
 * object); *root then holds nothing to free. */
int json_read_object_file(JsonValue *root, const char *path, const FileSpec *spec,
                          char *err, int errlen);
/* The value of key in an object, or NULL (also when obj is not an object). */
const JsonValue *json_get(const JsonValue *obj, const char *key);

/* The writing side: s as a JSON string literal (quotes, backslashes and control characters
 * escaped; other bytes as they are, so UTF-8 text stays UTF-8). */
void json_write_string(FILE *out, const char *s);

#endif
