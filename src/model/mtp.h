/*
 * mtp.h: multi-token prediction (model.mtp_depth D, DeepSeek-V3's MTP modules), the part of a
 * training pass after the main trunk's last block. Module k takes h, the trunk's last output
 * (k = 1) or module k - 1's, and the embedding of the token k ahead; runs one block of the last
 * layer's kind (block L + k - 1 of the views and of RunState.blocks); and puts its norm and the
 * shared head on the positions whose target, k + 1 past the next token, lies in the window.
 * src/README.md, "One training step", has the arithmetic.
 *
 * model.c calls the modules at its seams: mtp_init once its buffers are allocated, mtp_forward
 * after the main head, mtp_backward before the main head's backward (RunState.dmtp then holds
 * the modules' gradient of the trunk's last output), and mtp_module_input for a draft
 * (model_mtp_draft). The modules run the trunk's blocks (block.h) and share its head (below).
 */
#ifndef MOE_MODEL_MTP_H
#define MOE_MODEL_MTP_H

#include "model/block.h"

/* The constant rows of multi-token prediction (RunState.mtp_cat) and, when the modules' blocks
 * are MoE blocks, the place their losses and routing records go; after the arena's allocation. */
void mtp_init(Model *m, int B, int T);

/* Module k's block input of N rows from h (N, C): the state's mtp[k - 1].in. */
void mtp_module_input(Model *m, int k, const float *h, int N);

/* The modules of a forward on B windows of T tokens, after the main head: run in a training
 * forward with targets (ctx->training), else none (their losses NAN, and 0 returned). Each
 * module's loss sum goes to the step record's slot; unless the step reads them at its end
 * (defer_reads: NAN returned), Model.state.mtp_loss and their part of the objective. */
float mtp_forward(Model *m, const int *inputs, const int *targets, int B, int T, const StepCtx *ctx,
                  int slot);

/* Their backward, after a forward that ran them (RunState.mtp_ran), before the main head's:
 * the modules' weights' gradients added, the shared head's and the embedding's added into theirs,
 * and dmtp (N, C) = their gradient of the trunk's last output. */
void mtp_backward(Model *m, float loss_scale, const StepCtx *ctx);

/* The head's (V, C) weights and gradient: its own tensor, or with model.tied the embedding's,
 * so that the head's weight gradient adds into tok_emb's, before the embedding's own in the
 * backward (the same order every step, on every backend). */
static inline const float *head_weights(const Model *m) {
    return m->cfg.tied ? m->w.tok_emb : m->w.head;
}
static inline float *head_grads(const Model *m) {
    return m->cfg.tied ? m->g.tok_emb : m->g.head;
}

#endif
