/*
 * hf.c: the Hugging Face layout, out and in. See hf.h; src/REFERENCE.md, "The Hugging Face
 * layout", has the correspondence as a table.
 *
 * One table (MAP, with MOE_MAP for the families other than Mixtral) pairs each tensor of moe.c's
 * parameter table with its Hugging Face name, and both directions walk moe.c's parameter table
 * through it: export writes each tensor under its other name, import fills each from its other
 * name and then refuses any tensor of the folder that nothing read. Some change layout on the
 * way (HfPlace): the query and key matrices, whose rows moe.c pairs (2i, 2i+1) within a head for
 * the rotation and Hugging Face pairs (i, i + D/2) (hf_rope_rows), with the gains of norms on
 * them; the experts, stacked (E, ...) in moe.c and one tensor each there; DeepSeek-V3's
 * kv_a_proj_with_mqa, two moe.c tensors one under the other, and its latents' projections,
 * scaled (HF_LATENT_SCALE). The reading side is hf_read.c.
 */
#include "convert/hf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/files.h"
#include "io/json.h"
#include "model/params.h"
#include "moe/moe_ops.h"

/* ---- names ----------------------------------------------------------------------------------- */

/* moe.c's name after "layers.L." and the Hugging Face one after "model.layers.L."; %d: expert.
 * Mixtral's MoE block is block_sparse_moe with experts w1 (gate), w3 (up), w2 (down); the other
 * families' is mlp (MOE_MAP). */
static const char *const MAP[][2] = {
    {"attn_norm", "input_layernorm.weight"},
    {"attn.wq", "self_attn.q_proj.weight"},
    {"attn.wk", "self_attn.k_proj.weight"},
    {"attn.wv", "self_attn.v_proj.weight"},
    {"attn.wo", "self_attn.o_proj.weight"},
    {"attn.q_norm", "self_attn.q_norm.weight"},
    {"attn.k_norm", "self_attn.k_norm.weight"},
    {"attn.wq_a", "self_attn.q_a_proj.weight"},
    {"attn.q_a_norm", "self_attn.q_a_layernorm.weight"},
    {"attn.wq_b", "self_attn.q_b_proj.weight"},
    {"attn.wkv_a", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attn.wk_rope", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attn.kv_a_norm", "self_attn.kv_a_layernorm.weight"},
    {"attn.wkv_b", "self_attn.kv_b_proj.weight"},
    {"ffn_norm", "post_attention_layernorm.weight"},
    {"ffn.w_gate", "mlp.gate_proj.weight"},
    {"ffn.w_up", "mlp.up_proj.weight"},
    {"ffn.w_down", "mlp.down_proj.weight"},
    {"moe.router", "block_sparse_moe.gate.weight"},
    {"moe.w_gate", "block_sparse_moe.experts.%d.w1.weight"},
    {"moe.w_up", "block_sparse_moe.experts.%d.w3.weight"},
    {"moe.w_down", "block_sparse_moe.experts.%d.w2.weight"},
    {"moe.shared_gate", "mlp.shared_experts.gate_proj.weight"},
    {"moe.shared_up", "mlp.shared_experts.up_proj.weight"},
    {"moe.shared_down", "mlp.shared_experts.down_proj.weight"},
};
static const char *const MOE_MAP[][2] = {
    {"moe.router", "mlp.gate.weight"},
    {"moe.w_gate", "mlp.experts.%d.gate_proj.weight"},
    {"moe.w_up", "mlp.experts.%d.up_proj.weight"},
    {"moe.w_down", "mlp.experts.%d.down_proj.weight"},
};
static const char *const GLOBAL[][2] = {{"tok_emb", "model.embed_tokens.weight"},
                                        {"final_norm", "model.norm.weight"},
                                        {"head", "lm_head.weight"}};

HfFamily hf_family(const Config *c) {
    if (c->attention == MOE_ATTN_MLA) return HF_DEEPSEEK_V3;
    if (c->qk_norm == MOE_QK_NORM_HEAD) return HF_QWEN3_MOE;
    if (c->qk_norm == MOE_QK_NORM_FULL) return HF_OLMOE;
    return c->num_experts > 0 ? HF_MIXTRAL : HF_LLAMA;
}

static const char *const FAMILY[][2] = {{"LlamaForCausalLM", "llama"},
                                        {"MixtralForCausalLM", "mixtral"},
                                        {"Qwen3MoeForCausalLM", "qwen3_moe"},
                                        {"OlmoeForCausalLM", "olmoe"},
                                        {"DeepseekV3ForCausalLM", "deepseek_v3"}};
const char *hf_architecture(HfFamily f) {
    return FAMILY[f][0];
}
const char *hf_model_type(HfFamily f) {
    return FAMILY[f][1];
}

/* The rotary rows of moe.c's tensor (after "layers.L.") in p: multi-head attention's queries
 * and keys and their norms' gains (one head's for model.qk_norm=head, every head's for full),
 * turned whole; latent attention's queries (the last rope_dim channels of each head) and shared
 * key, turned only where the layout pairs by halves. */
static void rope_place(const Config *c, int half, const char *name, HfPlace *p) {
    const int H = c->n_head, Hkv = config_kv_heads(c), D = config_head_dim(c);
    const int head = c->qk_norm == MOE_QK_NORM_HEAD, R = c->mla_rope_dim;
    p->span = p->rot = D, p->off = 0;
    if (c->attention == MOE_ATTN_MLA) {
        if (half && (strcmp(name, "attn.wq") == 0 || strcmp(name, "attn.wq_b") == 0))
            p->heads = H, p->off = D - R, p->rot = R;
        else if (half && strcmp(name, "attn.wk_rope") == 0)
            p->heads = 1, p->span = p->rot = R;
        return;
    }
    p->heads = strcmp(name, "attn.wq") == 0       ? H
               : strcmp(name, "attn.wk") == 0     ? Hkv
               : strcmp(name, "attn.q_norm") == 0 ? (head ? 1 : H)
               : strcmp(name, "attn.k_norm") == 0 ? (head ? 1 : Hkv)
                                                  : 0;
}

int hf_tensor_name(const Config *c, HfFamily f, int half, const char *name, int e, char *out,
                   size_t n, HfPlace *p) {
    memset(p, 0, sizeof *p);
    for (size_t i = 0; i < sizeof GLOBAL / sizeof GLOBAL[0]; i++)
        if (strcmp(name, GLOBAL[i][0]) == 0) return snprintf(out, n, "%s", GLOBAL[i][1]), 0;
    int l, k = 0;
    if (sscanf(name, "layers.%d.%n", &l, &k) != 1 || k == 0) return -1;
    const char *form = NULL;
    for (size_t i = 0; f != HF_MIXTRAL && i < sizeof MOE_MAP / sizeof MOE_MAP[0]; i++)
        if (strcmp(name + k, MOE_MAP[i][0]) == 0) form = MOE_MAP[i][1];
    for (size_t i = 0; !form && i < sizeof MAP / sizeof MAP[0]; i++)
        if (strcmp(name + k, MAP[i][0]) == 0) form = MAP[i][1];
    if (!form) return -1;
    char rest[64];
    snprintf(rest, sizeof rest, form, e);
    snprintf(out, n, "model.layers.%d.%s", l, rest);
    const char *own = name + k;
    rope_place(c, half, own, p);
    if (strcmp(own, "attn.wkv_a") == 0 || strcmp(own, "attn.wk_rope") == 0) {
        p->rows = c->mla_kv_rank + c->mla_rope_dim;
        p->row0 = strcmp(own, "attn.wk_rope") == 0 ? c->mla_kv_rank : 0;
    }
    if (strcmp(own, "attn.wkv_a") == 0 || strcmp(own, "attn.wq_a") == 0) p->scale = HF_LATENT_SCALE;
    return 0;
}

/* The same permutation of q and k leaves every q.k, so every attention weight, as it was; a
 * norm's gain on them is permuted with its channels. */
void hf_rope_rows(float *dst, const float *src, const HfPlace *p, int C, int to_hf) {
    const size_t row = (size_t)C * sizeof(float);
    for (int h = 0; h < p->heads; h++) {
        const size_t base = (size_t)h * p->span;
        memcpy(dst + base * C, src + base * C, (size_t)p->off * row);
        const size_t after = base + p->off + p->rot;
        memcpy(dst + after * C, src + after * C, (size_t)(p->span - p->off - p->rot) * row);
        for (int i = 0; i < p->rot / 2; i++)
            for (int half = 0; half < 2; half++) {
                const size_t moec = base + p->off + 2 * i + half;
                const size_t hf = base + p->off + (size_t)half * (p->rot / 2) + i;
                memcpy(dst + (to_hf ? hf : moec) * C, src + (to_hf ? moec : hf) * C, row);
            }
    }
}

/* ---- export ---------------------------------------------------------------------------------- */

/* What the routing of an MoE model of family f computes that the family cannot, or NULL. Every
 * family's router is a token-choice top-k in fp32 with nothing dropped at evaluation. Mixtral's,
 * Qwen3-MoE's and OLMoE's: a softmax, unscaled, without biases, shared experts or groups;
 * Mixtral's renormalised over the k, the other two's as norm_topk_prob says; Qwen3-MoE's blocks
 * may be dense (mlp_only_layers). DeepSeek-V3's: a sigmoid with its correction biases (moe.c's
 * aux-free ones, zeros without), best groups, a scale, renormalised or not, shared experts, and
 * dense blocks first (first_k_dense_replace). */
static const char *routing_why(const Config *c, HfFamily f) {
    const float eval_cap =
        c->eval_capacity_factor < 0 ? c->capacity_factor : c->eval_capacity_factor;
    if (f == HF_DEEPSEEK_V3)
        return c->score != MOE_SCORE_SIGMOID
                   ? "moe.score=softmax: DeepSeek-V3's router scores each expert with a sigmoid"
               : c->num_shared == 0
                   ? "moe.num_shared=0: DeepSeek-V3's MoE blocks always have shared experts"
               : c->every > 1 ? "moe.every mixes dense and MoE blocks (DeepSeek-V3's dense blocks "
                                "come first only: moe.first_dense)"
               : c->routing == MOE_ROUTING_EXPERT_CHOICE
                   ? "moe.routing=expert_choice lets each expert choose its tokens"
               : eval_cap > 0 ? "a capacity at evaluation (moe.capacity_factor, "
                                "moe.eval_capacity_factor) drops assignments"
               : c->router_precision != MOE_ROUTER_FP32
                   ? "moe.router_precision rounds the router to bfloat16"
                   : NULL;
    return c->score != MOE_SCORE_SOFTMAX ? "moe.score=sigmoid scores each expert alone"
           : f == HF_MIXTRAL && !c->norm_topk
               ? "moe.norm_topk=0 leaves the gate weights unnormalised"
           : c->route_scale != 1.0f ? "moe.route_scale scales the gate weights"
           : c->balance == MOE_BALANCE_AUX_FREE
               ? "moe.balance=aux_free adds its biases to the scores for the top-k"
           : c->routing == MOE_ROUTING_EXPERT_CHOICE
               ? "moe.routing=expert_choice lets each expert choose its tokens"
           : c->num_shared > 0 ? "moe.num_shared adds always-on shared experts"
           : c->n_group > 0    ? "moe.n_group limits each token's experts to its best groups"
           : f != HF_QWEN3_MOE && (c->first_dense > 0 || c->every > 1)
               ? "moe.first_dense or moe.every mix dense and MoE blocks"
           : eval_cap > 0 ? "a capacity at evaluation (moe.capacity_factor, "
                            "moe.eval_capacity_factor) drops assignments"
           : c->router_precision != MOE_ROUTER_FP32
               ? "moe.router_precision rounds the router to bfloat16"
               : NULL;
}

int hf_export_check(const Config *c, char *err, int errlen) {
    const HfFamily f = hf_family(c);
    char how[192];
    snprintf(how, sizeof how,
             "; the Hugging Face layout (%s, the family of this model's attention) has no such "
             "model, and moe.c does not export one approximately",
             hf_architecture(f));
    if (c->norm != MOE_NORM_PRE)
        return set_error(err, errlen,
                         "model.norm=%s puts a second norm on each sublayer's output%s",
                         c->norm == MOE_NORM_SANDWICH ? "sandwich" : "dssn", how);
    if (c->mtp_depth > 0)
        return set_error(err, errlen,
                         "model.mtp_depth=%d: moe.c does not write its multi-token prediction "
                         "modules in the Hugging Face layout yet; export moe.c's own safetensors "
                         "(moe export without --format hf), which keeps them",
                         c->mtp_depth);
    const char *attention = f == HF_DEEPSEEK_V3 ? "model.attention=mla"
                            : f == HF_QWEN3_MOE ? "model.qk_norm=head"
                            : f == HF_OLMOE     ? "model.qk_norm=full"
                                                : NULL;
    if (attention && c->num_experts == 0)
        return set_error(err, errlen,
                         "%s in a dense model (moe.num_experts=0): %s is an MoE family; moe.c "
                         "exports dense models as Llama, which has no such attention",
                         attention, hf_architecture(f));
    if (f == HF_DEEPSEEK_V3 && c->qk_norm != MOE_QK_NORM_NONE)
        return set_error(err, errlen, "model.qk_norm with model.attention=mla%s", how);
    if (f == HF_OLMOE && config_head_dim(c) * c->n_head != c->d_model)
        return set_error(err, errlen,
                         "model.head_dim=%d: OLMoE's heads are hidden_size / num_attention_heads "
                         "wide (%d)%s",
                         config_head_dim(c), c->d_model / c->n_head, how);
    const char *why = c->num_experts > 0 ? routing_why(c, f) : NULL;
    return why ? set_error(err, errlen, "%s%s", why, how) : 0;
}

/* Qwen3-MoE's mlp_only_layers: the dense blocks, every one listed (with decoder_sparse_step 1
 * that places any moe.first_dense and moe.every). */
static void dense_layers(FILE *f, const Config *c) {
    fputs("  \"mlp_only_layers\": [", f);
    for (int l = 0, n = 0; l < c->n_layer; l++)
        if (!config_is_moe_layer(c, l)) fprintf(f, "%s%d", n++ ? ", " : "", l);
    fputs("],\n  \"decoder_sparse_step\": 1,\n", f);
}

/* The routing and MoE sizes of family f's config.json. */
static void moe_fields(FILE *f, const Config *c, HfFamily fam) {
    const int E = c->num_experts, K = c->top_k, FE = config_expert_hidden(c);
    switch (fam) {
    case HF_MIXTRAL:
        fprintf(f, "  \"num_local_experts\": %d,\n  \"num_experts_per_tok\": %d,\n", E, K);
        fprintf(f, "  \"router_jitter_noise\": 0.0,\n  \"sliding_window\": null,\n");
        break;
    case HF_QWEN3_MOE:
        fprintf(f, "  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n", E, K);
        fprintf(f, "  \"moe_intermediate_size\": %d,\n  \"norm_topk_prob\": %s,\n", FE,
                c->norm_topk ? "true" : "false");
        dense_layers(f, c);
        fprintf(f, "  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n"
                   "  \"attention_bias\": false,\n");
        break;
    case HF_OLMOE:
        fprintf(f, "  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n", E, K);
        fprintf(f,
                "  \"norm_topk_prob\": %s,\n  \"clip_qkv\": null,\n  \"attention_bias\": false,\n",
                c->norm_topk ? "true" : "false");
        break;
    case HF_DEEPSEEK_V3:
        fprintf(f, "  \"n_routed_experts\": %d,\n  \"num_experts_per_tok\": %d,\n", E, K);
        fprintf(f, "  \"moe_intermediate_size\": %d,\n  \"n_shared_experts\": %d,\n", FE,
                c->num_shared);
        fprintf(f, "  \"first_k_dense_replace\": %d,\n  \"norm_topk_prob\": %s,\n", c->first_dense,
                c->norm_topk ? "true" : "false");
        /* no groups (moe.n_group=0): one group of every expert, kept */
        fprintf(f,
                "  \"routed_scaling_factor\": %.9g,\n  \"n_group\": %d,\n  \"topk_group\": %d,\n",
                (double)c->route_scale, c->n_group > 1 ? c->n_group : 1,
                c->n_group > 1 ? c->topk_group : 1);
        break;
    case HF_LLAMA: break;
    }
    fprintf(f, "  \"router_aux_loss_coef\": %.9g,\n  \"output_router_logits\": false,\n",
            (double)c->aux_coef);
}

/* DeepSeek-V3's latent attention: the ranks and head sizes, the rotary channels paired as moe.c
 * pairs them (rope_interleave), and no multi-token prediction layers. */
static void mla_fields(FILE *f, const Config *c) {
    if (c->mla_q_rank > 0)
        fprintf(f, "  \"q_lora_rank\": %d,\n", c->mla_q_rank);
    else
        fputs("  \"q_lora_rank\": null,\n", f);
    fprintf(f, "  \"kv_lora_rank\": %d,\n  \"qk_rope_head_dim\": %d,\n", c->mla_kv_rank,
            c->mla_rope_dim);
    fprintf(f, "  \"qk_nope_head_dim\": %d,\n  \"v_head_dim\": %d,\n", c->mla_nope_dim,
            c->mla_v_dim);
    fputs("  \"rope_interleave\": true,\n  \"num_nextn_predict_layers\": 0,\n"
          "  \"attention_bias\": false,\n",
          f);
}

/* config.json: what transformers reads, and moe_c_config, what moe import reads back. */
static char *config_json(const Config *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) moe_fatal("out of memory");
    const HfFamily fam = hf_family(c);
    fprintf(f, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n",
            hf_architecture(fam), hf_model_type(fam));
    /* intermediate_size: Mixtral's and OLMoE's experts', the others' dense blocks' */
    fprintf(f, "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n",
            c->vocab, c->d_model,
            fam == HF_MIXTRAL || fam == HF_OLMOE ? config_expert_hidden(c) : c->d_ff);
    fprintf(f, "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n", c->n_layer,
            c->n_head);
    if (fam == HF_DEEPSEEK_V3) /* every head its own keys and values, made from the latent */
        fprintf(f, "  \"num_key_value_heads\": %d,\n", c->n_head), mla_fields(f, c);
    else
        fprintf(f, "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n", config_kv_heads(c),
                config_head_dim(c));
    fprintf(f, "  \"hidden_act\": \"silu\",\n  \"max_position_embeddings\": %d,\n", c->seq_len);
    /* the rotary base both ways transformers has spelt it (4: rope_theta; 5: rope_parameters) */
    fprintf(f, "  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": %.9g,\n  \"rope_scaling\": null,\n",
            (double)c->rope_theta);
    fprintf(f, "  \"rope_parameters\": {\"rope_theta\": %.9g, \"rope_type\": \"default\"},\n",
            (double)c->rope_theta);
    fprintf(f, "  \"attention_dropout\": 0.0,\n  \"tie_word_embeddings\": %s,\n",
            c->tied ? "true" : "false"); /* tied: no lm_head.weight, the table has no head */
    fprintf(f, "  \"initializer_range\": %.9g,\n", (double)c->init_std);
    if (c->num_experts > 0)
        moe_fields(f, c, fam);
    else
        fprintf(f, "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
                   "  \"pretraining_tp\": 1,\n");
    fprintf(f, "  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n");
    fprintf(f, "  \"torch_dtype\": \"float32\",\n  \"use_cache\": true,\n");
    char *settings = config_to_text(c);
    fputs("  \"moe_c_config\": ", f);
    json_write_string(f, settings);
    fputs("\n}\n", f);
    free(settings);
    fclose(f);
    return text;
}

/* GPT-2's byte-to-character table: the printable bytes stand for themselves, the others for
 * the characters from U+0100 on, in order. Byte b's character into out (UTF-8). */
static void byte_char(int b, char *out) {
    const int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    int cp = b;
    if (!printable) {
        cp = 256;
        for (int x = 0; x < b; x++)
            cp += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
    }
}

char *hf_byte_tokenizer(void) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) moe_fatal("out of memory");
    const char *bl = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": "
                     "false, \"use_regex\": false}";
    fprintf(f, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n");
    fprintf(f, "  \"added_tokens\": [],\n  \"normalizer\": null,\n  \"pre_tokenizer\": %s,\n", bl);
    fprintf(f, "  \"post_processor\": null,\n  \"decoder\": %s,\n", bl);
    fprintf(f, "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
               "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, "
               "\"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false,\n"
               "    \"vocab\": {");
    for (int b = 0; b < MOE_VOCAB; b++) {
        char ch[4];
        byte_char(b, ch);
        fputs(b ? ", " : "", f);
        json_write_string(f, ch);
        fprintf(f, ": %d", b);
    }
    fprintf(f, "},\n    \"merges\": []}\n}\n");
    fclose(f);
    return text;
}

static int write_text(const char *dir, const char *name, const char *text, char *err, int errlen) {
    char path[MOE_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const void *buf[1] = {text};
    const size_t len[1] = {strlen(text)};
    return write_atomic(path, buf, len, 1, err, errlen);
}

static const char *const FILES[] = {"config.json", "model.safetensors", "tokenizer.json",
                                    "tokenizer_config.json"};

/* A folder that holds any of the layout's files is refused: nothing is overwritten. */
static int refuse_existing(const char *dir, char *err, int errlen) {
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0]; i++) {
        char path[MOE_PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, FILES[i]);
        if (file_exists(path))
            return set_error(err, errlen,
                             "%s already exists; choose another --out or remove it first "
                             "(nothing was changed)",
                             path);
    }
    return 0;
}

/* The parameters' entries into e (one a tensor, one an expert of a stacked tensor; rows that
 * share a tensor in the layout, one entry), rotary rows permuted and the latents' projections
 * scaled into copies[]. Returns the count, or -1. */
static int tensor_entries(const Model *m, HfFamily fam, TensorRef *e, float **copies, char *err,
                          int errlen) {
    const Config *c = &m->cfg;
    int k = 0;
    for (int i = 0; i < m->pt.n; i++) {
        const ParamTensor *t = &m->pt.t[i];
        const int stacked = t->ndim == 3, parts = stacked ? t->shape[0] : 1;
        const size_t each = t->numel / (size_t)parts;
        const int C = t->ndim > 1 ? t->shape[t->ndim - 1] : 1;
        for (int x = 0; x < parts; x++) {
            HfPlace p;
            if (hf_tensor_name(c, fam, fam != HF_DEEPSEEK_V3, t->name, x, e[k].name,
                               sizeof e[k].name, &p) != 0)
                return set_error(err, errlen, "tensor '%s' has no place in the Hugging Face layout",
                                 t->name);
            const float *src = m->params + t->offset + (size_t)x * each;
            int at = k; /* the entry: a new one, or the one made for the tensor these rows share */
            for (int j = 0; p.rows && j < k; j++)
                if (strcmp(e[j].name, e[k].name) == 0) at = j;
            if (at == k) {
                e[k].dtype = TENSOR_F32;
                e[k].ndim = stacked ? 2 : t->ndim;
                for (int d = 0; d < e[k].ndim; d++) e[k].shape[d] = t->shape[d + stacked];
                if (p.rows) e[k].shape[0] = p.rows;
                e[k].nbytes = (p.rows ? (size_t)p.rows * C : each) * sizeof(float);
                e[k].data = src;
                k++;
            }
            if (!p.heads && !p.rows && !p.scale) continue;
            if (!copies[at]) copies[at] = (float *)malloc_check(e[at].nbytes);
            float *dst = copies[at] + (size_t)p.row0 * C;
            if (p.heads)
                hf_rope_rows(dst, src, &p, C, 1);
            else
                memcpy(dst, src, each * sizeof(float));
            for (size_t j = 0; p.scale && j < each; j++) dst[j] = (float)(dst[j] * p.scale);
            e[at].data = copies[at];
        }
    }
    return k;
}

/* DeepSeek-V3's correction biases from entry k on: moe.c's aux-free ones, or zeros (a router
 * without). Returns the count of entries. */
static int bias_entries(const Model *m, TensorRef *e, float **copies, int k) {
    const Config *c = &m->cfg;
    for (int l = 0; l < c->n_layer; l++) {
        if (!config_is_moe_layer(c, l)) continue;
        snprintf(e[k].name, sizeof e[k].name, "model.layers.%d.mlp.gate.e_score_correction_bias",
                 l);
        e[k].dtype = TENSOR_F32;
        e[k].ndim = 1;
        e[k].shape[0] = c->num_experts;
        e[k].nbytes = (size_t)c->num_experts * sizeof(float);
        copies[k] = (float *)calloc_check((size_t)c->num_experts, sizeof(float));
        if (m->state.blocks[l].router_bias)
            memcpy(copies[k], m->state.blocks[l].router_bias, e[k].nbytes);
        e[k].data = copies[k];
        k++;
    }
    return k;
}

/* The folder: model.safetensors of the n entries, config.json and the tokenizer's files: tok's
 * bytes, or the byte tokenizer for a model of bytes, or none. */
static int write_folder(const char *dir, const Config *c, const TensorRef *e, int n,
                        const TokFile *tok, char *err, int errlen) {
    int rc = make_dirs(dir, err, errlen);
    char path[MOE_PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *keys[] = {"format"}, *vals[] = {"pt"};
    if (rc == 0) rc = safetensors_write_checksummed(path, e, n, keys, vals, 1, err, errlen);
    /* the byte tokenizer fits a model of bytes alone: another vocabulary's ids are not bytes */
    const int bytes = !tok && c->vocab == MOE_VOCAB;
    char *cfg = config_json(c), *byte_tok = bytes ? hf_byte_tokenizer() : NULL, tcfg[256];
    snprintf(tcfg, sizeof tcfg,
             "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"model_max_length\": "
             "%d,\n  \"clean_up_tokenization_spaces\": false\n}\n",
             c->seq_len);
    if (rc == 0) rc = write_text(dir, "config.json", cfg, err, errlen);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    const void *buf[1] = {tok ? tok->data : NULL};
    const size_t len[1] = {tok ? tok->n : 0};
    if (rc == 0 && bytes) rc = write_text(dir, "tokenizer.json", byte_tok, err, errlen);
    if (rc == 0 && tok) rc = write_atomic(path, buf, len, 1, err, errlen); /* as it is */
    if (rc == 0 && (bytes || tok)) rc = write_text(dir, "tokenizer_config.json", tcfg, err, errlen);
    free(cfg);
    free(byte_tok);
    return rc;
}

int hf_export(const Model *m, const char *dir, const TokFile *tok, char *err, int errlen) {
    const Config *c = &m->cfg;
    if (hf_export_check(c, err, errlen) || refuse_existing(dir, err, errlen)) return -1;
    const HfFamily fam = hf_family(c);
    int n = fam == HF_DEEPSEEK_V3 ? c->n_layer : 0;
    for (int i = 0; i < m->pt.n; i++) n += m->pt.t[i].ndim == 3 ? m->pt.t[i].shape[0] : 1;
    TensorRef *e = (TensorRef *)calloc_check((size_t)n, sizeof *e);
    float **copies = (float **)calloc_check((size_t)n, sizeof *copies);
    int k = tensor_entries(m, fam, e, copies, err, errlen), rc = k < 0 ? -1 : 0;
    if (rc == 0 && fam == HF_DEEPSEEK_V3) k = bias_entries(m, e, copies, k);
    if (rc == 0) rc = write_folder(dir, c, e, k, tok, err, errlen);
    for (int i = 0; i < n; i++) free(copies[i]);
    free(copies);
    free(e);
    return rc;
}
