/*
 * scratch.c: the scratch of one routing op (moe_work), from the block's buffer or allocated.
 *
 * A leaf: router.c, router_balance.c, capacity.c and expert_choice.c all take their scratch
 * here, and router.c sizes the block's buffer from what each of them needs (moe_work_bytes),
 * so none of those files calls another for its scratch.
 */
#include "moe/moe_ops.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void *moe_work(const MoeCtx *x, size_t bytes, void **owned) {
    *owned = NULL;
    if (x->work) {
        if (x->work_bytes < bytes)
            moe_fatal("MoE scratch of %zu bytes, %zu needed: size MoeCtx.work with "
                      "moe_work_bytes",
                      x->work_bytes, bytes);
        memset(x->work, 0, bytes);
        return x->work;
    }
    return *owned = calloc_check(bytes ? bytes : 1, 1);
}

void moe_work_done(void *owned) {
    free(owned);
}
