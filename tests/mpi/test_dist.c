/*
 * test_dist.c: the process grid and the collectives of src/parallel/dist.h, on every rank.
 *
 * One binary for both builds: without MPI it runs as one process (world = ep = dp = 1, every
 * collective a copy); under mpirun (tests/mpi/test_dist.sh) every rank runs the same tests in
 * the same order, with the grid read from the environment:
 *   MOE_TEST_TP=N         dist.tp (default 1)
 *   MOE_TEST_EP=N         dist.ep (default 1)
 *   MOE_TEST_TIMEOUT=S    dist timeout in seconds (default 30)
 *   MOE_TEST_COLLECTIVES=mpi|teach  dist.collectives (default teach)
 *   MOE_TEST_HANG_RANK=R  instead of the suite, a run of all-to-alls in which rank R stops
 *                         answering halfway (the others must end the job and name R)
 *   MOE_TEST_KILL_RANK=R  the same, but rank R kills itself (SIGKILL)
 *   MOE_TEST_HANG_SUM=R   a run of sums over the world in which rank R stops answering: the
 *                         ranks other than 0 wait for rank 0, which waits for R; R must be
 *                         the rank named, never 0
 *   MOE_TEST_STOP_AT_START=R  the process the launcher numbers R stops itself (SIGSTOP)
 *                         before dist_init: the others must not hang in MPI_Init
 *
 * Check runs without fork (a forked child cannot use its parent's MPI connection). A test
 * does all its collectives first and asserts afterwards, so a failed check on one rank does
 * not leave the other ranks waiting in a collective it skipped; the failures of every rank
 * are printed with the rank, and summed over the world so every rank exits non-zero.
 */
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "parallel/dist.h"

static Dist g_d;

/* The first failed expectation of the running test, asserted at its end (see above). */
static char g_fail[512];
#define NOTE(cond, ...)                                                                            \
    do {                                                                                           \
        if (!(cond) && g_fail[0] == 0) snprintf(g_fail, sizeof g_fail, __VA_ARGS__);               \
    } while (0)
#define ASSERT_NOTES() ck_assert_msg(g_fail[0] == 0, "rank %d: %s", g_d.rank, g_fail)

static void reset_notes(void) {
    g_fail[0] = 0;
}

/* World rank of member p of this rank's group g, from the table of dist.h (rank = tp_rank +
 * tp (ep_rank + ep (dp_rank + dp pp_rank))), written out here apart from dist_grid.c's. */
static int world_of(DistGroup g, int p) {
    const Dist *d = &g_d;
    const int tp = d->tp, ep = d->ep, S = d->tp * d->ep * d->dp, base = S * d->pp_rank;
    switch (g) {
    case DIST_TP: return base + p + tp * (d->ep_rank + ep * d->dp_rank);
    case DIST_EP: return base + d->tp_rank + tp * (p + ep * d->dp_rank);
    case DIST_DP: return base + p % tp + tp * (d->ep_rank + ep * (p / tp));
    case DIST_DATA: return base + d->tp_rank + tp * p;
    case DIST_STAGE: return base + p;
    case DIST_PP: return d->rank % S + S * p;
    default: return p;
    }
}

static const char *group_name(DistGroup g) {
    static const char *names[DIST_GROUPS] = {"WORLD", "EP", "DP", "TP", "DATA", "STAGE", "PP"};
    return names[g];
}

START_TEST(test_grid) {
    Dist *d = &g_d;
    int W = d->world;
    /* Every rank's (rank, ep_rank, dp_rank) at slot 3 rank: a sum over the world of vectors
     * that are zero elsewhere is a gather, on every rank. */
    double *tab = calloc_check(3 * (size_t)W, sizeof(double));
    tab[3 * d->rank] = d->rank;
    tab[3 * d->rank + 1] = d->ep_rank;
    tab[3 * d->rank + 2] = d->dp_rank;
    dist_allreduce_sum_d(d, DIST_WORLD, tab, 3 * (size_t)W);
    /* The EP row gathered at its member 0: members in ep_rank order, world ranks dp_rank ep + p */
    float me = (float)d->rank;
    float *row = d->ep_rank == 0 ? malloc_check((size_t)d->ep * sizeof(float)) : NULL;
    dist_gather_f(d, &me, 1, row);
    /* The expert data-parallel group: world rank + 1 at the member's slot */
    const int ndp = dist_group_size(d, DIST_DP);
    double *col = calloc_check((size_t)ndp, sizeof(double));
    col[dist_group_rank(d, DIST_DP)] = d->rank + 1;
    dist_allreduce_sum_d(d, DIST_DP, col, (size_t)ndp);

    ck_assert_int_eq(d->world, d->tp * d->dp * d->ep);
    ck_assert_int_ge(d->rank, 0);
    ck_assert_int_lt(d->rank, d->world);
    ck_assert_int_eq(d->tp_rank, d->rank % d->tp);
    ck_assert_int_eq(d->ep_rank, d->rank / d->tp % d->ep);
    ck_assert_int_eq(d->dp_rank, d->rank / (d->tp * d->ep));
    ck_assert_int_eq(dist_group_size(d, DIST_WORLD), d->world);
    ck_assert_int_eq(dist_group_size(d, DIST_EP), d->ep);
    ck_assert_int_eq(dist_group_size(d, DIST_DP), d->tp * d->dp);
    ck_assert_int_eq(dist_group_size(d, DIST_TP), d->tp);
    ck_assert_int_eq(dist_group_size(d, DIST_DATA), d->ep * d->dp);
    for (int g = 0; g < DIST_GROUPS; g++) /* the grid's own table against this test's */
        for (int p = 0; p < dist_group_size(d, (DistGroup)g); p++)
            NOTE(dist_group_world_rank(d, (DistGroup)g, p) == world_of((DistGroup)g, p),
                 "%s member %d: dist_group_world_rank says rank %d, the grid's formula %d",
                 group_name((DistGroup)g), p, dist_group_world_rank(d, (DistGroup)g, p),
                 world_of((DistGroup)g, p));
    ck_assert_int_eq(dist_group_rank(d, DIST_WORLD), d->rank);
    ck_assert_int_eq(dist_group_rank(d, DIST_EP), d->ep_rank);
    ck_assert_int_eq(dist_group_rank(d, DIST_DP), d->tp_rank + d->tp * d->dp_rank);
    ck_assert_int_eq(dist_group_rank(d, DIST_TP), d->tp_rank);
    ck_assert_int_eq(dist_group_rank(d, DIST_DATA), d->ep_rank + d->ep * d->dp_rank);
    ck_assert(d->timeout_s > 0);
    ck_assert_int_eq(dist_available(), MOE_HAVE_MPI);
    for (int r = 0; r < W; r++) {
        NOTE(tab[3 * r] == r && tab[3 * r + 1] == r / d->tp % d->ep &&
                 tab[3 * r + 2] == r / (d->tp * d->ep),
             "rank %d reports (rank %g, ep_rank %g, dp_rank %g), the grid says (%d, %d, %d)", r,
             tab[3 * r], tab[3 * r + 1], tab[3 * r + 2], r, r / d->tp % d->ep, r / (d->tp * d->ep));
    }
    for (int p = 0; row != NULL && p < d->ep; p++)
        NOTE(row[p] == (float)world_of(DIST_EP, p), "EP member %d is world rank %g, want %d", p,
             (double)row[p], world_of(DIST_EP, p));
    for (int i = 0; i < ndp; i++)
        NOTE(col[i] == world_of(DIST_DP, i) + 1, "DP member %d is world rank %g, want %d", i,
             col[i] - 1, world_of(DIST_DP, i));
    free(tab);
    free(row);
    free(col);
    ASSERT_NOTES();
}
END_TEST

/* A bad ep is refused with a message that says how to start the job (no collective runs). */
START_TEST(test_init_rejects_bad_ep) {
    Dist bad;
    char err[256] = "", want[64];
    ck_assert_int_eq(dist_init(&bad, NULL, NULL, (DistAxes){1, 0, 1}, g_d.collectives, 1.0, NULL,
                               err, sizeof err),
                     -1);
    ck_assert_msg(strstr(err, "dist.ep=0") != NULL, "message: %s", err);
    int ep = g_d.world + 1; /* never divides the world */
    ck_assert_int_eq(dist_init(&bad, NULL, NULL, (DistAxes){1, ep, 1}, g_d.collectives, 1.0, NULL,
                               err, sizeof err),
                     -1);
    snprintf(want, sizeof want, "mpirun -np %d", ep);
    ck_assert_msg(strstr(err, want) != NULL, "message '%s' lacks '%s'", err, want);
    snprintf(want, sizeof want, "dist.ep=%d", ep);
    ck_assert_msg(strstr(err, want) != NULL, "message '%s' lacks '%s'", err, want);
}
END_TEST

/* Values exact in float whatever the order of the sum (small integers): the expected sum is
 * exact. Others (1 / k) are rounded, so only the tolerance applies to them, and the checks
 * are that every member holds the same bits and a repeat gives the same bits. */
static float exact_value(int wr, int i) {
    return (float)((wr + 1) * (i % 13) + i % 7);
}
static float rounded_value(int wr, int i) {
    return 1.0f / (float)(wr + 3 + i % 11) + 1e-3f * (float)i;
}

START_TEST(test_allreduce) {
    Dist *d = &g_d;
    enum { n = 1000 };
    float exact[DIST_GROUPS][n], rounded[DIST_GROUPS][n], again[DIST_GROUPS][n], want_rounded[n];
    double dbl[DIST_GROUPS][n];
    double *seen[DIST_GROUPS]; /* per group: every member's rounded result at slot p (P x n) */
    for (int g = 0; g < DIST_GROUPS; g++) {
        int P = dist_group_size(d, (DistGroup)g), me = dist_group_rank(d, (DistGroup)g);
        for (int i = 0; i < n; i++) {
            exact[g][i] = exact_value(d->rank, i);
            rounded[g][i] = again[g][i] = rounded_value(d->rank, i);
            dbl[g][i] = ldexp(d->rank + 1, -30) + i;
        }
        dist_allreduce_sum_f(d, (DistGroup)g, exact[g], n);
        dist_allreduce_sum_f(d, (DistGroup)g, rounded[g], n);
        dist_allreduce_sum_f(d, (DistGroup)g, again[g], n);
        dist_allreduce_sum_d(d, (DistGroup)g, dbl[g], n);
        /* x + 0 is exact: summing vectors that are zero outside one slot gathers them */
        seen[g] = calloc_check((size_t)P * n, sizeof(double));
        for (int i = 0; i < n; i++) seen[g][(size_t)me * n + i] = rounded[g][i];
        dist_allreduce_sum_d(d, (DistGroup)g, seen[g], (size_t)P * n);
    }
    /* A large array (over a million floats, more than one message at a time) over the world */
    size_t big = ((size_t)1 << 20) + 3;
    float *x = malloc_check(big * sizeof(float));
    for (size_t i = 0; i < big; i++) x[i] = exact_value(d->rank, (int)(i % 100000));
    dist_allreduce_sum_f(d, DIST_WORLD, x, big);

    for (int g = 0; g < DIST_GROUPS; g++) {
        int P = dist_group_size(d, (DistGroup)g);
        for (int i = 0; i < n; i++) {
            float want = 0.0f;
            double want_d = 0.0, want_r = 0.0;
            for (int p = 0; p < P; p++) {
                want += exact_value(world_of((DistGroup)g, p), i);
                want_d += ldexp(world_of((DistGroup)g, p) + 1, -30) + i;
                want_r += rounded_value(world_of((DistGroup)g, p), i);
            }
            want_rounded[i] = (float)want_r;
            NOTE(exact[g][i] == want, "%s sum [%d] = %g, want %g exactly", group_name(g), i,
                 (double)exact[g][i], (double)want);
            NOTE(dbl[g][i] == want_d, "%s double sum [%d] = %.17g, want %.17g exactly",
                 group_name(g), i, dbl[g][i], want_d);
            for (int p = 0; p < P; p++) {
                float other = (float)seen[g][(size_t)p * n + i];
                NOTE(memcmp(&other, &rounded[g][i], sizeof(float)) == 0,
                     "%s sum [%d]: member %d holds %.9g, this member %.9g (not the same bits)",
                     group_name(g), i, p, (double)other, (double)rounded[g][i]);
            }
        }
        NOTE(memcmp(again[g], rounded[g], sizeof rounded[g]) == 0,
             "%s: a repeated sum of the same values gave other bits", group_name(g));
        free(seen[g]);
        ASSERT_NOTES();
        CLOSE_ARRAYS(rounded[g], want_rounded, n, group_name(g));
    }
    for (size_t i = 0; i < big; i++) {
        float want = 0.0f;
        for (int r = 0; r < d->world; r++) want += exact_value(r, (int)(i % 100000));
        NOTE(x[i] == want, "large sum [%zu] = %g, want %g", i, (double)x[i], (double)want);
    }
    free(x);
    ASSERT_NOTES();
}
END_TEST

/* (source world rank, destination member, index) in one exact number */
static int code(int src, int dst, int k) {
    return src * 10000 + dst * 100 + k;
}

START_TEST(test_alltoall_i) {
    Dist *d = &g_d;
    int P = d->ep, me = d->ep_rank, count = 3;
    int *send = malloc_check((size_t)P * count * sizeof(int));
    int *recv = malloc_check((size_t)P * count * sizeof(int));
    for (int p = 0; p < P; p++)
        for (int k = 0; k < count; k++) {
            send[p * count + k] = code(d->rank, p, k);
            recv[p * count + k] = -1;
        }
    DistStats before = d->stats;
    dist_alltoall_i(d, send, recv, count);
    DistStats after = d->stats;
    for (int p = 0; p < P; p++)
        for (int k = 0; k < count; k++)
            NOTE(recv[p * count + k] == code(world_of(DIST_EP, p), me, k),
                 "recv[%d] from member %d = %d, want %d", p * count + k, p, recv[p * count + k],
                 code(world_of(DIST_EP, p), me, k));
    /* counts included in the payload: 3 ints to and from each other member */
    uint64_t bytes = (uint64_t)(P - 1) * count * sizeof(int);
    ck_assert_uint_eq(after.bytes_sent - before.bytes_sent, bytes);
    ck_assert_uint_eq(after.bytes_recv - before.bytes_recv, bytes);
    ck_assert_uint_eq(after.calls - before.calls, 1);
    ck_assert(after.seconds >= before.seconds);
    free(send);
    free(recv);
    ASSERT_NOTES();
}
END_TEST

/* Floats from EP member src to member dst: zero for some pairs, and the last member gets
 * nothing from anyone (when there are two or more), as an expert nobody routed to. */
static int pair_count(int src, int dst, int P, int dp_rank) {
    if (P > 1 && dst == P - 1) return 0;
    return (src + 2 * dst + 1 + dp_rank) % 4;
}

START_TEST(test_alltoallv_f) {
    Dist *d = &g_d;
    int P = d->ep, me = d->ep_rank;
    int *sc = malloc_check((size_t)P * sizeof(int)), *sd = malloc_check((size_t)P * sizeof(int));
    int *rc = malloc_check((size_t)P * sizeof(int)), *rd = malloc_check((size_t)P * sizeof(int));
    /* The receive counts travel first, as in a dispatch: the all-to-all of counts. */
    for (int p = 0; p < P; p++) sc[p] = pair_count(me, p, P, d->dp_rank);
    dist_alltoall_i(d, sc, rc, 1);
    /* Gaps between the blocks (1 float on the send side, 2 on the receive side) check that
     * the displacements are honoured and nothing is written outside the blocks. */
    int ns = 0, nr = 0;
    for (int p = 0; p < P; p++) {
        sd[p] = ns + 1;
        ns += 1 + sc[p];
        rd[p] = nr + 2;
        nr += 2 + rc[p];
    }
    float *send = malloc_check((size_t)ns * sizeof(float));
    float *recv = malloc_check((size_t)nr * sizeof(float));
    for (int i = 0; i < ns; i++) send[i] = -7.0f;
    for (int i = 0; i < nr; i++) recv[i] = -1.0f;
    for (int p = 0; p < P; p++)
        for (int k = 0; k < sc[p]; k++) send[sd[p] + k] = (float)code(d->rank, p, k);
    DistStats before = d->stats;
    dist_alltoallv_f(d, send, sc, sd, recv, rc, rd);
    DistStats after = d->stats;

    uint64_t want_sent = 0, want_recv = 0;
    for (int p = 0; p < P; p++) {
        NOTE(rc[p] == pair_count(p, me, P, d->dp_rank), "count from member %d = %d, want %d", p,
             rc[p], pair_count(p, me, P, d->dp_rank));
        for (int k = 0; k < rc[p]; k++)
            NOTE(recv[rd[p] + k] == (float)code(world_of(DIST_EP, p), me, k),
                 "from member %d element %d = %g, want %d", p, k, (double)recv[rd[p] + k],
                 code(world_of(DIST_EP, p), me, k));
        NOTE(recv[rd[p] - 1] == -1.0f && recv[rd[p] - 2] == -1.0f,
             "the gap before member %d's block was written", p);
        if (p != me) {
            want_sent += (uint64_t)sc[p] * sizeof(float);
            want_recv += (uint64_t)rc[p] * sizeof(float);
        }
    }
    if (P > 1 && me == P - 1)
        for (int p = 0; p < P; p++) NOTE(rc[p] == 0, "the last member got %d from %d", rc[p], p);
    ASSERT_NOTES();
    /* the copy to itself is not communication */
    ck_assert_uint_eq(after.bytes_sent - before.bytes_sent, want_sent);
    ck_assert_uint_eq(after.bytes_recv - before.bytes_recv, want_recv);
    ck_assert_uint_eq(after.calls - before.calls, 1);
    if (d->world == 1) ck_assert_uint_eq(after.bytes_sent + after.bytes_recv, 0); /* one process */
    free(sc);
    free(sd);
    free(rc);
    free(rd);
    free(send);
    free(recv);
}
END_TEST

/* The two halves of a sum over every group, in place: after a reduce-scatter each member's
 * range (dist_shard_range) holds the exact sum, the same bits as the all-reduce of the same
 * values over the same group (teach: one reduction order; mpi: small integers are exact in any
 * order); an all-gather of those ranges makes the whole sum on every member. Sizes: not a
 * multiple of the group (uneven ranges), smaller than it (empty ranges), and over one message
 * (the teaching engine's chunks). Bytes: the engine's cost model for each call. */
START_TEST(test_reduce_scatter_allgather) {
    Dist *d = &g_d;
    const size_t sizes[3] = {1001, 3, ((size_t)1 << 20) + 5};
    for (int g = 0; g < DIST_GROUPS; g++)
        for (int k = 0; k < 3; k++) {
            const DistGroup grp = (DistGroup)g;
            const size_t n = sizes[k];
            const int P = dist_group_size(d, grp), me = dist_group_rank(d, grp);
            float *x = malloc_check(n * sizeof(float)), *all = malloc_check(n * sizeof(float));
            for (size_t i = 0; i < n; i++) x[i] = all[i] = exact_value(d->rank, (int)(i % 9973));
            dist_allreduce_sum_f(d, grp, all, n);
            const DistStats before = d->stats;
            dist_reduce_scatter_f(d, grp, x, n);
            const DistStats mid = d->stats;
            size_t lo, hi;
            dist_shard_range(n, P, me, &lo, &hi);
            int same = 1;
            for (size_t i = lo; i < hi; i++) same &= memcmp(&x[i], &all[i], sizeof(float)) == 0;
            NOTE(same, "%s reduce-scatter of %zu: member %d's range [%zu, %zu) is not the sum",
                 group_name(grp), n, me, lo, hi);
            for (size_t i = 0; i < n; i++)
                if (i < lo || i >= hi) x[i] = -1.0f; /* another member's: must come back */
            dist_allgather_f(d, grp, x, n);
            NOTE(memcmp(x, all, n * sizeof(float)) == 0,
                 "%s all-gather of %zu: the whole sum is not on member %d", group_name(grp), n, me);
            /* bytes: a ring's (P - 1) / P n each way with MPI's; teach's through member 0 */
            uint64_t want_rs_sent, want_rs_recv;
            size_t l0, h0;
            dist_shard_range(n, P, 0, &l0, &h0);
            if (d->collectives != DIST_COLL_TEACH) {
                want_rs_sent = want_rs_recv =
                    P > 1 ? (uint64_t)((double)(P - 1) / P * (double)n * 4 + 0.5) : 0;
            } else if (P == 1) {
                want_rs_sent = want_rs_recv = 0;
            } else if (me == 0) {
                want_rs_recv = (uint64_t)(P - 1) * n * 4;
                want_rs_sent = (uint64_t)(n - (h0 - l0)) * 4;
            } else {
                want_rs_sent = (uint64_t)n * 4;
                want_rs_recv = (uint64_t)(hi - lo) * 4;
            }
            NOTE(mid.bytes_sent - before.bytes_sent == want_rs_sent &&
                     mid.bytes_recv - before.bytes_recv == want_rs_recv,
                 "%s reduce-scatter of %zu floats: sent %llu, received %llu bytes; want %llu, "
                 "%llu",
                 group_name(grp), n, (unsigned long long)(mid.bytes_sent - before.bytes_sent),
                 (unsigned long long)(mid.bytes_recv - before.bytes_recv),
                 (unsigned long long)want_rs_sent, (unsigned long long)want_rs_recv);
            /* teach's all-gather is the reduce-scatter's messages turned round */
            const uint64_t ag_sent = d->stats.bytes_sent - mid.bytes_sent;
            const uint64_t ag_recv = d->stats.bytes_recv - mid.bytes_recv;
            const int turned = d->collectives == DIST_COLL_TEACH && P > 1;
            NOTE(!turned || me != 0 ||
                     (ag_sent == (uint64_t)(P - 1) * n * 4 &&
                      ag_recv == (uint64_t)(n - (h0 - l0)) * 4),
                 "%s teach all-gather at member 0: sent %llu, received %llu bytes", group_name(grp),
                 (unsigned long long)ag_sent, (unsigned long long)ag_recv);
            NOTE(!turned || me == 0 ||
                     (ag_sent == (uint64_t)(hi - lo) * 4 && ag_recv == (uint64_t)n * 4),
                 "%s teach all-gather at member %d: sent %llu, received %llu bytes",
                 group_name(grp), me, (unsigned long long)ag_sent, (unsigned long long)ag_recv);
            NOTE(turned || (ag_sent == want_rs_sent && ag_recv == want_rs_recv),
                 "%s all-gather of %zu floats: sent %llu, received %llu bytes, want %llu each",
                 group_name(grp), n, (unsigned long long)ag_sent, (unsigned long long)ag_recv,
                 (unsigned long long)want_rs_sent);
            free(x);
            free(all);
        }
    ASSERT_NOTES();
}
END_TEST

START_TEST(test_broadcast) {
    Dist *d = &g_d;
    enum { n = 257 };
    float x[3][n];
    for (int g = 0; g < 3; g++) {
        for (int i = 0; i < n; i++) x[g][i] = (float)(d->rank * 1000 + i) + 0.5f;
        dist_broadcast_f(d, (DistGroup)g, x[g], n);
    }
    for (int g = 0; g < 3; g++)
        for (int i = 0; i < n; i++) {
            float want = (float)(world_of((DistGroup)g, 0) * 1000 + i) + 0.5f;
            NOTE(x[g][i] == want, "%s broadcast [%d] = %g, want member 0's %g", group_name(g), i,
                 (double)x[g][i], (double)want);
        }
    ASSERT_NOTES();
}
END_TEST

START_TEST(test_gather) {
    Dist *d = &g_d;
    enum { n = 5 };
    float x[n];
    for (int i = 0; i < n; i++) x[i] = (float)(d->rank * 100 + i);
    float *out = NULL; /* allowed off member 0 */
    if (d->ep_rank == 0) {
        out = malloc_check((size_t)d->ep * n * sizeof(float));
        for (int i = 0; i < d->ep * n; i++) out[i] = -1.0f;
    }
    DistStats before = d->stats;
    dist_gather_f(d, x, n, out);
    DistStats after = d->stats;
    for (int p = 0; out != NULL && p < d->ep; p++)
        for (int i = 0; i < n; i++)
            NOTE(out[p * n + i] == (float)(world_of(DIST_EP, p) * 100 + i),
                 "gathered [%d] from member %d = %g, want %d", i, p, (double)out[p * n + i],
                 world_of(DIST_EP, p) * 100 + i);
    free(out);
    ASSERT_NOTES();
    uint64_t bytes = (uint64_t)(d->ep - 1) * n * sizeof(float);
    ck_assert_uint_eq(after.bytes_recv - before.bytes_recv, d->ep_rank == 0 ? bytes : 0);
    ck_assert_uint_eq(after.bytes_sent - before.bytes_sent,
                      d->ep_rank == 0 ? 0 : n * sizeof(float));
}
END_TEST

/* Rank 0 arrives 0.3 s late: nobody leaves the barrier before it comes. */
START_TEST(test_barrier) {
    Dist *d = &g_d;
    dist_barrier(d); /* everyone here first, so the lateness below is rank 0's alone */
    DistStats before = d->stats;
    double t0 = now_seconds();
    if (d->rank == 0) {
        struct timespec late = {0, 300000000};
        nanosleep(&late, NULL);
    }
    dist_barrier(d);
    double waited = now_seconds() - t0;
    DistStats after = d->stats;
    ck_assert_uint_eq(after.calls - before.calls, 1);
    ck_assert_uint_eq(after.bytes_sent + after.bytes_recv, before.bytes_sent + before.bytes_recv);
    if (d->rank != 0) {
        ck_assert_msg(waited > 0.1,
                      "rank %d left the barrier %.3f s after entering it, before "
                      "rank 0 arrived",
                      d->rank, waited);
        ck_assert(after.seconds - before.seconds > 0.1);
    }
}
END_TEST

/* DIST_MAX_IN_FLIGHT collectives at once: sums over the three groups (one of them larger than
 * a message, so it runs chunk by chunk inside dist_wait), a double sum and an exchange, all
 * started before any is waited, then waited in reverse order. Each gives the same bits as the
 * same collective run alone, and the calls and bytes add up as if they had. */
START_TEST(test_in_flight) {
    Dist *d = &g_d;
    enum { n = 777, F = DIST_MAX_IN_FLIGHT - 2 };
    const size_t big = ((size_t)1 << 20) + 5;
    float *x[F], *alone[F];
    size_t len[F];
    for (int k = 0; k < F; k++) {
        len[k] = k == 0 ? big : (size_t)n + (size_t)k;
        x[k] = malloc_check(len[k] * sizeof(float));
        alone[k] = malloc_check(len[k] * sizeof(float));
        for (size_t i = 0; i < len[k]; i++)
            x[k][i] = alone[k][i] = rounded_value(d->rank, (int)((i + (size_t)k) % 5000));
    }
    double dx[3] = {d->rank + 0.25, 1.0, -2.0 * d->rank}, dalone[3];
    memcpy(dalone, dx, sizeof dx);
    /* an exchange: k + 1 floats to member k */
    int P = d->ep, me = d->ep_rank, ns = 0, nr = 0;
    int *sc = malloc_check((size_t)P * sizeof(int)), *sd = malloc_check((size_t)P * sizeof(int));
    int *rc = malloc_check((size_t)P * sizeof(int)), *rd = malloc_check((size_t)P * sizeof(int));
    for (int p = 0; p < P; p++) {
        sc[p] = p + 1;
        rc[p] = me + 1;
        sd[p] = ns;
        rd[p] = nr;
        ns += sc[p];
        nr += rc[p];
    }
    float *send = malloc_check((size_t)ns * sizeof(float));
    float *recv = malloc_check((size_t)nr * sizeof(float));
    for (int p = 0; p < P; p++)
        for (int k = 0; k < sc[p]; k++) send[sd[p] + k] = (float)code(d->rank, p, k);

    /* the reference: each alone, blocking */
    const DistGroup group[F] = {DIST_WORLD, DIST_EP, DIST_DP, DIST_WORLD, DIST_EP, DIST_DP};
    for (int k = 0; k < F; k++) dist_allreduce_sum_f(d, group[k], alone[k], len[k]);
    dist_allreduce_sum_d(d, DIST_WORLD, dalone, 3);
    DistStats before = d->stats;
    DistOp *op[DIST_MAX_IN_FLIGHT];
    for (int k = 0; k < F; k++) op[k] = dist_allreduce_sum_f_start(d, group[k], x[k], len[k]);
    op[F] = dist_alltoallv_f_start(d, send, sc, sd, recv, rc, rd);
    op[F + 1] = dist_allreduce_sum_d_start(d, DIST_WORLD, dx, 3);
    for (int k = DIST_MAX_IN_FLIGHT - 1; k >= 0; k--) dist_wait(d, op[k]);
    DistStats after = d->stats;

    for (int k = 0; k < F; k++)
        NOTE(memcmp(x[k], alone[k], len[k] * sizeof(float)) == 0,
             "sum %d (%s, %zu floats) in flight with others differs from the same sum alone", k,
             group_name(group[k]), len[k]);
    NOTE(memcmp(dx, dalone, sizeof dx) == 0, "the double sum in flight differs from alone");
    for (int p = 0; p < P; p++)
        for (int k = 0; k < rc[p]; k++)
            NOTE(recv[rd[p] + k] == (float)code(world_of(DIST_EP, p), me, k),
                 "exchange: from member %d element %d = %g, want %d", p, k,
                 (double)recv[rd[p] + k], code(world_of(DIST_EP, p), me, k));
    NOTE(after.calls - before.calls == DIST_MAX_IN_FLIGHT, "%llu calls counted, want %d",
         (unsigned long long)(after.calls - before.calls), DIST_MAX_IN_FLIGHT);
    ASSERT_NOTES();
    /* and the slots are free again: a full set once more */
    for (int k = 0; k < DIST_MAX_IN_FLIGHT; k++)
        op[k] = dist_allreduce_sum_d_start(d, DIST_EP, dx, 3);
    for (int k = 0; k < DIST_MAX_IN_FLIGHT; k++) dist_wait(d, op[k]);
    for (int k = 0; k < F; k++) {
        free(x[k]);
        free(alone[k]);
    }
    free(sc);
    free(sd);
    free(rc);
    free(rd);
    free(send);
    free(recv);
}
END_TEST

static Suite *dist_suite(void) {
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("grid_and_collectives");
    tcase_add_checked_fixture(tc, reset_notes, NULL);
    tcase_add_test(tc, test_grid);
    tcase_add_test(tc, test_init_rejects_bad_ep);
    tcase_add_test(tc, test_allreduce);
    tcase_add_test(tc, test_alltoall_i);
    tcase_add_test(tc, test_alltoallv_f);
    tcase_add_test(tc, test_reduce_scatter_allgather);
    tcase_add_test(tc, test_broadcast);
    tcase_add_test(tc, test_gather);
    tcase_add_test(tc, test_barrier);
    tcase_add_test(tc, test_in_flight);
    suite_add_tcase(s, tc);
    return s;
}

/* ---- the failure drills --------------------------------------------------------------------
 * Five rounds of a dispatch (all-to-all of counts, then of floats); in round 2 the chosen
 * rank stops answering or dies between the two. The job must end with a non-zero status;
 * finishing the rounds means nobody noticed, and the process then exits 0 so the driver
 * reports the failure. */
static int run_drill(Dist *d, int hang_rank, int kill_rank) {
    int P = d->ep;
    int *sc = malloc_check((size_t)P * sizeof(int)), *sd = malloc_check((size_t)P * sizeof(int));
    int *rc = malloc_check((size_t)P * sizeof(int)), *rd = malloc_check((size_t)P * sizeof(int));
    float *send = malloc_check((size_t)P * 8 * sizeof(float));
    float *recv = malloc_check((size_t)P * 8 * sizeof(float));
    for (int i = 0; i < P * 8; i++) send[i] = (float)i;
    for (int round = 0; round < 5; round++) {
        for (int p = 0; p < P; p++) {
            sc[p] = 1 + (round + p) % 8;
            sd[p] = rd[p] = 8 * p;
        }
        dist_alltoall_i(d, sc, rc, 1);
        if (round == 2 && d->rank == hang_rank) {
            fprintf(stderr, "test_dist: rank %d stops answering (MOE_TEST_HANG_RANK)\n", d->rank);
            for (;;) sleep(1000);
        }
        if (round == 2 && d->rank == kill_rank) {
            fprintf(stderr, "test_dist: rank %d kills itself (MOE_TEST_KILL_RANK)\n", d->rank);
            raise(SIGKILL);
        }
        dist_alltoallv_f(d, send, sc, sd, recv, rc, rd);
    }
    /* The ranks of the other exchange groups finish their rounds and wait at the barrier, on a
     * clock of their own: they start it half a deadline late, so that the stopped rank's own
     * group, waiting since round 2, is the first to report (on a busy machine the two clocks
     * could otherwise run out together, and either message end the job) */
    if (hang_rank >= 0 && d->rank / P != hang_rank / P) usleep((useconds_t)(d->timeout_s * 5e5));
    dist_barrier(d);
    if (d->rank == 0)
        fprintf(stderr, "test_dist: the drill finished: the stopped rank was not noticed\n");
    free(sc);
    free(sd);
    free(rc);
    free(rd);
    free(send);
    free(recv);
    dist_finalize(d);
    return 0;
}

/* Sums over the world, in round 2 of which hang_rank stops answering (the same verdict as
 * run_drill: finishing means nobody noticed). */
static int run_sum_drill(Dist *d, int hang_rank) {
    double x[4] = {1, 2, 3, 4};
    for (int round = 0; round < 5; round++) {
        if (round == 2 && d->rank == hang_rank) {
            fprintf(stderr, "test_dist: rank %d stops answering (MOE_TEST_HANG_SUM)\n", d->rank);
            for (;;) sleep(1000);
        }
        dist_allreduce_sum_d(d, DIST_WORLD, x, 4);
    }
    dist_barrier(d);
    if (d->rank == 0)
        fprintf(stderr, "test_dist: the sum drill finished: the stopped rank was not noticed\n");
    dist_finalize(d);
    return 0;
}

static double env_number(const char *name, double fallback) {
    const char *s = getenv(name);
    return s != NULL && *s != 0 ? atof(s) : fallback;
}

int main(int argc, char **argv) {
    int tp = (int)env_number("MOE_TEST_TP", 1), ep = (int)env_number("MOE_TEST_EP", 1);
    char err[256];
    int stop_at_start = (int)env_number("MOE_TEST_STOP_AT_START", -1);
    if (stop_at_start >= 0 && (int)env_number("OMPI_COMM_WORLD_RANK", -1) == stop_at_start) {
        fprintf(stderr, "test_dist: rank %d stops before MPI_Init (MOE_TEST_STOP_AT_START)\n",
                stop_at_start);
        raise(SIGSTOP);
    }
    const char *coll = getenv("MOE_TEST_COLLECTIVES");
    const int collectives = coll && strcmp(coll, "mpi") == 0 ? DIST_COLL_MPI : DIST_COLL_TEACH;
    if (dist_init(&g_d, &argc, &argv, (DistAxes){tp, ep, 1}, collectives,
                  env_number("MOE_TEST_TIMEOUT", 30), NULL, err, sizeof err)) {
        fprintf(stderr, "test_dist: %s\n", err);
        return 2;
    }
    int hang = (int)env_number("MOE_TEST_HANG_RANK", -1);
    int kill_rank = (int)env_number("MOE_TEST_KILL_RANK", -1);
    if (hang >= 0 || kill_rank >= 0) return run_drill(&g_d, hang, kill_rank);
    int hang_sum = (int)env_number("MOE_TEST_HANG_SUM", -1);
    if (hang_sum >= 0) return run_sum_drill(&g_d, hang_sum);

    SRunner *sr = srunner_create(dist_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_SILENT);
    int ran = srunner_ntests_run(sr), failed = srunner_ntests_failed(sr);
    TestResult **res = srunner_failures(sr);
    for (int i = 0; i < failed; i++)
        fprintf(stderr, "test_dist: rank %d: %s:%d: %s: %s\n", g_d.rank, tr_lfile(res[i]),
                tr_lno(res[i]), tr_tcname(res[i]), tr_msg(res[i]));
    free(res);
    srunner_free(sr);
    double total = failed; /* every rank learns whether any failed, and exits the same way */
    dist_allreduce_sum_d(&g_d, DIST_WORLD, &total, 1);
    if (g_d.rank == 0)
        printf("test_dist: %d tests on %d process(es), tp %d x ep %d x dp %d, %s collectives: %s "
               "(%g failures over all ranks)\n",
               ran, g_d.world, g_d.tp, g_d.ep, g_d.dp,
               collectives == DIST_COLL_MPI ? "MPI's" : "teach",
               total == 0 ? "all passed" : "FAILED", total);
    dist_finalize(&g_d);
    return total == 0 ? 0 : 1;
}
