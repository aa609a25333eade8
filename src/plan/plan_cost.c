/*
 * plan_cost.c: one layout's memory, communication and time. See plan.h; each formula is
 * derived in handbook chapter 7 ("Memory per GPU", "Communication", "Time").
 *
 * The grid. World = tp x dp x pp GPUs, numbered with tp innermost, then dp, then pp (so a
 * tensor-parallel group is consecutive GPUs and stays inside a node). An MoE layer's experts
 * are split over ep GPUs taken from the tp x dp GPUs of one pipeline stage (consecutive ones),
 * each expert whole on its GPU; every expert has edp = tp dp / ep replicas, which sum its
 * gradients. Tensor parallelism comes with sequence parallelism: between the products each
 * of the tp GPUs holds 1/tp of the micro-batch's tokens, and an MoE layer routes those.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/memory.h"
#include "model/traffic.h"
#include "plan/plan.h"

#define MAX_STAGES MAX_PLAN_LAYERS

typedef struct {
    double n_dense, n_moe; /* layers of each kind on the stage */
    int embed, head;       /* holds the embedding (first stage), the head (last stage) */
} Stage;

/* Layers to stages: pp x vpp chunks of consecutive layers as even as the count allows, chunk
 * c on stage c mod pp (vpp > 1: the interleaved schedule's virtual stages). */
static void split_stages(const PlanModel *m, int pp, int vpp, Stage *st) {
    memset(st, 0, (size_t)pp * sizeof *st);
    const double chunks = (double)pp * vpp;
    const double L = m->c.n_layer;
    for (int l = 0; l < m->c.n_layer; l++) {
        const int s = (int)fmod(floor(l * chunks / L), pp);
        if (config_is_moe_layer(&m->c, l))
            st[s].n_moe++;
        else
            st[s].n_dense++;
    }
    st[0].embed = 1;
    st[pp - 1].head = 1;
}

/* GPUs of a group of n members, `stride` ranks apart, that share one node of gpn. */
static double in_node(double n, double stride, double gpn) {
    if (stride >= gpn) return 1.0;
    return fmin(n, floor(gpn / stride));
}

/* Seconds for `bytes` over a group's slowest link. */
static double link_s(const PlanCluster *k, double bytes, int inter) {
    return bytes / ((inter ? k->inter_gbs : k->intra_gbs) * 1e9);
}

/* Bytes one micro-batch leaves for the backward in one layer of the mixed engine (handbook
 * 7, "Memory per GPU"): n tokens, nt = n / tp of them on this GPU between the products; rows:
 * the expert rows this GPU computes (the busiest rank's). Full recomputation keeps only the
 * layer's input (the rest is plan_layout's one working layer). */
static double layer_acts(const PlanInput *in, double n, int tp, int moe, double rows, int rc) {
    const PlanModel *m = &in->m;
    const double a = in->t.act_bytes, d = m->c.d_model, h = m->c.n_head, nt = n / tp;
    const double F = config_expert_hidden(&m->c), shared = m->c.num_shared;
    if (rc == PLAN_RC_FULL) return nt * d * a;
    const int sel = rc != PLAN_RC_NONE; /* norms and activation functions recomputed */
    /* attention: the norm's input and output, q, k, v, the output and its log-sum-exp (a
     * flash kernel keeps no T x T probabilities) */
    double x = nt * d * a * (sel ? 1 : 2);
    if (m->c.attention == MOE_ATTN_MLA) {
        const double dqk = m->c.mla_nope_dim + m->c.mla_rope_dim;
        /* the latents and their norms' outputs, on every tensor-parallel GPU */
        const double lat =
            (m->c.mla_q_rank > 0 ? m->c.mla_q_rank : 0) + m->c.mla_kv_rank + m->c.mla_rope_dim;
        x += n * lat * a * (sel ? 1 : 2);
        x += n * h * (2 * dqk + 2 * m->c.mla_v_dim) * a / tp; /* q, k, v, output */
    } else {
        const double hd = m->c.head_dim > 0 ? m->c.head_dim : d / h;
        const double kv = m->c.kv_heads > 0 ? m->c.kv_heads : h;
        x += n * (2 * h + 2 * kv) * hd * a / tp; /* q, k, v, output */
    }
    x += n * h * 4.0 / tp; /* log-sum-exp, fp32 */
    /* the feed-forward: the norm's input and output, then a dense SwiGLU (gate and up, their
     * product) or the router (logits and scores, fp32) and the expert rows (input, gate, up,
     * product, output kept for the combine) plus the shared experts' SwiGLU */
    x += nt * d * a * (sel ? 1 : 2);
    if (!moe) return x + n * m->c.d_ff * a * (sel ? 2 : 3) / tp;
    if (rc == PLAN_RC_EXPERTS) return x; /* the block runs again from its input */
    x += nt * m->c.num_experts * 4.0 * 2;
    x += rows * (2 * d + F * (sel ? 2 : 3)) * a;
    if (shared > 0) x += n * shared * F * a * (sel ? 2 : 3) / tp;
    return x;
}

/* A layout the moe.c engine cannot run, or 0. */
static int moec_refuses(const PlanInput *in, const PlanLayout *l, PlanResult *r) {
    if (l->vpp != 1 || l->recompute != PLAN_RC_NONE) {
        snprintf(r->invalid, sizeof r->invalid,
                 "the moe.c engine has tensor, pipeline, expert and data parallelism (vpp = 1, no "
                 "recomputation); train.engine=mixed plans the others");
        return 1;
    }
    if (!in->moec_config) {
        snprintf(r->invalid, sizeof r->invalid,
                 "the moe.c engine plans moe.c's own models: give one with --config FILE");
        return 1;
    }
    /* what moe train would refuse of this grid, in its words (config_check_dist) */
    Config c = in->m.c;
    if (c.pp != l->pp) snprintf(c.pp_layers, sizeof c.pp_layers, "even");
    c.tp = l->tp, c.ep = l->ep, c.pp = l->pp, c.zero = in->t.zero;
    char err[sizeof r->invalid];
    if (config_check_dist(&c, (int)in->k.gpus, err, sizeof err) == 0) return 0;
    snprintf(r->invalid, sizeof r->invalid, "%s", err);
    return 1;
}

/* What a layout's stages share once it is valid: the batch's split, the sizes of a
 * micro-batch and the speeds (plan_layout works them out; each stage's costs read them). */
typedef struct {
    const PlanInput *in;
    const PlanLayout *lay;
    PlanCounts c;
    double dp, mb, micro; /* data-parallel ranks, sequences a micro-batch, micro-batches */
    double T, n, nt, d;   /* tokens a sequence, a micro-batch, on one GPU; d_model */
    double rows;          /* the busiest rank's expert rows, a layer */
    double flops_s;       /* a GPU's FLOP/s at the cluster's efficiency */
    double ep_node;       /* GPUs of an expert-parallel group in one node */
    int edp_inter;        /* the experts' replicas span nodes */
} Grid;

/* The layout checked against the model, the cluster and the batch: 1 with r->invalid saying
 * why it cannot run; else 0 with r's dp, edp, micro (and the moe.c engine's micro-batch), the
 * micro-batch's sequences *mb_out, the micro-batches *micro_out and the stages st filled. */
static int layout_invalid(const PlanInput *in, const PlanLayout *lay, PlanResult *r, double *mb_out,
                          double *micro_out, Stage *st) {
    const PlanModel *m = &in->m;
    const PlanCluster *k = &in->k;
    const PlanTrain *t = &in->t;
    const double L = m->c.n_layer, H = m->c.n_head, E = m->c.num_experts;
    const int tp = lay->tp, pp = lay->pp, ep = lay->ep, vpp = lay->vpp;
    const int moec = t->engine == PLAN_ENGINE_MOEC;
#define INVALID(...)                                                                               \
    do {                                                                                           \
        snprintf(r->invalid, sizeof r->invalid, __VA_ARGS__);                                      \
        return 1;                                                                                  \
    } while (0)
    if (moec && moec_refuses(in, lay, r)) return 1;
    const double G = k->gpus, gpn = k->gpus_per_node;
    if (fmod(G, (double)tp * pp) != 0)
        INVALID("tp x pp = %d does not divide the %.0f GPUs", tp * pp, G);
    const double dp = G / ((double)tp * pp);
    r->dp = (int)dp;
    if (tp > gpn) INVALID("tp = %d spans nodes of %.0f GPUs", tp, gpn);
    const double kv = m->c.attention == MOE_ATTN_MLA ? H : (m->c.kv_heads > 0 ? m->c.kv_heads : H);
    if (fmod(H, tp) != 0 || fmod(kv, tp) != 0)
        INVALID("tp = %d does not divide the %.0f query and %.0f key-value heads", tp, H, kv);
    if (pp > L || pp > MAX_STAGES) INVALID("pp = %d stages for %.0f layers", pp, L);
    if (vpp > 1 && pp == 1) INVALID("vpp = %d virtual stages need pp > 1", vpp);
    if (E > 0 && (fmod(E, ep) != 0 || fmod(dp * tp, ep) != 0))
        INVALID("ep = %d must divide both the %.0f experts and the tp x dp = %.0f GPUs of a stage",
                ep, E, dp * tp);
    if (E <= 0 && ep != 1) INVALID("ep = %d for a dense model", ep);
    r->edp = (int)(dp * tp / ep);
    /* the batch: the mixed engine splits each data-parallel rank's share into micro-batches,
     * the moe.c engine into train.accum of them */
    double mb = lay->micro_batch, micro;
    if (moec) {
        micro = in->m.c.accum; /* the engine's train.accum */
        mb = t->global_batch / (micro * dp);
        if (mb != floor(mb) || mb < 1)
            INVALID("the batch of %.0f sequences does not split into %.0f micro-batches over "
                    "%.0f processes",
                    t->global_batch, micro, dp);
        r->lay.micro_batch = (int)mb;
    } else {
        micro = t->global_batch / (dp * mb);
        if (micro != floor(micro) || micro < 1)
            INVALID("the global batch of %.0f sequences does not split into micro-batches of "
                    "%.0f over dp = %.0f",
                    t->global_batch, mb, dp);
    }
    r->micro = micro;

    split_stages(m, pp, vpp, st);
    for (int s = 0; s < pp; s++) /* more chunks than layers can leave a stage idle */
        if (st[s].n_dense + st[s].n_moe == 0)
            INVALID("pp x vpp = %d chunks of %.0f layers leave stage %d without a layer", pp * vpp,
                    L, s);
#undef INVALID
    *mb_out = mb, *micro_out = micro;
    return 0;
}

/* The config the moe.c engine runs this layout with: its dist.tp, dist.ep, dist.pp (the config's
 * dist.pp_layers when the stages are the config's, else even), and train.zero's dist.zero. */
static Config moec_config(const Grid *x) {
    Config c = x->in->m.c;
    if (c.pp != x->lay->pp) snprintf(c.pp_layers, sizeof c.pp_layers, "even");
    c.tp = x->lay->tp, c.ep = x->lay->ep, c.pp = x->lay->pp, c.zero = x->in->t.zero;
    return c;
}

/* One GPU of stage s: weights w, gradients g, optimizer state o, activations acts (bytes), and
 * the micro-batches in flight; dense_p, exp_p its dense and expert parameters. */
typedef struct {
    double w, g, o, acts, inflight;
} StageMemory;

static StageMemory stage_memory(const Grid *x, const Stage *S, int s, double dense_p, double exp_p,
                                const PlanResult *r) {
    const PlanInput *in = x->in;
    const PlanLayout *lay = x->lay;
    const PlanModel *m = &in->m;
    const PlanTrain *t = &in->t;
    const int tp = lay->tp, pp = lay->pp, ep = lay->ep, vpp = lay->vpp;
    const int moec = t->engine == PLAN_ENGINE_MOEC;
    const double mb = x->mb, micro = x->micro, T = x->T, n = x->n, nt = x->nt, d = x->d;
    const double rows = x->rows, dp = x->dp;
    double w, g, o, acts, inflight;
    if (moec) { /* the engine's table of the last (largest) process of stage s */
        MemoryBreakdown mb_;
        const Config cc = moec_config(x);
        const int world = (int)dp * tp * pp;
        model_memory_rank(&cc, (int)mb, (int)T, ep, world, (s + 1) * (world / pp) - 1, &mb_);
        w = 4.0 * mb_.params, g = 4.0 * mb_.grads, o = 4.0 * mb_.adam;
        acts = 4.0 * (mb_.total_words - mb_.params - mb_.grads - mb_.adam) + mb_.pad_bytes;
        inflight = mb_.held;
    } else {
        const double zd = dp, ze = r->edp; /* the groups ZeRO shards over */
        w = t->weight_bytes * (dense_p / (t->zero >= 3 ? zd : 1) + exp_p / (t->zero >= 3 ? ze : 1));
        g = t->grad_bytes * (dense_p / (t->zero >= 2 ? zd : 1) + exp_p / (t->zero >= 2 ? ze : 1));
        o = (t->master_bytes + 2 * t->moment_bytes) *
            (dense_p / (t->zero >= 1 ? zd : 1) + exp_p / (t->zero >= 1 ? ze : 1));
        /* 1F1B: the first stage starts pp micro-batches before its first backward, the
         * last one; the interleaved schedule holds (pp - 1 - s) / vpp more */
        inflight = fmin(micro, (double)(pp - s)) + (vpp > 1 ? (pp - 1.0 - s) / vpp : 0.0);
        const double per_layer_d = layer_acts(in, n, tp, 0, rows, lay->recompute);
        const double per_layer_m = layer_acts(in, n, tp, 1, rows, lay->recompute);
        double per_micro = S->n_dense * per_layer_d + S->n_moe * per_layer_m;
        if (S->embed) per_micro += n * 4.0; /* token ids */
        if (S->head) /* the final norm's input and output, bf16 logits and their fp32 copy */
            per_micro += 2 * nt * d * t->act_bytes + n * m->c.vocab * (t->act_bytes + 4) / tp;
        acts = inflight * per_micro;
        if (lay->recompute >= PLAN_RC_EXPERTS) /* the one layer being recomputed */
            acts += layer_acts(in, n, tp, S->n_moe > 0, rows, PLAN_RC_NONE);
    }
    return (StageMemory){w, g, o, acts, inflight};
}

/* Seconds a micro-batch of stage S spends recomputing (Ls layers; comp its products'). */
static double stage_recompute(const Grid *x, const Stage *S, double Ls, double comp) {
    const PlanInput *in = x->in;
    const PlanLayout *lay = x->lay;
    const PlanModel *m = &in->m;
    const PlanCluster *k = &in->k;
    const PlanTrain *t = &in->t;
    const PlanCounts c = x->c;
    const int tp = lay->tp;
    const double H = m->c.n_head, F = config_expert_hidden(&m->c), shared = m->c.num_shared;
    const double n = x->n, nt = x->nt, d = x->d, rows = x->rows, flops_s = x->flops_s;
    double recomp = 0;
    if (lay->recompute == PLAN_RC_SELECTIVE || lay->recompute == PLAN_RC_EXPERTS) {
        /* the norms and activation functions again: memory-bound passes, each reading its
         * input and writing its output at HBM speed (two norms a layer; a SwiGLU product
         * reads gate and up, writes their product); latent attention's up-projections are
         * products */
        const double a = t->act_bytes;
        double bytes = Ls * 4.0 * nt * d * a + S->n_dense * 3.0 * n * m->c.d_ff * a / tp;
        if (lay->recompute == PLAN_RC_SELECTIVE)
            bytes += S->n_moe * 3.0 * (rows * F + n * shared * F / tp) * a;
        recomp = bytes / (k->hbm_tbs * 1e12);
        if (m->c.attention == MOE_ATTN_MLA)
            recomp += Ls * 2.0 * n * m->c.mla_kv_rank * H * (m->c.mla_nope_dim + m->c.mla_v_dim) /
                      tp / flops_s;
    }
    if (lay->recompute == PLAN_RC_FULL) recomp = comp / 3.0; /* the forward once more */
    if (lay->recompute == PLAN_RC_EXPERTS) /* and the MoE blocks' forward once more */
        recomp += S->n_moe *
                  (2.0 * c.router * nt + 2.0 * c.expert * rows + 2.0 * c.shared * n / tp) / flops_s;
    return recomp;
}

/* Bytes of tensor parallel (with sequence parallel) for a micro-batch of stage S (Ls layers):
 * an all-gather before and a reduce-scatter after each split sublayer, forward and backward,
 * of n d values. The split sublayers: every layer's attention, the dense SwiGLUs, the shared
 * experts (the routed experts are whole on their GPU and route the nt tokens the GPU holds: no
 * gather). */
static double stage_tp_bytes(const Grid *x, const Stage *S, double Ls) {
    const PlanLayout *lay = x->lay;
    const PlanTrain *t = &x->in->t;
    const int tp = lay->tp;
    const double shared = x->in->m.c.num_shared, n = x->n, d = x->d;
    double tpb = 0;
    if (tp > 1) {
        const double sub = Ls + S->n_dense + (shared > 0 ? S->n_moe : 0);
        tpb = sub * (lay->recompute == PLAN_RC_FULL ? 6.0 : 4.0) * (tp - 1.0) / tp * n * d *
              t->act_bytes; /* a full recomputation gathers and scatters once more */
    }
    return tpb;
}

/* The expert exchange of a micro-batch of stage S: each of nt tokens sends top_k rows,
 * (ep - 1) / ep of them to other GPUs, out and back, forward and backward; the busiest receiver
 * sets the pace. For the moe.c engine (fp32 rows, tp = 1) this is chapter 3's formula,
 * plan_moec_ep_bytes. Its bytes into *epb_out (*ep_inter_out of them across nodes); its
 * seconds returned. */
static double stage_ep(const Grid *x, const Stage *S, double *epb_out, double *ep_inter_out) {
    const PlanLayout *lay = x->lay;
    const PlanCluster *k = &x->in->k;
    const PlanTrain *t = &x->in->t;
    const int ep = lay->ep;
    const double E = x->in->m.c.num_experts, K = x->in->m.c.top_k;
    const double nt = x->nt, d = x->d, ep_node = x->ep_node;
    double epb = 0, ep_inter = 0, ep_t = 0;
    if (ep > 1 && S->n_moe > 0) {
        /* recomputing the MoE blocks (or whole layers) sends the rows out and back again */
        const double passes = (lay->recompute >= PLAN_RC_EXPERTS ? 6.0 : 4.0) * S->n_moe;
        const double row = d * t->a2a_bytes;
        double intra_rows = nt * K * (ep_node - 1) / ep;
        double inter_rows = nt * K * (ep - ep_node) / ep;
        double pairs = 0.0, counts_per_peer = 2.0 * (E / ep) * 4.0;
        if (t->engine == PLAN_ENGINE_MOEC && x->in->m.c.dispatch == DIST_DISPATCH_TOKENS) {
            /* moe.c's dist.dispatch=tokens: a row per (token, member it reaches), with its
             * (expert, weight) pairs out and the weights' gradients back (ep.h) */
            const double q = plan_moec_member_share(&x->in->m.c, ep), El = E / ep;
            intra_rows = nt * (ep_node - 1) * q;
            inter_rows = nt * (ep - ep_node) * q;
            pairs = 3.0 * (K < El ? K : El) * 4.0 * S->n_moe * (intra_rows + inter_rows);
            counts_per_peer = 4.0;
        } else if (t->node_limit > 0 && ep > ep_node) {
            /* a row crosses to each of its nodes once, then is copied inside the node */
            const double nodes = ep / ep_node;
            const double touched = nodes * (1 - pow(1 - 1 / nodes, K));
            const double remote = fmin(touched, t->node_limit) * (nodes - 1) / nodes;
            inter_rows = nt * remote;
            intra_rows += inter_rows * (ep_node - 1) / ep_node;
        }
        epb = passes * (intra_rows + inter_rows) * row + pairs;
        ep_inter = passes * inter_rows * row;
        const double counts = S->n_moe * counts_per_peer * (ep - 1);
        epb += counts;
        ep_t = t->imbalance *
               fmax(link_s(k, passes * intra_rows * row + counts, 0), link_s(k, ep_inter, 1));
    }
    *epb_out = epb, *ep_inter_out = ep_inter;
    return ep_t;
}

/* The moe.c engine's own count of process 0's bytes a step (model/traffic.h), over the grid of
 * this layout's processes, with the config's engine of collectives. */
static void moec_traffic(const Grid *x, PlanResult *r) {
    const PlanInput *in = x->in;
    Dist d = {0};
    char err[256];
    const DistAxes axes = {.tp = x->lay->tp, .ep = x->lay->ep, .pp = x->lay->pp};
    if (dist_grid_set(&d, (int)in->k.gpus, 0, axes, err, sizeof err) != 0) return;
    d.collectives = in->m.c.collectives;
    const Config c = moec_config(x);
    uint64_t sent[DIST_PURPOSES];
    model_traffic_step(&c, &d, sent);
    r->moec_grad_sent = (double)sent[DIST_FOR_GRADS];
    r->moec_weight_sent = (double)sent[DIST_FOR_WEIGHTS];
    r->moec_tp_sent = (double)sent[DIST_FOR_TP];
    r->moec_pp_sent = (double)sent[DIST_FOR_PIPE];
    /* the engine's count stands for the estimate of the other engine */
    r->tp_bytes = r->moec_tp_sent;
    r->dp_bytes = r->moec_grad_sent + r->moec_weight_sent;
}

/* Once a step, for the slowest stage (comp: its products' seconds a micro-batch; dense_p,
 * exp_p: a GPU's dense and expert parameters) into r: the gradients' sums and the optimizer. */
static void step_sums(const Grid *x, PlanResult *r, double dense_p, double exp_p, double comp) {
    const PlanCluster *k = &x->in->k;
    const PlanTrain *t = &x->in->t;
    const double dp = x->dp;
    const int edp_inter = x->edp_inter;
    /* the gradients' sums, once a step: dense weights over dp, experts over edp; a
     * reduce-scatter and an all-gather with ZeRO, an all-reduce (twice the bytes)
     * without */
    const double gb = t->grad_bytes, wb = t->weight_bytes;
    double per_d = t->zero >= 1 ? (gb + wb) : 2 * gb;
    /* the moe.c engine's dist.zero=1 sums the gradients whole, then gathers the weights
     * (its dist.zero=3 gathers them again for each micro-batch's passes: not counted here) */
    if (t->engine == PLAN_ENGINE_MOEC && t->zero == 1) per_d = 2 * gb + wb;
    const double db = dp > 1 ? (dp - 1) / dp * dense_p * per_d : 0;
    const double ebt = r->edp > 1 ? (r->edp - 1.0) / r->edp * exp_p * per_d : 0;
    r->dp_bytes = db + ebt;
    r->dp_s = link_s(k, db, r->dp_inter) + link_s(k, ebt, edp_inter);
    if (t->engine == PLAN_ENGINE_MOEC) moec_traffic(x, r);
    /* the optimizer: its state read and written once, at HBM speed */
    const double zd = t->zero >= 1 ? dp : 1, ze = t->zero >= 1 ? r->edp : 1;
    const double state = dense_p / zd + exp_p / ze;
    r->optim_s =
        state * (2 * wb + gb + 2 * t->master_bytes + 4 * t->moment_bytes) / (k->hbm_tbs * 1e12);
    /* behind the last micro-batch's backward (two thirds of its compute) */
    r->dp_exposed_s = t->overlap_dp ? fmax(0, r->dp_s - 2.0 / 3.0 * comp) : r->dp_s;
}

/* The quantities every stage of a valid layout shares, and into r the busiest rank's rows and
 * which groups cross nodes. */
static Grid grid_of(const PlanInput *in, const PlanLayout *lay, PlanResult *r, double mb,
                    double micro) {
    const PlanModel *m = &in->m;
    const PlanCluster *k = &in->k;
    const PlanTrain *t = &in->t;
    const double K = m->c.top_k, E = m->c.num_experts, G = k->gpus, gpn = k->gpus_per_node;
    const int tp = lay->tp, pp = lay->pp, ep = lay->ep;
    const double dp = G / ((double)tp * pp);
    Grid x = {.in = in, .lay = lay, .dp = dp, .mb = mb, .micro = micro};
    plan_count(m, &x.c);
    const double T = m->c.seq_len, n = mb * T, nt = n / tp, d = m->c.d_model;
    const double rows = nt * K * t->imbalance; /* the busiest rank's rows, a layer */
    r->busiest_rows = E > 0 ? rows : 0;
    const double flops_s = plan_peak(in) * 1e12 * k->efficiency;
    /* the groups: which cross nodes */
    const double ep_node = in_node(ep, 1, gpn);
    r->tp_inter = in_node(tp, 1, gpn) < tp;
    r->dp_inter = in_node(dp, tp, gpn) < dp;
    r->pp_inter = in_node(pp, tp * dp, gpn) < pp;
    const int edp_inter = in_node(r->edp, ep, gpn) < r->edp;
    x.T = T, x.n = n, x.nt = nt, x.d = d, x.rows = rows, x.flops_s = flops_s;
    x.ep_node = ep_node, x.edp_inter = edp_inter;
    return x;
}

void plan_layout(const PlanInput *in, const PlanLayout *lay, PlanResult *r) {
    memset(r, 0, sizeof *r);
    r->lay = *lay;
    Stage st[MAX_STAGES];
    double mb, micro;
    if (layout_invalid(in, lay, r, &mb, &micro, st)) return;
    r->valid = 1;
    const Grid x = grid_of(in, lay, r, mb, micro);
    const PlanModel *m = &in->m;
    const PlanCluster *k = &in->k;
    const PlanTrain *t = &in->t;
    const double E = m->c.num_experts, G = k->gpus;
    const int tp = lay->tp, pp = lay->pp, ep = lay->ep, vpp = lay->vpp;
    const PlanCounts c = x.c;
    const double T = x.T, n = x.n, nt = x.nt, d = x.d, rows = x.rows, flops_s = x.flops_s;

    double worst_t = 0, worst_mem = -1;
    for (int s = 0; s < pp; s++) {
        const Stage *S = &st[s];
        const double Ls = S->n_dense + S->n_moe;
        /* ---- parameters on one GPU of this stage: dense ones split over tp (norm gains and
         * routers whole), experts E / ep whole ------------------------------------------- */
        double split = Ls * c.attn + S->n_dense * c.dense_ffn + S->n_moe * c.shared;
        double whole = Ls * c.norms + S->n_moe * c.router;
        if (S->embed) split += c.embed;
        if (S->head) split += c.head, whole += c.final_norm;
        const double dense_p = split / tp + whole;
        const double exp_p = S->n_moe * (E / ep) * c.expert;

        /* ---- memory -------------------------------------------------------------------- */
        const StageMemory sm = stage_memory(&x, S, s, dense_p, exp_p, r);
        const double total = sm.w + sm.g + sm.o + sm.acts;
        if (total > worst_mem) {
            worst_mem = total;
            r->mem_stage = s;
            r->mem_weights = sm.w, r->mem_grads = sm.g, r->mem_optim = sm.o, r->mem_acts = sm.acts;
            r->mem_total = total;
            r->inflight = sm.inflight;
        }

        /* ---- time of one micro-batch on this stage -------------------------------------- */
        /* the products: the dense ones split over tp, the experts' rows on the busiest rank */
        double mm = (Ls * c.attn + S->n_dense * c.dense_ffn + S->n_moe * c.shared +
                     (S->head ? m->c.vocab * d : 0)) *
                    6.0 * n / tp;
        mm += Ls * 3.0 * c.attn_flops_layer * n / tp;
        mm += S->n_moe * (6.0 * c.router * nt + 6.0 * c.expert * rows);
        const double comp = mm / flops_s;
        const double recomp = stage_recompute(&x, S, Ls, comp);
        const double tpb = stage_tp_bytes(&x, S, Ls);
        double epb, ep_inter;
        const double ep_t = stage_ep(&x, S, &epb, &ep_inter);
        /* pipeline: the stage's output forward, its gradient backward, per virtual stage */
        const double ppb = pp > 1 ? 2.0 * vpp * nt * d * t->act_bytes : 0;
        const double tp_t = link_s(k, tpb, r->tp_inter), pp_t = link_s(k, ppb, r->pp_inter);
        const double t_mb = comp + recomp + tp_t + ep_t * (1 - t->overlap_ep) + pp_t;
        if (t_mb > worst_t) {
            worst_t = t_mb;
            r->stage = s;
            r->compute_s = comp * micro, r->recompute_s = recomp * micro;
            r->tp_bytes = tpb * micro, r->tp_s = tp_t * micro;
            r->ep_bytes = epb * micro, r->ep_inter_bytes = ep_inter * micro;
            r->ep_s = ep_t * micro, r->ep_exposed_s = ep_t * (1 - t->overlap_ep) * micro;
            r->pp_bytes = ppb * micro, r->pp_s = pp_t * micro;
            step_sums(&x, r, dense_p, exp_p, comp);
        }
    }
    const double per_mb = worst_t;
    r->bubble_s = (pp - 1.0) / vpp * per_mb;
    r->step_s = micro * per_mb + r->bubble_s + r->dp_exposed_s + r->optim_s;
    const double tokens = t->global_batch * T;
    r->tokens_per_s = tokens / r->step_s;
    r->mfu = c.flops_token * tokens / (G * plan_peak(in) * 1e12 * r->step_s);
    r->fits = r->mem_total <= k->memory_gb * 1e9;
}
