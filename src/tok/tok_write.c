/*
 * tok_write.c: a tokenizer written as tokenizer.json, field by field in the order and the
 * indentation the tokenizers library writes (so Tokenizer.from_file loads it, and a diff with
 * the library's own file shows only what differs), atomically (io/files.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/util.h"
#include "io/files.h"
#include "io/json.h"
#include "tok/tok.h"

static void byte_level(FILE *f, const char *indent, int prefix, int regex) {
    fprintf(f, "{\n%s  \"type\": \"ByteLevel\",\n%s  \"add_prefix_space\": %s,\n", indent, indent,
            prefix ? "true" : "false");
    fprintf(f, "%s  \"trim_offsets\": true,\n%s  \"use_regex\": %s\n%s}", indent, indent,
            regex ? "true" : "false", indent);
}

static void pre_tokenizer(FILE *f, TokPattern p) {
    fputs("  \"pre_tokenizer\": ", f);
    if (p == TOK_GPT2) {
        byte_level(f, "  ", 0, 1);
    } else {
        fputs("{\n    \"type\": \"Sequence\",\n    \"pretokenizers\": [\n      {\n"
              "        \"type\": \"Split\",\n        \"pattern\": {\n          \"Regex\": ",
              f);
        json_write_string(f, tok_pattern_regex(p));
        fputs("\n        },\n        \"behavior\": \"Isolated\",\n        \"invert\": false\n"
              "      },\n      ",
              f);
        byte_level(f, "      ", 0, 0);
        fputs("\n    ]\n  }", f);
    }
    fputs(",\n", f);
}

static void added_tokens(FILE *f, const Tokenizer *t) {
    fputs("  \"added_tokens\": [", f);
    for (int k = 0; k < t->n_added; k++) {
        const int id = t->added[k], special = (t->kind[id] & TOK_SPECIAL) != 0,
                  normalized = (t->kind[id] & TOK_NORMALIZED) != 0;
        fprintf(f, "%s\n    {\n      \"id\": %d,\n      \"content\": ", k ? "," : "", id);
        json_write_string(f, t->token[id]);
        fprintf(f,
                ",\n      \"single_word\": false,\n      \"lstrip\": false,\n"
                "      \"rstrip\": false,\n      \"normalized\": %s,\n      \"special\": %s\n    }",
                normalized ? "true" : "false", special ? "true" : "false");
    }
    fputs(t->n_added ? "\n  ],\n" : "],\n", f);
}

static void model(FILE *f, const Tokenizer *t) {
    fprintf(f,
            "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n"
            "    \"unk_token\": null,\n    \"continuing_subword_prefix\": null,\n"
            "    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
            "    \"byte_fallback\": false,\n    \"ignore_merges\": %s,\n    \"vocab\": {",
            t->ignore_merges ? "true" : "false");
    int first = 1;
    for (int id = 0; id < t->n_vocab; id++)
        if (t->kind[id] & TOK_MODEL) {
            fputs(first ? "\n      " : ",\n      ", f);
            json_write_string(f, t->token[id]);
            fprintf(f, ": %d", id);
            first = 0;
        }
    fputs(first ? "},\n    \"merges\": [" : "\n    },\n    \"merges\": [", f);
    for (int k = 0; k < t->n_merges; k++) {
        fputs(k ? ",\n      [\n        " : "\n      [\n        ", f);
        json_write_string(f, t->token[t->merges[k][0]]);
        fputs(",\n        ", f);
        json_write_string(f, t->token[t->merges[k][1]]);
        fputs("\n      ]", f);
    }
    fputs(t->n_merges ? "\n    ]\n  }\n}" : "]\n  }\n}", f);
}

int tok_save(const Tokenizer *t, const char *path, char *err, int errlen) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) moe_fatal("out of memory");
    fputs("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n", f);
    added_tokens(f, t);
    fputs(t->nfc ? "  \"normalizer\": {\n    \"type\": \"NFC\"\n  },\n"
                 : "  \"normalizer\": null,\n",
          f);
    pre_tokenizer(f, t->pattern);
    fputs("  \"post_processor\": null,\n  \"decoder\": ", f);
    byte_level(f, "  ", 1, 1);
    fputs(",\n", f);
    model(f, t);
    fclose(f);
    const void *buf[1] = {text};
    const size_t lens[1] = {len};
    const int rc = write_atomic(path, buf, lens, 1, err, errlen);
    free(text);
    return rc;
}
