"""The credit-method registry the trainer resolves `--credit NAME` through.

A `CreditMethod` names the extra per-batch arrays its host side must produce (with their shapes,
checked before the kernel runs), its frozen config type, and a `compute` function from the batch,
those arrays and the config to per-turn advantages. Built-in methods register below; other
packages add theirs through the `prover_jax.credit_methods` entry-point group (VICT does), so this
package never imports them.

Every method also reports its trajectory-level *outcome* component (GRPO, or GiGPO's episode
advantage): VICT takes the sign of its base from it (SPEC §4.5, eq. 10).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from prover_jax.batch import Batch
from prover_jax.checks import check_arrays, check_int32_range
from prover_jax.credit.criticsearch import criticsearch
from prover_jax.credit.gigpo import episode_advantage, gigpo
from prover_jax.credit.hosts import BUILT_IN as BUILT_IN_HOSTS
from prover_jax.credit.hosts import HostFactory
from prover_jax.credit.outcome import Scale, grpo, rloo
from prover_jax.credit.prover import prover
from prover_jax.credit.spo import spo_chain, spo_tree
from prover_jax.credit.tokens import high_prob_mask, per_turn, to_tokens

ENTRY_POINT_GROUP = "prover_jax.credit_methods"


class Credit(NamedTuple):
    """Advantages of one batch: per turn, on tokens, and the trajectory-level outcome part."""

    per_turn: jax.Array  # float32 [B, T]
    tokens: jax.Array  # float32 [B, L]
    outcome: jax.Array  # float32 [B]


# (shape spec, dtype kind) of each extra input, in the letters of `check_arrays`.
InputSpec = Mapping[str, tuple[str, str]]


@dataclasses.dataclass(frozen=True)
class CreditMethod:
    """A registered credit method.

    Attributes:
      name: registry key, e.g. "prover" or "prover+vict".
      compute: (batch, inputs, config) -> (per_turn [B, T], outcome [B]).
      inputs: extra arrays the host side provides, name -> (shape spec, dtype kind).
      config_type: frozen dataclass of the method's knobs; `config_type()` is the default.
      description: one line for `--help` and the README.
      check_values: optional host-side check (batch, inputs, config) of input values (raises
        ValueError).
      host: the host side that produces `inputs` from a training step's rollouts
        (`hosts.HostFactory`); None when there are no inputs to produce.
      rollouts: what the method's rollouts are: "groups" (G episodes per task), "trees"
        (spo-tree's rollout trees, shape from the config's `depth`, `width`,
        `branch_actions`) or "scheduled-groups" (G from the config's `group_size(step)`).
      dropped_tokens: optional (batch, inputs, config, old_logprobs [B, L]) -> bool [B, L],
        the policy tokens the learner leaves out of the loss (SPO's confident tokens).
      base: the registered method this one composes its credit onto (its inputs a subset of
        this one's, its config this one's ``config.base``), e.g. "prover" of "prover+vict";
        None if none.
    """

    name: str
    compute: Callable[[Batch, Mapping[str, jax.Array], Any], tuple[jax.Array, jax.Array]]
    inputs: InputSpec
    config_type: type
    description: str
    check_values: Callable[[Batch, Mapping[str, Any], Any], None] | None = None
    host: HostFactory | None = None
    rollouts: Literal["groups", "trees", "scheduled-groups"] = "groups"
    dropped_tokens: Callable[[Batch, Mapping[str, Any], Any, jax.Array], jax.Array] | None = None
    base: str | None = None


_REGISTRY: dict[str, CreditMethod] = {}
_plugins_loaded = False


def register(method: CreditMethod) -> CreditMethod:
    """Adds a method; a name can be registered once."""
    if method.name in _REGISTRY:
        raise ValueError(f"credit method {method.name!r} is already registered")
    _REGISTRY[method.name] = method
    return method


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        entry.load()()


def trainable(method: CreditMethod) -> bool:
    """Whether the trainer can run `method`: a host side for its inputs, if it has any."""
    return method.host is not None or not method.inputs


def names() -> list[str]:
    """Every registered method name, plug-ins included, sorted."""
    _load_plugins()
    return sorted(_REGISTRY)


def get(name: str) -> CreditMethod:
    """The method registered as `name`; a ValueError lists the known names otherwise."""
    _load_plugins()
    if name not in _REGISTRY:
        raise ValueError(f"unknown credit method {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


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


# ----------------------------------------------------------------------------- built-in methods


@dataclasses.dataclass(frozen=True)
class GrpoConfig:
    """Outcome advantage shared by every GRPO-based method (SPEC §1)."""

    scale: Scale = "none"
    eps: float = 1e-6


@dataclasses.dataclass(frozen=True)
class BudgetMatchedConfig(GrpoConfig):
    """GRPO whose group size follows a schedule matching another run's rollout budget.

    `schedule` is ((first_step, group_size), ...) with increasing first steps, the first at 0.
    """

    schedule: tuple[tuple[int, int], ...] = ((0, 8),)

    def __post_init__(self):
        steps = [s for s, _ in self.schedule]
        if not steps or steps[0] != 0 or steps != sorted(set(steps)):
            raise ValueError(f"schedule must start at step 0 and increase, got {self.schedule}")
        if any(size < 1 for _, size in self.schedule):
            raise ValueError(f"group sizes must be >= 1, got {self.schedule}")

    def group_size(self, step: int) -> int:
        """Group size used at optimizer step `step` (0-based)."""
        return next(size for first, size in reversed(self.schedule) if step >= first)


@dataclasses.dataclass(frozen=True)
class ProverConfig(GrpoConfig):
    lam: float = 1.0
    max_segment_turns: int = 4


@dataclasses.dataclass(frozen=True)
class GigpoConfig:
    gamma: float = 0.95
    omega: float = 1.0
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    episode_stats: Literal["per_trajectory", "per_turn"] = "per_trajectory"
    eps: float = 1e-6


@dataclasses.dataclass(frozen=True)
class SpoChainConfig(GrpoConfig):
    num_segments: int = 3
    gamma: float = 1.0
    confident_prob: float = 0.9  # tokens sampled at least this likely are left out of the loss


@dataclasses.dataclass(frozen=True)
class SpoTreeConfig(GrpoConfig):
    """The rollout tree: `depth` levels branching `width` ways (2-2-2: 14 branches, 8
    leaves), each advancing `branch_actions` actions but the last, which runs to the end (None:
    4 in household, 1 elsewhere, as in SPO's setups)."""

    depth: int = 3
    width: int = 2
    branch_actions: int | None = None
    confident_prob: float = 0.9  # tokens sampled at least this likely are left out of the loss

    def __post_init__(self):
        if self.depth < 1 or self.width < 2 or (self.branch_actions or 1) < 1:
            raise ValueError(f"need depth >= 1, width >= 2 and branch_actions >= 1, got "
                             f"{self.depth}, {self.width}, {self.branch_actions}")


@dataclasses.dataclass(frozen=True)
class CriticSearchConfig(GrpoConfig):
    outcome_weight: float = 0.75
    critic_weight: float = 0.25


def outcome_of(batch: Batch, config: GrpoConfig) -> jax.Array:
    """GRPO outcome advantage [B] of a batch under a GRPO-based config."""
    return grpo(batch.rewards, batch.group_ids, config.scale, config.eps)


def _grpo(batch, inputs, config):
    del inputs
    outcome = outcome_of(batch, config)
    return per_turn(outcome, batch.turn_valid), outcome


def _rloo(batch, inputs, config):
    del inputs, config
    outcome = rloo(batch.rewards, batch.group_ids)
    return per_turn(outcome, batch.turn_valid), outcome


def _prover(batch, inputs, config):
    outcome = outcome_of(batch, config)
    turns = prover(outcome, batch.turn_valid, inputs["seg_start"], inputs["seg_end"],
                   inputs["delta"], config.lam)
    return turns, outcome


def _check_prover(batch: Batch, inputs, config: ProverConfig) -> None:
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


def _gigpo(batch, inputs, config):
    turns = gigpo(batch.rewards, batch.group_ids, inputs["anchor_ids"], batch.turn_valid,
                  None, config.gamma, config.omega, config.mode, config.episode_stats,
                  config.eps)
    outcome = episode_advantage(batch.rewards, batch.group_ids, batch.turn_valid, config.mode,
                                config.episode_stats, config.eps)
    return turns, outcome


def _check_gigpo(batch: Batch, inputs, config) -> None:
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


def _spo_chain(batch, inputs, config):
    outcome = outcome_of(batch, config)
    turns = spo_chain(outcome, batch.rewards, batch.group_ids, batch.turn_valid,
                      inputs["boundary_values"], inputs["spo_applies"], config.gamma,
                      config.num_segments)
    return turns, outcome


def _spo_tree(batch, inputs, config):
    outcome = outcome_of(batch, config)
    turns = spo_tree(outcome, batch.turn_valid, inputs["tree_ids"], inputs["turn_nodes"],
                     inputs["tree_parents"], inputs["tree_leaf_rewards"])
    return turns, outcome


def _check_spo_tree(batch: Batch, inputs, config) -> None:
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


def _confident_tokens(batch, inputs, config, old_logprobs):
    """SPO's mask: tokens the sampler drew with probability >= `config.confident_prob`."""
    del inputs
    return high_prob_mask(old_logprobs, batch.loss_mask, config.confident_prob)


def _spo_tree_dropped(batch, inputs, config, old_logprobs):
    """The confident tokens, and a tree row's turns of branches another row trains."""
    turn_nodes = jnp.asarray(inputs["turn_nodes"])
    safe = jnp.clip(batch.turn_ids, 0, turn_nodes.shape[1] - 1)
    elsewhere = jnp.take_along_axis(turn_nodes, safe, axis=1) < 0
    in_tree = (jnp.asarray(inputs["tree_ids"]) >= 0)[:, None]
    return (_confident_tokens(batch, inputs, config, old_logprobs)
            | (batch.loss_mask & elsewhere & in_tree))


def _criticsearch(batch, inputs, config):
    outcome = outcome_of(batch, config)
    turns = criticsearch(outcome, batch.group_ids, batch.turn_valid, inputs["critic_labels"],
                         inputs["critic_labelled"], config.outcome_weight, config.critic_weight)
    return turns, outcome


def _check_criticsearch(batch: Batch, inputs, config) -> None:
    del batch, config
    labels = np.asarray(inputs["critic_labels"])
    if not np.isin(labels, (-1, 0, 1)).all():
        raise ValueError("critic_labels: values must be -1, 0 or +1")


for _method in (
    CreditMethod("grpo", _grpo, {}, GrpoConfig, "GRPO, mean-centred (or std-scaled) outcome"),
    CreditMethod("budget-matched-grpo", _grpo, {}, BudgetMatchedConfig,
                 "GRPO with a group-size schedule matching another run's rollout budget",
                 rollouts="scheduled-groups"),
    CreditMethod("rloo", _rloo, {}, GrpoConfig, "leave-one-out outcome baseline"),
    CreditMethod("prover", _prover,
                 {"seg_start": ("b", "i"), "seg_end": ("b", "i"), "delta": ("b", "f")},
                 ProverConfig, "GRPO + verified positive segment advantage (ProVer eq. 4)",
                 _check_prover),
    CreditMethod("gigpo", _gigpo, {"anchor_ids": ("b t", "i")}, GigpoConfig,
                 "episode + anchor-state step advantage (GiGPO)", _check_gigpo),
    CreditMethod("spo-chain", _spo_chain,
                 {"boundary_values": ("b s", "f"), "spo_applies": ("b", "b")},
                 SpoChainConfig, "segment advantages from Monte-Carlo boundary values",
                 dropped_tokens=_confident_tokens),
    CreditMethod("spo-tree", _spo_tree,
                 {"tree_parents": ("g n", "i"), "tree_leaf_rewards": ("g n", "f"),
                  "tree_ids": ("b", "i"), "turn_nodes": ("b t", "i")},
                 SpoTreeConfig, "branch advantages of a 2-2-2 rollout tree", _check_spo_tree,
                 rollouts="trees", dropped_tokens=_spo_tree_dropped),
    CreditMethod("criticsearch", _criticsearch,
                 {"critic_labels": ("b t", "i"), "critic_labelled": ("b", "b")},
                 CriticSearchConfig, "0.75 GRPO + 0.25 LLM-critic turn labels",
                 _check_criticsearch),
):
    register(dataclasses.replace(_method, host=BUILT_IN_HOSTS.get(_method.name)))
