/*
 * route_tape.h: record a training run's routing, and replay it in another run.
 *
 * Two backends that compute the same model in a different order (the CPU and a GPU; fp32 and
 * bf16) agree on the logits to a few units in the last place, and a token whose two best
 * experts are that close may pick a different one. One flipped choice sends a token's row
 * through another expert, and from there the two runs drift apart by much more than their
 * rounding. To compare the arithmetic alone, one run records the experts every MoE block
 * chose (`moe train --record-routing FILE`), and the other replays them
 * (`--replay-routing FILE`): each MoE block still computes its own top-k, counts the choices
 * that differ from the recording (the flip rate, the measure of near-ties), then takes the
 * recorded choice and recomputes the gate weights for it (router_gate_weights). Everything
 * after the choice (the plans, capacity drops, the experts, the combine, every gradient) is
 * the replaying run's own.
 *
 * Token choice only (top-k on scores); expert choice is refused. The file is a header and
 * then, for every MoE block of every forward pass of training (step, micro-batch, block, in
 * order; evaluation is not recorded), the N x K expert indices as little-endian int32:
 *
 *   "MOEROUTE" | int32 version (1), E, K, N, MoE blocks, 0 (reserved) | calls x N x K int32
 */
#ifndef MOE_ROUTE_TAPE_H
#define MOE_ROUTE_TAPE_H

#include <stdio.h>

#include "backend/backend.h"

typedef struct RouteTape {
    FILE *f;
    int replay; /* 0: record, 1: replay */
    int E, K, N, n_moe;
    int *rec, *own;           /* (N K) host copies: the recorded choice, the run's own */
    long long calls;          /* MoE block calls recorded or replayed */
    long long choices, flips; /* replay: (token, k) choices compared, and those whose expert
                                 was not among the token's recorded ones */
} RouteTape;

/* Open path to record (replay 0; the file must not exist) or to replay (replay 1: a file of
 * the same E, K, N and MoE blocks holding at least `calls` calls). Returns 0, or -1 with a
 * message in err. */
int route_tape_open(RouteTape *t, const char *path, int replay, int E, int K, int N, int n_moe,
                    long long calls, char *err, size_t errlen);

/* In an MoE block, after the gate: record idx (N, K), or replace it with the recorded choice
 * and recompute w (N, K) for it from scores and logits (backend memory). */
void route_tape_apply(RouteTape *t, const Backend *be, int *idx, float *w, const float *scores,
                      const float *logits, int N, const MoeSpec *s);

/* Close the file (a recording is flushed; a failure ends the program). */
void route_tape_close(RouteTape *t);

#endif
