/*
 * test_offload.c: experts loaded on demand (src/infer/offload.h) compute what resident ones do.
 *
 *   - the expert file: each record is the model's expert, byte for byte; a file written from a
 *     model of another shape, a truncated one and one that is not an expert file are refused
 *     with a message naming what is wrong;
 *   - the cache as the model's expert source, with far fewer slots than experts: the logits of
 *     a forward equal the resident model's (bit for bit on cpu-ref), and it counts one hit or
 *     miss per expert a call gives rows to; with a slot per expert only first touches miss;
 *   - decoding through the cache gives the resident decoder's logits, and the cache's hits are
 *     those of lru_hit_rate replayed over the keys it touched;
 *   - lru_hit_rate on hand-built traces with answers worked out by hand.
 */
#include <string.h>

#include "backend_util.h"
#include "infer/decode.h"
#include "infer/offload.h"

enum { BATCH = 2, CTX = 12 };

/* 2 MoE layers of 8 experts, top-2: 16 (layer, expert) keys */
static Config moe_config(void) {
    Config c;
    config_defaults(&c);
    c.d_model = 16;
    c.n_layer = 2;
    c.n_head = 2;
    c.seq_len = CTX;
    c.d_ff = 24;
    c.num_experts = 8;
    c.top_k = 2;
    c.d_expert = 12;
    c.first_dense = 0;
    c.init_std = 0.2f; /* livelier routing than training's start */
    c.seed = 7;
    return c;
}

/* ---- the expert file ------------------------------------------------------------------------ */

START_TEST(test_file_records_are_the_weights) {
    tmp_dir_make("offload");
    Config c = moe_config();
    c.n_layer = 3;
    c.first_dense = 1; /* the MoE layers are blocks 1 and 2 */
    Model m;
    model_init_backend(&m, &c, 1, CTX, NULL, &backend_cpu_ref);
    char err[512] = "";
    const char *path = tmp_path("experts.bin");
    ck_assert_msg(expert_file_write(&m, path, err, sizeof err) == 0, "%s", err);
    ExpertFile f;
    ck_assert_msg(expert_file_open(&f, &m, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(f.n_moe, 2);
    const int E = c.num_experts;
    const size_t FC = (size_t)c.d_expert * c.d_model, bytes = FC * sizeof(float);
    ck_assert_uint_eq(f.bytes, EXPERT_FILE_HEADER_BYTES + (size_t)2 * E * 3 * bytes);
    for (int l = 1; l < 3; l++)
        for (int e = 0; e < E; e++) {
            const float *r = expert_file_record(&f, l - 1, e);
            ck_assert_msg(memcmp(r, m.w.layers[l].e_gate + e * FC, bytes) == 0, "Wg %d %d", l, e);
            ck_assert_msg(memcmp(r + FC, m.w.layers[l].e_up + e * FC, bytes) == 0, "Wu %d %d", l,
                          e);
            ck_assert_msg(memcmp(r + 2 * FC, m.w.layers[l].e_down + e * FC, bytes) == 0, "Wd %d %d",
                          l, e);
        }
    expert_file_close(&f);
    ck_assert_ptr_null(f.map);
    model_free(&m);
    tmp_dir_remove();
}
END_TEST

/* The file of a model changed by `change`, opened against the model of moe_config: refused,
 * the message naming `field`. */
static void expect_shape_refused(void (*change)(Config *), const char *field) {
    Config c = moe_config(), other = moe_config();
    change(&other);
    Model m, o;
    model_init_backend(&m, &c, 1, CTX, NULL, &backend_cpu_ref);
    model_init_backend(&o, &other, 1, CTX, NULL, &backend_cpu_ref);
    char err[512] = "";
    const char *path = tmp_path("other.bin");
    ck_assert_msg(expert_file_write(&o, path, err, sizeof err) == 0, "%s", err);
    ExpertFile f;
    ck_assert_int_eq(expert_file_open(&f, &m, path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, field) != NULL, "%s: message: %s", field, err);
    ExpertCache ec;
    err[0] = '\0';
    ck_assert_int_eq(expert_cache_open(&ec, &m, path, 4, CTX, err, sizeof err), -1);
    ck_assert_msg(strstr(err, field) != NULL, "%s (the cache): message: %s", field, err);
    model_free(&o);
    model_free(&m);
}
static void fewer_experts(Config *c) {
    c->num_experts = 4;
}
static void wider(Config *c) {
    c->d_model = 32;
}
static void narrower_experts(Config *c) {
    c->d_expert = 8;
}
static void dense_first(Config *c) {
    c->first_dense = 1;
}

START_TEST(test_file_of_another_shape_refused) {
    tmp_dir_make("offload");
    expect_shape_refused(fewer_experts, "num_experts 4, the model has 8");
    expect_shape_refused(wider, "d_model 32, the model has 16");
    expect_shape_refused(narrower_experts, "d_expert 8, the model has 12");
    expect_shape_refused(dense_first, "n_moe_layers 1, the model has 2");
    tmp_dir_remove();
}
END_TEST

START_TEST(test_truncated_or_foreign_file_refused) {
    tmp_dir_make("offload");
    Config c = moe_config();
    Model m;
    model_init_backend(&m, &c, 1, CTX, NULL, &backend_cpu_ref);
    char err[512] = "";
    const char *path = tmp_path("experts.bin"), *cut = tmp_path("cut.bin");
    ck_assert_msg(expert_file_write(&m, path, err, sizeof err) == 0, "%s", err);
    long n;
    uint8_t *bytes = slurp(path, &n);
    ExpertFile f;
    /* one float short of the last record; then shorter than the header */
    spit(cut, bytes, n - 4);
    ck_assert_int_eq(expert_file_open(&f, &m, cut, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "truncated"), "message: %s", err);
    spit(cut, bytes, 10);
    ck_assert_int_eq(expert_file_open(&f, &m, cut, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "truncated") && strstr(err, "header"), "message: %s", err);
    /* a byte too many */
    uint8_t *longer = (uint8_t *)calloc_check((size_t)n + 1, 1);
    memcpy(longer, bytes, (size_t)n);
    spit(cut, longer, n + 1);
    ck_assert_int_eq(expert_file_open(&f, &m, cut, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "trailing"), "message: %s", err);
    /* not an expert file; another version */
    bytes[0] = 'X';
    spit(cut, bytes, n);
    ck_assert_int_eq(expert_file_open(&f, &m, cut, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "not an expert file"), "message: %s", err);
    bytes[0] = 'M';
    bytes[4] = 99;
    spit(cut, bytes, n);
    ck_assert_int_eq(expert_file_open(&f, &m, cut, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "version 99"), "message: %s", err);
    /* and the untouched file still opens */
    ck_assert_msg(expert_file_open(&f, &m, path, err, sizeof err) == 0, "%s", err);
    expert_file_close(&f);
    free(longer);
    free(bytes);
    model_free(&m);
    tmp_dir_remove();
}
END_TEST

/* ---- the cache as the model's expert source ------------------------------------------------- */

/* The (layer, expert) pairs the last forward gave rows to: its MoE blocks' plans. */
static long long touches_of_last_forward(const Model *m) {
    long long n = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const MoeActs *a = m->state.blocks[l].moe;
        if (!a) continue;
        for (int e = 0; e < m->cfg.num_experts; e++)
            n += a->plan.offsets[e + 1] > a->plan.offsets[e];
    }
    return n;
}

static const Backend *const CACHE_BACKENDS[] = {&backend_cpu_ref, &backend_cpu};

START_TEST(test_cache_gives_the_resident_logits) {
    const Backend *be = CACHE_BACKENDS[_i];
    tmp_dir_make("offload");
    const Config c = moe_config();
    Model m;
    model_init_backend(&m, &c, BATCH, CTX, NULL, be);
    char err[512] = "";
    const char *path = tmp_path("experts.bin");
    ck_assert_msg(expert_file_write(&m, path, err, sizeof err) == 0, "%s", err);
    int in[BATCH * CTX], unused[BATCH * CTX];
    random_tokens(in, unused, BATCH * CTX, 3);
    const size_t nl = (size_t)BATCH * CTX * MOE_VOCAB;
    float *want = floats_alloc(nl);
    model_forward(&m, in, NULL, BATCH, CTX, NULL);
    memcpy(want, m.state.logits, nl * sizeof(float));
    const long long touches = touches_of_last_forward(&m);
    ck_assert(touches > 0);
    const size_t record = (size_t)3 * c.d_expert * c.d_model * sizeof(float);
    /* 1 slot, 3, and one per key (16) */
    const int slot_counts[] = {1, 3, 16};
    for (int k = 0; k < 3; k++) {
        ExpertCache ec;
        ck_assert_msg(
            expert_cache_open(&ec, &m, path, slot_counts[k], BATCH * CTX, err, sizeof err) == 0,
            "%s", err);
        ck_assert_int_eq(ec.slots, slot_counts[k]);
        m.expert_source = &ec.src;
        /* twice: a cold cache, then one holding what the first forward left */
        for (int pass = 0; pass < 2; pass++) {
            memset(m.state.logits, 0, nl * sizeof(float));
            model_forward(&m, in, NULL, BATCH, CTX, NULL);
            char what[96];
            snprintf(what, sizeof what, "%s, %d slots, pass %d: logits through the cache", be->name,
                     slot_counts[k], pass);
            if (be == &backend_cpu_ref)
                ck_assert_msg(memcmp(m.state.logits, want, nl * sizeof(float)) == 0, "%s differ",
                              what);
            else
                CLOSE_ARRAYS(m.state.logits, want, nl, what);
            /* a forward calls each MoE layer once, so its touches are distinct keys: a cold
             * cache misses every one */
            ck_assert_int_eq(ec.hits + ec.misses, touches * (pass + 1));
            if (pass == 0) ck_assert_int_eq(ec.misses, touches);
        }
        ck_assert_uint_eq(ec.bytes_loaded, (size_t)ec.misses * record);
        ck_assert(ec.load_seconds >= 0.0);
        /* one slot: the next key always differs from the last; a slot per key: the second
         * forward only hits */
        if (slot_counts[k] == 1) ck_assert_int_eq(ec.hits, 0);
        if (slot_counts[k] == 16) {
            ck_assert_int_eq(ec.hits, touches);
            ck_assert(expert_cache_hit_rate(&ec) == 0.5);
        }
        m.expert_source = NULL;
        expert_cache_close(&ec);
    }
    /* slots beyond the keys are clamped; so is 0 */
    ExpertCache ec;
    ck_assert(expert_cache_open(&ec, &m, path, 1000, 1, err, sizeof err) == 0);
    ck_assert_int_eq(ec.slots, 16);
    expert_cache_close(&ec);
    ck_assert(expert_cache_open(&ec, &m, path, 0, 1, err, sizeof err) == 0);
    ck_assert_int_eq(ec.slots, 1);
    expert_cache_close(&ec);
    free(want);
    model_free(&m);
    tmp_dir_remove();
}
END_TEST

START_TEST(test_cache_refuses_device_memory) {
    tmp_dir_make("offload");
    const Config c = moe_config();
    Model m;
    model_init_backend(&m, &c, 1, CTX, NULL, &backend_cpu_fenced);
    char err[512] = "";
    const char *path = tmp_path("experts.bin");
    /* the file can be written from any backend (copied down first) ... */
    ck_assert_msg(expert_file_write(&m, path, err, sizeof err) == 0, "%s", err);
    Model h;
    model_init_backend(&h, &c, 1, CTX, NULL, &backend_cpu_ref);
    ExpertFile f;
    ck_assert_msg(expert_file_open(&f, &h, path, err, sizeof err) == 0, "%s", err);
    const size_t FC = (size_t)c.d_expert * c.d_model;
    ck_assert(memcmp(expert_file_record(&f, 1, 5) + FC, h.w.layers[1].e_up + 5 * FC,
                     FC * sizeof(float)) == 0);
    expert_file_close(&f);
    /* ... but the cache runs on the host's memory only */
    ExpertCache ec;
    ck_assert_int_eq(expert_cache_open(&ec, &m, path, 4, CTX, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "cpu-fenced"), "message: %s", err);
    model_free(&h);
    model_free(&m);
    tmp_dir_remove();
}
END_TEST

/* ---- decoding through the cache ------------------------------------------------------------- */

enum { STEPS = 6 };

/* Prefill BATCH prompts of 3 tokens, then STEPS steps; logits (STEPS + 1, BATCH, V) after
 * each. */
static void decode_run(Model *m, float *logits) {
    Decoder d;
    char err[512];
    ck_assert_msg(decoder_init(&d, m, err, sizeof err) == 0, "%s", err);
    int toks[BATCH * (3 + STEPS)], unused[BATCH * (3 + STEPS)];
    random_tokens(toks, unused, BATCH * (3 + STEPS), 41);
    const int lens[BATCH] = {3, 2};
    decoder_prefill(&d, 0, BATCH, toks, 3, lens);
    const size_t per = (size_t)BATCH * MOE_VOCAB;
    memcpy(logits, d.logits, per * sizeof(float));
    for (int s = 0; s < STEPS; s++) {
        decoder_step(&d, toks + 3 * BATCH + s * BATCH);
        memcpy(logits + (s + 1) * per, d.logits, per * sizeof(float));
    }
    decoder_free(&d);
}

START_TEST(test_decode_through_the_cache) {
    const Backend *be = CACHE_BACKENDS[_i];
    tmp_dir_make("offload");
    const Config c = moe_config();
    Model m;
    model_init_backend(&m, &c, BATCH, CTX, NULL, be);
    char err[512] = "";
    const char *path = tmp_path("experts.bin");
    ck_assert_msg(expert_file_write(&m, path, err, sizeof err) == 0, "%s", err);
    const size_t n = (size_t)(STEPS + 1) * BATCH * MOE_VOCAB;
    float *want = floats_alloc(n), *got = floats_alloc(n);
    decode_run(&m, want);
    ExpertCache ec;
    ck_assert_msg(expert_cache_open(&ec, &m, path, 10, BATCH * CTX, err, sizeof err) == 0, "%s",
                  err);
    expert_cache_record_trace(&ec, 1);
    m.expert_source = &ec.src;
    decode_run(&m, got);
    char what[64];
    snprintf(what, sizeof what, "%s: decoded logits through the cache", be->name);
    if (be == &backend_cpu_ref)
        ck_assert_msg(memcmp(got, want, n * sizeof(float)) == 0, "%s differ", what);
    else
        CLOSE_ARRAYS(got, want, n, what);
    /* the trace: one key per touch; replayed through an LRU of the same slots, the same hits */
    ck_assert_uint_eq(ec.trace_len, (size_t)(ec.hits + ec.misses));
    ck_assert_int_gt(ec.hits, 0);
    int seen[16] = {0}, distinct = 0;
    for (size_t t = 0; t < ec.trace_len; t++) distinct += !seen[ec.trace[t]]++;
    ck_assert_msg(ec.misses > distinct, "no expert was evicted and loaded again (%lld misses)",
                  ec.misses);
    const double rate = lru_hit_rate(ec.trace, ec.trace_len, 16, ec.slots);
    ck_assert_int_eq((long long)(rate * (double)ec.trace_len + 0.5), ec.hits);
    ck_assert(rate == expert_cache_hit_rate(&ec));
    printf("  %-8s decode, 10 of 16 experts resident: %lld hits, %lld misses (%.0f%%), %zu bytes "
           "loaded\n",
           be->name, ec.hits, ec.misses, 100.0 * rate, ec.bytes_loaded);
    /* reset: statistics and trace empty, the experts still resident */
    expert_cache_reset_stats(&ec);
    ck_assert_int_eq(ec.hits + ec.misses, 0);
    ck_assert_uint_eq(ec.trace_len, 0);
    ck_assert(expert_cache_hit_rate(&ec) == 0.0);
    int held = 0;
    for (int s = 0; s < ec.slots; s++) held += ec.slot_key[s] >= 0;
    ck_assert_int_eq(held, 10);
    m.expert_source = NULL;
    expert_cache_close(&ec);
    free(want);
    free(got);
    model_free(&m);
    tmp_dir_remove();
}
END_TEST

/* ---- the locality study --------------------------------------------------------------------- */

static size_t lru_hits(const int *trace, size_t n, int n_keys, int slots) {
    return (size_t)(lru_hit_rate(trace, n, n_keys, slots) * (double)n + 0.5);
}

START_TEST(test_lru_by_hand) {
    enum { A, B, C, D };
    /* slots 2, A B A C B: miss, miss, hit (A), miss (C evicts B), miss (B evicts A) */
    const int t1[] = {A, B, A, C, B};
    ck_assert_uint_eq(lru_hits(t1, 5, 4, 2), 1);
    ck_assert(lru_hit_rate(t1, 5, 4, 2) == 0.2);
    /* with 3 slots the last B stays: 2 hits */
    ck_assert_uint_eq(lru_hits(t1, 5, 4, 3), 2);
    /* a cycle one longer than the cache always misses under LRU; one slot more hits after the
     * first round */
    const int t2[] = {A, B, C, A, B, C, A, B, C};
    ck_assert_uint_eq(lru_hits(t2, 9, 4, 2), 0);
    ck_assert_uint_eq(lru_hits(t2, 9, 4, 3), 6);
    /* one slot: only a repeat of the key just used hits */
    const int t3[] = {A, A, B, B, A, D, D, D};
    ck_assert_uint_eq(lru_hits(t3, 8, 4, 1), 4);
    /* recency, not frequency: A used often, then B C push it out of 2 slots */
    const int t4[] = {A, A, A, B, C, A};
    ck_assert_uint_eq(lru_hits(t4, 6, 4, 2), 2);
    ck_assert(lru_hit_rate(t4, 0, 4, 2) == 0.0);
}
END_TEST

START_TEST(test_lru_large_cache_misses_only_first_touches) {
    enum { N = 500, KEYS = 37 };
    int trace[N], seen[KEYS] = {0}, distinct = 0;
    Rng r;
    rng_seed(&r, 9);
    for (int t = 0; t < N; t++) {
        trace[t] = (int)rng_below(&r, KEYS);
        distinct += !seen[trace[t]];
        seen[trace[t]] = 1;
    }
    ck_assert_uint_eq(lru_hits(trace, N, KEYS, distinct), N - distinct);
    ck_assert_uint_eq(lru_hits(trace, N, KEYS, KEYS + 100), N - distinct);
    /* and one slot fewer than the keys used misses more */
    ck_assert_uint_lt(lru_hits(trace, N, KEYS, distinct - 1), N - distinct);
}
END_TEST

static Suite *offload_suite(void) {
    Suite *s = suite_create("offload");
    TCase *tc = tcase_create("offload");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_file_records_are_the_weights);
    tcase_add_test(tc, test_file_of_another_shape_refused);
    tcase_add_test(tc, test_truncated_or_foreign_file_refused);
    tcase_add_loop_test(tc, test_cache_gives_the_resident_logits, 0, 2);
    tcase_add_test(tc, test_cache_refuses_device_memory);
    tcase_add_loop_test(tc, test_decode_through_the_cache, 0, 2);
    tcase_add_test(tc, test_lru_by_hand);
    tcase_add_test(tc, test_lru_large_cache_misses_only_first_touches);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(offload_suite)
