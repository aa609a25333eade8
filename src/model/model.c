/*
 * model.c: transformer orchestration. See model.h.
 *
 * This file never loops over tensor elements itself beyond the embedding lookup and residual
 * adds: every piece of math is an op from nn/ops.h or the MoE block from moe/moe_ops.h, so a
 * second backend can replace the ops without touching the orchestration.
 *
 * Accumulation rule (as in the ops): parameter gradients +=, activation gradients =.
 */
#include "model/model.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/profile.h"
#include "nn/ops.h"

/* y (n) = a + b, elementwise. */
static void add_vectors(float *y, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

int model_reference_attention = 0;

/* x (N, C): x[n] = emb[tokens[n]], emb (V, C). */
static void embed_forward(float *x, const int *tokens, const float *emb, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(x + (size_t)n * C, emb + (size_t)tokens[n] * C, (size_t)C * sizeof(float));
}

/* demb (V, C) += scatter of dx (N, C) by token; parallel over channels so that every gradient
 * element is summed by one thread in token order (deterministic). */
static void embed_backward(float *demb, const float *dx, const int *tokens, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < C; ch++)
        for (int n = 0; n < N; n++) demb[(size_t)tokens[n] * C + ch] += dx[(size_t)n * C + ch];
}

/* Gradients per partial sum of model_grad_norm, and the partials for n of them (one spare, so
 * an empty model still gets a buffer). Any tensor's count is at most the total. */
#define NORM_CHUNK ((size_t)1 << 16)
static size_t norm_chunks(size_t n) {
    return (n + NORM_CHUNK - 1) / NORM_CHUNK + 1;
}

static float *alloc_nc(const Model *m) {
    return floats_alloc((size_t)m->B * m->T * m->cfg.d_model);
}

/* The weights of the whole model drawn as in one process, then this member's share kept: an
 * expert-parallel run starts from exactly the weights a one-process run starts from. */
static void init_expert_share(Model *m, const Config *c) {
    ParamTable full;
    params_table_build(&full, c);
    float *buf = floats_alloc(full.total);
    params_init(&full, buf, c, c->seed);
    for (int i = 0; i < m->pt.n; i++) {
        const ParamTensor *t = &m->pt.t[i], *f = &full.t[params_find(&full, t->name)];
        /* stacked experts: this member's El consecutive ones, from expert ep_rank * El */
        size_t skip = t->expert_dim ? (size_t)m->dist->ep_rank * t->numel : 0;
        memcpy(m->params + t->offset, buf + f->offset + skip, t->numel * sizeof(float));
    }
    free(buf);
    params_table_free(&full);
}

void model_init(Model *m, const Config *c, int B, int T) {
    model_init_dist(m, c, B, T, NULL);
}

void model_init_dist(Model *m, const Config *c, int B, int T, Dist *d) {
    memset(m, 0, sizeof(*m));
    m->cfg = *c;
    m->B = B;
    m->T = T;
    m->dist = d && d->world > 1 ? d : NULL; /* one process: exactly the one-process model */
    const int L = c->n_layer, C = c->d_model, H = c->n_head, F = c->d_ff;
    const size_t N = (size_t)B * T, Fs = (size_t)c->num_shared * config_expert_hidden(c);
    const int ep = m->dist ? m->dist->ep : 1;

    params_table_build_ep(&m->pt, c, ep);
    m->params = floats_alloc(m->pt.total);
    m->grads = floats_alloc(m->pt.total);
    m->m = floats_alloc(m->pt.total);
    m->v = floats_alloc(m->pt.total);
    params_view(&m->w, &m->pt, m->params);
    params_view(&m->g, &m->pt, m->grads);
    if (ep > 1)
        init_expert_share(m, c);
    else
        params_init(&m->pt, m->params, c, c->seed);

    m->hp = (MoeHyper){.C = C,
                       .E = c->num_experts,
                       .K = c->top_k,
                       .F = config_expert_hidden(c),
                       .renorm = c->norm_topk,
                       .aux_coef = c->aux_coef,
                       .z_coef = c->z_coef,
                       .score = c->score,
                       .topk_first = c->topk_before_softmax,
                       .route_scale = c->route_scale,
                       .balance = c->balance,
                       .jitter = c->jitter,
                       .noise = c->noise,
                       .routing = c->routing,
                       .ec_capacity = c->ec_capacity,
                       .capacity_factor = c->capacity_factor,
                       .cap_scope = c->capacity_scope,
                       .min_capacity = c->min_capacity,
                       .drop_policy = c->drop_policy,
                       .padded = c->padded,
                       .eval_capacity_factor = c->eval_capacity_factor,
                       .second_random = c->second_expert_random,
                       .T = T, /* sizes the padded per-sequence buffers */
                       .dist = m->dist};
    /* a stream apart from the init and data streams, so turning noise on changes nothing else */
    rng_seed(&m->router_rng, c->seed ^ 0x6e6f697365524e47ull);

    m->inputs = (int *)calloc_check(N, sizeof(int));
    m->targets = (int *)calloc_check(N, sizeof(int));
    m->resid = (float **)calloc_check((size_t)L + 1, sizeof(float *));
    for (int l = 0; l <= L; l++) m->resid[l] = alloc_nc(m);
    m->blocks = (BlockActs *)calloc_check((size_t)L, sizeof(BlockActs));
    for (int l = 0; l < L; l++) {
        BlockActs *a = &m->blocks[l];
        a->ln1 = alloc_nc(m);
        a->rstd1 = floats_alloc(N);
        a->q = alloc_nc(m);
        a->k = alloc_nc(m);
        a->v = alloc_nc(m);
        a->att = floats_alloc((size_t)B * H * T * T);
        a->atty = alloc_nc(m);
        a->resid_mid = alloc_nc(m);
        a->ln2 = alloc_nc(m);
        a->rstd2 = floats_alloc(N);
        if (config_is_moe_layer(c, l)) {
            a->moe = (MoeActs *)calloc_check(1, sizeof(MoeActs));
            moe_acts_alloc(a->moe, &m->hp, (int)N);
            m->n_moe++;
            if (Fs > 0) {
                a->sg = floats_alloc(N * Fs);
                a->su = floats_alloc(N * Fs);
                a->sh = floats_alloc(N * Fs);
            }
        } else {
            a->fg = floats_alloc(N * F);
            a->fu = floats_alloc(N * F);
            a->fh = floats_alloc(N * F);
        }
    }
    if (m->n_moe > 0) m->router_bias = floats_alloc((size_t)m->n_moe * c->num_experts);
    for (int l = 0, b = 0; l < L; l++)
        if (m->blocks[l].moe)
            m->blocks[l].router_bias = m->router_bias + (size_t)b++ * c->num_experts;
    m->lnf = alloc_nc(m);
    m->rstdf = floats_alloc(N);
    m->logits = floats_alloc(N * MOE_VOCAB);
    m->losses = floats_alloc(N);

    m->dresid = alloc_nc(m);
    m->dmid = alloc_nc(m);
    m->dln = alloc_nc(m);
    m->dtmp = alloc_nc(m);
    m->dq = alloc_nc(m);
    m->dk = alloc_nc(m);
    m->dv = alloc_nc(m);
    m->datty = alloc_nc(m);
    if (m->n_moe < L) {
        m->dfg = floats_alloc(N * F);
        m->dfu = floats_alloc(N * F);
        m->dfh = floats_alloc(N * F);
    }
    m->dlogits = floats_alloc(N * MOE_VOCAB);
    if (m->n_moe > 0) moe_scratch_alloc(&m->moe_scratch, &m->hp, (int)N);
    if (m->n_moe > 0 && Fs > 0) {
        m->dsg = floats_alloc(N * Fs);
        m->dsu = floats_alloc(N * Fs);
        m->dsh = floats_alloc(N * Fs);
    }
    const int D = C / H;
    m->rope_cs = (float *)malloc_check((size_t)T * D * sizeof(float)); /* (T, D/2, 2) */
    rope_table(m->rope_cs, T, D, c->rope_theta);
    m->n_att_ws = omp_get_max_threads();
    m->att_ws = (float *)malloc_check((size_t)m->n_att_ws * T * T * sizeof(float));
    m->norm_partial = (double *)malloc_check(norm_chunks(m->pt.total) * sizeof(double));
}

void model_free(Model *m) {
    const int L = m->cfg.n_layer;
    for (int l = 0; l < L; l++) {
        BlockActs *a = &m->blocks[l];
        free(a->ln1);
        free(a->rstd1);
        free(a->q);
        free(a->k);
        free(a->v);
        free(a->att);
        free(a->atty);
        free(a->resid_mid);
        free(a->ln2);
        free(a->rstd2);
        free(a->fg);
        free(a->fu);
        free(a->fh);
        free(a->sg);
        free(a->su);
        free(a->sh);
        if (a->moe) {
            moe_acts_free(a->moe);
            free(a->moe);
        }
    }
    for (int l = 0; l <= L; l++) free(m->resid[l]);
    free(m->resid);
    free(m->blocks);
    free(m->inputs);
    free(m->targets);
    free(m->lnf);
    free(m->rstdf);
    free(m->logits);
    free(m->losses);
    free(m->dresid);
    free(m->dmid);
    free(m->dln);
    free(m->dtmp);
    free(m->dq);
    free(m->dk);
    free(m->dv);
    free(m->datty);
    free(m->dfg);
    free(m->dfu);
    free(m->dfh);
    free(m->dsg);
    free(m->dsu);
    free(m->dsh);
    free(m->dlogits);
    free(m->router_bias);
    if (m->n_moe > 0) moe_scratch_free(&m->moe_scratch);
    free(m->rope_cs);
    free(m->att_ws);
    free(m->norm_partial);
    params_view_free(&m->w);
    params_view_free(&m->g);
    params_table_free(&m->pt);
    free(m->params);
    free(m->grads);
    free(m->m);
    free(m->v);
    memset(m, 0, sizeof(*m));
}

static MoeWeights moe_weights(const LayerView *lw) {
    return (MoeWeights){.router = lw->router, .Wg = lw->e_gate, .Wu = lw->e_up, .Wd = lw->e_down};
}

/* ---- forward ------------------------------------------------------------------------------ */

static void block_forward(Model *m, int l, float *out, const float *in, int B, int T) {
    const Config *c = &m->cfg;
    const int C = c->d_model, H = c->n_head, F = c->d_ff, N = B * T;
    const LayerView *lw = &m->w.layers[l];
    BlockActs *a = &m->blocks[l];

    /* attention branch: resid_mid = in + attention(rmsnorm(in)) wo^T */
    PROF(PROF_NORM, rmsnorm_forward(a->ln1, a->rstd1, in, lw->attn_norm, N, C));
    PROF(PROF_ATTN_PROJ, matmul_forward(a->q, a->ln1, lw->wq, N, C, C));
    PROF(PROF_ATTN_PROJ, matmul_forward(a->k, a->ln1, lw->wk, N, C, C));
    PROF(PROF_ATTN_PROJ, matmul_forward(a->v, a->ln1, lw->wv, N, C, C));
    PROF(PROF_ROPE, rope_forward(a->q, m->rope_cs, B, T, H, C / H));
    PROF(PROF_ROPE, rope_forward(a->k, m->rope_cs, B, T, H, C / H));
    PROF(PROF_ATTN, (model_reference_attention ? attention_forward_reference : attention_forward)(
                        a->atty, a->att, a->q, a->k, a->v, B, T, C, H));
    /* dtmp is free scratch during the forward pass */
    PROF(PROF_ATTN_PROJ, matmul_forward(m->dtmp, a->atty, lw->wo, N, C, C));
    PROF(PROF_RESIDUAL, add_vectors(a->resid_mid, in, m->dtmp, (size_t)N * C));

    /* feed-forward branch: out = resid_mid + FFN(rmsnorm(resid_mid)) */
    PROF(PROF_NORM, rmsnorm_forward(a->ln2, a->rstd2, a->resid_mid, lw->ffn_norm, N, C));
    if (a->moe) {
        MoeWeights wt = moe_weights(lw);
        if (m->hp.balance == MOE_BALANCE_AUX_FREE) wt.bias = a->router_bias;
        MoeHyper hp = m->hp;
        hp.T = T; /* seq_aux balances each sequence of T tokens */
        if (m->training && (hp.jitter > 0.0f || hp.noise > 0.0f || hp.second_random))
            hp.rng = &m->router_rng;
        /* evaluation may run at its own capacity (0: dropless) */
        if (!m->training && hp.eval_capacity_factor >= 0.0f)
            hp.capacity_factor = hp.eval_capacity_factor;
        moe_block_forward(m->dtmp, a->moe, a->ln2, &wt, &hp, N);
        if (a->sg) { /* shared experts: one dense SwiGLU, weight 1; dln is free scratch here */
            const int Fs = c->num_shared * m->hp.F;
            PROF(PROF_DENSE_FFN, matmul_forward(a->sg, a->ln2, lw->s_gate, N, C, Fs));
            PROF(PROF_DENSE_FFN, matmul_forward(a->su, a->ln2, lw->s_up, N, C, Fs));
            PROF(PROF_SWIGLU, swiglu_forward(a->sh, a->sg, a->su, N, Fs));
            PROF(PROF_DENSE_FFN, matmul_forward(m->dln, a->sh, lw->s_down, N, Fs, C));
            PROF(PROF_RESIDUAL, add_vectors(m->dtmp, m->dtmp, m->dln, (size_t)N * C));
        }
    } else {
        PROF(PROF_DENSE_FFN, matmul_forward(a->fg, a->ln2, lw->w_gate, N, C, F));
        PROF(PROF_DENSE_FFN, matmul_forward(a->fu, a->ln2, lw->w_up, N, C, F));
        PROF(PROF_SWIGLU, swiglu_forward(a->fh, a->fg, a->fu, N, F));
        PROF(PROF_DENSE_FFN, matmul_forward(m->dtmp, a->fh, lw->w_down, N, F, C));
    }
    PROF(PROF_RESIDUAL, add_vectors(out, a->resid_mid, m->dtmp, (size_t)N * C));
}

float model_forward(Model *m, const int *inputs, const int *targets, int B, int T) {
    const Config *c = &m->cfg;
    const int C = c->d_model, L = c->n_layer, N = B * T;
    if (B > m->B || T > m->T || B * T > m->B * m->T)
        moe_fatal("model_forward: batch %dx%d exceeds the allocated %dx%d", B, T, m->B, m->T);
    m->B_last = B;
    m->T_last = T;
    m->N_last = N;
    memcpy(m->inputs, inputs, (size_t)N * sizeof(int));

    PROF(PROF_EMBED, embed_forward(m->resid[0], inputs, m->w.tok_emb, N, C));

    for (int l = 0; l < L; l++) block_forward(m, l, m->resid[l + 1], m->resid[l], B, T);

    PROF(PROF_NORM, rmsnorm_forward(m->lnf, m->rstdf, m->resid[L], m->w.final_norm, N, C));
    PROF(PROF_HEAD, matmul_forward(m->logits, m->lnf, m->w.head, N, C, MOE_VOCAB));

    m->aux_loss = m->z_loss = 0.0f;
    float aux_sum = 0.0f, z_sum = 0.0f;
    for (int l = 0; l < L; l++)
        if (m->blocks[l].moe) {
            aux_sum += m->blocks[l].moe->aux_loss;
            z_sum += m->blocks[l].moe->z_loss;
        }
    if (m->n_moe > 0) {
        m->aux_loss = aux_sum / (float)m->n_moe;
        m->z_loss = z_sum / (float)m->n_moe;
    }
    if (!targets) {
        m->loss = NAN;
        return NAN;
    }
    memcpy(m->targets, targets, (size_t)N * sizeof(int));
    PROF(PROF_LOSS, crossentropy_forward(m->losses, m->logits, m->logits, targets, N, MOE_VOCAB));
    double total = 0.0;
    for (int n = 0; n < N; n++) total += m->losses[n]; /* fixed order: deterministic */
    m->loss = (float)(total / N);
    return m->loss + moe_balance_coef(&m->hp) * aux_sum + c->z_coef * z_sum;
}

/* ---- backward ----------------------------------------------------------------------------- */

/* dx (N, C) = d/d(in) of block l, given dout (N, C) the gradient of its output. dx may be
 * dout itself: dout is last read before dmid is formed, and dx is written at the very end. */
static void block_backward(Model *m, int l, float *dx, const float *dout, const float *in,
                           float loss_scale) {
    const Config *c = &m->cfg;
    const int C = c->d_model, H = c->n_head, F = c->d_ff;
    const int B = m->B_last, T = m->T_last, N = m->N_last;
    const LayerView *lw = &m->w.layers[l];
    LayerView *gw = &m->g.layers[l];
    BlockActs *a = &m->blocks[l];

    /* out = resid_mid + FFN(ln2): FFN gradient into dln */
    if (a->moe) {
        MoeWeights wt = moe_weights(lw);
        MoeGrads gr = {.router = gw->router, .Wg = gw->e_gate, .Wu = gw->e_up, .Wd = gw->e_down};
        moe_block_backward(m->dln, &gr, dout, a->moe, a->ln2, &wt, &m->hp, &m->moe_scratch,
                           loss_scale);
        if (a->sg) { /* + (silu(ln2 Wsg^T) * ln2 Wsu^T) Wsd^T: its input gradients add to dln */
            const int Fs = c->num_shared * m->hp.F;
            PROF(PROF_DENSE_FFN,
                 matmul_backward(m->dsh, gw->s_down, dout, a->sh, lw->s_down, N, Fs, C));
            PROF(PROF_SWIGLU, swiglu_backward(m->dsg, m->dsu, m->dsh, a->sg, a->su, N, Fs));
            PROF(PROF_DENSE_FFN,
                 matmul_backward(m->dtmp, gw->s_gate, m->dsg, a->ln2, lw->s_gate, N, C, Fs));
            PROF(PROF_RESIDUAL, add_vectors(m->dln, m->dln, m->dtmp, (size_t)N * C));
            PROF(PROF_DENSE_FFN,
                 matmul_backward(m->dtmp, gw->s_up, m->dsu, a->ln2, lw->s_up, N, C, Fs));
            PROF(PROF_RESIDUAL, add_vectors(m->dln, m->dln, m->dtmp, (size_t)N * C));
        }
    } else {
        PROF(PROF_DENSE_FFN, matmul_backward(m->dfh, gw->w_down, dout, a->fh, lw->w_down, N, F, C));
        PROF(PROF_SWIGLU, swiglu_backward(m->dfg, m->dfu, m->dfh, a->fg, a->fu, N, F));
        PROF(PROF_DENSE_FFN,
             matmul_backward(m->dln, gw->w_gate, m->dfg, a->ln2, lw->w_gate, N, C, F));
        PROF(PROF_DENSE_FFN, matmul_backward(m->dtmp, gw->w_up, m->dfu, a->ln2, lw->w_up, N, C, F));
        PROF(PROF_RESIDUAL, add_vectors(m->dln, m->dln, m->dtmp, (size_t)N * C));
    }
    /* ln2 = rmsnorm(resid_mid); dmid = dout (residual path) + d(ln2)/d(resid_mid) */
    PROF(PROF_NORM, rmsnorm_backward(m->dtmp, gw->ffn_norm, m->dln, a->resid_mid, lw->ffn_norm,
                                     a->rstd2, N, C));
    PROF(PROF_RESIDUAL, add_vectors(m->dmid, dout, m->dtmp, (size_t)N * C));

    /* resid_mid = in + atty wo^T */
    PROF(PROF_ATTN_PROJ, matmul_backward(m->datty, gw->wo, m->dmid, a->atty, lw->wo, N, C, C));
    PROF(PROF_ATTN, (model_reference_attention ? attention_backward_reference : attention_backward)(
                        m->dq, m->dk, m->dv, m->att_ws, m->datty, a->att, a->q, a->k, a->v, B, T,
                        C, H, m->n_att_ws));
    PROF(PROF_ROPE, rope_backward(m->dq, m->rope_cs, B, T, H, C / H));
    PROF(PROF_ROPE, rope_backward(m->dk, m->rope_cs, B, T, H, C / H));
    /* q, k, v = ln1 Wq^T, ln1 Wk^T, ln1 Wv^T: their input gradients add up in dln */
    PROF(PROF_ATTN_PROJ, matmul_backward(m->dln, gw->wq, m->dq, a->ln1, lw->wq, N, C, C));
    PROF(PROF_ATTN_PROJ, matmul_backward(m->dtmp, gw->wk, m->dk, a->ln1, lw->wk, N, C, C));
    PROF(PROF_RESIDUAL, add_vectors(m->dln, m->dln, m->dtmp, (size_t)N * C));
    PROF(PROF_ATTN_PROJ, matmul_backward(m->dtmp, gw->wv, m->dv, a->ln1, lw->wv, N, C, C));
    PROF(PROF_RESIDUAL, add_vectors(m->dln, m->dln, m->dtmp, (size_t)N * C));
    /* ln1 = rmsnorm(in); dx = dmid (residual path) + d(ln1)/d(in) */
    PROF(PROF_NORM,
         rmsnorm_backward(m->dtmp, gw->attn_norm, m->dln, in, lw->attn_norm, a->rstd1, N, C));
    PROF(PROF_RESIDUAL, add_vectors(dx, m->dmid, m->dtmp, (size_t)N * C));
}

void model_backward(Model *m, float loss_scale) {
    const Config *c = &m->cfg;
    const int C = c->d_model, L = c->n_layer, N = m->N_last;

    prof_backward = 1;
    /* loss = mean_n CE_n, so dlogits carries 1/N; loss_scale adds 1/accum */
    PROF(PROF_LOSS, crossentropy_backward(m->dlogits, m->logits, m->targets, loss_scale / (float)N,
                                          N, MOE_VOCAB));
    PROF(PROF_HEAD,
         matmul_backward(m->dln, m->g.head, m->dlogits, m->lnf, m->w.head, N, C, MOE_VOCAB));
    PROF(PROF_NORM, rmsnorm_backward(m->dresid, m->g.final_norm, m->dln, m->resid[L],
                                     m->w.final_norm, m->rstdf, N, C));

    /* dresid holds d/d(resid[l+1]); each block turns it into d/d(resid[l]) in place */
    for (int l = L - 1; l >= 0; l--)
        block_backward(m, l, m->dresid, m->dresid, m->resid[l], loss_scale);

    PROF(PROF_EMBED, embed_backward(m->g.tok_emb, m->dresid, m->inputs, N, C));
    prof_backward = 0;
}

void model_update_router_bias(Model *m, const double *count) {
    if (m->hp.balance != MOE_BALANCE_AUX_FREE) return;
    const int E = m->cfg.num_experts;
    for (int b = 0; b < m->n_moe; b++)
        router_bias_update(m->router_bias + (size_t)b * E, count + (size_t)b * E, E,
                           m->cfg.bias_update, m->cfg.bias_rate);
}

void model_zero_grad(Model *m) {
    memset(m->grads, 0, m->pt.total * sizeof(float));
}

/* Sum of squares of g[0 .. n): fixed chunks of NORM_CHUNK in parallel into partial
 * (norm_chunks(n)), then the chunks in order, so the result does not depend on the number of
 * threads. */
static double sum_squares(double *partial, const float *g, size_t n) {
    const size_t n_chunks = (n + NORM_CHUNK - 1) / NORM_CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t ch = 0; ch < n_chunks; ch++) {
        size_t end = (ch + 1) * NORM_CHUNK < n ? (ch + 1) * NORM_CHUNK : n;
        double ss = 0.0;
        for (size_t i = ch * NORM_CHUNK; i < end; i++) ss += (double)g[i] * g[i];
        partial[ch] = ss;
    }
    double ss = 0.0;
    for (size_t ch = 0; ch < n_chunks; ch++) ss += partial[ch];
    return ss;
}

float model_grad_norm(const Model *m) {
    double t0 = prof_clock();
    double ss = 0.0;
    if (!m->dist) {
        ss = sum_squares(m->norm_partial, m->grads, m->pt.total);
    } else {
        /* every process holds the same (summed) non-expert gradients; each expert lives on one
         * member of an expert-parallel group: their squares add up over the group */
        double part[2] = {0.0, 0.0}; /* non-expert, this member's experts */
        for (int i = 0; i < m->pt.n; i++) {
            const ParamTensor *t = &m->pt.t[i];
            part[t->expert_dim] += sum_squares(m->norm_partial, m->grads + t->offset, t->numel);
        }
        dist_allreduce_sum_d(m->dist, DIST_EP, &part[1], 1);
        ss = part[0] + part[1];
    }
    if (prof_enabled) prof_add(PROF_OPTIMIZER, prof_clock() - t0);
    return (float)sqrt(ss);
}

void model_sync_grads(Model *m) {
    if (!m->dist) return;
    double t0 = prof_clock();
    for (int i = 0; i < m->pt.n; i++) {
        const ParamTensor *t = &m->pt.t[i];
        /* an expert's gradient comes from every process whose tokens it served, inside its
         * group; its copies in the other data-parallel replicas are summed with it */
        dist_allreduce_sum_f(m->dist, t->expert_dim ? DIST_DP : DIST_WORLD, m->grads + t->offset,
                             t->numel);
    }
    if (prof_enabled) prof_add(PROF_OPTIMIZER, prof_clock() - t0);
}

void model_adamw_step(Model *m, float lr, float grad_scale) {
    const Config *c = &m->cfg;
    m->step++;
    if (grad_scale != 1.0f) {
        double t0 = prof_clock();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < m->pt.total; i++) m->grads[i] *= grad_scale;
        if (prof_enabled) prof_add(PROF_OPTIMIZER, prof_clock() - t0);
    }
    for (int i = 0; i < m->pt.n; i++) {
        const ParamTensor *t = &m->pt.t[i];
        PROF(PROF_OPTIMIZER,
             adamw_update(m->params + t->offset, m->grads + t->offset, m->m + t->offset,
                          m->v + t->offset, t->numel, lr, c->beta1, c->beta2, c->eps,
                          t->decay ? c->weight_decay : 0.0f, m->step));
    }
}

float lr_schedule(const Config *c, int step) {
    if (step < c->warmup) return c->lr * (float)(step + 1) / (float)c->warmup;
    int span = c->steps - c->warmup;
    if (span <= 0) return c->lr;
    float progress = (float)(step - c->warmup) / (float)span;
    if (progress > 1.0f) progress = 1.0f;
    float cosine = 0.5f * (1.0f + cosf(3.14159265358979f * progress));
    return c->lr * (c->min_lr + (1.0f - c->min_lr) * cosine);
}

double model_flops_per_token(const Config *c, int T) {
    /* Model FLOPs: the matrix products a training step needs, counted as useful work only.
     * Forward = 2 x multiply-adds; backward = 2 x forward (one product for the input
     * gradient, one for the weight gradient), so a step = 6 x multiply-adds.
     * Per token and block: q, k, v, o projections 4 C^2; attention scores and weighted sum:
     * a token at position t attends to t + 1 positions, (t + 1) C each for q.k and for p.v,
     * which averages to (T + 1) C over a sequence (the GEMM attention computes the full T x T
     * square and masks half of it; the masked half is not counted); FFN 3 C F, or in an MoE
     * block 3 C F_e for each of the top_k experts and of the num_shared shared experts, plus
     * the router E C. Head: V C. */
    double C = c->d_model, F = c->d_ff, FE = config_expert_hidden(c);
    double per_token_macs = 0.0;
    for (int l = 0; l < c->n_layer; l++) {
        per_token_macs += 4.0 * C * C + (double)(T + 1) * C;
        if (config_is_moe_layer(c, l))
            per_token_macs +=
                3.0 * C * FE * (c->top_k + c->num_shared) + (double)c->num_experts * C;
        else
            per_token_macs += 3.0 * C * F;
    }
    per_token_macs += (double)MOE_VOCAB * C;
    return 6.0 * per_token_macs;
}
