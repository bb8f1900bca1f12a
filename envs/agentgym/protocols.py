"""The HTTP protocols of AgentGym's ALFWorld, WebShop and SearchQA environment servers.

Each server has its own endpoints, id field and reply shapes (AgentGym's ``agentenv-alfworld``,
``agentenv-webshop`` and ``agentenv-searchqa``):

- ALFWorld: ``POST /create`` -> ``{"id": n}``; ``POST /reset {"id", "game", "world_type"}``
  -> ``{"observation", "available_actions", ...}``; ``POST /step {"id", "action"}`` ->
  ``{"observation", "reward", "available_actions", "done"}``; ``GET /available_actions?id=``
  -> a list; no close. Errors are HTTP 200 with ``{"error": ...}``.
- WebShop: ``POST /create`` -> ``n`` (a random id); ``POST /reset {"env_idx",
  "session_id"}`` -> ``[observation, null]``; ``POST /step {"env_idx", "action"}`` ->
  ``{"state", "reward", "done", "info"}``; ``GET /available_actions?env_idx=`` ->
  ``{"has_search_bar", "clickables"}``; no close (a later version has ``POST /close``).
  Errors are HTTP 500.
- SearchQA: ``POST /create {"id": item}`` -> ``n``; ``POST /reset {"env_idx", "id"}`` -> the
  observation; ``POST /step {"env_idx", "action"}`` -> ``{"observation", "reward", "done",
  "info"}``; no action list; ``POST /close {"env_idx"}`` -> a bool. Errors are HTTP 500.

Task ranges follow AgentGym's data: ALFWorld's ``game`` indexes 2,420 train games and then
200 test games; SearchQA's item ids are test items first (0..51,712), then train items;
WebShop's ``session_id`` is the goal index, whose first 500 goals are WebShop's own test goals.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar

from envs.agentgym.transport import ServerError, Transport


@dataclasses.dataclass(frozen=True)
class Reply:
    """A reset's or step's result: ``actions`` are the available actions when the reply
    lists them (else None: ask `Protocol.actions`)."""

    observation: str
    reward: float = 0.0
    done: bool = False
    actions: tuple[str, ...] | None = None


class Protocol(abc.ABC):
    """One server's endpoints and reply shapes."""

    name: ClassVar[str]
    ranges: ClassVar[dict[str, tuple[int, int]]]  # split -> [start, stop) of the server's ids

    @abc.abstractmethod
    def create(self, server: Transport) -> int:
        """A new environment on the server; its id."""

    @abc.abstractmethod
    def reset(self, server: Transport, env: int, item: int) -> Reply:
        """Starts the server's task ``item`` in environment ``env``."""

    @abc.abstractmethod
    def step(self, server: Transport, env: int, action: str) -> Reply:
        """Plays ``action`` in environment ``env``."""

    def actions(self, server: Transport, env: int) -> tuple[str, ...] | None:
        """The available actions now (None where the server lists none)."""
        return None

    def close(self, server: Transport, env: int) -> None:  # noqa: B027 - most servers have none
        """Frees environment ``env`` on the server, where the server can."""

    @abc.abstractmethod
    def valid(self, action: str, available: tuple[str, ...] | None, reply: Reply) -> bool:
        """Whether ``action``, played when ``available`` were the available actions (None
        unless `judges_by_actions`), was one the benchmark accepts; it got ``reply``."""

    judges_by_actions: ClassVar[bool] = False  # `valid` needs the actions available before


def field(reply: Any, key: str, kind: type | tuple[type, ...], request: str) -> Any:
    """``reply[key]``, checked to be a ``kind``; a ServerError naming the request otherwise."""
    if not isinstance(reply, dict) or key not in reply:
        raise ServerError(f"{request}: the reply lacks {key!r}: {str(reply)[:200]}")
    value = reply[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ServerError(f"{request}: {key!r} is {type(value).__name__}, not "
                          f"{getattr(kind, '__name__', kind)}")
    return value


def _of(value: Any, kind: type | tuple[type, ...], request: str) -> Any:
    return field({"reply": value}, "reply", kind, request)


def _strings(values: Any, request: str) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ServerError(f"{request}: expected a list of strings, got {str(values)[:200]}")
    return tuple(values)


def _step_reply(reply: Any, observation_key: str,
                actions: tuple[str, ...] | None = None) -> Reply:
    """A step reply's observation (under ``observation_key``), reward and done, checked."""
    return Reply(field(reply, observation_key, str, "POST /step"),
                 float(field(reply, "reward", (int, float), "POST /step")),
                 bool(field(reply, "done", bool, "POST /step")), actions)


class Alfworld(Protocol):
    name = "alfworld"
    ranges: ClassVar = {"train": (0, 2420), "eval": (2420, 2620)}
    NOTHING = ("Nothing happens.", "Nothing happened.")

    def create(self, server):
        return field(server.post("create"), "id", int, "POST /create")

    def reset(self, server, env, item):
        reply = server.post("reset", {"id": env, "game": item, "world_type": "Text"})
        return Reply(field(reply, "observation", str, "POST /reset"),
                     actions=_strings(field(reply, "available_actions", list, "POST /reset"),
                                      "POST /reset"))

    def step(self, server, env, action):
        reply = server.post("step", {"id": env, "action": action})
        actions = _strings(field(reply, "available_actions", list, "POST /step"), "POST /step")
        return _step_reply(reply, "observation", actions)

    def actions(self, server, env):
        return _strings(server.get("available_actions", id=env), "GET /available_actions")

    def valid(self, action, available, reply):
        return reply.observation.strip() not in self.NOTHING


class Webshop(Protocol):
    name = "webshop"
    ranges: ClassVar = {"train": (500, 6500), "eval": (0, 500)}
    SEARCH = "search[<your query>]"

    def create(self, server):
        return _of(server.post("create"), int, "POST /create")

    def reset(self, server, env, item):
        reply = server.post("reset", {"env_idx": env, "session_id": item})
        if not isinstance(reply, list) or not reply or not isinstance(reply[0], str):
            raise ServerError(f"POST /reset: expected [observation, null], got {str(reply)[:200]}")
        return Reply(reply[0])

    def step(self, server, env, action):
        return _step_reply(server.post("step", {"env_idx": env, "action": action}), "state")

    def actions(self, server, env):
        reply = server.get("available_actions", env_idx=env)
        request = "GET /available_actions"
        clickables = _strings(field(reply, "clickables", list, request), request)
        search = (self.SEARCH,) if field(reply, "has_search_bar", bool, request) else ()
        return search + tuple(f"click[{c}]" for c in clickables)

    def close(self, server, env):
        server.post("close", {"env_idx": env})

    judges_by_actions = True

    def valid(self, action, available, reply):
        """WebShop's rule: a search with keywords, or a click on a clickable of the page."""
        verb, _, argument = action.strip().partition("[")
        argument = argument.removesuffix("]").strip().lower()
        if verb.strip().lower() == "search":
            return bool(argument) and action.strip().endswith("]")
        return verb.strip().lower() == "click" and f"click[{argument}]" in {
            a.lower() for a in available or ()}


class Searchqa(Protocol):
    name = "searchqa"
    ranges: ClassVar = {"train": (51713, 221328), "eval": (0, 51713)}

    def create(self, server):
        return _of(server.post("create", {"id": self.ranges["eval"][0]}), int, "POST /create")

    def reset(self, server, env, item):
        return Reply(_of(server.post("reset", {"env_idx": env, "id": item}), str, "POST /reset"))

    def step(self, server, env, action):
        return _step_reply(server.post("step", {"env_idx": env, "action": action}),
                           "observation")

    def close(self, server, env):
        server.post("close", {"env_idx": env})

    def valid(self, action, available, reply):
        """A search (its documents come back) or an answer (right or wrong)."""
        return reply.done or "<information>" in reply.observation or "incorrect" in \
            reply.observation


PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (Alfworld(), Webshop(), Searchqa())}
