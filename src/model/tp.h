/*
 * tp.h: tensor parallelism with sequence parallelism (dist.tp > 1), the pieces the blocks use.
 *
 * The tp ranks of one replica read the same micro-batch of N = B T rows. Between sublayers each
 * holds N / tp consecutive rows of the residual stream, rows [row0, row0 + n) (sequence
 * parallelism): the norms, the residual adds, the embedding, the head, the loss and the MoE
 * block run on those rows alone. A sublayer split by heads or hidden channels gathers its
 * normed input to all N rows (tp_gather_rows: an all-gather over DIST_TP), runs its share of
 * the heads or channels on them (column-parallel: its rows of wq, wk, wv, w_gate, w_up), and
 * its output projection (row-parallel: its columns of wo, w_down) gives a partial sum of all N
 * rows, which a reduce-scatter over DIST_TP sums and leaves with each rank its own rows
 * (tp_sum_rows). The backward swaps the two: the output's gradient is gathered, the input's
 * partial gradient reduce-scattered. With tp = 1 every function here is the identity: n = N,
 * row0 = 0, nothing moves.
 */
#ifndef MOE_MODEL_TP_H
#define MOE_MODEL_TP_H

#include "model/model.h"

/* The tensor-parallel ranks of m (dist.tp; 1 in one process). */
int model_tp(const Model *m);

/* This rank's rows of N: n = N / tp of them, from row0 = tp_rank n. */
void tp_rows(const Model *m, int N, int *n, int *row0);

/* x (N, C) holding this rank's rows in place (from row0): every rank's rows in place after. */
void tp_gather_rows(Model *m, float *x, int N, int C);

/* The rows of a gradient dy (n, C) of this rank gathered into rs->tp_gath (N, C), which is
 * returned; dy itself with tp = 1. */
const float *tp_gather_grad(Model *m, const float *dy, int N, int C);

/* x (N, C) a partial sum (this rank's heads' or channels' share): summed over the group in
 * place, and this rank's rows of the sum returned (x + row0 C; x with tp = 1). */
float *tp_sum_rows(Model *m, float *x, int N, int C);

/* The buffer (N, C) a row-parallel product whose sum is to end in out writes its partial sum
 * into: out itself with tp = 1, else rs->tp_part. tp_sum_into sums it and puts this rank's rows
 * into out (n, C) (nothing to do with tp = 1). */
float *tp_partial(Model *m, float *out);
void tp_sum_into(Model *m, float *out, float *part, int N, int C);

/* ---- the vocabulary split over the group (tp_vocab.c) ------------------------------------
 * Under tensor parallelism the embedding and the head (one tensor with model.tied) hold rows
 * [r V / tp, (r + 1) V / tp) of the vocabulary on rank r. The embedding looks up the tokens of
 * all N rows that fall in its rows (the others give 0) and a reduce-scatter leaves each rank the
 * sum on its own rows. The head gathers the final norm's rows and computes the logits of its
 * share of the vocabulary for all N rows, (N, V / tp); the cross-entropy over the whole
 * vocabulary comes from each rank's log-sum-exp and loss on its share (all-gathered, N floats a
 * rank, never the logits); its backward is the exact gradient of the rank's logits, and the
 * head's input gradient is reduce-scattered back to the ranks' rows. */

/* resid[0]'s rows of this rank from tokens (N, the replica's, on the host). */
void tp_embed_forward(Model *m, const int *tokens, int N);
/* The embedding's gradient (its rows) from dx (n, C), the gradient of this rank's rows. */
void tp_embed_backward(Model *m, const float *dx, int N);
/* The logits of this rank's vocabulary for all N rows from lnf's rows at row0 (gathered in
 * place); with targets (N, host) also each token's loss, this rank's n of them into losses. */
void tp_head_forward(Model *m, const int *targets, int N);
/* Their backward, each token's loss scaled by scale: the head's gradient added, and the
 * gradient of this rank's rows of lnf returned (n, C). */
const float *tp_head_backward(Model *m, float scale, int N);

#endif
