/*
 * plan_presets.c: published models, machines and runs as `moe plan` settings. Each preset is
 * a line of key=value settings (plan_keys.c), so `moe plan --presets` shows exactly what it
 * sets; `@kind:name` pulls in another preset. The published parameter counts are checked by
 * tests/test_plan.c against what plan_count makes of the shapes.
 *
 * The shapes are the models' released configurations; the machines' numbers are the vendors'
 * dense (not "with sparsity") peaks and their stated bandwidths; a run's layout, batch and
 * result are its authors'. Where a number is an assumption, the preset says so.
 */
#include "plan/plan.h"

/* the sizes every DeepSeek-V3-shaped model shares: latent attention, 2048-wide experts */
#define DSV3_SHAPE                                                                                 \
    "model.d_model=7168 model.n_layer=61 model.attention=mla mla.q_rank=1536 mla.kv_rank=512 "     \
    "mla.rope_dim=64 mla.nope_dim=128 mla.v_dim=128 model.d_ff=18432 moe.d_expert=2048 "           \
    "moe.num_shared=1 moe.top_k=8 model.seq_len=4096"

/* a DGX-class node of eight Hopper GPUs: the dense bf16 peak, NVLink 4 through NVSwitch (900
 * GB/s both ways), a 400 Gb/s network adapter a GPU */
#define HOPPER_NODE                                                                                \
    "cluster.gpus_per_node=8 cluster.peak_fp32_tflops=67 cluster.peak_bf16_tflops=989 "            \
    "cluster.peak_fp8_tflops=1979 cluster.efficiency=0.7 "                                         \
    "cluster.intra_gbs=450 cluster.inter_gbs=50"

const PlanPreset PLAN_PRESETS[] = {
    /* ---- models ---------------------------------------------------------------------- */
    {"model", "mixtral-8x7b", "Mixtral 8x7B: 8 experts, top-2, grouped-query attention",
     "model.vocab=32000 model.d_model=4096 model.n_layer=32 model.n_head=32 model.kv_heads=8 "
     "model.head_dim=128 moe.num_experts=8 moe.top_k=2 moe.d_expert=14336 model.seq_len=4096",
     "mistralai/Mixtral-8x7B-v0.1 config.json; \"46.7B total parameters but only uses 12.9B "
     "parameters per token\" (mistral.ai/news/mixtral-of-experts)",
     46.7e9, 12.9e9, 0.1e9, 1, 1, 0, 0, 0, 0},
    {"model", "deepseek-v3", "DeepSeek-V3: 256 experts and 1 shared, top-8, latent attention",
     "model.vocab=129280 model.n_head=128 moe.num_experts=256 moe.first_dense=3 " DSV3_SHAPE,
     "deepseek-ai/DeepSeek-V3 config.json; \"671B total parameters, of which 37B are activated "
     "for each token\" (arXiv 2412.19437, 4.2; the multi-token-prediction module is apart)",
     671e9, 37e9, 1e9, 0, 1, 0, 0, 0, 0},
    {"model", "kimi-k2", "Kimi K2, a 1T-class MoE: 384 experts and 1 shared, top-8",
     "model.vocab=163840 model.n_head=64 moe.num_experts=384 moe.first_dense=1 " DSV3_SHAPE,
     "the Kimi K2 report (arXiv 2507.20534): 1.04 trillion total parameters; MoonshotAI/Kimi-K2 "
     "README: \"32 billion activated parameters\" (and \"1 trillion total\", rounded)",
     1.04e12, 32e9, 0.01e12, 0, 0, 0, 0, 0, 0},
    {"model", "olmoe-1b-7b", "OLMoE-1B-7B: 64 experts, top-8, norms on queries and keys",
     "model.vocab=50304 model.d_model=2048 model.n_layer=16 model.n_head=16 model.qk_norm=full "
     "moe.num_experts=64 moe.top_k=8 moe.d_expert=1024 model.seq_len=4096",
     "allenai/OLMoE-1B-7B-0924 config.json; \"6.9B total parameters, of which only 1.3B are "
     "activated for each input token\" (arXiv 2409.02060)",
     6.9e9, 1.3e9, 0.1e9, 1, 1, 0, 0, 0, 0},
    {"model", "qwen3-30b-a3b", "Qwen3-30B-A3B: 128 experts, top-8, 4 key-value heads",
     "model.vocab=151936 model.d_model=2048 model.n_layer=48 model.n_head=32 model.kv_heads=4 "
     "model.head_dim=128 model.qk_norm=head moe.num_experts=128 moe.top_k=8 moe.d_expert=768 "
     "model.seq_len=4096",
     "Qwen/Qwen3-30B-A3B model card: \"30.5B in total and 3.3B activated\"", 30.5e9, 3.3e9, 0.1e9,
     1, 1, 0, 0, 0, 0},
    {"model", "qwen3-235b-a22b", "Qwen3-235B-A22B: 128 experts, top-8, 4 key-value heads",
     "model.vocab=151936 model.d_model=4096 model.n_layer=94 model.n_head=64 model.kv_heads=4 "
     "model.head_dim=128 model.qk_norm=head moe.num_experts=128 moe.top_k=8 moe.d_expert=1536 "
     "model.seq_len=4096",
     "Qwen/Qwen3-235B-A22B model card: 235B in total, 22B activated", 235e9, 22e9, 1e9, 1, 1, 0, 0,
     0, 0},
    {"model", "pangu-ultra-moe",
     "Pangu Ultra MoE: 256 experts and 1 shared, top-8, latent attention",
     "model.vocab=153600 model.d_model=7680 model.n_layer=61 model.n_head=128 model.attention=mla "
     "mla.q_rank=1536 mla.kv_rank=512 mla.rope_dim=64 mla.nope_dim=128 mla.v_dim=128 "
     "model.d_ff=18432 moe.num_experts=256 moe.num_shared=1 moe.top_k=8 moe.d_expert=2048 "
     "moe.first_dense=3 model.norm=dssn model.seq_len=4096",
     "openPangu-Ultra-MoE-718B configuration; \"718B total, 39B activated\" (its README)", 718e9,
     39e9, 1e9, 0, 0, 0, 0, 0, 0},
    /* ---- machines ----------------------------------------------------------------------- */
    {"cluster", "h100", "nodes of 8 H100 SXM (80 GB, 3.35 TB/s)",
     HOPPER_NODE " cluster.gpus=8 cluster.memory_gb=80 cluster.hbm_tbs=3.35",
     "NVIDIA H100 datasheet: 989 TFLOP/s dense bf16, 80 GB at 3.35 TB/s, NVLink 900 GB/s; "
     "efficiency 0.7 is this book's assumption",
     0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"cluster", "h200", "nodes of 8 H200 SXM (141 GB, 4.8 TB/s)",
     HOPPER_NODE " cluster.gpus=8 cluster.memory_gb=141 cluster.hbm_tbs=4.8",
     "NVIDIA H200 datasheet: the H100's compute, 141 GB at 4.8 TB/s", 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"cluster", "h800", "nodes of 8 H800 (NVLink cut to 160 GB/s a GPU in practice)",
     HOPPER_NODE " cluster.gpus=8 cluster.memory_gb=80 cluster.hbm_tbs=3.35 cluster.intra_gbs=160",
     "DeepSeek-V3 report 3.2.2: \"NVLink offers a bandwidth of 160 GB/s, roughly 3.2 times that "
     "of IB (50 GB/s)\"",
     0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"cluster", "gh200", "JUPITER's nodes: 4 GH200 (96 GB, 4 TB/s), 150 GB/s between GPU pairs",
     "cluster.gpus_per_node=4 cluster.gpus=4 cluster.memory_gb=96 cluster.hbm_tbs=4 "
     "cluster.peak_fp32_tflops=67 cluster.peak_bf16_tflops=989 cluster.peak_fp8_tflops=1979 "
     "cluster.efficiency=0.7 cluster.intra_gbs=150 cluster.inter_gbs=25",
     "Juelich Supercomputing Centre, JUPITER configuration: 4 GH200 a node, 96 GB HBM3 at 4 TB/s, "
     "150 GB/s a direction between pairs of GPUs, 4 InfiniBand NDR200 a node; the Hopper peak",
     0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"cluster", "laptop",
     "a laptop CPU: 16 GB, fp32 products at 0.5 TFLOP/s; up to 8 processes share it",
     "cluster.gpus=1 cluster.gpus_per_node=8 cluster.memory_gb=16 cluster.peak_fp32_tflops=0.5 "
     "cluster.efficiency=0.6 cluster.hbm_tbs=0.05 cluster.intra_gbs=10 cluster.inter_gbs=1",
     "a typical 8-core laptop (an assumption: measure yours with moe bench)", 0, 0, 0, 0, 0, 0, 0,
     0, 0},
    /* ---- published runs: model, machine, layout, batch and results as their authors state
     * them; the results are the last three numbers (tokens/s a GPU, TFLOP/s a GPU, s a step) */
    {"run", "deepseek-v3", "DeepSeek-V3's pre-training: 2048 H800, pp 16, ep 64, ZeRO-1",
     "@model:deepseek-v3 @cluster:h800 cluster.gpus=2048 layout.pp=16 layout.ep=64 "
     "layout.micro_batch=1 layout.recompute=selective train.global_batch=15360 train.zero=1 "
     "train.node_limit=4 train.overlap_ep=1 train.a2a_bytes=1.5 train.act_bytes=1 "
     "train.moment_bytes=2",
     "arXiv 2412.19437 3.2-3.3, 4.2: 16-way PP (DualPipe, which hides the exchange), 64-way EP "
     "over 8 nodes, ZeRO-1, batch 15360 x 4K, RMSNorm and MLA up-projections recomputed, "
     "cached activations in FP8 and AdamW moments in BF16, FP8 dispatch and BF16 combine, at "
     "most 4 nodes a token; \"180K H800 GPU hours\" a trillion tokens: 1e12 / (180e3 x 3600) "
     "= 1543 tokens/s a GPU",
     0, 0, 0, 0, 0, 1543, 0, 0, 0},
    {"run", "megatron-deepseek-v3",
     "Megatron-Core: DeepSeek-V3 on 1024 H100, tp 2 pp 8 vpp 4 ep 64",
     "@model:deepseek-v3 @cluster:h100 cluster.gpus=1024 layout.tp=2 layout.pp=8 layout.vpp=4 "
     "layout.ep=64 layout.micro_batch=1 layout.recompute=experts train.global_batch=8192 "
     "train.zero=1 train.overlap_ep=1",
     "NVIDIA Megatron-Bridge performance summary (25.09, DGX-H100): GBS 8192, MBS 1, seq 4096, "
     "TP 2 PP 8 VP 4 EP 64; 1297 tokens/s a GPU, 338 TFLOP/s a GPU (FP8); Megatron-MoE-ModelZoo "
     "run_deepseek_v3_h100.sh: MLA up-projections and MLP recomputed, exchange overlapped",
     0, 0, 0, 0, 0, 1297, 338, 0, 0},
    {"run", "megatron-mixtral-8x7b", "Megatron-Core: Mixtral 8x7B on 64 H100, pp 4 vpp 8 ep 8",
     "@model:mixtral-8x7b @cluster:h100 cluster.gpus=64 layout.pp=4 layout.vpp=8 layout.ep=8 "
     "layout.micro_batch=1 train.global_batch=256 train.zero=1",
     "NVIDIA Megatron-LM, megatron/core/transformer/moe/README.md: Mixtral 8x7B, bf16, 64 H100, "
     "seq 4096, TP1 EP8 PP4 VP8 MBS1 GBS256; 468 TFLOP/s a GPU",
     0, 0, 0, 0, 0, 0, 468, 0, 0},
    /* Qwen3-235B on 256 H100, four layouts measured side by side (Megatron-MoE-ModelZoo,
     * best_practice/qwen3: bf16, seq 4096, GBS 2048) */
    {"run", "qwen3-235b-ep32", "Qwen3-235B on 256 H100: tp 2 pp 8 vpp 4 ep 32 across nodes",
     "@model:qwen3-235b-a22b @cluster:h100 cluster.gpus=256 layout.tp=2 layout.pp=8 "
     "layout.vpp=4 layout.ep=32 layout.micro_batch=1 layout.recompute=selective "
     "train.global_batch=2048 train.zero=1",
     "Megatron-MoE-ModelZoo best_practice/qwen3/readme.md: TP2 EP32 PP8 VPP4 DP16 MBS1, norms "
     "and activations recomputed, DeepEP: 19.7 s a step, 245 TFLOP/s a GPU",
     0, 0, 0, 0, 0, 0, 245, 19.7, 0},
    {"run", "qwen3-235b-fsdp", "Qwen3-235B on 256 H100: tp 2 ep 8 in a node, no pipeline, ZeRO-3",
     "@model:qwen3-235b-a22b @cluster:h100 cluster.gpus=256 layout.tp=2 layout.ep=8 "
     "layout.micro_batch=4 layout.recompute=full train.global_batch=2048 train.zero=3",
     "Megatron-MoE-ModelZoo best_practice/qwen3/readme.md: intra-node EP with FSDP, TP2 EP8 "
     "PP1 DP128 MBS4, full recomputation: 17.6 s a step, 276 TFLOP/s a GPU",
     0, 0, 0, 0, 0, 0, 276, 17.6, 0},
    {"run", "qwen3-235b-pp32", "Qwen3-235B on 256 H100: tp 2 pp 32 vpp 3 ep 8",
     "@model:qwen3-235b-a22b @cluster:h100 cluster.gpus=256 layout.tp=2 layout.pp=32 "
     "layout.vpp=3 layout.ep=8 layout.micro_batch=1 layout.recompute=selective "
     "train.global_batch=2048 train.zero=1",
     "Megatron-MoE-ModelZoo best_practice/qwen3/readme.md: all-to-all dispatcher, TP2 EP8 PP32 "
     "VPP3 DP4 MBS1, norms and activations recomputed: 24.2 s a step, 200 TFLOP/s a GPU",
     0, 0, 0, 0, 0, 0, 200, 24.2, 0},
    {"run", "qwen3-235b-tp4", "Qwen3-235B on 256 H100: tp 4 pp 8 vpp 4 ep 8",
     "@model:qwen3-235b-a22b @cluster:h100 cluster.gpus=256 layout.tp=4 layout.pp=8 "
     "layout.vpp=4 layout.ep=8 layout.micro_batch=1 layout.recompute=none "
     "train.global_batch=2048 train.zero=1",
     "Megatron-MoE-ModelZoo best_practice/qwen3/readme.md: DeepEP, TP4 EP8 PP8 VPP4 DP8 MBS1, "
     "no recomputation: 29.0 s a step, 167 TFLOP/s a GPU",
     0, 0, 0, 0, 0, 0, 167, 29.0, 0},
    {"run", "kimi-k2", "Kimi K2's states: pp 16, ep 16 (a 256-GPU model-parallel group)",
     "@model:kimi-k2 @cluster:h800 cluster.gpus=256 layout.pp=16 layout.vpp=2 layout.ep=16 "
     "layout.micro_batch=1 layout.recompute=selective train.global_batch=16384 train.zero=1",
     "arXiv 2507.20534 2.4: 16-way PP with virtual stages, 16-way EP, ZeRO-1; \"storing the "
     "model parameters in BF16 and their gradient accumulation buffer in FP32 requires "
     "approximately 6 TB of GPU memory, distributed over a model-parallel group of 256 GPUs\"",
     0, 0, 0, 0, 0, 0, 0, 0, 30},
};
const int PLAN_N_PRESETS = (int)(sizeof PLAN_PRESETS / sizeof PLAN_PRESETS[0]);
