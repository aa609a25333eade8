"""compare.py: moe.c's model against Hugging Face transformers on the same weights and tokens.

A developer tool (plots/hf/compare.sh runs it in a virtual environment with torch and
transformers); never a dependency of the build or the tests.

  python compare.py load DIR LOGITS.safetensors NAME   transformers loads DIR (written by
      moe export --format hf) and computes the logits and loss of the tokens in LOGITS (written
      by moe eval --logits); prints one CSV row: NAME, the largest absolute and relative logit
      differences, the relative norm of the difference, both losses and their relative
      difference, and whether the folder's tokenizer turns text into its bytes
  python compare.py make DIR KIND   a small random model made by transformers (KIND mixtral,
      qwen3_moe, olmoe, deepseek_v3 or llama) saved to DIR, for moe import --format hf
  python compare.py check DIR LOGITS.safetensors NAME   the same comparison as load, for a model
      transformers made (LOGITS from moe eval --logits of its import)
"""
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


def row(name, hf_logits, moe_logits, targets, moe_loss, tokenizer_ok):
    diff = (hf_logits - moe_logits).abs()
    rel = diff / moe_logits.abs().clamp_min(1e-3)
    norm = (hf_logits - moe_logits).norm() / moe_logits.norm()
    V = hf_logits.shape[-1]
    hf_loss = F.cross_entropy(hf_logits.reshape(-1, V), targets.reshape(-1)).item()
    print("%s,%.3g,%.3g,%.3g,%.7f,%.7f,%.3g,%s" % (
        name, diff.max().item(), rel.max().item(), norm.item(), moe_loss, hf_loss,
        abs(hf_loss - moe_loss) / moe_loss, tokenizer_ok))


def compare(directory, logits_path, name):
    from transformers import AutoModelForCausalLM
    got = load_file(logits_path)
    tokens = got["tokens"].long()
    targets = got["targets"].long()
    with open(logits_path, "rb") as f:  # the loss is in the safetensors metadata
        import json, struct
        n = struct.unpack("<Q", f.read(8))[0]
        meta = json.loads(f.read(n))["__metadata__"]
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        hf_logits = model(input_ids=tokens).logits.float()
    # a folder made by transformers here has no tokenizer (and AutoTokenizer may find some
    # family's default one for it)
    tokenizer_ok = "n/a"
    try:
        from transformers import AutoTokenizer
        if not os.path.exists(os.path.join(directory, "tokenizer.json")):
            raise OSError("no tokenizer.json")
        tok = AutoTokenizer.from_pretrained(directory)
        text = "Der Hund, el perro: \u00e9t\u00e9 \u0434\u043e\u043c {code}\n"
        tokenizer_ok = str(tok(text)["input_ids"] == list(text.encode("utf-8"))
                           and tok.decode(list(text.encode("utf-8"))) == text).lower()
    except (OSError, ValueError):
        pass
    row(name, hf_logits, got["logits"], targets, float(meta["loss"]), tokenizer_ok)


def make(directory, kind):
    import transformers as tf
    torch.manual_seed(0)
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                  rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                  initializer_range=0.2)
    if kind == "mixtral":
        model = tf.MixtralForCausalLM(tf.MixtralConfig(num_local_experts=4, num_experts_per_tok=2,
                                                       **common))
    elif kind == "qwen3_moe":  # grouped heads of their own width, a dense first block, no renorm
        common.update(num_key_value_heads=2, head_dim=24, num_hidden_layers=3)
        model = tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, norm_topk_prob=False,
            mlp_only_layers=[0], decoder_sparse_step=1, **common))
    elif kind == "olmoe":
        common.update(num_key_value_heads=2, intermediate_size=48)
        model = tf.OlmoeForCausalLM(tf.OlmoeConfig(num_experts=4, num_experts_per_tok=2,
                                                   norm_topk_prob=True, **common))
    elif kind == "deepseek_v3":  # groups, a scale, a shared expert, a dense first block
        common.update(num_hidden_layers=3)
        model = tf.DeepseekV3ForCausalLM(tf.DeepseekV3Config(
            n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            n_shared_experts=1, first_k_dense_replace=1, n_group=4, topk_group=2,
            routed_scaling_factor=2.5, norm_topk_prob=True, q_lora_rank=24, kv_lora_rank=16,
            qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, rope_interleave=True,
            num_nextn_predict_layers=0, **common))
        with torch.no_grad():  # correction biases that change the choice (zeros at creation)
            for layer in model.model.layers[1:]:
                layer.mlp.gate.e_score_correction_bias.normal_(0.0, 0.1)
    else:
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**common))
    model.save_pretrained(directory, safe_serialization=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] in ("load", "check"):
        compare(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
