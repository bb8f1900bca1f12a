"""Credit kernels against the numpy-loop references, hand-derived cases and invariances."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prover_jax import credit
from prover_jax.credit.step_groups import step_group_stats
from tests import reference as ref
from tests.conftest import batches

ATOL = 1e-5


def seeded(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def close(actual, expected, atol=ATOL):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), atol=atol, rtol=1e-5)


# ------------------------------------------------------------------ hand-derived cases


def test_grpo_hand_derived():
    # group 0: rewards 1,0,0,0 -> mean 0.25 -> 0.75, -0.25, -0.25, -0.25
    # group 1: all 1 -> 0; row 8: singleton -> 0; row 9: padding -> 0
    r = jnp.array([1, 0, 0, 0, 1, 1, 1, 1, 0.5, 7], jnp.float32)
    g = jnp.array([0, 0, 0, 0, 1, 1, 1, 1, 2, -1], jnp.int32)
    close(credit.grpo(r, g), [0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0, 0, 0])
    # unbiased std of (1,0,0,0) = sqrt((0.5625 + 3 * 0.0625) / 3) = 0.5
    close(credit.grpo(r, g, "std"), [1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0, 0, 0], atol=1e-4)
    # RLOO row 0: 1 - mean(0,0,0) = 1; rows 1..3: 0 - mean(1,0,0) = -1/3
    close(credit.rloo(r, g), [1, -1 / 3, -1 / 3, -1 / 3, 0, 0, 0, 0, 0, 0])


def test_grpo_equal_rewards_are_exactly_zero():
    r = jnp.full((8,), 0.1, jnp.float32)  # 8 * 0.1 does not round-trip through a float32 mean
    g = jnp.zeros(8, jnp.int32)
    assert np.all(np.asarray(credit.grpo(r, g, "std")) == 0.0)


def test_prover_hand_derived():
    # base 0.75 on a 5-turn success; delta = 0.5 on turns 1..2; a second row with delta < 0
    turn_valid = jnp.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], bool)
    out = credit.prover(jnp.array([0.75, -0.25]), turn_valid, jnp.array([1, 0], jnp.int32),
                        jnp.array([2, 1], jnp.int32), jnp.array([0.5, -0.3]))
    close(out, [[0.75, 1.25, 1.25, 0.75, 0.75, 0], [-0.25, -0.25, -0.25, 0, 0, 0]])


def test_gigpo_hand_derived():
    # one group, two trajectories of 2 turns, rewards 1 and 0, gamma 0.5.
    # episode (mean_norm): 1 - 0.5 = 0.5, 0 - 0.5 = -0.5
    # returns: row 0 [0.5, 1], row 1 [0, 0]; turn 0 of both shares anchor 0 -> step group
    # {0.5, 0} with mean 0.25 -> +0.25 / -0.25; turn 1 anchors differ -> singletons -> 0
    rewards = jnp.array([1.0, 0.0])
    out = credit.gigpo(rewards, jnp.array([3, 3], jnp.int32),
                       jnp.array([[0, 1], [0, 2]], jnp.int32), jnp.ones((2, 2), bool), gamma=0.5)
    close(out, [[0.75, 0.5], [-0.75, -0.5]])


def test_anchor_ids_from_observations():
    observations = [["a", "b", "a"], ["a", "c"], ["a"]]
    ids = credit.anchor_ids_from_observations(observations, [0, 0, 1], num_turns=4)
    # same text in one group -> same id (repeats inside a trajectory too); other group -> new id;
    # an id is the flat position of the pair's first turn
    assert ids.tolist() == [[0, 1, 0, -1], [0, 4, -1, -1], [5, -1, -1, -1]]
    similar = credit.anchor_ids_from_observations(
        [["kitchen: apple, mug", "kitchen: apple, mugs"], ["hall"]], [0, 0], num_turns=2,
        similarity=0.9)
    assert similar.tolist() == [[0, 0], [1, -1]]
    with pytest.raises(ValueError, match="similarity"):
        credit.anchor_ids_from_observations(observations, [0, 0, 1], 4, similarity=1.0)
    # step groups {0: 3 turns, 1, 2, 3}: 6 turns in 4 groups, 3 of them sharing one
    assert step_group_stats(ids) == {"anchor_states": 4.0, "step_group_size": 1.5,
                                     "shared_turns": 0.5}
    assert step_group_stats(np.full((2, 3), -1))["anchor_states"] == 0.0


@given(st.lists(st.tuples(st.integers(0, 3), st.lists(st.sampled_from("abcde"), min_size=1,
                                                       max_size=6)), min_size=1, max_size=8))
def test_anchor_ids_name_exactly_the_group_and_text_pairs(rows):
    """Brute force: two turns share an id iff they share group and text (texts shared across
    groups included), ids lie in [0, B*T), padding turns get -1."""
    groups, observations = [g for g, _ in rows], [texts for _, texts in rows]
    ids = credit.anchor_ids_from_observations(observations, groups, num_turns=6)
    turns = [(g, text, ids[b, t]) for b, (g, texts) in enumerate(rows)
             for t, text in enumerate(texts)]
    assert all(0 <= i < ids.size for _, _, i in turns)
    assert (ids >= 0).sum() == len(turns)
    for g1, x1, i1 in turns:
        for g2, x2, i2 in turns:
            assert (i1 == i2) == ((g1, x1) == (g2, x2))


def test_gigpo_unknown_anchor_is_a_singleton_step_group():
    # as test_gigpo_hand_derived, but turn 1 of row 0 has no usable anchor: step advantage 0
    rewards = jnp.array([1.0, 0.0])
    for bad in (-1, 99):
        out = credit.gigpo(rewards, jnp.array([3, 3], jnp.int32),
                           jnp.array([[0, bad], [0, 2]], jnp.int32), jnp.ones((2, 2), bool),
                           gamma=0.5)
        close(out, [[0.75, 0.5], [-0.75, -0.5]])


def test_gigpo_outcome_is_its_episode_advantage():
    # per-turn episode stats: rewards 1, 0, 0.6 with 4, 1, 1 turns -> weighted mean
    # (4 + 0 + 0.6) / 6 = 0.7667; row 2 gets 0.6 - 0.7667 < 0 although GRPO gives it > 0
    from prover_jax.batch import Message, Trajectory, pack
    from prover_jax.credit import registry

    def episode(turns, reward):
        return Trajectory([Message([1], "assistant", t) for t in range(turns)], reward)

    batch = pack([[episode(4, 1.0), episode(1, 0.0), episode(1, 0.6)]])
    anchors = np.arange(batch.turn_valid.size, dtype=np.int32).reshape(batch.turn_valid.shape)
    out = credit.compute("gigpo", batch, {"anchor_ids": anchors},
                         registry.GigpoConfig(episode_stats="per_turn"))
    close(out.outcome, [1 - 4.6 / 6, -4.6 / 6, 0.6 - 4.6 / 6])
    assert float(credit.grpo(batch.rewards, batch.group_ids)[2]) > 0


def test_spo_chain_hand_derived():
    # 7 turns -> segments [0,1,2], [3,4], [5,6]; V0 = group mean 0.5, V1 = 0.25, V2 = 0.75, V3 = 1
    turn_valid = jnp.ones((2, 7), bool)
    out = credit.spo_chain(jnp.array([0.5, -0.5]), jnp.array([1.0, 0.0]),
                           jnp.zeros(2, jnp.int32), turn_valid,
                           jnp.array([[0.25, 0.75], [0.0, 0.0]]), jnp.array([True, False]))
    close(out[0], [-0.25] * 3 + [0.5] * 2 + [0.25] * 2)
    close(out[1], [-0.5] * 7)  # not measured: keeps its base advantage
    segment, boundaries = credit.spo_chain_segments(turn_valid[:1, :2])
    close(segment, [[0, 1]])
    close(boundaries, [[1, -1]])


def test_spo_tree_hand_derived():
    # root 0 -> children 1, 2; node 1 -> leaves 3 (R=1), 4 (R=0); node 2 is a leaf (R=1).
    # V(1) = 0.5, V(2) = 1, V(0) = mean(1, 0, 1) = 2/3 -> branches 1: -1/6, 2: 1/3, 3: 0.5, 4: -0.5
    parents = jnp.array([[-1, 0, 0, 1, 1]], jnp.int32)
    leaf = jnp.array([[0, 0, 1, 1, 0]], jnp.float32)
    values, branch = credit.spo_tree_values(parents, leaf)
    close(values, [[2 / 3, 0.5, 1, 1, 0]])
    close(branch, [[0, -1 / 6, 1 / 3, 0.5, -0.5]])


def test_criticsearch_hand_derived():
    # group 0 labelled: 0.75 * 0.5 + 0.25 * (+1) = 0.625, 0.75 * 0.5 - 0.25 = 0.125, unscored 0.5
    # group 1 has an unlabelled row -> whole group keeps GRPO
    base = jnp.array([0.5, -0.5, 0.5, -0.5])
    labels = jnp.array([[1, -1, 0], [-1, -1, -1], [1, 1, 1], [1, 1, 1]], jnp.int32)
    out = credit.criticsearch(base, jnp.array([0, 0, 1, 1], jnp.int32), jnp.ones((4, 3), bool),
                              labels, jnp.array([True, True, True, False]))
    close(out, [[0.625, 0.125, 0.5], [-0.625] * 3, [0.5] * 3, [-0.5] * 3])


def test_high_prob_mask():
    logp = jnp.log(jnp.array([[0.95, 0.9, 0.5, 0.99]]))
    mask = jnp.array([[True, True, True, False]])
    assert np.asarray(credit.high_prob_mask(logp, mask)).tolist() == [[True, True, False, False]]


# ------------------------------------------------------------------ against the references


def extras(batch, seed):
    """Random method inputs matching a batch."""
    rng = seeded(seed)
    b, t = batch.turn_valid.shape
    n_turns = batch.turn_valid.sum(1)
    last = np.maximum(n_turns - 2, 0)  # a segment must end before the terminal turn
    start = rng.integers(0, last + 1)
    return {
        "seg_start": start.astype(np.int32),
        "seg_end": np.minimum(start + rng.integers(0, 4, b), last).astype(np.int32),
        "delta": np.where(n_turns >= 2, rng.choice([-0.5, 0.0, 0.25, 0.5], b), 0.0
                          ).astype(np.float32),
        "anchor_ids": (np.maximum(batch.group_ids, 0)[:, None] * 3 + rng.integers(0, 3, (b, t))
                       ).astype(np.int32),
        "boundary_values": rng.random((b, 2)).astype(np.float32),
        "applies": rng.random(b) < 0.5,
        "labels": rng.integers(-1, 2, (b, t)).astype(np.int32),
        "progress_gain": rng.uniform(-1, 1, (b, t)).astype(np.float32),
        "labelled": rng.random(b) < 0.8,
    }


@given(batches(), st.sampled_from(["none", "std"]))
def test_outcome_matches_reference(batch, scale):
    close(credit.grpo(batch.rewards, batch.group_ids, scale),
          ref.grpo(batch.rewards, batch.group_ids, scale), atol=1e-4)
    close(credit.rloo(batch.rewards, batch.group_ids), ref.rloo(batch.rewards, batch.group_ids))


@given(batches(), st.integers(0, 2**31))
def test_to_tokens_matches_reference(batch, seed):
    per_traj = seeded(seed).normal(size=batch.num_rows).astype(np.float32)
    per_turn = seeded(seed + 1).normal(size=batch.turn_valid.shape).astype(np.float32)
    for values in (per_traj, per_turn):
        out = credit.to_tokens(values, batch.turn_ids, batch.loss_mask)
        close(out, ref.to_tokens(values, batch.turn_ids, batch.loss_mask))
        assert np.all(np.asarray(out)[~batch.loss_mask] == 0)


@given(batches(), st.integers(0, 2**31))
def test_high_prob_mask_matches_reference(batch, seed):
    logprobs = np.log(seeded(seed).random(batch.tokens.shape)).astype(np.float32)
    expected = ref.high_prob_mask(logprobs, batch.loss_mask)
    assert np.array_equal(np.asarray(credit.high_prob_mask(logprobs, batch.loss_mask)), expected)


@given(batches(), st.integers(0, 2**31))
def test_prover_matches_reference(batch, seed):
    x = extras(batch, seed)
    base = credit.grpo(batch.rewards, batch.group_ids)
    out = credit.prover(base, batch.turn_valid, x["seg_start"], x["seg_end"], x["delta"], 0.7)
    close(out, ref.prover(np.asarray(base), batch.turn_valid, x["seg_start"], x["seg_end"],
                          x["delta"], 0.7))


@given(batches(), st.integers(0, 2**31))
def test_progress_credit_matches_reference(batch, seed):
    x = extras(batch, seed)
    base = credit.grpo(batch.rewards, batch.group_ids)
    out = credit.progress_credit(base, batch.turn_valid, x["progress_gain"], 0.5)
    close(out, ref.progress_credit(np.asarray(base), batch.turn_valid, x["progress_gain"], 0.5))


@given(batches(), st.integers(0, 2**31), st.sampled_from(["mean_norm", "mean_std_norm"]),
       st.sampled_from(["per_trajectory", "per_turn"]), st.booleans())
def test_gigpo_matches_reference(batch, seed, mode, episode_stats, dense_rewards):
    x = extras(batch, seed)
    step_rewards = (seeded(seed).random(batch.turn_valid.shape).astype(np.float32)
                    if dense_rewards else None)
    out = credit.gigpo(batch.rewards, batch.group_ids, x["anchor_ids"], batch.turn_valid,
                       step_rewards, 0.9, 0.5, mode, episode_stats)
    expected = ref.gigpo(batch.rewards, batch.group_ids, x["anchor_ids"], batch.turn_valid,
                         step_rewards, 0.9, 0.5, mode, episode_stats)
    close(out, expected, atol=2e-4)


@given(batches(), st.integers(0, 2**31), st.sampled_from([1.0, 0.9]))
def test_spo_chain_matches_reference(batch, seed, gamma):
    x = extras(batch, seed)
    base = credit.grpo(batch.rewards, batch.group_ids)
    out = credit.spo_chain(base, batch.rewards, batch.group_ids, batch.turn_valid,
                           x["boundary_values"], x["applies"], gamma)
    expected = ref.spo_chain(np.asarray(base), batch.rewards, batch.group_ids, batch.turn_valid,
                             x["boundary_values"], x["applies"], gamma)
    close(out, expected)


@given(st.integers(1, 5), st.integers(1, 4))
def test_spo_chain_segments_match_array_split(n_turns, num_segments):
    turn_valid = np.arange(6)[None, :] < n_turns
    segment, boundaries = credit.spo_chain_segments(turn_valid, num_segments)
    parts = ref.spo_chain_segments(n_turns, num_segments)
    expected = np.full(6, -1)
    for k, turns in enumerate(parts):
        expected[turns] = k
    assert np.asarray(segment)[0].tolist() == expected.tolist()
    starts = [int(p[0]) for p in parts[1:]]
    assert np.asarray(boundaries)[0].tolist() == starts + [-1] * (num_segments - 1 - len(starts))


def random_trees(rng, n_trees, n_nodes):
    parents = np.full((n_trees, n_nodes), -1, np.int32)
    for g in range(n_trees):
        for node in range(1, n_nodes):
            parents[g, node] = rng.integers(0, node)
    return parents, rng.integers(0, 2, (n_trees, n_nodes)).astype(np.float32)


@given(st.integers(0, 2**31), st.sampled_from([2, 7, 15]))
def test_spo_tree_matches_reference(seed, n_nodes):
    rng = seeded(seed)
    parents, leaf = random_trees(rng, 3, n_nodes)
    values, branch = credit.spo_tree_values(parents, leaf)
    ref_values, ref_branch = ref.spo_tree_values(parents, leaf)
    close(values, ref_values)
    close(branch, ref_branch)
    turn_valid = np.arange(4)[None, :] < rng.integers(1, 5, (5, 1))
    tree_ids = rng.integers(-1, 3, 5).astype(np.int32)
    turn_nodes = rng.integers(-1, n_nodes, (5, 4)).astype(np.int32)
    base = rng.normal(size=5).astype(np.float32)
    close(credit.spo_tree(base, turn_valid, tree_ids, turn_nodes, parents, leaf),
          ref.spo_tree(base, turn_valid, tree_ids, turn_nodes, parents, leaf))


def test_spo_tree_2_2_2_shape():
    # The benchmark tree: root + 2 + 4 + 8 nodes, 14 branches, 8 leaves.
    parents = np.array([[-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]], np.int32)
    leaf = np.zeros((1, 15), np.float32)
    leaf[0, 7:] = [1, 1, 0, 0, 1, 0, 0, 0]
    values, branch = credit.spo_tree_values(parents, leaf)
    # leaves 7..14 pair up under nodes 3..6: means 1, 0, 0.5, 0; level 1: 0.5, 0.25; root 3/8
    close(values[0, :7], [3 / 8, 0.5, 0.25, 1.0, 0.0, 0.5, 0.0])
    close(branch[0, 1:3], [0.5 - 3 / 8, 0.25 - 3 / 8])
    close(branch[0, 7:9], [0.0, 0.0])  # both leaves under node 3 equal its value
    close(branch, ref.spo_tree_values(parents, leaf)[1])


@given(batches(), st.integers(0, 2**31))
def test_criticsearch_matches_reference(batch, seed):
    x = extras(batch, seed)
    base = credit.grpo(batch.rewards, batch.group_ids)
    out = credit.criticsearch(base, batch.group_ids, batch.turn_valid, x["labels"],
                              x["labelled"])
    close(out, ref.criticsearch(np.asarray(base), batch.group_ids, batch.turn_valid, x["labels"],
                                x["labelled"]))


# ------------------------------------------------------------------ invariances


def pad_batch(batch, extra_rows=3, extra_turns=2, extra_tokens=5):
    """The same batch with padding rows, turns and tokens appended."""
    b, length = batch.tokens.shape
    t = batch.turn_valid.shape[1]

    def grow(x, shape, fill):
        out = np.full(shape, fill, np.asarray(x).dtype)
        out[tuple(slice(0, s) for s in np.shape(x))] = x
        return out

    return type(batch)(
        tokens=grow(batch.tokens, (b + extra_rows, length + extra_tokens), 0),
        loss_mask=grow(batch.loss_mask, (b + extra_rows, length + extra_tokens), False),
        turn_ids=grow(batch.turn_ids, (b + extra_rows, length + extra_tokens), -1),
        group_ids=grow(batch.group_ids, (b + extra_rows,), -1),
        rewards=grow(batch.rewards, (b + extra_rows,), 3.0),
        turn_valid=grow(batch.turn_valid, (b + extra_rows, t + extra_turns), False),
    )


def all_methods(batch, seed):
    """Token advantages of every built-in method, computed through the registry."""
    x = extras(batch, seed)
    b, t = batch.turn_valid.shape
    rng = seeded(seed)
    parents, leaf = random_trees(rng, 2, 7)
    inputs = {
        "prover": {k: x[k] for k in ("seg_start", "seg_end", "delta")},
        "gigpo": {"anchor_ids": x["anchor_ids"]},
        "spo-chain": {"boundary_values": x["boundary_values"], "spo_applies": x["applies"]},
        "spo-tree": {"tree_parents": parents, "tree_leaf_rewards": leaf,
                     "tree_ids": np.where(batch.group_ids >= 0, batch.group_ids % 2, -1
                                          ).astype(np.int32),
                     "turn_nodes": rng.integers(-1, 7, (b, t)).astype(np.int32)},
        "criticsearch": {"critic_labels": x["labels"], "critic_labelled": x["labelled"]},
        "oracle-progress": {"progress_gain": x["progress_gain"]},
    }
    return {name: credit.compute(name, batch, inputs.get(name, {})).tokens
            for name in ("grpo", "rloo", "prover", "gigpo", "spo-chain", "spo-tree",
                         "criticsearch", "oracle-progress")}, inputs


PER_TURN_INPUTS = ("anchor_ids", "critic_labels", "turn_nodes", "progress_gain")
TREE_INPUTS = ("tree_parents", "tree_leaf_rewards")


def pad_inputs(inputs, batch, padded):
    """Pads each method input's row axis (and turn axis where it has one) like `pad_batch`."""
    pb, pt = padded.turn_valid.shape
    out = {}
    for name, value in inputs.items():
        value = np.asarray(value)
        if name in TREE_INPUTS:
            out[name] = value
            continue
        shape = list(value.shape)
        shape[0] = pb
        if name in PER_TURN_INPUTS:
            shape[1] = pt
        fill = {"tree_ids": -1, "turn_nodes": -1, "anchor_ids": -1, "seg_start": 0,
                "seg_end": 0}.get(name, 0)
        grown = np.full(shape, fill, value.dtype)
        grown[tuple(slice(0, s) for s in value.shape)] = value
        out[name] = grown
    return out


@given(batches(), st.integers(0, 2**31))
def test_padding_changes_nothing(batch, seed):
    before, inputs = all_methods(batch, seed)
    padded = pad_batch(batch)
    b, length = batch.tokens.shape
    for name, tokens in before.items():
        after = credit.compute(name, padded, pad_inputs(inputs[name], batch, padded)
                               if name in inputs else {}).tokens
        close(np.asarray(after)[:b, :length], tokens)
        assert np.all(np.asarray(after)[b:] == 0) and np.all(np.asarray(after)[:, length:] == 0)


@given(batches(), st.integers(0, 2**31))
def test_permuting_rows_permutes_outputs(batch, seed):
    perm = seeded(seed).permutation(batch.num_rows)
    before, inputs = all_methods(batch, seed)
    permuted = type(batch)(*(np.asarray(x)[perm] for x in (
        batch.tokens, batch.loss_mask, batch.turn_ids, batch.group_ids, batch.rewards,
        batch.turn_valid)))
    for name, tokens in before.items():
        rows_first = {k: v if k in TREE_INPUTS else np.asarray(v)[perm]
                      for k, v in inputs.get(name, {}).items()}
        after = credit.compute(name, permuted, rows_first).tokens
        close(after, np.asarray(tokens)[perm])


@given(batches(), st.sampled_from(["none", "std"]))
def test_grpo_sums_to_zero_per_group(batch, scale):
    adv = np.asarray(credit.grpo(batch.rewards, batch.group_ids, scale))
    for g in set(batch.group_ids.tolist()) - {-1}:
        assert abs(adv[batch.group_ids == g].sum()) < 1e-4


@given(batches(), st.integers(0, 2**31))
def test_prover_without_positive_delta_is_grpo(batch, seed):
    x = extras(batch, seed)
    base = credit.grpo(batch.rewards, batch.group_ids)
    out = credit.prover(base, batch.turn_valid, x["seg_start"], x["seg_end"],
                        -np.abs(x["delta"]))
    close(out, credit.per_turn(base, batch.turn_valid))


@settings(max_examples=2)  # eager dispatch is slow; the kernels are the same code either way
@given(batches(), st.integers(0, 2**31))
def test_jit_equals_eager(batch, seed):
    jitted, _ = all_methods(batch, seed)
    with jax.disable_jit():
        eager, _ = all_methods(batch, seed)
    for name in jitted:
        close(jitted[name], eager[name])


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("call, name", [
    (lambda: credit.grpo(jnp.zeros(4), jnp.zeros(5, jnp.int32)), "group_ids"),
    (lambda: credit.grpo(jnp.zeros(4, jnp.int32), jnp.zeros(4, jnp.int32)), "rewards"),
    (lambda: credit.rloo(jnp.zeros((4, 1)), jnp.zeros(4, jnp.int32)), "rewards"),
    (lambda: credit.to_tokens(jnp.zeros((4, 3)), jnp.zeros((5, 8), jnp.int32),
                              jnp.zeros((5, 8), bool)), "turn_ids"),
    (lambda: credit.to_tokens(jnp.zeros(4), jnp.zeros((4, 8), jnp.int32),
                              jnp.zeros((4, 8), jnp.int32)), "loss_mask"),
    (lambda: credit.prover(jnp.zeros(4), jnp.ones((4, 3), bool), jnp.zeros(4, jnp.int32),
                           jnp.zeros(4, jnp.int32), jnp.zeros(3)), "delta"),
    (lambda: credit.gigpo(jnp.zeros(4), jnp.zeros(4, jnp.int32), jnp.zeros((4, 2), jnp.int32),
                          jnp.ones((4, 3), bool)), "anchor_ids"),
    (lambda: credit.spo_chain(jnp.zeros(4), jnp.zeros(4), jnp.zeros(4, jnp.int32),
                              jnp.ones((4, 3), bool), jnp.zeros((4, 3)), jnp.ones(4, bool)),
     "boundary_values"),
    (lambda: credit.spo_tree_values(jnp.zeros((2, 5), jnp.int32), jnp.zeros((2, 4))),
     "leaf_rewards"),
    (lambda: credit.criticsearch(jnp.zeros(4), jnp.zeros(4, jnp.int32), jnp.ones((4, 3), bool),
                                 jnp.zeros((4, 3)), jnp.ones(4, bool)), "labels"),
    (lambda: credit.high_prob_mask(jnp.zeros((4, 3)), jnp.ones((4, 2), bool)), "loss_mask"),
    (lambda: credit.grpo(jnp.zeros(4), jnp.zeros(4, jnp.int32), "mean"), "scale"),
    (lambda: credit.gigpo(jnp.zeros(4), jnp.zeros(4, jnp.int32), jnp.zeros((4, 3), jnp.int32),
                          jnp.ones((4, 3), bool), mode="std"), "mode"),
])
def test_bad_input_names_the_array(call, name):
    with pytest.raises(ValueError, match=name):
        call()
