/*
 * plan_report.c: a plan as text (one layout in full, or the ranking of a search with the best
 * in full) and as JSON. See plan.h.
 */
#include <stdio.h>

#include "io/json.h"
#include "plan/plan.h"

static const char *const RC_NAMES[] = {"none", "selective", "experts", "full"};
static const char *const PREC_NAMES[] = {"fp32", "bf16", "fp8"};

static void print_model(FILE *f, const PlanInput *in, const PlanCounts *c) {
    const PlanModel *m = &in->m;
    const Config *mc = &m->c;
    fprintf(f,
            "model %s: %.2f B parameters; active a token %.2f B with the embedding, %.2f B "
            "without\n",
            in->model_name[0] ? in->model_name : "(settings)", c->total / 1e9,
            c->active_embed / 1e9, c->active / 1e9);
    if (mc->num_experts > 0)
        fprintf(f,
                "  %d layers (%.0f dense, %.0f MoE: %d experts of hidden %d, top-%d, %d "
                "shared), d_model %d, %s attention, %d tokens a sequence\n",
                mc->n_layer, c->n_dense, c->n_moe, mc->num_experts, config_expert_hidden(mc),
                mc->top_k, mc->num_shared, mc->d_model,
                m->c.attention == MOE_ATTN_MLA ? "latent" : "multi-head", mc->seq_len);
    else
        fprintf(f, "  %d dense layers, d_model %d, %d tokens a sequence\n", mc->n_layer,
                mc->d_model, mc->seq_len);
    fprintf(f, "  %.3g FLOPs a token, forward and backward\n", c->flops_token);
}

static void print_cluster(FILE *f, const PlanInput *in) {
    const PlanCluster *k = &in->k;
    fprintf(f,
            "cluster %s: %.0f GPUs, %.0f a node, %.0f GB each, %.3g TFLOP/s %s peak (%.0f%% "
            "reached), HBM %.2f TB/s, %.0f GB/s in a node, %.0f GB/s between nodes\n",
            in->cluster_name[0] ? in->cluster_name : "(settings)", k->gpus, k->gpus_per_node,
            k->memory_gb, plan_peak(in), PREC_NAMES[in->t.precision], 100 * k->efficiency,
            k->hbm_tbs, k->intra_gbs, k->inter_gbs);
    fprintf(f, "engine %s, %.0f sequences a step, ZeRO %d, imbalance %.2f\n",
            in->t.engine == PLAN_ENGINE_MOEC ? "moe.c" : "mixed", in->t.global_batch, in->t.zero,
            in->t.imbalance);
}

static void print_layout_line(FILE *f, const PlanResult *r) {
    fprintf(f,
            "tp %d, pp %d, ep %d, dp %d (each expert on %d GPU%s of a stage), vpp %d, "
            "micro-batch %d, %.0f micro-batches a step, recompute %s",
            r->lay.tp, r->lay.pp, r->lay.ep, r->dp, r->edp, r->edp > 1 ? "s" : "", r->lay.vpp,
            r->lay.micro_batch, r->micro, RC_NAMES[r->lay.recompute]);
}

static void print_one(FILE *f, const PlanInput *in, const PlanResult *r) {
    const double GB = 1e9;
    fputs("layout: ", f);
    print_layout_line(f, r);
    fputs("\n", f);
    fprintf(f, "memory a GPU (stage %d, %.1f micro-batches in flight), GB:\n", r->mem_stage,
            r->inflight);
    fprintf(f, "  weights %.2f, gradients %.2f, optimizer %.2f, activations %.2f\n",
            r->mem_weights / GB, r->mem_grads / GB, r->mem_optim / GB, r->mem_acts / GB);
    fprintf(f, "  total %.2f of %.0f: %s\n", r->mem_total / GB, in->k.memory_gb,
            r->fits ? "fits" : "DOES NOT FIT");
    if (r->busiest_rows > 0)
        fprintf(f, "  the busiest expert rank computes %.0f rows a layer and micro-batch\n",
                r->busiest_rows);
    fprintf(f, "communication a step, a GPU sends (stage %d):\n", r->stage);
    fprintf(f, "  tensor parallel %.3g GB, %.3g s%s\n", r->tp_bytes / GB, r->tp_s,
            r->tp_inter ? " (across nodes)" : "");
    fprintf(f, "  expert exchange %.3g GB (%.3g GB across nodes), %.3g s, %.3g s of it exposed\n",
            r->ep_bytes / GB, r->ep_inter_bytes / GB, r->ep_s, r->ep_exposed_s);
    fprintf(f, "  pipeline %.3g GB, %.3g s%s\n", r->pp_bytes / GB, r->pp_s,
            r->pp_inter ? " (across nodes)" : "");
    fprintf(f, "  gradient sums %.3g GB, %.3g s, %.3g s of it exposed%s\n", r->dp_bytes / GB,
            r->dp_s, r->dp_exposed_s, r->dp_inter ? " (across nodes)" : "");
    if (in->t.engine == PLAN_ENGINE_MOEC)
        fprintf(f,
                "  the engine's count, process 0, bytes (dist.csv's grad_sent, weight_sent, "
                "tp_sent, pp_sent): %.0f, %.0f, %.0f, %.0f\n",
                r->moec_grad_sent, r->moec_weight_sent, r->moec_tp_sent, r->moec_pp_sent);
    fprintf(f,
            "time a step, s: compute %.3g, recomputation %.3g, tensor parallel %.3g, expert "
            "exchange %.3g, pipeline %.3g, bubble %.3g, gradient sums %.3g, optimizer %.3g\n",
            r->compute_s, r->recompute_s, r->tp_s, r->ep_exposed_s, r->pp_s, r->bubble_s,
            r->dp_exposed_s, r->optim_s);
    fprintf(f, "step %.4g s, %.4g tokens/s (%.4g a GPU), MFU %.1f%%\n", r->step_s, r->tokens_per_s,
            r->tokens_per_s / in->k.gpus, 100 * r->mfu);
}

void plan_print(FILE *f, const PlanInput *in, const PlanResult *r, int n, int searched) {
    PlanCounts c;
    plan_count(&in->m, &c);
    print_model(f, in, &c);
    print_cluster(f, in);
    if (n == 0) {
        fputs("no layout divides this model, batch and cluster\n", f);
        return;
    }
    if (searched) {
        fprintf(f, "\n%d layouts costed; the best %d:\n", searched, n);
        fprintf(f, "%4s %3s %3s %4s %4s %3s %3s %-9s %9s %8s %6s  %s\n", "rank", "tp", "pp", "ep",
                "dp", "vpp", "mb", "recompute", "memory_GB", "step_s", "MFU_%", "why it loses");
        for (int i = 0; i < n; i++)
            fprintf(f, "%4d %3d %3d %4d %4d %3d %3d %-9s %9.2f %8.4g %6.1f  %s\n", i + 1,
                    r[i].lay.tp, r[i].lay.pp, r[i].lay.ep, r[i].dp, r[i].lay.vpp,
                    r[i].lay.micro_batch, RC_NAMES[r[i].lay.recompute], r[i].mem_total / 1e9,
                    r[i].step_s, 100 * r[i].mfu, i == 0 && r[0].fits ? "(best)" : r[i].loses);
        fputs("\nthe best:\n", f);
    }
    print_one(f, in, &r[0]);
}

/* One part's parameters in billions, and the layers (of `each`) it is made of. */
static void print_part(FILE *f, const char *what, double total, double layers, const char *each) {
    if (total <= 0) return;
    fprintf(f, "  %-15s %12.6g B", what, total / 1e9);
    if (layers > 0) fprintf(f, "  (%.0f layer%s of %s)", layers, layers > 1 ? "s" : "", each);
    fputs("\n", f);
}

void plan_print_counts(FILE *f, const PlanInput *in) {
    const PlanModel *m = &in->m;
    PlanCounts c;
    plan_count(m, &c);
    print_model(f, in, &c);
    fputs("parameters by part:\n", f);
    char each[5][80];
    snprintf(each[0], sizeof each[0], "%.4g B", c.attn / 1e9);
    snprintf(each[1], sizeof each[1], "%.4g B", c.dense_ffn / 1e9);
    snprintf(each[2], sizeof each[2], "%.4g B", c.router / 1e9);
    snprintf(each[3], sizeof each[3], "%d experts of %.4g B", m->c.num_experts, c.expert / 1e9);
    snprintf(each[4], sizeof each[4], "%.4g B", c.shared / 1e9);
    print_part(f, "embedding", c.embed, 0, "");
    print_part(f, "head", c.head, 0, "");
    print_part(f, "attention", m->c.n_layer * c.attn, m->c.n_layer, each[0]);
    print_part(f, "dense SwiGLUs", c.n_dense * c.dense_ffn, c.n_dense, each[1]);
    print_part(f, "routers", c.n_moe * c.router, c.n_moe, each[2]);
    print_part(f, "routed experts", c.n_moe * m->c.num_experts * c.expert, c.n_moe, each[3]);
    print_part(f, "shared experts", c.n_moe * c.shared, c.n_moe, each[4]);
    print_part(f, "norms", m->c.n_layer * c.norms + c.final_norm, 0, "");
    print_part(f, "mtp modules", c.mtp, 0, ""); /* moe.c's multi-token prediction */
    print_part(f, "total", c.total, 0, "");
    fprintf(f, "weights alone: %.2f GB at %g bytes a parameter (train.weight_bytes)\n",
            c.total * in->t.weight_bytes / 1e9, in->t.weight_bytes);
    fprintf(f,
            "for the memory a GPU, the traffic, the step time and the MFU, add %s%s (or plan a "
            "published run: --run NAME, moe plan --presets)\n",
            plan_has_cluster(in) ? "" : "a cluster (--cluster NAME --gpus N)",
            in->t.global_batch > 0 ? ""
            : plan_has_cluster(in) ? "a batch (--set train.global_batch=N)"
                                   : " and a batch (--set train.global_batch=N)");
}

static void json_num(FILE *f, const char *key, double v, int last) {
    fprintf(f, "\"%s\": %.10g%s", key, v, last ? "" : ", ");
}

void plan_print_json(FILE *f, const PlanInput *in, const PlanResult *r, int n) {
    PlanCounts c;
    plan_count(&in->m, &c);
    fputs("{\"model\": ", f);
    json_write_string(f, in->model_name);
    fputs(", \"cluster\": ", f);
    json_write_string(f, in->cluster_name);
    fprintf(f, ", \"engine\": \"%s\", ", in->t.engine == PLAN_ENGINE_MOEC ? "moe.c" : "mixed");
    fputs("\"params\": {", f);
    json_num(f, "total", c.total, 0);
    json_num(f, "active", c.active, 0);
    json_num(f, "active_with_embedding", c.active_embed, 0);
    json_num(f, "embedding", c.embed, 0);
    json_num(f, "head", c.head, 0);
    json_num(f, "attention_layer", c.attn, 0);
    json_num(f, "dense_ffn_layer", c.dense_ffn, 0);
    json_num(f, "expert", c.expert, 0);
    json_num(f, "shared_layer", c.shared, 0);
    json_num(f, "router_layer", c.router, 0);
    json_num(f, "dense_layers", c.n_dense, 0);
    json_num(f, "moe_layers", c.n_moe, 0);
    if (c.mtp > 0) json_num(f, "mtp_modules", c.mtp, 0);
    json_num(f, "flops_token", c.flops_token, 1);
    fputs("}, ", f);
    json_num(f, "weights_bytes", c.total * in->t.weight_bytes, 0);
    fputs("\"layouts\": [", f);
    for (int i = 0; i < n; i++) {
        const PlanResult *x = &r[i];
        fprintf(f,
                "%s\n {\"tp\": %d, \"pp\": %d, \"ep\": %d, \"dp\": %d, \"edp\": %d, "
                "\"vpp\": %d, \"micro_batch\": %d, \"recompute\": \"%s\", ",
                i ? "," : "", x->lay.tp, x->lay.pp, x->lay.ep, x->dp, x->edp, x->lay.vpp,
                x->lay.micro_batch, RC_NAMES[x->lay.recompute]);
        fprintf(f, "\"fits\": %s, ", x->fits ? "true" : "false");
        json_num(f, "micro_batches", x->micro, 0);
        json_num(f, "mem_weights", x->mem_weights, 0);
        json_num(f, "mem_grads", x->mem_grads, 0);
        json_num(f, "mem_optim", x->mem_optim, 0);
        json_num(f, "mem_acts", x->mem_acts, 0);
        json_num(f, "mem_total", x->mem_total, 0);
        json_num(f, "busiest_rows", x->busiest_rows, 0);
        json_num(f, "tp_bytes", x->tp_bytes, 0);
        json_num(f, "ep_bytes", x->ep_bytes, 0);
        json_num(f, "ep_inter_bytes", x->ep_inter_bytes, 0);
        json_num(f, "pp_bytes", x->pp_bytes, 0);
        json_num(f, "dp_bytes", x->dp_bytes, 0);
        json_num(f, "grad_sent", x->moec_grad_sent, 0);
        json_num(f, "weight_sent", x->moec_weight_sent, 0);
        json_num(f, "tp_sent", x->moec_tp_sent, 0);
        json_num(f, "pp_sent", x->moec_pp_sent, 0);
        json_num(f, "compute_s", x->compute_s, 0);
        json_num(f, "recompute_s", x->recompute_s, 0);
        json_num(f, "tp_s", x->tp_s, 0);
        json_num(f, "ep_s", x->ep_s, 0);
        json_num(f, "ep_exposed_s", x->ep_exposed_s, 0);
        json_num(f, "pp_s", x->pp_s, 0);
        json_num(f, "bubble_s", x->bubble_s, 0);
        json_num(f, "dp_s", x->dp_s, 0);
        json_num(f, "dp_exposed_s", x->dp_exposed_s, 0);
        json_num(f, "optim_s", x->optim_s, 0);
        json_num(f, "step_s", x->step_s, 0);
        json_num(f, "tokens_per_s", x->tokens_per_s, 0);
        json_num(f, "mfu", x->mfu, 0);
        fputs("\"loses\": ", f);
        json_write_string(f, i == 0 && x->fits ? "" : x->loses);
        fputs("}", f);
    }
    fputs("]}\n", f);
}

void plan_print_csv(FILE *f, const PlanInput *in, const PlanResult *r, int n, int header) {
    PlanCounts c;
    plan_count(&in->m, &c);
    if (header)
        fputs("model,cluster,gpus,tp,pp,ep,dp,edp,vpp,micro_batch,recompute,micro_batches,fits,"
              "mem_weights_gb,mem_grads_gb,mem_optim_gb,mem_acts_gb,mem_total_gb,busiest_rows,"
              "tp_gb,ep_gb,ep_inter_gb,pp_gb,dp_gb,compute_s,recompute_s,tp_s,ep_s,"
              "ep_exposed_s,pp_s,bubble_s,dp_s,dp_exposed_s,optim_s,step_s,tokens_per_s,"
              "tokens_per_s_gpu,mfu,tflops_gpu,params_total,params_active,params_active_embed,"
              "loses\n",
              f);
    const double GB = 1e9;
    for (int i = 0; i < n; i++) {
        const PlanResult *x = &r[i];
        fprintf(f, "%s,%s,%.0f,%d,%d,%d,%d,%d,%d,%d,%s,%.0f,%d,", in->model_name, in->cluster_name,
                in->k.gpus, x->lay.tp, x->lay.pp, x->lay.ep, x->dp, x->edp, x->lay.vpp,
                x->lay.micro_batch, RC_NAMES[x->lay.recompute], x->micro, x->fits);
        fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.6g,%.0f,", x->mem_weights / GB, x->mem_grads / GB,
                x->mem_optim / GB, x->mem_acts / GB, x->mem_total / GB, x->busiest_rows);
        fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.6g,", x->tp_bytes / GB, x->ep_bytes / GB,
                x->ep_inter_bytes / GB, x->pp_bytes / GB, x->dp_bytes / GB);
        fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,", x->compute_s,
                x->recompute_s, x->tp_s, x->ep_s, x->ep_exposed_s, x->pp_s, x->bubble_s, x->dp_s,
                x->dp_exposed_s, x->optim_s, x->step_s);
        fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.0f,%.0f,%.0f,\"%s\"\n", x->tokens_per_s,
                x->tokens_per_s / in->k.gpus, x->mfu, x->mfu * plan_peak(in), c.total, c.active,
                c.active_embed, i == 0 && x->fits ? "" : x->loses);
    }
}
