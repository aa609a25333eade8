/*
 * tp_lab.h: lab 07, tensor parallelism with sequence parallelism (assignment: README.md).
 *
 * The P ranks of comm form one tensor-parallel group. One linear layer, y = x W^T with W
 * (OUT, IN), is split over them two ways, and between layers each rank holds N / P consecutive
 * rows of the activations (sequence parallelism): rank r holds rows [r N / P, (r+1) N / P).
 *
 *   column-parallel: rank r holds rows [r OUT / P, (r+1) OUT / P) of W, (OUT / P, IN)
 *     task 1, forward    x (N/P, IN) --MPI_Allgather--> x_all (N, IN); y_r = x_all W_r^T
 *                        (N, OUT/P)
 *     task 2, backward   dW_r += dy_r^T x_all; the partial dy_r W_r (N, IN)
 *                        --MPI_Reduce_scatter_block--> dx (N/P, IN)
 *   row-parallel: rank r holds columns [r IN / P, (r+1) IN / P) of W, (OUT, IN / P)
 *     task 3, forward    the partial x_r W_r^T (N, OUT) --MPI_Reduce_scatter_block--> y (N/P, OUT)
 *     task 4, backward   dy (N/P, OUT) --MPI_Allgather--> dy_all (N, OUT); dW_r += dy_all^T x_r;
 *                        dx_r = dy_all W_r (N, IN/P)
 *   task 5, a SwiGLU feed-forward: gate and up column-parallel, down row-parallel, one
 *     all-gather and one reduce-scatter
 *
 * Conventions (the engine's, src/nn/ops.h): float32, row-major, so element (n, c) of an (N, C)
 * array is at [n * C + c]. Outputs come first, then inputs, then weights, then dimensions.
 * Dimensions are the whole layer's (N, IN, OUT, C, F), never a rank's share: P = the size of
 * comm divides each of them. A weight share is stored as a matrix of its own: W_r (OUT/P, IN)
 * for the column split, W_r (OUT, IN/P) for the row split. Outputs are written in full (=),
 * but for weight gradients, which are added to (+=), as the engine's backward does. Every
 * function is collective: each rank of comm calls it at the same time. It returns MPI_SUCCESS,
 * or the error code of the MPI call that failed.
 */
#ifndef TP_LAB_H
#define TP_LAB_H

#include <mpi.h>

#include "lab.h" /* lab_todo(), the marker of an unfinished task */

/* Task 1. The column-parallel forward. x (N/P, IN): this rank's rows of the input; W (OUT/P,
 * IN): this rank's rows of the weight. x_all (N, IN) WRITTEN: every rank's rows of x, rank 0's
 * first (the backward needs it). y (N, OUT/P) WRITTEN: x_all W^T, this rank's output channels
 * for all N rows. */
int lab_column_forward(float *y, float *x_all, const float *x, const float *W, int N, int IN,
                       int OUT, MPI_Comm comm);

/* Task 2. The column-parallel backward. dy (N, OUT/P): the gradient of task 1's y; x_all (N,
 * IN): the gathered input of the forward; W (OUT/P, IN) as in task 1. dW (OUT/P, IN) ADDED TO:
 * dy^T x_all. dx (N/P, IN) WRITTEN: this rank's rows of the x-gradient, the sum over the ranks
 * of each one's partial dy W (N, IN). */
int lab_column_backward(float *dx, float *dW, const float *dy, const float *x_all, const float *W,
                        int N, int IN, int OUT, MPI_Comm comm);

/* Task 3. The row-parallel forward. x (N, IN/P): this rank's input channels for all N rows;
 * W (OUT, IN/P): this rank's columns of the weight. y (N/P, OUT) WRITTEN: this rank's rows of
 * the sum over the ranks of each one's partial x W^T (N, OUT). */
int lab_row_forward(float *y, const float *x, const float *W, int N, int IN, int OUT,
                    MPI_Comm comm);

/* Task 4. The row-parallel backward. dy (N/P, OUT): this rank's rows of the gradient of task 3's
 * y; x (N, IN/P) and W (OUT, IN/P) as in task 3. dW (OUT, IN/P) ADDED TO: dy_all^T x, dy_all
 * (N, OUT) every rank's rows of dy. dx (N, IN/P) WRITTEN: dy_all W. */
int lab_row_backward(float *dx, float *dW, const float *dy, const float *x, const float *W, int N,
                     int IN, int OUT, MPI_Comm comm);

/* Task 5. A SwiGLU feed-forward, y = (silu(x Wg^T) * (x Wu^T)) Wd^T, split as the engine splits
 * its dense one under dist.tp: the F hidden channels over the ranks, rank r holding channels
 * [r F / P, (r+1) F / P). x (N/P, C): this rank's rows; Wg, Wu (F/P, C): its rows of the gate
 * and up weights (F, C); Wd (C, F/P): its columns of the down weight (C, F). x_all (N, C)
 * WRITTEN: the gathered input. h (N, F/P) WRITTEN: silu(g) * u of its channels, g = x_all Wg^T,
 * u = x_all Wu^T, silu(g) = g / (1 + exp(-g)). y (N/P, C) WRITTEN: this rank's rows of the
 * output. One MPI_Allgather and one MPI_Reduce_scatter_block in all. */
int lab_mlp_forward(float *y, float *x_all, float *h, const float *x, const float *Wg,
                    const float *Wu, const float *Wd, int N, int C, int F, MPI_Comm comm);

#endif
