/*
 * Chapter 4, upcycle.c: a dense model turned into an MoE, tensor by tensor.
 *
 *   make chapters && build/chapters/04-upcycling/upcycle [--ckpt runs/ch04-dense/ckpt.bin]
 *                                                       [--data SHARD] [--experts E] [--top-k K]
 *
 * It takes a dense checkpoint (the one chapters/04-upcycling/ablate.sh trains first; without
 * it a freshly initialised dense model) and shows:
 *
 *   1. the dense model                     its blocks and parameters
 *   2. the conversion, tensor by tensor    what each tensor of the MoE is made from
 *   3. parameters before and after         total, and active per token
 *   4. the same function                   the loss of the dense model and of its upcycled copy
 *                                           on one batch, for several router initialisations
 *   5. making the copies differ            loss at conversion and expert similarity for noise,
 *                                           drop-upcycling and fine-grained splitting
 *
 * Every function it calls is the engine's own: upcycle_check, upcycle_model
 * (src/convert/upcycle.c), model_expert_similarity (src/model/inspect.c, experts_similarity of
 * src/moe/experts.c), model_forward (src/model/model.c), all of them declared by src/moe.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../chapter.h"

enum { B = 4, T_MAX = 64 }; /* the batch: 4 sequences of up to 64 bytes */
static int T;               /* min(T_MAX, model.seq_len) */

static void usage(void) {
    fprintf(stderr, "usage: upcycle [--ckpt DENSE_CKPT] [--data SHARD] [--experts E] "
                    "[--top-k K]\n");
    exit(MOE_EXIT_INPUT);
}

static void print_shape(const ParamTensor *t) {
    char s[48];
    int n = 0;
    for (int d = 0; d < t->ndim; d++)
        n += snprintf(s + n, sizeof s - (size_t)n, "%s%d", d ? "x" : "", t->shape[d]);
    printf("%-12s", s);
}

/* Where tensor t of the MoE comes from, in words. */
static void describe_source(char *out, size_t n, const ParamTensor *t, const ParamTable *dense,
                            int E) {
    const char *dot = strrchr(t->name, '.');
    if (params_find(dense, t->name) >= 0) {
        snprintf(out, n, "carried over");
    } else if (strstr(t->name, ".moe.router")) {
        snprintf(out, n, "new: N(0, router_std^2)");
    } else {
        /* layers.L.moe.w_gate <- layers.L.ffn.w_gate, E times */
        snprintf(out, n, "%d copies of layers.%d.ffn%s", E, t->layer, dot ? dot : "");
    }
}

/* Mean cross-entropy of m on the batch. */
static float batch_loss(Model *m, const int *inputs, const int *targets) {
    model_forward(m, inputs, targets, B, T, NULL);
    return m->state.loss;
}

/* Mean expert similarity over the MoE blocks of m. */
static double mean_similarity(const Model *m) {
    double s = 0.0;
    int n = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        if (!model_is_moe(m, l)) continue;
        s += model_expert_similarity(m, l);
        n++;
    }
    return n ? s / n : 0.0;
}

/* Upcycle dense into a fresh model of config moe with options o; returns its loss on the batch
 * and its mean expert similarity. */
static float upcycled_loss(const Model *dense, const Config *moe, const UpcycleOptions *o,
                           const int *inputs, const int *targets, double *sim) {
    char err[1024];
    if (upcycle_check(&dense->cfg, moe, o, err, sizeof err) != 0) moe_input_error("%s", err);
    Model m;
    model_init(&m, moe, B, T);
    if (upcycle_model(&m, dense, o, err, sizeof err) != 0) moe_input_error("%s", err);
    float loss = batch_loss(&m, inputs, targets);
    *sim = mean_similarity(&m);
    model_free(&m);
    return loss;
}

int main(int argc, char **argv) {
    const char *ckpt = "runs/ch04-dense/ckpt.bin", *data = "data/corpus/val.bin";
    int ckpt_given = 0, E = 8, K = 2;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--ckpt") == 0)
            ckpt = argv[++i], ckpt_given = 1;
        else if (strcmp(argv[i], "--data") == 0)
            data = argv[++i];
        else if (strcmp(argv[i], "--experts") == 0)
            E = atoi(argv[++i]);
        else if (strcmp(argv[i], "--top-k") == 0)
            K = atoi(argv[++i]);
        else
            usage();
    }
    if (E < 2 || E > 64 || K < 1 || K > E)
        moe_input_error("--experts in [2, 64], --top-k in [1, E]");

    /* ---- 1. the dense model: trained if there is a checkpoint, else fresh ---------------- */
    char err[1024];
    Config dc;
    const int trained = chapter_config(&dc, ckpt, ckpt_given);
    if (!trained) { /* a fresh dense model of the ablation's shape */
        dc.num_experts = 0;
        dc.d_ff = 256;
    }
    if (dc.num_experts > 0)
        moe_input_error("%s is already an MoE (moe.num_experts=%d): give a dense checkpoint", ckpt,
                        dc.num_experts);
    T = dc.seq_len < T_MAX ? dc.seq_len : T_MAX;
    Model dense;
    model_init(&dense, &dc, B, T);
    if (trained && checkpoint_load(&dense, NULL, ckpt, 0, err, sizeof err) != 0)
        moe_input_error("%s", err);
    printf("1. the dense model: %s\n   %d blocks of width %d, SwiGLU hidden %d: %zu parameters\n",
           trained ? ckpt
                   : "freshly initialised (no checkpoint: run chapters/04-upcycling/ablate.sh)",
           dc.n_layer, dc.d_model, dc.d_ff, params_count_total(&dense.pt));

    /* the batch: B windows of T + 1 bytes spread over the shard */
    Shard s;
    if (shard_load(&s, data, err, sizeof err) != 0) moe_input_error("%s", err);
    if (s.n_tokens < (uint64_t)B * (T + 1))
        moe_input_error("%s is too short for %d x %d bytes", data, B, T + 1);
    int *inputs = (int *)malloc_check((size_t)B * T * sizeof(int));
    int *targets = (int *)malloc_check((size_t)B * T * sizeof(int));
    for (int b = 0; b < B; b++) {
        uint64_t start = (s.n_tokens - T - 1) / B * (uint64_t)b;
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = s.tokens[start + (uint64_t)t];
            targets[b * T + t] = s.tokens[start + (uint64_t)t + 1];
        }
    }

    /* ---- 2. the conversion -------------------------------------------------------------- */
    Config mc = dc;
    mc.num_experts = E;
    mc.top_k = K;
    mc.d_expert = dc.d_ff;
    mc.norm_topk = 1;
    mc.num_shared = 0;
    mc.capacity_factor = 0.0f;
    if (config_validate(&mc, err, sizeof err) != 0) moe_input_error("%s", err);
    UpcycleOptions o;
    upcycle_options_default(&o);
    if (upcycle_check(&dc, &mc, &o, err, sizeof err) != 0) moe_input_error("%s", err);
    Model moe;
    model_init(&moe, &mc, B, T);
    if (upcycle_model(&moe, &dense, &o, err, sizeof err) != 0) moe_input_error("%s", err);
    printf("\n2. the conversion into %d experts, top-%d (moe.norm_topk=1), tensor by tensor\n", E,
           K);
    printf("   %-26s %-12s %10s  %s\n", "tensor", "shape", "numel", "made from");
    for (int i = 0; i < moe.pt.n; i++) {
        const ParamTensor *t = &moe.pt.t[i];
        char how[96];
        describe_source(how, sizeof how, t, &dense.pt, E);
        printf("   %-26s ", t->name);
        print_shape(t);
        printf(" %10zu  %s\n", t->numel, how);
    }

    /* ---- 3. parameters ------------------------------------------------------------------ */
    const size_t dt = params_count_total(&dense.pt), da = params_count_active(&dense.pt, &dc);
    const size_t mt = params_count_total(&moe.pt), ma = params_count_active(&moe.pt, &mc);
    printf("\n3. parameters: total %zu -> %zu (x%.2f), active per token %zu -> %zu (x%.2f)\n", dt,
           mt, (double)mt / dt, da, ma, (double)ma / da);
    printf("   each MoE block: + (E - 1) x 3 x F x C = %d x 3 x %d x %d expert weights"
           " + E x C = %d router weights\n",
           E - 1, dc.d_ff, dc.d_model, E * dc.d_model);

    /* ---- 4. the same function ----------------------------------------------------------- */
    const float dense_loss = batch_loss(&dense, inputs, targets);
    printf("\n4. the same function: loss on one batch of %d x %d bytes of %s\n", B, T, data);
    printf("   dense                                loss %.6f\n", dense_loss);
    const float stds[3] = {0.0f, 0.02f, 1.0f};
    for (int i = 0; i < 3; i++) {
        UpcycleOptions r = o;
        r.router_std = stds[i];
        double sim;
        float l = upcycled_loss(&dense, &mc, &r, inputs, targets, &sim);
        printf(
            "   exact copies, router std %-5g       loss %.6f  (%+.2e)  expert similarity %.4f\n",
            (double)stds[i], l, (double)(l - dense_loss), sim);
    }
    printf(
        "   every expert computes FFN(x) and the top-%d weights sum to 1, so the router's\n"
        "   choice changes nothing: sum_k w_k FFN(x) = FFN(x). For the same reason the language-\n"
        "   model loss gives the router no gradient at all (the weights' sum is constant), and\n"
        "   identical experts differ only by the tokens chance sends them: why copies are\n"
        "   made to differ.\n",
        K);

    /* ---- 5. making the copies differ ---------------------------------------------------- */
    printf("\n5. making the copies differ (router std %g): loss at conversion, expert similarity\n",
           (double)o.router_std);
    struct {
        const char *name;
        float noise, drop;
        int split;
    } v[] = {{"noise 0.01", 0.01f, 0.0f, 1},
             {"noise 0.1", 0.1f, 0.0f, 1},
             {"drop-upcycling r=0.25", 0.0f, 0.25f, 1},
             {"drop-upcycling r=0.5", 0.0f, 0.5f, 1},
             {"drop-upcycling r=1", 0.0f, 1.0f, 1},
             {"fine-grained split 2", 0.0f, 0.0f, 2}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        UpcycleOptions r = o;
        r.noise = v[i].noise;
        r.drop_ratio = v[i].drop;
        r.split = v[i].split;
        Config c = mc;
        c.d_expert = dc.d_ff / v[i].split;
        double sim;
        float l = upcycled_loss(&dense, &c, &r, inputs, targets, &sim);
        printf("   %-24s loss %.6f  (%+.4f)  expert similarity %.4f\n", v[i].name, l,
               (double)(l - dense_loss), sim);
    }
    printf(
        "   noise leaves the experts nearly identical. Drop-upcycling re-draws its own random\n"
        "   fraction r of each expert's hidden units, so two experts still share the dense\n"
        "   weights of about (1 - r)^2 of their units: the similarity falls to about (1 - r)^2,\n"
        "   and the loss at conversion rises with r. Splitting into G slices gives G different\n"
        "   experts, each copied E / G times.\n");

    free(inputs);
    free(targets);
    model_free(&moe);
    model_free(&dense);
    shard_free(&s);
    return 0;
}
