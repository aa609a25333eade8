/*
 * cuda_nn.cu: the CUDA backend's elementwise and row-wise dense ops (vec.c, rmsnorm.c, rope.c,
 * swiglu.c, crossentropy.c, adamw.c of nn/).
 *
 * Each kernel is a launch shape around the bodies of kernels_nn.h, which hold all of the
 * arithmetic and which tests/test_kernels_nn.c runs on the host in this file's grid order.
 * Launch shapes:
 *   - elementwise ops: cuda_blocks(n) blocks of CUDA_THREADS, each thread its grid-stride
 *     share (one element when the grid covers n);
 *   - row ops (rmsnorm, cross-entropy forward): a warp per row, KNN_ROWS_PER_BLOCK rows a
 *     block, the row's sums reduced by the butterfly of kernels_nn.h;
 *   - column sums (rmsnorm's dw, the embedding's gradient): a thread per output element,
 *     summing in a fixed order, through partial sums in scratch where the rows are many.
 * Everything is issued on the backend's stream, in program order. No float atomics: every sum
 * runs in an order fixed by the sizes alone, so a result repeats bit for bit.
 */
#include "backend/cuda/cuda.cuh"
#include "backend/cuda/kernels_nn.h"

static_assert(KNN_THREADS == CUDA_THREADS, "kernels_nn.h's block size is cuda.cuh's");
static_assert(KNN_CHUNK == VEC_CHUNK, "sum_squares chunks as nn/vec.c's");
static_assert(KNN_RMS_EPS == RMSNORM_EPS, "rmsnorm's eps as nn/ops.h's");
static_assert(KNN_THREADS % MOE_WARP == 0 && KNN_THREADS % KNN_SUMSQ_LANES == 0,
              "whole warps per block, whole chunks' lanes per block");

/* This thread's place in a one-dimensional grid, and the grid's size in threads. */
static __device__ __forceinline__ size_t thread_first(void) {
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
static __device__ __forceinline__ size_t thread_stride(void) {
    return (size_t)gridDim.x * blockDim.x;
}
/* The warp-per-row kernels: this warp's row and this thread's lane. */
static __device__ __forceinline__ int warp_row(void) {
    return (int)(blockIdx.x * KNN_ROWS_PER_BLOCK + threadIdx.x / MOE_WARP);
}
static __device__ __forceinline__ int warp_lane(void) {
    return (int)(threadIdx.x % MOE_WARP);
}
static unsigned row_blocks(int N) {
    return (unsigned)((N + KNN_ROWS_PER_BLOCK - 1) / KNN_ROWS_PER_BLOCK);
}

/* ---- vec: elementwise ------------------------------------------------------------------- */

static __global__ void k_add(float *y, const float *a, const float *b, size_t n) {
    knn_add_share(y, a, b, n, thread_first(), thread_stride());
}
static __global__ void k_mul(float *y, const float *a, const float *b, size_t n) {
    knn_mul_share(y, a, b, n, thread_first(), thread_stride());
}
static __global__ void k_scale(float *x, float s, size_t n) {
    knn_scale_share(x, s, n, thread_first(), thread_stride());
}
static __global__ void k_round_bf16(float *y, const float *x, size_t n) {
    knn_round_bf16_share(y, x, n, thread_first(), thread_stride());
}

void cuda_add(const Backend *be, float *y, const float *a, const float *b, size_t n) {
    if (n == 0) return;
    k_add<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream(be)>>>(y, a, b, n);
    CUDA_LAUNCHED();
}
void cuda_mul(const Backend *be, float *y, const float *a, const float *b, size_t n) {
    if (n == 0) return;
    k_mul<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream(be)>>>(y, a, b, n);
    CUDA_LAUNCHED();
}
void cuda_round_bf16(const Backend *be, float *y, const float *x, size_t n) {
    if (n == 0) return;
    k_round_bf16<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream(be)>>>(y, x, n);
    CUDA_LAUNCHED();
}
void cuda_scale(const Backend *be, float *x, float s, size_t n) {
    if (n == 0) return;
    k_scale<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream(be)>>>(x, s, n);
    CUDA_LAUNCHED();
}

/* ---- vec: sums ------------------------------------------------------------------------------
 * sum: vec_sum's bits need vec_sum's order, one double add after another: one block, whose
 * threads stage KNN_SUM_TILE floats at a time in shared memory (coalesced loads) for thread 0
 * to add in order. n is the token count (thousands): tens of microseconds. */
static __global__ void k_sum(double *out, const float *x, size_t n) {
    __shared__ float tile[KNN_SUM_TILE];
    double s = 0.0;
    for (size_t base = 0; base < n; base += KNN_SUM_TILE) {
        const int m = n - base < KNN_SUM_TILE ? (int)(n - base) : KNN_SUM_TILE;
        for (int k = (int)threadIdx.x; k < m; k += (int)blockDim.x) tile[k] = x[base + k];
        __syncthreads();
        if (threadIdx.x == 0) s = knn_sum_tile(s, tile, m);
        __syncthreads(); /* the tile is read before the next one overwrites it */
    }
    if (threadIdx.x == 0) *out = s;
}

/* The total stays in the GPU's memory (out): nothing waits here; the trainer reads a step's
 * sums with one copy at its end (model_read_step). */
void cuda_sum(const Backend *be, double *out, const float *x, size_t n) {
    if (n == 0) {
        CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), cuda_stream(be)));
        return;
    }
    k_sum<<<1, CUDA_THREADS, 0, cuda_stream(be)>>>(out, x, n);
    CUDA_LAUNCHED();
}

/* sum_squares: vec_sum_squares' order exactly, so its bits: a thread per running sum (eight per
 * chunk of KNN_CHUNK, each a dependent chain of KNN_CHUNK / 8 adds, its loads batched), the
 * eight paired in shared memory by the chunk's first thread into partial[ch]; then one thread
 * adds the chunks in order into the spare slot partial[n_chunks] (vec_chunks(n) = n_chunks +
 * 1), then copied into out (in the GPU's memory: nothing waits). Every chunk runs at once, so the
 * time is one chunk's chain (a fraction of a millisecond) for any n. */
static __global__ void k_sumsq_chunks(double *partial, const float *x, size_t n, size_t n_chunks) {
    __shared__ double lanes[KNN_THREADS];
    const size_t t = thread_first(), ch = t / KNN_SUMSQ_LANES;
    const int j = (int)(t % KNN_SUMSQ_LANES);
    lanes[threadIdx.x] = ch < n_chunks ? knn_sumsq_lane(x, n, ch, j) : 0.0;
    __syncthreads();
    if (j == 0 && ch < n_chunks) partial[ch] = knn_sumsq_combine(&lanes[threadIdx.x]);
}
static __global__ void k_sum_partials(double *partial, size_t n_chunks) {
    partial[n_chunks] = knn_sum_partials(partial, n_chunks);
}

void cuda_sum_squares(const Backend *be, double *out, double *partial, const float *x, size_t n) {
    const size_t n_chunks = (n + KNN_CHUNK - 1) / KNN_CHUNK;
    if (n_chunks > 0) {
        k_sumsq_chunks<<<cuda_blocks(n_chunks * KNN_SUMSQ_LANES), CUDA_THREADS, 0,
                         cuda_stream(be)>>>(partial, x, n, n_chunks);
        CUDA_LAUNCHED();
    }
    k_sum_partials<<<1, 1, 0, cuda_stream(be)>>>(partial, n_chunks);
    CUDA_LAUNCHED();
    CUDA_CHECK(cudaMemcpyAsync(out, partial + n_chunks, sizeof(double), cudaMemcpyDeviceToDevice,
                               cuda_stream(be)));
}

/* ---- vec: embedding and row permutation -------------------------------------------------- */

static __global__ void k_embed_forward(float *x, const int *tokens, const float *emb,
                                       size_t n_elems, int C) {
    knn_embed_share(x, tokens, emb, n_elems, C, thread_first(), thread_stride());
}

void cuda_embed_forward(const Backend *be, float *x, const int *tokens, const float *emb, int N,
                        int C) {
    const size_t n = (size_t)N * C;
    if (n == 0) return;
    k_embed_forward<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream(be)>>>(x, tokens, emb, n, C);
    CUDA_LAUNCHED();
}

/* The embedding's gradient, as the reference sums it: each element demb[v][c] gets dx[n][c] of
 * the tokens n == v in token order. Block (channel tile, v), a thread per channel, keeps the
 * element in a register while the block walks the token ids through shared memory: no atomics,
 * no two threads on one element. Every block reads all N ids (V N compares in all, from shared
 * memory), but dx only at its own tokens.
 *
 * The table's row count V is the entry's argument (model.vocab): the grid has a block column
 * per row, in x, whose limit (2^31 - 1) holds any vocabulary where y's (65535) would not. Every
 * id lies in [0, V) (the shard reader checks ids against the vocabulary); one outside is
 * skipped here, where the reference would write out of bounds. */
static __global__ void k_embed_backward(float *demb, const float *dx, const int *tokens, int N,
                                        int C) {
    __shared__ int tok[KNN_EMBED_TILE];
    const int v = (int)blockIdx.x, c = (int)(blockIdx.y * blockDim.x + threadIdx.x);
    const size_t at = (size_t)v * C + c;
    float acc = c < C ? demb[at] : 0.0f;
    for (int n0 = 0; n0 < N; n0 += KNN_EMBED_TILE) {
        const int m = N - n0 < KNN_EMBED_TILE ? N - n0 : KNN_EMBED_TILE;
        for (int k = (int)threadIdx.x; k < m; k += (int)blockDim.x) tok[k] = tokens[n0 + k];
        __syncthreads();
        if (c < C) acc = knn_embed_grad_tile(acc, tok, m, dx + (size_t)n0 * C + c, C, v);
        __syncthreads();
    }
    if (c < C) demb[at] = acc;
}

void cuda_embed_backward(const Backend *be, float *demb, const float *dx, const int *tokens, int N,
                         int C, int V) {
    if (N <= 0 || C <= 0 || V <= 0) return;
    const dim3 grid((unsigned)V, cuda_blocks((size_t)C));
    k_embed_backward<<<grid, CUDA_THREADS, 0, cuda_stream(be)>>>(demb, dx, tokens, N, C);
    CUDA_LAUNCHED();
}

static __global__ void k_copy_block(float *dst, int ldd, const float *src, int lds, int width,
                                    int add, size_t n_elems) {
    knn_copy_block_share(dst, ldd, src, lds, width, add, n_elems, thread_first(), thread_stride());
}

void cuda_copy_block(const Backend *be, float *dst, int ldd, const float *src, int lds, int rows,
                     int width, int add) {
    const size_t ne = (size_t)rows * width;
    if (ne == 0) return;
    k_copy_block<<<cuda_blocks(ne), CUDA_THREADS, 0, cuda_stream(be)>>>(dst, ldd, src, lds, width,
                                                                        add, ne);
    CUDA_LAUNCHED();
}

static __global__ void k_permute_rows(float *out, const float *in, const int *to, size_t n_elems,
                                      int C, int back) {
    knn_permute_share(out, in, to, n_elems, C, back, thread_first(), thread_stride());
}

void cuda_permute_rows(const Backend *be, float *out, const float *in, const int *to, int n, int C,
                       int back) {
    const size_t ne = (size_t)n * C;
    if (ne == 0) return;
    k_permute_rows<<<cuda_blocks(ne), CUDA_THREADS, 0, cuda_stream(be)>>>(out, in, to, ne, C, back);
    CUDA_LAUNCHED();
}

/* ---- rmsnorm ------------------------------------------------------------------------------ */

static __global__ void k_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w,
                                         int N, int C) {
    const int row = warp_row(), lane = warp_lane();
    if (row >= N) return; /* the whole warp: row is the same for its 32 lanes */
    const float *xn = x + (size_t)row * C;
    const double ss = knn_warp_sum_d(knn_rms_ss_lane(xn, C, lane));
    const float r = knn_rms_rstd(ss, C);
    knn_rms_y_lane(y + (size_t)row * C, xn, w, r, C, lane); /* y may be x: own elements only */
    if (rstd && lane == 0) rstd[row] = r;
}

void cuda_rmsnorm_forward(const Backend *be, float *y, float *rstd, const float *x, const float *w,
                          int N, int C) {
    if (N <= 0) return;
    k_rmsnorm_forward<<<row_blocks(N), CUDA_THREADS, 0, cuda_stream(be)>>>(y, rstd, x, w, N, C);
    CUDA_LAUNCHED();
}

static __global__ void k_rmsnorm_dx(float *dx, const float *dy, const float *x, const float *w,
                                    const float *rstd, int N, int C) {
    const int row = warp_row(), lane = warp_lane();
    if (row >= N) return;
    const size_t off = (size_t)row * C;
    const float r = rstd[row];
    const double dot = knn_warp_sum_d(knn_rms_dot_lane(dy + off, w, x + off, C, lane));
    knn_rms_dx_lane(dx + off, dy + off, x + off, w, r, knn_rms_coef(r, dot, C), C, lane);
}

/* dw, first pass: block (row block rb, channel tile), a thread per channel: partial[rb][c] */
static __global__ void k_rmsnorm_dw_rows(double *partial, const float *dy, const float *x,
                                         const float *rstd, int N, int C) {
    const int rb = (int)blockIdx.x, c = (int)(blockIdx.y * blockDim.x + threadIdx.x);
    if (c < C) partial[(size_t)rb * C + c] = knn_rms_dw_rows(dy, x, rstd, N, C, rb, c);
}
/* dw, second pass: a thread per channel adds the row blocks' partial sums in order to dw */
static __global__ void k_rmsnorm_dw_total(float *dw, const double *partial, int n_rb, int C) {
    const int c = (int)thread_first();
    if (c < C) dw[c] = knn_rms_dw_total(dw[c], partial, n_rb, C, c);
}

/* dx: a warp per row. dw: the column sums over the rows in two passes through scratch of
 * ceil(N / KNN_DW_ROWS) x C doubles (16k rows of 1024 channels: 2 MiB), so that every
 * element's sum has a fixed order and the rows are read by many blocks at once. */
void cuda_rmsnorm_backward(const Backend *be, float *dx, float *dw, const float *dy, const float *x,
                           const float *w, const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t st = cuda_stream(be);
    if (dx) {
        k_rmsnorm_dx<<<row_blocks(N), CUDA_THREADS, 0, st>>>(dx, dy, x, w, rstd, N, C);
        CUDA_LAUNCHED();
    }
    if (dw) {
        const int n_rb = (N + KNN_DW_ROWS - 1) / KNN_DW_ROWS;
        double *partial = (double *)cuda_scratch(be, (size_t)n_rb * C * sizeof(double));
        const dim3 grid((unsigned)n_rb, cuda_blocks((size_t)C));
        k_rmsnorm_dw_rows<<<grid, CUDA_THREADS, 0, st>>>(partial, dy, x, rstd, N, C);
        CUDA_LAUNCHED();
        k_rmsnorm_dw_total<<<cuda_blocks((size_t)C), CUDA_THREADS, 0, st>>>(dw, partial, n_rb, C);
        CUDA_LAUNCHED();
    }
}

/* ---- rope: a thread per pair, in place ------------------------------------------------------ */

static __global__ void k_rope(float *x, const float *cs, int T, int H, int D, float sign,
                              size_t n_pairs) {
    knn_rope_share(x, cs, T, H, D, sign, n_pairs, thread_first(), thread_stride());
}

static void rope_launch(const Backend *be, float *x, const float *cs, int B, int T, int H, int D,
                        float sign) {
    const size_t n_pairs = (size_t)B * T * H * (D / 2);
    if (n_pairs == 0) return;
    k_rope<<<cuda_blocks(n_pairs), CUDA_THREADS, 0, cuda_stream(be)>>>(x, cs, T, H, D, sign,
                                                                       n_pairs);
    CUDA_LAUNCHED();
}
void cuda_rope_forward(const Backend *be, float *x, const float *cs, int B, int T, int H, int D) {
    rope_launch(be, x, cs, B, T, H, D, 1.0f);
}
void cuda_rope_backward(const Backend *be, float *dx, const float *cs, int B, int T, int H, int D) {
    rope_launch(be, dx, cs, B, T, H, D, -1.0f); /* the rotation by -a: R(a)^T */
}

static __global__ void k_rope_at(float *x, const float *cs, const int *pos, int H, int D,
                                 size_t n_pairs) {
    knn_rope_at_share(x, cs, pos, H, D, n_pairs, thread_first(), thread_stride());
}
void cuda_rope_forward_at(const Backend *be, float *x, const float *cs, const int *pos, int N,
                          int H, int D) {
    const size_t n_pairs = (size_t)N * H * (D / 2);
    if (n_pairs == 0) return;
    k_rope_at<<<cuda_blocks(n_pairs), CUDA_THREADS, 0, cuda_stream(be)>>>(x, cs, pos, H, D,
                                                                          n_pairs);
    CUDA_LAUNCHED();
}

/* ---- swiglu: elementwise --------------------------------------------------------------------- */

static __global__ void k_swiglu_forward(float *h, const float *g, const float *u, size_t n) {
    knn_swiglu_fwd_share(h, g, u, n, thread_first(), thread_stride());
}
static __global__ void k_swiglu_backward(float *dg, float *du, const float *dh, const float *g,
                                         const float *u, size_t n) {
    knn_swiglu_bwd_share(dg, du, dh, g, u, n, thread_first(), thread_stride());
}

void cuda_swiglu_forward(const Backend *be, float *h, const float *g, const float *u, int N,
                         int F) {
    const size_t n = (size_t)N * F;
    if (n == 0) return;
    k_swiglu_forward<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream(be)>>>(h, g, u, n);
    CUDA_LAUNCHED();
}
void cuda_swiglu_backward(const Backend *be, float *dg, float *du, const float *dh, const float *g,
                          const float *u, int N, int F) {
    const size_t n = (size_t)N * F;
    if (n == 0 || (!dg && !du)) return;
    k_swiglu_backward<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream(be)>>>(dg, du, dh, g, u, n);
    CUDA_LAUNCHED();
}

/* ---- cross-entropy -------------------------------------------------------------------------- */

/* A warp per row (eight logits a lane at the byte vocabulary, V = 256). probs may be logits:
 * z[target] is read, then the warp synchronizes (__syncwarp also orders memory) before any lane
 * writes p. */
static __global__ void k_crossentropy_forward(float *losses, float *probs, const float *logits,
                                              const int *targets, int N, int V) {
    const int row = warp_row(), lane = warp_lane();
    if (row >= N) return;
    const float *z = logits + (size_t)row * V;
    float *p = probs + (size_t)row * V;
    const float z_target = z[targets[row]];
    const float m = knn_warp_max_f(knn_ce_max_lane(z, V, lane));
    __syncwarp();
    const double sum = knn_warp_sum_d(knn_ce_exp_lane(p, z, m, V, lane));
    knn_ce_scale_lane(p, knn_ce_inv(sum), V, lane);
    if (lane == 0) losses[row] = knn_ce_loss(sum, z_target, m);
}
static __global__ void k_crossentropy_backward(float *dlogits, const float *probs,
                                               const int *targets, float scale, int V,
                                               size_t n_elems) {
    knn_ce_grad_share(dlogits, probs, targets, scale, V, n_elems, thread_first(), thread_stride());
}

void cuda_crossentropy_forward(const Backend *be, float *losses, float *probs, const float *logits,
                               const int *targets, int N, int V) {
    if (N <= 0) return;
    k_crossentropy_forward<<<row_blocks(N), CUDA_THREADS, 0, cuda_stream(be)>>>(
        losses, probs, logits, targets, N, V);
    CUDA_LAUNCHED();
}
void cuda_crossentropy_backward(const Backend *be, float *dlogits, const float *probs,
                                const int *targets, float scale, int N, int V) {
    const size_t n = (size_t)N * V;
    if (!dlogits || n == 0) return;
    k_crossentropy_backward<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream(be)>>>(
        dlogits, probs, targets, scale, V, n);
    CUDA_LAUNCHED();
}

/* ---- adamw: elementwise, the bias corrections worked out once here as adamw.c does --------- */

static __global__ void k_adamw(float *p, float *g, float *m, float *v, size_t n, KnnAdamw k) {
    knn_adamw_share(p, g, m, v, n, k, thread_first(), thread_stride());
}

void cuda_adamw_update(const Backend *be, float *p, float *g, float *m, float *v, size_t n,
                       const AdamwStep *s) {
    if (n == 0) return;
    const KnnAdamw k = knn_adamw_make(s->lr, s->beta1, s->beta2, s->eps, s->weight_decay,
                                      s->grad_scale, s->step, s->clear_grad);
    k_adamw<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream(be)>>>(p, g, m, v, n, k);
    CUDA_LAUNCHED();
}
