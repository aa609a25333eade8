/*
 * Chapter 7, walk.c: one published run planned by hand, term by term.
 *
 *   make chapters && build/chapters/07-planning/walk [RUN]     (default: deepseek-v3;
 *                                                              build/moe plan --presets lists them)
 *
 * It takes a run preset of `moe plan` (model, machine, layout, batch) and works out, with the
 * formulas of the handbook's chapter 7 written out here one at a time:
 *   1. the parameters: embedding, head, one layer's attention, one expert, the totals, the
 *      parameters a token uses;
 *   2. the FLOPs a token, and the compute of one step at the machine's peak and efficiency;
 *   3. the memory of the busiest GPU as the planner gives it, and the whole model's weights and
 *      gradients (what a model-parallel group shares);
 *   4. the expert exchange of one MoE layer and micro-batch: rows, bytes, where they go.
 * Each result is printed beside what the planner (src/plan/) computes; a term that differs
 * ends the program with status 1, so the text of the chapter and the code cannot drift apart.
 *
 * Besides src/moe.h it includes src/plan/plan.h: the planner's own terms (PlanCounts,
 * PlanResult) are what each formula is checked against; the planner is `moe plan`'s, not the
 * training engine's, and moe.h leaves it out.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "moe.h"

#include "plan/plan.h" /* the planner, whose terms each formula is checked against */

static int failures = 0;

/* One line: what, the formula's value, the planner's; they must agree to rounding. */
static void line(const char *what, double mine, double planner) {
    const int same = fabs(mine - planner) <= 1e-9 * fmax(1.0, fabs(planner));
    printf("  %-44s %16.6g   planner %16.6g  %s\n", what, mine, planner, same ? "=" : "DIFFERS");
    failures += !same;
}

int main(int argc, char **argv) {
    const char *run = argc > 1 ? argv[1] : "deepseek-v3";
    if (argc > 2 || (argc > 1 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: %s [RUN]   (a run preset: build/moe plan --presets)\n", argv[0]);
        return MOE_EXIT_INPUT;
    }
    PlanInput in;
    char err[512];
    plan_defaults(&in);
    if (plan_preset(&in, "run", run, err, sizeof err) != 0) moe_input_error("%s", err);
    const PlanModel *m = &in.m;
    PlanCounts c;
    plan_count(m, &c);
    PlanResult r;
    plan_layout(&in, &in.lay, &r);
    if (!r.valid) moe_input_error("the run's layout cannot run: %s", r.invalid);
    const double d = m->c.d_model, h = m->c.n_head, V = m->c.vocab, L = m->c.n_layer;

    printf("Run %s: %s on %.0f GPUs, tp %d pp %d ep %d\n\n", run, in.model_name, in.k.gpus,
           in.lay.tp, in.lay.pp, in.lay.ep);
    printf("1. Parameters\n");
    line("embedding V d", V * d, c.embed);
    double attn;
    if (m->c.attention == MOE_ATTN_MLA) {
        const double dqk = m->c.mla_nope_dim + m->c.mla_rope_dim;
        attn = d * m->c.mla_q_rank + m->c.mla_q_rank * h * dqk /* q down, q up */
               + d * (m->c.mla_kv_rank + m->c.mla_rope_dim)    /* kv down, rotary key */
               + m->c.mla_kv_rank * h * (m->c.mla_nope_dim + m->c.mla_v_dim) /* k and v up */
               + h * m->c.mla_v_dim * d;                                     /* output */
        line("latent attention, a layer", attn, c.attn);
    } else {
        const double hd = m->c.head_dim > 0 ? m->c.head_dim : d / h;
        const double kv = m->c.kv_heads > 0 ? m->c.kv_heads : h;
        attn = 2 * d * h * hd + 2 * d * kv * hd; /* q and output, k and v */
        line("attention 2 d h hd + 2 d kv hd, a layer", attn, c.attn);
    }
    const double expert = 3 * d * m->c.d_expert;
    line("one expert 3 d F_e (gate, up, down)", expert, c.expert);
    const double moe_layer =
        m->c.num_experts * d + m->c.num_experts * expert + m->c.num_shared * expert;
    line("an MoE layer's FFN E d + E 3dF_e + shared", moe_layer,
         c.router + m->c.num_experts * c.expert + c.shared);
    const double total = c.embed + c.head + c.final_norm + L * (attn + c.norms) +
                         c.n_dense * 3 * d * m->c.d_ff + c.n_moe * moe_layer;
    line("total", total, c.total);
    const double active =
        c.head + c.final_norm + L * (attn + c.norms) + c.n_dense * 3 * d * m->c.d_ff +
        c.n_moe * (m->c.num_experts * d + (m->c.top_k + m->c.num_shared) * expert);
    line("a token's (top_k of E, the embedding a lookup)", active, c.active);

    printf("\n2. FLOPs and compute\n");
    const double matmul =
        V * d + L * attn + c.n_dense * 3 * d * m->c.d_ff +
        c.n_moe * (m->c.num_experts * d + (m->c.top_k + m->c.num_shared) * expert);
    const double dqk = m->c.attention == MOE_ATTN_MLA ? m->c.mla_nope_dim + m->c.mla_rope_dim
                                                      : (m->c.head_dim > 0 ? m->c.head_dim : d / h);
    const double dv = m->c.attention == MOE_ATTN_MLA ? m->c.mla_v_dim : dqk;
    const double flops = 6 * matmul + 3 * L * 2 * h * (dqk + dv) * m->c.seq_len / 2;
    line("6 x products + causal attention, a token", flops, c.flops_token);
    const double tokens = in.t.global_batch * m->c.seq_len;
    printf("  %-44s %16.6g\n", "tokens a step", tokens);
    printf("  %-44s %16.6g s\n", "the step at peak x efficiency, all GPUs",
           flops * tokens / (in.k.gpus * plan_peak(&in) * 1e12 * in.k.efficiency));

    printf("\n3. Memory of the busiest GPU (stage %d), weights and state\n", r.mem_stage);
    printf("  (its share: dense weights over tp, E / ep experts of its layers; ZeRO %d shards\n"
           "   the optimizer over dp = %d for dense weights, over %d replicas for experts)\n",
           in.t.zero, r.dp, r.edp);
    printf("  %-44s %16.3f GB\n", "weights", r.mem_weights / 1e9);
    printf("  %-44s %16.3f GB\n", "gradients", r.mem_grads / 1e9);
    printf("  %-44s %16.3f GB\n", "optimizer (master and two moments)", r.mem_optim / 1e9);
    const double bpp = in.t.weight_bytes + in.t.grad_bytes;
    printf("  %-44s %16.3f TB\n", "every weight and gradient of the model", c.total * bpp / 1e12);
    printf("  %-44s %16.3f GB\n", "activations (the planner's table)", r.mem_acts / 1e9);

    if (m->c.num_experts > 0 && in.lay.ep > 1) {
        printf("\n4. The expert exchange, one MoE layer and micro-batch\n");
        const double nt = in.lay.micro_batch * (double)m->c.seq_len / in.lay.tp;
        const double rows = nt * m->c.top_k;
        printf("  %-44s %16.6g\n", "rows a GPU routes: tokens x top_k", rows);
        printf("  %-44s %16.6g\n", "of them to other GPUs: x (ep - 1) / ep",
               rows * (in.lay.ep - 1) / in.lay.ep);
        line("busiest GPU's rows: x imbalance", rows * in.t.imbalance, r.busiest_rows);
        printf("  %-44s %16.6g MB\n", "bytes of one pass out: rows x d x a2a_bytes",
               rows * (in.lay.ep - 1) / in.lay.ep * d * in.t.a2a_bytes / 1e6);
        printf("  (four passes a layer: out and back, forward and backward; a step's total is\n"
               "   %.3g GB, %.3g GB of it across nodes)\n",
               r.ep_bytes / 1e9, r.ep_inter_bytes / 1e9);
    }
    printf("\nstep %.4g s, %.4g tokens/s a GPU, MFU %.1f%% (moe plan --run %s)\n", r.step_s,
           r.tokens_per_s / in.k.gpus, 100 * r.mfu, run);
    if (failures) printf("%d terms differ from the planner\n", failures);
    return failures ? 1 : 0;
}
