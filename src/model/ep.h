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
    EpStats stats;
    void *arena; /* the backend buffers above, one allocation (ep_acts_alloc); NULL when the
                    block's or the model's arena holds them */
} EpActs;

/* Buffers for a block whose sender has at most S_max slots (moe_slots_max for its tokens):
 * ep_acts_host_alloc, then the table of ep_acts_entries in an arena of its own. ep_acts_free
 * frees the host arrays, and the arena when there is one. */
void ep_acts_alloc(const Backend *be, EpActs *a, const MoeSpec *s, int P, int S_max);
void ep_acts_free(const Backend *be, EpActs *a);
/* The host side (zeroed first): P, El, C, F, R_max and the metadata ints (meta_send,
 * meta_recv, the counts and displacements, eoff, cursor, perm_host); and the host staging of
 * a backend whose memory is not the host's. */
void ep_acts_host_alloc(const Backend *be, EpActs *a, const MoeSpec *s, int P, int S_max);
/* The backend buffers as entries of t named "<prefix>.<field>" (a NULL: only counted): the
 * received rows and the experts' activations are activations (ACT_FFN), their gradients
 * scratch, perm an integer buffer. */
void ep_acts_entries(ActTable *t, const char *prefix, const MoeSpec *s, int P, int S_max,
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

#endif
