"""Accelerator peaks and analytic FLOP counts of the Qwen models, for rooflines and MFU.

Chips: the vendors' published per-chip figures (dense bf16 matmul peak; HBM capacity and
bandwidth):

| chip | HBM | bf16 peak | HBM bandwidth | source |
|---|---:|---:|---:|---|
| v4 | 32 GiB | 275 TFLOP/s | 1200 GB/s | cloud.google.com/tpu/docs/v4 |
| v5e | 16 GiB | 197 TFLOP/s | 819 GB/s | cloud.google.com/tpu/docs/v5e |
| v5p | 95 GiB | 459 TFLOP/s | 2765 GB/s | cloud.google.com/tpu/docs/v5p |
| v6e | 32 GiB | 918 TFLOP/s | 1638 GB/s | cloud.google.com/tpu/docs/v6e |
| H100 SXM | 80 GB | 989 TFLOP/s | 3.35 TB/s | NVIDIA H100 datasheet |
| H200 SXM | 141 GB | 989 TFLOP/s | 4.8 TB/s | NVIDIA H200 datasheet |

The Cloud TPU pages give v6e's bandwidth as 1638 GBps (not 1640) and write the v5e, v5p and
v6e capacities as "GB"; the capacities here are the GiB that `tpu.plan.CHIPS` plans with.
NVIDIA's datasheets print bf16 Tensor Core figures "with sparsity" (1979 TFLOP/s); the dense
figure is half. The PCIe and NVL variants of H100/H200 have lower peaks and are not listed.

FLOP counts: 2 per multiply-add, matmuls only (norms, rotary, softmax, activations and the
optimizer are elementwise work, a few percent at most of a Qwen layer's at the shapes trained
here, and left out). Exact for
every projection (full attention's q, k, v, o and output gate; the MLP's gate, up and down; the
Gated DeltaNet's qkv, z, b, a and out; the LM head) and for attention's scores and values given
the average number of keys a query sees; approximate for the Gated DeltaNet's recurrence (see
`_recurrence_flops`). The embedding lookup is a gather, no FLOPs.

Glossary: d model, h query heads, k kv heads, e head dim, f MLP width, v vocab; Gated
DeltaNet: c conv channels, hv value heads, dk key dim, dv value dim, C chunk length.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from models.qwen.config import QwenConfig
from models.qwen.deltanet import CHUNK

GiB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    """One accelerator chip's published peaks."""

    name: str
    hbm_bytes: int
    peak_flops: float  # dense bf16 FLOP/s
    hbm_bandwidth: float  # bytes/s
    topology_prefix: str | None  # the chip in JAX's TPU topology names ("v5e:2x2"); None: GPU


CHIPS: Mapping[str, Chip] = {
    "v4": Chip("TPU v4", 32 * GiB, 275e12, 1200e9, "v4"),
    "v5e": Chip("TPU v5e", 16 * GiB, 197e12, 819e9, "v5e"),
    "v5p": Chip("TPU v5p", 95 * GiB, 459e12, 2765e9, "v5p"),
    "v6e": Chip("TPU v6e", 32 * GiB, 918e12, 1638e9, "v6e"),
    "h100": Chip("NVIDIA H100 SXM", 80 * 10**9, 989e12, 3.35e12, None),
    "h200": Chip("NVIDIA H200 SXM", 141 * 10**9, 989e12, 4.8e12, None),
}

# `jax.Device.device_kind` -> key of CHIPS. The PCIe and NVL GPUs report other names.
DEVICE_KINDS: Mapping[str, str] = {
    "TPU v4": "v4",
    "TPU v5 lite": "v5e", "TPU v5e": "v5e",
    "TPU v5": "v5p", "TPU v5p": "v5p",
    "TPU v6 lite": "v6e", "TPU v6e": "v6e",
    "NVIDIA H100 80GB HBM3": "h100",
    "NVIDIA H200": "h200",
}


def detect(device_kind: str) -> Chip | None:
    """The chip of a `jax.Device.device_kind`, or None when it is not one of `CHIPS` (CPUs,
    other GPUs)."""
    key = DEVICE_KINDS.get(device_kind.strip())
    return None if key is None else CHIPS[key]


def _attention_layer_flops(cfg: QwenConfig, context: float) -> float:
    """Per token: one full-attention layer's projections, and its scores and values against
    `context` keys (every query head: 2 e per key each)."""
    d, h, k, e = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    projections = 2 * d * e * (h + 2 * k + h)  # q, k, v, o
    if cfg.attn_output_gate:
        projections += 2 * d * h * e
    return projections + 4 * h * e * context


def _recurrence_flops(cfg: QwenConfig, chunked: bool) -> float:
    """Per token: the Gated DeltaNet's delta rule over all value heads (approximate).

    Chunked (`models.qwen.deltanet.chunked`, C = 64), per token and head: k_beta k^T and q k^T
    within the chunk (2 C dk each), the two unit-triangular solves (C dv and C dk: a C x C
    triangle against the right-hand sides), and per chunk against the state w S, q S, k^T v_new
    (2 dk dv per token each) and intra v_new (2 C dv): C (5 dk + 3 dv) + 6 dk dv. Assumes full
    chunks (the last chunk's padding is not counted) and leaves out the decay masks' elementwise
    work. Recurrent (decoding): the state's two mat-vecs and its rank-one update, 6 dk dv.
    """
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    per_head = 6 * dk * dv + (CHUNK * (5 * dk + 3 * dv) if chunked else 0)
    return cfg.linear_num_value_heads * per_head


def _linear_layer_flops(cfg: QwenConfig, chunked: bool) -> float:
    """Per token: one Gated DeltaNet layer's projections, depthwise conv and recurrence."""
    d, c = cfg.hidden_size, cfg.linear_conv_dim
    hv, dv = cfg.linear_num_value_heads, cfg.linear_value_head_dim
    projections = 2 * d * (c + hv * dv + 2 * hv) + 2 * hv * dv * d  # qkv, z, b, a; out
    conv = 2 * cfg.linear_conv_kernel * c
    return projections + conv + _recurrence_flops(cfg, chunked)


def forward_flops(cfg: QwenConfig, tokens: float, context: float,
                  head_tokens: float | None = None, chunked: bool = True) -> float:
    """FLOPs of one forward pass (matmuls; see the module docstring).

    Args:
      cfg: the model.
      tokens: new tokens, all rows together.
      context: keys each token attends to in a full-attention layer, on average (causal over
        L tokens: (L + 1) / 2; a decode step: the cache's filled slots).
      head_tokens: tokens that go through the LM head (None: all of them).
      chunked: the Gated DeltaNet's chunked form (prefill, training) or the recurrent one
        (decoding); no effect without DeltaNet layers.

    Returns:
      Per token: every layer's mixer (full attention or Gated DeltaNet) and MLP (6 d f), then
      2 d v per LM-head token.
    """
    d, f, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    per_token = (cfg.num_full * _attention_layer_flops(cfg, context)
                 + cfg.num_linear * _linear_layer_flops(cfg, chunked)
                 + cfg.num_layers * 6 * d * f)
    head = tokens if head_tokens is None else head_tokens
    return tokens * per_token + head * 2 * d * v


def train_flops(cfg: QwenConfig, rows: int, length: int, remat: bool,
                head_tokens: float | None = None) -> float:
    """FLOPs of one training step on `rows` x `length` tokens with causal attention.

    The backward pass costs twice the forward (gradients of activations and of weights), so
    forward + backward is 3 forward passes; remat recomputes each layer's forward once more (4).
    The LM head is counted the same way on `head_tokens` (None: every token; the learner's
    `head_buckets` run it on the trained tokens only). Extra forward passes of the step (old or
    reference log-probabilities) and the optimizer update are not counted.
    """
    tokens = rows * length
    passes = 4 if remat else 3
    return passes * forward_flops(cfg, tokens, (length + 1) / 2, head_tokens)


def decode_flops(cfg: QwenConfig, rows: int, context: float) -> float:
    """FLOPs of one decode step: one new token per row attending to `context` cache slots, the
    LM head on every row, the Gated DeltaNet in its recurrent form."""
    return forward_flops(cfg, rows, context, chunked=False)


def roofline(flops: float, hbm_bytes_moved: float, chip: Chip) -> float:
    """The least seconds a step can take on one chip: the larger of its compute time at peak
    FLOP/s and its memory time at peak HBM bandwidth."""
    return max(flops / chip.peak_flops, hbm_bytes_moved / chip.hbm_bandwidth)


def mfu(flops: float, seconds: float, chip: Chip, devices: int = 1) -> float:
    """Model FLOPs utilisation: `flops` done in `seconds` over the peak of `devices` chips."""
    return flops / (seconds * chip.peak_flops * devices)
