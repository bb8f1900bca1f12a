"""The padded token batch of SPEC §0 and the packer that builds it from trajectories.

| array        | shape          | meaning                                                    |
|--------------|----------------|------------------------------------------------------------|
| `tokens`     | int32 [B, L]   | the whole multi-turn conversation, left-aligned, padded    |
| `loss_mask`  | bool  [B, L]   | true exactly on policy-generated tokens (assistant turns)  |
| `turn_ids`   | int32 [B, L]   | agent turn index of each policy token, -1 elsewhere        |
| `group_ids`  | int32 [B]      | which group (task instance) the row belongs to, -1 padding |
| `rewards`    | float32 [B]    | terminal reward R_i                                        |
| `turn_valid` | bool  [B, T]   | turn exists (T = max turns in batch, bucketed)             |

`pack` buckets L to two sizes an octave (`length_bucket`), T to powers of two and B to a
multiple of `row_multiple`, so a training run compiles its kernels for a handful of shapes
only. `validate` checks a batch from any source (ours or a user's trainer) on the host and
raises a `ValueError` naming the array at fault.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence

import jax
import numpy as np

POLICY_ROLE = "assistant"
ROLES = ("system", "user", "assistant", "tool")


@dataclasses.dataclass(frozen=True)
class Batch:
    """A padded multi-turn batch; a pytree whose leaves are the six arrays of the table above."""

    tokens: jax.Array
    loss_mask: jax.Array
    turn_ids: jax.Array
    group_ids: jax.Array
    rewards: jax.Array
    turn_valid: jax.Array

    @property
    def num_rows(self) -> int:
        return self.tokens.shape[0]

    @property
    def seq_len(self) -> int:
        return self.tokens.shape[1]

    @property
    def num_turns(self) -> int:
        return self.turn_valid.shape[1]


jax.tree_util.register_dataclass(
    Batch, data_fields=[f.name for f in dataclasses.fields(Batch)], meta_fields=[])


@dataclasses.dataclass(frozen=True)
class Message:
    """One span of a conversation: its token ids, who produced it, and its agent turn.

    `turn` is the agent turn index (0-based) of an assistant message; other roles ignore it.
    """

    token_ids: Sequence[int]
    role: str
    turn: int = -1


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """A finished episode: its messages in order and its terminal reward."""

    messages: Sequence[Message]
    reward: float


def trajectory_from_tokens(tokens: Sequence[int], loss_mask: Sequence[bool],
                           turn_ids: Sequence[int], reward: float) -> Trajectory:
    """A Trajectory from a rendered conversation (e.g. `models.qwen.chat.render`).

    Args:
      tokens: int [L] token ids.
      loss_mask: bool [L], true on policy-generated tokens.
      turn_ids: int [L], the agent turn of each policy token, -1 elsewhere.
      reward: the episode's terminal reward.

    Returns:
      Trajectory whose messages are the maximal runs of tokens with the same (policy, turn).
    """
    tokens, mask, turns = (np.asarray(x) for x in (tokens, loss_mask, turn_ids))
    if not tokens.shape == mask.shape == turns.shape or tokens.ndim != 1:
        raise ValueError(f"tokens, loss_mask, turn_ids must be [L] arrays of one length, got "
                         f"{tokens.shape}, {mask.shape}, {turns.shape}")
    key = np.where(mask, turns, -1)
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    ends = np.append(starts[1:], len(tokens))
    messages = [Message(tokens[a:b].tolist(), POLICY_ROLE if key[a] >= 0 else "user",
                        int(key[a])) for a, b in zip(starts, ends)]
    return Trajectory(messages, reward)


@dataclasses.dataclass(frozen=True)
class TokenStream:
    """One episode's tokens exactly as a sampler read and produced them.

    tokens: int32 [L]; loss_mask: bool [L], true on the sampled tokens; turn_ids: int32 [L],
    the turn of each sampled token, -1 elsewhere; logprobs: float32 [L], the sampler's
    log-probability of each sampled token, 0 elsewhere.
    """

    tokens: np.ndarray
    loss_mask: np.ndarray
    turn_ids: np.ndarray
    logprobs: np.ndarray

    @classmethod
    def from_turns(cls, contexts: Sequence[Sequence[int]], replies: Sequence[Sequence[int]],
                   logprobs: Sequence[Sequence[float]]) -> TokenStream:
        """The stream context 0, reply 0, context 1, reply 1, ...

        Args:
          contexts: per turn, the ids read before its reply (the prompt first).
          replies: per turn, the sampled ids.
          logprobs: per turn, one log-probability per sampled id.
        """
        if not replies:
            raise ValueError("a stream needs at least one turn")
        if not len(contexts) == len(replies) == len(logprobs):
            raise ValueError(f"{len(contexts)} contexts, {len(replies)} replies and "
                             f"{len(logprobs)} log-prob lists must be one per turn")
        pieces = []
        for turn, (context, reply, scores) in enumerate(zip(contexts, replies, logprobs)):
            if len(scores) != len(reply):
                raise ValueError(f"turn {turn}: {len(scores)} log-probs for {len(reply)} "
                                 "sampled tokens")
            pieces.append((context, False, -1, np.zeros(len(context))))
            pieces.append((reply, True, turn, scores))
        return cls(np.concatenate([np.asarray(ids, np.int32) for ids, *_ in pieces]),
                   np.concatenate([np.full(len(ids), m) for ids, m, _, _ in pieces]),
                   np.concatenate([np.full(len(ids), t, np.int32) for ids, _, t, _ in pieces]),
                   np.concatenate([np.asarray(lp, np.float32) for *_, lp in pieces]))


def pack_streams(groups: Sequence[Sequence[TokenStream]],
                 rewards: Sequence[Sequence[float]], **pack_kwargs) -> tuple[Batch, np.ndarray]:
    """Packs groups of token streams (see `pack` for the keyword arguments).

    Returns:
      (Batch, float32 [B, L] the streams' sampler log-probabilities on the same grid, the
      learner's `old_logprobs`).
    """
    if len(groups) != len(rewards) or any(len(g) != len(r) for g, r in zip(groups, rewards)):
        raise ValueError("rewards must hold one reward per stream, group by group")
    batch = pack([[trajectory_from_tokens(s.tokens, s.loss_mask, s.turn_ids, r)
                   for s, r in zip(group, group_rewards)]
                  for group, group_rewards in zip(groups, rewards)], **pack_kwargs)
    logprobs = np.zeros(batch.tokens.shape, np.float32)
    for row, stream in enumerate(s for group in groups for s in group):
        logprobs[row, : len(stream.logprobs)] = stream.logprobs
    return batch, logprobs


def bucket(n: int, minimum: int = 1) -> int:
    """Smallest power of two >= max(n, minimum)."""
    return 1 << (max(n, minimum) - 1).bit_length()


def length_bucket(n: int, minimum: int = 1) -> int:
    """Smallest ``2^k`` or ``3 * 2^(k-2)`` >= max(n, minimum): two sizes per octave, so padding
    is at most a third of a row (a 1,100-token row is padded to 1,536, not 2,048)."""
    size = bucket(n, minimum)
    three_quarters = size // 4 * 3
    return three_quarters if size >= 8 and three_quarters >= max(n, minimum) else size


def _check_token_ids(token_ids: Sequence[int], where: str) -> None:
    ids = np.asarray(token_ids)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise ValueError(f"{where}: token_ids must be a flat sequence of integers, got "
                         f"{ids.dtype} of shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(np.int32).max):
        raise ValueError(f"{where}: token ids must be in [0, 2**31), got {ids.min()}..{ids.max()}")


def _check_trajectory(traj: Trajectory, where: str) -> int:
    """Validates one trajectory; returns its number of agent turns."""
    reward = np.asarray(traj.reward)
    if reward.ndim or reward.dtype.kind not in "iuf" or not np.isfinite(reward):
        raise ValueError(f"{where}: reward must be a finite number, got {traj.reward!r}")
    turns = []
    for k, msg in enumerate(traj.messages):
        if msg.role not in ROLES:
            raise ValueError(f"{where}.messages[{k}]: unknown role {msg.role!r}; one of {ROLES}")
        _check_token_ids(msg.token_ids, f"{where}.messages[{k}]")
        if msg.role == POLICY_ROLE:
            if msg.turn < 0:
                raise ValueError(f"{where}.messages[{k}]: assistant message needs turn >= 0")
            if turns and msg.turn < turns[-1]:
                raise ValueError(f"{where}.messages[{k}]: turn {msg.turn} after turn {turns[-1]}")
            turns.append(msg.turn)
    if not turns:
        raise ValueError(f"{where}: no assistant message, so no policy tokens to train on")
    distinct = sorted(set(turns))
    if distinct != list(range(len(distinct))):
        raise ValueError(f"{where}: agent turns must be 0..T-1 without gaps, got {distinct}")
    return len(distinct)


def pack(groups: Sequence[Sequence[Trajectory]], *, pad_token_id: int = 0,
         min_len: int = 16, min_turns: int = 1, max_len: int | None = None,
         row_multiple: int = 1) -> Batch:
    """Packs groups of trajectories into a padded `Batch` (numpy arrays).

    Args:
      groups: groups[g] holds the G trajectories sampled for task instance g; the group id of
        its rows is g.
      pad_token_id: token id written into padding.
      min_len: smallest L bucket.
      min_turns: smallest T bucket.
      max_len: longest allowed conversation; a longer one is an error, never silently cut.
      row_multiple: B is padded with padding rows (group id -1) to a multiple of this, e.g.
        the data-parallel size.

    Returns:
      Batch with L bucketed by `length_bucket` and T to a power of two.
    """
    if not groups:
        raise ValueError("groups is empty: there is nothing to pack")
    for name, value in (("min_len", min_len), ("min_turns", min_turns),
                        ("row_multiple", row_multiple)):
        if not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    rows: list[tuple[int, Trajectory, int]] = []
    for g, group in enumerate(groups):
        if not group:
            raise ValueError(f"groups[{g}] is empty; every group needs at least one trajectory")
        for i, traj in enumerate(group):
            rows.append((g, traj, _check_trajectory(traj, f"groups[{g}][{i}]")))
    lengths = [sum(len(m.token_ids) for m in traj.messages) for _, traj, _ in rows]
    longest = max(lengths)
    if max_len is not None and longest > max_len:
        raise ValueError(f"a conversation has {longest} tokens > max_len={max_len}")
    n_rows = -(-len(rows) // row_multiple) * row_multiple
    length = length_bucket(longest, min_len)
    n_turns = bucket(max(t for _, _, t in rows), min_turns)

    tokens = np.full((n_rows, length), pad_token_id, np.int32)
    loss_mask = np.zeros((n_rows, length), bool)
    turn_ids = np.full((n_rows, length), -1, np.int32)
    group_ids = np.full((n_rows,), -1, np.int32)
    rewards = np.zeros((n_rows,), np.float32)
    turn_valid = np.zeros((n_rows, n_turns), bool)
    for b, (g, traj, t) in enumerate(rows):
        group_ids[b], rewards[b] = g, traj.reward
        turn_valid[b, :t] = True
        pos = 0
        for msg in traj.messages:
            end = pos + len(msg.token_ids)
            tokens[b, pos:end] = msg.token_ids
            if msg.role == POLICY_ROLE:
                loss_mask[b, pos:end] = True
                turn_ids[b, pos:end] = msg.turn
            pos = end
    batch = Batch(tokens, loss_mask, turn_ids, group_ids, rewards, turn_valid)
    validate(batch)
    return batch


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _rows(mask: np.ndarray) -> str:
    bad = np.flatnonzero(mask)
    return f"{bad[:8].tolist()}{' ...' if bad.size > 8 else ''}"


def validate(batch: Batch) -> None:
    """Checks a batch on the host; raises a ValueError naming the array and the rows at fault.

    Checks: ranks and matching sizes; dtypes; finite rewards; group ids >= -1; turn ids in
    [-1, T) and >= 0 exactly on loss-mask tokens; padding rows (group -1) carry no loss mask and
    no valid turn; each real row has at least one policy token; turns are a prefix 0..T_i-1;
    every policy token's turn is valid and every valid turn has policy tokens; ids fit int32.
    """
    arrays = {f.name: np.asarray(getattr(batch, f.name)) for f in dataclasses.fields(Batch)}
    ranks = {"tokens": 2, "loss_mask": 2, "turn_ids": 2, "group_ids": 1, "rewards": 1,
             "turn_valid": 2}
    for name, rank in ranks.items():
        _require(arrays[name].ndim == rank,
                 f"{name}: expected rank {rank}, got shape {arrays[name].shape}")
    b, length = arrays["tokens"].shape
    for name in ("loss_mask", "turn_ids"):
        _require(arrays[name].shape == (b, length),
                 f"{name}: shape {arrays[name].shape} != tokens shape {(b, length)}")
    for name in ("group_ids", "rewards", "turn_valid"):
        _require(arrays[name].shape[0] == b,
                 f"{name}: {arrays[name].shape[0]} rows != {b} rows of tokens")
    kinds = {"tokens": "iu", "loss_mask": "b", "turn_ids": "i", "group_ids": "i",
             "rewards": "f", "turn_valid": "b"}
    for name, kind in kinds.items():
        _require(arrays[name].dtype.kind in kind, f"{name}: wrong dtype {arrays[name].dtype}")

    group_ids, rewards = arrays["group_ids"], arrays["rewards"]
    loss_mask, turn_ids, turn_valid = arrays["loss_mask"], arrays["turn_ids"], arrays["turn_valid"]
    real = group_ids >= 0
    _require((group_ids >= -1).all(), f"group_ids: values below -1 at rows {_rows(group_ids < -1)}")
    too_big = group_ids > np.iinfo(np.int32).max
    _require(not too_big.any(),
             f"group_ids: values beyond int32 at rows {_rows(too_big)} (JAX would wrap them)")
    _require(np.isfinite(rewards[real]).all(),
             f"rewards: NaN or inf at rows {_rows(real & ~np.isfinite(rewards))}")
    n_turns = turn_valid.shape[1]
    out = (turn_ids < -1) | (turn_ids >= n_turns)
    _require(not out.any(), f"turn_ids: values outside [-1, {n_turns}) in rows {_rows(out.any(1))}")
    mismatch = (turn_ids >= 0) != loss_mask
    _require(not mismatch.any(),
             "turn_ids: must be >= 0 exactly where loss_mask is true; "
             f"rows {_rows(mismatch.any(1))}")
    pad_loss = ~real & loss_mask.any(1)
    _require(not pad_loss.any(), f"loss_mask: set on padding rows {_rows(pad_loss)}")
    pad_turn = ~real & turn_valid.any(1)
    _require(not pad_turn.any(), f"turn_valid: set on padding rows {_rows(pad_turn)}")
    empty = real & ~loss_mask.any(1)
    _require(not empty.any(), f"loss_mask: rows {_rows(empty)} have no policy tokens")
    n_valid = turn_valid.sum(1)
    prefix = turn_valid == (np.arange(n_turns)[None, :] < n_valid[:, None])
    _require(prefix.all(), f"turn_valid: not a prefix of turns in rows {_rows(~prefix.all(1))}")
    token_turn_ok = np.take_along_axis(turn_valid, np.clip(turn_ids, 0, n_turns - 1), 1)
    bad_turn = loss_mask & ~token_turn_ok
    _require(not bad_turn.any(),
             f"turn_ids: policy tokens point at invalid turns in rows {_rows(bad_turn.any(1))}")
    has_tokens = np.zeros_like(turn_valid)
    rows, cols = np.nonzero(loss_mask)
    has_tokens[rows, turn_ids[rows, cols]] = True
    empty_turn = turn_valid & ~has_tokens
    _require(not empty_turn.any(),
             f"turn_valid: valid turns without policy tokens in rows {_rows(empty_turn.any(1))}")
