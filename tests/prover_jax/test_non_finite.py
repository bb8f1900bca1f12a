"""Property: a non-finite value in any input of any group stays in that group, for every
registered credit method (docs/kernels.md, "What the kernels accept").

For random batches and a NaN or inf dropped into one entry of one group's inputs, the method's
per-turn, token and outcome advantages of every other group are, bit for bit, those of the
batch without that group (its rows made padding). The kernels run as the registry's `compute`
runs them, without its host check that rejects non-finite values.
"""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, given, settings

from prover_jax.batch import Batch
from prover_jax.credit import registry
from prover_jax.credit.tokens import to_tokens

B, T, M, N, S = 8, 5, 3, 7, 2  # rows, turns, atoms, tree nodes, SPO boundaries
PARENTS = np.array([-1, 0, 0, 1, 1, 2, 2], np.int32)  # a 2-2 tree
METHODS = registry.names()


def _batch_and_inputs(rng: np.random.Generator, sizes: list[int]):
    """A batch of groups of `sizes` rows (the rest padding) and every method's inputs."""
    group_ids = np.full(B, -1, np.int32)
    group_ids[: sum(sizes)] = np.repeat(np.arange(len(sizes)), sizes)
    lengths = np.where(group_ids >= 0, rng.integers(1, T + 1, B), 0)
    turn_valid = np.arange(T)[None, :] < lengths[:, None]
    turn_ids = np.repeat(np.arange(T), 2)[None, :].repeat(B, 0).astype(np.int32)
    loss_mask = np.tile([False, True], T)[None, :] & np.repeat(turn_valid, 2, axis=1)
    turn_ids = np.where(loss_mask, turn_ids, -1).astype(np.int32)
    batch = Batch(tokens=np.ones((B, 2 * T), np.int32), loss_mask=loss_mask, turn_ids=turn_ids,
                  group_ids=group_ids, rewards=rng.choice([0.0, 0.5, 1.0], B).astype(np.float32),
                  turn_valid=turn_valid)
    start = np.array([rng.integers(0, max(n - 1, 1)) for n in lengths], np.int32)
    end = np.minimum(start + rng.integers(0, 3, B), np.maximum(lengths - 2, 0)).astype(np.int32)
    measured = (lengths >= 2) & (end >= start)
    inputs = {
        "seg_start": start, "seg_end": np.maximum(end, start).astype(np.int32),
        "delta": np.where(measured, rng.normal(size=B), 0.0).astype(np.float32),
        "anchor_ids": (np.maximum(group_ids, 0)[:, None] * T
                       + rng.integers(0, T, (B, T))).astype(np.int32),
        "boundary_values": rng.random((B, S)).astype(np.float32),
        "spo_applies": rng.random(B) < 0.7,
        "tree_parents": np.tile(PARENTS, (len(sizes), 1)),
        "tree_leaf_rewards": rng.choice([0.0, 1.0], (len(sizes), N)).astype(np.float32),
        "tree_ids": group_ids.copy(),
        "turn_nodes": rng.integers(-1, N, (B, T)).astype(np.int32),
        "critic_labels": rng.integers(-1, 2, (B, T)).astype(np.int32),
        "critic_labelled": rng.random(B) < 0.7,
        "progress_gain": rng.uniform(-1, 1, (B, T)).astype(np.float32),
        "marginals": (rng.normal(size=(B, M)) * (rng.random((B, M)) < 0.7)).astype(np.float32),
        "eligible": rng.random((B, M)) < 0.8,
        "omega": rng.choice([0.0, 0.5, 1.0], (B, T, M)).astype(np.float32),
    }
    return batch, inputs


def _advantages(method: registry.CreditMethod, batch: Batch, inputs: dict) -> np.ndarray:
    """[B, T + 2T + 1]: per-turn, token and outcome advantages side by side."""
    given_inputs = {k: inputs[k] for k in method.inputs}
    turns, outcome = method.compute(batch, given_inputs, method.config_type())
    tokens = to_tokens(turns, batch.turn_ids, batch.loss_mask)
    return np.concatenate([np.asarray(turns), np.asarray(tokens),
                           np.asarray(outcome)[:, None]], axis=1)


def _without(batch: Batch, inputs: dict, rows: np.ndarray) -> tuple[Batch, dict]:
    """The batch with `rows` made padding."""
    batch = dataclasses.replace(
        batch, group_ids=np.where(rows, -1, batch.group_ids).astype(np.int32),
        turn_valid=batch.turn_valid & ~rows[:, None], loss_mask=batch.loss_mask & ~rows[:, None],
        turn_ids=np.where(rows[:, None], -1, batch.turn_ids).astype(np.int32))
    return batch, {**inputs, "tree_ids": np.where(rows, -1, inputs["tree_ids"]).astype(np.int32)}


@st.composite
def poisoned_cases(draw):
    method = registry.get(draw(st.sampled_from(METHODS)))
    sizes = draw(st.lists(st.integers(1, 3), min_size=2, max_size=3).filter(lambda s: sum(s) <= B))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    batch, inputs = _batch_and_inputs(rng, sizes)
    floats = ["rewards"] + [k for k, (_, kind) in method.inputs.items() if kind == "f"]
    name = draw(st.sampled_from(floats))
    group = draw(st.integers(0, len(sizes) - 1))
    # a negative witness weight is an error of its own (test_kernel_inputs)
    value = draw(st.sampled_from([np.nan, np.inf] + ([] if name == "omega" else [-np.inf])))
    return method, batch, inputs, name, group, value, draw(st.integers(0, 2**32 - 1))


def _poison(batch: Batch, inputs: dict, name: str, group: int, value: float, seed: int):
    """Copies with one entry of `name` in `group` set to `value`."""
    rng = np.random.default_rng(seed)
    array = (batch.rewards if name == "rewards" else inputs[name]).copy()
    if name == "tree_leaf_rewards":
        index = (group, rng.integers(0, N))
    else:
        row = rng.choice(np.flatnonzero(batch.group_ids == group))
        index = (row, *(rng.integers(0, n) for n in array.shape[1:]))
    array[index] = value
    if name == "rewards":
        return dataclasses.replace(batch, rewards=array), inputs
    return batch, {**inputs, name: array}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(poisoned_cases())
def test_a_non_finite_value_never_crosses_groups(case):
    method, batch, inputs, name, group, value, seed = case
    rows = batch.group_ids == group
    others = (batch.group_ids >= 0) & ~rows
    poisoned = _advantages(method, *_poison(batch, inputs, name, group, value, seed))
    alone = _advantages(method, *_without(batch, inputs, rows))
    assert np.isfinite(alone).all()
    np.testing.assert_array_equal(poisoned[others], alone[others],
                                  err_msg=f"{method.name}: {value} in {name} of group {group}")
