/*
 * hash.h: the two hash tables the tokenizer needs: byte strings to ints (a vocabulary, the
 * encoder's cache of words, the trainer's word counts) and pairs of ids to ints (merge ranks,
 * the trainer's pair counts). Open addressing with linear probing, FNV-1a hashes, the table
 * doubled at half full; entries are never removed one by one (strmap_clear empties a table).
 */
#ifndef MOE_TOK_HASH_H
#define MOE_TOK_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t cap, n;  /* slots (a power of two, or 0 before the first insert), entries */
    uint64_t *hash; /* (cap) each slot's hash, 0 for an empty slot */
    char **key;     /* (cap) a copy of each key, NUL-terminated (the keys may hold NULs) */
    uint32_t *klen; /* (cap) key lengths */
    int *val;       /* (cap) */
} StrMap;

/* The value of key (len bytes), or NULL when absent. */
int *strmap_find(const StrMap *m, const char *key, size_t len);
/* The value of key, inserted with value v when absent (*fresh 1 then, else 0). The pointer
 * holds until the next insert. */
int *strmap_put(StrMap *m, const char *key, size_t len, int v, int *fresh);
void strmap_clear(StrMap *m);
void strmap_free(StrMap *m);

typedef struct {
    size_t cap, n; /* as StrMap */
    uint64_t *key; /* (cap) (left << 32 | right) + 1, 0 for an empty slot */
    int *val;      /* (cap) */
} PairMap;

int *pairmap_find(const PairMap *m, uint32_t left, uint32_t right);
int *pairmap_put(PairMap *m, uint32_t left, uint32_t right, int v, int *fresh);
void pairmap_free(PairMap *m);

#endif
