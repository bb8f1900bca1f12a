"""The long-lived KV cache: after resets, shared prefills, compaction and growth, every row's
next-token logits are those of a plain forward pass over that row's whole sequence."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import qwen
from models.qwen import kv_cache
from models.qwen.sampler import generate, sampling_params
from tests.models.test_sampler import tiny  # noqa: F401 - a fixture

ROWS = 3
FORWARD = jax.jit(qwen.forward, static_argnums=1)


def left_padded(sequences: list[list[int]], starts: list[int], width: int):
    """int32 [R, width] tokens and positions of each sequence continuing at its start; an
    empty sequence is an idle row."""
    tokens = np.zeros((len(sequences), width), np.int32)
    positions = np.full((len(sequences), width), -1, np.int32)
    for row, (seq, start) in enumerate(zip(sequences, starts)):
        if seq:
            tokens[row, width - len(seq):] = seq
            positions[row, width - len(seq):] = np.arange(start, start + len(seq))
    return jnp.asarray(tokens), jnp.asarray(positions)


class Rows:
    """A cache over ROWS conversations, with the token sequence each row should hold."""

    def __init__(self, params, cfg, slots: int, platform: str | None = None):
        self.params, self.cfg = sampling_params(params, cfg), cfg
        self.cache = kv_cache.empty(cfg, ROWS, slots, platform=platform)
        self.held: list[list[int]] = [[] for _ in range(ROWS)]

    def write(self, new: list[list[int]], width: int) -> jax.Array:
        """Appends new[r] to row r (all in one forward call); returns the last logits [R, V]."""
        tokens, positions = left_padded(new, [len(h) for h in self.held], width)
        logits, self.cache = FORWARD(self.params, self.cfg, tokens, positions, self.cache)
        for row, seq in enumerate(new):
            self.held[row] += seq
        return logits[:, -1]

    def assert_rows_are_their_sequences(self, rng):
        """The next token of every row scores as in a plain forward over its sequence."""
        nxt = [[int(rng.integers(1, self.cfg.vocab_size))] for _ in range(ROWS)]
        expected = self.plain([h + n for h, n in zip(self.held, nxt)])
        np.testing.assert_allclose(self.write(nxt, 1), expected, atol=5e-5, rtol=1e-4)

    def plain(self, sequences: list[list[int]]) -> np.ndarray:
        """float32 [R, V] the last logits of a cache-free forward over each whole sequence."""
        width = 32  # one compiled shape for every check
        tokens = np.zeros((len(sequences), width), np.int32)
        for row, seq in enumerate(sequences):
            tokens[row, : len(seq)] = seq
        mask = np.arange(width)[None] < np.array([len(s) for s in sequences])[:, None]
        logits, _ = FORWARD(self.params, self.cfg, jnp.asarray(tokens),
                            qwen.positions_from_mask(jnp.asarray(mask)))
        return np.asarray(logits)[np.arange(len(sequences)), [len(s) - 1 for s in sequences]]


def random_ids(rng, cfg, n: int) -> list[int]:
    return rng.integers(1, cfg.vocab_size, n).tolist()


@pytest.mark.parametrize("layout", ["cpu", "tpu"])  # per-layer arrays; stacked layers
def test_housekeeping_keeps_every_row_its_own_sequence(tiny, layout):  # noqa: F811
    _, cfg, params = tiny
    rng = np.random.default_rng(0)
    rows = Rows(params, cfg, slots=64, platform=layout)
    rows.write([random_ids(rng, cfg, n) for n in (5, 2, 7)], 8)  # left padding
    rows.write([random_ids(rng, cfg, 3), [], random_ids(rng, cfg, 1)], 4)  # row 1 idle
    rows.assert_rows_are_their_sequences(rng)

    # Row 1 takes a new conversation shared with row 2: prefilled once, copied to both.
    head = random_ids(rng, cfg, 6)
    rows.cache = kv_cache.reset_rows(rows.cache, jnp.array([False, True, True]))
    tokens, positions = left_padded([head, []], [0, 0], 8)
    rows.cache = kv_cache.prefill_rows(rows.params, cfg, rows.cache, tokens, positions,
                                       jnp.array([-1, 0, 0], jnp.int32))
    rows.held[1], rows.held[2] = list(head), list(head)
    assert int(rows.cache.length) == 8 + 4 + 1 + 8  # every call advances all rows
    rows.assert_rows_are_their_sequences(rng)


    before = int(rows.cache.length)
    rows.cache = kv_cache.compact(rows.cache)
    assert int(rows.cache.length) == max(map(len, rows.held)) < before
    rows.assert_rows_are_their_sequences(rng)
    rows.cache = kv_cache.resize(rows.cache, 128)
    assert rows.cache.valid.shape == (ROWS, 128)
    rows.write([random_ids(rng, cfg, 2)] * ROWS, 2)
    rows.assert_rows_are_their_sequences(rng)
    rows.cache = kv_cache.compact(rows.cache)
    rows.cache = kv_cache.resize(rows.cache, int(rows.cache.length) + 3)  # fewer slots
    rows.write([random_ids(rng, cfg, 2)] * ROWS, 2)
    assert rows.cache.valid.shape[1] == int(rows.cache.length) + 1
    rows.assert_rows_are_their_sequences(rng)

    # Rows 2 and 0 continue while row 1 waits, each after what it holds: gathered (two of
    # three rows), then in place (three of three, one of them padding).
    rows.cache = kv_cache.with_room(rows.cache, 16)  # no room: compacted and grown
    slots = rows.cache.valid.shape[1]
    assert slots & (slots - 1) == 0 and int(rows.cache.length) + 16 <= slots
    for extending in ([2, 0], [2, 0, -1]):
        new = [random_ids(rng, cfg, 3), random_ids(rng, cfg, 5)]
        tokens, positions = left_padded(
            [*new, []][: len(extending)], [len(rows.held[2]), len(rows.held[0]), 0], 8)
        rows.cache = kv_cache.extend_rows(rows.params, cfg, rows.cache,
                                          jnp.array(extending, jnp.int32), tokens, positions)
        rows.held[2] += new[0]
        rows.held[0] += new[1]
        rows.assert_rows_are_their_sequences(rng)
    length = int(rows.cache.length)
    assert kv_cache.with_room(rows.cache, slots - length) is rows.cache  # room: as it is
    rows.cache = kv_cache.with_room(rows.cache, 100, shrink=True)
    assert int(rows.cache.length) == max(map(len, rows.held)) < length
    assert rows.cache.valid.shape[1] == 1 << (int(rows.cache.length) + 99).bit_length()
    rows.assert_rows_are_their_sequences(rng)

    # Other rows: 2 and 0 swapped, 1 dropped for an empty one, which then starts afresh.
    rows.cache = kv_cache.select_rows(rows.cache, jnp.array([2, -1, 0], jnp.int32))
    rows.held = [rows.held[2], [], rows.held[0]]
    assert not np.asarray(rows.cache.valid[1]).any()
    rows.assert_rows_are_their_sequences(rng)


def test_generate_leaves_idle_rows_alone_and_keeps_the_per_layer_layout(tiny):  # noqa: F811
    _, cfg, params = tiny
    rng = np.random.default_rng(1)
    rows = Rows(params, cfg, slots=64)
    rows.write([random_ids(rng, cfg, 4) for _ in range(ROWS)], 4)
    before = jax.device_get(rows.cache)
    tokens, positions = left_padded([random_ids(rng, cfg, 2), [], random_ids(rng, cfg, 1)],
                                    [4, 4, 4], 2)
    out = generate(rows.params, cfg, tokens, positions, rows.cache, jax.random.key(0),
                   max_tokens=4, max_new_tokens=jnp.int32(4), stop_tokens=jnp.array([-1]))
    assert isinstance(out.cache.k, tuple) == (jax.default_backend() == "cpu")
    assert out.lengths.tolist() == [4, 0, 4]
    assert np.all(np.asarray(out.logprobs[1]) == 0)
    after = jax.device_get(out.cache)
    np.testing.assert_array_equal(after.valid[1], before.valid[1])
    held = before.valid[1]  # what the idle row's slots hold (the rest is never read)
    for k_before, k_after in zip(jax.tree.leaves(before.k), jax.tree.leaves(after.k)):
        np.testing.assert_array_equal(k_after[1][:, held], k_before[1][:, held])
    np.testing.assert_array_equal(after.state[:, 1], before.state[:, 1])


def test_resizing_below_the_slots_in_use_is_an_error(tiny):  # noqa: F811
    _, cfg, _ = tiny
    cache = kv_cache.empty(cfg, 1, 16)._replace(length=jnp.int32(9))
    with pytest.raises(ValueError, match="fewer than the 9"):
        kv_cache.resize(cache, 8)
