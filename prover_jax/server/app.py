"""The OpenAI-compatible HTTP application: request validation and response shapes.

Routes: ``POST /v1/chat/completions`` (non-streaming, ``n = 1``) and ``GET /v1/models``. A
malformed request, or one with a parameter outside `PARAMETERS`, gets HTTP 400 with an
OpenAI-style error object naming the field; a
:class:`~prover_jax.server.backend.BackendError` gets its own status, any other backend
exception a 500 with its message. The backend runs in a
worker thread so that a slow reply never blocks other requests.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from prover_jax.server.backend import (
    Backend,
    BackendError,
    ChatReply,
    ChatRequest,
    assistant_message,
)

DISCONNECT_POLL_S = 0.1  # how often a waiting request checks that its client is still there
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
# What a request may set; anything else (logprobs, penalties, response_format, ...) is a 400
# naming it, rather than silently ignored.
PARAMETERS = frozenset({"model", "messages", "tools", "tool_choice", "temperature", "top_p",
                        "max_tokens", "max_completion_tokens", "stop", "seed", "n", "stream",
                        "user", "parallel_tool_calls"})


class RequestError(ValueError):
    """A request the server rejects with HTTP 400."""


def create_app(backend: Backend) -> Starlette:
    """The Starlette application serving ``backend``."""

    async def chat_completions(request: Request) -> Response:
        try:
            chat = parse_request(json.loads(await request.body()))
        except (ValueError, RecursionError) as e:  # RequestError, undecodable JSON or text
            return error_response(400, f"invalid request: {e}")
        try:
            reply = await _reply(backend, chat, request)
            if reply is None:  # the client went away; nobody reads an answer
                return Response(status_code=499)
        except BackendError as e:
            if e.body is not None:
                return Response(e.body, e.status, media_type=e.content_type, headers=e.headers)
            response = error_response(e.status, e.message, "server_error" if e.status >= 500
                                      else "invalid_request_error")
            response.headers.update(e.headers)
            return response
        except Exception as e:  # a backend bug answers this request; the server goes on
            return error_response(500, f"the backend failed: {type(e).__name__}: {e}",
                                  "server_error")
        return JSONResponse(completion_body(chat.model, reply))

    async def models(request: Request) -> Response:
        del request
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "prover_jax"}
                for name in backend.models()]
        return JSONResponse({"object": "list", "data": data})

    return Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
    ])


async def _reply(backend: Backend, chat: ChatRequest, request: Request) -> ChatReply | None:
    """The backend's reply; None if the client disconnected first (a queued request is then
    cancelled, freeing its place)."""
    future = await run_in_threadpool(backend.submit, chat)
    if future is None:
        return await run_in_threadpool(backend.complete, chat)
    waiting = asyncio.wrap_future(future)
    while not (await asyncio.wait({waiting}, timeout=DISCONNECT_POLL_S))[0]:
        if await request.is_disconnected():
            future.cancel()
            return None
    return waiting.result()


def parse_request(body: Any) -> ChatRequest:
    """A ChatRequest from a decoded JSON body; raises RequestError naming the bad field."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    unsupported = sorted(set(body) - PARAMETERS)
    if unsupported:
        raise RequestError(f"parameter {unsupported[0]!r} is not supported; supported: "
                           f"{', '.join(sorted(PARAMETERS))}")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("'model' must be a non-empty string")
    if body.get("stream"):
        raise RequestError("'stream' is not supported; send stream=false")
    if body.get("n", 1) != 1:
        raise RequestError("'n' must be 1")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else stop
    if not isinstance(stop, list | tuple) or not all(isinstance(s, str) for s in stop):
        raise RequestError("'stop' must be a string or a list of strings")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return ChatRequest(
        model=model,
        messages=_messages(body.get("messages")),
        tools=_tools(body.get("tools") or []),
        temperature=_number(body, "temperature"),
        top_p=_number(body, "top_p"),
        max_tokens=_integer("max_completion_tokens", max_tokens),
        seed=_integer("seed", body.get("seed")),
        stop=tuple(stop),
        body=body,
    )


def completion_body(model: str, reply: ChatReply) -> dict[str, Any]:
    """The ``chat.completion`` JSON object for ``reply``."""
    message = assistant_message(reply.content, reply.tool_calls)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason,
                     "logprobs": None}],
        "usage": {"prompt_tokens": reply.prompt_tokens,
                  "completion_tokens": reply.completion_tokens,
                  "total_tokens": reply.prompt_tokens + reply.completion_tokens},
    }


def error_response(status: int, message: str,
                   kind: str = "invalid_request_error") -> JSONResponse:
    """An OpenAI-style error object with HTTP ``status``."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": None,
                                   "code": None}}, status_code=status)


def _messages(messages: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise RequestError(f"messages[{i}] must be an object with a role in {sorted(ROLES)}")
    return tuple(messages)


def _tools(tools: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(tools, list):
        raise RequestError("'tools' must be a list")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not (isinstance(function, dict) and tool.get("type") == "function"
                and isinstance(function.get("name"), str)):
            raise RequestError(f"tools[{i}] must be {{'type': 'function', 'function': "
                               f"{{'name': ..., 'parameters': ...}}}}")
    return tuple(tools)


def _number(body: Mapping[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"{key!r} must be a number")
    return float(value)


def _integer(key: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{key!r} must be an integer")
    return value
