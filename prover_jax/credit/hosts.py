"""Credit methods' host sides: from one training step's rollouts to the kernel's extra inputs.

A host side is made once per run from the run's `HostOptions` (`make(options)`; a method that
needs something the run lacks, e.g. an LLM judge without an endpoint, raises a ValueError
there, at start-up) and then called once per step with a `HostContext`: the step's groups, the
pool and policy that rolled them out, the step's RNG and the packed batch's shape. It returns
the kernel's extra inputs (numpy arrays of the shapes its `CreditMethod.inputs` declare) and a
dict of diagnostics. Every host side places per-row values through `HostContext.rows`, the one
statement of the row layout: group g's member i is row `offset(g) + i`, groups in order.

The built-in host sides are ProVer's (judge and boundary verification), GiGPO's (anchor ids
from the observation each turn acted on), SPO-chain's (Monte-Carlo values at segment
boundaries) and CriticSearch's (critic labels); GRPO and RLOO need none. VICT registers its own
from `vict_jax`. Their modules are imported when a host side is made, so this registry stays
importable without them.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

Inputs = dict[str, np.ndarray]
Diagnostics = dict[str, float]


@dataclasses.dataclass(frozen=True)
class HostOptions:
    """A run's settings that host sides read.

    Attributes:
      judge: ProVer's judge (`prover_jax.judges.make` name) and `judge_config` its fields.
      continuations: K, Monte-Carlo continuations per verified state (ProVer, SPO-chain).
      anchor_similarity: GiGPO's anchor matching (None: exact observation text).
      spo_segments: SPO-chain's segments per trajectory.
      critic_config: CriticSearch's critic fields (`judges.critic.CriticConfig`; the endpoint
        may also come from the environment variables of the LLM settings).
    """

    judge: str = "contrastive"
    judge_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    continuations: int = 4
    anchor_similarity: float | None = None
    spo_segments: int = 3
    critic_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class HostContext:
    """One training step as host sides see it."""

    env: Any  # envs.Env of the episodes' kind (its verifier, its texts)
    groups: Sequence[Sequence[Any]]  # finished rollout.Episodes per group, in packing order
    pool: Any  # envs.pool.EnvPool that ran them
    policy: Any  # rollout.Policy that sampled them (continuations use it)
    rng: random.Random
    num_rows: int  # B of the packed batch (padding rows included)
    num_turns: int  # T of the packed batch

    def rows(self) -> Iterator[tuple[int, int, int, Any]]:
        """(row, group, member, episode) of every episode, in row order."""
        row = 0
        for g, group in enumerate(self.groups):
            for member, episode in enumerate(group):
                yield row, g, member, episode
                row += 1


HostSide = Callable[[HostContext], tuple[Inputs, Diagnostics]]
HostFactory = Callable[[HostOptions], HostSide]


def prover_host(options: HostOptions) -> HostSide:
    """ProVer: the judge proposes a segment per eligible group, continuations verify it."""
    from prover_jax import judges
    from prover_jax.verify import VerifyConfig, prover_step

    judge = judges.make(options.judge, **options.judge_config)
    config = VerifyConfig(continuations=options.continuations)

    def host(ctx: HostContext) -> tuple[Inputs, Diagnostics]:
        result = prover_step(ctx.pool, ctx.policy, judge, ctx.groups, ctx.rng, config,
                             ctx.num_rows)
        return ({"seg_start": result.seg_start, "seg_end": result.seg_end,
                 "delta": result.delta},
                {f"prover/{k}": float(v) for k, v in result.diagnostics.items()})

    return host


def gigpo_host(options: HostOptions) -> HostSide:
    """GiGPO: anchor ids from the observation each turn acted on, per group."""
    from prover_jax.credit.gigpo import anchor_ids_from_observations

    def host(ctx: HostContext) -> tuple[Inputs, Diagnostics]:
        observations = [[] for _ in range(ctx.num_rows)]
        group_ids = [-1] * ctx.num_rows
        for row, g, _, episode in ctx.rows():
            observations[row] = list(episode.observations[: episode.num_turns])
            group_ids[row] = g
        anchors = anchor_ids_from_observations(observations, group_ids, ctx.num_turns,
                                               options.anchor_similarity)
        real = anchors[anchors >= 0]
        return {"anchor_ids": anchors}, {"gigpo/anchor_states": float(len(np.unique(real)))}

    return host


def spo_chain_host(options: HostOptions) -> HostSide:
    """SPO-chain: Monte-Carlo values at the segment boundaries of successful trajectories."""
    from prover_jax.spo_rollouts import spo_chain_values
    from prover_jax.verify import VerifyConfig

    config = VerifyConfig(continuations=options.continuations)

    def host(ctx: HostContext) -> tuple[Inputs, Diagnostics]:
        values, applies = spo_chain_values(ctx.pool, ctx.policy, ctx.groups, ctx.rng,
                                           ctx.num_turns, ctx.num_rows, config,
                                           options.spo_segments)
        return ({"boundary_values": values, "spo_applies": applies},
                {"spo/applied": float(applies.sum())})

    return host


def criticsearch_host(options: HostOptions) -> HostSide:
    """CriticSearch: an LLM critic labels every accepted turn good or bad."""
    from prover_jax.judges.critic import Critic, CriticConfig
    from prover_jax.verify import view

    critic = Critic(CriticConfig(**options.critic_config))

    def host(ctx: HostContext) -> tuple[Inputs, Diagnostics]:
        labels = np.zeros((ctx.num_rows, ctx.num_turns), np.int32)
        labelled = np.zeros(ctx.num_rows, bool)
        errors = 0
        rows = list(ctx.rows())
        for g in range(len(ctx.groups)):
            members = [(row, episode) for row, group_of, _, episode in rows if group_of == g]
            result = critic.label_group([view(e, i) for i, (_, e) in enumerate(members)],
                                        ctx.num_turns)
            for i, (row, _) in enumerate(members):
                labels[row], labelled[row] = result.labels[i], result.labelled[i]
            errors += result.error is not None
        return ({"critic_labels": labels, "critic_labelled": labelled},
                {"criticsearch/failed_groups": float(errors)})

    return host


BUILT_IN: dict[str, HostFactory] = {"prover": prover_host, "gigpo": gigpo_host,
                                    "spo-chain": spo_chain_host,
                                    "criticsearch": criticsearch_host}
