/*
 * decode.h: incremental decoding with a key-value cache.
 *
 * A full forward over a sequence of t tokens computes every position's keys and values again
 * at every new token: sampling n tokens costs O(n^2) positions. The keys and values of the
 * positions already seen never change (attention is causal and each MoE token is routed on
 * its own), so a decoder keeps them, per layer and sequence, in a cache:
 *
 *   prefill   the prompt in one ordinary forward (model_forward); its keys and values (after
 *             RoPE) are copied into the cache, and the last position's logits give the first
 *             new token;
 *   step      one new token per sequence (model_forward_cached): its query, key and value
 *             alone, its key and value appended, attention over the cache, then the rest of
 *             the block on one row per sequence.
 *
 * Several sequences decode together, each at its own length (batched decoding): a step is one
 * product of B rows instead of B products of one, and the MoE blocks see B tokens, which touch
 * more experts than one does (chapter 9).
 *
 * A decoder routes dropless: it sets the model's evaluation capacity to 0 (every token kept,
 * as a server keeps them), so that the cached path computes what model_forward computes at
 * every position. Expert-choice routing is refused: an expert picks among the tokens of a
 * whole batch, so a token's output depends on tokens after it, which a cache cannot know.
 */
#ifndef MOE_INFER_DECODE_H
#define MOE_INFER_DECODE_H

#include "model/model.h"

typedef struct {
    Model *m;
    int B, T;      /* sequences, and positions each sequence's cache holds: the model's B, T */
    KvStep kv;     /* the cache and the step's positions, as model_forward_cached reads them */
    int *len;      /* (B) host: the positions cached for each sequence */
    int *host_idx; /* (3 B T) host scratch: positions, rows and lengths before they move */
    int *rows;     /* (B T) backend: the cache rows of a prefill's tokens */
    int *pos, *step_rows, *lens; /* (B) backend: kv.pos, kv.rows, kv.lens */
    float *logits;      /* (B, V) host: each sequence's next-token logits, after its last prefill or
                           step */
    size_t cache_bytes; /* the cache's bytes: 2 L B T Hkv D floats, or latent attention's
                           L B T (kv_rank + rope_dim) (and the draft module's) */
    /* a draft (decoder_draft_open): multi-token prediction's first module, its block's keys and
     * values in the cache's layer L; draft_logits (V) host, its last draft's logits */
    int draft;
    float *draft_logits;
} Decoder;

/* A decoder for m (initialised for B sequences of T tokens: model_init(m, c, B, T)), which it
 * borrows. 0, or -1 and a message (expert-choice routing; a model spread over processes). */
int decoder_init(Decoder *d, Model *m, char *err, int errlen);
void decoder_free(Decoder *d);

/* Sequences first .. first + n - 1 start again from their prompts: tokens (n, Tp), row i
 * holding lens[i] tokens (1 <= lens[i] <= Tp <= T; the rest padding, never read). Their caches
 * hold the prompts afterwards, and d->logits their next-token logits. */
void decoder_prefill(Decoder *d, int first, int n, const int *tokens, int Tp, const int *lens);

/* Every sequence takes one more token, tokens[b] (B of them): appended to its cache (which must
 * have room: d->len[b] < T), and d->logits the logits after it. */
void decoder_step(Decoder *d, const int *tokens);

/* A draft (moe sample --draft mtp): the model's first multi-token prediction module guesses
 * the token after next from the main trunk's output at the last position and the next token,
 * as a speculative decoder's draft does. One sequence (B 1).
 *
 * decoder_draft_open  adds the module block's cache (layer L) to d; 0, or -1 and a message (no
 *                     module, more than one sequence, fewer than 3 positions). Prefills fill
 *                     it from then on, each position with the prompt's token after it.
 * decoder_draft       the next token, token, is chosen but not yet taken (decoder_step): the
 *                     module at the last position the model computed, with token, adds its
 *                     entry to its cache and leaves in d->draft_logits its guess of the token
 *                     after token. Call it after each prefill and step, before the next step. */
int decoder_draft_open(Decoder *d, char *err, int errlen);
void decoder_draft(Decoder *d, int token);

#endif
