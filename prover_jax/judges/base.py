"""What a ProVer judge sees and returns (SPEC §2, Propose), and the segment validity rules.

A judge sees trajectories only as policy-visible text (:class:`TrajectoryView`): the task, and
per agent turn the observation the policy saw, the action it wrote and whether the environment
accepted it. Hidden environment state never reaches a judge because it is not in these values,
with one declared exception: a judge with ``reads_states`` (the oracle of a positive control,
and the verifier's judge, which reads what the terminal verifier reads) also gets the
environment and the snapshots (:class:`Hidden`).

A judge returns a :class:`Proposal`: inclusive turn bounds of a segment of the successful
trajectory, or no bounds and an ``error`` saying why there is no credit. Judges never raise for
judge-side failures (an LLM timing out, answering garbage, running out of tool calls): those are
"no credit" proposals, so one bad group never stops a training step.
"""

from __future__ import annotations

import abc
import dataclasses
import random
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

MAX_SEGMENT_TURNS = 4


@dataclasses.dataclass(frozen=True)
class Turn:
    """One agent turn as the policy saw it."""

    index: int  # agent turn index 0..T-1
    observation: str  # the observation before this action (turn 0: the task prompt)
    action: str  # the policy's action text
    valid: bool  # the environment accepted the action (info["valid"])


class Hidden(NamedTuple):
    """What only a judge that ``reads_states`` is given: the environment (its verifier and
    oracles), the task and the trajectory's snapshots ``s_0 .. s_T``."""

    env: Any  # envs.Env of the trajectory's kind
    task: Any  # envs.Task
    states: tuple[Hashable, ...]


@dataclasses.dataclass(frozen=True)
class TrajectoryView:
    """A trajectory's policy-visible text; hidden state only in ``hidden``, which is None
    unless the judge declares ``reads_states``."""

    id: int  # row within the group
    task: str  # the task text shown to the policy
    turns: tuple[Turn, ...]
    reward: float
    hidden: Hidden | None = None


@dataclasses.dataclass(frozen=True)
class Proposal:
    """A judge's answer: a segment ``[start_turn, end_turn]`` or no credit, with its cost."""

    start_turn: int | None
    end_turn: int | None
    rationale: str
    error: str | None  # None when valid; otherwise why there is no credit
    rounds: int = 0  # LLM calls made
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0  # from per-token prices in the judge config (0 if unset)
    wall_s: float = 0.0
    unreachable: bool = False  # no credit because the judge's model could not be reached

    @property
    def valid(self) -> bool:
        """True when the proposal names a segment to verify."""
        return self.error is None and self.start_turn is not None and self.end_turn is not None


def no_credit(error: str, rationale: str = "", **stats) -> Proposal:
    """A proposal without a segment; ``stats`` are Proposal's accounting fields."""
    return Proposal(None, None, rationale, error, **stats)


def segment_error(trajectory: TrajectoryView, start: int, end: int,
                  max_segment_turns: int = MAX_SEGMENT_TURNS) -> str | None:
    """Why ``[start, end]`` is not a valid segment of ``trajectory`` (SPEC §2), or None.

    Valid iff ``0 <= start <= end``, ``end - start + 1 <= max_segment_turns``,
    ``end <= T - 2`` (the state after the segment is not terminal) and every action in the
    segment was valid. The message names the first rule broken.
    """
    last = len(trajectory.turns) - 1
    if start < 0:
        return f"start_turn {start} is negative; turns are numbered 0..{last}"
    if start > end:
        return f"start_turn {start} is after end_turn {end}"
    if end > last:
        return f"end_turn {end} is out of range; the trajectory has turns 0..{last}"
    if end == last:
        return (f"end_turn {end} is the terminal turn; the segment must end by turn "
                f"{last - 1} so that the state after it is not terminal")
    if end - start + 1 > max_segment_turns:
        return (f"the segment has {end - start + 1} turns; at most {max_segment_turns} "
                f"are allowed")
    rejected = [t.index for t in trajectory.turns[start:end + 1] if not t.valid]
    if rejected:
        return (f"the segment contains turns {rejected} whose actions the environment rejected "
                f"(invalid actions)")
    return None


class Judge(abc.ABC):
    """Proposes one segment of a successful trajectory for boundary verification.

    ``concurrent``: its proposals wait on a model, so a step asks for all its groups' at once.
    ``reads_states``: its views carry the environment and the snapshots (:class:`Hidden`).
    """

    concurrent = False
    reads_states = False

    def check_env(self, env) -> None:
        """Raises ValueError if this judge cannot judge trajectories of ``env`` (an
        `envs.Env`). Default: it can judge any."""
        del env

    @abc.abstractmethod
    def propose(self, success: TrajectoryView, failures: Sequence[TrajectoryView],
                rng: random.Random) -> Proposal:
        """A segment of ``success`` that may explain why ``failures`` failed.

        Args:
          success: the selected successful trajectory.
          failures: the group's failed trajectories.
          rng: the judge's randomness (only the random judge uses it).

        Returns:
          A Proposal; never raises for judge-side failures (those are no-credit proposals).
        """
