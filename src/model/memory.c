/*
 * memory.c: the analytical memory of a model. See memory.h.
 *
 * Parameters, gradients and the two AdamW moments are four buffers of P floats, P the count
 * of the parameter table (params.h). Everything else is the table of acts.h, summed by kind:
 * what each buffer is, and its size in the letters N, C, H, V, F, FE, E, K, A, S, is written
 * at its entry (acts.c for the model, moe_block.c for an MoE block, ep.c for the expert
 * exchange).
 */
#include "model/memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/acts.h"
#include "model/grad_sync.h"
#include "model/params.h"
#include "model/pipe.h"
#include "model/zero.h"

/* The layers [*first, *last) of the pipeline stage of rank in a world of that many processes,
 * and the micro-batches its schedule holds at once (pipe.h); without a pipeline, or a world it
 * does not divide, all layers and 1. */
static void pipe_stage_of(const Config *c, int world, int rank, int *first, int *last, int *held) {
    char err[256];
    if (c->pp <= 1 || world % c->pp != 0) return;
    const int s = rank / (world / c->pp);
    if (config_pp_stage(c, s, first, last, err, sizeof err) != 0) return;
    PipeAction *a = (PipeAction *)malloc_check(2 * (size_t)c->accum * sizeof *a);
    *held = pipe_held(a, pipe_schedule(c->pp_schedule, c->pp, c->accum, s, a));
    free(a);
}

/* The bytes a breakdown counts (the arena's padding with its words). */
static double breakdown_bytes(const MemoryBreakdown *m) {
    return 4.0 * (double)m->total_words + (double)m->pad_bytes;
}

size_t model_memory_floats(const Config *c, int B, int T, MemoryBreakdown *out) {
    return model_memory_process(c, B, T, 1, 1, out);
}

size_t model_memory_process(const Config *c, int B, int T, int ep, int world,
                            MemoryBreakdown *out) {
    /* the last rank of each pipeline stage (the largest shards of its stage), the largest */
    const int P = c->pp > 1 && world % c->pp == 0 ? c->pp : 1;
    MemoryBreakdown best, mb;
    size_t most = model_memory_rank(c, B, T, ep, world, world - 1, &best);
    for (int s = P - 2; s >= 0; s--) {
        const size_t floats = model_memory_rank(c, B, T, ep, world, (s + 1) * (world / P) - 1, &mb);
        if (breakdown_bytes(&mb) <= breakdown_bytes(&best)) continue;
        most = floats, best = mb;
    }
    if (out) *out = best;
    return most;
}

/* The floats of rank's shards of pt's gradient buckets (zero.h), each over its bucket's group
 * in the grid of world processes, and into *window those of the largest stage; P (and 0) when
 * the grid does not fit (the run is refused anyway). */
static size_t shard_floats(const Config *c, const ParamTable *pt, int ep, int world, int rank,
                           size_t *window) {
    Dist grid = {0};
    char err[256];
    *window = 0;
    const DistAxes axes = {.tp = c->tp, .ep = ep, .pp = c->pp};
    if (dist_grid_set(&grid, world, rank, axes, err, sizeof err)) return pt->total;
    GradBucket *b = NULL;
    const int n = grad_buckets(pt, grad_bucket_floats(c), &b);
    for (int i = 0; i < n; i++) {
        dist_shard_range(b[i].numel, dist_group_size(&grid, b[i].group),
                         dist_group_rank(&grid, b[i].group), &b[i].lo, &b[i].hi);
    }
    const size_t floats = zero_shard_floats(b, n);
    *window = zero_window_floats(b, n);
    free(b);
    return floats;
}

size_t model_memory_rank(const Config *c, int B, int T, int ep, int world, int rank,
                         MemoryBreakdown *out) {
    MemoryBreakdown m;
    memset(&m, 0, sizeof m);

    /* ---- parameters, gradients, AdamW moments: one buffer of P floats each, the moments
     * (and what is kept of the gradients) of the process's shards under dist.zero ------- */
    /* a pipeline stage (pipe.h): its layers' tensors, its table once a micro-batch it holds */
    int first = 0, last = c->n_layer, held = 1;
    pipe_stage_of(c, world, rank, &first, &last, &held);
    ParamTable pt;
    params_table_build_stage(&pt, c, ep, c->tp > 0 ? c->tp : 1, first, last); /* tp's shares */
    const size_t P = params_count_total(&pt);
    size_t window = 0; /* dist.zero=3: the largest stage, gathered into one of two windows */
    const size_t S = world > 1 && c->zero > 0 ? shard_floats(c, &pt, ep, world, rank, &window) : P;
    params_table_free(&pt);
    m.params = world > 1 && c->zero >= 3 ? S + 2 * window : P; /* params, or shards + windows */
    m.grads = P;                                               /* grads, same layout */
    m.grad_shard = world > 1 && c->zero >= 2 ? S : P;
    m.adam = 2 * S; /* m and v */

    /* ---- activations, backward scratch, integer buffers: the table of one process ------- */
    ActTable t;
    acts_table_init(&t);
    model_acts_table_stage(&t, c, B, T, ep, first, last, NULL);
    size_t *field[ACT_KINDS] = {&m.acts_resid, &m.acts_attn, &m.acts_ffn,
                                &m.acts_head,  &m.scratch,   &m.int_words};
    size_t bytes = 0;
    for (int i = 0; i < t.n; i++) {
        const size_t b = acts_entry_bytes(&t.e[i]);
        /* 4-byte words (the routing scratch is whole words), a run state each micro-batch held */
        *field[t.e[i].kind] += (size_t)held * ((b + 3) / 4);
        bytes += b;
    }
    m.pad_bytes = (size_t)held * (acts_layout(&t) - bytes);
    m.held = held;
    acts_table_free(&t);

    m.floats = m.params + m.grads + m.adam + m.acts_resid + m.acts_attn + m.acts_ffn + m.acts_head +
               m.scratch;
    m.total_words = m.floats + m.int_words;
    if (out) *out = m;
    return m.floats;
}

/* Bytes this process may still use: MemAvailable + SwapFree (/proc/meminfo), or less when a
 * control group limits the process (cgroup v2 memory.max - memory.current); 0 when unknown. */
static double available_bytes(void) {
    double avail = 0.0, swap = 0.0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char key[64];
        double kb;
        while (fscanf(f, "%63s %lf kB\n", key, &kb) == 2) {
            if (strcmp(key, "MemAvailable:") == 0) avail = kb * 1024.0;
            if (strcmp(key, "SwapFree:") == 0) swap = kb * 1024.0;
        }
        fclose(f);
    }
    double total = avail + swap;
    double limit = 0.0, used = 0.0;
    f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (f) {
        if (fscanf(f, "%lf", &limit) != 1) limit = 0.0; /* "max": no limit */
        fclose(f);
    }
    f = fopen("/sys/fs/cgroup/memory.current", "r");
    if (f) {
        if (fscanf(f, "%lf", &used) != 1) used = 0.0;
        fclose(f);
    }
    if (limit > 0.0 && (total == 0.0 || limit - used < total)) total = limit - used;
    return total;
}

int memory_check(const Config *c, int B, int T, int ep, int world, char *err, int errlen) {
    /* A first estimate in double, which cannot overflow: the largest terms of the formula
     * (4 P for the parameters, gradients and moments; per block the T x T attention
     * squares, a dozen (N, C) activations and the experts' rows; the logits twice). Settings
     * far beyond any machine stop here, before the exact count multiplies sizes in size_t. */
    const double L = c->n_layer, C = c->d_model, F = c->d_ff, FE = config_expert_hidden(c);
    const double E = c->num_experts / (ep > 1 ? ep : 1), K = c->top_k > 0 ? c->top_k : 1;
    const double N = (double)B * T, V = c->vocab;
    const double QW = (double)c->n_head * config_head_dim(c);
    const double KW = (double)config_kv_heads(c) * config_head_dim(c);
    const double P =
        2.0 * V * C + L * (2.0 * C * (QW + KW) + 3.0 * C * (E * FE + F + c->num_shared * FE));
    const double acts =
        L * ((double)B * c->n_head * T * T + 12.0 * N * (C + QW) + 6.0 * N * K * FE) + 2.0 * N * V;
    const double rough = 4.0 * (4.0 * P + acts);
    const double GiB = 1024.0 * 1024.0 * 1024.0;
    const double machine = available_bytes(), budget = (double)c->memory_gib * GiB;
    const int budgeted = budget > 0.0 && (machine <= 0.0 || budget < machine);
    const double have = budgeted ? budget : machine;
    double need = rough, state = 16.0 * P;
    if (rough < 64.0 * 1024 * GiB && N <= 2147483647.0) {
        MemoryBreakdown mb; /* one process's share: its experts and the exchange's buffers */
        model_memory_process(c, B, T, ep > 1 ? ep : 1, world > 1 ? world : 1, &mb);
        need = 4.0 * (double)mb.total_words + (double)mb.pad_bytes;
        state = 4.0 * (double)(mb.params + mb.grads + mb.adam);
    }
    if (have <= 0.0 || need <= have) return 0;
    if (budgeted)
        return set_error(
            err, errlen,
            "the model needs %.1f MiB a process for %d x %d tokens (weights, "
            "gradients and AdamW moments %.1f MiB, the rest activations), more than "
            "train.memory_gib=%g (%.1f MiB): spread it over more processes "
            "(dist.tp, dist.pp, dist.zero, dist.ep; moe plan --config says what each needs), "
            "or use a smaller model or fewer tokens",
            need / (1 << 20), B, T, state / (1 << 20), (double)c->memory_gib, budget / (1 << 20));
    return set_error(err, errlen,
                     "the model needs %.2f GiB of memory for %d x %d tokens (weights, gradients "
                     "and AdamW moments %.2f GiB, the rest activations), more than the %.2f GiB "
                     "available: use a smaller model (model.d_model, model.n_layer, model.d_ff, "
                     "moe.num_experts) or fewer tokens (train.batch, model.seq_len)",
                     need / GiB, B, T, state / GiB, have / GiB);
}
