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
import numpy as np

from models.qwen.config import FULL, QwenConfig
from models.qwen.deltanet import gated_deltanet
from models.qwen.matmul import dense
from models.qwen.platform import platform_of

NEG_INF = -1e30


class Cache(NamedTuple):
    """Decoding state of every layer for `s` slots.

    Full-attention layers keep keys and values per slot; Gated DeltaNet layers keep the last
    K-1 conv inputs and their recurrent state (arrays with a leading 0 when a model has no
    layer of that kind).
    """

    k: jax.Array  # [n_full, B, K, S, E], or a tuple of n_full [B, K, S, E] (see `forward`)
    v: jax.Array  # as k
    valid: jax.Array  # bool [B, S]
    length: jax.Array  # int32 scalar: slots written so far
    history: jax.Array  # [n_linear, B, conv_kernel - 1, conv_channels]
    state: jax.Array  # float32 [n_linear, B, value_heads, key_dim, value_dim]


@jax.jit
def _id_range(tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jnp.min(tokens), jnp.max(tokens)


def check_token_ids(tokens, vocab_size: int, name: str = "tokens") -> None:
    """Raises ValueError when concrete token ids [...] fall outside [0, vocab_size): the
    embedding lookup would clamp them silently. Host arrays are checked on the host, in their
    own integer type; device arrays by a jitted reduction. Does nothing to traced arrays
    (under jit): `forward`, `generate` and `Learner` call it where their inputs arrive."""
    if isinstance(tokens, jax.core.Tracer) or np.size(tokens) == 0:
        return
    if isinstance(tokens, jax.Array):
        with jax.ensure_compile_time_eval():  # concrete ids inside, e.g., a grad of the params
            low, high = (int(x) for x in _id_range(tokens))
    else:
        ids = np.asarray(tokens)
        low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{name}: token ids span [{low}, {high}], outside the vocabulary "
                         f"[0, {vocab_size})")


def init_cache(cfg: QwenConfig, batch: int, max_len: int, dtype=jnp.float32) -> Cache:
    """An empty cache of `max_len` slots."""
    kv = (cfg.num_full, batch, cfg.num_kv_heads, max_len, cfg.head_dim)
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


def attention(q: jax.Array, k: jax.Array, v: jax.Array, q_slots: jax.Array | None,
              k_valid: jax.Array, block: int = ATTENTION_BLOCK) -> jax.Array:
    """Grouped-query causal attention.

    The queries of one kv head are laid out as rows [L * G, E], so scores and outputs are one
    batched matmul per (row, kv head), one block of `block` queries at a time: memory is
    O(block * S) whatever L. Without a cache (`q_slots` None) query block i attends to key
    blocks 0..i only, statically sliced, so the causally masked part is never computed; with a
    cache every block reads all S slots and the mask does the rest.

    Args:
      q: [B, L, H, E] queries.
      k, v: [B, K, S, E] keys/values at slots 0..S-1.
      q_slots: int32 [L] cache slots of the queries; None when the queries are the keys
        themselves (query i at slot i, S == L).
      k_valid: bool [B, S] slots holding a real token.
      block: queries per block.

    Returns:
      [B, L, H, E].
    """
    b, l, h, e = q.shape
    kv_heads, s = k.shape[1], k.shape[2]
    g = h // kv_heads
    rows = q.reshape(b, l, kv_heads, g, e).transpose(0, 2, 1, 3, 4) * (e ** -0.5)
    ends = [min(lo + block, l) for lo in range(0, l, block)]
    if q_slots is None:
        spans = [(lo, hi, hi) for lo, hi in zip(range(0, l, block), ends)]
        q_slots = jnp.arange(l)
    else:
        spans = [(lo, hi, s) for lo, hi in zip(range(0, l, block), ends)]
    outs = []
    for lo, hi, keys in spans:  # query rows lo..hi-1 see key slots 0..keys-1
        scores = _scores(rows[:, :, lo:hi].reshape(b, kv_heads, -1, e), k[:, :, :keys])
        slots = jnp.repeat(q_slots[lo:hi], g)
        mask = (jnp.arange(keys)[None, :] <= slots[:, None])[None] & k_valid[:, None, :keys]
        scores = jnp.where(mask[:, None], scores, NEG_INF)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("bkqs,bkse->bkqe", probs, v[:, :, :keys])
        outs.append(out.reshape(b, kv_heads, hi - lo, g, e))
    out = outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=2)
    return out.transpose(0, 2, 1, 3, 4).reshape(b, l, h, e)


KEYS_MAJOR_ROWS = 8


def _scores(rows: jax.Array, k: jax.Array) -> jax.Array:
    """float32 scores [B, K, Q, S] of query rows [B, K, Q, E] against keys [B, K, S, E].

    On CPU (the platform of the keys' devices), up to `KEYS_MAJOR_ROWS` query rows (a decode
    step's heads of one kv head) are scored keys-major, as [B, K, S, Q] then transposed:
    XLA:CPU streams the keys through that matmul faster (a 55M Qwen3 decoding at batch 8 with
    2048 cache slots: 2.4-2.6 s against 2.6-3.0 s; no change with 128 slots), while with 16
    rows it was slower at 128 slots. The barrier keeps XLA from folding the transpose back into
    the matmul.
    """
    if rows.shape[2] > KEYS_MAJOR_ROWS or platform_of(k) != "cpu":
        return jnp.einsum("bkqe,bkse->bkqs", rows, k, preferred_element_type=jnp.float32)
    scores = jnp.einsum("bkse,bkqe->bksq", k, rows, preferred_element_type=jnp.float32)
    return jax.lax.optimization_barrier(scores).swapaxes(2, 3)


def full_attention(cfg: QwenConfig, h, w, cos, sin, q_slots, valid, cache_kv, layer, length):
    """A full-attention mixer on normalised input h [B, L, D]; returns (output, cache_kv).

    `cache_kv` is None (no cache: `q_slots` must be None too) or the cache's (k, v): the new
    keys and values are written in place at full-attention layer `layer`, slots `length ..`,
    and attention reads that layer's (see `_write_layer`).
    """
    eps = cfg.rms_norm_eps
    q, k, v = (dense(h, w[name]) for name in ("q", "k", "v"))
    if "q_bias" in w:
        q, k, v = q + w["q_bias"], k + w["k_bias"], v + w["v_bias"]
    if cfg.qk_norm:
        q = rms_norm(q, w["q_norm"], eps, cfg.norm_plus_one)
        k = rms_norm(k, w["k_norm"], eps, cfg.norm_plus_one)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, K, L, E]
    if cache_kv is not None:
        (k_cache, k), (v_cache, v) = (_write_layer(whole, new, layer, length)
                                      for whole, new in zip(cache_kv, (k, v)))
        cache_kv = (k_cache, v_cache)
    out = attention(q, k.astype(q.dtype), v.astype(q.dtype), q_slots, valid)
    if cfg.attn_output_gate:
        out = out * jax.nn.sigmoid(dense(h, w["q_gate"]))
    out = dense(out, w["o"], axes=2)
    return (out + w["o_bias"] if "o_bias" in w else out), cache_kv


def _write_layer(whole, new: jax.Array, layer, length: jax.Array):
    """Writes new [B, K, L, E] keys (or values) into the cache's `whole` at full-attention layer
    `layer`, slots `length ..`; returns (whole, that layer's [B, K, S, E]).

    `whole` is stacked [n_full, B, K, S, E] (reading a layer is then a copy on CPU), or a tuple
    of per-layer arrays, read as they are (`layer` static).
    """
    zero = jnp.zeros((), jnp.int32)
    if isinstance(whole, tuple):
        written = jax.lax.dynamic_update_slice(whole[layer], new.astype(whole[layer].dtype),
                                               (zero, zero, length, zero))
        return whole[:layer] + (written,) + whole[layer + 1:], written
    whole = jax.lax.dynamic_update_slice(whole, new[None].astype(whole.dtype),
                                         (layer, zero, zero, length, zero))
    return whole, jax.lax.dynamic_index_in_dim(whole, layer, keepdims=False)


def _tiles(tree, tiles: int, per_tile: int):
    """Reshapes stacked [tiles * per_tile, ...] leaves to [tiles, per_tile, ...].

    With one layer per tile the leaves stay [tiles, ...]: XLA copies a stacked array reshaped to
    [n, 1, ...] before the layer loop on every call, the whole weight set per decode step.
    """
    if per_tile == 1:
        return tree
    return jax.tree.map(lambda x: x.reshape(tiles, per_tile, *x.shape[1:]), tree)


def _untile(tree, per_tile: int):
    """Inverse of `_tiles`."""
    if per_tile == 1:
        return tree
    return jax.tree.map(lambda x: x.reshape(x.shape[0] * x.shape[1], *x.shape[2:]), tree)


def _member(tree, j: int, per_tile: int):
    """Layer j of one tile of `_tiles` leaves."""
    return tree if per_tile == 1 else jax.tree.map(operator.itemgetter(j), tree)


def _stack(layers: list, per_tile: int, unchanged):
    """The per-layer outputs of one tile in `_tiles` layout (`unchanged` when there are none)."""
    if not layers:
        return unchanged
    return layers[0] if per_tile == 1 else jax.tree.map(lambda *x: jnp.stack(x), *layers)


class _Inputs(NamedTuple):
    """What every layer of one forward call reads besides its weights."""

    cos: jax.Array  # float32 [B, L, rotary_dim / 2]
    sin: jax.Array
    q_slots: jax.Array | None  # int32 [L] cache slots of the tokens; None without a cache
    valid: jax.Array  # bool [B, S] slots attention may read
    token_valid: jax.Array  # bool [B, L] real tokens
    length: jax.Array  # int32 scalar: the slot of the first token


def _layer(cfg: QwenConfig, kind: str, use_chunks: bool | None, x, common, mixer,
           inputs: _Inputs, cache_kv, full_index, recurrent):
    """One decoder layer on x [B, L, D]: mixer (full attention writing `cache_kv` at
    full-attention layer `full_index`, or Gated DeltaNet continuing `recurrent` = (history,
    state)) and MLP, each with a residual. Returns (x, cache_kv, recurrent)."""
    eps = cfg.rms_norm_eps
    h = rms_norm(x, common["attn_norm"], eps, cfg.norm_plus_one)
    if kind == FULL:
        out, cache_kv = full_attention(cfg, h, mixer, inputs.cos, inputs.sin, inputs.q_slots,
                                       inputs.valid, cache_kv, full_index, inputs.length)
    else:
        out, *recurrent = gated_deltanet(cfg, h, mixer, inputs.token_valid, *recurrent,
                                         use_chunks)
    x = x + out
    h = rms_norm(x, common["mlp_norm"], eps, cfg.norm_plus_one)
    x = x + dense(jax.nn.silu(dense(h, common["gate"])) * dense(h, common["up"]),
                  common["down"])
    return x, cache_kv, tuple(recurrent)


def _scanned_layers(params, cfg: QwenConfig, use_chunks, remat: bool, x, inputs: _Inputs,
                    cache_kv, history, state, constrain):
    """The layers as a scan over tiles of `cfg.pattern` (stacked weights), each tile
    unrolled; `constrain` places each tile's output. Returns (x, cache_kv, history, state)."""
    pattern = cfg.pattern
    tiles = cfg.num_layers // len(pattern)
    n_full = pattern.count(FULL)
    n_linear = len(pattern) - n_full
    xs = (_tiles(params["layers"], tiles, len(pattern)),
          _tiles(params["attn"], tiles, n_full),
          _tiles(params.get("linear", {}), tiles, n_linear),
          _tiles((history, state), tiles, n_linear), jnp.arange(tiles))

    def tile(carry, xs):
        x, cache_kv = carry  # the whole kv cache is carried and written in place
        common, attn, linear, recurrent, index = xs
        full_layers, new_recurrent = 0, []
        for i, kind in enumerate(pattern):
            j = full_layers if kind == FULL else len(new_recurrent)
            mixer = (_member(attn, j, n_full) if kind == FULL
                     else _member(linear, j, n_linear))
            x, cache_kv, layer_recurrent = _layer(
                cfg, kind, use_chunks, x, _member(common, i, len(pattern)), mixer, inputs,
                cache_kv, index * n_full + full_layers,
                () if kind == FULL else _member(recurrent, j, n_linear))
            if kind == FULL:
                full_layers += 1
            else:
                new_recurrent.append(layer_recurrent)
        return (constrain(x), cache_kv), _stack(new_recurrent, n_linear, recurrent)

    if remat:
        tile = jax.checkpoint(tile, prevent_cse=False)
    (x, cache_kv), (history, state) = jax.lax.scan(tile, (x, cache_kv), xs)
    history, state = _untile((history, state), n_linear)
    return x, cache_kv, history, state


def _unrolled_layers(params, cfg: QwenConfig, use_chunks, remat: bool, x, inputs: _Inputs,
                     cache_kv, history, state, constrain):
    """The layers one after another, each with its own weight arrays (`unstack_layers`);
    `constrain` places each layer's output. Returns (x, cache_kv, history, state)."""
    layer = _layer
    if remat:
        layer = jax.checkpoint(_layer, prevent_cse=False, static_argnums=(0, 1, 2))
    full, linear = 0, 0
    for kind, common in zip(cfg.kinds, params["layers"]):
        if kind == FULL:
            x, cache_kv, _ = layer(cfg, kind, use_chunks, x, common, params["attn"][full],
                                   inputs, cache_kv, full, ())
            full += 1
        else:
            x, _, (h, s) = layer(cfg, kind, use_chunks, x, common, params["linear"][linear],
                                 inputs, None, None, (history[linear], state[linear]))
            history, state = history.at[linear].set(h), state.at[linear].set(s)
            linear += 1
        x = constrain(x)
    return x, cache_kv, history, state


def unstack_layers(params):
    """The params with every layer's weights as separate arrays: `layers`, `attn` and `linear`
    become tuples of per-layer trees whose leaves lack the leading layer axis (a copy of the
    layer weights).

    `forward` runs such params as an unrolled loop instead of a scan. On CPU that is what decoding
    wants: XLA:CPU copies a layer's weights out of the stacked arrays before its matmuls (a 55M
    Qwen3.5 decode step: 35 ms stacked, 14-17 ms unstacked). Training keeps the stacked layout:
    one compiled layer, whatever the depth.
    """
    def split(stacked):
        leaves = jax.tree.leaves(stacked)
        count = leaves[0].shape[0] if leaves else 0
        return tuple(jax.tree.map(operator.itemgetter(i), stacked) for i in range(count))

    return {**params, **{group: split(params[group]) for group in ("layers", "attn", "linear")
                         if group in params}}


def forward(params, cfg: QwenConfig, tokens: jax.Array, positions: jax.Array,
            cache: Cache | None = None, use_chunks: bool | None = None,
            last_only: bool = False, remat: bool = False,
            hidden_only: bool = False, activation_sharding=None
            ) -> tuple[jax.Array, Cache | None]:
    """Logits of every token, and the updated cache.

    With stacked params (`describe`) the layers are scanned in tiles of `cfg.pattern` (one
    layer for Qwen2/3, e.g. three DeltaNet layers and one full-attention layer for Qwen3.5),
    each tile unrolled; with `unstack_layers` params they run as an unrolled loop, and the
    cache's k and v may then also be tuples of per-layer arrays. Both give the same values.

    Args:
      params: the params pytree of `models.qwen.params.describe(cfg)`, or `unstack_layers` of it.
      cfg: QwenConfig (static under jit).
      tokens: int32 [B, L] token ids.
      positions: int32 [B, L] rotary positions, -1 on padding.
      cache: None, or a Cache with at least `length + L` slots (writes past the end are
        clamped by XLA and would overwrite the last slots: size caches for the whole episode).
      use_chunks: DeltaNet form (None: chunked for L >= 64).
      last_only: compute logits for the last position only ([B, 1, V]), as sampling needs.
      remat: recompute each layer's (tile's) activations in the backward pass, keeping only its
        input (training memory; no effect on the values).
      hidden_only: return the final normalised hidden states [B, L, D] (the params' dtype)
        instead of logits, for a caller that applies `lm_head` itself, e.g. in chunks.
      activation_sharding: None, or a sharding of the hidden states [B, L, D] that the
        embedding and every layer's output are constrained to (under FSDP: rows over the
        batch axes, so each layer gathers its weights instead of splitting the activations'
        width).

    Returns:
      (float32 logits [B, L, V] (or the hidden states, see `hidden_only`), the cache with
      these tokens written, or None).

    Raises:
      ValueError: concrete `tokens` outside the vocabulary (`check_token_ids`), or more
        tokens than the cache has slots.
    """
    check_token_ids(tokens, cfg.vocab_size)
    batch, l = tokens.shape
    if cache is not None and l > cache.valid.shape[1]:
        raise ValueError(f"tokens: {l} new tokens do not fit a cache of "
                         f"{cache.valid.shape[1]} slots")
    def constrain(h):
        if activation_sharding is None:
            return h
        return jax.lax.with_sharding_constraint(h, activation_sharding)

    x = constrain(params["embed"][tokens])
    cos, sin = rotary(cfg, positions, cfg.rotary_dim)
    token_valid = positions >= 0
    if cache is None:
        q_slots, valid, length = None, token_valid, jnp.zeros((), jnp.int32)
        fresh = init_cache(cfg, batch, 0, x.dtype)
        history, state = fresh.history, fresh.state
    else:
        q_slots = cache.length + jnp.arange(l)
        valid = jax.lax.dynamic_update_slice_in_dim(cache.valid, token_valid, cache.length,
                                                    axis=1)
        length, history, state = cache.length, cache.history, cache.state
    layers = _unrolled_layers if isinstance(params["layers"], tuple) else _scanned_layers
    kv = None if cache is None else (cache.k, cache.v)
    x, kv, history, state = layers(params, cfg, use_chunks, remat, x,
                                   _Inputs(cos, sin, q_slots, valid, token_valid, length),
                                   kv, history, state, constrain)
    if last_only:
        x = x[:, -1:]
    x = rms_norm(x, params["norm"], cfg.rms_norm_eps, cfg.norm_plus_one)
    if hidden_only:
        logits = x
    else:
        logits = dense(x, lm_head(params, cfg), preferred_element_type=jnp.float32)
    if cache is None:
        return logits, None
    return logits, Cache(*kv, valid, cache.length + l, history, state)


def lm_head(params, cfg: QwenConfig) -> jax.Array:
    """The output projection [D, V]: the embedding transposed when the model ties them, unless
    the params carry that transpose as their own `lm_head` (`sampler.sampling_params`)."""
    if cfg.tie_word_embeddings and "lm_head" not in params:
        return params["embed"].T
    return params["lm_head"]


def positions_from_mask(mask: jax.Array) -> jax.Array:
    """Rotary positions of a left- or right-padded batch: int32 [B, L], -1 where mask is false.

    Args:
      mask: bool [B, L] real tokens.
    """
    return jnp.where(mask, jnp.cumsum(mask, axis=1) - 1, -1).astype(jnp.int32)
