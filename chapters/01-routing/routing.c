/*
 * Chapter 1, routing.c: one batch of real text through a router, step by step.
 *
 *   make chapters && build/chapters/01-routing/routing [--ckpt runs/demo/ckpt.bin] [--layer L]
 *
 * It takes one sequence of bytes from each domain of the corpus (English, German, Spanish,
 * Italian, Russian fortunes and C headers), runs a trained model up to the router of one MoE
 * block (the last one by default) and then does by hand, printing each step, what that
 * block's router does in training:
 *
 *   1. logits = x W_router^T, scores = softmax(logits)        which experts each token likes
 *   2. top-k and the renormalised gate weights               which experts it goes to
 *   3. the loads, MaxVio, CV and entropy                     how balanced the batch is
 *   4. the Switch aux loss E sum_i f_i P_i and its gradient  how balancing pushes the router
 *   5. the z-loss and its gradient                           how logits are kept small
 *   6. routing by domain                                     what the experts specialise in
 *   7. one aux-loss-free bias update                         balancing without a loss
 *
 * Without a checkpoint the model is freshly initialised (run `make demo` first to see a
 * trained router). Every function it calls is the engine's own (src/moe/router*.c).
 *
 * Besides src/moe.h (through ../chapter.h) it includes src/moe/moe_ops.h, the router's own
 * pieces, because calling them one at a time is what this program shows; the model itself it
 * reads through moe.h (model_is_moe, model_router_logits).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../chapter.h"
#include "moe/moe_ops.h" /* the router's pieces, which this program calls one by one */

enum { T = 32, SHOW = 6 }; /* bytes per sequence; tokens shown per sequence */

static void usage(void) {
    fprintf(stderr, "usage: routing [--ckpt PATH] [--data SHARD] [--layer L]\n");
    exit(MOE_EXIT_INPUT);
}

/* Printable form of a byte: itself, or a dot for control bytes and UTF-8 pieces. */
static char show(int byte) {
    return byte >= 32 && byte < 127 ? (char)byte : '.';
}

static void bar(double fraction, double scale) {
    int n = (int)(fraction * scale + 0.5);
    for (int i = 0; i < n; i++) putchar('#');
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
    if (c.num_experts < 2) moe_input_error("%s is a dense model: routing needs an MoE", ckpt);

    Shard s;
    if (shard_load(&s, data, err, sizeof err) != 0) moe_input_error("%s", err);
    const int B = (int)s.n_domains, N = B * T, E = c.num_experts, K = c.top_k;
    Model m;
    model_init(&m, &c, B, T);
    if (trained && checkpoint_load(&m, NULL, ckpt, 0, err, sizeof err) != 0)
        moe_input_error("%s", err);
    if (layer < 0)
        for (int l = 0; l < c.n_layer; l++)
            if (model_is_moe(&m, l)) layer = l;
    if (!model_is_moe(&m, layer))
        moe_input_error("--layer %d is not an MoE block of this model", layer);
    printf("model: %s, %d blocks, %d experts, top-%d; router of block %d\n\n",
           trained ? ckpt : "freshly initialised (no checkpoint: run `make demo` first)", c.n_layer,
           E, K, layer);

    /* ---- the batch: the first T bytes of the first document of every domain -------------- */
    int *tokens = (int *)calloc_check((size_t)N, sizeof(int));
    if (shard_domain_batch(&s, T, tokens, NULL, err, sizeof err) != 0) moe_input_error("%s", err);
    printf("1. the batch: %d sequences of %d bytes, one per domain\n", B, T);
    for (int d = 0; d < B; d++) {
        printf("   %-5s \"", s.domain[d]);
        for (int t = 0; t < T; t++) putchar(show(tokens[d * T + t]));
        printf("\"\n");
    }

    /* the model's forward pass gives the router's input: the normalised residual stream */
    model_forward(&m, tokens, NULL, B, T, NULL);
    const MoeSpec *spec = &m.spec;
    MoeCtx ctx; /* one evaluation call on sequences of T bytes */
    moe_ctx_eval(&ctx, spec, T);

    /* ---- 1. logits and scores ---------------------------------------------------------------- */
    float *logits = floats_alloc((size_t)N * E), *scores = floats_alloc((size_t)N * E);
    float *lse = floats_alloc((size_t)N);
    model_router_logits(&m, layer, logits); /* x W_r^T, as the block computes them */
    router_scores_forward(scores, lse, logits, N, spec);
    int *idx = (int *)calloc_check((size_t)N * K, sizeof(int));
    float *w = floats_alloc((size_t)N * K);
    router_gate_forward(idx, w, scores, logits, NULL, N, spec);
    printf("\n2. scores (softmax of the router logits) and the top-%d choice, first %d bytes of "
           "each sequence\n",
           K, SHOW);
    printf("   byte   scores per expert");
    for (int e = 0; e < E - 2; e++) printf("      ");
    printf("-> experts (gate weights)\n");
    for (int d = 0; d < B; d++)
        for (int t = 0; t < SHOW; t++) {
            int n = d * T + t;
            printf("   %-4s '%c' ", t == 0 ? s.domain[d] : "", show(tokens[n]));
            for (int e = 0; e < E && e < 12; e++) printf(" %.3f", scores[n * E + e]);
            printf("  ->");
            for (int k = 0; k < K; k++) printf(" %d (%.2f)", idx[n * K + k], w[n * K + k]);
            printf("\n");
        }

    /* ---- 3. loads and balance ---------------------------------------------------------------- */
    float *load = floats_alloc((size_t)E);
    RouterStats st;
    router_stats(&st, load, scores, idx, N, E, K);
    printf("\n3. loads: the fraction of the %d x %d assignments each expert received (fair share "
           "%.3f)\n",
           N, K, 1.0 / E);
    for (int e = 0; e < E; e++) {
        printf("   expert %2d  %.3f  ", e, load[e]);
        bar(load[e], 200.0);
        printf("\n");
    }
    printf("   MaxVio = (max - mean) / mean = %.3f   CV = std / mean = %.3f   "
           "score entropy = %.3f nats (uniform: %.3f)\n",
           st.maxvio, st.cv, st.entropy, log((double)E));

    /* ---- 4. Switch aux loss and its gradient ------------------------------------------------ */
    double P[64] = {0};
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E && e < 64; e++) P[e] += scores[n * E + e] / N;
    float aux = router_aux_loss(scores, idx, N, E, K);
    printf("\n4. Switch aux loss = E sum_i f_i P_i, f_i = load (a count: no gradient), P_i = mean "
           "score\n");
    for (int e = 0; e < E && e < 64; e++)
        printf("   expert %2d  f %.3f  P %.3f  f*P %.4f\n", e, load[e], P[e], load[e] * P[e]);
    printf("   aux = %d x %.4f = %.4f   (1 when perfectly balanced)\n", E, aux / E, aux);
    /* d aux / d logits: the aux term alone (no gate-weight gradient, no z-loss) */
    float *dw = floats_alloc((size_t)N * K), *dlogits = floats_alloc((size_t)N * E);
    MoeSpec aux_only = *spec;
    aux_only.balance = MOE_BALANCE_AUX;
    router_gate_backward(dlogits, dw, scores, lse, logits, idx, w, N, &aux_only, &ctx, 1.0f, 0.0f);
    /* For one token the softmax Jacobian gives d aux / d l_j = (E / N) p_j (f_j - sum_i p_i f_i):
     * experts loaded above the token's score-weighted mean load are pushed down, the others up,
     * each in proportion to the token's own score for it. */
    double fbar = 0.0;
    for (int e = 0; e < E; e++) fbar += scores[e] * load[e];
    printf("   d aux / d logits of the first byte (x N = %d; + means gradient descent lowers the "
           "logit):\n   experts with f above this byte's score-weighted mean load "
           "sum_i p_i f_i = %.3f are pushed down,\n   the others up, each in proportion to "
           "the byte's score p_j\n  ",
           N, fbar);
    for (int e = 0; e < E && e < 12; e++) printf(" %+.3f", dlogits[e] * N);
    printf("\n");

    /* ---- 5. z-loss -----------------------------------------------------------------------------
     */
    float z = router_z_loss(lse, N);
    MoeSpec z_only = *spec;
    z_only.balance = MOE_BALANCE_NONE;
    router_gate_backward(dlogits, dw, scores, lse, logits, idx, w, N, &z_only, &ctx, 0.0f, 1.0f);
    printf("\n5. z-loss = mean logsumexp(logits)^2 = %.4f; logsumexp of the first byte %.3f\n", z,
           lse[0]);
    printf("   d z / d logits of the first byte (x N) = 2 lse softmax: largest on the byte's "
           "favourite expert,\n   so a descent step lowers the top logits most and flattens "
           "the distribution (lse > 0 here)\n  ");
    for (int e = 0; e < E && e < 12; e++) printf(" %+.3f", dlogits[e] * N);
    printf("\n");

    /* ---- 6. routing by domain ------------------------------------------------------------------
     */
    printf("\n6. share of each domain's assignments per expert\n   %-5s", "");
    for (int e = 0; e < E && e < 16; e++) printf("  e%-3d", e);
    printf("\n");
    for (int d = 0; d < B; d++) {
        printf("   %-5s", s.domain[d]);
        for (int e = 0; e < E && e < 16; e++) {
            int count = 0;
            for (int t = 0; t < T; t++)
                for (int k = 0; k < K; k++) count += idx[(d * T + t) * K + k] == e;
            printf("  %.2f", (double)count / (T * K));
        }
        printf("\n");
    }

    /* ---- 7. one aux-loss-free bias update ------------------------------------------------------
     */
    const float rate = 0.01f;
    float *bias = floats_alloc((size_t)E);
    double *count = (double *)calloc_check((size_t)E, sizeof(double)); /* assignments */
    for (int j = 0; j < N * K; j++) count[idx[j]] += 1.0;
    router_bias_update(bias, count, E, MOE_BIAS_SIGN, rate);
    int *idx2 = (int *)calloc_check((size_t)N * K, sizeof(int));
    float *w2 = floats_alloc((size_t)N * K), *load2 = floats_alloc((size_t)E);
    router_gate_forward(idx2, w2, scores, logits, bias, N, spec);
    RouterStats st2;
    router_stats(&st2, load2, scores, idx2, N, E, K);
    int moved = 0, example = -1;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            if (idx2[n * K + k] != idx[n * K + k]) {
                moved++;
                if (example < 0) example = n;
            }
    printf("\n7. aux-loss-free balancing: bias b_i += %.2f x sign(mean load - load_i), added to "
           "the scores for the choice only\n   bias:",
           rate);
    for (int e = 0; e < E && e < 16; e++) printf(" %+.2f", bias[e]);
    printf("\n   with the bias: MaxVio %.3f -> %.3f, CV %.3f -> %.3f; %d of %d choices changed\n",
           st.maxvio, st2.maxvio, st.cv, st2.cv, moved, N * K);
    if (example >= 0) {
        printf("   e.g. byte '%c' of %s: experts", show(tokens[example]), s.domain[example / T]);
        for (int k = 0; k < K; k++) printf(" %d", idx[example * K + k]);
        printf(" -> ");
        for (int k = 0; k < K; k++) printf(" %d", idx2[example * K + k]);
        printf("; its gate weights still come from the unbiased scores:");
        for (int k = 0; k < K; k++) printf(" %.3f", w2[example * K + k]);
        printf("\n");
    }

    free(tokens), free(logits), free(scores), free(lse), free(idx), free(w), free(load);
    free(dw), free(dlogits), free(bias), free(count), free(idx2), free(w2), free(load2);
    model_free(&m);
    shard_free(&s);
    return 0;
}
