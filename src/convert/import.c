/*
 * import.c: settings and weights from a safetensors file, and `moe export`'s writer. See
 * import.h.
 *
 * Settings are assembled in three layers, later winning: the caller's, the file's metadata
 * and what the tensor shapes say. Every value goes through config_set as a "key=value" string,
 * so the range checks (and their messages) are the ones a config file gets. The shapes come
 * last because they are facts about the weights, while the metadata is only a claim. Then
 * every setting that changes the function and that no shape shows must have been stated, by
 * the file or by the caller: a default is a guess, and a wrong guess would give a model that
 * loads cleanly and computes something else.
 */
#include "convert/import.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "moe/moe_ops.h"

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

/* Besides model.* and moe.*, the keys that decide which validation windows `moe eval` and the
 * in-training evaluation read (src/REFERENCE.md, "Reproducing a run exactly"): with them the
 * imported model evaluates on the same tokens as the exported one. train.batch is also N of the
 * capacity and expert-choice formulas, so it changes what a capacity-bound model computes. */
static const char *const EVAL_KEYS[] = {"train.batch", "train.eval_batches", "data.val"};

/* The part of a "key = value" line before the '=', trimmed, into key ("" when none). */
static void line_key(const char *line, char *key, size_t n) {
    while (isspace((unsigned char)*line)) line++;
    size_t k = 0;
    while (line[k] && line[k] != '=' && line[k] != '#' && line[k] != '\n' && k + 1 < n)
        key[k] = line[k], k++;
    while (k > 0 && isspace((unsigned char)key[k - 1])) k--;
    key[k] = 0;
}

static int taken_from_text(const char *t) {
    if (strncmp(t, "model.", 6) == 0 || strncmp(t, "moe.", 4) == 0) return 1;
    char key[80];
    line_key(t, key, sizeof key);
    for (size_t i = 0; i < sizeof EVAL_KEYS / sizeof EVAL_KEYS[0]; i++)
        if (strcmp(key, EVAL_KEYS[i]) == 0) return 1;
    return 0;
}

/* 1 when a line of text (key=value lines, '#' comments) assigns key. */
static int text_sets(const char *text, const char *key) {
    for (const char *line = text; line; line = strchr(line, '\n')) {
        if (*line == '\n') line++;
        char k[80];
        line_key(line, k, sizeof k);
        if (strcmp(k, key) == 0) return 1;
    }
    return 0;
}

/* The model.* and moe.* lines and the EVAL_KEYS of a config text (config_write's key = value
 * format). */
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
        if (*t == 0 || !taken_from_text(t)) continue;
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

/* The attention's heads from layer 0's projections, model.n_head given (the metadata or the
 * caller): head_dim = wq's rows / n_head, kv_heads = wk's rows / head_dim (each 0 where it is
 * the default, d_model / n_head and n_head), and qk_norm from the gain attn.q_norm: none
 * without one, head when it spans one head, else full. Shapes that fit no head count are left
 * to the weights' own check, which names the tensor. */
/* Latent attention's widths from layer 0's latent tensors, n_head given: q_rank from wq_a (0
 * without), kv_rank from wkv_a, rope_dim from wk_rope, nope_dim from the queries' rows (wq or
 * wq_b: n_head (nope_dim + rope_dim)) and v_dim from wkv_b's (n_head (nope_dim + v_dim)). */
static int infer_latent(Config *c, const SafeTensors *st, const char *from, char *err, int errlen) {
    const TensorRef *kva = layer_tensor(st, 0, "attn.wkv_a"),
                    *kr = layer_tensor(st, 0, "attn.wk_rope");
    const TensorRef *kvb = layer_tensor(st, 0, "attn.wkv_b"),
                    *qa = layer_tensor(st, 0, "attn.wq_a");
    const TensorRef *q = qa ? layer_tensor(st, 0, "attn.wq_b") : layer_tensor(st, 0, "attn.wq");
    const int H = c->n_head;
    if (!kr || !kvb || !q || H <= 0 || q->shape[0] % H || kvb->shape[0] % H) return 0;
    const int R = kr->shape[0], NOPE = q->shape[0] / H - R, DV = kvb->shape[0] / H - NOPE;
    return set_value(c, st->path, from, err, errlen, "model.attention=mla") ||
           set_value(c, st->path, from, err, errlen, "mla.q_rank=%d", qa ? qa->shape[0] : 0) ||
           set_value(c, st->path, from, err, errlen, "mla.kv_rank=%d", kva->shape[0]) ||
           set_value(c, st->path, from, err, errlen, "mla.rope_dim=%d", R) ||
           set_value(c, st->path, from, err, errlen, "mla.nope_dim=%d", NOPE) ||
           set_value(c, st->path, from, err, errlen, "mla.v_dim=%d", DV);
}

static int infer_heads(Config *c, const SafeTensors *st, const char *from, char *err, int errlen) {
    if (layer_tensor(st, 0, "attn.wkv_a")) return infer_latent(c, st, from, err, errlen);
    const TensorRef *q = layer_tensor(st, 0, "attn.wq"), *k = layer_tensor(st, 0, "attn.wk");
    const TensorRef *qn = layer_tensor(st, 0, "attn.q_norm");
    const int H = c->n_head;
    if (!q || !k || q->ndim != 2 || k->ndim != 2 || H <= 0 || q->shape[0] % H != 0) return 0;
    const int D = q->shape[0] / H;
    if (D == 0 || k->shape[0] % D != 0) return 0;
    const int Hkv = k->shape[0] / D;
    const int norm = !qn                                  ? MOE_QK_NORM_NONE
                     : qn->ndim == 1 && qn->shape[0] == D ? MOE_QK_NORM_HEAD
                                                          : MOE_QK_NORM_FULL;
    static const char *const NORMS[] = {"none", "head", "full"};
    const int default_width = c->d_model % H == 0 && D == c->d_model / H;
    return set_value(c, st->path, from, err, errlen, "model.head_dim=%d", default_width ? 0 : D) ||
           set_value(c, st->path, from, err, errlen, "model.kv_heads=%d", Hkv == H ? 0 : Hkv) ||
           set_value(c, st->path, from, err, errlen, "model.qk_norm=%s", NORMS[norm]);
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
    if (emb->ndim != 2 || emb->shape[0] < 2 || emb->shape[0] > MOE_VOCAB_MAX)
        return set_error(err, errlen,
                         "safetensors '%s': tok_emb has shape %s, but moe.c's embedding is "
                         "(V, C) with a vocabulary V of 2 to %d (model.vocab)",
                         path, shape_str(s, sizeof s, emb->ndim, emb->shape), MOE_VOCAB_MAX);
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
    /* a model without a head tensor computes its logits with the embedding (model.tied) */
    if (set_value(c, path, from, err, errlen, "model.vocab=%d", emb->shape[0]) ||
        set_value(c, path, from, err, errlen, "model.d_model=%d", emb->shape[1]) ||
        set_value(c, path, from, err, errlen, "model.n_layer=%d", L) ||
        set_value(c, path, from, err, errlen, "model.tied=%d", !safetensors_find(st, "head")) ||
        infer_heads(c, st, from, err, errlen))
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

/* ---- settings the file must state ------------------------------------------------------------ */

/* The settings that change what the model computes from its tokens (its logits, so its loss)
 * and that no tensor shape shows. The shape keys are facts of the tensors; the training-only
 * keys (init_std, aux_coef, z_coef, bias_update, bias_rate, jitter, noise,
 * second_expert_random, the train.* optimiser keys) and moe.padded (zero rows change no output)
 * do not change the function. Returns how many it wrote to keys. */
static int function_keys(const Config *c, const char **keys) {
    int n = 0;
    keys[n++] = "model.n_head";
    keys[n++] = "model.seq_len"; /* the context of every evaluation window */
    keys[n++] = "model.rope_theta";
    if (c->num_experts == 0) return n;
    const char *moe[] = {"moe.top_k",
                         "moe.norm_topk",
                         "moe.score",
                         "moe.topk_before_softmax",
                         "moe.route_scale",
                         "moe.balance",
                         "moe.routing",
                         "moe.capacity_factor",
                         "moe.eval_capacity_factor",
                         "moe.n_group",
                         "moe.topk_group"};
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) keys[n++] = moe[i];
    if (c->routing == MOE_ROUTING_EXPERT_CHOICE) keys[n++] = "moe.ec_capacity";
    if (c->capacity_factor > 0.0f || c->eval_capacity_factor > 0.0f) {
        keys[n++] = "moe.capacity_scope";
        keys[n++] = "moe.min_capacity";
        keys[n++] = "moe.drop_policy";
    }
    return n;
}

/* 1 when the file's metadata states key: a line of its "config", or one of the BARE_KEYS. */
static int file_states(const SafeTensors *st, const char *key) {
    for (size_t i = 0; i < sizeof BARE_KEYS / sizeof BARE_KEYS[0]; i++)
        if (strcmp(BARE_KEYS[i][1], key) == 0 && safetensors_meta(st, BARE_KEYS[i][0])) return 1;
    const char *text = safetensors_meta(st, "config");
    return text && text_sets(text, key);
}

/* 1 when the file holds an aux-free router bias (layers.L.moe.router_bias). */
static int has_biases(const SafeTensors *st) {
    const char *rest;
    for (int i = 0; i < st->n; i++)
        if (layer_of(st->entries[i].name, &rest) >= 0 && strcmp(rest, "moe.router_bias") == 0)
            return 1;
    return 0;
}

/* Every function key of t must be stated by the file or given by the caller; otherwise one
 * message lists the missing ones with the values t holds now (moe.c's defaults unless given),
 * spelled as the --set options that would supply them. */
static int check_stated(const Config *t, const SafeTensors *st, const char *given, char *err,
                        int errlen) {
    const char *keys[24];
    int n = function_keys(t, keys);
    char names[512] = "", sets[1024] = "";
    size_t kn = 0, ks = 0;
    char *text = config_to_text(t);
    for (int i = 0; i < n; i++) {
        if (file_states(st, keys[i]) || (given && text_sets(given, keys[i]))) continue;
        /* the value as config_write spells it: the line "key = value" */
        size_t len = strlen(keys[i]);
        const char *line = text;
        while (line && !(strncmp(line, keys[i], len) == 0 && line[len] == ' ')) {
            line = strchr(line, '\n');
            if (line) line++;
        }
        const char *v = line ? line + len + 3 : "?";
        int vlen = (int)strcspn(v, "\n");
        if (strcmp(keys[i], "moe.balance") == 0 && has_biases(st))
            v = "aux_free", vlen = 8; /* the file holds aux-free biases: the likely value */
        if (kn < sizeof names)
            kn += (size_t)snprintf(names + kn, sizeof names - kn, "%s%s", kn ? ", " : "", keys[i]);
        if (ks < sizeof sets)
            ks += (size_t)snprintf(sets + ks, sizeof sets - ks, "%s--set %s=%.*s", ks ? " " : "",
                                   keys[i], vlen, v);
    }
    free(text);
    if (kn == 0) return 0;
    return set_error(err, errlen,
                     "safetensors '%s': its metadata does not record %s, which change what the "
                     "model computes and which no tensor shape shows; moe.c will not guess them. "
                     "Pass the values the model was trained with, e.g. %s (what moe.c would "
                     "otherwise have assumed), or --config FILE with those lines",
                     st->path, names, sets);
}

int import_config(Config *c, const SafeTensors *st, const char *given, char *err, int errlen) {
    Config t = *c; /* c stays as it was on any failure */
    if (apply_metadata(&t, st, err, errlen) || infer_shapes(&t, st, err, errlen) ||
        check_stated(&t, st, given, err, errlen))
        return -1;
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

/* The aux-free biases of MoE block l: "layers.L.moe.router_bias" (E). */
static void bias_name(char *name, size_t n, int l) {
    snprintf(name, n, "layers.%d.moe.router_bias", l);
}

/* 1 when name is the bias of one of m's MoE blocks. */
static int is_bias(const Model *m, const char *name) {
    const char *rest;
    int l = layer_of(name, &rest);
    return l >= 0 && l < m->cfg.n_layer && m->state.blocks[l].router_bias &&
           strcmp(rest, "moe.router_bias") == 0;
}

/* The biases must be there exactly when moe.balance=aux_free routes with them, shaped (E). */
static int check_biases(const Model *m, const SafeTensors *st, char *err, int errlen) {
    const int aux_free = m->cfg.balance == MOE_BALANCE_AUX_FREE, E = m->cfg.num_experts;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        if (!m->state.blocks[l].router_bias) continue;
        char name[TENSOR_NAME_MAX], s[64];
        bias_name(name, sizeof name, l);
        const TensorRef *e = safetensors_find(st, name);
        if (aux_free && !e)
            return set_error(err, errlen,
                             "safetensors '%s' has no tensor '%s' (%d): moe.balance=aux_free "
                             "routes with these biases, so without them the model would compute "
                             "another function; export the checkpoint again with this moe.c, or "
                             "--set moe.balance=none to route without biases",
                             st->path, name, E);
        if (!aux_free && e)
            return set_error(err, errlen,
                             "safetensors '%s' has the aux-free router bias '%s', but moe.balance "
                             "is not aux_free, so it would be ignored; --set moe.balance=aux_free "
                             "if the model was trained that way, or remove the tensor",
                             st->path, name);
        if (e && (e->ndim != 1 || e->shape[0] != E))
            return set_error(err, errlen,
                             "safetensors '%s': tensor '%s' has shape %s, but this model's is "
                             "(%d); " SHAPE_HINT,
                             st->path, name, shape_str(s, sizeof s, e->ndim, e->shape), E);
    }
    return 0;
}

int import_weights(Model *m, const SafeTensors *st, char *err, int errlen) {
    const ParamTable *pt = &m->pt;
    char a[64], b[64];
    if (check_biases(m, st, err, errlen)) return -1;
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
        if (params_find(pt, e->name) < 0 && !is_bias(m, e->name))
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
    for (int l = 0; l < m->cfg.n_layer; l++) {
        char name[TENSOR_NAME_MAX];
        bias_name(name, sizeof name, l);
        const TensorRef *e = m->state.blocks[l].router_bias ? safetensors_find(st, name) : NULL;
        if (m->state.blocks[l].router_bias)
            memset(m->state.blocks[l].router_bias, 0, (size_t)m->cfg.num_experts * sizeof(float));
        if (e) memcpy(m->state.blocks[l].router_bias, e->data, e->nbytes);
    }
    return 0;
}

/* ---- export ---------------------------------------------------------------------------------- */

int model_export(const Model *m, const char *path, char *err, int errlen) {
    const Config *c = &m->cfg;
    const int aux_free = c->balance == MOE_BALANCE_AUX_FREE;
    TensorRef *e = (TensorRef *)calloc_check((size_t)m->pt.n + (size_t)c->n_layer, sizeof *e);
    int n = 0;
    for (int i = 0; i < m->pt.n; i++, n++) {
        const ParamTensor *t = &m->pt.t[i];
        snprintf(e[n].name, sizeof e[n].name, "%s", t->name);
        e[n].dtype = TENSOR_F32;
        e[n].ndim = t->ndim;
        memcpy(e[n].shape, t->shape, sizeof t->shape);
        e[n].nbytes = t->numel * sizeof(float);
        e[n].data = m->params + t->offset;
    }
    for (int l = 0; l < c->n_layer && aux_free; l++) {
        if (!m->state.blocks[l].router_bias) continue;
        bias_name(e[n].name, sizeof e[n].name, l);
        e[n].dtype = TENSOR_F32;
        e[n].ndim = 1;
        e[n].shape[0] = c->num_experts;
        e[n].nbytes = (size_t)c->num_experts * sizeof(float);
        e[n].data = m->state.blocks[l].router_bias;
        n++;
    }
    char v[7][32];
    snprintf(v[0], 32, "%d", c->d_model);
    snprintf(v[1], 32, "%d", c->n_layer);
    snprintf(v[2], 32, "%d", c->n_head);
    snprintf(v[3], 32, "%d", c->num_experts);
    snprintf(v[4], 32, "%d", c->top_k);
    snprintf(v[5], 32, "%.9g", c->rope_theta);
    snprintf(v[6], 32, "%d", c->norm_topk);
    char *text = config_to_text(c);
    const char *keys[] = {"d_model",    "n_layer",   "n_head", "num_experts", "top_k",
                          "rope_theta", "norm_topk", "format", "config"};
    const char *vals[] = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], "moe.c", text};
    int rc = safetensors_write_checksummed(path, e, n, keys, vals, 9, err, errlen);
    free(text);
    free(e);
    return rc;
}
