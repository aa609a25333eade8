/*
 * test_quant.c: quantized experts (src/infer/quant.h).
 *
 *   - the formats: names parse back; the int8 and int4 codes and their packing on a hand-made
 *     row; dequantize(quantize(W)) within half a scale of W, element by element, per row
 *     (int8) and per group (int4), with a row of zeros (exact zeros back), maxima on either
 *     side of a group boundary, and inputs not a multiple of 32;
 *   - the product: qmatrix_matmul equals matmul_forward on the dequantized weights (to float
 *     rounding: it sums in partial sums), for 1, 3 and 17 input rows, odd sizes and inputs past
 *     a whole number of lanes and groups, in every format; the same bits for 1 and 2 threads;
 *   - the bytes: the exact formulas, for one matrix and for a model's experts;
 *   - the source: its forward against experts_forward on the dequantized weights, with a
 *     padded plan's zero rows; in a model, the logits equal those of the model whose expert
 *     tensors were replaced by their dequantized values (within the tolerance); int8 moves the loss
 * by little, int4's weights err more than int8's; decoding from a cache with the source gives the
 * full forward's logits; a model on a backend whose memory is not the host's is refused;
 *   - the error table: every expert's relative error within the bounds normal weights give.
 */
#include "base/omp_compat.h"
#include <string.h>

#include "backend/backend.h"
#include "base/util.h"
#include "infer/decode.h"
#include "infer/quant.h"
#include "moe/moe_ops.h"
#include "nn/ops.h"
#include "testutil.h"

static const int FORMATS[] = {QUANT_FP32, QUANT_INT8, QUANT_INT4};

/* ---- the formats ------------------------------------------------------------------------------
 */

START_TEST(test_format_names) {
    for (int f = QUANT_FP32; f <= QUANT_INT4; f++)
        ck_assert_int_eq(quant_format_parse(quant_format_name(f)), f);
    ck_assert_str_eq(quant_format_name(QUANT_INT4), "int4");
    ck_assert_int_eq(quant_format_parse("int3"), -1);
    ck_assert_int_eq(quant_format_parse(NULL), -1);
    ck_assert_str_eq(quant_format_name(7), "?");
}
END_TEST

/* One row by hand: w = (1, -1, 0.6). int8: s = 1/127, codes 127, -127, round(76.2) = 76.
 * int4: s = 1/7, codes 7, -7, round(4.2) = 4, stored q + 8 = 15, 1, 12, low nibble first:
 * bytes 0x1F (1 then 15), 0x0C (12, and an unused high nibble 0). */
START_TEST(test_codes_by_hand) {
    const float w[3] = {1.0f, -1.0f, 0.6f};
    QMatrix q;
    qmatrix_quantize(&q, w, 1, 3, QUANT_INT8);
    const int8_t *c8 = (const int8_t *)q.q;
    ck_assert_int_eq(c8[0], 127);
    ck_assert_int_eq(c8[1], -127);
    ck_assert_int_eq(c8[2], 76);
    ck_assert_float_eq(q.scale[0], 1.0f / 127.0f);
    ck_assert_int_eq(q.group, 3);
    qmatrix_free(&q);
    qmatrix_quantize(&q, w, 1, 3, QUANT_INT4);
    const uint8_t *c4 = (const uint8_t *)q.q;
    ck_assert_int_eq(c4[0], 0x1F);
    ck_assert_int_eq(c4[1], 0x0C);
    ck_assert_float_eq(q.scale[0], 1.0f / 7.0f);
    ck_assert_int_eq(q.group, QUANT_GROUP);
    qmatrix_free(&q);
}
END_TEST

/* The scale of element (o, i): its row's (int8) or its group's (int4). */
static float scale_of(const QMatrix *q, int o, int i) {
    if (q->format == QUANT_INT8) return q->scale[o];
    const int ng = (q->cols + QUANT_GROUP - 1) / QUANT_GROUP;
    return q->scale[(size_t)o * ng + i / QUANT_GROUP];
}

START_TEST(test_round_trip_within_half_a_scale) {
    const int format = _i ? QUANT_INT4 : QUANT_INT8, qmax = _i ? 7 : 127;
    enum { ROWS = 6, COLS = 77 }; /* 77 = 32 + 32 + 13: a short last group */
    float w[ROWS * COLS], back[ROWS * COLS];
    fill_uniform(w, ROWS * COLS, 1.0f, 7);
    memset(w + 1 * COLS, 0, COLS * sizeof(float)); /* row 1: zeros */
    w[2 * COLS + 31] = -3.0f;                      /* row 2: the maxima of groups 0 and 1 */
    w[2 * COLS + 32] = 2.5f;                       /* on either side of their boundary */
    for (int i = 0; i < COLS; i++) w[3 * COLS + i] *= 1e-3f; /* row 3: small, one large at */
    w[3 * COLS + COLS - 1] = 4.0f;                           /* the end (the short group) */
    for (int i = 0; i < 32; i++) w[4 * COLS + i] = 0.0f;     /* row 4: a group of zeros */
    QMatrix q;
    qmatrix_quantize(&q, w, ROWS, COLS, format);
    qmatrix_dequantize(&q, back);
    for (int o = 0; o < ROWS; o++)
        for (int i = 0; i < COLS; i++) {
            const float x = w[o * COLS + i], y = back[o * COLS + i], s = scale_of(&q, o, i);
            /* s / 2, and a few float roundings of w / s and q s */
            const double bound = 0.5 * s * (1.0 + 1e-5) + 1e-6 * fabs(x);
            ck_assert_msg(fabs((double)x - y) <= bound,
                          "%s: (%d, %d): %.9g came back as %.9g (scale %g)",
                          quant_format_name(format), o, i, x, y, s);
        }
    /* each block's scale is its largest magnitude over the largest code */
    ck_assert_float_eq_tol(scale_of(&q, 3, COLS - 1), 4.0f / qmax, 1e-7f);
    if (format == QUANT_INT4) {
        ck_assert_float_eq_tol(scale_of(&q, 2, 31), 3.0f / 7, 1e-7f);
        ck_assert_float_eq_tol(scale_of(&q, 2, 32), 2.5f / 7, 1e-7f);
        ck_assert_float_eq(scale_of(&q, 4, 0), 0.0f); /* the group of zeros */
    }
    for (int i = 0; i < COLS; i++) {
        ck_assert_msg(back[1 * COLS + i] == 0.0f, "the row of zeros at %d: %g", i,
                      back[1 * COLS + i]);
        if (i < 32) ck_assert(back[4 * COLS + i] == 0.0f);
    }
    ck_assert_float_eq(scale_of(&q, 1, 0), 0.0f);
    qmatrix_free(&q);
}
END_TEST

/* ---- the product ------------------------------------------------------------------------------
 */

START_TEST(test_matmul_is_the_reference_on_dequantized_weights) {
    const int format = FORMATS[_i];
    /* 45 inputs: fewer than the partial sums, a short group; 77: two whole rounds of lanes and
     * two whole int4 groups, then 13 more */
    enum { OUT = 13, INMAX = 77, NMAX = 17 };
    const int INS[] = {45, 77};
    for (int a = 0; a < 2; a++) {
        const int IN = INS[a];
        /* got: one row more than N can fill, to see that nothing past N rows is written */
        float W[OUT * INMAX], Wq[OUT * INMAX], x[NMAX * INMAX], got[(NMAX + 1) * OUT];
        float want[NMAX * OUT], one[NMAX * OUT];
        fill_uniform(W, (size_t)OUT * IN, 0.7f, 3);
        fill_uniform(x, (size_t)NMAX * IN, 1.0f, 4);
        QMatrix q;
        qmatrix_quantize(&q, W, OUT, IN, format);
        qmatrix_dequantize(&q, Wq);
        const int Ns[] = {1, 3, 17};
        for (int k = 0; k < 3; k++) {
            const int N = Ns[k];
            for (int j = 0; j < (NMAX + 1) * OUT; j++) got[j] = NAN;
            qmatrix_matmul(got, x, &q, N);
            matmul_forward(want, x, Wq, N, IN, OUT);
            char what[64];
            snprintf(what, sizeof what, "%s, %d inputs, N %d", quant_format_name(format), IN, N);
            CLOSE_ARRAYS(got, want, (size_t)N * OUT, what);
            ck_assert_msg(isnan(got[N * OUT]), "%s: wrote past N rows", what);
            /* one thread gives the same bits: each output is summed by one thread */
            const int threads = omp_get_max_threads();
            omp_set_num_threads(1);
            qmatrix_matmul(one, x, &q, N);
            omp_set_num_threads(threads);
            ck_assert_msg(memcmp(one, got, (size_t)N * OUT * sizeof(float)) == 0,
                          "%s: one thread and %d differ", what, threads);
        }
        qmatrix_free(&q);
    }
}
END_TEST

/* ---- the bytes --------------------------------------------------------------------------------
 */

START_TEST(test_bytes) {
    float w[64 * 96];
    fill_uniform(w, 64 * 96, 1.0f, 5);
    /* (13, 45): fp32 4 13 45; int8 13 45 + 4 13; int4 13 ceil(45 / 2) + 4 13 ceil(45 / 32) */
    const size_t small[3] = {2340, 585 + 52, 13 * 23 + 4 * 13 * 2};
    /* (64, 96): 24576 bytes; int8 a quarter plus 4 per row; int4 an eighth plus 4 per group */
    const size_t big[3] = {24576, 6144 + 256, 3072 + 4 * 64 * 3};
    for (int f = 0; f < 3; f++) {
        QMatrix q;
        qmatrix_quantize(&q, w, 13, 45, FORMATS[f]);
        ck_assert_uint_eq(qmatrix_bytes(&q), small[f]);
        qmatrix_free(&q);
        qmatrix_quantize(&q, w, 64, 96, FORMATS[f]);
        ck_assert_uint_eq(qmatrix_bytes(&q), big[f]);
        qmatrix_free(&q);
    }
}
END_TEST

/* ---- the source -------------------------------------------------------------------------------
 */

enum { B = 2, T = 8 };

/* d_expert 40: the down projection's rows are a group of 32 and one of 8 */
static Config moe_config(void) {
    Config c;
    config_defaults(&c);
    c.d_model = 32;
    c.n_layer = 3;
    c.n_head = 2;
    c.seq_len = T;
    c.d_ff = 48;
    c.num_experts = 4;
    c.top_k = 2;
    c.d_expert = 40;
    c.first_dense = 1; /* block 0 dense: the source maps blocks to MoE blocks */
    c.init_std = 0.2f; /* livelier than training's, so that the routing and loss respond */
    c.seed = 13;
    return c;
}

/* The stacked expert tensors of MoE block j of m, replaced by qe's dequantized values. */
static void put_dequantized(Model *m, const QuantExperts *qe) {
    const int E = qe->E, C = qe->C, F = qe->F;
    for (int l = 0; l < qe->n_layer; l++) {
        if (qe->moe_of[l] < 0) continue;
        const QMatrix *w = qe->w + (size_t)qe->moe_of[l] * E * 3;
        const LayerView *lw = &m->w.layers[l];
        for (int e = 0; e < E; e++) {
            qmatrix_dequantize(&w[e * 3 + QUANT_GATE], lw->e_gate + (size_t)e * F * C);
            qmatrix_dequantize(&w[e * 3 + QUANT_UP], lw->e_up + (size_t)e * F * C);
            qmatrix_dequantize(&w[e * 3 + QUANT_DOWN], lw->e_down + (size_t)e * F * C);
        }
    }
}

/* The source's forward on a hand-made plan, against experts_forward on the dequantized weights:
 * slices of 3, 0, 5 and 2 rows; with counts, 2, 0, 5 and 1 of them kept, the rest padding
 * (nonzero inputs here, which must still come out zero). */
START_TEST(test_source_forward_against_experts_forward) {
    const int format = FORMATS[_i];
    const Config c = moe_config();
    Model m;
    model_init_backend(&m, &c, B, T, NULL, &backend_cpu_ref);
    QuantExperts qe;
    quant_experts_init(&qe, &m, format, 1); /* one row: the slices grow the scratch */
    const int E = qe.E, C = qe.C, F = qe.F, S = 10, layer = 2;
    const int offsets[5] = {0, 3, 3, 8, 10}, counts[4] = {2, 0, 5, 1};
    float *Wg = floats_alloc((size_t)E * F * C), *Wu = floats_alloc((size_t)E * F * C);
    float *Wd = floats_alloc((size_t)E * F * C);
    const QMatrix *w = qe.w + (size_t)qe.moe_of[layer] * E * 3;
    for (int e = 0; e < E; e++) {
        qmatrix_dequantize(&w[e * 3 + QUANT_GATE], Wg + (size_t)e * F * C);
        qmatrix_dequantize(&w[e * 3 + QUANT_UP], Wu + (size_t)e * F * C);
        qmatrix_dequantize(&w[e * 3 + QUANT_DOWN], Wd + (size_t)e * F * C);
    }
    float *xe = floats_alloc((size_t)S * C), *ye = floats_alloc((size_t)S * C);
    float *want = floats_alloc((size_t)S * C), *g = floats_alloc((size_t)S * F);
    float *u = floats_alloc((size_t)S * F), *h = floats_alloc((size_t)S * F);
    fill_uniform(xe, (size_t)S * C, 1.0f, 9);
    experts_forward(want, g, u, h, xe, Wg, Wu, Wd, offsets, NULL, E, C, F);
    for (int padded = 0; padded < 2; padded++) {
        for (int j = 0; j < S * C; j++) ye[j] = NAN;
        qe.src.forward(&qe.src, layer, &backend_cpu_ref, ye, xe, offsets, padded ? counts : NULL, E,
                       C, F);
        for (int e = 0; e < E; e++)
            for (int r = offsets[e]; r < offsets[e + 1]; r++) {
                const int pad = padded && r - offsets[e] >= counts[e];
                char what[96];
                snprintf(what, sizeof what, "%s, %s plan, expert %d, row %d",
                         quant_format_name(format), padded ? "padded" : "dropless", e, r);
                if (pad) {
                    for (int i = 0; i < C; i++)
                        ck_assert_msg(ye[r * C + i] == 0.0f, "%s: padding not zero", what);
                } else {
                    CLOSE_ARRAYS(ye + r * C, want + r * C, C, what);
                }
            }
    }
    ck_assert_int_ge(qe.rows_max, 5);
    free(Wg), free(Wu), free(Wd), free(xe), free(ye), free(want), free(g), free(u), free(h);
    quant_experts_free(&qe);
    model_free(&m);
}
END_TEST

/* Logits of one forward over tokens (B, T), copied out. */
static void forward_logits(Model *m, float *out, const int *tokens) {
    model_forward(m, tokens, NULL, B, T, NULL);
    m->be->to_host(m->be, out, m->state.logits, (size_t)B * T * MOE_VOCAB * sizeof(float));
}

/* (a) for every format, on cpu-ref and cpu: the logits with the source are those of the model
 * whose expert tensors hold the dequantized values, run without a source. */
START_TEST(test_model_logits_are_the_dequantized_models) {
    const int format = FORMATS[_i % 3];
    const Backend *be = _i < 3 ? &backend_cpu_ref : &backend_cpu;
    const Config c = moe_config();
    Model m;
    model_init_backend(&m, &c, B, T, NULL, be);
    int tokens[B * T], unused[B * T];
    random_tokens(tokens, unused, B * T, 17);
    const size_t nl = (size_t)B * T * MOE_VOCAB;
    float *orig = floats_alloc(nl), *deq = floats_alloc(nl), *got = floats_alloc(nl);
    forward_logits(&m, orig, tokens);
    QuantExperts qe;
    quant_experts_init(&qe, &m, format, B * T);
    float *saved = floats_alloc(m.pt.total);
    memcpy(saved, m.params, m.pt.total * sizeof(float));
    put_dequantized(&m, &qe);
    forward_logits(&m, deq, tokens);
    memcpy(m.params, saved, m.pt.total * sizeof(float));
    m.expert_source = &qe.src;
    forward_logits(&m, got, tokens);
    char what[96];
    snprintf(what, sizeof what, "%s source on %s", quant_format_name(format), be->name);
    CLOSE_ARRAYS(got, deq, nl, what); /* the two sum in their own orders */
    /* and the quantized weights are in effect: the logits moved (fp32: they did not) */
    double moved = 0.0;
    for (size_t j = 0; j < nl; j++) moved = fmax(moved, fabs((double)got[j] - orig[j]));
    printf("  %-30s largest logit change from the fp32 model %.3g\n", what, moved);
    /* fp32 codes: float rounding only; int8 and int4: the weights' error, far above it */
    if (format == QUANT_FP32) ck_assert_msg(moved < 1e-5, "fp32 source moved a logit by %g", moved);
    if (format != QUANT_FP32)
        ck_assert_msg(moved > 1e-4, "%s: logits moved by %g only", what, moved);
    free(saved), free(orig), free(deq), free(got);
    quant_experts_free(&qe);
    model_free(&m);
}
END_TEST

/* Mean of n doubles. */
static double mean_d(const double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i];
    return s / n;
}

/* (b) int8 moves the loss by little; int4's weights err more than int8's. */
START_TEST(test_loss_and_error_order) {
    const Config c = moe_config();
    Model m;
    model_init_backend(&m, &c, B, T, NULL, &backend_cpu);
    int tokens[B * T], targets[B * T];
    random_tokens(tokens, targets, B * T, 19);
    model_forward(&m, tokens, targets, B, T, NULL);
    const float loss = m.state.loss;
    QuantExperts q8, q4;
    quant_experts_init(&q8, &m, QUANT_INT8, B * T);
    quant_experts_init(&q4, &m, QUANT_INT4, B * T);
    m.expert_source = &q8.src;
    model_forward(&m, tokens, targets, B, T, NULL);
    const float d8 = m.state.loss - loss;
    m.expert_source = &q4.src;
    model_forward(&m, tokens, targets, B, T, NULL);
    const float d4 = m.state.loss - loss;
    m.expert_source = NULL;
    const int n = q8.n_moe * q8.E;
    double e8[64], e4[64];
    ck_assert_int_le(n, 64);
    quant_experts_error(&q8, &m, e8);
    quant_experts_error(&q4, &m, e4);
    printf("  loss %.6f: int8 %+.2e, int4 %+.2e; mean relative error int8 %.5f, int4 %.5f\n", loss,
           d8, d4, mean_d(e8, n), mean_d(e4, n));
    ck_assert_msg(fabsf(d8) < 0.05f, "int8 moved the loss by %g", d8);
    ck_assert_msg(d8 != 0.0f, "int8 did not move the loss at all: is the source used?");
    /* 15 levels against 255, over groups no longer than the rows: about 127/7 = 18 times the
     * error (the error test below); 4 leaves a wide margin */
    ck_assert_msg(mean_d(e4, n) > 4.0 * mean_d(e8, n), "int4 error %g, int8 %g", mean_d(e4, n),
                  mean_d(e8, n));
    quant_experts_free(&q8);
    quant_experts_free(&q4);
    model_free(&m);
}
END_TEST

/* A decoder with the int8 source: prefill, steps to the end of the context, and each step's
 * logits against one full forward with the same source (cpu-ref: bit for bit, as
 * test_decode.c finds without a source). The source starts with one row of scratch. */
START_TEST(test_decoding_with_the_source) {
    const Config c = moe_config();
    Model m;
    model_init_backend(&m, &c, B, T, NULL, &backend_cpu_ref);
    QuantExperts qe;
    quant_experts_init(&qe, &m, QUANT_INT8, 1);
    m.expert_source = &qe.src;
    Decoder d;
    char err[256];
    ck_assert_msg(decoder_init(&d, &m, err, sizeof err) == 0, "%s", err);
    int seq[B * T], unused[B * T], lens[B] = {3, 3};
    random_tokens(seq, unused, B * T, 23);
    int prompts[B * 3];
    for (int b = 0; b < B; b++) memcpy(prompts + b * 3, seq + b * T, 3 * sizeof(int));
    decoder_prefill(&d, 0, B, prompts, 3, lens);
    float *cached = floats_alloc((size_t)B * T * MOE_VOCAB);
    for (int t = 3; t < T; t++) {
        int next[B];
        for (int b = 0; b < B; b++) next[b] = seq[b * T + t];
        decoder_step(&d, next);
        for (int b = 0; b < B; b++)
            memcpy(cached + ((size_t)b * T + t) * MOE_VOCAB, d.logits + (size_t)b * MOE_VOCAB,
                   MOE_VOCAB * sizeof(float));
    }
    model_forward(&m, seq, NULL, B, T, NULL);
    for (int b = 0; b < B; b++)
        for (int t = 3; t < T; t++) {
            char what[64];
            snprintf(what, sizeof what, "sequence %d, position %d", b, t);
            const size_t at = ((size_t)b * T + t) * MOE_VOCAB;
            expect_close_arrays(cached + at, m.state.logits + at, MOE_VOCAB, 0.0f, 0.0f, what);
        }
    free(cached);
    decoder_free(&d);
    quant_experts_free(&qe);
    model_free(&m);
}
END_TEST

/* cpu-fenced keeps its buffers from the host: quantizing there is a programming error
 * (moe_fatal, exit status 1). */
START_TEST(test_refused_off_the_host) {
    const Config c = moe_config();
    Model m;
    model_init_backend(&m, &c, B, T, NULL, &backend_cpu_fenced);
    QuantExperts qe;
    quant_experts_init(&qe, &m, QUANT_INT8, B * T);
}
END_TEST

/* ---- the error table --------------------------------------------------------------------------
 */

/* The model's experts are drawn normal(0, sigma) (params_init). A block whose largest magnitude
 * is M gets s = M / qmax, and its other weights an error roughly uniform in [-s/2, s/2], of
 * variance s^2 / 12, so the relative error is about sqrt(E[M^2] / 12) / (qmax sigma). For the
 * blocks here (int8: rows of 32 and 40 weights; int4: groups of 32, and the down rows' tails
 * of 8) sqrt(E[M^2]) is about 2.4 to 2.5 sigma (1.9 for 8 weights): int8 about
 * 2.45 / (3.46 127) = 0.0056, int4 about 2.45 / (3.46 7) = 0.10. The bounds 0.01 and 0.2 leave a
 * margin of nearly 2 for each expert's 3 x 1280 weights, whose error averages over many blocks.
 * (For uniform weights in [-a, a], M is near a and the error near 1 / (2 qmax): 0.0039 for
 * int8, 0.071 for int4.) The errors are above 0: weights drawn from a continuous distribution
 * are not already on the grid. fp32 copies: an error of exactly 0. */
START_TEST(test_error_table) {
    const Config c = moe_config();
    Model m;
    model_init_backend(&m, &c, B, T, NULL, &backend_cpu);
    for (int f = 0; f < 3; f++) {
        QuantExperts qe;
        quant_experts_init(&qe, &m, FORMATS[f], 1);
        const int n = qe.n_moe * qe.E;
        ck_assert_int_eq(n, 2 * 4);
        double err[8];
        quant_experts_error(&qe, &m, err);
        const double hi = FORMATS[f] == QUANT_INT8 ? 0.01 : 0.2;
        printf("  %s relative error per expert:", quant_format_name(FORMATS[f]));
        for (int j = 0; j < n; j++) {
            printf(" %.4f", err[j]);
            if (FORMATS[f] == QUANT_FP32)
                ck_assert_msg(err[j] == 0.0, "fp32 expert %d: error %g", j, err[j]);
            else
                ck_assert_msg(err[j] > 0.0 && err[j] < hi, "%s expert %d: error %g",
                              quant_format_name(FORMATS[f]), j, err[j]);
        }
        printf("\n");
        /* one entry by hand: MoE block 1 (the model's block 2), expert 3 */
        const int C = qe.C, F = qe.F, e = 3;
        const LayerView *lw = &m.w.layers[2];
        const float *orig[3] = {lw->e_gate, lw->e_up, lw->e_down};
        float *back = floats_alloc((size_t)F * C);
        double diff = 0.0, norm = 0.0;
        for (int k = 0; k < 3; k++) {
            qmatrix_dequantize(&qe.w[((size_t)1 * qe.E + e) * 3 + k], back);
            const float *w = orig[k] + (size_t)e * F * C;
            for (int i = 0; i < F * C; i++) {
                diff += ((double)w[i] - back[i]) * ((double)w[i] - back[i]);
                norm += (double)w[i] * w[i];
            }
        }
        ck_assert_msg(fabs(err[1 * qe.E + e] - sqrt(diff / norm)) <= 1e-12,
                      "%s: table %.12g, by hand %.12g", quant_format_name(FORMATS[f]),
                      err[1 * qe.E + e], sqrt(diff / norm));
        /* the bytes of the experts: per expert two (F, C) matrices and one (C, F) */
        const size_t FC = (size_t)F * C;
        const size_t per[3] = {3 * FC * 4, 3 * FC + 4 * (2 * F + C),
                               3 * FC / 2 + 4 * (2 * F * 1 + C * 2)};
        ck_assert_uint_eq(qe.fp32_bytes, (size_t)n * 3 * FC * 4);
        ck_assert_uint_eq(qe.bytes, (size_t)n * per[f]);
        free(back);
        quant_experts_free(&qe);
    }
    model_free(&m);
}
END_TEST

static Suite *quant_suite(void) {
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("quant");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_format_names);
    tcase_add_test(tc, test_codes_by_hand);
    tcase_add_loop_test(tc, test_round_trip_within_half_a_scale, 0, 2);
    tcase_add_loop_test(tc, test_matmul_is_the_reference_on_dequantized_weights, 0, 3);
    tcase_add_test(tc, test_bytes);
    tcase_add_loop_test(tc, test_source_forward_against_experts_forward, 0, 3);
    tcase_add_loop_test(tc, test_model_logits_are_the_dequantized_models, 0, 6);
    tcase_add_test(tc, test_loss_and_error_order);
    tcase_add_test(tc, test_decoding_with_the_source);
    tcase_add_exit_test(tc, test_refused_off_the_host, MOE_EXIT_FATAL);
    tcase_add_test(tc, test_error_table);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(quant_suite)
