"""Segment reductions against plain numpy."""

from __future__ import annotations

import jax
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from prover_jax.credit.segments import (
    dense_ids,
    masked_quantiles,
    segment_median,
    segment_stats,
    sort_order,
)

N = 24
jitted_quantiles = jax.jit(masked_quantiles, static_argnames="qs")
keys = st.lists(st.integers(-3, 3), min_size=N, max_size=N).map(np.int32)


@given(keys, keys, st.lists(st.booleans(), min_size=N, max_size=N))
def test_dense_ids_number_distinct_tuples_in_order(a, b, valid):
    valid = np.array(valid)
    ids = np.asarray(dense_ids((a, b), valid))
    distinct = sorted({(x, y) for x, y, v in zip(a, b, valid) if v})
    expected = [distinct.index((x, y)) if v else N for x, y, v in zip(a, b, valid)]
    assert ids.tolist() == expected


@given(keys, keys)
def test_sort_order_is_lexicographic_and_stable(a, b):
    order = np.asarray(sort_order((a, b)))
    assert order.tolist() == sorted(range(N), key=lambda i: (a[i], b[i], i))


# XLA on CPU flushes subnormal floats to zero, so the kernel sees 3e-44 as 0 and numpy does not
@given(st.lists(st.integers(0, 4), min_size=N, max_size=N),
       st.lists(st.floats(-5, 5, width=32, allow_subnormal=False), min_size=N, max_size=N),
       st.lists(st.integers(1, 3), min_size=N, max_size=N))
def test_segment_stats_match_weighted_numpy(segments, values, weights):
    ids = np.array(segments, np.int32)
    values, weights = np.array(values, np.float32), np.array(weights, np.float32)
    stats = segment_stats(values, ids, weights)
    for i in range(N):
        rows = ids == ids[i]
        expanded = np.repeat(values[rows].astype(np.float64), weights[rows].astype(int))
        np.testing.assert_allclose(stats.mean[i], expanded.mean(), atol=1e-4)
        std = expanded.std(ddof=1) if expanded.size > 1 else 0.0
        np.testing.assert_allclose(stats.std[i], std, atol=1e-3)
        assert bool(stats.constant[i]) == bool(np.all(values[rows] == values[i]))


@given(st.lists(st.integers(0, 3), min_size=N, max_size=N),
       st.lists(st.sampled_from([0.0, 1.0, -1.0, 2.5, 0.5, -3.0]), min_size=2 * N,
                max_size=2 * N),
       st.lists(st.booleans(), min_size=2 * N, max_size=2 * N))
def test_segment_median_matches_numpy(segments, values, valid):
    ids = np.array(segments, np.int32)
    values = np.array(values, np.float32).reshape(N, 2)
    valid = np.array(valid).reshape(N, 2)
    med = np.asarray(segment_median(values, ids, valid))
    for i in range(N):
        for j in range(2):
            members = values[(ids == ids[i]) & valid[:, j], j]
            assert med[i, j] == (np.median(members) if members.size else 0.0)


@given(st.lists(st.floats(0, 100, width=32), min_size=1, max_size=60),
       st.data())
def test_masked_quantiles_match_numpy(values, data):
    x = np.zeros(64, np.float32)  # one shape: a single compilation
    x[:len(values)] = values
    mask = np.zeros(64, bool)
    mask[:len(values)] = data.draw(st.lists(st.booleans(), min_size=len(values),
                                            max_size=len(values)))
    qs = (0.0, 0.5, 0.95, 1.0)
    got = np.asarray(jitted_quantiles(x, mask, qs))
    expected = np.quantile(x[mask].astype(np.float64), qs) if mask.any() else np.zeros(4)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
