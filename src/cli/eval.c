/*
 * eval.c: the commands that run a trained model: `moe eval` (the validation loss, and with
 * --logits the first batch's logits for another framework to compare with) and `moe sample`
 * (text, one token at a time, from a key-value cache: infer/decode.h; a token is a byte, or an
 * id of the run's tokenizer: tok/tok.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cli/cli.h"
#include "io/data.h"
#include "io/files.h"
#include "io/tensorfile.h"
#include "infer/decode.h"
#include "infer/serve.h"
#include "tok/tok.h"
#include "train/train.h"

/* eval --logits: the first validation batch evaluate() reads, its logits before the softmax
 * (a forward without targets) and its loss, as safetensors: "tokens" and "targets" (B, T),
 * token ids as floats (exact: model.vocab <= 2^24), "logits" (B, T, V), metadata "loss". Another
 * framework given the same weights compares its own logits and loss with these
 * (plots/hf/compare.py). */
static void write_eval_logits(Model *m, const Shard *val, int batches, const char *path) {
    const int B = m->state.B, T = m->state.T, N = B * T, V = m->cfg.vocab;
    int *inputs = (int *)malloc_check((size_t)N * sizeof(int));
    int *targets = (int *)malloc_check((size_t)N * sizeof(int));
    uint8_t *domains = (uint8_t *)malloc_check((size_t)N);
    loader_val_batch(val, B, T, 0, batches, inputs, targets, domains);
    model_forward(m, inputs, NULL, B, T, NULL); /* no context: evaluation */
    float *logits = (float *)malloc_check((size_t)N * V * sizeof(float));
    m->be->to_host(m->be, logits, m->state.logits, (size_t)N * V * sizeof(float));
    model_forward(m, inputs, targets, B, T, NULL);
    const float loss = m->state.loss; /* the cross-entropy, as evaluate() sums it */
    float *tok = (float *)malloc_check((size_t)N * sizeof(float) * 2);
    for (int i = 0; i < N; i++) tok[i] = (float)inputs[i], tok[N + i] = (float)targets[i];
    TensorRef e[3] = {{"tokens", TENSOR_F32, 2, {B, T, 0}, (size_t)N * sizeof(float), tok},
                      {"targets", TENSOR_F32, 2, {B, T, 0}, (size_t)N * sizeof(float), tok + N},
                      {"logits", TENSOR_F32, 3, {B, T, V}, (size_t)N * V * sizeof(float), logits}};
    char v[32], err[1024];
    snprintf(v, sizeof v, "%.9g", (double)loss);
    const char *keys[] = {"loss", "format"}, *vals[] = {v, "moe.c eval logits"};
    if (safetensors_write(path, e, 3, keys, vals, 2, err, sizeof err) != 0)
        moe_input_error("eval --logits: %s", err);
    printf("wrote %s: the first batch's tokens, targets and logits (%d x %d x %d), loss %.6f\n",
           path, B, T, V, (double)loss);
    free(logits);
    free(tok);
    free(inputs);
    free(targets);
    free(domains);
}

/* Shards made by another tokenizer than the run's (the tokenizer.json beside the checkpoint)
 * hold ids of other text, whatever their vocabularies: refused when both name one (a shard of
 * bytes, tokenizer_crc32 0, or a run without a tokenizer.json, names none). */
static void check_shard_tokenizer(const Shard *val, const char *path, const char *ckpt) {
    char err[1024], tpath[MOE_TOK_PATH_MAX];
    uint32_t crc;
    const int rc = tok_run_crc(ckpt, &crc, err, sizeof err);
    if (rc < 0) moe_input_error("eval: the run's tokenizer %s", err);
    tok_run_path(ckpt, tpath, sizeof tpath);
    if (rc == 1 && val->tokenizer_crc32 != 0 && val->tokenizer_crc32 != crc)
        moe_input_error("eval: data.val %s was made by the tokenizer of CRC-32 %08x, but the "
                        "checkpoint's, %s, is %08x: its ids are not this model's tokens; "
                        "evaluate on shards made with %s (--set data.val=PATH)",
                        path, (unsigned)val->tokenizer_crc32, tpath, (unsigned)crc, tpath);
}

int cmd_eval(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "eval", argc, argv);
    if (!o.ckpt) usage_error("eval", "%s", "--ckpt PATH is required");
    Config c;
    load_ckpt_config(&c, o.ckpt);
    build_config(&c, &o, "eval");
    char err[1024];
    Shard val;
    if (shard_load(&val, c.val, err, sizeof err) != 0 ||
        shard_check_vocab(&val, c.vocab, err, sizeof err) != 0 ||
        shard_check_window(&val, c.seq_len, err, sizeof err) != 0)
        moe_input_error("data.val: %s", err);
    check_shard_tokenizer(&val, c.val, o.ckpt);
    if (o.logits_out && file_exists(o.logits_out))
        moe_input_error("eval: --logits %s already exists; choose another name or remove it first",
                        o.logits_out);
    Model m;
    load_model(&m, &c, o.ckpt, c.batch, c.seq_len);
    backend_set_threads(c.threads);
    ServedExperts sx;
    if (served_experts_attach(&sx, &m, o.quant ? quant_format_parse(o.quant) : QUANT_FP32,
                              (int)o.offload, err, sizeof err) != 0)
        moe_input_error("eval: %s", err);
    int batches = o.batches > 0 ? (int)o.batches : c.eval_batches;
    if (o.logits_out) write_eval_logits(&m, &val, batches, o.logits_out);
    float loss = evaluate(&m, &val, batches, NULL);
    printf("val_loss %.6f (%d batches of %d x %d tokens from %s", loss, batches, c.batch, c.seq_len,
           c.val);
    if (o.quant)
        printf("; experts %s, %.2f MB against %.2f in fp32", o.quant,
               served_experts_bytes(&sx, &m) / 1e6,
               3.0 * c.d_model * m.spec.d_expert * 4.0 * m.n_moe * c.num_experts / 1e6);
    if (o.offload)
        printf("; experts through a cache of %d, %.1f%% hits", sx.cache.slots,
               100.0 * expert_cache_hit_rate(&sx.cache));
    printf(")\n");
    served_experts_detach(&sx, &m);
    model_free(&m);
    shard_free(&val);
    return 0;
}

/* The prompts of moe sample: --prompts FILE, one a line (an empty line is a newline), or the
 * one --prompt (default a newline). Each as bytes, its length in len. */
enum { SAMPLE_MAX_PROMPTS = 256 };
static int read_prompts(const Opts *o, char ***out, int **len) {
    char **p = (char **)calloc_check(SAMPLE_MAX_PROMPTS, sizeof(char *));
    int *n = (int *)calloc_check(SAMPLE_MAX_PROMPTS, sizeof(int)), count = 0;
    if (!o->prompts) {
        const char *t = o->prompt && o->prompt[0] ? o->prompt : "\n";
        n[0] = (int)strlen(t);
        p[0] = (char *)malloc_check((size_t)n[0] + 1);
        memcpy(p[0], t, (size_t)n[0] + 1);
        count = 1;
    } else {
        uint64_t size = 0;
        char err[1024];
        const FileSpec spec = {"prompts file", "write one prompt a line in a text file", NULL,
                               1 << 24};
        FILE *f = open_regular(o->prompts, &spec, &size, err, sizeof err);
        if (!f) moe_input_error("--prompts: %s", err);
        const size_t bytes = (size_t)size;
        char *text = (char *)malloc_check(bytes + 1);
        if (fread(text, 1, bytes, f) != bytes)
            moe_input_error("--prompts %s: read failed", o->prompts);
        fclose(f);
        for (size_t at = 0; at < bytes;) {
            if (count == SAMPLE_MAX_PROMPTS)
                moe_input_error("--prompts %s: more than %d lines; sample them in parts",
                                o->prompts, SAMPLE_MAX_PROMPTS);
            size_t end = at;
            while (end < bytes && text[end] != '\n') end++;
            const size_t k = end - at;
            p[count] = (char *)malloc_check(k + 2);
            memcpy(p[count], text + at, k);
            if (k == 0) p[count][0] = '\n';
            n[count] = k ? (int)k : 1;
            p[count][n[count]] = 0;
            count++;
            at = end + 1;
        }
        free(text);
        if (count == 0)
            moe_input_error("--prompts %s: the file is empty; write one prompt a line", o->prompts);
    }
    *out = p;
    *len = n;
    return count;
}

/* The next token from logits (V): the most likely one at temperature 0, else a draw from
 * softmax(logits / t) in double, shifted by the max: the largest term is exp(0) = 1 whatever t,
 * so a tiny temperature (1e-50) gives the greedy token instead of 0 / 0, and nothing overflows
 * for any t in (0, 100]. probs (V): scratch. */
static int pick_token(const float *logits, int V, double temperature, Rng *r, double *probs) {
    int next = 0;
    if (temperature <= 0.0) {
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[next]) next = v;
        return next;
    }
    double max = logits[0], sum = 0.0;
    for (int v = 1; v < V; v++) max = logits[v] > max ? logits[v] : max;
    for (int v = 0; v < V; v++) {
        probs[v] = exp(((double)logits[v] - max) / temperature);
        sum += probs[v];
    }
    double u = rng_uniform(r) * sum, acc = 0.0;
    for (next = 0; next < V - 1; next++) {
        acc += probs[next];
        if (acc > u) break;
    }
    return next;
}

/* The greedy token of logits (V). */
static int greedy(const float *logits, int V) {
    return pick_token(logits, V, 0.0, NULL, NULL);
}

/* What moe sample prints: text through tok (the run's tokenizer; NULL: the ids are bytes), or
 * with --ids the ids themselves, a line of them separated by spaces (as `moe tokenizer encode`
 * writes them); at_line: ids on the current line. */
typedef struct {
    Tokenizer *tok;
    int ids;
    long long at_line;
} SampleOut;

/* Token id to stdout as it is chosen: the tokenizer's bytes for it (an id whose bytes end
 * inside a UTF-8 character prints them as they are), with none the byte id, or the number. */
static void put_token(SampleOut *out, int id) {
    size_t n = 0;
    const char *b = out->tok && !out->ids ? tok_decode_id(out->tok, id, &n) : NULL;
    if (out->ids)
        printf(out->at_line++ ? " %d" : "%d", id);
    else if (!out->tok)
        putchar(id);
    else if (b)
        fwrite(b, 1, n, stdout);
}

/* A prompt's n bytes as ids into ids: the tokenizer's encoding, or with none its bytes. */
static void prompt_ids(Tokenizer *tok, const char *text, int n, TokIds *ids) {
    if (tok)
        tok_encode(tok, text, (size_t)n, ids);
    else
        for (int i = 0; i < n; i++) tok_ids_push(ids, (unsigned char)text[i]);
}

/* The prompt before its sample: its text, or with --ids its ids, the whole prompt's (the window
 * takes the last T), on a line of their own. */
static void put_prompt(SampleOut *out, const char *text, int n) {
    if (!out->ids) {
        fwrite(text, 1, (size_t)n, stdout);
        return;
    }
    TokIds ids = {0};
    prompt_ids(out->tok, text, n, &ids);
    out->at_line = 0;
    for (size_t i = 0; i < ids.n; i++) put_token(out, ids.id[i]);
    putchar('\n');
    out->at_line = 0;
    tok_ids_free(&ids);
}

/* sample's options that go together: --ckpt given, one of --prompt and --prompts, and a
 * bounded --tokens with --prompts. */
static void sample_check(const Opts *o) {
    if (!o->ckpt) usage_error("sample", "%s", "--ckpt PATH is required");
    if (o->prompt && o->prompts)
        usage_error("sample", "%s: one prompt, or a file of them; not both",
                    "--prompt and --prompts");
    /* one line or many: each sample is kept in memory until the end */
    if (o->prompts && o->tokens > 1000000) {
        char n[32];
        snprintf(n, sizeof n, "%lld", o->tokens);
        usage_error("sample",
                    "--tokens %s: with --prompts each sample is kept until the end; "
                    "at most 1000000 tokens each (--prompt has no such limit)",
                    n);
    }
    /* a guess is checked against the model's own choice: the most likely token */
    if (o->draft && (o->prompts || o->no_cache || o->temperature != 0.0 || o->quant || o->offload))
        usage_error("sample", "%s",
                    "--draft mtp decodes one --prompt greedily from the key-value cache with the "
                    "checkpoint's own experts: add --temperature 0, and leave out --prompts, "
                    "--no-cache, --quant and --offload");
}

/* The decoder's cache filled with each sequence's window: win (S, T), wlen (S) its lengths,
 * prefilled together (padded to the longest). */
static void prefill_windows(Decoder *d, const int *win, const int *wlen, int S, int T) {
    int Tp = 0;
    for (int s = 0; s < S; s++) Tp = wlen[s] > Tp ? wlen[s] : Tp;
    int *pad = (int *)calloc_check((size_t)S * Tp, sizeof(int));
    for (int s = 0; s < S; s++)
        memcpy(pad + (size_t)s * Tp, win + (size_t)s * T, (size_t)wlen[s] * sizeof(int));
    decoder_prefill(d, 0, S, pad, Tp, wlen);
    free(pad);
}

/* logits (S, V) = the last row's logits of a full forward over each window, brought to the
 * host (--no-cache: the reference). */
static void window_logits(float *logits, Model *m, const int *win, const int *wlen, int S, int T) {
    const size_t V = (size_t)m->cfg.vocab;
    for (int s = 0; s < S; s++) { /* the last row's logits, brought to the host */
        model_forward(m, win + (size_t)s * T, NULL, 1, wlen[s], NULL);
        m->be->to_host(m->be, logits + (size_t)s * V, m->state.logits + (size_t)(wlen[s] - 1) * V,
                       V * sizeof(float));
    }
}

/* moe sample --draft mtp: greedy speculative decoding of one sequence, its window w (T) of wlen
 * tokens prefilled in d (the model's cache and the draft module's), printed through out
 * (put_token). With x, the token chosen next, the module guesses g, the token after x, and one
 * step of the model takes the two rows [x, g]: its first row's choice y is the token after x; if
 * y is g, the guess is accepted and the second row gives the token after g, two tokens for the
 * step; if not, g leaves the cache (decoder_drop) and y is the next token. The tokens are those
 * decoding without a draft gives (the window starts again from its last T / 2 tokens when full,
 * as there; a step with no room for the guess, or for the token after it, takes x alone); the
 * steps and guesses are reported on stderr. */
static void draft_sample(Decoder *d, SampleOut *out, int *w, int wlen, int T, long long n_new) {
    const int keep = T / 2, V = d->m->cfg.vocab;
    long long steps = 0, guesses = 0, accepted = 0, restarts = 0;
    int x = greedy(d->logits, V);
    int todo[2] = {x}, n_todo = 1; /* the draft module's positions still to compute */
    for (long long made = 1;; made++) {
        put_token(out, x);
        if (made == n_new) break;
        if (wlen == T) { /* full: start again from the last T / 2 tokens */
            memmove(w, w + T - keep, (size_t)keep * sizeof(int));
            wlen = keep;
            decoder_prefill(d, 0, 1, w, keep, &wlen);
            restarts++;
            todo[0] = x, n_todo = 1;
        }
        w[wlen++] = x;
        /* a guess needs a position of the window and a token to write after it; a step without
         * one is the last of its window or of the text, so the draft module, left behind, is
         * refilled by the restart's prefill or never asked again */
        const int n = wlen < T && made + 2 <= n_new ? 2 : 1;
        int row[2] = {x, 0};
        if (n == 2) {
            decoder_draft(d, todo, n_todo); /* the guess of the token after x */
            row[1] = greedy(d->draft_logits, V);
            guesses++;
        }
        decoder_extend(d, 0, row, n);
        steps++;
        const int y = greedy(d->logits, V);
        if (n == 2 && y == row[1]) { /* accepted: y is written, and the token after it known */
            accepted++;
            put_token(out, y);
            made++;
            w[wlen++] = y;
            x = greedy(d->logits + V, V);
            todo[0] = y, todo[1] = x, n_todo = 2;
        } else {
            if (n == 2) decoder_drop(d, 0, 1);
            x = y;
            todo[0] = x, n_todo = 1;
        }
    }
    /* the first token comes from the prompt's prefill, every other from a step */
    const char *unit = out->tok ? "tokens" : "bytes";
    fprintf(stderr,
            "draft mtp: %lld of %lld guesses of the %s after next accepted (%.3f); %lld %s "
            "in %lld steps of the model after the prompt's prefill (%lld restarts of the window, "
            "a prefill each), %.3f %s a step\n",
            accepted, guesses, out->tok ? "token" : "byte",
            guesses ? (double)accepted / (double)guesses : 0.0, n_new, unit, steps, restarts,
            steps ? (double)(n_new - 1) / (double)steps : 0.0, unit);
}

/* The end of moe sample's output: one sample's newline (its tokens went out as they came), or
 * each of S samples after its prompt (plen (S) bytes), ids (S, n_new) printed through out. */
static void print_samples(SampleOut *out, char **prompt, const int *plen, int **ids, int S,
                          long long n_new) {
    if (S == 1) putchar('\n');
    for (int s = 0; S > 1 && s < S; s++) {
        printf("--- sample %d of %d ---\n", s + 1, S);
        put_prompt(out, prompt[s], plen[s]);
        for (long long i = 0; i < n_new; i++) put_token(out, ids[s][i]);
        putchar('\n');
    }
}

/* The run's tokenizer (tok/tok.h: the tokenizer.json beside the checkpoint) into t: returns t,
 * or NULL for a run of bytes (none there), whose ids are printed as the bytes they are. A
 * tokenizer of another vocabulary than the model's is refused, and so is a model of other ids
 * than the 256 bytes without one: its ids printed as bytes would be noise. */
static Tokenizer *sample_tokenizer(Tokenizer *t, const Config *c, const char *ckpt) {
    char err[1024], path[MOE_TOK_PATH_MAX];
    uint32_t crc;
    tok_run_path(ckpt, path, sizeof path);
    const int rc = tok_run_load(t, ckpt, &crc, err, sizeof err);
    if (rc < 0) moe_input_error("sample: the run's tokenizer %s", err);
    if (rc == 1 && t->n_vocab != c->vocab)
        moe_input_error("sample: %s has model.vocab=%d, but the tokenizer beside it, %s, has %d "
                        "tokens: it is not the tokenizer of this model's ids; put the "
                        "tokenizer.json the run's shards were made with beside the checkpoint",
                        ckpt, c->vocab, path, t->n_vocab);
    if (rc == 0 && c->vocab != MOE_VOCAB)
        moe_input_error("sample: %s has model.vocab=%d: its tokens are not the %d bytes that "
                        "`moe sample` prints without a tokenizer, and there is no %s beside it to "
                        "turn them into text; copy the tokenizer.json the run's shards were made "
                        "with there (`moe eval --ckpt %s` measures its loss without one)",
                        ckpt, c->vocab, MOE_VOCAB, path, ckpt);
    return rc == 1 ? t : NULL;
}

/* Each prompt's tokens (prompt_ids), the last T of them, as its window: win (S, T), wlen (S). */
static void fill_windows(Tokenizer *tok, char **prompt, const int *plen, int S, int T, int *win,
                         int *wlen) {
    TokIds ids = {0};
    for (int s = 0; s < S; s++) {
        ids.n = 0;
        prompt_ids(tok, prompt[s], plen[s], &ids);
        const size_t from = ids.n > (size_t)T ? ids.n - (size_t)T : 0;
        wlen[s] = (int)(ids.n - from);
        memcpy(win + (size_t)s * T, ids.id + from, (size_t)wlen[s] * sizeof(int));
    }
    tok_ids_free(&ids);
}

/* moe sample: S prompts decoded together, their tokens those of the run's tokenizer or bytes
 * (sample_tokenizer). Each sequence's context is a window of at most T (seq_len) tokens: the
 * last T of its prompt, then every token sampled; when it is full, it starts again from its last
 * T / 2 tokens. With the key-value cache (the default) a new token costs one decoding step and a
 * restart one prefill; --no-cache computes the same window with a full forward at every token
 * (the reference: the same tokens at temperature 0). */
int cmd_sample(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "sample", argc, argv);
    sample_check(&o);
    Config c;
    load_ckpt_config(&c, o.ckpt);
    Tokenizer tk;
    SampleOut out = {sample_tokenizer(&tk, &c, o.ckpt), o.ids, 0};
    char **prompt;
    int *plen;
    const int S = read_prompts(&o, &prompt, &plen), T = c.seq_len, keep = T / 2, V = c.vocab;
    const long long n_new = o.tokens > 0 ? o.tokens : 200;
    Model m;
    load_model(&m, &c, o.ckpt, S, T);
    backend_set_threads(c.threads);
    Decoder d = {0};
    char err[1024];
    if (!o.no_cache && decoder_init(&d, &m, err, sizeof err) != 0)
        moe_input_error("sample: %s", err);
    if (o.draft && decoder_draft_open(&d, err, sizeof err) != 0) moe_input_error("sample: %s", err);
    ServedExperts sx;
    if (served_experts_attach(&sx, &m, o.quant ? quant_format_parse(o.quant) : QUANT_FP32,
                              (int)o.offload, err, sizeof err) != 0)
        moe_input_error("sample: %s", err);
    m.spec.eval_capacity_factor = 0.0f; /* both ways route dropless, as the decoder does */

    /* win (S, T): each sequence's context, wlen its length; ids (S, n_new): with S > 1 the
     * tokens sampled, printed at the end */
    int *win = (int *)malloc_check((size_t)S * T * sizeof(int));
    int *wlen = (int *)malloc_check((size_t)S * sizeof(int));
    int *next = (int *)malloc_check((size_t)S * sizeof(int));
    float *logits = floats_alloc((size_t)S * V);
    double *probs = (double *)malloc_check((size_t)V * sizeof(double));
    Rng *rng = (Rng *)malloc_check((size_t)S * sizeof(Rng));
    int **ids = (int **)calloc_check((size_t)S, sizeof(int *));
    fill_windows(out.tok, prompt, plen, S, T, win, wlen);
    for (int s = 0; s < S; s++) {
        rng_seed(&rng[s], (o.seed_given ? (uint64_t)o.seed : c.seed) + (uint64_t)s);
        if (S > 1) ids[s] = (int *)malloc_check((size_t)n_new * sizeof(int));
    }
    /* the logits after each window: one prefill, or one full forward per sequence */
    if (!o.no_cache) prefill_windows(&d, win, wlen, S, T);
    if (S == 1) put_prompt(&out, prompt[0], plen[0]);
    if (o.draft) draft_sample(&d, &out, win, wlen[0], T, n_new); /* one prompt (sample_check) */
    for (long long i = 0; !o.draft && i <= n_new; i++) {
        if (o.no_cache)
            window_logits(logits, &m, win, wlen, S, T);
        else
            memcpy(logits, d.logits, (size_t)S * V * sizeof(float));
        if (i == n_new) break;
        for (int s = 0; s < S; s++) {
            next[s] = pick_token(logits + (size_t)s * V, V, o.temperature, &rng[s], probs);
            if (S == 1)
                put_token(&out, next[s]);
            else
                ids[s][i] = next[s];
            int *w = win + (size_t)s * T;
            if (wlen[s] == T) { /* full: start again from the last T / 2 tokens */
                memmove(w, w + T - keep, (size_t)keep * sizeof(int));
                wlen[s] = keep;
                if (!o.no_cache && keep > 0) decoder_prefill(&d, s, 1, w, keep, &wlen[s]);
                if (!o.no_cache && keep == 0) d.len[s] = 0;
            }
            w[wlen[s]++] = next[s];
        }
        if (!o.no_cache) decoder_step(&d, next);
    }
    print_samples(&out, prompt, plen, ids, S, n_new);
    for (int s = 0; s < S; s++) free(prompt[s]), free(ids[s]);
    free(prompt), free(plen), free(ids), free(rng), free(probs), free(logits), free(next),
        free(wlen), free(win);
    if (out.tok) tok_free(out.tok);
    served_experts_detach(&sx, &m);
    decoder_free(&d);
    model_free(&m);
    return 0;
}
