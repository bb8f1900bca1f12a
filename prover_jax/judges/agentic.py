"""ProVer's agentic judge: an LLM with trajectory tools proposes one segment (SPEC §2).

The judge gets the task, the full turn-indexed successful trajectory and an action preview of
every failed trajectory (cut to ``preview_chars``), and two tools (:mod:`.tools`). It may call
tools (at most ``max_tool_calls`` in all) and ends with a JSON object
``{"start_turn": int, "end_turn": int, "rationale": str}``. The answer is validated
deterministically — schema, then :func:`segment_error` — and a rejected answer is sent back
with the reason, up to ``max_corrections`` (3) times. Every request's timeout is cut to what is
left of ``max_wall_s``.

Any failure — the endpoint timing out or erroring, a body that is not a chat completion, too
many tool calls, the wall-time cap, corrections exhausted — is a no-credit proposal, never an
exception. Departure from the paper: a JSON object is accepted inside surrounding text or a
code fence (the first ``{`` to the last ``}``), as small local judges often add one.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from prover_jax.judges.base import (
    MAX_SEGMENT_TURNS,
    Judge,
    Proposal,
    TrajectoryView,
    no_credit,
    segment_error,
)
from prover_jax.judges.llm import LLM, AnswerError, LLMConfig, LLMError, Session, json_object
from prover_jax.judges.render import header, preview, render_turns
from prover_jax.judges.tools import SCHEMAS, Toolbox

ANSWER_KEYS = ("start_turn", "end_turn", "rationale")

SYSTEM_PROMPT = (
    "You are the judge of a reinforcement-learning run for an LLM agent. Several attempts at "
    "the same task are shown: one succeeded (in full, turn by turn) and the others failed "
    "(short previews). Diagnose a failure mode that recurs in the failed attempts, then choose "
    "the shortest segment of the successful attempt that solves or avoids it. Use "
    "search_trajectory to find recurring failure patterns in the failed attempts and "
    "get_segment to read exact turns of any attempt by its id. When you are done, answer with "
    'only a JSON object: {"start_turn": <int>, "end_turn": <int>, "rationale": "<why>"} giving '
    "the inclusive turn bounds in the successful attempt."
)


@dataclasses.dataclass(frozen=True)
class AgenticConfig(LLMConfig):
    """The agentic judge: LLM settings plus the paper's budgets."""

    preview_chars: int = 600  # per failed trajectory in the prompt
    max_tool_calls: int = 8
    max_corrections: int = 3
    max_wall_s: float = 300.0
    max_segment_turns: int = MAX_SEGMENT_TURNS
    max_search_k: int = 10
    turn_chars: int = 300  # one search hit
    result_chars: int = 4000  # one get_segment result

    def __post_init__(self):
        super().__post_init__()
        budgets = {"preview_chars": self.preview_chars, "max_tool_calls": self.max_tool_calls,
                   "max_wall_s": self.max_wall_s, "max_segment_turns": self.max_segment_turns,
                   "max_search_k": self.max_search_k, "turn_chars": self.turn_chars,
                   "result_chars": self.result_chars}
        for name, value in budgets.items():
            if value <= 0:
                raise ValueError(f"agentic judge: {name} must be positive, got {value}")
        if self.max_corrections < 0:
            raise ValueError(f"agentic judge: max_corrections must be >= 0, got "
                             f"{self.max_corrections}")


class NoCredit(Exception):
    """The judge ran out of a budget or of corrections; the message says which."""


class AgenticJudge(Judge):
    """The LLM judge with tools.

    Raises:
      ValueError: at construction, when the endpoint or model is not configured.
    """

    concurrent = True

    def __init__(self, config: AgenticConfig = AgenticConfig()):
        self.config = config
        self.llm = LLM(config)

    def propose(self, success: TrajectoryView, failures: Sequence[TrajectoryView],
                rng: random.Random) -> Proposal:
        """See :meth:`Judge.propose`; ``rng`` is unused (the LLM samples)."""
        del rng
        session = Session(self.llm, self.config.max_wall_s)
        try:
            start, end, rationale = self._converse(success, failures, session)
        except (LLMError, NoCredit) as e:
            return no_credit(str(e), tool_calls=session.tool_calls,
                             unreachable=getattr(e, "unreachable", False), **session.spend())
        return Proposal(start, end, rationale, None, tool_calls=session.tool_calls,
                        **session.spend())

    def _converse(self, success: TrajectoryView, failures: Sequence[TrajectoryView],
                  session: Session) -> tuple[int, int, str]:
        """Runs the conversation to a valid answer; raises LLMError or NoCredit."""
        config = self.config
        toolbox = Toolbox(success, failures, config.max_search_k, config.turn_chars,
                          config.result_chars)
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": task_prompt(success, failures, config)}]
        corrections = 0
        while True:
            reply = session.chat(messages, SCHEMAS)
            messages.append(reply.as_message())
            if reply.tool_calls:
                session.tool_calls += len(reply.tool_calls)
                if session.tool_calls > config.max_tool_calls:
                    raise NoCredit(f"the judge made {session.tool_calls} tool calls; "
                                   f"max_tool_calls is {config.max_tool_calls}")
                messages += [{"role": "tool", "tool_call_id": call.id,
                              "content": toolbox.run(call.name, call.arguments)}
                             for call in reply.tool_calls]
                continue
            try:
                start, end, rationale = parse_answer(reply.content or "")
                error = segment_error(success, start, end, config.max_segment_turns)
            except AnswerError as e:
                error = str(e)
            if error is None:
                return start, end, rationale
            if corrections == config.max_corrections:
                raise NoCredit(f"the answer is still invalid after {corrections} corrections: "
                               f"{error}")
            corrections += 1
            messages.append({"role": "user", "content": correction_prompt(
                error, config.max_corrections - corrections + 1)})


def task_prompt(success: TrajectoryView, failures: Sequence[TrajectoryView],
                config: AgenticConfig) -> str:
    """The first user message: task, successful trajectory, failure previews, the rules."""
    last = len(success.turns) - 1
    rejected = [t.index for t in success.turns if not t.valid]
    previews = "\n".join(f"- {preview(f, config.preview_chars)}" for f in failures) or "(none)"
    return (
        f"Task:\n{success.task}\n\n"
        f"Successful attempt: {header(success)}, turns 0..{last}:\n{render_turns(success)}\n\n"
        f"Failed attempts (action previews, each cut to {config.preview_chars} characters):\n"
        f"{previews}\n\n"
        f"Rules for the segment of trajectory {success.id}: 0 <= start_turn <= end_turn <= "
        f"{last - 1} (it must not include the final turn {last}); at most "
        f"{config.max_segment_turns} turns; no turn whose action was [invalid] "
        f"(here: {rejected or 'none'}). You may make at most {config.max_tool_calls} tool "
        f"calls in total."
    )


def correction_prompt(error: str, attempts_left: int) -> str:
    """The message that sends a rejected answer's reason back to the judge."""
    return (f"Your answer was rejected: {error}. Answer again with only a JSON object "
            f'{{"start_turn": <int>, "end_turn": <int>, "rationale": "<why>"}} '
            f"({attempts_left} attempt(s) left).")


def parse_answer(text: str) -> tuple[int, int, str]:
    """``(start_turn, end_turn, rationale)`` of a final answer (see :func:`json_object`).

    Raises:
      AnswerError: naming the schema rule the answer breaks.
    """
    value = json_object(text)
    missing = [k for k in ANSWER_KEYS if k not in value]
    if missing:
        raise AnswerError(f"the answer lacks {missing}")
    start, end, rationale = (value[k] for k in ANSWER_KEYS)
    for key, bound in (("start_turn", start), ("end_turn", end)):
        if not isinstance(bound, int) or isinstance(bound, bool):
            raise AnswerError(f"{key} must be an integer, got {bound!r:.40}")
    if not isinstance(rationale, str):
        raise AnswerError(f"rationale must be a string, got {rationale!r:.40}")
    return start, end, rationale
