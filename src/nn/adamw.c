/*
 * adamw.c: the AdamW update on a flat slice of n parameters.
 *
 * With step t >= 1, gradient g and the moments m, v (both start at zero):
 *   m = beta1 m + (1 - beta1) g              running mean of the gradient
 *   v = beta2 v + (1 - beta2) g^2            running mean of its square
 *   m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)   undo the bias toward zero
 *   p = p - lr * (m_hat / (sqrt(v_hat) + eps) + wd * p)
 *
 * The weight decay is decoupled (Loshchilov & Hutter): it shrinks p directly instead of being
 * added to g, so it is not rescaled by 1/sqrt(v). It is applied alongside the Adam step:
 * both terms use p from before the update. Because the Adam term does not depend on p, this
 * is the same as decaying first (p *= 1 - lr wd) and then taking the Adam step, as PyTorch's
 * AdamW does.
 *
 * The first step moves each parameter by about lr * sign(g) (m_hat = g, v_hat = g^2), which
 * is why Adam's learning rate is a step size in parameter units.
 */
#include "nn/ops.h"

#include <math.h>

void adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t) {
    /* p (n), g (n), m (n), v (n) */
    float bc1 = (float)(1.0 - pow((double)beta1, t));
    float bc2 = (float)(1.0 - pow((double)beta2, t));
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
        v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
        float mhat = m[i] / bc1;
        float vhat = v[i] / bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p[i]);
    }
}
