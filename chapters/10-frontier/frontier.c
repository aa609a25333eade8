/*
 * Chapter 10, frontier.c: the attention of a frontier block, counted and measured.
 *
 *   make chapters && build/chapters/10-frontier/frontier [--out DIR]
 *   build/chapters/10-frontier/frontier --ckpt runs/ch10-mha/ckpt.bin [--step S] [--ep P]
 *                                       [--csv FILE]
 *
 * Without --ckpt it builds fresh models of the chapter's shape (4 blocks of width 128, 4 query
 * heads of 32 channels, 8 experts top-2 of hidden 256, context 128) with four attentions:
 * multi-head (MHA), grouped-query with 2 and with 1 key-value heads (GQA, MQA) and latent
 * (MLA: a shared latent of 64 and a rotated key of 16, heads of 32 + 16 query-key and 32 value
 * channels), and shows:
 *
 *   1. the parameters and the key-value cache     each model's parameters (all, and active a
 *                                                 token), the bytes its decoder allocated a
 *                                                 token (decoder_init's cache_bytes / (B T))
 *                                                 against the formula: 2 L Hkv D floats for
 *                                                 MHA and GQA, L (kv_rank + rope_dim) for MLA
 *   2. the cache decodes what the full forward computes
 *                                                 each model decodes 24 tokens from the cache
 *                                                 (MLA with its up-projections absorbed) and the
 *                                                 largest difference of its logits from the
 *                                                 full forward's at the same positions
 *   3. published shapes, by the same formula      DeepSeek-V3 (MLA), Qwen3-235B-A22B and
 *                                                 Mixtral 8x7B (GQA), in bf16
 *
 * With --ckpt it reads a trained model instead, runs it on one validation batch and prints one
 * CSV row per block (to FILE with --csv, appended, the header first when FILE is new):
 *   the largest attention logit (q . k / sqrt(D) over the causal pairs, every head), the RMS
 *   of the queries and keys as the attention took them (after model.qk_norm and RoPE), the
 *   largest |router logit|, and where the block's rows would go under expert parallelism over
 *   P processes (--ep, default 4; expert e on process e / (E / P), sequence b's tokens on
 *   process b mod P as data parallelism deals them): processes a token reaches, rows it sends
 *   to other processes, and the processes among those (what a token would send if it went
 *   once to each process, as DeepSeek-V3 sends across nodes; the engine sends a row per
 *   (token, expert): src/model/ep.h).
 *
 * Every number comes from the engine: the models (model_init, model_forward), the decoder
 * (decoder_init, decoder_prefill, decoder_step: src/infer/decode.h), the parameter table
 * (params_count_total, params_count_active) and what the forward computed (model_attn_view,
 * model_route_view: src/model/inspect.h). Only the formula, the logits' maximum and the
 * counting of processes are computed here. It includes src/moe.h alone (through ../chapter.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../chapter.h"

enum { PROMPT = 8, DECODED = 24 }; /* part 2: a prompt of 8 tokens, then 24 decoded */

static void usage(void) {
    fprintf(stderr, "usage: frontier [--out DIR]\n"
                    "       frontier --ckpt CKPT [--step S] [--ep P] [--csv FILE]\n");
    exit(MOE_EXIT_INPUT);
}

/* ---- part 1 and 2: fresh models ------------------------------------------------------------- */

typedef struct {
    const char *name;
    int kv_heads; /* MHA and GQA: key-value heads; 0 for MLA */
    int mla;      /* 1: latent attention of the chapter's ranks */
} Arm;

/* The chapter's shape (chapters/10-frontier/ablate.sh trains the same). */
static void arm_config(Config *c, const Arm *a) {
    config_defaults(c);
    c->d_model = 128, c->n_layer = 4, c->n_head = 4, c->seq_len = 128;
    c->num_experts = 8, c->top_k = 2, c->d_expert = 256;
    c->device = MOE_DEVICE_CPU;
    if (a->mla) {
        c->attention = MOE_ATTN_MLA;
        c->mla_kv_rank = 64, c->mla_rope_dim = 16, c->mla_nope_dim = 32, c->mla_v_dim = 32;
    } else {
        c->kv_heads = a->kv_heads;
    }
    char err[512];
    if (config_validate(c, err, sizeof err) != 0) moe_fatal("%s: %s", a->name, err);
}

/* The cache's floats a token, by the formula the chapter gives. */
static long long cache_floats_formula(const Config *c) {
    if (c->attention == MOE_ATTN_MLA)
        return (long long)c->n_layer * (c->mla_kv_rank + c->mla_rope_dim);
    return 2LL * c->n_layer * config_kv_heads(c) * config_head_dim(c);
}

/* Decode DECODED tokens after a prompt from the cache and compare each step's logits with the
 * full forward's at that position: the largest |difference|. */
static double cached_vs_full(Model *m, Rng *rng) {
    const int V = m->cfg.vocab, n = PROMPT + DECODED;
    int *seq = malloc_check((size_t)n * sizeof(int));
    for (int t = 0; t < n; t++) seq[t] = (int)rng_below(rng, (uint64_t)V);
    char err[512];
    Decoder d;
    if (decoder_init(&d, m, err, sizeof err) != 0) moe_fatal("%s", err);
    int len = PROMPT;
    decoder_prefill(&d, 0, 1, seq, PROMPT, &len);
    float *cached = floats_alloc((size_t)DECODED * V);
    for (int s = 0; s < DECODED; s++) {
        decoder_step(&d, &seq[PROMPT + s]);
        memcpy(cached + (size_t)s * V, d.logits, (size_t)V * sizeof(float));
    }
    decoder_free(&d);
    /* the full forward over the whole sequence: position PROMPT + s predicts after token
     * PROMPT + s, as decoding step s did */
    model_forward(m, seq, NULL, 1, n, NULL);
    double worst = 0.0;
    for (int s = 0; s < DECODED; s++)
        for (int v = 0; v < V; v++) {
            double diff = fabs((double)cached[(size_t)s * V + v] -
                               m->state.logits[(size_t)(PROMPT + s) * V + v]);
            if (diff > worst) worst = diff;
        }
    free(cached);
    free(seq);
    return worst;
}

static void fresh_models(const char *out) {
    static const Arm arms[] = {{"mha", 4, 0}, {"gqa", 2, 0}, {"mqa", 1, 0}, {"mla", 0, 1}};
    const int n_arms = (int)(sizeof arms / sizeof arms[0]);
    FILE *f = NULL;
    if (out) {
        char err[512], path[MOE_PATH_MAX];
        if (make_dirs(out, err, sizeof err) != 0) moe_input_error("%s", err);
        snprintf(path, sizeof path, "%s/cache.csv", out);
        f = fopen_check(path, "w");
        fprintf(f, "arm,params,active,cache_bytes_token,formula_bytes_token,of_mha,"
                   "max_logit_diff\n");
    }
    printf("chapter 10: the frontier block's attention on fresh models (4 blocks of width 128, 4 "
           "query heads, 8 experts top-2 of hidden 256, context 128)\n\n");
    printf("1. parameters and the key-value cache a token (fp32), from decoder_init\n");
    printf("   %-4s %10s %10s %12s %12s %8s\n", "arm", "params", "active", "cache B/tok", "formula",
           "of MHA");
    double mha_bytes = 0.0, diffs[8];
    for (int i = 0; i < n_arms; i++) {
        Config c;
        arm_config(&c, &arms[i]);
        Model m;
        model_init(&m, &c, 1, c.seq_len);
        char err[512];
        Decoder d;
        if (decoder_init(&d, &m, err, sizeof err) != 0) moe_fatal("%s", err);
        const double bytes = (double)d.cache_bytes / ((double)d.B * d.T);
        decoder_free(&d);
        const long long formula = cache_floats_formula(&c) * (long long)sizeof(float);
        if (i == 0) mha_bytes = bytes;
        printf("   %-4s %10zu %10zu %12.0f %12lld %8.3f%s\n", arms[i].name,
               params_count_total(&m.pt), params_count_active(&m.pt, &c), bytes, formula,
               bytes / mha_bytes, bytes == (double)formula ? "" : "  DIFFERS");
        Rng rng;
        rng_seed(&rng, 7);
        diffs[i] = cached_vs_full(&m, &rng);
        if (f)
            fprintf(f, "%s,%zu,%zu,%.0f,%lld,%.4f,%.3g\n", arms[i].name, params_count_total(&m.pt),
                    params_count_active(&m.pt, &c), bytes, formula, bytes / mha_bytes, diffs[i]);
        model_free(&m);
    }
    printf("\n2. %d tokens decoded from the cache after a prompt of %d: the largest |logit| "
           "difference from the full forward\n",
           DECODED, PROMPT);
    for (int i = 0; i < n_arms; i++) printf("   %-4s %.3g\n", arms[i].name, diffs[i]);
    /* the published shapes' cache a token, in bf16 (2 bytes a number), by the formula */
    printf("\n3. published shapes, the formula in bf16 (bytes a token)\n");
    const double dsv3_mla = 61.0 * (512 + 64) * 2, dsv3_mha = 61.0 * 128 * (192 + 128) * 2;
    printf("   DeepSeek-V3     MLA  61 layers x (512 + 64)          %10.0f\n", dsv3_mla);
    printf("   (as MHA)             61 layers x 128 x (192 + 128)    %10.0f  (MLA %.1f%% of it)\n",
           dsv3_mha, 100.0 * dsv3_mla / dsv3_mha);
    printf("   Qwen3-235B-A22B GQA  94 layers x 2 x 4 heads x 128    %10.0f\n",
           94.0 * 2 * 4 * 128 * 2);
    printf("   Mixtral 8x7B    GQA  32 layers x 2 x 8 heads x 128    %10.0f\n",
           32.0 * 2 * 8 * 128 * 2);
    if (f) fclose(f);
}

/* ---- --ckpt: a trained model's attention and routing, block by block ------------------------ */

/* The largest q . k / sqrt(D) over the causal pairs of every sequence and head. */
static double max_attention_logit(const AttnView *a, int B, int T) {
    const int g = a->H / a->Hkv, D = a->D;
    const double scale = 1.0 / sqrt((double)D);
    double best = -INFINITY;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < a->H; h++)
            for (int i = 0; i < T; i++) {
                const float *q = a->q + ((size_t)(b * T + i) * a->H + h) * D;
                for (int j = 0; j <= i; j++) {
                    const float *k = a->k + ((size_t)(b * T + j) * a->Hkv + h / g) * D;
                    double s = 0.0;
                    for (int x = 0; x < D; x++) s += (double)q[x] * k[x];
                    if (s * scale > best) best = s * scale;
                }
            }
    return best;
}

static double rms(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)n);
}

static void trained_model(const char *ckpt, int step, int ep, const char *csv) {
    Config c;
    chapter_config(&c, ckpt, 1);
    c.device = MOE_DEVICE_CPU;
    if (c.num_experts > 0 && c.num_experts % ep != 0)
        moe_input_error("--ep %d does not divide the %d experts of %s", ep, c.num_experts, ckpt);
    char err[1024];
    Shard val;
    if (shard_load(&val, c.val, err, sizeof err) != 0) moe_input_error("data.val: %s", err);
    const int B = c.batch < 4 ? c.batch : 4, T = c.seq_len;
    if (val.n_tokens <= (uint64_t)B * (T + 1)) moe_input_error("data.val %s is too short", c.val);
    Model m;
    model_init(&m, &c, B, T);
    if (checkpoint_load(&m, NULL, ckpt, 0, err, sizeof err) != 0) moe_input_error("%s", err);
    int *in = malloc_check((size_t)B * T * sizeof(int)),
        *tg = malloc_check((size_t)B * T * sizeof(int));
    uint8_t *dm = malloc_check((size_t)B * T);
    loader_val_batch(&val, B, T, 0, 1, in, tg, dm);
    model_forward(&m, in, NULL, B, T, NULL);

    /* the run's name: the checkpoint's folder */
    char run[MOE_PATH_MAX];
    snprintf(run, sizeof run, "%s", ckpt);
    char *slash = strrchr(run, '/');
    if (slash) *slash = '\0';
    slash = strrchr(run, '/');
    const char *name = slash ? slash + 1 : run;

    FILE *f = stdout;
    int fresh = 1;
    if (csv) {
        fresh = !file_exists(csv);
        f = fopen_check(csv, "a");
    }
    if (fresh)
        fprintf(f, "run,step,layer,max_attn_logit,q_rms,k_rms,router_max_logit,procs_per_token,"
                   "remote_rows_per_token,remote_procs_per_token\n");
    for (int l = 0; l < c.n_layer; l++) {
        AttnView a = model_attn_view(&m, l);
        const double ml = max_attention_logit(&a, B, T);
        const double qr = rms(a.q, (size_t)a.N * a.H * a.D),
                     kr = rms(a.k, (size_t)a.N * a.Hkv * a.D);
        RouteView r = model_route_view(&m, l);
        if (!r.logits) {
            fprintf(f, "%s,%d,%d,%.4f,%.4f,%.4f,,,,\n", name, step, l, ml, qr, kr);
            continue;
        }
        /* each token's processes under expert parallelism over ep processes */
        const int per = r.E / ep;
        double procs = 0.0, remote_rows = 0.0, remote_procs = 0.0;
        for (int n = 0; n < r.N; n++) {
            const int home = (n / T) % ep;
            unsigned seen = 0; /* ep <= 32: a bit a process */
            for (int j = 0; j < r.A; j++) {
                const int p = r.idx[(size_t)n * r.A + j] / per;
                if (p != home) remote_rows += 1.0;
                seen |= 1u << p;
            }
            procs += __builtin_popcount(seen);
            remote_procs += __builtin_popcount(seen & ~(1u << home));
        }
        fprintf(f, "%s,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", name, step, l, ml, qr, kr,
                r.max_logit, procs / r.N, remote_rows / r.N, remote_procs / r.N);
    }
    if (csv) fclose(f);
    free(in);
    free(tg);
    free(dm);
    model_free(&m);
    shard_free(&val);
}

int main(int argc, char **argv) {
    const char *out = NULL, *ckpt = NULL, *csv = NULL;
    int step = 0, ep = 4;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--out") == 0)
            out = argv[++i];
        else if (strcmp(argv[i], "--ckpt") == 0)
            ckpt = argv[++i];
        else if (strcmp(argv[i], "--csv") == 0)
            csv = argv[++i];
        else if (strcmp(argv[i], "--step") == 0)
            step = (int)chapter_int(argv[++i], 0, 1LL << 30, usage);
        else if (strcmp(argv[i], "--ep") == 0)
            ep = (int)chapter_int(argv[++i], 1, 32, usage);
        else
            usage();
    }
    if (ckpt) {
        if (out) usage();
        trained_model(ckpt, step, ep, csv);
    } else {
        if (csv) usage();
        fresh_models(out);
    }
    return 0;
}
