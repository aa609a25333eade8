/*
 * hf.h: models in the Hugging Face layout, out (`moe export --format hf`) and in (`moe import
 * --format hf`). Five families of transformers, all with moe.c's RMSNorm, rotary attention and
 * SwiGLU, and a head of their own (lm_head.weight) or, with model.tied, the embedding's
 * (tie_word_embeddings: true, no lm_head.weight): a dense model is a Llama (LlamaForCausalLM);
 * an MoE model of moe.c's default kind a Mixtral (MixtralForCausalLM: softmax router, top-k
 * renormalised, no biases); with model.qk_norm=head a Qwen3-MoE (Qwen3MoeForCausalLM), with
 * full an OLMoE (OlmoeForCausalLM), with latent attention a DeepSeek-V3 (DeepseekV3ForCausalLM:
 * sigmoid router with correction biases, groups, a scale, shared experts). The correspondence,
 * tensor by tensor and setting by setting, is src/REFERENCE.md's "The Hugging Face layout".
 *
 * A folder holds config.json (the architecture and every size that changes the function, plus
 * "moe_c_config", every moe.c setting, so that an export imports back to the same checkpoint),
 * model.safetensors (float32, the Hugging Face tensor names; queries and keys with their rows
 * permuted from moe.c's interleaved rotary pairs to the rotate-half pairs where the family pairs
 * so; config.json's vocab_size is model.vocab), and tokenizer.json and tokenizer_config.json:
 * the run's own tokenizer.json (tok/tok.h), byte for byte, or for a model of bytes
 * (model.vocab=256) without one a byte-level tokenizer (token i is byte i); a model of another
 * vocabulary without a tokenizer gets no tokenizer files (moe.c has none of its ids to write).
 * Read back (hf_tokenizer), the run's tokenizer.json is copied beside the imported checkpoint.
 */
#ifndef MOE_CONVERT_HF_H
#define MOE_CONVERT_HF_H

#include "config/config.h"
#include "io/tensorfile.h"
#include "model/model.h"
#include "tok/tok.h"

/* 0 when a model of settings c can be written in the Hugging Face layout (its family,
 * hf_family) without changing what it computes; else -1 and a message naming the first setting
 * that family cannot express (outside DeepSeek-V3 sigmoid scores, scaled gate weights, aux-free
 * biases, shared experts, groups; for Mixtral unnormalised gates; dense blocks among MoE ones
 * but for Qwen3-MoE's and DeepSeek-V3's first ones; for DeepSeek-V3 softmax scores or no shared
 * expert; a norm on q and k or latent attention in a dense model; expert choice, a capacity at
 * evaluation, a bf16 router, sandwich norms). */
int hf_export_check(const Config *c, char *err, int errlen);

/* Write m as a Hugging Face folder dir (made when missing), with tok (the run's tokenizer.json:
 * its vocabulary model.vocab's, the caller's check) as its tokenizer, or NULL for none (the byte
 * tokenizer for a model of bytes). Refuses, before writing anything, a folder that already
 * holds one of the files it writes. Returns 0, or -1 with a message. */
int hf_export(const Model *m, const char *dir, const TokFile *tok, char *err, int errlen);
/* The byte-level tokenizer.json written for a model of bytes (malloc'd text): byte-level BPE
 * without merges, whose pre-tokenizer splits nothing, so that token i is byte i. */
char *hf_byte_tokenizer(void);

/* hf_tok.c: the tokenizer of the Hugging Face folder dir for a model of vocab ids, for `moe
 * import --format hf` to copy beside the checkpoint. Returns 1 with its bytes in f when the
 * folder has a tokenizer.json that tok_load reads with vocab tokens; 0 when there is nothing to
 * copy: no tokenizer.json, the byte tokenizer hf_export writes (a model of bytes has none), or
 * one the model can run without it but that moe.c cannot use (tok_load refuses it, or it has
 * fewer tokens than the model's padded vocabulary), said in note (else note is ""); -1 with err
 * for a tokenizer of more tokens than the model has rows: the folder's model is not its. */
int hf_tokenizer(const char *dir, int vocab, TokFile *f, char *note, int notelen, char *err,
                 int errlen);

/* Read the Hugging Face folder dir (one of the five families by its model_type, one
 * model.safetensors) into st as if it were a `moe export` file: moe.c's tensor names and
 * layouts (rotary rows permuted back, experts stacked, DeepSeek-V3's correction biases as
 * aux-free ones), and the settings in the metadata "config" (moe_c_config when the folder has
 * it, else worked out from config.json), for import_config and import_weights (import.h). What
 * moe.c cannot represent is refused with a message that names it: a vocab_size outside
 * model.vocab's 2 .. 2^24 (any other is model.vocab), key-value heads that do not divide the heads,
 * attention or MLP biases, another activation or norm epsilon, rotary scaling, a sliding window
 * shorter than the context, OLMoE's clip_qkv, Qwen3-MoE dense blocks placed otherwise than
 * moe.first_dense and moe.every place them, DeepSeek-V3's multi-token prediction layer, a sharded
 * or non-safetensors checkpoint, tensors missing, misshapen or extra, a field of config.json of
 * another JSON type than it must have (moe_c_config a string, tie_word_embeddings true or false,
 * ...). A tied head (tie_word_embeddings: true) gives a model of model.tied=1; an lm_head.weight
 * beside it must hold the embedding's values (one that differs is refused: loaders disagree on
 * which of the two is the head). Returns 0, or -1. */
int hf_read(SafeTensors *st, const char *dir, char *err, int errlen);

/* The families of the layout, each one architecture of transformers (hf_architecture). */
typedef enum { HF_LLAMA, HF_MIXTRAL, HF_QWEN3_MOE, HF_OLMOE, HF_DEEPSEEK_V3 } HfFamily;

/* The family a model of settings c is written as: the only one that can express its attention
 * (latent attention: DeepSeek-V3; model.qk_norm=head: Qwen3-MoE; model.qk_norm=full: OLMoE),
 * else Mixtral for an MoE and Llama for a dense model. hf_export_check then says whether that
 * family can express the rest. */
HfFamily hf_family(const Config *c);
const char *hf_architecture(HfFamily f); /* "MixtralForCausalLM", ... */
const char *hf_model_type(HfFamily f);   /* config.json's model_type: "mixtral", ... */

/* Where a moe.c tensor lies in the Hugging Face layout: rows [row0, row0 + its rows) of the
 * tensor of its name, which has rows rows (0: it is the whole of it; DeepSeek-V3's
 * kv_a_proj_with_mqa holds moe.c's attn.wkv_a and attn.wk_rope one under the other), times
 * scale there (0: as it is; HF_LATENT_SCALE); and its rows turned by the rotary embedding, which
 * moe.c pairs (2i, 2i+1) and the layout (i, i + rot/2): heads groups of span rows, in each of
 * which rows [off, off + rot) rotate (heads 0: none). */
typedef struct {
    int row0, rows;
    double scale;
    int heads, span, off, rot;
} HfPlace;

/* The Hugging Face name of moe.c's tensor name (expert e of a stacked one) in family f into
 * out, and its place; half: the layout pairs the rotary channels by halves (every family, and
 * DeepSeek-V3's with rope_interleave false; with rope_interleave true it pairs them as moe.c
 * does). 0, or -1 for a tensor the family has no place for. */
int hf_tensor_name(const Config *c, HfFamily f, int half, const char *name, int e, char *out,
                   size_t n, HfPlace *p);

/* transformers' DeepSeek-V3 normalises the latents of its latent attention (q_a_layernorm,
 * kv_a_layernorm) with an epsilon of 1e-6 whatever rms_norm_eps says, moe.c with RMSNorm's 1e-5.
 * RMSNorm(s x, eps) = RMSNorm(x, eps / s^2), so the latents' projections (attn.wq_a, attn.wkv_a)
 * are written times s = sqrt(1e-6 / 1e-5), and read back divided by it: the same function, to
 * rounding (these two tensors do not come back bit for bit). */
#define HF_LATENT_SCALE 0.31622776601683794 /* sqrt(0.1) */

/* The rows of a matrix of rows of C floats from moe.c's rotary pairs (2i, 2i+1) to Hugging
 * Face's (i, i + rot/2) (to_hf = 1), or back (to_hf = 0), as p says (p->heads > 0); the rows
 * that do not rotate are copied. */
void hf_rope_rows(float *dst, const float *src, const HfPlace *p, int C, int to_hf);

#endif
