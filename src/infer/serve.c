/*
 * serve.c: a served model's experts, resident, quantized or offloaded. See serve.h.
 */
#include "infer/serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

int served_experts_attach(ServedExperts *s, Model *m, int format, int slots, char *err,
                          int errlen) {
    memset(s, 0, sizeof *s);
    s->format = format;
    s->slots = slots;
    if (format == QUANT_FP32 && slots == 0) return 0;
    if (format != QUANT_FP32 && slots > 0)
        return set_error(err, errlen,
                         "--quant and --offload: the expert file holds fp32 "
                         "experts; serve them quantized or offloaded, not both");
    if (m->n_moe == 0)
        return set_error(err, errlen, "%s: this model has no MoE block, so no experts to %s",
                         slots ? "--offload" : "--quant", slots ? "offload" : "quantize");
    if (!m->be->host_memory)
        return set_error(err, errlen,
                         "%s runs on the CPU backends (train.device=%s keeps its weights in a "
                         "device's memory); serve with train.device=cpu",
                         slots ? "--offload" : "--quant", m->be->name);
    const int rows_max = m->state.B * m->state.T;
    if (slots == 0) {
        quant_experts_init(&s->quant, m, format, rows_max);
        m->expert_source = &s->quant.src;
        return 0;
    }
    char path[MOE_PATH_MAX];
    int rc = expert_file_write_temp(m, path, sizeof path, err, errlen);
    if (rc == 0) rc = expert_cache_open(&s->cache, m, path, slots, rows_max, err, errlen);
    unlink(path); /* the mapping keeps it readable */
    if (rc != 0) return -1;
    m->expert_source = &s->cache.src;
    return 0;
}

void served_experts_detach(ServedExperts *s, Model *m) {
    m->expert_source = NULL;
    if (s->slots > 0)
        expert_cache_close(&s->cache);
    else if (s->format != QUANT_FP32)
        quant_experts_free(&s->quant);
    memset(s, 0, sizeof *s);
}

double served_experts_bytes(const ServedExperts *s, const Model *m) {
    const double expert = 3.0 * m->cfg.d_model * m->spec.d_expert * sizeof(float);
    if (s->slots > 0) return s->cache.slots * expert;
    if (s->format != QUANT_FP32) return (double)s->quant.bytes;
    return expert * m->n_moe * m->cfg.num_experts;
}
