/*
 * test_kernels_nn.c: the CUDA backend's dense-op kernels (src/backend/cuda/cuda_nn.cu), checked on
 * the host through their bodies (src/backend/cuda/kernels_nn.h).
 *
 * Each test runs the bodies in loops that walk the kernel's grid in the kernel's order (its
 * blocks, threads, warps and lanes, the butterfly reductions replayed over 32 values, the same
 * tiles and chunks) and compares the result with the reference op of nn/:
 *   - bit for bit where the kernel keeps the reference's order and uses no library function
 *     (the elementwise steps, both sums, the embedding, the row permutation, RoPE, the
 *     cross-entropy gradient, AdamW);
 *   - within the one tolerance rule where the order of a sum differs (rmsnorm's row sums and
 *     dw) or expf and log are the library's instead of nn_expf (SwiGLU, cross-entropy).
 * Sizes are chosen off the multiples of 32 and of the block size, and across the tiles.
 * No GPU is needed: the device runs the same bodies with the same roundings (kernels_nn.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/kernels_nn.h"
#include "base/util.h"
#include "config/config.h"
#include "ops_util.h"

/* ---- helpers ----------------------------------------------------------------------------- */

/* The threads of an elementwise kernel: cuda_blocks(n) blocks of KNN_THREADS (at least one). */
static size_t grid_threads(size_t n) {
    size_t b = (n + KNN_THREADS - 1) / KNN_THREADS;
    return (b ? b : 1) * KNN_THREADS;
}
/* The blocks of a warp-per-row kernel. */
static int row_blocks(int N) {
    return (N + KNN_ROWS_PER_BLOCK - 1) / KNN_ROWS_PER_BLOCK;
}
/* A grid smaller than n, so that the grid-stride loops take several turns. */
#define SMALL_GRID ((size_t)3 * KNN_THREADS)

/* got and want equal bit for bit; the first difference fails the test (one Check assertion
 * per array: each costs Check a message) */
static void expect_same_floats(const float *got, const float *want, size_t n, const char *what) {
    size_t i = 0;
    while (i < n && memcmp(&got[i], &want[i], sizeof(float)) == 0) i++;
    ck_assert_msg(i == n, "%s: element %zu of %zu: got %.9g want %.9g", what, i, n,
                  i < n ? (double)got[i] : 0.0, i < n ? (double)want[i] : 0.0);
}
static void expect_same_double(double got, double want, const char *what) {
    ck_assert_msg(memcmp(&got, &want, sizeof got) == 0, "%s: got %.17g want %.17g", what, got,
                  want);
}

static float *copy_floats(const float *x, size_t n) {
    float *y = floats_alloc(n ? n : 1);
    if (n) memcpy(y, x, n * sizeof(float));
    return y;
}
static int *rand_ints(size_t n, int below, unsigned long long seed) {
    Rng r;
    rng_seed(&r, seed);
    int *v = calloc_check(n ? n : 1, sizeof(int));
    for (size_t i = 0; i < n; i++) v[i] = (int)rng_below(&r, (uint64_t)below);
    return v;
}

/* ---- the butterfly ----------------------------------------------------------------------- */

START_TEST(test_butterfly_order) {
    /* values of very different sizes, so that the order of the additions shows in the bits */
    double v[MOE_WARP], tree[MOE_WARP];
    float f[MOE_WARP];
    fill_uniform(f, MOE_WARP, 1.0f, 7);
    for (int l = 0; l < MOE_WARP; l++) v[l] = tree[l] = ldexp((double)f[l], (l * 7) % 60);
    /* lane 0's tree written out: lanes l and l + off paired, off = 16, 8, 4, 2, 1 */
    for (int off = MOE_WARP / 2; off > 0; off /= 2)
        for (int l = 0; l < off; l++) tree[l] = tree[l] + tree[l + off];
    const double got = knn_butterfly_sum_d(v);
    expect_same_double(got, tree[0], "butterfly sum");
    for (int l = 0; l < MOE_WARP; l++) expect_same_double(v[l], got, "butterfly: every lane");

    /* an input where the order matters: in index order the ones vanish into 1e16 */
    for (int l = 0; l < MOE_WARP; l++) v[l] = 1.0;
    v[0] = 1e16, v[16] = -1e16;
    double seq = 0.0;
    for (int l = 0; l < MOE_WARP; l++) seq += v[l];
    ck_assert(knn_butterfly_sum_d(v) == 30.0 && seq != 30.0);

    float m[MOE_WARP], want = -INFINITY;
    fill_uniform(m, MOE_WARP, 100.0f, 8);
    for (int l = 0; l < MOE_WARP; l++) want = m[l] > want ? m[l] : want;
    ck_assert(knn_butterfly_max_f(m) == want);
    for (int l = 0; l < MOE_WARP; l++) ck_assert(m[l] == want);

    /* the constants kernels_nn.h repeats from nn/ops.h */
    ck_assert(KNN_CHUNK == VEC_CHUNK && KNN_RMS_EPS == RMSNORM_EPS);
}
END_TEST

/* ---- vec: elementwise -------------------------------------------------------------------- */

/* copy_block's body over the grid against the reference: a 5-wide block between rows of 12 and
 * of 7 floats, written and added, checked against a loop written here */
START_TEST(test_copy_block) {
    enum { R = 41, LDS = 12, LDD = 7, W = 5 };
    float *src = rand_floats((size_t)R * LDS, 1.0f, 301);
    float *prior = rand_floats((size_t)R * LDD, 1.0f, 302);
    float *want = copy_floats(prior, (size_t)R * LDD), *got = floats_alloc((size_t)R * LDD);
    for (int add = 0; add < 2; add++) {
        memcpy(want, prior, (size_t)R * LDD * sizeof(float));
        for (int r = 0; r < R; r++)
            for (int j = 0; j < W; j++) {
                float *d = want + r * LDD + 1 + j;
                *d = add ? *d + src[r * LDS + 2 + j] : src[r * LDS + 2 + j];
            }
        memcpy(got, prior, (size_t)R * LDD * sizeof(float));
        copy_block(got + 1, LDD, src + 2, LDS, R, W, add);
        expect_same_floats(got, want, (size_t)R * LDD, "copy_block (reference)");
        for (int grid = 0; grid < 2; grid++) {
            const size_t T = grid ? SMALL_GRID : grid_threads((size_t)R * W);
            memcpy(got, prior, (size_t)R * LDD * sizeof(float));
            for (size_t t = 0; t < T; t++)
                knn_copy_block_share(got + 1, LDD, src + 2, LDS, W, add, (size_t)R * W, t, T);
            expect_same_floats(got, want, (size_t)R * LDD, "copy_block (kernel body)");
        }
    }
    free(src), free(prior), free(want), free(got);
}
END_TEST

START_TEST(test_vec_elementwise) {
    const size_t sizes[] = {1, 255, 256, 257, 1000, 4099};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const size_t n = sizes[si];
        float *a = rand_floats(n, 3.0f, 100 + si), *b = rand_floats(n, 3.0f, 200 + si);
        float *want = floats_alloc(n), *got = garbage_floats(n);
        for (int grid = 0; grid < 2; grid++) {
            const size_t T = grid ? SMALL_GRID : grid_threads(n);
            vec_add(want, a, b, n);
            for (size_t t = 0; t < T; t++) knn_add_share(got, a, b, n, t, T);
            expect_same_floats(got, want, n, "add");
            vec_mul(want, a, b, n);
            for (size_t t = 0; t < T; t++) knn_mul_share(got, a, b, n, t, T);
            expect_same_floats(got, want, n, "mul");
            /* in place, y = a, as the residual adds call it */
            float *y = copy_floats(a, n);
            vec_add(want, a, b, n);
            for (size_t t = 0; t < T; t++) knn_add_share(y, y, b, n, t, T);
            expect_same_floats(y, want, n, "add in place");
            memcpy(y, a, n * sizeof(float)), memcpy(want, a, n * sizeof(float));
            vec_scale(want, 0.37f, n);
            for (size_t t = 0; t < T; t++) knn_scale_share(y, 0.37f, n, t, T);
            expect_same_floats(y, want, n, "scale");
            vec_round_bf16(want, a, n);
            for (size_t t = 0; t < T; t++) knn_round_bf16_share(got, a, n, t, T);
            expect_same_floats(got, want, n, "round_bf16");
            free(y);
        }
        free(a), free(b), free(want), free(got);
    }
}
END_TEST

/* round_bf16 on the values with special paths: NaNs (both signs, quiet and signalling),
 * infinities, the largest float (to inf), ties, a carry into the exponent, subnormals */
START_TEST(test_vec_round_bf16_special) {
    const uint32_t bits[] = {0x7fc00001u, 0xffc00000u, 0x7f800001u, 0x7f800000u, 0xff800000u,
                             0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0x3fffffffu, 0x00000001u,
                             0x80008000u, 0x00018000u, 0x00000000u, 0x80000000u};
    enum { NB = sizeof bits / sizeof *bits };
    float x[NB], want[NB], got[NB];
    memcpy(x, bits, sizeof x);
    vec_round_bf16(want, x, NB);
    for (size_t t = 0; t < 3; t++) knn_round_bf16_share(got, x, NB, t, 3);
    expect_same_floats(got, want, NB, "round_bf16 special values");
}
END_TEST

/* ---- vec: sums --------------------------------------------------------------------------- */

/* k_sum: one block; the tiles of KNN_SUM_TILE in order, each added by thread 0 */
static double emu_sum(const float *x, size_t n) {
    double s = 0.0;
    for (size_t base = 0; base < n; base += KNN_SUM_TILE) {
        const int m = n - base < KNN_SUM_TILE ? (int)(n - base) : KNN_SUM_TILE;
        s = knn_sum_tile(s, x + base, m);
    }
    return s;
}

START_TEST(test_sum) {
    const size_t sizes[] = {1, 31, 2047, 2048, 2049, 5000, 16385};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const size_t n = sizes[si];
        float *x = rand_floats(n, 10.0f, 300 + si);
        for (size_t i = 0; i < n; i += 7) x[i] *= 1e4f; /* magnitudes apart: order shows */
        expect_same_double(emu_sum(x, n), vec_sum(x, n), "sum");
        free(x);
    }
    expect_same_double(emu_sum(NULL, 0), 0.0, "sum of nothing");
}
END_TEST

/* k_sumsq_chunks then k_sum_partials: a thread per (chunk, running sum j), blocks of
 * KNN_THREADS, the eight sums of a chunk paired by its first thread through shared memory */
static double emu_sum_squares(double *partial, const float *x, size_t n) {
    const size_t n_chunks = (n + KNN_CHUNK - 1) / KNN_CHUNK;
    const size_t blocks = grid_threads(n_chunks * KNN_SUMSQ_LANES) / KNN_THREADS;
    for (size_t b = 0; n_chunks > 0 && b < blocks; b++) {
        double lanes[KNN_THREADS]; /* the block's shared memory */
        for (int tid = 0; tid < KNN_THREADS; tid++) {
            const size_t t = b * KNN_THREADS + tid, ch = t / KNN_SUMSQ_LANES;
            lanes[tid] = ch < n_chunks ? knn_sumsq_lane(x, n, ch, (int)(t % KNN_SUMSQ_LANES)) : 0.0;
        }
        for (int tid = 0; tid < KNN_THREADS; tid++) { /* after __syncthreads */
            const size_t t = b * KNN_THREADS + tid, ch = t / KNN_SUMSQ_LANES;
            if (t % KNN_SUMSQ_LANES == 0 && ch < n_chunks)
                partial[ch] = knn_sumsq_combine(&lanes[tid]);
        }
    }
    partial[n_chunks] = knn_sum_partials(partial, n_chunks);
    return partial[n_chunks];
}

START_TEST(test_sum_squares) {
    const size_t sizes[] = {0, 1, 7, 9, 129, 1000, VEC_CHUNK, VEC_CHUNK + 13, 3 * VEC_CHUNK + 5};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const size_t n = sizes[si], nch = vec_chunks(n);
        float *x = rand_floats(n ? n : 1, 3.0f, 400 + si);
        for (size_t i = 0; i < n; i += 5) x[i] *= 1e3f;
        double *p_want = calloc_check(nch, sizeof(double)),
               *p_got = calloc_check(nch, sizeof(double));
        const double want = vec_sum_squares(p_want, x, n);
        expect_same_double(emu_sum_squares(p_got, x, n), want, "sum_squares");
        for (size_t ch = 0; ch + 1 < nch; ch++)
            expect_same_double(p_got[ch], p_want[ch], "sum_squares: a chunk's partial");
        free(x), free(p_want), free(p_got);
    }
}
END_TEST

/* ---- vec: embedding and permutation ------------------------------------------------------- */

/* k_embed_backward: block (v, channel tile), a thread per channel, the ids in tiles */
static void emu_embed_backward(float *demb, const float *dx, const int *tokens, int N, int C,
                               int V) {
    const int c_tiles = (C + KNN_THREADS - 1) / KNN_THREADS;
    for (int v = 0; v < V; v++)
        for (int ct = 0; ct < c_tiles; ct++)
            for (int tid = 0; tid < KNN_THREADS; tid++) {
                const int c = ct * KNN_THREADS + tid;
                if (c >= C) continue;
                float acc = demb[(size_t)v * C + c];
                for (int n0 = 0; n0 < N; n0 += KNN_EMBED_TILE) {
                    const int m = N - n0 < KNN_EMBED_TILE ? N - n0 : KNN_EMBED_TILE;
                    acc = knn_embed_grad_tile(acc, tokens + n0, m, dx + (size_t)n0 * C + c, C, v);
                }
                demb[(size_t)v * C + c] = acc;
            }
}

START_TEST(test_embed) {
    /* (N, C, V): several tiles of ids with a few channels, wide rows with fewer tokens (the
     * emulation walks V N C steps), the byte vocabulary and others */
    const int shapes[][3] = {{1, 1, 256},     {37, 37, 256},   {37, 256, 300}, {5, 300, 256},
                             {1100, 1, 1000}, {1100, 37, 256}, {2100, 5, 300}};
    for (int ni = 0; ni < (int)(sizeof shapes / sizeof *shapes); ni++) {
        const int N = shapes[ni][0], C = shapes[ni][1], V = shapes[ni][2], ci = ni;
        const size_t nx = (size_t)N * C, ne = (size_t)V * C;
        int *tok = rand_ints((size_t)N, V, 500 + ni);
        if (N > 100)
            for (int n = 0; n < N; n += 3) tok[n] = 42; /* one row gathers many tokens */
        float *emb = rand_floats(ne, 1.0f, 510 + ci), *want = floats_alloc(nx);
        float *got = garbage_floats(nx);
        embed_forward(want, tok, emb, N, C);
        const size_t T = grid_threads(nx);
        for (size_t t = 0; t < T; t++) knn_embed_share(got, tok, emb, nx, C, t, T);
        expect_same_floats(got, want, nx, "embed forward");
        for (size_t t = 0; t < SMALL_GRID; t++)
            knn_embed_share(got, tok, emb, nx, C, t, SMALL_GRID);
        expect_same_floats(got, want, nx, "embed forward, small grid");

        /* backward accumulates onto what demb holds */
        float *dx = rand_floats(nx, 1.0f, 520 + ci), *d_want = rand_floats(ne, 1.0f, 530);
        float *d_got = copy_floats(d_want, ne);
        embed_backward(d_want, dx, tok, N, C);
        emu_embed_backward(d_got, dx, tok, N, C, V);
        expect_same_floats(d_got, d_want, ne, "embed backward");
        free(tok), free(emb), free(want), free(got), free(dx), free(d_want), free(d_got);
    }
}
END_TEST

START_TEST(test_permute_rows) {
    const int ns[] = {1, 77}, Cs[] = {1, 37, 256};
    for (int ni = 0; ni < 2; ni++)
        for (int ci = 0; ci < 3; ci++) {
            const int n = ns[ni], C = Cs[ci];
            const size_t ne = (size_t)n * C;
            int *to = calloc_check((size_t)n, sizeof(int));
            Rng r;
            rng_seed(&r, 600 + ni);
            for (int i = 0; i < n; i++) to[i] = i;
            for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
                int j = (int)rng_below(&r, (uint64_t)i + 1), s = to[i];
                to[i] = to[j], to[j] = s;
            }
            float *in = rand_floats(ne, 1.0f, 610 + ci);
            for (int back = 0; back < 2; back++) {
                float *want = garbage_floats(ne), *got = garbage_floats(ne);
                permute_rows(want, in, to, n, C, back);
                const size_t T = grid_threads(ne);
                for (size_t t = 0; t < T; t++) knn_permute_share(got, in, to, ne, C, back, t, T);
                expect_same_floats(got, want, ne, back ? "permute_rows back" : "permute_rows");
                free(want), free(got);
            }
            free(to), free(in);
        }
}
END_TEST

/* ---- rmsnorm ----------------------------------------------------------------------------- */

/* k_rmsnorm_forward: blocks of KNN_ROWS_PER_BLOCK warps, a warp per row */
static void emu_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int N,
                                int C) {
    for (int b = 0; b < row_blocks(N); b++)
        for (int wp = 0; wp < KNN_ROWS_PER_BLOCK; wp++) {
            const int row = b * KNN_ROWS_PER_BLOCK + wp;
            if (row >= N) continue;
            const float *xn = x + (size_t)row * C;
            double ss[MOE_WARP];
            for (int l = 0; l < MOE_WARP; l++) ss[l] = knn_rms_ss_lane(xn, C, l);
            const float r = knn_rms_rstd(knn_butterfly_sum_d(ss), C);
            for (int l = 0; l < MOE_WARP; l++) knn_rms_y_lane(y + (size_t)row * C, xn, w, r, C, l);
            if (rstd) rstd[row] = r;
        }
}

/* k_rmsnorm_dx, then k_rmsnorm_dw_rows and k_rmsnorm_dw_total */
static void emu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x,
                                 const float *w, const float *rstd, int N, int C) {
    for (int b = 0; dx && b < row_blocks(N); b++)
        for (int wp = 0; wp < KNN_ROWS_PER_BLOCK; wp++) {
            const int row = b * KNN_ROWS_PER_BLOCK + wp;
            if (row >= N) continue;
            const size_t off = (size_t)row * C;
            double dot[MOE_WARP];
            for (int l = 0; l < MOE_WARP; l++)
                dot[l] = knn_rms_dot_lane(dy + off, w, x + off, C, l);
            const float coef = knn_rms_coef(rstd[row], knn_butterfly_sum_d(dot), C);
            for (int l = 0; l < MOE_WARP; l++)
                knn_rms_dx_lane(dx + off, dy + off, x + off, w, rstd[row], coef, C, l);
        }
    if (!dw) return;
    const int n_rb = (N + KNN_DW_ROWS - 1) / KNN_DW_ROWS;
    const int c_tiles = (C + KNN_THREADS - 1) / KNN_THREADS;
    double *partial = calloc_check((size_t)n_rb * C, sizeof(double));
    for (int rb = 0; rb < n_rb; rb++)
        for (int ct = 0; ct < c_tiles; ct++)
            for (int tid = 0; tid < KNN_THREADS; tid++) {
                const int c = ct * KNN_THREADS + tid;
                if (c < C) partial[(size_t)rb * C + c] = knn_rms_dw_rows(dy, x, rstd, N, C, rb, c);
            }
    const size_t T = grid_threads((size_t)C);
    for (size_t c = 0; c < T; c++)
        if (c < (size_t)C) dw[c] = knn_rms_dw_total(dw[c], partial, n_rb, C, (int)c);
    free(partial);
}

START_TEST(test_rmsnorm_forward) {
    const int Ns[] = {1, 9, 70}, Cs[] = {1, 37, 256, 1000};
    for (int ni = 0; ni < 3; ni++)
        for (int ci = 0; ci < 4; ci++) {
            const int N = Ns[ni], C = Cs[ci];
            const size_t nc = (size_t)N * C;
            float *x = rand_floats(nc, 2.0f, 700 + ci), *w = rand_floats((size_t)C, 1.0f, 710);
            float *y_want = floats_alloc(nc), *r_want = floats_alloc((size_t)N);
            float *y_got = garbage_floats(nc), *r_got = garbage_floats((size_t)N);
            rmsnorm_forward(y_want, r_want, x, w, N, C);
            emu_rmsnorm_forward(y_got, r_got, x, w, N, C);
            CLOSE_ARRAYS(y_got, y_want, nc, "rmsnorm y");
            CLOSE_ARRAYS(r_got, r_want, (size_t)N, "rmsnorm rstd");
            /* in place, y = x: the same bits as out of place */
            float *xy = copy_floats(x, nc);
            emu_rmsnorm_forward(xy, NULL, xy, w, N, C);
            expect_same_floats(xy, y_got, nc, "rmsnorm in place");
            free(x), free(w), free(y_want), free(r_want), free(y_got), free(r_got), free(xy);
        }
}
END_TEST

START_TEST(test_rmsnorm_backward) {
    const int Ns[] = {1, 13, 130}, Cs[] = {1, 37, 256, 300};
    for (int ni = 0; ni < 3; ni++)
        for (int ci = 0; ci < 4; ci++) {
            const int N = Ns[ni], C = Cs[ci];
            const size_t nc = (size_t)N * C;
            float *x = rand_floats(nc, 2.0f, 800 + ci), *w = rand_floats((size_t)C, 1.0f, 810);
            float *dy = rand_floats(nc, 1.0f, 820 + ni), *y = floats_alloc(nc);
            float *rstd = floats_alloc((size_t)N);
            rmsnorm_forward(y, rstd, x, w, N, C);
            float *dx_want = garbage_floats(nc), *dx_got = garbage_floats(nc);
            float *dw_want = rand_floats((size_t)C, 1.0f, 830), *dw_got = copy_floats(dw_want, C);
            rmsnorm_backward(dx_want, dw_want, dy, x, w, rstd, N, C);
            emu_rmsnorm_backward(dx_got, dw_got, dy, x, w, rstd, N, C);
            CLOSE_ARRAYS(dx_got, dx_want, nc, "rmsnorm dx");
            CLOSE_ARRAYS(dw_got, dw_want, (size_t)C, "rmsnorm dw (accumulated)");
            free(x), free(w), free(dy), free(y), free(rstd), free(dx_want), free(dx_got);
            free(dw_want), free(dw_got);
        }
}
END_TEST

/* ---- rope -------------------------------------------------------------------------------- */

START_TEST(test_rope) {
    const int shapes[][4] = {{2, 5, 3, 2}, {1, 7, 2, 8}, {2, 3, 4, 64}, {3, 11, 5, 18}};
    for (int si = 0; si < 4; si++) {
        const int B = shapes[si][0], T = shapes[si][1], H = shapes[si][2], D = shapes[si][3];
        const size_t n = (size_t)B * T * H * D, n_pairs = n / 2;
        float *cs = rope_cs_alloc(T + 3, D, 10000.0f); /* a table longer than T */
        float *x = rand_floats(n, 1.0f, 900 + si);
        for (int dir = 0; dir < 2; dir++) {
            float *want = copy_floats(x, n), *got = copy_floats(x, n), *got2 = copy_floats(x, n);
            const float sign = dir ? -1.0f : 1.0f;
            if (dir)
                rope_backward(want, cs, B, T, H, D);
            else
                rope_forward(want, cs, B, T, H, D);
            const size_t G = grid_threads(n_pairs);
            for (size_t t = 0; t < G; t++) knn_rope_share(got, cs, T, H, D, sign, n_pairs, t, G);
            expect_same_floats(got, want, n, dir ? "rope backward" : "rope forward");
            for (size_t t = 0; t < SMALL_GRID; t++)
                knn_rope_share(got2, cs, T, H, D, sign, n_pairs, t, SMALL_GRID);
            expect_same_floats(got2, want, n, "rope, small grid");
            free(want), free(got), free(got2);
        }
        free(cs), free(x);
    }
}
END_TEST

/* ---- swiglu ------------------------------------------------------------------------------- */

START_TEST(test_swiglu) {
    const int N = 7, Fs[] = {1, 37, 300};
    for (int fi = 0; fi < 3; fi++) {
        const int F = Fs[fi];
        const size_t n = (size_t)N * F, T = grid_threads(n);
        float *g = rand_floats(n, 6.0f, 1000 + fi), *u = rand_floats(n, 2.0f, 1010 + fi);
        float *dh = rand_floats(n, 1.0f, 1020 + fi);
        g[0] = -100.0f; /* exp(-g) overflows: sigmoid 0 */
        if (n > 1) g[1] = 100.0f;
        float *h_want = floats_alloc(n), *h_got = garbage_floats(n);
        swiglu_forward(h_want, g, u, N, F);
        for (size_t t = 0; t < T; t++) knn_swiglu_fwd_share(h_got, g, u, n, t, T);
        CLOSE_ARRAYS(h_got, h_want, n, "swiglu h");

        float *dg_want = garbage_floats(n), *du_want = garbage_floats(n);
        float *dg_got = garbage_floats(n), *du_got = garbage_floats(n);
        swiglu_backward(dg_want, du_want, dh, g, u, N, F);
        for (size_t t = 0; t < T; t++) knn_swiglu_bwd_share(dg_got, du_got, dh, g, u, n, t, T);
        CLOSE_ARRAYS(dg_got, dg_want, n, "swiglu dg");
        CLOSE_ARRAYS(du_got, du_want, n, "swiglu du");
        /* one of the two wanted: the other pointer NULL, the wanted one the same bits */
        float *only = garbage_floats(n);
        for (size_t t = 0; t < T; t++) knn_swiglu_bwd_share(only, NULL, dh, g, u, n, t, T);
        expect_same_floats(only, dg_got, n, "swiglu dg alone");
        for (size_t t = 0; t < T; t++) knn_swiglu_bwd_share(NULL, only, dh, g, u, n, t, T);
        expect_same_floats(only, du_got, n, "swiglu du alone");
        free(g), free(u), free(dh), free(h_want), free(h_got), free(dg_want), free(du_want);
        free(dg_got), free(du_got), free(only);
    }
}
END_TEST

/* ---- cross-entropy -------------------------------------------------------------------------- */

/* k_crossentropy_forward: blocks of KNN_ROWS_PER_BLOCK warps, a warp per row */
static void emu_crossentropy_forward(float *losses, float *probs, const float *logits,
                                     const int *targets, int N, int V) {
    for (int b = 0; b < row_blocks(N); b++)
        for (int wp = 0; wp < KNN_ROWS_PER_BLOCK; wp++) {
            const int row = b * KNN_ROWS_PER_BLOCK + wp;
            if (row >= N) continue;
            const float *z = logits + (size_t)row * V;
            float *p = probs + (size_t)row * V;
            const float z_target = z[targets[row]];
            float mx[MOE_WARP];
            for (int l = 0; l < MOE_WARP; l++) mx[l] = knn_ce_max_lane(z, V, l);
            const float m = knn_butterfly_max_f(mx);
            double s[MOE_WARP];
            for (int l = 0; l < MOE_WARP; l++) s[l] = knn_ce_exp_lane(p, z, m, V, l);
            const double sum = knn_butterfly_sum_d(s);
            for (int l = 0; l < MOE_WARP; l++) knn_ce_scale_lane(p, knn_ce_inv(sum), V, l);
            losses[row] = knn_ce_loss(sum, z_target, m);
        }
}

START_TEST(test_crossentropy_forward) {
    const int N = 13, Vs[] = {1, 37, 256};
    for (int vi = 0; vi < 3; vi++) {
        const int V = Vs[vi];
        const size_t nv = (size_t)N * V;
        float *z = rand_floats(nv, 5.0f, 1100 + vi);
        int *tg = rand_ints((size_t)N, V, 1110 + vi);
        z[(size_t)V] = 80.0f; /* row 1: one logit far above the rest, which underflow */
        for (int j = 1; j < V; j++) z[(size_t)V + j] = -80.0f;
        float *p_want = floats_alloc(nv), *l_want = floats_alloc((size_t)N);
        float *p_got = garbage_floats(nv), *l_got = garbage_floats((size_t)N);
        crossentropy_forward(l_want, p_want, z, tg, N, V);
        emu_crossentropy_forward(l_got, p_got, z, tg, N, V);
        CLOSE_ARRAYS(p_got, p_want, nv, "crossentropy probs");
        CLOSE_ARRAYS(l_got, l_want, (size_t)N, "crossentropy losses");
        /* in place, probs = logits, as the model calls it: the same bits */
        float *zp = copy_floats(z, nv), *l2 = garbage_floats((size_t)N);
        emu_crossentropy_forward(l2, zp, zp, tg, N, V);
        expect_same_floats(zp, p_got, nv, "crossentropy in place: probs");
        expect_same_floats(l2, l_got, (size_t)N, "crossentropy in place: losses");
        free(z), free(tg), free(p_want), free(l_want), free(p_got), free(l_got), free(zp);
        free(l2);
    }
}
END_TEST

START_TEST(test_crossentropy_backward) {
    const int N = 13, Vs[] = {1, 37, 256};
    for (int vi = 0; vi < 3; vi++) {
        const int V = Vs[vi];
        const size_t nv = (size_t)N * V, T = grid_threads(nv);
        float *p = rand_floats(nv, 1.0f, 1200 + vi);
        int *tg = rand_ints((size_t)N, V, 1210 + vi);
        const float scale = 1.0f / (float)(N * 3);
        float *want = garbage_floats(nv), *got = garbage_floats(nv);
        crossentropy_backward(want, p, tg, scale, N, V);
        for (size_t t = 0; t < T; t++) knn_ce_grad_share(got, p, tg, scale, V, nv, t, T);
        expect_same_floats(got, want, nv, "crossentropy dlogits");
        free(p), free(tg), free(want), free(got);
    }
}
END_TEST

/* ---- adamw --------------------------------------------------------------------------------- */

START_TEST(test_adamw) {
    const size_t n = 1000;
    for (int variant = 0; variant < 4; variant++) {
        const AdamwStep s = {.lr = 3e-3f,
                             .beta1 = 0.9f,
                             .beta2 = 0.95f,
                             .eps = 1e-8f,
                             .weight_decay = variant & 1 ? 0.1f : 0.0f,
                             .grad_scale = variant & 2 ? 0.5f : 1.0f,
                             .step = variant & 2 ? 7 : 1,
                             .clear_grad = variant & 1};
        const KnnAdamw k = knn_adamw_make(s.lr, s.beta1, s.beta2, s.eps, s.weight_decay,
                                          s.grad_scale, s.step, s.clear_grad);
        float *p = rand_floats(n, 1.0f, 1300), *g = rand_floats(n, 1.0f, 1301);
        float *m = rand_floats(n, 0.1f, 1302), *v = rand_floats(n, 0.01f, 1303);
        for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
        float *pw = copy_floats(p, n), *gw = copy_floats(g, n), *mw = copy_floats(m, n);
        float *vw = copy_floats(v, n);
        adamw_update(pw, gw, mw, vw, n, &s);
        const size_t T = variant & 1 ? SMALL_GRID : grid_threads(n);
        for (size_t t = 0; t < T; t++) knn_adamw_share(p, g, m, v, n, k, t, T);
        expect_same_floats(p, pw, n, "adamw p");
        expect_same_floats(m, mw, n, "adamw m");
        expect_same_floats(v, vw, n, "adamw v");
        expect_same_floats(g, gw, n, s.clear_grad ? "adamw g cleared" : "adamw g kept");
        free(p), free(g), free(m), free(v), free(pw), free(gw), free(mw), free(vw);
    }
}
END_TEST

Suite *kernels_nn_suite(void) {
    Suite *s = suite_create("kernels_nn");
    TCase *tc = tcase_create("bodies");
    tcase_add_test(tc, test_butterfly_order);
    tcase_add_test(tc, test_vec_elementwise);
    tcase_add_test(tc, test_copy_block);
    tcase_add_test(tc, test_vec_round_bf16_special);
    tcase_add_test(tc, test_sum);
    tcase_add_test(tc, test_sum_squares);
    tcase_add_test(tc, test_embed);
    tcase_add_test(tc, test_permute_rows);
    tcase_add_test(tc, test_rmsnorm_forward);
    tcase_add_test(tc, test_rmsnorm_backward);
    tcase_add_test(tc, test_rope);
    tcase_add_test(tc, test_swiglu);
    tcase_add_test(tc, test_crossentropy_forward);
    tcase_add_test(tc, test_crossentropy_backward);
    tcase_add_test(tc, test_adamw);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(kernels_nn_suite)
