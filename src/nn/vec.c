/*
 * vec.c: the elementwise steps and sums between the ops: residual adds, scaling, the token
 * embedding, the loss sum and the squared norm of the gradients.
 *
 * One version serves both CPU backends. Each output element has one owner, and every sum runs
 * in a fixed order, so no result depends on the thread count.
 */
#include "nn/ops.h"

#include <stdint.h>
#include <string.h>

void vec_add(float *y, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void vec_mul(float *y, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}

void vec_scale(float *x, float s, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* One float to the nearest bf16: bf16 keeps a float's top 16 bits, so the low 16 are rounded
 * away: add half of the unit being dropped (0x8000), less one when the kept part is even so
 * that an exact half goes to the even neighbour, and clear them. A carry into the exponent is
 * the right result (the next binade, or an infinity past the largest bf16). */
static float round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return x; /* NaN */
    const uint32_t keep_odd = (u >> 16) & 1u;
    u = (u + 0x7fffu + keep_odd) & 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

void vec_round_bf16(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = round_bf16(x[i]);
}

double vec_sum(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    return s;
}

size_t vec_chunks(size_t n) {
    return (n + VEC_CHUNK - 1) / VEC_CHUNK + 1;
}

double vec_sum_squares(double *partial, const float *x, size_t n) {
    const size_t n_chunks = (n + VEC_CHUNK - 1) / VEC_CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t ch = 0; ch < n_chunks; ch++) {
        size_t end = (ch + 1) * VEC_CHUNK < n ? (ch + 1) * VEC_CHUNK : n;
        /* eight running sums, element i into sum i % 8, so that the additions do not wait on
         * each other (and vectorize); the order is fixed, so is the result */
        double lane[8] = {0};
        size_t i = ch * VEC_CHUNK;
        for (; i + 8 <= end; i += 8)
            for (int j = 0; j < 8; j++) lane[j] += (double)x[i + j] * x[i + j];
        for (int j = 0; i < end; i++, j++) lane[j] += (double)x[i] * x[i];
        partial[ch] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                      ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
    double ss = 0.0;
    for (size_t ch = 0; ch < n_chunks; ch++) ss += partial[ch];
    return ss;
}

void embed_forward(float *x, const int *tokens, const float *emb, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(x + (size_t)n * C, emb + (size_t)tokens[n] * C, (size_t)C * sizeof(float));
}

void embed_backward(float *demb, const float *dx, const int *tokens, int N, int C) {
    /* parallel over channels, so every gradient element is summed by one thread, in token
     * order */
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < C; ch++)
        for (int n = 0; n < N; n++) demb[(size_t)tokens[n] * C + ch] += dx[(size_t)n * C + ch];
}

void copy_block(float *dst, int ldd, const float *src, int lds, int rows, int width, int add) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        float *d = dst + (size_t)r * ldd;
        const float *s = src + (size_t)r * lds;
        for (int j = 0; j < width; j++) d[j] = add ? d[j] + s[j] : s[j];
    }
}

void permute_rows(float *out, const float *in, const int *to, int n, int C, int back) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *src = back ? in + (size_t)to[i] * C : in + (size_t)i * C;
        float *dst = back ? out + (size_t)i * C : out + (size_t)to[i] * C;
        memcpy(dst, src, (size_t)C * sizeof(float));
    }
}
