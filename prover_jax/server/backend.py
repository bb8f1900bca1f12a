"""The backend interface behind the OpenAI-compatible server.

A backend turns one parsed chat-completions request into one reply. The server does all the
HTTP and JSON work (parsing, validation, response shape, ids, usage totals); a backend sees
only plain values:

* :class:`ChatRequest` — the model name, the messages and tool definitions exactly as the client
  sent them (OpenAI chat format: dicts with ``role``, ``content``, ``tool_calls``,
  ``tool_call_id``), the sampling parameters, and the whole JSON body for anything else.
* :class:`ChatReply` — assistant text and/or tool calls, the finish reason, and the token counts
  the backend measured (a model backend counts tokenizer tokens).

A backend raises :class:`BackendError` to answer with an HTTP error status. The server calls
:meth:`Backend.complete` from worker threads, possibly concurrently: a backend that cannot serve
two requests at once (a model holding one KV cache) takes a lock. A JAX-model backend implements
``complete`` by rendering ``messages`` and ``tools`` with the chat template, sampling with the
request's parameters and parsing tool calls out of the generated text.
"""

from __future__ import annotations

import abc
import concurrent.futures
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

FinishReason = Literal["stop", "length", "tool_calls"]


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One function call the assistant makes; ``arguments`` is JSON text (possibly malformed)."""

    id: str
    name: str
    arguments: str


def assistant_message(content: str | None, tool_calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The OpenAI chat-format assistant message with these contents and tool calls."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in tool_calls]
    return message


@dataclasses.dataclass(frozen=True)
class ChatRequest:
    """A validated chat-completions request.

    Attributes:
      model: the requested model name.
      messages: the conversation, OpenAI chat format, as sent.
      tools: tool definitions (``{"type": "function", "function": {...}}``), as sent.
      temperature, top_p: sampling parameters (None: the backend's default).
      max_tokens: completion-length cap (``max_completion_tokens`` or ``max_tokens``).
      seed: sampling seed, if the client gave one.
      stop: stop strings.
      body: the whole JSON request body.
    """

    model: str
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...] = ()
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    body: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ChatReply:
    """The assistant's reply to one request, with the backend's token counts."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: FinishReason = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0


class BackendError(Exception):
    """Answer the request with HTTP ``status``.

    ``body`` replaces the OpenAI-style JSON error object with raw text sent as
    ``content_type`` (to test clients against broken servers); ``headers`` go with either.
    """

    def __init__(self, status: int, message: str, body: str | None = None,
                 content_type: str = "text/plain", headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body
        self.content_type = content_type
        self.headers = dict(headers or {})  # e.g. Retry-After on a 503


class Backend(abc.ABC):
    """Something that answers chat-completions requests."""

    @abc.abstractmethod
    def models(self) -> list[str]:
        """The model names ``GET /v1/models`` lists."""

    @abc.abstractmethod
    def complete(self, request: ChatRequest) -> ChatReply:
        """The reply to ``request``; raises BackendError to answer with an HTTP error."""

    def submit(self, request: ChatRequest) -> concurrent.futures.Future | None:
        """For a backend that queues requests: the future of the reply, which the server
        cancels when the client disconnects. None (the default): the server calls
        `complete` in a worker thread."""
        del request
        return None
