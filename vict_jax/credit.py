"""VICT as credit methods of the trainer's registry (entry point `prover_jax.credit_methods`).

Registers `vict` (GRPO base, eq. 9) and `NAME+vict` for every other method registered before it
(eq. 10: VICT corrections composed onto NAME's per-turn advantages, e.g. `prover+vict`), each
with its host side: NAME's, then VICT's trace and cores (`vict_host`).
"""

from __future__ import annotations

import collections
import dataclasses

import jax
import numpy as np

from prover_jax import credit
from prover_jax.credit import hosts, registry
from vict_jax.core import ABSTENTIONS
from vict_jax.pipeline import Rollout, batch_inputs, credit_group, proof_records
from vict_jax.redistribute import (
    RedistributionConfig,
    calibrated_over_processes,
    normalise,
    redistribute,
)

VICT_INPUTS = {"marginals": ("b m", "f"), "eligible": ("b m", "b"), "omega": ("b t m", "f")}


@dataclasses.dataclass(frozen=True)
class VictConfig:
    """`base`: the config of the method VICT composes with (GRPO's for `vict`)."""

    base: registry.GrpoConfig = dataclasses.field(default_factory=registry.GrpoConfig)
    redistribution: RedistributionConfig = dataclasses.field(default_factory=RedistributionConfig)


def vict_config_type(base_type: type) -> type:
    """The config type of `NAME+vict`: VictConfig with `base` of NAME's config type."""
    if base_type is registry.GrpoConfig:
        return VictConfig
    return dataclasses.make_dataclass(
        f"Vict{base_type.__name__}",
        [("base", base_type, dataclasses.field(default_factory=base_type))],
        bases=(VictConfig,), frozen=True)


def check_vict_values(inputs) -> None:
    """Witness weights non-negative (the registry has checked that every input is finite)."""
    if (np.asarray(inputs["omega"]) < 0).any():
        raise ValueError("omega: witness weights must be >= 0")


def vict_host(options: hosts.HostOptions, config: VictConfig) -> hosts.HostSide:
    """VICT's host side: every group traced and credited against its task's verifier, with
    a GRPO base for the signs (SPEC §4.5). Records a `vict_proofs` line per credited
    (rollout, action, atom), as `pipeline.proof_records` lists them."""
    del options
    redistribution = config.redistribution

    def host(ctx: hosts.HostContext) -> hosts.HostOutput:
        credits = []
        for group in ctx.groups:
            rewards = np.array([e.reward for e in group], np.float32)
            base = np.asarray(credit.grpo(rewards, np.zeros(len(group), np.int32)))
            rollouts = [Rollout(e.states, tuple(a.text for a in e.actions), e.reward)
                        for e in group]
            credits.append(credit_group(ctx.env.verifier(group[0].task), rollouts, base))
        reasons = [r for c in credits for r in c.reasons]
        inputs = batch_inputs(credits, ctx.num_rows, ctx.num_turns)
        group_ids = np.full(ctx.num_rows, -1, np.int32)
        for row, g, _, _ in ctx.rows():
            group_ids[row] = g
        normalised = normalise(inputs["marginals"], inputs["eligible"], inputs["omega"],
                               group_ids, redistribution.center, redistribution.norm_eps,
                               redistribution.min_supported)
        records = proof_records(credits, np.asarray(normalised.values), inputs["omega"])
        logs = {**abstentions(reasons), **coverage(records, ctx.groups, redistribution.zero_tol)}
        return hosts.HostOutput(inputs, logs, {"vict_proofs": records})

    return host


def coverage(records: list[dict], groups, zero_tol: float = 0.0) -> hosts.Diagnostics:
    """From the proof records of a step's `groups` (of episodes): the share of rollouts with a
    VICT correction (`vict/trigger_rate`) and the share of their actions with one
    (`vict/sparsity`, the paper's credit sparsity); a turn whose corrections cancel to at most
    `zero_tol` has none, as in the kernel."""
    totals: dict[tuple[int, int, int], float] = collections.defaultdict(float)
    for r in records:
        totals[r["group"], r["rollout"], r["turn"]] += r["correction"]
    credited = {key for key, total in totals.items() if abs(total) > zero_tol}
    rollouts = sum(len(g) for g in groups)
    actions = sum(e.num_turns for g in groups for e in g)
    return {"vict/trigger_rate": len({key[:2] for key in credited}) / max(rollouts, 1),
            "vict/sparsity": len(credited) / max(actions, 1)}


def abstentions(reasons: list[str | None]) -> hosts.Diagnostics:
    """The share of rollouts VICT abstained on, in all (`vict/abstained`) and per reason
    (`vict/abstain/<reason>`)."""
    out = {"vict/abstained": sum(r is not None for r in reasons) / len(reasons)}
    for reason in ABSTENTIONS:
        out[f"vict/abstain/{reason}"] = reasons.count(reason) / len(reasons)
    return out


def _composed_host(base: hosts.HostFactory | None) -> hosts.HostFactory:
    """`base`'s host side followed by VICT's: their inputs, diagnostics and records together."""
    if base is None:
        return vict_host

    def make(options: hosts.HostOptions, config: VictConfig) -> hosts.HostSide:
        first, second = base(options, config.base), vict_host(options, config)

        def host(ctx: hosts.HostContext) -> hosts.HostOutput:
            one, two = first(ctx), second(ctx)
            return hosts.HostOutput({**one.inputs, **two.inputs},
                                    {**one.diagnostics, **two.diagnostics},
                                    {**one.records, **two.records})

        return host

    return make


def _composed(base_method: registry.CreditMethod | None) -> registry.CreditMethod:
    def compute(batch, inputs, config: VictConfig):
        if base_method is None:
            outcome = registry.outcome_of(batch, config.base)
            base = outcome
        else:
            base_inputs = {k: inputs[k] for k in base_method.inputs}
            base, outcome = base_method.compute(batch, base_inputs, config.base)
        result = redistribute(base, inputs["marginals"], inputs["eligible"], inputs["omega"],
                              batch.turn_valid, batch.group_ids, config.redistribution)
        if jax.process_count() > 1:  # lambda and c are batch statistics: the global batch's
            result = calibrated_over_processes(result, base, batch.turn_valid,
                                               config.redistribution)
        return result.advantages, outcome

    def check_values(batch, inputs, config: VictConfig):
        check_vict_values(inputs)
        if base_method is not None and base_method.check_values is not None:
            base_method.check_values(batch, {k: inputs[k] for k in base_method.inputs},
                                     config.base)

    if base_method is None:
        return registry.CreditMethod("vict", compute, VICT_INPUTS, VictConfig,
                                     "GRPO + verifier-traced corrections (VICT eq. 9)",
                                     check_values, vict_host)
    dropped = None
    if base_method.dropped_tokens is not None:
        def dropped(batch, inputs, config: VictConfig, old_logprobs):
            return base_method.dropped_tokens(batch, inputs, config.base, old_logprobs)

    runnable = base_method.host is not None or not base_method.inputs
    return registry.CreditMethod(
        f"{base_method.name}+vict", compute, {**base_method.inputs, **VICT_INPUTS},
        vict_config_type(base_method.config_type),
        f"{base_method.name} + verifier-traced corrections (VICT eq. 10)", check_values,
        _composed_host(base_method.host) if runnable else None, base_method.rollouts, dropped,
        base=base_method.name)


def register() -> None:
    """Registers `vict` and `NAME+vict` for every method already in the registry."""
    bases = [registry.get(name) for name in registry.names()
             if name != "grpo" and not name.endswith("vict")]
    registry.register(_composed(None))
    for method in bases:
        registry.register(_composed(method))
