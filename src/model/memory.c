/*
 * memory.c: the analytical memory of a model. See memory.h.
 *
 * Every term below mirrors one buffer of model_init (model.c) or of the MoE block's
 * moe_acts_alloc / moe_scratch_alloc / dispatch_plan_alloc (moe/), named after the field it
 * sizes. Letters: N = B * T tokens, C channels, H heads, V vocabulary, F the dense hidden
 * size, FE the expert hidden size, E experts, K experts per token, S = N * K expert slots
 * (the plan is dropless, so every assignment gets a slot). Expert choice (moe.routing) lists
 * every (token, expert) pair as a candidate, A = E assignments per token instead of K, and
 * needs S = E * cap slots, cap = ceil(ec_capacity * N * K / E) tokens per expert. Token
 * choice with a capacity (moe.capacity_factor > 0) keeps at most N * K assignments, but padded
 * (moe.padded=1) every expert computes its full capacity: S = E * rows per expert
 * (moe_expert_rows) when that exceeds N * K, at the larger of the training and eval factors.
 *
 * What the terms say about an MoE step: the parameters of an MoE block grow with E (every
 * expert is stored, trained and has AdamW moments) but its activations grow with K only
 * (each token visits K experts), so at equal active FLOPs (K * FE = F) an MoE model holds
 * about the activations of its dense twin plus the permuted copies xe, ye (2 S C) and the
 * router's (N, E) logits and scores, and E / K times the feed-forward parameters, times 4
 * with gradients and moments.
 */
#include "model/memory.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "model/moe_block.h"
#include "model/params.h"
#include "moe/moe_ops.h"

size_t model_memory_floats(const Config *c, int B, int T, MemoryBreakdown *out) {
    MemoryBreakdown m;
    memset(&m, 0, sizeof m);
    const size_t L = (size_t)c->n_layer, C = (size_t)c->d_model, H = (size_t)c->n_head;
    const size_t V = MOE_VOCAB, F = (size_t)c->d_ff, FE = (size_t)config_expert_hidden(c);
    const size_t E = (size_t)c->num_experts, K = (size_t)c->top_k;
    const size_t N = (size_t)B * T;
    /* assignments per token A and slots S, per routing mode (moe_acts_alloc) */
    MoeSpec spec; /* the spec model_init builds: the formula sizes what it allocates */
    moe_spec_from_config(&spec, c, T);
    const int ec = c->routing == MOE_ROUTING_EXPERT_CHOICE && E > 0;
    /* S: N K, E cap for expert choice, or the padded rows of a padded capacity plan when they
     * outnumber the assignments (moe_slots_max) */
    const size_t A = ec ? E : K, NA = N * A, S = E > 0 ? moe_slots_max(&spec, (int)N) : N * K;
    const size_t FS = (size_t)c->num_shared * FE; /* hidden size of the shared experts' SwiGLU */

    /* ---- parameters, gradients, AdamW moments: one buffer of P floats each ------------- */
    ParamTable pt;
    params_table_build(&pt, c);
    const size_t P = params_count_total(&pt);
    params_table_free(&pt);
    m.params = P;   /* params */
    m.grads = P;    /* grads, same layout */
    m.adam = 2 * P; /* m and v */

    /* ---- activations kept from forward for backward ------------------------------------- */
    m.acts_resid = (L + 1) * N * C; /* resid[0..L]: embedding output and every block output */

    size_t n_moe = 0;
    for (size_t l = 0; l < L; l++) {
        /* attention half of the block */
        m.acts_attn += N * C                   /* ln1: rmsnorm of the block input */
                       + N                     /* rstd1: its 1 / rms per token */
                       + 3 * N * C             /* q, k, v (q and k after RoPE) */
                       + B * H * (size_t)T * T /* att: softmax probabilities, the full T x T
                                                  square per (batch row, head) */
                       + N * C                 /* atty: attention output before wo */
                       + N * C                 /* resid_mid: block input + attention branch */
                       + N * C                 /* ln2: rmsnorm of resid_mid */
                       + N;                    /* rstd2 */

        if (config_is_moe_layer(c, (int)l)) {
            n_moe++;
            /* MoeActs: router, then the tokens in expert order and the experts' SwiGLU */
            m.acts_ffn += N * E        /* logits: x router^T */
                          + N * E      /* scores: softmax of the logits */
                          + N          /* lse: logsumexp per token, for the z-loss */
                          + NA         /* w: gate weights, one per (token, k) or, for
                                          expert choice, per (token, expert) */
                          + 2 * S * C  /* xe, ye: expert inputs (gathered) and outputs */
                          + 3 * S * FE /* g, u, h: gate, up, silu(g) * u per slot */
                          + E;         /* router_bias: the aux-free bias, Model state kept
                                          next to the block (no gradient, no moments) */
            /* jit, xj: the jitter factors and the router's jittered input (moe.jitter > 0) */
            if (c->jitter > 0.0f) m.acts_ffn += 2 * N * C;
            /* noise: the logit noise drawn (moe.noise > 0) */
            if (c->noise > 0.0f) m.acts_ffn += N * E;
            /* work: the routing ops' scratch (moe_work_bytes: the balance loss, the router's
             * backward, the capacity or expert-choice ranking), in 4-byte words */
            m.acts_ffn += (moe_work_bytes(&spec, (int)N) + 3) / 4;
            /* sg, su, sh: the shared experts' SwiGLU (Fs = 0 without them) */
            m.acts_ffn += 3 * N * FS;
            /* int words of the block: idx (N, A) plus one spare word, and the dispatch
             * plan: counts (E), offsets (E + 1), slot (N * A + 1) and slot_token
             * (N * A + 1, or S + 1 when a padded plan has more rows than assignments) */
            m.int_words += (NA + 1) + E + (E + 1) + (NA + 1) + (S > NA ? S : NA) + 1;
        } else {
            m.acts_ffn += 3 * N * F; /* fg, fu, fh: gate, up, silu(gate) * up */
        }
    }

    m.acts_head = N * C   /* lnf: final rmsnorm */
                  + N     /* rstdf */
                  + N * V /* logits (probabilities after the loss) */
                  + N;    /* losses: per-token cross-entropy */

    m.int_words += 2 * N; /* inputs, targets: token ids */

    /* ---- backward scratch: one set, reused by every block ------------------------------- */
    m.scratch = 8 * N * C;                 /* dresid, dmid, dln, dtmp, dq, dk, dv, datty */
    if (n_moe < L) m.scratch += 3 * N * F; /* dfg, dfu, dfh: only when a dense block exists */
    m.scratch += N * V;                    /* dlogits */
    if (n_moe > 0)                         /* MoeScratch, shared by the MoE blocks */
        m.scratch += N * E                 /* dlogits of the router */
                     + NA                  /* dw */
                     + 2 * S * C           /* dxe, dye */
                     + 3 * S * FE          /* dg, du, dh */
                     + N * C               /* dx_router: input gradient through the router */
                     + 3 * N * FS;         /* dsg, dsu, dsh: the shared experts' SwiGLU */

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

int memory_check(const Config *c, int B, int T, int ep, char *err, int errlen) {
    /* A first estimate in double, which cannot overflow: the largest terms of the formula
     * above (4 P for the parameters, gradients and moments; per block the T x T attention
     * squares, a dozen (N, C) activations and the experts' rows; the logits twice). Settings
     * far beyond any machine stop here, before the exact count multiplies sizes in size_t. */
    const double L = c->n_layer, C = c->d_model, F = c->d_ff, FE = config_expert_hidden(c);
    const double E = c->num_experts / (ep > 1 ? ep : 1), K = c->top_k > 0 ? c->top_k : 1;
    const double N = (double)B * T, V = MOE_VOCAB;
    const double P = 2.0 * V * C + L * (4.0 * C * C + 3.0 * C * (E * FE + F + c->num_shared * FE));
    const double acts =
        L * ((double)B * c->n_head * T * T + 12.0 * N * C + 6.0 * N * K * FE) + 2.0 * N * V;
    const double rough = 4.0 * (4.0 * P + acts);
    const double have = available_bytes();
    const double GiB = 1024.0 * 1024.0 * 1024.0;
    double need = rough, state = 16.0 * P;
    if (rough < 64.0 * 1024 * GiB && N <= 2147483647.0) {
        Config cc = *c;
        if (ep > 1 && cc.num_experts > 0) {
            cc.num_experts /= ep;
            if (cc.top_k > cc.num_experts) cc.top_k = cc.num_experts;
        }
        MemoryBreakdown mb;
        model_memory_floats(&cc, B, T, &mb);
        need = 4.0 * (double)mb.total_words;
        state = 4.0 * (double)(mb.params + mb.grads + mb.adam);
    }
    if (have <= 0.0 || need <= have) return 0;
    return set_error(err, errlen,
                     "the model needs %.2f GiB of memory for %d x %d tokens (weights, gradients "
                     "and AdamW moments %.2f GiB, the rest activations), more than the %.2f GiB "
                     "available: use a smaller model (model.d_model, model.n_layer, model.d_ff, "
                     "moe.num_experts) or fewer tokens (train.batch, model.seq_len)",
                     need / GiB, B, T, state / GiB, have / GiB);
}
