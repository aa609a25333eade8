/*
 * serve.h: where a served model's experts come from, as the commands ask for it
 * (moe eval, moe sample and moe bench --decode: --quant FORMAT, --offload SLOTS).
 *
 *   resident   the model's own fp32 tensors (nothing attached)
 *   quantized  int8 or int4 copies of every expert (quant.h)
 *   offloaded  every expert in a file, `slots` of them resident in a cache (offload.h); the
 *              file is a temporary one, removed as soon as it is mapped (the mapping keeps it
 *              readable until the cache closes), so nothing is left behind
 *
 * Both run on the CPU backends only (their memory is the host's); one or the other, not both.
 */
#ifndef MOE_INFER_SERVE_H
#define MOE_INFER_SERVE_H

#include "infer/offload.h"
#include "infer/quant.h"

typedef struct {
    int format; /* QUANT_*: QUANT_FP32 with slots 0 is the resident model */
    int slots;  /* > 0: offloaded through a cache of this many experts */
    QuantExperts quant;
    ExpertCache cache;
} ServedExperts;

/* Serve m's experts as format and slots say, and plug the source into m (m->expert_source).
 * 0, or -1 and a message: both asked for, a backend whose memory is not the host's, a model
 * without MoE blocks, an expert file that cannot be written. */
int served_experts_attach(ServedExperts *s, Model *m, int format, int slots, char *err, int errlen);
/* Unplug and free (m->expert_source back to NULL). Nothing to do for a resident model. */
void served_experts_detach(ServedExperts *s, Model *m);
/* The bytes every expert of m takes as served: quantized, fp32; offloaded: the resident
 * slots. */
double served_experts_bytes(const ServedExperts *s, const Model *m);

#endif
