"""The built-in credit methods' functions, and the registry's `compute` and `parts`.

Each ``*_turns`` function maps (batch, inputs, config) to per-turn advantages float32 [B, T] and
the outcome part float32 [B] through its kernel; each ``check_*`` checks a method's host values.
`prover_jax.credit.registry` lists them by name, so they load (with JAX) at their first call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from prover_jax.batch import Batch
from prover_jax.checks import check_arrays, check_int32_range
from prover_jax.credit.critic_labels import criticsearch
from prover_jax.credit.outcome import grpo, rloo
from prover_jax.credit.progress import progress_credit
from prover_jax.credit.registry import (
    Credit,
    CreditMethod,
    GrpoConfig,
    InputSpec,
    ProverConfig,
    get,
)
from prover_jax.credit.segment_bonus import prover
from prover_jax.credit.spo import spo_chain, spo_tree
from prover_jax.credit.step_groups import episode_advantage, gigpo
from prover_jax.credit.tokens import high_prob_mask, per_turn, to_tokens


def check_inputs(method: CreditMethod, batch: Batch, inputs: Mapping[str, Any],
                 config: Any) -> None:
    """Raises a ValueError naming any missing, unexpected, mis-shaped, non-finite or
    out-of-range input (the batch's rewards included)."""
    missing = sorted(set(method.inputs) - set(inputs))
    if missing:
        raise ValueError(f"credit method {method.name!r} needs inputs {missing}")
    extra = sorted(set(inputs) - set(method.inputs))
    if extra:
        raise ValueError(f"credit method {method.name!r} does not take inputs {extra}")
    specs = {"turn_valid": (batch.turn_valid, "b t", "b")}
    specs.update({name: (inputs[name], spec, kind) for name, (spec, kind) in method.inputs.items()})
    check_arrays(specs)
    for name, value in {"rewards": batch.rewards, **inputs}.items():
        check_int32_range(name, value)
        value = np.asarray(value)
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise ValueError(f"{name}: must be finite, got non-finite values at "
                             f"{np.argwhere(~np.isfinite(value))[:4].tolist()}")
    if method.check_values is not None:
        method.check_values(batch, inputs, config)


def compute(name: str, batch: Batch, inputs: Mapping[str, Any] | None = None,
            config: Any = None) -> Credit:
    """Resolves `name`, checks the inputs and returns the batch's advantages.

    Args:
      name: a registered method name.
      batch: the padded Batch.
      inputs: the method's extra arrays (see `get(name).inputs`).
      config: an instance of the method's config type, or None for its defaults.

    Returns:
      Credit with per-turn [B, T], token [B, L] and outcome [B] advantages.
    """
    method = get(name)
    inputs = dict(inputs or {})
    config = method.config_type() if config is None else config
    if not isinstance(config, method.config_type):
        raise TypeError(f"config for {name!r} must be {method.config_type.__name__}, "
                         f"got {type(config).__name__}")
    check_inputs(method, batch, inputs, config)
    turns, outcome = method.compute(batch, inputs, config)
    return Credit(turns, to_tokens(turns, batch.turn_ids, batch.loss_mask), outcome)


def parts(name: str, batch: Batch, inputs: Mapping[str, Any], config: Any,
          credited: Credit) -> dict[str, jax.Array]:
    """Where method `name`'s per-turn advantages come from, as `compute` returned them
    (`credited`): float32 [B, T] arrays that sum to ``credited.per_turn``.

    "outcome" is the trajectory-level advantage on every valid turn (GRPO's flat credit); then
    what a composition's base adds to it (under the base's name, e.g. "prover") and what the
    method itself adds (under its name, or a composition's under the part after its base's,
    e.g. "vict"). `config` is the one `compute` was given (None: the defaults).
    """
    method = get(name)
    config = method.config_type() if config is None else config
    outcome = per_turn(credited.outcome, batch.turn_valid)
    if method.base is None:
        return {"outcome": outcome, name: credited.per_turn - outcome}
    base = get(method.base)
    below = compute(method.base, batch, {k: inputs[k] for k in base.inputs},
                    config.base).per_turn
    return {"outcome": outcome, method.base: below - outcome,
            name.removeprefix(method.base + "+"): credited.per_turn - below}


def finite_rows(batch: Batch, inputs: Mapping[str, Any], specs: InputSpec) -> jax.Array:
    """bool [B]: the rows whose float inputs (of `specs`, the batch's rewards too) are all
    finite. An input over trees (spec "g ...", spo-tree's leaf rewards) counts for the rows of
    its tree (``inputs["tree_ids"]``)."""
    finite = jnp.isfinite(batch.rewards)
    for name, (spec, kind) in specs.items():
        if kind != "f":
            continue
        value = jnp.asarray(inputs[name])
        per_entry = jnp.all(jnp.isfinite(value).reshape(value.shape[0], -1), axis=1)
        if spec.split()[0] == "g":
            trees = jnp.asarray(inputs["tree_ids"])
            per_entry = jnp.where(trees >= 0, per_entry[jnp.clip(trees, 0, None)], True)
        finite &= per_entry
    return finite


def outcome_of(batch: Batch, config: GrpoConfig) -> jax.Array:
    """GRPO outcome advantage [B] of a batch under a GRPO-based config."""
    return grpo(batch.rewards, batch.group_ids, config.scale, config.eps)


def grpo_turns(batch, inputs, config):
    del inputs
    outcome = outcome_of(batch, config)
    return per_turn(outcome, batch.turn_valid), outcome


def rloo_turns(batch, inputs, config):
    del inputs, config
    outcome = rloo(batch.rewards, batch.group_ids)
    return per_turn(outcome, batch.turn_valid), outcome


def prover_turns(batch, inputs, config):
    outcome = outcome_of(batch, config)
    turns = prover(outcome, batch.turn_valid, inputs["seg_start"], inputs["seg_end"],
                   inputs["delta"], config.lam)
    return turns, outcome


def check_prover(batch: Batch, inputs, config: ProverConfig) -> None:
    """SPEC §2 validity of every measured segment: 0 <= l <= r <= T_i - 2, length <= max."""
    delta = np.asarray(inputs["delta"])
    start, end = np.asarray(inputs["seg_start"]), np.asarray(inputs["seg_end"])
    n_turns = np.asarray(batch.turn_valid).sum(1)
    checks = {
        "start < 0 or start > end": (start < 0) | (start > end),
        "ends on the terminal turn": end > n_turns - 2,
        f"longer than {config.max_segment_turns} turns": end - start + 1 > config.max_segment_turns,
    }
    for problem, bad in checks.items():
        bad = bad & (delta != 0)
        if bad.any():
            raise ValueError(f"seg_start/seg_end: segment {problem} where delta != 0 at rows "
                             f"{np.flatnonzero(bad)[:8].tolist()}")


def oracle_progress_turns(batch, inputs, config):
    outcome = outcome_of(batch, config)
    turns = progress_credit(outcome, batch.turn_valid, inputs["progress_gain"], config.weight)
    return turns, outcome


def gigpo_turns(batch, inputs, config):
    turns = gigpo(batch.rewards, batch.group_ids, inputs["anchor_ids"], batch.turn_valid,
                  None, config.gamma, config.omega, config.mode, config.episode_stats,
                  config.eps)
    outcome = episode_advantage(batch.rewards, batch.group_ids, batch.turn_valid, config.mode,
                                config.episode_stats, config.eps)
    return turns, outcome


def check_gigpo(batch: Batch, inputs, config) -> None:
    del config
    anchors = np.asarray(inputs["anchor_ids"])
    valid = np.asarray(batch.turn_valid)
    groups = np.broadcast_to(np.asarray(batch.group_ids)[:, None], anchors.shape)[valid]
    ids = anchors[valid]
    if ((ids < 0) | (ids >= anchors.size)).any():
        raise ValueError(f"anchor_ids: valid turns need ids in [0, {anchors.size})")
    pairs = np.unique(np.stack([ids, groups]), axis=1)
    if np.unique(pairs[0]).size != pairs.shape[1]:
        raise ValueError("anchor_ids: an id is shared by two task groups; ids must name a "
                         "(group, state) pair (see anchor_ids_from_observations)")


def spo_chain_turns(batch, inputs, config):
    outcome = outcome_of(batch, config)
    turns = spo_chain(outcome, batch.rewards, batch.group_ids, batch.turn_valid,
                      inputs["boundary_values"], inputs["spo_applies"], config.gamma,
                      config.num_segments)
    return turns, outcome


def spo_tree_turns(batch, inputs, config):
    outcome = outcome_of(batch, config)
    turns = spo_tree(outcome, batch.turn_valid, inputs["tree_ids"], inputs["turn_nodes"],
                     inputs["tree_parents"], inputs["tree_leaf_rewards"])
    return turns, outcome


def check_spo_tree(batch: Batch, inputs, config) -> None:
    del batch, config
    parents = np.asarray(inputs["tree_parents"])
    nodes = np.arange(parents.shape[1])[None, :]
    if ((parents >= nodes) | (parents < -1)).any():
        raise ValueError("tree_parents: each parent must be -1 or an earlier node index")
    n_trees = parents.shape[0]
    tree_ids = np.asarray(inputs["tree_ids"])
    if ((tree_ids < -1) | (tree_ids >= n_trees)).any():
        raise ValueError(f"tree_ids: values must be in [-1, {n_trees})")
    turn_nodes = np.asarray(inputs["turn_nodes"])
    if ((turn_nodes < -1) | (turn_nodes >= parents.shape[1])).any():
        raise ValueError(f"turn_nodes: values must be in [-1, {parents.shape[1]})")


def confident_tokens(batch, inputs, config, old_logprobs):
    """SPO's mask: tokens the sampler drew with probability >= `config.confident_prob`."""
    del inputs
    return high_prob_mask(old_logprobs, batch.loss_mask, config.confident_prob)


def spo_tree_dropped(batch, inputs, config, old_logprobs):
    """The confident tokens, and a tree row's turns of branches another row trains."""
    turn_nodes = jnp.asarray(inputs["turn_nodes"])
    safe = jnp.clip(batch.turn_ids, 0, turn_nodes.shape[1] - 1)
    elsewhere = jnp.take_along_axis(turn_nodes, safe, axis=1) < 0
    in_tree = (jnp.asarray(inputs["tree_ids"]) >= 0)[:, None]
    return (confident_tokens(batch, inputs, config, old_logprobs)
            | (batch.loss_mask & elsewhere & in_tree))


def criticsearch_turns(batch, inputs, config):
    outcome = outcome_of(batch, config)
    turns = criticsearch(outcome, batch.group_ids, batch.turn_valid, inputs["critic_labels"],
                         inputs["critic_labelled"], config.outcome_weight, config.critic_weight)
    return turns, outcome


def check_criticsearch(batch: Batch, inputs, config) -> None:
    del batch, config
    labels = np.asarray(inputs["critic_labels"])
    if not np.isin(labels, (-1, 0, 1)).all():
        raise ValueError("critic_labels: values must be -1, 0 or +1")
