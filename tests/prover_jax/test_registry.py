"""The credit-method registry: names, plug-ins, input checks, equality with the kernels."""

from __future__ import annotations

import numpy as np
import pytest

from prover_jax import credit
from prover_jax.batch import pack
from prover_jax.credit import registry
from tests.prover_jax.test_batch import conversation

BUILT_IN = {"grpo", "budget-matched-grpo", "rloo", "prover", "gigpo", "spo-chain", "spo-tree",
            "criticsearch", "oracle-progress"}


@pytest.fixture(scope="module")
def batch():
    return pack([[conversation(3, 1.0), conversation(2, 0.0), conversation(4, 0.0)],
                 [conversation(1, 1.0), conversation(2, 1.0)]], row_multiple=8)


def test_names_include_builtins_and_the_vict_plugin():
    names = set(credit.names())
    assert BUILT_IN <= names
    assert {"vict", "prover+vict", "gigpo+vict", "spo-chain+vict", "criticsearch+vict"} <= names
    assert "grpo+vict" not in names  # that is `vict`


def test_unknown_method_lists_known_names():
    with pytest.raises(ValueError, match=r"unknown credit method 'gpro'.*grpo"):
        credit.get("gpro")


def test_registering_twice_is_an_error():
    with pytest.raises(ValueError, match="already registered"):
        credit.register(credit.get("grpo"))


def test_prover_through_registry_equals_kernel(batch):
    inputs = {"seg_start": np.array([1, 0, 0, 0, 0, 0, 0, 0], np.int32),
              "seg_end": np.array([1, 0, 0, 0, 0, 0, 0, 0], np.int32),
              "delta": np.array([0.5, 0, 0, 0, 0, 0, 0, 0], np.float32)}
    out = credit.compute("prover", batch, inputs, registry.ProverConfig(lam=2.0))
    base = credit.grpo(batch.rewards, batch.group_ids)
    expected = credit.prover(base, batch.turn_valid, inputs["seg_start"], inputs["seg_end"],
                             inputs["delta"], 2.0)
    np.testing.assert_allclose(out.per_turn, expected)
    np.testing.assert_allclose(out.tokens, credit.to_tokens(expected, batch.turn_ids,
                                                            batch.loss_mask))
    np.testing.assert_allclose(out.outcome, base)
    # row 0: GRPO 1 - 1/3 = 2/3 on turns 0 and 2, plus 2.0 * 0.5 on turn 1
    np.testing.assert_allclose(out.per_turn[0, :3], [2 / 3, 2 / 3 + 1.0, 2 / 3], rtol=1e-6)


def test_missing_and_unexpected_inputs(batch):
    with pytest.raises(ValueError, match=r"needs inputs \['delta', 'seg_end', 'seg_start'\]"):
        credit.compute("prover", batch, {})
    with pytest.raises(ValueError, match=r"does not take inputs \['delta'\]"):
        credit.compute("grpo", batch, {"delta": np.zeros(8, np.float32)})
    with pytest.raises(ValueError, match="anchor_ids"):
        credit.compute("gigpo", batch, {"anchor_ids": np.zeros((8, 3), np.int32)})


def test_value_checks(batch):
    bad_segment = {"seg_start": np.full(8, 2, np.int32), "seg_end": np.full(8, 1, np.int32),
                   "delta": np.full(8, 0.5, np.float32)}
    with pytest.raises(ValueError, match="start > end"):
        credit.compute("prover", batch, bad_segment)
    # row 0 has 3 turns: turn 2 is terminal; rows 0-2 are one group of lengths 3, 2, 4
    one_row = lambda start, end: {  # noqa: E731
        "seg_start": np.array([start] + [0] * 7, np.int32),
        "seg_end": np.array([end] + [0] * 7, np.int32),
        "delta": np.array([0.5] + [0] * 7, np.float32)}
    with pytest.raises(ValueError, match="ends on the terminal turn"):
        credit.compute("prover", batch, one_row(1, 2))
    long_batch = pack([[conversation(7, 1.0), conversation(2, 0.0)]], row_multiple=8)
    with pytest.raises(ValueError, match="longer than 4 turns"):
        credit.compute("prover", long_batch, one_row(0, 4))
    credit.compute("prover", long_batch, one_row(0, 4), registry.ProverConfig(max_segment_turns=5))
    with pytest.raises(ValueError, match="fit int32"):
        credit.compute("gigpo", batch, {"anchor_ids": np.full((8, 4), 2**40, np.int64)})
    with pytest.raises(ValueError, match="critic_labels"):
        credit.compute("criticsearch", batch, {
            "critic_labels": np.full((8, 4), 2, np.int32),
            "critic_labelled": np.ones(8, bool)})
    shared = np.zeros((8, 4), np.int32)  # id 0 used by both task groups
    with pytest.raises(ValueError, match="shared by two task groups"):
        credit.compute("gigpo", batch, {"anchor_ids": shared})
    with pytest.raises(ValueError, match="anchor_ids: valid turns need ids"):
        credit.compute("gigpo", batch, {"anchor_ids": np.full((8, 4), 99, np.int32)})
    with pytest.raises(ValueError, match="tree_parents"):
        credit.compute("spo-tree", batch, {
            "tree_parents": np.array([[-1, 1]], np.int32),
            "tree_leaf_rewards": np.zeros((1, 2), np.float32),
            "tree_ids": np.zeros(8, np.int32), "turn_nodes": np.zeros((8, 4), np.int32)})


def test_wrong_config_type(batch):
    with pytest.raises(TypeError, match="config for 'grpo' must be GrpoConfig"):
        credit.compute("grpo", batch, config=registry.GigpoConfig())


def test_budget_matched_schedule():
    # the paper's Qwen3.5-2B ALFWorld schedule: steps 1-84 -> 11, 85-100 -> 12 (0-based here)
    config = registry.BudgetMatchedConfig(schedule=((0, 11), (84, 12)))
    assert [config.group_size(s) for s in (0, 83, 84, 99)] == [11, 11, 12, 12]
    with pytest.raises(ValueError, match="start at step 0"):
        registry.BudgetMatchedConfig(schedule=((5, 8),))
    with pytest.raises(ValueError, match="group sizes"):
        registry.BudgetMatchedConfig(schedule=((0, 0),))
