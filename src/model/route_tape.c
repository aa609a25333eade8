/*
 * route_tape.c: record and replay a run's routing (route_tape.h).
 */
#include "model/route_tape.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"
#include "io/files.h"

static const char MAGIC[8] = {'M', 'O', 'E', 'R', 'O', 'U', 'T', 'E'};
enum { VERSION = 1, HEADER_INTS = 6, HEADER_BYTES = 8 + 4 * HEADER_INTS };

int route_tape_open(RouteTape *t, const char *path, int replay, int E, int K, int N, int n_moe,
                    long long calls, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    t->replay = replay, t->E = E, t->K = K, t->N = N, t->n_moe = n_moe;
    if (!replay) {
        if (file_exists(path)) {
            snprintf(err, errlen,
                     "--record-routing %s: the file exists; remove it or name another "
                     "(nothing was changed)",
                     path);
            return -1;
        }
        t->f = fopen(path, "wb");
        if (!t->f) {
            snprintf(err, errlen, "--record-routing %s: cannot create it", path);
            return -1;
        }
        const int32_t h[HEADER_INTS] = {VERSION, E, K, N, n_moe, 0};
        if (fwrite(MAGIC, 1, sizeof MAGIC, t->f) != sizeof MAGIC ||
            fwrite(h, sizeof h[0], HEADER_INTS, t->f) != HEADER_INTS)
            moe_fatal("--record-routing %s: write failed", path);
    } else {
        t->f = fopen(path, "rb");
        if (!t->f) {
            snprintf(err, errlen,
                     "--replay-routing %s: no such file; record one with `moe train "
                     "--record-routing %s` and the same settings",
                     path, path);
            return -1;
        }
        char magic[8];
        int32_t h[HEADER_INTS];
        struct stat st;
        if (fread(magic, 1, sizeof magic, t->f) != sizeof magic ||
            memcmp(magic, MAGIC, sizeof magic) != 0 ||
            fread(h, sizeof h[0], HEADER_INTS, t->f) != HEADER_INTS || h[0] != VERSION) {
            snprintf(err, errlen,
                     "--replay-routing %s: not a routing recording of this version (written by "
                     "`moe train --record-routing`)",
                     path);
            fclose(t->f);
            return -1;
        }
        if (h[1] != E || h[2] != K || h[3] != N || h[4] != n_moe) {
            snprintf(err, errlen,
                     "--replay-routing %s: recorded with %d experts, top-%d, %d tokens a "
                     "micro-batch and %d MoE blocks; this run has %d, top-%d, %d and %d: replay "
                     "a recording of the same model and batch",
                     path, h[1], h[2], h[3], h[4], E, K, N, n_moe);
            fclose(t->f);
            return -1;
        }
        const long long per = (long long)N * K * 4, have = fstat(fileno(t->f), &st) == 0
                                                               ? (st.st_size - HEADER_BYTES) / per
                                                               : 0;
        if (have < calls) {
            snprintf(err, errlen,
                     "--replay-routing %s: it holds %lld MoE block calls, this run needs %lld "
                     "(steps x train.accum x MoE blocks): record at least as many steps",
                     path, have, calls);
            fclose(t->f);
            return -1;
        }
    }
    t->rec = (int *)malloc_check((size_t)N * K * sizeof(int));
    t->own = (int *)malloc_check((size_t)N * K * sizeof(int));
    return 0;
}

void route_tape_apply(RouteTape *t, const Backend *be, int *idx, float *w, const float *scores,
                      const float *logits, int N, const MoeSpec *s) {
    const int K = t->K;
    const size_t NK = (size_t)N * K, bytes = NK * sizeof(int);
    if (N != t->N || s->top_k != K)
        moe_fatal("routing tape of N %d, K %d used with %d, %d", t->N, K, N, s->top_k);
    t->calls++;
    if (!t->replay) {
        be->to_host(be, t->rec, idx, bytes);
        if (fwrite(t->rec, sizeof(int), NK, t->f) != NK)
            moe_fatal("--record-routing: write failed (disk full?)");
        return;
    }
    if (fread(t->rec, sizeof(int), NK, t->f) != NK)
        moe_fatal("--replay-routing: the recording ended at call %lld", t->calls);
    for (size_t j = 0; j < NK; j++)
        if (t->rec[j] < 0 || t->rec[j] >= t->E)
            moe_input_error("--replay-routing: call %lld holds expert %d of %d: the file is "
                            "damaged; record it again",
                            t->calls, t->rec[j], t->E);
    be->to_host(be, t->own, idx, bytes);
    /* a flip: an expert this run chose that the recording did not choose for the token */
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            const int e = t->own[(size_t)n * K + k];
            int found = 0;
            for (int j = 0; j < K; j++) found |= t->rec[(size_t)n * K + j] == e;
            t->flips += !found;
        }
    t->choices += (long long)NK;
    be->to_device(be, idx, t->rec, bytes);
    be->router_gate_weights(be, w, idx, scores, logits, N, s);
}

void route_tape_close(RouteTape *t) {
    if (t->f && fclose(t->f) != 0 && !t->replay)
        moe_fatal("--record-routing: closing the recording failed (disk full?)");
    free(t->rec);
    free(t->own);
    memset(t, 0, sizeof *t);
}
