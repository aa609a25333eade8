/*
 * decode.c: incremental decoding with a key-value cache. See decode.h.
 *
 * Like model.c, this file never touches a tensor element: the cache is the model's backend's
 * memory, the copies into it are the backend's permute_rows, and the step is
 * model_forward_cached, so the same decoder runs on every backend.
 */
#include "infer/decode.h"

#include "model/attn_block.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* The buffers of a step of n rows: positions and cache rows, attention probabilities, latent
 * attention's workspace (which a prefill of B T rows shares), the host's logits. Kept when
 * large enough; a step never needs more than B T rows, what the model holds. */
static void step_room(Decoder *d, int n) {
    if (n <= d->room) return;
    const Backend *be = d->m->be;
    const Config *c = &d->m->cfg;
    if (d->room > 0) {
        be->free(be, d->pos), be->free(be, d->step_rows), be->free(be, d->kv.att);
        if (d->kv.work) be->free(be, d->kv.work);
        free(d->logits);
    }
    d->pos = be_ints(be, (size_t)n);
    d->step_rows = be_ints(be, (size_t)n);
    d->kv.pos = d->pos, d->kv.rows = d->step_rows;
    d->kv.att = be_floats(be, (size_t)n * c->n_head * d->T);
    d->kv.work = NULL;
    if (c->attention == MOE_ATTN_MLA) {
        const size_t step = mla_decode_floats(c, n);
        const size_t prefill = (size_t)d->B * d->T * (c->mla_kv_rank + c->mla_rope_dim);
        d->kv.work = be_floats(be, step > prefill ? step : prefill);
    }
    d->logits = floats_alloc((size_t)n * c->vocab);
    d->room = n;
}

int decoder_init(Decoder *d, Model *m, char *err, int errlen) {
    memset(d, 0, sizeof(*d));
    const Config *c = &m->cfg;
    if (m->n_moe > 0 && c->routing == MOE_ROUTING_EXPERT_CHOICE) {
        set_error(err, errlen,
                  "moe.routing=expert_choice: each expert picks among the tokens of a whole "
                  "batch, so a token's output depends on the tokens after it and a key-value "
                  "cache cannot reproduce it; decode with the full forward instead (moe sample "
                  "--no-cache)");
        return -1;
    }
    if (m->dist) {
        set_error(err, errlen, "decoding runs in one process (this model is spread over %d)",
                  m->dist->world);
        return -1;
    }
    const Backend *be = m->be;
    const int L = c->n_layer, B = m->state.B, T = m->state.T;
    const int KW = config_kv_heads(c) * config_head_dim(c);  /* a token's key */
    const int VW = config_kv_heads(c) * config_value_dim(c); /* and its value */
    d->m = m;
    d->B = B;
    d->T = T;
    /* a server keeps every token: the prefill's forward routes dropless too */
    m->spec.eval_capacity_factor = 0.0f;
    d->kv.k = (float **)calloc_check((size_t)L, sizeof(float *));
    d->kv.v = (float **)calloc_check((size_t)L, sizeof(float *));
    if (c->attention == MOE_ATTN_MLA) {
        /* latent attention caches a token's normed latent and rotated key, no more (attn_block.c:
         * the heads' key and value up-projections absorbed into the query and output sides) */
        const int W = c->mla_kv_rank + c->mla_rope_dim;
        for (int l = 0; l < L; l++) d->kv.k[l] = be_floats(be, (size_t)B * T * W);
        d->cache_bytes = (size_t)L * B * T * W * sizeof(float);
    } else {
        for (int l = 0; l < L; l++) {
            d->kv.k[l] = be_floats(be, (size_t)B * T * KW);
            d->kv.v[l] = be_floats(be, (size_t)B * T * VW);
        }
        d->cache_bytes = (size_t)L * B * T * (KW + VW) * sizeof(float);
    }
    d->kv.Tc = T;
    d->len = (int *)calloc_check((size_t)B, sizeof(int));
    d->host_idx = (int *)calloc_check((size_t)3 * B * T, sizeof(int));
    d->rows = be_ints(be, (size_t)B * T);
    step_room(d, B);
    return 0;
}

int decoder_draft_open(Decoder *d, char *err, int errlen) {
    Model *m = d->m;
    const Config *c = &m->cfg;
    const int L = c->n_layer;
    if (c->mtp_depth < 1)
        return set_error(err, errlen,
                         "the model has no multi-token prediction module to draft with "
                         "(model.mtp_depth=0): train one with model.mtp_depth=1, or sample "
                         "without --draft");
    if (d->B != 1 || d->T < 3)
        return set_error(err, errlen,
                         "a draft decodes one sequence of at least 3 positions (here %d of %d)",
                         d->B, d->T);
    /* the module block's keys and values: one layer more, after the model's */
    float **k = (float **)calloc_check((size_t)L + 1, sizeof(float *));
    float **v = (float **)calloc_check((size_t)L + 1, sizeof(float *));
    memcpy(k, d->kv.k, (size_t)L * sizeof(float *));
    memcpy(v, d->kv.v, (size_t)L * sizeof(float *));
    free(d->kv.k), free(d->kv.v);
    d->kv.k = k, d->kv.v = v;
    const size_t layer_bytes = d->cache_bytes / ((size_t)L * d->B * d->T); /* a token's, a layer */
    if (c->attention == MOE_ATTN_MLA) { /* [normed latent | rotated key] rows */
        k[L] = be_floats(m->be, (size_t)d->T * (c->mla_kv_rank + c->mla_rope_dim));
    } else {
        k[L] = be_floats(m->be, (size_t)d->T * config_kv_heads(c) * config_head_dim(c));
        v[L] = be_floats(m->be, (size_t)d->T * config_kv_heads(c) * config_value_dim(c));
    }
    d->cache_bytes += (size_t)d->T * layer_bytes;
    d->draft_logits = floats_alloc((size_t)c->vocab);
    d->draft = 1;
    return 0;
}

void decoder_free(Decoder *d) {
    if (!d->m) return;
    const Backend *be = d->m->be;
    for (int l = 0; l < d->m->cfg.n_layer + d->draft; l++) {
        be->free(be, d->kv.k[l]);
        if (d->kv.v[l]) be->free(be, d->kv.v[l]);
    }
    if (d->kv.work) be->free(be, d->kv.work);
    free(d->kv.k);
    free(d->kv.v);
    be->free(be, d->kv.att);
    be->free(be, d->rows);
    be->free(be, d->pos);
    be->free(be, d->step_rows);
    free(d->len);
    free(d->host_idx);
    free(d->logits);
    free(d->draft_logits);
    memset(d, 0, sizeof(*d));
}

/* Block l's n rows of the last forward into the cache, at the rows d->rows names: its keys and
 * values, or latent attention's [normed latent | rotated key] */
static void cache_rows(Decoder *d, int l, int n) {
    Model *m = d->m;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    if (c->attention == MOE_ATTN_MLA) {
        mla_prefill_cache(m, l, d->kv.k[l], d->rows, n, d->kv.work);
        return;
    }
    const int KW = config_kv_heads(c) * config_head_dim(c);
    const int VW = config_kv_heads(c) * config_value_dim(c);
    be->permute_rows(be, d->kv.k[l], m->state.blocks[l].k, d->rows, n, KW, 0);
    be->permute_rows(be, d->kv.v[l], m->state.blocks[l].v, d->rows, n, VW, 0);
}

/* The draft module's cache of a prefill of one sequence (d->rows its rows): at each position its
 * input is the main trunk's output there and the prompt's next token (0 after the last, whose
 * entry the first draft writes again) */
static void draft_prefill(Decoder *d, const int *tokens, int Tp, int len) {
    Model *m = d->m;
    int *next = d->host_idx + d->B * d->T;
    for (int t = 0; t < Tp; t++) next[t] = t + 1 < len ? tokens[t + 1] : 0;
    model_mtp_draft(m, next, 0, 1, Tp, NULL);
    cache_rows(d, m->cfg.n_layer, Tp);
}

void decoder_prefill(Decoder *d, int first, int n, const int *tokens, int Tp, const int *lens) {
    Model *m = d->m;
    const Backend *be = m->be;
    const int L = m->cfg.n_layer, T = d->T;
    const size_t V = (size_t)m->cfg.vocab;
    if (first < 0 || n < 1 || first + n > d->B || Tp < 1 || Tp > T)
        moe_fatal("decoder_prefill: sequences %d..%d of %d, %d positions of %d", first,
                  first + n - 1, d->B, Tp, T);
    for (int i = 0; i < n; i++)
        if (lens[i] < 1 || lens[i] > Tp)
            moe_fatal("decoder_prefill: prompt %d has %d tokens (1 to %d)", i, lens[i], Tp);
    model_forward(m, tokens, NULL, n, Tp, NULL);
    /* row i Tp + t of the forward's keys and values is position t of sequence first + i */
    int *rows = d->host_idx;
    for (int i = 0; i < n; i++)
        for (int t = 0; t < Tp; t++) rows[i * Tp + t] = (first + i) * T + t;
    be->to_device(be, d->rows, rows, (size_t)n * Tp * sizeof(int));
    for (int l = 0; l < L; l++) cache_rows(d, l, n * Tp);
    if (d->draft) draft_prefill(d, tokens, Tp, lens[0]);
    d->last_pos = 0, d->draft_len = lens[0] - 1; /* the last entry the first draft writes */
    for (int i = 0; i < n; i++) {
        d->len[first + i] = lens[i];
        be->to_host(be, d->logits + (size_t)(first + i) * V,
                    m->state.logits + ((size_t)i * Tp + lens[i] - 1) * V, V * sizeof(float));
    }
}

/* A forward of the n rows whose positions and cache rows the host's pos and rows (n each) name,
 * tokens (n) their tokens: their keys and values into the cache, d->logits theirs. */
static void cached_rows(Decoder *d, const int *tokens, const int *pos, const int *rows, int n) {
    Model *m = d->m;
    const Backend *be = m->be;
    step_room(d, n);
    be->to_device(be, d->pos, pos, (size_t)n * sizeof(int));
    be->to_device(be, d->step_rows, rows, (size_t)n * sizeof(int));
    model_forward_cached(m, tokens, n, &d->kv);
    be->to_host(be, d->logits, m->state.logits, (size_t)n * m->cfg.vocab * sizeof(float));
}

void decoder_step(Decoder *d, const int *tokens) {
    const int B = d->B, T = d->T;
    int *pos = d->host_idx, *rows = pos + B;
    for (int b = 0; b < B; b++) {
        if (d->len[b] >= T)
            moe_fatal("decoder_step: sequence %d's cache is full (%d positions)", b, T);
        pos[b] = d->len[b];
        rows[b] = b * T + d->len[b];
    }
    d->last_pos = d->len[0];
    cached_rows(d, tokens, pos, rows, B);
    for (int b = 0; b < B; b++) d->len[b]++;
}

void decoder_extend(Decoder *d, int s, const int *tokens, int n) {
    const int T = d->T;
    if (s < 0 || s >= d->B || n < 1 || d->len[s] + n > T)
        moe_fatal("decoder_extend: %d tokens after %d of sequence %d (of %d), %d positions", n,
                  s >= 0 && s < d->B ? d->len[s] : -1, s, d->B, T);
    int *pos = d->host_idx, *rows = pos + n; /* n <= T: 2 n of the 3 B T */
    for (int i = 0; i < n; i++) {
        pos[i] = d->len[s] + i;
        rows[i] = s * T + pos[i];
    }
    if (s == 0) d->last_pos = d->len[0];
    cached_rows(d, tokens, pos, rows, n);
    d->len[s] += n;
}

void decoder_drop(Decoder *d, int s, int n) {
    if (s < 0 || s >= d->B || n < 0 || n > d->len[s])
        moe_fatal("decoder_drop: %d tokens of sequence %d (of %d)", n, s, d->B);
    d->len[s] -= n;
    if (d->draft && d->draft_len > d->len[s]) d->draft_len = d->len[s];
}

void decoder_draft(Decoder *d, const int *tokens, int n) {
    Model *m = d->m;
    const Backend *be = m->be;
    /* positions p .. p + n - 1, rows p - last_pos ... of the model's last forward */
    const int p = d->len[0] - n, first = p - d->last_pos;
    if (!d->draft || n < 1 || p != d->draft_len || first < 0 || first + n > m->state.N_last)
        moe_fatal("decoder_draft: %d positions after %d of %d (draft %d, its cache %d, the "
                  "last forward's %d rows from position %d)",
                  n, p, d->T, d->draft, d->draft_len, m->state.N_last, d->last_pos);
    int *pos = d->host_idx;
    for (int i = 0; i < n; i++) pos[i] = p + i; /* one sequence: its rows are its positions */
    step_room(d, n);
    be->to_device(be, d->pos, pos, (size_t)n * sizeof(int));
    be->to_device(be, d->step_rows, pos, (size_t)n * sizeof(int));
    model_mtp_draft(m, tokens, first, n, 1, &d->kv);
    const size_t V = (size_t)m->cfg.vocab;
    be->to_host(be, d->draft_logits, m->state.mtp[0].logits + (size_t)(n - 1) * V,
                V * sizeof(float));
    d->draft_len = p + n;
}
