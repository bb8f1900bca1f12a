"""A backend that replays a script: deterministic LLM behaviour for tests and demos.

Each request consumes the next reply of the script, whatever it asks: plain text (a JSON final
answer, malformed JSON, garbage), tool calls (with arguments that may be malformed JSON), or an
HTTP failure (a status with an OpenAI error object, or any raw body). Any reply can be
delayed, to exercise client timeouts. A request after the script ran out gets HTTP 500. A
request for ``n`` choices consumes ``n`` replies, one per choice (and is recorded once per
choice); a streamed request gets each reply whole, as one content delta and one delta per tool
call (`Backend.stream`). Scripted replies carry no log-probs (``logprobs`` is then null).

The backend serves one model, ``model`` (default ``"scripted"``): that is what ``/v1/models``
lists and the name a client must send, as with a real server; another name is a 404, so a test
or a judge's config that names the wrong model fails as it would against a real endpoint.

Every request and every reply sent is recorded, so tests can check what a client sent (for
example that no hidden environment state reached the judge) and what usage it was told.
Token counts are whitespace-separated words: of the JSON of the messages and tools for the
prompt, of the content and the tool calls for the completion.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from prover_jax.server.backend import Backend, BackendError, ChatReply, ChatRequest, ToolCall


@dataclasses.dataclass(frozen=True)
class Text:
    """An assistant message with ``content`` and no tool call."""

    content: str
    delay_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Call:
    """One tool call; a string ``arguments`` is sent verbatim (it may be malformed JSON)."""

    name: str
    arguments: Mapping[str, Any] | str

    def text(self) -> str:
        """The arguments as the JSON text the client receives."""
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclasses.dataclass(frozen=True)
class Calls:
    """An assistant message with tool calls (and optional text)."""

    calls: tuple[Call, ...]
    content: str | None = None
    delay_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Fail:
    """An HTTP error: an OpenAI error object, or the raw ``body`` as ``content_type``."""

    status: int = 500
    message: str = "scripted failure"
    body: str | None = None
    content_type: str = "text/plain"
    delay_s: float = 0.0


Reply = Text | Calls | Fail


def count_words(text: str) -> int:
    """The scripted backend's token count: whitespace-separated words."""
    return len(text.split())


class ScriptedBackend(Backend):
    """Replays ``replies`` in order, one per request; thread-safe.

    Attributes:
      requests: every request received, in order.
      sent: every successful reply sent, in order.
    """

    def __init__(self, replies: Iterable[Reply], model: str = "scripted"):
        self.model = model
        self.requests: list[ChatRequest] = []
        self.sent: list[ChatReply] = []
        self._script = list(replies)
        self._lock = threading.Lock()
        self._calls = 0

    @property
    def remaining(self) -> int:
        """Replies not yet used."""
        return len(self._script)

    def models(self) -> list[str]:
        return [self.model]

    def complete(self, request: ChatRequest) -> ChatReply:
        with self._lock:
            self.requests.append(request)
            if not self._script:
                raise BackendError(500, "the script has no reply left")
            reply = self._script.pop(0)
            first_id = self._calls
            if isinstance(reply, Calls):
                self._calls += len(reply.calls)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if isinstance(reply, Fail):
            raise BackendError(reply.status, reply.message, reply.body, reply.content_type)
        chat = self._reply(request, reply, first_id)
        with self._lock:
            self.sent.append(chat)
        return chat

    def _reply(self, request: ChatRequest, reply: Text | Calls, first_id: int) -> ChatReply:
        prompt = count_words(json.dumps([list(request.messages), list(request.tools)]))
        if isinstance(reply, Text):
            return ChatReply(reply.content, (), "stop", prompt, count_words(reply.content))
        calls = tuple(ToolCall(f"call_{first_id + i}", c.name, c.text())
                      for i, c in enumerate(reply.calls))
        completion = count_words(reply.content or "") + sum(
            count_words(f"{c.name} {c.arguments}") for c in calls)
        return ChatReply(reply.content, calls, "tool_calls", prompt, completion)
