/*
 * block.c: a transformer block (block.h): the attention sublayer (attn_block.c) and the
 * feed-forward one, a dense SwiGLU or the MoE block (moe_block.c) with its shared experts, each
 * behind its norm and on the residual stream; forward and backward. Orchestration only, as
 * model.c: every buffer is the backend's and every piece of arithmetic one of its ops.
 */
#include "model/block.h"

#include "model/attn_block.h"
#include "model/profile.h"
#include "model/tp.h"

static MoeWeights moe_weights(const LayerView *lw) {
    return (MoeWeights){.router = lw->router, .Wg = lw->e_gate, .Wu = lw->e_up, .Wd = lw->e_down};
}

/* ---- forward ------------------------------------------------------------------------------ */

/* The MoE blocks' context of one call on sequences of T tokens: while training, the
 * exploration stream (when the spec draws any noise), training's capacity and the routing
 * tape; else no noise and evaluation's capacity. */
static MoeCtx block_ctx(Model *m, const StepCtx *ctx, int T) {
    const MoeSpec *s = &m->spec;
    const int training = ctx && ctx->training;
    MoeCtx x;
    if (training) {
        const int draws = s->jitter > 0.0f || s->noise > 0.0f || s->second_expert_random;
        moe_ctx_train(&x, s, T, draws ? &m->router_rng : NULL);
    } else {
        moe_ctx_eval(&x, s, T);
    }
    x.dist = m->dist;
    x.tape = training ? ctx->route_tape : NULL; /* training's forward passes only */
    x.micro = training ? ctx->micro : 0;
    return x;
}

/* The feed-forward sublayer of block l on ln2 (this rank's n rows at row0 of a->ln2's N) into
 * fo (n, C): the MoE block on the rank's rows, its shared experts and the dense SwiGLU on all N
 * rows (the rows gathered, their hidden channels this rank's share, the output's partial sum
 * summed back into the rank's rows: tp.h). */
static void ffn_forward(Model *m, int l, float *fo, int B, int T, const KvStep *kv,
                        const StepCtx *ctx) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int tp = model_tp(m), C = c->d_model, F = c->d_ff / tp, N = B * T;
    const LayerView *lw = &m->w.layers[l];
    BlockActs *a = &rs->blocks[l];
    int n, row0;
    tp_rows(m, N, &n, &row0);
    if (a->moe) {
        MoeWeights wt = moe_weights(lw);
        if (m->spec.balance == MOE_BALANCE_AUX_FREE) wt.bias = a->router_bias;
        wt.source = m->expert_source;
        wt.layer = l;
        MoeCtx x = block_ctx(m, ctx, T);
        if (kv) x.capacity_factor = 0.0f; /* decoding keeps every token (dropless) */
        moe_block_forward(be, fo, a->moe, a->ln2 + (size_t)row0 * C, &wt, &m->spec, &x, n);
        if (a->sg) { /* shared experts: one dense SwiGLU, weight 1; dln is free scratch here */
            const int Fs = c->num_shared * m->spec.d_expert / tp;
            tp_gather_rows(m, a->ln2, N, C);
            PROF(PROF_DENSE_FFN, be->matmul_forward(be, a->sg, a->ln2, lw->s_gate, N, C, Fs));
            PROF(PROF_DENSE_FFN, be->matmul_forward(be, a->su, a->ln2, lw->s_up, N, C, Fs));
            PROF(PROF_SWIGLU, be->swiglu_forward(be, a->sh, a->sg, a->su, N, Fs));
            float *so = tp_partial(m, rs->dln);
            PROF(PROF_DENSE_FFN, be->matmul_forward(be, so, a->sh, lw->s_down, N, Fs, C));
            tp_sum_into(m, rs->dln, so, N, C);
            PROF(PROF_RESIDUAL, be->add(be, fo, fo, rs->dln, (size_t)n * C));
        }
        return;
    }
    tp_gather_rows(m, a->ln2, N, C);
    PROF(PROF_DENSE_FFN, be->matmul_forward(be, a->fg, a->ln2, lw->w_gate, N, C, F));
    PROF(PROF_DENSE_FFN, be->matmul_forward(be, a->fu, a->ln2, lw->w_up, N, C, F));
    PROF(PROF_SWIGLU, be->swiglu_forward(be, a->fh, a->fg, a->fu, N, F));
    float *po = tp_partial(m, fo);
    PROF(PROF_DENSE_FFN, be->matmul_forward(be, po, a->fh, lw->w_down, N, F, C));
    tp_sum_into(m, fo, po, N, C);
}

/* Block l over B sequences of T tokens, or with kv (a decoding step: B sequences of one new
 * token each, T 1) over the new tokens against kv's cache of the earlier ones. in and out are
 * this rank's rows of the residual stream (all N of them but under tensor parallelism). */
void block_forward(Model *m, int l, float *out, const float *in, int B, int T, const KvStep *kv,
                   const StepCtx *ctx) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int C = c->d_model, H = c->n_head / model_tp(m), N = B * T;
    const LayerView *lw = &m->w.layers[l];
    BlockActs *a = &rs->blocks[l];
    int n, row0;
    tp_rows(m, N, &n, &row0);

    /* attention branch: resid_mid = in + attention(rmsnorm(in)) wo^T (attn_block.c), the norm
     * on this rank's rows, gathered to all N for the rank's heads */
    PROF(PROF_NORM,
         be->rmsnorm_forward(be, a->ln1 + (size_t)row0 * C, a->rstd1, in, lw->attn_norm, n, C));
    tp_gather_rows(m, a->ln1, N, C);
    attn_block_forward(m, l, B, T, kv);
    /* dtmp is free scratch during the forward pass. Sandwich norms: the sublayer's output
     * goes to attn_out, and its norm into dtmp */
    float *ao = a->attn_out ? a->attn_out : rs->dtmp, *po = tp_partial(m, ao);
    PROF(PROF_ATTN_PROJ,
         be->matmul_forward(be, po, a->atty, lw->wo, N, H * config_value_dim(c), C));
    tp_sum_into(m, ao, po, N, C);
    if (a->attn_out)
        PROF(PROF_NORM,
             be->rmsnorm_forward(be, rs->dtmp, a->rstd_attn_out, ao, lw->attn_post_norm, n, C));
    PROF(PROF_RESIDUAL, be->add(be, a->resid_mid, in, rs->dtmp, (size_t)n * C));

    /* feed-forward branch: out = resid_mid + FFN(rmsnorm(resid_mid)), the FFN's output normed
     * again with sandwich norms (from ffn_out into dtmp) */
    float *fo = a->ffn_out ? a->ffn_out : rs->dtmp;
    PROF(PROF_NORM, be->rmsnorm_forward(be, a->ln2 + (size_t)row0 * C, a->rstd2, a->resid_mid,
                                        lw->ffn_norm, n, C));
    ffn_forward(m, l, fo, B, T, kv, ctx);
    if (a->ffn_out)
        PROF(PROF_NORM,
             be->rmsnorm_forward(be, rs->dtmp, a->rstd_ffn_out, fo, lw->ffn_post_norm, n, C));
    PROF(PROF_RESIDUAL, be->add(be, out, a->resid_mid, rs->dtmp, (size_t)n * C));
}

/* ---- backward ----------------------------------------------------------------------------- */

/* A SwiGLU's backward over x (N, C), the input both its products read: w its weights (gate,
 * up, down) and g their gradients (accumulated), act its activations (gate, up, hidden; F
 * channels), d their gradients' scratch, dy (N, C) the gradient of its output. The gradient of
 * x into out: written, or with accumulate added to it (rs->dtmp the scratch of either). */
static void swiglu_input_grad(Model *m, float *out, int accumulate, const float *dy, const float *x,
                              const float *const w[3], float *const g[3], const float *const act[3],
                              float *const d[3], int N, int F) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int C = m->cfg.d_model;
    float *gate = accumulate ? rs->dtmp : out;
    PROF(PROF_DENSE_FFN, be->matmul_backward(be, d[2], g[2], dy, act[2], w[2], N, F, C));
    PROF(PROF_SWIGLU, be->swiglu_backward(be, d[0], d[1], d[2], act[0], act[1], N, F));
    PROF(PROF_DENSE_FFN, be->matmul_backward(be, gate, g[0], d[0], x, w[0], N, C, F));
    if (accumulate) PROF(PROF_RESIDUAL, be->add(be, out, out, gate, (size_t)N * C));
    PROF(PROF_DENSE_FFN, be->matmul_backward(be, rs->dtmp, g[1], d[1], x, w[1], N, C, F));
    PROF(PROF_RESIDUAL, be->add(be, out, out, rs->dtmp, (size_t)N * C));
}

/* The shared experts' part of dln (this rank's rows, added): dffn the gradient of the block's
 * output, all N rows of it under tensor parallelism, where the experts' input gradient is a
 * partial sum over the rank's channels (into tp_part, then summed over the group). */
static void shared_backward(Model *m, const BlockActs *a, const LayerView *lw, LayerView *gw,
                            const float *dffn) {
    RunState *rs = &m->state;
    const int tp = model_tp(m), C = m->cfg.d_model, N = rs->N_last;
    const int Fs = m->cfg.num_shared * m->spec.d_expert / tp;
    const float *const w[3] = {lw->s_gate, lw->s_up, lw->s_down};
    float *const g[3] = {gw->s_gate, gw->s_up, gw->s_down};
    const float *const act[3] = {a->sg, a->su, a->sh};
    float *const d[3] = {rs->dsg, rs->dsu, rs->dsh};
    if (tp == 1) {
        swiglu_input_grad(m, rs->dln, 1, dffn, a->ln2, w, g, act, d, N, Fs);
        return;
    }
    swiglu_input_grad(m, rs->tp_part, 0, dffn, a->ln2, w, g, act, d, N, Fs);
    const float *mine = tp_sum_rows(m, rs->tp_part, N, C);
    PROF(PROF_RESIDUAL, m->be->add(m->be, rs->dln, rs->dln, mine, (size_t)(N / tp) * C));
}

/* The gradient of block l's feed-forward input (ln2) from dffn (this rank's rows) that of its
 * output: the MoE block and its shared experts, or the dense SwiGLU; returns where it is, this
 * rank's rows (rs->dln, or under tensor parallelism the dense SwiGLU's summed rows). */
static const float *ffn_backward(Model *m, int l, const float *dffn, float loss_scale,
                                 const StepCtx *ctx) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int tp = model_tp(m), C = c->d_model, F = c->d_ff / tp, T = rs->T_last, N = rs->N_last;
    const LayerView *lw = &m->w.layers[l];
    LayerView *gw = &m->g.layers[l];
    BlockActs *a = &rs->blocks[l];
    int n, row0;
    tp_rows(m, N, &n, &row0);
    if (a->moe) {
        MoeWeights wt = moe_weights(lw);
        MoeGrads gr = {.router = gw->router, .Wg = gw->e_gate, .Wu = gw->e_up, .Wd = gw->e_down};
        const MoeCtx x = block_ctx(m, ctx, T);
        moe_block_backward(be, rs->dln, &gr, dffn, a->moe, a->ln2 + (size_t)row0 * C, &wt, &m->spec,
                           &x, &rs->moe_scratch, loss_scale);
        if (a->sg) shared_backward(m, a, lw, gw, tp_gather_grad(m, dffn, N, C));
        return rs->dln;
    }
    const float *dy = tp_gather_grad(m, dffn, N, C); /* all N rows: the channels are split */
    const float *const w[3] = {lw->w_gate, lw->w_up, lw->w_down};
    float *const g[3] = {gw->w_gate, gw->w_up, gw->w_down};
    const float *const act[3] = {a->fg, a->fu, a->fh};
    float *const d[3] = {rs->dfg, rs->dfu, rs->dfh};
    swiglu_input_grad(m, rs->dln, 0, dy, a->ln2, w, g, act, d, N, F);
    return tp_sum_rows(m, rs->dln, N, C);
}

/* dx = d/d(in) of block l, given dout the gradient of its output (this rank's rows, (n, C)). dx
 * may be dout itself: dout is last read before dmid is formed, and dx is written at the very
 * end. */
void block_backward(Model *m, int l, float *dx, const float *dout, const float *in,
                    float loss_scale, const StepCtx *ctx) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int C = c->d_model, H = c->n_head / model_tp(m), N = rs->N_last;
    const LayerView *lw = &m->w.layers[l];
    LayerView *gw = &m->g.layers[l];
    BlockActs *a = &rs->blocks[l];
    int n, row0;
    tp_rows(m, N, &n, &row0);

    /* out = resid_mid + post(FFN(ln2)), post the output norm of sandwich norms (else none):
     * dffn, the gradient of the FFN's output, is dout or, through the norm, dmid (free until
     * the FFN's backward is done) */
    const float *dffn = dout;
    if (a->ffn_out) {
        PROF(PROF_NORM, be->rmsnorm_backward(be, rs->dmid, gw->ffn_post_norm, dout, a->ffn_out,
                                             lw->ffn_post_norm, a->rstd_ffn_out, n, C));
        dffn = rs->dmid;
    }
    /* the FFN's gradient of ln2 */
    const float *dln2 = ffn_backward(m, l, dffn, loss_scale, ctx);
    /* ln2 = rmsnorm(resid_mid); dmid = dout (residual path) + d(ln2)/d(resid_mid) */
    PROF(PROF_NORM, be->rmsnorm_backward(be, rs->dtmp, gw->ffn_norm, dln2, a->resid_mid,
                                         lw->ffn_norm, a->rstd2, n, C));
    PROF(PROF_RESIDUAL, be->add(be, rs->dmid, dout, rs->dtmp, (size_t)n * C));

    /* resid_mid = in + post(atty wo^T): the gradient of the product's output is dmid, or
     * through the output norm of sandwich norms, dtmp (free here); gathered to all N rows
     * under tensor parallelism (the heads are split) */
    const float *dao = rs->dmid;
    if (a->attn_out) {
        PROF(PROF_NORM,
             be->rmsnorm_backward(be, rs->dtmp, gw->attn_post_norm, rs->dmid, a->attn_out,
                                  lw->attn_post_norm, a->rstd_attn_out, n, C));
        dao = rs->dtmp;
    }
    dao = tp_gather_grad(m, dao, N, C);
    PROF(PROF_ATTN_PROJ, be->matmul_backward(be, rs->datty, gw->wo, dao, a->atty, lw->wo, N,
                                             H * config_value_dim(c), C));
    attn_block_backward(m, l); /* from datty into dln (all N rows: this rank's heads' part) */
    const float *dln1 = tp_sum_rows(m, rs->dln, N, C);
    /* ln1 = rmsnorm(in); dx = dmid (residual path) + d(ln1)/d(in) */
    PROF(PROF_NORM, be->rmsnorm_backward(be, rs->dtmp, gw->attn_norm, dln1, in, lw->attn_norm,
                                         a->rstd1, n, C));
    PROF(PROF_RESIDUAL, be->add(be, dx, rs->dmid, rs->dtmp, (size_t)n * C));
}
