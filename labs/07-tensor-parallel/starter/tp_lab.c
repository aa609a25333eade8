/*
 * tp_lab.c: your solution to lab 07, tensor parallelism with sequence parallelism
 * (assignment: labs/07-tensor-parallel/README.md).
 *
 *   task 1: x (N/P, IN) --MPI_Allgather--> x_all (N, IN); y = x_all W^T (N, OUT/P)
 *   task 2: dW += dy^T x_all; the partial dy W (N, IN) --MPI_Reduce_scatter_block--> dx (N/P, IN)
 *   task 3: the partial x W^T (N, OUT) --MPI_Reduce_scatter_block--> y (N/P, OUT)
 *   task 4: dy (N/P, OUT) --MPI_Allgather--> (N, OUT); dW += dy_all^T x; dx = dy_all W (N, IN/P)
 *   task 5: a SwiGLU feed-forward: tasks 1 and 3's forwards around silu(g) * u
 *
 * P ranks (the size of comm) split the layer y = x W^T, W (OUT, IN): task 1 and 2's rank r
 * holds rows [r OUT/P, (r+1) OUT/P) of W, task 3 and 4's columns [r IN/P, (r+1) IN/P), and
 * between layers each rank holds N/P rows of the activations. N, IN, OUT, C and F are the whole
 * layer's sizes. Each function below is a stub: it fills its outputs with NaN and calls
 * lab_todo(), which makes the grader report the task as not implemented. Replace the whole
 * body of a function (the lab_todo() call included) with your code, then grade it:
 *   make -C labs grade LAB=07-tensor-parallel                              every task, 4 ranks
 *   make -C labs grade LAB=07-tensor-parallel TASK=task3_row_forward NP=2  one task, 2 ranks
 * Weight gradients are added to (+=), everything else written (=). Helper functions of your
 * own should be `static`. You may call MPI (<mpi.h>) and the C library.
 */
#include "tp_lab.h"

#include <math.h>
#include <stdlib.h>

/* NaN into x[0 .. n): what a stub leaves in an output */
static void fill_nan(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

int lab_column_forward(float *y, float *x_all, const float *x, const float *W, int N, int IN,
                       int OUT, MPI_Comm comm) {
    /* TODO task 1: one MPI_Allgather of every rank's N/P rows of x into x_all (its counts are
     * per rank, in floats); then y[n, o] = sum_i x_all[n, i] W[o, i] for this rank's OUT/P
     * rows of W. P = MPI_Comm_size(comm). Return MPI_Allgather's result if it failed. */
    int P;
    MPI_Comm_size(comm, &P);
    fill_nan(x_all, (size_t)N * IN);
    fill_nan(y, (size_t)N * (OUT / P));
    lab_todo(1, "lab_column_forward");
    return MPI_SUCCESS;
}

int lab_column_backward(float *dx, float *dW, const float *dy, const float *x_all, const float *W,
                        int N, int IN, int OUT, MPI_Comm comm) {
    /* TODO task 2: dW[o, i] += sum_n dy[n, o] x_all[n, i]; the partial gradient dy W (N, IN)
     * into a buffer of your own, summed over the ranks by one MPI_Reduce_scatter_block that
     * leaves this rank its N/P rows in dx. */
    int P;
    MPI_Comm_size(comm, &P);
    fill_nan(dx, (size_t)(N / P) * IN);
    lab_todo(2, "lab_column_backward");
    return MPI_SUCCESS;
}

int lab_row_forward(float *y, const float *x, const float *W, int N, int IN, int OUT,
                    MPI_Comm comm) {
    /* TODO task 3: the partial product x W^T (N, OUT) over this rank's IN/P input channels,
     * into a buffer of your own; one MPI_Reduce_scatter_block sums it over the ranks and
     * leaves this rank its N/P rows in y. */
    int P;
    MPI_Comm_size(comm, &P);
    fill_nan(y, (size_t)(N / P) * OUT);
    lab_todo(3, "lab_row_forward");
    return MPI_SUCCESS;
}

int lab_row_backward(float *dx, float *dW, const float *dy, const float *x, const float *W, int N,
                     int IN, int OUT, MPI_Comm comm) {
    /* TODO task 4: gather every rank's N/P rows of dy into dy_all (N, OUT), a buffer of your
     * own, with one MPI_Allgather; then dW[o, i] += sum_n dy_all[n, o] x[n, i] and
     * dx[n, i] = sum_o dy_all[n, o] W[o, i], i over this rank's IN/P channels. */
    int P;
    MPI_Comm_size(comm, &P);
    fill_nan(dx, (size_t)N * (IN / P));
    lab_todo(4, "lab_row_backward");
    return MPI_SUCCESS;
}

int lab_mlp_forward(float *y, float *x_all, float *h, const float *x, const float *Wg,
                    const float *Wu, const float *Wd, int N, int C, int F, MPI_Comm comm) {
    /* TODO task 5: gather x once (task 1); g = x_all Wg^T and u = x_all Wu^T, (N, F/P) each;
     * h = silu(g) * u; the partial h Wd^T (N, C), summed and scattered to y once (task 3).
     * Exactly one MPI_Allgather and one MPI_Reduce_scatter_block. */
    int P;
    MPI_Comm_size(comm, &P);
    fill_nan(x_all, (size_t)N * C);
    fill_nan(h, (size_t)N * (F / P));
    fill_nan(y, (size_t)(N / P) * C);
    lab_todo(5, "lab_mlp_forward");
    return MPI_SUCCESS;
}
