"""ProVer's judges (SPEC §2, Propose) and CriticSearch's critic (SPEC §3).

A judge sees a group as policy-visible text (:class:`TrajectoryView`) and proposes one segment
of its successful trajectory (:class:`Proposal`), or no credit. ``make(name, **config)`` builds
one: ``agentic`` (an LLM with trajectory tools, through the OpenAI-compatible API), ``random``
(the paper's Random baseline), ``contrastive`` (offline, deterministic), ``oracle`` (a positive
control: the environment's own pivot, read from hidden state) or ``verifier`` (VICT's proof of
the success, `vict_jax.judge`). :class:`Critic` labels a group's turns good/bad for the
``criticsearch`` credit kernel.
"""

from prover_jax.judges.agentic import AgenticConfig, AgenticJudge
from prover_jax.judges.base import Hidden, Judge, Proposal, TrajectoryView, Turn, segment_error
from prover_jax.judges.critic import Critic, CriticConfig, CriticLabels
from prover_jax.judges.llm import LLMConfig
from prover_jax.judges.offline import ContrastiveJudge, OfflineConfig, OracleJudge, RandomJudge
from prover_jax.judges.registry import make, names, register

__all__ = [
    "AgenticConfig", "AgenticJudge", "ContrastiveJudge", "Critic", "CriticConfig",
    "CriticLabels", "Hidden", "Judge", "LLMConfig", "OfflineConfig", "OracleJudge", "Proposal",
    "RandomJudge", "TrajectoryView", "Turn", "make", "names", "register", "segment_error",
]
