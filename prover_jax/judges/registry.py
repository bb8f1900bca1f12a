"""The judge registry: ``make("agentic" | "random" | "contrastive" | "oracle", **config)``.

A factory takes the judge's config fields as keyword arguments and returns a :class:`Judge`;
built-ins register below. Other packages add judges with :func:`register`, or through the
``prover_jax.judges`` entry-point group (VICT's verifier judge does), loaded at the first
``names`` or ``make``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prover_jax.judges.agentic import AgenticConfig, AgenticJudge
from prover_jax.judges.base import Judge
from prover_jax.judges.offline import ContrastiveJudge, OfflineConfig, OracleJudge, RandomJudge
from prover_jax.lazy import load_entry_points

Factory = Callable[..., Judge]

_REGISTRY: dict[str, Factory] = {}
ENTRY_POINT_GROUP = "prover_jax.judges"


def register(name: str, factory: Factory) -> None:
    """Makes ``make(name, **config)`` return ``factory(**config)``; a name registers once."""
    if name in _REGISTRY:
        raise ValueError(f"judge {name!r} is already registered")
    _REGISTRY[name] = factory



def names() -> list[str]:
    """The registered judge names, plug-ins included, sorted."""
    load_entry_points(ENTRY_POINT_GROUP)
    return sorted(_REGISTRY)


def make(name: str, **config: Any) -> Judge:
    """A new judge of kind ``name`` built from its config fields.

    Raises:
      ValueError: for an unknown name (listing the known ones) or a bad configuration.
    """
    load_entry_points(ENTRY_POINT_GROUP)
    if name not in _REGISTRY:
        raise ValueError(f"unknown judge {name!r}; known: {', '.join(names())}")
    return _REGISTRY[name](**config)


register("agentic", lambda **config: AgenticJudge(AgenticConfig(**config)))
register("random", lambda **config: RandomJudge(OfflineConfig(**config)))
register("contrastive", lambda **config: ContrastiveJudge(OfflineConfig(**config)))
register("oracle", lambda **config: OracleJudge(OfflineConfig(**config)))
