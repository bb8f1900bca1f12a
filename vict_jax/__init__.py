"""VICT: verifier-instrumented credit tracing (SPEC §4).

`vict_jax.redistribute` turns core marginals and proof-edge witness weights into per-turn
corrections and final advantages (eqs. 7, 9, 10, 16, 17) in one jitted pass.
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
