/*
 * config.c: everything that reads the one table of settings (keys.c).
 *
 * Each row of the table names a setting once: its key=value name, its type, where it lives in
 * Config (offsetof), its default as text, its inclusive range and its help. Defaults,
 * config_set, config_write, the per-key half of config_validate, nearest-key suggestions,
 * the shape comparison for checkpoints and `moe info --keys` all loop over that table, so a
 * new setting is one new row (plus its Config field) and nothing else.
 *
 * Values are parsed strictly: the whole text must be consumed, integers must fit, floats
 * must be finite and fit in fp32, and a failed assignment leaves the Config untouched.
 * Floats are written with the fewest %g digits (at most 9, which always suffice) that read
 * back as the same fp32 value, so config_load_file(config_write(c)) reproduces c exactly.
 */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "config/keys.h"
#include "io/files.h"
#include "moe/moe_ops.h"

#define KEYS CONFIG_KEYS
#define NKEYS CONFIG_NKEYS

int config_key_count(void) {
    return NKEYS;
}

/* ---- small helpers --------------------------------------------------------------------- */

static void *field(const Key *k, Config *c) {
    return (char *)c + k->off;
}
static const void *cfield(const Key *k, const Config *c) {
    return (const char *)c + k->off;
}

static const Key *find_key(const char *name) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

/* Trim leading and trailing whitespace in place; returns the new start. */
static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

static const char *after_dot(const char *s) {
    const char *d = strchr(s, '.');
    return d ? d + 1 : s;
}

/* The key nearest to a typo, or NULL when nothing is close. A typo may miss the section
 * ("d_model"), misspell it, or misspell the field, so the distance is the smallest of: the
 * full names, the typo against the key's field part, and the two field parts (plus one, so
 * an exact full-name near miss wins a tie). */
static const Key *nearest_key(const char *typo) {
    /* key names are a few dozen characters: a far longer word is no typo of one, and the
     * distances below cost its length times theirs */
    if (strlen(typo) > 100) return NULL;
    const Key *best = NULL;
    int best_d = INT_MAX;
    const char *typo_field = strchr(typo, '.') ? after_dot(typo) : NULL;
    for (int i = 0; i < NKEYS; i++) {
        int d = levenshtein(typo, KEYS[i].name);
        int d2 = levenshtein(typo, after_dot(KEYS[i].name));
        if (d2 < d) d = d2;
        if (typo_field) {
            int d3 = levenshtein(typo_field, after_dot(KEYS[i].name)) + 1;
            if (d3 < d) d = d3;
        }
        if (d < best_d) {
            best_d = d;
            best = &KEYS[i];
        }
    }
    return best_d <= 2 + (int)strlen(typo) / 4 ? best : NULL;
}

/* The name of choice i of an enum key into buf; returns 0, or -1 when i is out of range. */
static int enum_name(const Key *k, int i, char *buf, size_t n) {
    const char *p = k->choices;
    for (int j = 0; j < i && p; j++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (i < 0 || !p) return -1;
    size_t len = strcspn(p, "|");
    snprintf(buf, n, "%.*s", (int)len, p);
    return 0;
}

/* The index of name among the choices of an enum key, or -1. */
static int enum_index(const Key *k, const char *name) {
    char buf[64];
    for (int i = 0; enum_name(k, i, buf, sizeof buf) == 0; i++)
        if (strcmp(buf, name) == 0) return i;
    return -1;
}

/* A setting's current value as text, in the form config_set reads back exactly. */
static void format_value(const Key *k, const Config *c, char *buf, size_t n) {
    const void *p = cfield(k, c);
    switch (k->type) {
    case T_INT:
    case T_BOOL: snprintf(buf, n, "%d", *(const int *)p); break;
    case T_FLOAT: {
        /* the shortest %g form that reads back as the same fp32 value; 9 significant digits
         * always do, fewer keep config.txt readable (0.02 rather than 0.0199999996) */
        float f = *(const float *)p;
        for (int prec = 1; prec <= 9; prec++) {
            snprintf(buf, n, "%.*g", prec, (double)f);
            if ((float)strtod(buf, NULL) == f) break;
        }
        break;
    }
    case T_U64: snprintf(buf, n, "%" PRIu64, *(const uint64_t *)p); break;
    case T_STR: snprintf(buf, n, "%s", (const char *)p); break;
    case T_ENUM:
        if (enum_name(k, *(const int *)p, buf, n) != 0) snprintf(buf, n, "%d", *(const int *)p);
        break;
    }
}

/* Per-key range check, shared by config_set (on the parsed value) and config_validate (on
 * the stored one). `shown` is the value as the user wrote it. */
static int check_range(const Key *k, double v, const char *shown, char *err, int errlen) {
    if (k->type != T_INT && k->type != T_FLOAT && k->type != T_BOOL) return 0;
    if (isnan(v))
        return set_error(err, errlen, "%s must be a finite number, got %s", k->name, shown);
    if ((k->flags & K_OPEN_MIN) ? !(v > k->min) : !(v >= k->min))
        return set_error(err, errlen, "%s must be %s %.10g, got %s (%s)", k->name,
                         (k->flags & K_OPEN_MIN) ? ">" : ">=", k->min, shown, k->help);
    if (isinf(v) && isinf(k->max))
        return set_error(err, errlen, "%s must be a finite number, got %s", k->name, shown);
    if ((k->flags & K_OPEN_MAX) ? !(v < k->max) : !(v <= k->max))
        return set_error(err, errlen, "%s must be %s %.10g, got %s (%s)", k->name,
                         (k->flags & K_OPEN_MAX) ? "<" : "<=", k->max, shown, k->help);
    return 0;
}

/* A text key set to "": a path, or a text that has a default to show (data.mix=natural). */
static int empty_text(const Key *k, char *err, int errlen) {
    if (k->flags & K_PATH)
        return set_error(err, errlen, "%s is empty; give a path, e.g. %s=%s", k->name, k->name,
                         k->def);
    return set_error(err, errlen,
                     "%s is empty; write e.g. %s=%s (the default), or leave the key out. %s: %s",
                     k->name, k->name, k->def, k->name, k->help);
}

/* A T_FLOAT value: a finite number a 32-bit float holds (not rounded to 0), in range. */
static int parse_float(const Key *k, const char *text, Config *c, char *err, int errlen) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0')
        return set_error(err, errlen, "%s expects a number, got '%s'", k->name, text);
    if (isnan(v) || isinf(v) || fabs(v) > FLT_MAX) {
        if (isnan(v))
            return set_error(err, errlen, "%s must be a finite number, got '%s'", k->name, text);
        return set_error(err, errlen, "%s: '%s' is too large for a 32-bit float", k->name, text);
    }
    if (v != 0.0 && (float)v == 0.0f)
        return set_error(err, errlen,
                         "%s: '%s' is too small for a 32-bit float; use 0 or a "
                         "magnitude >= 1e-38",
                         k->name, text);
    if (check_range(k, v, text, err, errlen)) return -1;
    *(float *)field(k, c) = (float)v;
    return 0;
}

/* A T_STR value (a path): not empty, fits MOE_PATH_MAX, and nothing a config file cannot hold. */
static int parse_text(const Key *k, const char *text, Config *c, char *err, int errlen) {
    size_t n = strlen(text);
    if (n == 0) return empty_text(k, err, errlen);
    if (n >= MOE_PATH_MAX)
        return set_error(err, errlen,
                         "%s is %zu characters long; at most %d fit, use a shorter "
                         "path (or a symlink)",
                         k->name, n, MOE_PATH_MAX - 1);
    for (size_t i = 0; i < n; i++)
        if (text[i] == '#' || iscntrl((unsigned char)text[i]))
            return set_error(err, errlen,
                             "%s: the path contains '#' or a control character, "
                             "which a config file cannot hold; rename the file or use a symlink",
                             k->name);
    char *dst = (char *)field(k, c);
    memset(dst, 0, MOE_PATH_MAX);
    memcpy(dst, text, n);
    return 0;
}

/* Parse `text` for key k and store it in c; on any error c is untouched. */
static int parse_value(const Key *k, const char *text, Config *c, char *err, int errlen) {
    char *end = NULL;
    if (*text == '\0' && k->type != T_STR)
        return set_error(err, errlen, "%s has no value; write e.g. %s=%s", k->name, k->name,
                         k->def);
    switch (k->type) {
    case T_ENUM: {
        int v = enum_index(k, text);
        if (v < 0)
            return set_error(err, errlen, "%s expects one of %s, got '%s' (%s)", k->name,
                             k->choices, text, k->help);
        *(int *)field(k, c) = v;
        return 0;
    }
    case T_INT: {
        errno = 0;
        long v = strtol(text, &end, 10);
        if (end == text || *end != '\0')
            return set_error(err, errlen, "%s expects an integer, got '%s'", k->name, text);
        /* on overflow strtol saturates at LONG_MIN/MAX, which the range check rejects */
        if (check_range(k, (double)v, text, err, errlen)) return -1;
        *(int *)field(k, c) = (int)v;
        return 0;
    }
    case T_BOOL: {
        int v;
        if (strcmp(text, "1") == 0 || strcmp(text, "true") == 0)
            v = 1;
        else if (strcmp(text, "0") == 0 || strcmp(text, "false") == 0)
            v = 0;
        else
            return set_error(err, errlen, "%s expects 0, 1, true or false, got '%s'", k->name,
                             text);
        *(int *)field(k, c) = v;
        return 0;
    }
    case T_FLOAT: return parse_float(k, text, c, err, errlen);
    case T_U64: {
        if (!isdigit((unsigned char)text[0]))
            return set_error(err, errlen, "%s expects a non-negative integer, got '%s'", k->name,
                             text);
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (*end != '\0')
            return set_error(err, errlen, "%s expects a non-negative integer, got '%s'", k->name,
                             text);
        if (errno == ERANGE)
            return set_error(err, errlen, "%s must be <= %" PRIu64 ", got %s", k->name, UINT64_MAX,
                             text);
        *(uint64_t *)field(k, c) = (uint64_t)v;
        return 0;
    }
    case T_STR: return parse_text(k, text, c, err, errlen);
    }
    return set_error(err, errlen, "%s: internal error, unknown key type", k->name);
}

/* ---- public API ------------------------------------------------------------------------ */

void config_defaults(Config *c) {
    char err[256];
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NKEYS; i++)
        if (parse_value(&KEYS[i], KEYS[i].def, c, err, sizeof err) != 0)
            moe_fatal("bad embedded default: %s", err);
}

int config_set(Config *c, const char *assignment, char *err, int errlen) {
    size_t n = strlen(assignment);
    char *buf = (char *)malloc_check(n + 1);
    memcpy(buf, assignment, n + 1);
    int rc = -1;
    char *eq = strchr(buf, '=');
    if (!eq) {
        char *t = trim(buf);
        if (find_key(t))
            set_error(err, errlen, "'%s' has no value; write %s=VALUE", t, t);
        else
            set_error(err, errlen, "expected key=value, got '%s'; write e.g. model.d_model=256", t);
        goto done;
    }
    *eq = '\0';
    char *key = trim(buf), *value = trim(eq + 1);
    if (*key == '\0') {
        set_error(err, errlen, "missing key before '=' in '%s'; write e.g. model.d_model=256",
                  assignment);
        goto done;
    }
    const Key *k = find_key(key);
    if (!k) {
        const Key *near = nearest_key(key);
        if (near)
            set_error(err, errlen,
                      "unknown key '%s'; did you mean '%s'? (`moe info --keys` lists "
                      "all keys)",
                      key, near->name);
        else
            set_error(err, errlen, "unknown key '%s'; `moe info --keys` lists all keys", key);
        goto done;
    }
    rc = parse_value(k, value, c, err, errlen);
done:
    free(buf);
    return rc;
}

int config_load_file(Config *c, const char *path, char *err, int errlen) {
    static const FileSpec spec = {"config file",
                                  "pass a text file of key=value lines to --config (a run's "
                                  "config.txt is one)",
                                  "config.txt", MOE_CONFIG_MAX_BYTES};
    enum { LINE_MAX_CHARS = 4094 };
    uint64_t size;
    FILE *f = open_regular(path, &spec, &size, err, errlen);
    if (!f) return -1;
    /* size is at most the limit (open_regular checked); one byte more is asked for, so a
     * file that grew since is noticed, and one more holds the final line's terminator */
    char *text = (char *)malloc_check((size_t)size + 2);
    size_t n = fread(text, 1, (size_t)size + 1, f);
    int read_failed = ferror(f), saved = errno;
    fclose(f);
    int rc = 0, lineno = 0;
    if (read_failed)
        rc = set_error(err, errlen, "%s: read error: %s", path, strerror(saved));
    else if (n > size)
        rc = set_error(err, errlen, "config file '%s' changed while it was read; try again", path);
    Config tmp = *c; /* apply to a copy so a bad line leaves c as it was */
    char msg[768];
    for (size_t at = 0; rc == 0 && at < n;) {
        lineno++;
        char *line = text + at, *nl = (char *)memchr(line, '\n', n - at);
        size_t len = nl ? (size_t)(nl - line) : n - at;
        at += len + (nl != NULL);
        const char *nul = (const char *)memchr(line, '\0', len);
        if (nul) {
            rc = set_error(err, errlen,
                           "%s:%d: NUL byte at column %d; a config file is text, key=value "
                           "lines: check that this is the file you meant",
                           path, lineno, (int)(nul - line) + 1);
            break;
        }
        if (len > LINE_MAX_CHARS) {
            rc = set_error(err, errlen, "%s:%d: line longer than %d characters", path, lineno,
                           LINE_MAX_CHARS);
            break;
        }
        line[len] = '\0';
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *t = trim(line);
        if (*t == '\0') continue;
        if (config_set(&tmp, t, msg, sizeof msg) != 0)
            rc = set_error(err, errlen, "%s:%d: %s", path, lineno, msg);
    }
    free(text);
    if (rc == 0) *c = tmp;
    return rc;
}

int config_validate(const Config *c, char *err, int errlen) {
    /* per key: the same ranges config_set enforces, for Configs filled in by code */
    for (int i = 0; i < NKEYS; i++) {
        const Key *k = &KEYS[i];
        const void *p = cfield(k, c);
        char shown[64];
        if (k->type == T_STR) {
            const char *s = (const char *)p;
            if (memchr(s, '\0', MOE_PATH_MAX) == NULL)
                return set_error(err, errlen, "%s is not terminated within %d characters", k->name,
                                 MOE_PATH_MAX);
            if (s[0] == '\0') return empty_text(k, err, errlen);
            continue;
        }
        if (k->type == T_U64) continue;
        if (k->type == T_ENUM) {
            char name[64];
            int v = *(const int *)p;
            if (enum_name(k, v, name, sizeof name) != 0)
                return set_error(err, errlen, "%s holds %d, not one of %s", k->name, v, k->choices);
            continue;
        }
        double v = k->type == T_FLOAT ? (double)*(const float *)p : (double)*(const int *)p;
        format_value(k, c, shown, sizeof shown);
        if (check_range(k, v, shown, err, errlen)) return -1;
    }
    return config_check_combinations(c, err, errlen);
}

void config_write(const Config *c, FILE *f) {
    char v[MOE_PATH_MAX + 32];
    for (int i = 0; i < NKEYS; i++) {
        format_value(&KEYS[i], c, v, sizeof v);
        fprintf(f, "%s = %s\n", KEYS[i].name, v);
    }
}

char *config_to_text(const Config *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) moe_fatal("out of memory");
    config_write(c, f);
    fclose(f);
    return text;
}

void config_print_keys(FILE *f) {
    for (int i = 0; i < NKEYS; i++) {
        const Key *k = &KEYS[i];
        char range[64] = "";
        if (k->type == T_INT || k->type == T_FLOAT) {
            if (isinf(k->max))
                snprintf(range, sizeof range, " [%s %.10g]",
                         (k->flags & K_OPEN_MIN) ? ">" : ">=", k->min);
            else
                snprintf(range, sizeof range, " %s%.10g, %.10g%s",
                         (k->flags & K_OPEN_MIN) ? "(" : "[", k->min, k->max,
                         (k->flags & K_OPEN_MAX) ? ")" : "]");
        }
        if (k->type == T_ENUM) snprintf(range, sizeof range, " {%s}", k->choices);
        fprintf(f, "  %-24s %-22s %s%s\n", k->name, k->def, k->help, range);
    }
}

int config_is_moe_layer(const Config *c, int layer) {
    /* a multi-token prediction module's block (layer n_layer + k - 1) has the last layer's kind */
    if (layer >= c->n_layer) layer = c->n_layer - 1;
    return c->num_experts > 0 && layer >= c->first_dense &&
           (layer - c->first_dense) % c->every == 0;
}

int config_expert_hidden(const Config *c) {
    return c->d_expert ? c->d_expert : c->d_ff;
}

int config_head_dim(const Config *c) {
    if (c->attention == MOE_ATTN_MLA) return c->mla_nope_dim + c->mla_rope_dim;
    return c->head_dim ? c->head_dim : c->d_model / c->n_head;
}

int config_value_dim(const Config *c) {
    return c->attention == MOE_ATTN_MLA ? c->mla_v_dim : config_head_dim(c);
}

int config_rope_dim(const Config *c) {
    return c->attention == MOE_ATTN_MLA ? c->mla_rope_dim : config_head_dim(c);
}

int config_same_shape(const Config *a, const Config *b, char *err, int errlen) {
    for (int i = 0; i < NKEYS; i++) {
        const Key *k = &KEYS[i];
        if (!(k->flags & K_SHAPE)) continue;
        char va[64], vb[64];
        format_value(k, a, va, sizeof va);
        format_value(k, b, vb, sizeof vb);
        if (strcmp(va, vb) != 0) {
            set_error(err, errlen,
                      "checkpoint has %s=%s, config has %s; parameter shapes differ, so "
                      "use the checkpoint's value or start a new run",
                      k->name, va, vb);
            return 0;
        }
    }
    return 1;
}

int config_apply_text(Config *c, const char *text, int *bad_line, char *err, int errlen) {
    char *copy = strdup(text);
    if (!copy) moe_fatal("out of memory");
    int rc = 0, line_no = 0;
    *bad_line = 0;
    for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        if (line[0] == '#' || line[0] == '\0') continue;
        if (config_set(c, line, err, errlen) != 0) {
            *bad_line = line_no;
            rc = -1;
            break;
        }
    }
    free(copy);
    return rc;
}
