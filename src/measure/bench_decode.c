/*
 * bench_decode.c: `moe bench --decode`, the speed of serving a model. See bench.h.
 *
 * A decoding step reads every weight it uses once and does two FLOPs per weight per token of
 * the batch. At batch 1 that is far too little arithmetic per byte for any processor: the step
 * waits on memory, and its time is close to (bytes read) / (memory bandwidth). A batch of B
 * sequences reads the same dense weights once for B tokens, so tokens/s grows almost linearly
 * with B, until the arithmetic catches up with the memory.
 *
 * An MoE bends that curve. One token reads k of the E experts of a layer, as few bytes as a
 * dense model of the same active parameters. But B tokens, routed independently and
 * uniformly, touch on average
 *
 *     E (1 - (1 - k / E)^B)
 *
 * distinct experts (each expert is missed by one token with probability 1 - k / E), and every
 * touched expert is read whole. At batch 64 with k = 2 of E = 8 every expert is read: the MoE
 * step reads all of its (E / k times larger) expert weights, where the dense twin reads its
 * own once. The benchmark measures both models at each batch, counts the experts each step
 * touched, and sets the step time against the memory bound: the bytes it read (weights, and
 * the key-value cache) over the memory bandwidth measured in the same run, on the same backend
 * (a copy of 256 MiB, bytes read and written, the best of 5).
 *
 * The models are the reference configs (random weights, random prompts: routing close to
 * uniform, as the formula assumes), or trained checkpoints (--ckpt; prompts from their
 * validation shard), whose routing is neither uniform nor independent. --quant and --offload
 * serve the experts from a quantized copy or from a file through a bounded cache
 * (src/infer/quant.h, offload.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "infer/decode.h"
#include "infer/serve.h"
#include "io/data.h"
#include "measure/bench_report.h"
#include "model/model.h"
#include "train/checkpoint.h"

/* ---- what is measured -------------------------------------------------------------------- */

typedef struct {
    char name[96];
    int moe, E, K, B, P, steps;
    double prefill_s, step_s;           /* the prefill of B prompts of P tokens; a step's median */
    double prefill_tok_s, decode_tok_s; /* tokens/s */
    double touched, expected;           /* distinct experts a step's MoE layer touched (mean),
                                           and E (1 - (1 - K / E)^B) */
    double weight_bytes, kv_bytes;      /* read by one step (mean) */
    double bytes_per_token;             /* weights read a step / B */
    double bound_s, roof;               /* (weights + cache) / bandwidth; bound_s / step_s */
    double resident_bytes, cache_bytes; /* every weight held; the key-value cache */
    double cache_token_bytes;           /* the cache's bytes a token, all layers: 2 L Hkv D
                                           floats, or L (kv_rank + rope_dim) for latent
                                           attention */
    const char *experts;                /* how the experts were served: fp32, int8, int4, or
                                           offloaded ("offload") */
    int slots;                          /* offloaded: experts resident */
    double hit_rate, loaded_bytes;      /* offloaded: the steps' cache hits, bytes copied a step */
} DecodeRow;

/* The backend's memory bandwidth, bytes/s: a copy of 256 MiB within its memory (the bytes
 * read plus the bytes written, as STREAM's copy counts them), the best of 5 after one warm-up
 * (the first copy maps the pages). */
static double memory_bandwidth(const Backend *be) {
    const size_t bytes = (size_t)256 << 20;
    void *a = be->alloc(be, bytes), *b = be->alloc(be, bytes);
    double best = 0.0;
    for (int r = 0; r < 6; r++) {
        be->sync(be);
        const double t0 = now_seconds();
        be->copy(be, b, a, bytes);
        be->sync(be);
        const double bw = 2.0 * bytes / (now_seconds() - t0);
        if (r > 0 && bw > best) best = bw;
    }
    be->free(be, a);
    be->free(be, b);
    return best;
}

/* Floats a step reads besides the experts: every weight but the expert tensors and the
 * embedding table, plus the B embedding rows it looks up. */
static double dense_floats(const Model *m, int B) {
    const Config *c = &m->cfg;
    const double experts = (double)m->n_moe * c->num_experts * 3.0 * c->d_model * m->spec.d_expert;
    return (double)m->pt.total - experts - (double)c->vocab * c->d_model + (double)B * c->d_model;
}

/* B prompts of P tokens: random ids below V, or windows spread over a validation shard. */
static void prompts_for(int *tokens, int B, int P, int V, const Shard *val, Rng *r) {
    for (int b = 0; b < B; b++) {
        if (!val) {
            for (int t = 0; t < P; t++) tokens[b * P + t] = (int)rng_below(r, (uint64_t)V);
            continue;
        }
        const uint64_t span = val->n_tokens - (uint64_t)P;
        const uint64_t at = span * (uint64_t)b / (uint64_t)B;
        for (int t = 0; t < P; t++) tokens[b * P + t] = val->tokens[at + (uint64_t)t];
    }
}

/* next (B) = the most likely token after each sequence, from logits (B, V). */
static void greedy_tokens(int *next, const float *logits, int B, int V) {
    for (int b = 0; b < B; b++) {
        const float *lg = logits + (size_t)b * V;
        int best = 0;
        for (int v = 1; v < V; v++) best = lg[v] > lg[best] ? v : best;
        next[b] = best;
    }
}

/* A row's bytes a step from what its steps touched (touched: experts a step over the MoE
 * blocks; kv: the cache's bytes read and written a step), and the bound they set at the
 * bandwidth. */
static void row_bytes(DecodeRow *row, Model *m, ServedExperts *sx, double touched, double kv,
                      double bandwidth) {
    const Config *c = &m->cfg;
    const int B = row->B, steps = row->steps, C = c->d_model;
    row->moe = m->n_moe > 0, row->E = c->num_experts, row->K = c->top_k;
    /* an expert's bytes as served: a step reads each touched one whole */
    const double expert_bytes =
        m->n_moe ? served_experts_bytes(sx, m) /
                       (sx->slots ? sx->cache.slots : (double)m->n_moe * c->num_experts)
                 : 0.0;
    row->touched = row->moe ? touched / m->n_moe : NAN;
    row->expected =
        row->moe ? c->num_experts * (1.0 - pow(1.0 - (double)c->top_k / c->num_experts, B)) : NAN;
    row->weight_bytes = dense_floats(m, B) * sizeof(float) +
                        (row->moe ? row->touched * m->n_moe * expert_bytes : 0.0);
    row->kv_bytes = kv;
    row->bytes_per_token = row->weight_bytes / B;
    row->experts = sx->slots ? "offload" : quant_format_name(sx->format);
    row->slots = sx->slots ? sx->cache.slots : 0;
    row->hit_rate = sx->slots ? expert_cache_hit_rate(&sx->cache) : NAN;
    row->loaded_bytes = sx->slots ? (double)sx->cache.bytes_loaded / steps : 0.0;
    /* a miss reads its record and writes it into a slot */
    row->bound_s = (row->weight_bytes + row->kv_bytes + 2.0 * row->loaded_bytes) / bandwidth;
    row->roof = row->bound_s / row->step_s;
    row->resident_bytes = (dense_floats(m, 0) + (double)c->vocab * C) * sizeof(float) +
                          (m->n_moe ? served_experts_bytes(sx, m) : 0.0);
}

/* One model at one batch: prefill, warm-up steps, timed steps (each appends the greedy byte).
 * The experts served as sx says. */
static void measure(DecodeRow *row, Model *m, ServedExperts *sx, const BenchOptions *o,
                    const Shard *val, double bandwidth) {
    const Config *c = &m->cfg;
    const int B = m->state.B, T = m->state.T, L = c->n_layer;
    const int warm = o->warmup, steps = o->steps;
    if (warm + steps > T - 1)
        moe_input_error("bench --decode: %d warm-up and %d timed steps do not fit %s's context of "
                        "%d (each step adds a token to a prompt of at least one); lower --steps or "
                        "--warmup",
                        warm, steps, row->name, T);
    Decoder d;
    char err[512];
    if (decoder_init(&d, m, err, sizeof err) != 0) moe_input_error("bench --decode: %s", err);
    /* a token's keys and values, as this attention caches them (decode.c) */
    const double token_bytes = (double)d.cache_bytes / ((double)B * T);
    const int P = T / 2 < T - warm - steps ? T / 2 : T - warm - steps;
    int *prompts = (int *)malloc_check((size_t)B * P * sizeof(int));
    int *lens = (int *)malloc_check((size_t)B * sizeof(int));
    int *next = (int *)malloc_check((size_t)B * sizeof(int));
    Rng r;
    rng_seed(&r, 1234);
    prompts_for(prompts, B, P, m->cfg.vocab, val, &r);
    for (int b = 0; b < B; b++) lens[b] = P;
    decoder_prefill(&d, 0, B, prompts, P, lens); /* warm: pages, thread pools */
    m->be->sync(m->be);
    double t0 = now_seconds();
    decoder_prefill(&d, 0, B, prompts, P, lens);
    m->be->sync(m->be);
    row->prefill_s = now_seconds() - t0;
    double *times = (double *)malloc_check((size_t)steps * sizeof(double));
    double touched = 0.0, kv = 0.0;
    for (int s = 0; s < warm + steps; s++) {
        greedy_tokens(next, d.logits, B, m->cfg.vocab);
        double cached = 0.0; /* positions each sequence's step reads: its cache and itself */
        for (int b = 0; b < B; b++) cached += d.len[b] + 1;
        m->be->sync(m->be);
        t0 = now_seconds();
        decoder_step(&d, next);
        m->be->sync(m->be);
        if (s + 1 == warm && sx->slots) expert_cache_reset_stats(&sx->cache);
        if (s < warm) continue;
        times[s - warm] = now_seconds() - t0;
        kv += (cached + B) * token_bytes; /* the cache read, the new tokens' rows written */
        for (int l = 0; l < L; l++)
            if (m->state.blocks[l].moe)
                for (int e = 0; e < c->num_experts; e++)
                    touched += m->state.blocks[l].moe->route.routed[e] > 0;
    }
    row->B = B, row->P = P, row->steps = steps;
    row->step_s = bench_median(times, steps);
    row->prefill_tok_s = (double)B * P / row->prefill_s;
    row->decode_tok_s = B / row->step_s;
    row->cache_bytes = (double)d.cache_bytes;
    row->cache_token_bytes = token_bytes;
    row_bytes(row, m, sx, touched / steps, kv / steps, bandwidth);
    free(times);
    free(prompts);
    free(lens);
    free(next);
    decoder_free(&d);
}

/* ---- the report ----------------------------------------------------------------------------- */

static void write_table(FILE *out, const DecodeRow *rows, int n, double bandwidth,
                        const char *device, int threads) {
    fprintf(out,
            "moe bench --decode on %s, %d threads: memory bandwidth %.1f GB/s (a copy of "
            "256 MiB, bytes read + written, best of 5); experts %s",
            device, threads, bandwidth / 1e9, n ? rows[0].experts : "fp32");
    if (n && rows[0].slots) fprintf(out, " through a cache of %d", rows[0].slots);
    fprintf(out, "\n\n");
    fprintf(out, "%-14s %5s %9s %9s %8s %8s %7s %10s %9s %8s %8s\n", "model", "batch", "prefill",
            "decode", "step", "experts", "expect", "MB/token", "KV bytes", "bound", "of bound");
    fprintf(out, "%-14s %5s %9s %9s %8s %8s %7s %10s %9s %8s %8s\n", "", "", "tok/s", "tok/s", "ms",
            "touched", "", "(weights)", "/token", "ms", "");
    for (int i = 0; i < n; i++) {
        const DecodeRow *r = &rows[i];
        char touched[16] = "-", expect[16] = "-";
        if (r->moe) {
            snprintf(touched, sizeof touched, "%.2f", r->touched);
            snprintf(expect, sizeof expect, "%.2f", r->expected);
        }
        fprintf(out, "%-14s %5d %9.0f %9.1f %8.2f %8s %7s %10.3f %9.0f %8.2f %7.0f%%", r->name,
                r->B, r->prefill_tok_s, r->decode_tok_s, r->step_s * 1e3, touched, expect,
                r->bytes_per_token / 1e6, r->cache_token_bytes, r->bound_s * 1e3, 100.0 * r->roof);
        if (r->slots) fprintf(out, "  hits %.0f%%", 100.0 * r->hit_rate);
        fprintf(out, "\n");
    }
    fprintf(out, "\nexperts touched: distinct experts a step's MoE layer reads (of E), against "
                 "E (1 - (1 - k/E)^batch) for independent uniform routing.\nKV bytes/token: the "
                 "key-value cache's bytes a token, all layers (2 L Hkv D floats; latent "
                 "attention: L (kv_rank + rope_dim)).\nbound: the step's bytes (weights read, "
                 "key-value cache) over the memory bandwidth; of bound: how close the step comes "
                 "to it (over 100%%: the\nbytes sat in a cache faster than memory, as a small "
                 "model's do).\n");
}

static const char *const CSV_HEADER =
    "model,moe,experts,top_k,batch,prompt,steps,prefill_s,step_s,prefill_tok_s,decode_tok_s,"
    "experts_touched,experts_expected,weight_bytes_step,kv_bytes_step,weight_bytes_token,"
    "bound_s,of_bound,resident_bytes,cache_bytes,bandwidth_bytes_s,experts_as,slots,hit_rate,"
    "loaded_bytes_step,cache_bytes_token";

static void write_csv_row(FILE *out, const DecodeRow *r, double bandwidth) {
    fprintf(out,
            "%s,%d,%d,%d,%d,%d,%d,%.6g,%.6g,%.6g,%.6g,%.4f,%.4f,%.6g,%.6g,%.6g,%.6g,%.4f,%.6g,"
            "%.6g,%.6g,%s,%d,%.4f,%.6g,%.6g\n",
            r->name, r->moe, r->E, r->K, r->B, r->P, r->steps, r->prefill_s, r->step_s,
            r->prefill_tok_s, r->decode_tok_s, r->touched, r->expected, r->weight_bytes,
            r->kv_bytes, r->bytes_per_token, r->bound_s, r->roof, r->resident_bytes, r->cache_bytes,
            bandwidth, r->experts, r->slots, r->hit_rate, r->loaded_bytes, r->cache_token_bytes);
}

static void write_json_row(FILE *out, const DecodeRow *r, double bandwidth, const char *device,
                           int threads) {
    fprintf(out,
            "{\"bench\": \"decode\", \"device\": \"%s\", \"threads\": %d, \"model\": \"%s\", "
            "\"moe\": %d, \"experts\": %d, \"top_k\": %d, \"batch\": %d, \"prompt\": %d, "
            "\"steps\": %d, \"prefill_tok_s\": %.6g, \"decode_tok_s\": %.6g, \"step_s\": %.6g, ",
            device, threads, r->name, r->moe, r->E, r->K, r->B, r->P, r->steps, r->prefill_tok_s,
            r->decode_tok_s, r->step_s);
    if (r->moe)
        fprintf(out, "\"experts_touched\": %.4f, \"experts_expected\": %.4f, ", r->touched,
                r->expected);
    else
        fprintf(out, "\"experts_touched\": null, \"experts_expected\": null, ");
    fprintf(
        out,
        "\"weight_bytes_step\": %.6g, \"kv_bytes_step\": %.6g, \"weight_bytes_token\": %.6g, "
        "\"bound_s\": %.6g, \"of_bound\": %.4f, \"resident_bytes\": %.6g, \"cache_bytes\": "
        "%.6g, \"cache_bytes_token\": %.6g, \"bandwidth_bytes_s\": %.6g, \"experts_as\": \"%s\", "
        "\"slots\": %d, ",
        r->weight_bytes, r->kv_bytes, r->bytes_per_token, r->bound_s, r->roof, r->resident_bytes,
        r->cache_bytes, r->cache_token_bytes, bandwidth, r->experts, r->slots);
    if (r->slots)
        fprintf(out, "\"hit_rate\": %.4f, \"loaded_bytes_step\": %.6g}\n", r->hit_rate,
                r->loaded_bytes);
    else
        fprintf(out, "\"hit_rate\": null, \"loaded_bytes_step\": 0}\n");
}

/* ---- the run -------------------------------------------------------------------------------- */

/* The models: --ckpt paths (trained), else --config names, else the tiny pair. */
typedef struct {
    const char *name;
    int from_ckpt;
} DecodeModel;

static void load_decode_model(Model *m, const DecodeModel *dm, const BenchOptions *o, int B,
                              Shard *val, int *have_val) {
    Config c;
    char err[1024];
    int T;
    *have_val = 0;
    if (dm->from_ckpt) {
        if (checkpoint_config(dm->name, &c, err, sizeof err) != 0)
            moe_input_error("bench --decode: %s", err);
        if (shard_load(val, c.val, err, sizeof err) != 0 ||
            shard_check_vocab(val, c.vocab, err, sizeof err) != 0)
            moe_input_error("bench --decode --ckpt %s: its validation shard (data.val): %s; the "
                            "prompts come from there",
                            dm->name, err);
        *have_val = 1;
        T = c.seq_len;
    } else {
        int Bref;
        if (bench_config(&c, &Bref, &T, dm->name, err, sizeof err) != 0)
            moe_input_error("bench --decode: %s", err);
    }
    const Backend *be = backend_get(o->device ? o->device : "cpu", o->precision, err, sizeof err);
    if (!be) moe_input_error("bench --decode: %s", err);
    model_init_backend(m, &c, B, T, NULL, be);
    if (dm->from_ckpt && checkpoint_load(m, NULL, dm->name, 0, err, sizeof err) != 0)
        moe_input_error("bench --decode: %s", err);
    if (*have_val && val->n_tokens <= (uint64_t)T)
        moe_input_error("bench --decode --ckpt %s: its validation shard holds %llu tokens, fewer "
                        "than the context of %d",
                        dm->name, (unsigned long long)val->n_tokens, T);
}

int bench_decode_run(const BenchOptions *o, FILE *out, char *err, int errlen) {
    DecodeModel models[BENCH_MAX_CONFIGS];
    int n_models = 0;
    for (int i = 0; i < o->n_ckpts; i++) models[n_models++] = (DecodeModel){o->ckpts[i], 1};
    for (int i = 0; i < o->n_configs && n_models < BENCH_MAX_CONFIGS; i++)
        models[n_models++] = (DecodeModel){o->configs[i], 0};
    if (n_models == 0) {
        models[n_models++] = (DecodeModel){"tiny", 0};
        models[n_models++] = (DecodeModel){"tiny-dense", 0};
    }
    static const int DEFAULT_BATCHES[] = {1, 4, 16, 64};
    const int *batches = o->n_batches ? o->batches : DEFAULT_BATCHES;
    const int n_batches = o->n_batches ? o->n_batches : 4;
    const int threads = backend_set_threads(o->threads);
    const Backend *be = backend_get(o->device ? o->device : "cpu", o->precision, err, errlen);
    if (!be) return -1;
    const double bandwidth = memory_bandwidth(be);
    DecodeRow *rows = (DecodeRow *)calloc_check((size_t)n_models * n_batches, sizeof(DecodeRow));
    int n = 0;
    if (o->csv) fprintf(out, "%s\n", CSV_HEADER);
    /* batch by batch, every model in turn: the models of one batch are measured side by side */
    for (int bi = 0; bi < n_batches; bi++)
        for (int mi = 0; mi < n_models; mi++) {
            Model m;
            Shard val;
            int have_val;
            load_decode_model(&m, &models[mi], o, batches[bi], &val, &have_val);
            DecodeRow *r = &rows[n++];
            snprintf(r->name, sizeof r->name, "%s", models[mi].name);
            ServedExperts sx;
            char why[1024];
            const int slots = m.n_moe ? o->offload : 0, fmt = m.n_moe ? o->quant : QUANT_FP32;
            if (served_experts_attach(&sx, &m, fmt, slots, why, sizeof why) != 0)
                moe_input_error("bench --decode: %s", why);
            measure(r, &m, &sx, o, have_val ? &val : NULL, bandwidth);
            served_experts_detach(&sx, &m);
            if (o->csv) write_csv_row(out, r, bandwidth);
            if (o->json) write_json_row(out, r, bandwidth, be->name, threads);
            fflush(out);
            model_free(&m);
            if (have_val) shard_free(&val);
        }
    if (!o->csv && !o->json) write_table(out, rows, n, bandwidth, be->name, threads);
    free(rows);
    return 0;
}
