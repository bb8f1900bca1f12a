"""The verifier's judge: ProVer's proposal read off VICT's proof of a success.

It needs no LLM and no oracle, only what VICT reads: the terminal verifier's atoms over the
trajectory's snapshots. For the successful trajectory it builds the proof graph
(`vict_jax.trace.proof_graph`, VICT's witness edges, accepted actions only) and the success's
core (`vict_jax.core.attribute` with a positive sign), and collects the turns whose actions
witness a core atom. The terminal turn is left out, since the state after it is terminal and
ProVer cannot verify a segment that ends there. The proposal is the valid segment
(`judges.base.segment_error`) of at most ``max_segment_turns`` turns that holds the most of
those turns; ties go to the shorter, then the earlier one, because a dependency core's roots
come first and an early window holds the choice that later witnesses depend on. No credit when
the verifier does not reproduce the reward, the core search abstains, or no witness is left.

This composes the two methods in a way neither paper does: VICT chooses where ProVer's
continuations look.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence

import numpy as np

from prover_jax import judges
from prover_jax.judges.base import Judge, Proposal, TrajectoryView, no_credit, segment_error
from prover_jax.judges.offline import OfflineConfig
from vict_jax.core import CoreConfig, attribute
from vict_jax.trace import proof_graph


def core_witness_turns(verifier, states: Sequence, actions: Sequence[str],
                       accepted: Sequence[bool], reward: float,
                       core: CoreConfig = CoreConfig()) -> tuple[list[int], str | None]:
    """The turns (sorted) whose actions witness an atom of a successful trajectory's core,
    and None; or no turns and why there are none."""
    trace = proof_graph(verifier, states, actions, accepted)
    if abs(verifier.aggregate(trace.final) - reward) > core.eta:
        return [], "the verifier does not reproduce the trajectory's reward"
    found = attribute(verifier.aggregate, trace.final, [a.parents for a in verifier.atoms],
                      1.0, 1.0, core)
    if found.reason is not None:
        return [], f"VICT abstains on the success ({found.reason})"
    turns = np.nonzero(trace.omega[:, sorted(found.core)].sum(axis=1) > 0)[0]
    return [int(t) for t in turns], None


class VerifierJudge(Judge):
    """The segment that holds the most witnesses of the success's core (module docstring)."""

    reads_states = True

    def __init__(self, config: OfflineConfig = OfflineConfig()):
        self.config = config

    def propose(self, success: TrajectoryView, failures: Sequence[TrajectoryView],
                rng: random.Random) -> Proposal:
        """See :meth:`Judge.propose`; deterministic, ``failures`` and ``rng`` are unused."""
        del failures, rng
        started = time.perf_counter()
        env, task, states = success.hidden
        turns = success.turns
        witnesses, why = core_witness_turns(env.verifier(task), states,
                                            [t.action for t in turns], [t.valid for t in turns],
                                            success.reward)
        witnesses = [t for t in witnesses if t < len(turns) - 1]
        if why is None and not witnesses:
            why = "the core's only witness is the terminal turn"
        if why is not None:
            return no_credit(why, wall_s=time.perf_counter() - started)
        limit = self.config.max_segment_turns
        windows = [(l, r) for l in range(len(turns)) for r in range(l, min(l + limit, len(turns)))
                   if segment_error(success, l, r, limit) is None]
        held = {w: sum(w[0] <= t <= w[1] for t in witnesses) for w in windows}
        wall_s = time.perf_counter() - started
        if not windows or max(held.values()) == 0:
            return no_credit("no valid segment holds a witness of the core", wall_s=wall_s)
        l, r = max(windows, key=lambda w: (held[w], -(w[1] - w[0]), -w[0]))
        rationale = (f"turns {l}..{r} hold {held[(l, r)]} of the {len(witnesses)} turns that "
                     f"witness the success's core: {witnesses}")
        return Proposal(l, r, rationale, None, wall_s=wall_s)


def register() -> None:
    """The ``prover_jax.judges`` entry point: registers ``verifier``."""
    judges.register("verifier", lambda **config: VerifierJudge(OfflineConfig(**config)))
