/*
 * pretok.h: the pre-tokenizer: text cut into the pieces BPE merges within, by the split
 * pattern of a model family, each pattern hand-written as a small matcher (no regular
 * expression engine) that finds what the pattern's regular expression would find, leftmost
 * and with its alternatives tried in order.
 *
 *   gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   qwen2   llama3's, with \p{N} for \p{N}{1,3}: digits one at a time
 *
 * (GPT-2's is the one the ByteLevel pre-tokenizer uses with use_regex true; Llama 3's and
 * Qwen2's are a Split's in their tokenizer.json files.) The text must be valid UTF-8.
 */
#ifndef MOE_TOK_PRETOK_H
#define MOE_TOK_PRETOK_H

#include <stddef.h>

typedef enum { TOK_GPT2, TOK_LLAMA3, TOK_QWEN2, TOK_N_PATTERNS } TokPattern;

/* "gpt2", "llama3", "qwen2" */
const char *tok_pattern_name(TokPattern p);
/* The pattern of a name, or -1. */
int tok_pattern_by_name(const char *name);
/* The regular expression as tokenizer.json writes it (unescaped). */
const char *tok_pattern_regex(TokPattern p);
/* The pattern whose regular expression is re exactly, or -1. */
int tok_pattern_by_regex(const char *re);

/* The end of the piece that starts at byte i < n of s (n bytes: the text, or a part of it
 * between two added tokens, which the pattern sees as the whole text). */
size_t tok_piece_end(TokPattern p, const char *s, size_t n, size_t i);

#endif
