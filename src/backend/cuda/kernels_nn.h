/*
 * kernels_nn.h: the arithmetic of the CUDA backend's dense ops (cuda_nn.cu) as plain C bodies
 * that both sides compile: nvcc for the kernels, gcc for tests/test_kernels_nn.c, which runs
 * them on the host in loops that walk each kernel's grid in the kernel's order and compares
 * the result with the reference ops of nn/. On a machine without a GPU that is how the
 * kernels' math is checked (base/hd.h).
 *
 * Three kinds of body:
 *   - one thread's share of an elementwise op over a flat index (knn_*_share): the elements
 *     first, first + stride, ... of a grid-stride loop, so the kernel and the host loop share
 *     the indexing as well as the arithmetic;
 *   - one lane's strided share of a row (knn_*_lane): lane l of a warp takes the elements
 *     l, l + 32, l + 64, ... (neighbouring lanes read neighbouring floats);
 *   - one step of a reduction, and the order of the steps. A warp reduces in the butterfly
 *     order: for off = 16, 8, 4, 2, 1, v[lane] = v[lane] + v[lane ^ off]. On the device that
 *     is __shfl_xor_sync (knn_warp_sum_d, knn_warp_max_f); on the host knn_butterfly_sum_d
 *     and knn_butterfly_max_f replay it over an array of 32 values. After the last step every
 *     lane holds the same bits (a + b and b + a round alike), the result of a fixed tree.
 *
 * Same bits on both sides. nvcc fuses a multiply and a following add into one FMA (one
 * rounding instead of two) unless told not to, and gcc -std=c11 never does: so the bodies do
 * their +, - and * through knn_fadd, knn_fmul, ... which are the __fadd_rn family on the
 * device (never fused) and the plain operators on the host. Division and sqrt are correctly
 * rounded on both (nvcc's defaults, -prec-div and -prec-sqrt; the backend must not be built
 * with --use_fast_math). What still differs is the library functions: expf and log are
 * within an ulp or two of exact on the device, glibc's on the host (and the reference's
 * nn_expf within 2 ulp): the ops that call them (SwiGLU, cross-entropy) match the reference
 * within the tolerance rule, the rest bit for bit where their order is the reference's.
 *
 * Plain C that also compiles as C++ (nvcc): every name starts with knn_.
 */
#ifndef MOE_BACKEND_KERNELS_NN_H
#define MOE_BACKEND_KERNELS_NN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/hd.h"

/* Threads per block of every kernel of cuda_nn.cu (CUDA_THREADS of cuda.cuh, checked there);
 * the warp-per-row kernels run KNN_ROWS_PER_BLOCK rows (warps) a block. */
#define KNN_THREADS 256
#define KNN_ROWS_PER_BLOCK (KNN_THREADS / MOE_WARP)
/* VEC_CHUNK of nn/ops.h (checked in cuda_nn.cu and the test): sum_squares' chunk, and the
 * number of interleaved running sums inside one */
#define KNN_CHUNK ((size_t)1 << 16)
#define KNN_SUMSQ_LANES 8
/* loads a sum_squares lane issues before it adds them: the sum is one long dependent chain,
 * so the memory latency is hidden by having a batch in flight, not by more threads */
#define KNN_SUMSQ_BATCH 16
/* floats that cuda_sum stages in shared memory per step of its one summing thread */
#define KNN_SUM_TILE 2048
/* token ids that embed_backward stages in shared memory per step */
#define KNN_EMBED_TILE 1024
/* rows per partial sum of rmsnorm's dw (a fixed number: the order of the sum, and so its bits,
 * does not depend on the GPU) */
#define KNN_DW_ROWS 64
/* RMSNORM_EPS of nn/ops.h (checked in cuda_nn.cu and the test) */
#define KNN_RMS_EPS 1e-5f

/* unroll a loop of constant count on the device (its pass of nvcc only: the host compiler
 * knows no such pragma) */
#ifdef __CUDA_ARCH__
#define KNN_UNROLL _Pragma("unroll")
#else
#define KNN_UNROLL
#endif

/* ---- arithmetic that is never contracted --------------------------------------------------- */

MOE_HD float knn_fadd(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
MOE_HD float knn_fsub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
MOE_HD float knn_fmul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
MOE_HD double knn_dadd(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
MOE_HD double knn_dsub(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}
MOE_HD double knn_dmul(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

/* ---- warp reductions: the step, the device's shuffles, the host's replay ------------------- */

/* one butterfly step of a max: a NaN-free max is exact, so any order gives the same bits */
MOE_HD float knn_fmax_step(float mine, float theirs) {
    return theirs > mine ? theirs : mine;
}

#ifdef __CUDACC__
/* The butterfly over the 32 lanes of a warp; every lane must take part (the warp-per-row
 * kernels keep a whole warp on one row, so a warp either runs or leaves together). */
__device__ __forceinline__ double knn_warp_sum_d(double v) {
    for (int off = MOE_WARP / 2; off > 0; off /= 2)
        v = knn_dadd(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
__device__ __forceinline__ float knn_warp_max_f(float v) {
    for (int off = MOE_WARP / 2; off > 0; off /= 2)
        v = knn_fmax_step(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
#endif

/* The host's replay of the same butterfly over v[0 .. 32), in place (every lane ends with the
 * result, as on the device); returns lane 0's value. Host only. */
static inline double knn_butterfly_sum_d(double v[MOE_WARP]) {
    for (int off = MOE_WARP / 2; off > 0; off /= 2) {
        double next[MOE_WARP];
        for (int l = 0; l < MOE_WARP; l++) next[l] = knn_dadd(v[l], v[l ^ off]);
        for (int l = 0; l < MOE_WARP; l++) v[l] = next[l];
    }
    return v[0];
}
static inline float knn_butterfly_max_f(float v[MOE_WARP]) {
    for (int off = MOE_WARP / 2; off > 0; off /= 2) {
        float next[MOE_WARP];
        for (int l = 0; l < MOE_WARP; l++) next[l] = knn_fmax_step(v[l], v[l ^ off]);
        for (int l = 0; l < MOE_WARP; l++) v[l] = next[l];
    }
    return v[0];
}

/* ---- vec: elementwise steps ------------------------------------------------------------------
 * One thread's share of a grid-stride loop: elements first, first + stride, ... below n. */

MOE_HD void knn_add_share(float *y, const float *a, const float *b, size_t n, size_t first,
                          size_t stride) {
    for (size_t i = first; i < n; i += stride) y[i] = knn_fadd(a[i], b[i]);
}
MOE_HD void knn_mul_share(float *y, const float *a, const float *b, size_t n, size_t first,
                          size_t stride) {
    for (size_t i = first; i < n; i += stride) y[i] = knn_fmul(a[i], b[i]);
}
MOE_HD void knn_scale_share(float *x, float s, size_t n, size_t first, size_t stride) {
    for (size_t i = first; i < n; i += stride) x[i] = knn_fmul(x[i], s);
}
/* vec_round_bf16: a NaN as it is; else the 16 low bits rounded off, half to even (the carry
 * may reach the exponent: the next binade, or an infinity), on the bits as an integer */
MOE_HD void knn_round_bf16_share(float *y, const float *x, size_t n, size_t first, size_t stride) {
    for (size_t i = first; i < n; i += stride) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        if ((u & 0x7fffffffu) <= 0x7f800000u) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&y[i], &u, sizeof u);
    }
}

/* ---- vec: sums -------------------------------------------------------------------------------
 * sum: vec_sum's order (index order, in double), so the same bits. The data pass through
 * shared memory in tiles; one thread adds a tile's m values to s, in order. */
MOE_HD double knn_sum_tile(double s, const float *tile, int m) {
    for (int k = 0; k < m; k++) s = knn_dadd(s, (double)tile[k]);
    return s;
}

/* sum_squares: vec_sum_squares' order exactly. Chunk ch covers [ch KNN_CHUNK, end); its
 * running sum j (0 <= j < 8, one thread each) takes the elements i with i % 8 == j, in order
 * (the product of two floats is exact in double, so fused or not it rounds alike). */
MOE_HD double knn_sumsq_lane(const float *x, size_t n, size_t ch, int j) {
    const size_t end = (ch + 1) * KNN_CHUNK < n ? (ch + 1) * KNN_CHUNK : n;
    const size_t span = (size_t)KNN_SUMSQ_LANES * KNN_SUMSQ_BATCH;
    double s = 0.0;
    size_t i = ch * KNN_CHUNK + (size_t)j;
    /* batches of KNN_SUMSQ_BATCH loads, then their adds in the same order as one at a time */
    for (; i + (span - KNN_SUMSQ_LANES) < end; i += span) {
        float a[KNN_SUMSQ_BATCH];
        KNN_UNROLL
        for (int k = 0; k < KNN_SUMSQ_BATCH; k++) a[k] = x[i + (size_t)k * KNN_SUMSQ_LANES];
        KNN_UNROLL
        for (int k = 0; k < KNN_SUMSQ_BATCH; k++)
            s = knn_dadd(s, knn_dmul((double)a[k], (double)a[k]));
    }
    for (; i < end; i += KNN_SUMSQ_LANES) s = knn_dadd(s, knn_dmul((double)x[i], (double)x[i]));
    return s;
}
/* a chunk's eight running sums, paired as vec_sum_squares pairs them */
MOE_HD double knn_sumsq_combine(const double *lane) {
    return knn_dadd(knn_dadd(knn_dadd(lane[0], lane[1]), knn_dadd(lane[2], lane[3])),
                    knn_dadd(knn_dadd(lane[4], lane[5]), knn_dadd(lane[6], lane[7])));
}
/* the chunks' sums, in order */
MOE_HD double knn_sum_partials(const double *partial, size_t n_chunks) {
    double s = 0.0;
    for (size_t ch = 0; ch < n_chunks; ch++) s = knn_dadd(s, partial[ch]);
    return s;
}

/* ---- vec: embedding and row permutation ------------------------------------------------------
 * Flat index i over (rows, C): row i / C, channel i % C. Copies: exact. */
MOE_HD void knn_embed_share(float *x, const int *tokens, const float *emb, size_t n_elems, int C,
                            size_t first, size_t stride) {
    for (size_t i = first; i < n_elems; i += stride) {
        const size_t row = i / (size_t)C, c = i % (size_t)C;
        x[i] = emb[(size_t)tokens[row] * C + c];
    }
}
/* copy_block: element i of the rows x width block, row i / width, column i % width */
MOE_HD void knn_copy_block_share(float *dst, int ldd, const float *src, int lds, int width, int add,
                                 size_t n_elems, size_t first, size_t stride) {
    for (size_t i = first; i < n_elems; i += stride) {
        const size_t r = i / (size_t)width, j = i % (size_t)width;
        float *d = dst + r * (size_t)ldd + j;
        const float s = src[r * (size_t)lds + j];
        *d = add ? knn_fadd(*d, s) : s;
    }
}
MOE_HD void knn_permute_share(float *out, const float *in, const int *to, size_t n_elems, int C,
                              int back, size_t first, size_t stride) {
    for (size_t i = first; i < n_elems; i += stride) {
        const size_t row = i / (size_t)C, c = i % (size_t)C;
        const size_t moved = (size_t)to[row] * C + c;
        if (back)
            out[i] = in[moved];
        else
            out[moved] = in[i];
    }
}

/* embed backward: the thread of vocabulary row v and channel c walks the tokens in order and
 * adds dx[n][c] for every token n equal to v, onto acc (which started as demb[v][c]): the
 * reference's order for that element, so the same bits. tok holds m token ids, dx_col points at
 * dx[n0][c] for the first of them. */
MOE_HD float knn_embed_grad_tile(float acc, const int *tok, int m, const float *dx_col, int C,
                                 int v) {
    for (int k = 0; k < m; k++)
        if (tok[k] == v) acc = knn_fadd(acc, dx_col[(size_t)k * C]);
    return acc;
}

/* ---- rmsnorm ---------------------------------------------------------------------------------
 * A warp per row. The sums are in double as in rmsnorm.c, but over each lane's strided share
 * and then the butterfly, not in index order: a few units in the last place of a double apart,
 * invisible after the rounding to float almost always. */
MOE_HD double knn_rms_ss_lane(const float *xn, int C, int lane) {
    double ss = 0.0;
    for (int c = lane; c < C; c += MOE_WARP)
        ss = knn_dadd(ss, knn_dmul((double)xn[c], (double)xn[c]));
    return ss;
}
MOE_HD float knn_rms_rstd(double ss, int C) {
    return (float)(1.0 / sqrt(knn_dadd(ss / C, (double)KNN_RMS_EPS)));
}
MOE_HD void knn_rms_y_lane(float *yn, const float *xn, const float *w, float r, int C, int lane) {
    for (int c = lane; c < C; c += MOE_WARP) yn[c] = knn_fmul(knn_fmul(xn[c], r), w[c]);
}

/* backward, dx: dot = sum_c dy w x (double), coef = r^3 dot / C, dx = r w dy - coef x */
MOE_HD double knn_rms_dot_lane(const float *dyn, const float *w, const float *xn, int C, int lane) {
    double dot = 0.0;
    for (int c = lane; c < C; c += MOE_WARP)
        dot = knn_dadd(dot, knn_dmul(knn_dmul((double)dyn[c], (double)w[c]), (double)xn[c]));
    return dot;
}
MOE_HD float knn_rms_coef(float r, double dot, int C) {
    const double rd = (double)r;
    return (float)(knn_dmul(knn_dmul(knn_dmul(rd, rd), rd), dot) / C);
}
MOE_HD void knn_rms_dx_lane(float *dxn, const float *dyn, const float *xn, const float *w, float r,
                            float coef, int C, int lane) {
    for (int c = lane; c < C; c += MOE_WARP)
        dxn[c] = knn_fsub(knn_fmul(knn_fmul(r, w[c]), dyn[c]), knn_fmul(coef, xn[c]));
}

/* backward, dw: column c's sum over the rows [rb KNN_DW_ROWS, ...) of row block rb, in row
 * order and in double; then the blocks' partial sums in order, added to dw. The reference sums
 * all N rows in one run, so the bits may differ in the double's last places. */
MOE_HD double knn_rms_dw_rows(const float *dy, const float *x, const float *rstd, int N, int C,
                              int rb, int c) {
    const int n0 = rb * KNN_DW_ROWS, n1 = n0 + KNN_DW_ROWS < N ? n0 + KNN_DW_ROWS : N;
    double acc = 0.0;
    for (int n = n0; n < n1; n++) {
        const size_t i = (size_t)n * C + c;
        acc = knn_dadd(acc, knn_dmul(knn_dmul((double)dy[i], (double)x[i]), (double)rstd[n]));
    }
    return acc;
}
MOE_HD float knn_rms_dw_total(float dw, const double *partial, int n_rb, int C, int c) {
    double acc = 0.0;
    for (int rb = 0; rb < n_rb; rb++) acc = knn_dadd(acc, partial[(size_t)rb * C + c]);
    return knn_fadd(dw, (float)acc);
}

/* ---- rope --------------------------------------------------------------------------------
 * Pair p of x (B, T, H, D) viewed as (B T H, D/2) pairs: i = p % (D/2), row = p / (D/2) =
 * (b T + t) H + h, so t = (row / H) % T. Rotated by sign * a(t, i), with the table cs
 * (T_max, D/2, 2); negating the sine is exact, as in rope.c. */
MOE_HD void knn_rope_share(float *x, const float *cs, int T, int H, int D, float sign,
                           size_t n_pairs, size_t first, size_t stride) {
    const size_t half = (size_t)(D / 2);
    for (size_t p = first; p < n_pairs; p += stride) {
        const size_t i = p % half, row = p / half, t = (row / (size_t)H) % (size_t)T;
        const float c = cs[(t * half + i) * 2], s = knn_fmul(sign, cs[(t * half + i) * 2 + 1]);
        float *q = x + row * (size_t)D + 2 * i;
        const float x0 = q[0], x1 = q[1];
        q[0] = knn_fsub(knn_fmul(x0, c), knn_fmul(x1, s));
        q[1] = knn_fadd(knn_fmul(x0, s), knn_fmul(x1, c));
    }
}

/* Decoding: pair p of x (N, H, D) as (N H, D/2) pairs, its row's token at position
 * pos[row / H] (rope_forward_at). */
MOE_HD void knn_rope_at_share(float *x, const float *cs, const int *pos, int H, int D,
                              size_t n_pairs, size_t first, size_t stride) {
    const size_t half = (size_t)(D / 2);
    for (size_t p = first; p < n_pairs; p += stride) {
        const size_t i = p % half, row = p / half, t = (size_t)pos[row / (size_t)H];
        const float c = cs[(t * half + i) * 2], s = cs[(t * half + i) * 2 + 1];
        float *q = x + row * (size_t)D + 2 * i;
        const float x0 = q[0], x1 = q[1];
        q[0] = knn_fsub(knn_fmul(x0, c), knn_fmul(x1, s));
        q[1] = knn_fadd(knn_fmul(x0, s), knn_fmul(x1, c));
    }
}

/* ---- swiglu ------------------------------------------------------------------------------ */

MOE_HD float knn_sigmoid(float g) {
    return 1.0f / knn_fadd(1.0f, expf(-g)); /* expf overflow: inf, sigmoid 0, as in swiglu.c */
}
MOE_HD void knn_swiglu_fwd_share(float *h, const float *g, const float *u, size_t n, size_t first,
                                 size_t stride) {
    for (size_t i = first; i < n; i += stride)
        h[i] = knn_fmul(knn_fmul(g[i], knn_sigmoid(g[i])), u[i]);
}
/* du = dh silu(g), dg = dh u sigma (1 + g (1 - sigma)); either may be NULL */
MOE_HD void knn_swiglu_bwd_share(float *dg, float *du, const float *dh, const float *g,
                                 const float *u, size_t n, size_t first, size_t stride) {
    for (size_t i = first; i < n; i += stride) {
        const float sig = knn_sigmoid(g[i]);
        if (du) du[i] = knn_fmul(knn_fmul(dh[i], g[i]), sig);
        if (dg) {
            const float slope = knn_fadd(1.0f, knn_fmul(g[i], knn_fsub(1.0f, sig)));
            dg[i] = knn_fmul(knn_fmul(knn_fmul(dh[i], u[i]), sig), slope);
        }
    }
}

/* ---- cross-entropy -----------------------------------------------------------------------
 * Forward: a warp per row: the max (butterfly of knn_fmax_step), p = exp(z - max) with the sum
 * in double (lane shares, then the butterfly: the reference sums in index order), p *= 1 /
 * sum, the loss from the log-sum-exp. p may be z itself: a lane writes only its own elements,
 * and z[target] is read before any lane writes. */
MOE_HD float knn_ce_max_lane(const float *z, int V, int lane) {
    float m = -INFINITY;
    for (int j = lane; j < V; j += MOE_WARP) m = knn_fmax_step(m, z[j]);
    return m;
}
MOE_HD double knn_ce_exp_lane(float *p, const float *z, float m, int V, int lane) {
    double s = 0.0;
    for (int j = lane; j < V; j += MOE_WARP) {
        const float e = expf(knn_fsub(z[j], m));
        p[j] = e;
        s = knn_dadd(s, (double)e);
    }
    return s;
}
MOE_HD float knn_ce_inv(double sum) {
    return (float)(1.0 / sum);
}
MOE_HD void knn_ce_scale_lane(float *p, float inv, int V, int lane) {
    for (int j = lane; j < V; j += MOE_WARP) p[j] = knn_fmul(p[j], inv);
}
MOE_HD float knn_ce_loss(double sum, float z_target, float m) {
    return (float)knn_dsub(log(sum), knn_dsub((double)z_target, (double)m));
}
/* Backward, elementwise over (N, V): scale p - scale at the target, as the reference rounds it
 * (scale p first, then the subtraction) */
MOE_HD void knn_ce_grad_share(float *dz, const float *p, const int *targets, float scale, int V,
                              size_t n_elems, size_t first, size_t stride) {
    for (size_t i = first; i < n_elems; i += stride) {
        const size_t row = i / (size_t)V, j = i % (size_t)V;
        const float d = knn_fmul(scale, p[i]);
        dz[i] = (size_t)targets[row] == j ? knn_fsub(d, scale) : d;
    }
}

/* ---- adamw -------------------------------------------------------------------------------
 * The step's constants (AdamwStep, with the bias corrections worked out once on the host). */
typedef struct {
    float lr, beta1, beta2, eps, wd, grad_scale;
    float bc1, bc2; /* 1 - beta^t, as adamw.c rounds it: in double, then to float */
    int clear_grad;
} KnnAdamw;

MOE_HD float knn_adamw_bias(float beta, int step) {
    return (float)(1.0 - pow((double)beta, (double)step));
}
/* AdamwStep's fields (nn/ops.h, which this header does not include) as the kernel takes them */
MOE_HD KnnAdamw knn_adamw_make(float lr, float beta1, float beta2, float eps, float wd,
                               float grad_scale, int step, int clear_grad) {
    KnnAdamw k;
    k.lr = lr, k.beta1 = beta1, k.beta2 = beta2, k.eps = eps, k.wd = wd;
    k.grad_scale = grad_scale;
    k.bc1 = knn_adamw_bias(beta1, step), k.bc2 = knn_adamw_bias(beta2, step);
    k.clear_grad = clear_grad;
    return k;
}
MOE_HD void knn_adamw_share(float *p, float *g, float *m, float *v, size_t n, KnnAdamw k,
                            size_t first, size_t stride) {
    for (size_t i = first; i < n; i += stride) {
        const float gi = knn_fmul(g[i], k.grad_scale);
        const float mi = knn_fadd(knn_fmul(k.beta1, m[i]), knn_fmul(knn_fsub(1.0f, k.beta1), gi));
        const float vi =
            knn_fadd(knn_fmul(k.beta2, v[i]), knn_fmul(knn_fmul(knn_fsub(1.0f, k.beta2), gi), gi));
        const float mhat = mi / k.bc1, vhat = vi / k.bc2;
        const float step = knn_fadd(mhat / knn_fadd(sqrtf(vhat), k.eps), knn_fmul(k.wd, p[i]));
        m[i] = mi;
        v[i] = vi;
        p[i] = knn_fsub(p[i], knn_fmul(k.lr, step));
        if (k.clear_grad) g[i] = 0.0f;
    }
}

#endif
