/* checkpoint.c: see checkpoint.h. */
#include "train/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tensorfile.h"
#include "model/inspect.h"
#include "model/zero.h"

static const char *const KINDS[3] = {"param", "adam_m", "adam_v"};

static float *kind_buffer(const Model *m, int kind) {
    return kind == 0 ? m->params : kind == 1 ? m->m : m->v;
}

/* Whether kind's buffer holds this member's shards (dist.zero: the moments; 3: the weights). */
static int sharded(const Model *m, int kind) {
    return m->zero && (kind > 0 || m->zero->stage >= 3);
}

/* The whole buffer of each kind (pt.total floats), as one process holds it: under dist.zero
 * the shards gathered over their groups (every member takes part), to be released with
 * release_whole; else the model's own buffers. */
static void whole_buffers(const Model *m, float *buf[3]) {
    for (int kind = 0; kind < 3; kind++)
        buf[kind] = sharded(m, kind) ? zero_whole(m, kind_buffer(m, kind)) : kind_buffer(m, kind);
}

static void release_whole(const Model *m, float *buf[3]) {
    for (int kind = 0; kind < 3; kind++)
        if (buf[kind] != kind_buffer(m, kind)) m->be->free(m->be, buf[kind]);
}

/* The process that gathers its pipeline stage's tensors whole: the first of the stage (without
 * a pipeline, process 0, which writes the file). */
static int stage_writer(const Model *m) {
    return !m->dist || dist_group_rank(m->dist, DIST_STAGE) == 0;
}

/* Experts per process: num_experts / dist.ep with expert parallelism, else all of them (1). */
static int expert_share(const Model *m) {
    return m->dist ? m->dist->ep : 1;
}

/* Expert parallelism: each stacked expert tensor is gathered, in member order, from the
 * expert-parallel group, so the file holds all E experts as one process would write them;
 * every process takes part, the first one writes. Returns (3, pt.n) the gathered tensors of
 * each kind (NULL where a tensor is not gathered, and everywhere on the other members). */
static float **gather_experts(const Model *m, float *const buf[3]) {
    const ParamTable *pt = &m->pt;
    const int share = expert_share(m);
    float **gathered = (float **)calloc_check((size_t)3 * pt->n + 1, sizeof(float *));
    if (share > 1)
        for (int kind = 0; kind < 3; kind++)
            for (int i = 0; i < pt->n; i++) {
                const ParamTensor *t = &pt->t[i];
                if (!t->expert_dim) continue;
                float *full = m->dist->ep_rank == 0 ? floats_alloc(t->numel * share) : NULL;
                const float *mine = buf[kind] + t->offset;
                float *down = model_host_copy(m, mine, t->numel); /* a device's, copied down */
                dist_gather_f(m->dist, down ? down : mine, t->numel, full);
                free(down);
                gathered[kind * pt->n + i] = full;
            }
    return gathered;
}

/* Tensor parallelism: each tensor split over the tensor-parallel group is gathered from it
 * (an all-gather of the shares in member order, then each put in its place: rows one after
 * the other, or columns side by side) into gathered (3, pt.n), so that the file holds the
 * whole tensor as one process writes it; every member takes part, the first process keeps it. */
static void gather_tp_shares(const Model *m, float *const buf[3], float **gathered) {
    const ParamTable *pt = &m->pt;
    const int tp = pt->tp;
    if (tp < 2) return;
    for (int kind = 0; kind < 3; kind++)
        for (int i = 0; i < pt->n; i++) {
            const ParamTensor *t = &pt->t[i];
            if (t->tp_dim < 0) continue;
            float *all = floats_alloc(t->numel * tp);
            m->be->to_host(m->be, all + (size_t)m->dist->tp_rank * t->numel, buf[kind] + t->offset,
                           t->numel * sizeof(float));
            dist_allgather_f(m->dist, DIST_TP, all, t->numel * tp);
            if (stage_writer(m)) {
                float *whole = floats_alloc(t->numel * tp);
                for (int p = 0; p < tp; p++)
                    params_tp_put(t, tp, p, all + (size_t)p * t->numel, whole);
                gathered[kind * pt->n + i] = whole;
            }
            free(all);
        }
}

/* A byte tensor of the file: an RNG's state. */
/* An entry of n raw bytes (an RNG's state, a count). */
static void bytes_entry(TensorRef *e, const char *name, const void *data, size_t n) {
    snprintf(e->name, sizeof e->name, "%s", name);
    e->dtype = TENSOR_U8;
    e->ndim = 1;
    e->shape[0] = (int)n;
    e->nbytes = n;
    e->data = data;
}

/* Entry k: tensor t of kind whole, its data at data. */
static void tensor_entry(TensorRef *e, int kind, const ParamTensor *t, const float *data) {
    snprintf(e->name, sizeof e->name, "%s/%s", KINDS[kind], t->name);
    e->dtype = TENSOR_F32;
    e->ndim = t->ndim;
    memcpy(e->shape, t->shape, sizeof(t->shape));
    e->nbytes = t->numel * sizeof(float);
    e->data = data;
}

/* The file's entries of this process's tensors of each kind, whole, from e[k] on: gathered
 * (all experts, or every tensor-parallel share) or from buf; returns the next k. */
static int own_entries(const Model *m, TensorRef *e, int k, int kind, const float *buf,
                       float *const *gathered) {
    const ParamTable *pt = &m->pt;
    for (int i = 0; i < pt->n; i++, k++) {
        ParamTensor t = pt->t[i];
        const float *full = gathered[kind * pt->n + i];
        const int parts = !full ? 1 : t.expert_dim ? expert_share(m) : pt->tp;
        if (full) t.shape[t.expert_dim ? 0 : t.tp_dim] *= parts, t.numel *= (size_t)parts;
        tensor_entry(&e[k], kind, &t, full ? full : buf + t.offset);
    }
    return k;
}

/* A pipeline: the first process of stage s > 0 sends its stage's whole tensors of each kind, in
 * the order of its table, to process 0, which receives them into recv[s] (3 x the stage's
 * tensors, with the whole model's shapes in tables[s]) to write with its own. */
static void send_stage(const Model *m, float *const buf[3], float *const *gathered) {
    TensorRef *e = (TensorRef *)calloc_check(3 * (size_t)m->pt.n + 1, sizeof(TensorRef));
    float *host[3] = {NULL, NULL, NULL};
    for (int kind = 0, k = 0; kind < 3; kind++) {
        host[kind] = model_host_copy(m, buf[kind], m->pt.total);
        k = own_entries(m, e, k, kind, host[kind] ? host[kind] : buf[kind], gathered);
    }
    for (int k = 0; k < 3 * m->pt.n; k++)
        dist_wait(m->dist, dist_send_f_start(m->dist, DIST_PP, (const float *)e[k].data,
                                             e[k].nbytes / sizeof(float), 0, 2));
    for (int kind = 0; kind < 3; kind++) free(host[kind]);
    free(e);
}

/* On process 0: every other stage's tensors (send_stage), with their tables. */
static float **recv_stages(const Model *m, ParamTable *tables) {
    const int P = m->dist->pp;
    float **recv = (float **)calloc_check((size_t)P, sizeof(float *));
    for (int s = 1; s < P; s++) {
        int first = 0, last = 0;
        char err[256];
        if (config_pp_stage(&m->cfg, s, &first, &last, err, sizeof err) != 0) moe_fatal("%s", err);
        params_table_build_stage(&tables[s], &m->cfg, 1, 1, first, last);
        recv[s] = floats_alloc(3 * tables[s].total);
        for (int kind = 0; kind < 3; kind++)
            for (int i = 0; i < tables[s].n; i++) {
                const ParamTensor *t = &tables[s].t[i];
                dist_recv_f(m->dist, DIST_PP, recv[s] + kind * tables[s].total + t->offset,
                            t->numel, s, 2);
            }
    }
    return recv;
}

/* The checkpoint's tensors of each kind, whole: this process's, then under a pipeline the other
 * stages' (recv_stages), in the whole model's table order. Returns the next entry. */
static int weight_entries(const Model *m, TensorRef *e, float *const host[3], float *const whole[3],
                          float *const *gathered, const ParamTable *tables, float *const *recv) {
    const int P = m->dist ? m->dist->pp : 1;
    int k = 0;
    for (int kind = 0; kind < 3; kind++) {
        k = own_entries(m, e, k, kind, host[kind] ? host[kind] : whole[kind], gathered);
        for (int s = 1; s < P; s++)
            for (int i = 0; i < tables[s].n; i++, k++)
                tensor_entry(&e[k], kind, &tables[s].t[i],
                             recv[s] + kind * tables[s].total + tables[s].t[i].offset);
    }
    return k;
}

int checkpoint_save(const Model *m, const Rng *loader_rng, const char *path, char *err,
                    int errlen) {
    const ParamTable *pt = &m->pt;
    const int P = m->dist ? m->dist->pp : 1;
    float *whole[3];
    whole_buffers(m, whole);
    float **gathered = gather_experts(m, whole);
    gather_tp_shares(m, whole, gathered);
    if (m->dist && m->dist->rank != 0) {
        if (P > 1 && stage_writer(m)) send_stage(m, whole, gathered);
        for (int j = 0; j < 3 * pt->n; j++) free(gathered[j]);
        free(gathered);
        release_whole(m, whole);
        return 0;
    }
    ParamTable *tables = (ParamTable *)calloc_check((size_t)P, sizeof(ParamTable));
    float **recv = P > 1 ? recv_stages(m, tables) : NULL;
    /* the skipped updates' count only where there are some: other checkpoints stay as they were */
    const uint64_t skipped = (uint64_t)m->skipped;
    int n = 3 * pt->n + 2 + m->n_moe + (skipped > 0);
    for (int s = 1; s < P; s++) n += 3 * tables[s].n;
    TensorRef *e = (TensorRef *)calloc_check((size_t)n, sizeof(TensorRef));
    float *host[3] = {NULL, NULL, NULL}; /* a GPU's weights and moments, copied down */
    for (int kind = 0; kind < 3; kind++) host[kind] = model_host_copy(m, whole[kind], pt->total);
    int k = weight_entries(m, e, host, whole, gathered, tables, recv);
    Rng zero = {{0, 0, 0, 0}};
    bytes_entry(&e[k++], "rng/loader", loader_rng ? loader_rng : &zero, sizeof(Rng));
    bytes_entry(&e[k++], "rng/router", &m->router_rng, sizeof(Rng));
    if (skipped > 0) bytes_entry(&e[k++], "optimizer/skipped", &skipped, sizeof skipped);
    float *biases[m->cfg.n_layer + 1];
    for (int l = 0; l < m->cfg.n_layer; l++) {
        biases[l] = NULL;
        const float *bias = model_router_bias(m, l);
        if (!bias) continue;
        biases[l] = model_host_copy(m, bias, (size_t)m->cfg.num_experts);
        snprintf(e[k].name, sizeof e[k].name, "router_bias/layers.%d", l);
        e[k].dtype = TENSOR_F32;
        e[k].ndim = 1;
        e[k].shape[0] = m->cfg.num_experts;
        e[k].nbytes = (size_t)m->cfg.num_experts * sizeof(float);
        e[k].data = biases[l] ? biases[l] : bias;
        k++;
    }

    char *text = config_to_text(&m->cfg);
    int rc = ckpt_write(path, (uint64_t)m->step, text, e, n, err, errlen);
    free(text);
    free(e);
    for (int kind = 0; kind < 3; kind++) free(host[kind]);
    for (int l = 0; l < m->cfg.n_layer; l++) free(biases[l]);
    for (int j = 0; j < 3 * pt->n; j++) free(gathered[j]);
    free(gathered);
    for (int s = 1; s < P; s++) free(recv[s]), params_table_free(&tables[s]);
    free(recv);
    free(tables);
    release_whole(m, whole);
    return rc;
}

static int parse_config_text(const char *text, const char *path, Config *c, char *err, int errlen) {
    config_defaults(c);
    char msg[512];
    int line_no;
    if (config_apply_text(c, text, &line_no, msg, sizeof msg) == 0) return 0;
    return set_error(err, errlen,
                     "checkpoint %s: stored setting %d is not valid in this build (%s); "
                     "was it written by another version of moe.c?",
                     path, line_no, msg);
}

/* The file (ckpt_read checks its format) and its stored settings; a run saves at most at its
 * own train.steps, so a larger step is damage (or a file of another program). */
static int read_with_config(Ckpt *ck, Config *c, const char *path, char *err, int errlen) {
    if (ckpt_read(ck, path, err, errlen) != 0) return -1;
    int rc = parse_config_text(ck->config_text, path, c, err, errlen);
    if (rc == 0 && ck->step > (uint64_t)c->steps)
        rc = set_error(err, errlen,
                       "checkpoint %s claims step %llu but its settings stop at train.steps=%d; "
                       "the file is damaged: use an earlier checkpoint or retrain",
                       path, (unsigned long long)ck->step, c->steps);
    if (rc != 0) ckpt_free(ck);
    return rc;
}

int checkpoint_config(const char *path, Config *c, char *err, int errlen) {
    Ckpt ck;
    if (read_with_config(&ck, c, path, err, errlen) != 0) return -1;
    ckpt_free(&ck);
    return 0;
}

/* Tensor t of the model (at dst) from the file's whole tensor: a tensor-parallel member's share
 * of it, or all of it. */
static void load_share(Model *m, float *dst, const ParamTensor *t, const float *whole) {
    float *mine = NULL;
    if (t->tp_dim >= 0 && m->pt.tp > 1) {
        mine = floats_alloc(t->numel);
        params_tp_take(t, m->pt.tp, m->dist->tp_rank, whole, mine);
    }
    m->be->to_device(m->be, dst, mine ? mine : whole, t->numel * sizeof(float));
    free(mine);
}

/* ck's tensors into m, the weights alone (kinds 1) or with the moments (3): an
 * expert-parallel member's experts, and under dist.zero its shards of the moments (and of the
 * weights under dist.zero=3). */
static int load_tensors(Model *m, const Ckpt *ck, const char *path, int kinds, char *err,
                        int errlen) {
    int rc = 0;
    const ParamTable *pt = &m->pt;
    const int share = expert_share(m);
    /* under dist.zero the moments (and the weights of 3) are read whole, then each member
     * keeps its shards */
    float *to[3] = {m->params, m->m, m->v};
    for (int kind = 0; kind < kinds; kind++)
        if (sharded(m, kind)) to[kind] = be_floats(m->be, pt->total);
    for (int kind = 0; rc == 0 && kind < kinds; kind++)
        for (int i = 0; rc == 0 && i < pt->n; i++) {
            const ParamTensor *t = &pt->t[i];
            char name[TENSOR_NAME_MAX];
            snprintf(name, sizeof name, "%s/%s", KINDS[kind], t->name);
            const TensorRef *e = ckpt_find(ck, name);
            /* the file holds all experts; an expert-parallel member takes its consecutive
             * share, from expert ep_rank * (E / ep) */
            const size_t parts = t->expert_dim    ? (size_t)share
                                 : t->tp_dim >= 0 ? (size_t)pt->tp
                                                  : 1;
            const size_t skip =
                t->expert_dim && share > 1 ? (size_t)m->dist->ep_rank * t->numel : 0;
            if (!e || e->dtype != TENSOR_F32 || e->nbytes != parts * t->numel * sizeof(float)) {
                snprintf(err, (size_t)errlen,
                         "checkpoint %s: tensor %s is %s; the checkpoint was written by a "
                         "model of another shape or version",
                         path, name, e ? "of another size" : "missing");
                rc = -1;
                break;
            }
            load_share(m, to[kind] + t->offset, t, (const float *)e->data + skip);
        }
    for (int kind = 0; kind < 3; kind++)
        if (to[kind] != kind_buffer(m, kind)) {
            if (rc == 0) zero_shard_of(m, to[kind], kind_buffer(m, kind));
            m->be->free(m->be, to[kind]);
        }
    return rc;
}

long long checkpoint_step(const char *path) {
    uint64_t step;
    char err[512];
    return ckpt_read_step(path, &step, err, sizeof err) == 0 ? (long long)step : -1;
}

int checkpoint_load(Model *m, Rng *loader_rng, const char *path, int with_optimizer, char *err,
                    int errlen) {
    Ckpt ck;
    Config stored;
    if (read_with_config(&ck, &stored, path, err, errlen) != 0) return -1;
    int rc = 0;
    char why[256];
    if (!config_same_shape(&stored, &m->cfg, why, sizeof why)) {
        snprintf(err, (size_t)errlen,
                 "checkpoint %s is for a model of another shape: %s. Use the checkpoint's own "
                 "settings (drop the --set that changes the shape) or train a new run",
                 path, why);
        rc = -1;
    }
    if (rc == 0) rc = load_tensors(m, &ck, path, with_optimizer ? 3 : 1, err, errlen);
    if (rc == 0 && with_optimizer) {
        const TensorRef *r = ckpt_find(&ck, "rng/loader");
        if (!r || r->nbytes != sizeof(Rng)) {
            snprintf(err, (size_t)errlen, "checkpoint %s has no data-loader state (rng/loader)",
                     path);
            rc = -1;
        } else {
            if (loader_rng) memcpy(loader_rng, r->data, sizeof(Rng));
            m->step = (int)ck.step;
            /* the router's noise stream; a checkpoint from before it existed keeps the
             * freshly seeded one */
            const TensorRef *rr = ckpt_find(&ck, "rng/router");
            if (rr && rr->nbytes == sizeof(Rng)) memcpy(&m->router_rng, rr->data, sizeof(Rng));
            /* the updates skipped (train.spike_action=skip); none where the entry is absent */
            const TensorRef *sk = ckpt_find(&ck, "optimizer/skipped");
            uint64_t skipped = 0;
            if (sk && sk->nbytes == sizeof skipped) memcpy(&skipped, sk->data, sizeof skipped);
            if (skipped > (uint64_t)m->step) {
                snprintf(err, (size_t)errlen,
                         "checkpoint %s: optimizer/skipped says %llu updates were skipped of %d "
                         "steps; the file is damaged, resume from another checkpoint",
                         path, (unsigned long long)skipped, m->step);
                rc = -1;
            }
            m->skipped = (int)skipped;
        }
    }
    /* aux-free biases steer routing at inference too, so they load with the weights. A
     * checkpoint without them (written before aux-free balancing existed) leaves them 0,
     * which is where an aux-free run starts. */
    for (int l = 0; rc == 0 && l < m->cfg.n_layer; l++) {
        float *bias = model_router_bias(m, l);
        if (!bias) continue;
        char name[TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "router_bias/layers.%d", l);
        const TensorRef *e = ckpt_find(&ck, name);
        if (!e) continue;
        if (e->dtype != TENSOR_F32 || e->nbytes != (size_t)m->cfg.num_experts * sizeof(float)) {
            snprintf(err, (size_t)errlen,
                     "checkpoint %s: %s is not %d floats; the checkpoint was written by a model "
                     "of another shape or version",
                     path, name, m->cfg.num_experts);
            rc = -1;
            break;
        }
        m->be->to_device(m->be, bias, e->data, e->nbytes);
        m->router_bias_host_fresh = 0; /* the update copies them down again */
    }
    if (!with_optimizer) m->step = 0, m->skipped = 0;
    ckpt_free(&ck);
    return rc;
}
