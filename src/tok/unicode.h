/*
 * unicode.h: the text side of byte-level BPE: UTF-8 read the way the tokenizers library reads
 * it, the character classes of the pre-tokenizer patterns (unicode_tables.h), NFC (the
 * normalizer of Qwen2's tokenizer), and GPT-2's map of the 256 bytes onto 256 printable
 * characters, in which a byte-level vocabulary is written.
 */
#ifndef MOE_TOK_UNICODE_H
#define MOE_TOK_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* s (n bytes) into out (room for 3 n bytes) as valid UTF-8: every ill-formed sequence (a stray
 * continuation byte, a lead byte without its continuations, an overlong form, a surrogate, a
 * code point past U+10FFFF) becomes U+FFFD, one for each maximal ill-formed prefix (Unicode's
 * "maximal subpart" rule, as Python's errors="replace" and Rust's from_utf8_lossy apply it: the
 * library takes text, so that is what bytes become on their way in). Returns out's length. */
size_t utf8_lossy(const char *s, size_t n, char *out);
/* The code point at s[*i] of valid UTF-8 (n bytes), *i moved past it. */
uint32_t utf8_next(const char *s, size_t n, size_t *i);
/* cp as UTF-8 into out (4 bytes of room); returns its length. */
int utf8_put(uint32_t cp, char *out);

int tok_is_letter(uint32_t cp); /* \p{L} */
int tok_is_number(uint32_t cp); /* \p{N} */
int tok_is_space(uint32_t cp);  /* \s */

/* s (n bytes of valid UTF-8) in Unicode Normalization Form C as the tokenizers library's NFC
 * normalizer makes it: canonical decomposition (Hangul syllables by arithmetic), the marks in
 * order of their combining classes, then canonical composition (no composition exclusion, no
 * singleton, no decomposition of a non-starter). Returns the result (malloc'd, *len bytes), or
 * NULL when s is its own NFC for certain (every character NFC_Quick_Check Yes of class 0: all
 * ASCII text, most text), which is most of the time and costs one look at each character. */
char *tok_nfc(const char *s, size_t n, size_t *len);

/* GPT-2's byte alphabet: the printable bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF
 * stand for themselves, the other 68 bytes, in order, for U+0100, U+0101, ... (so a space is
 * U+0120, 'Ġ', a newline U+010A, 'Ċ'). */
uint32_t tok_byte_char(uint8_t b);
/* The byte a character of the alphabet stands for, or -1 for any other character. */
int tok_char_byte(uint32_t cp);
/* n bytes as their characters of the alphabet, UTF-8, into out (room for 2 n bytes);
 * returns out's length. */
size_t tok_bytes_to_alphabet(const char *b, size_t n, char *out);

#endif
