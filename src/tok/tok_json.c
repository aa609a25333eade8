/*
 * tok_json.c: a tokenizer from Hugging Face's tokenizer.json, and written back to one in the
 * layout the tokenizers library writes (tok.h).
 *
 * What is read is what byte-level BPE needs, and anything else is refused by its JSON path
 * with what is supported, never ignored: a tokenizer that would encode differently here than
 * in the library must not load. Read: model (type "BPE", vocab, merges as "a b" strings or
 * ["a", "b"] pairs, ignore_merges; byte_fallback false, no dropout, no subword prefix or
 * suffix), added_tokens (none stripping or single_word), pre_tokenizer (ByteLevel with
 * use_regex true: GPT-2's pattern; or a Sequence of a Split by one of the known patterns,
 * pretok.h, and a ByteLevel without its own regex), normalizer null or NFC (Qwen2's, unicode.h;
 * added tokens normalized or not), decoder ByteLevel, truncation and padding null.
 * post_processor is not read: encoding adds no tokens (tok.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/files.h"
#include "io/json.h"
#include "tok/tok.h"

#define TOK_JSON_MAX (1ull << 30) /* Llama 3's is 9 MB */
#define TOK_MAX_ID (1 << 24)

/* The value's type in words, for messages. */
static const char *type_name(const JsonValue *v) {
    static const char *const NAMES[] = {"null",     "a boolean", "a number",
                                        "a string", "an array",  "an object"};
    return v ? NAMES[v->type] : "absent";
}

/* v's "type" field, or "" */
static const char *type_of(const JsonValue *v) {
    const JsonValue *ty = json_get(v, "type");
    return ty && ty->type == JSON_STRING ? ty->string : "";
}

/* 1 when key of obj is absent, null, or the boolean b */
static int absent_or(const JsonValue *obj, const char *key, int b) {
    const JsonValue *v = json_get(obj, key);
    return !v || v->type == JSON_NULL || (v->type == JSON_BOOL && (int)v->number == b);
}

static int read_document(JsonValue *root, const char *path, char *err, int errlen) {
    const FileSpec spec = {"tokenizer", "pass a tokenizer.json (Hugging Face's tokenizers layout)",
                           "tokenizer.json", TOK_JSON_MAX};
    return json_read_object_file(root, path, &spec, err, errlen);
}

/* a ByteLevel pre-tokenizer at path: add_prefix_space false, use_regex as *regex */
static int byte_level(const JsonValue *b, const char *path, int *regex, char *err, int errlen) {
    if (!absent_or(b, "add_prefix_space", 0))
        return set_error(err, errlen,
                         "%s.add_prefix_space is true: supported is false (a space "
                         "is not added before the text)",
                         path);
    const JsonValue *r = json_get(b, "use_regex");
    *regex = !r || (r->type == JSON_BOOL && r->number != 0); /* the library's default: true */
    return 0;
}

/* a Split at path: one of the known patterns, isolated */
static int split(const JsonValue *s, const char *path, int *pattern, char *err, int errlen) {
    const JsonValue *re = json_get(json_get(s, "pattern"), "Regex");
    const JsonValue *behavior = json_get(s, "behavior");
    if (!re || re->type != JSON_STRING)
        return set_error(err, errlen,
                         "%s.pattern is not {\"Regex\": ...}: supported are the "
                         "regular expressions of gpt2, llama3 and qwen2",
                         path);
    if ((*pattern = tok_pattern_by_regex(re->string)) < 0)
        return set_error(err, errlen,
                         "%s.pattern.Regex \"%.120s\" is none of the known "
                         "patterns: gpt2, llama3, qwen2 (src/README.md, \"The tokenizer\")",
                         path, re->string);
    if (!behavior || behavior->type != JSON_STRING || strcmp(behavior->string, "Isolated") != 0 ||
        !absent_or(s, "invert", 0))
        return set_error(err, errlen, "%s: supported is behavior \"Isolated\", invert false", path);
    return 0;
}

/* pre_tokenizer: ByteLevel (use_regex true), or Sequence [Split, ByteLevel (use_regex false)] */
static int read_pre_tokenizer(const JsonValue *pre, int *pattern, char *err, int errlen) {
    const char *ty = type_of(pre);
    int regex = 0;
    if (strcmp(ty, "ByteLevel") == 0) {
        if (byte_level(pre, "pre_tokenizer", &regex, err, errlen)) return -1;
        *pattern = TOK_GPT2;
        if (regex) return 0;
    } else if (strcmp(ty, "Sequence") == 0) {
        const JsonValue *seq = json_get(pre, "pretokenizers");
        if (seq && seq->type == JSON_ARRAY && seq->n == 2 &&
            strcmp(type_of(&seq->items[0]), "Split") == 0 &&
            strcmp(type_of(&seq->items[1]), "ByteLevel") == 0) {
            if (split(&seq->items[0], "pre_tokenizer.pretokenizers[0]", pattern, err, errlen) ||
                byte_level(&seq->items[1], "pre_tokenizer.pretokenizers[1]", &regex, err, errlen))
                return -1;
            if (!regex) return 0;
        }
    }
    return set_error(err, errlen,
                     "pre_tokenizer is %s%s, not one supported: a ByteLevel with use_regex "
                     "true (GPT-2's pattern), or a Sequence of a Split and a ByteLevel with "
                     "use_regex false",
                     ty[0] ? "of type " : type_name(pre), ty);
}

/* model: BPE's options, each as byte-level BPE has it */
static int check_model(const JsonValue *m, int *ignore_merges, char *err, int errlen) {
    const char *ty = type_of(m);
    if (strcmp(ty, "BPE") != 0)
        return set_error(err, errlen,
                         "model.type is \"%s\": supported is \"BPE\" (byte-level, as "
                         "GPT-2, Llama 3 and Qwen2 use it), not Unigram, WordPiece or WordLevel",
                         ty[0] ? ty : type_name(json_get(m, "type")));
    static const char *const NULLS[] = {"dropout", "continuing_subword_prefix",
                                        "end_of_word_suffix"};
    for (int k = 0; k < 3; k++) {
        const JsonValue *v = json_get(m, NULLS[k]);
        if (v && v->type != JSON_NULL && !(v->type == JSON_STRING && !v->string[0]))
            return set_error(err, errlen, "model.%s is %s: supported is null", NULLS[k],
                             type_name(v));
    }
    if (!absent_or(m, "byte_fallback", 0))
        return set_error(err, errlen,
                         "model.byte_fallback is true: supported is false (byte-level "
                         "BPE has a token for every byte)");
    *ignore_merges = !absent_or(m, "ignore_merges", 0);
    return 0;
}

/* model.vocab: {"token": id, ...} */
static int read_vocab(Tokenizer *t, const JsonValue *vocab, char *err, int errlen) {
    if (!vocab || vocab->type != JSON_OBJECT)
        return set_error(err, errlen, "model.vocab is %s: it must be an object of token: id",
                         type_name(vocab));
    for (int k = 0; k < vocab->n; k++) {
        const JsonValue *id = &vocab->items[k];
        if (id->type != JSON_NUMBER || id->number < 0 || id->number >= TOK_MAX_ID ||
            id->number != (int)id->number)
            return set_error(err, errlen, "model.vocab[\"%.60s\"] is not an id from 0 to %d",
                             vocab->keys[k], TOK_MAX_ID - 1);
        char why[200];
        if (tok_set_token(t, (int)id->number, vocab->keys[k], TOK_MODEL, why, sizeof why))
            return set_error(err, errlen, "model.vocab: %s", why);
    }
    return 0;
}

/* model.merges: ["a b", ...] or [["a", "b"], ...], by rank */
static int read_merges(Tokenizer *t, const JsonValue *merges, char *err, int errlen) {
    if (!merges || merges->type != JSON_ARRAY)
        return set_error(err, errlen, "model.merges is %s: it must be an array", type_name(merges));
    for (int k = 0; k < merges->n; k++) {
        const JsonValue *m = &merges->items[k];
        char why[300];
        int rc = -1;
        if (m->type == JSON_STRING && strchr(m->string, ' ')) {
            char *sp = strchr(m->string, ' ');
            *sp = '\0'; /* "a b": a token of the byte alphabet holds no space */
            rc = tok_add_merge(t, m->string, sp + 1, why, sizeof why);
            *sp = ' ';
        } else if (m->type == JSON_ARRAY && m->n == 2 && m->items[0].type == JSON_STRING &&
                   m->items[1].type == JSON_STRING) {
            rc = tok_add_merge(t, m->items[0].string, m->items[1].string, why, sizeof why);
        } else {
            snprintf(why, sizeof why, "it is neither \"a b\" nor [\"a\", \"b\"]");
        }
        if (rc) return set_error(err, errlen, "model.merges[%d]: %s", k, why);
    }
    return 0;
}

/* added_tokens: [{"id", "content", "special", ...}] matched whole */
static int read_added(Tokenizer *t, const JsonValue *added, char *err, int errlen) {
    if (!added || added->type == JSON_NULL) return 0;
    if (added->type != JSON_ARRAY)
        return set_error(err, errlen, "added_tokens is %s: it must be an array", type_name(added));
    for (int k = 0; k < added->n; k++) {
        const JsonValue *a = &added->items[k], *id = json_get(a, "id"), *c = json_get(a, "content");
        if (!id || id->type != JSON_NUMBER || id->number < 0 || id->number >= TOK_MAX_ID ||
            id->number != (int)id->number || !c || c->type != JSON_STRING || !c->string[0])
            return set_error(err, errlen,
                             "added_tokens[%d]: it needs an id from 0 to %d and a "
                             "content that is not empty",
                             k, TOK_MAX_ID - 1);
        if (!absent_or(a, "single_word", 0) || !absent_or(a, "lstrip", 0) ||
            !absent_or(a, "rstrip", 0))
            return set_error(err, errlen,
                             "added_tokens[%d] (\"%.60s\"): single_word, lstrip and "
                             "rstrip are supported false only",
                             k, c->string);
        char why[200];
        /* normalized: the library's default is the opposite of special */
        const int special = !absent_or(a, "special", 0);
        const JsonValue *norm = json_get(a, "normalized");
        const int normalized = norm && norm->type == JSON_BOOL ? norm->number != 0 : !special;
        const int kind =
            TOK_ADDED | (special ? TOK_SPECIAL : 0) | (normalized ? TOK_NORMALIZED : 0);
        if (tok_set_token(t, (int)id->number, c->string, kind, why, sizeof why))
            return set_error(err, errlen, "added_tokens[%d]: %s", k, why);
    }
    return 0;
}

/* the fields around the model: normalizer (null, or NFC into *nfc), decoder, truncation,
 * padding */
static int check_around(const JsonValue *root, int *nfc, char *err, int errlen) {
    static const char *const NULLS[] = {"normalizer", "truncation", "padding"};
    const JsonValue *norm = json_get(root, "normalizer");
    *nfc = strcmp(type_of(norm), "NFC") == 0;
    for (int k = *nfc; k < 3; k++) {
        const JsonValue *v = json_get(root, NULLS[k]);
        if (v && v->type != JSON_NULL) {
            const char *ty = type_of(v);
            return set_error(err, errlen, "%s is %s%s%s: supported is null%s", NULLS[k],
                             ty[0] ? "of type \"" : type_name(v), ty, ty[0] ? "\"" : "",
                             k ? "" : " or {\"type\": \"NFC\"} (Qwen2's)");
        }
    }
    const JsonValue *d = json_get(root, "decoder");
    if (strcmp(type_of(d), "ByteLevel") != 0)
        return set_error(err, errlen, "decoder is %s%s: supported is ByteLevel",
                         type_of(d)[0] ? "of type " : type_name(d), type_of(d));
    return 0;
}

int tok_load(Tokenizer *t, const char *path, char *err, int errlen) {
    JsonValue root;
    if (read_document(&root, path, err, errlen)) return -1;
    const JsonValue *model = json_get(&root, "model");
    int pattern = TOK_GPT2, ignore = 0, nfc = 0, rc;
    char why[512];
    rc = check_around(&root, &nfc, why, sizeof why) ||
         read_pre_tokenizer(json_get(&root, "pre_tokenizer"), &pattern, why, sizeof why) ||
         check_model(model, &ignore, why, sizeof why);
    tok_init(t, (TokPattern)pattern);
    t->ignore_merges = ignore;
    t->nfc = nfc;
    rc = rc || read_vocab(t, json_get(model, "vocab"), why, sizeof why) ||
         read_added(t, json_get(&root, "added_tokens"), why, sizeof why) ||
         read_merges(t, json_get(model, "merges"), why, sizeof why) ||
         tok_finish(t, why, sizeof why);
    json_value_free(&root);
    if (!rc) return 0;
    tok_free(t);
    return set_error(err, errlen, "%s: %s", path, why);
}
