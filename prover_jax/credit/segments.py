"""Segment reductions: group statistics without Python loops over groups.

Group ids in a batch are arbitrary integers (task indices, hashes); `dense_ids` maps them to
`0..n_groups-1` inside `jit` by sorting, so every statistic below is a `segment_sum` with a static
number of segments (the number of entries, an upper bound on the number of groups). Entries that
are not valid get the id `n`, which `segment_sum` drops.

Glossary: n entries (rows, or rows × turns flattened), m columns.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


def sort_order(keys: tuple[jax.Array, ...]) -> jax.Array:
    """Permutation sorting by `keys[0]`, then `keys[1]`, ... (a stable LSD sort).

    Chained single-key stable argsorts; on CPU they are two orders of magnitude faster than the
    multi-operand sort behind `jnp.lexsort`.
    """
    order = jnp.argsort(keys[-1], stable=True)
    for key in reversed(keys[:-1]):
        order = order[jnp.argsort(key[order], stable=True)]
    return order


def dense_ids(keys: tuple[jax.Array, ...], valid: jax.Array) -> jax.Array:
    """Dense ids of distinct key tuples among valid entries.

    Args:
      keys: one or more int arrays [N]; entries with equal tuples share an id.
      valid: bool [N]; invalid entries get id N (dropped by `segment_sum`).

    Returns:
      int32 [N] with ids in 0..(number of distinct valid tuples)-1, ordered by key value.
    """
    n = valid.shape[0]
    order = sort_order(((~valid).astype(jnp.int32),) + keys)
    changed = jnp.zeros(n, dtype=bool).at[0].set(True)
    for key in keys:
        sorted_key = key[order]
        changed = changed | jnp.concatenate([jnp.ones(1, bool), sorted_key[1:] != sorted_key[:-1]])
    sorted_ids = jnp.cumsum(changed.astype(jnp.int32)) - 1
    ids = jnp.zeros(n, jnp.int32).at[order].set(sorted_ids)
    return jnp.where(valid, ids, n)


class SegmentStats(NamedTuple):
    """Per-entry view of its segment's statistics; every field is float32 [N]."""

    count: jax.Array  # total weight of the entry's segment
    mean: jax.Array  # weighted mean
    std: jax.Array  # unbiased (n-1) standard deviation; 0 where count <= 1
    constant: jax.Array  # bool: every valid value in the segment is equal


def segment_stats(values: jax.Array, ids: jax.Array, weights: jax.Array | None = None
                  ) -> SegmentStats:
    """Weighted mean and unbiased std of `values` within segments, broadcast back to entries.

    With weights w the unbiased variance is sum w (x - mean)^2 / (sum w - 1): an entry of weight w
    counts as w repeated observations, the way a per-turn batch repeats a trajectory's reward.

    Args:
      values: float [N].
      ids: int32 [N] segment ids in 0..N-1, or N for entries to ignore.
      weights: float [N] or None for unit weights.

    Returns:
      SegmentStats of the entry's own segment (zeros for ignored entries).
    """
    n = values.shape[0]
    w = jnp.ones_like(values) if weights is None else weights.astype(values.dtype)
    seg_sum = lambda x: jax.ops.segment_sum(x, ids, num_segments=n)  # noqa: E731
    take = lambda s: jnp.where(ids < n, s[jnp.minimum(ids, n - 1)], 0.0)  # noqa: E731
    count = take(seg_sum(w))
    mean = take(seg_sum(w * values)) / jnp.maximum(count, 1e-30)
    sq = take(seg_sum(w * (values - mean) ** 2))
    std = jnp.sqrt(jnp.where(count > 1, sq / jnp.maximum(count - 1, 1e-30), 0.0))
    hi = jax.ops.segment_max(values, ids, num_segments=n)
    lo = jax.ops.segment_min(values, ids, num_segments=n)
    constant = take((hi == lo).astype(values.dtype)) > 0
    return SegmentStats(count, mean, std, constant)


def segment_median(values: jax.Array, ids: jax.Array, valid: jax.Array) -> jax.Array:
    """Median of each column within each segment, over valid entries only.

    Computed from pairwise ranks inside segments rather than by sorting: for the N <= a few
    thousand rows of a batch, comparing all pairs [N, N, M] is far cheaper than a keyed sort per
    column on CPU, and trivially parallel on accelerators. The entry at sorted position p of a
    segment is the largest value whose count of strictly smaller values is <= p.

    Args:
      values: float [N, M].
      ids: int32 [N] segment ids (any int; N or more = ignored row).
      valid: bool [N, M]; entries that take part in their column's median.

    Returns:
      float [N, M]: the median of the entry's (segment, column), broadcast back to the entry;
      0 where the entry's row is ignored or its (segment, column) has no valid entry.
    """
    n = values.shape[0]
    same = (ids[:, None] == ids[None, :]) & (ids < n)[:, None]
    part = same[:, :, None] & valid[None, :, :]  # [i, k, m]: k counts toward i's median
    smaller = part & (values[None, :, :] < values[:, None, :])
    rank = jnp.sum(smaller, axis=1)  # [N, M] values below entry i in its segment
    count = jnp.sum(part, axis=1)

    def value_at(position: jax.Array) -> jax.Array:
        eligible = part & (rank[None, :, :] <= position[:, None, :])
        return jnp.max(jnp.where(eligible, values[None, :, :], -jnp.inf), axis=1)

    median = 0.5 * (value_at((count - 1) // 2) + value_at(count // 2))
    return jnp.where(count > 0, median, 0.0)


def masked_quantiles(x: jax.Array, mask: jax.Array, qs: tuple[float, ...]) -> jax.Array:
    """Quantiles of non-negative x over masked entries, interpolated as `numpy.quantile`.

    The order statistics come from a bisection on the float bit patterns (monotone for x >= 0):
    31 count-below passes find every requested rank exactly, several times faster on CPU than
    sorting the array, and free of any data-dependent shape.

    Args:
      x: float array of any shape, x >= 0 where masked (magnitudes).
      mask: bool, same shape.
      qs: quantiles in [0, 1].

    Returns:
      float32 [len(qs)]; zeros when the mask is empty.
    """
    bits = jax.lax.bitcast_convert_type(jnp.abs(x).astype(jnp.float32).ravel(), jnp.int32)
    member = mask.ravel()
    count = jnp.sum(member, dtype=jnp.int32)  # int32 also under jax_enable_x64, as the bits are
    last = jnp.maximum(count - 1, 0)
    pos = jnp.asarray(qs, jnp.float32) * last.astype(jnp.float32)
    below = jnp.floor(pos).astype(jnp.int32)
    ranks = jnp.concatenate([below, jnp.minimum(below + 1, last)])

    def halve(_, bounds):
        lo, hi = bounds
        mid = lo + (hi - lo) // 2
        at_most = jnp.sum(member[None, :] & (bits[None, :] <= mid[:, None]), axis=1)
        enough = at_most > ranks
        return jnp.where(enough, lo, mid + 1), jnp.where(enough, mid, hi)

    bounds = (jnp.zeros_like(ranks), jnp.full_like(ranks, 0x7F800000))  # [0, +inf]
    lo, _ = jax.lax.fori_loop(0, 31, halve, bounds)
    order_stats = jax.lax.bitcast_convert_type(lo, jnp.float32)
    low, high = jnp.split(order_stats, 2)
    frac = pos - below
    return jnp.where(count > 0, low + (high - low) * frac, 0.0)
