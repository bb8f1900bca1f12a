"""The credit-method registry the trainer resolves `--credit NAME` through.

A `CreditMethod` names the extra per-batch arrays its host side must produce (with their shapes,
checked before the kernel runs), its frozen config type, and a `compute` function from the batch,
those arrays and the config to per-turn advantages. Built-in methods register below; other
packages add theirs through the `prover_jax.credit_methods` entry-point group (VICT does), so this
package never imports them. The built-in methods' functions (`prover_jax.credit.methods`) load
at their first call: the registry, its names and its config types load without JAX, so a
command line checks `--credit` and `credit_config` before anything heavy loads.

Every method also reports its trajectory-level *outcome* component (GRPO, or GiGPO's episode
advantage): VICT takes the sign of its base from it (SPEC §4.5, eq. 10).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from prover_jax.credit.hosts import BUILT_IN as BUILT_IN_HOSTS
from prover_jax.credit.hosts import HostFactory
from prover_jax.lazy import Deferred, load_entry_points

if TYPE_CHECKING:
    import jax

    from prover_jax.batch import Batch

METHODS = "prover_jax.credit.methods"
Scale = Literal["none", "std"]  # GRPO's outcome scaling: mean-centred, or also std-divided
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
      description: one line for `--help` and the docs.
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


def register(method: CreditMethod) -> CreditMethod:
    """Adds a method; a name can be registered once."""
    if method.name in _REGISTRY:
        raise ValueError(f"credit method {method.name!r} is already registered")
    _REGISTRY[method.name] = method
    return method



def trainable(method: CreditMethod) -> bool:
    """Whether the trainer can run `method`: a host side for its inputs, if it has any."""
    return method.host is not None or not method.inputs


def names() -> list[str]:
    """Every registered method name, plug-ins included, sorted."""
    load_entry_points(ENTRY_POINT_GROUP)
    return sorted(_REGISTRY)


def get(name: str) -> CreditMethod:
    """The method registered as `name`; a ValueError lists the known names otherwise."""
    load_entry_points(ENTRY_POINT_GROUP)
    if name not in _REGISTRY:
        raise ValueError(f"unknown credit method {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


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
class OracleProgressConfig(GrpoConfig):
    weight: float = 1.0  # of the oracle's progress gain, added to the outcome advantage


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


def _of_methods(name: str) -> Deferred:
    """`prover_jax.credit.methods`' function `name`, loaded at its first call."""
    return Deferred(METHODS, name)


for _method in (
    CreditMethod("grpo", _of_methods("grpo_turns"), {}, GrpoConfig,
                 "GRPO, mean-centred (or std-scaled) outcome"),
    CreditMethod("budget-matched-grpo", _of_methods("grpo_turns"), {}, BudgetMatchedConfig,
                 "GRPO with a group-size schedule matching another run's rollout budget",
                 rollouts="scheduled-groups"),
    CreditMethod("rloo", _of_methods("rloo_turns"), {}, GrpoConfig,
                 "leave-one-out outcome baseline"),
    CreditMethod("prover", _of_methods("prover_turns"),
                 {"seg_start": ("b", "i"), "seg_end": ("b", "i"), "delta": ("b", "f")},
                 ProverConfig, "GRPO + verified positive segment advantage (ProVer eq. 4)",
                 _of_methods("check_prover")),
    CreditMethod("oracle-progress", _of_methods("oracle_progress_turns"),
                 {"progress_gain": ("b t", "f")}, OracleProgressConfig,
                 "GRPO + the environment's true progress per turn (a positive control)"),
    CreditMethod("gigpo", _of_methods("gigpo_turns"), {"anchor_ids": ("b t", "i")},
                 GigpoConfig, "episode + anchor-state step advantage (GiGPO)",
                 _of_methods("check_gigpo")),
    CreditMethod("spo-chain", _of_methods("spo_chain_turns"),
                 {"boundary_values": ("b s", "f"), "spo_applies": ("b", "b")},
                 SpoChainConfig, "segment advantages from Monte-Carlo boundary values",
                 dropped_tokens=_of_methods("confident_tokens")),
    CreditMethod("spo-tree", _of_methods("spo_tree_turns"),
                 {"tree_parents": ("g n", "i"), "tree_leaf_rewards": ("g n", "f"),
                  "tree_ids": ("b", "i"), "turn_nodes": ("b t", "i")},
                 SpoTreeConfig, "branch advantages of a 2-2-2 rollout tree",
                 _of_methods("check_spo_tree"), rollouts="trees",
                 dropped_tokens=_of_methods("spo_tree_dropped")),
    CreditMethod("criticsearch", _of_methods("criticsearch_turns"),
                 {"critic_labels": ("b t", "i"), "critic_labelled": ("b", "b")},
                 CriticSearchConfig, "0.75 GRPO + 0.25 LLM-critic turn labels",
                 _of_methods("check_criticsearch")),
):
    register(dataclasses.replace(_method, host=BUILT_IN_HOSTS.get(_method.name)))
