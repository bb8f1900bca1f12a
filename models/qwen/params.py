"""Description of every weight: shape, dtype and logical axes; `init` and `abstract` follow.

Parameters are a two-level dict: top-level weights (`embed`, `norm`, `lm_head`) and `layers`,
whose arrays are stacked over a leading `layers` axis so the forward pass scans over layers
(one compiled layer body whatever the depth). Matrices are stored input-major (`x @ w`), with
attention heads as their own axis, so sharding rules can name them.

Logical axes: layers, vocab, embed (d), q_heads (h), kv_heads (k), head_dim (e), mlp (f).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from models.qwen.config import QwenConfig


@dataclasses.dataclass(frozen=True)
class ArrayInfo:
    """Shape, dtype and logical axis names of one parameter array."""

    shape: tuple[int, ...]
    dtype: jnp.dtype
    axes: tuple[str, ...]
    init: str  # "normal" | "ones" | "zeros"

    def __post_init__(self):
        if len(self.shape) != len(self.axes):
            raise ValueError(f"shape {self.shape} and axes {self.axes} differ in rank")


Description = dict  # {"embed": ArrayInfo, ..., "layers": {"q": ArrayInfo, ...}}


def describe(cfg: QwenConfig, dtype=jnp.float32) -> Description:
    """Every parameter of `cfg` as an ArrayInfo, in the nesting of the params pytree."""
    n, d, f, v = cfg.num_layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    h, k, e = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim

    def info(shape, axes, init="normal"):
        return ArrayInfo(tuple(shape), jnp.dtype(dtype), tuple(axes), init)

    layers = {
        "attn_norm": info((n, d), ("layers", "embed"), "ones"),
        "q": info((n, d, h, e), ("layers", "embed", "q_heads", "head_dim")),
        "k": info((n, d, k, e), ("layers", "embed", "kv_heads", "head_dim")),
        "v": info((n, d, k, e), ("layers", "embed", "kv_heads", "head_dim")),
        "o": info((n, h, e, d), ("layers", "q_heads", "head_dim", "embed")),
        "mlp_norm": info((n, d), ("layers", "embed"), "ones"),
        "gate": info((n, d, f), ("layers", "embed", "mlp")),
        "up": info((n, d, f), ("layers", "embed", "mlp")),
        "down": info((n, f, d), ("layers", "mlp", "embed")),
    }
    if cfg.qkv_bias or cfg.attention_bias:
        layers["q_bias"] = info((n, h, e), ("layers", "q_heads", "head_dim"), "zeros")
        layers["k_bias"] = info((n, k, e), ("layers", "kv_heads", "head_dim"), "zeros")
        layers["v_bias"] = info((n, k, e), ("layers", "kv_heads", "head_dim"), "zeros")
    if cfg.attention_bias:
        layers["o_bias"] = info((n, d), ("layers", "embed"), "zeros")
    if cfg.qk_norm:
        layers["q_norm"] = info((n, e), ("layers", "head_dim"), "ones")
        layers["k_norm"] = info((n, e), ("layers", "head_dim"), "ones")
    params = {
        "embed": info((v, d), ("vocab", "embed")),
        "norm": info((d,), ("embed",), "ones"),
        "layers": layers,
    }
    if not cfg.tie_word_embeddings:
        params["lm_head"] = info((d, v), ("embed", "vocab"))
    return params


def _is_info(x) -> bool:
    return isinstance(x, ArrayInfo)


def abstract(cfg: QwenConfig, dtype=jnp.float32):
    """The params pytree as `jax.ShapeDtypeStruct`s (no memory)."""
    return jax.tree.map(lambda i: jax.ShapeDtypeStruct(i.shape, i.dtype), describe(cfg, dtype),
                        is_leaf=_is_info)


def logical_axes(cfg: QwenConfig):
    """The params pytree with each leaf replaced by its tuple of logical axis names."""
    return jax.tree.map(lambda i: i.axes, describe(cfg), is_leaf=_is_info)


def init(cfg: QwenConfig, key: jax.Array, dtype=jnp.float32, scale: float = 0.02):
    """Random parameters: normal(0, scale) matrices, unit norms, zero biases."""
    desc = describe(cfg, dtype)
    leaves, treedef = jax.tree.flatten(desc, is_leaf=_is_info)
    keys = jax.random.split(key, len(leaves))

    def make(i: ArrayInfo, k: jax.Array) -> jax.Array:
        if i.init == "ones":
            return jnp.ones(i.shape, i.dtype)
        if i.init == "zeros":
            return jnp.zeros(i.shape, i.dtype)
        return (scale * jax.random.normal(k, i.shape, jnp.float32)).astype(i.dtype)

    return jax.tree.unflatten(treedef, [make(i, k) for i, k in zip(leaves, keys)])
