"""Stand-ins for AgentGym's environment servers, backed by this project's environments.

``create_app("alfworld")`` speaks AgentGym's ALFWorld server protocol (`protocols`) and plays
the games of ``alfworld-small`` on ALFWorld's engine; ``"webshop"`` and ``"searchqa"`` speak
those servers' protocols over the project's ``webshop`` and ``searchqa``. The task ids map onto
the backing environment's splits with the protocol's ranges. Replies have the servers' shapes,
quirks included: ALFWorld's reset drops the engine's welcome banner and reports errors as HTTP
200 with an ``error`` field; WebShop's ids are random; WebShop and SearchQA answer an unknown
id with HTTP 500. They let the clients be tested offline, and AgentGym's own clients be run
against the project's environments:

    python -m envs.agentgym.standin alfworld --port 36001
"""

from __future__ import annotations

import argparse
import json
import random
import threading
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import envs
from envs.agentgym.protocols import PROTOCOLS, Webshop
from envs.base import Env, Task

BACKING = {"alfworld": "alfworld-small", "webshop": "webshop", "searchqa": "searchqa"}


class _Envs:
    """The stand-in's environments by id, each with its last reply's observation."""

    def __init__(self, protocol: str, backing: Callable[[], Env], random_ids: bool):
        self.ranges = PROTOCOLS[protocol].ranges
        self.backing = backing
        self.envs: dict[int, Env] = {}
        self.observations: dict[int, str] = {}
        self.lock = threading.Lock()
        self.rng = random.Random(0) if random_ids else None

    def create(self) -> int:
        env_id = self.rng.randrange(48_950_077) if self.rng else len(self.envs)
        self.envs[env_id] = self.backing()
        return env_id

    def task(self, env: Env, item: int) -> Task:
        for split, (start, stop) in self.ranges.items():
            if start <= item < stop and item - start < env.num_tasks(split):
                return Task(env.name, split, item - start)
        raise IndexError(f"task id {item} is out of range")


async def _request(request: Request) -> dict:
    """A POST's JSON object ({} without a body), or a GET's query parameters."""
    if request.method != "POST":
        return dict(request.query_params)
    raw = await request.body()
    body = json.loads(raw) if raw else {}
    if not isinstance(body, dict):
        raise TypeError("the body is not a JSON object")
    return body


def _endpoint(state: _Envs, handler: Callable[[dict], Any], errors_as_200: bool):
    """An endpoint that reads the request, then runs ``handler`` on it holding the state's
    lock (never across an await). An error is an HTTP 500, or with ``errors_as_200`` an HTTP
    200 with an ``error`` field, as ALFWorld's server reports errors."""
    async def endpoint(request: Request) -> JSONResponse:
        try:
            body = await _request(request)
            with state.lock:
                return JSONResponse(handler(body))
        except Exception as e:
            if errors_as_200:
                return JSONResponse({"error": str(e)})
            raise
    return endpoint


def _alfworld_routes(state: _Envs) -> dict[str, Callable[[dict], Any]]:
    def checked(env_id: Any) -> Env:
        if env_id not in state.envs:
            raise LookupError(f"The id {env_id} is not valid.")
        return state.envs[env_id]

    def create(body):
        return {"id": state.create()}

    def reset(body):
        env = checked(body["id"])
        if body["world_type"] not in ("Text", "Embody", "Hybrid"):
            raise ValueError('world_type must be one of "Text", "Embody" and "Hybrid"')
        intro = env.reset(state.task(env, body["game"]))
        observation = "\n".join(intro.split("\n\n")[1:])  # without the welcome banner
        state.observations[body["id"]] = observation
        return {"id": body["id"], "observation": observation,
                "available_actions": env.admissible(), "task_type": "generated"}

    def step(body):
        env = checked(body["id"])
        if env.snapshot().done:
            raise RuntimeError(f"The task with environment {body['id']} has finished.")
        result = env.step(body["action"])
        state.observations[body["id"]] = result.obs
        return {"observation": result.obs, "reward": result.reward,
                "available_actions": [] if result.done else env.admissible(),
                "done": result.done}

    def available_actions(body):
        return checked(int(body["id"])).admissible()

    def observation(body):
        checked(int(body["id"]))
        return state.observations[int(body["id"])]

    return {"POST /create": create, "POST /reset": reset, "POST /step": step,
            "GET /available_actions": available_actions, "GET /observation": observation}


def _indexed_routes(state: _Envs, protocol: str) -> dict[str, Callable[[dict], Any]]:
    """WebShop's and SearchQA's routes (``env_idx``; an error is an HTTP 500)."""
    observation_field = "state" if protocol == "webshop" else "observation"

    def create(body):
        return state.create()

    def reset(body):
        env_id = int(body["env_idx"])
        env = state.envs[env_id]
        item = body["session_id"] if protocol == "webshop" else body["id"]
        observation = env.reset(state.task(env, item))
        state.observations[env_id] = observation
        return [observation, None] if protocol == "webshop" else observation

    def step(body):
        env_id = int(body["env_idx"])
        result = state.envs[env_id].step(body["action"])
        state.observations[env_id] = result.obs
        return {observation_field: result.obs, "reward": result.reward, "done": result.done,
                "info": None}

    def observation(body):
        return state.observations[int(body["env_idx"])]

    def available_actions(body):
        actions = state.envs[int(body["env_idx"])].admissible()
        return {"has_search_bar": Webshop.SEARCH in actions,
                "clickables": [a[len("click["):-1] for a in actions if a.startswith("click[")]}

    def close(body):
        return state.envs.pop(int(body["env_idx"]), None) is not None

    routes = {"POST /create": create, "POST /reset": reset, "POST /step": step,
              "GET /observation": observation}
    if protocol == "webshop":
        routes["GET /available_actions"] = available_actions
    else:
        routes["POST /close"] = close
    return routes


def create_app(protocol: str, backing: str | None = None) -> Starlette:
    """The stand-in server of ``protocol`` ("alfworld", "webshop", "searchqa"), backed by the
    registered environment ``backing`` (default `BACKING`)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown AgentGym protocol {protocol!r}; one of {sorted(PROTOCOLS)}")
    name = backing or BACKING[protocol]
    state = _Envs(protocol, lambda: envs.make(name), random_ids=protocol == "webshop")
    handlers = (_alfworld_routes(state) if protocol == "alfworld"
                else _indexed_routes(state, protocol))
    return Starlette(routes=[
        Route(path, _endpoint(state, handler, errors_as_200=protocol == "alfworld"),
              methods=[method])
        for (method, path), handler in ((key.split(" "), h) for key, h in handlers.items())])


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("protocol", choices=sorted(PROTOCOLS))
    parser.add_argument("--backing", help="the environment behind it (default: "
                        + ", ".join(f"{k}: {v}" for k, v in BACKING.items()) + ")")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=36001)
    args = parser.parse_args(argv)
    uvicorn.run(create_app(args.protocol, args.backing), host=args.host, port=args.port,
                log_level="warning")


if __name__ == "__main__":
    main()
