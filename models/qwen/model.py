"""Qwen2/2.5 and Qwen3 forward pass as a pure function with an optional KV cache.

`forward(params, cfg, tokens, positions, cache) -> (logits, cache)`:

- `positions [B, L]` are the rotary positions of the tokens, `-1` on padding (left padding of a
  batch, or slots a caller leaves empty). Padding tokens are never attended to.
- Without a cache the call attends causally within the L tokens. With a cache the L tokens are
  written at cache slots `length .. length+L-1` (the same slots for every row, so rows stay
  aligned under left padding) and attend to every valid earlier slot; prefill and each decode
  step are the same function.
- Softmax, norms and logits are float32 whatever the parameter dtype (bf16-ready).

Glossary: b batch, l new tokens, s cache slots, d model, h query heads, k kv heads, g query heads
per kv head, e head dim, f MLP width, v vocab.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from models.qwen.config import QwenConfig

NEG_INF = -1e30


class KVCache(NamedTuple):
    """Keys and values of every layer for `s` slots, and which slots hold a real token."""

    k: jax.Array  # [n_layers, B, S, K, E]
    v: jax.Array  # [n_layers, B, S, K, E]
    valid: jax.Array  # bool [B, S]
    length: jax.Array  # int32 scalar: slots written so far


def init_cache(cfg: QwenConfig, batch: int, max_len: int, dtype=jnp.float32) -> KVCache:
    """An empty cache of `max_len` slots."""
    shape = (cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim)
    return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype),
                   jnp.zeros((batch, max_len), bool), jnp.zeros((), jnp.int32))


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """`weight * x / sqrt(mean(x^2) + eps)` over the last axis, computed in float32."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (weight * normed.astype(x.dtype)).astype(x.dtype)


def rotary(cfg: QwenConfig, positions: jax.Array, dim: int) -> tuple[jax.Array, jax.Array]:
    """cos, sin float32 [B, L, dim/2] of the rotary embedding at `positions` (clamped at 0)."""
    inv_freq = 1.0 / cfg.rope_theta ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
    pos = jnp.maximum(positions, 0).astype(jnp.float32)
    if cfg.rope_type == "linear":
        pos = pos / cfg.rope_factor
    angles = pos[..., None] * inv_freq
    return jnp.cos(angles), jnp.sin(angles)


def apply_rotary(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotates the two halves of the head dim ("rotate_half" convention) of x [B, L, H, E]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, q_slots: jax.Array,
              k_valid: jax.Array) -> jax.Array:
    """Grouped-query causal attention.

    Args:
      q: [B, L, H, E] queries at cache slots `q_slots` [L].
      k, v: [B, S, K, E] keys/values at slots 0..S-1.
      k_valid: bool [B, S] slots holding a real token.

    Returns:
      [B, L, H, E].
    """
    b, l, h, e = q.shape
    kv_heads = k.shape[2]
    q = q.reshape(b, l, kv_heads, h // kv_heads, e)
    scores = jnp.einsum("blkge,bske->bkgls", q, k, preferred_element_type=jnp.float32)
    scores = scores * (e ** -0.5)
    causal = jnp.arange(k.shape[1])[None, :] <= q_slots[:, None]  # [L, S]
    mask = causal[None, :, :] & k_valid[:, None, :]  # [B, L, S]
    scores = jnp.where(mask[:, None, None], scores, NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgls,bske->blkge", probs, v)
    return out.reshape(b, l, h, e)


def _layer(cfg: QwenConfig, x, w, cos, sin, q_slots, valid, cache_kv, length):
    eps = cfg.rms_norm_eps
    h = rms_norm(x, w["attn_norm"], eps)
    q = jnp.einsum("bld,dhe->blhe", h, w["q"])
    k = jnp.einsum("bld,dke->blke", h, w["k"])
    v = jnp.einsum("bld,dke->blke", h, w["v"])
    if "q_bias" in w:
        q, k, v = q + w["q_bias"], k + w["k_bias"], v + w["v_bias"]
    if cfg.qk_norm:
        q, k = rms_norm(q, w["q_norm"], eps), rms_norm(k, w["k_norm"], eps)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    if cache_kv is None:
        keys, values, new_kv = k, v, None
    else:
        keys = jax.lax.dynamic_update_slice_in_dim(cache_kv[0], k.astype(cache_kv[0].dtype),
                                                   length, axis=1)
        values = jax.lax.dynamic_update_slice_in_dim(cache_kv[1], v.astype(cache_kv[1].dtype),
                                                     length, axis=1)
        new_kv = (keys, values)
    attn = attention(q, keys.astype(q.dtype), values.astype(q.dtype), q_slots, valid)
    out = jnp.einsum("blhe,hed->bld", attn, w["o"])
    if "o_bias" in w:
        out = out + w["o_bias"]
    x = x + out
    h = rms_norm(x, w["mlp_norm"], eps)
    mlp = jax.nn.silu(h @ w["gate"]) * (h @ w["up"])
    return x + mlp @ w["down"], new_kv


def forward(params, cfg: QwenConfig, tokens: jax.Array, positions: jax.Array,
            cache: KVCache | None = None) -> tuple[jax.Array, KVCache | None]:
    """Logits of every token, and the updated cache.

    Args:
      params: the params pytree of `models.qwen.params.describe(cfg)`.
      cfg: QwenConfig (static under jit).
      tokens: int32 [B, L] token ids.
      positions: int32 [B, L] rotary positions, -1 on padding.
      cache: None, or a KVCache with at least `length + L` slots.

    Returns:
      (float32 logits [B, L, V], the cache with these tokens written, or None).
    """
    l = tokens.shape[1]
    x = params["embed"][tokens]
    cos, sin = rotary(cfg, positions, cfg.head_dim)
    if cache is None:
        q_slots = jnp.arange(l)
        valid = positions >= 0
        length = jnp.zeros((), jnp.int32)
    else:
        q_slots = cache.length + jnp.arange(l)
        valid = jax.lax.dynamic_update_slice_in_dim(cache.valid, positions >= 0, cache.length,
                                                    axis=1)
        length = cache.length

    def body(x, layer):
        w, kv = layer
        x, new_kv = _layer(cfg, x, w, cos, sin, q_slots, valid, kv, length)
        return x, new_kv

    kv_in = None if cache is None else (cache.k, cache.v)
    x, kv_out = jax.lax.scan(body, x, (params["layers"], kv_in))
    x = rms_norm(x, params["norm"], cfg.rms_norm_eps)
    head = params["embed"].T if cfg.tie_word_embeddings else params["lm_head"]
    logits = jnp.einsum("bld,dv->blv", x, head, preferred_element_type=jnp.float32)
    if cache is None:
        return logits, None
    return logits, KVCache(kv_out[0], kv_out[1], valid, cache.length + l)


def positions_from_mask(mask: jax.Array) -> jax.Array:
    """Rotary positions of a left- or right-padded batch: int32 [B, L], -1 where mask is false.

    Args:
      mask: bool [B, L] real tokens.
    """
    return jnp.where(mask, jnp.cumsum(mask, axis=1) - 1, -1).astype(jnp.int32)
