"""What the kernels do with inputs a caller may well pass: x64, non-finite values, lists, ids.

Contract (docs/kernels.md, "What the kernels accept"): a non-finite value in any kernel input
stays in its own group (row-local methods: its own row); every other group's advantages are
those of the clean batch, and batch-wide constants (VICT's lambda and c) come from finite
values only. The registry's `credit.compute`, which sees host values, rejects non-finite
inputs instead.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from prover_jax import credit
from prover_jax.batch import Batch
from prover_jax.credit.step_groups import discounted_returns
from vict_jax.redistribution import redistribute

B, T, M, L = 8, 6, 3, 12
GROUP_IDS = np.repeat(np.arange(2), 4).astype(np.int32)  # rows 0-3: group 0, rows 4-7: group 1
OTHER = GROUP_IDS == 1  # rows that must not notice group 0's poison


def _inputs():
    rng = np.random.default_rng(0)
    turn_valid = np.ones((B, T), bool)
    turn_valid[[1, 5], 4:] = False
    parents = np.array([[-1, 0, 0, 1, 1, 2, 2]] * 2, np.int32)
    return {
        "rewards": np.array([1, 0, 0, 1, 0.5, 0, 1, 0], np.float32),
        "group_ids": GROUP_IDS,
        "turn_valid": turn_valid,
        "base_bt": rng.normal(size=(B, T)).astype(np.float32),
        "seg_start": np.zeros(B, np.int32),
        "seg_end": np.ones(B, np.int32),
        "delta": rng.normal(size=B).astype(np.float32),
        "anchor_ids": (GROUP_IDS[:, None] * 3 + rng.integers(0, 3, (B, T))).astype(np.int32),
        "step_rewards": rng.random((B, T)).astype(np.float32),
        "boundary_values": rng.random((B, 2)).astype(np.float32),
        "applies": np.ones(B, bool),
        "tree_ids": GROUP_IDS,  # group g is tree g
        "turn_nodes": rng.integers(-1, 7, (B, T)).astype(np.int32),
        "parents": parents,
        "leaf_rewards": rng.integers(0, 2, (2, 7)).astype(np.float32),
        "labels": rng.integers(-1, 2, (B, T)).astype(np.int32),
        "labelled": np.ones(B, bool),
        "turn_ids": np.tile(np.repeat(np.arange(T), 2), (B, 1)).astype(np.int32),
        "loss_mask": rng.random((B, L)) < 0.7,
        "logprobs": -rng.random((B, L)).astype(np.float32),
        "marginals": rng.normal(size=(B, M)).astype(np.float32),
        "eligible": np.ones((B, M), bool),
        "omega": (rng.random((B, T, M)) < 0.4).astype(np.float32),
    }


def _base(x):
    return credit.grpo(x["rewards"], x["group_ids"])


# name -> (float inputs a poison may land in, call returning the [B] / [B, T] / [B, L] output)
KERNELS = {
    "grpo": (("rewards",), lambda x: credit.grpo(x["rewards"], x["group_ids"], "std")),
    "rloo": (("rewards",), lambda x: credit.rloo(x["rewards"], x["group_ids"])),
    "episode_advantage": (("rewards",), lambda x: credit.episode_advantage(
        x["rewards"], x["group_ids"], x["turn_valid"], "mean_std_norm")),
    "prover": (("base_bt", "delta"), lambda x: credit.prover(
        x["base_bt"], x["turn_valid"], x["seg_start"], x["seg_end"], x["delta"])),
    "gigpo": (("rewards", "step_rewards"), lambda x: credit.gigpo(
        x["rewards"], x["group_ids"], x["anchor_ids"], x["turn_valid"], x["step_rewards"],
        mode="mean_std_norm")),
    "spo_chain": (("base_bt", "rewards", "boundary_values"), lambda x: credit.spo_chain(
        x["base_bt"], x["rewards"], x["group_ids"], x["turn_valid"], x["boundary_values"],
        x["applies"])),
    "spo_tree": (("base_bt", "leaf_rewards"), lambda x: credit.spo_tree(
        x["base_bt"], x["turn_valid"], x["tree_ids"], x["turn_nodes"], x["parents"],
        x["leaf_rewards"])),
    "criticsearch": (("rewards",), lambda x: credit.criticsearch(
        _base(x), x["group_ids"], x["turn_valid"], x["labels"], x["labelled"])),
    "to_tokens": (("base_bt",), lambda x: credit.to_tokens(
        x["base_bt"], x["turn_ids"], x["loss_mask"])),
    "high_prob_mask": (("logprobs",), lambda x: credit.high_prob_mask(
        x["logprobs"], x["loss_mask"])),
    "vict": (("rewards", "marginals", "omega"), lambda x: redistribute(
        _base(x), x["marginals"], x["eligible"], x["omega"], x["turn_valid"],
        x["group_ids"]).advantages),
    "prover+vict": (("base_bt", "marginals", "omega"), lambda x: redistribute(
        x["base_bt"], x["marginals"], x["eligible"], x["omega"], x["turn_valid"],
        x["group_ids"]).advantages),
}
POISONS = [(kernel, name, value) for kernel, (names, _) in KERNELS.items() for name in names
           for value in (np.inf, -np.inf, np.nan)
           if (name, value) != ("omega", -np.inf)]  # a negative weight: an error of its own


def _poisoned(x, name, value):
    """A copy of the inputs with one group-0 entry of `name` set to `value`."""
    x = dict(x)
    x[name] = x[name].copy()
    x[name][(0,) * x[name].ndim] = value
    return x


@pytest.mark.parametrize("kernel, name, value", POISONS,
                         ids=[f"{k}-{n}-{v}" for k, n, v in POISONS])
def test_a_non_finite_input_stays_in_its_own_group(kernel, name, value):
    x = _inputs()
    call = KERNELS[kernel][1]
    clean = np.asarray(call(x))
    poisoned = np.asarray(call(_poisoned(x, name, value)))
    assert np.isfinite(clean).all()
    assert np.isfinite(poisoned[OTHER]).all()
    if not kernel.endswith("vict"):  # VICT's lambda and c are batch-wide: see the next test
        np.testing.assert_array_equal(poisoned[OTHER], clean[OTHER])


def test_vict_calibration_leaves_out_a_group_with_a_non_finite_base_turn():
    """An infinite base advantage on one turn of group 0: lambda and c are those of the batch
    without group 0, and so are group 1's advantages (tests/prover_jax/test_non_finite.py has
    the property for every method)."""
    x = _inputs()
    poisoned = _poisoned(x, "base_bt", np.inf)
    args = [x[k] for k in ("marginals", "eligible", "omega")]
    a = redistribute(poisoned["base_bt"], *args, x["turn_valid"], GROUP_IDS)
    alone = redistribute(x["base_bt"], *args, x["turn_valid"] & OTHER[:, None],
                         np.where(OTHER, GROUP_IDS, -1).astype(np.int32))
    assert np.isfinite(float(a.lam)) and np.isfinite(float(a.clip))
    assert (float(a.lam), float(a.clip)) == (float(alone.lam), float(alone.clip))
    assert not np.asarray(a.calibrated)[~OTHER].any()
    np.testing.assert_array_equal(np.asarray(a.advantages)[OTHER],
                                  np.asarray(alone.advantages)[OTHER])


def test_a_non_finite_step_reward_reaches_its_own_and_earlier_turns_only():
    """GiGPO's discounted returns: the later turns' returns are those of the clean row."""
    valid = np.ones((1, 4), bool)

    def returns(rewards):
        return np.asarray(discounted_returns(np.array([rewards], np.float32), valid, 0.9))[0]

    got = returns([np.nan, 0, 0, 1])
    assert np.isnan(got[0])
    np.testing.assert_allclose(got[1:], returns([0, 0, 0, 1])[1:])
    got = returns([0, 1, -np.inf, 1])
    assert np.all(got[:3] == -np.inf) and got[3] == 1


def test_a_non_finite_marginal_stays_visible_in_its_group():
    """A NaN core marginal is not silently zeroed: its (group, atom) is non-finite, and so are
    the corrections of the turns witnessing it; the other group stays finite."""
    x = _inputs()
    assert x["eligible"][0, 0] and x["omega"][0, :, 0].any()  # row 0 supports atom 0
    poisoned = _poisoned(x, "marginals", np.nan)
    result = redistribute(_base(x), poisoned["marginals"], x["eligible"], x["omega"],
                          x["turn_valid"], GROUP_IDS)
    assert np.isnan(result.normalised.values[0, 0])
    witnessed = x["omega"][0, :, 0] > 0
    assert not np.isfinite(np.asarray(result.corrections)[0, witnessed]).any()
    assert np.isfinite(np.asarray(result.advantages)[OTHER]).all()


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_x64_gives_the_same_advantages(kernel):
    """With jax_enable_x64 the kernels take int64 / float64 inputs and agree with float32."""
    x = _inputs()
    call = KERNELS[kernel][1]
    expected = np.asarray(call(x))
    wide = {k: v.astype(np.float64 if v.dtype.kind == "f" else np.int64)
            if v.dtype.kind in "fi" else v for k, v in x.items()}
    with jax.enable_x64(True):
        got = np.asarray(call(wide))
    assert got.shape == expected.shape and got.dtype == expected.dtype  # float32 in every kernel
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


# the integer arrays each kernel reads
ID_READS = {"grpo": ("group_ids",), "rloo": ("group_ids",), "episode_advantage": ("group_ids",),
            "prover": ("seg_start", "seg_end"), "gigpo": ("group_ids", "anchor_ids"),
            "spo_chain": ("group_ids",), "spo_tree": ("tree_ids", "turn_nodes", "parents"),
            "criticsearch": ("group_ids", "labels"), "to_tokens": ("turn_ids",),
            "vict": ("group_ids",), "prover+vict": ("group_ids",)}
ID_INPUTS = [(kernel, name) for kernel, names in ID_READS.items() for name in names]


@pytest.mark.parametrize("kernel, name", ID_INPUTS, ids=[f"{k}-{n}" for k, n in ID_INPUTS])
def test_unsigned_ids_are_a_dtype_error(kernel, name):
    """A uint8 array would turn the -1 of padding into 255: every kernel that reads one names
    it."""
    x = _inputs()
    x[name] = x[name].astype(np.uint8)
    with pytest.raises(ValueError, match=f"{name}: expected a signed integer dtype"):
        KERNELS[kernel][1](x)


def test_python_lists_are_rejected_by_name():
    with pytest.raises(TypeError, match="rewards: expected an array, got a Python list"):
        credit.grpo([1.0, 0.0], np.zeros(2, np.int32))
    with pytest.raises(TypeError, match="delta: expected an array, got a Python tuple"):
        credit.prover(np.zeros(2, np.float32), np.ones((2, 3), bool), np.zeros(2, np.int32),
                      np.zeros(2, np.int32), (0.0, 0.0))


def test_group_ids_beyond_int32_are_an_error_or_kept_apart():
    rewards = np.array([1, 0, 1, 1], np.float32)
    ids = np.array([2**32 + 1, 2**32 + 1, 1, 1], np.int64)  # wraps onto group 1 in int32
    with pytest.raises(ValueError, match=r"group_ids: values 1\.\.4294967297 do not fit int32"):
        credit.grpo(rewards, ids)
    with jax.enable_x64(True):
        np.testing.assert_allclose(credit.grpo(rewards, ids), [0.5, -0.5, 0, 0])


@pytest.mark.parametrize("call", [
    lambda: credit.prover(np.zeros((4, 3, 1), np.float32), np.ones((4, 3), bool),
                          np.zeros(4, np.int32), np.zeros(4, np.int32), np.zeros(4, np.float32)),
    lambda: credit.spo_chain(np.zeros(5, np.float32), np.zeros(4, np.float32),
                             np.zeros(4, np.int32), np.ones((4, 3), bool),
                             np.zeros((4, 2), np.float32), np.ones(4, bool)),
    lambda: credit.spo_tree(np.zeros(5, np.float32), np.ones((4, 3), bool),
                            np.zeros(4, np.int32), np.zeros((4, 3), np.int32),
                            np.array([[-1, 0]], np.int32), np.zeros((1, 2), np.float32)),
    lambda: credit.criticsearch(np.zeros(5, np.float32), np.zeros(4, np.int32),
                                np.ones((4, 3), bool), np.zeros((4, 3), np.int32),
                                np.ones(4, bool)),
    lambda: redistribute(np.zeros(5, np.float32), np.zeros((4, 2), np.float32),
                         np.ones((4, 2), bool), np.zeros((4, 3, 2), np.float32),
                         np.ones((4, 3), bool), np.zeros(4, np.int32)),
])
def test_errors_name_the_base_argument(call):
    with pytest.raises(ValueError, match=r"\bbase\b") as error:
        call()
    assert "values" not in str(error.value)


def _batch(rewards):
    b = len(rewards)
    return Batch(tokens=np.ones((b, 4), np.int32), loss_mask=np.ones((b, 4), bool),
                 turn_ids=np.zeros((b, 4), np.int32), group_ids=np.zeros(b, np.int32),
                 rewards=np.asarray(rewards, np.float32), turn_valid=np.ones((b, 1), bool))


def test_the_registry_rejects_non_finite_host_values_by_name():
    with pytest.raises(ValueError, match="rewards: must be finite"):
        credit.compute("grpo", _batch([1.0, np.nan]))
    with pytest.raises(ValueError, match="boundary_values: must be finite"):
        credit.compute("spo-chain", _batch([1.0, 0.0]), {
            "boundary_values": np.array([[np.inf, 0], [0, 0]], np.float32),
            "spo_applies": np.ones(2, bool)})


def test_a_negative_witness_weight_is_an_error_on_host_values():
    """A negative omega would flip the sign of its row's corrections ([0.333, 1, 0.167] became
    [1, 1, -0.5]): the registry and the VICT kernels given host arrays say so."""
    from vict_jax.redistribution import corrections, normalise

    x = _inputs()
    omega = x["omega"].copy()
    omega[0, 0, 0] = -0.5
    with pytest.raises(ValueError, match=r"omega: witness weights must be >= 0, got -0\.5"):
        redistribute(_base(x), x["marginals"], x["eligible"], omega, x["turn_valid"], GROUP_IDS)
    with pytest.raises(ValueError, match="omega: witness weights must be >= 0"):
        normalise(x["marginals"], x["eligible"], omega, GROUP_IDS)
    with pytest.raises(ValueError, match="omega: witness weights must be >= 0"):
        corrections(x["marginals"], omega)
    batch = Batch(tokens=np.ones((B, L), np.int32), loss_mask=x["loss_mask"],
                  turn_ids=x["turn_ids"], group_ids=GROUP_IDS, rewards=x["rewards"],
                  turn_valid=x["turn_valid"])
    with pytest.raises(ValueError, match="omega: witness weights must be >= 0"):
        credit.compute("vict", batch, {"marginals": x["marginals"], "eligible": x["eligible"],
                                       "omega": omega})
