/*
 * backend_ops.h: the operations of the backend table (backend.h), each declared once: its name
 * and its arguments after the backend, which every entry takes first. No include guard: a file
 * defines BACKEND_OP(name, params) and includes this list to make one line per operation of
 * it. backend.h makes the Backend struct's fields; the tables of the backends make their
 * entries (cpu/cpu.c: ref_NAME and the fast versions, cpu/fenced.c: f_NAME, cuda/cuda.cu:
 * cuda_NAME), so that a new operation is one line here and one function per backend, and a
 * backend that lacks it does not compile. params is the parenthesised argument list;
 * BACKEND_PARAMS (backend.h) opens it. The memory entries and the collectives, whose return
 * types differ and which the trainer calls on their own, are written in the struct.
 */
#ifndef BACKEND_OP
#error "define BACKEND_OP(name, params) before including backend/backend_ops.h"
#endif

/* ---- elementwise steps and sums (nn/vec.c) ----------------------------------------- */
BACKEND_OP(add, (float *y, const float *a, const float *b, size_t n))
BACKEND_OP(mul, (float *y, const float *a, const float *b, size_t n))
BACKEND_OP(scale, (float *x, float s, size_t n))
/* y = x rounded to the nearest bfloat16, kept in float (vec_round_bf16): a bf16 router
 * emulated on any backend (moe.router_precision) */
BACKEND_OP(round_bf16, (float *y, const float *x, size_t n))
/* *out (one double of the backend's memory) = the sum of x[0 .. n) in index order, in
 * double (the loss over the tokens): left where it is, so that a training step reads its
 * micro-batches' losses with one copy (model_read_step), not one wait each */
BACKEND_OP(sum, (double *out, const float *x, size_t n))
/* *out (one double of the backend's memory) = the sum of squares, deterministic for any
 * thread count: fixed chunks of VEC_CHUNK into partial (vec_chunks(n) doubles of the
 * backend's memory), then the chunks in order. Left there, as sum's: the gradient norm
 * comes down with the step's other numbers (model_read_step) */
BACKEND_OP(sum_squares, (double *out, double *partial, const float *x, size_t n))
/* x (N, C): x[n] = emb[tokens[n]]; backward demb (V, C) += dx scattered by token, V the
 * vocabulary (model.vocab): every id lies in [0, V) */
BACKEND_OP(embed_forward, (float *x, const int *tokens, const float *emb, int N, int C))
BACKEND_OP(embed_backward, (float *demb, const float *dx, const int *tokens, int N, int C, int V))
/* rows (n, C): out[to[i]] = in[i], or out[i] = in[to[i]] when back is set */
BACKEND_OP(permute_rows, (float *out, const float *in, const int *to, int n, int C, int back))
/* a block of rows x width: dst[r ldd + j] = src[r lds + j], or += when add is set (latent
 * attention's heads assembled from, and their gradients returned to, the parts they share) */
BACKEND_OP(copy_block,
           (float *dst, int ldd, const float *src, int lds, int rows, int width, int add))

/* ---- the dense ops (nn/ops.h, same arguments) ----------------------------------------- */
BACKEND_OP(matmul_forward, (float *y, const float *x, const float *W, int N, int IN, int OUT))
BACKEND_OP(matmul_backward, (float *dx, float *dW, const float *dy, const float *x, const float *W,
                             int N, int IN, int OUT))
/* The router's product, logits (N, E) = x (N, C) Wr (E, C)^T, and its backward: matmul's
 * arguments, kept apart so that a backend computing the large products at a lower
 * precision (a GPU's tf32, bf16) computes this one in fp32 (selective precision: top-k is
 * decided on these logits). The CPU backends run their matmul. */
BACKEND_OP(router_logits_forward,
           (float *logits, const float *x, const float *Wr, int N, int C, int E))
BACKEND_OP(router_logits_backward, (float *dx, float *dWr, const float *dlogits, const float *x,
                                    const float *Wr, int N, int C, int E))
BACKEND_OP(rmsnorm_forward, (float *y, float *rstd, const float *x, const float *w, int N, int C))
BACKEND_OP(rmsnorm_backward, (float *dx, float *dw, const float *dy, const float *x, const float *w,
                              const float *rstd, int N, int C))
BACKEND_OP(rope_forward, (float *x, const float *cs, int B, int T, int H, int D))
BACKEND_OP(rope_backward, (float *dx, const float *cs, int B, int T, int H, int D))
BACKEND_OP(attention_forward, (float *out, float *att, const float *q, const float *k,
                               const float *v, int B, int T, int H, int Hkv, int D, int Dv))
BACKEND_OP(attention_backward, (float *dq, float *dk, float *dv, float *ws, const float *dout,
                                const float *att, const float *q, const float *k, const float *v,
                                int B, int T, int H, int Hkv, int D, int Dv, int n_ws))
BACKEND_OP(swiglu_forward, (float *h, const float *g, const float *u, int N, int F))
BACKEND_OP(swiglu_backward,
           (float *dg, float *du, const float *dh, const float *g, const float *u, int N, int F))
BACKEND_OP(crossentropy_forward,
           (float *losses, float *probs, const float *logits, const int *targets, int N, int V))
BACKEND_OP(crossentropy_backward,
           (float *dlogits, const float *probs, const int *targets, float scale, int N, int V))
BACKEND_OP(adamw_update, (float *p, float *g, float *m, float *v, size_t n, const AdamwStep *s))

/* ---- decoding (src/infer/decode.c): new tokens against a cache, each row at its own position;
 * nothing trains, so these have no backward. nn/ops.h's rope_forward_at and attention_decode,
 * with pos and rows (N) in the backend's memory. */
BACKEND_OP(rope_forward_at, (float *x, const float *cs, const int *pos, int N, int H, int D))
BACKEND_OP(attention_decode,
           (float *out, float *att, const float *q, const float *kc, const float *vc,
            const int *rows, int N, int H, int Hkv, int D, int Dv, int Tc))

/* ---- the MoE ops (moe/moe_ops.h, same arguments) ------------------------------------
 * s, x and p are host structs; a plan's arrays, x->global_f and x->work are device memory,
 * x->rng, x->dist and x->tape host memory (the list at the top of backend.h) */
BACKEND_OP(router_scores_forward,
           (float *scores, float *lse, const float *logits, int N, const MoeSpec *s))
BACKEND_OP(router_gate_forward, (int *idx, float *w, const float *scores, const float *logits,
                                 const float *bias, int N, const MoeSpec *s))
/* the gate weights of experts already chosen (a replay of recorded routing) */
BACKEND_OP(router_gate_weights, (float *w, const int *idx, const float *scores, const float *logits,
                                 int N, const MoeSpec *s))
/* the balance and z losses into *out, one float of the backend's memory (read with the
 * step's other numbers: model_read_step) */
BACKEND_OP(router_balance_loss, (float *out, const float *scores, const int *idx, int N,
                                 const MoeSpec *s, const MoeCtx *x))
BACKEND_OP(router_z_loss, (float *out, const float *lse, int N))
BACKEND_OP(router_gate_backward,
           (float *dlogits, const float *dw, const float *scores, const float *lse,
            const float *logits, const int *idx, const float *w, int N, const MoeSpec *s,
            const MoeCtx *x, float bal_scale, float z_scale))
/* the dispatch plan: dropless, with a capacity, or chosen by the experts */
BACKEND_OP(dispatch_plan_build, (DispatchPlan * p, const int *idx, int N))
BACKEND_OP(capacity_plan_build, (DispatchPlan * p, const int *idx, const float *scores,
                                 const float *w, int N, const MoeSpec *s, const MoeCtx *x))
BACKEND_OP(expert_choice_forward, (int *idx, float *w, DispatchPlan *p, const float *scores, int N,
                                   const MoeSpec *s, const MoeCtx *x))
BACKEND_OP(permute_forward, (float *xe, const float *x, const DispatchPlan *p, int C))
BACKEND_OP(permute_backward, (float *dx, const float *dxe, const DispatchPlan *p, int C))
BACKEND_OP(combine_forward,
           (float *y, const float *ye, const float *w, const DispatchPlan *p, int C))
BACKEND_OP(combine_backward, (float *dye, float *dw, const float *dy, const float *ye,
                              const float *w, const DispatchPlan *p, int C))
/* All E experts' SwiGLU over their slices of the slot buffer, as one operation: expert e
 * owns rows [offsets[e], offsets[e + 1]); counts (E), when not NULL, is the number of kept
 * rows at the start of each slice (a padded plan: the rest are padding rows, computed as
 * their own product so that the kept rows round exactly as in an unpadded plan). */
BACKEND_OP(experts_forward, (float *ye, float *g, float *u, float *h, const float *xe,
                             const float *Wg, const float *Wu, const float *Wd, const int *offsets,
                             const int *counts, int E, int C, int F))
BACKEND_OP(experts_backward,
           (float *dxe, float *dWg, float *dWu, float *dWd, float *dg, float *du, float *dh,
            const float *dye, const float *xe, const float *g, const float *u, const float *h,
            const float *Wg, const float *Wu, const float *Wd, const int *offsets,
            const int *counts, int E, int C, int F))

/* what a routing decision did, as host numbers (router.csv, domains.csv): the trainer
 * reads these, never the routing arrays. route_stats fills all of host_out (a host struct
 * with host arrays): route_stats of the decision, and the router_logit_stats of its logits
 * (N, E) and lse (N); route_domains adds to host_counts and host_drops by host_domains (N),
 * all three host arrays */
BACKEND_OP(route_stats,
           (RouteStats * host_out, const float *scores, const float *logits, const float *lse,
            const int *idx, const DispatchPlan *p, int N, const MoeSpec *s))
/* route_stats left in the backend's memory, for a training step to read with its losses
 * in one copy (model_read_step): route_stats_record writes what route_stats would report
 * into rec (route_record_bytes(E) bytes of the backend's memory, in the backend's own
 * layout); route_stats_read turns a host copy of such a record into host_out, the numbers
 * route_stats fills, bit for bit. */
BACKEND_OP(route_stats_record,
           (void *rec, const float *scores, const float *logits, const float *lse, const int *idx,
            const DispatchPlan *p, int N, const MoeSpec *s))
BACKEND_OP(route_stats_read, (RouteStats * host_out, const void *host_rec, const MoeSpec *s))
BACKEND_OP(route_domains,
           (double *host_counts, double *host_drops, const unsigned char *host_domains,
            int n_domains, const int *idx, const DispatchPlan *p, int N, const MoeSpec *s))

/* router.csv's expert_sim of one MoE block into *out (one double of the backend's memory):
 * moe/experts.c's experts_similarity of Wg, Wu (E, F, C) and Wd (E, C, F), computed where
 * the weights are, so that a step does not copy every expert down to log one number */
BACKEND_OP(experts_similarity,
           (double *out, const float *Wg, const float *Wu, const float *Wd, int E, int C, int F))

/* ---- measurement ------------------------------------------------------------------------
 * The backend's own square product C (n, n) = A B (2 n^3 FLOPs), timed: one warm-up, then
 * reps products, seconds[r] (host memory) the wall time of each. The yardstick `moe bench`
 * measures a training step against. */
BACKEND_OP(gemm_seconds, (int n, int reps, double *seconds))
