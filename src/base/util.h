/*
 * util.h: checked calls, errors with hints, a small deterministic RNG, timing.
 *
 * Two kinds of failure, two exit codes:
 *   - bad input from the user (config, data, checkpoint, command line): moe_input_error()
 *     prints what is wrong and what to do and exits with status 2;
 *   - an internal or system failure (out of memory, a failing write): moe_fatal() prints the
 *     place and exits with status 1.
 * Library code that tests want to exercise without exiting returns -1 with its message in the
 * caller's err buffer instead (set_error below); these helpers are for the places where
 * stopping is the only sensible answer.
 */
#ifndef MOE_UTIL_H
#define MOE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MOE_EXIT_INPUT 2    /* bad user input: config, data, checkpoint, command line */
#define MOE_EXIT_FATAL 1    /* internal or system failure */
#define MOE_EXIT_DIVERGED 3 /* training: the loss diverged (train.diverge_loss) */

#if defined(__GNUC__)
#define MOE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define MOE_NORETURN __attribute__((noreturn))
#else
#define MOE_PRINTF(a, b)
#define MOE_NORETURN
#endif

MOE_NORETURN void moe_input_error(const char *fmt, ...) MOE_PRINTF(1, 2);
MOE_NORETURN void moe_fatal_at(const char *file, int line, const char *fmt, ...) MOE_PRINTF(3, 4);
#define moe_fatal(...) moe_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

/* Write a message into err (errlen bytes, may be NULL) and return -1: the error convention of
 * library functions that report bad input to their caller instead of exiting. */
int set_error(char *err, int errlen, const char *fmt, ...) MOE_PRINTF(3, 4);

void *malloc_check_at(size_t size, const char *file, int line);
void *calloc_check_at(size_t n, size_t size, const char *file, int line);
void *realloc_check_at(void *p, size_t size, const char *file, int line);
FILE *fopen_check_at(const char *path, const char *mode, const char *file, int line);
#define malloc_check(size) malloc_check_at((size), __FILE__, __LINE__)
#define calloc_check(n, size) calloc_check_at((n), (size), __FILE__, __LINE__)
#define realloc_check(p, size) realloc_check_at((p), (size), __FILE__, __LINE__)
#define fopen_check(path, mode) fopen_check_at((path), (mode), __FILE__, __LINE__)

/* 64-byte aligned, zeroed float buffer (for sgemm operands); free with free().
 * floats_allocated counts every float handed out (never decremented): tests compare it with
 * the analytical memory of a model. */
float *floats_alloc(size_t n);
extern size_t floats_allocated;

/* ---- random numbers -----------------------------------------------------------------------
 * splitmix64 seeding + xoshiro256** generator. The whole state is four words, so it can be
 * saved in a checkpoint and restored exactly. */
typedef struct {
    uint64_t s[4];
} Rng;

void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_u64(Rng *r);
float rng_uniform(Rng *r);              /* [0, 1) */
float rng_normal(Rng *r);               /* standard normal, Box-Muller */
uint64_t rng_below(Rng *r, uint64_t n); /* uniform integer in [0, n), n > 0 */

/* ---- misc ---------------------------------------------------------------------------------- */
double now_seconds(void); /* monotonic clock */
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);
int levenshtein(const char *a, const char *b);
/* s[0..len) made safe to print in a message: printable ASCII as it is, every other byte (a
 * control character, a byte of a binary file) as \xNN, so a damaged file cannot drive the
 * terminal; cut to fit out_len with "..." at the end. Returns out. */
char *escape_text(char *out, size_t out_len, const char *s, size_t len);

/* The kernel's high-water mark of this process's resident memory, MiB (Linux: VmHWM of
 * /proc/self/status); -1 where the system does not say. resident_peak_reset sets it back to
 * what is resident now (5 into /proc/self/clear_refs), so that the peak of one stretch of work
 * can be read: 0, or -1 where the system cannot. Linux resets getrusage's ru_maxrss with it. */
double resident_peak_mib(void);
int resident_peak_reset(void);

#endif
