"""The chat-completions client shared by the agentic judge and the CriticSearch critic.

Both reach an OpenAI-compatible endpoint through the ``openai`` client. Settings come from the
config, else from ``PROVER_JUDGE_BASE_URL``, ``PROVER_JUDGE_MODEL`` and ``PROVER_JUDGE_API_KEY``
(the critic uses the same LLM as the judge, as in the ProVer paper). Local servers ignore the
API key, so none is needed.

Every failure of a call (timeout, connection error, HTTP error, a body that is not a chat
completion) becomes an :class:`LLMError` with a one-line reason; callers turn it into "no
credit". A call's ``timeout_s`` bounds all of it, the body included (an endpoint that drips a
byte at a time is cut at the deadline). The client does not retry by default: a retried call
would spend the wall-time cap of a judge that has a whole group to skip to; ``max_retries``
retries connection errors, 429 and 5xx within the same deadline.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import openai

from prover_jax.server.backend import ToolCall, assistant_message

ENV_BASE_URL = "PROVER_JUDGE_BASE_URL"
ENV_MODEL = "PROVER_JUDGE_MODEL"
ENV_API_KEY = "PROVER_JUDGE_API_KEY"
NO_API_KEY = "unused"  # the openai client insists on some key
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
# The model cannot be reached (worth another try within the deadline): no connection, a
# timeout, 429 and 5xx.
_UNREACHABLE = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)


@dataclasses.dataclass(frozen=True)
class LLMConfig:
    """How to reach the LLM; None fields fall back to the environment variables."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = dataclasses.field(default=None, repr=False)  # never printed
    timeout_s: float = 60.0  # one request
    max_retries: int = 0
    temperature: float | None = None
    max_completion_tokens: int | None = None
    # Sent as the request's chat_template_kwargs (e.g. {"enable_thinking": False} for a Qwen
    # judge); None sends none, as an OpenAI endpoint expects. A judge this project serves from
    # a model folder uses the folder's stored chat setting without it.
    chat_template_kwargs: Mapping[str, Any] | None = None
    prompt_token_price: float = 0.0  # cost per prompt token
    completion_token_price: float = 0.0  # cost per completion token

    def __post_init__(self):
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")


@dataclasses.dataclass(frozen=True)
class Usage:
    """Tokens and cost of LLM calls, added up."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens,
                     self.completion_tokens + other.completion_tokens, self.cost + other.cost)


@dataclasses.dataclass(frozen=True)
class Reply:
    """The assistant message of one completion, as plain values."""

    content: str | None
    tool_calls: tuple[ToolCall, ...]
    usage: Usage

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        return assistant_message(self.content, self.tool_calls)


class LLMError(Exception):
    """A call that produced no usable reply; the message says why. ``unreachable``: the model
    could not be reached in time (no connection, a timeout, HTTP 429 or 5xx), as opposed to a
    reply that was unusable."""

    def __init__(self, message: str, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable


class AnswerError(ValueError):
    """An LLM answer that breaks its schema; the message says how."""


class LLM:
    """A configured chat-completions client.

    Raises:
      ValueError: when no base URL or model is configured.
    """

    def __init__(self, config: LLMConfig):
        base_url = config.base_url or os.environ.get(ENV_BASE_URL)
        model = config.model or os.environ.get(ENV_MODEL)
        if not base_url:
            raise ValueError(f"no LLM base_url: set it in the config or ${ENV_BASE_URL}")
        if not model:
            raise ValueError(f"no LLM model: set it in the config or ${ENV_MODEL}")
        self.config = config
        self.model = model
        self._client = openai.OpenAI(  # retries are chat's, within its deadline
            base_url=base_url, api_key=config.api_key or os.environ.get(ENV_API_KEY) or NO_API_KEY,
            max_retries=0, timeout=config.timeout_s)

    def chat(self, messages: Sequence[Mapping[str, Any]],
             tools: Sequence[Mapping[str, Any]] = (), timeout_s: float | None = None) -> Reply:
        """One completion of ``messages``, within ``timeout_s`` in all: connecting, every
        retry (``max_retries``) and reading the whole body. (The HTTP client's own timeouts
        are per read, so an endpoint that drips a byte at a time would hold it for ever.)

        Args:
          messages: the conversation in OpenAI chat format.
          tools: tool definitions (none: a plain completion).
          timeout_s: this call's time limit (default: the config's ``timeout_s``).

        Raises:
          LLMError: the call failed, ran out of time, or the body was not a chat completion.
        """
        timeout = self.config.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            try:
                return self._chat_once(messages, tools, timeout, deadline)
            except LLMError as error:
                attempt += 1
                if (not error.unreachable or attempt > self.config.max_retries
                        or time.monotonic() >= deadline):
                    raise

    def _chat_once(self, messages, tools, timeout: float, deadline: float) -> Reply:
        options: dict[str, Any] = {"tools": list(tools)} if tools else {}
        if self.config.temperature is not None:
            options["temperature"] = self.config.temperature
        if self.config.max_completion_tokens is not None:
            options["max_completion_tokens"] = self.config.max_completion_tokens
        if self.config.chat_template_kwargs is not None:
            options["extra_body"] = {"chat_template_kwargs": dict(self.config.chat_template_kwargs)}
        late = LLMError(f"the LLM request timed out after {timeout:.1f} s", unreachable=True)
        try:
            with self._client.chat.completions.with_streaming_response.create(
                    model=self.model, messages=list(messages),
                    timeout=max(deadline - time.monotonic(), 1e-3), **options) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if time.monotonic() > deadline:
                        raise late
                content_type = response.headers.get("content-type", "")
        except openai.APITimeoutError as e:
            raise late from e
        except openai.APIStatusError as e:
            raise LLMError(f"the LLM endpoint answered HTTP {e.status_code}: "
                           f"{_first_line(_error_detail(e))}",
                           unreachable=isinstance(e, _UNREACHABLE)) from e
        except openai.APIError as e:
            raise LLMError(f"the LLM request failed: {type(e).__name__}: "
                           f"{_first_line(str(e))}",
                           unreachable=isinstance(e, _UNREACHABLE)) from e
        text = body.decode("utf-8", errors="replace")
        try:
            completion = json.loads(text)
        except (ValueError, RecursionError) as e:
            if "json" in content_type:
                raise LLMError(f"the LLM endpoint sent an unreadable body: "
                               f"{type(e).__name__}: {_first_line(str(e))}") from None
            raise LLMError(f"the LLM endpoint did not answer a chat completion: "
                           f"{_first_line(text)}") from None
        if not isinstance(completion, dict):
            raise LLMError(f"the LLM endpoint did not answer a chat completion: "
                           f"{_first_line(text)}")
        return parse_completion(completion, self.config)


def parse_completion(body: Mapping[str, Any], config: LLMConfig) -> Reply:
    """The first choice's message and the usage of a chat-completion JSON body.

    Only what the callers use is required: ``choices[0].message`` with string-or-null
    ``content`` and well-formed function ``tool_calls``. Missing or malformed ``usage`` counts
    as zero tokens.

    Raises:
      LLMError: naming what is malformed.
    """
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise LLMError("malformed chat completion: no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise LLMError("malformed chat completion: choices[0] has no message")
    content = message.get("content")
    calls = message.get("tool_calls") or []
    if not isinstance(content, str | None) or not isinstance(calls, list):
        raise LLMError("malformed chat completion: bad message content or tool_calls")
    return Reply(content, tuple(_tool_call(c) for c in calls), _usage(body.get("usage"), config))


def _tool_call(call: Any) -> ToolCall:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise LLMError("malformed chat completion: a tool call has no function")
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise LLMError("malformed chat completion: a tool call lacks a name or arguments")
    return ToolCall(str(call.get("id") or ""), name, arguments)


def _usage(usage: Any, config: LLMConfig) -> Usage:
    usage = usage if isinstance(usage, dict) else {}
    prompt, completion = (_count(usage.get(k)) for k in ("prompt_tokens", "completion_tokens"))
    return Usage(prompt, completion, prompt * config.prompt_token_price
                 + completion * config.completion_token_price)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _error_detail(error: openai.APIStatusError) -> str:
    """The server's own message: an OpenAI error object's ``message``, else the body text."""
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return body if isinstance(body, str) else error.message


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "(empty)"
    return line[:limit]


@dataclasses.dataclass
class Session:
    """One conversation's spend under a wall-time cap: LLM calls, tool calls, tokens, cost."""

    llm: LLM
    max_wall_s: float
    started: float = dataclasses.field(default_factory=time.perf_counter)
    rounds: int = 0
    tool_calls: int = 0
    usage: Usage = Usage()

    def chat(self, messages: Sequence[Mapping[str, Any]],
             tools: Sequence[Mapping[str, Any]] = ()) -> Reply:
        """One completion, its timeout cut to what is left of the cap; raises LLMError."""
        left = self.max_wall_s - self.wall_s
        if left <= 0:
            raise LLMError(f"the wall-time cap of {self.max_wall_s:g} s was reached")
        self.rounds += 1
        reply = self.llm.chat(messages, tools, min(self.llm.config.timeout_s, left))
        self.usage += reply.usage
        return reply

    @property
    def wall_s(self) -> float:
        """Seconds since the session started."""
        return time.perf_counter() - self.started

    def spend(self) -> dict[str, Any]:
        """LLM calls, tokens, cost and wall time, named as Proposal's and CriticLabels' fields."""
        return {"rounds": self.rounds, "prompt_tokens": self.usage.prompt_tokens,
                "completion_tokens": self.usage.completion_tokens, "cost": self.usage.cost,
                "wall_s": self.wall_s}


def json_object(text: str) -> dict[str, Any]:
    """The JSON object in an LLM's answer: inside a code fence if there is one, else from the
    first ``{`` to the last ``}``.

    Raises:
      AnswerError: when there is no object or it is not valid JSON.
    """
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced else text
    first, last = body.find("{"), body.rfind("}")
    if first < 0 or last < first:
        raise AnswerError("the answer contains no JSON object")
    try:
        return json.loads(body[first:last + 1])
    except json.JSONDecodeError as e:
        raise AnswerError(f"the answer is not valid JSON ({e.msg})") from None
    except RecursionError:
        raise AnswerError("the answer's JSON is nested too deeply") from None
