"""SPO-chain and SPO-tree segment advantages (SPEC §3; ProVer paper appendix A.3).

SPO-chain splits the action turns of each selected success into up to `num_segments` contiguous,
near-equal segments: S_i = min(S, T_i) segments whose sizes differ by at most one, the longer ones
first (as `numpy.array_split`). With boundary values V_0 (group mean reward), V_1..V_{S_i-1}
(Monte-Carlo values at the internal boundaries) and V_{S_i} = R_i, segment k gets
`gamma * V_k - V_{k-1}` (gamma = 1 in the paper). Other rows keep their base advantage.

SPO-tree is a branching rollout: nodes `0..N-1` of each tree with parent indices (-1 for the
root, the shared initial state), a terminal reward at every leaf. A node's value is the mean
reward of the leaves below it, and the branch into child c of parent p gets `V(c) - V(p)`.
Branches are packed into leaf containers (rows) without duplicating shared prefixes: each turn of
a row names the tree node whose branch it belongs to, or -1 when it is context trained elsewhere.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from prover_jax.checks import check_arrays, kernel
from prover_jax.credit.outcome import group_stats
from prover_jax.credit.tokens import per_turn


@kernel(static_argnames=("num_segments",))
def spo_chain_segments(turn_valid: jax.Array, num_segments: int = 3):
    """Near-equal contiguous segmentation of each row's turns.

    Args:
      turn_valid: bool [B, T].
      num_segments: S, the most segments per row.

    Returns:
      (segment int32 [B, T]: segment index of each turn, -1 on padding turns;
       boundaries int32 [B, S-1]: first turn of internal segments 1..S-1, where the host restores
       the state to estimate V_1..V_{S-1}; -1 where a row has fewer segments).
    """
    check_arrays({"turn_valid": (turn_valid, "b t", "b")})
    if num_segments < 1:
        raise ValueError(f"num_segments must be >= 1, got {num_segments}")
    n_turns = jnp.sum(turn_valid, axis=1)[:, None]
    n_segs = jnp.maximum(jnp.minimum(num_segments, n_turns), 1)
    size, longer = n_turns // n_segs, n_turns % n_segs  # the first `longer` segments get size+1
    t = jnp.arange(turn_valid.shape[1])[None, :]
    split = longer * (size + 1)
    segment = jnp.where(t < split, t // (size + 1), longer + (t - split) // jnp.maximum(size, 1))
    segment = jnp.where(turn_valid, segment, -1).astype(jnp.int32)
    k = jnp.arange(1, num_segments)[None, :]
    boundaries = jnp.where(k < n_segs, k * size + jnp.minimum(k, longer), -1).astype(jnp.int32)
    return segment, boundaries


@kernel(static_argnames=("num_segments",))
def spo_chain(base: jax.Array, rewards: jax.Array, group_ids: jax.Array,
              turn_valid: jax.Array, boundary_values: jax.Array, applies: jax.Array,
              gamma: float | jax.Array = 1.0, num_segments: int = 3) -> jax.Array:
    """SPO-chain per-turn advantages.

    Args:
      base: float32 [B] or [B, T] advantage of rows the chain does not apply to (GRPO).
      rewards: float32 [B] terminal rewards (V_{S_i} of each row, and V_0 by group mean).
      group_ids: int32 [B]; -1 marks padding.
      turn_valid: bool [B, T].
      boundary_values: float32 [B, S-1] internal boundary values V_1..V_{S-1}, entries beyond a
        row's S_i - 1 are ignored.
      applies: bool [B] rows that were measured (successes of eligible groups).
      gamma: discount applied to the later boundary value.
      num_segments: S.

    Returns:
      float32 [B, T]; 0 on padding turns.
    """
    check_arrays({
        "rewards": (rewards, "b", "f"), "group_ids": (group_ids, "b", "i"),
        "turn_valid": (turn_valid, "b t", "b"), "applies": (applies, "b", "b"),
        "boundary_values": (boundary_values, f"b {num_segments - 1}", "f"),
    })
    segment, _ = spo_chain_segments(turn_valid, num_segments)
    _, stats = group_stats(rewards, group_ids)
    n_segs = jnp.minimum(num_segments, jnp.sum(turn_valid, axis=1))
    # values[b, k] = V_k for k = 0..S: group mean, internal values, then the reward padded on.
    values = jnp.concatenate([stats.mean[:, None], boundary_values,
                              jnp.zeros_like(rewards)[:, None]], axis=1)
    values = values.at[jnp.arange(rewards.shape[0]), n_segs].set(rewards)
    seg = jnp.maximum(segment, 0)
    before = jnp.take_along_axis(values, seg, axis=1)
    after = jnp.take_along_axis(values, seg + 1, axis=1)
    chain = gamma * after - before
    return jnp.where(applies[:, None] & turn_valid, chain, per_turn(base, turn_valid, "base"))


def _ancestor_or_self(parents: jax.Array, node_valid: jax.Array) -> jax.Array:
    """bool [G, N, N]: entry [g, n, a] says a is n or an ancestor of n (by squaring)."""
    n = parents.shape[1]
    eye = jnp.eye(n, dtype=jnp.float32)
    step = jax.nn.one_hot(parents, n, dtype=jnp.float32) * node_valid[..., None]
    reach = jnp.minimum(eye + step, 1.0)
    for _ in range(max(1, math.ceil(math.log2(n)))):
        reach = jnp.minimum(jnp.einsum("gna,gab->gnb", reach, reach,
                                       precision=jax.lax.Precision.HIGHEST), 1.0)
    return reach > 0


@kernel
def spo_tree_values(parents: jax.Array, leaf_rewards: jax.Array,
                    node_valid: jax.Array | None = None):
    """Node values and branch advantages of a batch of rollout trees.

    Args:
      parents: int32 [G, N] parent of each node, -1 for a root; parents precede children.
      leaf_rewards: float32 [G, N] terminal reward of each leaf (ignored at internal nodes).
      node_valid: bool [G, N] or None (all nodes exist); padding nodes are not leaves.

    Returns:
      (values float32 [G, N]: mean reward of the leaves below each node (itself if a leaf);
       branch float32 [G, N]: V(node) - V(parent), 0 for roots and padding nodes).
    """
    check_arrays({"parents": (parents, "g n", "i"), "leaf_rewards": (leaf_rewards, "g n", "f")})
    if node_valid is None:
        node_valid = jnp.ones(parents.shape, bool)
    check_arrays({"node_valid": (node_valid, "g n", "b"), "parents": (parents, "g n", "i")})
    n = parents.shape[1]
    child_count = jnp.sum(jax.nn.one_hot(parents, n) * node_valid[..., None], axis=1)
    leaf = node_valid & (child_count == 0)
    reach = _ancestor_or_self(parents, node_valid) & leaf[..., None]
    mass = jnp.einsum("gna,gn->ga", reach.astype(jnp.float32), jnp.where(leaf, leaf_rewards, 0.0),
                      precision=jax.lax.Precision.HIGHEST)
    count = jnp.sum(reach, axis=1)
    values = jnp.where(node_valid & (count > 0), mass / jnp.maximum(count, 1), 0.0)
    parent_value = jnp.take_along_axis(values, jnp.maximum(parents, 0), axis=1)
    branch = jnp.where(node_valid & (parents >= 0), values - parent_value, 0.0)
    return values, branch


@kernel
def spo_tree(base: jax.Array, turn_valid: jax.Array, tree_ids: jax.Array,
             turn_nodes: jax.Array, parents: jax.Array, leaf_rewards: jax.Array,
             node_valid: jax.Array | None = None) -> jax.Array:
    """SPO-tree per-turn advantages: each turn gets the advantage of the branch it belongs to.

    Args:
      base: float32 [B] or [B, T] advantage of rows outside any tree (GRPO fallback).
      turn_valid: bool [B, T].
      tree_ids: int32 [B] tree of each row (index into G), -1 for rows outside trees.
      turn_nodes: int32 [B, T] tree node of each turn's branch, -1 for turns trained in another
        container (they get 0).
      parents, leaf_rewards, node_valid: the trees, as in `spo_tree_values`.

    Returns:
      float32 [B, T]; 0 on padding turns and on turns of other containers' branches.
    """
    check_arrays({
        "turn_valid": (turn_valid, "b t", "b"), "tree_ids": (tree_ids, "b", "i"),
        "turn_nodes": (turn_nodes, "b t", "i"), "parents": (parents, "g n", "i"),
    })
    _, branch = spo_tree_values(parents, leaf_rewards, node_valid)
    rows = branch[jnp.maximum(tree_ids, 0)]
    adv = jnp.take_along_axis(rows, jnp.maximum(turn_nodes, 0), axis=1)
    adv = jnp.where(turn_nodes >= 0, adv, 0.0)
    in_tree = (tree_ids >= 0)[:, None]
    return jnp.where(turn_valid, jnp.where(in_tree, adv, per_turn(base, turn_valid, "base")), 0.0)
