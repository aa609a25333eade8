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

/* One element's update (the math above); the two loops below differ only in clearing g. */
static inline void adamw_element(float *p, float gi, float *m, float *v, float lr, float beta1,
                                 float beta2, float eps, float wd, float bc1, float bc2) {
    *m = beta1 * *m + (1.0f - beta1) * gi;
    *v = beta2 * *v + (1.0f - beta2) * gi * gi;
    const float mhat = *m / bc1;
    const float vhat = *v / bc2;
    *p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * *p);
}

void adamw_update(float *p, float *g, float *m, float *v, size_t n, const AdamwStep *s) {
    /* p (n), g (n), m (n), v (n) */
    const float lr = s->lr, beta1 = s->beta1, beta2 = s->beta2, eps = s->eps;
    const float wd = s->weight_decay, gs = s->grad_scale;
    const float bc1 = (float)(1.0 - pow((double)beta1, s->step));
    const float bc2 = (float)(1.0 - pow((double)beta2, s->step));
    /* one pass over the four arrays: the update is bound by memory traffic, not arithmetic,
     * so clearing g as it goes costs almost nothing, where a pass of its own would read or
     * write every gradient once more. The lanes compute exactly what the scalar loop would (no
     * fused multiply-adds in the baseline instruction set; division and sqrt are correctly
     * rounded in every lane). */
    if (s->clear_grad) {
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++) {
            adamw_element(&p[i], g[i] * gs, &m[i], &v[i], lr, beta1, beta2, eps, wd, bc1, bc2);
            g[i] = 0.0f;
        }
    } else {
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++)
            adamw_element(&p[i], g[i] * gs, &m[i], &v[i], lr, beta1, beta2, eps, wd, bc1, bc2);
    }
}
