/*
 * model_acts.c: the list of every activation and scratch buffer of a model (acts.h).
 *
 * model_acts_table lists every buffer of a model, in the order the arena holds them;
 * the MoE block adds its own (moe_acts_entries, moe_scratch_entries: moe_block.c) and, with
 * expert parallelism, those of the expert exchange (ep_acts_entries: ep.c). Letters: N = B * T
 * tokens, C channels, H query heads and Hkv key-value heads of D channels (QW = H D and
 * KW = Hkv D the widths of q and of k, v), V vocabulary, F the dense hidden size, FE the expert
 * hidden size, E experts, K experts per token, A assignments per token (K, or E for expert choice:
 * every (token, expert) pair is a candidate), S expert slots (moe_slots_max: N * K dropless;
 * E * cap for expert choice, cap = ceil(ec_capacity * N * K / E); for a padded capacity plan
 * E * the rows per expert (moe_expert_rows) when that exceeds N * K, at the larger of the
 * training and evaluation factors), Fs = num_shared * FE the shared experts' hidden size.
 *
 * What the table says about an MoE step: the parameters of an MoE block grow with E (every
 * expert is stored, trained and has AdamW moments) but its activations grow with K only
 * (each token visits K experts), so at equal active FLOPs (K * FE = F) an MoE model holds
 * about the activations of its dense twin plus the permuted copies xe, ye (2 S C) and the
 * router's (N, E) logits and scores, and E / K times the feed-forward parameters, times 4
 * with gradients and moments.
 */
#include "model/acts.h"

#include <stdio.h>

#include "model/model.h"

/* block_mla_entries: latent attention's own activations in block l: the queries' latent
 * (mla.q_rank > 0) with its norm, the keys' and values' latent with its norm, the rotated key
 * the heads share, and the heads' keys without rotation and values before they are assembled */
static void block_mla_entries(ActTable *t, const Config *c, size_t N, int l, BlockActs *a) {
    const size_t QR = (size_t)c->mla_q_rank, KR = (size_t)c->mla_kv_rank;
    const size_t KVB = (size_t)c->n_head * (c->mla_nope_dim + c->mla_v_dim);
    if (QR > 0) {
        acts_add(t, ACT_FLOAT, ACT_ATTN, N * QR, ACT_FIELD(a, qlat), "blocks.%d.qlat", l);
        acts_add(t, ACT_FLOAT, ACT_ATTN, N * QR, ACT_FIELD(a, qlatn), "blocks.%d.qlatn", l);
        acts_add(t, ACT_FLOAT, ACT_ATTN, N, ACT_FIELD(a, rstd_qlat), "blocks.%d.rstd_qlat", l);
    }
    acts_add(t, ACT_FLOAT, ACT_ATTN, N * KR, ACT_FIELD(a, lat), "blocks.%d.lat", l);
    acts_add(t, ACT_FLOAT, ACT_ATTN, N * KR, ACT_FIELD(a, latn), "blocks.%d.latn", l);
    acts_add(t, ACT_FLOAT, ACT_ATTN, N, ACT_FIELD(a, rstd_lat), "blocks.%d.rstd_lat", l);
    acts_add(t, ACT_FLOAT, ACT_ATTN, N * (size_t)c->mla_rope_dim, ACT_FIELD(a, krope),
             "blocks.%d.krope", l);
    acts_add(t, ACT_FLOAT, ACT_ATTN, N * KVB, ACT_FIELD(a, kvb), "blocks.%d.kvb", l);
}

/* block_attn_entries: the attention half of block l, the feed-forward branch's input norm and,
 * with sandwich norms, both sublayers' output norms */
static void block_attn_entries(ActTable *t, const Config *c, int B, int T, int tp, int l,
                               BlockActs *a) {
    /* under tensor parallelism (tp.h) this rank's heads, and n = N / tp rows of the stream */
    const size_t C = (size_t)c->d_model, H = (size_t)(c->n_head / tp), N = (size_t)B * T;
    const size_t Hkv = (size_t)(config_kv_heads(c) / tp), n = N / (size_t)tp;
    const size_t QW = H * config_head_dim(c), KW = Hkv * config_head_dim(c);
    const size_t VW = Hkv * config_value_dim(c);
    const size_t OW = H * config_value_dim(c);
    /* ln1, rstd1: the rmsnorm of the block input and its 1 / rms per token */
    acts_add(t, ACT_FLOAT, ACT_ATTN, N * C, ACT_FIELD(a, ln1), "blocks.%d.ln1", l);
    acts_add(t, ACT_FLOAT, ACT_ATTN, n, ACT_FIELD(a, rstd1), "blocks.%d.rstd1", l);
    /* q (N, QW), k (N, KW) and v (N, VW) (q and k after RoPE) */
    acts_add(t, ACT_FLOAT, ACT_ATTN, N * QW, ACT_FIELD(a, q), "blocks.%d.q", l);
    acts_add(t, ACT_FLOAT, ACT_ATTN, N * KW, ACT_FIELD(a, k), "blocks.%d.k", l);
    acts_add(t, ACT_FLOAT, ACT_ATTN, N * VW, ACT_FIELD(a, v), "blocks.%d.v", l);
    if (c->attention == MOE_ATTN_MLA) block_mla_entries(t, c, N, l, a);
    if (c->qk_norm != MOE_QK_NORM_NONE) {
        /* the projections before their norm, and the norm's 1 / rms per row: a row is a head
         * (model.qk_norm=head) or a token (full) */
        const size_t qrows = c->qk_norm == MOE_QK_NORM_HEAD ? N * H : N;
        const size_t krows = c->qk_norm == MOE_QK_NORM_HEAD ? N * Hkv : N;
        acts_add(t, ACT_FLOAT, ACT_ATTN, N * QW, ACT_FIELD(a, qr), "blocks.%d.qr", l);
        acts_add(t, ACT_FLOAT, ACT_ATTN, N * KW, ACT_FIELD(a, kr), "blocks.%d.kr", l);
        acts_add(t, ACT_FLOAT, ACT_ATTN, qrows, ACT_FIELD(a, rstd_q), "blocks.%d.rstd_q", l);
        acts_add(t, ACT_FLOAT, ACT_ATTN, krows, ACT_FIELD(a, rstd_k), "blocks.%d.rstd_k", l);
    }
    /* att: the softmax probabilities, the full T x T square per (batch row, head): the one
     * activation quadratic in T */
    acts_add(t, ACT_FLOAT, ACT_ATTN, (size_t)B * H * T * T, ACT_FIELD(a, att), "blocks.%d.att", l);
    /* atty (N, OW): the attention output before wo; resid_mid: block input + attention branch */
    acts_add(t, ACT_FLOAT, ACT_ATTN, N * OW, ACT_FIELD(a, atty), "blocks.%d.atty", l);
    acts_add(t, ACT_FLOAT, ACT_ATTN, n * C, ACT_FIELD(a, resid_mid), "blocks.%d.resid_mid", l);
    /* ln2, rstd2: the rmsnorm of resid_mid, the feed-forward branch's input */
    acts_add(t, ACT_FLOAT, ACT_ATTN, N * C, ACT_FIELD(a, ln2), "blocks.%d.ln2", l);
    acts_add(t, ACT_FLOAT, ACT_ATTN, n, ACT_FIELD(a, rstd2), "blocks.%d.rstd2", l);
    if (c->norm != MOE_NORM_PRE) {
        /* sandwich norms: each sublayer's output before its output norm, and the norm's
         * 1 / rms per token */
        acts_add(t, ACT_FLOAT, ACT_ATTN, n * C, ACT_FIELD(a, attn_out), "blocks.%d.attn_out", l);
        acts_add(t, ACT_FLOAT, ACT_ATTN, n, ACT_FIELD(a, rstd_attn_out), "blocks.%d.rstd_attn_out",
                 l);
        acts_add(t, ACT_FLOAT, ACT_FFN, n * C, ACT_FIELD(a, ffn_out), "blocks.%d.ffn_out", l);
        acts_add(t, ACT_FLOAT, ACT_FFN, n, ACT_FIELD(a, rstd_ffn_out), "blocks.%d.rstd_ffn_out", l);
    }
}

/* block_ffn_entries: the feed-forward half of block l, the MoE block's buffers and the shared
 * experts' for an MoE layer, the dense SwiGLU's otherwise */
static void block_ffn_entries(ActTable *t, const Config *c, const MoeSpec *spec, int ep, int tp,
                              size_t N, int l, BlockActs *a) {
    /* this rank's hidden channels under tensor parallelism; the MoE block on its N / tp rows */
    const size_t F = (size_t)(c->d_ff / tp);
    const size_t FS = (size_t)c->num_shared * config_expert_hidden(c) / (size_t)tp;
    if (config_is_moe_layer(c, l)) {
        /* MoeActs: the router, then the tokens in expert order and the experts' SwiGLU */
        char pre[ACT_NAME_MAX];
        snprintf(pre, sizeof pre, "blocks.%d.moe", l);
        moe_acts_entries(t, pre, spec, ep, (int)(N / (size_t)tp), a ? a->moe : NULL);
        /* sg, su, sh: the shared experts' SwiGLU (gate, up, silu(gate) * up) */
        if (FS > 0) {
            acts_add(t, ACT_FLOAT, ACT_FFN, N * FS, ACT_FIELD(a, sg), "blocks.%d.sg", l);
            acts_add(t, ACT_FLOAT, ACT_FFN, N * FS, ACT_FIELD(a, su), "blocks.%d.su", l);
            acts_add(t, ACT_FLOAT, ACT_FFN, N * FS, ACT_FIELD(a, sh), "blocks.%d.sh", l);
        }
    } else {
        /* fg, fu, fh: the dense SwiGLU, gate, up, silu(gate) * up */
        acts_add(t, ACT_FLOAT, ACT_FFN, N * F, ACT_FIELD(a, fg), "blocks.%d.fg", l);
        acts_add(t, ACT_FLOAT, ACT_FFN, N * F, ACT_FIELD(a, fu), "blocks.%d.fu", l);
        acts_add(t, ACT_FLOAT, ACT_FFN, N * F, ACT_FIELD(a, fh), "blocks.%d.fh", l);
    }
}

/* scratch_entries: the backward scratch, one set reused by every block; the dense SwiGLU's
 * gradients only when a dense block exists, the MoE scratch only when an MoE block does */
static void scratch_entries(ActTable *t, const Config *c, const MoeSpec *spec, size_t N, int tp,
                            int first, int last, int n_moe, RunState *m) {
    /* this rank's heads, hidden channels and n = N / tp rows under tensor parallelism */
    const size_t C = (size_t)c->d_model, V = (size_t)c->vocab, F = (size_t)(c->d_ff / tp);
    const size_t FS = (size_t)c->num_shared * config_expert_hidden(c) / (size_t)tp;
    const size_t H = (size_t)(c->n_head / tp), Hkv = (size_t)(config_kv_heads(c) / tp);
    const size_t QW = H * config_head_dim(c), KW = Hkv * config_head_dim(c);
    const size_t VW = Hkv * config_value_dim(c), OW = H * config_value_dim(c);
    const size_t n = N / (size_t)tp;
    /* (N, C) gradients: the residual stream, resid_mid, a norm's input, a spare; then those of
     * q (N, QW), k (N, KW), v (N, VW) and atty (N, OW) */
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, n * C, ACT_FIELD(m, dresid), "scratch.dresid");
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, n * C, ACT_FIELD(m, dmid), "scratch.dmid");
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * C, ACT_FIELD(m, dln), "scratch.dln");
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * C, ACT_FIELD(m, dtmp), "scratch.dtmp");
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * QW, ACT_FIELD(m, dq), "scratch.dq");
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * KW, ACT_FIELD(m, dk), "scratch.dk");
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * VW, ACT_FIELD(m, dv), "scratch.dv");
    acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * OW, ACT_FIELD(m, datty), "scratch.datty");
    if (c->attention == MOE_ATTN_MLA) {
        /* latent attention: the heads' keys and values before assembly, the rotated parts of
         * the queries (one head after another) and of the shared key, and two latents' (H all
         * the heads: dist.tp does not split latent attention) */
        const size_t R = (size_t)c->mla_rope_dim;
        const size_t LAT =
            (size_t)(c->mla_q_rank > c->mla_kv_rank ? c->mla_q_rank : c->mla_kv_rank);
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * H * (c->mla_nope_dim + c->mla_v_dim),
                 ACT_FIELD(m, dkvb), "scratch.dkvb");
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * H * R, ACT_FIELD(m, drope), "scratch.drope");
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * R, ACT_FIELD(m, dkrope), "scratch.dkrope");
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * LAT, ACT_FIELD(m, dlat), "scratch.dlat");
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * LAT, ACT_FIELD(m, dlatn), "scratch.dlatn");
    }
    /* dfg, dfu, dfh: the dense SwiGLU's gradients, only when a dense block exists (among the
     * blocks [first, last) a pipeline stage holds) */
    if (n_moe < last - first) {
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * F, ACT_FIELD(m, dfg), "scratch.dfg");
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * F, ACT_FIELD(m, dfu), "scratch.dfu");
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * F, ACT_FIELD(m, dfh), "scratch.dfh");
    }
    if (last == c->n_layer)
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, n * V, ACT_FIELD(m, dlogits), "scratch.dlogits");
    if (c->mtp_depth > 0) { /* dmtp (N, C), dmtp_cat (N, 2 C): multi-token prediction's */
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * C, ACT_FIELD(m, dmtp), "scratch.dmtp");
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, 2 * N * C, ACT_FIELD(m, dmtp_cat), "scratch.dmtp_cat");
    }
    if (n_moe > 0) { /* MoeScratch, shared by the MoE blocks */
        moe_scratch_entries(t, "scratch.moe", spec, (int)n, m ? &m->moe_scratch : NULL);
        /* dsg, dsu, dsh: the shared experts' SwiGLU */
        if (FS > 0) {
            acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * FS, ACT_FIELD(m, dsg), "scratch.dsg");
            acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * FS, ACT_FIELD(m, dsu), "scratch.dsu");
            acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * FS, ACT_FIELD(m, dsh), "scratch.dsh");
        }
    }
}

/* mtp_entries: the multi-token prediction modules (model.mtp_depth), each its inputs, its block
 * (layer L + k - 1, of the last layer's kind) and its head over the Nk = B (T - k) positions
 * with a target; and the rows that put two (N, C) side by side (2 N ints) */
static void mtp_entries(ActTable *t, const Config *c, const MoeSpec *spec, int B, int T, int ep,
                        RunState *rs) {
    const size_t C = (size_t)c->d_model, V = (size_t)c->vocab, N = (size_t)B * T;
    acts_add(t, ACT_INT, ACT_INT_WORDS, 2 * N, ACT_FIELD(rs, mtp_cat), "mtp_cat");
    for (int k = 1; k <= c->mtp_depth; k++) {
        const int l = c->n_layer + k - 1;
        const size_t Nk = T > k ? (size_t)B * (T - k) : 0;
        MtpActs *a = rs ? &rs->mtp[k - 1] : NULL;
        /* tok (N), rows, tgt (Nk): the token k ahead, the positions with a target, theirs */
        acts_add(t, ACT_INT, ACT_INT_WORDS, N, ACT_FIELD(a, tok), "mtp.%d.tok", k);
        acts_add(t, ACT_INT, ACT_INT_WORDS, Nk, ACT_FIELD(a, rows), "mtp.%d.rows", k);
        acts_add(t, ACT_INT, ACT_INT_WORDS, Nk, ACT_FIELD(a, tgt), "mtp.%d.tgt", k);
        /* hn, emb, en (N, C) and their norms' 1 / rms (N); cat (N, 2 C); in (N, C) */
        acts_add(t, ACT_FLOAT, ACT_RESID, N * C, ACT_FIELD(a, hn), "mtp.%d.hn", k);
        acts_add(t, ACT_FLOAT, ACT_RESID, N, ACT_FIELD(a, rstd_h), "mtp.%d.rstd_h", k);
        acts_add(t, ACT_FLOAT, ACT_RESID, N * C, ACT_FIELD(a, emb), "mtp.%d.emb", k);
        acts_add(t, ACT_FLOAT, ACT_RESID, N * C, ACT_FIELD(a, en), "mtp.%d.en", k);
        acts_add(t, ACT_FLOAT, ACT_RESID, N, ACT_FIELD(a, rstd_e), "mtp.%d.rstd_e", k);
        acts_add(t, ACT_FLOAT, ACT_RESID, 2 * N * C, ACT_FIELD(a, cat), "mtp.%d.cat", k);
        acts_add(t, ACT_FLOAT, ACT_RESID, N * C, ACT_FIELD(a, in), "mtp.%d.in", k);
        BlockActs *b = rs ? &rs->blocks[l] : NULL;
        block_attn_entries(t, c, B, T, 1, l, b);
        block_ffn_entries(t, c, spec, ep, 1, N, l, b);
        /* out (N, C) the block's output; hc, lnc (Nk, C), rstdc (Nk), logits (Nk, V), losses */
        acts_add(t, ACT_FLOAT, ACT_RESID, N * C, ACT_FIELD(a, out), "mtp.%d.out", k);
        acts_add(t, ACT_FLOAT, ACT_HEAD, Nk * C, ACT_FIELD(a, hc), "mtp.%d.hc", k);
        acts_add(t, ACT_FLOAT, ACT_HEAD, Nk * C, ACT_FIELD(a, lnc), "mtp.%d.lnc", k);
        acts_add(t, ACT_FLOAT, ACT_HEAD, Nk, ACT_FIELD(a, rstdc), "mtp.%d.rstdc", k);
        acts_add(t, ACT_FLOAT, ACT_HEAD, Nk * V, ACT_FIELD(a, logits), "mtp.%d.logits", k);
        acts_add(t, ACT_FLOAT, ACT_HEAD, Nk, ACT_FIELD(a, losses), "mtp.%d.losses", k);
    }
}

/* tp_vocab_entries: the vocabulary split's buffers (tp_vocab.c; their meaning at RunState) */
static void tp_vocab_entries(ActTable *t, const Config *c, size_t N, int tp, RunState *rs) {
    const size_t P = (size_t)tp;
    acts_add(t, ACT_INT, ACT_INT_WORDS, N, ACT_FIELD(rs, tp_ids), "tp.ids");
    acts_add(t, ACT_INT, ACT_INT_WORDS, N, ACT_FIELD(rs, tp_rows), "tp.rows");
    acts_add(t, ACT_INT, ACT_INT_WORDS, N, ACT_FIELD(rs, tp_target), "tp.target");
    acts_add(t, ACT_INT, ACT_INT_WORDS, N, ACT_FIELD(rs, tp_holder), "tp.holder");
    acts_add(t, ACT_INT, ACT_INT_WORDS, N, ACT_FIELD(rs, tp_at), "tp.at");
    acts_add(t, ACT_INT, ACT_INT_WORDS, N, ACT_FIELD(rs, tp_pick), "tp.pick");
    acts_add(t, ACT_FLOAT, ACT_HEAD, P * N, ACT_FIELD(rs, tp_lse), "tp.lse");
    acts_add(t, ACT_FLOAT, ACT_HEAD, P * N, ACT_FIELD(rs, tp_loss), "tp.loss");
    acts_add(t, ACT_FLOAT, ACT_HEAD, P * N, ACT_FIELD(rs, tp_lse_t), "tp.lse_t");
    acts_add(t, ACT_FLOAT, ACT_HEAD, P * N, ACT_FIELD(rs, tp_share), "tp.share");
    acts_add(t, ACT_FLOAT, ACT_HEAD, N, ACT_FIELD(rs, tp_a), "tp.a");
    acts_add(t, ACT_FLOAT, ACT_HEAD, N, ACT_FIELD(rs, tp_b), "tp.b");
    acts_add(t, ACT_FLOAT, ACT_HEAD, N, ACT_FIELD(rs, tp_other), "tp.other");
    acts_add(t, ACT_FLOAT, ACT_HEAD, (size_t)c->vocab / P, ACT_FIELD(rs, tp_ones), "tp.ones");
}

void model_acts_table(ActTable *t, const Config *c, int B, int T, int ep, Model *m) {
    model_acts_table_stage(t, c, B, T, ep, m ? m->layer0 : 0, m ? m->layer1 : c->n_layer, m);
}

void model_acts_table_stage(ActTable *t, const Config *c, int B, int T, int ep, int first, int last,
                            Model *m) {
    const int L = c->n_layer;
    const size_t C = (size_t)c->d_model, V = (size_t)c->vocab;
    const size_t E = (size_t)c->num_experts, N = (size_t)B * T;
    MoeSpec spec; /* the spec model_init builds: the table sizes what the block uses */
    moe_spec_from_config(&spec, c, T);
    int n_moe = 0, moe_here = 0; /* the model's MoE blocks, and those of the stage */
    for (int l = 0; l < L; l++) n_moe += config_is_moe_layer(c, l);
    for (int l = first; l < last; l++) moe_here += config_is_moe_layer(c, l);
    RunState *rs = m ? &m->state : NULL; /* the buffers are the run state's, but router_bias */
    /* tensor parallelism (tp.h): the model's grid, or for the memory formula the config's; the
     * stream, the head and the loss hold n = N / tp rows */
    const int tp = m ? (m->dist ? m->dist->tp : 1) : (c->tp > 0 ? c->tp : 1);
    const size_t n = N / (size_t)tp;
    /* a pipeline stage (pipe.h) holds the blocks [first, last), the stream into and out of
     * them, the embedding's token ids with the first and the head with the last */
    const int head = last == L;

    /* ---- activations kept from forward for backward ------------------------------------- */
    /* token ids, 4-byte ints (the targets stay for the loss's backward) */
    if (first == 0) acts_add(t, ACT_INT, ACT_INT_WORDS, n, ACT_FIELD(rs, inputs), "inputs");
    if (head) acts_add(t, ACT_INT, ACT_INT_WORDS, n, ACT_FIELD(rs, targets), "targets");
    /* resid[0..L]: the residual stream, the embedding output and every block output */
    for (int l = first; l <= last; l++)
        acts_add(t, ACT_FLOAT, ACT_RESID, n * C, ACT_FIELD(rs, resid[l]), "resid.%d", l);

    for (int l = first; l < last; l++) {
        BlockActs *a = rs ? &rs->blocks[l] : NULL;
        block_attn_entries(t, c, B, T, tp, l, a);
        block_ffn_entries(t, c, &spec, ep, tp, N, l, a);
    }
    /* router_bias (n_moe, E): the aux-free biases, Model state kept next to the blocks (no
     * gradient, no moments; in checkpoints), counted with the MoE blocks' activations; every
     * stage holds all of them (each updates them from the whole model's counts) */
    if (n_moe > 0)
        acts_add(t, ACT_FLOAT, ACT_FFN, (size_t)n_moe * E, ACT_FIELD(m, router_bias),
                 "router_bias");

    /* the head: final rmsnorm, logits (N, V) (probabilities after the loss), per-token loss */
    /* (the vocabulary split: lnf's rows gathered, logits (N, V / tp), as many floats) */
    if (head) {
        acts_add(t, ACT_FLOAT, ACT_HEAD, (tp > 1 ? N : n) * C, ACT_FIELD(rs, lnf), "lnf");
        acts_add(t, ACT_FLOAT, ACT_HEAD, n, ACT_FIELD(rs, rstdf), "rstdf");
        acts_add(t, ACT_FLOAT, ACT_HEAD, n * V, ACT_FIELD(rs, logits), "logits");
        acts_add(t, ACT_FLOAT, ACT_HEAD, n, ACT_FIELD(rs, losses), "losses");
    }
    if (c->mtp_depth > 0) mtp_entries(t, c, &spec, B, T, ep, rs);

    /* ---- backward scratch: one set, reused by every block ------------------------------- */
    scratch_entries(t, c, &spec, N, tp, first, last, moe_here, rs);
    /* tensor parallelism: a gradient's gathered rows, a row-parallel product's partial sum */
    if (tp > 1) {
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * C, ACT_FIELD(rs, tp_gath), "scratch.tp_gath");
        acts_add(t, ACT_FLOAT, ACT_SCRATCH, N * C, ACT_FIELD(rs, tp_part), "scratch.tp_part");
        tp_vocab_entries(t, c, N, tp, rs);
    }
}
