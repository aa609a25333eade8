/*
 * keys.h: the row of the table of settings (keys.c), shared by config.c, which reads it, and
 * by `moe plan` (cli/plan.c, plan/plan_keys.c), which reads a model's keys through the same
 * rows. Nothing else includes it.
 */
#ifndef MOE_CONFIG_KEYS_H
#define MOE_CONFIG_KEYS_H

#include <stddef.h>

typedef enum { T_INT, T_FLOAT, T_U64, T_BOOL, T_STR, T_ENUM } KeyType;

enum {
    K_SHAPE = 1,    /* fixes parameter shapes: checkpoints need equal values */
    K_OPEN_MIN = 2, /* the lower bound is exclusive (value must be > min) */
    K_OPEN_MAX = 4, /* the upper bound is exclusive (value must be < max) */
    K_PATH = 8      /* T_STR: a file's path (the others hold a text such as a mix) */
};

typedef struct {
    const char *name; /* "section.field" */
    KeyType type;
    size_t off;      /* offsetof(Config, field) */
    const char *def; /* default, as config_set would read it */
    double min, max; /* range, inclusive unless K_OPEN_*; unused for u64 and strings */
    int flags;
    const char *help;
    const char *choices; /* T_ENUM: the names "a|b|c"; the int field holds the index */
} Key;

/* The table: CONFIG_NKEYS rows, in the order config.txt and `moe info --keys` list them. */
extern const Key CONFIG_KEYS[];
extern const int CONFIG_NKEYS;

#endif
