"""VICT: verifier-instrumented credit tracing (SPEC §4).

Host side, per rollout group: `vict_jax.trace` (statuses and proof edges of a logged
trajectory), `vict_jax.core` (sign, greedy dependency-closed cores, Shapley marginals),
`vict_jax.pipeline` (a group's kernel inputs, ablations, proof records), `vict_jax.audit`
(conformance) and `vict_jax.diagnostics`. Device side: `vict_jax.redistribution` turns core
marginals and proof-edge witness weights into per-turn corrections and final advantages
(eqs. 7, 9, 10, 16, 17) in one jitted pass. The names below load at first use
(`prover_jax.lazy`), so the credit methods `vict_jax.credit` registers load no JAX.
"""

from prover_jax.lazy import exports

_SOURCES = {
    "RedistributionConfig": "config", "Normalised": "redistribution",
    "Redistributed": "redistribution", "corrections": "redistribution",
    "eligibility_violations": "redistribution", "normalise": "redistribution",
    "redistribute": "redistribution",
}
__all__ = sorted(_SOURCES)
__getattr__ = exports(__name__, _SOURCES)
