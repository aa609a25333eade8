/*
 * Chapter 2, capacity.c: one batch of real text through a router with a capacity per expert.
 *
 *   make chapters && build/chapters/02-capacity/capacity [--ckpt runs/demo/ckpt.bin]
 *                                                        [--data SHARD] [--layer L]
 *
 * It takes one sequence of bytes from each domain of the corpus, runs a trained model up to
 * the router of one MoE block (the last one by default) and shows what a capacity does there:
 *
 *   1. the routing and each expert's demand       who wants which expert, against the fair share
 *   2. the capacity for factors 0.5, 1, 1.25, 2   cap = max(min_capacity, ceil(f tokens K / E)),
 *                                                  over the batch or per sequence
 *   3. what each drop policy keeps at factor 1    position (token order) or score
 *   4. the output of a dropped token             exactly 0: only the residual carries it on
 *   5. padded execution                           the rows every expert computes vs uses
 *
 * Without a checkpoint the model is freshly initialised (run `make demo` first to see a
 * trained router). Every function it calls is the engine's own: moe_capacity and
 * capacity_plan_build (src/moe/capacity.c), moe_block_forward (src/model/moe_block.c).
 *
 * Besides src/moe.h (through ../chapter.h) it includes src/model/moe_block.h and
 * src/moe/moe_ops.h: it runs the MoE block on its own at other capacities and reads its
 * dispatch plan, the pieces this chapter takes apart; the model itself it reads through moe.h
 * (model_block_view, model_moe_weights).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../chapter.h"
#include "model/moe_block.h" /* the MoE block, run here on its own at other capacities */
#include "moe/moe_ops.h"     /* its capacity and dispatch plan */

enum { T = 32, LIST = 5, NF = 4 }; /* bytes per sequence; dropped tokens listed; factors */
static const float factors[NF] = {0.5f, 1.0f, 1.25f, 2.0f};
static const char *policy_name[2] = {"position", "score"}; /* MOE_DROP_POSITION, _SCORE */

static void usage(void) {
    fprintf(stderr, "usage: capacity [--ckpt PATH] [--data SHARD] [--layer L]\n");
    exit(MOE_EXIT_INPUT);
}

/* Printable form of a byte: itself, or a dot for control bytes and UTF-8 pieces. */
static char show(int byte) {
    return byte >= 32 && byte < 127 ? (char)byte : '.';
}

/* Expert e as one character (0-9, then a-z), so a sequence's routing fits under its text. */
static char expert_char(int e) {
    return (char)(e < 10 ? '0' + e : e < 36 ? 'a' + e - 10 : '+');
}

static void bar(double value, double scale) {
    int n = (int)(value * scale + 0.5);
    for (int i = 0; i < n && i < 60; i++) putchar('#');
}

static double row_norm(const float *y, int C) {
    double s = 0.0;
    for (int i = 0; i < C; i++) s += (double)y[i] * y[i];
    return sqrt(s);
}

/* The block's settings with a capacity: factor (0 = dropless), scope, policy, padding. */
static MoeSpec with_capacity(const MoeSpec *base, float factor, int scope, int policy, int padded) {
    MoeSpec s = *base;
    s.capacity_factor = factor;
    s.capacity_scope = scope;
    s.drop_policy = policy;
    s.padded = padded;
    s.eval_capacity_factor = -1.0f;
    s.second_expert_random = 0;
    return s;
}

/* An evaluation call on sequences of s->seq_len tokens at s's capacity factor: no jitter, no
 * noise, no random second expert. */
static MoeCtx eval_ctx(const MoeSpec *s) {
    MoeCtx ctx;
    moe_ctx_eval(&ctx, s, s->seq_len);
    return ctx;
}

/* One forward of the engine's MoE block: y (N, C), x (N, C); a is allocated for s (a padded
 * plan needs E x rows slots) and left for the caller to read and free. */
static void block_run(float *y, MoeActs *a, const float *x, const MoeWeights *wt, const MoeSpec *s,
                      int N) {
    const MoeCtx ctx = eval_ctx(s);
    moe_acts_alloc(&backend_cpu, a, s, NULL, N);
    moe_block_forward(&backend_cpu, y, a, x, wt, s, &ctx, N);
}

int main(int argc, char **argv) {
    const char *ckpt = "runs/demo/ckpt.bin", *data = "data/corpus/val.bin";
    int layer = -1, ckpt_given = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--ckpt") == 0)
            ckpt = argv[++i], ckpt_given = 1;
        else if (strcmp(argv[i], "--data") == 0)
            data = argv[++i];
        else if (strcmp(argv[i], "--layer") == 0)
            layer = atoi(argv[++i]);
        else
            usage();
    }

    /* ---- the model: trained if there is a checkpoint, else fresh ------------------------- */
    char err[1024];
    Config c;
    const int trained = chapter_config(&c, ckpt, ckpt_given);
    if (c.num_experts < 2) moe_input_error("%s is a dense model: capacity needs an MoE", ckpt);
    if (c.routing != MOE_ROUTING_TOKEN_CHOICE)
        moe_input_error("%s routes by expert choice, which has no token-choice capacity: use a "
                        "token-choice checkpoint",
                        ckpt);

    Shard s;
    if (shard_load(&s, data, err, sizeof err) != 0) moe_input_error("%s", err);
    const int B = (int)s.n_domains, N = B * T, E = c.num_experts, K = c.top_k, C = c.d_model;
    Model m;
    model_init(&m, &c, B, T);
    if (trained && checkpoint_load(&m, NULL, ckpt, 0, err, sizeof err) != 0)
        moe_input_error("%s", err);
    if (layer < 0)
        for (int l = 0; l < c.n_layer; l++)
            if (model_is_moe(&m, l)) layer = l;
    if (!model_is_moe(&m, layer))
        moe_input_error("--layer %d is not an MoE block of this model", layer);
    printf("model: %s, %d blocks, %d experts, top-%d; MoE block %d\n",
           trained ? ckpt : "freshly initialised (no checkpoint: run `make demo` first)", c.n_layer,
           E, K, layer);

    /* ---- the batch: the first T bytes of the first document of every domain -------------- */
    int *tokens = (int *)calloc_check((size_t)N, sizeof(int));
    if (shard_domain_batch(&s, T, tokens, NULL, err, sizeof err) != 0) moe_input_error("%s", err);
    printf("batch: %d sequences of %d bytes, one per domain: N = %d tokens, N x K = %d "
           "assignments\n",
           B, T, N, N * K);

    /* the model's forward pass gives the block's input, the normalised residual stream */
    model_forward(&m, tokens, NULL, B, T, NULL);
    const BlockView view = model_block_view(&m, layer);
    const float *x = view.ffn_in;      /* (N, C) */
    const float *resid_mid = view.mid; /* (N, C) */
    const MoeWeights wt = model_moe_weights(&m, layer);
    const MoeSpec base = m.spec; /* sequences of T tokens (seq_len) */

    /* ---- 1. routing and demand: the block run dropless ----------------------------------- */
    const MoeSpec s0 = with_capacity(&base, 0.0f, MOE_CAP_BATCH, MOE_DROP_POSITION, 0);
    MoeActs a0;
    float *y0 = floats_alloc((size_t)N * C);
    block_run(y0, &a0, x, &wt, &s0, N);
    const int *idx = a0.idx;         /* (N, K) */
    const float *scores = a0.scores; /* (N, E) */
    printf("\n1. routing: each byte's top-%d experts (row k: its k-th choice), and each "
           "expert's demand\n",
           K);
    for (int d = 0; d < B; d++) {
        printf("   %-5s \"", s.domain[d]);
        for (int t = 0; t < T; t++) putchar(show(tokens[d * T + t]));
        printf("\"\n");
        for (int k = 0; k < K && k < 4; k++) {
            printf("   k=%d    ", k + 1);
            for (int t = 0; t < T; t++) putchar(expert_char(idx[(d * T + t) * K + k]));
            printf("\n");
        }
    }
    int *demand = (int *)calloc_check((size_t)E, sizeof(int));
    for (int j = 0; j < N * K; j++) demand[idx[j]]++;
    const double fair = (double)N * K / E;
    printf("   demand = assignments routed to each expert; fair share N K / E = %d x %d / %d = "
           "%.2f\n",
           N, K, E, fair);
    for (int e = 0; e < E; e++) {
        printf("   expert %2d  demand %4d  %.2f x fair  ", e, demand[e], demand[e] / fair);
        bar(demand[e] / fair, 20.0);
        printf("\n");
    }
    printf("   busiest expert of each sequence (fair share per sequence T K / E = %.2f):",
           (double)T * K / E);
    for (int d = 0; d < B; d++) {
        int best = 0, count[64] = {0};
        for (int j = d * T * K; j < (d + 1) * T * K; j++)
            if (idx[j] < 64) count[idx[j]]++;
        for (int e = 1; e < E && e < 64; e++)
            if (count[e] > count[best]) best = e;
        printf(" %s e%d %d", s.domain[d], best, count[best]);
        printf(d + 1 < B ? "," : "\n");
    }

    /* ---- 2. the capacity formula --------------------------------------------------------- */
    DispatchPlan plan;
    dispatch_plan_alloc(&plan, N, E, K);
    printf("\n2. capacity: cap = max(min_capacity, ceil(factor x tokens x K / E)), at most tokens;"
           "\n   tokens = N (batch scope) or T (sequence scope: each sequence its own cap)."
           "\n   Either drop policy drops max(0, demand - cap) per expert and scope.\n");
    for (int f = 0; f < NF; f++)
        for (int scope = MOE_CAP_BATCH; scope <= MOE_CAP_SEQUENCE; scope++) {
            const MoeSpec sp = with_capacity(&base, factors[f], scope, MOE_DROP_POSITION, 0);
            const MoeCtx ctx = eval_ctx(&sp);
            const int tok = scope == MOE_CAP_BATCH ? N : T;
            const int cap = moe_capacity(&sp, factors[f], tok);
            const double want = (double)factors[f] * tok * K / E;
            capacity_plan_build(&plan, idx, scores, a0.w, N, &sp, &ctx);
            printf("   factor %-4g  %-8s  ceil(%g x %d x %d / %d) = ceil(%.3f) = %d  min_capacity "
                   "%d  cap %3d",
                   factors[f], scope == MOE_CAP_BATCH ? "batch" : "sequence", factors[f], tok, K, E,
                   want, (int)ceil(want - 1e-9), base.min_capacity, cap);
            if (scope == MOE_CAP_SEQUENCE) printf(" (x %d seq = %d)", B, B * cap);
            printf("  dropped %3d of %d\n", N * K - plan.S, N * K);
        }

    /* ---- 3. the drop policies at factor 1 ------------------------------------------------ */
    const float f1 = 1.0f;
    const int cap1 = moe_capacity(&base, f1, N);
    int *slot[2];
    int *dropped_in[2][2]; /* [policy][0: per expert, 1: per domain] */
    double kept_sum[2] = {0}, drop_sum[2] = {0};
    int kept_n[2] = {0}, drop_n[2] = {0};
    for (int pol = 0; pol < 2; pol++) {
        const MoeSpec sp = with_capacity(&base, f1, MOE_CAP_BATCH, pol, 0);
        const MoeCtx ctx = eval_ctx(&sp);
        capacity_plan_build(&plan, idx, scores, a0.w, N, &sp, &ctx);
        slot[pol] = (int *)malloc_check((size_t)N * K * sizeof(int));
        memcpy(slot[pol], plan.slot, (size_t)N * K * sizeof(int));
        dropped_in[pol][0] = (int *)calloc_check((size_t)E, sizeof(int));
        dropped_in[pol][1] = (int *)calloc_check((size_t)B, sizeof(int));
        for (int j = 0; j < N * K; j++) {
            const double sc = scores[(j / K) * E + idx[j]];
            if (slot[pol][j] < 0) {
                dropped_in[pol][0][idx[j]]++, dropped_in[pol][1][j / K / T]++;
                drop_sum[pol] += sc, drop_n[pol]++;
            } else {
                kept_sum[pol] += sc, kept_n[pol]++;
            }
        }
    }
    printf("\n3. factor 1, batch scope: cap %d per expert; what each drop policy keeps\n", cap1);
    printf("   expert  demand |  position: kept dropped |  score: kept dropped  lowest kept "
           "score > highest dropped\n");
    for (int e = 0; e < E; e++) {
        float lo_kept = INFINITY, hi_drop = -INFINITY;
        int kept[2] = {0};
        for (int j = 0; j < N * K; j++) {
            if (idx[j] != e) continue;
            const float sc = scores[(j / K) * E + e];
            for (int pol = 0; pol < 2; pol++) kept[pol] += slot[pol][j] >= 0;
            if (slot[MOE_DROP_SCORE][j] >= 0 && sc < lo_kept) lo_kept = sc;
            if (slot[MOE_DROP_SCORE][j] < 0 && sc > hi_drop) hi_drop = sc;
        }
        printf("   %6d  %6d |  %14d %7d |  %11d %7d", e, demand[e], kept[0], dropped_in[0][0][e],
               kept[1], dropped_in[1][0][e]);
        if (dropped_in[1][0][e] > 0) printf("  %.4f > %.4f", lo_kept, hi_drop);
        printf("\n");
    }
    for (int pol = 0; pol < 2; pol++) {
        printf("   %-8s keeps %d, drops %d: mean score of the kept %.4f, of the dropped %.4f\n",
               policy_name[pol], kept_n[pol], drop_n[pol],
               kept_sum[pol] / (kept_n[pol] ? kept_n[pol] : 1),
               drop_n[pol] ? drop_sum[pol] / drop_n[pol] : 0.0);
    }
    printf("   dropped assignments per sequence (position drops the late ones of the batch):\n");
    for (int pol = 0; pol < 2; pol++) {
        printf("   %-8s", policy_name[pol]);
        for (int d = 0; d < B; d++) printf("  %s %d", s.domain[d], dropped_in[pol][1][d]);
        printf("\n");
    }
    for (int pol = 0; pol < 2; pol++) {
        printf("   first dropped by %s:", policy_name[pol]);
        int listed = 0;
        for (int j = 0; j < N * K && listed < LIST; j++)
            if (slot[pol][j] < 0) {
                const int n = j / K;
                printf("%s '%c' %s t=%d e%d score %.3f", listed ? "," : "", show(tokens[n]),
                       s.domain[n / T], n % T, idx[j], scores[n * E + idx[j]]);
                listed++;
            }
        printf("%s\n", listed ? "" : " none");
    }

    /* ---- 4. the output of a dropped token ------------------------------------------------ */
    /* the engine's block with the default policy; a token with every assignment dropped is
     * looked for at factor 1, then at 0.5 */
    float *y = floats_alloc((size_t)N * C);
    MoeActs a;
    float f4 = 0.0f;
    int lost = -1, whole = -1, part = -1;
    for (int f = 1; f >= 0 && lost < 0; f--) {
        if (f4 > 0.0f) moe_acts_free(&backend_cpu, &a);
        f4 = factors[f];
        const MoeSpec sp = with_capacity(&base, f4, MOE_CAP_BATCH, MOE_DROP_POSITION, 0);
        block_run(y, &a, x, &wt, &sp, N);
        whole = part = -1;
        for (int n = 0; n < N; n++) {
            int kept = 0;
            for (int k = 0; k < K; k++) kept += a.plan.slot[n * K + k] >= 0;
            if (kept == 0 && lost < 0) lost = n;
            if (kept == K && whole < 0) whole = n;
            if (kept > 0 && kept < K && part < 0) part = n;
        }
    }
    printf("\n4. the block's output y (moe_block_forward at factor %g, position, batch scope);\n"
           "   the layer's output is resid_mid + y%s\n",
           f4, c.num_shared > 0 ? " + the shared experts" : "");
    const int pick[3] = {lost, part, whole};
    const char *what[3] = {"every assignment dropped", "some assignments dropped",
                           "every assignment kept"};
    for (int i = 0; i < 3; i++) {
        const int n = pick[i];
        if (n < 0) {
            printf("   no token with %s\n", what[i]);
            continue;
        }
        int nonzero = 0, differ = 0;
        for (int ch = 0; ch < C; ch++) {
            const float out = resid_mid[(size_t)n * C + ch] + y[(size_t)n * C + ch];
            nonzero += y[(size_t)n * C + ch] != 0.0f;
            differ += out != resid_mid[(size_t)n * C + ch];
        }
        printf("   '%c' %s t=%d, %s (slots", show(tokens[n]), s.domain[n / T], n % T, what[i]);
        for (int k = 0; k < K; k++) printf(" e%d:%d", idx[n * K + k], a.plan.slot[n * K + k]);
        printf("):\n     |y| = %.6f (dropless %.6f), %d of %d entries non-zero; "
               "resid_mid + y differs from resid_mid in %d entries\n",
               row_norm(y + (size_t)n * C, C), row_norm(y0 + (size_t)n * C, C), nonzero, C, differ);
    }
    moe_acts_free(&backend_cpu, &a);

    /* ---- 5. padded execution ------------------------------------------------------------- */
    printf("\n5. padded execution (moe.padded=1): every expert computes its cap rows, used or "
           "not; dropless computes N K = %d\n",
           N * K);
    float *yp = floats_alloc((size_t)N * C);
    for (int f = 0; f < NF; f++) {
        MoeSpec sp = with_capacity(&base, factors[f], MOE_CAP_BATCH, MOE_DROP_POSITION, 0);
        block_run(y, &a, x, &wt, &sp, N);
        moe_acts_free(&backend_cpu, &a);
        sp.padded = 1;
        block_run(yp, &a, x, &wt, &sp, N);
        const int R = a.plan.offsets[1] - a.plan.offsets[0];
        int used = 0;
        for (int e = 0; e < E; e++) used += a.plan.counts[e];
        printf("   factor %-4g  %d experts x %d rows = %4d computed, %4d used, padding %5.1f%%, "
               "y %s unpadded\n     used per expert:",
               factors[f], E, R, a.plan.S, used, 100.0 * (a.plan.S - used) / a.plan.S,
               memcmp(y, yp, (size_t)N * C * sizeof(float)) == 0 ? "bit-identical to"
                                                                 : "DIFFERS from");
        for (int e = 0; e < E; e++) printf(" %d/%d", a.plan.counts[e], R);
        printf("\n");
        moe_acts_free(&backend_cpu, &a);
    }

    for (int pol = 0; pol < 2; pol++)
        free(slot[pol]), free(dropped_in[pol][0]), free(dropped_in[pol][1]);
    dispatch_plan_free(&plan);
    moe_acts_free(&backend_cpu, &a0);
    free(tokens), free(demand), free(y0), free(y), free(yp);
    model_free(&m);
    shard_free(&s);
    return 0;
}
