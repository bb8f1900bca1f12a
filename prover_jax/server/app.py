"""The OpenAI-compatible HTTP application: request validation and response shapes.

Routes: ``POST /v1/chat/completions``, ``GET /v1/models`` and ``GET /v1/models/{model}``.

- **Validation.** A malformed request, one with a parameter outside `PARAMETERS` or a value out
  of OpenAI's range (temperature in [0, 2], top_p in (0, 1], penalties in [-2, 2], n from 1 to
  the backend's `max_choices`, top_logprobs in [0, 20] and only with logprobs) gets HTTP 400
  with an OpenAI error object whose message and ``param`` name the parameter as the client
  spelt it (``max_tokens`` or ``max_completion_tokens``). A model the backend does not serve is
  a 404 (``code: "model_not_found"``) naming the ones it does. ``tool_choice`` is "auto",
  "none", "required" or a named function, which must be one of ``tools`` (a 400 otherwise);
  the backend honours it (`backend.ChatRequest`).
- **Replies.** The backend answers with a
  :class:`~prover_jax.server.backend.ReplyStream`. With ``stream: true`` each piece goes on at
  once as server-sent events in the ``chat.completion.chunk`` format: every choice's first
  chunk carries its role, then content deltas, tool-call deltas (``index``, ``id``, ``type``,
  ``function.name`` and ``function.arguments``, each call whole), log-probs beside the tokens
  they belong to, a chunk with the finish reason, a usage chunk when
  ``stream_options.include_usage`` asks, and ``data: [DONE]``. Otherwise the pieces are put
  together into one ``chat.completion``. Either way the choices' text and calls are the same.
- **Errors.** A :class:`~prover_jax.server.backend.BackendError` before the reply starts gets
  its own status, any other backend exception a 500 with its message; one that cuts a stream
  short ends it with an ``error`` event.
- **Clients that leave.** The backend works in other threads, so a slow reply never blocks
  other requests; a client that disconnects cancels its stream, and the backend stops working
  for it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from prover_jax.server.backend import (
    Backend,
    BackendError,
    ChatRequest,
    Delta,
    ReplyStream,
    TokenLogprob,
    ToolCall,
    assistant_message,
)

DISCONNECT_POLL_S = 0.1  # how often a waiting request checks that its client is still there
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
MAX_TOP_LOGPROBS = 20  # OpenAI's limit
# What a request may set; anything else (response_format, logit_bias, ...) is a 400 naming it,
# rather than silently ignored.
PARAMETERS = frozenset({"model", "messages", "tools", "tool_choice", "temperature", "top_p",
                        "max_tokens", "max_completion_tokens", "stop", "seed", "n", "stream",
                        "stream_options", "logprobs", "top_logprobs", "presence_penalty",
                        "frequency_penalty", "chat_template_kwargs", "user",
                        "parallel_tool_calls"})


class RequestError(ValueError):
    """A request the server rejects with HTTP 400, naming the parameter at fault."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def create_app(backend: Backend) -> Starlette:
    """The Starlette application serving ``backend``."""

    async def chat_completions(request: Request) -> Response:
        try:
            chat = parse_request(json.loads(await request.body()), backend.max_choices)
        except RequestError as e:
            return error_response(400, f"invalid request: {e}", param=e.param)
        except (ValueError, RecursionError) as e:  # undecodable JSON or text
            return error_response(400, f"invalid request: {e}")
        if chat.model not in backend.models():
            return unserved(chat.model, backend.models())
        try:
            stream = await run_in_threadpool(backend.stream, chat)
            reader = _Reader(stream, request)
            if not chat.stream:
                return await _completion(chat, reader)
            first = await reader.next()  # an early failure is still an HTTP status
        except BackendError as e:
            return backend_error_response(e)
        except Exception as e:  # a backend bug answers this request; the server goes on
            return error_response(500, f"the backend failed: {type(e).__name__}: {e}",
                                  "server_error")
        if first is None:
            return Response(status_code=499)
        return StreamingResponse(_events(chat, reader, first), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    async def models(request: Request) -> Response:
        del request
        return JSONResponse({"object": "list", "data": [model_object(name)
                                                         for name in backend.models()]})

    async def model(request: Request) -> Response:
        name = request.path_params["model"]
        if name not in backend.models():
            return unserved(name, backend.models())
        return JSONResponse(model_object(name))

    return Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
    ])


def unserved(name: str, served: list[str]) -> JSONResponse:
    """The 404 for a model the backend does not serve, naming the ones it does."""
    return error_response(404, f"the model {name!r} is not served here; this server serves "
                               f"{', '.join(map(repr, served))}", param="model",
                          code="model_not_found")


def model_object(name: str) -> dict[str, Any]:
    """OpenAI's model object for a model the backend serves."""
    return {"id": name, "object": "model", "created": 0, "owned_by": "prover_jax"}


class _End:
    """The reply ended (no more pieces)."""


END = _End()


class _Reader:
    """Reads a ReplyStream from the event loop: waits for pieces without a thread, checks
    every `DISCONNECT_POLL_S` that the client is still there (while `poll` is true), and
    cancels the stream when it is not.

    Once a streamed response has started, Starlette itself listens for the disconnect and
    cancels the task that iterates the events; `poll` is then turned off, so that only one
    reader waits on the connection's messages."""

    def __init__(self, stream: ReplyStream, request: Request):
        self.stream, self.request = stream, request
        self.poll = True
        self.prompt_tokens = stream.prompt_tokens
        self._ready = asyncio.Event()
        loop = asyncio.get_running_loop()
        stream.set_wake(lambda: loop.call_soon_threadsafe(self._ready.set))

    async def next(self) -> list[Delta] | _End | None:
        """The pieces that arrived (at least one), END, or None once the client left (the
        stream is then cancelled). Raises the error that cut the reply short."""
        while True:
            self._ready.clear()
            items, finished, error = self.stream.drain()
            if items:
                return items
            if finished:
                if error is not None:
                    raise error
                return END
            if not self.poll:
                await self._ready.wait()
                continue
            try:
                await asyncio.wait_for(self._ready.wait(), DISCONNECT_POLL_S)
            except TimeoutError:
                if await self.request.is_disconnected():
                    self.stream.cancel()
                    return None

    def cancel(self) -> None:
        self.stream.cancel()


class _Choice:
    """One choice put together from its pieces."""

    def __init__(self):
        self.content: list[str] = []
        self.calls: list[ToolCall] = []
        self.logprobs: list[TokenLogprob] = []
        self.finish_reason = "stop"
        self.completion_tokens = 0

    def add(self, delta: Delta) -> None:
        self.content.append(delta.content)
        self.calls.extend(delta.tool_calls)
        self.logprobs.extend(delta.logprobs)
        self.finish_reason = delta.finish_reason or self.finish_reason
        self.completion_tokens += delta.completion_tokens

    def text(self) -> str | None:
        text = "".join(self.content)
        return None if not text and self.calls else text


async def _completion(chat: ChatRequest, reader: _Reader) -> Response:
    """The whole ``chat.completion`` of a request that does not stream."""
    choices = [_Choice() for _ in range(chat.n)]
    while True:
        items = await reader.next()
        if items is None:
            return Response(status_code=499)  # the client went away; nobody reads an answer
        if items is END:
            break
        for delta in items:
            choices[delta.index].add(delta)
    completion = sum(c.completion_tokens for c in choices)
    return JSONResponse({
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": chat.model,
        "choices": [{"index": i, "message": assistant_message(c.text(), c.calls),
                     "finish_reason": c.finish_reason,
                     "logprobs": ({"content": [_logprob(t) for t in c.logprobs]}
                                  if chat.logprobs else None)}
                    for i, c in enumerate(choices)],
        "usage": _usage(reader.prompt_tokens, completion),
    })


async def _events(chat: ChatRequest, reader: _Reader, first: list[Delta] | _End
                  ) -> AsyncIterator[str]:
    """The server-sent events of a streamed reply, from its first pieces on."""
    header = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
              "created": int(time.time()), "model": chat.model}
    if chat.include_usage:
        header["usage"] = None

    def event(choices: list[dict], **extra) -> str:
        return f"data: {json.dumps({**header, 'choices': choices, **extra})}\n\n"

    def choice(index: int, delta: dict, logprobs=None, finish_reason=None) -> dict:
        return {"index": index, "delta": delta, "logprobs": logprobs,
                "finish_reason": finish_reason}

    calls = [0] * chat.n  # tool calls sent so far, per choice
    completion = 0
    items = first
    reader.poll = False
    try:
        for index in range(chat.n):
            yield event([choice(index, {"role": "assistant", "content": ""})])
        while items is not END:
            if items is None:
                return  # the client went away
            for d in items:
                completion += d.completion_tokens
                logprobs = ({"content": [_logprob(t) for t in d.logprobs]}
                            if chat.logprobs and d.logprobs else None)
                if d.content or logprobs:
                    yield event([choice(d.index, {"content": d.content} if d.content else {},
                                        logprobs)])
                for call in d.tool_calls:
                    yield event([choice(d.index, {"tool_calls": [{
                        "index": calls[d.index], "id": call.id, "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments}}]})])
                    calls[d.index] += 1
                if d.finish_reason:
                    yield event([choice(d.index, {}, finish_reason=d.finish_reason)])
            items = await reader.next()
    except BackendError as e:
        yield f"data: {json.dumps(_error(e.message, 'server_error', e.param))}\n\n"
        return
    except Exception as e:  # the status is sent: the error goes in the stream
        yield f"data: {json.dumps(_error(f'the backend failed: {e}', 'server_error'))}\n\n"
        return
    finally:
        reader.cancel()  # a no-op once the reply is whole; otherwise the client left
    if chat.include_usage:
        yield event([], usage=_usage(reader.prompt_tokens, completion))
    yield "data: [DONE]\n\n"


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _logprob(t: TokenLogprob) -> dict[str, Any]:
    return {"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes),
            "top_logprobs": [{"token": a.token, "logprob": a.logprob, "bytes": list(a.bytes)}
                             for a in t.top]}


def parse_request(body: Any, max_choices: int = 16) -> ChatRequest:
    """A ChatRequest from a decoded JSON body; raises RequestError naming the bad parameter.
    ``max_choices``: the largest n the backend serves."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    unsupported = sorted(set(body) - PARAMETERS)
    if unsupported:
        raise RequestError(f"parameter {unsupported[0]!r} is not supported; supported: "
                           f"{', '.join(sorted(PARAMETERS))}", unsupported[0])
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("'model' must be a non-empty string", "model")
    stop = body.get("stop")
    stop = () if stop is None else (stop,) if isinstance(stop, str) else stop
    if not isinstance(stop, list | tuple) or not all(isinstance(s, str) and s for s in stop):
        raise RequestError("'stop' must be a non-empty string or a list of them", "stop")
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is not None and not (isinstance(options, dict) and stream
                                    and set(options) <= {"include_usage"}):
        raise RequestError("'stream_options' must be {'include_usage': bool}, with stream=true",
                           "stream_options")
    logprobs = _flag(body, "logprobs")
    top_logprobs = _integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS) or 0
    if "top_logprobs" in body and body["top_logprobs"] is not None and not logprobs:
        raise RequestError("'top_logprobs' needs logprobs=true", "top_logprobs")
    max_tokens = _integer(body, "max_tokens", 1)
    max_completion_tokens = _integer(body, "max_completion_tokens", 1)
    template_kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(template_kwargs, dict):
        raise RequestError("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    n = _integer(body, "n", 1)
    if n is not None and n > max_choices:
        raise RequestError(f"'n' must be at most {max_choices} here", "n")
    tools = _tools(body.get("tools") or [])
    tool_choice, function = _tool_choice(body.get("tool_choice"), tools)
    return ChatRequest(
        model=model,
        messages=_messages(body.get("messages")),
        tools=tools,
        tool_choice=tool_choice,
        function=function,
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0, open_low=True),
        max_tokens=max_completion_tokens if max_completion_tokens is not None else max_tokens,
        seed=_integer(body, "seed"),
        stop=tuple(stop),
        n=1 if n is None else n,
        stream=stream,
        include_usage=bool((options or {}).get("include_usage")),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        presence_penalty=_number(body, "presence_penalty", -2.0, 2.0) or 0.0,
        frequency_penalty=_number(body, "frequency_penalty", -2.0, 2.0) or 0.0,
        template_kwargs=dict(template_kwargs),
        body=body,
    )


def _error(message: str, kind: str = "invalid_request_error", param: str | None = None,
           code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(status: int, message: str, kind: str = "invalid_request_error",
                   param: str | None = None, code: str | None = None) -> JSONResponse:
    """An OpenAI-style error object with HTTP ``status``."""
    return JSONResponse(_error(message, kind, param, code), status_code=status)


def backend_error_response(e: BackendError) -> Response:
    """The response of a BackendError: its raw body, or an OpenAI error object."""
    if e.body is not None:
        return Response(e.body, e.status, media_type=e.content_type, headers=e.headers)
    response = error_response(e.status, e.message, "server_error" if e.status >= 500
                              else "invalid_request_error", e.param)
    response.headers.update(e.headers)
    return response


def _messages(messages: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise RequestError(f"messages[{i}] must be an object with a role in "
                               f"{sorted(ROLES)}", "messages")
    return tuple(messages)


def _tools(tools: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(tools, list):
        raise RequestError("'tools' must be a list", "tools")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not (isinstance(function, dict) and tool.get("type") == "function"
                and isinstance(function.get("name"), str)):
            raise RequestError(f"tools[{i}] must be {{'type': 'function', 'function': "
                               f"{{'name': ..., 'parameters': ...}}}}", "tools")
    return tuple(tools)


def _tool_choice(value: Any, tools: tuple[Mapping[str, Any], ...]) -> tuple[str, str | None]:
    """(tool_choice, the function it names) of a request's ``tool_choice``: "auto" (also when
    absent), "none", "required", or ``{"type": "function", "function": {"name": NAME}}`` (read
    as "required" with NAME, which must be one of `tools`)."""
    names = [tool["function"]["name"] for tool in tools]
    if value is None or value in ("auto", "none"):
        return value or "auto", None
    if value == "required" and tools:
        return "required", None
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if value == "required" or (isinstance(name, str) and value.get("type") == "function"):
        if name not in names:
            wanted = "a tool call" if name is None else f"a call of {name!r}"
            raise RequestError(f"tool_choice asks for {wanted}, but 'tools' offers "
                               f"{', '.join(map(repr, names)) or 'none'}", "tool_choice")
        return "required", name
    raise RequestError("'tool_choice' must be 'auto', 'none', 'required' or {'type': "
                       "'function', 'function': {'name': ...}}", "tool_choice")


def _flag(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{key!r} must be a boolean", key)
    return bool(value)


def _number(body: Mapping[str, Any], key: str, low: float, high: float,
            open_low: bool = False) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"{key!r} must be a number", key)
    if value > high or value < low or (open_low and value == low):
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}]"
        raise RequestError(f"{key!r} must be in {interval}; got {value}", key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str, low: int | None = None,
             high: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{key!r} must be an integer", key)
    if (low is not None and value < low) or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise RequestError(f"{key!r} must be {bound}; got {value}", key)
    return value
