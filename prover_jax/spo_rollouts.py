"""Host parts of the SPO baselines (SPEC §3), through the same restore / continuation engine.

- SPO-chain: for each successful trajectory of an eligible group, the internal boundaries of
  its near-equal segmentation (``credit.spo_chain_segments``) are restored and ``K``
  continuations estimate ``V_1 .. V_{S-1}``; the kernel takes ``boundary_values [B, S-1]`` and
  ``spo_applies [B]``.
- SPO-tree: a group *is* a tree. From the task's start, each level branches ``width`` ways and
  advances ``branch_actions`` actions (4 in household, 1 elsewhere); the last level runs to
  termination, so a 2-2-2 tree has 14 branches and 8 leaves. An episode that ends early stops
  branching and becomes a leaf. Each leaf is one row; a branch's turns are trained in the
  first (leftmost) row below it only, so shared prefixes are not duplicated (``turn_nodes`` is
  -1 elsewhere).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from envs.base import Task
from envs.pool import EnvPool
from prover_jax.credit import spo_chain_segments
from prover_jax.rollout import Episode, Policy, rng_streams, run, start
from prover_jax.verify import VerifyConfig, is_eligible


def spo_chain_values(pool: EnvPool, policy: Policy, groups: Sequence[Sequence[Episode]],
                     rng: random.Random | Sequence[random.Random], num_turns: int,
                     num_rows: int | None = None,
                     config: VerifyConfig | None = None, num_segments: int = 3
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``(boundary_values float32 [B, S-1], applies bool [B])`` for the ``spo-chain`` kernel.

    Args:
      pool, policy: as for ``prover_jax.rollout.run``.
      groups: finished episodes per group, in packing order.
      rng: one random stream, or one per group (`prover_jax.rollout.rng_streams`): a group's
        continuations draw from its stream alone.
      num_turns: T of the packed batch.
      num_rows: B of the packed batch (default: the number of episodes).
      config: eligibility, success threshold and K (default VerifyConfig()).
      num_segments: S.
    """
    config = config or VerifyConfig()
    episodes = [e for g in groups for e in g]
    num_rows = len(episodes) if num_rows is None else num_rows
    lengths = np.array([e.num_turns for e in episodes])
    turn_valid = np.arange(num_turns)[None, :] < lengths[:, None]
    _, boundaries = spo_chain_segments(jnp.asarray(turn_valid), num_segments)
    boundaries = np.asarray(boundaries)
    applies = np.zeros(num_rows, bool)
    requests = []  # (row, boundary slot, turn)
    streams = []
    row = 0
    k = config.continuations
    for group, group_rng in zip(groups, rng_streams(rng, len(groups))):
        eligible = is_eligible([e.reward for e in group], config)
        for episode in group:
            if eligible and episode.reward >= config.success_reward:
                applies[row] = True
                ours = [(row, s, int(b)) for s, b in enumerate(boundaries[row]) if b >= 0]
                requests += ours
                streams += rng_streams(group_rng, len(ours) * k)
            row += 1
    prefixes = [episodes[r].prefix(turn) for r, _, turn in requests for _ in range(k)]
    continued = run(pool, policy, prefixes, streams, progress="boundary values")
    values = np.zeros((num_rows, num_segments - 1), np.float32)
    for n, (r, s, _) in enumerate(requests):
        values[r, s] = np.mean([e.reward for e in continued[n * k:(n + 1) * k]])
    return values, applies


@dataclasses.dataclass(frozen=True)
class SpoTree:
    """One rollout tree: node 0 is the root (the task's start).

    Attributes:
      episodes: the leaves' full episodes, one row each, in node order.
      parents: int32 [N] parent node (-1 for the root).
      leaf_rewards: float32 [N] reward of each leaf node (0 elsewhere).
      branch_start: int32 [N] first turn of each node's branch (0 for the root).
      leaf_rows: int32 [N] row of each leaf node, -1 for internal nodes.
      owner: int32 [N] the row that trains each node's branch (its leftmost leaf).
    """

    episodes: tuple[Episode, ...]
    parents: np.ndarray
    leaf_rewards: np.ndarray
    branch_start: np.ndarray
    leaf_rows: np.ndarray
    owner: np.ndarray


def default_branch_actions(env: str) -> int:
    """Actions per tree level in SPO's setups: 4 in household (2 in its small rooms), 1
    elsewhere."""
    return {"household": 4, "household-small": 2}.get(env, 1)


def spo_trees(pool: EnvPool, policy: Policy, tasks: Sequence[Task],
              rng: random.Random | Sequence[random.Random], branch_actions: int, depth: int = 3,
              width: int = 2, max_actions: int | None = None) -> list[SpoTree]:
    """Grows one tree per task, all trees level by level in one batch per level.

    ``rng`` is one random stream, or one per task (`prover_jax.rollout.rng_streams`): every
    branch of a tree draws from its task's stream alone, so with streams per task a tree grows
    the same in any batch. ``max_actions`` caps every root-to-leaf path (None: the
    environment's turn limit); a level that would start past it is not grown, so its nodes
    stay leaves.
    """
    if branch_actions < 1 or depth < 1 or width < 2:
        raise ValueError("need branch_actions >= 1, depth >= 1 and width >= 2")
    tree_rngs = rng_streams(rng, len(tasks))
    roots = run(pool, policy, [start(t) for t in tasks], tree_rngs, max_actions=0)
    nodes = [[root] for root in roots]
    parents = [[-1] for _ in tasks]
    frontier = [[0] for _ in tasks]
    for level in range(depth):
        limit = None if level == depth - 1 else branch_actions
        if max_actions is not None:  # every unfinished node of a level has the same length
            limit = min(limit or max_actions, max_actions - level * branch_actions)
            if limit <= 0:
                break
        jobs = [(g, n) for g, ids in enumerate(frontier) for n in ids
                if not nodes[g][n].done for _ in range(width)]
        branch_rngs = [random.Random(tree_rngs[g].getrandbits(64)) for g, _ in jobs]
        grown = run(pool, policy, [nodes[g][n] for g, n in jobs], branch_rngs,
                    max_actions=limit, progress=f"tree level {level + 1}/{depth}")
        frontier = [[] for _ in tasks]
        for (g, n), episode in zip(jobs, grown):
            parents[g].append(n)
            nodes[g].append(episode)
            frontier[g].append(len(nodes[g]) - 1)
    return [_tree(n, p) for n, p in zip(nodes, parents)]


def _tree(nodes: list[Episode], parents: list[int]) -> SpoTree:
    n = len(nodes)
    children = [[c for c in range(n) if parents[c] == p] for p in range(n)]
    leaves = [i for i in range(n) if not children[i]]
    leaf_rows = np.full(n, -1, np.int32)
    leaf_rows[leaves] = np.arange(len(leaves))
    owner = np.zeros(n, np.int32)
    for i in range(n - 1, -1, -1):  # children come after parents: fill leftmost leaf upwards
        owner[i] = leaf_rows[i] if leaf_rows[i] >= 0 else owner[children[i][0]]
    parent_array = np.array(parents, np.int32)
    starts = np.array([nodes[p].num_turns if p >= 0 else 0 for p in parents], np.int32)
    rewards = np.array([nodes[i].reward if leaf_rows[i] >= 0 else 0.0 for i in range(n)],
                       np.float32)
    return SpoTree(tuple(nodes[i] for i in leaves), parent_array, rewards, starts, leaf_rows,
                   owner)


def spo_tree_inputs(trees: Sequence[SpoTree], num_rows: int, num_turns: int,
                    num_nodes: int | None = None) -> dict[str, np.ndarray]:
    """The ``spo-tree`` kernel inputs for a batch packed from the trees' leaf rows.

    Returns:
      ``tree_parents`` int32 [G, N], ``tree_leaf_rewards`` float32 [G, N], ``tree_ids`` int32
      [B], ``turn_nodes`` int32 [B, T] (rows: each tree's leaves in order, then padding).
    """
    n = num_nodes or max(len(t.parents) for t in trees)
    parents = np.full((len(trees), n), -1, np.int32)
    leaf_rewards = np.zeros((len(trees), n), np.float32)
    tree_ids = np.full(num_rows, -1, np.int32)
    turn_nodes = np.full((num_rows, num_turns), -1, np.int32)
    row = 0
    for g, tree in enumerate(trees):
        size = len(tree.parents)
        parents[g, :size] = tree.parents
        leaf_rewards[g, :size] = tree.leaf_rewards
        for node in range(1, size):
            end = _branch_end(tree, node)
            turn_nodes[row + tree.owner[node], tree.branch_start[node]:end] = node
        tree_ids[row: row + len(tree.episodes)] = g
        row += len(tree.episodes)
    return {"tree_parents": parents, "tree_leaf_rewards": leaf_rewards, "tree_ids": tree_ids,
            "turn_nodes": turn_nodes}


def _branch_end(tree: SpoTree, node: int) -> int:
    """One past the last turn of a node's branch: where its children start, or the leaf's end."""
    children = np.nonzero(tree.parents == node)[0]
    if children.size:
        return int(tree.branch_start[children[0]])
    return tree.episodes[tree.leaf_rows[node]].num_turns


def budget_matched_schedule(extra_fractions: Sequence[float], group_size: int,
                            phase_steps: int) -> list[tuple[int, int]]:
    """Budget-matched GRPO's ``[(first_step, group_size), ...]`` from a ProVer run's budget.

    Each phase of ``phase_steps`` training steps gets the group size that spends what ProVer
    spent: ``round(group_size * (1 + mean extra fraction))``, where a step's extra fraction is
    its verification rollouts over its own (``extra_env_steps_fraction`` or
    ``extra_policy_tokens_fraction`` of the ProVer diagnostics).
    """
    if group_size < 1 or phase_steps < 1:
        raise ValueError("group_size and phase_steps must be >= 1")
    schedule = []
    for first in range(0, len(extra_fractions), phase_steps):
        phase = extra_fractions[first: first + phase_steps]
        size = round(group_size * (1.0 + float(np.mean(phase))))
        if not schedule or schedule[-1][1] != size:
            schedule.append((first, size))
    return schedule


def budget_schedule_of_run(run_dir: str | Path, group_size: int, phase_steps: int = 10,
                           measure: str = "extra_env_steps_fraction") -> list[tuple[int, int]]:
    """`budget_matched_schedule` of the ProVer run in `run_dir`, from its metrics' per-step
    `credit/prover/<measure>` (`extra_env_steps_fraction` or `extra_policy_tokens_fraction`).

    Raises:
      ValueError: the run's metrics do not hold that measure (not a ProVer run).
    """
    from prover_jax.plot import read_metrics

    key = f"credit/prover/{measure}"
    rows = read_metrics(run_dir, before_training=False)
    if not rows or any(key not in row for row in rows):
        raise ValueError(f"{run_dir}: its metrics have no {key} on every step (a ProVer run, "
                         "prover or prover+vict, records it)")
    return budget_matched_schedule([row[key] for row in rows], group_size, phase_steps)
