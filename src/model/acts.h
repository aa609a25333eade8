/*
 * acts.h: ONE table of a model's activation and backward-scratch buffers, and the arena they
 * live in.
 *
 * Each entry is one buffer: a name ("blocks.2.ln1", "blocks.1.moe.xe", "scratch.dresid",
 * "blocks.1.moe.ep.xr"), an element type and count worked out from the Config and B, T (and the
 * MoE block's MoeSpec), a kind (a category of MemoryBreakdown, memory.h) and the address of the
 * pointer it fills. From that one list come
 *   - the allocation: acts_alloc lays the entries out one after the other, each at a multiple
 *     of ACTS_ALIGN bytes, takes the whole arena from the backend in one be->alloc and points
 *     every field at its entry (freeing is one be->free of the arena);
 *   - the analytical memory: model_memory_floats (memory.c) sums the same entries by kind, so
 *     a buffer added to the table is counted without a second list to keep in step.
 *
 * A table built without structs to fill (the field addresses NULL) only counts: that is how
 * the memory formula runs with no model. Parameters, gradients and AdamW moments are not in
 * it (the parameter table, params.h, lays out those four buffers), nor the host-side arrays of
 * the MoE block (routing statistics, the noise staging, the expert exchange's metadata), nor
 * the ops' workspace (Model.state.work_bytes).
 */
#ifndef MOE_MODEL_ACTS_H
#define MOE_MODEL_ACTS_H

#include <stddef.h>

#include "backend/backend.h"
#include "base/util.h"
#include "config/config.h"

/* element types: a 4-byte float or int, or raw bytes (the routing ops' scratch) */
enum { ACT_FLOAT, ACT_INT, ACT_BYTES };

/* kinds, one per category of MemoryBreakdown (memory.h); every ACT_INT entry is ACT_INT_WORDS */
enum { ACT_RESID, ACT_ATTN, ACT_FFN, ACT_HEAD, ACT_SCRATCH, ACT_INT_WORDS, ACT_KINDS };

/* every entry starts at a multiple of this many bytes of the arena (a cache line, and more than
 * any SIMD load needs); the padding it costs is MemoryBreakdown.pad_bytes */
#define ACTS_ALIGN 64
#define ACT_NAME_MAX 40

typedef struct {
    char name[ACT_NAME_MAX];
    int type, kind;
    size_t count;  /* elements of the type */
    size_t offset; /* bytes from the start of the arena (acts_layout), a multiple of ACTS_ALIGN */
    void *field;   /* the address of the pointer to fill (a float **, int ** or void **), or
                      NULL in a table that only counts */
} ActEntry;

typedef struct {
    ActEntry *e;
    int n, cap;
    size_t bytes; /* the arena: the end of the last entry, rounded up to ACTS_ALIGN */
} ActTable;

/* The address of field f of the struct p points to, or NULL when p is NULL (a counting pass):
 * what acts_add takes as field. */
#define ACT_FIELD(p, f) ((p) ? (void *)&(p)->f : NULL)

void acts_table_init(ActTable *t);
void acts_table_free(ActTable *t);
/* Append one buffer of count elements; the name is printf-formatted. */
void acts_add(ActTable *t, int type, int kind, size_t count, void *field, const char *fmt, ...)
    MOE_PRINTF(6, 7);
/* Bytes of one entry, without padding. */
size_t acts_entry_bytes(const ActEntry *e);
/* Give every entry its offset; returns the arena's bytes (t->bytes). */
size_t acts_layout(ActTable *t);
/* Lay the table out, allocate its arena from be in one call (zeroed, as be->alloc is) and write
 * into every entry's field the address of its buffer; returns the arena, for be->free. A table
 * with no entries allocates nothing and returns NULL. */
void *acts_alloc(const Backend *be, ActTable *t);

/* The table of a model for B x T tokens of config c, its MoE blocks' experts spread over ep
 * processes (1: one process, no expert exchange). m NULL: a table that only counts; else the
 * entries fill m's fields, whose host structs (the resid and blocks arrays, each MoE block's
 * MoeActs and EpActs) model_init has allocated first. Defined in model_acts.c, above the MoE
 * block (moe_block.c) whose entries it adds. */
struct Model;
void model_acts_table(ActTable *t, const Config *c, int B, int T, int ep, struct Model *m);
/* The table of a pipeline stage holding the blocks [first, last) (dist.pp, pipe.h: the first
 * with the embedding, the last with the head); model_acts_table is the stage of m's layers, or
 * of all of them when m is NULL. */
void model_acts_table_stage(ActTable *t, const Config *c, int B, int T, int ep, int first, int last,
                            struct Model *m);

#endif
