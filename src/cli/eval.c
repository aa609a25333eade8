/*
 * eval.c: the commands that run a trained model: `moe eval` (the validation loss, and with
 * --logits the first batch's logits for another framework to compare with) and `moe sample`
 * (text, one byte at a time).
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
#include "train/train.h"

/* eval --logits: the first validation batch evaluate() reads, its logits before the softmax
 * (a forward without targets) and its loss, as safetensors: "tokens" and "targets" (B, T),
 * byte values as floats, "logits" (B, T, V), metadata "loss". Another framework given the same
 * weights compares its own logits and loss with these (plots/hf/compare.py). */
static void write_eval_logits(Model *m, const Shard *val, int batches, const char *path) {
    const int B = m->B, T = m->T, N = B * T;
    int *inputs = (int *)malloc_check((size_t)N * sizeof(int));
    int *targets = (int *)malloc_check((size_t)N * sizeof(int));
    uint8_t *domains = (uint8_t *)malloc_check((size_t)N);
    loader_val_batch(val, B, T, 0, batches, inputs, targets, domains);
    m->training = 0;
    model_forward(m, inputs, NULL, B, T);
    float *logits = (float *)malloc_check((size_t)N * MOE_VOCAB * sizeof(float));
    m->be->to_host(m->be, logits, m->logits, (size_t)N * MOE_VOCAB * sizeof(float));
    model_forward(m, inputs, targets, B, T);
    const float loss = m->loss; /* the cross-entropy, as evaluate() sums it */
    float *tok = (float *)malloc_check((size_t)N * sizeof(float) * 2);
    for (int i = 0; i < N; i++) tok[i] = (float)inputs[i], tok[N + i] = (float)targets[i];
    TensorRef e[3] = {{"tokens", TENSOR_F32, 2, {B, T, 0}, (size_t)N * sizeof(float), tok},
                      {"targets", TENSOR_F32, 2, {B, T, 0}, (size_t)N * sizeof(float), tok + N},
                      {"logits", TENSOR_F32, 3, {B, T, MOE_VOCAB},
                       (size_t)N * MOE_VOCAB * sizeof(float), logits}};
    char v[32], err[1024];
    snprintf(v, sizeof v, "%.9g", (double)loss);
    const char *keys[] = {"loss", "format"}, *vals[] = {v, "moe.c eval logits"};
    if (safetensors_write(path, e, 3, keys, vals, 2, err, sizeof err) != 0)
        moe_input_error("eval --logits: %s", err);
    printf("wrote %s: the first batch's tokens, targets and logits (%d x %d x %d), loss %.6f\n",
           path, B, T, MOE_VOCAB, (double)loss);
    free(logits);
    free(tok);
    free(inputs);
    free(targets);
    free(domains);
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
        shard_check_window(&val, c.seq_len, err, sizeof err) != 0)
        moe_input_error("data.val: %s", err);
    if (o.logits_out && file_exists(o.logits_out))
        moe_input_error("eval: --logits %s already exists; choose another name or remove it first",
                        o.logits_out);
    Model m;
    load_model(&m, &c, o.ckpt, c.batch, c.seq_len);
    backend_set_threads(c.threads);
    int batches = o.batches > 0 ? (int)o.batches : c.eval_batches;
    if (o.logits_out) write_eval_logits(&m, &val, batches, o.logits_out);
    float loss = evaluate(&m, &val, batches, NULL);
    printf("val_loss %.6f (%d batches of %d x %d tokens from %s)\n", loss, batches, c.batch,
           c.seq_len, c.val);
    model_free(&m);
    shard_free(&val);
    return 0;
}

int cmd_sample(int argc, char **argv) {
    Opts o;
    parse_opts(&o, "sample", argc, argv);
    if (!o.ckpt) usage_error("sample", "%s", "--ckpt PATH is required");
    Config c;
    load_ckpt_config(&c, o.ckpt);
    const int T = c.seq_len;
    Model m;
    load_model(&m, &c, o.ckpt, 1, T);
    backend_set_threads(c.threads);
    const char *prompt = o.prompt && o.prompt[0] ? o.prompt : "\n";
    const long long n_new = o.tokens > 0 ? o.tokens : 200;
    /* The model sees the last T tokens, so only a window of 2 T is kept: when it is full, its
     * second half moves to the front. The count of sampled tokens is a long long loop bound,
     * never an index, so no --tokens value can wrap around. */
    int *win = (int *)malloc_check((size_t)2 * T * sizeof(int));
    int len = 0;
    for (const char *p = prompt; *p; p++) {
        if (len == 2 * T) {
            memmove(win, win + T, (size_t)T * sizeof(int));
            len = T;
        }
        win[len++] = (unsigned char)*p;
    }
    Rng r;
    rng_seed(&r, o.seed_given ? (uint64_t)o.seed : c.seed);
    fputs(prompt, stdout);
    double probs[MOE_VOCAB];
    float logits[MOE_VOCAB];
    for (long long i = 0; i < n_new; i++) {
        /* the next token's logits are the last row (brought to the host: the backend's memory
         * may be a device's) */
        const int start = len > T ? len - T : 0, n = len - start;
        model_forward(&m, win + start, NULL, 1, n);
        m.be->to_host(m.be, logits, m.logits + (size_t)(n - 1) * MOE_VOCAB, sizeof logits);
        int next = 0;
        if (o.temperature <= 0.0) {
            for (int v = 1; v < MOE_VOCAB; v++)
                if (logits[v] > logits[next]) next = v;
        } else {
            /* softmax(logits / t) in double, shifted by the max: the largest term is exp(0) =
             * 1 whatever t, so a tiny temperature (1e-50) gives the greedy byte instead of
             * 0 / 0, and nothing overflows for any t in (0, 100] */
            double max = logits[0], sum = 0.0;
            for (int v = 1; v < MOE_VOCAB; v++) max = logits[v] > max ? logits[v] : max;
            for (int v = 0; v < MOE_VOCAB; v++) {
                probs[v] = exp(((double)logits[v] - max) / o.temperature);
                sum += probs[v];
            }
            double u = rng_uniform(&r) * sum, acc = 0.0;
            for (next = 0; next < MOE_VOCAB - 1; next++) {
                acc += probs[next];
                if (acc > u) break;
            }
        }
        if (len == 2 * T) {
            memmove(win, win + T, (size_t)T * sizeof(int));
            len = T;
        }
        win[len++] = next;
        putchar(next);
    }
    putchar('\n');
    free(win);
    model_free(&m);
    return 0;
}
