/*
 * quant.c: int8 and int4 weights, their product, and a model's experts quantized. See quant.h.
 *
 * The product is a dot product per output row and input row, read straight from the codes: a
 * decoding step reads each weight once, so what it costs is the bytes of the codes and the
 * work of turning each into a float. Each dot keeps QUANT_LANES partial sums (input i adds to
 * sum i mod QUANT_LANES), added together in a fixed order at the end: several vector registers'
 * worth of independent sums, so the additions need not wait on each other, and the same bits
 * for any thread count. int8 multiplies the row's sum by its scale once; int4 multiplies each
 * group's partial sums by the group's scale as it adds them in. The dot products are compiled
 * for AVX-512, AVX2 and the baseline (GCC's target_clones: the processor picks at load time),
 * since a portable build's baseline has no instruction that widens 16 int8 at once.
 */
#include "infer/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "nn/ops.h"

#define QUANT_LANES 32 /* partial sums of a dot product */

/* GCC picks the best of these for the processor when the program loads; other compilers get
 * the portable version */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define QUANT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define QUANT_CLONES
#endif

static const char *const FORMAT_NAMES[] = {"fp32", "int8", "int4"};

const char *quant_format_name(int format) {
    return format >= QUANT_FP32 && format <= QUANT_INT4 ? FORMAT_NAMES[format] : "?";
}

int quant_format_parse(const char *name) {
    for (int f = QUANT_FP32; f <= QUANT_INT4; f++)
        if (name && strcmp(name, FORMAT_NAMES[f]) == 0) return f;
    return -1;
}

/* ---- one matrix ------------------------------------------------------------------------------ */

static int int4_row_bytes(int cols) {
    return (cols + 1) / 2;
}
static int int4_groups(int cols) {
    return (cols + QUANT_GROUP - 1) / QUANT_GROUP;
}

/* The scale of a block whose largest magnitude is mx, for codes up to qmax: mx / qmax, or 0
 * when the block is all zeros (or so small that the scale underflows). */
static float block_scale(float mx, int qmax) {
    const float s = mx / (float)qmax;
    return s > 0.0f ? s : 0.0f;
}

/* round(w / s) clamped to [-qmax, qmax]; 0 under a zero scale. roundf takes halves away from
 * zero; any rounding is within s / 2 of w. */
static int quantize_one(float w, float s, int qmax) {
    if (!(s > 0.0f)) return 0;
    const float r = roundf(w / s);
    return r > (float)qmax ? qmax : r < (float)-qmax ? -qmax : (int)r;
}

/* Largest |w[i]| of n weights; sets *bad when one is not finite. */
static float max_magnitude(const float *w, int n, int *bad) {
    float mx = 0.0f;
    for (int i = 0; i < n; i++) {
        const float a = fabsf(w[i]);
        if (!isfinite(w[i])) *bad = 1;
        mx = a > mx ? a : mx;
    }
    return mx;
}

void qmatrix_quantize(QMatrix *q, const float *w, int rows, int cols, int format) {
    if (rows < 0 || cols < 0 || format < QUANT_FP32 || format > QUANT_INT4)
        moe_fatal("qmatrix_quantize: a (%d, %d) matrix in format %d", rows, cols, format);
    memset(q, 0, sizeof(*q));
    q->format = format, q->rows = rows, q->cols = cols;
    int bad = 0;
    if (format == QUANT_FP32) {
        q->q = malloc_check((size_t)rows * cols * sizeof(float) + 1);
        memcpy(q->q, w, (size_t)rows * cols * sizeof(float));
    } else if (format == QUANT_INT8) {
        q->group = cols;
        int8_t *codes = (int8_t *)malloc_check((size_t)rows * cols + 1);
        q->scale = (float *)malloc_check((size_t)rows * sizeof(float) + 1);
#pragma omp parallel for schedule(static) reduction(max : bad)
        for (int o = 0; o < rows; o++) {
            const float *wr = w + (size_t)o * cols;
            const float s = block_scale(max_magnitude(wr, cols, &bad), 127);
            q->scale[o] = s;
            for (int i = 0; i < cols; i++)
                codes[(size_t)o * cols + i] = (int8_t)quantize_one(wr[i], s, 127);
        }
        q->q = codes;
    } else {
        q->group = QUANT_GROUP;
        const int rb = int4_row_bytes(cols), ng = int4_groups(cols);
        uint8_t *codes = (uint8_t *)calloc_check((size_t)rows * rb + 1, 1);
        q->scale = (float *)malloc_check((size_t)rows * ng * sizeof(float) + 1);
#pragma omp parallel for schedule(static) reduction(max : bad)
        for (int o = 0; o < rows; o++) {
            const float *wr = w + (size_t)o * cols;
            uint8_t *cr = codes + (size_t)o * rb;
            for (int k = 0; k < ng; k++) {
                const int i0 = k * QUANT_GROUP;
                const int n = cols - i0 < QUANT_GROUP ? cols - i0 : QUANT_GROUP;
                const float s = block_scale(max_magnitude(wr + i0, n, &bad), 7);
                q->scale[(size_t)o * ng + k] = s;
                for (int i = i0; i < i0 + n; i++) { /* offset-binary: q + 8, low nibble first */
                    const int nib = quantize_one(wr[i], s, 7) + 8;
                    cr[i >> 1] |= (uint8_t)(nib << ((i & 1) * 4));
                }
            }
        }
        q->q = codes;
    }
    if (bad)
        moe_fatal("qmatrix_quantize: a (%d, %d) matrix holds a weight that is not finite", rows,
                  cols);
}

/* Row o of q as floats, out[i] for i < cols: each code times its scale. */
static void decode_row(float *out, const QMatrix *q, int o) {
    const int cols = q->cols;
    if (q->format == QUANT_FP32) {
        const float *wr = (const float *)q->q + (size_t)o * cols;
        for (int i = 0; i < cols; i++) out[i] = wr[i];
    } else if (q->format == QUANT_INT8) {
        const int8_t *cr = (const int8_t *)q->q + (size_t)o * cols;
        const float s = q->scale[o];
        for (int i = 0; i < cols; i++) out[i] = (float)cr[i] * s;
    } else {
        const uint8_t *cr = (const uint8_t *)q->q + (size_t)o * int4_row_bytes(cols);
        const float *sr = q->scale + (size_t)o * int4_groups(cols);
        for (int i0 = 0; i0 < cols; i0 += QUANT_GROUP) { /* a group starts on a byte */
            const int end = cols - i0 < QUANT_GROUP ? cols : i0 + QUANT_GROUP;
            const float s = sr[i0 / QUANT_GROUP];
            int i = i0;
            for (; i + 1 < end; i += 2) { /* a byte: its low nibble, then its high one */
                const int b = cr[i >> 1];
                out[i] = (float)((b & 15) - 8) * s;
                out[i + 1] = (float)((b >> 4) - 8) * s;
            }
            if (i < end) out[i] = (float)((cr[i >> 1] & 15) - 8) * s;
        }
    }
}

void qmatrix_dequantize(const QMatrix *q, float *w) {
#pragma omp parallel for schedule(static)
    for (int o = 0; o < q->rows; o++) decode_row(w + (size_t)o * q->cols, q, o);
}

size_t qmatrix_bytes(const QMatrix *q) {
    const size_t rows = (size_t)q->rows, cols = (size_t)q->cols;
    switch (q->format) {
    case QUANT_FP32: return rows * cols * sizeof(float);
    case QUANT_INT8: return rows * cols + rows * sizeof(float);
    case QUANT_INT4:
        return rows * (size_t)int4_row_bytes(q->cols) +
               rows * (size_t)int4_groups(q->cols) * sizeof(float);
    default: return 0;
    }
}

void qmatrix_free(QMatrix *q) {
    free(q->q);
    free(q->scale);
    memset(q, 0, sizeof(*q));
}

/* sum_i c[i] x[i] over n inputs (c: fp32 or int8 codes), QUANT_LANES partial sums */
QUANT_CLONES static float dot_f32(const float *c, const float *x, int n) {
    float acc[QUANT_LANES] = {0.0f};
    int i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES)
        for (int k = 0; k < QUANT_LANES; k++) acc[k] += c[i + k] * x[i + k];
    for (int k = 0; i < n; i++, k++) acc[k] += c[i] * x[i];
    float s = 0.0f;
    for (int k = 0; k < QUANT_LANES; k++) s += acc[k];
    return s;
}
QUANT_CLONES static float dot_i8(const int8_t *c, const float *x, int n) {
    float acc[QUANT_LANES] = {0.0f};
    int i = 0;
    for (; i + QUANT_LANES <= n; i += QUANT_LANES)
        for (int k = 0; k < QUANT_LANES; k++) acc[k] += (float)c[i + k] * x[i + k];
    for (int k = 0; i < n; i++, k++) acc[k] += (float)c[i] * x[i];
    float s = 0.0f;
    for (int k = 0; k < QUANT_LANES; k++) s += acc[k];
    return s;
}
/* An int4 row against x split into its even and odd inputs (xe[j] = x[2j], xo[j] = x[2j + 1]):
 * byte j holds inputs 2j (low nibble) and 2j + 1 (high nibble), a group is 16 bytes. */
QUANT_CLONES static float dot_i4(const uint8_t *c, const float *scale, const float *xe,
                                 const float *xo, int cols) {
    enum { BYTES = QUANT_GROUP / 2 };
    float acc[BYTES] = {0.0f};
    const int full = cols / QUANT_GROUP;
    for (int g = 0; g < full; g++) {
        const uint8_t *b = c + (size_t)g * BYTES;
        const float *e = xe + (size_t)g * BYTES, *o = xo + (size_t)g * BYTES, s = scale[g];
        for (int k = 0; k < BYTES; k++)
            acc[k] += s * ((float)((b[k] & 15) - 8) * e[k] + (float)((b[k] >> 4) - 8) * o[k]);
    }
    float sum = 0.0f;
    for (int k = 0; k < BYTES; k++) sum += acc[k];
    /* a last, shorter group */
    float tail = 0.0f;
    for (int i = full * QUANT_GROUP; i < cols; i++) {
        const int b = c[i >> 1], code = (i & 1 ? b >> 4 : b & 15) - 8;
        tail += (float)code * (i & 1 ? xo[i >> 1] : xe[i >> 1]);
    }
    return full * QUANT_GROUP < cols ? sum + scale[full] * tail : sum;
}

void qmatrix_matmul(float *y, const float *x, const QMatrix *q, int N) {
    /* y (N, rows), x (N, cols); y[n, o] = sum_i x[n, i] W'[o, i], W' = dequantized q */
    const int rows = q->rows, cols = q->cols, half = (cols + 1) / 2;
    if (N <= 0 || rows <= 0) return;
    /* int4: each input row split into its even and odd inputs, (N, 2, half) */
    float *split = NULL;
    if (q->format == QUANT_INT4) {
        split = floats_alloc((size_t)N * 2 * half + 1);
        for (int n = 0; n < N; n++)
            for (int i = 0; i < cols; i++)
                split[((size_t)n * 2 + (i & 1)) * half + (i >> 1)] = x[(size_t)n * cols + i];
    }
#pragma omp parallel for schedule(static)
    for (int o = 0; o < rows; o++)
        for (int n = 0; n < N; n++) {
            const float *xn = x + (size_t)n * cols;
            float v;
            if (q->format == QUANT_FP32)
                v = dot_f32((const float *)q->q + (size_t)o * cols, xn, cols);
            else if (q->format == QUANT_INT8)
                v = q->scale[o] * dot_i8((const int8_t *)q->q + (size_t)o * cols, xn, cols);
            else
                v = dot_i4((const uint8_t *)q->q + (size_t)o * half,
                           q->scale + (size_t)o * int4_groups(cols), split + (size_t)n * 2 * half,
                           split + ((size_t)n * 2 + 1) * half, cols);
            y[(size_t)n * rows + o] = v;
        }
    free(split);
}

/* ---- a model's experts ----------------------------------------------------------------------- */

/* The scratch of one slice: room for rows rows of F (grown, never shrunk). */
static void scratch_reserve(QuantExperts *qe, int rows) {
    if (rows <= qe->rows_max && qe->g) return;
    free(qe->g), free(qe->u), free(qe->h);
    qe->rows_max = rows > qe->rows_max ? rows : qe->rows_max;
    const size_t n = (size_t)qe->rows_max * qe->F + 1;
    qe->g = floats_alloc(n), qe->u = floats_alloc(n), qe->h = floats_alloc(n);
}

/* The ExpertSource's forward: each expert's kept rows through its quantized SwiGLU (the math
 * of moe/experts.c, the products by qmatrix_matmul), its padding rows zero. */
static void quant_experts_forward(ExpertSource *src, int layer, const Backend *be, float *ye,
                                  const float *xe, const int *offsets, const int *counts, int E,
                                  int C, int F) {
    QuantExperts *qe = (QuantExperts *)src;
    if (!be->host_memory)
        moe_fatal("quantized experts run on a backend whose memory is the host's, not %s",
                  be->name);
    if (layer < 0 || layer >= qe->n_layer || qe->moe_of[layer] < 0)
        moe_fatal("quantized experts: block %d is not an MoE block of the model", layer);
    if (E != qe->E || C != qe->C || F != qe->F)
        moe_fatal("quantized experts of E %d, C %d, F %d called with E %d, C %d, F %d", qe->E,
                  qe->C, qe->F, E, C, F);
    const QMatrix *w = qe->w + (size_t)qe->moe_of[layer] * E * 3;
    for (int e = 0; e < E; e++) {
        const int r0 = offsets[e], rows = offsets[e + 1] - offsets[e];
        const int kept = counts ? counts[e] : rows;
        if (kept < 0 || kept > rows)
            moe_fatal("quantized experts: expert %d keeps %d of its %d rows", e, kept, rows);
        float *ys = ye + (size_t)r0 * C;
        const float *xs = xe + (size_t)r0 * C;
        if (kept > QUANT_DEQUANT_ROWS) { /* many rows: decode once, the backend's products */
            scratch_reserve(qe, kept);
            float *wg = qe->w32, *wu = wg + (size_t)F * C, *wd = wu + (size_t)F * C;
            qmatrix_dequantize(&w[e * 3 + QUANT_GATE], wg);
            qmatrix_dequantize(&w[e * 3 + QUANT_UP], wu);
            qmatrix_dequantize(&w[e * 3 + QUANT_DOWN], wd);
            be->matmul_forward(be, qe->g, xs, wg, kept, C, F);
            be->matmul_forward(be, qe->u, xs, wu, kept, C, F);
            swiglu_forward(qe->h, qe->g, qe->u, kept, F);
            be->matmul_forward(be, ys, qe->h, wd, kept, F, C);
        } else if (kept > 0) { /* a few rows (decoding): straight from the codes */
            scratch_reserve(qe, kept);
            qmatrix_matmul(qe->g, xs, &w[e * 3 + QUANT_GATE], kept);
            qmatrix_matmul(qe->u, xs, &w[e * 3 + QUANT_UP], kept);
            swiglu_forward(qe->h, qe->g, qe->u, kept, F);
            qmatrix_matmul(ys, qe->h, &w[e * 3 + QUANT_DOWN], kept);
        }
        /* padding rows: zero in, zero out (a SwiGLU without biases maps 0 to 0) */
        memset(ys + (size_t)kept * C, 0, (size_t)(rows - kept) * C * sizeof(float));
    }
}

static void check_model(const Model *m, const char *who) {
    if (!m->be->host_memory)
        moe_fatal("%s: the model is on the %s backend, whose memory is not the host's; "
                  "quantize a model on a CPU backend",
                  who, m->be->name);
    if (m->dist) moe_fatal("%s: the model is spread over processes; quantize it in one", who);
}

void quant_experts_init(QuantExperts *qe, const Model *m, int format, int rows_max) {
    check_model(m, "quant_experts_init");
    if (format < QUANT_FP32 || format > QUANT_INT4)
        moe_fatal("quant_experts_init: unknown format %d", format);
    memset(qe, 0, sizeof(*qe));
    qe->src.forward = quant_experts_forward;
    qe->format = format;
    qe->n_layer = m->cfg.n_layer;
    qe->E = m->cfg.num_experts, qe->C = m->cfg.d_model, qe->F = m->spec.d_expert;
    const int E = qe->E, C = qe->C, F = qe->F;
    qe->w32 = floats_alloc((size_t)3 * F * C + 1);
    qe->moe_of = (int *)malloc_check((size_t)qe->n_layer * sizeof(int) + 1);
    for (int l = 0; l < qe->n_layer; l++) qe->moe_of[l] = m->state.blocks[l].moe ? qe->n_moe++ : -1;
    qe->w = (QMatrix *)calloc_check((size_t)qe->n_moe * E * 3 + 1, sizeof(QMatrix));
    for (int l = 0; l < qe->n_layer; l++) {
        if (qe->moe_of[l] < 0) continue;
        const LayerView *lw = &m->w.layers[l];
        QMatrix *wj = qe->w + (size_t)qe->moe_of[l] * E * 3;
        for (int e = 0; e < E; e++) {
            const size_t off = (size_t)e * F * C;
            qmatrix_quantize(&wj[e * 3 + QUANT_GATE], lw->e_gate + off, F, C, format);
            qmatrix_quantize(&wj[e * 3 + QUANT_UP], lw->e_up + off, F, C, format);
            qmatrix_quantize(&wj[e * 3 + QUANT_DOWN], lw->e_down + off, C, F, format);
            for (int k = 0; k < 3; k++) qe->bytes += qmatrix_bytes(&wj[e * 3 + k]);
        }
    }
    qe->fp32_bytes = (size_t)qe->n_moe * E * 3 * F * C * sizeof(float);
    scratch_reserve(qe, rows_max > 1 ? rows_max : 1);
}

void quant_experts_free(QuantExperts *qe) {
    for (size_t i = 0; i < (size_t)qe->n_moe * qe->E * 3; i++) qmatrix_free(&qe->w[i]);
    free(qe->w);
    free(qe->moe_of);
    free(qe->g), free(qe->u), free(qe->h), free(qe->w32);
    memset(qe, 0, sizeof(*qe));
}

void quant_experts_error(const QuantExperts *qe, const Model *m, double *err) {
    check_model(m, "quant_experts_error");
    const int E = qe->E, C = qe->C, F = qe->F;
    if (m->cfg.n_layer != qe->n_layer || m->cfg.num_experts != E || m->cfg.d_model != C ||
        m->spec.d_expert != F)
        moe_fatal("quant_experts_error: the model is not the one the experts came from");
    /* layer[j]: the block of MoE block j */
    int *layer = (int *)malloc_check((size_t)qe->n_moe * sizeof(int) + 1);
    for (int l = 0; l < qe->n_layer; l++)
        if (qe->moe_of[l] >= 0) layer[qe->moe_of[l]] = l;
    const int n = qe->n_moe * E;
#pragma omp parallel
    {
        float *wq = floats_alloc((size_t)F * C + 1);
#pragma omp for schedule(dynamic)
        for (int je = 0; je < n; je++) {
            const int j = je / E, e = je % E;
            const LayerView *lw = &m->w.layers[layer[j]];
            const float *orig[3] = {lw->e_gate, lw->e_up, lw->e_down};
            double diff = 0.0, norm = 0.0;
            for (int k = 0; k < 3; k++) {
                const float *w = orig[k] + (size_t)e * F * C;
                const QMatrix *q = &qe->w[(size_t)je * 3 + k];
                for (int o = 0; o < q->rows; o++) decode_row(wq + (size_t)o * q->cols, q, o);
                for (size_t i = 0; i < (size_t)F * C; i++) {
                    const double d = (double)w[i] - wq[i];
                    diff += d * d;
                    norm += (double)w[i] * w[i];
                }
            }
            err[je] = norm > 0.0 ? sqrt(diff / norm) : 0.0;
        }
        free(wq);
    }
    free(layer);
}
