/*
 * tp_vocab.c: the embedding, the head and the cross-entropy with the vocabulary split over the
 * tensor-parallel group (tp.h).
 *
 * Rank r holds the logits z_r (N, Vr) of its Vr = V / tp columns. Its cross-entropy over them
 * with target t' (the row's target where r holds it, else column 0) gives the log-sum-exp of its
 * columns, lse_r = loss_r + z_r[t'], and its probabilities p_r. A row's log-sum-exp over the
 * whole vocabulary is the log-sum-exp of the lse_r, which is again a cross-entropy, over the tp
 * values of a row (all-gathered: N floats a rank): with the holder h of the target as target it
 * gives LSE - lse_h, and the row's loss is that plus the holder's loss_h = lse_h - z_t; its
 * probabilities are w_r = exp(lse_r - LSE), each rank's share of the row's probability. The
 * gradient of rank r's logits is then w_r p_r - [j = t], the one-process softmax's columns of r.
 * Every step is an op of the backend (the cross-entropy, gathers of single floats with
 * permute_rows, a broadcast as a product with a column of ones), so it runs on each of them.
 */
#include "model/tp.h"

#include <string.h>

#include "model/mtp.h"
#include "model/profile.h"

/* This rank's first row of the vocabulary and its row count. */
static int vocab_share(const Model *m, int *v0) {
    const int Vr = m->cfg.vocab / model_tp(m);
    *v0 = m->dist->tp_rank * Vr;
    return Vr;
}

/* The tokens of this rank's rows of the vocabulary, as rows of its share, and where they sit. */
static void embed_rows(Model *m, const int *tokens, int N) {
    RunState *rs = &m->state;
    int v0, Vr = vocab_share(m, &v0), k = 0;
    int *ids = rs->tp_ints, *rows = ids + N;
    for (int i = 0; i < N; i++)
        if (tokens[i] >= v0 && tokens[i] < v0 + Vr) ids[k] = tokens[i] - v0, rows[k++] = i;
    rs->tp_k = k;
    m->be->to_device(m->be, rs->tp_ids, ids, (size_t)k * sizeof(int));
    m->be->to_device(m->be, rs->tp_rows, rows, (size_t)k * sizeof(int));
}

void tp_embed_forward(Model *m, const int *tokens, int N) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int C = m->cfg.d_model;
    embed_rows(m, tokens, N);
    /* the k rows looked up, then put in their places of a zero (N, C): the rank's partial sum */
    PROF(PROF_EMBED, be->embed_forward(be, rs->tp_gath, rs->tp_ids, m->w.tok_emb, rs->tp_k, C));
    be->zero(be, rs->tp_part, (size_t)N * C * sizeof(float));
    PROF(PROF_EMBED, be->permute_rows(be, rs->tp_part, rs->tp_gath, rs->tp_rows, rs->tp_k, C, 0));
    tp_sum_into(m, rs->resid[0], rs->tp_part, N, C);
}

void tp_embed_backward(Model *m, const float *dx, int N) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int C = m->cfg.d_model;
    int v0, Vr = vocab_share(m, &v0);
    const float *all = tp_gather_grad(m, dx, N, C); /* every row's gradient, in tp_gath */
    PROF(PROF_EMBED, be->permute_rows(be, rs->tp_part, all, rs->tp_rows, rs->tp_k, C, 1));
    PROF(PROF_EMBED,
         be->embed_backward(be, m->g.tok_emb, rs->tp_part, rs->tp_ids, rs->tp_k, C, Vr));
}

/* Each row's target in this rank's columns, its holder, and their places (see model.h). */
static void target_places(Model *m, const int *targets, int N) {
    RunState *rs = &m->state;
    int v0, Vr = vocab_share(m, &v0);
    int *target = rs->tp_ints, *holder = target + N, *at = holder + N, *pick = at + N;
    for (int i = 0; i < N; i++) {
        const int mine = targets[i] >= v0 && targets[i] < v0 + Vr;
        target[i] = mine ? targets[i] - v0 : 0;
        holder[i] = targets[i] / Vr;
        at[i] = i * Vr + target[i];
        pick[i] = holder[i] * N + i;
        rs->tp_floats[i] = mine ? 0.0f : 1.0f;
    }
    const Backend *be = m->be;
    be->to_device(be, rs->tp_target, target, (size_t)N * sizeof(int));
    be->to_device(be, rs->tp_holder, holder, (size_t)N * sizeof(int));
    be->to_device(be, rs->tp_at, at, (size_t)N * sizeof(int));
    be->to_device(be, rs->tp_pick, pick, (size_t)N * sizeof(int));
    be->to_device(be, rs->tp_other, rs->tp_floats, (size_t)N * sizeof(float));
}

/* The cross-entropy of every row over the whole vocabulary from this rank's logits (see the
 * top); this rank's n rows of it into losses. */
static void tp_crossentropy(Model *m, const int *targets, int N) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int tp = model_tp(m), r = m->dist->tp_rank;
    int v0, Vr = vocab_share(m, &v0), n, row0;
    tp_rows(m, N, &n, &row0);
    float *lse = rs->tp_lse + (size_t)r * N, *loss = rs->tp_loss + (size_t)r * N;
    target_places(m, targets, N);
    /* z_r[t'] before the cross-entropy turns the logits into p_r in place */
    PROF(PROF_LOSS, be->permute_rows(be, rs->tp_a, rs->logits, rs->tp_at, N, 1, 1));
    PROF(PROF_LOSS,
         be->crossentropy_forward(be, loss, rs->logits, rs->logits, rs->tp_target, N, Vr));
    PROF(PROF_LOSS, be->add(be, lse, loss, rs->tp_a, (size_t)N));
    tp_gather_rows(m, rs->tp_lse, tp, N); /* (tp, N): rank p's N floats are its "row" */
    tp_gather_rows(m, rs->tp_loss, tp, N);
    for (int p = 0; p < tp; p++) /* (N, tp): a row's tp log-sum-exps side by side */
        PROF(PROF_LOSS,
             be->copy_block(be, rs->tp_lse_t + p, tp, rs->tp_lse + (size_t)p * N, 1, N, 1, 0));
    /* LSE - lse_h, and w_r; then + loss_h = lse_h - z_t */
    PROF(PROF_LOSS,
         be->crossentropy_forward(be, rs->tp_b, rs->tp_share, rs->tp_lse_t, rs->tp_holder, N, tp));
    PROF(PROF_LOSS, be->permute_rows(be, rs->tp_a, rs->tp_loss, rs->tp_pick, N, 1, 1));
    PROF(PROF_LOSS, be->add(be, rs->tp_b, rs->tp_b, rs->tp_a, (size_t)N));
    PROF(PROF_LOSS, be->copy_block(be, rs->losses, 1, rs->tp_b + row0, 1, n, 1, 0));
}

void tp_head_forward(Model *m, const int *targets, int N) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int C = m->cfg.d_model;
    int v0, Vr = vocab_share(m, &v0);
    tp_gather_rows(m, rs->lnf, N, C);
    PROF(PROF_HEAD, be->matmul_forward(be, rs->logits, rs->lnf, head_weights(m), N, C, Vr));
    if (targets) tp_crossentropy(m, targets, N);
}

const float *tp_head_backward(Model *m, float scale, int N) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int C = m->cfg.d_model, tp = model_tp(m);
    int v0, Vr = vocab_share(m, &v0);
    /* w_r broadcast over the rank's columns (w_r (N, 1) times a row of ones), times p_r */
    PROF(PROF_LOSS, be->copy_block(be, rs->tp_a, 1, rs->tp_share + m->dist->tp_rank, tp, N, 1, 0));
    PROF(PROF_LOSS, be->matmul_forward(be, rs->dlogits, rs->tp_a, rs->tp_ones, N, 1, Vr));
    PROF(PROF_LOSS, be->mul(be, rs->dlogits, rs->dlogits, rs->logits, (size_t)N * Vr));
    /* scale (w_r p_r - [j = t']), and + scale back at column 0 of the rows another rank's
     * target is in (their t' = 0 is no target) */
    PROF(PROF_LOSS,
         be->crossentropy_backward(be, rs->dlogits, rs->dlogits, rs->tp_target, scale, N, Vr));
    PROF(PROF_LOSS, be->copy_block(be, rs->tp_a, 1, rs->tp_other, 1, N, 1, 0));
    PROF(PROF_LOSS, be->scale(be, rs->tp_a, scale, (size_t)N));
    PROF(PROF_LOSS, be->copy_block(be, rs->dlogits, Vr, rs->tp_a, 1, N, 1, 1));
    PROF(PROF_HEAD, be->matmul_backward(be, rs->tp_part, head_grads(m), rs->dlogits, rs->lnf,
                                        head_weights(m), N, C, Vr));
    return tp_sum_rows(m, rs->tp_part, N, C);
}
