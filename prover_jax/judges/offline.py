"""Judges without an LLM: the paper's Random baseline, the offline contrastive judge, and the
oracle of a positive control.

``random`` (ProVer paper §5.3, A.3): start turn uniform over ``0..T-1``, length uniform over
``1..max_segment_turns``; an interval that breaks a validity rule is discarded (no credit), so
the judge is exactly the paper's baseline, invalid draws included.

``contrastive`` **[decision: SPEC §2]** scores every valid segment ``[l, r]`` of length at most
``max_segment_turns`` by how rarely its actions occur in the failed trajectories and proposes
the best. Actions are compared after normalisation (lower case, whitespace runs collapsed).
With ``F`` failed trajectories and ``df(a)`` the number of them whose actions include ``a``:

* ``novel(l, r)`` — how many of the segment's actions occur in no failed trajectory;
* ``rarity(l, r)`` — the mean over the segment of ``1 - df(a_t) / F`` (1 when ``F = 0``).

The segment maximising ``(novel, rarity)`` wins; ties go to the shorter, then the earlier
segment. So a run of success-only actions wins over any single one of them, and among
segments with equally many the one whose actions the failures share least wins. Deterministic;
``rng`` is unused.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

from prover_jax.judges.base import (
    MAX_SEGMENT_TURNS,
    Judge,
    Proposal,
    TrajectoryView,
    no_credit,
    segment_error,
)
from prover_jax.judges.render import one_line


@dataclasses.dataclass(frozen=True)
class OfflineConfig:
    """Segment rules of the judges without an LLM."""

    max_segment_turns: int = MAX_SEGMENT_TURNS

    def __post_init__(self):
        if self.max_segment_turns < 1:
            raise ValueError(f"max_segment_turns must be >= 1, got {self.max_segment_turns}")


class RandomJudge(Judge):
    """Uniform start, uniform length, invalid draws discarded (the paper's Random)."""

    def __init__(self, config: OfflineConfig = OfflineConfig()):
        self.config = config

    def propose(self, success: TrajectoryView, failures: Sequence[TrajectoryView],
                rng: random.Random) -> Proposal:
        """See :meth:`Judge.propose`; ``failures`` are unused."""
        del failures
        started = time.perf_counter()
        if not success.turns:
            return no_credit("the trajectory has no turns")
        start = rng.randrange(len(success.turns))
        end = start + rng.randint(1, self.config.max_segment_turns) - 1
        error = segment_error(success, start, end, self.config.max_segment_turns)
        rationale = f"random draw: turns {start}..{end}"
        wall_s = time.perf_counter() - started
        if error is not None:
            return no_credit(error, rationale, wall_s=wall_s)
        return Proposal(start, end, rationale, None, wall_s=wall_s)


def normalise(action: str) -> str:
    """An action's comparison key: lower case, whitespace runs collapsed."""
    return one_line(action).lower()


def segment_scores(success: TrajectoryView, failures: Sequence[TrajectoryView],
                   max_segment_turns: int = MAX_SEGMENT_TURNS
                   ) -> dict[tuple[int, int], tuple[int, Fraction]]:
    """``(novel, rarity)`` of every valid segment ``(l, r)`` of ``success`` (module docstring)."""
    df = Counter(a for f in failures for a in {normalise(t.action) for t in f.turns})
    n = len(failures)
    # Exact fractions: equal rarities must tie exactly so that the shorter segment wins.
    rare = [n - df[normalise(t.action)] if n else 1 for t in success.turns]
    novel = [df[normalise(t.action)] == 0 for t in success.turns]
    return {
        (l, r): (sum(novel[l:r + 1]), Fraction(sum(rare[l:r + 1]), max(n, 1) * (r - l + 1)))
        for l in range(len(success.turns))
        for r in range(l, min(l + max_segment_turns, len(success.turns)))
        if segment_error(success, l, r, max_segment_turns) is None
    }


class ContrastiveJudge(Judge):
    """The segment whose actions the failures share least (module docstring)."""

    def __init__(self, config: OfflineConfig = OfflineConfig()):
        self.config = config

    def propose(self, success: TrajectoryView, failures: Sequence[TrajectoryView],
                rng: random.Random) -> Proposal:
        """See :meth:`Judge.propose`; deterministic, ``rng`` is unused."""
        del rng
        started = time.perf_counter()
        scores = segment_scores(success, failures, self.config.max_segment_turns)
        if not scores:
            return no_credit("the trajectory has no valid segment",
                             wall_s=time.perf_counter() - started)
        (l, r), (novel, rarity) = max(
            scores.items(), key=lambda item: (*item[1], -(item[0][1] - item[0][0]), -item[0][0]))
        rationale = (f"{novel} of the segment's {r - l + 1} actions occur in no failed "
                     f"trajectory; mean rarity {float(rarity):.3f}")
        return Proposal(l, r, rationale, None, wall_s=time.perf_counter() - started)


class OracleJudge(Judge):
    """A positive control: the environment's own pivotal segment (`Env.oracle_pivot`), read
    from the hidden state, so that ProVer's verification and bonus are tested apart from any
    judge's skill. Needs an environment with a pivot oracle (household-pivot)."""

    reads_states = True

    def __init__(self, config: OfflineConfig = OfflineConfig()):
        self.config = config

    def check_env(self, env) -> None:
        """Raises ValueError unless ``env`` has a pivot oracle."""
        if "pivot" not in env.oracles:
            raise ValueError(f"the oracle judge needs an environment with a pivot oracle "
                             f"(household-pivot); {env.name} has none")

    def propose(self, success: TrajectoryView, failures: Sequence[TrajectoryView],
                rng: random.Random) -> Proposal:
        """See :meth:`Judge.propose`; deterministic, ``failures`` and ``rng`` are unused."""
        del failures, rng
        started = time.perf_counter()
        segment = success.hidden.env.oracle_pivot(success.hidden.states)
        wall_s = time.perf_counter() - started
        if segment is None:
            return no_credit("the environment's oracle found no pivot", wall_s=wall_s)
        error = segment_error(success, *segment, self.config.max_segment_turns)
        rationale = f"the environment's pivot: turns {segment[0]}..{segment[1]}"
        if error is not None:
            return no_credit(error, rationale, wall_s=wall_s)
        return Proposal(*segment, rationale, None, wall_s=wall_s)
