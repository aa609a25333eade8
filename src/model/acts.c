/*
 * acts.c: the table of a model's activation and scratch buffers, and its arena. See acts.h.
 *
 * The table itself (entries, layout, one arena): a leaf, which the MoE block (moe_block.c),
 * the expert exchange (ep.c) and the model's own list (model_acts.c) fill.
 */
#include "model/acts.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void acts_table_init(ActTable *t) {
    memset(t, 0, sizeof(*t));
}

void acts_table_free(ActTable *t) {
    free(t->e);
    memset(t, 0, sizeof(*t));
}

void acts_add(ActTable *t, int type, int kind, size_t count, void *field, const char *fmt, ...) {
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        ActEntry *e = (ActEntry *)malloc_check((size_t)cap * sizeof(ActEntry));
        if (t->n) memcpy(e, t->e, (size_t)t->n * sizeof(ActEntry));
        free(t->e);
        t->e = e;
        t->cap = cap;
    }
    ActEntry *e = &t->e[t->n++];
    memset(e, 0, sizeof(*e));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    e->type = type;
    e->kind = kind;
    e->count = count;
    e->field = field;
}

size_t acts_entry_bytes(const ActEntry *e) {
    return e->type == ACT_BYTES ? e->count : 4 * e->count; /* float and int: 4 bytes */
}

static size_t align_up(size_t n) {
    return (n + ACTS_ALIGN - 1) / ACTS_ALIGN * ACTS_ALIGN;
}

size_t acts_layout(ActTable *t) {
    size_t at = 0;
    for (int i = 0; i < t->n; i++) {
        t->e[i].offset = at;
        at = align_up(at + acts_entry_bytes(&t->e[i]));
    }
    t->bytes = at;
    return at;
}

void *acts_alloc(const Backend *be, ActTable *t) {
    acts_layout(t);
    if (t->n == 0) return NULL;
    char *arena = (char *)be->alloc(be, t->bytes);
    for (int i = 0; i < t->n; i++) {
        /* the field is a float *, int * or void *: all hold an address alike, so its bytes
         * are written as those of a void * */
        void *p = arena + t->e[i].offset;
        if (t->e[i].field) memcpy(t->e[i].field, &p, sizeof p);
    }
    return arena;
}
