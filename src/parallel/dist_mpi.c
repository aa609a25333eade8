/*
 * dist_mpi.c: the process grid and its collectives over MPI (the MOE_HAVE_MPI=1 build): this
 * file has the grid and the start and end of a job; the requests and their wait loop are in
 * dist_mpi_core.c, the collectives built on them in dist_mpi_ops.c (dist.collectives=teach)
 * and dist_mpi_lib.c (=mpi, MPI's own), and what they share in dist_mpi.h.
 *
 * The teaching collectives are made of point-to-point messages (MPI_Isend / MPI_Irecv) and one
 * wait loop, instead of MPI_Allreduce or MPI_Alltoallv, for three reasons:
 *   - no silent hangs: the loop has a deadline (timeout_s without progress) and knows, request
 *     by request, which peer has not answered, so the job ends with a message naming it
 *     rather than waiting forever inside the MPI library;
 *   - passive waiting: the loop sleeps 100 us between polls, so ranks oversubscribed on a few
 *     cores (tests, laptops) hand their core to the rank that has work instead of spinning;
 *   - a reduction order we choose: sums are taken at member 0 of the group in member order
 *     ((x_0 + x_1) + x_2) + ..., so the result depends on the group size only, never on the
 *     order messages arrive in, and runs repeat bit for bit.
 * The patterns are linear (member 0 talks to P - 1 peers): right for the handful of ranks a
 * lesson runs; MPI's own collectives (dist_mpi_lib.c) bring the ring and the tree, and keep
 * the deadline and the passive waiting, since the same loop tests their requests.
 *
 * Communicators: a duplicate of MPI_COMM_WORLD (our tags never meet another library's) and a
 * split of it for each group of the grid (dist.h), keyed by the member's index in the group
 * (dist_grid.c). Each collective has its
 * own tag, and collectives in flight at once have distinct tags (from their start order):
 * ranks that call collectives in different orders (a bug) never match each other's messages;
 * they time out and say so.
 *
 * Blocking MPI calls remain only at the edges: MPI_Init, the two MPI_Comm_split at start
 * (bounded by a timer, startup_watch) and MPI_Finalize (preceded by a timed barrier, so a peer
 * lost at the end is named too).
 */
#if MOE_HAVE_MPI
#include "parallel/dist_mpi.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

/* The MPI return codes of the start and end, checked as every collective's are (dm_check). */
static void mpi_check(const Dist *d, int rc, const char *op) {
    dm_check(d, rc, op);
}

int dist_available(void) {
    return 1;
}

/* ---- start and end ----------------------------------------------------------------------- */

/* MPI_Init and the communicator splits block until every process of the job has reached
 * them, with no timeout of their own: a process that never starts, or stops on the way, would
 * hang the others forever. A timer (SIGALRM) bounds that start: when it fires, the process
 * says so on stderr, with the only rank it can know then (the launcher's environment), and
 * exits non-zero, which makes mpirun end the whole job. The handler uses write() and _exit()
 * only, the calls that are safe inside a signal handler. */
static char startup_msg[400];
static size_t startup_len;
static struct sigaction startup_old;

static void startup_expired(int sig) {
    (void)sig;
    ssize_t w = write(STDERR_FILENO, startup_msg, startup_len);
    (void)w;
    _exit(1);
}

static void startup_watch(double timeout_s) {
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank) rank = getenv("PMIX_RANK");
    if (!rank) rank = getenv("PMI_RANK");
    int n = snprintf(startup_msg, sizeof startup_msg,
                     "moe: rank %s: the start of the job (MPI_Init, the process grid) did not "
                     "finish within %.0f s: a process of the job did not start or has stopped; "
                     "ending the job (dist timeout %.0f s)\n",
                     rank ? rank : "?", timeout_s, timeout_s);
    startup_len = n > 0 && (size_t)n < sizeof startup_msg ? (size_t)n : 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = startup_expired;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &startup_old);
    struct itimerval t = {
        {0, 0}, {(time_t)timeout_s, (suseconds_t)((timeout_s - (time_t)timeout_s) * 1e6)}};
    if (t.it_value.tv_sec == 0 && t.it_value.tv_usec == 0) t.it_value.tv_usec = 1;
    setitimer(ITIMER_REAL, &t, NULL);
}

static void startup_done(void) {
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &startup_old, NULL);
}

/* ---- the same settings on every rank ------------------------------------------------------ */

/* A settings text cut into its lines "key = value": key[i] and val[i] point into the text,
 * which is changed in place. Lines without " = " are skipped. */
typedef struct {
    int n;
    char **key, **val; /* n each */
} Settings;

static void settings_parse(Settings *s, char *text) {
    int cap = 1;
    for (const char *p = text; *p; p++) cap += *p == '\n';
    s->key = malloc_check((size_t)cap * sizeof *s->key);
    s->val = malloc_check((size_t)cap * sizeof *s->val);
    s->n = 0;
    for (char *line = text; line && *line;) {
        char *next = strchr(line, '\n');
        if (next) *next++ = '\0';
        char *eq = strstr(line, " = ");
        if (eq) {
            *eq = '\0';
            s->key[s->n] = line;
            s->val[s->n++] = eq + 3;
        }
        line = next;
    }
}

/* key's value in s, or NULL; the line at hint is tried first (every rank writes the same keys
 * in the same order, so a lookup is one comparison unless the binaries differ) */
static const char *settings_value(const Settings *s, const char *key, int hint) {
    if (hint < s->n && strcmp(s->key[hint], key) == 0) return s->val[hint];
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->key[i], key) == 0) return s->val[i];
    return NULL;
}

static int same_value(const char *a, const char *b) {
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

/* Append "KEY is V on ranks 0, 2 and W on rank 1" for a key whose values (val[r] of rank r,
 * NULL when a rank lacks the key) differ; the ranks with the same value are listed together. */
static void describe_key(char *err, int errlen, size_t *used, const char *key, const char **val,
                         int world) {
    size_t u = *used;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (u < (size_t)errlen) u += (size_t)snprintf(err + u, (size_t)errlen - u, __VA_ARGS__);   \
    } while (0)
    PUT("%s%s is ", u > 0 ? "; " : "", key);
    for (int r = 0, groups = 0; r < world; r++) {
        int first = 1, count = 0;
        for (int q = 0; q < r && first; q++) first = !same_value(val[q], val[r]);
        if (!first) continue;
        for (int q = r; q < world; q++) count += same_value(val[q], val[r]);
        PUT("%s%s on rank%s", groups++ ? " and " : "", val[r] ? val[r] : "(no such setting)",
            count > 1 ? "s" : "");
        for (int q = r, n = 0; q < world; q++)
            if (same_value(val[q], val[r])) PUT("%s %d", n++ ? "," : "", q);
    }
#undef PUT
    *used = u;
}

/* Rank 0's message for texts (world of them, rank order) that are not all the same: each key
 * that differs, rank 0's keys first, then any that only other ranks have (another build). */
static void describe_differences(char **texts, int world, char *err, int errlen) {
    Settings *s = malloc_check((size_t)world * sizeof *s);
    const char **val = malloc_check((size_t)world * sizeof *val);
    for (int r = 0; r < world; r++) settings_parse(&s[r], texts[r]);
    size_t used = 0;
    for (int r = 0; r < world && used + 1 < (size_t)errlen; r++)
        for (int i = 0; i < s[r].n && used + 1 < (size_t)errlen; i++) {
            const char *key = s[r].key[i];
            int seen = 0; /* described already, from an earlier rank's keys */
            for (int q = 0; q < r && !seen; q++) seen = settings_value(&s[q], key, i) != NULL;
            if (seen) continue;
            int differ = 0;
            for (int q = 0; q < world; q++) {
                val[q] = settings_value(&s[q], key, i);
                differ |= !same_value(val[q], val[0]);
            }
            if (differ) describe_key(err, errlen, &used, key, val, world);
        }
    if (used + 1 >= (size_t)errlen && errlen > 4) strcpy(err + errlen - 4, "...");
    for (int r = 0; r < world; r++) {
        free(s[r].key);
        free(s[r].val);
    }
    free(s);
    free(val);
}

/* 1 when the ranks' settings differ (rank 0 has printed which), 0 when all are rank 0's.
 * Blocking collectives on the world, bounded like MPI_Init by startup_watch. A text is a few
 * KiB, so rank 0's goes whole to every rank and each compares it exactly; the texts travel to
 * rank 0 only when they differ, for the message. Rank 0 prints it here, before the barrier
 * that lets the others leave: the first process to exit non-zero makes mpirun end the job,
 * which could otherwise cut rank 0 off before it speaks. */
static int settings_differ(const Dist *d, int world, const char *mine) {
    const int rank = d->rank;
    int len = (int)strlen(mine) + 1, root_len = len;
    mpi_check(d, MPI_Bcast(&root_len, 1, MPI_INT, 0, MPI_COMM_WORLD), "comparison of settings");
    char *root = malloc_check((size_t)root_len);
    if (rank == 0) memcpy(root, mine, (size_t)len);
    mpi_check(d, MPI_Bcast(root, root_len, MPI_CHAR, 0, MPI_COMM_WORLD), "comparison of settings");
    int differ = strcmp(root, mine) != 0, any = 0;
    free(root);
    mpi_check(d, MPI_Allreduce(&differ, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD),
              "comparison of settings");
    if (!any) return 0;
    int *lens = NULL, *displs = NULL;
    char *all = NULL;
    if (rank == 0) {
        lens = malloc_check((size_t)world * sizeof *lens);
        displs = malloc_check((size_t)world * sizeof *displs);
    }
    mpi_check(d, MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD),
              "comparison of settings");
    if (rank == 0) {
        size_t total = 0;
        for (int r = 0; r < world; r++) {
            if (total + (size_t)lens[r] > (size_t)INT_MAX)
                moe_fatal("dist_init: the settings of %d ranks exceed 2 GiB", world);
            displs[r] = (int)total;
            total += (size_t)lens[r];
        }
        all = malloc_check(total);
    }
    mpi_check(d, MPI_Gatherv(mine, len, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, MPI_COMM_WORLD),
              "comparison of settings");
    if (rank == 0) {
        char **texts = malloc_check((size_t)world * sizeof *texts), what[2048];
        for (int r = 0; r < world; r++) texts[r] = all + displs[r];
        describe_differences(texts, world, what, (int)sizeof what);
        fprintf(stderr,
                "error: the %d processes of the job were started with different settings: %s; "
                "every process must train the same model the same way: start them all with "
                "the same --config, --set and options\n",
                world, what);
        fflush(stderr);
        free(texts);
    }
    free(lens);
    free(displs);
    free(all);
    mpi_check(d, MPI_Barrier(MPI_COMM_WORLD), "comparison of settings");
    return 1;
}

/* comms_create: the job's communicators, a duplicate of MPI_COMM_WORLD and a split of it for
 * each group of the grid (colour: which copy of the group, key: the member's index), each
 * checked against the grid d describes */
static void comms_create(const Dist *d, DistMpi *m) {
    mpi_check(d, MPI_Comm_dup(MPI_COMM_WORLD, &m->comm[DIST_WORLD]), "dist_init");
    mpi_check(d, MPI_Comm_set_errhandler(m->comm[DIST_WORLD], MPI_ERRORS_RETURN), "dist_init");
    for (int g = DIST_WORLD + 1; g < DIST_GROUPS; g++) {
        const DistGroup grp = (DistGroup)g;
        mpi_check(d,
                  MPI_Comm_split(m->comm[DIST_WORLD], dist_group_colour(d, grp),
                                 dist_group_rank(d, grp), &m->comm[g]),
                  "dist_init");
        mpi_check(d, MPI_Comm_set_errhandler(m->comm[g], MPI_ERRORS_RETURN), "dist_init");
        int size = 0, r = 0;
        MPI_Comm_size(m->comm[g], &size);
        MPI_Comm_rank(m->comm[g], &r);
        if (size != dist_group_size(d, grp) || r != dist_group_rank(d, grp))
            moe_fatal("dist_init: group %d has size %d rank %d, the grid says %d and %d", g, size,
                      r, dist_group_size(d, grp), dist_group_rank(d, grp));
    }
}

/* ops_alloc: the request arrays of each of the collectives that can be in flight at once,
 * 2 world + 2 entries each */
static void ops_alloc(DistMpi *m, int world) {
    size_t cap = 2 * (size_t)world + 2;
    for (int i = 0; i < DIST_MAX_IN_FLIGHT; i++) {
        DistOp *op = &m->ops[i];
        op->req = malloc_check(cap * sizeof *op->req);
        op->st = malloc_check(cap * sizeof *op->st);
        op->peer = malloc_check(cap * sizeof *op->peer);
        op->want = malloc_check(cap * sizeof *op->want);
        op->done_idx = malloc_check(cap * sizeof *op->done_idx);
        op->counts = malloc_check((size_t)world * sizeof *op->counts);
        op->displs = malloc_check((size_t)world * sizeof *op->displs);
    }
}

int dist_init(Dist *d, int *argc, char ***argv, DistAxes axes, int collectives, double timeout_s,
              const char *settings, char *err, int errlen) {
    memset(d, 0, sizeof *d);
    int inited = 0, owns = 0, provided = 0;
    if (timeout_s <= 0) timeout_s = 60.0;
    startup_watch(timeout_s);
    MPI_Initialized(&inited);
    if (!inited) {
        /* FUNNELED: OpenMP threads run inside a rank, only the main thread calls MPI. */
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            startup_done();
            return set_error(err, errlen,
                             "MPI_Init failed: start the program with mpirun -np N (Open MPI), "
                             "or use the build without MPI");
        }
        owns = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int world = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    d->rank = rank;
    /* first the settings, the axes among them: with the grid built from two values of
     * dist.ep the splits below would not match */
    if (settings && world > 1 && settings_differ(d, world, settings)) {
        if (owns) MPI_Finalize();
        startup_done();
        if (errlen > 0) err[0] = '\0'; /* rank 0 has said what differs */
        return -1;
    }
    if (dist_grid_set(d, world, rank, axes, err, errlen) != 0) {
        /* Every rank reaches the same verdict from the same numbers, so each can end MPI
         * cleanly and exit with the message, without waiting on the others. */
        if (owns) MPI_Finalize();
        startup_done();
        return -1;
    }
    d->timeout_s = timeout_s > 0 ? timeout_s : 60.0;
    d->collectives = collectives;

    DistMpi *m = calloc_check(1, sizeof *m);
    m->owns_mpi = owns;
    comms_create(d, m);
    ops_alloc(m, world);
    d->impl = m;
    startup_done(); /* from here on every wait has its own deadline */
    return 0;
}

void dist_finalize(Dist *d) {
    if (d == NULL || d->impl == NULL) return;
    dist_barrier(d); /* a peer that died since the last collective is named here, not hung on */
    DistMpi *m = d->impl;
    for (int g = DIST_GROUPS - 1; g >= DIST_WORLD; g--) MPI_Comm_free(&m->comm[g]);
    if (m->owns_mpi) MPI_Finalize();
    for (int i = 0; i < DIST_MAX_IN_FLIGHT; i++) {
        DistOp *op = &m->ops[i];
        free(op->req);
        free(op->st);
        free(op->peer);
        free(op->want);
        free(op->done_idx);
        free(op->counts);
        free(op->displs);
        free(op->reduce_buf);
    }
    free(m);
    d->impl = NULL;
}

#endif /* MOE_HAVE_MPI */
