/*
 * hash.c: the tokenizer's hash tables (hash.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tok/hash.h"

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ? h : 1; /* 0 marks an empty slot */
}

/* the slot of key: where it is, or the empty slot where it would go */
static size_t str_slot(const StrMap *m, uint64_t h, const char *key, size_t len) {
    size_t i = (size_t)h & (m->cap - 1);
    while (m->hash[i] &&
           !(m->hash[i] == h && m->klen[i] == len && memcmp(m->key[i], key, len) == 0))
        i = (i + 1) & (m->cap - 1);
    return i;
}

int *strmap_find(const StrMap *m, const char *key, size_t len) {
    if (!m->cap) return NULL;
    const size_t i = str_slot(m, fnv1a(key, len), key, len);
    return m->hash[i] ? &m->val[i] : NULL;
}

static void str_grow(StrMap *m) {
    StrMap g = {m->cap ? 2 * m->cap : 64, m->n, NULL, NULL, NULL, NULL};
    g.hash = (uint64_t *)calloc_check(g.cap, sizeof *g.hash);
    g.key = (char **)malloc_check(g.cap * sizeof *g.key);
    g.klen = (uint32_t *)malloc_check(g.cap * sizeof *g.klen);
    g.val = (int *)malloc_check(g.cap * sizeof *g.val);
    for (size_t i = 0; i < m->cap; i++)
        if (m->hash[i]) {
            const size_t j = str_slot(&g, m->hash[i], m->key[i], m->klen[i]);
            g.hash[j] = m->hash[i], g.key[j] = m->key[i], g.klen[j] = m->klen[i];
            g.val[j] = m->val[i];
        }
    free(m->hash), free(m->key), free(m->klen), free(m->val);
    *m = g;
}

int *strmap_put(StrMap *m, const char *key, size_t len, int v, int *fresh) {
    if (2 * (m->n + 1) > m->cap) str_grow(m);
    const uint64_t h = fnv1a(key, len);
    const size_t i = str_slot(m, h, key, len);
    *fresh = !m->hash[i];
    if (*fresh) {
        m->hash[i] = h;
        m->key[i] = (char *)malloc_check(len + 1);
        memcpy(m->key[i], key, len);
        m->key[i][len] = '\0';
        m->klen[i] = (uint32_t)len;
        m->val[i] = v;
        m->n++;
    }
    return &m->val[i];
}

void strmap_clear(StrMap *m) {
    for (size_t i = 0; i < m->cap; i++)
        if (m->hash[i]) free(m->key[i]);
    if (m->cap) memset(m->hash, 0, m->cap * sizeof *m->hash);
    m->n = 0;
}

void strmap_free(StrMap *m) {
    strmap_clear(m);
    free(m->hash), free(m->key), free(m->klen), free(m->val);
    memset(m, 0, sizeof *m);
}

static size_t pair_slot(const PairMap *m, uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 20) & (m->cap - 1);
    while (m->key[i] && m->key[i] != key) i = (i + 1) & (m->cap - 1);
    return i;
}

int *pairmap_find(const PairMap *m, uint32_t left, uint32_t right) {
    if (!m->cap) return NULL;
    const size_t i = pair_slot(m, ((uint64_t)left << 32 | right) + 1);
    return m->key[i] ? &m->val[i] : NULL;
}

int *pairmap_put(PairMap *m, uint32_t left, uint32_t right, int v, int *fresh) {
    if (2 * (m->n + 1) > m->cap) {
        PairMap g = {m->cap ? 2 * m->cap : 64, m->n, NULL, NULL};
        g.key = (uint64_t *)calloc_check(g.cap, sizeof *g.key);
        g.val = (int *)malloc_check(g.cap * sizeof *g.val);
        for (size_t i = 0; i < m->cap; i++)
            if (m->key[i]) {
                const size_t j = pair_slot(&g, m->key[i]);
                g.key[j] = m->key[i], g.val[j] = m->val[i];
            }
        free(m->key), free(m->val);
        *m = g;
    }
    const uint64_t key = ((uint64_t)left << 32 | right) + 1;
    const size_t i = pair_slot(m, key);
    *fresh = !m->key[i];
    if (*fresh) m->key[i] = key, m->val[i] = v, m->n++;
    return &m->val[i];
}

void pairmap_free(PairMap *m) {
    free(m->key), free(m->val);
    memset(m, 0, sizeof *m);
}
