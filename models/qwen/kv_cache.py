"""A KV cache kept across the turns of many conversations, one row per conversation.

`forward` writes the new tokens of every row at the same slots (`length ..`), so a row that
prefills fewer tokens than another, or stops decoding earlier, leaves invalid slots behind.
A long-lived cache therefore needs housekeeping, all of it here and all jitted:

- `empty`: a cache in the layout `generate` runs fastest with (per-layer arrays on CPU);
- `reset_rows`: forget some rows' conversations (their slots become invalid, their recurrent
  state zero), so the rows can take new ones;
- `compact`: move every row's valid slots to the front, in order, so `length` is the longest
  row's token count again;
- `resize`: more slots, or fewer once `compact` has freed them (attention reads every slot,
  so a cache that stays larger than its rows need costs every decode step); `with_room`
  compacts and resizes only when the free slots run out;
- `prefill_rows`: write tokens into some rows only, through a small batch of distinct
  sequences, each copied to every row that shares it (K continuations of one prefix, or the G
  episodes of one task, are prefilled once);
- `extend_rows`: write new tokens after what some rows hold, those rows alone running the
  model (a continuous batch's next turn for a few rows, while the others wait mid-reply);
- `select_rows`: a cache of other rows: some of these, in another order, and empty ones
  (fewer rows once most have ended, since every decode step runs every row; or more).

Attention masks slots by validity and by order, never by index, so none of this changes what a
row attends to. Keys and values: [n_full, B, K, S, E] or a tuple of [B, K, S, E]; `valid`
[B, S]; `history` [n_linear, B, ...]; `state` [n_linear, B, ...].
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from models.qwen.config import QwenConfig
from models.qwen.model import Cache, forward, init_cache


def empty(cfg: QwenConfig, batch: int, slots: int, dtype=jnp.float32,
          platform: str | None = None) -> Cache:
    """An empty cache of `batch` rows and `slots` slots for `platform` (default: the default
    backend's): keys and values per layer on CPU, stacked elsewhere."""
    cache = init_cache(cfg, batch, slots, dtype)
    if (platform or jax.default_backend()) != "cpu":
        return cache
    return cache._replace(k=tuple(cache.k), v=tuple(cache.v))


def _map_kv(fn, cache: Cache) -> Cache:
    """Applies `fn(array, batch_axis)` to keys and values, in either layout."""
    if isinstance(cache.k, tuple):
        return cache._replace(k=tuple(fn(x, 0) for x in cache.k),
                              v=tuple(fn(x, 0) for x in cache.v))
    return cache._replace(k=fn(cache.k, 1), v=fn(cache.v, 1))


@functools.partial(jax.jit, donate_argnums=0)
def reset_rows(cache: Cache, rows: jax.Array) -> Cache:
    """The cache with bool [B] `rows` emptied: no valid slot, zero recurrent state."""
    keep = ~rows
    return cache._replace(valid=cache.valid & keep[:, None],
                          history=cache.history * keep[None, :, None, None].astype(
                              cache.history.dtype),
                          state=cache.state * keep[None, :, None, None, None])


@jax.jit  # no donation: the row count changes
def select_rows(cache: Cache, rows: jax.Array) -> Cache:
    """A cache of R rows: row i is `cache`'s row rows[i], or an empty row where rows[i] is -1.

    Args:
      cache: a cache of B rows.
      rows: int32 [R], entries in [-1, B).

    Returns:
      A cache of R rows and the same slots and `length`.
    """
    take = jnp.maximum(rows, 0)
    kept = rows >= 0
    picked = _map_kv(lambda x, batch_axis: jnp.take(x, take, axis=batch_axis), cache)
    return picked._replace(
        valid=cache.valid[take] & kept[:, None],
        history=jnp.take(cache.history, take, axis=1) * kept[None, :, None, None].astype(
            cache.history.dtype),
        state=jnp.take(cache.state, take, axis=1) * kept[None, :, None, None, None])


@functools.partial(jax.jit, donate_argnums=0)
def compact(cache: Cache) -> Cache:
    """The cache with each row's valid slots moved to the front, in order; `length` becomes
    the most valid slots of any row."""
    order = jnp.argsort(~cache.valid, axis=1, stable=True)  # [B, S]: valid slots first

    def gather(x, batch_axis):
        index = order.reshape((1,) * batch_axis + order.shape[:1] + (1,) + order.shape[1:]
                              + (1,))
        return jnp.take_along_axis(x, index, axis=batch_axis + 2)

    cache = _map_kv(gather, cache)
    valid = jnp.take_along_axis(cache.valid, order, axis=1)
    return cache._replace(valid=valid, length=jnp.max(jnp.sum(valid, axis=1)).astype(jnp.int32))


def resize(cache: Cache, slots: int) -> Cache:
    """The cache with `slots` slots: the new ones empty, or the slots from `slots` on dropped.

    Raises:
      ValueError: `slots` below the cache's `length` (slots still in use; `compact` first).
    """
    length = int(cache.length)
    if slots < length:
        raise ValueError(f"resize: {slots} slots is fewer than the {length} the cache uses; "
                         f"compact it first")
    return _resized(cache, slots)


@functools.partial(jax.jit, static_argnums=1)  # no donation: the arrays change shape
def _resized(cache: Cache, slots: int) -> Cache:
    more = slots - cache.valid.shape[1]

    def fit(x, slot_axis):
        if more < 0:
            return jax.lax.slice_in_dim(x, 0, slots, axis=slot_axis)
        widths = [(0, 0)] * x.ndim
        widths[slot_axis] = (0, more)
        return jnp.pad(x, widths)

    cache = _map_kv(lambda x, batch_axis: fit(x, batch_axis + 2), cache)
    return cache._replace(valid=fit(cache.valid, 1))


def with_room(cache: Cache, needed: int, shrink: bool = False) -> Cache:
    """`cache` with `needed` free slots after its `length`: as it is where it has them, else
    compacted, and grown to the power of two of slots it then needs where that is not enough
    (with `shrink`, also cut down to it where it is smaller)."""
    if int(cache.length) + needed <= cache.valid.shape[1]:
        return cache
    cache = compact(cache)
    slots = 1 << (int(cache.length) + needed - 1).bit_length()
    if slots > cache.valid.shape[1] or (shrink and slots < cache.valid.shape[1]):
        cache = resize(cache, slots)
    return cache


def _write_rows(into: Cache, source: Cache, sources: jax.Array) -> Cache:
    """`into` with row b's slots `length .. length + P - 1` and recurrent state replaced by
    `source`'s row sources[b] (slots 0 .. P - 1) wherever sources[b] >= 0, in place (the other
    rows' slots there are invalid, and stay so)."""
    take = jnp.maximum(sources, 0)
    copy = sources >= 0
    start = into.length

    def write(ours, theirs, batch_axis, slots):
        return jax.lax.dynamic_update_slice_in_dim(
            ours, jnp.take(theirs, take, axis=batch_axis), start, axis=slots)

    def pick(ours, theirs, batch_axis):
        shape = [1] * ours.ndim
        shape[batch_axis] = -1
        return jnp.where(copy.reshape(shape), jnp.take(theirs, take, axis=batch_axis), ours)

    if isinstance(into.k, tuple):
        k = tuple(write(a, b, 0, 2) for a, b in zip(into.k, source.k))
        v = tuple(write(a, b, 0, 2) for a, b in zip(into.v, source.v))
    else:  # layer by layer, so one layer's rows are gathered at a time
        def layer(i, kv):
            return tuple(jax.lax.dynamic_update_index_in_dim(
                ours, write(ours[i], theirs[i], 0, 2), i, axis=0)
                for ours, theirs in zip(kv, (source.k, source.v)))
        k, v = jax.lax.fori_loop(0, into.k.shape[0], layer, (into.k, into.v))
    valid = jax.lax.dynamic_update_slice_in_dim(
        into.valid, jnp.take(source.valid, take, axis=0) & copy[:, None], start, axis=1)
    return Cache(k, v, valid, into.length + source.valid.shape[1],
                 pick(into.history, source.history, 1), pick(into.state, source.state, 1))


@functools.partial(jax.jit, static_argnames="cfg", donate_argnames="cache")
def prefill_rows(params, cfg: QwenConfig, cache: Cache, tokens: jax.Array,
                 positions: jax.Array, sources: jax.Array) -> Cache:
    """Prefills U distinct sequences and copies each into the rows that share it.

    The U sequences run as their own small batch over a fresh cache of P slots, so rows that
    are not prefilled cost nothing, and attention reads the P new slots only (a receiving row
    is empty). Their slots are then written into the rows at `length .. length + P - 1`, in
    place; the other rows' slots there stay invalid.

    Args:
      params, cfg: the model (params as `sampler.sampling_params` lays them out).
      cache: the cache of B rows; every row that receives a sequence must be empty
        (`reset_rows`).
      tokens: int32 [U, P] the distinct sequences, left-padded.
      positions: int32 [U, P] their rotary positions, -1 on padding.
      sources: int32 [B], the sequence row b receives, -1 for none.

    Returns:
      The cache with `length` advanced by P.
    """
    fresh = init_cache(cfg, tokens.shape[0], tokens.shape[1], cache.history.dtype)
    if isinstance(cache.k, tuple):
        fresh = fresh._replace(k=tuple(fresh.k), v=tuple(fresh.v))
    _, written = forward(params, cfg, tokens, positions, fresh, last_only=True, hidden_only=True)
    return _write_rows(cache, written, sources)


@functools.partial(jax.jit, static_argnames="cfg", donate_argnames="cache")
def extend_rows(params, cfg: QwenConfig, cache: Cache, rows: jax.Array, tokens: jax.Array,
                positions: jax.Array) -> Cache:
    """Writes U rows' new tokens after what each holds, attending to it.

    With U < B the U rows are gathered into a small batch of their own (every slot), run
    through the model with the new tokens and written back, so the other rows cost nothing
    (a copy of U rows: keep U to at most half the rows). With U = B every row runs, the others
    on padding, in place. The tokens take slots `length .. length + P - 1` of their rows; the
    other rows' slots there stay invalid.

    Args:
      params, cfg: the model (params as `sampler.sampling_params` lays them out).
      cache: the cache of B rows, with room for P more slots after its `length`.
      rows: int32 [U] the rows to extend, distinct, -1 for none (padding the count).
      tokens: int32 [U, P] their new tokens, left-padded.
      positions: int32 [U, P] their rotary positions, -1 on padding.

    Returns:
      The cache with `length` advanced by P.
    """
    batch = cache.valid.shape[0]
    # the padding rows write out of bounds: dropped
    into = jnp.where(rows >= 0, rows, batch)
    if tokens.shape[0] == batch:
        tokens = jnp.zeros_like(tokens).at[into].set(tokens, mode="drop")
        positions = jnp.full_like(positions, -1).at[into].set(positions, mode="drop")
        return forward(params, cfg, tokens, positions, cache, last_only=True,
                       hidden_only=True)[1]
    take = jnp.maximum(rows, 0)

    def gather(x, batch_axis):
        return jnp.take(x, take, axis=batch_axis)

    def scatter(whole, part, batch_axis):
        index = (slice(None),) * batch_axis + (into,)
        return whole.at[index].set(part, mode="drop")

    picked = _map_kv(gather, cache)._replace(valid=cache.valid[take],
                                             history=gather(cache.history, 1),
                                             state=gather(cache.state, 1))
    _, written = forward(params, cfg, tokens, positions, picked, last_only=True,
                         hidden_only=True)
    if isinstance(cache.k, tuple):
        k = tuple(scatter(a, b, 0) for a, b in zip(cache.k, written.k))
        v = tuple(scatter(a, b, 0) for a, b in zip(cache.v, written.v))
    else:
        k, v = scatter(cache.k, written.k, 1), scatter(cache.v, written.v, 1)
    return Cache(k, v, scatter(cache.valid, written.valid, 0), written.length,
                 scatter(cache.history, written.history, 1),
                 scatter(cache.state, written.state, 1))
