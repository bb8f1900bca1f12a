"""CriticSearch's retrospective critic: good/bad labels on every scorable turn (SPEC §3).

One request per trajectory, as in the ProVer paper's setup (eight critic calls per group of
eight): the critic sees the task, the whole policy-visible trajectory, its final reward, a
reference answer when the caller gives one (SearchQA), and the list of turns to label. It
answers ``{"labels": {"<turn>": "good" | "bad", ...}}`` with exactly those turns as keys.

The result is ready for the ``criticsearch`` kernel: ``critic_labels`` int32 ``[N, T]`` (+1
good, -1 bad, 0 not scored or padding) and ``critic_labelled`` bool ``[N]``. Any failure — an
endpoint error, a timeout, the wall-time cap, an answer that is not exactly the asked labels —
leaves the whole group unlabelled (all labels 0, all rows False), which the kernel turns into
plain GRPO for the group; the remaining trajectories are then not sent, to save their cost.
Which turns are scorable is the caller's choice: by default every turn whose action the
environment accepted (household, webshop); for SearchQA pass a predicate for valid searches.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from prover_jax.judges.base import TrajectoryView, Turn
from prover_jax.judges.llm import LLM, AnswerError, LLMConfig, LLMError, Session, json_object
from prover_jax.judges.render import header, render_turns

LABELS = {"good": 1, "bad": -1}

SYSTEM_PROMPT = (
    "You are a retrospective critic of an LLM agent's attempt at a task. You see the whole "
    "attempt and its final reward. For each turn you are asked about, label the agent's "
    'action "good" if it moved the attempt toward completing the task, or "bad" if it was a '
    "mistake, useless or harmful. Answer with only a JSON object "
    '{"labels": {"<turn>": "good" or "bad", ...}} whose keys are exactly the listed turns.'
)


@dataclasses.dataclass(frozen=True)
class CriticConfig(LLMConfig):
    """The critic: LLM settings and a wall-time cap per group."""

    max_wall_s: float = 600.0

    def __post_init__(self):
        super().__post_init__()
        if self.max_wall_s <= 0:
            raise ValueError(f"critic: max_wall_s must be positive, got {self.max_wall_s}")


@dataclasses.dataclass(frozen=True)
class CriticLabels:
    """The critic's labels of one group, in the group's row order, and what they cost."""

    labels: np.ndarray  # int32 [N, T]: +1 good, -1 bad, 0 not scored
    labelled: np.ndarray  # bool [N]: all True, or all False with `error` set
    error: str | None
    rounds: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    wall_s: float = 0.0


def accepted(turn: Turn) -> bool:
    """The default scorable-turn predicate: the environment accepted the action."""
    return turn.valid


class Critic:
    """Labels the turns of a group's trajectories through the chat-completions API.

    Raises:
      ValueError: at construction, when the endpoint or model is not configured.
    """

    def __init__(self, config: CriticConfig = CriticConfig()):
        self.config = config
        self.llm = LLM(config)

    def label_group(self, group: Sequence[TrajectoryView], num_turns: int | None = None,
                    reference: str | None = None,
                    scorable: Callable[[Turn], bool] = accepted) -> CriticLabels:
        """Labels every scorable turn of every trajectory of ``group``.

        Args:
          group: the group's trajectories in row order.
          num_turns: T of the batch (default: the longest trajectory).
          reference: a reference answer to show the critic (SearchQA), or None.
          scorable: which turns the critic labels.

        Returns:
          CriticLabels with labels int32 [N, T] and labelled bool [N]; never raises for
          critic-side failures.
        """
        longest = max((len(t.turns) for t in group), default=0)
        num_turns = longest if num_turns is None else num_turns
        if num_turns < longest:
            raise ValueError(f"num_turns={num_turns} is shorter than a trajectory "
                             f"({longest} turns)")
        labels = np.zeros((len(group), num_turns), np.int32)
        session = Session(self.llm, self.config.max_wall_s)
        error = None
        for row, trajectory in enumerate(group):
            turns = [t.index for t in trajectory.turns if scorable(t)]
            if not turns:
                continue
            try:
                reply = session.chat(critic_messages(trajectory, turns, reference))
                for turn, label in parse_labels(reply.content or "", turns).items():
                    labels[row, turn] = label
            except (AnswerError, LLMError) as e:
                error = f"trajectory {trajectory.id}: {e}"
                labels[:] = 0
                break
        return CriticLabels(labels, np.full(len(group), error is None), error,
                            **session.spend())


def critic_messages(trajectory: TrajectoryView, turns: Sequence[int],
                    reference: str | None) -> list[dict[str, Any]]:
    """The system and user messages asking for labels of ``turns``."""
    answer = f"Reference answer: {reference}\n\n" if reference is not None else ""
    user = (f"Task:\n{trajectory.task}\n\n{answer}"
            f"Attempt: {header(trajectory)}:\n{render_turns(trajectory)}\n\n"
            f"Final reward: {trajectory.reward:g}\n"
            f"Label these turns: {json.dumps(list(turns))}")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_labels(text: str, turns: Sequence[int]) -> dict[int, int]:
    """``{turn: +1 or -1}`` from the critic's answer, which must label exactly ``turns``.

    Raises:
      AnswerError: naming what is wrong with the answer.
    """
    labels = json_object(text).get("labels")
    if not isinstance(labels, dict):
        raise AnswerError('the answer lacks a "labels" object')
    expected = {str(t): t for t in turns}
    if set(labels) != set(expected):
        raise AnswerError(f"labels cover turns {sorted(labels)}, expected exactly "
                         f"{sorted(expected, key=int)}")
    bad = {k: v for k, v in labels.items() if not isinstance(v, str) or v not in LABELS}
    if bad:
        raise AnswerError(f'labels must be "good" or "bad", got {bad}')
    return {expected[k]: LABELS[v] for k, v in labels.items()}
