"""One tau-bench episode as a value: its state, transition and the benchmark's reward.

The state (:class:`State`) is frozen: the task, the user's opening message, the turns, and the
database changes as JSON text per written record (:mod:`envs.tau.db`); the base database is
shared by every episode and never copied. :func:`transition` is a pure function of the state,
the action and the (stateless) user, so restoring a state replays every later step exactly.

The episode ends, as in the benchmark, when the user's reply contains ``###STOP###`` or after a
``transfer_to_human_agents`` call, and otherwise after 30 actions (the benchmark's step limit;
reward 0, ``info["truncated"]``). The reward is the benchmark's: 1 iff the database equals the
one obtained by replaying the task's ground-truth calls on a fresh database (compared by hash)
and every required output occurs, case-insensitively and with commas removed, in some message
to the user. ``info["valid"]`` is False when a call could not be carried out: a malformed call,
an unknown tool, arguments that do not fit, or a tool that reported an error.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

from envs.base import Step, Task
from envs.tau import actions
from envs.tau import data as data_lib
from envs.tau.airline import AIRLINE
from envs.tau.db import Changes, Db, db_hash
from envs.tau.retail import RETAIL
from envs.tau.tools import Domain, call
from envs.tau.users import STOP, User

MAX_TURNS = 30
DOMAINS = {"retail": RETAIL, "airline": AIRLINE}


class Turn(NamedTuple):
    """One action and what came of it.

    ``kind`` is ``"tool"`` (``name`` and ``payload`` = the canonical JSON arguments),
    ``"message"`` (``payload`` = the text said to the user) or ``"malformed"``.
    """

    action: str
    kind: str
    name: str
    payload: str
    obs: str
    valid: bool


@dataclasses.dataclass(frozen=True)
class State:
    """The whole episode: an immutable, hashable, picklable value."""

    task: Task
    opening: str
    turns: tuple[Turn, ...] = ()
    changes: Changes = ()
    done: bool = False
    truncated: bool = False


def domain_of(task: Task) -> Domain:
    """The domain of a ``tau-*`` task."""
    return DOMAINS[task.env.removeprefix("tau-")]


def spec_of(task: Task) -> data_lib.TaskSpec:
    """The benchmark task behind ``task``."""
    return data_lib.tasks(domain_of(task).name, task.split)[task.index]


def conversation(state: State) -> tuple[tuple[str, str], ...]:
    """What the user has seen: ``(speaker, text)`` pairs, opening first."""
    pairs = [("user", state.opening)]
    for turn in state.turns:
        if turn.kind == "message":
            pairs += [("agent", turn.payload), ("user", turn.obs)]
    return tuple(pairs)


def said(state: State) -> tuple[str, ...]:
    """The agent's messages to the user."""
    return tuple(turn.payload for turn in state.turns if turn.kind == "message")


def output_said(output: str, messages: tuple[str, ...]) -> bool:
    """The benchmark's output check: ``output`` occurs in a message, ignoring case, once the
    message's commas are removed."""
    return any(output.lower() in message.lower().replace(",", "") for message in messages)


class Replay(NamedTuple):
    """The ground truth replayed: the database changes and which calls succeeded."""

    changes: Changes
    succeeded: tuple[bool, ...]  # one per ground-truth call; False for the skipped transfer


@functools.cache
def ground_truth(task: Task) -> Replay:
    """The task's ground-truth calls replayed on a fresh database.

    As the benchmark, every call except the terminating ``transfer_to_human_agents`` is
    replayed, failing calls included (a few ground-truth calls fail in the benchmark's data).
    """
    domain = domain_of(task)
    db, succeeded = Db(data_lib.base(domain.name)), []
    for action in spec_of(task).actions:
        tool = domain.by_name.get(action.name)
        ok = False
        if tool is None or not tool.terminal:
            _, ok = call(domain, db, action.name, action.kwargs)
        succeeded.append(ok)
    return Replay(db.changes(), tuple(succeeded))


@functools.cache
def ground_truth_hash(task: Task) -> str:
    """:func:`db_hash` of the ground-truth database."""
    return db_hash(data_lib.base(domain_of(task).name), ground_truth(task).changes)


def reward(state: State) -> float:
    """The benchmark's reward of ``state`` were the episode to end now (0 if truncated)."""
    if state.truncated:
        return 0.0
    base = data_lib.base(domain_of(state.task).name)
    if db_hash(base, state.changes) != ground_truth_hash(state.task):
        return 0.0
    messages = said(state)
    return float(all(output_said(output, messages) for output in spec_of(state.task).outputs))


def transition(state: State, action: str, user: User) -> tuple[State, Step]:
    """The next state and step after ``action`` (``state`` must be running)."""
    domain, spec = domain_of(state.task), spec_of(state.task)
    parsed = actions.parse(action)
    changes, done = state.changes, False
    if isinstance(parsed, actions.Malformed):
        turn = Turn(action, "malformed", "", "", parsed.error, False)
    elif isinstance(parsed, actions.Message):
        reply = user.reply(spec.instruction, (*conversation(state), ("agent", parsed.text)))
        turn = Turn(action, "message", "", parsed.text, reply, True)
        done = STOP in reply
    else:
        db = Db(data_lib.base(domain.name), state.changes)
        obs, ok = call(domain, db, parsed.name, parsed.arguments)
        changes = db.changes()
        turn = Turn(action, "tool", parsed.name, data_lib.arguments_key(parsed.arguments), obs,
                    ok)
        tool = domain.by_name.get(parsed.name)
        done = tool is not None and tool.terminal
    turns = (*state.turns, turn)
    truncated = not done and len(turns) >= MAX_TURNS
    state = dataclasses.replace(state, turns=turns, changes=changes, done=done or truncated,
                                truncated=truncated)
    source = "user" if turn.kind == "message" else turn.name or "parser"
    return state, Step(turn.obs, state.done, reward(state) if state.done else 0.0,
                       {"valid": turn.valid, "truncated": truncated, "source": source})
