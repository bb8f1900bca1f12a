"""VICT's settings as frozen dataclasses, importable without JAX: the redistribution's knobs
(SPEC §4.5) and the config of `vict` and of each `NAME+vict` credit method."""

from __future__ import annotations

import dataclasses
from typing import Literal

from prover_jax.credit import registry


@dataclasses.dataclass(frozen=True)
class RedistributionConfig:
    """Knobs of the redistribution (defaults of SPEC §4.5)."""

    gamma_lambda: float = 1.0
    center: bool = False  # True: eq. 16 literally, (delta - median) / (1.4826 MAD + eps)
    min_supported: int = 2  # supported rollouts an atom needs in a group (the paper's 2)
    norm_eps: float = 1e-8
    z_eps: float = 1e-8
    lambda_eps: float = 1e-8
    clip_quantile: float = 0.95
    calibration: Literal["nonzero", "all"] = "nonzero"
    # |A_vict| below this is the residue of corrections that cancel, and counts as zero: whether
    # a turn is credited must not depend on float rounding.
    zero_tol: float = 1e-6

    def __post_init__(self):
        if self.min_supported < 1:
            raise ValueError(f"min_supported must be >= 1, got {self.min_supported}")


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
