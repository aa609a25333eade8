/*
 * fenced.c: the cpu-fenced backend (train.device=cpu-fenced): the cpu backend's operations
 * behind a fence, with the memory of a device.
 *
 * A GPU's memory cannot be read by the host: a program that dereferences a device pointer on
 * the host crashes on a GPU, and only there. This backend gives the CPU that property, so that
 * such a read is found on any machine: every buffer it hands out lies in pages of its own,
 * closed to all access (mprotect PROT_NONE) except while one of its operations runs. Its
 * table is the cpu backend's, each entry opening the pages, calling the cpu entry and closing
 * them again; host_memory is 0, so the engine moves data with to_host and to_device, as it must
 * for a GPU. A read or write of a closed page stops the program with a message naming the
 * address (SIGSEGV). An entry itself runs with the pages open, so before it does, it checks each
 * of its pointers against backend.h's list of device and host memory: a host array passed as a
 * device buffer (or the reverse) stops the program with a message naming the entry and the
 * argument ("the contract" below).
 *
 * The results are the cpu backend's, bit for bit (the same operations in the same order):
 * tests/test_backends.sh trains on both and compares. Slower, by a pair of mprotect calls per
 * buffer per operation. Linux (or any POSIX system with mmap and mprotect).
 */
#include "backend/backend.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/util.h"

/* ---- the fence ------------------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t len; /* whole pages */
} Region;

static Region *regions;
static int n_regions, cap_regions;
static int depth; /* open calls in progress (an entry may call memory entries) */

static void protect_all(int prot) {
    for (int i = 0; i < n_regions; i++)
        if (mprotect(regions[i].p, regions[i].len, prot) != 0)
            moe_fatal("cpu-fenced: mprotect failed on %zu bytes", regions[i].len);
}
static void fence_open(void) {
    if (depth++ == 0) protect_all(PROT_READ | PROT_WRITE);
}
static void fence_close(void) {
    if (--depth == 0) protect_all(PROT_NONE);
}

/* A closed page touched: say where, then let the signal end the program as it would. */
static void on_segv(int sig, siginfo_t *info, void *uc) {
    (void)uc;
    const char *a = (const char *)info->si_addr;
    for (int i = 0; i < n_regions; i++)
        if (a >= regions[i].p && a < regions[i].p + regions[i].len) {
            char msg[200];
            int n = snprintf(msg, sizeof msg,
                             "cpu-fenced: the host touched the backend's memory at %p directly; "
                             "a device's memory is read with to_host and written with to_device\n",
                             info->si_addr);
            if (n > 0 && write(STDERR_FILENO, msg, (size_t)n) < 0) _exit(3);
            break;
        }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handler(void) {
    static int done;
    if (done) return;
    done = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
}

/* ---- the contract: which pointers are the device's ------------------------------------------
 * The fence stops a host read of the backend's memory between operations, but an operation
 * runs with the pages open: one handed a device pointer where backend.h says host memory (or
 * the reverse) would run here and fail on a GPU, where the two are different address spaces
 * (a cudaMemcpy of the wrong kind). So every entry first checks each pointer argument, and
 * each pointer field of the structures it takes, against backend.h: the device's memory lies
 * in one of the fence's regions, the host's in none. NULL passes (an optional argument). A
 * violation ends the program naming the operation and the argument. */

static int in_regions(const void *p) {
    const char *a = (const char *)p;
    for (int i = 0; i < n_regions; i++)
        if (a >= regions[i].p && a < regions[i].p + regions[i].len) return 1;
    return 0;
}
static void want_device(const char *op, const char *arg, const void *p) {
    if (p && !in_regions(p))
        moe_fatal("cpu-fenced: %s: %s (%p) is host memory, but backend.h has it in the "
                  "backend's memory: allocate it with alloc and fill it with to_device",
                  op, arg, p);
}
static void want_host(const char *op, const char *arg, const void *p) {
    if (p && in_regions(p))
        moe_fatal("cpu-fenced: %s: %s (%p) is the backend's memory, but backend.h has it in "
                  "host memory: copy it to the host with to_host",
                  op, arg, p);
}
/* A plan: the struct on the host, its arrays the device's. */
static void want_plan(const char *op, const DispatchPlan *p) {
    want_host(op, "p (DispatchPlan)", p);
    if (!p) return;
    want_device(op, "p->counts", p->counts), want_device(op, "p->offsets", p->offsets);
    want_device(op, "p->slot", p->slot), want_device(op, "p->slot_token", p->slot_token);
}
/* A call's context: the struct, its stream, processes and tape on the host; f and the scratch
 * the device's. */
static void want_ctx(const char *op, const MoeCtx *x) {
    want_host(op, "x (MoeCtx)", x);
    if (!x) return;
    want_host(op, "x->rng", x->rng), want_host(op, "x->dist", x->dist);
    want_host(op, "x->tape", x->tape);
    want_device(op, "x->global_f", x->global_f), want_device(op, "x->work", x->work);
}
/* Each entry below is f_ (or checked_, for the five a host read's count wraps: "host reads"
 * below) and its operation's name; __func__ after the prefix names it in the message. */
static const char *op_name(const char *func) {
    return strchr(func, '_') + 1;
}
#define OP op_name(__func__)
#define DEV(p) want_device(OP, #p, (p))
#define HOST(p) want_host(OP, #p, (p))
#define PLAN(p) want_plan(OP, (p))
#define CTX(x) want_ctx(OP, (x))

/* ---- memory -----------------------------------------------------------------------------------
 */

static void *fenced_alloc(const Backend *be, size_t bytes) {
    (void)be;
    install_handler();
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (bytes + page - 1) / page * page;
    if (!len) len = page;
    /* anonymous pages arrive zeroed, as alloc promises */
    void *p = mmap(NULL, len, depth ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) moe_fatal("cpu-fenced: out of memory (%zu bytes)", bytes);
    if (n_regions == cap_regions) {
        cap_regions = cap_regions ? 2 * cap_regions : 64;
        Region *grown = (Region *)realloc(regions, (size_t)cap_regions * sizeof(Region));
        if (!grown) moe_fatal("cpu-fenced: out of memory");
        regions = grown;
    }
    regions[n_regions++] = (Region){(char *)p, len};
    backend_bytes_allocated += bytes;
    return p;
}
static void fenced_free(const Backend *be, void *p) {
    (void)be;
    if (!p) return;
    for (int i = 0; i < n_regions; i++)
        if (regions[i].p == p) {
            munmap(regions[i].p, regions[i].len);
            regions[i] = regions[--n_regions];
            return;
        }
    moe_fatal("cpu-fenced: free of %p, which it did not allocate", p);
}
static void fenced_zero(const Backend *be, void *p, size_t bytes) {
    (void)be, fence_open(), memset(p, 0, bytes), fence_close();
}
static void fenced_copy(const Backend *be, void *dst, const void *src, size_t bytes) {
    (void)be, fence_open();
    if (dst != src && bytes) memmove(dst, src, bytes);
    fence_close();
}
static void fenced_sync(const Backend *be) {
    (void)be;
}

/* zero, copy, to_device and to_host behind their contracts (the memory moves above) */
static void f_zero(const Backend *be, void *p, size_t bytes) {
    DEV(p);
    fenced_zero(be, p, bytes);
}
static void f_copy(const Backend *be, void *dst, const void *src, size_t bytes) {
    DEV(dst), DEV(src);
    fenced_copy(be, dst, src, bytes);
}
static void f_to_device(const Backend *be, void *dst, const void *host_src, size_t bytes) {
    DEV(dst), HOST(host_src);
    fenced_copy(be, dst, host_src, bytes);
}
static void f_to_host(const Backend *be, void *host_dst, const void *src, size_t bytes) {
    HOST(host_dst), DEV(src);
    fenced_copy(be, host_dst, src, bytes);
}

/* ---- the entries: the cpu backend's, inside the fence ----------------------------------------
 * FENCED(call) runs a cpu entry with the pages open; FENCED_VALUE for one that returns. */
static const Backend *const CPU = &backend_cpu;
#define FENCED(call) (void)be, fence_open(), CPU->call, fence_close()
#define FENCED_VALUE(type, call)                                                                   \
    do {                                                                                           \
        (void)be;                                                                                  \
        fence_open();                                                                              \
        type r_ = CPU->call;                                                                       \
        fence_close();                                                                             \
        return r_;                                                                                 \
    } while (0)

static void f_add(const Backend *be, float *y, const float *a, const float *b, size_t n) {
    DEV(y), DEV(a), DEV(b);
    FENCED(add(CPU, y, a, b, n));
}
static void f_mul(const Backend *be, float *y, const float *a, const float *b, size_t n) {
    DEV(y), DEV(a), DEV(b);
    FENCED(mul(CPU, y, a, b, n));
}
static void f_scale(const Backend *be, float *x, float s, size_t n) {
    DEV(x);
    FENCED(scale(CPU, x, s, n));
}
static void f_round_bf16(const Backend *be, float *y, const float *x, size_t n) {
    DEV(y), DEV(x);
    FENCED(round_bf16(CPU, y, x, n));
}
static void f_sum(const Backend *be, double *out, const float *x, size_t n) {
    DEV(out), DEV(x);
    FENCED(sum(CPU, out, x, n));
}
static void f_sum_squares(const Backend *be, double *out, double *partial, const float *x,
                          size_t n) {
    DEV(out), DEV(partial), DEV(x);
    FENCED(sum_squares(CPU, out, partial, x, n));
}
static void f_embed_forward(const Backend *be, float *x, const int *tokens, const float *emb, int N,
                            int C) {
    DEV(x), DEV(tokens), DEV(emb);
    FENCED(embed_forward(CPU, x, tokens, emb, N, C));
}
static void f_embed_backward(const Backend *be, float *demb, const float *dx, const int *tokens,
                             int N, int C, int V) {
    DEV(demb), DEV(dx), DEV(tokens);
    FENCED(embed_backward(CPU, demb, dx, tokens, N, C, V));
}
static void f_copy_block(const Backend *be, float *dst, int ldd, const float *src, int lds,
                         int rows, int width, int add) {
    DEV(dst), DEV(src);
    FENCED(copy_block(CPU, dst, ldd, src, lds, rows, width, add));
}
static void f_permute_rows(const Backend *be, float *out, const float *in, const int *to, int n,
                           int C, int back) {
    DEV(out), DEV(in), DEV(to);
    FENCED(permute_rows(CPU, out, in, to, n, C, back));
}
static void f_matmul_forward(const Backend *be, float *y, const float *x, const float *W, int N,
                             int IN, int OUT) {
    DEV(y), DEV(x), DEV(W);
    FENCED(matmul_forward(CPU, y, x, W, N, IN, OUT));
}
static void f_matmul_backward(const Backend *be, float *dx, float *dW, const float *dy,
                              const float *x, const float *W, int N, int IN, int OUT) {
    DEV(dx), DEV(dW), DEV(dy), DEV(x), DEV(W);
    FENCED(matmul_backward(CPU, dx, dW, dy, x, W, N, IN, OUT));
}
static void f_router_logits_forward(const Backend *be, float *logits, const float *x,
                                    const float *Wr, int N, int C, int E) {
    DEV(logits), DEV(x), DEV(Wr);
    FENCED(router_logits_forward(CPU, logits, x, Wr, N, C, E));
}
static void f_router_logits_backward(const Backend *be, float *dx, float *dWr, const float *dlogits,
                                     const float *x, const float *Wr, int N, int C, int E) {
    DEV(dx), DEV(dWr), DEV(dlogits), DEV(x), DEV(Wr);
    FENCED(router_logits_backward(CPU, dx, dWr, dlogits, x, Wr, N, C, E));
}
static void f_rmsnorm_forward(const Backend *be, float *y, float *rstd, const float *x,
                              const float *w, int N, int C) {
    DEV(y), DEV(rstd), DEV(x), DEV(w);
    FENCED(rmsnorm_forward(CPU, y, rstd, x, w, N, C));
}
static void f_rmsnorm_backward(const Backend *be, float *dx, float *dw, const float *dy,
                               const float *x, const float *w, const float *rstd, int N, int C) {
    DEV(dx), DEV(dw), DEV(dy), DEV(x), DEV(w), DEV(rstd);
    FENCED(rmsnorm_backward(CPU, dx, dw, dy, x, w, rstd, N, C));
}
static void f_rope_forward(const Backend *be, float *x, const float *cs, int B, int T, int H,
                           int D) {
    DEV(x), DEV(cs);
    FENCED(rope_forward(CPU, x, cs, B, T, H, D));
}
static void f_rope_backward(const Backend *be, float *dx, const float *cs, int B, int T, int H,
                            int D) {
    DEV(dx), DEV(cs);
    FENCED(rope_backward(CPU, dx, cs, B, T, H, D));
}
static void f_attention_forward(const Backend *be, float *out, float *att, const float *q,
                                const float *k, const float *v, int B, int T, int H, int Hkv, int D,
                                int Dv) {
    DEV(out), DEV(att), DEV(q), DEV(k), DEV(v);
    FENCED(attention_forward(CPU, out, att, q, k, v, B, T, H, Hkv, D, Dv));
}
static void f_attention_backward(const Backend *be, float *dq, float *dk, float *dv, float *ws,
                                 const float *dout, const float *att, const float *q,
                                 const float *k, const float *v, int B, int T, int H, int Hkv,
                                 int D, int Dv, int n_ws) {
    DEV(dq), DEV(dk), DEV(dv), DEV(ws), DEV(dout), DEV(att), DEV(q), DEV(k), DEV(v);
    FENCED(attention_backward(CPU, dq, dk, dv, ws, dout, att, q, k, v, B, T, H, Hkv, D, Dv, n_ws));
}
static void f_rope_forward_at(const Backend *be, float *x, const float *cs, const int *pos, int N,
                              int H, int D) {
    DEV(x), DEV(cs), DEV(pos);
    FENCED(rope_forward_at(CPU, x, cs, pos, N, H, D));
}
static void f_attention_decode(const Backend *be, float *out, float *att, const float *q,
                               const float *kc, const float *vc, const int *rows, int N, int H,
                               int Hkv, int D, int Dv, int Tc) {
    DEV(out), DEV(att), DEV(q), DEV(kc), DEV(vc), DEV(rows);
    FENCED(attention_decode(CPU, out, att, q, kc, vc, rows, N, H, Hkv, D, Dv, Tc));
}
static void f_swiglu_forward(const Backend *be, float *h, const float *g, const float *u, int N,
                             int F) {
    DEV(h), DEV(g), DEV(u);
    FENCED(swiglu_forward(CPU, h, g, u, N, F));
}
static void f_swiglu_backward(const Backend *be, float *dg, float *du, const float *dh,
                              const float *g, const float *u, int N, int F) {
    DEV(dg), DEV(du), DEV(dh), DEV(g), DEV(u);
    FENCED(swiglu_backward(CPU, dg, du, dh, g, u, N, F));
}
static void f_crossentropy_forward(const Backend *be, float *losses, float *probs,
                                   const float *logits, const int *targets, int N, int V) {
    DEV(losses), DEV(probs), DEV(logits), DEV(targets);
    FENCED(crossentropy_forward(CPU, losses, probs, logits, targets, N, V));
}
static void f_crossentropy_backward(const Backend *be, float *dlogits, const float *probs,
                                    const int *targets, float scale, int N, int V) {
    DEV(dlogits), DEV(probs), DEV(targets);
    FENCED(crossentropy_backward(CPU, dlogits, probs, targets, scale, N, V));
}
static void f_adamw_update(const Backend *be, float *p, float *g, float *m, float *v, size_t n,
                           const AdamwStep *s) {
    DEV(p), DEV(g), DEV(m), DEV(v), HOST(s);
    FENCED(adamw_update(CPU, p, g, m, v, n, s));
}
static void f_router_scores_forward(const Backend *be, float *scores, float *lse,
                                    const float *logits, int N, const MoeSpec *s) {
    DEV(scores), DEV(lse), DEV(logits), HOST(s);
    FENCED(router_scores_forward(CPU, scores, lse, logits, N, s));
}
static void f_router_gate_forward(const Backend *be, int *idx, float *w, const float *scores,
                                  const float *logits, const float *bias, int N, const MoeSpec *s) {
    DEV(idx), DEV(w), DEV(scores), DEV(logits), DEV(bias), HOST(s);
    FENCED(router_gate_forward(CPU, idx, w, scores, logits, bias, N, s));
}
static void f_router_gate_weights(const Backend *be, float *w, const int *idx, const float *scores,
                                  const float *logits, int N, const MoeSpec *s) {
    DEV(w), DEV(idx), DEV(scores), DEV(logits), HOST(s);
    FENCED(router_gate_weights(CPU, w, idx, scores, logits, N, s));
}
static void f_router_balance_loss(const Backend *be, float *out, const float *scores,
                                  const int *idx, int N, const MoeSpec *s, const MoeCtx *x) {
    DEV(out), DEV(scores), DEV(idx), HOST(s), CTX(x);
    FENCED(router_balance_loss(CPU, out, scores, idx, N, s, x));
}
static void f_router_z_loss(const Backend *be, float *out, const float *lse, int N) {
    DEV(out), DEV(lse);
    FENCED(router_z_loss(CPU, out, lse, N));
}
static void f_router_gate_backward(const Backend *be, float *dlogits, const float *dw,
                                   const float *scores, const float *lse, const float *logits,
                                   const int *idx, const float *w, int N, const MoeSpec *s,
                                   const MoeCtx *x, float bal_scale, float z_scale) {
    DEV(dlogits), DEV(dw), DEV(scores), DEV(lse), DEV(logits), DEV(idx), DEV(w);
    HOST(s), CTX(x);
    FENCED(router_gate_backward(CPU, dlogits, dw, scores, lse, logits, idx, w, N, s, x, bal_scale,
                                z_scale));
}
static void f_dispatch_plan_build(const Backend *be, DispatchPlan *p, const int *idx, int N) {
    PLAN(p), DEV(idx);
    FENCED(dispatch_plan_build(CPU, p, idx, N));
}
static void checked_capacity_plan_build(const Backend *be, DispatchPlan *p, const int *idx,
                                        const float *scores, const float *w, int N,
                                        const MoeSpec *s, const MoeCtx *x) {
    PLAN(p), DEV(idx), DEV(scores), DEV(w), HOST(s), CTX(x);
    FENCED(capacity_plan_build(CPU, p, idx, scores, w, N, s, x));
}
static void f_expert_choice_forward(const Backend *be, int *idx, float *w, DispatchPlan *p,
                                    const float *scores, int N, const MoeSpec *s, const MoeCtx *x) {
    DEV(idx), DEV(w), PLAN(p), DEV(scores), HOST(s), CTX(x);
    FENCED(expert_choice_forward(CPU, idx, w, p, scores, N, s, x));
}
static void f_permute_forward(const Backend *be, float *xe, const float *x, const DispatchPlan *p,
                              int C) {
    DEV(xe), DEV(x), PLAN(p);
    FENCED(permute_forward(CPU, xe, x, p, C));
}
static void f_permute_backward(const Backend *be, float *dx, const float *dxe,
                               const DispatchPlan *p, int C) {
    DEV(dx), DEV(dxe), PLAN(p);
    FENCED(permute_backward(CPU, dx, dxe, p, C));
}
static void f_combine_forward(const Backend *be, float *y, const float *ye, const float *w,
                              const DispatchPlan *p, int C) {
    DEV(y), DEV(ye), DEV(w), PLAN(p);
    FENCED(combine_forward(CPU, y, ye, w, p, C));
}
static void f_combine_backward(const Backend *be, float *dye, float *dw, const float *dy,
                               const float *ye, const float *w, const DispatchPlan *p, int C) {
    DEV(dye), DEV(dw), DEV(dy), DEV(ye), DEV(w), PLAN(p);
    FENCED(combine_backward(CPU, dye, dw, dy, ye, w, p, C));
}
static void checked_experts_forward(const Backend *be, float *ye, float *g, float *u, float *h,
                                    const float *xe, const float *Wg, const float *Wu,
                                    const float *Wd, const int *offsets, const int *counts, int E,
                                    int C, int F) {
    DEV(ye), DEV(g), DEV(u), DEV(h), DEV(xe), DEV(Wg), DEV(Wu), DEV(Wd);
    DEV(offsets), DEV(counts);
    FENCED(experts_forward(CPU, ye, g, u, h, xe, Wg, Wu, Wd, offsets, counts, E, C, F));
}
static void checked_experts_backward(const Backend *be, float *dxe, float *dWg, float *dWu,
                                     float *dWd, float *dg, float *du, float *dh, const float *dye,
                                     const float *xe, const float *g, const float *u,
                                     const float *h, const float *Wg, const float *Wu,
                                     const float *Wd, const int *offsets, const int *counts, int E,
                                     int C, int F) {
    DEV(dxe), DEV(dWg), DEV(dWu), DEV(dWd), DEV(dg), DEV(du), DEV(dh), DEV(dye);
    DEV(xe), DEV(g), DEV(u), DEV(h), DEV(Wg), DEV(Wu), DEV(Wd), DEV(offsets), DEV(counts);
    FENCED(experts_backward(CPU, dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd,
                            offsets, counts, E, C, F));
}
static void checked_route_stats(const Backend *be, RouteStats *out, const float *scores,
                                const float *logits, const float *lse, const int *idx,
                                const DispatchPlan *p, int N, const MoeSpec *s) {
    HOST(out), DEV(scores), DEV(logits), DEV(lse), DEV(idx), PLAN(p), HOST(s);
    if (out) HOST(out->load), HOST(out->routed), HOST(out->dropped);
    FENCED(route_stats(CPU, out, scores, logits, lse, idx, p, N, s));
}
static void f_route_stats_record(const Backend *be, void *rec, const float *scores,
                                 const float *logits, const float *lse, const int *idx,
                                 const DispatchPlan *p, int N, const MoeSpec *s) {
    DEV(rec), DEV(scores), DEV(logits), DEV(lse), DEV(idx), PLAN(p), HOST(s);
    FENCED(route_stats_record(CPU, rec, scores, logits, lse, idx, p, N, s));
}
/* the host's copy of a record: nothing of the backend's memory is touched */
static void f_route_stats_read(const Backend *be, RouteStats *out, const void *rec,
                               const MoeSpec *s) {
    HOST(out), HOST(rec), HOST(s);
    if (out) HOST(out->load), HOST(out->routed), HOST(out->dropped);
    (void)be, CPU->route_stats_read(CPU, out, rec, s);
}
static void checked_route_domains(const Backend *be, double *counts, double *drops,
                                  const unsigned char *domains, int n_domains, const int *idx,
                                  const DispatchPlan *p, int N, const MoeSpec *s) {
    HOST(counts), HOST(drops), HOST(domains), DEV(idx), PLAN(p), HOST(s);
    FENCED(route_domains(CPU, counts, drops, domains, n_domains, idx, p, N, s));
}
static void f_experts_similarity(const Backend *be, double *out, const float *Wg, const float *Wu,
                                 const float *Wd, int E, int C, int F) {
    DEV(out), DEV(Wg), DEV(Wu), DEV(Wd);
    FENCED(experts_similarity(CPU, out, Wg, Wu, Wd, E, C, F));
}
static void f_gemm_seconds(const Backend *be, int n, int reps, double *seconds) {
    HOST(seconds);
    (void)be, CPU->gemm_seconds(CPU, n, reps, seconds);
}

/* ---- host reads: the waits a GPU would make --------------------------------------------------
 * Each entry below is one whose CUDA version makes the host wait for the device: a copy down
 * (to_host), host arrays filled (the
 * statistics), or the slice sizes that the experts' grouped products take from the host (and
 * an unpadded capacity plan's row count). Each call adds one to backend_host_reads, then runs
 * the fenced entry, so that a training step's count on this backend is the number of times
 * the same step waits on a GPU: tests/test_backends.sh bounds it on every machine. */
long long backend_host_reads;

static void r_to_host(const Backend *be, void *dst, const void *src, size_t bytes) {
    backend_host_reads++, f_to_host(be, dst, src, bytes);
}
static void f_capacity_plan_build(const Backend *be, DispatchPlan *p, const int *idx,
                                  const float *scores, const float *w, int N, const MoeSpec *s,
                                  const MoeCtx *x) {
    backend_host_reads += !s->padded; /* a padded plan's size follows from the capacity */
    checked_capacity_plan_build(be, p, idx, scores, w, N, s, x);
}
static void f_experts_forward(const Backend *be, float *ye, float *g, float *u, float *h,
                              const float *xe, const float *Wg, const float *Wu, const float *Wd,
                              const int *offsets, const int *counts, int E, int C, int F) {
    backend_host_reads++;
    checked_experts_forward(be, ye, g, u, h, xe, Wg, Wu, Wd, offsets, counts, E, C, F);
}
static void f_experts_backward(const Backend *be, float *dxe, float *dWg, float *dWu, float *dWd,
                               float *dg, float *du, float *dh, const float *dye, const float *xe,
                               const float *g, const float *u, const float *h, const float *Wg,
                               const float *Wu, const float *Wd, const int *offsets,
                               const int *counts, int E, int C, int F) {
    backend_host_reads++;
    checked_experts_backward(be, dxe, dWg, dWu, dWd, dg, du, dh, dye, xe, g, u, h, Wg, Wu, Wd,
                             offsets, counts, E, C, F);
}
static void f_route_stats(const Backend *be, RouteStats *out, const float *scores,
                          const float *logits, const float *lse, const int *idx,
                          const DispatchPlan *p, int N, const MoeSpec *s) {
    backend_host_reads++, checked_route_stats(be, out, scores, logits, lse, idx, p, N, s);
}
static void f_route_domains(const Backend *be, double *counts, double *drops,
                            const unsigned char *domains, int n_domains, const int *idx,
                            const DispatchPlan *p, int N, const MoeSpec *s) {
    backend_host_reads++,
        checked_route_domains(be, counts, drops, domains, n_domains, idx, p, N, s);
}

const Backend backend_cpu_fenced = {
    .name = "cpu-fenced",
    .about = "the cpu backend's ops with a device's memory: the host may not read it directly",
    .host_memory = 0,
    .alloc = fenced_alloc,
    .free = fenced_free,
    .zero = f_zero,
    .copy = f_copy,
    .to_device = f_to_device,
    .to_host = r_to_host,
    .sync = fenced_sync,
#define BACKEND_OP(name, params) .name = f_##name,
#include "backend/backend_ops.h"
#undef BACKEND_OP
};
