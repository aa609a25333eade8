/*
 * tp_lab.c: the reference solution of lab 07, tensor parallelism with sequence parallelism
 * (assignment: labs/07-tensor-parallel/README.md).
 *
 * Every product is a plain loop summed in double; the collectives are the two halves of an
 * all-reduce: MPI_Allgather brings every rank's rows to all, MPI_Reduce_scatter_block sums a
 * partial (N, C) over the ranks and leaves each its own N / P rows. Both take counts per rank,
 * in floats: a rank's share of rows times the row's width.
 */
#include "tp_lab.h"

#include <math.h>
#include <stdlib.h>

/* y (N, OUT) = x (N, IN) W^T, W (OUT, IN): the engine's matmul_forward */
static void matmul(float *y, const float *x, const float *W, int N, int IN, int OUT) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double s = 0.0;
            for (int i = 0; i < IN; i++) s += (double)x[(size_t)n * IN + i] * W[(size_t)o * IN + i];
            y[(size_t)n * OUT + o] = (float)s;
        }
}

/* dx (N, IN) = dy (N, OUT) W (OUT, IN), written */
static void matmul_dx(float *dx, const float *dy, const float *W, int N, int IN, int OUT) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IN; i++) {
            double s = 0.0;
            for (int o = 0; o < OUT; o++)
                s += (double)dy[(size_t)n * OUT + o] * W[(size_t)o * IN + i];
            dx[(size_t)n * IN + i] = (float)s;
        }
}

/* dW (OUT, IN) += dy (N, OUT)^T x (N, IN) */
static void matmul_dW(float *dW, const float *dy, const float *x, int N, int IN, int OUT) {
    for (int o = 0; o < OUT; o++)
        for (int i = 0; i < IN; i++) {
            double s = 0.0;
            for (int n = 0; n < N; n++)
                s += (double)dy[(size_t)n * OUT + o] * x[(size_t)n * IN + i];
            dW[(size_t)o * IN + i] += (float)s;
        }
}

/* Every rank's n rows of C floats into all (N, C), rank 0's first: the rank's block of rows is
 * n C floats, the count MPI_Allgather takes (per rank, not in all). */
static int gather_rows(float *all, const float *mine, int N, int C, MPI_Comm comm) {
    int P;
    MPI_Comm_size(comm, &P);
    const int count = N / P * C;
    return MPI_Allgather(mine, count, MPI_FLOAT, all, count, MPI_FLOAT, comm);
}

/* part (N, C) summed over the ranks; this rank's N / P rows of the sum into mine (N/P, C) */
static int sum_rows(float *mine, const float *part, int N, int C, MPI_Comm comm) {
    int P;
    MPI_Comm_size(comm, &P);
    return MPI_Reduce_scatter_block(part, mine, N / P * C, MPI_FLOAT, MPI_SUM, comm);
}

int lab_column_forward(float *y, float *x_all, const float *x, const float *W, int N, int IN,
                       int OUT, MPI_Comm comm) {
    int P;
    MPI_Comm_size(comm, &P);
    int rc = gather_rows(x_all, x, N, IN, comm);
    if (rc != MPI_SUCCESS) return rc;
    matmul(y, x_all, W, N, IN, OUT / P); /* this rank's output channels, every row */
    return MPI_SUCCESS;
}

int lab_column_backward(float *dx, float *dW, const float *dy, const float *x_all, const float *W,
                        int N, int IN, int OUT, MPI_Comm comm) {
    int P;
    MPI_Comm_size(comm, &P);
    const int OUTr = OUT / P;
    matmul_dW(dW, dy, x_all, N, IN, OUTr); /* the rank's rows of W saw every row of x */
    /* the rank's channels give only part of each row's gradient: sum it, keep our rows */
    float *part = malloc(((size_t)N * IN + 1) * sizeof(float));
    if (!part) return MPI_ERR_NO_MEM;
    matmul_dx(part, dy, W, N, IN, OUTr);
    int rc = sum_rows(dx, part, N, IN, comm);
    free(part);
    return rc;
}

int lab_row_forward(float *y, const float *x, const float *W, int N, int IN, int OUT,
                    MPI_Comm comm) {
    int P;
    MPI_Comm_size(comm, &P);
    float *part = malloc(((size_t)N * OUT + 1) * sizeof(float));
    if (!part) return MPI_ERR_NO_MEM;
    matmul(part, x, W, N, IN / P, OUT); /* the rank's input channels' share of every output */
    int rc = sum_rows(y, part, N, OUT, comm);
    free(part);
    return rc;
}

int lab_row_backward(float *dx, float *dW, const float *dy, const float *x, const float *W, int N,
                     int IN, int OUT, MPI_Comm comm) {
    int P;
    MPI_Comm_size(comm, &P);
    const int INr = IN / P;
    float *dy_all = malloc(((size_t)N * OUT + 1) * sizeof(float));
    if (!dy_all) return MPI_ERR_NO_MEM;
    int rc = gather_rows(dy_all, dy, N, OUT, comm); /* every output feeds our columns */
    if (rc == MPI_SUCCESS) {
        matmul_dW(dW, dy_all, x, N, INr, OUT);
        matmul_dx(dx, dy_all, W, N, INr, OUT);
    }
    free(dy_all);
    return rc;
}

int lab_mlp_forward(float *y, float *x_all, float *h, const float *x, const float *Wg,
                    const float *Wu, const float *Wd, int N, int C, int F, MPI_Comm comm) {
    int P;
    MPI_Comm_size(comm, &P);
    const int Fr = F / P;
    /* one gather serves both column-parallel products: they read the same input */
    int rc = gather_rows(x_all, x, N, C, comm);
    if (rc != MPI_SUCCESS) return rc;
    float *g = malloc(((size_t)N * Fr + 1) * sizeof(float));
    float *u = malloc(((size_t)N * Fr + 1) * sizeof(float));
    float *part = malloc(((size_t)N * C + 1) * sizeof(float));
    if (!g || !u || !part) {
        free(g);
        free(u);
        free(part);
        return MPI_ERR_NO_MEM;
    }
    matmul(g, x_all, Wg, N, C, Fr);
    matmul(u, x_all, Wu, N, C, Fr);
    /* SwiGLU is elementwise: the rank's channels need no other rank's */
    for (size_t i = 0; i < (size_t)N * Fr; i++) h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    matmul(part, h, Wd, N, Fr, C); /* row-parallel: a partial sum of every output */
    rc = sum_rows(y, part, N, C, comm);
    free(g);
    free(u);
    free(part);
    return rc;
}
