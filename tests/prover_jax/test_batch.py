"""The packer and the batch validator."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import given

from prover_jax.batch import (
    Batch,
    Message,
    TokenStream,
    Trajectory,
    bucket,
    length_bucket,
    pack,
    pack_streams,
    validate,
)
from tests.conftest import groups


def conversation(turns: int, reward: float = 1.0) -> Trajectory:
    messages = [Message([1, 2, 3], "system")]
    for t in range(turns):
        messages += [Message([10 + t, 11 + t], "assistant", t), Message([5], "tool")]
    return Trajectory(messages, reward)


def test_pack_layout_hand_checked():
    batch = pack([[conversation(2, 1.0), conversation(1, 0.0)], [conversation(3, 0.5)]],
                 row_multiple=4)
    # row 0: [1 2 3 | 10 11 | 5 | 11 12 | 5] = 9 tokens -> L bucket 16; 3 rows -> B = 4; T: 3 -> 4
    assert batch.tokens.shape == (4, 16) and batch.turn_valid.shape == (4, 4)
    assert batch.tokens[0, :9].tolist() == [1, 2, 3, 10, 11, 5, 11, 12, 5]
    assert batch.loss_mask[0, :9].tolist() == [0, 0, 0, 1, 1, 0, 1, 1, 0]
    assert batch.turn_ids[0, :9].tolist() == [-1, -1, -1, 0, 0, -1, 1, 1, -1]
    assert batch.group_ids.tolist() == [0, 0, 1, -1]
    assert batch.rewards.tolist() == [1.0, 0.0, 0.5, 0.0]
    assert batch.turn_valid.sum(1).tolist() == [2, 1, 3, 0]


@given(groups())
def test_pack_roundtrip(gs):
    batch = pack(gs)
    rows = [traj for group in gs for traj in group]
    for b, traj in enumerate(rows):
        flat = [tok for m in traj.messages for tok in m.token_ids]
        assert batch.tokens[b, :len(flat)].tolist() == flat
        policy = [t for m in traj.messages for t in [m.turn] * len(m.token_ids)
                  if m.role == "assistant"]
        assert batch.turn_ids[b][batch.loss_mask[b]].tolist() == policy
        assert batch.rewards[b] == np.float32(traj.reward)
    assert batch.tokens.shape[1] == length_bucket(batch.tokens.shape[1])


def test_length_buckets_are_two_sizes_an_octave():
    sizes = sorted({1 << k for k in range(14)} | {3 << k for k in range(1, 12)})
    for minimum in (1, 16):
        for n in range(1, 5000):
            assert length_bucket(n, minimum) == min(s for s in sizes if s >= max(n, minimum))
            assert length_bucket(n, minimum) <= bucket(n, minimum)


def test_batch_is_a_pytree():
    batch = pack([[conversation(2)]])
    leaves = jax.tree_util.tree_leaves(batch)
    assert len(leaves) == 6
    doubled = jax.tree_util.tree_map(lambda x: x, batch)
    assert isinstance(doubled, Batch)
    assert jax.jit(lambda b: b.rewards * 2)(batch).tolist() == [2.0]


@pytest.mark.parametrize("gs, message", [
    ([[]], "groups\\[0\\] is empty"),
    ([[Trajectory([Message([1], "system")], 1.0)]], "no assistant message"),
    ([[conversation(2, float("nan"))]], "reward must be a finite number, got nan"),
    ([[conversation(2, None)]], "reward must be a finite number, got None"),
    ([[Trajectory([Message([1.7], "assistant", 0)], 1.0)]],
     "messages\\[0\\]: token_ids must be a flat sequence of integers, got float64"),
    ([[Trajectory([Message([3, -1], "assistant", 0)], 1.0)]],
     "messages\\[0\\]: token ids must be in \\[0, 2\\*\\*31\\), got -1..3"),
    ([], "groups is empty"),
    ([[Trajectory([Message([1], "assistant", 0), Message([2], "assistant", 2)], 1.0)]],
     "without gaps"),
    ([[Trajectory([Message([1], "narrator")], 1.0)]], "unknown role"),
    ([[Trajectory([Message([1], "assistant")], 1.0)]], "needs turn >= 0"),
])
def test_pack_rejects_bad_trajectories(gs, message):
    with pytest.raises(ValueError, match=message):
        pack(gs)


def test_pack_takes_numpy_scalars():
    batch = pack([[conversation(2, np.float32(1.0)), conversation(1, np.array(0.0))]],
                 row_multiple=np.int64(4))
    assert batch.rewards.tolist() == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("option", ["min_len", "min_turns", "row_multiple"])
def test_pack_rejects_bucket_options_below_one(option):
    with pytest.raises(ValueError, match=f"{option} must be an integer >= 1, got 0"):
        pack([[conversation(2)]], **{option: 0})


def test_pack_never_truncates():
    with pytest.raises(ValueError, match="max_len"):
        pack([[conversation(5)]], max_len=8)


def broken(**changes) -> Batch:
    batch = pack([[conversation(2), conversation(1, 0.0)]], row_multiple=4)
    arrays = {f.name: np.array(getattr(batch, f.name)) for f in dataclasses.fields(Batch)}
    for name, edit in changes.items():
        arrays[name] = edit(arrays[name])
    return Batch(**arrays)


def _set(index, value):
    def edit(x):
        x[index] = value
        return x
    return edit


@pytest.mark.parametrize("batch, message", [
    (lambda: broken(loss_mask=lambda x: x[:, :-1]), "loss_mask: shape"),
    (lambda: broken(rewards=lambda x: x[:3]), "rewards: 3 rows"),
    (lambda: broken(group_ids=lambda x: x[:, None]), "group_ids: expected rank 1"),
    (lambda: broken(rewards=lambda x: x.astype(np.int32)), "rewards: wrong dtype"),
    (lambda: broken(rewards=_set(1, np.nan)), "rewards: NaN"),
    (lambda: broken(turn_ids=_set((0, 3), 9)), "turn_ids: values outside"),
    (lambda: broken(turn_ids=_set((0, 0), 0)), "turn_ids: must be >= 0 exactly"),
    (lambda: broken(loss_mask=_set((3, 0), True), turn_ids=_set((3, 0), 0)),
     "loss_mask: set on padding rows"),
    (lambda: broken(turn_valid=_set((3, 0), True)), "turn_valid: set on padding rows"),
    (lambda: broken(turn_valid=_set((0, 0), False)), "turn_valid: not a prefix"),
    (lambda: broken(turn_valid=_set((1, 1), True), loss_mask=lambda x: x & False,
                    turn_ids=lambda x: x * 0 - 1), "no policy tokens"),
    (lambda: broken(turn_valid=_set((0, 1), False)), "point at invalid turns"),
    (lambda: broken(group_ids=_set(0, -3)), "group_ids: values below -1"),
    (lambda: broken(group_ids=lambda x: x.astype(np.int64) + 2**33), "beyond int32"),
    (lambda: broken(turn_valid=_set((1, 1), True)), "valid turns without policy tokens"),
])
def test_validate_names_the_array(batch, message):
    with pytest.raises(ValueError, match=message):
        validate(batch())


def test_trajectory_from_tokens_runs_and_errors():
    from prover_jax import trajectory_from_tokens

    # [sys sys | a0 a0 | obs | a1] -> four messages, turns 0 and 1 on the policy's runs
    traj = trajectory_from_tokens([1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 0, 1], [-1, -1, 0, 0, -1, 1],
                                  0.5)
    assert [(m.role, list(m.token_ids), m.turn) for m in traj.messages] == [
        ("user", [1, 2], -1), ("assistant", [3, 4], 0), ("user", [5], -1),
        ("assistant", [6], 1)]
    with pytest.raises(ValueError, match="one length"):
        trajectory_from_tokens([1, 2], [True], [0, 0], 1.0)


def test_streams_pack_with_their_sampler_logprobs():
    one = TokenStream.from_turns([[1, 2, 3], [5]], [[10, 11], [12]], [[-0.5, -0.25], [-2.0]])
    assert one.tokens.tolist() == [1, 2, 3, 10, 11, 5, 12]
    assert one.loss_mask.tolist() == [0, 0, 0, 1, 1, 0, 1]
    assert one.turn_ids.tolist() == [-1, -1, -1, 0, 0, -1, 1]
    two = TokenStream.from_turns([[4]], [[20, 21, 22]], [[-1.0, -1.5, -0.5]])
    batch, logprobs = pack_streams([[one], [two]], [[1.0], [0.0]], pad_token_id=9,
                                   row_multiple=4)
    assert batch.tokens.shape == logprobs.shape == (4, 16)
    assert batch.tokens[0, :7].tolist() == one.tokens.tolist() and batch.tokens[0, 7] == 9
    assert batch.tokens[1, :4].tolist() == two.tokens.tolist()
    assert logprobs[0, :7].tolist() == [0, 0, 0, -0.5, -0.25, 0, -2.0]
    assert logprobs[1, :4].tolist() == [0, -1.0, -1.5, -0.5] and not logprobs[2:].any()
    assert batch.group_ids.tolist() == [0, 1, -1, -1] and batch.rewards.tolist()[:2] == [1, 0]
    assert batch.turn_valid.sum(1).tolist() == [2, 1, 0, 0]


def test_stream_errors():
    with pytest.raises(ValueError, match="2 log-probs for 3 sampled"):
        TokenStream.from_turns([[1]], [[2, 3, 4]], [[0.0, 0.0]])
    with pytest.raises(ValueError, match="one per turn"):
        TokenStream.from_turns([[1], [2]], [[3]], [[0.0]])
    with pytest.raises(ValueError, match="at least one turn"):
        TokenStream.from_turns([], [], [])
    stream = TokenStream.from_turns([[1]], [[2]], [[0.0]])
    with pytest.raises(ValueError, match="one reward per stream"):
        pack_streams([[stream, stream]], [[1.0]])
    with pytest.raises(ValueError, match="max_len"):
        pack_streams([[stream]], [[1.0]], max_len=1)
