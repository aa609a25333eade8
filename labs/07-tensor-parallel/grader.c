/*
 * grader.c: the automatic grader of lab 07 (tensor parallelism with sequence parallelism), an
 * MPI program whose tasks each run under mpirun (labs/Makefile: make -C labs grade
 * LAB=07-tensor-parallel [NP=2] [TASK=task3_row_forward]). One Check TCase per task:
 *
 *   task1_column_forward   lab_column_forward    the README's example on pairs of ranks,
 *   task2_column_backward  lab_column_backward   random layers on groups of 1, 2, 3 and all
 *   task3_row_forward      lab_row_forward       the ranks, and the whole layer computed by
 *   task4_row_backward     lab_row_backward      the engine's own ops on all the ranks
 *   task5_mlp              lab_mlp_forward       random feed-forwards and the engine's, and
 *                                                the collectives it calls counted
 *
 * Every rank draws the whole layer (x, W, dy and the weight gradient's earlier value) from a
 * seed, computes the unsplit results itself (plain loops in double, or the engine's
 * matmul_forward, matmul_backward and swiglu_forward from libmoe.a, one process), hands the
 * student its share of the inputs and compares its share of the outputs, under the project's
 * tolerance rule (tests/testutil.h), each output guarded (lab_guard.h: a write past its end
 * shows). Every task takes its inputs from the grader, never from the student's other tasks, so
 * one unfinished task fails only itself.
 *
 * As in lab 03, each task is an MPI job of its own (lab_main_mpi, labs/common/lab.h), and a
 * test never stops half-way on one rank (the others would wait for it in a collective): checks
 * note their first failure, and the test's last line, VERDICT(), agrees over all ranks, so a
 * failure on any rank fails the test everywhere, with the first failing rank's message.
 *
 * Task 5 counts the collectives the student's code calls: the grader defines MPI_Allgather,
 * MPI_Allgatherv, MPI_Reduce_scatter_block, MPI_Reduce_scatter and MPI_Allreduce, which count
 * and hand over to MPI's own (PMPI_*), the profiling interface every MPI has for this.
 */
#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab.h"
#include "lab_guard.h"
#include "nn/ops.h"
#include "tp_lab.h"

static int world_rank, world_size;

/* ---- agreeing on a verdict over every rank --------------------------------------------------- */

typedef struct {
    int line;
    char msg[LAB_GUARD_MSG];
} Failure;
static Failure first_failure; /* this rank's first failed check in the running test */
static int failed, todo_task;

static void note(int line, const char *fmt, ...) {
    if (failed) return;
    failed = 1;
    first_failure.line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(first_failure.msg, sizeof first_failure.msg, fmt, ap);
    va_end(ap);
}

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) note(__LINE__, __VA_ARGS__);                                                  \
    } while (0)

/* lab_guard.h's EXPECT_TABLE, noted instead of ending the test on this rank alone: got vs want
 * (rows, cols) under the tolerance rule, got's guards intact */
static void expect_table(int line, const float *got, const float *want, int rows, int cols,
                         const char *name, const char *what) {
    char m[LAB_GUARD_MSG];
    if (lab_table_differs(m, got, want, rows, cols, name, what)) note(line, "%s", m);
}

/* A call into the student's code. Unlike LAB_CALL, a lab_todo() is noted and the test goes on
 * (every rank makes the same calls); VERDICT() reports it. */
#define STUDENT(call)                                                                              \
    do {                                                                                           \
        lab_todo_task = 0;                                                                         \
        call;                                                                                      \
        if (lab_todo_task && !todo_task) todo_task = lab_todo_task;                                \
    } while (0)

static void expect_mpi_ok(int line, int rc, const char *function, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    note(line, "%s: %s returned MPI error %d (%s)", what, function, rc, text);
}

/* Weak: a function missing from the student's file is NULL, and fails its task alone instead
 * of the link. */
#pragma weak lab_column_forward
#pragma weak lab_column_backward
#pragma weak lab_row_forward
#pragma weak lab_row_backward
#pragma weak lab_mlp_forward

static const LabTask tasks[] = {LAB_TASK("task1_column_forward", lab_column_forward, 2),
                                LAB_TASK("task2_column_backward", lab_column_backward, 2),
                                LAB_TASK("task3_row_forward", lab_row_forward, 2),
                                LAB_TASK("task4_row_backward", lab_row_backward, 2),
                                LAB_TASK("task5_mlp", lab_mlp_forward, 2)};
enum { NTASKS = sizeof tasks / sizeof tasks[0] };

/* The end of every test, on every rank: a lab_todo() anywhere, or the first rank with a failed
 * check, fails the test everywhere with the same message. */
#define VERDICT() verdict()
static void verdict(void) {
    int any_todo, first, mine = failed ? world_rank : world_size;
    MPI_Allreduce(&todo_task, &any_todo, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    Failure f = first_failure;
    if (first < world_size) MPI_Bcast(&f, (int)sizeof f, MPI_BYTE, first, MPI_COMM_WORLD);
    failed = todo_task = 0;
    if (any_todo >= 1 && any_todo <= NTASKS)
        ck_abort_msg("task %d (%s) is not implemented yet: write it in your file, in place of "
                     "the lab_todo() call",
                     any_todo, tasks[any_todo - 1].function);
    if (first < world_size) {
        if (world_size > 1)
            _ck_assert_failed(__FILE__, f.line, "Failed", "rank %d: %s", first, f.msg);
        _ck_assert_failed(__FILE__, f.line, "Failed", "%s", f.msg);
    }
}

static void setup(void) {
    failed = todo_task = 0;
}

/* ---- the collectives the student's code calls (task 5) --------------------------------------- */

static int counting; /* 1 while the student's code runs: the grader's own calls are not counted */
static int n_allgather, n_reduce_scatter, n_allreduce;

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    n_allgather += counting;
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm) {
    n_allgather += counting;
    return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                           comm);
}
int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    n_reduce_scatter += counting;
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
}
int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    n_reduce_scatter += counting;
    return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
}
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm) {
    n_allreduce += counting;
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

/* ---- groups of ranks ------------------------------------------------------------------------- */

typedef struct {
    MPI_Comm comm;
    int P, rank;
} Group;

/* Ranks [g P, (g+1) P) of the world form group g (the last one may be smaller). Errors come
 * back as return codes, so a bad call is reported, not fatal. */
static Group group_open(int P) {
    Group g;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank / P, world_rank, &g.comm);
    MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN);
    MPI_Comm_size(g.comm, &g.P);
    MPI_Comm_rank(g.comm, &g.rank);
    return g;
}
static void group_close(Group *g) {
    MPI_Comm_free(&g->comm);
}

/* the group sizes to try: 1, 2, 3 and the whole world, as far as the world allows */
static int group_sizes(int *sizes) {
    int n = 0;
    const int want[4] = {1, 2, 3, world_size};
    for (int i = 0; i < 4; i++) {
        int dup = want[i] > world_size;
        for (int j = 0; j < n; j++) dup |= sizes[j] == want[i];
        if (!dup) sizes[n++] = want[i];
    }
    return n;
}

/* ---- buffers --------------------------------------------------------------------------------- */

/* A case's buffers, freed together: each holds LAB_GUARD_N floats more than asked. */
enum { POOL_MAX = 32 };
typedef struct {
    float *p[POOL_MAX];
    int n;
} Pool;
static float *pool_get(Pool *pool, size_t n) {
    float *p = malloc((n + LAB_GUARD_N) * sizeof(float));
    if (!p || pool->n == POOL_MAX) {
        fprintf(stderr, "grader: no memory for %zu floats\n", n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return pool->p[pool->n++] = p;
}
static void pool_free(Pool *pool) {
    for (int i = 0; i < pool->n; i++) free(pool->p[i]);
    pool->n = 0;
}

/* rows [r0, r0 + n) of a (R, C): an (n, C) of its own, guarded */
static float *take_rows(Pool *pool, const float *a, size_t C, size_t r0, size_t n) {
    if (n * C > ((size_t)1 << 30)) abort(); /* a test's sizes: a bound the compiler can see */
    float *s = pool_get(pool, n * C);
    memcpy(s, a + r0 * C, n * C * sizeof(float));
    lab_add_guards(s, n * C);
    return s;
}
/* columns [c0, c0 + m) of a (R, C): an (R, m) of its own, guarded */
static float *take_cols(Pool *pool, const float *a, int R, int C, int c0, int m) {
    float *s = pool_get(pool, (size_t)R * m);
    for (int r = 0; r < R; r++)
        memcpy(s + (size_t)r * m, a + (size_t)r * C + c0, m * sizeof(float));
    lab_add_guards(s, (size_t)R * m);
    return s;
}
/* an output of n floats holding NaN on entry (to be written), guarded */
static float *output(Pool *pool, size_t n) {
    float *s = pool_get(pool, n);
    lab_fill_guarded(s, n, NAN);
    return s;
}

/* ---- one whole layer and its results --------------------------------------------------------- */

enum { FROM_EXAMPLE, FROM_PLAIN, FROM_ENGINE };
static const char *source_text[] = {"the README's example", "random layer",
                                    "random layer against the engine's matmul_forward and "
                                    "matmul_backward"};

/* y = x W^T, W (OUT, IN), with dy the gradient of y and dW0 what the weight gradient held
 * before the backward; y, dx = dy W and dW = dW0 + dy^T x the whole layer's results */
typedef struct {
    int N, IN, OUT;
    float *x, *W, *dy, *dW0; /* (N, IN), (OUT, IN), (N, OUT), (OUT, IN) */
    float *y, *dx, *dW;      /* (N, OUT), (N, IN), (OUT, IN) */
} Layer;

/* the README's example: N = IN = OUT = 2 */
static const float ex_x[4] = {1, 2, 3, 4}, ex_W[4] = {1, 0, 1, 1}, ex_dy[4] = {1, 0, 0, 2};

static void plain_results(Layer *L) {
    const int N = L->N, IN = L->IN, OUT = L->OUT;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double s = 0.0;
            for (int i = 0; i < IN; i++) s += (double)L->x[n * IN + i] * L->W[o * IN + i];
            L->y[n * OUT + o] = (float)s;
        }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IN; i++) {
            double s = 0.0;
            for (int o = 0; o < OUT; o++) s += (double)L->dy[n * OUT + o] * L->W[o * IN + i];
            L->dx[n * IN + i] = (float)s;
        }
    for (int o = 0; o < OUT; o++)
        for (int i = 0; i < IN; i++) {
            double s = L->dW0[o * IN + i];
            for (int n = 0; n < N; n++) s += (double)L->dy[n * OUT + o] * L->x[n * IN + i];
            L->dW[o * IN + i] = (float)s;
        }
}

/* The layer of a case, the same on every rank (drawn from seed), and its results from the
 * grader's loops or the engine's ops. */
static Layer layer_make(Pool *pool, int source, int N, int IN, int OUT, unsigned long long seed) {
    Layer L = {N, IN, OUT, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    L.x = pool_get(pool, (size_t)N * IN);
    L.W = pool_get(pool, (size_t)OUT * IN);
    L.dy = pool_get(pool, (size_t)N * OUT);
    L.dW0 = pool_get(pool, (size_t)OUT * IN);
    L.y = pool_get(pool, (size_t)N * OUT);
    L.dx = pool_get(pool, (size_t)N * IN);
    L.dW = pool_get(pool, (size_t)OUT * IN);
    if (source == FROM_EXAMPLE) {
        memcpy(L.x, ex_x, sizeof ex_x);
        memcpy(L.W, ex_W, sizeof ex_W);
        memcpy(L.dy, ex_dy, sizeof ex_dy);
        memset(L.dW0, 0, 4 * sizeof(float));
    } else {
        fill_uniform(L.x, (size_t)N * IN, 1.0f, seed);
        fill_uniform(L.W, (size_t)OUT * IN, 1.0f / sqrtf((float)IN), seed + 1);
        fill_uniform(L.dy, (size_t)N * OUT, 1.0f, seed + 2);
        fill_uniform(L.dW0, (size_t)OUT * IN, 0.5f, seed + 3); /* the gradient is added to */
    }
    if (source == FROM_ENGINE) {
        matmul_forward(L.y, L.x, L.W, N, IN, OUT);
        memcpy(L.dW, L.dW0, (size_t)OUT * IN * sizeof(float));
        matmul_backward(L.dx, L.dW, L.dy, L.x, L.W, N, IN, OUT);
    } else {
        plain_results(&L);
    }
    return L;
}

/* "random layer, a group of 3 ranks (its rank 1), N = 6, IN = 9, OUT = 3" */
static void case_text(char *buf, size_t len, const char *label, const Group *g, const char *dims) {
    snprintf(buf, len, "%s, a group of %d rank%s (its rank %d), %s", label, g->P,
             g->P == 1 ? "" : "s", g->rank, dims);
}

/* the shapes of the random cases, as a rank's share: N = P n, IN = P i, OUT = P o */
static const struct { int n, i, o; } shares[] = {{1, 1, 1}, {2, 3, 1}, {3, 2, 4}, {1, 5, 2}};
enum { NSHARES = sizeof shares / sizeof shares[0] };

/* One case of a task on groups of P_want ranks: the layer, the task's check. */
typedef void (*LayerCheck)(int line, const Layer *L, const Group *g, const char *what, Pool *pool);

static void layer_case(int line, LayerCheck check, int P_want, int source, int s,
                       unsigned long long seed) {
    Group g = group_open(source == FROM_EXAMPLE ? 2 : P_want);
    Pool pool = {.n = 0};
    const int P = g.P;
    const int N = source == FROM_EXAMPLE ? 2 : P * shares[s].n;
    const int IN = source == FROM_EXAMPLE ? 2 : P * shares[s].i;
    const int OUT = source == FROM_EXAMPLE ? 2 : P * shares[s].o;
    Layer L = layer_make(&pool, source, N, IN, OUT, seed);
    char dims[96], what[256];
    snprintf(dims, sizeof dims, "N = %d, IN = %d, OUT = %d", N, IN, OUT);
    case_text(what, sizeof what, source_text[source], &g, dims);
    check(line, &L, &g, what, &pool);
    pool_free(&pool);
    group_close(&g);
}

/* every random shape on groups of 1, 2, 3 and all the ranks */
static void random_cases(int line, LayerCheck check, unsigned long long seed) {
    int sizes[4];
    const int n_sizes = group_sizes(sizes);
    for (int i = 0; i < n_sizes; i++)
        for (int s = 0; s < NSHARES; s++)
            layer_case(line, check, sizes[i], FROM_PLAIN, s, seed + 10 * (i * NSHARES + s));
}

/* ---- task 1: the column-parallel forward ----------------------------------------------------- */

static void column_forward_check(int line, const Layer *L, const Group *g, const char *what,
                                 Pool *pool) {
    const int N = L->N, IN = L->IN, OUT = L->OUT, n = N / g->P, o = OUT / g->P;
    const float *x = take_rows(pool, L->x, IN, g->rank * n, n);
    const float *W = take_rows(pool, L->W, IN, g->rank * o, o);
    const float *want_y = take_cols(pool, L->y, N, OUT, g->rank * o, o);
    float *y = output(pool, (size_t)N * o), *x_all = output(pool, (size_t)N * IN);
    int rc = MPI_SUCCESS;
    STUDENT(rc = lab_column_forward(y, x_all, x, W, N, IN, OUT, g->comm));
    expect_mpi_ok(line, rc, "lab_column_forward", what);
    expect_table(line, x_all, L->x, N, IN, "x_all", what); /* every rank's rows, in order */
    expect_table(line, y, want_y, N, o, "y", what);
}

START_TEST(column_forward_example) {
    layer_case(__LINE__, column_forward_check, 2, FROM_EXAMPLE, 0, 0);
    VERDICT();
}
END_TEST

START_TEST(column_forward_random) {
    random_cases(__LINE__, column_forward_check, 1000);
    VERDICT();
}
END_TEST

START_TEST(column_forward_engine) {
    layer_case(__LINE__, column_forward_check, world_size, FROM_ENGINE, 2, 1500);
    VERDICT();
}
END_TEST

/* ---- task 2: the column-parallel backward ---------------------------------------------------- */

static void column_backward_check(int line, const Layer *L, const Group *g, const char *what,
                                  Pool *pool) {
    const int N = L->N, IN = L->IN, OUT = L->OUT, n = N / g->P, o = OUT / g->P;
    const float *dy = take_cols(pool, L->dy, N, OUT, g->rank * o, o);
    const float *x_all = take_rows(pool, L->x, IN, 0, N);
    const float *W = take_rows(pool, L->W, IN, g->rank * o, o);
    const float *want_dx = take_rows(pool, L->dx, IN, g->rank * n, n);
    const float *want_dW = take_rows(pool, L->dW, IN, g->rank * o, o);
    float *dW = take_rows(pool, L->dW0, IN, g->rank * o, o), *dx = output(pool, (size_t)n * IN);
    int rc = MPI_SUCCESS;
    STUDENT(rc = lab_column_backward(dx, dW, dy, x_all, W, N, IN, OUT, g->comm));
    expect_mpi_ok(line, rc, "lab_column_backward", what);
    expect_table(line, dW, want_dW, o, IN, "dW", what);
    expect_table(line, dx, want_dx, n, IN, "dx", what);
}

START_TEST(column_backward_example) {
    layer_case(__LINE__, column_backward_check, 2, FROM_EXAMPLE, 0, 0);
    VERDICT();
}
END_TEST

START_TEST(column_backward_random) {
    random_cases(__LINE__, column_backward_check, 2000);
    VERDICT();
}
END_TEST

START_TEST(column_backward_engine) {
    layer_case(__LINE__, column_backward_check, world_size, FROM_ENGINE, 2, 2500);
    VERDICT();
}
END_TEST

/* ---- task 3: the row-parallel forward -------------------------------------------------------- */

static void row_forward_check(int line, const Layer *L, const Group *g, const char *what,
                              Pool *pool) {
    const int N = L->N, IN = L->IN, OUT = L->OUT, n = N / g->P, i = IN / g->P;
    const float *x = take_cols(pool, L->x, N, IN, g->rank * i, i);
    const float *W = take_cols(pool, L->W, OUT, IN, g->rank * i, i);
    const float *want_y = take_rows(pool, L->y, OUT, g->rank * n, n);
    float *y = output(pool, (size_t)n * OUT);
    int rc = MPI_SUCCESS;
    STUDENT(rc = lab_row_forward(y, x, W, N, IN, OUT, g->comm));
    expect_mpi_ok(line, rc, "lab_row_forward", what);
    expect_table(line, y, want_y, n, OUT, "y", what);
}

START_TEST(row_forward_example) {
    layer_case(__LINE__, row_forward_check, 2, FROM_EXAMPLE, 0, 0);
    VERDICT();
}
END_TEST

START_TEST(row_forward_random) {
    random_cases(__LINE__, row_forward_check, 3000);
    VERDICT();
}
END_TEST

START_TEST(row_forward_engine) {
    layer_case(__LINE__, row_forward_check, world_size, FROM_ENGINE, 2, 3500);
    VERDICT();
}
END_TEST

/* ---- task 4: the row-parallel backward ------------------------------------------------------- */

static void row_backward_check(int line, const Layer *L, const Group *g, const char *what,
                               Pool *pool) {
    const int N = L->N, IN = L->IN, OUT = L->OUT, n = N / g->P, i = IN / g->P;
    const float *dy = take_rows(pool, L->dy, OUT, g->rank * n, n);
    const float *x = take_cols(pool, L->x, N, IN, g->rank * i, i);
    const float *W = take_cols(pool, L->W, OUT, IN, g->rank * i, i);
    const float *want_dx = take_cols(pool, L->dx, N, IN, g->rank * i, i);
    const float *want_dW = take_cols(pool, L->dW, OUT, IN, g->rank * i, i);
    float *dW = take_cols(pool, L->dW0, OUT, IN, g->rank * i, i);
    float *dx = output(pool, (size_t)N * i);
    int rc = MPI_SUCCESS;
    STUDENT(rc = lab_row_backward(dx, dW, dy, x, W, N, IN, OUT, g->comm));
    expect_mpi_ok(line, rc, "lab_row_backward", what);
    expect_table(line, dW, want_dW, OUT, i, "dW", what);
    expect_table(line, dx, want_dx, N, i, "dx", what);
}

START_TEST(row_backward_example) {
    layer_case(__LINE__, row_backward_check, 2, FROM_EXAMPLE, 0, 0);
    VERDICT();
}
END_TEST

START_TEST(row_backward_random) {
    random_cases(__LINE__, row_backward_check, 4000);
    VERDICT();
}
END_TEST

START_TEST(row_backward_engine) {
    layer_case(__LINE__, row_backward_check, world_size, FROM_ENGINE, 2, 4500);
    VERDICT();
}
END_TEST

/* ---- task 5: the SwiGLU feed-forward --------------------------------------------------------- */

/* the whole feed-forward: x (N, C), Wg and Wu (F, C), Wd (C, F); h (N, F), y (N, C) */
static void plain_mlp(float *h, float *y, const float *x, const float *Wg, const float *Wu,
                      const float *Wd, int N, int C, int F) {
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            double g = 0.0, u = 0.0;
            for (int c = 0; c < C; c++) {
                g += (double)x[n * C + c] * Wg[f * C + c];
                u += (double)x[n * C + c] * Wu[f * C + c];
            }
            h[n * F + f] = (float)(g / (1.0 + exp(-g)) * u);
        }
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0.0;
            for (int f = 0; f < F; f++) s += (double)h[n * F + f] * Wd[c * F + f];
            y[n * C + c] = (float)s;
        }
}

/* the engine's dense feed-forward in one process (src/model/block.c, ffn_forward at tp = 1) */
static void engine_mlp(Pool *pool, float *h, float *y, const float *x, const float *Wg,
                       const float *Wu, const float *Wd, int N, int C, int F) {
    float *g = pool_get(pool, (size_t)N * F), *u = pool_get(pool, (size_t)N * F);
    matmul_forward(g, x, Wg, N, C, F);
    matmul_forward(u, x, Wu, N, C, F);
    swiglu_forward(h, g, u, N, F);
    matmul_forward(y, h, Wd, N, F, C);
}

static void mlp_case(int line, int P_want, int s, int engine, unsigned long long seed) {
    Group g = group_open(P_want);
    Pool pool = {.n = 0};
    const int P = g.P, N = P * shares[s].n, C = P * shares[s].i, F = P * 2 * shares[s].o;
    const int n = N / P, f = F / P;
    float *x = pool_get(&pool, (size_t)N * C), *Wg = pool_get(&pool, (size_t)F * C);
    float *Wu = pool_get(&pool, (size_t)F * C), *Wd = pool_get(&pool, (size_t)C * F);
    float *h = pool_get(&pool, (size_t)N * F), *y = pool_get(&pool, (size_t)N * C);
    fill_uniform(x, (size_t)N * C, 1.0f, seed);
    fill_uniform(Wg, (size_t)F * C, 1.5f / sqrtf((float)C), seed + 1);
    fill_uniform(Wu, (size_t)F * C, 1.5f / sqrtf((float)C), seed + 2);
    fill_uniform(Wd, (size_t)C * F, 1.0f / sqrtf((float)F), seed + 3);
    if (engine)
        engine_mlp(&pool, h, y, x, Wg, Wu, Wd, N, C, F);
    else
        plain_mlp(h, y, x, Wg, Wu, Wd, N, C, F);
    const float *xr = take_rows(&pool, x, C, g.rank * n, n);
    const float *Wgr = take_rows(&pool, Wg, C, g.rank * f, f);
    const float *Wur = take_rows(&pool, Wu, C, g.rank * f, f);
    const float *Wdr = take_cols(&pool, Wd, C, F, g.rank * f, f);
    const float *want_h = take_cols(&pool, h, N, F, g.rank * f, f);
    const float *want_y = take_rows(&pool, y, C, g.rank * n, n);
    float *got_x = output(&pool, (size_t)N * C), *got_h = output(&pool, (size_t)N * f);
    float *got_y = output(&pool, (size_t)n * C);
    char dims[96], what[256];
    snprintf(dims, sizeof dims, "N = %d, C = %d, F = %d", N, C, F);
    case_text(what, sizeof what,
              engine ? "random feed-forward against the engine's (matmul_forward, swiglu_forward)"
                     : "random feed-forward",
              &g, dims);
    int rc = MPI_SUCCESS;
    n_allgather = n_reduce_scatter = n_allreduce = 0;
    counting = 1;
    STUDENT(rc = lab_mlp_forward(got_y, got_x, got_h, xr, Wgr, Wur, Wdr, N, C, F, g.comm));
    counting = 0;
    expect_mpi_ok(line, rc, "lab_mlp_forward", what);
    expect_table(line, got_x, x, N, C, "x_all", what);
    expect_table(line, got_h, want_h, N, f, "h", what);
    expect_table(line, got_y, want_y, n, C, "y", what);
    EXPECT(n_allgather == 1 && n_reduce_scatter == 1 && n_allreduce == 0,
           "%s: it called MPI_Allgather %d time%s, MPI_Reduce_scatter_block %d and MPI_Allreduce "
           "%d: want exactly one all-gather (gate and up read the same gathered x) and one "
           "reduce-scatter (the down projection's partial sum), and no all-reduce",
           what, n_allgather, n_allgather == 1 ? "" : "s", n_reduce_scatter, n_allreduce);
    pool_free(&pool);
    group_close(&g);
}

START_TEST(mlp_random) {
    int sizes[4];
    const int n_sizes = group_sizes(sizes);
    for (int i = 0; i < n_sizes; i++)
        for (int s = 0; s < NSHARES; s++)
            mlp_case(__LINE__, sizes[i], s, 0, 5000 + 10 * (unsigned long long)(i * NSHARES + s));
    VERDICT();
}
END_TEST

START_TEST(mlp_engine) {
    mlp_case(__LINE__, world_size, 2, 1, 5500);
    VERDICT();
}
END_TEST

/* ---- suite and main -------------------------------------------------------------------------- */

static Suite *tp_lab_suite(void) {
    Suite *s = suite_create("lab 07: tensor parallelism");
    TCase *t1 = tcase_create("task1_column_forward");
    tcase_add_checked_fixture(t1, setup, NULL);
    tcase_add_test(t1, column_forward_example);
    tcase_add_test(t1, column_forward_random);
    tcase_add_test(t1, column_forward_engine);
    suite_add_tcase(s, t1);
    TCase *t2 = tcase_create("task2_column_backward");
    tcase_add_checked_fixture(t2, setup, NULL);
    tcase_add_test(t2, column_backward_example);
    tcase_add_test(t2, column_backward_random);
    tcase_add_test(t2, column_backward_engine);
    suite_add_tcase(s, t2);
    TCase *t3 = tcase_create("task3_row_forward");
    tcase_add_checked_fixture(t3, setup, NULL);
    tcase_add_test(t3, row_forward_example);
    tcase_add_test(t3, row_forward_random);
    tcase_add_test(t3, row_forward_engine);
    suite_add_tcase(s, t3);
    TCase *t4 = tcase_create("task4_row_backward");
    tcase_add_checked_fixture(t4, setup, NULL);
    tcase_add_test(t4, row_backward_example);
    tcase_add_test(t4, row_backward_random);
    tcase_add_test(t4, row_backward_engine);
    suite_add_tcase(s, t4);
    TCase *t5 = tcase_create("task5_mlp");
    tcase_add_checked_fixture(t5, setup, NULL);
    tcase_add_test(t5, mlp_random);
    tcase_add_test(t5, mlp_engine);
    suite_add_tcase(s, t5);
    return s;
}

/* The grader (no --lab-task: labs/Makefile runs it), or one rank of a task's job. */
int main(int argc, char **argv) {
    const char *task = lab_rank_task(argc, argv);
    if (!task) return lab_main_mpi(argv[0], "lab 07: tensor parallelism", tasks, NTASKS);

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    char nonce[LAB_NONCE_SIZE] = "";
    if (world_rank == 0) lab_rank_read_nonce(nonce);
    MPI_Bcast(nonce, LAB_NONCE_SIZE, MPI_CHAR, 0, MPI_COMM_WORLD);
    lab_rank_begin(world_rank, nonce);
    lab_rank_run(tp_lab_suite(), task, world_rank == 0);
    MPI_Barrier(MPI_COMM_WORLD); /* the end is reported only once every rank reached it */
    if (world_rank == 0) lab_rank_end();
    MPI_Finalize();
    return 0;
}
