"""tpu.roofline: FLOP counts by hand on a tiny model, against XLA's own count of the compiled
forward pass, and the roofline, MFU and chip detection arithmetic."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from models import qwen
from models.qwen.model import ATTENTION_BLOCK
from tpu import roofline
from tpu.roofline import CHIPS

QWEN3 = dict(model_type="qwen3", vocab_size=512, hidden_size=256, intermediate_size=768,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64)
QWEN3_5 = dict(QWEN3, model_type="qwen3_5_text",
               layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
               linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64,
               linear_conv_kernel_dim=4)


def test_forward_flops_by_hand():
    cfg = qwen.from_hf_config(QWEN3)
    # per token and layer: q, k, v, o = 2 * 256 * 64 * (4 + 2 + 2 + 4) = 393216; scores and
    # values against 10 keys = 4 * 4 * 64 * 10 = 10240; MLP = 6 * 256 * 768 = 1179648
    layer = 393216 + 10240 + 1179648
    head = 2 * 256 * 512  # 262144 per LM-head token
    assert roofline.forward_flops(cfg, 3, 10) == 3 * (2 * layer + head)
    assert roofline.forward_flops(cfg, 3, 10, head_tokens=1) == 3 * 2 * layer + head
    # causal over 8 tokens: (8 + 1) / 2 keys on average; 3 passes, 4 with remat
    forward = roofline.forward_flops(cfg, 2 * 8, 4.5)
    assert roofline.train_flops(cfg, 2, 8, remat=False) == 3 * forward
    assert roofline.train_flops(cfg, 2, 8, remat=True) == 4 * forward
    assert roofline.decode_flops(cfg, 5, 100) == roofline.forward_flops(cfg, 5, 100)


def test_deltanet_flops_by_hand():
    cfg = qwen.from_hf_config(QWEN3_5)
    assert cfg.linear_conv_dim == 512  # 2 * 2 * 64 + 4 * 64
    # per token: projections 2 * 256 * (512 + 256 + 8) + 2 * 256 * 256 = 528384; conv
    # 2 * 4 * 512 = 4096; recurrence per head 6 * 64 * 64 = 24576, chunked + 64 * 8 * 64 =
    # 32768 more, over 4 heads
    recurrent = 528384 + 4096 + 4 * 24576
    chunked = recurrent + 4 * 32768
    assert (roofline.forward_flops(cfg, 1, 0, chunked=True)
            - roofline.forward_flops(cfg, 1, 0, chunked=False)) == chunked - recurrent
    attention = 2 * 256 * 64 * (4 + 2 + 2 + 4 + 4)  # the output gate is a fifth projection
    expected = attention + recurrent + 2 * 6 * 256 * 768 + 2 * 256 * 512
    assert roofline.decode_flops(cfg, 1, 0) == expected


def blocked_context(length: int) -> float:
    """Average keys a query is scored against in `models.qwen.model.attention` without a cache:
    query block i sees key blocks 0..i whole, masked inside (more than causal's (L + 1) / 2)."""
    ends = [min(start + ATTENTION_BLOCK, length) for start in range(0, length, ATTENTION_BLOCK)]
    return sum((end - start) * end for start, end in zip(range(0, length, ATTENTION_BLOCK),
                                                          ends)) / length


def xla_flops(cfg, rows: int, length: int) -> float:
    """XLA's FLOP count of the compiled forward pass, layers unrolled (a scan's body would be
    counted once, not once per layer)."""
    params = jax.eval_shape(qwen.unstack_layers, qwen.abstract(cfg))
    ids = jax.ShapeDtypeStruct((rows, length), jnp.int32)
    compiled = jax.jit(lambda p, t, pos: qwen.forward(p, cfg, t, pos)[0]).lower(
        params, ids, ids).compile()
    return compiled.cost_analysis()["flops"]


# Qwen3: two attention blocks. Qwen3.5: one DeltaNet chunk, so the chunks' scan runs once and
# XLA counts the recurrence too (the triangular solves excepted, which it does not count).
@pytest.mark.parametrize("hf, length", [(QWEN3, 2 * ATTENTION_BLOCK), (QWEN3_5, 64)],
                         ids=["qwen3", "qwen3_5"])
def test_forward_flops_match_xla(hf, length):
    cfg = qwen.from_hf_config(hf)
    ours = roofline.forward_flops(cfg, 2 * length, blocked_context(length))
    # XLA also counts elementwise work (norms, rotary, softmax, SiLU, the DeltaNet's decays),
    # a few FLOPs per element against a matmul's 2 d per output element (d >= 64 here), and
    # does not count the DeltaNet's triangular solves: measured +0.9% (qwen3), -0.7% (qwen3_5)
    assert xla_flops(cfg, 2, length) == pytest.approx(ours, rel=0.02)


def test_roofline_and_mfu():
    chip = CHIPS["v5e"]
    # 197e12 FLOPs take 1 s at peak; 819e9 bytes take 1 s at peak bandwidth
    assert roofline.roofline(197e12, 819e9 / 2, chip) == pytest.approx(1.0)
    assert roofline.roofline(197e12 / 4, 819e9 * 2, chip) == pytest.approx(2.0)
    assert roofline.mfu(197e12, 2.0, chip) == pytest.approx(0.5)
    assert roofline.mfu(4 * 197e12, 2.0, chip, devices=8) == pytest.approx(0.25)


def test_detect_chips():
    assert roofline.detect("TPU v5 lite") is CHIPS["v5e"]
    assert roofline.detect("TPU v5") is CHIPS["v5p"]
    assert roofline.detect("NVIDIA H200") is CHIPS["h200"]
    assert roofline.detect("NVIDIA H100 80GB HBM3") is CHIPS["h100"]
    assert roofline.detect("cpu") is None
    assert roofline.detect("NVIDIA H100 PCIe") is None  # a lower peak than the SXM's
    assert {c.topology_prefix for c in CHIPS.values()} == {"v4", "v5e", "v5p", "v6e", None}
