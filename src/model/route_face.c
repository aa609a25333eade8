/* route_face.c: the model's routing as a training loop reads it (see route_face.h). */
#include "model/route_face.h"

#include <stdlib.h>

#include "base/util.h"
#include "model/ep.h"
#include "model/grad_sync.h"
#include "model/tp.h"

RouteStatsView model_route_stats(const Model *m, int layer) {
    const RouteStats *rs =
        &m->state.blocks[layer].moe->route; /* what the block's last forward routed */
    return (RouteStatsView){.E = rs->E,
                            .expert_choice = m->spec.routing == MOE_ROUTING_EXPERT_CHOICE,
                            .load = rs->load,
                            .routed = rs->routed,
                            .dropped = rs->dropped,
                            .drop = rs->drop,
                            .pad = rs->pad,
                            .entropy = rs->st.entropy,
                            .top1 = rs->st.top1,
                            .max_logit = rs->max_logit,
                            .lse_mean = rs->lse_mean};
}

void model_load_balance(float *maxvio, float *cv, const float *load, int E) {
    load_balance(maxvio, cv, load, E);
}

void model_route_domains(const Model *m, int layer, double *counts, double *drops,
                         const uint8_t *domains, int n_domains) {
    const MoeActs *a = m->state.blocks[layer].moe;
    int n, row0; /* the block's rows: this rank's under tensor parallelism (tp.h) */
    tp_rows(m, m->state.N_last, &n, &row0);
    m->be->route_domains(m->be, counts, drops, domains, n_domains, a->idx, &a->plan, n, &m->spec);
}

void model_comm_stats_reset(Model *m) {
    /* the multi-token prediction modules' blocks too: theirs are dist.csv's layers after L */
    for (int l = 0; l < m->cfg.n_layer + m->cfg.mtp_depth; l++)
        if (m->state.blocks[l].moe && m->state.blocks[l].moe->ep)
            ep_stats_reset(m->state.blocks[l].moe->ep);
}

int model_comm_stats(const Model *m, int layer, double row[7]) {
    const MoeActs *a = m->state.blocks[layer].moe;
    if (!a || !a->ep) return 0;
    const EpStats *s = &a->ep->stats;
    row[0] = s->bytes_sent;
    row[1] = s->bytes_recv;
    row[2] = s->comm_seconds;
    row[3] = s->expert_seconds;
    row[4] = s->rows_in;
    row[5] = s->rows_out_remote;
    row[6] = s->rows_in_remote;
    return 1;
}

double model_sync_wait_s(const Model *m) {
    return m->sync->wait_s;
}

double *model_router_record(const Model *m) {
    /* each block's expert_sim computed where the experts are, the biases copied beside them,
     * then one copy down for all (Model.state.log_rec) */
    const Backend *be = m->be;
    const size_t nb = (size_t)m->n_moe, E = (size_t)m->cfg.num_experts;
    const size_t bytes = nb * (sizeof(double) + E * sizeof(float));
    /* no process holds every expert whole: expert parallelism, dist.zero=3 between steps, or
     * a pipeline (each stage its blocks') */
    const int ep = m->dist && (m->dist->ep > 1 || m->cfg.zero >= 3 || m->dist->pp > 1);
    const int F = config_expert_hidden(&m->cfg);
    for (int l = 0, b = 0; l < m->cfg.n_layer && !ep; l++)
        if (m->state.blocks[l].moe) {
            const LayerView *w = &m->w.layers[l];
            be->experts_similarity(be, m->state.log_rec + b++, w->e_gate, w->e_up, w->e_down,
                                   (int)E, m->cfg.d_model, F);
        }
    double *rec = (double *)malloc_check(bytes + 1);
    if (nb) {
        be->copy(be, m->state.log_rec + nb, m->router_bias, nb * E * sizeof(float));
        be->to_host(be, rec, m->state.log_rec, bytes);
    }
    return rec;
}
