/*
 * inspect.c: the last forward of a model, block by block (see inspect.h).
 */
#include "model/inspect.h"

int model_is_moe(const Model *m, int layer) {
    return layer >= 0 && layer < m->cfg.n_layer && m->state.blocks[layer].moe != NULL;
}

BlockView model_block_view(const Model *m, int layer) {
    const BlockActs *a = &m->state.blocks[layer];
    return (BlockView){.input = m->state.resid[layer],
                       .mid = a->resid_mid,
                       .ffn_in = a->ln2,
                       .output = m->state.resid[layer + 1],
                       .attn_out = a->attn_out,
                       .ffn_out = a->ffn_out};
}

AttnView model_attn_view(const Model *m, int layer) {
    const BlockActs *a = &m->state.blocks[layer];
    return (AttnView){.N = m->state.N_last,
                      .H = m->cfg.n_head,
                      .Hkv = config_kv_heads(&m->cfg),
                      .D = config_head_dim(&m->cfg),
                      .q = a->q,
                      .k = a->k};
}

RouteView model_route_view(const Model *m, int layer) {
    if (!model_is_moe(m, layer)) return (RouteView){0};
    const MoeActs *a = m->state.blocks[layer].moe;
    return (RouteView){.N = a->N,
                       .E = m->spec.num_experts,
                       .A = moe_assignments_per_token(&m->spec),
                       .logits = a->logits,
                       .idx = a->idx,
                       .routed = a->route.routed,
                       .max_logit = a->route.max_logit};
}

void model_router_logits(const Model *m, int layer, float *logits) {
    m->be->matmul_forward(m->be, logits, m->state.blocks[layer].ln2, m->w.layers[layer].router,
                          m->state.N_last, m->cfg.d_model, m->cfg.num_experts);
}

MoeWeights model_moe_weights(const Model *m, int layer) {
    const LayerView *lw = &m->w.layers[layer];
    MoeWeights wt = {.router = lw->router, .Wg = lw->e_gate, .Wu = lw->e_up, .Wd = lw->e_down};
    if (m->spec.balance == MOE_BALANCE_AUX_FREE) wt.bias = m->state.blocks[layer].router_bias;
    return wt;
}

double model_expert_similarity(const Model *m, int layer) {
    const LayerView *w = &m->w.layers[layer];
    if (!w->e_gate) return 0.0;
    return experts_similarity(w->e_gate, w->e_up, w->e_down, m->cfg.num_experts, m->cfg.d_model,
                              config_expert_hidden(&m->cfg));
}

float *model_router_bias(const Model *m, int layer) {
    return layer >= 0 && layer < m->cfg.n_layer ? m->state.blocks[layer].router_bias : NULL;
}
