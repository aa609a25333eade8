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
 *             the block on one row per sequence;
 *   extend    several new tokens of one sequence in one such forward, a row each at its own
 *             position: every row's key and value enter the cache before any row attends, and
 *             row i attends to the cache and rows 0 .. i (causal), so row i's logits are those
 *             a step would give after tokens 0 .. i. A speculative decoder checks a draft's
 *             guesses this way, and drops (decoder_drop) the rows after the first wrong one.
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
    int *host_idx; /* (3 B T) host scratch: positions and rows before they move */
    int *rows;     /* (B T) backend: the cache rows of a prefill's tokens */
    int room;      /* the rows a step's buffers hold: B, or more after decoder_extend */
    int *pos, *step_rows; /* (room) backend: kv.pos, kv.rows */
    float *logits;        /* (room, V) host: each sequence's next-token logits, after its last
                             prefill or step; after decoder_extend, the logits after each of its
                             tokens */
    size_t cache_bytes;   /* the cache's bytes: 2 L B T Hkv D floats, or latent attention's
                             L B T (kv_rank + rope_dim) (and the draft module's) */
    /* a draft (decoder_draft_open): multi-token prediction's first module, its block's keys and
     * values in the cache's layer L, for positions 0 .. draft_len - 1; draft_logits (V) host,
     * its last draft's logits; last_pos: the position of row 0 of the model's last forward */
    int draft, draft_len, last_pos;
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

/* Sequence s takes n more tokens (n >= 1, d->len[s] + n <= T) in one forward of n rows: d->logits
 * (n, V) row i the logits after tokens[i], those n decoder_steps of s alone would give. The
 * other sequences' caches are untouched. */
void decoder_extend(Decoder *d, int s, const int *tokens, int n);

/* Sequence s's last n tokens leave its cache (and the draft module's): its length goes back n
 * (n <= d->len[s]), as if they had never been taken; the next step writes over their entries.
 * A speculative decoder's rejected guesses. */
void decoder_drop(Decoder *d, int s, int n);

/* A draft (moe sample --draft mtp): the model's first multi-token prediction module guesses
 * the token after next from the main trunk's output at the last position and the next token,
 * as a speculative decoder's draft does. One sequence (B 1).
 *
 * decoder_draft_open  adds the module block's cache (layer L) to d; 0, or -1 and a message (no
 *                     module, more than one sequence, fewer than 3 positions). Prefills fill
 *                     it from then on, each position with the prompt's token after it.
 * decoder_draft       the next token, tokens[n - 1], is chosen but not yet taken: the module at
 *                     the last n positions of the cache (the module's own cache ends where
 *                     they start, and the model's last forward computed them), each with the
 *                     token after it (tokens (n)), adds their entries to its cache in one step
 *                     and leaves in d->draft_logits its guess of the token after tokens[n - 1].
 *                     After a prefill, a step or a rejected guess n is 1 (the chosen token);
 *                     after an accepted guess g (decoder_extend of the token before it and g,
 *                     nothing dropped) 2: g, then the chosen token. */
int decoder_draft_open(Decoder *d, char *err, int errlen);
void decoder_draft(Decoder *d, const int *tokens, int n);

#endif
