/*
 * plan_model.c: a model's parameters and FLOPs from its shape, the moe.c engine's exchange
 * bytes, and a plan's inputs from a moe.c config. See plan.h; handbook chapter 7, "Counting
 * parameters".
 */
#include <math.h>
#include <string.h>

#include "base/util.h"
#include "plan/plan.h"

/* The query-key and value widths of one head. */
static double head_qk(const PlanModel *m) {
    if (m->c.attention == MOE_ATTN_MLA) return m->c.mla_nope_dim + m->c.mla_rope_dim;
    return m->c.head_dim > 0 ? m->c.head_dim : (double)m->c.d_model / m->c.n_head;
}
static double head_v(const PlanModel *m) {
    if (m->c.attention == MOE_ATTN_MLA) return m->c.mla_v_dim;
    return m->c.head_dim > 0 ? m->c.head_dim : (double)m->c.d_model / m->c.n_head;
}

void plan_count(const PlanModel *m, PlanCounts *o) {
    memset(o, 0, sizeof *o);
    const Config *c = &m->c;
    const double d = c->d_model, h = c->n_head, dqk = head_qk(m), dv = head_v(m);
    const double E = c->num_experts, K = c->top_k, F = config_expert_hidden(c);
    o->embed = (double)c->vocab * d;
    o->head = c->tied ? 0.0 : (double)c->vocab * d;
    o->final_norm = d;

    /* one layer's attention: the matrices, then the gains of its norms */
    /* pre-norms, and a sandwich's output norms (model.norm=sandwich or dssn) */
    double gains = (c->norm != MOE_NORM_PRE ? 4.0 : 2.0) * d;
    if (m->c.attention == MOE_ATTN_MLA) {
        /* queries through a rank-q_rank bottleneck (or straight from d), keys and values
         * from one shared latent of kv_rank plus the rotary part of the key */
        const double q =
            m->c.mla_q_rank > 0 ? d * m->c.mla_q_rank + m->c.mla_q_rank * h * dqk : d * h * dqk;
        const double kv = d * (m->c.mla_kv_rank + m->c.mla_rope_dim) +
                          m->c.mla_kv_rank * h * (m->c.mla_nope_dim + dv);
        o->attn = q + kv + h * dv * d;
        gains += (m->c.mla_q_rank > 0 ? m->c.mla_q_rank : 0.0) +
                 m->c.mla_kv_rank; /* the latents' norms */
    } else {
        const double kv = m->c.kv_heads > 0 ? m->c.kv_heads : h;
        o->attn = d * h * dqk + 2.0 * d * kv * dqk + h * dv * d;
        if (m->c.qk_norm == MOE_QK_NORM_HEAD) gains += 2.0 * dqk;
        if (m->c.qk_norm == MOE_QK_NORM_FULL) gains += (h + kv) * dqk;
    }
    o->norms = gains;
    o->dense_ffn = 3.0 * d * c->d_ff;
    o->router = E * d;
    o->expert = 3.0 * d * F;
    o->shared = 3.0 * d * c->num_shared * F;
    for (int l = 0; l < c->n_layer; l++) {
        if (config_is_moe_layer(c, l))
            o->n_moe++;
        else
            o->n_dense++;
    }

    const double L = c->n_layer;
    const double layers = L * (o->attn + o->norms) + o->n_dense * o->dense_ffn;
    o->total = o->embed + o->head + o->final_norm + layers +
               o->n_moe * (o->router + E * o->expert + o->shared);
    /* a token multiplies the head (tied or not), every attention, its dense FFNs, and in each
     * MoE layer the router, top_k experts and the shared ones; its embedding is a lookup */
    const double head_mm = (double)c->vocab * d;
    o->active =
        head_mm + o->final_norm + layers + o->n_moe * (o->router + K * o->expert + o->shared);
    /* moe.c's multi-token prediction modules: each the norms of its two inputs, their (d, 2 d)
     * projection, a layer of the last one's kind and its output norm; the head is the model's */
    const double D = c->mtp_depth, own = 3.0 * d + 2.0 * d * d + o->attn + o->norms;
    const int last_moe = config_is_moe_layer(c, c->n_layer - 1);
    o->mtp = D * (own + (last_moe ? o->router + E * o->expert + o->shared : o->dense_ffn));
    const double mtp_ffn = last_moe ? o->router + K * o->expert + o->shared : o->dense_ffn;
    o->mtp_active = D * (own + mtp_ffn);
    o->total += o->mtp;
    o->active += o->mtp_active;
    if (c->tied) o->active -= head_mm; /* a tied head is the embedding, counted once ... */
    o->active_embed = o->active + o->embed;
    if (c->tied) o->active += head_mm; /* ... but multiplied by every token all the same */

    /* FLOPs: 2 per multiply-add forward, twice that backward (the gradient of the input and
     * of the weight); a causal kernel computes half of the T x T scores on average */
    const double matmul = head_mm + L * o->attn + o->n_dense * o->dense_ffn +
                          o->n_moe * (o->router + K * o->expert + o->shared) +
                          D * (2.0 * d * d + o->attn + mtp_ffn + head_mm);
    o->attn_flops_layer = 2.0 * h * (dqk + dv) * (c->seq_len / 2.0);
    o->flops_token = 6.0 * matmul + 3.0 * (L + D) * o->attn_flops_layer;
}

double plan_peak(const PlanInput *in) {
    return in->k.peak_tflops[in->t.precision];
}

/* C(a, k) / C(b, k), a <= b: the chance that k of b things drawn avoid the b - a others. */
static double choose_ratio(double a, double b, int k) {
    double r = 1.0;
    for (int i = 0; i < k; i++) r *= (a - i) / (b - i);
    return r > 0.0 ? r : 0.0;
}

double plan_moec_member_share(const Config *c, double P) {
    const double E = c->num_experts;
    const int G = c->n_group, M = c->topk_group > 0 ? c->topk_group : G;
    if (G > 0 && (int)P > 0 && G % (int)P == 0) /* whole groups a member: its groups picked */
        return 1.0 - choose_ratio(G - G / P, G, M);
    return 1.0 - choose_ratio(E - E / P, E, c->top_k); /* one of its experts picked */
}

double plan_moec_ep_bytes(const PlanModel *m, double tokens, double P) {
    if (P <= 1 || m->c.num_experts <= 0) return 0.0;
    PlanCounts c;
    plan_count(m, &c);
    if (m->c.dispatch == DIST_DISPATCH_TOKENS) {
        /* a token once to each other member it reaches, out and back, forward and backward;
         * 2 Km floats a row with it and Km back; one count per peer */
        const double El = m->c.num_experts / P, Km = m->c.top_k < El ? m->c.top_k : El;
        const double u = tokens * (P - 1) * plan_moec_member_share(&m->c, P);
        return c.n_moe * (4.0 * u * 4.0 * m->c.d_model + 3.0 * Km * u * 4.0 + 4.0 * (P - 1));
    }
    /* rows of C fp32 values: out to the experts and back, forward and backward; then the
     * counts, two 4-byte ints per local expert and peer, once a forward */
    const double rows = 4.0 * tokens * m->c.top_k * (P - 1) / P * 4.0 * m->c.d_model;
    const double counts = 2.0 * (m->c.num_experts / P) * 4.0 * (P - 1);
    return c.n_moe * (rows + counts);
}

void plan_from_config(PlanInput *in, const Config *c) {
    PlanModel *m = &in->m;
    memset(m, 0, sizeof *m);
    m->c = *c; /* the engine's keys (model.vocab among them), and every other setting for its
                * exact memory */
    /* the moe.c engine: fp32 weights (their own master copy), gradients, moments, activations
     * and exchanged rows; sharded as its dist.zero says (model/zero.h) */
    PlanTrain *t = &in->t;
    t->engine = PLAN_ENGINE_MOEC;
    t->weight_bytes = 4, t->grad_bytes = 4, t->master_bytes = 0, t->moment_bytes = 4;
    t->act_bytes = 4, t->a2a_bytes = 4;
    t->zero = c->zero;
    t->precision = PLAN_PREC_FP32;
    in->t.global_batch = c->batch * (double)c->accum;
    in->lay.ep = c->ep;
    in->lay.tp = c->tp;
    in->lay.pp = c->pp;
    in->moec_config = 1;
}
