#!/usr/bin/env python3
"""torch_peer.py: the CPU peer of `moe bench`: the same models, trained the same way, in
PyTorch 2.x eager mode, timed the same way.

A developer tool, not a dependency of the build or the tests: `make bench-peer` installs
PyTorch into build/venv-torch and plots/bench/peer.sh runs this script beside `moe bench`,
interleaved, so the two are measured side by side on the same machine and threads.

The models are `moe bench`'s reference configs (src/README.md, "Benchmark"): a byte-level
decoder, B x T = 8 x 256, RMSNorm, RoPE, causal attention (torch's scaled_dot_product_attention,
the eager path a PyTorch user would take), SwiGLU feed-forwards; an MoE block is a softmax
router, top-2 with renormalised weights, the Switch aux loss and the z-loss, and its experts
run as a loop over the experts on the tokens each one got (index_select, SwiGLU, index_add),
as the frameworks' CPU paths do. A step is zero_grad, forward, backward, global-norm clipping
and AdamW, on random tokens.

    python3 plots/bench/torch_peer.py [--config NAME]... [--steps N] [--warmup N] [--threads N]
    python3 plots/bench/torch_peer.py --version

prints one line per config: name, median step in ms, tokens per second.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

V = 256
CONFIGS = {  # name: d_model, n_layer, n_head, d_ff, num_experts, d_expert, B, T
    "tiny": (256, 4, 4, 1024, 8, 512, 8, 256),
    "tiny-dense": (256, 4, 4, 1024, 0, 0, 8, 256),
    "small": (512, 4, 8, 2048, 8, 1024, 8, 256),
    "small-dense": (512, 4, 8, 2048, 0, 0, 8, 256),
    "tiny-e64": (256, 4, 4, 1024, 64, 512, 8, 256),
    "test": (32, 2, 2, 64, 4, 32, 2, 32),
}


class RMSNorm(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(c))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.w


def rope(x, cos, sin):
    # x (B, H, T, D): pairs (2i, 2i+1) rotated by t * theta^(-2i/D)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class SwiGLU(torch.nn.Module):
    def __init__(self, c, f):
        super().__init__()
        self.g = torch.nn.Linear(c, f, bias=False)
        self.u = torch.nn.Linear(c, f, bias=False)
        self.d = torch.nn.Linear(f, c, bias=False)

    def forward(self, x):
        return self.d(F.silu(self.g(x)) * self.u(x))


class MoE(torch.nn.Module):
    def __init__(self, c, e, f, k=2):
        super().__init__()
        self.router = torch.nn.Linear(c, e, bias=False)
        self.experts = torch.nn.ModuleList(SwiGLU(c, f) for _ in range(e))
        self.e, self.k = e, k

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        logits = self.router(x)
        probs = logits.softmax(-1)
        w, idx = probs.topk(self.k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        # Switch aux loss (f counts choices: no gradient) and the z-loss
        f = torch.bincount(idx.flatten(), minlength=self.e).float() / idx.numel()
        aux = self.e * (f * probs.mean(0)).sum()
        z = torch.logsumexp(logits, -1).pow(2).mean()
        y = torch.zeros_like(x)
        flat_idx, flat_w = idx.flatten(), w.flatten()
        token = torch.arange(x.shape[0]).repeat_interleave(self.k)
        for e, expert in enumerate(self.experts):
            sel = (flat_idx == e).nonzero(as_tuple=True)[0]
            if sel.numel() == 0:
                continue
            t = token[sel]
            y.index_add_(0, t, expert(x.index_select(0, t)) * flat_w[sel, None])
        return y.reshape(shape), aux, z


class Block(torch.nn.Module):
    def __init__(self, c, h, d_ff, e, f):
        super().__init__()
        self.n1, self.n2 = RMSNorm(c), RMSNorm(c)
        self.qkv = torch.nn.Linear(c, 3 * c, bias=False)
        self.o = torch.nn.Linear(c, c, bias=False)
        self.h = h
        self.ffn = MoE(c, e, f) if e > 0 else SwiGLU(c, d_ff)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(self.n1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, C))
        out = self.ffn(self.n2(x))
        if isinstance(out, tuple):
            y, aux, z = out
            return x + y, aux, z
        return x + out, None, None


class LM(torch.nn.Module):
    def __init__(self, c, layers, h, d_ff, e, f, T):
        super().__init__()
        self.emb = torch.nn.Embedding(V, c)
        self.blocks = torch.nn.ModuleList(Block(c, h, d_ff, e, f) for _ in range(layers))
        self.norm = RMSNorm(c)
        self.head = torch.nn.Linear(c, V, bias=False)
        d = c // h
        ang = torch.arange(T)[:, None] * 10000.0 ** (-torch.arange(0, d, 2) / d)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, tokens, targets):
        x = self.emb(tokens)
        aux_sum, z_sum = 0.0, 0.0
        for b in self.blocks:
            x, aux, z = b(x, self.cos, self.sin)
            if aux is not None:
                aux_sum, z_sum = aux_sum + aux, z_sum + z
        loss = F.cross_entropy(self.head(self.norm(x)).view(-1, V), targets.view(-1))
        return loss + 0.01 * aux_sum + 0.001 * z_sum


def bench(name, steps, warmup):
    c, layers, h, d_ff, e, f, B, T = CONFIGS[name]
    torch.manual_seed(1)
    model = LM(c, layers, h, d_ff, e, f, T)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    times = []
    for s in range(warmup + steps):
        tokens = torch.randint(0, V, (B, T))
        targets = torch.randint(0, V, (B, T))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model(tokens, targets).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if s >= warmup:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    return step, B * T / step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", choices=sorted(CONFIGS))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--version", action="store_true", help="print torch's version and stop")
    a = ap.parse_args()
    if a.version:
        print(f"PyTorch {torch.__version__}")
        return
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"median of {a.steps} steps after {a.warmup}")
    print(f"{'config':<12} {'step ms':>9} {'tokens/s':>9}")
    for name in a.config or ["tiny", "tiny-dense", "small", "small-dense"]:
        step, tps = bench(name, a.steps, a.warmup)
        print(f"{name:<12} {1e3 * step:9.1f} {tps:9.0f}", flush=True)


if __name__ == "__main__":
    main()
