/*
 * quant.h: quantized experts for inference, int8 and int4 weights with a float scale.
 *
 * Decoding one token per sequence reads every weight it uses once and does two flops with it,
 * so a step is bound by the bytes of the weights, and in an MoE model nearly all of those bytes
 * are the experts'. Storing each expert matrix in fewer bits (int8: a quarter of fp32, int4:
 * an eighth, plus their scales) shrinks what a step reads and what a server must hold.
 *
 * Symmetric quantization (no zero point): a block of weights shares one scale s, and each
 * weight is stored as the integer q = round(w / s), read back as w' = q s:
 *
 *   int8  one scale per output row (per channel): s = max |w| / 127, q in [-127, 127]
 *   int4  one scale per group of QUANT_GROUP (32) consecutive inputs of a row (the last group
 *         of a row shorter when the inputs are not a multiple of 32): s = max |w| / 7,
 *         q in [-7, 7], stored offset-binary (the 4 bits hold q + 8, 1 .. 15), two per byte,
 *         the first of the pair in the low nibble; each row starts on a byte of its own
 *
 * The largest weight of a block lands exactly on the largest code, and every other is off by
 * at most s / 2: an element's error is bounded by half its block's scale. A row (or group) of
 * zeros gets scale 0 and codes 0, and reads back as exact zeros. Smaller groups cost more
 * scales but follow the weights more closely, which 4 bits need (15 levels).
 *
 * The product y = x W^T (qmatrix_matmul) reads the codes directly: a dot product per output row
 * and input row, in partial sums added in a fixed order (the same bits for any thread count),
 * times the row's scale (int8) or each group's (int4). It equals matmul_forward (nn/ops.h) on
 * the dequantized W to float rounding: the error that matters is in the weights, and it can
 * be studied on W alone (quant_experts_error).
 *
 * Only the experts are quantized (QuantExperts, an ExpertSource the model's MoE blocks call
 * instead of their fp32 experts): the router, attention, norms, embedding, head and any shared
 * experts stay fp32. They are a small part of the weights, and the router's choices are
 * sensitive to small changes: quantizing it would move tokens between experts.
 */
#ifndef MOE_INFER_QUANT_H
#define MOE_INFER_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* ---- formats ------------------------------------------------------------------------------- */

enum { QUANT_FP32 = 0, QUANT_INT8 = 1, QUANT_INT4 = 2 };
#define QUANT_GROUP 32 /* inputs per scale of the int4 format */
/* An expert's slice of more rows than this (a prompt's prefill) is computed on its matrices
 * dequantized to fp32, by the backend's products: reading the codes once per row costs more
 * than decoding them once for all rows. */
#define QUANT_DEQUANT_ROWS 16

/* "fp32", "int8", "int4" ("?" for anything else); the format of a name, or -1. */
const char *quant_format_name(int format);
int quant_format_parse(const char *name);

/* ---- one matrix ----------------------------------------------------------------------------
 * W (rows, cols) row-major, a linear layer's weight (OUT, IN): y = x W^T.
 *   QUANT_FP32  q: float (rows, cols), a copy; scale NULL; group 0
 *   QUANT_INT8  q: int8_t (rows, cols); scale (rows); group = cols
 *   QUANT_INT4  q: uint8_t (rows, (cols + 1) / 2), two codes a byte; scale (rows, ngroups),
 *               ngroups = ceil(cols / QUANT_GROUP); group = QUANT_GROUP */
typedef struct {
    int format, rows, cols;
    int group;    /* inputs sharing one scale (0: no scales) */
    void *q;      /* the codes */
    float *scale; /* the scales, row by row */
} QMatrix;

/* q (written: its own allocations) = w (rows, cols) in format. A non-finite weight is a
 * programming error (moe_fatal). */
void qmatrix_quantize(QMatrix *q, const float *w, int rows, int cols, int format);
/* w (rows, cols) (written) = the values q stands for: codes times their scales. */
void qmatrix_dequantize(const QMatrix *q, float *w);
/* Bytes q holds, codes and scales: what a product with it reads of the weights.
 *   fp32  4 rows cols
 *   int8  rows cols + 4 rows
 *   int4  rows ceil(cols / 2) + 4 rows ceil(cols / 32) */
size_t qmatrix_bytes(const QMatrix *q);
void qmatrix_free(QMatrix *q);
/* y (N, rows) (written) = x (N, cols) W^T, W the dequantized q: each output a dot product of
 * the row's codes with x, in QUANT_LANES partial sums (quant.c), times the scales; repeatable
 * for any thread count, and equal to matmul_forward(y, x, dequantized W, N, cols, rows) to
 * float rounding. Output rows are spread over the OpenMP threads. int4 allocates a copy of x
 * split into even and odd inputs for the call. */
void qmatrix_matmul(float *y, const float *x, const QMatrix *q, int N);

/* ---- a model's experts, quantized ----------------------------------------------------------
 * The matrices of MoE block j (the j-th MoE block of the model, in layer order), expert e:
 * w[(j E + e) 3 + k], k = QUANT_GATE (F, C), QUANT_UP (F, C), QUANT_DOWN (C, F). */
enum { QUANT_GATE = 0, QUANT_UP = 1, QUANT_DOWN = 2 };

typedef struct {
    ExpertSource src; /* first member: a QuantExperts * is an ExpertSource * */
    int format;
    int n_layer;              /* the model's blocks */
    int n_moe;                /* its MoE blocks */
    int *moe_of;              /* (n_layer) block l's MoE index j, or -1 for a dense block */
    int E, C, F;              /* experts per block, d_model, d_expert */
    QMatrix *w;               /* (n_moe, E, 3) as above */
    float *g, *u, *h;         /* (rows_max, F) scratch of one expert's slice */
    float *w32;               /* (3 F C) one expert's matrices dequantized, for a slice of more
                                 than QUANT_DEQUANT_ROWS rows (a prefill) */
    int rows_max;             /* rows the scratch holds; a larger slice grows it */
    size_t bytes, fp32_bytes; /* the experts' bytes quantized (qmatrix_bytes), and in fp32 */
} QuantExperts;

/* Quantize every MoE block's experts of m in format (QUANT_FP32 too: a copy, the control that
 * runs the same path with the original weights). m must be on a backend whose memory is the
 * host's (m->be->host_memory) and in one process (m->dist NULL); else moe_fatal. rows_max: the
 * most rows one expert's slice may bring (m->state.B m->state.T, every token to one expert, is
 * safe; a larger slice grows the scratch). The model's weights are copied: qe does not borrow m.
 * Plug it in with m->expert_source = &qe->src; its forward then runs inside model_forward and
 * model_forward_cached. One forward at a time per QuantExperts (its scratch is shared). */
void quant_experts_init(QuantExperts *qe, const Model *m, int format, int rows_max);
void quant_experts_free(QuantExperts *qe);

/* err (n_moe, E) (written), MoE blocks in layer order: each expert's relative error
 * ||W - W'||_F / ||W||_F, W its three matrices (gate, up, down) together, W' their
 * dequantized values; m the model qe was made from (its weights unchanged). 0 for an expert
 * of all-zero weights. Each expert summed in double, in a fixed order. */
void quant_experts_error(const QuantExperts *qe, const Model *m, double *err);

#endif
