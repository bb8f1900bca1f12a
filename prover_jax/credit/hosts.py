"""Credit methods' host sides: from one training step's rollouts to the kernel's extra inputs.

A host side is made once per run from the run's `HostOptions` and the method's config
(`make(options, config)`; a method that needs something the run lacks, e.g. an LLM judge
without an endpoint, raises a ValueError there, at start-up) and then called once per step with
a `HostContext`: the step's groups, the pool and policy that rolled them out, the step's RNG and
the packed batch's shape. It returns a `HostOutput`: the kernel's extra inputs (numpy arrays of
the shapes its `CreditMethod.inputs` declare), a dict of diagnostics and records of what it
decided (ProVer's proposals, VICT's proofs) for the run directory. Every host side places
per-row values through `HostContext.rows`, the one statement of the row layout: group g's
member i is row `offset(g) + i`, groups in order.

The built-in host sides are ProVer's (judge and boundary verification), the dense oracle's
(the environment's progress before and after each action), GiGPO's (anchor ids
from the observation each turn acted on), SPO-chain's (Monte-Carlo values at segment
boundaries), SPO-tree's (the trees' structure) and CriticSearch's (critic labels); GRPO, RLOO
and budget-matched GRPO need none. VICT registers its own from `vict_jax`. Their modules are
imported when a host side is made, so this registry stays importable without them.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

Inputs = dict[str, np.ndarray]
Diagnostics = dict[str, float]
Records = dict[str, list[dict]]  # JSONL stream name -> one JSON-able dict per line


@dataclasses.dataclass(frozen=True)
class HostOptions:
    """A run's settings that host sides read.

    Attributes:
      judge: ProVer's judge (`prover_jax.judges.make` name) and `judge_config` its fields.
      continuations: K, Monte-Carlo continuations per verified state (ProVer, SPO-chain).
      anchor_similarity: GiGPO's anchor matching (None: exact observation text).
      critic_config: CriticSearch's critic fields (`judges.critic.CriticConfig`; the endpoint
        may also come from the environment variables of the LLM settings).
      judge_model: a local model folder or run directory that the run serves on loopback
        (`prover_jax.server.model`) for the agentic judge and the critic, unless their
        configs name another endpoint.
    """

    judge: str = "contrastive"
    judge_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    continuations: int = 4
    anchor_similarity: float | None = None
    critic_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    judge_model: str | None = None

    def served_at(self, base_url: str, model: str) -> HostOptions:
        """These options with the judge's and critic's endpoint where they name none."""
        def endpoint(config: Mapping[str, Any]) -> dict[str, Any]:
            if config.get("base_url"):
                return dict(config)
            return {**config, "base_url": base_url, "model": model, "api_key": "unused"}

        return dataclasses.replace(self, judge_config=endpoint(self.judge_config),
                                   critic_config=endpoint(self.critic_config))


@dataclasses.dataclass(frozen=True)
class HostContext:
    """One training step as host sides see it."""

    env: Any  # envs.Env of the episodes' kind (its verifier, its texts)
    groups: Sequence[Sequence[Any]]  # finished rollout.Episodes per group, in packing order
    pool: Any  # envs.pool.EnvPool that ran them
    policy: Any  # rollout.Policy that sampled them (continuations use it)
    rng: random.Random | Sequence[random.Random]  # one stream, or one per group
    num_rows: int  # B of the packed batch (padding rows included)
    num_turns: int  # T of the packed batch
    trees: Sequence[Any] | None = None  # spo_rollouts.SpoTrees the groups' leaves grew on

    def rows(self) -> Iterator[tuple[int, int, int, Any]]:
        """(row, group, member, episode) of every episode, in row order."""
        row = 0
        for g, group in enumerate(self.groups):
            for member, episode in enumerate(group):
                yield row, g, member, episode
                row += 1


class HostOutput(NamedTuple):
    """What a host side made of one step."""

    inputs: Inputs
    diagnostics: Diagnostics
    records: Records


HostSide = Callable[[HostContext], HostOutput]
HostFactory = Callable[[HostOptions, Any], HostSide]  # (options, the method's config)


def prover_host(options: HostOptions, config: Any) -> HostSide:
    """ProVer: the judge proposes a segment per eligible group, continuations verify it.
    Records one `prover_proposals` line per judged group."""
    from prover_jax import judges
    from prover_jax.verify import VerifyConfig, prover_step

    del config  # the kernel's knobs (lam, segment length) are applied by the kernel
    judge = judges.make(options.judge, **options.judge_config)
    verify = VerifyConfig(continuations=options.continuations)

    def host(ctx: HostContext) -> HostOutput:
        result = prover_step(ctx.pool, ctx.policy, judge, ctx.groups, ctx.rng, verify,
                             ctx.num_rows, ctx.env)
        return HostOutput({"seg_start": result.seg_start, "seg_end": result.seg_end,
                           "delta": result.delta},
                          {f"prover/{k}": float(v) for k, v in result.diagnostics.items()},
                          {"prover_proposals": proposal_records(ctx, result)})

    return host


def proposal_records(ctx: HostContext, result: Any) -> list[dict]:
    """One dict per judged group of a `verify.ProverResult`: the proposal, the segment's
    actions and, when verified, its boundary values."""
    measured = {m.group: m for m in result.measurements}
    first_row = {g: row for row, g, member, _ in ctx.rows() if member == 0}
    records = []
    for g, proposal in enumerate(result.proposals):
        if proposal is None:
            continue
        task = ctx.groups[g][0].task
        record = {"group": g, "task": f"{task.split}/{task.index}",
                  **dataclasses.asdict(proposal)}
        if g in measured:
            m = measured[g]
            episode = ctx.groups[g][m.row]
            record.update(row=first_row[g] + m.row, value_pre=m.value_pre,
                          value_post=m.value_post, delta=m.delta,
                          actions=[a.text for a in episode.actions[m.start_turn:m.end_turn + 1]])
        records.append(record)
    return records


def oracle_progress_host(options: HostOptions, config: Any) -> HostSide:
    """The dense oracle: each turn's change in the environment's true progress
    (`envs.Env.oracle_progress`, read from the snapshots before and after the action)."""
    del options, config

    def host(ctx: HostContext) -> HostOutput:
        if "progress" not in ctx.env.oracles:
            raise ValueError(f"oracle-progress needs an environment with a progress oracle "
                             f"(household-pivot); {ctx.env.name} has none")
        gain = np.zeros((ctx.num_rows, ctx.num_turns), np.float32)
        for row, _, _, episode in ctx.rows():
            progress = [ctx.env.oracle_progress(s) for s in episode.states]
            gain[row, :episode.num_turns] = np.diff(progress)
        turns = sum(episode.num_turns for _, _, _, episode in ctx.rows())
        return HostOutput({"progress_gain": gain}, {
            "oracle_progress/mean_abs_gain": float(np.abs(gain).sum() / max(turns, 1))}, {})

    return host


def gigpo_host(options: HostOptions, config: Any) -> HostSide:
    """GiGPO: anchor ids from the observation each turn acted on, per group."""
    from prover_jax.credit.step_groups import anchor_ids_from_observations, step_group_stats

    del config

    def host(ctx: HostContext) -> HostOutput:
        observations = [[] for _ in range(ctx.num_rows)]
        group_ids = [-1] * ctx.num_rows
        for row, g, _, episode in ctx.rows():
            observations[row] = list(episode.observations[: episode.num_turns])
            group_ids[row] = g
        anchors = anchor_ids_from_observations(observations, group_ids, ctx.num_turns,
                                               options.anchor_similarity)
        return HostOutput({"anchor_ids": anchors},
                          {f"gigpo/{k}": v for k, v in step_group_stats(anchors).items()}, {})

    return host


def spo_chain_host(options: HostOptions, config: Any) -> HostSide:
    """SPO-chain: Monte-Carlo values at the segment boundaries of successful trajectories."""
    from prover_jax.spo_rollouts import spo_chain_values
    from prover_jax.verify import VerifyConfig

    verify = VerifyConfig(continuations=options.continuations)

    def host(ctx: HostContext) -> HostOutput:
        values, applies = spo_chain_values(ctx.pool, ctx.policy, ctx.groups, ctx.rng,
                                           ctx.num_turns, ctx.num_rows, verify,
                                           config.num_segments)
        return HostOutput({"boundary_values": values, "spo_applies": applies},
                          {"spo/applied": float(applies.sum())}, {})

    return host


def spo_tree_host(options: HostOptions, config: Any) -> HostSide:
    """SPO-tree: the structure of the trees the step's leaves grew on (`HostContext.trees`)."""
    from prover_jax.spo_rollouts import spo_tree_inputs

    del options
    nodes = sum(config.width ** level for level in range(config.depth + 1))

    def host(ctx: HostContext) -> HostOutput:
        if ctx.trees is None:
            raise ValueError("spo-tree needs the step's rollout trees (HostContext.trees)")
        inputs = spo_tree_inputs(ctx.trees, ctx.num_rows, ctx.num_turns, nodes)
        leaves = [len(t.episodes) for t in ctx.trees]
        return HostOutput(inputs, {"spo/tree_leaves": float(np.mean(leaves))}, {})

    return host


def criticsearch_host(options: HostOptions, config: Any) -> HostSide:
    """CriticSearch: an LLM critic labels every accepted turn good or bad."""
    from prover_jax.judges.critic import Critic, CriticConfig
    from prover_jax.verify import view

    del config
    critic = Critic(CriticConfig(**options.critic_config))

    def host(ctx: HostContext) -> HostOutput:
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
        return HostOutput({"critic_labels": labels, "critic_labelled": labelled},
                          {"criticsearch/failed_groups": float(errors)}, {})

    return host


BUILT_IN: dict[str, HostFactory] = {"prover": prover_host, "oracle-progress": oracle_progress_host,
                                    "gigpo": gigpo_host,
                                    "spo-chain": spo_chain_host, "spo-tree": spo_tree_host,
                                    "criticsearch": criticsearch_host}
