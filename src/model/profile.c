/* profile.c: see profile.h. */
#include "model/profile.h"

#include <string.h>

#include "backend/backend.h"
#include "base/util.h"

int prof_enabled = 0;
const Backend *prof_backend = NULL;
int prof_backward = 0;
Profile prof_total;

static const char *const NAMES[PROF_COUNT] = {
    [PROF_EMBED] = "embedding",     [PROF_NORM] = "rmsnorm",        [PROF_ATTN_PROJ] = "attn_proj",
    [PROF_ROPE] = "rope",           [PROF_ATTN] = "attention",      [PROF_RESIDUAL] = "residual",
    [PROF_DENSE_FFN] = "dense_ffn", [PROF_SWIGLU] = "swiglu",       [PROF_ROUTER] = "router",
    [PROF_PERMUTE] = "permute",     [PROF_EXPERTS] = "experts",     [PROF_HEAD] = "head",
    [PROF_LOSS] = "loss",           [PROF_OPTIMIZER] = "optimizer",
};

const char *prof_name(ProfOp op) {
    return op >= 0 && op < PROF_COUNT ? NAMES[op] : "?";
}

void prof_reset(void) {
    memset(&prof_total, 0, sizeof prof_total);
}

double prof_clock(void) {
    if (prof_backend && !prof_backend->host_memory) prof_backend->sync(prof_backend);
    return now_seconds();
}

void prof_add(ProfOp op, double seconds) {
    if (prof_backward)
        prof_total.bwd[op] += seconds;
    else
        prof_total.fwd[op] += seconds;
}
