"""VICT as credit methods of the trainer's registry (entry point `prover_jax.credit_methods`).

Registers `vict` (GRPO base, eq. 9) and `NAME+vict` for every other method registered before it
(eq. 10: VICT corrections composed onto NAME's per-turn advantages, e.g. `prover+vict`), each
with its host side: NAME's, then VICT's trace and cores (`vict_jax.methods.vict_host`). The
functions load at their first call, so registering loads no JAX.
"""

from __future__ import annotations

import functools

from prover_jax.credit import hosts, registry
from prover_jax.lazy import Deferred
from vict_jax.config import VictConfig, vict_config_type

VICT_INPUTS = {"marginals": ("b m", "f"), "eligible": ("b m", "b"), "omega": ("b t m", "f")}
METHODS = "vict_jax.methods"
vict_host = Deferred(METHODS, "vict_host")


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
    compute = functools.partial(Deferred(METHODS, "composed_turns"), base_method)
    check_values = functools.partial(Deferred(METHODS, "check_composed"), base_method)
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
