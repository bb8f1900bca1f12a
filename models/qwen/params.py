"""Description of every weight: shape, dtype and logical axes; `init` and `abstract` follow.

Parameters are a two-level dict: top-level weights (`embed`, `norm`, `lm_head`) and groups of
per-layer weights stacked over a leading `layers` axis, so the forward pass scans over layers
(one compiled body whatever the depth). Matrices are stored input-major (`x @ w`), with
attention heads as their own axis, so sharding rules can name them.

Logical axes: layers, vocab, embed (d), q_heads (h), kv_heads (k), head_dim (e), mlp (f);
Gated DeltaNet: v_heads, v_dim, conv_channels, conv_kernel.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

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


PARAM_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)


def describe(cfg: QwenConfig, dtype=jnp.float32) -> Description:
    """Every parameter of `cfg` as an ArrayInfo, in the nesting of the params pytree.

    `layers` holds what every layer has (norms, MLP), stacked over all layers; `attn` the full
    attention weights stacked over the full-attention layers; `linear` the Gated DeltaNet weights
    stacked over the linear-attention layers (Qwen3.5 only).

    Raises:
      ValueError: `dtype` is not one of `PARAM_DTYPES`.
    """
    if jnp.dtype(dtype) not in [jnp.dtype(t) for t in PARAM_DTYPES]:
        raise ValueError(f"dtype: parameters of dtype {jnp.dtype(dtype)} are not supported; "
                         "use float32, bfloat16 or float16")
    n, d, f, v = cfg.num_layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    h, k, e = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    norm_init = "zeros" if cfg.norm_plus_one else "ones"

    def info(shape, axes, init="normal"):
        return ArrayInfo(tuple(shape), jnp.dtype(dtype), tuple(axes), init)

    layers = {
        "attn_norm": info((n, d), ("layers", "embed"), norm_init),
        "mlp_norm": info((n, d), ("layers", "embed"), norm_init),
        "gate": info((n, d, f), ("layers", "embed", "mlp")),
        "up": info((n, d, f), ("layers", "embed", "mlp")),
        "down": info((n, f, d), ("layers", "mlp", "embed")),
    }
    m = cfg.num_full
    attn = {
        "q": info((m, d, h, e), ("layers", "embed", "q_heads", "head_dim")),
        "k": info((m, d, k, e), ("layers", "embed", "kv_heads", "head_dim")),
        "v": info((m, d, k, e), ("layers", "embed", "kv_heads", "head_dim")),
        "o": info((m, h, e, d), ("layers", "q_heads", "head_dim", "embed")),
    }
    if cfg.attn_output_gate:
        attn["q_gate"] = info((m, d, h, e), ("layers", "embed", "q_heads", "head_dim"))
    if cfg.qkv_bias or cfg.attention_bias:
        attn["q_bias"] = info((m, h, e), ("layers", "q_heads", "head_dim"), "zeros")
        attn["k_bias"] = info((m, k, e), ("layers", "kv_heads", "head_dim"), "zeros")
        attn["v_bias"] = info((m, k, e), ("layers", "kv_heads", "head_dim"), "zeros")
    if cfg.attention_bias:
        attn["o_bias"] = info((m, d), ("layers", "embed"), "zeros")
    if cfg.qk_norm:
        attn["q_norm"] = info((m, e), ("layers", "head_dim"), norm_init)
        attn["k_norm"] = info((m, e), ("layers", "head_dim"), norm_init)
    params = {
        "embed": info((v, d), ("vocab", "embed")),
        "norm": info((d,), ("embed",), norm_init),
        "layers": layers,
        "attn": attn,
    }
    if cfg.num_linear:
        r, c, kernel = cfg.num_linear, cfg.linear_conv_dim, cfg.linear_conv_kernel
        hv, dv = cfg.linear_num_value_heads, cfg.linear_value_head_dim
        params["linear"] = {
            "qkv": info((r, d, c), ("layers", "embed", "conv_channels")),
            "z": info((r, d, hv, dv), ("layers", "embed", "v_heads", "v_dim")),
            "b": info((r, d, hv), ("layers", "embed", "v_heads")),
            "a": info((r, d, hv), ("layers", "embed", "v_heads")),
            "conv": info((r, kernel, c), ("layers", "conv_kernel", "conv_channels")),
            "dt_bias": info((r, hv), ("layers", "v_heads"), "ones"),
            "A_log": info((r, hv), ("layers", "v_heads"), "zeros"),
            "norm": info((r, dv), ("layers", "v_dim"), "ones"),
            "out": info((r, hv, dv, d), ("layers", "v_heads", "v_dim", "embed")),
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


def init_numpy(cfg: QwenConfig, seed: int = 0, scale: float = 0.02):
    """Random float32 parameters like `init`, drawn on the host with numpy.

    No compilation: `init` compiles a threefry program per weight shape, seconds on CPU, which
    matters for tiny models in tests and demos.
    """
    rng = np.random.default_rng(seed)

    def make(i: ArrayInfo) -> np.ndarray:
        if i.init in ("ones", "zeros"):
            return np.full(i.shape, 1.0 if i.init == "ones" else 0.0, np.float32)
        return (scale * rng.normal(size=i.shape)).astype(np.float32)

    return jax.tree.map(make, describe(cfg), is_leaf=_is_info)


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
