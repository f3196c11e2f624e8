"""What a transformer step costs at least on this machine: its FLOPs and weight bytes, and the machine's own rates.

A forward over n real positions of a decoder whose linear layers hold W weights costs 2 n W FLOPs in its linears,
plus 4 L d_attn per (query, key) pair in attention (Q K^T and A V, L layers), plus 2 d V per position the LM head
scores. A decode step at a small batch is bound by memory instead: every weight is read once, so its time is at
least (weight bytes) / (read bandwidth). The floor of a call is the larger of the two:

    floor = max(flops / gemm_rate(M), bytes / bandwidth)

with ``gemm_rate(M)`` measured here, on the model's own linear shapes at M rows, and ``bandwidth`` measured by
reading a buffer larger than the last-level cache. Backward through frozen weights (LoRA) costs the forward's
linear FLOPs once more (the input gradients), a full fine-tune twice (inputs and weights); attention's backward
twice its forward. An AdamW step reads a parameter, its gradient and both moments and writes three: 7 x 4 bytes
per trainable fp32 parameter.

    dims = Dims.of(model)                       # the decoder's linear weights, the head, the attention width
    rates = Rates.measure(dims, rows=(16, 1024))
    rates.floor(dims.linear_flops(1024) + dims.attention_flops(1024 * 200), rows=1024)    # seconds
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

__all__ = ["Dims", "Rates", "linear_shapes", "adamw_bytes", "backward_flops", "BANDWIDTH_BYTES"]

BANDWIDTH_BYTES = 256 * 2 ** 20
"""bytes read to measure the memory bandwidth: well above any desktop's last-level cache"""


def linear_shapes(module: torch.nn.Module) -> list:
    """(in, out) of every linear map inside ``module``: ``nn.Linear`` and transformers' ``Conv1D`` (GPT-2),
    LoRA's adapters included (they are layers the step runs). Example: a block with q (576 -> 576) and
    up (576 -> 1536) -> [(576, 576), (576, 1536)]."""
    shapes = []
    for m in module.modules():
        if isinstance(m, torch.nn.Linear):
            shapes.append((m.in_features, m.out_features))
        elif type(m).__name__ == "Conv1D" and hasattr(m, "nf"):                    # transformers' GPT-2 layer
            shapes.append((m.weight.shape[0], m.nf))
    return shapes


@dataclass
class Dims:
    """A decoder's sizes for its FLOPs and bytes. Example: SmolLM2-135M: 30 layers, d_attn 576, ~106.2 M decoder
    linear weights, a 49152 x 576 head, 4-byte weights."""

    layers: int
    """number of transformer blocks"""
    d_attn: int
    """heads x head dimension: the width of Q, K^T products (with grouped KV, the query's width)"""
    linear: int
    """weights in all the decoder's linear layers (the LM head not included)"""
    head: int
    """weights of the LM head (vocabulary x model width)"""
    d_head_in: int
    """the LM head's input width"""
    bytes_per_weight: int = 4
    """element size of the weights (fp32: 4)"""
    layer_shapes: list = field(default_factory=list)
    """(in, out) of one block's linear layers: the shapes ``Rates`` times"""

    @classmethod
    def of(cls, model) -> "Dims":
        """The sizes of a transformers causal LM (``get_decoder()``, ``get_output_embeddings()``, ``config``)."""
        cfg, dec = model.config, model.get_decoder()
        layers = int(getattr(cfg, "num_hidden_layers", None) or cfg.n_layer)
        heads = int(getattr(cfg, "num_attention_heads", None) or cfg.n_head)
        width = int(getattr(cfg, "hidden_size", None) or cfg.n_embd)
        head_dim = int(getattr(cfg, "head_dim", None) or width // heads)
        shapes = linear_shapes(dec)
        w = model.get_output_embeddings().weight
        return cls(layers=layers, d_attn=heads * head_dim, linear=sum(i * o for i, o in shapes), head=w.numel(),
                   d_head_in=w.shape[1], bytes_per_weight=w.element_size(),
                   layer_shapes=shapes[:len(shapes) // layers] if layers and len(shapes) % layers == 0 else shapes)

    @property
    def weight_bytes(self) -> int:
        """bytes a decode step reads: every linear weight and the head"""
        return (self.linear + self.head) * self.bytes_per_weight

    def linear_flops(self, n: int) -> float:
        """2 n W: the decoder's linears on ``n`` real positions. Example: W = 10, n = 3 -> 60."""
        return 2.0 * n * self.linear

    def attention_flops(self, pairs: int) -> float:
        """4 L d_attn per (query, key) pair a causal pass visits. Example: L 2, d_attn 4, 3 pairs -> 96."""
        return 4.0 * self.layers * self.d_attn * pairs

    def head_flops(self, n: int) -> float:
        """2 V d per scored position. Example: a 10 x 4 head on 2 positions -> 160."""
        return 2.0 * n * self.head


def backward_flops(linear: float, attention: float, head: float, full: bool) -> float:
    """The backward's least FLOPs, given the forward's: input gradients through every linear (x1), and the weight
    gradients too when every weight trains (``full``: x2); attention x2. Example: 10, 1, 2, LoRA -> 14; full -> 26."""
    k = 2.0 if full else 1.0
    return k * (linear + head) + 2.0 * attention


def adamw_bytes(trainable: int) -> int:
    """Bytes an AdamW step moves: read weight, gradient, two moments; write weight and moments (fp32).
    Example: 1000 parameters -> 28000."""
    return 7 * 4 * int(trainable)


def _best(fn, reps: int) -> float:
    fn()                                                          # warm: first-touch pages, kernel selection
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@dataclass
class Rates:
    """This machine's measured rates: GEMM FLOPS by row count on a model's linear shapes, read bandwidth."""

    gemm: dict
    """rows M -> FLOPS of one block's linear layers at M rows (fp32, the threads torch has now)"""
    bandwidth: float
    """bytes per second of reading a ``BANDWIDTH_BYTES`` buffer (a sum over it)"""

    @classmethod
    def measure(cls, dims: Dims, rows=(16, 256, 1024, 4096), reps: int = 3, dtype=torch.float32) -> "Rates":
        """Time ``dims.layer_shapes`` at each row count in ``rows`` (best of ``reps``), and the read bandwidth."""
        gemm = {}
        with torch.no_grad():
            ws = [torch.randn(o, i, dtype=dtype) for i, o in dims.layer_shapes]
            for m in sorted(set(int(r) for r in rows)):
                xs = {i: torch.randn(m, i, dtype=dtype) for i, _ in dims.layer_shapes}
                t = _best(lambda: [F.linear(xs[w.shape[1]], w) for w in ws], reps)
                gemm[m] = 2.0 * m * sum(i * o for i, o in dims.layer_shapes) / t
            buf = torch.ones(BANDWIDTH_BYTES // 4)
            bw = BANDWIDTH_BYTES / _best(lambda: buf.sum(), reps)
        return cls(gemm=gemm, bandwidth=bw)

    def rate(self, rows: int) -> float:
        """The GEMM rate at the measured row count nearest ``rows`` on a log scale. Example: measured at 16 and
        1024, rows 100 -> the rate at 16 (log distance 1.8 against 2.3)."""
        return self.gemm[min(self.gemm, key=lambda m: abs(math.log(max(rows, 1) / m)))]

    def floor(self, flops: float, rows: int, bytes_read: float = 0.0) -> float:
        """Least seconds of a call: max(flops / rate(rows), bytes_read / bandwidth)."""
        return max(flops / self.rate(rows), bytes_read / self.bandwidth)
