/*
 * ep.h: the experts of an MoE block spread over the processes of an expert-parallel group.
 *
 * Each of the P = dist.ep members holds El = E / P experts: member p the global experts
 * [p El, (p+1) El). After routing, a process's dispatch plan (permute.c) already lists its
 * assignments expert by expert, so the rows for member p are one contiguous run of its slot
 * buffer. One MoE block's expert computation is then:
 *
 *   sender   counts first: for each member p and each of p's experts, how many rows
 *            (dist_alltoall_i), so every receiver can size and place what comes;
 *            then the rows themselves, xe (S, C) -> member p (dist_alltoallv_f)
 *   receiver the rows from each source, source by source; reordered expert by expert
 *            (each expert's rows: from source 0, then 1, ...), the El experts' SwiGLUs
 *            (experts.c), reordered back and returned the way they came
 *   sender   ye (S, C) in its own plan order: combine_forward as in one process
 *
 * The backward pass is the same trip with gradients: dye out, the experts' backward (their
 * weight gradients stay on the member that holds them), dxe back.
 *
 * Bytes per block and direction: every routed row (S rows, padding rows of a padded plan
 * included) of C floats leaves for its expert's member unless that member is the process
 * itself, plus 2 El ints of counts per peer; the cost model in the handbook (chapter 3) and
 * tests/mpi check this. A row goes per (token, expert), not per (token, member): a token whose
 * experts share a member (as group-limited routing, moe.n_group, arranges) sends it one row
 * for each of them, so grouping bounds the members a token reaches but not the bytes.
 *
 * dist.dispatch=tokens (ep_tokens_forward, ep_tokens_backward) sends a token once to each
 * member that holds any of its experts, as DeepSeek-V3's dispatch does:
 *
 *   sender   the member plan: the tokens sorted by member, each once per member it needs;
 *            its rows (a gather of x) go out with, for each, its assignments at that member
 *            (local expert, weight), Km = min(assignments a token, El) pairs of floats
 *   receiver the rows expanded to one per assignment (the receiver plan, a dispatch plan
 *            over its El experts), the experts, and the combine done here: each received
 *            row returns as the weighted sum of its experts' outputs
 *   sender   y[t] = the sum of what its members returned, member by member
 *
 * The backward pass sends dy once per (token, member); the member returns the summed input
 * gradient and the gate weights' gradients (Km floats a row), which the router's backward
 * needs. Bytes per block and direction: U rows of C floats, U the (token, member) pairs that
 * leave the process, plus 2 Km floats a row out and Km back, plus one int of counts per peer.
 * A token whose K experts sit on one member costs one row instead of K.
 */
#ifndef MOE_DIST_EP_H
#define MOE_DIST_EP_H

#include "backend/backend.h"
#include "model/acts.h"
#include "moe/moe_ops.h"
#include "parallel/dist.h"

/* The traffic and time of one block's expert exchange, summed over the forward and backward
 * passes of the last step (ep_stats_reset between steps). */
typedef struct {
    double bytes_sent, bytes_recv; /* payload bytes, counts included */
    double comm_seconds;           /* inside the exchanges */
    double expert_seconds;         /* the experts' own compute on the rows received */
    double rows_in;                /* rows this member's experts processed (its load) */
    double rows_out_remote;        /* rows this process sent to the other members */
    double rows_in_remote;         /* rows the other members sent to this one */
} EpStats;

typedef struct EpActs {
    int P, El, C, F;
    int R_max;            /* rows a member can receive: P x the slots one sender has */
    int *meta_send;       /* (P, 2 El) rows and kept rows per expert, sent to each member */
    int *meta_recv;       /* (P, 2 El) the same, received from each member */
    int *scount, *sdispl; /* (P) floats sent to / their start in the sender's buffer */
    int *rcount, *rdispl; /* (P) floats received from / their start in the receive buffer */
    int R;                /* rows received in the last forward */
    int *eoff;            /* (El + 1) expert-order offsets of the received rows */
    int *eoff_dev;        /* (El + 1) the same in the backend's memory, for its experts */
    int *cursor;          /* (El) scratch: the next free expert-order row of each expert */
    int *perm;            /* (R_max) received row i sits at expert-order row perm[i] */
    int *perm_host;       /* (R_max) the same, as worked out on the host */
    float *xr, *xo;       /* (R_max, C) received rows; the same in expert order */
    float *g, *u, *h;     /* (R_max, F) the experts' activations, expert order */
    float *yo;            /* (R_max, C) expert outputs (expert order); reused as dx rows */
    float *yr;            /* (R_max, C) outputs in received order, sent back */
    float *dg, *du, *dh;  /* (R_max, F) backward scratch */
    /* Host staging, for a backend whose memory the host cannot read (a GPU's): the rows go
     * down into send_h, across between the hosts, and up from recv_h; plan_h holds the plan's
     * offsets (E + 1) and counts (E) on the host. NULL on the CPU backends, which exchange
     * their own buffers. */
    float *send_h, *recv_h;
    int *plan_h;
    /* dist.dispatch=tokens (NULL or 0 otherwise): A assignments a token (moe.top_k, or E for
     * expert choice), Km = min(A, El) the most a token has at one member. mp: the member plan
     * (P "experts", P assignments a token, slot -1 where the token has no expert there);
     * rp: the receiver plan of the last forward's U received rows over the El experts (Km
     * assignments a row); both in the backend's memory, built on the host in mp_host,
     * rp_host. wr, dwr (U_max, Km): the received rows' gate weights and their gradients. */
    int tokens, A, Km, U_max, U;
    DispatchPlan mp, rp, mp_host, rp_host;
    float *wr, *dwr;
    int *ucount_s, *ucount_r; /* (P) rows sent to / received from each member */
    int *mcount_s, *mdispl_s, *mcount_r, *mdispl_r; /* (P) their pairs, as floats */
    const int *route_idx, *route_slot; /* (N, A) the forward's idx and plan slots, on the host */
    int *route_h;                      /* (2 N_max A) their host copy (backend memory not the host's) */
    float *w_h;                        /* (N_max A) host: w down, then dw up */
    float *meta_s, *meta_r;            /* (rows, 2 Km) the pairs sent and received */
    float *wr_h, *dw_s;                /* (U_max Km) host: wr built; dwr received back */
    EpStats stats;
    void *arena; /* the backend buffers above, one allocation (ep_acts_alloc); NULL when the
                    block's or the model's arena holds them */
} EpActs;

/* Buffers for a block of at most N_max tokens a call (its sender has at most S_max =
 * moe_slots_max(s, N_max) slots): ep_acts_host_alloc, then the table of ep_acts_entries in an
 * arena of its own. ep_acts_free frees the host arrays, and the arena when there is one. */
void ep_acts_alloc(const Backend *be, EpActs *a, const MoeSpec *s, int P, int N_max);
void ep_acts_free(const Backend *be, EpActs *a);
/* The host side (zeroed first): P, El, C, F, R_max and the metadata ints (meta_send,
 * meta_recv, the counts and displacements, eoff, cursor, perm_host); and the host staging of
 * a backend whose memory is not the host's. */
void ep_acts_host_alloc(const Backend *be, EpActs *a, const MoeSpec *s, int P, int N_max);
/* The backend buffers as entries of t named "<prefix>.<field>" (a NULL: only counted): the
 * received rows and the experts' activations are activations (ACT_FFN), their gradients
 * scratch, perm an integer buffer. */
void ep_acts_entries(ActTable *t, const char *prefix, const MoeSpec *s, int P, int N_max,
                     EpActs *a);
void ep_stats_reset(EpActs *a);

/* ye (S, C) written: the outputs of the experts for this process's slot rows xe (S, C), plan
 * from dispatch_plan_build or capacity_plan_build over all E experts. Wg, Wu (El, F, C), Wd
 * (El, C, F): the experts this member holds. Every member of the EP group must call it. */
void ep_experts_forward(const Backend *be, float *ye, EpActs *a, const float *xe,
                        const DispatchPlan *plan, const float *Wg, const float *Wu, const float *Wd,
                        Dist *d);

/* dxe (S, C) written (the gradient for the sender's slot rows, or not computed when NULL on
 * every member); dWg, dWu, dWd (this member's experts) accumulated; dye (S, C) the gradient
 * of ye. Uses the rows kept by the last ep_experts_forward. */
void ep_experts_backward(const Backend *be, float *dxe, float *dWg, float *dWu, float *dWd,
                         const float *dye, EpActs *a, const DispatchPlan *plan, const float *Wg,
                         const float *Wu, const float *Wd, Dist *d);

/* dist.dispatch=tokens. y (N, C) written: the block's expert output for x (N, C), routed by
 * idx, w (N, A) and plan (its slot -1: a dropped assignment); xs, zs (S_max, C) the sender's
 * scratch (the block's xe and ye). Every member of the EP group must call it. */
void ep_tokens_forward(const Backend *be, float *y, float *xs, float *zs, EpActs *a,
                       const float *x, const int *idx, const float *w, const DispatchPlan *plan,
                       const float *Wg, const float *Wu, const float *Wd, Dist *d);

/* dist.dispatch=tokens, backward of the last ep_tokens_forward: dx (N, C) written (or, NULL
 * on every member, not computed), dw (N, A) written (the gradient of w; 0 where dropped),
 * this member's dW* accumulated; dys, dxs (S_max, C) scratch; dy (N, C). */
void ep_tokens_backward(const Backend *be, float *dx, float *dw, float *dys, float *dxs,
                        float *dWg, float *dWu, float *dWd, const float *dy, EpActs *a,
                        const float *Wg, const float *Wu, const float *Wd, Dist *d);

#endif
