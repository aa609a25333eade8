/*
 * test_backend_ops.c: every operation of every backend against the reference backend.
 *
 * One case per group of table entries (src/backend/backend.h): it draws fixed inputs, runs the
 * entries forward and backward on a backend (inputs copied in with to_device, outputs out
 * with to_host), and hands back every output. For each backend the outputs must equal
 * cpu-ref's under the one tolerance rule of testutil.h (integer outputs, such as a dispatch
 * plan, exactly). Every backend of the build is in BACKENDS (tests/backend_util.h): cpu-fenced
 * and, in a CUDA build on a GPU, cuda.
 *
 *   - coverage: every entry of the table is exercised by some case, and the table has no
 *     entry this file does not list (so a new op without a case fails here);
 *   - compare: each case on each backend against cpu-ref;
 *   - gradients: in test_backend_grad.c, every entry whose implementation differs from the
 *     reference's, against finite differences on its own backend;
 *   - memory: zero, copy, to_device and to_host move exactly the bytes asked for;
 *   - the CPU backends' own promises: in test_backend_cpu.c, the cpu experts' bits at any
 *     thread count and cpu-fenced's memory closed to the host.
 */
#include <stddef.h>
#include <string.h>

#include "backend_util.h"
#include "model/route_tape.h"
#include "nn/ops.h"

/* ---- what a case hands back ----------------------------------------------------------------- */

#define MAX_OUT 24
typedef struct {
    int n;
    const char *what[MAX_OUT];
    float *f[MAX_OUT]; /* host copies of float outputs (NULL for an int output) */
    int *i[MAX_OUT];   /* host copies of int outputs */
    size_t len[MAX_OUT];
} Outs;

static void outs_free(Outs *o) {
    for (int k = 0; k < o->n; k++) free(o->f[k]), free(o->i[k]);
    memset(o, 0, sizeof *o);
}

/* The outputs back to the host. */
static void out_f(Outs *o, const Backend *be, const char *what, const float *d, size_t n) {
    ck_assert(o->n < MAX_OUT);
    o->what[o->n] = what;
    o->f[o->n] = (float *)malloc_check((n ? n : 1) * sizeof(float));
    be->to_host(be, o->f[o->n], d, n * sizeof(float));
    o->len[o->n++] = n;
}
static void out_i(Outs *o, const Backend *be, const char *what, const int *d, size_t n) {
    ck_assert(o->n < MAX_OUT);
    o->what[o->n] = what;
    o->i[o->n] = (int *)malloc_check((n ? n : 1) * sizeof(int));
    be->to_host(be, o->i[o->n], d, n * sizeof(int));
    o->len[o->n++] = n;
}
static void out_scalar(Outs *o, const char *what, double v) {
    ck_assert(o->n < MAX_OUT);
    o->what[o->n] = what;
    o->f[o->n] = (float *)malloc_check(sizeof(float));
    o->f[o->n][0] = (float)v;
    o->len[o->n++] = 1;
}
/* ---- the cases ------------------------------------------------------------------------------ */

static void case_vec(const Backend *be, Outs *o) {
    const size_t n = 3 * VEC_CHUNK + 17; /* more than one chunk of the sum of squares */
    float *a = dev_rand(be, n, 1.0f, 1), *b = dev_rand(be, n, 1.0f, 2), *y = be_floats(be, n);
    be->add(be, y, a, b, n);
    out_f(o, be, "add", y, n);
    be->mul(be, y, a, b, n);
    out_f(o, be, "mul", y, n);
    be->scale(be, y, 0.37f, n);
    out_f(o, be, "scale", y, n);
    be->round_bf16(be, y, a, n);
    out_f(o, be, "round_bf16", y, n);
    double *partial = (double *)be->alloc(be, vec_chunks(n) * sizeof(double));
    be->sum(be, partial, a, n); /* written where the backend keeps it */
    double sum = 0.0;
    be->to_host(be, &sum, partial, sizeof sum);
    out_scalar(o, "sum", sum);
    double *ss = (double *)be->alloc(be, sizeof(double));
    be->sum_squares(be, ss, partial, a, n);
    be->to_host(be, &sum, ss, sizeof sum);
    out_scalar(o, "sum_squares", sum);
    release(be, ss);
    release(be, partial), release(be, a), release(be, b), release(be, y);
}

static void case_embed_rows(const Backend *be, Outs *o) {
    enum { N = 37, C = 12, V = 256 };
    int tok[N], to[N];
    for (int n = 0; n < N; n++) tok[n] = (n * 91 + 7) % V, to[n] = (n * 11) % N; /* 11 coprime */
    int *dtok = dev_copy_i(be, tok, N), *dto = dev_copy_i(be, to, N);
    float *emb = dev_rand(be, (size_t)V * C, 1.0f, 3), *x = be_floats(be, (size_t)N * C);
    float *dx = dev_rand(be, (size_t)N * C, 1.0f, 4), *demb = dev_rand(be, (size_t)V * C, 0.1f, 5);
    be->embed_forward(be, x, dtok, emb, N, C);
    out_f(o, be, "embed_forward", x, (size_t)N * C);
    be->embed_backward(be, demb, dx, dtok, N, C, V);
    out_f(o, be, "embed_backward (accumulated)", demb, (size_t)V * C);
    float *r = be_floats(be, (size_t)N * C);
    be->permute_rows(be, r, dx, dto, N, C, 0);
    out_f(o, be, "permute_rows", r, (size_t)N * C);
    be->permute_rows(be, r, dx, dto, N, C, 1);
    out_f(o, be, "permute_rows back", r, (size_t)N * C);
    /* a 5-wide block from rows of 12 into rows of 7, written, then added to */
    float *blk = dev_rand(be, (size_t)N * 7, 1.0f, 6);
    be->copy_block(be, blk + 1, 7, dx + 3, C, N, 5, 0);
    out_f(o, be, "copy_block", blk, (size_t)N * 7);
    be->copy_block(be, blk + 2, 7, emb + 4, C, N, 5, 1);
    out_f(o, be, "copy_block (added)", blk, (size_t)N * 7);
    release(be, dtok), release(be, dto), release(be, emb), release(be, x), release(be, dx);
    release(be, demb), release(be, r), release(be, blk);
}

/* odd sizes, so that no product is a multiple of a vector width */
enum { MM_N = 37, MM_IN = 29, MM_OUT = 23 };

static void case_matmul(const Backend *be, Outs *o) {
    const int N = MM_N, IN = MM_IN, OUT = MM_OUT;
    float *x = dev_rand(be, (size_t)N * IN, 1.0f, 6), *W = dev_rand(be, (size_t)OUT * IN, 0.5f, 7);
    float *dy = dev_rand(be, (size_t)N * OUT, 1.0f, 8), *y = be_floats(be, (size_t)N * OUT);
    float *dx = be_floats(be, (size_t)N * IN), *dW = dev_rand(be, (size_t)OUT * IN, 0.1f, 9);
    be->matmul_forward(be, y, x, W, N, IN, OUT);
    out_f(o, be, "matmul y", y, (size_t)N * OUT);
    be->matmul_backward(be, dx, dW, dy, x, W, N, IN, OUT);
    out_f(o, be, "matmul dx", dx, (size_t)N * IN);
    out_f(o, be, "matmul dW (accumulated)", dW, (size_t)OUT * IN);
    release(be, x), release(be, W), release(be, dy), release(be, y), release(be, dx);
    release(be, dW);
}

/* the router's product: matmul's arguments at the router's shapes (E outputs) */
static void case_router_logits(const Backend *be, Outs *o) {
    enum { N = 19, C = 24, E = 6 };
    float *x = dev_rand(be, N * C, 1.0f, 90), *W = dev_rand(be, E * C, 0.5f, 91);
    float *dl = dev_rand(be, N * E, 1.0f, 92), *logits = be_floats(be, N * E);
    float *dx = be_floats(be, N * C), *dW = dev_rand(be, E * C, 0.1f, 93);
    be->router_logits_forward(be, logits, x, W, N, C, E);
    out_f(o, be, "router logits", logits, N * E);
    be->router_logits_backward(be, dx, dW, dl, x, W, N, C, E);
    out_f(o, be, "router dx", dx, N * C);
    out_f(o, be, "router dWr (accumulated)", dW, E * C);
    release(be, x), release(be, W), release(be, dl), release(be, logits), release(be, dx);
    release(be, dW);
}

static void case_norm_rope_swiglu(const Backend *be, Outs *o) {
    enum { B = 2, T = 7, H = 3, D = 6, C = H * D, N = B * T, F = 13 };
    float *x = dev_rand(be, N * C, 1.0f, 10), *w = dev_rand(be, C, 1.0f, 11);
    float *dy = dev_rand(be, N * C, 1.0f, 12), *y = be_floats(be, N * C);
    float *rstd = be_floats(be, N), *dx = be_floats(be, N * C), *dw = dev_rand(be, C, 0.1f, 13);
    be->rmsnorm_forward(be, y, rstd, x, w, N, C);
    out_f(o, be, "rmsnorm y", y, N * C);
    out_f(o, be, "rmsnorm rstd", rstd, N);
    be->rmsnorm_backward(be, dx, dw, dy, x, w, rstd, N, C);
    out_f(o, be, "rmsnorm dx", dx, N * C);
    out_f(o, be, "rmsnorm dw (accumulated)", dw, C);
    float cs_h[T * D];
    rope_table(cs_h, T, D, 10000.0f);
    float *cs = dev_copy(be, cs_h, T * D);
    be->rope_forward(be, y, cs, B, T, H, D);
    out_f(o, be, "rope forward (in place)", y, N * C);
    be->rope_backward(be, dy, cs, B, T, H, D);
    out_f(o, be, "rope backward (in place)", dy, N * C);
    float *g = dev_rand(be, N * F, 2.0f, 14), *u = dev_rand(be, N * F, 1.0f, 15);
    float *dh = dev_rand(be, N * F, 1.0f, 16), *h = be_floats(be, N * F);
    float *dg = be_floats(be, N * F), *du = be_floats(be, N * F);
    be->swiglu_forward(be, h, g, u, N, F);
    out_f(o, be, "swiglu h", h, N * F);
    be->swiglu_backward(be, dg, du, dh, g, u, N, F);
    out_f(o, be, "swiglu dg", dg, N * F);
    out_f(o, be, "swiglu du", du, N * F);
    void *all[] = {x, w, dy, y, rstd, dx, dw, cs, g, u, dh, h, dg, du};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) release(be, all[k]);
}

/* T = 19, and T = 150: three blocks of query rows in attention_gemm.c, the last partial; 3 heads
 * of their own, or 6 query heads in 3 groups of 2 */
static void attention_at(const Backend *be, Outs *o, const int T, const int H, const int Hkv,
                         const int Dv) {
    enum { B = 2, D = 8, NWS = 4 };
    const int N = B * T, QW = H * D, KW = Hkv * D, VW = Hkv * Dv, OW = H * Dv;
    float *q = dev_rand(be, N * QW, 1.0f, 17), *k = dev_rand(be, N * KW, 1.0f, 18);
    float *v = dev_rand(be, N * VW, 1.0f, 19), *dout = dev_rand(be, N * OW, 1.0f, 20);
    float *out = be_floats(be, N * OW), *att = be_floats(be, (size_t)B * H * T * T);
    float *ws = be_floats(be, (size_t)NWS * T * T);
    float *dq = be_floats(be, N * QW), *dk = be_floats(be, N * KW), *dv = be_floats(be, N * VW);
    be->attention_forward(be, out, att, q, k, v, B, T, H, Hkv, D, Dv);
    out_f(o, be, "attention out", out, N * OW);
    out_f(o, be, "attention probabilities", att, (size_t)B * H * T * T);
    be->attention_backward(be, dq, dk, dv, ws, dout, att, q, k, v, B, T, H, Hkv, D, Dv, NWS);
    out_f(o, be, "attention dq", dq, N * QW);
    out_f(o, be, "attention dk", dk, N * KW);
    out_f(o, be, "attention dv", dv, N * VW);
    void *all[] = {q, k, v, dout, out, att, ws, dq, dk, dv};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) release(be, all[j]);
}
static void case_attention(const Backend *be, Outs *o) {
    attention_at(be, o, 19, 3, 3, 8);
}
static void case_attention_blocks(const Backend *be, Outs *o) {
    attention_at(be, o, 150, 3, 3, 8);
}
static void case_attention_grouped(const Backend *be, Outs *o) {
    attention_at(be, o, 70, 6, 3, 8);
}
/* latent attention's heads: values narrower than queries and keys */
static void case_attention_narrow_values(const Backend *be, Outs *o) {
    attention_at(be, o, 41, 3, 3, 6);
}

/* decoding: three sequences at positions 0, 5 and 10 of an 11-position cache, the second with
 * a second row at position 6 (a row of its own, attending to the first), 6 query heads on 2
 * key-value heads */
static void case_decode(const Backend *be, Outs *o) {
    enum { N = 4, S = 3, H = 6, HKV = 2, D = 8, QW = H * D, KW = HKV * D, TC = 11 };
    const int pos_h[N] = {0, 5, 6, 10}, rows_h[N] = {0, TC + 5, TC + 6, 2 * TC + 10};
    float cs_h[TC * D];
    rope_table(cs_h, TC, D, 10000.0f);
    float *cs = dev_copy(be, cs_h, TC * D), *q = dev_rand(be, N * QW, 1.0f, 40);
    float *kc = dev_rand(be, (size_t)S * TC * KW, 1.0f, 41);
    float *vc = dev_rand(be, (size_t)S * TC * KW, 1.0f, 42);
    float *out = be_floats(be, N * QW), *att = dev_rand(be, (size_t)N * H * TC, 1.0f, 43);
    int *pos = dev_copy_i(be, pos_h, N), *rows = dev_copy_i(be, rows_h, N);
    be->rope_forward_at(be, q, cs, pos, N, H, D);
    out_f(o, be, "rope_forward_at (in place)", q, N * QW);
    be->attention_decode(be, out, att, q, kc, vc, rows, N, H, HKV, D, D, TC);
    out_f(o, be, "attention_decode out", out, N * QW);
    out_f(o, be, "attention_decode probabilities", att, (size_t)N * H * TC);
    void *all[] = {cs, q, kc, vc, out, att, pos, rows};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) release(be, all[j]);
}

static void case_loss_adamw(const Backend *be, Outs *o) {
    enum { N = 11, V = 256 };
    int tg[N];
    for (int n = 0; n < N; n++) tg[n] = (n * 37 + 3) % V;
    int *dtg = dev_copy_i(be, tg, N);
    float *logits = dev_rand(be, N * V, 3.0f, 21), *losses = be_floats(be, N);
    float *probs = be_floats(be, N * V), *dl = be_floats(be, N * V);
    be->crossentropy_forward(be, losses, probs, logits, dtg, N, V);
    out_f(o, be, "crossentropy losses", losses, N);
    out_f(o, be, "crossentropy probabilities", probs, N * V);
    be->crossentropy_backward(be, dl, probs, dtg, 1.0f / N, N, V);
    out_f(o, be, "crossentropy dlogits", dl, N * V);
    const size_t n = 1000;
    float *p = dev_rand(be, n, 1.0f, 22), *g = dev_rand(be, n, 1.0f, 23);
    float *m = dev_rand(be, n, 0.1f, 24), *v = dev_rand(be, n, 0.1f, 25);
    be->scale(be, v, 0.0f, n); /* second moments start at zero... */
    be->add(be, v, v, m, n);   /* ...plus something, then squared to stay non-negative */
    be->mul(be, v, v, v, n);
    const AdamwStep st = {.lr = 1e-2f,
                          .beta1 = 0.9f,
                          .beta2 = 0.95f,
                          .eps = 1e-8f,
                          .weight_decay = 0.1f,
                          .grad_scale = 0.5f,
                          .step = 3,
                          .clear_grad = 1};
    be->adamw_update(be, p, g, m, v, n, &st);
    out_f(o, be, "adamw p", p, n);
    out_f(o, be, "adamw m", m, n);
    out_f(o, be, "adamw v", v, n);
    out_f(o, be, "adamw g (cleared)", g, n);
    void *all[] = {dtg, logits, losses, probs, dl, p, g, m, v};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) release(be, all[j]);
}

/* The MoE block's entries, in order: scores, gate, losses, a plan (dropless, capacity or
 * expert choice), gather, experts, combine, and every backward. */
enum { R_N = 24, R_C = 10, R_E = 6, R_K = 2, R_F = 9 };

static MoeSpec router_spec(int variant) {
    MoeSpec sp = {.d_model = R_C, .num_experts = R_E, .top_k = R_K, .d_expert = R_F};
    moe_spec_defaults(&sp);
    sp.norm_topk = 1, sp.aux_coef = 0.01f, sp.z_coef = 0.001f, sp.seq_len = 8;
    if (variant == 1) sp.capacity_factor = 1.0f, sp.padded = 1, sp.drop_policy = MOE_DROP_SCORE;
    if (variant == 2) sp.routing = MOE_ROUTING_EXPERT_CHOICE, sp.balance = MOE_BALANCE_NONE;
    if (variant == 3) sp.score = MOE_SCORE_SIGMOID, sp.balance = MOE_BALANCE_SEQ_AUX;
    if (variant == 4) /* DeepSeek-V3's group-limited routing: 3 groups of 2, 1 kept */
        sp.score = MOE_SCORE_SIGMOID, sp.n_group = 3, sp.topk_group = 1;
    return sp;
}

static void case_moe(const Backend *be, Outs *o, int variant) {
    const MoeSpec sp = router_spec(variant);
    const int N = R_N, C = R_C, E = R_E, F = R_F, A = moe_assignments_per_token(&sp);
    /* sequences of seq_len = 8 tokens, and every other field of the context set, each in the
     * memory backend.h gives it (cpu-fenced checks them all): a stream (host), one process
     * (host), a tape (host; the block applies it, no op reads it), micro-batch 1 of a step,
     * the block's scratch (device) and the aux loss's f from outside (device), skewed so that
     * a backend that did not read it would give another balance loss than cpu-ref's */
    MoeCtx cx;
    Rng rng;
    rng_seed(&rng, 36);
    moe_ctx_train(&cx, &sp, sp.seq_len, &rng);
    Dist one = {.rank = 0, .world = 1, .ep = 1, .dp = 1, .timeout_s = 10.0};
    RouteTape tape = {0};
    float f_h[R_E];
    for (int e = 0; e < E; e++) f_h[e] = (float)(e + 1) / (float)(E * (E + 1) / 2);
    float *gf = dev_copy(be, f_h, E);
    cx.dist = &one, cx.tape = &tape, cx.micro = 1, cx.global_f = gf;
    cx.work_bytes = moe_work_bytes(&sp, N), cx.work = be->alloc(be, cx.work_bytes);
    const size_t S = moe_slots_max(&sp, N), NA = (size_t)N * A;
    float *x = dev_rand(be, (size_t)N * C, 1.0f, 30), *Wr = dev_rand(be, (size_t)E * C, 1.0f, 31);
    float *logits = be_floats(be, (size_t)N * E), *scores = be_floats(be, (size_t)N * E);
    float *lse = be_floats(be, N), *w = be_floats(be, NA);
    int *idx = be_ints(be, NA);
    float *loss = be_floats(be, 1); /* the balance and z losses, where the backend writes them */
    DispatchPlan p = {.E = E, .K = A};
    p.counts = be_ints(be, E), p.offsets = be_ints(be, E + 1);
    p.slot = be_ints(be, NA + 1), p.slot_token = be_ints(be, S + 1);
    be->matmul_forward(be, logits, x, Wr, N, C, E);
    be->router_scores_forward(be, scores, lse, logits, N, &sp);
    out_f(o, be, "router scores", scores, (size_t)N * E);
    out_f(o, be, "router lse", lse, N);
    if (sp.routing == MOE_ROUTING_EXPERT_CHOICE) {
        be->expert_choice_forward(be, idx, w, &p, scores, N, &sp, &cx);
    } else {
        be->router_gate_forward(be, idx, w, scores, logits, NULL, N, &sp);
        /* the weights of a forced choice (a routing replay): every token's K experts shifted
         * by one, order kept */
        int forced[R_N * R_K];
        be->to_host(be, forced, idx, sizeof forced);
        for (size_t j = 0; j < NA; j++) forced[j] = (forced[j] + 1) % E;
        int *fidx = be_ints(be, NA);
        float *fw = be_floats(be, NA);
        be->to_device(be, fidx, forced, sizeof forced);
        be->router_gate_weights(be, fw, fidx, scores, logits, N, &sp);
        out_f(o, be, "gate weights of a forced choice", fw, NA);
        release(be, fidx), release(be, fw);
        be->router_balance_loss(be, loss, scores, idx, N, &sp, &cx);
        out_f(o, be, "balance loss", loss, 1);
        if (cx.capacity_factor > 0.0f)
            be->capacity_plan_build(be, &p, idx, scores, w, N, &sp, &cx);
        else
            be->dispatch_plan_build(be, &p, idx, N);
    }
    be->router_z_loss(be, loss, lse, N);
    out_f(o, be, "z loss", loss, 1);
    out_i(o, be, "routing idx", idx, NA);
    out_f(o, be, "gate weights", w, NA);
    out_i(o, be, "plan slot", p.slot, NA);
    out_i(o, be, "plan offsets", p.offsets, (size_t)E + 1);
    /* the rows, the experts, the combine, and back */
    const int Sp = p.S;
    float *xe = be_floats(be, S * C), *ye = be_floats(be, S * C), *y = be_floats(be, (size_t)N * C);
    float *g = be_floats(be, S * F), *u = be_floats(be, S * F), *h = be_floats(be, S * F);
    float *Wg = dev_rand(be, (size_t)E * F * C, 0.5f, 32),
          *Wu = dev_rand(be, (size_t)E * F * C, 0.5f, 33);
    float *Wd = dev_rand(be, (size_t)E * C * F, 0.5f, 34);
    be->permute_forward(be, xe, x, &p, C);
    be->experts_forward(be, ye, g, u, h, xe, Wg, Wu, Wd, p.offsets, p.counts, E, C, F);
    be->combine_forward(be, y, ye, w, &p, C);
    out_f(o, be, "block output", y, (size_t)N * C);
    float *dy = dev_rand(be, (size_t)N * C, 1.0f, 35), *dye = be_floats(be, S * C);
    float *dw = be_floats(be, NA), *dxe = be_floats(be, S * C), *dx = be_floats(be, (size_t)N * C);
    float *dg = be_floats(be, S * F), *du = be_floats(be, S * F), *dh = be_floats(be, S * F);
    float *dW = be_floats(be, 3 * (size_t)E * F * C), *dl = be_floats(be, (size_t)N * E);
    const size_t wn = (size_t)E * F * C;
    be->combine_backward(be, dye, dw, dy, ye, w, &p, C);
    be->experts_backward(be, dxe, dW, dW + wn, dW + 2 * wn, dg, du, dh, dye, xe, g, u, h, Wg, Wu,
                         Wd, p.offsets, p.counts, E, C, F);
    be->permute_backward(be, dx, dxe, &p, C);
    out_f(o, be, "experts dxe", dxe, (size_t)Sp * C);
    out_f(o, be, "experts dW", dW, 3 * wn);
    out_f(o, be, "block dx (expert path)", dx, (size_t)N * C);
    MoeSpec spb = sp;
    if (sp.routing == MOE_ROUTING_EXPERT_CHOICE) /* as the block does (model/moe_block.c) */
        spb.top_k = E, spb.norm_topk = 0, spb.topk_before_softmax = 0,
        spb.balance = MOE_BALANCE_NONE;
    be->router_gate_backward(be, dl, dw, scores, lse, logits, idx, w, N, &spb, &cx,
                             moe_balance_coef(&spb), sp.z_coef);
    out_f(o, be, "router dlogits", dl, (size_t)N * E);
    /* what the decision did, as host numbers */
    RouteStats rs;
    route_stats_alloc(&rs, E);
    be->route_stats(be, &rs, scores, logits, lse, idx, &p, N, &sp);
    out_scalar(o, "route_stats drop", rs.drop);
    out_scalar(o, "route_stats pad", rs.pad);
    out_scalar(o, "route_stats entropy", rs.st.entropy);
    out_scalar(o, "route_stats maxvio", rs.st.maxvio);
    out_scalar(o, "route_stats max_logit", rs.max_logit);
    out_scalar(o, "route_stats lse_mean", rs.lse_mean);
    float counts[2 * R_E];
    for (int e = 0; e < E; e++)
        counts[e] = (float)rs.routed[e], counts[E + e] = (float)rs.dropped[e];
    ck_assert(o->n < MAX_OUT);
    o->what[o->n] = "route_stats routed, dropped";
    o->f[o->n] = (float *)malloc_check(sizeof counts);
    memcpy(o->f[o->n], counts, sizeof counts);
    o->len[o->n++] = 2 * (size_t)E;
    /* the same numbers through a record left in the backend's memory (a training step's way),
     * copied down and read: route_stats' own, bit for bit, on every backend */
    const size_t rb = route_record_bytes(E);
    void *rec = be->alloc(be, rb);
    char *hrec = (char *)malloc_check(rb);
    be->route_stats_record(be, rec, scores, logits, lse, idx, &p, N, &sp);
    be->to_host(be, hrec, rec, rb);
    RouteStats rr;
    route_stats_alloc(&rr, E);
    be->route_stats_read(be, &rr, hrec, &sp);
    ck_assert_msg(
        rr.drop == rs.drop && rr.pad == rs.pad && rr.max_logit == rs.max_logit &&
            rr.lse_mean == rs.lse_mean && memcmp(&rr.st, &rs.st, sizeof rs.st) == 0 &&
            memcmp(rr.load, rs.load, (size_t)E * sizeof(float)) == 0 &&
            memcmp(rr.routed, rs.routed, (size_t)E * sizeof(int)) == 0 &&
            memcmp(rr.dropped, rs.dropped, (size_t)E * sizeof(int)) == 0,
        "%s, variant %d: route_stats_record then route_stats_read differ from route_stats",
        be->name, variant);
    route_stats_free(&rr);
    free(hrec);
    release(be, rec);
    route_stats_free(&rs);
    unsigned char dom[R_N];
    for (int n = 0; n < N; n++) dom[n] = (unsigned char)(n % 3);
    double dcount[3 * R_E + 2] = {0};
    be->route_domains(be, dcount, dcount + 3 * R_E, dom, 3, idx, &p, N, &sp);
    float dc[3 * R_E + 2];
    for (int j = 0; j < 3 * R_E + 2; j++) dc[j] = (float)dcount[j];
    ck_assert(o->n < MAX_OUT);
    o->what[o->n] = "route_domains counts, drops";
    o->f[o->n] = (float *)malloc_check(sizeof dc);
    memcpy(o->f[o->n], dc, sizeof dc);
    o->len[o->n++] = 3 * (size_t)R_E + 2;
    void *all[] = {x,      Wr,           logits, scores, lse,     w,   idx, p.counts, p.offsets,
                   p.slot, p.slot_token, xe,     ye,     y,       g,   u,   h,        Wg,
                   Wu,     Wd,           dy,     dye,    dw,      dxe, dx,  dg,       du,
                   dh,     dW,           dl,     gf,     cx.work, loss};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) release(be, all[j]);
}
static void case_moe_dropless(const Backend *be, Outs *o) {
    case_moe(be, o, 0);
}
static void case_moe_capacity(const Backend *be, Outs *o) {
    case_moe(be, o, 1);
}
static void case_moe_expert_choice(const Backend *be, Outs *o) {
    case_moe(be, o, 2);
}
static void case_moe_sigmoid(const Backend *be, Outs *o) {
    case_moe(be, o, 3);
}
static void case_moe_groups(const Backend *be, Outs *o) {
    case_moe(be, o, 4);
}

/* router.csv's expert_sim, where the weights are: random experts, then every expert a copy of
 * the first (1, whatever the backend) */
static void case_experts_similarity(const Backend *be, Outs *o) {
    enum { E = 5, C = 6, F = 7 };
    const size_t n = (size_t)E * F * C;
    float *Wg = dev_rand(be, n, 1.0f, 40), *Wu = dev_rand(be, n, 1.0f, 41);
    float *Wd = dev_rand(be, n, 1.0f, 42);
    double *sim = (double *)be->alloc(be, sizeof(double)), got = 0.0;
    be->experts_similarity(be, sim, Wg, Wu, Wd, E, C, F);
    be->to_host(be, &got, sim, sizeof got);
    out_scalar(o, "expert similarity, random experts", got);
    for (int e = 1; e < E; e++)
        for (int t = 0; t < 3; t++) {
            float *w = t == 0 ? Wg : t == 1 ? Wu : Wd;
            be->copy(be, w + (size_t)e * F * C, w, (size_t)F * C * sizeof(float));
        }
    be->experts_similarity(be, sim, Wg, Wu, Wd, E, C, F);
    be->to_host(be, &got, sim, sizeof got);
    ck_assert_msg(fabs(got - 1.0) < 1e-6, "%s: copies of one expert have similarity %g, not 1",
                  be->name, got);
    release(be, sim), release(be, Wg), release(be, Wu), release(be, Wd);
}

static void case_gemm_seconds(const Backend *be, Outs *o) {
    double t[2] = {-1.0, -1.0};
    be->gemm_seconds(be, 64, 2, t);
    ck_assert_msg(t[0] > 0.0 && t[1] > 0.0, "%s: gemm_seconds gave %g, %g", be->name, t[0], t[1]);
    out_scalar(o, "a timed product (not compared)", 0.0);
}

typedef struct {
    const char *name;
    void (*run)(const Backend *be, Outs *o);
    const char *uses; /* the table entries it exercises, space-separated */
} Case;

static const Case CASES[] = {
    {"vec", case_vec, "alloc free to_device to_host add mul scale round_bf16 sum sum_squares"},
    {"embed and rows", case_embed_rows, "embed_forward embed_backward permute_rows copy_block"},
    {"matmul", case_matmul, "matmul_forward matmul_backward"},
    {"router logits", case_router_logits, "router_logits_forward router_logits_backward"},
    {"norm, rope, swiglu", case_norm_rope_swiglu,
     "rmsnorm_forward rmsnorm_backward rope_forward rope_backward swiglu_forward swiglu_backward"},
    {"attention", case_attention, "attention_forward attention_backward"},
    {"attention over several blocks", case_attention_blocks,
     "attention_forward attention_backward"},
    {"attention, grouped-query heads", case_attention_grouped,
     "attention_forward attention_backward"},
    {"attention, values narrower than keys", case_attention_narrow_values,
     "attention_forward attention_backward"},
    {"decoding", case_decode, "rope_forward_at attention_decode"},
    {"loss and adamw", case_loss_adamw, "crossentropy_forward crossentropy_backward adamw_update"},
    {"moe dropless", case_moe_dropless,
     "router_scores_forward router_gate_forward router_gate_weights router_balance_loss "
     "router_z_loss "
     "dispatch_plan_build permute_forward experts_forward combine_forward combine_backward "
     "experts_backward permute_backward router_gate_backward route_stats route_stats_record "
     "route_stats_read route_domains"},
    {"moe capacity, padded, by score", case_moe_capacity, "capacity_plan_build"},
    {"moe expert choice", case_moe_expert_choice, "expert_choice_forward"},
    {"moe sigmoid, seq_aux", case_moe_sigmoid, "router_scores_forward"},
    {"moe group-limited routing", case_moe_groups, "router_gate_forward"},
    {"experts_similarity", case_experts_similarity, "experts_similarity"},
    {"gemm_seconds", case_gemm_seconds, "gemm_seconds"},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* Every function entry of Backend, in its order (backend.h); zero, copy and sync are tested
 * in test_memory_ops. */
static const char *const ENTRIES[] = {"alloc",
                                      "free",
                                      "zero",
                                      "copy",
                                      "to_device",
                                      "to_host",
                                      "sync",
                                      "add",
                                      "mul",
                                      "scale",
                                      "round_bf16",
                                      "sum",
                                      "sum_squares",
                                      "embed_forward",
                                      "embed_backward",
                                      "permute_rows",
                                      "copy_block",
                                      "matmul_forward",
                                      "matmul_backward",
                                      "router_logits_forward",
                                      "router_logits_backward",
                                      "rmsnorm_forward",
                                      "rmsnorm_backward",
                                      "rope_forward",
                                      "rope_backward",
                                      "attention_forward",
                                      "attention_backward",
                                      "swiglu_forward",
                                      "swiglu_backward",
                                      "crossentropy_forward",
                                      "crossentropy_backward",
                                      "adamw_update",
                                      "rope_forward_at",
                                      "attention_decode",
                                      "router_scores_forward",
                                      "router_gate_forward",
                                      "router_gate_weights",
                                      "router_balance_loss",
                                      "router_z_loss",
                                      "router_gate_backward",
                                      "dispatch_plan_build",
                                      "capacity_plan_build",
                                      "expert_choice_forward",
                                      "permute_forward",
                                      "permute_backward",
                                      "combine_forward",
                                      "combine_backward",
                                      "experts_forward",
                                      "experts_backward",
                                      "route_stats",
                                      "route_stats_record",
                                      "route_stats_read",
                                      "route_domains",
                                      "experts_similarity",
                                      "gemm_seconds"};
#define N_ENTRIES ((int)(sizeof ENTRIES / sizeof ENTRIES[0]))

static int word_in(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return 1;
    return 0;
}

START_TEST(test_every_entry_has_a_case) {
    /* the function pointers of the table, from alloc to the optional collectives (checked by
     * tests/test_backend_coll.c) */
    const size_t n_ptrs =
        (offsetof(Backend, coll_open) - offsetof(Backend, alloc)) / sizeof(void (*)(void));
    ck_assert_uint_eq((sizeof(Backend) - offsetof(Backend, coll_open)) / sizeof(void (*)(void)), 6);
    ck_assert_msg((size_t)N_ENTRIES == n_ptrs,
                  "Backend has %zu entries from alloc on, this test lists %d: add the new entry "
                  "to ENTRIES and a case that runs it",
                  n_ptrs, N_ENTRIES);
    for (int e = 0; e < N_ENTRIES; e++) {
        int used = !strcmp(ENTRIES[e], "zero") || !strcmp(ENTRIES[e], "copy") ||
                   !strcmp(ENTRIES[e], "sync");
        for (int c = 0; c < N_CASES && !used; c++) used = word_in(CASES[c].uses, ENTRIES[e]);
        ck_assert_msg(used, "no case exercises the table entry %s", ENTRIES[e]);
    }
    for (int b = 0; b < N_BACKENDS; b++) {
        /* no entry left NULL */
        void (*const *f)(void) =
            (void (*const *)(void))((const char *)BACKENDS[b] + offsetof(Backend, alloc));
        for (int e = 0; e < N_ENTRIES; e++)
            ck_assert_msg(f[e] != NULL, "%s has no %s", BACKENDS[b]->name, ENTRIES[e]);
    }
}
END_TEST

START_TEST(test_case_against_reference) {
    const Case *c = &CASES[_i];
    Outs ref = {0};
    c->run(&backend_cpu_ref, &ref);
    for (int b = 0; b < N_BACKENDS; b++) {
        Outs got = {0};
        c->run(BACKENDS[b], &got);
        ck_assert_int_eq(got.n, ref.n);
        for (int k = 0; k < ref.n; k++) {
            char what[160];
            snprintf(what, sizeof what, "%s on %s: %s", c->name, BACKENDS[b]->name, ref.what[k]);
            ck_assert_msg(got.len[k] == ref.len[k], "%s: %zu values, want %zu", what, got.len[k],
                          ref.len[k]);
            if (ref.i[k]) {
                for (size_t j = 0; j < ref.len[k]; j++)
                    ck_assert_msg(got.i[k][j] == ref.i[k][j], "%s: element %zu is %d, want %d",
                                  what, j, got.i[k][j], ref.i[k][j]);
            } else {
                expect_close_arrays(got.f[k], ref.f[k], ref.len[k], TOL_F32_ATOL, TOL_F32_RTOL,
                                    what);
            }
        }
        outs_free(&got);
    }
    outs_free(&ref);
}
END_TEST

/* ---- memory --------------------------------------------------------------------------------- */

START_TEST(test_memory_ops) {
    for (int b = 0; b < N_BACKENDS; b++) {
        const Backend *be = BACKENDS[b];
        enum { n = 1000 };
        float h[n], back[n];
        fill_uniform(h, n, 1.0f, 70);
        size_t before = backend_bytes_allocated;
        float *a = dev_copy(be, h, n), *c = be_floats(be, n);
        ck_assert_uint_eq(backend_bytes_allocated - before, 2 * n * sizeof(float));
        be->to_host(be, back, c, sizeof back);
        for (int i = 0; i < n; i++)
            ck_assert_msg(back[i] == 0.0f, "%s: alloc not zeroed", be->name);
        be->copy(be, c + 10, a + 20, 100 * sizeof(float));
        be->sync(be);
        be->to_host(be, back, c, sizeof back);
        for (int i = 0; i < n; i++)
            ck_assert_msg(back[i] == (i >= 10 && i < 110 ? h[i + 10] : 0.0f),
                          "%s: copy moved the wrong bytes (element %d)", be->name, i);
        be->zero(be, c + 50, 10 * sizeof(float));
        be->to_host(be, back, c, sizeof back);
        for (int i = 50; i < 60; i++) ck_assert(back[i] == 0.0f);
        ck_assert(back[49] == h[59] && back[60] == h[70]);
        release(be, a), release(be, c);
    }
}
END_TEST

Suite *backend_ops_suite(void) {
    Suite *s = suite_create("backend_ops");
    TCase *tc = tcase_create("ops");
    tcase_add_test(tc, test_every_entry_has_a_case);
    tcase_add_loop_test(tc, test_case_against_reference, 0, N_CASES);
    tcase_add_test(tc, test_memory_ops);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(backend_ops_suite)
