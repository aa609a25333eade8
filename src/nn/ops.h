/*
 * ops.h: the dense transformer ops as forward/backward pairs.
 *
 * The plain C reference lives in one .c file per op (matmul.c, rmsnorm.c, rope.c,
 * attention.c, swiglu.c, crossentropy.c, adamw.c, and vec.c for the elementwise steps
 * between them). These are the cpu-ref backend's ops; the cpu backend (src/backend/) runs
 * faster versions of some of them and these of the rest, and model.c reaches both only
 * through the backend's table (src/backend/backend.h).
 *
 * Conventions used by every op:
 *   - Argument order: outputs first, then inputs, then weights, then dimensions.
 *   - Row-major float32. A linear layer's weight is W (OUT, IN): y = x W^T, like PyTorch.
 *   - Dimension letters: B batch, T time, C channels, H heads, D head size (C / H),
 *     N tokens (B*T), F hidden size of a feed-forward, V vocabulary.
 *   - ACCUMULATION RULE for backward passes: parameter gradients are ADDED to (+=), so
 *     micro-batches accumulate; activation gradients are WRITTEN (=). Callers that need to
 *     sum two activation gradients (the residual stream) add them explicitly.
 *   - Any gradient pointer may be NULL when that gradient is not wanted.
 */
#ifndef MOE_NN_OPS_H
#define MOE_NN_OPS_H

#include <stddef.h>

/* NN_WIDE_LANES before a function whose loops are bound by arithmetic (SwiGLU's, with nn_expf
 * in every element): GCC compiles it also for AVX2 and AVX-512 and the loader picks the widest
 * the CPU runs (target_clones, on x86-64 Linux), so the loops take 8 or 16 lanes instead of the
 * baseline's 4 (SwiGLU's pass in half the time on an AVX-512 Xeon). The bits are the same in
 * every version: the build never fuses a multiply and an add (-std=c11 keeps contraction off),
 * +, -, *, / and the comparisons are exact in every lane, and no loop so marked reduces over
 * its lanes except to a maximum, which no order of comparisons changes. Loops bound by memory
 * traffic gain nothing from it (AdamW and rmsnorm measured none); attention's softmax gains
 * once its in-order sums run several rows side by side (backend/cpu/attention_gemm.c). */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define NN_WIDE_LANES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define NN_WIDE_LANES
#endif

/* ---- matmul: y (N, OUT) = x (N, IN) @ W (OUT, IN)^T ---------------------------------------------
 * Backward: dx (N, IN) = dy @ W;  dW (OUT, IN) += dy^T @ x. Plain loops here; sgemm in the
 * cpu backend.
 * (Not I and O: <complex.h>, pulled in by cblas.h, defines I as a macro.) */
void matmul_forward(float *y, const float *x, const float *W, int N, int IN, int OUT);
void matmul_backward(float *dx, float *dW, const float *dy, const float *x, const float *W, int N,
                     int IN, int OUT);

/* ---- rmsnorm: y = x / sqrt(mean(x^2) + eps) * w, per row of C ------------------------------
 * rstd (N) saves 1/sqrt(mean(x^2) + eps) for the backward pass. */
#define RMSNORM_EPS 1e-5f
void rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int N, int C);
void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                      const float *rstd, int N, int C);

/* ---- rotary position embedding, applied in place to q or k laid out (B, T, H, D) ----------
 * Pairs (2i, 2i+1) of each head are rotated by angle t * theta^(-2i/D). The backward pass is
 * the rotation by the opposite angle, also in place on the gradient.
 * rope_table fills cs (T_max, D/2, 2) with cos, sin of every angle once (a model keeps it for
 * its whole run); rope_forward / rope_backward then read its first T rows, any T <= T_max. */
void rope_table(float *cs, int T_max, int D, float theta);
void rope_forward(float *x, const float *cs, int B, int T, int H, int D);
void rope_backward(float *dx, const float *cs, int B, int T, int H, int D);
/* Decoding (src/infer/decode.c): one new token per sequence, each at its own position. x (N,
 * H, D), row n rotated by a(pos[n], i): the rotation rope_forward gives token pos[n] of a
 * sequence. */
void rope_forward_at(float *x, const float *cs, const int *pos, int N, int H, int D);

/* ---- causal self-attention on projected, rotated q, k, v ----------------------------------
 * H query heads and Hkv key-value heads (Hkv divides H); queries and keys of D channels, values
 * and outputs of Dv (latent attention's differ; else Dv = D): q (B, T, H D), k (B, T, Hkv D),
 * v (B, T, Hkv Dv), out (B, T, H Dv). Query head h attends with key-value head h / (H / Hkv):
 * Hkv = H is multi-head, Hkv < H grouped-query (Hkv = 1 multi-query) attention.
 * out = softmax(q k^T / sqrt(D) + causal mask) v, head by head.
 * att (B, H, T, T) keeps the softmax probabilities for the backward pass (upper triangle 0). */
void attention_forward(float *out, float *att, const float *q, const float *k, const float *v,
                       int B, int T, int H, int Hkv, int D, int Dv);
/* ws (n_ws, T, T) is workspace, one T x T slice per thread: the backward pass runs on at most
 * n_ws threads (fewer slices only cost speed, never change a result). A model sizes it once for
 * omp_get_max_threads() threads. These are the loop-by-loop reference; the cpu backend's
 * version (src/backend/cpu/attention_gemm.c) is built on sgemm and tested against them.
 * dk and dv sum over the heads of each group. */
void attention_backward(float *dq, float *dk, float *dv, float *ws, const float *dout,
                        const float *att, const float *q, const float *k, const float *v, int B,
                        int T, int H, int Hkv, int D, int Dv, int n_ws);
/* Decoding's attention: N new tokens, each against its sequence's cache. kc (S, Tc, Hkv D), vc
 * (S, Tc, Hkv Dv): sequence s's keys and values at positions 0 .. Tc - 1. Row n of q (N, H D)
 * and out (N, H Dv) is position t of sequence s, rows[n] = s Tc + t (its own key and value
 * already in the cache there), and attends to positions 0 .. t: several rows of one sequence
 * at t, t + 1, ... attend causally among themselves. att (N, H, Tc) the probabilities (0 past
 * t). Row t of attention_forward's output, given the first t + 1 keys and values, in the same
 * arithmetic order. No backward: nothing trains here. */
void attention_decode(float *out, float *att, const float *q, const float *kc, const float *vc,
                      const int *rows, int N, int H, int Hkv, int D, int Dv, int Tc);
/* ---- SwiGLU activation: h (N, F) = silu(g) * u, silu(g) = g * sigmoid(g) ------------------ */
void swiglu_forward(float *h, const float *g, const float *u, int N, int F);
void swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u, int N,
                     int F);

/* ---- cross-entropy over logits (N, V) with targets (N) -------------------------------------
 * Forward writes per-token losses (N) (so the caller sums them in a fixed order, which keeps
 * results deterministic) and overwrites probs (N, V) with the softmax.
 * probs may alias logits (the softmax is then computed in place).
 * Backward: dlogits (N, V) = (probs - onehot(target)) * scale, scale usually 1 / (N * accum). */
void crossentropy_forward(float *losses, float *probs, const float *logits, const int *targets,
                          int N, int V);
void crossentropy_backward(float *dlogits, const float *probs, const int *targets, float scale,
                           int N, int V);

/* ---- AdamW on a flat slice of n parameters --------------------------------------------------
 * m, v: first and second moment; step t >= 1 (bias correction); weight_decay is decoupled
 * (p -= lr * wd * p) and the caller passes 0 for tensors that take no decay (norms); the
 * gradient is read as g * grad_scale (clipping), then left as it is, or set to zero when
 * clear_grad is 1 (the next step's gradients accumulate from zero without a pass of their own;
 * p, m and v are the same bits either way). */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float grad_scale; /* the clipping factor: 1, or clip / norm */
    int step;         /* t */
    int clear_grad;   /* 1: g = 0 once read */
} AdamwStep;
void adamw_update(float *p, float *g, float *m, float *v, size_t n, const AdamwStep *s);

/* ---- the steps between the ops (vec.c) ------------------------------------------------------
 * y = a + b and y = a * b elementwise (y may be a or b); x *= s. */
void vec_add(float *y, const float *a, const float *b, size_t n);
void vec_mul(float *y, const float *a, const float *b, size_t n);
void vec_scale(float *x, float s, size_t n);
/* y = x rounded to the nearest bfloat16 (8 bits of mantissa; ties to the even one), kept in
 * float: what storing a float in bf16 and reading it back gives. Infinities stay, a NaN stays a
 * NaN, a float too large for bf16 becomes an infinity. y may be x. */
void vec_round_bf16(float *y, const float *x, size_t n);
/* sum of x[0 .. n) in index order, in double (the loss over the tokens) */
double vec_sum(const float *x, size_t n);
/* Sum of squares of x[0 .. n) (the gradient norm), in double: chunks of VEC_CHUNK elements
 * summed in parallel into partial (vec_chunks(n) doubles: one spare, so n = 0 still has a
 * buffer), each over eight interleaved lanes, then the chunks in order, so the result does
 * not depend on the number of threads. */
#define VEC_CHUNK ((size_t)1 << 16)
size_t vec_chunks(size_t n);
double vec_sum_squares(double *partial, const float *x, size_t n);
/* x (N, C): x[n] = emb[tokens[n]], emb (V, C). Backward: demb (V, C) += dx scattered by token,
 * each element summed in token order. */
void embed_forward(float *x, const int *tokens, const float *emb, int N, int C);
void embed_backward(float *demb, const float *dx, const int *tokens, int N, int C);
/* Rows (n, C): out[to[i]] = in[i], or out[i] = in[to[i]] when back is set (to a permutation). */
void permute_rows(float *out, const float *in, const int *to, int n, int C, int back);
/* A block of rows x width between buffers whose rows are ldd and lds floats apart:
 * dst[r ldd + j] = src[r lds + j], or dst[r ldd + j] += src[r lds + j] when add is set. */
void copy_block(float *dst, int ldd, const float *src, int lds, int rows, int width, int add);

#endif
