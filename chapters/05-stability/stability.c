/*
 * Chapter 5, stability.c: what keeps a deep MoE trainable, measured on one batch at
 * initialisation.
 *
 *   make chapters && build/chapters/05-stability/stability [--layers L] [--width C] [--seed S]
 *                                                         [--data SHARD]
 *
 * It takes one sequence of bytes from each domain of the corpus (as routing.c does), builds
 * freshly initialised models of one deep, narrow shape (16 blocks of width 64, 4 heads, 8
 * experts top-2 of hidden 64 in every block, sequences of 32 bytes; --layers and --width
 * change it) that differ only in where the norms sit and how the weights are drawn, and shows:
 *
 *   1. the residual stream's scale across depth     RMS of resid[l] for pre-norm, sandwich,
 *                                                    DSSN, TinyInit, a 10x smaller init and
 *                                                    DSSN with TinyInit
 *   2. how much each block adds                      RMS(resid[l+1] - resid[l]) / RMS(resid[l])
 *   3. the router logits in fp32 and in bf16         rounding errors and changed top-2 choices,
 *                                                    as the logits grow (x10, x100, + offset);
 *                                                    the whole model under moe.router_precision
 *   4. the z-loss of those logits                    why it keeps them small
 *
 * Every function it calls is the engine's own: model_init and model_forward (model.norm,
 * model.init, model.init_scale: src/model/params.c, model.c), router_scores_forward,
 * router_gate_forward and router_z_loss (src/moe/router.c), vec_round_bf16 (src/nn/vec.c,
 * what moe.router_precision uses). Only the statistics (RMS, quantiles) are computed here.
 *
 * Besides src/moe.h (through ../chapter.h) it includes src/moe/moe_ops.h and src/nn/ops.h: it
 * routes rounded copies of the logits through the router's own pieces, rounded as
 * moe.router_precision rounds them, the study this chapter makes; the models themselves it
 * reads through moe.h (model_block_view, model_route_view).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../chapter.h"
#include "moe/moe_ops.h" /* the router's pieces, run on rounded copies of the logits */
#include "nn/ops.h"      /* vec_round_bf16, the rounding of moe.router_precision; RMSNORM_EPS */

enum { T = 32, HEADS = 4, EXPERTS = 8, TOP_K = 2, MAX_LAYERS = 256 }; /* the fixed shape */

static void usage(void) {
    fprintf(stderr, "usage: stability [--layers L] [--width C] [--seed S] [--data SHARD]\n");
    exit(MOE_EXIT_INPUT);
}

/* ---- trivial statistics --------------------------------------------------------------------- */

static double rms(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)n);
}

static double rms_diff(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        s += d * d;
    }
    return sqrt(s / (double)n);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The spacing of bfloat16 numbers (8 significant bits) around x: 2^(e - 8) for |x| in
 * [2^(e-1), 2^e). */
static double bf16_ulp(double x) {
    int e;
    frexp(fabs(x), &e);
    return ldexp(1.0, e - 8);
}

/* ---- the six initialisations ------------------------------------------------------------------
 */

enum { ARMS = 6 };
static const char *const ARM_NAME[ARMS] = {"pre", "sandwich", "dssn", "tiny", "x0.1", "dssn+tiny"};

/* c with arm a's model.norm, model.init and model.init_scale */
static Config arm_config(const Config *base, int a) {
    Config c = *base;
    c.norm = a == 1 ? MOE_NORM_SANDWICH : a == 2 || a == 5 ? MOE_NORM_DSSN : MOE_NORM_PRE;
    c.init = a == 3 || a == 5 ? MOE_INIT_TINY : MOE_INIT_DEFAULT;
    c.init_scale = a == 4 ? 0.1f : 1.0f;
    char err[1024];
    if (config_validate(&c, err, sizeof err) != 0) moe_input_error("%s", err);
    return c;
}

typedef struct {
    double *resid_rms; /* (L + 1) RMS of resid[l] */
    double *update;    /* (L) RMS(resid[l+1] - resid[l]) / RMS(resid[l]) */
    float loss;
    /* sandwich and dssn: the mean over blocks of the RMS of the attention's and the FFN's
     * outputs before their output norm (raw) and after it (what is added to the stream) */
    double raw_attn, raw_ffn, out_attn, out_ffn;
} Arm;

/* One forward of a fresh model of c on the batch into r (its arrays allocated by the caller). */
static void arm_run(Arm *r, const Config *c, int B, const int *inputs, const int *targets) {
    Model m;
    model_init(&m, c, B, T);
    model_forward(&m, inputs, targets, B, T, NULL);
    const int L = c->n_layer;
    const size_t n = (size_t)B * T * c->d_model;
    for (int l = 0; l < L; l++) r->resid_rms[l] = rms(model_block_view(&m, l).input, n);
    r->resid_rms[L] = rms(model_block_view(&m, L - 1).output, n);
    r->raw_attn = r->raw_ffn = r->out_attn = r->out_ffn = 0.0;
    for (int l = 0; l < L; l++) {
        const BlockView a = model_block_view(&m, l);
        r->update[l] = rms_diff(a.output, a.input, n) / r->resid_rms[l];
        if (!a.attn_out) continue;
        r->raw_attn += rms(a.attn_out, n) / L;
        r->raw_ffn += rms(a.ffn_out, n) / L;
        r->out_attn += rms_diff(a.mid, a.input, n) / L;
        r->out_ffn += rms_diff(a.output, a.mid, n) / L;
    }
    r->loss = m.state.loss;
    model_free(&m);
}

/* 1 when token t chose the same set of K experts in a and b (N, K) */
static int same_set(const int *a, const int *b, int t, int K) {
    for (int k = 0; k < K; k++) {
        int found = 0;
        for (int j = 0; j < K; j++) found |= b[t * K + j] == a[t * K + k];
        if (!found) return 0;
    }
    return 1;
}

/* ---- the router's top-2 in fp32 and bf16 ------------------------------------------------------
 */

typedef struct {
    double max_abs, ulp_max, err_abs, err_rel, lse_mean, z;
    int set_changed, order_changed;
} Rounding;

/* x (N, E) the fp32 logits: round a copy to bf16, route both with the model's spec, compare. */
static Rounding compare_bf16(const float *x, int N, const MoeSpec *s) {
    const int E = s->num_experts, K = s->top_k;
    const size_t n = (size_t)N * E;
    float *r = floats_alloc(n), *scores = floats_alloc(n), *lse = floats_alloc((size_t)N);
    float *w = floats_alloc((size_t)N * K);
    int *idx = (int *)calloc_check((size_t)N * K, sizeof(int));
    int *idx_r = (int *)calloc_check((size_t)N * K, sizeof(int));
    Rounding o = {0};
    vec_round_bf16(r, x, n);
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)x[i]), e = fabs((double)r[i] - x[i]);
        if (a > o.max_abs) o.max_abs = a;
        if (e > o.err_abs) o.err_abs = e;
        if (a > 0.0 && e / a > o.err_rel) o.err_rel = e / a;
    }
    o.ulp_max = bf16_ulp(o.max_abs);
    router_scores_forward(scores, lse, r, N, s);
    router_gate_forward(idx_r, w, scores, r, NULL, N, s);
    router_scores_forward(scores, lse, x, N, s); /* fp32 last: its lse for the z-loss */
    router_gate_forward(idx, w, scores, x, NULL, N, s);
    o.z = router_z_loss(lse, N);
    o.lse_mean = vec_sum(lse, (size_t)N) / N;
    for (int t = 0; t < N; t++) {
        int same_order = 1;
        for (int k = 0; k < K; k++) same_order &= idx_r[t * K + k] == idx[t * K + k];
        const int set = same_set(idx, idx_r, t, K);
        o.set_changed += !set;
        o.order_changed += set && !same_order;
    }
    free(r), free(scores), free(lse), free(w), free(idx), free(idx_r);
    return o;
}

int main(int argc, char **argv) {
    const char *data = "data/corpus/val.bin";
    Config c;
    config_defaults(&c);
    int L = 16, C = 64;
    uint64_t seed = c.seed;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--layers") == 0)
            L = (int)chapter_int(argv[++i], 1, MAX_LAYERS, usage);
        else if (strcmp(argv[i], "--width") == 0)
            C = (int)chapter_int(argv[++i], 1, 4096, usage);
        else if (strcmp(argv[i], "--seed") == 0)
            seed = (uint64_t)chapter_int(argv[++i], 0, 1LL << 62, usage);
        else if (strcmp(argv[i], "--data") == 0)
            data = argv[++i];
        else
            usage();
    }
    if (C % (2 * HEADS) != 0)
        moe_input_error("--width %d: must be a multiple of %d (%d heads of an even size)", C,
                        2 * HEADS, HEADS);

    /* ---- the shape: deep and narrow, an MoE in every block, fp32 router, on the CPU ------- */
    c.d_model = C;
    c.n_layer = L;
    c.n_head = HEADS;
    c.seq_len = T;
    c.d_ff = 4 * C;
    c.num_experts = EXPERTS;
    c.top_k = TOP_K;
    c.d_expert = C;
    c.every = 1;
    c.first_dense = 0;
    c.router_precision = MOE_ROUTER_FP32;
    c.device = MOE_DEVICE_CPU; /* resid and the logits in host memory */
    c.seed = seed;
    char err[1024];
    if (config_validate(&c, err, sizeof err) != 0) moe_input_error("%s", err);

    /* ---- the batch: the first T + 1 bytes of the first long enough document of each domain */
    Shard s;
    if (shard_load(&s, data, err, sizeof err) != 0) moe_input_error("%s", err);
    const int B = (int)s.n_domains, N = B * T;
    int *inputs = (int *)calloc_check((size_t)N, sizeof(int));
    int *targets = (int *)calloc_check((size_t)N, sizeof(int));
    if (shard_domain_batch(&s, T, inputs, targets, err, sizeof err) != 0)
        moe_input_error("%s", err);
    printf("model: %d blocks of width %d, %d heads, %d experts top-%d of hidden %d in every "
           "block, seed %llu\n",
           L, C, HEADS, EXPERTS, TOP_K, C, (unsigned long long)seed);
    printf("batch: %d sequences of %d bytes, one per domain of %s (", B, T, data);
    for (int d = 0; d < B; d++) printf("%s%s", d ? " " : "", s.domain[d]);
    printf(")\n");

    /* ---- 1. the residual stream across depth ------------------------------------------------ */
    Arm arm[ARMS];
    for (int a = 0; a < ARMS; a++) {
        arm[a].resid_rms = (double *)calloc_check((size_t)L + 1, sizeof(double));
        arm[a].update = (double *)calloc_check((size_t)L, sizeof(double));
        Config ca = arm_config(&c, a);
        arm_run(&arm[a], &ca, B, inputs, targets);
    }
    const double sqrt_l = sqrt((double)L);
    printf("\n1. the residual stream's RMS at initialisation: resid[0] the embedding, resid[l] "
           "block l-1's output\n");
    printf("   six models of the same shape and seed:\n");
    printf("     pre        model.norm=pre, model.init=default: std %g, output projections "
           "%g / sqrt(2 L)\n",
           (double)c.init_std, (double)c.init_std);
    printf("     sandwich   model.norm=sandwich: also an RMSNorm (gain 1) on each sublayer's "
           "output\n");
    printf("     dssn       model.norm=dssn: sandwich with the output gains at 0.283 / sqrt(L) = "
           "%.4f\n                (attention) and 0.432 / sqrt(L) = %.4f (FFN)\n",
           PARAMS_DSSN_ATTN / sqrt_l, PARAMS_DSSN_FFN / sqrt_l);
    printf("     tiny       pre-norm, model.init=tiny: matrices std sqrt(1 / (2 C L)) = %.4f, "
           "embedding 0.5\n",
           sqrt(1.0 / (2.0 * C * L)));
    printf("     x0.1       pre-norm, model.init_scale=0.1: every std / 10, the embedding's too "
           "(Switch)\n");
    printf("     dssn+tiny  both (Pangu Ultra's pairing)\n");
    printf("   %-9s", "resid");
    for (int a = 0; a < ARMS; a++) printf(" %10s", ARM_NAME[a]);
    printf("\n");
    for (int l = 0; l <= L; l++) {
        printf("   %-9d", l);
        for (int a = 0; a < ARMS; a++) printf(" %10.4f", arm[a].resid_rms[l]);
        printf("\n");
    }
    printf("   %-9s", "growth");
    for (int a = 0; a < ARMS; a++) printf(" %10.2f", arm[a].resid_rms[L] / arm[a].resid_rms[0]);
    printf("\n   %-9s", "loss");
    for (int a = 0; a < ARMS; a++) printf(" %10.4f", (double)arm[a].loss);
    printf("\n   growth = RMS(resid[%d]) / RMS(resid[0]); loss = the batch's cross-entropy "
           "(ln 256 = %.4f)\n",
           L, log(256.0));
    const Arm *sw = &arm[1];
    printf(
        "   sandwich's output norms: the raw sublayer outputs (BlockActs.attn_out, ffn_out) "
        "average RMS\n   %.4f (attention) and %.4f (FFN), against sqrt(eps) = %.4f of RMSNorm's\n"
        "   x / sqrt(mean x^2 + eps): they come out at RMS %.2f and %.2f, not 1 (that takes "
        "outputs\n   well above sqrt(eps))\n",
        sw->raw_attn, sw->raw_ffn, sqrt((double)RMSNORM_EPS), sw->out_attn, sw->out_ffn);
    printf("   Each sublayer reads a normalised copy of the stream, so what it adds does not "
           "depend on the\n"
           "   stream's scale. Pre-norm adds what its small weights give, a small fraction of "
           "the stream.\n"
           "   Sandwich adds normalised outputs, far larger than an embedding of RMS %.2f: the "
           "first block\n"
           "   buries the embedding and the stream grows with depth. DSSN's gains shrink those "
           "outputs,\n"
           "   yet beside that embedding they still multiply the stream; with TinyInit's "
           "embedding of 0.5\n"
           "   (dssn+tiny) it keeps its scale. Pre-norm's own growth comes with training: "
           "nothing bounds what\n"
           "   its sublayers add once the weights grow, and the output norms are what bound "
           "it.\n",
           arm[0].resid_rms[0]);

    /* ---- 2. relative updates -------------------------------------------------------------- */
    printf("\n2. what each block adds, relative to its input: RMS(resid[l+1] - resid[l]) / "
           "RMS(resid[l])\n");
    printf("   %-9s", "block");
    for (int a = 0; a < ARMS; a++) printf(" %10s", ARM_NAME[a]);
    printf("\n");
    for (int l = 0; l < L; l++) {
        printf("   %-9d", l);
        for (int a = 0; a < ARMS; a++) printf(" %10.4f", arm[a].update[l]);
        printf("\n");
    }
    printf("   A relative update near 1 or above means a block rewrites its input instead of "
           "adding to it,\n"
           "   and a stack of such blocks amplifies every change of the weights: the start of "
           "loss spikes.\n"
           "   Sandwich and DSSN alone rewrite the embedding in the first blocks, then their "
           "updates fall\n"
           "   as the stream grows; dssn+tiny gives every block a small, nearly even share "
           "from the first\n"
           "   step. x0.1 makes every block a near-identity (Switch Transformer's stable "
           "start).\n");

    /* ---- 3. the router logits in fp32 and bf16 ------------------------------------------------
     */
    Model m;
    model_init(&m, &c, B, T);
    model_forward(&m, inputs, targets, B, T, NULL);
    int last = -1;
    for (int l = 0; l < L; l++)
        if (model_is_moe(&m, l)) last = l;
    const RouteView ma = model_route_view(&m, last);
    const size_t nl = (size_t)N * EXPERTS;
    float *mag = floats_alloc(nl), *x = floats_alloc(nl);
    for (size_t i = 0; i < nl; i++) mag[i] = fabsf(ma.logits[i]);
    qsort(mag, nl, sizeof(float), cmp_float);
    printf("\n3. the router logits of block %d (the last MoE block) of the pre-norm model: "
           "%d tokens x %d experts\n",
           last, N, EXPERTS);
    printf("   |logit|: max %.4f (RouteStats.max_logit %.4f), p99 %.4f, median %.4f\n",
           (double)mag[nl - 1], (double)ma.max_logit, (double)mag[(nl - 1) * 99 / 100],
           (double)mag[(nl - 1) / 2]);
    printf("   a copy rounded to bf16 (vec_round_bf16, what moe.router_precision=bf16_logits "
           "does); both routed\n   top-%d by the model's router (router_scores_forward, "
           "router_gate_forward); the same as the\n   logits grow: times 10 and 100, and plus "
           "a common offset (the same softmax and fp32 choice)\n",
           TOP_K);
    printf("   %-10s %10s %10s %12s %12s %12s %12s\n", "logits", "max|logit|", "bf16 ulp",
           "max abs err", "max rel err", "top-2 set", "top-2 order");
    printf("   %-10s %10s %10s %12s %12s %12s %12s\n", "", "", "at max", "", "", "changed",
           "changed");
    struct {
        const char *name;
        float scale, shift;
    } v[] = {{"x1", 1.0f, 0.0f},
             {"x10", 10.0f, 0.0f},
             {"x100", 100.0f, 0.0f},
             {"x1 + 10", 1.0f, 10.0f},
             {"x1 + 100", 1.0f, 100.0f}};
    enum { NV = sizeof v / sizeof v[0] };
    Rounding r[NV];
    for (int i = 0; i < NV; i++) {
        for (size_t j = 0; j < nl; j++) x[j] = ma.logits[j] * v[i].scale + v[i].shift;
        r[i] = compare_bf16(x, N, &m.spec);
        printf("   %-10s %10.3f %10.4g %12.3g %12.3g %6d / %-3d %6d / %-3d\n", v[i].name,
               r[i].max_abs, r[i].ulp_max, r[i].err_abs, r[i].err_rel, r[i].set_changed, N,
               r[i].order_changed, N);
    }
    printf("   (top-2 order changed: the same two experts, the other one first)\n");
    printf("   bf16 keeps 8 significant bits: the relative error is at most 2^-8 = %.5f at "
           "every scale,\n"
           "   and the spacing doubles with every power of 2 of the magnitude. Scaling the "
           "logits scales\n"
           "   their differences too, so the choice changes about as rarely at x10 and x100 as "
           "at x1. A\n"
           "   common offset grows the spacing but not the differences that decide the top-%d: "
           "at %.0f the\n"
           "   spacing is %g, and rounding erases every gap smaller than that.\n",
           ldexp(1.0, -8), TOP_K, (double)v[NV - 1].shift, bf16_ulp(v[NV - 1].shift));
    /* the engine's own setting, on the whole model */
    printf("   the engine's moe.router_precision on the whole model (every block's router "
           "rounded):\n");
    static const char *const PREC[3] = {"fp32", "bf16_logits", "bf16"};
    for (int p = 0; p < 3; p++) {
        Config cp = c;
        cp.router_precision = p;
        Model mp;
        model_init(&mp, &cp, B, T);
        model_forward(&mp, inputs, targets, B, T, NULL);
        const int *idx = model_route_view(&mp, last).idx;
        int changed = 0;
        for (int t = 0; t < N; t++) changed += !same_set(ma.idx, idx, t, TOP_K);
        printf("     %-12s loss %.6f, block %d's top-2 set changed for %d / %d tokens\n", PREC[p],
               (double)mp.state.loss, last, changed, N);
        model_free(&mp);
    }

    /* ---- 4. the z-loss --------------------------------------------------------------------------
     */
    printf("\n4. the z-loss of the same logits: the mean over tokens of logsumexp(logits)^2 "
           "(router_z_loss)\n");
    printf("   %-10s %10s %12s %16s\n", "logits", "mean lse", "z-loss", "z_coef x z-loss");
    for (int i = 0; i < NV; i++)
        printf("   %-10s %10.3f %12.4g %16.4g\n", v[i].name, r[i].lse_mean, r[i].z,
               (double)c.z_coef * r[i].z);
    printf("   moe.z_coef = %g. Near-uniform logits already give lse = ln %d = %.3f. The "
           "logsumexp follows\n"
           "   the largest logit once the logits are large (x100) and a common offset one for "
           "one, and the\n"
           "   z-loss is its square: its gradient pulls the logsumexp back towards 0 and keeps "
           "the logits\n"
           "   where bf16's spacing is fine. The language-model loss alone would not, as the "
           "softmax gives\n"
           "   a common offset no gradient.\n",
           (double)c.z_coef, EXPERTS, log((double)EXPERTS));

    for (int a = 0; a < ARMS; a++) free(arm[a].resid_rms), free(arm[a].update);
    free(mag), free(x), free(inputs), free(targets);
    model_free(&m);
    shard_free(&s);
    return 0;
}
