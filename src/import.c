/*
 * import.c: settings and weights from a safetensors file. See import.h.
 *
 * Settings are assembled in three layers, later winning: the caller's, the file's metadata
 * and what the tensor shapes say. Every value goes through config_set as a "key=value" string,
 * so the range checks (and their messages) are the ones a config file gets. The shapes come
 * last because they are facts about the weights, while the metadata is only a claim.
 */
#include "import.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define SHAPE_HINT                                                                                 \
    "the file was written for a model with other settings: take them from the file "               \
    "(import_config) and drop any --set or --config line that changes model.* or moe.* shapes"

/* "(256, 64)": a shape for messages. */
static const char *shape_str(char *buf, size_t len, int ndim, const int *shape) {
    int k = snprintf(buf, len, "(");
    for (int d = 0; d < ndim && k < (int)len; d++)
        k += snprintf(buf + k, len - (size_t)k, "%s%d", d ? ", " : "", shape[d]);
    if (k < (int)len) snprintf(buf + k, len - (size_t)k, ")");
    return buf;
}

/* Apply "key=value" (built with printf) to c; a refusal names the file and where the value came
 * from. */
static int set_value(Config *c, const char *path, const char *from, char *err, int errlen,
                     const char *fmt, ...) MOE_PRINTF(6, 7);
static int set_value(Config *c, const char *path, const char *from, char *err, int errlen,
                     const char *fmt, ...) {
    char a[600], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a, sizeof a, fmt, ap);
    va_end(ap);
    if (config_set(c, a, msg, sizeof msg) == 0) return 0;
    return set_error(err, errlen, "safetensors '%s': %s gives '%s', which is refused: %s", path,
                     from, a, msg);
}

/* ---- the metadata ---------------------------------------------------------------------------- */

/* The keys `moe export` writes on their own, and the settings they hold. d_model, n_layer and
 * num_experts are not listed: the tensor shapes say them with authority. */
static const char *const BARE_KEYS[][2] = {{"n_head", "model.n_head"},
                                           {"top_k", "moe.top_k"},
                                           {"rope_theta", "model.rope_theta"},
                                           {"norm_topk", "moe.norm_topk"}};

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

/* The model.* and moe.* lines of a config text (config_write's key = value format). */
static int apply_config_text(Config *c, const char *text, const char *path, char *err, int errlen) {
    char *copy = strdup(text);
    if (!copy) moe_fatal("out of memory");
    int rc = 0, line_no = 0;
    for (char *line = copy, *next; line && rc == 0; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *t = trim(line);
        if (*t == 0 || (strncmp(t, "model.", 6) != 0 && strncmp(t, "moe.", 4) != 0)) continue;
        char from[64];
        snprintf(from, sizeof from, "line %d of the metadata \"config\"", line_no);
        rc = set_value(c, path, from, err, errlen, "%s", t);
    }
    free(copy);
    return rc;
}

static int apply_metadata(Config *c, const SafeTensors *st, char *err, int errlen) {
    for (size_t i = 0; i < sizeof BARE_KEYS / sizeof BARE_KEYS[0]; i++) {
        const char *v = safetensors_meta(st, BARE_KEYS[i][0]);
        char from[64];
        snprintf(from, sizeof from, "metadata \"%s\"", BARE_KEYS[i][0]);
        if (v && set_value(c, st->path, from, err, errlen, "%s=%s", BARE_KEYS[i][1], v)) return -1;
    }
    const char *text = safetensors_meta(st, "config");
    return text ? apply_config_text(c, text, st->path, err, errlen) : 0;
}

/* ---- the shapes ------------------------------------------------------------------------------ */

/* The block index of a "layers.L.rest" name (*rest then points at "rest"), or -1. */
static int layer_of(const char *name, const char **rest) {
    if (strncmp(name, "layers.", 7) != 0 || !isdigit((unsigned char)name[7])) return -1;
    const char *p = name + 7;
    long l = 0;
    while (isdigit((unsigned char)*p) && l < (1L << 20)) l = 10 * l + (*p++ - '0');
    if (*p != '.') return -1;
    *rest = p + 1;
    return (int)l;
}

static const TensorRef *layer_tensor(const SafeTensors *st, int layer, const char *base) {
    char name[TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "layers.%d.%s", layer, base);
    return safetensors_find(st, name);
}

/* 1 when c puts its MoE blocks exactly at the layers marked in is_moe (L). */
static int pattern_matches(const Config *c, const int *is_moe, int L) {
    for (int l = 0; l < L; l++)
        if (config_is_moe_layer(c, l) != is_moe[l]) return 0;
    return 1;
}

/* moe.first_dense and moe.every that place MoE blocks at the layers is_moe marks: the first
 * MoE layer, and the distance to the second (or past the last layer when there is one). */
static int infer_pattern(Config *c, const int *is_moe, int L, const char *path, char *err,
                         int errlen) {
    if (pattern_matches(c, is_moe, L)) return 0; /* the settings already given fit */
    int first = -1, second = -1;
    for (int l = 0; l < L; l++)
        if (is_moe[l]) {
            if (first < 0)
                first = l;
            else if (second < 0)
                second = l;
        }
    const char *from = "the layers with moe.* tensors";
    if (set_value(c, path, from, err, errlen, "moe.first_dense=%d", first) ||
        set_value(c, path, from, err, errlen, "moe.every=%d",
                  second > 0 ? second - first : L - first))
        return -1;
    if (pattern_matches(c, is_moe, L)) return 0;
    char list[256] = "";
    size_t k = 0;
    for (int l = 0; l < L && k < sizeof list - 8; l++)
        if (is_moe[l]) k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", k ? ", " : "", l);
    return set_error(err, errlen,
                     "safetensors '%s': the MoE blocks are at layers %s of %d, but moe.c places "
                     "one every moe.every layers after moe.first_dense dense ones, which cannot "
                     "give this pattern; the model cannot be imported as it is",
                     path, list, L);
}

static int infer_shapes(Config *c, const SafeTensors *st, char *err, int errlen) {
    const char *path = st->path;
    const TensorRef *emb = safetensors_find(st, "tok_emb");
    char s[64];
    if (!emb)
        return set_error(err, errlen,
                         "safetensors '%s' has no tensor 'tok_emb': it does not use moe.c's "
                         "tensor names (tok_emb, layers.L.attn.wq, ...; `moe info` lists them); "
                         "rename the tensors when exporting",
                         path);
    if (emb->ndim != 2 || emb->shape[0] != MOE_VOCAB)
        return set_error(err, errlen,
                         "safetensors '%s': tok_emb has shape %s, but moe.c's byte-level "
                         "vocabulary needs (%d, C); only byte-level models can be imported",
                         path, shape_str(s, sizeof s, emb->ndim, emb->shape), MOE_VOCAB);
    int L = 0;
    const char *rest;
    for (int i = 0; i < st->n; i++) {
        int l = layer_of(st->entries[i].name, &rest);
        if (l >= L) L = l + 1;
    }
    if (L == 0)
        return set_error(err, errlen,
                         "safetensors '%s' has no layers.L.* tensors: it holds no transformer "
                         "blocks under moe.c's names (`moe info` lists them)",
                         path);
    const char *from = "the tensor shapes";
    if (set_value(c, path, from, err, errlen, "model.d_model=%d", emb->shape[1]) ||
        set_value(c, path, from, err, errlen, "model.n_layer=%d", L))
        return -1;
    int *is_moe = (int *)calloc_check((size_t)L, sizeof(int));
    for (int i = 0; i < st->n; i++) {
        int l = layer_of(st->entries[i].name, &rest);
        if (l >= 0 && strncmp(rest, "moe.", 4) == 0) is_moe[l] = 1;
    }
    int first_moe = -1, first_dense = -1, rc = 0;
    for (int l = L - 1; l >= 0; l--) *(is_moe[l] ? &first_moe : &first_dense) = l;
    const TensorRef *g = first_dense >= 0 ? layer_tensor(st, first_dense, "ffn.w_gate") : NULL;
    if (g && g->ndim == 2) rc = set_value(c, path, from, err, errlen, "model.d_ff=%d", g->shape[0]);
    if (rc == 0 && first_moe < 0) rc = set_value(c, path, from, err, errlen, "moe.num_experts=0");
    if (rc == 0 && first_moe >= 0) {
        const TensorRef *w = layer_tensor(st, first_moe, "moe.w_gate");
        const TensorRef *sg = layer_tensor(st, first_moe, "moe.shared_gate");
        int F = w && w->ndim == 3 ? w->shape[1] : 0;
        if (!w || w->ndim != 3) {
            rc = set_error(err, errlen,
                           "safetensors '%s': layer %d has moe.* tensors but no 3-d "
                           "layers.%d.moe.w_gate (E, F, C) to take the expert shapes from; "
                           "the file is not a complete moe.c model",
                           path, first_moe, first_moe);
        } else if (sg && (sg->ndim != 2 || F == 0 || sg->shape[0] % F != 0)) {
            rc = set_error(err, errlen,
                           "safetensors '%s': layers.%d.moe.shared_gate has shape %s, not "
                           "(num_shared x F, C) with F = %d from moe.w_gate; moe.c's shared "
                           "experts are whole experts of the same size",
                           path, first_moe, shape_str(s, sizeof s, sg->ndim, sg->shape), F);
        } else {
            rc = set_value(c, path, from, err, errlen, "moe.num_experts=%d", w->shape[0]);
            if (rc == 0 && config_expert_hidden(c) != F)
                rc = set_value(c, path, from, err, errlen, "moe.d_expert=%d", F);
            if (rc == 0)
                rc = set_value(c, path, from, err, errlen, "moe.num_shared=%d",
                               sg ? sg->shape[0] / F : 0);
            if (rc == 0) rc = infer_pattern(c, is_moe, L, path, err, errlen);
        }
    }
    free(is_moe);
    return rc;
}

int import_config(Config *c, const SafeTensors *st, char *err, int errlen) {
    Config t = *c; /* c stays as it was on any failure */
    if (apply_metadata(&t, st, err, errlen) || infer_shapes(&t, st, err, errlen)) return -1;
    char msg[512];
    if (config_validate(&t, msg, sizeof msg) != 0) {
        int n_head = strstr(msg, "n_head") != NULL;
        return set_error(err, errlen,
                         "safetensors '%s': the settings of this model are not "
                         "valid: %s%s",
                         st->path, msg,
                         n_head ? ". model.n_head is not in the tensor shapes; unless the file's "
                                  "metadata gives it, pass it with --set model.n_head=H"
                                : "");
    }
    *c = t;
    return 0;
}

int import_weights(Model *m, const SafeTensors *st, char *err, int errlen) {
    const ParamTable *pt = &m->pt;
    char a[64], b[64];
    for (int i = 0; i < pt->n; i++) {
        const ParamTensor *t = &pt->t[i];
        const TensorRef *e = safetensors_find(st, t->name);
        if (!e)
            return set_error(
                err, errlen,
                "safetensors '%s' has no tensor '%s' %s, which this model has; " SHAPE_HINT,
                st->path, t->name, shape_str(a, sizeof a, t->ndim, t->shape));
        int same = e->ndim == t->ndim;
        for (int d = 0; d < t->ndim && same; d++) same = e->shape[d] == t->shape[d];
        if (!same)
            return set_error(err, errlen,
                             "safetensors '%s': tensor '%s' has shape %s, but this model's is "
                             "%s; " SHAPE_HINT,
                             st->path, t->name, shape_str(a, sizeof a, e->ndim, e->shape),
                             shape_str(b, sizeof b, t->ndim, t->shape));
    }
    for (int i = 0; i < st->n; i++) {
        const TensorRef *e = &st->entries[i];
        if (params_find(pt, e->name) < 0)
            return set_error(err, errlen,
                             "safetensors '%s' has a tensor '%s' %s that this model does not "
                             "have: the model settings may differ from the file's (model.n_layer, "
                             "moe.every, moe.first_dense, moe.num_shared, ...); take them from "
                             "the file (import_config), or remove the tensor",
                             st->path, e->name, shape_str(a, sizeof a, e->ndim, e->shape));
    }
    for (int i = 0; i < pt->n; i++) {
        const ParamTensor *t = &pt->t[i];
        memcpy(m->params + t->offset, safetensors_find(st, t->name)->data,
               t->numel * sizeof(float));
    }
    return 0;
}
