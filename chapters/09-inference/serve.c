/*
 * Chapter 9, serve.c: a trained MoE served three ways, measured on its validation text.
 *
 *   make chapters && build/chapters/09-inference/serve [--ckpt PATH] [--out DIR]
 *                                                      [--tokens N] [--batches N]
 *
 * For the checkpoint (default runs/ch09-moe/ckpt.bin) it prints, and with --out writes as CSV:
 *
 *   1. cache.csv    one sequence decoded greedily from a one-byte prompt to the end of the
 *                   context, with the key-value cache and with a full forward at every
 *                   byte: the same bytes, the time each way, the largest logit difference
 *   2. quant.csv    the experts in fp32, int8 and int4 (everything else fp32): validation
 *                   loss and its change, the experts' bytes, each format's error per expert
 *                   (mean and largest); quant_experts.csv the error of every expert and its
 *                   share of the validation tokens' assignments
 *   3. offload.csv  --tokens N bytes decoded from each of 8 validation prompts, one at a time
 *                   (batch 1), with the experts in a file and a cache of 1 to every expert:
 *                   the cache's hit rate, the bytes loaded a token, tokens/s; and the routing
 *                   trace of the decoded tokens replayed through an empty LRU cache of the
 *                   same size, in its order and with its tokens shuffled (each token's
 *                   experts kept together, their order lost): what routing locality, the reuse
 *                   of one token's experts by the next, buys
 *
 * Every function it calls is the engine's: model_forward and the decoder (src/infer/decode.h),
 * evaluate (src/train/train.h), quant_experts_* (src/infer/quant.h), expert_file_write,
 * expert_cache_* and lru_hit_rate (src/infer/offload.h), each expert's assignments
 * (model_route_view, src/model/inspect.h), all of them declared by src/moe.h. Only the timing
 * and the shuffle are here.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../chapter.h"

enum { PROMPTS = 8 };

static void usage(void) {
    fprintf(stderr, "usage: serve [--ckpt PATH] [--out DIR] [--tokens N] [--batches N]\n");
    exit(MOE_EXIT_INPUT);
}

/* a CSV file under out, or NULL without --out */
static FILE *csv(const char *out, const char *name, const char *header) {
    if (!out) return NULL;
    char path[MOE_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", out, name);
    FILE *f = fopen(path, "w");
    if (!f) moe_input_error("cannot write %s: %s", path, strerror(errno));
    fprintf(f, "%s\n", header);
    return f;
}

/* the most likely of the V tokens (model.vocab; 256: bytes) */
static int greedy(const float *logits, int V) {
    int best = 0;
    for (int v = 1; v < V; v++) best = logits[v] > logits[best] ? v : best;
    return best;
}

/* ---- 1. the cache against the full forward ------------------------------------------------- */

static void cache_demo(Model *m, FILE *f) {
    const int T = m->state.T, V = m->cfg.vocab;
    Decoder d;
    char err[512];
    if (decoder_init(&d, m, err, sizeof err) != 0) moe_input_error("%s", err);
    int *seq = (int *)malloc_check((size_t)T * sizeof(int));
    float *cached = floats_alloc((size_t)T * V);
    seq[0] = '\n';
    const int one = 1;
    double t0 = now_seconds();
    decoder_prefill(&d, 0, 1, seq, 1, &one);
    memcpy(cached, d.logits, V * sizeof(float));
    for (int t = 1; t < T; t++) {
        seq[t] = greedy(d.logits, V);
        decoder_step(&d, &seq[t]);
        memcpy(cached + (size_t)t * V, d.logits, V * sizeof(float));
    }
    const double t_cache = now_seconds() - t0;
    /* the full forward at every length: the same bytes, and each length's last row */
    double worst = 0.0;
    int same = 1;
    t0 = now_seconds();
    for (int t = 0; t < T; t++) {
        model_forward(m, seq, NULL, 1, t + 1, NULL);
        const float *row = m->state.logits + (size_t)t * V;
        if (t + 1 < T && greedy(row, V) != seq[t + 1]) same = 0;
        for (int v = 0; v < V; v++) {
            const double e = fabs((double)row[v] - cached[(size_t)t * V + v]);
            worst = e > worst ? e : worst;
        }
    }
    const double t_full = now_seconds() - t0;
    printf("1. one sequence decoded to its context of %d bytes\n", T);
    printf("   with the cache          %8.1f ms  (%.0f tokens/s)\n", t_cache * 1e3, T / t_cache);
    printf("   full forward each byte  %8.1f ms  (%.0f tokens/s), %.1fx the time\n", t_full * 1e3,
           T / t_full, t_full / t_cache);
    printf("   same bytes: %s; largest logit difference %.2g\n\n", same ? "yes" : "NO", worst);
    if (f) fprintf(f, "%d,%.6g,%.6g,%d,%.3g\n", T, t_cache, t_full, same, worst);
    free(seq);
    free(cached);
    decoder_free(&d);
}

/* ---- 2. quantized experts ------------------------------------------------------------------ */

/* each expert's share of the assignments of a validation pass, (n_moe, E) */
static void expert_shares(Model *m, const Shard *val, int batches, double *share) {
    RunState *rs = &m->state;
    const int E = m->cfg.num_experts;
    memset(share, 0, sizeof(double) * (size_t)m->n_moe * E);
    const int N = rs->B * rs->T;
    int *in = (int *)malloc_check((size_t)N * sizeof(int));
    int *tg = (int *)malloc_check((size_t)N * sizeof(int));
    uint8_t *dm = (uint8_t *)malloc_check((size_t)N);
    for (int b = 0; b < batches; b++) {
        loader_val_batch(val, rs->B, rs->T, b, batches, in, tg, dm);
        model_forward(m, in, NULL, rs->B, rs->T, NULL);
        for (int l = 0, j = 0; l < m->cfg.n_layer; l++)
            if (model_is_moe(m, l)) {
                const int *routed = model_route_view(m, l).routed;
                for (int e = 0; e < E; e++) share[j * E + e] += routed[e];
                j++;
            }
    }
    for (int j = 0; j < m->n_moe; j++) {
        double s = 0.0;
        for (int e = 0; e < E; e++) s += share[j * E + e];
        for (int e = 0; e < E; e++) share[j * E + e] /= s > 0.0 ? s : 1.0;
    }
    free(in), free(tg), free(dm);
}

static void quant_study(Model *m, const Shard *val, int batches, FILE *f, FILE *fe) {
    const int E = m->cfg.num_experts, n = m->n_moe * E;
    const float base = evaluate(m, val, batches, NULL);
    double *share = (double *)malloc_check(sizeof(double) * (size_t)n);
    double *err[3];
    expert_shares(m, val, batches, share);
    printf("2. the experts quantized (router, attention, norms, embedding and head in fp32)\n");
    printf("   %-6s %10s %9s %11s %13s %13s\n", "format", "val loss", "change", "experts MB",
           "error: mean", "largest");
    for (int fmt = QUANT_FP32; fmt <= QUANT_INT4; fmt++) {
        QuantExperts qe;
        quant_experts_init(&qe, m, fmt, m->state.B * m->state.T);
        err[fmt] = (double *)malloc_check(sizeof(double) * (size_t)n);
        quant_experts_error(&qe, m, err[fmt]);
        m->expert_source = &qe.src;
        const float loss = evaluate(m, val, batches, NULL);
        m->expert_source = NULL;
        double mean = 0.0, worst = 0.0;
        for (int i = 0; i < n; i++) {
            mean += err[fmt][i] / n;
            worst = err[fmt][i] > worst ? err[fmt][i] : worst;
        }
        printf("   %-6s %10.4f %+9.4f %11.2f %13.4f %13.4f\n", quant_format_name(fmt), loss,
               loss - base, qe.bytes / 1e6, mean, worst);
        if (f)
            fprintf(f, "%s,%.6f,%.6f,%zu,%zu,%.6f,%.6f\n", quant_format_name(fmt), loss,
                    loss - base, qe.bytes, qe.fp32_bytes, mean, worst);
        quant_experts_free(&qe);
    }
    printf("   (validation loss over %d batches of %d x %d tokens; error: ||W - W'|| / ||W|| of "
           "each expert's three matrices)\n\n",
           batches, m->state.B, m->state.T);
    for (int i = 0; fe && i < n; i++)
        fprintf(fe, "%d,%d,%.6f,%.6f,%.6f\n", i / E, i % E, share[i], err[QUANT_INT8][i],
                err[QUANT_INT4][i]);
    for (int fmt = QUANT_FP32; fmt <= QUANT_INT4; fmt++) free(err[fmt]);
    free(share);
}

/* ---- 3. offloaded experts ------------------------------------------------------------------ */

/* the trace with its tokens in another order: blocks of `per` keys (one token's experts, every
 * MoE layer) shuffled by a fixed seed */
static void shuffle_steps(int *out, const int *trace, size_t n, size_t per) {
    const size_t steps = n / per;
    size_t *order = (size_t *)malloc_check(steps * sizeof(size_t));
    for (size_t s = 0; s < steps; s++) order[s] = s;
    Rng r;
    rng_seed(&r, 99);
    for (size_t s = steps; s > 1; s--) {
        const size_t j = (size_t)rng_below(&r, s), t = order[s - 1];
        order[s - 1] = order[j], order[j] = t;
    }
    for (size_t s = 0; s < steps; s++)
        memcpy(out + s * per, trace + order[s] * per, per * sizeof(int));
    free(order);
}

static void offload_study(Model *m, const Shard *val, int tokens, FILE *f) {
    const int E = m->cfg.num_experts, K = m->cfg.top_k, keys = m->n_moe * E, T = m->state.T;
    char path[MOE_PATH_MAX], err[1024];
    if (expert_file_write_temp(m, path, sizeof path, err, sizeof err) != 0)
        moe_input_error("%s", err);
    const int P = T / 2 < T - tokens ? T / 2 : T - tokens;
    if (P < 1) moe_input_error("--tokens %d leaves no room for a prompt in %d", tokens, T);
    printf("3. the experts in a file, a cache of some resident (LRU), batch 1: %d prompts of %d "
           "bytes, %d bytes decoded from each\n",
           PROMPTS, P, tokens);
    printf("   %5s %9s %12s %10s %16s %16s\n", "slots", "hit rate", "MB a token", "tokens/s",
           "replayed: order", "shuffled");
    const int sizes[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int slots = sizes[si] < keys ? sizes[si] : keys;
        if (si > 0 && slots == (sizes[si - 1] < keys ? sizes[si - 1] : keys)) break;
        ExpertCache ec;
        if (expert_cache_open(&ec, m, path, slots, m->state.B * m->state.T, err, sizeof err) != 0)
            moe_input_error("%s", err);
        m->expert_source = &ec.src;
        Decoder d;
        if (decoder_init(&d, m, err, sizeof err) != 0) moe_input_error("%s", err);
        int *prompt = (int *)malloc_check((size_t)P * sizeof(int));
        double seconds = 0.0;
        long long hits = 0, misses = 0;
        size_t loaded = 0;
        int *trace = NULL;
        size_t trace_len = 0;
        for (int p = 0; p < PROMPTS; p++) {
            const uint64_t at = (val->n_tokens - (uint64_t)T) * (uint64_t)p / PROMPTS;
            for (int t = 0; t < P; t++) prompt[t] = val->tokens[at + (uint64_t)t];
            decoder_prefill(&d, 0, 1, prompt, P, &P);
            /* the prefill warms the cache; the decoded tokens are measured */
            expert_cache_reset_stats(&ec);
            expert_cache_record_trace(&ec, 1);
            const double t0 = now_seconds();
            for (int s = 0; s < tokens; s++) {
                const int next = greedy(d.logits, m->cfg.vocab);
                decoder_step(&d, &next);
            }
            seconds += now_seconds() - t0;
            hits += ec.hits, misses += ec.misses, loaded += ec.bytes_loaded;
            trace = (int *)realloc_check(trace, (trace_len + ec.trace_len) * sizeof(int));
            memcpy(trace + trace_len, ec.trace, ec.trace_len * sizeof(int));
            trace_len += ec.trace_len;
            expert_cache_record_trace(&ec, 0);
        }
        /* a step touches K experts of each MoE layer at batch 1: blocks of n_moe K keys */
        const size_t per = (size_t)m->n_moe * K;
        if (trace_len % per)
            moe_fatal("serve: a trace of %zu keys, not steps of %zu", trace_len, per);
        int *shuffled = (int *)malloc_check(trace_len * sizeof(int));
        shuffle_steps(shuffled, trace, trace_len, per);
        /* the cache's own hit rate (its slots warmed by each prompt's prefill), and the trace
         * of the decoded tokens replayed from a cold cache in its order and shuffled */
        const double hit = (double)hits / (double)(hits + misses);
        const double replay = lru_hit_rate(trace, trace_len, keys, slots);
        const double hit_shuffled = lru_hit_rate(shuffled, trace_len, keys, slots);
        const double n_tok = (double)PROMPTS * tokens;
        printf("   %5d %8.1f%% %12.3f %10.0f %15.1f%% %15.1f%%\n", slots, 100.0 * hit,
               loaded / n_tok / 1e6, n_tok / seconds, 100.0 * replay, 100.0 * hit_shuffled);
        if (f)
            fprintf(f, "%d,%d,%.6f,%.6f,%.6f,%.6g,%.6g\n", slots, keys, hit, replay, hit_shuffled,
                    loaded / n_tok, n_tok / seconds);
        free(shuffled), free(trace), free(prompt);
        decoder_free(&d);
        m->expert_source = NULL;
        expert_cache_close(&ec);
    }
    printf(
        "   (%d experts in all, %d MoE layers of %d. Replayed: the decoded tokens' experts through "
        "an empty LRU cache of the same size, in their order, and with the tokens shuffled)\n",
        keys, m->n_moe, E);
    unlink(path);
}

int main(int argc, char **argv) {
    const char *ckpt = "runs/ch09-moe/ckpt.bin", *out = NULL;
    int given = 0, tokens = 48, batches = 8;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--ckpt") == 0)
            ckpt = argv[++i], given = 1;
        else if (strcmp(argv[i], "--out") == 0)
            out = argv[++i];
        else if (strcmp(argv[i], "--tokens") == 0)
            tokens = (int)chapter_int(argv[++i], 1, 1 << 20, usage);
        else if (strcmp(argv[i], "--batches") == 0)
            batches = (int)chapter_int(argv[++i], 1, 1 << 16, usage);
        else
            usage();
    }
    Config c;
    if (!chapter_config(&c, ckpt, given))
        moe_input_error("no checkpoint at %s: train it with bash chapters/09-inference/ablate.sh "
                        "(or name one with --ckpt)",
                        ckpt);
    if (c.num_experts == 0) moe_input_error("%s is a dense model: serve an MoE", ckpt);
    char err[1024];
    Shard val;
    if (shard_load(&val, c.val, err, sizeof err) != 0 ||
        shard_check_vocab(&val, c.vocab, err, sizeof err) != 0)
        moe_input_error("data.val: %s", err);
    if (val.n_tokens <= (uint64_t)c.seq_len * PROMPTS)
        moe_input_error("data.val %s is too short for %d prompts", c.val, PROMPTS);
    c.device = MOE_DEVICE_CPU; /* quantized and offloaded experts are the CPU's */
    /* m evaluates batches of the run's shape; m1 decodes one sequence at a time */
    Model m, m1;
    model_init(&m, &c, c.batch, c.seq_len);
    model_init(&m1, &c, 1, c.seq_len);
    if (checkpoint_load(&m, NULL, ckpt, 0, err, sizeof err) != 0 ||
        checkpoint_load(&m1, NULL, ckpt, 0, err, sizeof err) != 0)
        moe_input_error("%s", err);
    m.spec.eval_capacity_factor = 0.0f; /* served dropless, every part of it */
    printf("chapter 9: serving %s (%d blocks of width %d, %d experts top-%d of hidden %d, "
           "context %d)\n\n",
           ckpt, c.n_layer, c.d_model, c.num_experts, c.top_k, m.spec.d_expert, c.seq_len);
    if (out) {
        char e2[512];
        if (make_dirs(out, e2, sizeof e2) != 0) moe_input_error("%s", e2);
    }
    FILE *f1 = csv(out, "cache.csv", "context,cached_s,full_s,same_bytes,max_logit_diff");
    cache_demo(&m1, f1);
    FILE *f2 = csv(out, "quant.csv",
                   "format,val_loss,change,expert_bytes,expert_bytes_fp32,error_mean,error_max");
    FILE *f3 = csv(out, "quant_experts.csv", "moe_layer,expert,share,error_int8,error_int4");
    quant_study(&m, &val, batches, f2, f3);
    FILE *f4 =
        csv(out, "offload.csv",
            "slots,experts,hit_rate,replay_in_order,replay_shuffled,loaded_bytes_token,tokens_s");
    offload_study(&m1, &val, tokens, f4);
    FILE *all[] = {f1, f2, f3, f4};
    for (size_t i = 0; i < 4; i++)
        if (all[i]) fclose(all[i]);
    model_free(&m);
    model_free(&m1);
    shard_free(&val);
    return 0;
}
