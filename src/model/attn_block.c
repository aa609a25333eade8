/*
 * attn_block.c: a block's attention sublayer (attn_block.h): multi-head attention with grouped
 * key-value heads and norms on queries and keys, or multi-head latent attention; RoPE; the
 * attention op; and their backward. Orchestration only, as model.c: every buffer is the
 * backend's and every piece of arithmetic one of its ops.
 */
#include "model/attn_block.h"

#include <math.h>

#include "model/profile.h"
#include "model/tp.h"

/* ---- multi-head attention ------------------------------------------------------------------ */

/* The rows and width of model.qk_norm's RMSNorm on a projection of heads heads of D channels:
 * each head of each token (head), or each token's whole projection (full). */
static void qk_norm_rows(const Config *c, int N, int heads, int *rows, int *width) {
    const int D = config_head_dim(c);
    const int per_head = c->qk_norm == MOE_QK_NORM_HEAD;
    *rows = per_head ? N * heads : N;
    *width = per_head ? D : heads * D;
}

/* q (N, H D), k, v (N, Hkv D) = ln1 Wq^T, ln1 Wk^T, ln1 Wv^T; with model.qk_norm, q and k
 * are the RMSNorms (with their gains) of those products, kept in qr and kr. RoPE follows. */
static void mha_qkv_forward(Model *m, BlockActs *a, const LayerView *lw, int N) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int tp = model_tp(m), C = c->d_model, H = c->n_head / tp, Hkv = config_kv_heads(c) / tp;
    const int D = config_head_dim(c);
    PROF(PROF_ATTN_PROJ, be->matmul_forward(be, a->qr ? a->qr : a->q, a->ln1, lw->wq, N, C, H * D));
    PROF(PROF_ATTN_PROJ,
         be->matmul_forward(be, a->kr ? a->kr : a->k, a->ln1, lw->wk, N, C, Hkv * D));
    PROF(PROF_ATTN_PROJ, be->matmul_forward(be, a->v, a->ln1, lw->wv, N, C, Hkv * D));
    if (c->qk_norm == MOE_QK_NORM_NONE) return;
    int rows, width;
    qk_norm_rows(c, N, H, &rows, &width);
    PROF(PROF_NORM, be->rmsnorm_forward(be, a->q, a->rstd_q, a->qr, lw->q_norm, rows, width));
    qk_norm_rows(c, N, Hkv, &rows, &width);
    PROF(PROF_NORM, be->rmsnorm_forward(be, a->k, a->rstd_k, a->kr, lw->k_norm, rows, width));
}

/* model.qk_norm's backward on a projection of heads heads: dx = the gradient of the product
 * before the norm from dy that of its output (its gain's gradient added to dw); returns dx, or
 * dy itself without the norm. */
static const float *qk_norm_backward(Model *m, float *dx, float *dw, const float *dy,
                                     const float *x, const float *w, const float *rstd, int heads,
                                     int N) {
    if (m->cfg.qk_norm == MOE_QK_NORM_NONE) return dy;
    int rows, width;
    qk_norm_rows(&m->cfg, N, heads, &rows, &width);
    PROF(PROF_NORM, m->be->rmsnorm_backward(m->be, dx, dw, dy, x, w, rstd, rows, width));
    return dx;
}

/* mha_qkv_forward's backward: from dq, dk, dv (the gradients of q and k before RoPE, of v)
 * into dln, the gradient of ln1; the weights' gradients added. With model.qk_norm, datty (free
 * once the attention's backward has read it) and then dq take the gradients of the products. */
static void mha_qkv_backward(Model *m, const BlockActs *a, const LayerView *lw, LayerView *gw,
                             int N) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int tp = model_tp(m), C = c->d_model, H = c->n_head / tp, Hkv = config_kv_heads(c) / tp;
    const int D = config_head_dim(c);
    /* q, k, v = ln1 Wq^T, ln1 Wk^T, ln1 Wv^T: their input gradients add up in dln */
    const float *dqr =
        qk_norm_backward(m, rs->datty, gw->q_norm, rs->dq, a->qr, lw->q_norm, a->rstd_q, H, N);
    PROF(PROF_ATTN_PROJ,
         be->matmul_backward(be, rs->dln, gw->wq, dqr, a->ln1, lw->wq, N, C, H * D));
    const float *dkr =
        qk_norm_backward(m, rs->dq, gw->k_norm, rs->dk, a->kr, lw->k_norm, a->rstd_k, Hkv, N);
    PROF(PROF_ATTN_PROJ,
         be->matmul_backward(be, rs->dtmp, gw->wk, dkr, a->ln1, lw->wk, N, C, Hkv * D));
    PROF(PROF_RESIDUAL, be->add(be, rs->dln, rs->dln, rs->dtmp, (size_t)N * C));
    PROF(PROF_ATTN_PROJ,
         be->matmul_backward(be, rs->dtmp, gw->wv, rs->dv, a->ln1, lw->wv, N, C, Hkv * D));
    PROF(PROF_RESIDUAL, be->add(be, rs->dln, rs->dln, rs->dtmp, (size_t)N * C));
}

/* ---- multi-head latent attention ----------------------------------------------------------- */

/* RoPE on x (N rows of heads heads of R channels): a training pass's positions, or with kv each
 * row's own (decoding) */
static void rope_rows(Model *m, float *x, int B, int T, int heads, int R, const KvStep *kv) {
    const Backend *be = m->be;
    if (kv)
        PROF(PROF_ROPE, be->rope_forward_at(be, x, m->state.rope_cs, kv->pos, B * T, heads, R));
    else
        PROF(PROF_ROPE, be->rope_forward(be, x, m->state.rope_cs, B, T, heads, R));
}

/* The queries: q (N, H D) = ln1 Wq^T, or through the normed latent ln1 Wq_a^T; then RoPE on each
 * head's last rope_dim channels, taken out into drope (free in a forward) and put back. */
static void mla_queries(Model *m, BlockActs *a, const LayerView *lw, int B, int T,
                        const KvStep *kv) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int C = c->d_model, H = c->n_head, D = config_head_dim(c), N = B * T;
    const int QR = c->mla_q_rank, R = c->mla_rope_dim, NOPE = c->mla_nope_dim;
    if (QR > 0) {
        PROF(PROF_ATTN_PROJ, be->matmul_forward(be, a->qlat, a->ln1, lw->wq_a, N, C, QR));
        PROF(PROF_NORM,
             be->rmsnorm_forward(be, a->qlatn, a->rstd_qlat, a->qlat, lw->q_a_norm, N, QR));
        PROF(PROF_ATTN_PROJ, be->matmul_forward(be, a->q, a->qlatn, lw->wq_b, N, QR, H * D));
    } else {
        PROF(PROF_ATTN_PROJ, be->matmul_forward(be, a->q, a->ln1, lw->wq, N, C, H * D));
    }
    PROF(PROF_ROPE, be->copy_block(be, rs->drope, R, a->q + NOPE, D, N * H, R, 0));
    rope_rows(m, rs->drope, B, T, H, R, kv);
    PROF(PROF_ROPE, be->copy_block(be, a->q + NOPE, D, rs->drope, R, N * H, R, 0));
}

/* The keys and values: the latent lat = ln1 Wkv_a^T, normed into latn; kvb = latn Wkv_b^T, each
 * head's key without rotation and value; the shared rotated key krope = RoPE(ln1 Wk_rope^T).
 * k (N, H D) = [kvb's key part | krope] a head, v (N, H Dv) = kvb's value part. */
static void mla_keys_values(Model *m, BlockActs *a, const LayerView *lw, int B, int T,
                            const KvStep *kv) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int C = c->d_model, H = c->n_head, D = config_head_dim(c), N = B * T;
    const int KR = c->mla_kv_rank, R = c->mla_rope_dim, NOPE = c->mla_nope_dim;
    const int DV = c->mla_v_dim, KVB = NOPE + DV; /* kvb's channels a head */
    PROF(PROF_ATTN_PROJ, be->matmul_forward(be, a->lat, a->ln1, lw->wkv_a, N, C, KR));
    PROF(PROF_NORM, be->rmsnorm_forward(be, a->latn, a->rstd_lat, a->lat, lw->kv_a_norm, N, KR));
    PROF(PROF_ATTN_PROJ, be->matmul_forward(be, a->kvb, a->latn, lw->wkv_b, N, KR, H * KVB));
    PROF(PROF_ATTN_PROJ, be->matmul_forward(be, a->krope, a->ln1, lw->wk_rope, N, C, R));
    rope_rows(m, a->krope, B, T, 1, R, kv);
    PROF(PROF_ATTN, be->copy_block(be, a->k, D, a->kvb, KVB, N * H, NOPE, 0));
    for (int h = 0; h < H; h++)
        PROF(PROF_ATTN,
             be->copy_block(be, a->k + (size_t)h * D + NOPE, H * D, a->krope, R, N, R, 0));
    PROF(PROF_ATTN, be->copy_block(be, a->v, DV, a->kvb + NOPE, KVB, N * H, DV, 0));
}

/* The queries' backward: dq (the gradient of q after RoPE) through RoPE (its rotated parts, by
 * way of drope) and the projections into dln (written); the weights' gradients added. */
static void mla_queries_backward(Model *m, const BlockActs *a, const LayerView *lw, LayerView *gw) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int C = c->d_model, H = c->n_head, D = config_head_dim(c);
    const int B = rs->B_last, T = rs->T_last, N = rs->N_last;
    const int QR = c->mla_q_rank, R = c->mla_rope_dim, NOPE = c->mla_nope_dim;
    PROF(PROF_ROPE, be->copy_block(be, rs->drope, R, rs->dq + NOPE, D, N * H, R, 0));
    PROF(PROF_ROPE, be->rope_backward(be, rs->drope, rs->rope_cs, B, T, H, R));
    PROF(PROF_ROPE, be->copy_block(be, rs->dq + NOPE, D, rs->drope, R, N * H, R, 0));
    if (QR == 0) {
        PROF(PROF_ATTN_PROJ,
             be->matmul_backward(be, rs->dln, gw->wq, rs->dq, a->ln1, lw->wq, N, C, H * D));
        return;
    }
    PROF(PROF_ATTN_PROJ,
         be->matmul_backward(be, rs->dlatn, gw->wq_b, rs->dq, a->qlatn, lw->wq_b, N, QR, H * D));
    PROF(PROF_NORM, be->rmsnorm_backward(be, rs->dlat, gw->q_a_norm, rs->dlatn, a->qlat,
                                         lw->q_a_norm, a->rstd_qlat, N, QR));
    PROF(PROF_ATTN_PROJ,
         be->matmul_backward(be, rs->dln, gw->wq_a, rs->dlat, a->ln1, lw->wq_a, N, C, QR));
}

/* The keys' and values' backward: dk, dv into kvb's gradient (dkvb) and the shared rotated
 * key's (dkrope: the heads' rotated parts summed, then through RoPE), then through the
 * products and the latent's norm, added into dln. */
static void mla_keys_values_backward(Model *m, const BlockActs *a, const LayerView *lw,
                                     LayerView *gw) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int C = c->d_model, H = c->n_head, D = config_head_dim(c);
    const int B = rs->B_last, T = rs->T_last, N = rs->N_last;
    const int KR = c->mla_kv_rank, R = c->mla_rope_dim, NOPE = c->mla_nope_dim;
    const int DV = c->mla_v_dim, KVB = NOPE + DV;
    for (int h = 0; h < H; h++)
        PROF(PROF_ATTN,
             be->copy_block(be, rs->dkrope, R, rs->dk + (size_t)h * D + NOPE, H * D, N, R, h > 0));
    PROF(PROF_ROPE, be->rope_backward(be, rs->dkrope, rs->rope_cs, B, T, 1, R));
    PROF(PROF_ATTN_PROJ,
         be->matmul_backward(be, rs->dtmp, gw->wk_rope, rs->dkrope, a->ln1, lw->wk_rope, N, C, R));
    PROF(PROF_RESIDUAL, be->add(be, rs->dln, rs->dln, rs->dtmp, (size_t)N * C));
    PROF(PROF_ATTN, be->copy_block(be, rs->dkvb, KVB, rs->dk, D, N * H, NOPE, 0));
    PROF(PROF_ATTN, be->copy_block(be, rs->dkvb + NOPE, KVB, rs->dv, DV, N * H, DV, 0));
    PROF(PROF_ATTN_PROJ, be->matmul_backward(be, rs->dlatn, gw->wkv_b, rs->dkvb, a->latn, lw->wkv_b,
                                             N, KR, H * KVB));
    PROF(PROF_NORM, be->rmsnorm_backward(be, rs->dlat, gw->kv_a_norm, rs->dlatn, a->lat,
                                         lw->kv_a_norm, a->rstd_lat, N, KR));
    PROF(PROF_ATTN_PROJ,
         be->matmul_backward(be, rs->dtmp, gw->wkv_a, rs->dlat, a->ln1, lw->wkv_a, N, C, KR));
    PROF(PROF_RESIDUAL, be->add(be, rs->dln, rs->dln, rs->dtmp, (size_t)N * C));
}

/* ---- latent attention's decoding: the cache holds the latent ------------------------------- */

size_t mla_decode_floats(const Config *c, int N) {
    if (c->attention != MOE_ATTN_MLA) return 0;
    const int W = c->mla_kv_rank + c->mla_rope_dim;
    int M = c->mla_nope_dim > c->mla_kv_rank ? c->mla_nope_dim : c->mla_kv_rank;
    M = c->mla_v_dim > M ? c->mla_v_dim : M;
    return (size_t)N * (2 * (size_t)c->n_head * W + 2 * (size_t)M);
}

/* The new tokens' cache rows [latn | krope] (N, W) from the forward's latent and rotated key,
 * into row rows[n] of cache (W = kv_rank + rope_dim); ent is (N, W) of workspace. */
static void mla_cache_append(Model *m, const BlockActs *a, float *cache, const int *rows, int N,
                             float *ent) {
    const Backend *be = m->be;
    const int KR = m->cfg.mla_kv_rank, R = m->cfg.mla_rope_dim, W = KR + R;
    PROF(PROF_ATTN, be->copy_block(be, ent, W, a->latn, KR, N, KR, 0));
    PROF(PROF_ATTN, be->copy_block(be, ent + KR, W, a->krope, R, N, R, 0));
    PROF(PROF_ATTN, be->permute_rows(be, cache, ent, rows, N, W, 0));
}

/* The queries absorbed into the latent (qp, (N, H, W)): head h's q_nope Wuk_h, Wuk_h its key
 * rows of wkv_b (nope_dim, kv_rank), then its rotated part; scaled so that the op's 1 / sqrt(W)
 * is the model's 1 / sqrt(D). t1, t2: (N, M) of workspace. */
static void mla_absorb_queries(Model *m, const BlockActs *a, const LayerView *lw, int N, float *qp,
                               float *t1, float *t2) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int H = c->n_head, D = config_head_dim(c), KR = c->mla_kv_rank, R = c->mla_rope_dim;
    const int NOPE = c->mla_nope_dim, KVB = NOPE + c->mla_v_dim, W = KR + R;
    for (int h = 0; h < H; h++) {
        PROF(PROF_ATTN, be->copy_block(be, t1, NOPE, a->q + (size_t)h * D, H * D, N, NOPE, 0));
        PROF(PROF_ATTN_PROJ, be->matmul_backward(be, t2, NULL, t1, NULL,
                                                 lw->wkv_b + (size_t)h * KVB * KR, N, KR, NOPE));
        PROF(PROF_ATTN, be->copy_block(be, qp + (size_t)h * W, H * W, t2, KR, N, KR, 0));
    }
    PROF(PROF_ATTN, be->copy_block(be, qp + KR, W, a->q + NOPE, D, N * H, R, 0));
    PROF(PROF_ATTN, be->scale(be, qp, sqrtf((float)W / (float)D), (size_t)N * H * W));
}

/* A decoding step of latent attention, absorbed: the new tokens' queries, latent and rotated
 * key; their cache rows appended; each head's query taken into the latent space (its key
 * up-projection absorbed), so that the attention runs over the cached rows themselves as one
 * key-value head of W = kv_rank + rope_dim channels (keys and values both: a head's output is
 * then sum_j p_j latn_j in its first kv_rank channels); each head's value is that output times
 * its value up-projection (absorbed on the output side). Exact: the same sums regrouped. */
static void mla_decode(Model *m, int l, int N, const KvStep *kv) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int C = c->d_model, H = c->n_head, KR = c->mla_kv_rank, R = c->mla_rope_dim;
    const int NOPE = c->mla_nope_dim, DV = c->mla_v_dim, KVB = NOPE + DV, W = KR + R;
    const LayerView *lw = &m->w.layers[l];
    BlockActs *a = &m->state.blocks[l];
    float *qp = kv->work, *op = qp + (size_t)N * H * W, *t1 = op + (size_t)N * H * W;
    float *t2 = t1 + (mla_decode_floats(c, N) - 2 * (size_t)N * H * W) / 2;
    mla_queries(m, a, lw, N, 1, kv);
    PROF(PROF_ATTN_PROJ, be->matmul_forward(be, a->lat, a->ln1, lw->wkv_a, N, C, KR));
    PROF(PROF_NORM, be->rmsnorm_forward(be, a->latn, a->rstd_lat, a->lat, lw->kv_a_norm, N, KR));
    PROF(PROF_ATTN_PROJ, be->matmul_forward(be, a->krope, a->ln1, lw->wk_rope, N, C, R));
    rope_rows(m, a->krope, N, 1, 1, R, kv);
    mla_cache_append(m, a, kv->k[l], kv->rows, N, op);
    mla_absorb_queries(m, a, lw, N, qp, t1, t2);
    PROF(PROF_ATTN, be->attention_decode(be, op, kv->att, qp, kv->k[l], kv->k[l], kv->rows, N, H, 1,
                                         W, W, kv->Tc));
    for (int h = 0; h < H; h++) {
        PROF(PROF_ATTN, be->copy_block(be, t1, KR, op + (size_t)h * W, H * W, N, KR, 0));
        PROF(PROF_ATTN_PROJ,
             be->matmul_forward(be, t2, t1, lw->wkv_b + ((size_t)h * KVB + NOPE) * KR, N, KR, DV));
        PROF(PROF_ATTN, be->copy_block(be, a->atty + (size_t)h * DV, H * DV, t2, DV, N, DV, 0));
    }
}

void mla_prefill_cache(Model *m, int l, float *cache, const int *rows, int N, float *work) {
    mla_cache_append(m, &m->state.blocks[l], cache, rows, N, work);
}

/* ---- the sublayer ------------------------------------------------------------------------ */

void attn_block_forward(Model *m, int l, int B, int T, const KvStep *kv) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int tp = model_tp(m), H = c->n_head / tp, Hkv = config_kv_heads(c) / tp;
    const int D = config_head_dim(c);
    const int Dv = config_value_dim(c), N = B * T;
    const LayerView *lw = &m->w.layers[l];
    BlockActs *a = &rs->blocks[l];
    if (kv && c->attention == MOE_ATTN_MLA) {
        mla_decode(m, l, N, kv);
        return;
    }
    if (c->attention == MOE_ATTN_MLA) {
        mla_queries(m, a, lw, B, T, kv);
        mla_keys_values(m, a, lw, B, T, kv);
    } else {
        mha_qkv_forward(m, a, lw, N);
        rope_rows(m, a->q, B, T, H, D, kv);
        rope_rows(m, a->k, B, T, Hkv, D, kv);
    }
    if (kv) { /* each new token's key and value appended to its sequence's cache, then the
                 attention over the whole cache */
        PROF(PROF_ATTN, be->permute_rows(be, kv->k[l], a->k, kv->rows, N, Hkv * D, 0));
        PROF(PROF_ATTN, be->permute_rows(be, kv->v[l], a->v, kv->rows, N, Hkv * Dv, 0));
        PROF(PROF_ATTN, be->attention_decode(be, a->atty, kv->att, a->q, kv->k[l], kv->v[l],
                                             kv->rows, N, H, Hkv, D, Dv, kv->Tc));
    } else {
        PROF(PROF_ATTN,
             be->attention_forward(be, a->atty, a->att, a->q, a->k, a->v, B, T, H, Hkv, D, Dv));
    }
}

void attn_block_backward(Model *m, int l) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int tp = model_tp(m), H = c->n_head / tp, Hkv = config_kv_heads(c) / tp;
    const int D = config_head_dim(c);
    const int Dv = config_value_dim(c), B = rs->B_last, T = rs->T_last, N = rs->N_last;
    const LayerView *lw = &m->w.layers[l];
    LayerView *gw = &m->g.layers[l];
    const BlockActs *a = &rs->blocks[l];
    PROF(PROF_ATTN,
         be->attention_backward(be, rs->dq, rs->dk, rs->dv, rs->att_ws, rs->datty, a->att, a->q,
                                a->k, a->v, B, T, H, Hkv, D, Dv, rs->n_att_ws));
    if (c->attention == MOE_ATTN_MLA) {
        mla_queries_backward(m, a, lw, gw);
        mla_keys_values_backward(m, a, lw, gw);
        return;
    }
    PROF(PROF_ROPE, be->rope_backward(be, rs->dq, rs->rope_cs, B, T, H, D));
    PROF(PROF_ROPE, be->rope_backward(be, rs->dk, rs->rope_cs, B, T, Hkv, D));
    mha_qkv_backward(m, a, lw, gw, N);
}
