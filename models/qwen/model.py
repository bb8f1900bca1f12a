"""Qwen2/2.5, Qwen3 and Qwen3.5 forward pass as a pure function with an optional cache.

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

import operator
from typing import NamedTuple

import jax
import jax.numpy as jnp

from models.qwen.config import FULL, QwenConfig
from models.qwen.deltanet import gated_deltanet

NEG_INF = -1e30


class Cache(NamedTuple):
    """Decoding state of every layer for `s` slots.

    Full-attention layers keep keys and values per slot; Gated DeltaNet layers keep the last
    K-1 conv inputs and their recurrent state (arrays with a leading 0 when a model has no
    layer of that kind).
    """

    k: jax.Array  # [n_full, B, S, K, E]
    v: jax.Array  # [n_full, B, S, K, E]
    valid: jax.Array  # bool [B, S]
    length: jax.Array  # int32 scalar: slots written so far
    history: jax.Array  # [n_linear, B, conv_kernel - 1, conv_channels]
    state: jax.Array  # float32 [n_linear, B, value_heads, key_dim, value_dim]


def init_cache(cfg: QwenConfig, batch: int, max_len: int, dtype=jnp.float32) -> Cache:
    """An empty cache of `max_len` slots."""
    kv = (cfg.num_full, batch, max_len, cfg.num_kv_heads, cfg.head_dim)
    conv = (cfg.num_linear, batch, max(cfg.linear_conv_kernel - 1, 0), cfg.linear_conv_dim)
    state = (cfg.num_linear, batch, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
             cfg.linear_value_head_dim)
    return Cache(jnp.zeros(kv, dtype), jnp.zeros(kv, dtype), jnp.zeros((batch, max_len), bool),
                 jnp.zeros((), jnp.int32), jnp.zeros(conv, dtype),
                 jnp.zeros(state, jnp.float32))


def rms_norm(x: jax.Array, weight: jax.Array, eps: float, plus_one: bool = False) -> jax.Array:
    """`w * x / sqrt(mean(x^2) + eps)` over the last axis in float32; w = 1 + weight if
    `plus_one` (Qwen3.5's zero-initialised norms)."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    if plus_one:
        return (normed * (1.0 + weight.astype(jnp.float32))).astype(x.dtype)
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
    """Rotates the first 2 * cos.shape[-1] dims of each head of x [B, L, H, E] ("rotate_half"
    convention); the rest pass through (partial rotary)."""
    half = cos.shape[-1]
    x1 = x[..., :half].astype(jnp.float32)
    x2 = x[..., half:2 * half].astype(jnp.float32)
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return jnp.concatenate([rotated.astype(x.dtype), x[..., 2 * half:]], axis=-1)


ATTENTION_BLOCK = 256


def attention(q: jax.Array, k: jax.Array, v: jax.Array, q_slots: jax.Array,
              k_valid: jax.Array, block: int = ATTENTION_BLOCK) -> jax.Array:
    """Grouped-query causal attention; blocked (`blocked_attention`) beyond `block` queries.

    Args:
      q: [B, L, H, E] queries at cache slots `q_slots` [L].
      k, v: [B, S, K, E] keys/values at slots 0..S-1.
      k_valid: bool [B, S] slots holding a real token.
      block: query count above which the blocked form is used, and its block size.

    Returns:
      [B, L, H, E].
    """
    if q.shape[1] > block:
        return blocked_attention(q, k, v, q_slots, k_valid, block)
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


def blocked_attention(q: jax.Array, k: jax.Array, v: jax.Array, q_slots: jax.Array,
                      k_valid: jax.Array, block: int) -> jax.Array:
    """`attention` one block of queries at a time with an online softmax over key blocks.

    Memory is O(L * block) instead of O(L * S), and each query block computes only the key
    blocks up to its last slot, skipping the causally masked part (the loop runs over all key
    blocks with a conditional body, so it stays differentiable). Same arguments as
    `attention`.
    """
    b, l, h, e = q.shape
    s, kv_heads = k.shape[1], k.shape[2]
    n_q, n_k = -(-l // block), -(-s // block)
    q = jnp.pad(q, [(0, 0), (0, n_q * block - l), (0, 0), (0, 0)])
    q = q.reshape(b, n_q, block, kv_heads, h // kv_heads, e) * (e ** -0.5)
    q_slots = jnp.pad(q_slots, (0, n_q * block - l), mode="edge").reshape(n_q, block)
    pad_k = [(0, 0), (0, n_k * block - s), (0, 0), (0, 0)]
    k = jnp.pad(k, pad_k).reshape(b, n_k, block, kv_heads, e)
    v = jnp.pad(v, pad_k).reshape(b, n_k, block, kv_heads, e)
    k_valid = jnp.pad(k_valid, [(0, 0), (0, n_k * block - s)]).reshape(b, n_k, block)

    def query_block(i):
        qi, slots = q[:, i], q_slots[i]

        def key_block(j, carry):
            top, total, acc = carry  # running max, softmax mass, weighted values
            scores = jnp.einsum("bqkge,bske->bkgqs", qi, k[:, j],
                                preferred_element_type=jnp.float32)
            key_slots = j * block + jnp.arange(block)
            mask = (key_slots[None, :] <= slots[:, None])[None] & k_valid[:, j][:, None, :]
            scores = jnp.where(mask[:, None, None], scores, NEG_INF)
            new_top = jnp.maximum(top, scores.max(axis=-1))
            probs = jnp.exp(scores - new_top[..., None])
            rescale = jnp.exp(top - new_top)
            acc = acc * rescale[..., None] + jnp.einsum(
                "bkgqs,bske->bkgqe", probs.astype(v.dtype), v[:, j],
                preferred_element_type=jnp.float32)
            return new_top, total * rescale + probs.sum(axis=-1), acc

        shape = (b, kv_heads, h // kv_heads, block)
        init = (jnp.full(shape, NEG_INF, jnp.float32), jnp.zeros(shape, jnp.float32),
                jnp.zeros((*shape, e), jnp.float32))
        last = jnp.max(slots) // block

        def visit(j, carry):  # a fixed trip count keeps the loop reverse-differentiable
            return jax.lax.cond(j <= last, key_block, lambda _, c: c, j, carry)

        _, total, acc = jax.lax.fori_loop(0, n_k, visit, init)
        out = acc / total[..., None]  # [b, k, g, block, e]
        return jnp.moveaxis(out, 3, 1).reshape(b, block, h, e).astype(q.dtype)

    out = jax.lax.map(query_block, jnp.arange(n_q))  # [n_q, b, block, h, e]
    return jnp.moveaxis(out, 0, 1).reshape(b, n_q * block, h, e)[:, :l]


def full_attention(cfg: QwenConfig, h, w, cos, sin, q_slots, valid, kv, length):
    """A full-attention mixer on normalised input h [B, L, D]; returns (output, new (k, v))."""
    eps = cfg.rms_norm_eps
    q = jnp.einsum("bld,dhe->blhe", h, w["q"])
    k = jnp.einsum("bld,dke->blke", h, w["k"])
    v = jnp.einsum("bld,dke->blke", h, w["v"])
    if "q_bias" in w:
        q, k, v = q + w["q_bias"], k + w["k_bias"], v + w["v_bias"]
    if cfg.qk_norm:
        q = rms_norm(q, w["q_norm"], eps, cfg.norm_plus_one)
        k = rms_norm(k, w["k_norm"], eps, cfg.norm_plus_one)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    if kv is None:
        keys, values, new_kv = k, v, None
    else:
        keys = jax.lax.dynamic_update_slice_in_dim(kv[0], k.astype(kv[0].dtype), length, axis=1)
        values = jax.lax.dynamic_update_slice_in_dim(kv[1], v.astype(kv[1].dtype), length, axis=1)
        new_kv = (keys, values)
    out = attention(q, keys.astype(q.dtype), values.astype(q.dtype), q_slots, valid)
    if cfg.attn_output_gate:
        out = out * jax.nn.sigmoid(jnp.einsum("bld,dhe->blhe", h, w["q_gate"]))
    out = jnp.einsum("blhe,hed->bld", out, w["o"])
    return (out + w["o_bias"] if "o_bias" in w else out), new_kv


def _tiles(tree, count: int):
    """Reshapes stacked [n, ...] leaves to [count, n / count, ...]."""
    return jax.tree.map(lambda x: x.reshape(count, x.shape[0] // count, *x.shape[1:]), tree)


def _untile(tree):
    return jax.tree.map(lambda x: x.reshape(x.shape[0] * x.shape[1], *x.shape[2:]), tree)


def forward(params, cfg: QwenConfig, tokens: jax.Array, positions: jax.Array,
            cache: Cache | None = None, use_chunks: bool | None = None,
            last_only: bool = False, remat: bool = False) -> tuple[jax.Array, Cache | None]:
    """Logits of every token, and the updated cache.

    Layers are scanned in tiles of `cfg.pattern` (one layer for Qwen2/3, e.g. three DeltaNet
    layers and one full-attention layer for Qwen3.5), each tile unrolled.

    Args:
      params: the params pytree of `models.qwen.params.describe(cfg)`.
      cfg: QwenConfig (static under jit).
      tokens: int32 [B, L] token ids.
      positions: int32 [B, L] rotary positions, -1 on padding.
      cache: None, or a Cache with at least `length + L` slots (writes past the end are
        clamped by XLA and would overwrite the last slots: size caches for the whole episode).
      use_chunks: DeltaNet form (None: chunked for L >= 64).
      last_only: compute logits for the last position only ([B, 1, V]), as sampling needs.
      remat: recompute each layer tile's activations in the backward pass, keeping only its
        input (training memory; no effect on the values).

    Returns:
      (float32 logits [B, L, V], the cache with these tokens written, or None).
    """
    batch, l = tokens.shape
    if cache is not None and l > cache.valid.shape[1]:
        raise ValueError(f"tokens: {l} new tokens do not fit a cache of "
                         f"{cache.valid.shape[1]} slots")
    x = params["embed"][tokens]
    cos, sin = rotary(cfg, positions, cfg.rotary_dim)
    token_valid = positions >= 0
    if cache is None:
        q_slots, valid, length = jnp.arange(l), token_valid, jnp.zeros((), jnp.int32)
        fresh = init_cache(cfg, batch, 0, x.dtype)
        history, state = fresh.history, fresh.state
    else:
        q_slots = cache.length + jnp.arange(l)
        valid = jax.lax.dynamic_update_slice_in_dim(cache.valid, token_valid, cache.length,
                                                    axis=1)
        length, history, state = cache.length, cache.history, cache.state

    pattern = cfg.pattern
    tiles = cfg.num_layers // len(pattern)
    kv = None if cache is None else (cache.k, cache.v)
    xs = (_tiles(params["layers"], tiles), _tiles(params["attn"], tiles),
          _tiles(params.get("linear", {}), tiles), None if kv is None else _tiles(kv, tiles),
          _tiles((history, state), tiles))

    def tile(x, xs):
        common, attn, linear, kv, (history, state) = xs
        new_kv, new_history, new_state = [], [], []
        for i, kind in enumerate(pattern):
            h = rms_norm(x, common["attn_norm"][i], cfg.rms_norm_eps, cfg.norm_plus_one)
            if kind == FULL:
                j = len(new_kv)
                w = jax.tree.map(operator.itemgetter(j), attn)
                layer_kv = None if kv is None else (kv[0][j], kv[1][j])
                out, layer_kv = full_attention(cfg, h, w, cos, sin, q_slots, valid, layer_kv,
                                               length)
                new_kv.append(layer_kv)
            else:
                j = len(new_history)
                w = jax.tree.map(operator.itemgetter(j), linear)
                out, layer_history, layer_state = gated_deltanet(
                    cfg, h, w, token_valid, history[j], state[j], use_chunks)
                new_history.append(layer_history)
                new_state.append(layer_state)
            x = x + out
            h = rms_norm(x, common["mlp_norm"][i], cfg.rms_norm_eps, cfg.norm_plus_one)
            x = x + (jax.nn.silu(h @ common["gate"][i]) * (h @ common["up"][i])) @ common["down"][i]
        stacked_kv = None if kv is None else tuple(
            jnp.stack([pair[n] for pair in new_kv]) if new_kv else kv[n] for n in (0, 1))
        recurrent = tuple(jnp.stack(parts) if parts else old for parts, old in
                          ((new_history, history), (new_state, state)))
        return x, (stacked_kv, recurrent)

    if remat:
        tile = jax.checkpoint(tile, prevent_cse=False)
    x, (kv_out, (history, state)) = jax.lax.scan(tile, x, xs)
    if last_only:
        x = x[:, -1:]
    x = rms_norm(x, params["norm"], cfg.rms_norm_eps, cfg.norm_plus_one)
    head = params["embed"].T if cfg.tie_word_embeddings else params["lm_head"]
    logits = jnp.einsum("bld,dv->blv", x, head, preferred_element_type=jnp.float32)
    if cache is None:
        return logits, None
    k, v = _untile(kv_out)
    return logits, Cache(k, v, valid, cache.length + l, _untile(history), _untile(state))


def positions_from_mask(mask: jax.Array) -> jax.Array:
    """Rotary positions of a left- or right-padded batch: int32 [B, L], -1 where mask is false.

    Args:
      mask: bool [B, L] real tokens.
    """
    return jnp.where(mask, jnp.cumsum(mask, axis=1) - 1, -1).astype(jnp.int32)
