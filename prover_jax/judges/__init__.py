"""ProVer's judges (SPEC §2, Propose) and CriticSearch's critic (SPEC §3).

A judge sees a group as policy-visible text (:class:`TrajectoryView`) and proposes one segment
of its successful trajectory (:class:`Proposal`), or no credit. ``make(name, **config)`` builds
one: ``agentic`` (an LLM with trajectory tools, through the OpenAI-compatible API), ``random``
(the paper's Random baseline) or ``contrastive`` (offline, deterministic). :class:`Critic`
labels a group's turns good/bad for the ``criticsearch`` credit kernel.
"""

from prover_jax.judges.agentic import AgenticConfig, AgenticJudge
from prover_jax.judges.base import Judge, Proposal, TrajectoryView, Turn, segment_error
from prover_jax.judges.critic import Critic, CriticConfig, CriticLabels
from prover_jax.judges.llm import LLMConfig
from prover_jax.judges.offline import ContrastiveJudge, OfflineConfig, RandomJudge
from prover_jax.judges.registry import make, names, register

__all__ = [
    "AgenticConfig", "AgenticJudge", "ContrastiveJudge", "Critic", "CriticConfig",
    "CriticLabels", "Judge", "LLMConfig", "OfflineConfig", "Proposal", "RandomJudge",
    "TrajectoryView", "Turn", "make", "names", "register", "segment_error",
]
