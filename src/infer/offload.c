/*
 * offload.c: experts kept off the chip, loaded on demand. See offload.h.
 *
 * The cache touches the experts one at a time, in expert order, within a call: load it if it
 * is missing, run its slice, then the next. So an expert the call still needs is never evicted
 * while in use, and a single slot is enough for any call (at the price of a miss per expert).
 */
#include "infer/offload.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/util.h"
#include "io/files.h"

static const uint8_t MAGIC[4] = {'M', 'O', 'E', 'X'};

/* ---- the expert file ------------------------------------------------------------------------ */

int expert_file_write(const Model *m, const char *path, char *err, int errlen) {
    const int E = m->cfg.num_experts, C = m->cfg.d_model, F = m->spec.d_expert;
    if (m->n_moe < 1) return set_error(err, errlen, "the model has no MoE layers to offload");
    if (m->dist && m->dist->ep > 1)
        return set_error(err, errlen,
                         "the model's experts are spread over %d processes; write the expert "
                         "file from a model held by one process",
                         m->dist->ep);
    uint8_t header[EXPERT_FILE_HEADER_BYTES] = {0};
    memcpy(header, MAGIC, 4);
    le_put_u32(header + 4, EXPERT_FILE_VERSION);
    le_put_u32(header + 8, (uint32_t)m->n_moe);
    le_put_u32(header + 12, (uint32_t)E);
    le_put_u32(header + 16, (uint32_t)C);
    le_put_u32(header + 20, (uint32_t)F);
    /* the header, then per MoE layer and expert its three matrices: 1 + 3 n_moe E buffers
     * pointing into the weights (or into host copies of a device's) */
    const size_t FC = (size_t)F * C, stacked = (size_t)E * FC;
    const int n = 1 + 3 * m->n_moe * E;
    const void **buf = (const void **)malloc_check((size_t)n * sizeof(void *));
    size_t *len = (size_t *)malloc_check((size_t)n * sizeof(size_t));
    float **copies = (float **)calloc_check((size_t)3 * m->n_moe, sizeof(float *));
    buf[0] = header, len[0] = sizeof header;
    int k = 1, i = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        if (!m->state.blocks[l].moe) continue;
        const float *w[3] = {m->w.layers[l].e_gate, m->w.layers[l].e_up, m->w.layers[l].e_down};
        for (int t = 0; t < 3; t++) {
            copies[3 * i + t] = model_host_copy(m, w[t], stacked);
            if (copies[3 * i + t]) w[t] = copies[3 * i + t];
        }
        for (int e = 0; e < E; e++)
            for (int t = 0; t < 3; t++) buf[k] = w[t] + e * FC, len[k++] = FC * sizeof(float);
        i++;
    }
    const int rc = write_atomic(path, buf, len, n, err, errlen);
    for (int c = 0; c < 3 * m->n_moe; c++) free(copies[c]);
    free(copies);
    free(buf);
    free(len);
    return rc;
}

int expert_file_write_temp(const Model *m, char *path, size_t len, char *err, int errlen) {
    const char *dir = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    snprintf(path, len, "%s/moe-experts-XXXXXX", dir);
    const int fd = mkstemp(path);
    if (fd < 0)
        return set_error(err, errlen,
                         "cannot make a temporary expert file in %s (set TMPDIR to a writable "
                         "folder)",
                         dir);
    close(fd);
    if (expert_file_write(m, path, err, errlen) == 0) return 0;
    unlink(path);
    return -1;
}

/* The header's field against the model's: a message naming it when they differ. */
static int check_field(const char *path, const char *name, uint32_t file, int model, char *err,
                       int errlen) {
    if (file == (uint32_t)model) return 0;
    return set_error(err, errlen,
                     "expert file '%s' holds %s %u, the model has %d: it was written from a "
                     "model of another shape; write it again from this one (expert_file_write)",
                     path, name, (unsigned)file, model);
}

int expert_file_open(ExpertFile *f, const Model *m, const char *path, char *err, int errlen) {
    memset(f, 0, sizeof(*f));
    static const FileSpec spec = {"expert file", "write it from the model with expert_file_write",
                                  NULL, 0};
    uint64_t size;
    FILE *in = open_regular(path, &spec, &size, err, errlen);
    if (!in) return -1;
    uint8_t h[EXPERT_FILE_HEADER_BYTES];
    if (size < sizeof h || fread(h, 1, sizeof h, in) != sizeof h) {
        fclose(in);
        return set_error(err, errlen,
                         "expert file '%s' is truncated: %llu bytes, shorter than its %d-byte "
                         "header",
                         path, (unsigned long long)size, EXPERT_FILE_HEADER_BYTES);
    }
    const int n_moe = m->n_moe, E = m->cfg.num_experts, C = m->cfg.d_model, F = m->spec.d_expert;
    int bad = 0;
    if (memcmp(h, MAGIC, 4) != 0)
        bad = set_error(err, errlen, "'%s' is not an expert file (its first bytes are not MOEX)",
                        path);
    else if (le_get_u32(h + 4) != EXPERT_FILE_VERSION)
        bad = set_error(err, errlen, "expert file '%s' has version %u; this build reads %d", path,
                        (unsigned)le_get_u32(h + 4), EXPERT_FILE_VERSION);
    else
        bad = check_field(path, "n_moe_layers", le_get_u32(h + 8), n_moe, err, errlen) ||
              check_field(path, "num_experts", le_get_u32(h + 12), E, err, errlen) ||
              check_field(path, "d_model", le_get_u32(h + 16), C, err, errlen) ||
              check_field(path, "d_expert", le_get_u32(h + 20), F, err, errlen);
    const size_t record_floats = (size_t)3 * F * C;
    const uint64_t want =
        EXPERT_FILE_HEADER_BYTES + (uint64_t)n_moe * E * record_floats * sizeof(float);
    if (!bad && size != want)
        bad = set_error(err, errlen,
                        "expert file '%s' has %llu bytes, its header's %d x %d experts of %zu "
                        "floats need %llu: %s",
                        path, (unsigned long long)size, n_moe, E, record_floats,
                        (unsigned long long)want,
                        size < want ? "truncated (an interrupted copy?)" : "trailing bytes");
    void *map = MAP_FAILED;
    if (!bad) {
        map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fileno(in), 0);
        if (map == MAP_FAILED)
            bad = set_error(err, errlen, "cannot map expert file '%s' (%llu bytes)", path,
                            (unsigned long long)size);
    }
    fclose(in); /* the mapping outlives the descriptor */
    if (bad) return -1;
    f->map = (const unsigned char *)map;
    f->bytes = (size_t)size;
    f->n_moe = n_moe, f->E = E, f->C = C, f->F = F;
    f->record_floats = record_floats;
    return 0;
}

void expert_file_close(ExpertFile *f) {
    if (f->map) munmap((void *)f->map, f->bytes);
    memset(f, 0, sizeof(*f));
}

const float *expert_file_record(const ExpertFile *f, int i, int e) {
    const size_t at = ((size_t)i * f->E + e) * f->record_floats * sizeof(float);
    return (const float *)(f->map + EXPERT_FILE_HEADER_BYTES + at);
}

/* ---- the cache ------------------------------------------------------------------------------ */

/* The slot holding key, loading it on a miss into the least recently used slot (an empty one
 * first: their use tick is -1). */
static int cache_fetch(ExpertCache *ec, int key) {
    ec->tick++;
    if (ec->recording) {
        if (ec->trace_len == ec->trace_cap) {
            ec->trace_cap = ec->trace_cap ? 2 * ec->trace_cap : 256;
            ec->trace = (int *)realloc_check(ec->trace, ec->trace_cap * sizeof(int));
        }
        ec->trace[ec->trace_len++] = key;
    }
    int s = ec->where[key];
    if (s >= 0) {
        ec->hits++;
        ec->slot_use[s] = ec->tick;
        return s;
    }
    ec->misses++;
    s = 0;
    for (int j = 1; j < ec->slots; j++)
        if (ec->slot_use[j] < ec->slot_use[s]) s = j;
    if (ec->slot_key[s] >= 0) ec->where[ec->slot_key[s]] = -1; /* evicted */
    const size_t n = ec->file.record_floats;
    const double t0 = now_seconds();
    memcpy(ec->slot_w + (size_t)s * n, expert_file_record(&ec->file, key / ec->E, key % ec->E),
           n * sizeof(float));
    ec->load_seconds += now_seconds() - t0;
    ec->bytes_loaded += n * sizeof(float);
    ec->slot_key[s] = key;
    ec->slot_use[s] = ec->tick;
    ec->where[key] = s;
    return s;
}

static void cache_forward(ExpertSource *src, int layer, const Backend *be, float *ye,
                          const float *xe, const int *offsets, const int *counts, int E, int C,
                          int F) {
    ExpertCache *ec = (ExpertCache *)src; /* src is the first member */
    if (!be->host_memory)
        moe_fatal("expert cache: backend %s keeps its memory off the host; the cache runs on "
                  "the CPU backends",
                  be->name);
    const int i = ec->moe_index[layer];
    if (i < 0 || E != ec->E || C != ec->C || F != ec->F)
        moe_fatal("expert cache: layer %d (E %d, C %d, F %d) is not one of its MoE layers", layer,
                  E, C, F);
    const size_t FC = (size_t)F * C;
    for (int e = 0; e < E; e++) {
        const int r0 = offsets[e], rows = offsets[e + 1] - offsets[e];
        if (rows <= 0) continue;
        if (rows > ec->rows_max) { /* a larger call than announced: more scratch */
            free(ec->g), free(ec->u), free(ec->h);
            ec->rows_max = rows;
            ec->g = floats_alloc((size_t)rows * F);
            ec->u = floats_alloc((size_t)rows * F);
            ec->h = floats_alloc((size_t)rows * F);
        }
        const float *w = ec->slot_w + (size_t)cache_fetch(ec, i * E + e) * ec->file.record_floats;
        /* one expert: a plan of one slice, the rows r0 .. r0 + rows of xe and ye */
        const int off[2] = {0, rows};
        be->experts_forward(be, ye + (size_t)r0 * C, ec->g, ec->u, ec->h, xe + (size_t)r0 * C, w,
                            w + FC, w + 2 * FC, off, counts ? counts + e : NULL, 1, C, F);
    }
}

int expert_cache_open(ExpertCache *ec, const Model *m, const char *path, int slots, int rows_max,
                      char *err, int errlen) {
    memset(ec, 0, sizeof(*ec));
    if (!m->be->host_memory)
        return set_error(err, errlen,
                         "expert offloading runs on the CPU backends (cpu, cpu-ref); backend %s "
                         "keeps its memory off the host",
                         m->be->name);
    if (m->n_moe < 1) return set_error(err, errlen, "the model has no MoE layers to offload");
    if (expert_file_open(&ec->file, m, path, err, errlen) != 0) return -1;
    ec->src.forward = cache_forward;
    ec->n_moe = m->n_moe, ec->E = m->cfg.num_experts;
    ec->C = m->cfg.d_model, ec->F = m->spec.d_expert;
    const int keys = ec->n_moe * ec->E;
    ec->slots = slots < 1 ? 1 : slots > keys ? keys : slots;
    ec->moe_index = (int *)malloc_check((size_t)m->cfg.n_layer * sizeof(int));
    for (int l = 0, i = 0; l < m->cfg.n_layer; l++)
        ec->moe_index[l] = m->state.blocks[l].moe ? i++ : -1;
    ec->slot_w = floats_alloc((size_t)ec->slots * ec->file.record_floats);
    ec->slot_key = (int *)malloc_check((size_t)ec->slots * sizeof(int));
    ec->slot_use = (long long *)malloc_check((size_t)ec->slots * sizeof(long long));
    for (int s = 0; s < ec->slots; s++) ec->slot_key[s] = -1, ec->slot_use[s] = -1;
    ec->where = (int *)malloc_check((size_t)keys * sizeof(int));
    for (int k = 0; k < keys; k++) ec->where[k] = -1;
    ec->rows_max = rows_max < 1 ? 1 : rows_max;
    ec->g = floats_alloc((size_t)ec->rows_max * ec->F);
    ec->u = floats_alloc((size_t)ec->rows_max * ec->F);
    ec->h = floats_alloc((size_t)ec->rows_max * ec->F);
    return 0;
}

void expert_cache_close(ExpertCache *ec) {
    expert_file_close(&ec->file);
    free(ec->moe_index);
    free(ec->slot_w);
    free(ec->slot_key);
    free(ec->slot_use);
    free(ec->where);
    free(ec->g), free(ec->u), free(ec->h);
    free(ec->trace);
    memset(ec, 0, sizeof(*ec));
}

void expert_cache_reset_stats(ExpertCache *ec) {
    ec->hits = ec->misses = 0;
    ec->load_seconds = 0.0;
    ec->bytes_loaded = 0;
    ec->trace_len = 0;
}

double expert_cache_hit_rate(const ExpertCache *ec) {
    const long long n = ec->hits + ec->misses;
    return n ? (double)ec->hits / (double)n : 0.0;
}

void expert_cache_record_trace(ExpertCache *ec, int on) {
    ec->recording = on != 0;
    if (on) ec->trace_len = 0;
}

/* ---- the locality study --------------------------------------------------------------------- */

double lru_hit_rate(const int *trace, size_t n, int n_keys, int slots) {
    if (n == 0) return 0.0;
    if (slots < 1) slots = 1;
    /* recent[0 .. held): the resident keys, most recently used first. A key found there is a
     * hit and moves to the front; a missing one enters at the front, pushing the last out when
     * the list is full. */
    int *recent = (int *)malloc_check((size_t)slots * sizeof(int));
    int held = 0;
    size_t hits = 0;
    for (size_t t = 0; t < n; t++) {
        const int key = trace[t];
        if (key < 0 || key >= n_keys)
            moe_fatal("lru_hit_rate: trace[%zu] = %d is outside [0, %d)", t, key, n_keys);
        int p = 0;
        while (p < held && recent[p] != key) p++;
        if (p < held)
            hits++;
        else if (held < slots)
            held++; /* p == the new last place */
        else
            p = held - 1; /* the least recently used goes */
        memmove(recent + 1, recent, (size_t)p * sizeof(int));
        recent[0] = key;
    }
    free(recent);
    return (double)hits / (double)n;
}
