/*
 * model.c: transformer orchestration. See model.h.
 *
 * This file never touches a tensor element: every buffer comes from the model's backend
 * (src/backend/backend.h) and every piece of math is one of its operations, or the MoE block
 * (moe_block.c), which is written against the same table. So the same code runs the plain
 * reference loops (train.device=cpu-ref), the fast CPU versions (cpu) and any later backend.
 *
 * Accumulation rule (as in the ops): parameter gradients +=, activation gradients =.
 */
#include "model/model.h"

#include <math.h>
#include "base/omp_compat.h"
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/block.h"
#include "model/grad_sync.h"
#include "model/mtp.h"
#include "model/profile.h"
#include "model/zero.h"
#include "model/tp.h"
#include "nn/ops.h"

/* a buffer of the model's backend back to it */
static void release(const Model *m, void *p) {
    if (p) m->be->free(m->be, p);
}

/* n floats of the model's backend, zeroed */
static float *dev(const Model *m, size_t n) {
    return be_floats(m->be, n);
}

/* The weights drawn from the config seed into host (P floats): for a member of an expert- or
 * tensor-parallel group or a pipeline stage, the whole model's weights drawn as in one process
 * and this member's share kept (its stage's tensors, its experts, its share of each
 * tensor-parallel tensor), so that it starts from exactly the weights a one-process run starts
 * from. */
static void init_weights(const Model *m, const Config *c, float *host) {
    if (!m->dist || (m->dist->ep == 1 && m->dist->tp == 1 && m->dist->pp <= 1)) {
        params_init(&m->pt, host, c, c->seed);
        return;
    }
    ParamTable full;
    params_table_build(&full, c);
    float *buf = (float *)malloc_check(full.total * sizeof(float));
    params_init(&full, buf, c, c->seed);
    for (int i = 0; i < m->pt.n; i++) {
        const ParamTensor *t = &m->pt.t[i], *f = &full.t[params_find(&full, t->name)];
        if (t->tp_dim >= 0) {
            params_tp_take(t, m->pt.tp, m->dist->tp_rank, buf + f->offset, host + t->offset);
            continue;
        }
        /* stacked experts: this member's El consecutive ones, from expert ep_rank * El */
        size_t skip = t->expert_dim ? (size_t)m->dist->ep_rank * t->numel : 0;
        memcpy(host + t->offset, buf + f->offset + skip, t->numel * sizeof(float));
    }
    free(buf);
    params_table_free(&full);
}

void model_init(Model *m, const Config *c, int B, int T) {
    model_init_dist(m, c, B, T, NULL);
}

void model_init_dist(Model *m, const Config *c, int B, int T, Dist *d) {
    char err[512];
    const Backend *be = backend_of_config(c, err, sizeof err);
    if (!be) moe_input_error("%s", err);
    if (d && d->collectives == DIST_COLL_NCCL) {
        if (!be->coll_open)
            moe_input_error("dist.collectives=nccl sums and exchanges a GPU's memory with NCCL: it "
                            "needs train.device=cuda in a build of make cuda MPI=1 with NCCL "
                            "(train.device=%s has none here); use dist.collectives=mpi",
                            be->name);
        if (be->coll_open(be, d, err, sizeof err) != 0) moe_input_error("%s", err);
        if (c->zero > 0)
            moe_input_error("dist.zero=%d shards the state with MPI's collectives on the host: "
                            "use dist.collectives=mpi or teach with it, or dist.zero=0 with nccl",
                            c->zero);
    }
    model_init_backend(m, c, B, T, d, be);
}

/* params_alloc: the parameter table of this member's experts, the gradient buckets of a
 * distributed run, the parameters, gradients and AdamW moments, and the initial weights */
static void params_alloc(Model *m, const Config *c, int ep) {
    const Backend *be = m->be;
    params_table_build_stage(&m->pt, c, ep, m->dist ? m->dist->tp : 1, m->layer0, m->layer1);
    size_t moments = m->pt.total;
    if (m->dist) {
        m->sync = calloc_check(1, sizeof *m->sync);
        grad_sync_init(m->sync, &m->pt, grad_bucket_floats(c), be,
                       m->dist->collectives == DIST_COLL_NCCL);
    }
    if (m->dist && c->zero > 0) { /* the moments of this member's shards (zero.h) */
        m->zero = calloc_check(1, sizeof *m->zero);
        zero_init(m->zero, m->sync, m->dist, c->zero, be);
        moments = m->zero->floats;
    }
    /* dist.zero=3: the weights' shards too, the views pointed into a window before each use */
    const int shards = m->zero && m->zero->stage >= 3;
    m->params = dev(m, shards ? moments : m->pt.total);
    m->grads = dev(m, m->pt.total);
    m->m = dev(m, moments);
    m->v = dev(m, moments);
    params_view(&m->w, &m->pt, m->params);
    params_view(&m->g, &m->pt, m->grads);
    /* drawn in place when the backend's memory is the host's, else on the host and copied */
    float *host =
        be->host_memory && !shards ? m->params : (float *)malloc_check(m->pt.total * sizeof(float));
    init_weights(m, c, host);
    if (host == m->params) return;
    if (shards)
        zero_shard_of_host(m, host, m->params);
    else
        be->to_device(be, m->params, host, m->pt.total * sizeof(float));
    free(host);
}

/* run_state_alloc: m->state's host structs the table's entries point into, then every
 * activation and scratch buffer in one arena (acts.h). own: the model's first run state, which
 * counts the MoE blocks and holds the aux-free biases; a pipeline's further run states (pipe.h)
 * are the same table again, whose biases' entry fills no field. A stage's blocks outside its
 * layers get an MoeActs of empty routing records, so that every stage numbers the MoE blocks
 * as the whole model does. */
void run_state_alloc(Model *m, int B, int T, int own) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int L = c->n_layer, D = c->mtp_depth, ep = m->dist ? m->dist->ep : 1;
    const size_t N = (size_t)B * T;
    rs->B = B;
    rs->T = T;
    rs->resid = (float **)calloc_check((size_t)L + 1, sizeof(float *));
    /* the blocks, then the multi-token prediction modules' (not among the n_moe MoE blocks:
     * training's records and the aux-free biases are the main blocks') */
    rs->blocks = (BlockActs *)calloc_check((size_t)L + D, sizeof(BlockActs));
    for (int l = 0; l < L + D; l++)
        if (config_is_moe_layer(c, l)) {
            MoeActs *a = rs->blocks[l].moe = (MoeActs *)calloc_check(1, sizeof(MoeActs));
            /* under tensor parallelism it runs on this rank's N / tp rows (tp.h) */
            if (l >= L || model_holds_layer(m, l))
                moe_acts_host_alloc(be, a, &m->spec, m->dist, (int)N / model_tp(m));
            else
                route_stats_alloc(&a->route, c->num_experts);
            if (own) m->n_moe += l < L;
        }
    if (D > 0) {
        rs->mtp = (MtpActs *)calloc_check((size_t)D, sizeof(MtpActs));
        rs->mtp_host = (int *)malloc_check(3 * N * sizeof(int));
    }
    acts_table_init(&rs->acts);
    model_acts_table(&rs->acts, c, B, T, ep, m);
    for (int i = 0; i < rs->acts.n && !own; i++) /* the biases' place, allocated, filling nothing */
        if (rs->acts.e[i].field == (void *)&m->router_bias) rs->acts.e[i].field = NULL;
    rs->arena = acts_alloc(be, &rs->acts);
    for (int l = 0, b = 0; l < L; l++)
        if (rs->blocks[l].moe)
            rs->blocks[l].router_bias = m->router_bias + (size_t)b++ * c->num_experts;
    if (!be->host_memory && model_tp(m) > 1) rs->tp_host = floats_alloc(N * c->d_model);
    if (model_tp(m) > 1) { /* the vocabulary split's host staging (tp_vocab.c) */
        const size_t V = (size_t)c->vocab / (size_t)model_tp(m);
        rs->tp_ints = (int *)malloc_check(4 * N * sizeof(int));
        rs->tp_floats = floats_alloc(N > V ? N : V);
        for (size_t j = 0; j < V; j++) rs->tp_floats[j] = 1.0f; /* tp_ones, once */
        be->to_device(be, rs->tp_ones, rs->tp_floats, V * sizeof(float));
    }
}

void run_state_free(Model *m) {
    RunState *rs = &m->state;
    for (int l = 0; l < m->cfg.n_layer + m->cfg.mtp_depth; l++) {
        MoeActs *a = rs->blocks[l].moe;
        if (a) { /* its host arrays; its backend buffers are in the model's arena */
            moe_acts_free(m->be, a);
            free(a);
        }
    }
    free(rs->resid);
    free(rs->blocks);
    free(rs->mtp);
    free(rs->mtp_host);
    free(rs->tp_host);
    free(rs->tp_ints);
    free(rs->tp_floats);
    release(m, rs->arena);
    acts_table_free(&rs->acts);
}

/* step_record_alloc: the step record, one allocation, so that one copy reads it
 * (model_read_step): the losses, the norm's parts, each MoE block's two losses a micro-batch,
 * and its routing record; each block's losses point into it */
static void step_record_alloc(Model *m, const Config *c) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    rs->rec_slots = c->accum > 1 ? c->accum : 1;
    /* the losses, the norm's parts, the multi-token prediction modules' losses */
    const size_t rec_doubles = (size_t)rs->rec_slots * (1 + c->mtp_depth) + m->pt.n;
    const size_t rec_moe = (size_t)rs->rec_slots * m->n_moe * 2;
    const size_t rec_route = (rec_doubles * sizeof(double) + rec_moe * sizeof(float) + 7) / 8 * 8;
    rs->rec_bytes =
        rec_route + (size_t)rs->rec_slots * m->n_moe * route_record_bytes(c->num_experts);
    rs->rec_loss = (double *)be->alloc(be, rs->rec_bytes);
    rs->rec_norm = rs->rec_loss + rs->rec_slots;
    rs->rec_mtp = rs->rec_norm + m->pt.n;
    rs->rec_moe = (float *)(rs->rec_loss + rec_doubles);
    rs->rec_route = (char *)rs->rec_loss + rec_route;
    rs->rec_host = (char *)malloc_check(rs->rec_bytes);
    rs->log_rec = (double *)be->alloc(
        be, (size_t)m->n_moe * (sizeof(double) + (size_t)c->num_experts * sizeof(float)));
    for (int l = 0, b = 0; l < c->n_layer; l++)
        if (rs->blocks[l].moe) rs->blocks[l].moe->losses = rs->rec_moe + (size_t)b++ * 2;
}

void model_init_backend(Model *m, const Config *c, int B, int T, Dist *d, const Backend *be) {
    RunState *rs = &m->state;
    memset(m, 0, sizeof(*m));
    m->cfg = *c;
    m->be = be;
    rs->B = B;
    rs->T = T;
    /* one process: exactly the one-process model, unless NCCL is to carry its (trivial) sums,
     * the check of NCCL a single GPU allows */
    m->dist = d && (d->world > 1 || d->collectives == DIST_COLL_NCCL) ? d : NULL;
    const int ep = m->dist ? m->dist->ep : 1;
    m->layer0 = 0, m->layer1 = c->n_layer; /* a pipeline stage's share of them (pipe.h) */
    char err[512];
    if (m->dist && m->dist->pp > 1 &&
        config_pp_stage(c, m->dist->pp_rank, &m->layer0, &m->layer1, err, sizeof err) != 0)
        moe_input_error("%s", err);

    params_alloc(m, c, ep);

    /* the MoE blocks' fixed settings; T sizes the padded per-sequence buffers */
    moe_spec_from_config(&m->spec, c, T);
    /* a stream apart from the init and data streams, so turning noise on changes nothing else */
    rng_seed(&m->router_rng, c->seed ^ 0x6e6f697365524e47ull);

    run_state_alloc(m, B, T, 1);
    if (!be->host_memory && m->spec.balance == MOE_BALANCE_AUX_FREE && m->n_moe)
        m->router_bias_host = floats_alloc((size_t)m->n_moe * c->num_experts);

    /* the workspace of the ops, outside the analytic memory of memory.c (work_bytes) */
    const size_t before = backend_bytes_allocated;
    const int D = config_rope_dim(c); /* the rotated channels of a head */
    float *cs = (float *)malloc_check((size_t)T * D * sizeof(float)); /* (T, D/2, 2) */
    rope_table(cs, T, D, c->rope_theta);
    rs->rope_cs = dev(m, (size_t)T * D);
    be->to_device(be, rs->rope_cs, cs, (size_t)T * D * sizeof(float));
    free(cs);
    rs->n_att_ws = omp_get_max_threads();
    rs->att_ws = dev(m, (size_t)rs->n_att_ws * T * T);
    rs->norm_partial = (double *)be->alloc(be, vec_chunks(m->pt.total) * sizeof(double));
    step_record_alloc(m, c);
    if (c->mtp_depth > 0) mtp_init(m, B, T);
    rs->work_bytes = backend_bytes_allocated - before;
}

void model_free(Model *m) {
    RunState *rs = &m->state;
    if (m->pipe) moe_fatal("model_free: the pipeline's run states first (pipe_free)");
    run_state_free(m);
    release(m, rs->mtp_moe_rec);
    free(m->router_bias_host);
    if (m->zero) zero_free(m->zero);
    free(m->zero);
    if (m->sync) grad_sync_free(m->sync);
    free(m->sync);
    release(m, rs->rope_cs);
    release(m, rs->att_ws);
    release(m, rs->norm_partial);
    release(m, rs->rec_loss);
    free(rs->rec_host);
    release(m, rs->log_rec);
    params_view_free(&m->w);
    params_view_free(&m->g);
    params_table_free(&m->pt);
    release(m, m->params);
    release(m, m->grads);
    release(m, m->m);
    release(m, m->v);
    memset(m, 0, sizeof(*m));
}

/* ---- forward ------------------------------------------------------------------------------ */

/* Each token's cross-entropy (this rank's rows under tensor parallelism, which the head's
 * forward has computed) into losses, the logits turned into probabilities. */
static void losses_forward(Model *m, const int *targets, int N) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    if (model_tp(m) > 1) return;
    be->to_device(be, rs->targets, targets, (size_t)N * sizeof(int));
    PROF(PROF_LOSS, be->crossentropy_forward(be, rs->losses, rs->logits, rs->logits, rs->targets, N,
                                             m->cfg.vocab));
}

/* The embedding of the N tokens into the stream (this rank's rows of it under tensor
 * parallelism, where the vocabulary is split over the ranks: tp.h), its weights gathered
 * first under dist.zero=3 (and the first block's started) */
static void stream_embed(Model *m, const int *inputs, int N) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int L = m->cfg.n_layer;
    zero_weights(m, L + 1, L);
    if (model_tp(m) > 1) {
        tp_embed_forward(m, inputs, N);
        return;
    }
    be->to_device(be, rs->inputs, inputs, (size_t)N * sizeof(int));
    PROF(PROF_EMBED,
         be->embed_forward(be, rs->resid[0], rs->inputs, m->w.tok_emb, N, m->cfg.d_model));
}

/* Each MoE block's losses and routing record go to the step record's slot. */
static void record_into(Model *m, int slot) {
    RunState *rs = &m->state;
    for (int l = 0, b = 0; l < m->cfg.n_layer; l++)
        if (rs->blocks[l].moe) {
            MoeActs *a = rs->blocks[l].moe;
            a->losses = rs->rec_moe + ((size_t)slot * m->n_moe + b) * 2;
            a->stats_rec = rs->rec_route +
                           ((size_t)slot * m->n_moe + b) * route_record_bytes(m->cfg.num_experts);
            a->defer_losses = rs->defer_reads;
            b++;
        }
}

float model_forward(Model *m, const int *inputs, const int *targets, int B, int T,
                    const StepCtx *ctx) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int C = c->d_model, L = c->n_layer, N = B * T;
    if (B > rs->B || T > rs->T || B * T > rs->B * rs->T)
        moe_fatal("model_forward: batch %dx%d exceeds the allocated %dx%d", B, T, rs->B, rs->T);
    rs->B_last = B;
    rs->T_last = T;
    rs->N_last = N;
    /* under tensor parallelism the stream, the head and the loss hold this rank's n rows of
     * the N (tp.h); else n = N */
    int n, row0;
    tp_rows(m, N, &n, &row0);
    /* a pipeline stage after the first finds its input in resid[layer0] (pipe.h) */
    if (model_has_embed(m)) stream_embed(m, inputs, N);

    /* each MoE block's losses into the step record: the micro-batch's slot while the step reads
     * them at its end (defer_reads), else slot 0, read at once */
    const int slot = rs->defer_reads && ctx ? ctx->micro : 0;
    if (slot < 0 || slot >= rs->rec_slots)
        moe_fatal("model_forward: micro-batch %d of a step record of %d", slot, rs->rec_slots);
    record_into(m, slot);
    for (int l = m->layer0; l < m->layer1; l++) {
        zero_weights(m, L - l, L - l - 1);
        block_forward(m, l, rs->resid[l + 1], rs->resid[l], B, T, NULL, ctx);
    }

    /* a pipeline stage before the last ends with its blocks: no head, a loss of 0 */
    const int head = model_has_head(m);
    float mtp = 0.0f;
    if (head) {
        zero_weights(m, 0, -1);
        PROF(PROF_NORM, be->rmsnorm_forward(be, rs->lnf + (size_t)row0 * C, rs->rstdf, rs->resid[L],
                                            m->w.final_norm, n, C));
        if (model_tp(m) > 1)
            tp_head_forward(m, targets, N); /* and with targets the losses of this rank's rows */
        else
            PROF(PROF_HEAD,
                 be->matmul_forward(be, rs->logits, rs->lnf, head_weights(m), N, C, c->vocab));
        mtp = mtp_forward(m, inputs, targets, B, T, ctx, slot);
    }

    rs->aux_loss = rs->z_loss = 0.0f;
    if (rs->defer_reads) { /* model_read_step computes them */
        rs->loss = NAN;
        if (targets && head) {
            losses_forward(m, targets, N);
            be->sum(be, rs->rec_loss + slot, rs->losses, (size_t)n);
        }
        return NAN;
    }
    float aux_sum = 0.0f, z_sum = 0.0f;
    for (int l = 0; l < L; l++)
        if (rs->blocks[l].moe) {
            aux_sum += rs->blocks[l].moe->aux_loss;
            z_sum += rs->blocks[l].moe->z_loss;
        }
    if (m->n_moe > 0) {
        rs->aux_loss = aux_sum / (float)m->n_moe;
        rs->z_loss = z_sum / (float)m->n_moe;
    }
    if (!targets) {
        rs->loss = NAN;
        return NAN;
    }
    double sum = 0.0; /* in token order: deterministic */
    if (head) {
        losses_forward(m, targets, N);
        be->sum(be, rs->rec_loss, rs->losses, (size_t)n);
        be->to_host(be, &sum, rs->rec_loss, sizeof sum);
    }
    rs->loss = (float)(sum / n);
    return rs->loss + moe_balance_coef(&m->spec) * aux_sum + c->z_coef * z_sum + mtp;
}

void model_read_step(Model *m, int micro_batches, double *loss, double *aux, double *z) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int A = micro_batches, nb = m->n_moe;
    if (A < 1 || A > rs->rec_slots)
        moe_fatal("model_read_step: %d micro-batches of a step record of %d", A, rs->rec_slots);
    double *h = (double *)rs->rec_host;
    be->to_host(be, h, rs->rec_loss, rs->rec_bytes); /* the step's one copy of its numbers */
    const float *moe = (const float *)(rs->rec_host + ((char *)rs->rec_moe - (char *)rs->rec_loss));
    *loss = *aux = *z = 0.0;
    for (int i = 0; i < A; i++) { /* model_forward's arithmetic, micro-batch by micro-batch */
        float aux_sum = 0.0f, z_sum = 0.0f;
        for (int b = 0; b < nb; b++) {
            aux_sum += moe[((size_t)i * nb + b) * 2];
            z_sum += moe[((size_t)i * nb + b) * 2 + 1];
        }
        rs->aux_loss = nb > 0 ? aux_sum / (float)nb : 0.0f;
        rs->z_loss = nb > 0 ? z_sum / (float)nb : 0.0f;
        int n, row0; /* this rank's tokens (tp.h) */
        tp_rows(m, rs->N_last, &n, &row0);
        rs->loss = (float)(h[i] / n);
        *loss += rs->loss, *aux += rs->aux_loss, *z += rs->z_loss;
    }
}

void model_mtp_draft(Model *m, const int *tokens, int first, int B, int T, const KvStep *kv) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int C = m->cfg.d_model, L = m->cfg.n_layer, N = B * T;
    /* a step's rows fit the head's buffers of module 1's positions, B (T - 1) of those held */
    if (m->cfg.mtp_depth < 1 || (kv && N > rs->B * (rs->T - 1)) || first + N > rs->N_last)
        moe_fatal("model_mtp_draft: %d rows from row %d of %d, %d modules", N, first, rs->N_last,
                  m->cfg.mtp_depth);
    MtpActs *a = &rs->mtp[0];
    be->to_device(be, a->tok, tokens, (size_t)N * sizeof(int));
    mtp_module_input(m, 1, rs->resid[L] + (size_t)first * C, N);
    block_forward(m, L, a->out, a->in, B, T, kv, NULL);
    if (!kv) return;
    PROF(PROF_NORM,
         be->rmsnorm_forward(be, a->lnc, a->rstdc, a->out, m->w.layers[L].mtp_norm, N, C));
    PROF(PROF_HEAD, be->matmul_forward(be, a->logits, a->lnc, head_weights(m), N, C, m->cfg.vocab));
}

void model_step_route(Model *m, int micro) {
    RunState *rs = &m->state;
    const char *rec = rs->rec_host + (rs->rec_route - (char *)rs->rec_loss);
    const size_t rb = route_record_bytes(m->cfg.num_experts);
    for (int l = 0, b = 0; l < m->cfg.n_layer; l++)
        if (rs->blocks[l].moe)
            m->be->route_stats_read(m->be, &rs->blocks[l].moe->route,
                                    rec + ((size_t)micro * m->n_moe + b++) * rb, &m->spec);
}

void model_forward_cached(Model *m, const int *tokens, int N, const KvStep *kv) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const int C = m->cfg.d_model, L = m->cfg.n_layer;
    if (N > rs->B * rs->T)
        moe_fatal("model_forward_cached: %d tokens exceed the allocated %d", N, rs->B * rs->T);
    rs->B_last = N, rs->T_last = 1, rs->N_last = N;
    be->to_device(be, rs->inputs, tokens, (size_t)N * sizeof(int));
    PROF(PROF_EMBED, be->embed_forward(be, rs->resid[0], rs->inputs, m->w.tok_emb, N, C));
    for (int l = 0; l < L; l++) block_forward(m, l, rs->resid[l + 1], rs->resid[l], N, 1, kv, NULL);
    PROF(PROF_NORM,
         be->rmsnorm_forward(be, rs->lnf, rs->rstdf, rs->resid[L], m->w.final_norm, N, C));
    PROF(PROF_HEAD,
         be->matmul_forward(be, rs->logits, rs->lnf, head_weights(m), N, C, m->cfg.vocab));
    rs->loss = NAN;
}

/* ---- backward ----------------------------------------------------------------------------- */

/* The backward from the loss to the last block's output, into dresid: the multi-token
 * prediction modules', the head's and the final norm's (N this rank's rows). */
static void head_backward(Model *m, float loss_scale, int N, const StepCtx *ctx) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int C = c->d_model, L = c->n_layer;
    /* the multi-token prediction modules first: they end in the main trunk's last output */
    if (rs->mtp_ran) mtp_backward(m, loss_scale, ctx);
    zero_weights(m, 0, 1); /* dist.zero=3: the head's and the last block's, kept from the forward */
    /* loss = mean_n CE_n, so dlogits carries 1/N; loss_scale adds 1/accum */
    const float *dlnf = rs->dln;
    if (model_tp(m) > 1) { /* the vocabulary split (tp.h) */
        dlnf = tp_head_backward(m, loss_scale / (float)N, rs->N_last);
    } else {
        PROF(PROF_LOSS, be->crossentropy_backward(be, rs->dlogits, rs->logits, rs->targets,
                                                  loss_scale / (float)N, N, c->vocab));
        PROF(PROF_HEAD, be->matmul_backward(be, rs->dln, head_grads(m), rs->dlogits, rs->lnf,
                                            head_weights(m), N, C, c->vocab));
    }
    PROF(PROF_NORM, be->rmsnorm_backward(be, rs->dresid, m->g.final_norm, dlnf, rs->resid[L],
                                         m->w.final_norm, rs->rstdf, N, C));
    if (rs->mtp_ran)
        PROF(PROF_RESIDUAL, be->add(be, rs->dresid, rs->dresid, rs->dmtp, (size_t)N * C));
}

void model_backward(Model *m, float loss_scale, const StepCtx *ctx) {
    RunState *rs = &m->state;
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const int C = c->d_model, L = c->n_layer, tp = model_tp(m);
    int N, row0; /* this rank's rows of the stream and the loss (tp.h): all of them but under
                    tensor parallelism */
    tp_rows(m, rs->N_last, &N, &row0);
    if (m->expert_source)
        moe_fatal("model_backward: the experts are served by an inference source (quantized or "
                  "offloaded), which has no backward; detach it to train");

    prof_backward = 1;
    /* a pipeline stage before the last finds the gradient of its output in dresid (pipe.h) */
    if (model_has_head(m)) head_backward(m, loss_scale, N, ctx);
    /* the last micro-batch of a step across processes: each stage's gradients are final when
     * it is done, and their sums start at once (grad_sync.h) */
    GradSync *sync = ctx && ctx->sync_in_backward ? m->sync : NULL;
    if (sync) grad_sync_ready(sync, m->dist, m->grads, 0);

    /* dresid holds d/d(resid[l+1]); each block turns it into d/d(resid[l]) in place */
    for (int l = m->layer1 - 1; l >= m->layer0; l--) {
        zero_weights(m, L - l, l > 0 ? L - l + 1 : -1); /* the embedding's backward needs none */
        block_backward(m, l, rs->dresid, rs->dresid, rs->resid[l], loss_scale, ctx);
        if (sync) grad_sync_ready(sync, m->dist, m->grads, L - l);
    }

    /* a pipeline stage after the first leaves the gradient of its input in dresid */
    if (model_has_embed(m) && tp > 1)
        tp_embed_backward(m, rs->dresid, rs->N_last);
    else if (model_has_embed(m))
        PROF(PROF_EMBED,
             be->embed_backward(be, m->g.tok_emb, rs->dresid, rs->inputs, N, C, c->vocab));
    prof_backward = 0;
}

float *model_host_copy(const Model *m, const float *dev, size_t n) {
    if (m->be->host_memory) return NULL;
    float *h = floats_alloc(n);
    m->be->to_host(m->be, h, dev, n * sizeof(float));
    return h;
}

void model_update_router_bias(Model *m, const double *count) {
    if (m->spec.balance != MOE_BALANCE_AUX_FREE) return;
    const int E = m->cfg.num_experts;
    const Backend *be = m->be;
    const size_t n = (size_t)m->n_moe * E;
    /* E floats per block, updated on the host (a GPU's go up from router_bias_host, which
     * only the update writes: they come down once, after the start or a checkpoint's load) */
    float *bias = m->router_bias_host ? m->router_bias_host : m->router_bias;
    if (bias != m->router_bias && !m->router_bias_host_fresh)
        be->to_host(be, bias, m->router_bias, n * sizeof(float));
    m->router_bias_host_fresh = 1;
    for (int b = 0; b < m->n_moe; b++)
        router_bias_update(bias + (size_t)b * E, count + (size_t)b * E, E, m->cfg.bias_update,
                           m->cfg.bias_rate);
    if (bias != m->router_bias) be->to_device(be, m->router_bias, bias, n * sizeof(float));
}

void model_zero_grad(Model *m) {
    m->be->zero(m->be, m->grads, m->pt.total * sizeof(float));
}

void model_grad_norm_record(const Model *m) {
    const Backend *be = m->be;
    if (m->zero) { /* this member's shards: a sum of squares a bucket */
        zero_norm_record(m);
        return;
    }
    if (!m->dist) {
        be->sum_squares(be, m->state.rec_norm, m->state.norm_partial, m->grads, m->pt.total);
        return;
    }
    /* a tensor at a time: whether its squares add up over the processes depends on which */
    for (int i = 0; i < m->pt.n; i++)
        be->sum_squares(be, m->state.rec_norm + i, m->state.norm_partial,
                        m->grads + m->pt.t[i].offset, m->pt.t[i].numel);
}

float model_grad_norm(const Model *m) {
    const RunState *rs = &m->state;
    double t0 = prof_clock();
    double ss = 0.0;
    /* the squares, from the step's copy (defer_reads), else summed and copied down now */
    const double *sq =
        (const double *)(rs->rec_host + ((char *)rs->rec_norm - (char *)rs->rec_loss));
    if (!rs->defer_reads) {
        model_grad_norm_record(m);
        m->be->to_host(m->be, (void *)sq, rs->rec_norm,
                       (size_t)(m->dist ? m->pt.n : 1) * sizeof(double));
    }
    if (!m->dist) {
        ss = sq[0];
    } else if (m->zero) {
        ss = zero_norm_squares(m, sq);
    } else {
        /* every process holds the same (summed) whole gradients; each expert lives on one
         * member of an expert-parallel group, each tensor-parallel share on one member of a
         * tensor-parallel group: their squares add up over that group */
        double part[3] = {0.0, 0.0, 0.0}; /* whole, this member's experts, its tp shares */
        for (int i = 0; i < m->pt.n; i++)
            part[m->pt.t[i].expert_dim                    ? 1
                 : m->pt.tp > 1 && m->pt.t[i].tp_dim >= 0 ? 2
                                                          : 0] += sq[i];
        dist_allreduce_sum_d(m->dist, DIST_EP, &part[1], 1);
        if (m->pt.tp > 1) dist_allreduce_sum_d(m->dist, DIST_TP, &part[2], 1);
        ss = part[0] + part[1] + part[2];
    }
    /* a pipeline: each stage's tensors are its own, their squares add up over the stages */
    if (m->dist && m->dist->pp > 1) dist_allreduce_sum_d(m->dist, DIST_PP, &ss, 1);
    if (prof_enabled) prof_add(PROF_OPTIMIZER, prof_clock() - t0);
    return (float)sqrt(ss);
}

void model_sync_grads(Model *m) {
    if (!m->dist) return;
    double t0 = prof_clock();
    grad_sync_finish(m->sync, m->dist, m->grads);
    if (prof_enabled) prof_add(PROF_OPTIMIZER, prof_clock() - t0);
}

void model_adamw_step(Model *m, float lr, float grad_scale) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    m->step++;
    AdamwStep s = {.lr = lr,
                   .beta1 = c->beta1,
                   .beta2 = c->beta2,
                   .eps = c->eps,
                   .grad_scale = grad_scale,
                   .step = m->step - m->skipped,
                   .clear_grad = 1};
    if (m->zero) { /* this member's shards, then the weights gathered */
        zero_adamw_step(m, &s);
        return;
    }
    for (int i = 0; i < m->pt.n; i++) {
        const ParamTensor *t = &m->pt.t[i];
        s.weight_decay = t->decay ? c->weight_decay : 0.0f;
        PROF(PROF_OPTIMIZER, be->adamw_update(be, m->params + t->offset, m->grads + t->offset,
                                              m->m + t->offset, m->v + t->offset, t->numel, &s));
    }
}

void model_skip_update(Model *m) {
    m->step++;
    m->skipped++;
    if (m->zero) zero_release(m); /* gathers in flight end; the windows hold nothing */
    model_zero_grad(m);
}

float lr_schedule(const Config *c, int step) {
    if (step < c->warmup) return c->lr * (float)(step + 1) / (float)c->warmup;
    int span = c->steps - c->warmup;
    if (span <= 0) return c->lr;
    float progress = (float)(step - c->warmup) / (float)span;
    if (progress > 1.0f) progress = 1.0f;
    float cosine = 0.5f * (1.0f + cosf(3.14159265358979f * progress));
    return c->lr * (c->min_lr + (1.0f - c->min_lr) * cosine);
}

/* The attention's projections, multiply-adds a token and block: q, k, v and the output, or
 * latent attention's (the latents, their up-projections, the rotated key, the output). */
static double attn_proj_macs(const Config *c) {
    const double C = c->d_model, H = c->n_head, D = config_head_dim(c);
    const double O = H * config_value_dim(c) * C;
    if (c->attention != MOE_ATTN_MLA) return C * (H * D + 2.0 * config_kv_heads(c) * D) + O;
    const double QR = c->mla_q_rank, KR = c->mla_kv_rank;
    const double q = QR > 0 ? C * QR + QR * H * D : C * H * D;
    const double kv = C * (KR + c->mla_rope_dim) + KR * H * (c->mla_nope_dim + c->mla_v_dim);
    return q + kv + O;
}

double model_flops_by_op(const Config *c, int T, double per_op[PROF_COUNT]) {
    /* Model FLOPs: the matrix products a training step needs, counted as useful work only.
     * Forward = 2 x multiply-adds; backward = 2 x forward (one product for the input
     * gradient, one for the weight gradient), so a step = 6 x multiply-adds.
     * Per token and block, with QW = n_head head_dim the queries' width and KW = kv_heads
     * head_dim the keys' and values': q, k, v, o projections C (QW + 2 KW) + QW C (4 C^2 for
     * multi-head attention of C / H channels a head; latent attention's: attn_proj_macs);
     * attention scores and weighted sum: a token at position t attends to t + 1 positions,
     * (t + 1) QW for q.k and (t + 1) OW for p.v (OW = n_head times the value width: QW but
     * under latent attention), which averages to (T + 1) (QW + OW) / 2 over a sequence (the
     * GEMM attention computes the blocks on
     * and below the diagonal and masks the upper half of the diagonal blocks; what it masks is
     * not counted); FFN 3 C F, or in an MoE block 3 C F_e for each of the top_k experts, the
     * router E C, and 3 C F_e for each of the num_shared shared experts (one dense SwiGLU,
     * timed as the dense FFN). Head: V C. The multi-token prediction modules (model.mtp_depth
     * D) add a block of the last layer's kind, the projection 2 C C and a head V C each (counted
     * on every position, though the last k of a window have no target), timed with the head.
     * Each term goes to the op that profile.h times it under. */
    double C = c->d_model, F = c->d_ff, FE = config_expert_hidden(c);
    double QW = (double)c->n_head * config_head_dim(c);
    double OW = (double)c->n_head * config_value_dim(c);
    double macs[PROF_COUNT] = {0};
    for (int l = 0; l < c->n_layer + c->mtp_depth; l++) {
        macs[PROF_ATTN_PROJ] += attn_proj_macs(c);
        macs[PROF_ATTN] += (double)(T + 1) / 2.0 * (QW + OW);
        if (config_is_moe_layer(c, l)) {
            macs[PROF_EXPERTS] += 3.0 * C * FE * c->top_k;
            macs[PROF_ROUTER] += (double)c->num_experts * C;
            macs[PROF_DENSE_FFN] += 3.0 * C * FE * c->num_shared;
        } else {
            macs[PROF_DENSE_FFN] += 3.0 * C * F;
        }
    }
    macs[PROF_HEAD] += (double)c->vocab * C;
    macs[PROF_HEAD] += c->mtp_depth * ((double)c->vocab * C + 2.0 * C * C);
    double total = 0.0;
    for (int op = 0; op < PROF_COUNT; op++) {
        if (per_op) per_op[op] = 6.0 * macs[op];
        total += 6.0 * macs[op];
    }
    return total;
}

double model_flops_per_token(const Config *c, int T) {
    return model_flops_by_op(c, T, NULL);
}
