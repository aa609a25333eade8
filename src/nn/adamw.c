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
 * The gradient enters multiplied by grad_scale (the clipping factor, 1 when the norm is under
 * the threshold), so clipping costs no pass of its own over the gradients.
 *
 * The first step moves each parameter by about lr * sign(g) (m_hat = g, v_hat = g^2), which
 * is why Adam's learning rate is a step size in parameter units.
 */
#include "nn/ops.h"

#include <math.h>

void adamw_update(float *p, const float *g, float *m, float *v, size_t n, const AdamwStep *s) {
    /* p (n), g (n), m (n), v (n) */
    const float lr = s->lr, beta1 = s->beta1, beta2 = s->beta2, eps = s->eps;
    const float wd = s->weight_decay, gs = s->grad_scale;
    const float bc1 = (float)(1.0 - pow((double)beta1, s->step));
    const float bc2 = (float)(1.0 - pow((double)beta2, s->step));
    /* one pass over the four arrays: the update is bound by memory traffic, not arithmetic.
     * The lanes compute exactly what the scalar loop would (no fused multiply-adds in the
     * baseline instruction set; division and sqrt are correctly rounded in every lane). */
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i] * gs;
        m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
        v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        const float mhat = m[i] / bc1;
        const float vhat = v[i] / bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}
