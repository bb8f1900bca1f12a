"""VICT: verifier-instrumented credit tracing (SPEC §4).

Host side, per rollout group: `vict_jax.trace` (statuses and proof edges of a logged
trajectory), `vict_jax.core` (sign, greedy dependency-closed cores, Shapley marginals),
`vict_jax.pipeline` (a group's kernel inputs, ablations, proof records), `vict_jax.audit`
(conformance) and `vict_jax.diagnostics`. Device side: `vict_jax.redistribute` turns core
marginals and proof-edge witness weights into per-turn corrections and final advantages
(eqs. 7, 9, 10, 16, 17) in one jitted pass.
"""

from vict_jax.redistribute import (
    Normalised,
    Redistributed,
    RedistributionConfig,
    corrections,
    eligibility_violations,
    normalise,
    redistribute,
)

__all__ = [
    "Normalised", "Redistributed", "RedistributionConfig", "corrections",
    "eligibility_violations", "normalise", "redistribute",
]
