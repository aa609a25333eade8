/*
 * test_decode.c: incremental decoding (src/infer/decode.h) computes what the full forward does.
 *
 *   - the decoding ops: rope_forward_at rotates a row as rope_forward rotates that position,
 *     attention_decode gives row t of attention_forward from a cache of t + 1 keys, and every
 *     row of it at once from rows of one sequence at positions 0 .. T - 1; and the CUDA
 *     kernels' bodies (kernels_nn.h, kernels_att.h), run on the host in the kernels' order,
 *     give the same;
 *   - the model: three sequences decoded together from prompts of 1, 2 and 5 tokens to the
 *     end of the context, on every backend, for a dense model and MoE models of several
 *     kinds (one with a tied head); the logits at every position the cache produced equal
 *     those of one full forward over each finished sequence; and a context restarted with a
 *     prefill equals a fresh one;
 *   - several tokens of one sequence in one forward (decoder_extend) give the logits of as many
 *     steps, for multi-head, grouped-query and latent attention on every backend, the other
 *     sequences untouched; and tokens dropped (decoder_drop) leave no trace;
 *   - expert-choice routing is refused with a message that names the way out;
 *   - the draft of moe sample --draft mtp guesses what the first multi-token prediction
 *     module predicts in training, one position a step or two after an accepted guess.
 */
#include <string.h>

#include "backend/cuda/kernels_att.h"
#include "backend/cuda/kernels_nn.h"
#include "backend_util.h"
#include "infer/decode.h"
#include "nn/ops.h"

/* ---- the ops ------------------------------------------------------------------------------- */

START_TEST(test_rope_at_is_rope_at_that_position) {
    enum { B = 2, T = 9, H = 3, D = 6, C = H * D, N = B * T };
    float cs[T * D], x[N * C], want[N * C], got[N * C], kern[N * C];
    rope_table(cs, T, D, 500.0f);
    fill_uniform(x, N * C, 1.0f, 1);
    memcpy(want, x, sizeof x);
    rope_forward(want, cs, B, T, H, D);
    int pos[N];
    for (int n = 0; n < N; n++) pos[n] = n % T; /* row b T + t is token t of sequence b */
    memcpy(got, x, sizeof x);
    rope_forward_at(got, cs, pos, N, H, D);
    expect_close_arrays(got, want, N * C, 0.0f, 0.0f, "rope_forward_at against rope_forward");
    memcpy(kern, x, sizeof x);
    const size_t pairs = (size_t)N * H * (D / 2);
    for (size_t t = 0; t < 7; t++) knn_rope_at_share(kern, cs, pos, H, D, pairs, t, 7);
    expect_close_arrays(kern, want, N * C, 0.0f, 0.0f, "the CUDA body of rope_forward_at");
}
END_TEST

/* The device kernel of attention_decode on the host: a warp per (n, h), its lanes in turn,
 * the warp's max and sum in the butterfly order. */
static void decode_kernel_on_host(float *out, float *att, const float *q, const float *kc,
                                  const float *vc, const int *rows, int N, int H, int Hkv, int D,
                                  int Tc) {
    const float scale = 1.0f / sqrtf((float)D);
    const int KW = Hkv * D; /* values as wide as the keys here */
    float lane_v[MOE_WARP];
    for (int r = 0; r < N * H; r++) {
        int len;
        const int n = r / H, h = r % H, s = katt_dec_seq(rows, n, Tc, &len);
        float *p = att + (size_t)r * Tc;
        const size_t head = (size_t)s * Tc * KW + (size_t)(h / (H / Hkv)) * D;
        const size_t row = (size_t)n * H * D + (size_t)h * D;
        for (int l = 0; l < MOE_WARP; l++)
            lane_v[l] = att_row_scores(p, q + row, kc + head, len, KW, D, scale, l, MOE_WARP);
        const float max = katt_butterfly(lane_v, 1);
        for (int l = 0; l < MOE_WARP; l++) att_row_exp(p, len, max, l, MOE_WARP);
        for (int l = 0; l < MOE_WARP; l++) lane_v[l] = att_row_sum(p, len, l, MOE_WARP);
        const float sum = katt_butterfly(lane_v, 0);
        for (int l = 0; l < MOE_WARP; l++) att_row_normalise(p, len, Tc, 1.0f / sum, l, MOE_WARP);
        for (int l = 0; l < MOE_WARP; l++)
            katt_dec_lane_out(out + row, p, vc + head, len, KW, D, l);
    }
}

START_TEST(test_attention_decode_is_a_row_of_attention) {
    /* T = 40: more keys than a warp has lanes; heads of their own, then 4 query heads in 2
     * groups */
    enum { T = 40, D = 8, HMAX = 4 };
    const int heads[2][2] = {{2, 2}, {4, 2}};
    for (int s = 0; s < 2; s++) {
        const int H = heads[s][0], Hkv = heads[s][1], QW = H * D, KW = Hkv * D;
        float *q = floats_alloc(T * QW), *k = floats_alloc(T * KW), *v = floats_alloc(T * KW);
        fill_uniform(q, T * QW, 1.5f, 2), fill_uniform(k, T * KW, 1.5f, 3),
            fill_uniform(v, T * KW, 1.0f, 4);
        float *out = floats_alloc(T * QW), *att = floats_alloc((size_t)H * T * T);
        attention_forward(out, att, q, k, v, 1, T, H, Hkv, D, D);
        /* row t: one sequence whose cache is the first t + 1 keys and values (the whole k, v
         * as its cache, its row t) */
        float got[HMAX * D], att_got[HMAX * T], kern[HMAX * D], att_kern[HMAX * T];
        for (int t = 0; t < T; t++) {
            attention_decode(got, att_got, q + (size_t)t * QW, k, v, &t, 1, H, Hkv, D, D, T);
            CLOSE_ARRAYS(got, out + (size_t)t * QW, QW,
                         "attention_decode against attention_forward");
            for (int h = 0; h < H; h++)
                CLOSE_ARRAYS(att_got + (size_t)h * T, att + ((size_t)h * T + t) * T, T,
                             "attention_decode's probabilities");
            decode_kernel_on_host(kern, att_kern, q + (size_t)t * QW, k, v, &t, 1, H, Hkv, D, T);
            CLOSE_ARRAYS(kern, got, QW, "the CUDA kernel of attention_decode");
            CLOSE_ARRAYS(att_kern, att_got, (size_t)H * T, "its probabilities");
        }
        /* all T rows in one call, rows of one sequence at positions 0 .. T - 1: causal
         * attention among them, the whole of attention_forward */
        int rows[T];
        for (int t = 0; t < T; t++) rows[t] = t;
        float *all = floats_alloc(T * QW), *att_all = floats_alloc((size_t)T * H * T);
        float *all_kern = floats_alloc(T * QW), *att_all_kern = floats_alloc((size_t)T * H * T);
        attention_decode(all, att_all, q, k, v, rows, T, H, Hkv, D, D, T);
        CLOSE_ARRAYS(all, out, T * QW, "attention_decode of T rows of one sequence");
        decode_kernel_on_host(all_kern, att_all_kern, q, k, v, rows, T, H, Hkv, D, T);
        CLOSE_ARRAYS(all_kern, all, T * QW, "the CUDA kernel of attention_decode, T rows");
        CLOSE_ARRAYS(att_all_kern, att_all, (size_t)T * H * T, "its probabilities, T rows");
        free(all), free(att_all), free(all_kern), free(att_all_kern);
        free(q), free(k), free(v), free(out), free(att);
    }
}
END_TEST

/* ---- the model ------------------------------------------------------------------------------ */

enum { SEQ = 3, CTX = 12 };

static Config model_config(int variant) {
    Config c;
    config_defaults(&c);
    c.d_model = 16;
    c.n_layer = 2;
    c.n_head = 2;
    c.seq_len = CTX;
    c.d_ff = 24;
    c.init_std = 0.2f; /* livelier than training's, so that attention is not uniform */
    c.seed = 11;
    if (variant == 0) return c; /* dense */
    c.num_experts = 4;
    c.top_k = 2;
    c.d_expert = 12;
    switch (variant) {
    case 1: /* softmax top-2, a dense first block, a capacity in training */
        c.first_dense = 1;
        c.capacity_factor = 1.0f;
        break;
    case 2: /* sigmoid scores, aux-free bias, a shared expert, sandwich norms, a tied head */
        c.tied = 1;
        c.score = MOE_SCORE_SIGMOID;
        c.balance = MOE_BALANCE_AUX_FREE;
        c.num_shared = 1;
        c.norm = MOE_NORM_SANDWICH;
        break;
    case 3: /* Mixtral's top-k before the softmax, 8 experts, a bf16 router */
        c.num_experts = 8;
        c.topk_before_softmax = 1;
        c.router_precision = MOE_ROUTER_BF16;
        break;
    case 4: /* Qwen3's attention: 4 query heads on 2 key-value heads of their own width, normed
               per head */
        c.n_head = 4;
        c.kv_heads = 2;
        c.head_dim = 6;
        c.qk_norm = MOE_QK_NORM_HEAD;
        break;
    default: /* DeepSeek's latent attention, the queries through a latent too */
        c.attention = MOE_ATTN_MLA;
        c.n_head = 2;
        c.mla_q_rank = 8;
        c.mla_kv_rank = 6;
        c.mla_rope_dim = 4;
        c.mla_nope_dim = 4;
        c.mla_v_dim = 6;
        break;
    }
    return c;
}

/* Decode SEQ sequences to the end of the context; compare every position's cached logits with
 * one full forward over each finished sequence. Returns the largest difference. */
static double decode_against_full(const Config *c, const Backend *be, const char *what) {
    Model m;
    model_init_backend(&m, c, SEQ, CTX, NULL, be);
    if (m.router_bias) { /* aux-free: a bias that changes choices, as training leaves one */
        const size_t n = (size_t)m.n_moe * c->num_experts;
        float *bias = floats_alloc(n);
        fill_uniform(bias, n, 0.3f, 5);
        be->to_device(be, m.router_bias, bias, n * sizeof(float));
        free(bias);
    }
    Decoder d;
    char err[512];
    ck_assert_msg(decoder_init(&d, &m, err, sizeof err) == 0, "%s: %s", what, err);
    const int plen[SEQ] = {1, 2, 5}, Tp = 5;
    int seq[SEQ][CTX], unused[SEQ * CTX], prompts[SEQ * 5] = {0};
    random_tokens(&seq[0][0], unused, SEQ * CTX, 21);
    for (int b = 0; b < SEQ; b++)
        for (int t = 0; t < plen[b]; t++) prompts[b * Tp + t] = seq[b][t];
    /* cached[b][t]: the logits after token t of sequence b, as the decoder gave them */
    float *cached = floats_alloc((size_t)SEQ * CTX * MOE_VOCAB);
    decoder_prefill(&d, 0, SEQ, prompts, Tp, plen);
    for (int b = 0; b < SEQ; b++)
        memcpy(cached + ((size_t)b * CTX + plen[b] - 1) * MOE_VOCAB,
               d.logits + (size_t)b * MOE_VOCAB, MOE_VOCAB * sizeof(float));
    /* the step appends each sequence's next token; the longest stops the batch at CTX */
    for (int s = 0; s < CTX - plen[SEQ - 1]; s++) {
        int next[SEQ];
        for (int b = 0; b < SEQ; b++) next[b] = seq[b][d.len[b]];
        decoder_step(&d, next);
        for (int b = 0; b < SEQ; b++)
            memcpy(cached + ((size_t)b * CTX + d.len[b] - 1) * MOE_VOCAB,
                   d.logits + (size_t)b * MOE_VOCAB, MOE_VOCAB * sizeof(float));
    }
    ck_assert_int_eq(d.len[SEQ - 1], CTX);
    double worst = 0.0;
    float *full = floats_alloc((size_t)CTX * MOE_VOCAB);
    for (int b = 0; b < SEQ; b++) {
        const int len = d.len[b];
        model_forward(&m, seq[b], NULL, 1, len, NULL);
        be->to_host(be, full, m.state.logits, (size_t)len * MOE_VOCAB * sizeof(float));
        for (int t = plen[b] - 1; t < len; t++) {
            const float *got = cached + ((size_t)b * CTX + t) * MOE_VOCAB;
            const float *want = full + (size_t)t * MOE_VOCAB;
            char at[160];
            snprintf(at, sizeof at, "%s on %s: sequence %d, position %d", what, be->name, b, t);
            CLOSE_ARRAYS(got, want, MOE_VOCAB, at);
            for (int v = 0; v < MOE_VOCAB; v++) {
                const double e = fabs((double)got[v] - want[v]);
                worst = e > worst ? e : worst;
            }
        }
    }
    free(full);
    free(cached);
    decoder_free(&d);
    model_free(&m);
    return worst;
}

static const char *const VARIANTS[] = {"dense",
                                       "moe softmax top-2 (capacity in training)",
                                       "moe sigmoid, aux-free, shared, sandwich, tied head",
                                       "moe top-k before softmax, bf16 router",
                                       "moe, grouped-query heads of 6, qk-norm per head",
                                       "moe, latent attention"};

START_TEST(test_cached_logits_equal_the_full_forward) {
    const Config c = model_config(_i);
    for (int b = 0; b < N_BACKENDS; b++) {
        const double worst = decode_against_full(&c, BACKENDS[b], VARIANTS[_i]);
        /* the reference loops compute each row alone, in the same order whatever the rows
         * around it: there the cache changes no bit. Latent attention's decoding regroups the
         * sums (the heads' up-projections absorbed): it is held to the tolerance instead */
        if (BACKENDS[b] == &backend_cpu_ref && c.attention != MOE_ATTN_MLA)
            ck_assert_msg(worst == 0.0, "%s on cpu-ref: cached logits differ by %g", VARIANTS[_i],
                          worst);
        printf("  %-52s %-10s largest |cached - full| logit difference %.2g\n", VARIANTS[_i],
               BACKENDS[b]->name, worst);
    }
}
END_TEST

/* What the cache holds a token and layer: a key and a value of every key-value head (2 Hkv D
 * floats: multi-head 2 C, grouped-query 2 Hkv D), or latent attention's normed latent and
 * rotated key (kv_rank + rope_dim), whatever the heads */
START_TEST(test_cache_bytes_a_token) {
    static const struct { int variant, floats; } WANT[] = {{0, 2 * 16}, {4, 2 * 2 * 6}, {5, 6 + 4}};
    for (size_t i = 0; i < sizeof WANT / sizeof WANT[0]; i++) {
        const Config c = model_config(WANT[i].variant);
        Model m;
        model_init_backend(&m, &c, SEQ, CTX, NULL, &backend_cpu);
        Decoder d;
        char err[512];
        ck_assert_msg(decoder_init(&d, &m, err, sizeof err) == 0, "%s", err);
        const size_t want = (size_t)c.n_layer * SEQ * CTX * WANT[i].floats * sizeof(float);
        ck_assert_msg(d.cache_bytes == want, "%s: a cache of %zu bytes, expected %zu",
                      VARIANTS[WANT[i].variant], d.cache_bytes, want);
        decoder_free(&d);
        model_free(&m);
    }
}
END_TEST

/* A sequence whose context restarts (a prefill of its recent tokens, as moe sample does when
 * the cache is full) decodes as a fresh sequence given those tokens, while its neighbours in
 * the batch carry on. */
START_TEST(test_restart_one_sequence) {
    const Config c = model_config(1);
    Model m;
    model_init_backend(&m, &c, SEQ, CTX, NULL, &backend_cpu);
    Decoder d;
    char err[512];
    ck_assert(decoder_init(&d, &m, err, sizeof err) == 0);
    int toks[SEQ * 4], unused[SEQ * 4], lens[SEQ] = {4, 4, 4};
    random_tokens(toks, unused, SEQ * 4, 31);
    decoder_prefill(&d, 0, SEQ, toks, 4, lens);
    int next[SEQ] = {65, 66, 67};
    decoder_step(&d, next);
    /* sequence 1 restarts from 3 tokens of sequence 2's prompt */
    decoder_prefill(&d, 1, 1, toks + 8, 3, (int[]){3});
    ck_assert_int_eq(d.len[1], 3);
    int next2[SEQ] = {68, toks[11], 69};
    decoder_step(&d, next2);
    float got[MOE_VOCAB], want[MOE_VOCAB];
    memcpy(got, d.logits + MOE_VOCAB, sizeof got);
    model_forward(&m, toks + 8, NULL, 1, 4, NULL); /* sequence 2's prompt itself */
    memcpy(want, m.state.logits + 3 * MOE_VOCAB, sizeof want);
    CLOSE_ARRAYS(got, want, MOE_VOCAB, "a restarted sequence");
    decoder_free(&d);
    model_free(&m);
}
END_TEST

/* Several tokens of one sequence in one forward (decoder_extend) against one step at a time
 * (decoder_step, a row a sequence): two sequences after prompts of 3, sequence 1 then sequence 0
 * extended by EXT tokens each, then sequence 1 by a right token and a wrong one, the wrong one
 * dropped (decoder_drop) and the right one after it taken: every row's logits are those of the
 * steps, which never saw the wrong token. */
enum { EXT = 4 };
static void extend_against_steps(const Config *c, const Backend *be, const char *what) {
    Model m;
    model_init_backend(&m, c, 2, CTX, NULL, be);
    int seq[2][CTX], unused[2 * CTX];
    random_tokens(&seq[0][0], unused, 2 * CTX, 51);
    const int plen = 3, lens[2] = {plen, plen}, last = plen + EXT + 2;
    int prompts[2 * plen];
    for (int b = 0; b < 2; b++) memcpy(prompts + b * plen, seq[b], plen * sizeof(int));
    /* want[b][t]: the logits after token t of sequence b, stepped */
    float *want = floats_alloc((size_t)2 * CTX * MOE_VOCAB);
    Decoder d;
    char err[512];
    ck_assert_msg(decoder_init(&d, &m, err, sizeof err) == 0, "%s", err);
    decoder_prefill(&d, 0, 2, prompts, plen, lens);
    for (int t = plen; t < last; t++) {
        const int next[2] = {seq[0][t], seq[1][t]};
        decoder_step(&d, next);
        for (int b = 0; b < 2; b++)
            memcpy(want + ((size_t)b * CTX + t) * MOE_VOCAB, d.logits + (size_t)b * MOE_VOCAB,
                   MOE_VOCAB * sizeof(float));
    }
    decoder_free(&d);
    ck_assert_msg(decoder_init(&d, &m, err, sizeof err) == 0, "%s", err);
    decoder_prefill(&d, 0, 2, prompts, plen, lens);
    char at[160];
    for (int i = 0; i < 2; i++) { /* sequence 1, then 0 */
        const int b = 1 - i;
        decoder_extend(&d, b, seq[b] + plen, EXT);
        ck_assert_int_eq(d.len[b], plen + EXT);
        for (int r = 0; r < EXT; r++) {
            snprintf(at, sizeof at, "%s on %s: sequence %d, row %d of %d", what, be->name, b, r,
                     EXT);
            CLOSE_ARRAYS(d.logits + (size_t)r * MOE_VOCAB,
                         want + ((size_t)b * CTX + plen + r) * MOE_VOCAB, MOE_VOCAB, at);
        }
    }
    /* a right token and a wrong one; the wrong one dropped, the right one after it taken */
    const int p = plen + EXT, guess[2] = {seq[1][p], seq[1][p + 1] ^ 1};
    decoder_extend(&d, 1, guess, 2);
    snprintf(at, sizeof at, "%s on %s: the row before a wrong token", what, be->name);
    CLOSE_ARRAYS(d.logits, want + ((size_t)CTX + p) * MOE_VOCAB, MOE_VOCAB, at);
    decoder_drop(&d, 1, 1);
    ck_assert_int_eq(d.len[1], p + 1);
    decoder_extend(&d, 1, seq[1] + p + 1, 1);
    snprintf(at, sizeof at, "%s on %s: a step after a dropped token", what, be->name);
    CLOSE_ARRAYS(d.logits, want + ((size_t)CTX + p + 1) * MOE_VOCAB, MOE_VOCAB, at);
    decoder_free(&d);
    free(want);
    model_free(&m);
}

START_TEST(test_extend_is_steps) {
    static const int variants[] = {1, 4, 5}; /* multi-head, grouped-query, latent attention */
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < N_BACKENDS; b++) {
            const Config c = model_config(variants[i]);
            extend_against_steps(&c, BACKENDS[b], VARIANTS[variants[i]]);
        }
}
END_TEST

START_TEST(test_expert_choice_refused) {
    Config c = model_config(1);
    c.routing = MOE_ROUTING_EXPERT_CHOICE;
    c.capacity_factor = 0.0f;
    Model m;
    model_init_backend(&m, &c, 1, CTX, NULL, &backend_cpu);
    Decoder d;
    char err[512] = "";
    ck_assert_int_eq(decoder_init(&d, &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "expert_choice") && strstr(err, "--no-cache"), "message: %s", err);
    model_free(&m);
}
END_TEST

/* The draft (moe sample --draft mtp): the first multi-token prediction module, decoded with its
 * own cache after a prefill, guesses at each position it is asked to (after a step, after an
 * accepted guess, after a rejected one) what the same module predicts there in a training pass over
 * the whole sequence (its probabilities, which the training pass leaves in place of its logits), on
 * every backend, for a dense model and an MoE model (sigmoid scores, a shared expert, sandwich
 * norms, a tied head) and a model of latent attention (its module's cache the latent). */
START_TEST(test_draft_is_the_training_module) {
    static const int variants[] = {0, 2, 5};
    const StepCtx training = {.training = 1};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < N_BACKENDS; b++) {
            Config c = model_config(variants[i]);
            c.mtp_depth = 1;
            Model m;
            model_init_backend(&m, &c, 1, CTX, NULL, BACKENDS[b]);
            int seq[CTX + 1], unused[CTX + 1];
            random_tokens(seq, unused, CTX + 1, 41);
            model_forward(&m, seq, seq + 1, 1, CTX, &training); /* module 1: CTX - 1 rows */
            float *want = floats_alloc((size_t)(CTX - 1) * MOE_VOCAB);
            BACKENDS[b]->to_host(BACKENDS[b], want, m.state.mtp[0].logits,
                                 (size_t)(CTX - 1) * MOE_VOCAB * sizeof(float));
            Decoder d;
            char err[512];
            ck_assert_msg(decoder_init(&d, &m, err, sizeof err) == 0 &&
                              decoder_draft_open(&d, err, sizeof err) == 0,
                          "%s", err);
            const int plen = 3;
            decoder_prefill(&d, 0, 1, seq, plen, &plen);
            /* the model takes one token, two (an accepted guess: the draft then covers both
             * positions) or two of which it drops the second (a rejected guess), in turn */
            for (int p = plen, n = 1; p < CTX;) {
                /* at positions p - n .. p - 1 (tokens p - n + 1 .. p after them): the guess
                 * of token p + 1 */
                decoder_draft(&d, seq + p - n + 1, n);
                double probs[MOE_VOCAB], max = d.draft_logits[0], sum = 0.0;
                for (int v = 0; v < MOE_VOCAB; v++)
                    max = d.draft_logits[v] > max ? d.draft_logits[v] : max;
                for (int v = 0; v < MOE_VOCAB; v++) sum += probs[v] = exp(d.draft_logits[v] - max);
                float got[MOE_VOCAB];
                for (int v = 0; v < MOE_VOCAB; v++) got[v] = (float)(probs[v] / sum);
                char at[128];
                snprintf(at, sizeof at, "variant %d on %s: the guess at position %d", variants[i],
                         BACKENDS[b]->name, p - 1);
                CLOSE_ARRAYS(got, want + (size_t)(p - 1) * MOE_VOCAB, MOE_VOCAB, at);
                const int two = p % 3 != 0 && p + 1 < CTX, kept = p % 3 == 1;
                if (two) {
                    const int rows[2] = {seq[p], kept ? seq[p + 1] : seq[p + 1] ^ 1};
                    decoder_extend(&d, 0, rows, 2);
                    if (!kept) decoder_drop(&d, 0, 1);
                } else {
                    decoder_step(&d, &seq[p]);
                }
                n = two && kept ? 2 : 1;
                p += n;
            }
            free(want);
            decoder_free(&d);
            model_free(&m);
        }
}
END_TEST

static Suite *decode_suite(void) {
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rope_at_is_rope_at_that_position);
    tcase_add_test(tc, test_attention_decode_is_a_row_of_attention);
    tcase_add_loop_test(tc, test_cached_logits_equal_the_full_forward, 0,
                        (int)(sizeof VARIANTS / sizeof VARIANTS[0]));
    tcase_add_test(tc, test_restart_one_sequence);
    tcase_add_test(tc, test_cache_bytes_a_token);
    tcase_add_test(tc, test_extend_is_steps);
    tcase_add_test(tc, test_expert_choice_refused);
    tcase_add_test(tc, test_draft_is_the_training_module);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(decode_suite)
