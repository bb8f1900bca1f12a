"""Policy-visible trajectory text for LLM judges and critics: full, ranged and previews.

A turn renders as the observation the policy saw and the action it wrote, both tagged with the
turn index; an action the environment rejected is marked ``[invalid]``. Previews list actions
only (the decisions), compacted to one line and cut to a character budget.
"""

from __future__ import annotations

from prover_jax.judges.base import TrajectoryView, Turn

ELLIPSIS = " …"


def clip(text: str, chars: int) -> str:
    """``text`` cut to at most ``chars`` characters, marked with an ellipsis when cut."""
    if len(text) <= chars:
        return text
    return text[:max(chars - len(ELLIPSIS), 0)] + ELLIPSIS


def one_line(text: str) -> str:
    """``text`` with every whitespace run collapsed to one space."""
    return " ".join(text.split())


def render_turn(turn: Turn) -> str:
    """``[turn t] observation: ...`` then ``[turn t] action: ...``."""
    flag = " [invalid]" if not turn.valid else ""
    return (f"[turn {turn.index}] observation: {turn.observation}\n"
            f"[turn {turn.index}] action: {turn.action}{flag}")


def render_turns(trajectory: TrajectoryView, start: int = 0, end: int | None = None) -> str:
    """Turns ``start..end`` (inclusive; default all) of ``trajectory``, one block per turn.

    The first block opens with the observation before ``start``: the context the policy saw.
    """
    turns = trajectory.turns[start:None if end is None else end + 1]
    return "\n".join(render_turn(t) for t in turns)


def header(trajectory: TrajectoryView) -> str:
    """``trajectory 3 (reward 0, 12 turns)``."""
    return (f"trajectory {trajectory.id} (reward {trajectory.reward:g}, "
            f"{len(trajectory.turns)} turns)")


def preview(trajectory: TrajectoryView, chars: int) -> str:
    """The header and the trajectory's actions on one line, the actions cut to ``chars``."""
    actions = " | ".join(
        f"t{t.index}: {one_line(t.action)}{'' if t.valid else ' [invalid]'}"
        for t in trajectory.turns)
    return f"{header(trajectory)}: {clip(actions, chars)}"
