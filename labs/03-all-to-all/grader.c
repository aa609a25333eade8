/*
 * grader.c: the automatic grader of lab 03 (the dispatch of expert parallelism), an MPI
 * program whose tasks each run under mpirun (labs/Makefile: make -C labs grade LAB=03-all-to-all [NP=2]
 * [TASK=task3_exchange]). One Check TCase per task:
 *
 *   task1_counts    lab_send_counts      the README's example (both ranks' routings), outputs
 *                                        that held garbage, an idle rank, P = 1, random
 *                                        routings for P = 1 .. 8 and 1 .. 3 experts per rank
 *   task2_displs    lab_displacements    the README's example, zero counts, P = 1, random
 *   task3_exchange  lab_exchange_counts  the README's example on pairs of ranks, random
 *                                        routings on groups of 1, 2, 3 and all ranks (a rank
 *                                        with no tokens, every token to rank 0's experts)
 *   task4_pack      lab_pack             the README's example, random shapes, N = 0, and the
 *                                        engine's dispatch plan (the same order)
 *   task5_dispatch  lab_dispatch         as task 3, with C = 1 .. 5 channels
 *
 * Every rank runs every test: the local tasks (1, 2, 4) on data of its own, the collective
 * ones (3, 5) inside groups cut from MPI_COMM_WORLD (ranks [g P, (g+1) P) form group g).
 * Every rank's data is drawn from a seed and its rank in the group, so each rank recomputes
 * what any other rank holds, and the expected results come from the plain reference functions
 * below (no MPI, independent of the solution). Every task takes its inputs from the grader,
 * never from the student's other tasks, so one unfinished task fails only itself.
 *
 * MPI and fork do not mix, so each task runs as an MPI job of its own (lab_main_mpi, in
 * labs/common/lab.h): this program, started by the Makefile, starts mpirun once per task with
 * itself as the ranks (--lab-task TASK), and counts a task only when rank 0 reports its end with
 * the number the grader gave it. A test never stops half-way on one rank (the others could wait
 * for it in a collective forever): checks only note their first failure, and the test's last
 * line, VERDICT(), agrees over all ranks, so a failure on any rank fails the test on every rank,
 * with the first failing rank's message. Rank 0 reports; every rank's output is the task's
 * output. A job that has not finished after LAB_TIME_LIMIT seconds (a rank stuck in an MPI
 * call) is ended by its ranks' watchdog, which says so.
 */
#include "testutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alltoall_lab.h"
#include "lab.h"
#include "moe/moe_ops.h"

static int world_rank, world_size;

/* ---- agreeing on a verdict over every rank ------------------------------------------------ */

typedef struct {
    int line;
    char msg[480];
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

/* A call into the student's code. Unlike LAB_CALL, a lab_todo() is noted and the test goes on
 * (every rank makes the same calls); VERDICT() reports it. */
#define STUDENT(call)                                                                              \
    do {                                                                                           \
        lab_todo_task = 0;                                                                         \
        call;                                                                                      \
        if (lab_todo_task && !todo_task) todo_task = lab_todo_task;                                \
    } while (0)

/* Weak: a function missing from the student's file is NULL, and fails its task alone (the
 * tasks' setup) instead of the link. */
#pragma weak lab_send_counts
#pragma weak lab_displacements
#pragma weak lab_exchange_counts
#pragma weak lab_pack
#pragma weak lab_dispatch

static const LabTask tasks[] = {LAB_TASK("task1_counts", lab_send_counts, 2),
                                LAB_TASK("task2_displs", lab_displacements, 2),
                                LAB_TASK("task3_exchange", lab_exchange_counts, 2),
                                LAB_TASK("task4_pack", lab_pack, 2),
                                LAB_TASK("task5_dispatch", lab_dispatch, 2)};
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

/* Before each test: a fresh verdict. (A function missing from the student's file fails its
 * task before any job starts: lab_main_mpi.) */
static void setup(void) {
    failed = todo_task = 0;
}

/* ---- comparisons (each notes the first difference) ---------------------------------------- */

static void expect_ints(int line, const int *got, const int *want, int n, const char *name,
                        const char *what) {
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            note(line, "%s: %s[%d]: got %d, want %d", what, name, i, got[i], want[i]);
            return;
        }
}
#define EXPECT_INTS(got, want, n, name, what) expect_ints(__LINE__, got, want, n, name, what)

/* Token rows hold x = 1000 * source rank + token + channel / 8, exactly, so a row names
 * itself: "rank 1 token 2" instead of a number. */
static float x_value(int src, int n, int c) {
    return 1000.0f * src + n + c / 8.0f;
}
static void describe_row(char *out, size_t len, const float *r, int C) {
    const float v = r[0];
    int ok = v >= 0 && v < 1e6f, src = 0, n = 0; /* (NaN fails here, before any cast) */
    if (ok) {
        src = (int)(v / 1000.0f);
        n = (int)v - 1000 * src;
        ok = v == x_value(src, n, 0);
    }
    for (int c = 1; c < C && ok; c++) ok = r[c] == x_value(src, n, c);
    if (ok)
        snprintf(out, len, "the row of rank %d's token %d", src, n);
    else
        snprintf(out, len, "(%g%s)", v, C > 1 ? ", ..." : "");
}
static void expect_rows(int line, const float *got, const float *want, int rows, int C,
                        const char *name, const char *what) {
    for (int r = 0; r < rows; r++)
        if (memcmp(got + (size_t)r * C, want + (size_t)r * C, (size_t)C * sizeof(float)) != 0) {
            char g[96], w[96];
            describe_row(g, sizeof g, got + (size_t)r * C, C);
            describe_row(w, sizeof w, want + (size_t)r * C, C);
            note(line, "%s: %s row %d: got %s, want %s", what, name, r, g, w);
            return;
        }
}
#define EXPECT_ROWS(got, want, rows, C, name, what)                                                \
    expect_rows(__LINE__, got, want, rows, C, name, what)

static void expect_mpi_ok(int line, int rc, const char *function, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    note(line, "%s: %s returned MPI error %d (%s)", what, function, rc, text);
}
#define EXPECT_MPI_OK(rc, function, what) expect_mpi_ok(__LINE__, rc, function, what)

/* ---- one rank's routed tokens, from a seed ------------------------------------------------- */

static uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int below(uint64_t *s, int n) {
    *s = mix(*s);
    return (int)((*s >> 33) % (uint64_t)n);
}

enum { MODE_UNIFORM, MODE_EMPTY_RANK1, MODE_ALL_TO_RANK0 };
typedef struct {
    int N, K, C;
    int *idx; /* (N, K) */
    float *x; /* (N, C) */
} Tokens;

/* Rank src's tokens for a case: 0 .. n_max tokens (none for rank 1 in MODE_EMPTY_RANK1), each
 * with K distinct experts of E (of rank 0's El experts only in MODE_ALL_TO_RANK0, K <= El). */
static Tokens make_tokens(uint64_t seed, int src, int n_max, int K, int E, int El, int C,
                          int mode) {
    uint64_t s = mix(seed * 1000003u + (uint64_t)src);
    Tokens t = {below(&s, n_max + 1), K, C, NULL, NULL};
    if (mode == MODE_EMPTY_RANK1 && src == 1) t.N = 0;
    const int pool = mode == MODE_ALL_TO_RANK0 ? El : E;
    t.idx = malloc(((size_t)t.N * K + 1) * sizeof(int));
    t.x = malloc(((size_t)t.N * C + 1) * sizeof(float));
    for (int n = 0; n < t.N; n++) {
        for (int k = 0; k < K; k++) {
            int e, dup;
            do {
                e = below(&s, pool);
                dup = 0;
                for (int j = 0; j < k; j++) dup |= t.idx[n * K + j] == e;
            } while (dup);
            t.idx[n * K + k] = e;
        }
        for (int c = 0; c < C; c++) t.x[n * C + c] = x_value(src, n, c);
    }
    return t;
}
static void free_tokens(Tokens *t) {
    free(t->idx);
    free(t->x);
}

/* ---- reference logic (plain loops, no MPI) --------------------------------------------------- */

static void ref_counts(int *send_counts, int *expert_counts, const int *idx, int N, int K, int E,
                       int P) {
    for (int p = 0; p < P; p++) send_counts[p] = 0;
    for (int e = 0; e < E; e++) {
        expert_counts[e] = 0;
        for (int a = 0; a < N * K; a++) expert_counts[e] += idx[a] == e;
        send_counts[e / (E / P)] += expert_counts[e];
    }
}

static int ref_displs(int *displs, const int *counts, int P) {
    int total = 0;
    for (int p = 0; p < P; p++) {
        displs[p] = 0;
        for (int q = 0; q < p; q++) displs[p] += counts[q];
        total += counts[p];
    }
    return total;
}

/* rank p's local expert l is global expert p El + l, so (rank, local expert, a) order is
 * (global expert, a) order */
static void ref_pack(float *sendbuf, int *row, const Tokens *t, int E) {
    int r = 0;
    for (int e = 0; e < E; e++)
        for (int a = 0; a < t->N * t->K; a++)
            if (t->idx[a] == e) {
                row[a] = r;
                memcpy(sendbuf + (size_t)r * t->C, t->x + (size_t)(a / t->K) * t->C,
                       (size_t)t->C * sizeof(float));
                r++;
            }
}

/* what rank `me` of P receives: recv_counts (P, El); recv (R, C) by local expert, then source,
 * then the source's assignment order (recv may be NULL). Returns R. */
static int ref_receive(int *recv_counts, float *recv, const Tokens *all, int me, int P, int El) {
    int R = 0;
    for (int l = 0; l < El; l++)
        for (int s = 0; s < P; s++) {
            const Tokens *t = &all[s];
            int n_rows = 0;
            for (int a = 0; a < t->N * t->K; a++)
                if (t->idx[a] == me * El + l) {
                    if (recv)
                        memcpy(recv + (size_t)R * t->C, t->x + (size_t)(a / t->K) * t->C,
                               (size_t)t->C * sizeof(float));
                    R++;
                    n_rows++;
                }
            recv_counts[s * El + l] = n_rows;
        }
    return R;
}

/* ---- groups of ranks for the collective tasks ----------------------------------------------- */

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

/* ---- the README's example: P = 2, E = 4, K = 2, N = 3 ---------------------------------------- */

enum { EX_P = 2, EX_E = 4, EX_K = 2, EX_N = 3, EX_C = 2 };
static const int ex_idx[EX_P][EX_N * EX_K] = {{1, 2, 3, 0, 2, 1}, {0, 2, 3, 2, 2, 0}};
static const int ex_expert_counts[EX_P][EX_E] = {{1, 2, 2, 1}, {2, 0, 3, 1}};
static const int ex_send_counts[EX_P][EX_P] = {{3, 3}, {2, 4}};
static const int ex_displs[EX_P][EX_P] = {{0, 3}, {0, 2}};
static const int ex_row[EX_P][EX_N * EX_K] = {{1, 3, 5, 0, 4, 2}, {0, 2, 5, 3, 4, 1}};
static const int ex_send_tokens[EX_P][EX_N * EX_K] = {{1, 0, 2, 0, 2, 1}, {0, 2, 0, 1, 2, 1}};
static const int ex_recv_counts[EX_P][EX_E] = {{1, 2, 2, 0}, {2, 1, 3, 1}};
/* (source, token) of each received row: rank 0 gets 5 rows, rank 1 gets 7 */
static const int ex_recv_rows[EX_P][7][2] = {
    {{0, 1}, {1, 0}, {1, 2}, {0, 0}, {0, 2}},
    {{0, 0}, {0, 2}, {1, 0}, {1, 1}, {1, 2}, {0, 1}, {1, 1}}};
static const int ex_R[EX_P] = {5, 7};

static Tokens example_tokens(int src) {
    Tokens t = {EX_N, EX_K, EX_C, malloc(sizeof ex_idx[0]), malloc(EX_N * EX_C * sizeof(float))};
    memcpy(t.idx, ex_idx[src], sizeof ex_idx[0]);
    for (int n = 0; n < EX_N; n++)
        for (int c = 0; c < EX_C; c++) t.x[n * EX_C + c] = x_value(src, n, c);
    return t;
}

/* ---- task 1: send counts ------------------------------------------------------------------- */

START_TEST(counts_readme_example) {
    for (int src = 0; src < EX_P; src++) {
        int send[EX_P], expert[EX_E];
        char what[64];
        snprintf(what, sizeof what, "the README's example, rank %d's routing", src);
        STUDENT(lab_send_counts(send, expert, ex_idx[src], EX_N, EX_K, EX_E, EX_P));
        EXPECT_INTS(expert, ex_expert_counts[src], EX_E, "expert_counts", what);
        EXPECT_INTS(send, ex_send_counts[src], EX_P, "send_counts", what);
    }
    VERDICT();
}
END_TEST

START_TEST(counts_old_contents_idle_rank) {
    /* P = 4, E = 8: nothing goes to rank 2 (experts 4, 5) nor to expert 7; the outputs held
     * garbage on entry */
    enum { N = 4, K = 2, E = 8, P = 4 };
    static const int idx[N * K] = {0, 6, 1, 3, 2, 0, 6, 3};
    static const int want_expert[E] = {2, 1, 1, 2, 0, 0, 2, 0}, want_send[P] = {3, 3, 0, 2};
    int send[P], expert[E];
    for (int p = 0; p < P; p++) send[p] = 99;
    for (int e = 0; e < E; e++) expert[e] = 99;
    STUDENT(lab_send_counts(send, expert, idx, N, K, E, P));
    EXPECT_INTS(expert, want_expert, E, "expert_counts",
                "P = 4, E = 8, outputs held 99 on entry (write every element)");
    EXPECT_INTS(send, want_send, P, "send_counts",
                "P = 4, E = 8, rank 2 gets nothing, outputs held 99 on entry");
    VERDICT();
}
END_TEST

START_TEST(counts_random) {
    static const int Ps[] = {1, 2, 3, 4, 8};
    for (int i = 0; i < 5; i++)
        for (int El = 1; El <= 3; El++)
            for (int K = 1; K <= 3; K++) {
                const int P = Ps[i], E = P * El;
                if (K > E) continue;
                const uint64_t seed = 100 + 31 * (uint64_t)(i * 9 + El * 3 + K);
                Tokens t = make_tokens(seed, world_rank, 40, K, E, El, 1, MODE_UNIFORM);
                int send[9], expert[25], want_send[9], want_expert[25];
                send[P] = expert[E] = -12345; /* one past the end: must stay */
                ref_counts(want_send, want_expert, t.idx, t.N, K, E, P);
                want_send[P] = want_expert[E] = -12345;
                STUDENT(lab_send_counts(send, expert, t.idx, t.N, K, E, P));
                char what[96];
                snprintf(what, sizeof what, "random routing, P = %d, E = %d, K = %d, N = %d", P, E,
                         K, t.N);
                EXPECT_INTS(expert, want_expert, E + 1, "expert_counts", what);
                EXPECT_INTS(send, want_send, P + 1, "send_counts", what);
                free_tokens(&t);
            }
    VERDICT();
}
END_TEST

/* ---- task 2: displacements ------------------------------------------------------------------- */

START_TEST(displs_readme_example) {
    for (int src = 0; src < EX_P; src++) {
        int displs[EX_P], total = -1;
        char what[64];
        snprintf(what, sizeof what, "the README's example, rank %d's send_counts", src);
        STUDENT(total = lab_displacements(displs, ex_send_counts[src], EX_P));
        EXPECT_INTS(displs, ex_displs[src], EX_P, "displs", what);
        EXPECT(total == 6, "%s: returned %d, want the total 6", what, total);
    }
    VERDICT();
}
END_TEST

START_TEST(displs_zero_counts_and_one_rank) {
    static const int counts[4] = {0, 5, 0, 2}, want[4] = {0, 0, 5, 5};
    static const int one[1] = {4}, want_one[1] = {0}, zeros[3] = {0, 0, 0};
    int displs[4] = {9, 9, 9, 9}, total = -1;
    STUDENT(total = lab_displacements(displs, counts, 4));
    EXPECT_INTS(displs, want, 4, "displs",
                "counts {0, 5, 0, 2} (empty blocks start where the next one does)");
    EXPECT(total == 7, "counts {0, 5, 0, 2}: returned %d, want the total 7", total);
    STUDENT(total = lab_displacements(displs, one, 1));
    EXPECT_INTS(displs, want_one, 1, "displs", "P = 1, counts {4}");
    EXPECT(total == 4, "P = 1, counts {4}: returned %d, want 4", total);
    for (int p = 0; p < 3; p++) displs[p] = 9;
    STUDENT(total = lab_displacements(displs, zeros, 3));
    EXPECT_INTS(displs, zeros, 3, "displs", "counts {0, 0, 0}, displs held 9 on entry");
    EXPECT(total == 0, "counts {0, 0, 0}: returned %d, want 0", total);
    VERDICT();
}
END_TEST

START_TEST(displs_random) {
    for (int P = 1; P <= 16; P++) {
        uint64_t s = mix(200 + (uint64_t)P * 7 + (uint64_t)world_rank * 1000);
        int counts[16], displs[17], want[17];
        for (int p = 0; p < P; p++) counts[p] = below(&s, 21);
        for (int p = 0; p < P; p++) displs[p] = 99;
        displs[P] = want[P] = -12345;
        const int want_total = ref_displs(want, counts, P);
        int total = -1;
        STUDENT(total = lab_displacements(displs, counts, P));
        char what[64];
        snprintf(what, sizeof what, "random counts 0 .. 20, P = %d", P);
        EXPECT_INTS(displs, want, P + 1, "displs", what);
        EXPECT(total == want_total, "%s: returned %d, want the total %d", what, total, want_total);
    }
    VERDICT();
}
END_TEST

/* ---- task 3: the count exchange -------------------------------------------------------------- */

/* One exchange inside groups of P: every member's counts from the reference, the student's
 * exchange, the reference's table of what this member receives. */
static void exchange_case(int line, int P_want, uint64_t seed, int n_max, int El, int K, int mode,
                          int example) {
    Group g = group_open(P_want);
    const int P = g.P;
    /* the example keeps its 4 experts on a rank left alone (an odd world) */
    if (example) El = EX_E / P;
    const int E = P * El;
    Tokens *all = malloc(sizeof(Tokens) * P);
    for (int s = 0; s < P; s++)
        all[s] = example ? example_tokens(s)
                         : make_tokens(seed, s, n_max, K < E ? K : E, E, El, 1, mode);
    const Tokens *me = &all[g.rank];
    int *send = malloc(sizeof(int) * P), *expert = malloc(sizeof(int) * E);
    int *got = malloc(sizeof(int) * (E + 1)), *want = malloc(sizeof(int) * (E + 1));
    ref_counts(send, expert, me->idx, me->N, me->K, E, P);
    ref_receive(want, NULL, all, g.rank, P, El);
    for (int i = 0; i < E; i++) got[i] = -7;
    got[E] = want[E] = -12345;
    int rc = MPI_SUCCESS;
    STUDENT(rc = lab_exchange_counts(got, expert, E, g.comm));
    char what[160];
    snprintf(what, sizeof what,
             "%s, group of P = %d ranks (this is its rank %d), E = %d, K = %d, N = %d",
             example ? "the README's example" : "random routing", P, g.rank, E, me->K, me->N);
    expect_mpi_ok(line, rc, "lab_exchange_counts", what);
    if (example && P == EX_P)
        expect_ints(line, want, ex_recv_counts[g.rank], E, "(grader's reference)", what);
    expect_ints(line, got, want, E + 1, "recv_counts", what);
    for (int s = 0; s < P; s++) free_tokens(&all[s]);
    free(all);
    free(send);
    free(expert);
    free(got);
    free(want);
    group_close(&g);
}

START_TEST(exchange_readme_example) {
    /* pairs of ranks; a rank left alone (an odd world) exchanges rank 0's routing with itself */
    exchange_case(__LINE__, EX_P, 0, 0, EX_E / EX_P, EX_K, MODE_UNIFORM, 1);
    VERDICT();
}
END_TEST

START_TEST(exchange_random) {
    int sizes[4];
    const int n_sizes = group_sizes(sizes);
    for (int i = 0; i < n_sizes; i++)
        for (int El = 1; El <= 3; El++)
            for (int K = 1; K <= 2; K++)
                exchange_case(__LINE__, sizes[i], 300 + (uint64_t)(i * 8 + El * 2 + K), 30, El, K,
                              MODE_UNIFORM, 0);
    VERDICT();
}
END_TEST

START_TEST(exchange_empty_and_skewed) {
    /* a rank with no tokens at all; every token routed to rank 0's experts (the others
     * receive only zeros) */
    int sizes[4];
    const int n_sizes = group_sizes(sizes);
    for (int i = 0; i < n_sizes; i++) {
        exchange_case(__LINE__, sizes[i], 400 + (uint64_t)i, 20, 2, 2, MODE_EMPTY_RANK1, 0);
        exchange_case(__LINE__, sizes[i], 410 + (uint64_t)i, 20, 2, 2, MODE_ALL_TO_RANK0, 0);
    }
    VERDICT();
}
END_TEST

/* ---- task 4: pack ------------------------------------------------------------------------- */

START_TEST(pack_readme_example) {
    for (int src = 0; src < EX_P; src++) {
        Tokens t = example_tokens(src);
        float got[(EX_N * EX_K + 1) * EX_C], want[EX_N * EX_K * EX_C];
        int row[EX_N * EX_K];
        for (int a = 0; a < EX_N * EX_K; a++)
            for (int c = 0; c < EX_C; c++)
                want[a * EX_C + c] = x_value(src, ex_send_tokens[src][a], c);
        for (int i = 0; i < (EX_N * EX_K + 1) * EX_C; i++) got[i] = -7.0f;
        STUDENT(lab_pack(got, row, t.x, t.idx, EX_N, EX_K, EX_C, EX_E, EX_P));
        char what[64];
        snprintf(what, sizeof what, "the README's example, rank %d's tokens", src);
        EXPECT_INTS(row, ex_row[src], EX_N * EX_K, "row", what);
        EXPECT_ROWS(got, want, EX_N * EX_K, EX_C, "sendbuf", what);
        EXPECT(got[EX_N * EX_K * EX_C] == -7.0f, "%s: wrote past the end of sendbuf (N*K rows)",
               what);
        free_tokens(&t);
    }
    VERDICT();
}
END_TEST

START_TEST(pack_random) {
    /* every shape against the reference; a guard row after sendbuf and a guard after row must
     * stay as they were; N = 0 writes nothing */
    static const int Ps[] = {1, 2, 3, 4};
    for (int i = 0; i < 4; i++)
        for (int El = 1; El <= 3; El++)
            for (int K = 1; K <= 3; K++)
                for (int C = 1; C <= 5; C += 2) {
                    const int P = Ps[i], E = P * El;
                    if (K > E) continue;
                    const uint64_t seed = 500 + (uint64_t)(i * 100 + El * 10 + K) * 7 + C;
                    Tokens t =
                        make_tokens(seed, world_rank, C == 3 ? 0 : 30, K, E, El, C, MODE_UNIFORM);
                    const int A = t.N * K;
                    float *got = malloc(sizeof(float) * ((size_t)A + 1) * C);
                    float *want = malloc(sizeof(float) * ((size_t)A + 1) * C);
                    int *row = malloc(sizeof(int) * (A + 1)),
                        *want_row = malloc(sizeof(int) * (A + 1));
                    for (int j = 0; j < (A + 1) * C; j++) got[j] = want[j] = -7.0f;
                    row[A] = want_row[A] = -12345;
                    ref_pack(want, want_row, &t, E);
                    STUDENT(lab_pack(got, row, t.x, t.idx, t.N, K, C, E, P));
                    char what[96];
                    snprintf(what, sizeof what,
                             "random routing, P = %d, E = %d, K = %d, N = %d, C = %d", P, E, K, t.N,
                             C);
                    EXPECT_INTS(row, want_row, A + 1, "row", what);
                    EXPECT_ROWS(got, want, A + 1, C, "sendbuf", what);
                    free(got);
                    free(want);
                    free(row);
                    free(want_row);
                    free_tokens(&t);
                }
    VERDICT();
}
END_TEST

START_TEST(pack_matches_engine_plan) {
    /* the engine's dropless dispatch plan sorts the assignments by expert, stably: the same
     * order, so row[a] is the engine's slot of a, for any P */
    enum { E = 12 };
    for (int P = 1; P <= 4; P++) {
        Tokens t = make_tokens(600 + (uint64_t)P, world_rank, 40, 2, E, E / P, 3, MODE_UNIFORM);
        float *buf = malloc(sizeof(float) * ((size_t)t.N * 2 + 1) * 3);
        int *row = malloc(sizeof(int) * (t.N * 2 + 1));
        DispatchPlan plan;
        dispatch_plan_alloc(&plan, t.N > 0 ? t.N : 1, E, 2);
        dispatch_plan_build(&plan, t.idx, t.N);
        STUDENT(lab_pack(buf, row, t.x, t.idx, t.N, 2, 3, E, P));
        char what[96];
        snprintf(what, sizeof what, "against the engine's dispatch plan, P = %d, E = %d, N = %d", P,
                 E, t.N);
        EXPECT_INTS(row, plan.slot, t.N * 2, "row", what);
        dispatch_plan_free(&plan);
        free(buf);
        free(row);
        free_tokens(&t);
    }
    VERDICT();
}
END_TEST

/* ---- task 5: the dispatch -------------------------------------------------------------------- */

/* One dispatch inside groups of P: the inputs (packed sendbuf, counts) from the reference, the
 * student's dispatch, the reference's received rows. A guard row after recv must stay. */
static void dispatch_case(int line, int P_want, uint64_t seed, int n_max, int El, int K, int C,
                          int mode, int example) {
    Group g = group_open(P_want);
    const int P = g.P, ex = example && P == EX_P;
    if (example) El = EX_E / P; /* a rank left alone keeps the example's 4 experts */
    const int E = P * El;
    Tokens *all = malloc(sizeof(Tokens) * P);
    for (int s = 0; s < P; s++)
        all[s] = example ? example_tokens(s)
                         : make_tokens(seed, s, n_max, K < E ? K : E, E, El, C, mode);
    const Tokens *me = &all[g.rank];
    C = me->C;
    const int A = me->N * me->K;
    int *send = malloc(sizeof(int) * P), *expert = malloc(sizeof(int) * E);
    int *recv_counts = malloc(sizeof(int) * E), *row = malloc(sizeof(int) * (A + 1));
    float *sendbuf = malloc(sizeof(float) * ((size_t)A + 1) * C);
    ref_counts(send, expert, me->idx, me->N, me->K, E, P);
    ref_pack(sendbuf, row, me, E);
    const int R = ref_receive(recv_counts, NULL, all, g.rank, P, El);
    float *got = malloc(sizeof(float) * ((size_t)R + 1) * C);
    float *want = malloc(sizeof(float) * ((size_t)R + 1) * C);
    for (int j = 0; j < (R + 1) * C; j++) got[j] = want[j] = -7.0f;
    ref_receive(recv_counts, want, all, g.rank, P, El);
    char what[160];
    snprintf(what, sizeof what,
             "%s, group of P = %d ranks (this is its rank %d), E = %d, K = %d, N = %d, C = %d",
             ex ? "the README's example" : "random routing", P, g.rank, E, me->K, me->N, C);
    if (ex) {
        float hand[7 * EX_C];
        for (int r = 0; r < ex_R[g.rank]; r++)
            for (int c = 0; c < EX_C; c++)
                hand[r * EX_C + c] =
                    x_value(ex_recv_rows[g.rank][r][0], ex_recv_rows[g.rank][r][1], c);
        expect_ints(line, &R, &ex_R[g.rank], 1, "rows", what);
        expect_rows(line, want, hand, R, C, "(grader's reference)", what);
    }
    int rc = MPI_SUCCESS;
    STUDENT(rc = lab_dispatch(got, sendbuf, expert, recv_counts, C, E, g.comm));
    expect_mpi_ok(line, rc, "lab_dispatch", what);
    expect_rows(line, got, want, R + 1, C, "recv", what);
    for (int s = 0; s < P; s++) free_tokens(&all[s]);
    free(all);
    free(send);
    free(expert);
    free(recv_counts);
    free(row);
    free(sendbuf);
    free(got);
    free(want);
    group_close(&g);
}

START_TEST(dispatch_readme_example) {
    dispatch_case(__LINE__, EX_P, 0, 0, EX_E / EX_P, EX_K, EX_C, MODE_UNIFORM, 1);
    VERDICT();
}
END_TEST

START_TEST(dispatch_random) {
    int sizes[4];
    const int n_sizes = group_sizes(sizes);
    for (int i = 0; i < n_sizes; i++)
        for (int El = 1; El <= 3; El++)
            for (int C = 1; C <= 5; C += 2)
                dispatch_case(__LINE__, sizes[i], 700 + (uint64_t)(i * 20 + El * 5 + C), 30, El,
                              1 + (C + El) % 3, C, MODE_UNIFORM, 0);
    VERDICT();
}
END_TEST

START_TEST(dispatch_empty_and_skewed) {
    int sizes[4];
    const int n_sizes = group_sizes(sizes);
    for (int i = 0; i < n_sizes; i++) {
        dispatch_case(__LINE__, sizes[i], 800 + (uint64_t)i, 20, 2, 2, 3, MODE_EMPTY_RANK1, 0);
        dispatch_case(__LINE__, sizes[i], 810 + (uint64_t)i, 20, 2, 2, 3, MODE_ALL_TO_RANK0, 0);
    }
    VERDICT();
}
END_TEST

/* ---- suite and main ------------------------------------------------------------------------ */

static Suite *alltoall_lab_suite(void) {
    Suite *s = suite_create("lab 03: all-to-all");
    TCase *t1 = tcase_create("task1_counts");
    tcase_add_checked_fixture(t1, setup, NULL);
    tcase_add_test(t1, counts_readme_example);
    tcase_add_test(t1, counts_old_contents_idle_rank);
    tcase_add_test(t1, counts_random);
    suite_add_tcase(s, t1);
    TCase *t2 = tcase_create("task2_displs");
    tcase_add_checked_fixture(t2, setup, NULL);
    tcase_add_test(t2, displs_readme_example);
    tcase_add_test(t2, displs_zero_counts_and_one_rank);
    tcase_add_test(t2, displs_random);
    suite_add_tcase(s, t2);
    TCase *t3 = tcase_create("task3_exchange");
    tcase_add_checked_fixture(t3, setup, NULL);
    tcase_add_test(t3, exchange_readme_example);
    tcase_add_test(t3, exchange_random);
    tcase_add_test(t3, exchange_empty_and_skewed);
    suite_add_tcase(s, t3);
    TCase *t4 = tcase_create("task4_pack");
    tcase_add_checked_fixture(t4, setup, NULL);
    tcase_add_test(t4, pack_readme_example);
    tcase_add_test(t4, pack_random);
    tcase_add_test(t4, pack_matches_engine_plan);
    suite_add_tcase(s, t4);
    TCase *t5 = tcase_create("task5_dispatch");
    tcase_add_checked_fixture(t5, setup, NULL);
    tcase_add_test(t5, dispatch_readme_example);
    tcase_add_test(t5, dispatch_random);
    tcase_add_test(t5, dispatch_empty_and_skewed);
    suite_add_tcase(s, t5);
    return s;
}

/* The grader (no --lab-task: labs/Makefile runs it), or one rank of a task's job. */
int main(int argc, char **argv) {
    const char *task = lab_rank_task(argc, argv);
    if (!task) return lab_main_mpi(argv[0], "lab 03: all-to-all", tasks, NTASKS);

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    char nonce[LAB_NONCE_SIZE] = "";
    if (world_rank == 0) lab_rank_read_nonce(nonce);
    MPI_Bcast(nonce, LAB_NONCE_SIZE, MPI_CHAR, 0, MPI_COMM_WORLD);
    lab_rank_begin(world_rank, nonce);
    lab_rank_run(alltoall_lab_suite(), task, world_rank == 0);
    MPI_Barrier(MPI_COMM_WORLD); /* the end is reported only once every rank reached it */
    if (world_rank == 0) lab_rank_end();
    MPI_Finalize();
    return 0;
}
