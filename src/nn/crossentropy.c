/*
 * crossentropy.c: softmax cross-entropy of next-token logits against target ids.
 *
 * Per token n with logits z (V) and target y:
 *   p = softmax(z),  loss_n = -log p[y] = log(sum_j exp(z_j - m)) - (z_y - m),  m = max_j z_j
 * Subtracting the row max keeps exp() in range; computing the loss from the log-sum-exp
 * rather than log(p[y]) stays finite even when p[y] underflows to 0.
 *
 * Targets must lie in [0, V); the data loader checks token ids when it reads a shard.
 * probs may be logits itself (softmax in place): the model keeps one (N, V) buffer.
 *
 * Accumulation rule (ops.h): no parameters; dlogits is written.
 */
#include "nn/ops.h"

#include <math.h>

#include "nn/exp.h"

void crossentropy_forward(float *losses, float *probs, const float *logits, const int *targets,
                          int N, int V) {
    /* losses (N), probs (N, V), logits (N, V), targets (N) */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        const float z_target = z[targets[n]]; /* read before p (maybe z itself) is written */
        float m = -INFINITY;
        for (int j = 0; j < V; j++)
            if (z[j] > m) m = z[j];
#pragma omp simd
        for (int j = 0; j < V; j++) p[j] = nn_expf(z[j] - m);
        double sum = 0.0; /* summed in double, in order: exact enough for any vocabulary size */
        for (int j = 0; j < V; j++) sum += p[j];
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < V; j++) p[j] *= inv;
        losses[n] = (float)(log(sum) - ((double)z_target - m));
    }
}

void crossentropy_backward(float *dlogits, const float *probs, const int *targets, float scale,
                           int N, int V) {
    /* dlogits (N, V), probs (N, V), targets (N)
     * forward: loss_n = -log softmax(z_n)[y_n], and the caller's loss is scale * sum_n loss_n
     *   dlogits[n][j] = scale * (p[n][j] - [j == y_n])     -- written */
    if (!dlogits) return;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *dz = dlogits + (size_t)n * V;
        for (int j = 0; j < V; j++) dz[j] = scale * p[j];
        dz[targets[n]] -= scale;
    }
}
