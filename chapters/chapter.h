/*
 * chapter.h: what the chapter programs share (each program is one file that includes this).
 * Like every chapter program it reads the engine through src/moe.h alone.
 */
#ifndef MOE_CHAPTER_H
#define MOE_CHAPTER_H

#include <errno.h>
#include <stdlib.h>

#include "moe.h"

/* A whole number in [lo, hi] from a command-line argument; anything else calls the program's
 * usage, which says how to call it and exits 2. */
static inline long long chapter_int(const char *s, long long lo, long long hi,
                                    void (*usage)(void)) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) usage();
    return v;
}

/* The settings of the model a program looks at: the checkpoint's when ckpt exists (returns 1,
 * a trained model), else the defaults (returns 0: the program runs on a fresh model and says
 * so). A checkpoint named on the command line (given) must exist. */
static inline int chapter_config(Config *c, const char *ckpt, int given) {
    char err[1024];
    if (!file_exists(ckpt)) {
        if (given) moe_input_error("no checkpoint at %s", ckpt);
        config_defaults(c);
        return 0;
    }
    if (checkpoint_config(ckpt, c, err, sizeof err) != 0) moe_input_error("%s", err);
    return 1;
}

#endif
