/* util.c: see util.h. */
#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void moe_input_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(MOE_EXIT_INPUT);
}

void moe_fatal_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fatal (%s:%d): ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(MOE_EXIT_FATAL);
}

int set_error(char *err, int errlen, const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, (size_t)errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void *malloc_check_at(size_t size, const char *file, int line) {
    void *p = malloc(size ? size : 1);
    if (!p)
        moe_fatal_at(file, line, "out of memory allocating %zu bytes; use a smaller model or batch",
                     size);
    return p;
}

void *calloc_check_at(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        moe_fatal_at(file, line,
                     "out of memory allocating %zu x %zu bytes; use a smaller model or batch", n,
                     size);
    return p;
}

void *realloc_check_at(void *p, size_t size, const char *file, int line) {
    void *q = realloc(p, size ? size : 1);
    if (!q)
        moe_fatal_at(file, line, "out of memory growing a buffer to %zu bytes", size);
    return q;
}

FILE *fopen_check_at(const char *path, const char *mode, const char *file, int line) {
    FILE *f = fopen(path, mode);
    if (!f) moe_fatal_at(file, line, "cannot open '%s' (mode %s): %s", path, mode, strerror(errno));
    return f;
}

size_t floats_allocated = 0;

float *floats_alloc(size_t n) {
    floats_allocated += n;
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        moe_fatal("out of memory allocating %zu floats; use a smaller model or batch", n);
    memset(p, 0, bytes);
    return (float *)p;
}

/* ---- random numbers ---------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void rng_seed(Rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t rng_u64(Rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float rng_uniform(Rng *r) {
    return (float)(rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

float rng_normal(Rng *r) {
    /* Box-Muller; u1 in (0, 1] so the log is finite. */
    float u1 = 1.0f - rng_uniform(r);
    float u2 = rng_uniform(r);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
}

uint64_t rng_below(Rng *r, uint64_t n) {
    return rng_u64(r) % n;
}

/* ---- misc -------------------------------------------------------------------------------- */

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), table built on first use. */
uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
    static uint32_t table[256];
    static int ready = 0;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const unsigned char *p = (const unsigned char *)data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

int levenshtein(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    int *row = (int *)malloc_check((lb + 1) * sizeof(int));
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int cost = a[i - 1] == b[j - 1] ? 0 : 1;
            int best = diag + cost;
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    int d = row[lb];
    free(row);
    return d;
}

char *escape_text(char *out, size_t out_len, const char *s, size_t len) {
    if (out_len == 0) return out;
    size_t o = 0, i = 0;
    for (; i < len && o + 8 < out_len; i++) { /* room for one \xNN, "..." and the NUL */
        const unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, out_len - o, "\\x%02x", c);
    }
    out[o] = '\0';
    if (i < len && o + 4 <= out_len) memcpy(out + o, "...", 4);
    return out;
}

double resident_peak_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1.0;
    char line[256];
    double kib = -1.0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kib = atof(line + 6);
    fclose(f);
    return kib < 0.0 ? -1.0 : kib / 1024.0;
}

int resident_peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    const int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}
