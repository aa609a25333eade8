/*
 * latent_lab.h: lab 06, multi-head latent attention (assignment: README.md).
 *
 *   task 1: the latent keys and values   lat = x Wkv_a^T, latn = rmsnorm(lat) * g,
 *                                        kvb = latn Wkv_b^T split into each head's key part
 *                                        and value, k = [k_nope | krope] a head
 *   task 2: the absorbed query           q_lat = q_nope Wuk_h (Wuk_h: head h's key rows of
 *                                        Wkv_b), the query taken into the latent space
 *   task 3: the absorbed scores          (q_lat . latn_t + q_rope . krope_t) / sqrt(nope + rope)
 *                                        against each cached row [latn_t | krope_t]
 *   task 4: the cache's size             floats a token and layer for MHA, GQA and MLA, and the
 *                                        bytes of a whole cache
 *
 * Conventions (the engine's, src/nn/ops.h): float32, row-major, so element (n, c) of an (N, C)
 * array is at [n * C + c]. Outputs come first, then inputs, then weights, then dimensions.
 * Dimension letters: N tokens, C channels, H heads, KR the latent's rank (kv_rank), NOPE a
 * head's key channels without rotation (nope_dim), R the rotated key's (rope_dim), DV a head's
 * value channels (v_dim), D = NOPE + R a head's query and key. A linear layer's weight W is
 * (OUT, IN) and y = x W^T.
 */
#ifndef LATENT_LAB_H
#define LATENT_LAB_H

#include "lab.h" /* lab_todo(), the marker of an unfinished task */

/* The eps of RMSNorm, the engine's value (RMSNORM_EPS in src/nn/ops.h): r = 1 / sqrt(ms + eps) */
#define LAB_RMSNORM_EPS 1e-5f

/* The shape of one latent-attention layer (the engine's model.d_model, model.n_head and mla.*). */
typedef struct {
    int C;        /* the model's channels: x is (N, C) */
    int H;        /* query heads */
    int kv_rank;  /* KR: the latent's channels, shared by the heads (mla.kv_rank) */
    int nope_dim; /* NOPE: a head's key channels without rotation (mla.nope_dim) */
    int rope_dim; /* R: the rotated key's channels, one key shared by the heads (mla.rope_dim) */
    int v_dim;    /* DV: a head's value channels (mla.v_dim) */
} LabMlaDims;

/* Task 1. The keys and values of N tokens from one latent of KR channels:
 *   lat  (N, KR)          = x Wkv_a^T                Wkv_a (KR, C)
 *   latn (N, KR)          = rmsnorm(lat) * g         g (KR): the latent norm's gain; WRITTEN
 *   kvb  (N, H (NOPE+DV)) = latn Wkv_b^T             Wkv_b (H (NOPE + DV), KR): a head's rows
 *                                                    are its NOPE key rows, then its DV value rows
 *   k (N, H, D):  head h's [kvb's NOPE key channels of head h | krope[n]]      WRITTEN
 *   v (N, H, DV): head h's DV value channels of kvb                            WRITTEN
 * krope (N, R) is the shared rotated key, given (the engine's RoPE(x Wk_rope^T)). */
void lab_latent_kv_forward(float *latn, float *k, float *v, const float *x, const float *krope,
                           const float *Wkv_a, const float *g, const float *Wkv_b,
                           const LabMlaDims *d, int N);

/* Task 2. Head h's query taken into the latent space: with Wuk_h (NOPE, KR) the NOPE key rows
 * of head h in Wkv_b (rows h (NOPE + DV) .. h (NOPE + DV) + NOPE - 1),
 *   q_lat[r] = sum_i q_nope[i] Wuk_h[i, r]             q_lat (KR) WRITTEN; q_nope (NOPE)
 * so that q_lat . latn = q_nope . k_nope for every token's latent. */
void lab_absorb_query(float *q_lat, const float *q_nope, const float *Wkv_b, int h,
                      const LabMlaDims *d);

/* Task 3. One head's attention scores against Tc cached rows, without the keys: row t of cache
 * (Tc, KR + R) is [latn_t (KR) | krope_t (R)], as the engine's decoder caches a token,
 *   scores[t] = (q_lat . latn_t + q_rope . krope_t) / sqrt(NOPE + R)     scores (Tc) WRITTEN
 * q_lat (KR) from task 2, q_rope (R) the head's rotated query channels. */
void lab_absorbed_scores(float *scores, const float *q_lat, const float *q_rope, const float *cache,
                         int Tc, const LabMlaDims *d);

/* Task 4. The kinds of attention whose caches task 4 counts. */
enum { LAB_ATTN_MHA = 0, LAB_ATTN_GQA = 1, LAB_ATTN_MLA = 2 };

/* The shape of a layer's attention, as far as its cache is concerned. Each kind reads only its
 * own fields: MHA n_head and head_dim; GQA kv_heads and head_dim; MLA kv_rank and rope_dim. */
typedef struct {
    int attention; /* LAB_ATTN_MHA, LAB_ATTN_GQA or LAB_ATTN_MLA */
    int n_head;    /* query heads (MHA: each has its own key and value head) */
    int kv_heads;  /* GQA: key-value heads, each shared by n_head / kv_heads query heads */
    int head_dim;  /* MHA, GQA: a head's key channels, and its value's */
    int kv_rank;   /* MLA: the latent's channels */
    int rope_dim;  /* MLA: the shared rotated key's channels */
} LabCacheShape;

/* Task 4. The numbers a decoder caches for one token in one layer (its keys and values, or
 * MLA's latent and rotated key). */
long long lab_cache_floats(const LabCacheShape *s);

/* Task 4 too. The bytes of a whole cache: n_layer layers, `tokens` tokens (every sequence's
 * together), elem_bytes bytes a number (2 for bf16). Sizes of many GB: count in 64 bits. */
long long lab_cache_bytes(const LabCacheShape *s, int n_layer, long long tokens, int elem_bytes);

#endif
