"""VICT redistribution against the numpy reference, hand-derived values and invariances."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prover_jax import credit
from prover_jax.batch import pack
from tests import reference as ref
from tests.conftest import batches
from tests.prover_jax.test_batch import conversation
from vict_jax import (
    RedistributionConfig,
    corrections,
    eligibility_violations,
    normalise,
    redistribute,
)

M = 5


def vict_inputs(batch, seed, m=M):
    """Sparse signed marginals, an eligibility gate and sparse witness weights."""
    rng = np.random.default_rng(seed)
    b, t = batch.turn_valid.shape
    marginals = rng.choice([0.0, 0.0, 0.5, -0.5, 1.0, -2.0, 0.25], (b, m)).astype(np.float32)
    marginals[batch.group_ids < 0] = 0.0
    eligible = rng.random((b, m)) < 0.85
    omega = (rng.random((b, t, m)) < 0.3) * rng.choice([1.0, 0.5, 2.0], (b, t, m))
    omega = (omega * batch.turn_valid[:, :, None]).astype(np.float32)
    return marginals, eligible, omega


def close(actual, expected, atol=1e-5):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), atol=atol, rtol=1e-5)


def test_hand_derived():
    # One group of three rollouts, one atom. Marginals 1, 2, 0 with edges in rows 0 and 1 ->
    # supported rows 0, 1; scale = median(|1|, |2|) = 1.5 -> dhat = 2/3, 4/3.
    # Row 0 has edges at turns 0 and 2 (Z = 2): A_vict = [1/3, 0, 1/3].
    # Row 1 has one edge at turn 1 (Z = 1): A_vict = [0, 4/3, 0].
    marginals = jnp.array([[1.0], [2.0], [0.0]])
    omega = jnp.zeros((3, 3, 1)).at[0, 0, 0].set(1).at[0, 2, 0].set(1).at[1, 1, 0].set(1)
    eligible = jnp.ones((3, 1), bool)
    turn_valid = jnp.ones((3, 3), bool)
    group_ids = jnp.zeros(3, jnp.int32)
    norm = normalise(marginals, eligible, omega, group_ids)
    close(norm.values, [[2 / 3], [4 / 3], [0]])
    vict = corrections(norm.values, omega)
    close(vict, [[1 / 3, 0, 1 / 3], [0, 4 / 3, 0], [0, 0, 0]])
    # base 0.5, -0.5, 0.5 on every turn: median|A_base| = 0.5, c = 0.5;
    # nonzero |A_vict| = 1/3, 1/3, 4/3 -> median 1/3 -> lambda = 1.5;
    # row 0: 0.5 + 1.5 * 1/3 = 1.0; row 1 turn 1: -0.5 + 1.5 * clip(4/3, 0.5) = 0.25
    out = redistribute(jnp.array([0.5, -0.5, 0.5]), marginals, eligible, omega, turn_valid,
                       group_ids)
    close(out.lam, 1.5, atol=1e-4)
    close(out.clip, 0.5)
    close(out.advantages, [[1.0, 0.5, 1.0], [-0.5, 0.25, -0.5], [0.5, 0.5, 0.5]], atol=1e-4)


def test_abstention_flags():
    # atom 0: only one supported rollout -> too few; atom 1: two supported, centred MAD 0 -> zero
    marginals = jnp.array([[1.0, 1.0], [0.0, 1.0]])
    omega = jnp.ones((2, 2, 2))
    eligible = jnp.ones((2, 2), bool)
    group_ids = jnp.zeros(2, jnp.int32)
    norm = normalise(marginals, eligible, omega, group_ids, center=True)
    assert np.asarray(norm.too_few).tolist() == [[True, False], [False, False]]
    assert np.asarray(norm.zero_scale).tolist() == [[False, True], [False, True]]
    assert np.all(np.asarray(norm.values) == 0)
    # the scale-only default keeps a consistently useful atom: 1 / median(1, 1) = 1
    close(normalise(marginals, eligible, omega, group_ids).values, [[0, 1], [0, 1]])
    # the ablation of the paper's two-rollout rule: a lone supported rollout gets sign(delta)
    lone = normalise(marginals * 3, eligible, omega, group_ids, min_supported=1)
    close(lone.values, [[1, 1], [0, 1]])
    assert not np.asarray(lone.too_few).any()
    centred = normalise(marginals, eligible, omega, group_ids, center=True, min_supported=1)
    assert np.asarray(centred.zero_scale)[0, 0] and np.all(np.asarray(centred.values) == 0)


@given(batches(), st.integers(0, 2**31), st.booleans(), st.sampled_from([1, 2, 3]))
def test_normalise_matches_reference(batch, seed, center, min_supported):
    marginals, eligible, omega = vict_inputs(batch, seed)
    norm = normalise(marginals, eligible, omega, batch.group_ids, center,
                     min_supported=min_supported)
    close(norm.values, ref.vict_normalise(marginals, eligible, omega, batch.group_ids, center,
                                          min_supported=min_supported), atol=1e-4)


@given(batches(), st.integers(0, 2**31), st.booleans(), st.sampled_from(["nonzero", "all"]),
       st.booleans())
def test_redistribute_matches_reference(batch, seed, center, calibration, per_turn_base):
    marginals, eligible, omega = vict_inputs(batch, seed)
    base = credit.grpo(batch.rewards, batch.group_ids, "std")
    if per_turn_base:
        bonus = np.random.default_rng(seed).random(batch.turn_valid.shape).astype(np.float32)
        base = credit.per_turn(base, batch.turn_valid) + bonus * batch.turn_valid
    config = RedistributionConfig(center=center, calibration=calibration)
    out = redistribute(base, marginals, eligible, omega, batch.turn_valid, batch.group_ids,
                       config)
    expected, vict = ref.vict_redistribute(np.asarray(base), marginals, eligible, omega,
                                           batch.turn_valid, batch.group_ids, center,
                                           calibration=calibration)
    close(out.corrections, vict, atol=1e-4)
    close(out.advantages, expected, atol=1e-4)
    assert int(eligibility_violations(out.corrections, out.normalised.values, eligible,
                                      omega)) == 0


@given(batches(), st.integers(0, 2**31))
def test_zero_marginals_give_the_base(batch, seed):
    _, eligible, omega = vict_inputs(batch, seed)
    base = credit.grpo(batch.rewards, batch.group_ids)
    out = redistribute(base, np.zeros((batch.num_rows, M), np.float32), eligible, omega,
                       batch.turn_valid, batch.group_ids)
    close(out.advantages, credit.per_turn(base, batch.turn_valid))
    assert np.all(np.asarray(out.corrections) == 0)


@given(batches(), st.integers(0, 2**31))
def test_padding_rows_turns_and_atoms_change_nothing(batch, seed):
    marginals, eligible, omega = vict_inputs(batch, seed)
    base = credit.grpo(batch.rewards, batch.group_ids, "std")
    out = redistribute(base, marginals, eligible, omega, batch.turn_valid, batch.group_ids)
    b, t = batch.turn_valid.shape
    pad = lambda x, shape: np.pad(x, [(0, s - d) for s, d in zip(shape, x.shape)])  # noqa: E731
    padded = redistribute(
        pad(np.asarray(base), (b + 2,)), pad(marginals, (b + 2, M + 3)),
        pad(eligible, (b + 2, M + 3)), pad(omega, (b + 2, t + 2, M + 3)),
        pad(batch.turn_valid, (b + 2, t + 2)),
        np.concatenate([batch.group_ids, [-1, -1]]).astype(np.int32))
    close(np.asarray(padded.advantages)[:b, :t], out.advantages)
    assert np.all(np.asarray(padded.advantages)[b:] == 0)
    assert np.all(np.asarray(padded.advantages)[:, t:] == 0)


def test_jit_equals_eager():
    batch = pack([[conversation(3, 1.0), conversation(2, 0.0), conversation(4, 0.0)],
                  [conversation(2, 1.0), conversation(3, 0.0)]], row_multiple=8)
    marginals, eligible, omega = vict_inputs(batch, 11)
    base = credit.grpo(batch.rewards, batch.group_ids, "std")
    args = (base, marginals, eligible, omega, batch.turn_valid, batch.group_ids)
    jitted = redistribute(*args)
    with jax.disable_jit():
        eager = redistribute(*args)
    close(jitted.advantages, eager.advantages)
    assert np.any(np.asarray(jitted.corrections) != 0)


def test_witness_weights_on_padding_turns_are_ignored():
    batch = pack([[conversation(3, 1.0), conversation(2, 1.0), conversation(2, 0.0)]],
                 row_multiple=4)
    marginals, eligible, omega = vict_inputs(batch, 5)
    base = credit.grpo(batch.rewards, batch.group_ids)
    clean = redistribute(base, marginals, eligible, omega, batch.turn_valid, batch.group_ids)
    noisy = omega + 3.0 * ~batch.turn_valid[:, :, None]
    dirty = redistribute(base, marginals, eligible, noisy, batch.turn_valid, batch.group_ids)
    close(dirty.advantages, clean.advantages)


def test_registry_rejects_bad_vict_values():
    batch = pack([[conversation(3, 1.0), conversation(2, 0.0)]], row_multiple=2)
    marginals, eligible, omega = vict_inputs(batch, 5)
    with pytest.raises(ValueError, match="omega"):
        credit.compute("vict", batch, {"marginals": marginals, "eligible": eligible,
                                       "omega": -omega - 1})
    with pytest.raises(ValueError, match="marginals"):
        credit.compute("vict", batch, {"marginals": marginals * np.nan, "eligible": eligible,
                                       "omega": omega})


def test_violations_are_counted():
    # a correction on turn 1, but the only eligible atom's edge is on turn 0
    omega = jnp.zeros((1, 2, 1)).at[0, 0, 0].set(1.0)
    vict = jnp.array([[0.0, 0.3]])
    assert int(eligibility_violations(vict, jnp.ones((1, 1)), jnp.ones((1, 1), bool),
                                      omega)) == 1
    assert int(eligibility_violations(vict, jnp.ones((1, 1)), jnp.zeros((1, 1), bool),
                                      omega.at[0, 1, 0].set(1.0))) == 1


def test_prover_plus_vict_composes_through_registry():
    batch = pack([[conversation(3, 1.0), conversation(2, 0.0), conversation(4, 0.0)]],
                 row_multiple=4)
    b = batch.num_rows
    prover_inputs = {"seg_start": np.zeros(b, np.int32), "seg_end": np.ones(b, np.int32),
                     "delta": np.array([0.5, 0, 0, 0], np.float32)}
    marginals, eligible, omega = vict_inputs(batch, 3)
    vict = {"marginals": marginals, "eligible": eligible, "omega": omega}
    out = credit.compute("prover+vict", batch, {**prover_inputs, **vict})
    base = credit.compute("prover", batch, prover_inputs).per_turn
    expected = redistribute(base, marginals, eligible, omega, batch.turn_valid, batch.group_ids)
    close(out.per_turn, expected.advantages)
    plain = credit.compute("vict", batch, vict)
    close(plain.per_turn, redistribute(credit.grpo(batch.rewards, batch.group_ids), marginals,
                                       eligible, omega, batch.turn_valid,
                                       batch.group_ids).advantages)


@pytest.mark.parametrize("call, name", [
    (lambda: normalise(jnp.zeros((4, 3)), jnp.ones((4, 2), bool), jnp.zeros((4, 2, 3)),
                       jnp.zeros(4, jnp.int32)), "eligible"),
    (lambda: corrections(jnp.zeros((4, 3)), jnp.zeros((4, 3))), "omega"),
    (lambda: redistribute(jnp.zeros(4), jnp.zeros((4, 3)), jnp.ones((4, 3), bool),
                          jnp.zeros((4, 2, 3)), jnp.ones((4, 5), bool),
                          jnp.zeros(4, jnp.int32)), "turn_valid"),
    (lambda: redistribute(jnp.zeros(4), jnp.zeros((4, 3)), jnp.ones((4, 3), bool),
                          jnp.zeros((4, 2, 3)), jnp.ones((4, 2), bool), jnp.zeros(4, jnp.int32),
                          RedistributionConfig(calibration="some")), "calibration"),
])
def test_bad_input_names_the_array(call, name):
    with pytest.raises(ValueError, match=name):
        call()
