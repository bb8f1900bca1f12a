"""VICT as credit methods of the trainer's registry (entry point `prover_jax.credit_methods`).

Registers `vict` (GRPO base, eq. 9) and `NAME+vict` for every other method registered before it
(eq. 10: VICT corrections composed onto NAME's per-turn advantages, e.g. `prover+vict`), each
with its host side: NAME's, then VICT's trace and cores (`vict_host`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from prover_jax import credit
from prover_jax.credit import hosts, registry
from vict_jax.pipeline import Rollout, batch_inputs, credit_group
from vict_jax.redistribute import RedistributionConfig, redistribute

VICT_INPUTS = {"marginals": ("b m", "f"), "eligible": ("b m", "b"), "omega": ("b t m", "f")}


@dataclasses.dataclass(frozen=True)
class VictConfig:
    """`base`: config of the method VICT composes with (None: its defaults)."""

    base: Any = None
    redistribution: RedistributionConfig = dataclasses.field(default_factory=RedistributionConfig)


def check_vict_values(inputs) -> None:
    """Witness weights non-negative (the registry has checked that every input is finite)."""
    if (np.asarray(inputs["omega"]) < 0).any():
        raise ValueError("omega: witness weights must be >= 0")


def vict_host(options: hosts.HostOptions) -> hosts.HostSide:
    """VICT's host side: every group traced and credited against its task's verifier, with
    a GRPO base for the signs (SPEC §4.5)."""
    del options

    def host(ctx: hosts.HostContext) -> tuple[hosts.Inputs, hosts.Diagnostics]:
        credits = []
        for group in ctx.groups:
            rewards = np.array([e.reward for e in group], np.float32)
            base = np.asarray(credit.grpo(rewards, np.zeros(len(group), np.int32)))
            rollouts = [Rollout(e.states, tuple(a.text for a in e.actions), e.reward)
                        for e in group]
            credits.append(credit_group(ctx.env.verifier(group[0].task), rollouts, base))
        reasons = [r for c in credits for r in c.reasons]
        return (batch_inputs(credits, ctx.num_rows, ctx.num_turns),
                {"vict/abstained": sum(r is not None for r in reasons) / len(reasons)})

    return host


def _composed_host(base: hosts.HostFactory | None) -> hosts.HostFactory:
    """`base`'s host side followed by VICT's: their inputs and diagnostics together."""
    if base is None:
        return vict_host

    def make(options: hosts.HostOptions) -> hosts.HostSide:
        first, second = base(options), vict_host(options)

        def host(ctx: hosts.HostContext) -> tuple[hosts.Inputs, hosts.Diagnostics]:
            inputs, logs = first(ctx)
            more, more_logs = second(ctx)
            return {**inputs, **more}, {**logs, **more_logs}

        return host

    return make


def _composed(base_method: registry.CreditMethod | None) -> registry.CreditMethod:
    def compute(batch, inputs, config: VictConfig):
        if base_method is None:
            base_config = config.base if config.base is not None else registry.GrpoConfig()
            outcome = registry.outcome_of(batch, base_config)
            base = outcome
        else:
            base_config = config.base if config.base is not None else base_method.config_type()
            base_inputs = {k: inputs[k] for k in base_method.inputs}
            base, outcome = base_method.compute(batch, base_inputs, base_config)
        result = redistribute(base, inputs["marginals"], inputs["eligible"], inputs["omega"],
                              batch.turn_valid, batch.group_ids, config.redistribution)
        return result.advantages, outcome

    def check_values(batch, inputs, config: VictConfig):
        check_vict_values(inputs)
        if base_method is not None and base_method.check_values is not None:
            base_config = config.base if config.base is not None else base_method.config_type()
            base_method.check_values(batch, {k: inputs[k] for k in base_method.inputs},
                                     base_config)

    if base_method is None:
        return registry.CreditMethod("vict", compute, VICT_INPUTS, VictConfig,
                                     "GRPO + verifier-traced corrections (VICT eq. 9)",
                                     check_values, vict_host)
    runnable = base_method.host is not None or not base_method.inputs
    return registry.CreditMethod(
        f"{base_method.name}+vict", compute, {**base_method.inputs, **VICT_INPUTS}, VictConfig,
        f"{base_method.name} + verifier-traced corrections (VICT eq. 10)", check_values,
        _composed_host(base_method.host) if runnable else None, base_method.rollouts)


def register() -> None:
    """Registers `vict` and `NAME+vict` for every method already in the registry."""
    bases = [registry.get(name) for name in registry.names()
             if name != "grpo" and not name.endswith("vict")]
    registry.register(_composed(None))
    for method in bases:
        registry.register(_composed(method))
