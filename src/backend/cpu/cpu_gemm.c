/*
 * cpu_gemm.c: the cpu backend's products on OpenBLAS sgemm: the linear layer and the experts.
 *
 * The same math as the plain loops of src/nn/matmul.c and src/moe/experts.c (read those
 * first); sgemm blocks the products for the caches and vector units, which is most of the
 * difference between the two CPU backends' speeds.
 *
 * Accumulation rule (nn/ops.h): weight gradients are added to (+=); dx, dxe are written (=).
 */
#include "backend/cpu/cpu.h"

#include <stdlib.h>
#include <time.h>

#include "base/omp_compat.h"

/* last: through <complex.h> it defines the macro I, so no declaration below may use that name */
#include "backend/cpu/blas.h"

/* y (N, OUT) = x (N, IN) . W^T (IN, OUT), one sgemm */
static void gemm_forward(float *y, const float *x, const float *W, int N, int IN, int OUT) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OUT, IN, 1.0f, x, IN, W, IN, 0.0f, y,
                OUT);
}

/* Up to this many rows, a linear layer is one matrix-vector product per row. Such a product
 * reads the whole weight matrix for a handful of rows (a decoding step: one row per sequence),
 * so its speed is the memory's; sgemm packs W into tiles first, which reads and writes it
 * again, and ran at half of sgemv's speed at 1 to 4 rows on a 2-core machine (512 x 1024
 * weights, 2 MB, beyond the caches). Each output is still one dot product summed by one
 * thread, so the results are repeatable for any thread count, though not the bits sgemm
 * gives. A training step's linear layers have B T rows, far more; the experts' slices, which
 * can be this small in training too, keep sgemm (slice_forward), so that no training result
 * moves. */
#define MATMUL_GEMV_ROWS 4

void cpu_matmul_forward(float *y, const float *x, const float *W, int N, int IN, int OUT) {
    /* y (N, OUT) = x (N, IN) . W^T (IN, OUT) */
    if (N > MATMUL_GEMV_ROWS) {
        gemm_forward(y, x, W, N, IN, OUT);
        return;
    }
    for (int n = 0; n < N; n++)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, OUT, IN, 1.0f, W, IN, x + (size_t)n * IN, 1, 0.0f,
                    y + (size_t)n * OUT, 1);
}

/* dx (N, in) = dy (N, out) . W (out, in), written (beta 0) or added to (beta 1) */
static void matmul_dx(float *dx, const float *dy, const float *W, int N, int in, int out,
                      float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.0f, dy, out, W, in, beta,
                dx, in);
}

void cpu_matmul_backward(float *dx, float *dW, const float *dy, const float *x, const float *W,
                         int N, int IN, int OUT) {
    /* forward: y = x W^T
     * dx (N, IN) = dy (N, OUT) . W (OUT, IN)           -- written
     * dW (OUT, IN) += dy^T (OUT, N) . x (N, IN)        -- accumulated */
    if (dx) matmul_dx(dx, dy, W, N, IN, OUT, 0.0f);
    if (dW)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN, N, 1.0f, dy, OUT, x, IN, 1.0f,
                    dW, IN);
}

/* ---- the experts: one SwiGLU per slice of the slot buffer --------------------------------- */

/* Expert e's SwiGLU on the Se rows starting at row r0 of the slot buffers. */
static void slice_forward(float *ye, float *g, float *u, float *h, const float *xe, const float *Wg,
                          const float *Wu, const float *Wd, int e, int r0, int Se, int C, int F) {
    if (Se <= 0) return;
    size_t rc = (size_t)r0 * C, rf = (size_t)r0 * F, wo = (size_t)e * F * C;
    gemm_forward(g + rf, xe + rc, Wg + wo, Se, C, F);
    gemm_forward(u + rf, xe + rc, Wu + wo, Se, C, F);
    swiglu_forward(h + rf, g + rf, u + rf, Se, F);
    gemm_forward(ye + rc, h + rf, Wd + wo, Se, F, C);
}

/* ---- which thread runs which expert ------------------------------------------------------
 *
 * One sgemm split over the threads pays a synchronisation per product and cuts an already
 * small product into smaller tiles; with many experts the slices are small (tiny-e64: about 64
 * rows each), and that cost dominates. So when there are at least two experts per thread,
 * each expert runs whole on one thread (sgemm inside an OpenMP region runs single-threaded),
 * the threads taking the experts largest slice first as they come free (longest first keeps
 * their finishing times close). Each expert's products are the same whichever thread runs
 * them, so the results do not depend on the schedule, nor on the thread count. With fewer
 * experts than that, the experts run in turn, each product on all the threads. */
typedef struct {
    int rows, e;
} ExpertLoad;

static int by_rows_descending(const void *a, const void *b) {
    const ExpertLoad *x = a, *y = b;
    if (x->rows != y->rows) return (x->rows < y->rows) - (x->rows > y->rows);
    return (x->e > y->e) - (x->e < y->e);
}

/* order[0 .. E): the experts by slice rows, largest first. Returns 1 when they are to run
 * across the threads (see above), 0 when in turn: the loops below then run on the calling
 * thread, and sgemm uses every thread for each product. */
static int expert_schedule(ExpertLoad *order, const int *offsets, int E) {
    for (int e = 0; e < E; e++) order[e] = (ExpertLoad){offsets[e + 1] - offsets[e], e};
    qsort(order, (size_t)E, sizeof *order, by_rows_descending);
#ifdef _OPENMP
    return omp_get_max_threads() > 1 && E >= 2 * omp_get_max_threads();
#else
    return 0;
#endif
}

/* Padded plans: the kept rows and the padding rows of a slice are two products. sgemm picks
 * its kernels and blocking by the row count, so one product over all cap rows could round
 * the kept rows differently from the unpadded run; as two, the kept rows see exactly the
 * unpadded call and the padding rows (zeros) still cost their FLOPs. */
static void expert_forward(float *ye, float *g, float *u, float *h, const float *xe,
                           const float *Wg, const float *Wu, const float *Wd, const int *offsets,
                           const int *counts, int e, int C, int F) {
    int r0 = offsets[e], rows = offsets[e + 1] - offsets[e];
    int kept = counts ? counts[e] : rows;
    slice_forward(ye, g, u, h, xe, Wg, Wu, Wd, e, r0, kept, C, F);
    slice_forward(ye, g, u, h, xe, Wg, Wu, Wd, e, r0 + kept, rows - kept, C, F);
}

void cpu_experts_forward(float *ye, float *g, float *u, float *h, const float *xe, const float *Wg,
                         const float *Wu, const float *Wd, const int *offsets, const int *counts,
                         int E, int C, int F) {
    ExpertLoad order[E];
    if (expert_schedule(order, offsets, E)) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int i = 0; i < E; i++)
            expert_forward(ye, g, u, h, xe, Wg, Wu, Wd, offsets, counts, order[i].e, C, F);
        return;
    }
    /* in turn, outside any OpenMP region: sgemm's own threads are then the pool's. (Inside an
     * inactive region, `if (0)`, each product's threads form a nested team of new threads,
     * which spin beside the pool's on the same cores: decoding through an expert cache, one
     * expert a call, ran 50 times slower so.) */
    for (int i = 0; i < E; i++)
        expert_forward(ye, g, u, h, xe, Wg, Wu, Wd, offsets, counts, order[i].e, C, F);
}

/* Expert e's backward over the Se rows starting at row r0 (the math: src/moe/experts.c). The
 * expert input feeds two linears (g and u), whose input gradients are summed in place: the
 * second product adds to the first (beta 1) instead of needing an (S, C) buffer. */
static void slice_backward(float *dxe, float *dWg, float *dWu, float *dWd, float *dg, float *du,
                           float *dh, const float *dye, const float *xe, const float *g,
                           const float *u, const float *h, const float *Wg, const float *Wu,
                           const float *Wd, int e, int r0, int Se, int C, int F) {
    if (Se <= 0) return;
    size_t rc = (size_t)r0 * C, rf = (size_t)r0 * F, wo = (size_t)e * F * C;
    cpu_matmul_backward(dh + rf, dWd ? dWd + wo : NULL, dye + rc, h + rf, Wd + wo, Se, F, C);
    swiglu_backward(dg + rf, du + rf, dh + rf, g + rf, u + rf, Se, F);
    cpu_matmul_backward(dxe ? dxe + rc : NULL, dWg ? dWg + wo : NULL, dg + rf, xe + rc, Wg + wo, Se,
                        C, F);
    cpu_matmul_backward(NULL, dWu ? dWu + wo : NULL, du + rf, xe + rc, Wu + wo, Se, C, F);
    if (dxe) matmul_dx(dxe + rc, du + rf, Wu + wo, Se, C, F, 1.0f);
}

/* the padding rows (dye = 0, h = 0) add exact zeros to the weight gradients, after the kept
 * rows' products */
static void expert_backward(float *dxe, float *dWg, float *dWu, float *dWd, float *dg, float *du,
                            float *dh, const float *dye, const float *xe, const float *g,
                            const float *u, const float *h, const float *Wg, const float *Wu,
                            const float *Wd, const int *offsets, const int *counts, int e, int C,
                            int F) {
    int r0 = offsets[e], rows = offsets[e + 1] - offsets[e];
    int kept = counts ? counts[e] : rows;
    slice_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, e, r0, kept, C, F);
    slice_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, e, r0 + kept,
                   rows - kept, C, F);
}

void cpu_experts_backward(float *dxe, float *dWg, float *dWu, float *dWd, float *dg, float *du,
                          float *dh, const float *dye, const float *xe, const float *g,
                          const float *u, const float *h, const float *Wg, const float *Wu,
                          const float *Wd, const int *offsets, const int *counts, int E, int C,
                          int F) {
    /* each expert writes its own rows of dxe, dg, du, dh and its own weight gradients: no two
     * threads touch the same element */
    ExpertLoad order[E];
    if (expert_schedule(order, offsets, E)) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int i = 0; i < E; i++)
            expert_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, offsets,
                            counts, order[i].e, C, F);
        return;
    }
    for (int i = 0; i < E; i++) /* in turn, outside any region (cpu_experts_forward) */
        expert_backward(dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd, offsets,
                        counts, order[i].e, C, F);
}

/* ---- the yardstick ------------------------------------------------------------------------ */

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cpu_sgemm_seconds(int n, int reps, double *seconds) {
    const size_t nn = (size_t)n * n;
    float *a = floats_alloc(nn), *b = floats_alloc(nn), *c = floats_alloc(nn);
    Rng rng;
    rng_seed(&rng, 1);
    for (size_t i = 0; i < nn; i++) {
        a[i] = rng_uniform(&rng) - 0.5f;
        b[i] = rng_uniform(&rng) - 0.5f;
    }
    /* one warm-up product (the thread pool starts, pages fault in), then the timed ones */
    for (int rep = -1; rep < reps; rep++) {
        double t0 = seconds_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        if (rep >= 0) seconds[rep] = seconds_now() - t0;
    }
    free(a);
    free(b);
    free(c);
}
