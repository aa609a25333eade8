/*
 * mtp.c: multi-token prediction's modules (mtp.h): their tokens, forward, losses and backward,
 * on the trunk's blocks and head. Orchestration only, as model.c: every buffer is the backend's
 * and every piece of arithmetic one of its ops.
 */
#include "model/mtp.h"

#include <math.h>
#include <stdlib.h>

#include "base/util.h"
#include "model/profile.h"

/* mtp_init: multi-token prediction's constant rows (mtp_cat: hn to row 2n of cat, en to row
 * 2n + 1) and, when its modules' blocks are MoE blocks, where those write their losses and
 * routing records: a place of their own, in the workspace, that the step's copy never reads */
void mtp_init(Model *m, int B, int T) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int N = B * T, L = c->n_layer, D = c->mtp_depth;
    int *rows = (int *)malloc_check(2 * (size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) rows[n] = 2 * n, rows[N + n] = 2 * n + 1;
    be->to_device(be, rs->mtp_cat, rows, 2 * (size_t)N * sizeof(int));
    free(rows);
    if (!config_is_moe_layer(c, L)) return;
    const size_t rb = route_record_bytes(c->num_experts);
    rs->mtp_moe_rec = (char *)be->alloc(be, (size_t)D * (2 * sizeof(float) + rb));
    for (int k = 0; k < D; k++) {
        MoeActs *a = rs->blocks[L + k].moe;
        a->losses = (float *)rs->mtp_moe_rec + 2 * k;
        a->stats_rec = rs->mtp_moe_rec + (size_t)D * 2 * sizeof(float) + k * rb;
    }
}

/* ---- forward ------------------------------------------------------------------------------ */

/* Module k's tokens for B windows of T: tok, the token k ahead of each position (0 past the
 * window's end), and the positions with a target t[i + k + 1] in the window, rows and tgt. */
static void mtp_tokens(Model *m, MtpActs *a, const int *inputs, const int *targets, int B, int T,
                       int k) {
    const int N = B * T;
    int *tok = m->state.mtp_host, *rows = tok + N, *tgt = rows + N, j = 0;
    for (int n = 0; n < N; n++) {
        const int ahead = n % T + k < T; /* inputs[n + k] and targets[n + k] are the window's */
        tok[n] = ahead ? inputs[n + k] : 0;
        if (ahead) rows[j] = n, tgt[j++] = targets[n + k];
    }
    m->be->to_device(m->be, a->tok, tok, (size_t)N * sizeof(int));
    m->be->to_device(m->be, a->rows, rows, (size_t)j * sizeof(int));
    m->be->to_device(m->be, a->tgt, tgt, (size_t)j * sizeof(int));
}

/* The rows 2n + 1 of mtp_cat: they follow the 2n of every row the model holds, whatever the
 * B x T of a pass */
static const int *mtp_odd_rows(const RunState *rs) {
    return rs->mtp_cat + (size_t)rs->B * rs->T;
}

/* Module k's block input of N rows, a->in = [RMSNorm(h); RMSNorm(Emb(a->tok))] eh_proj^T. The
 * modules' projections are timed with the head. */
void mtp_module_input(Model *m, int k, const float *h, int N) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int C = m->cfg.d_model;
    const LayerView *lw = &m->w.layers[m->cfg.n_layer + k - 1];
    MtpActs *a = &rs->mtp[k - 1];
    PROF(PROF_NORM, be->rmsnorm_forward(be, a->hn, a->rstd_h, h, lw->mtp_hnorm, N, C));
    PROF(PROF_EMBED, be->embed_forward(be, a->emb, a->tok, m->w.tok_emb, N, C));
    PROF(PROF_NORM, be->rmsnorm_forward(be, a->en, a->rstd_e, a->emb, lw->mtp_enorm, N, C));
    /* cat's rows 2n and 2n + 1 are hn's and en's row n: each row of (N, 2 C) the two side by
     * side */
    PROF(PROF_HEAD, be->permute_rows(be, a->cat, a->hn, rs->mtp_cat, N, C, 0));
    PROF(PROF_HEAD, be->permute_rows(be, a->cat, a->en, mtp_odd_rows(rs), N, C, 0));
    PROF(PROF_HEAD, be->matmul_forward(be, a->in, a->cat, lw->mtp_proj, N, 2 * C, C));
}

/* Module k: h' = [RMSNorm(h); RMSNorm(Emb(tok))] eh_proj^T, h the main trunk's last output or
 * module k - 1's; one block (layer L + k - 1); then on the positions with a target its norm, the
 * shared head and the cross-entropy. */
static void mtp_module_forward(Model *m, int k, int B, int T, const StepCtx *ctx) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int C = m->cfg.d_model, L = m->cfg.n_layer, Nk = B * (T - k);
    const LayerView *lw = &m->w.layers[L + k - 1];
    MtpActs *a = &rs->mtp[k - 1];
    mtp_module_input(m, k, k == 1 ? rs->resid[L] : rs->mtp[k - 2].out, B * T);
    block_forward(m, L + k - 1, a->out, a->in, B, T, NULL, ctx);
    PROF(PROF_HEAD, be->permute_rows(be, a->hc, a->out, a->rows, Nk, C, 1));
    PROF(PROF_NORM, be->rmsnorm_forward(be, a->lnc, a->rstdc, a->hc, lw->mtp_norm, Nk, C));
    PROF(PROF_HEAD,
         be->matmul_forward(be, a->logits, a->lnc, head_weights(m), Nk, C, m->cfg.vocab));
    PROF(PROF_LOSS,
         be->crossentropy_forward(be, a->losses, a->logits, a->logits, a->tgt, Nk, m->cfg.vocab));
}

/* The modules of a training forward with targets (else none: their losses NAN, and 0 is
 * returned): each one's loss sum into the step record's slot; unless the step reads them at its
 * end, their losses (Model.state.mtp_loss) and their part of the objective, mtp_coef / D times
 * the sum of each module's loss and its MoE block's balance and z terms. */
float mtp_forward(Model *m, const int *inputs, const int *targets, int B, int T, const StepCtx *ctx,
                  int slot) {
    RunState *rs = &m->state;
    const Config *c = &m->cfg;
    const int D = c->mtp_depth, L = c->n_layer;
    for (int k = 0; k < MOE_MTP_MAX; k++) rs->mtp_loss[k] = NAN;
    rs->mtp_ran = D > 0 && targets && ctx && ctx->training;
    if (!rs->mtp_ran) return 0.0f;
    if (T <= D)
        moe_fatal("model_forward: %d multi-token prediction modules need windows of more than %d "
                  "tokens, not %d",
                  D, D, T);
    StepCtx mc = *ctx;
    mc.route_tape = NULL; /* a routing tape holds the main blocks' choices */
    double *rec = rs->rec_mtp + (size_t)slot * D;
    for (int k = 1; k <= D; k++) {
        MoeActs *ma = rs->blocks[L + k - 1].moe;
        if (ma) ma->defer_losses = rs->defer_reads;
        mtp_tokens(m, &rs->mtp[k - 1], inputs, targets, B, T, k);
        mtp_module_forward(m, k, B, T, &mc);
        m->be->sum(m->be, rec + k - 1, rs->mtp[k - 1].losses, (size_t)B * (T - k));
    }
    if (rs->defer_reads) return NAN;
    double sums[MOE_MTP_MAX];
    m->be->to_host(m->be, sums, rec, (size_t)D * sizeof(double));
    float obj = 0.0f;
    for (int k = 1; k <= D; k++) {
        const MoeActs *ma = rs->blocks[L + k - 1].moe;
        rs->mtp_loss[k - 1] = (float)(sums[k - 1] / ((double)B * (T - k)));
        obj += rs->mtp_loss[k - 1];
        if (ma) obj += moe_balance_coef(&m->spec) * ma->aux_loss + c->z_coef * ma->z_loss;
    }
    return c->mtp_coef / (float)D * obj;
}
void model_read_mtp(const Model *m, int micro_batches, double *mtp) {
    const RunState *rs = &m->state;
    const int D = m->cfg.mtp_depth, B = rs->B_last, T = rs->T_last;
    const double *h = (const double *)(rs->rec_host + ((char *)rs->rec_mtp - (char *)rs->rec_loss));
    for (int k = 1; k <= D; k++) { /* mtp_forward's arithmetic, micro-batch by micro-batch */
        mtp[k - 1] = 0.0;
        for (int i = 0; i < micro_batches; i++)
            mtp[k - 1] += (float)(h[(size_t)i * D + k - 1] / ((double)B * (T - k)));
    }
}

/* ---- backward ----------------------------------------------------------------------------- */

/* Module k's backward, every loss term scaled by scale: dmtp holds the gradient of its output
 * from module k + 1 (0 for the last) on entry and that of its input h on return; the shared
 * head's and the embedding's gradients add into theirs. */
static void mtp_module_backward(Model *m, int k, float scale, const StepCtx *ctx) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int C = m->cfg.d_model, L = m->cfg.n_layer, N = rs->N_last;
    const int Nk = rs->B_last * (rs->T_last - k);
    const LayerView *lw = &m->w.layers[L + k - 1];
    LayerView *gw = &m->g.layers[L + k - 1];
    const MtpActs *a = &rs->mtp[k - 1];
    /* the loss (its mean over the Nk positions), the head, the output norm */
    PROF(PROF_LOSS, be->crossentropy_backward(be, rs->dlogits, a->logits, a->tgt, scale / (float)Nk,
                                              Nk, m->cfg.vocab));
    PROF(PROF_HEAD, be->matmul_backward(be, rs->dln, head_grads(m), rs->dlogits, a->lnc,
                                        head_weights(m), Nk, C, m->cfg.vocab));
    PROF(PROF_NORM, be->rmsnorm_backward(be, rs->dtmp, gw->mtp_norm, rs->dln, a->hc, lw->mtp_norm,
                                         a->rstdc, Nk, C));
    /* d out: those rows back at their positions (0 at the others), plus module k + 1's part */
    be->zero(be, rs->dmid, (size_t)N * C * sizeof(float));
    PROF(PROF_HEAD, be->permute_rows(be, rs->dmid, rs->dtmp, a->rows, Nk, C, 0));
    PROF(PROF_RESIDUAL, be->add(be, rs->dmtp, rs->dmtp, rs->dmid, (size_t)N * C));
    block_backward(m, L + k - 1, rs->dmtp, rs->dmtp, a->in, scale, ctx);
    /* in = cat eh_proj^T; cat's rows 2n and 2n + 1 back to hn's and en's row n */
    PROF(PROF_HEAD, be->matmul_backward(be, rs->dmtp_cat, gw->mtp_proj, rs->dmtp, a->cat,
                                        lw->mtp_proj, N, 2 * C, C));
    PROF(PROF_HEAD, be->permute_rows(be, rs->dln, rs->dmtp_cat, rs->mtp_cat, N, C, 1));
    PROF(PROF_HEAD, be->permute_rows(be, rs->dtmp, rs->dmtp_cat, mtp_odd_rows(rs), N, C, 1));
    PROF(PROF_NORM, be->rmsnorm_backward(be, rs->dmid, gw->mtp_enorm, rs->dtmp, a->emb,
                                         lw->mtp_enorm, a->rstd_e, N, C));
    PROF(PROF_EMBED, be->embed_backward(be, m->g.tok_emb, rs->dmid, a->tok, N, C, m->cfg.vocab));
    const float *h = k == 1 ? rs->resid[L] : rs->mtp[k - 2].out;
    PROF(PROF_NORM, be->rmsnorm_backward(be, rs->dmtp, gw->mtp_hnorm, rs->dln, h, lw->mtp_hnorm,
                                         a->rstd_h, N, C));
}

/* The modules' backward, the last first (each one's input is the output of the one before),
 * every term scaled by mtp_coef / D: dmtp ends as their gradient of the main trunk's last
 * output. Their blocks route without the tape, as in their forward. */
void mtp_backward(Model *m, float loss_scale, const StepCtx *ctx) {
    RunState *rs = &m->state;
    const int D = m->cfg.mtp_depth;
    StepCtx mc = ctx ? *ctx : (StepCtx){0};
    mc.route_tape = NULL;
    m->be->zero(m->be, rs->dmtp, (size_t)rs->N_last * m->cfg.d_model * sizeof(float));
    for (int k = D; k >= 1; k--)
        mtp_module_backward(m, k, loss_scale * m->cfg.mtp_coef / (float)D, &mc);
}
