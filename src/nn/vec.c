/*
 * vec.c: the elementwise steps and sums between the ops: residual adds, scaling, the token
 * embedding, the loss sum and the squared norm of the gradients.
 *
 * One version serves both CPU backends. Each output element has one owner, and every sum runs
 * in a fixed order, so no result depends on the thread count.
 */
#include "nn/ops.h"

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

void permute_rows(float *out, const float *in, const int *to, int n, int C, int back) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *src = back ? in + (size_t)to[i] * C : in + (size_t)i * C;
        float *dst = back ? out + (size_t)i * C : out + (size_t)to[i] * C;
        memcpy(dst, src, (size_t)C * sizeof(float));
    }
}
