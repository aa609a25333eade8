/*
 * profile.h: where the time of a training step goes, op by op.
 *
 * The model and the MoE block wrap every op call in PROF(op, call): when profiling is on, the
 * wall time of the call is added to that op's forward or backward total (on a GPU, the time
 * from the queue's end before the call to its end after it: prof_backend). Calls happen on
 * the main thread, between parallel regions, so one global table is enough. When profiling is
 * off, PROF costs one branch.
 */
#ifndef MOE_PROFILE_H
#define MOE_PROFILE_H

typedef enum {
    PROF_EMBED,     /* token embedding lookup and its scatter-add */
    PROF_NORM,      /* rmsnorm */
    PROF_ATTN_PROJ, /* q, k, v, o projections (GEMM) */
    PROF_ROPE,      /* rotary embedding */
    PROF_ATTN,      /* attention core: scores, softmax, weighted sum */
    PROF_RESIDUAL,  /* residual adds */
    PROF_DENSE_FFN, /* dense SwiGLU GEMMs */
    PROF_SWIGLU,    /* the silu(g) * u elementwise op of dense blocks */
    PROF_ROUTER,    /* router GEMM, softmax, top-k, aux and z losses */
    PROF_PERMUTE,   /* dispatch plan, gather, weighted combine */
    PROF_EXPERTS,   /* expert GEMMs and their SwiGLU */
    PROF_HEAD,      /* output head GEMM */
    PROF_LOSS,      /* cross-entropy */
    PROF_OPTIMIZER, /* zero grad, grad norm, clipping, AdamW */
    PROF_COUNT
} ProfOp;

typedef struct {
    double fwd[PROF_COUNT], bwd[PROF_COUNT]; /* seconds */
} Profile;

extern int prof_enabled;  /* 0: PROF only runs the call */
/* The backend whose work is timed: when it queues its work (a GPU's stream), PROF waits for it
 * before reading each clock, so that an op's time is its own. NULL, or a CPU backend: no wait. */
struct Backend;
extern const struct Backend *prof_backend;
extern int prof_backward; /* 1 while the model is in its backward pass */
extern Profile prof_total;

const char *prof_name(ProfOp op);
void prof_reset(void);
double prof_clock(void); /* waits for prof_backend's queued work first */
void prof_add(ProfOp op, double seconds);

#define PROF(op, call)                                                                             \
    do {                                                                                           \
        if (prof_enabled) {                                                                        \
            double prof_t0_ = prof_clock();                                                        \
            call;                                                                                  \
            prof_add((op), prof_clock() - prof_t0_);                                               \
        } else {                                                                                   \
            call;                                                                                  \
        }                                                                                          \
    } while (0)

#endif
