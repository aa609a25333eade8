/*
 * upcycle_lab.h: lab 04, sparse upcycling of one layer (assignment: README.md).
 *
 *   dense SwiGLU w_gate, w_up (F, C), w_down (C, F)
 *     --task 1: copy--> E experts e_gate, e_up (E, F, C), e_down (E, C, F)
 *   task 2: mean and std of a weight matrix (the statistics drop-upcycling draws from)
 *   task 3: choose n_drop distinct hidden units of an expert (partial Fisher-Yates)
 *   task 4: re-draw the chosen units of one expert: mean + std * z
 *     --task 5: fine-grained split--> E experts of F / G units, slice e % G, down times G
 *
 * Conventions (the same as the engine, src/model/params.h): float32, row-major, so element (f, c)
 * of an (F, C) matrix is at [f * C + c] and element (c, f) of a (C, F) one at [c * F + f]. Outputs
 * come first, then inputs, then dimensions. Dimension letters: C channels, F hidden units of
 * the dense FFN, E experts, G slices (task 5). Outputs are written (=) in full unless the
 * function says it changes an array in place.
 */
#ifndef UPCYCLE_LAB_H
#define UPCYCLE_LAB_H

#include <stdint.h>

#include "lab.h" /* lab_todo(), the marker of an unfinished task */

/* ---- the random numbers of task 3 (given: do not change) ----------------------------------
 * splitmix64 seeding + xoshiro256**, the same generator as the engine's Rng (src/base/util.h), so
 * one seed gives the same stream here and there. lab_rng_below(r, n) is uniform in [0, n) up
 * to a bias of n / 2^64 (the remainder of one 64-bit draw), and consumes exactly one draw. */
typedef struct {
    uint64_t s[4];
} LabRng;

static inline uint64_t lab_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void lab_rng_seed(LabRng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = lab_splitmix64(&seed);
}

static inline uint64_t lab_rng_u64(LabRng *r) {
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

static inline int lab_rng_below(LabRng *r, int n) {
    return (int)(lab_rng_u64(r) % (uint64_t)n);
}

/* ---- the tasks ------------------------------------------------------------------------------ */

/* Task 1. Copy-upcycling: every expert is the dense FFN, exactly.
 *   e_gate, e_up (E, F, C): expert e's (F, C) matrix from e * F * C, = w_gate, w_up (F, C)
 *   e_down (E, C, F): expert e's (C, F) matrix from e * C * F, = w_down (C, F)  */
void lab_copy_experts(float *e_gate, float *e_up, float *e_down, const float *w_gate,
                      const float *w_up, const float *w_down, int E, int F, int C);

/* Task 2. Population mean and standard deviation of w (n), n >= 1, summed in double:
 *   mean = (1/n) sum_i w_i,   std = sqrt((1/n) sum_i (w_i - mean)^2)
 * Never NaN: n equal values give std 0 (up to rounding). */
void lab_stats(float *mean, float *std, const float *w, int n);

/* Task 3. Choose n_drop distinct hidden units out of F (0 <= n_drop <= F), uniformly, by a
 * partial Fisher-Yates shuffle of perm = 0, 1, ..., F - 1:
 *   for i = 0 .. n_drop - 1:  j = i + lab_rng_below(rng, F - i);  swap perm[i], perm[j];
 *                             units[i] = perm[i]
 * units (n_drop) written, in the order drawn. Exactly n_drop draws from rng, none otherwise. */
void lab_choose_units(int *units, int n_drop, int F, LabRng *rng);

/* Task 4. Drop-upcycling of one expert, in place: re-draw the chosen units.
 *   gate, up (F, C), down (C, F): the expert, changed in place
 *   units (n_drop): distinct hidden units; stats[6] = mean, std of the dense w_gate, w_up,
 *   w_down (stats[0], [1] gate; [2], [3] up; [4], [5] down); z (n_drop, 3, C) standard normals.
 * For the i-th unit u = units[i] and every c:
 *   gate[u, c] = stats[0] + stats[1] * z[(3 i + 0) C + c]      (row u of gate)
 *   up[u, c]   = stats[2] + stats[3] * z[(3 i + 1) C + c]      (row u of up)
 *   down[c, u] = stats[4] + stats[5] * z[(3 i + 2) C + c]      (column u of down)
 * Every other element is left exactly as it was. */
void lab_drop_units(float *gate, float *up, float *down, const int *units, int n_drop, int F, int C,
                    const float stats[6], const float *z);

/* Task 5. Fine-grained upcycling: cut the F dense units into G slices of Fe = F / G (G divides
 * F and E); expert e takes slice s = e % G, units s * Fe .. s * Fe + Fe - 1:
 *   e_gate, e_up (E, Fe, C): e_gate[e, j, c] = w_gate[s Fe + j, c] (the same for up)
 *   e_down (E, C, Fe):       e_down[e, c, j] = G * w_down[c, s Fe + j]
 * The factor G gives back the dense output when a token's gate weights are spread evenly. */
void lab_split_experts(float *e_gate, float *e_up, float *e_down, const float *w_gate,
                       const float *w_up, const float *w_down, int E, int G, int F, int C);

#endif
