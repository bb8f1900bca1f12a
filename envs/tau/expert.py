"""The expert (ground-truth calls, confirmed as the policy asks) and harmless random actions.

The expert works from any state: its next call is the first ground-truth call that the episode
has not yet made as often as the ground truth makes it up to there (calls compared by name and
arguments, whatever they returned), so calls already made — by it or by anyone — are not
repeated. Before each database write it lists the call and asks for an explicit yes; once the
calls are done (or only the final transfer to a human is left) it tells the user the required
outputs and says goodbye, which ends the conversation.

Random actions explore without ever making a task unsolvable, so that the expert can finish
any episode started at random: the expert's own next action, lookups with plausible arguments,
questions to the user, writes aimed at records that do not exist (they fail before writing),
malformed or unknown calls, and rarely a goodbye (which ends the episode).
"""

from __future__ import annotations

import collections
import random
import re
from typing import Any

from envs.tau.actions import tool_call
from envs.tau.data import Action
from envs.tau.episode import State, domain_of, output_said, said, spec_of
from envs.tau.tools import Tool

FAREWELL = "Your request has been handled. Thank you for contacting us, goodbye."
_YES = re.compile(r"\byes\b", re.IGNORECASE)
_MISSING_IDS = {"order_id": "#W0000000", "user_id": "no_such_user_0",
                "reservation_id": "ZZZZZZ"}
_QUESTIONS = (
    "Could you please provide your email address?",
    "Could you tell me your name and zip code?",
    "What is your user id?",
    "Which order id is this about?",
    "Do you confirm that you want me to proceed (yes/no)?",
    "How else can I help you today?",
    "Could you give me the reservation id?",
)


def affirmative(reply: str) -> bool:
    """Whether a user's reply is an explicit yes."""
    return _YES.search(reply) is not None


def confirmation_request(action: Action) -> str:
    """The expert's request for explicit confirmation of a write."""
    return (f"I am about to call {action.name} with these arguments: {action.arguments}. "
            "Do you confirm (yes/no)?")


def closing(outputs: tuple[str, ...]) -> str:
    """The expert's last message: the required outputs, then goodbye."""
    if not outputs:
        return FAREWELL
    return f"Here is what you asked about: {'; '.join(outputs)}. {FAREWELL}"


def pending(state: State) -> Action | None:
    """The first ground-truth call the episode has not made yet, or None when all are made."""
    made = collections.Counter((t.name, t.payload) for t in state.turns if t.kind == "tool")
    needed: collections.Counter = collections.Counter()
    for action in spec_of(state.task).actions:
        needed[action.key] += 1
        if made[action.key] < needed[action.key]:
            return action
    return None


def _confirmed(state: State, action: Action) -> bool:
    last = state.turns[-1] if state.turns else None
    return (last is not None and last.kind == "message"
            and last.payload == confirmation_request(action) and affirmative(last.obs))


def expert_action(state: State) -> str:
    """The expert's next action from ``state`` (running)."""
    domain, spec = domain_of(state.task), spec_of(state.task)
    action = pending(state)
    if action is None or domain.by_name[action.name].terminal:
        messages = said(state)
        if not all(output_said(output, messages) for output in spec.outputs):
            return closing(spec.outputs)
        if action is None:
            return FAREWELL
    if domain.by_name[action.name].writes and not _confirmed(state, action):
        return confirmation_request(action)
    return tool_call(action.name, action.kwargs)


def _pools(state: State) -> dict[str, list[Any]]:
    """Argument values seen in the task: ground-truth arguments and the user id."""
    spec = spec_of(state.task)
    pools: dict[str, list[Any]] = collections.defaultdict(list)
    pools["user_id"].append(spec.user_id)
    for action in spec.actions:
        for name, value in action.kwargs.items():
            pools[name].append(value)
    return pools


def _arguments(tool: Tool, pools: dict[str, list[Any]], rng: random.Random) -> dict[str, Any]:
    """Plausible arguments: a value seen for the same parameter, else a placeholder."""
    arguments = {}
    for name, prop in tool.properties.items():
        if pools.get(name):
            arguments[name] = rng.choice(pools[name])
        else:
            arguments[name] = {"array": [], "integer": 0, "number": 0}.get(prop["type"],
                                                                              "unknown")
    return arguments


def _malformed(tools: list[Tool], rng: random.Random) -> str:
    tool = rng.choice(tools)
    return rng.choice([
        "<tool_call>{\"name\": \"" + tool.name + "\", \"arguments\": {</tool_call>",
        tool_call("no_such_tool", {}),
        tool_call(tool.name, {}),
        tool_call(tool.name, {"unexpected": 1}),
        "<tool_call>[1, 2]</tool_call>",
    ])


def random_action(state: State, rng: random.Random) -> str:
    """A random action that cannot make the task unsolvable (see the module docstring)."""
    domain, pools = domain_of(state.task), _pools(state)
    reads = [t for t in domain.tools if not t.writes and not t.terminal]
    writes = [t for t in domain.tools if t.writes]
    draw = rng.random()
    if draw < 0.2:
        return expert_action(state)
    if draw < 0.5:
        tool = rng.choice(reads)
        return tool_call(tool.name, _arguments(tool, pools, rng))
    if draw < 0.7:
        return rng.choice(_QUESTIONS) if rng.random() < 0.9 else FAREWELL
    if draw < 0.85:
        tool = rng.choice(writes)
        arguments = _arguments(tool, pools, rng)
        primary = next(name for name in _MISSING_IDS if name in arguments)
        return tool_call(tool.name, {**arguments, primary: _MISSING_IDS[primary]})
    return _malformed(reads, rng)

