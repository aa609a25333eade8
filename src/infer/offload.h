/*
 * offload.h: experts kept off the chip, loaded on demand (expert offloading).
 *
 * An MoE model must hold every expert, yet a decoding step touches only a few of them: with
 * top-k routing each token reads k experts of each MoE layer. A server short of accelerator
 * memory therefore keeps all experts in a larger, slower memory (host memory behind a GPU, or
 * an SSD behind host memory) and only a bounded cache of them where the products run:
 *
 *   the expert file   every MoE layer's experts, one record per (MoE layer, expert), written
 *                     once from a model (expert_file_write) and memory-mapped read-only: it
 *                     stands in for the slow memory;
 *   the cache         `slots` experts resident (fp32, ready for the backend's products), a
 *                     table from (layer, expert) to its slot, and a use counter per slot. An
 *                     expert the router picks that is not resident is a miss: the least
 *                     recently used slot is given to it and its record copied in from the
 *                     mapping (that copy is the "transfer" an offloading server pays on the
 *                     bus); one already resident is a hit, and costs nothing.
 *
 * The cache is an ExpertSource (model/moe_block.h): plugged into a model (m->expert_source =
 * &ec.src), the MoE blocks run their experts through it, and the logits are those of the
 * resident model (bit for bit on cpu-ref). Its hit rate is what decides whether offloading is
 * affordable: each miss moves 3 F C floats. Whether a cache helps depends on routing locality
 * (does a token reuse the experts its predecessor used?), which lru_hit_rate measures on a
 * recorded routing trace without running the model.
 *
 * The file format (all integers little-endian, the weights fp32 in the host's byte order):
 *
 *   header, EXPERT_FILE_HEADER_BYTES = 64 bytes:
 *     0  u32 magic      'M' 'O' 'E' 'X' (the bytes, in this order)
 *     4  u32 version    EXPERT_FILE_VERSION
 *     8  u32 n_moe      MoE layers (the model's MoE blocks, in layer order)
 *    12  u32 E          experts per MoE layer (model.num_experts)
 *    16  u32 C          d_model
 *    20  u32 F          d_expert (each expert's hidden size)
 *    24  zeros to byte 64 (records start 64-byte aligned)
 *   records, n_moe x E of them, record (i, e) at 64 + (i E + e) R, R = 3 F C 4 bytes:
 *     Wg (F, C), Wu (F, C), Wd (C, F) of expert e of the i-th MoE layer, contiguous.
 */
#ifndef MOE_INFER_OFFLOAD_H
#define MOE_INFER_OFFLOAD_H

#include <stddef.h>

#include "model/model.h"

#define EXPERT_FILE_HEADER_BYTES 64
#define EXPERT_FILE_VERSION 1

/* ---- the expert file ------------------------------------------------------------------------ */

/* Write every MoE layer's experts of m to path (the format above), atomically (write_atomic:
 * the old file or the whole new one, never a part). Any backend (a device's weights are copied
 * down first). 0, or -1 and a message (a model without MoE layers, one whose experts are spread
 * over processes, a failing write). */
int expert_file_write(const Model *m, const char *path, char *err, int errlen);

/* The same into a new temporary file, $TMPDIR/moe-experts-XXXXXX (/tmp without TMPDIR), its
 * name in path (len bytes): the caller removes it (an open mapping keeps it readable). 0, or
 * -1 and a message. */
int expert_file_write_temp(const Model *m, char *path, size_t len, char *err, int errlen);

/* An expert file, memory-mapped read-only. */
typedef struct {
    const unsigned char *map; /* the whole file; NULL when closed */
    size_t bytes;             /* its size */
    int n_moe, E, C, F;       /* from its header */
    size_t record_floats;     /* 3 F C: one expert's Wg, Wu, Wd */
} ExpertFile;

/* Open path and check its header against m: the magic, the version, then n_moe, E, C and F each
 * against the model's (a message naming the field that differs, with both values), and the
 * size against the one the header implies (a truncated or overlong file is refused). 0, or -1
 * and a message. */
int expert_file_open(ExpertFile *f, const Model *m, const char *path, char *err, int errlen);
void expert_file_close(ExpertFile *f);
/* Expert e of the i-th MoE layer (i: the MoE layers counted from 0): its Wg (F, C), followed by
 * its Wu (F, C) and Wd (C, F), inside the mapping. */
const float *expert_file_record(const ExpertFile *f, int i, int e);

/* ---- the cache ------------------------------------------------------------------------------ */

typedef struct {
    ExpertSource src; /* first member: &ec.src is the model's expert_source */
    ExpertFile file;
    int n_moe, E, C, F;
    int *moe_index;      /* (n_layer) model block -> its MoE layer index, or -1 (dense) */
    int slots;           /* resident experts */
    float *slot_w;       /* (slots, 3 F C) each slot's Wg, Wu, Wd: the resident copies */
    int *slot_key;       /* (slots) the key held (i E + e), or -1: empty */
    long long *slot_use; /* (slots) the tick of its last use: the smallest is evicted */
    int *where;          /* (n_moe E) key -> its slot, or -1: not resident */
    long long tick;      /* counts every touch */
    float *g, *u, *h;    /* (rows_max, F) one expert's scratch; grown when a call needs more */
    int rows_max;
    /* statistics since open or expert_cache_reset_stats: a hit or a miss per (call, layer,
     * expert) with rows; the seconds spent copying records in and their bytes */
    long long hits, misses;
    double load_seconds;
    size_t bytes_loaded;
    /* the keys touched in order, recorded while recording is 1 (the cache owns trace) */
    int recording;
    int *trace;
    size_t trace_len, trace_cap;
} ExpertCache;

/* A cache of `slots` experts (clamped to [1, n_moe E]; all of them: every expert hits after its
 * first use) over the expert file at path, which must match m (expert_file_open). rows_max: the
 * rows one expert is expected to receive in one call (at most the tokens of a forward, B T; the
 * scratch grows past it when needed). The cache starts empty. Refused on a backend whose
 * memory is not the host's (offloading here is a CPU-side mechanism). 0, or -1 and a message. */
int expert_cache_open(ExpertCache *ec, const Model *m, const char *path, int slots, int rows_max,
                      char *err, int errlen);
void expert_cache_close(ExpertCache *ec);
/* hits, misses, load_seconds, bytes_loaded and the trace back to zero; the slots keep their
 * experts (a warm cache stays warm). */
void expert_cache_reset_stats(ExpertCache *ec);
/* hits / (hits + misses), or 0 before any touch. */
double expert_cache_hit_rate(const ExpertCache *ec);
/* Start (on 1: the trace emptied) or stop (0) recording the keys touched into ec->trace. */
void expert_cache_record_trace(ExpertCache *ec, int on);

/* ---- the locality study --------------------------------------------------------------------- */

/* An LRU cache of `slots` entries replayed over a routing trace: trace (n) of keys in
 * [0, n_keys), layer E + expert (layer: the MoE layer index), in the order a decoder touches
 * them. Returns hits / n (0 when n is 0). Independent of ExpertCache (a move-to-front list), so
 * a script can run it on a recorded trace, true order against shuffled. */
double lru_hit_rate(const int *trace, size_t n, int n_keys, int slots);

#endif
