"""The backend interface behind the OpenAI-compatible server.

A backend turns one parsed chat-completions request into a reply of ``n`` choices. The server
does all the HTTP and JSON work (parsing, validation, response shapes, server-sent events, ids,
usage totals); a backend sees only plain values:

* :class:`ChatRequest` — the model name, the messages and tool definitions exactly as the client
  sent them (OpenAI chat format: dicts with ``role``, ``content``, ``tool_calls``,
  ``tool_call_id``), the sampling parameters, and the whole JSON body for anything else.
* :class:`ReplyStream` — what a backend answers with: :class:`Delta` pieces of each choice
  (text, whole tool calls, token log-probs, at last a finish reason) as the backend produces
  them, then its end. The server reads it as it fills: a streamed request (``stream=true``)
  sends each piece on at once as a ``chat.completion.chunk``, another request is answered with
  the pieces put together. A client that goes away cancels the stream, which the backend sees
  (`ReplyStream.cancelled`) and can stop working for.
* :class:`ChatReply` — one whole choice (assistant text and/or tool calls, the finish reason, the
  token counts the backend measured), for backends that answer at once.

A simple backend implements :meth:`Backend.complete`, one choice at a time; the default
:meth:`Backend.stream` calls it once per choice and hands the replies over whole. A backend that
produces text as it goes (a model decoding in chunks) overrides `stream`. Either raises
:class:`BackendError` to answer with an HTTP error status before the reply starts.
The server calls both from worker threads, possibly concurrently.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

FinishReason = Literal["stop", "length", "tool_calls"]


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One function call the assistant makes; ``arguments`` is JSON text (possibly malformed)."""

    id: str
    name: str
    arguments: str


@dataclasses.dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its text, log-probability, UTF-8 bytes, and the most likely
    alternatives at its step (each a TokenLogprob without alternatives of its own)."""

    token: str
    logprob: float
    bytes: tuple[int, ...]
    top: tuple[TokenLogprob, ...] = ()


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
      model: the requested model name (one the backend serves).
      messages: the conversation, OpenAI chat format, as sent.
      tools: tool definitions (``{"type": "function", "function": {...}}``), as sent.
      tool_choice: "auto" (the model decides), "none" (no call: the tools are not offered and
        the reply is text) or "required" (the reply starts inside a call).
      function: with "required", the function the call must name (OpenAI's named tool choice);
        None lets the model name one.
      temperature, top_p: sampling parameters (None: the backend's default).
      max_tokens: completion-length cap (``max_completion_tokens`` or ``max_tokens``).
      seed: sampling seed, if the client gave one.
      stop: stop strings.
      n: choices to generate.
      stream: the client reads the reply as server-sent events.
      include_usage: a streamed reply ends with a usage chunk (``stream_options``).
      logprobs: return each token's log-probability; top_logprobs: with that many alternatives.
      presence_penalty, frequency_penalty: OpenAI's penalties, in [-2, 2].
      template_kwargs: arguments for the chat template (``chat_template_kwargs``).
      body: the whole JSON request body.
    """

    model: str
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: Literal["auto", "none", "required"] = "auto"
    function: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    template_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    body: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ChatReply:
    """One choice of the reply to a request, with the backend's token counts."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: FinishReason = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Delta:
    """The next piece of choice ``index``: text, whole tool calls, the log-probs of the tokens
    it adds, and the finish reason on the choice's last piece. ``completion_tokens`` counts the
    tokens the piece accounts for (for usage)."""

    index: int
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()
    finish_reason: FinishReason | None = None
    completion_tokens: int = 0


class BackendError(Exception):
    """Answer the request with HTTP ``status``.

    ``body`` replaces the OpenAI-style JSON error object with raw text sent as
    ``content_type`` (to test clients against broken servers); ``headers`` go with either;
    ``param`` names the request parameter at fault (the error object's ``param``).
    """

    def __init__(self, status: int, message: str, body: str | None = None,
                 content_type: str = "text/plain", headers: Mapping[str, str] | None = None,
                 param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body
        self.content_type = content_type
        self.headers = dict(headers or {})  # e.g. Retry-After on a 503
        self.param = param


class ReplyStream:
    """The pieces of one reply as a backend produces them; thread-safe.

    The backend (the producer) calls `put` for each :class:`Delta` and `finish` once, with the
    error that cut the reply short if one did. The server (the consumer) calls `drain` when
    `wake` tells it something arrived, and `cancel` when its client went away. Callbacks given
    to `on_close` run once, at the first of `finish` and `cancel` (a backend frees the
    request's place in its queue there).
    """

    def __init__(self, prompt_tokens: int = 0):
        self.prompt_tokens = prompt_tokens
        self._lock = threading.Lock()
        self._items: collections.deque[Delta] = collections.deque()
        self._finished = False
        self._error: BaseException | None = None
        self._cancelled = False
        self._closed = False
        self._on_close: list[Callable[[], None]] = []
        self._wake: Callable[[], None] | None = None

    @property
    def cancelled(self) -> bool:
        """The client went away: nobody reads the rest."""
        return self._cancelled

    def put(self, delta: Delta) -> None:
        with self._lock:
            self._items.append(delta)
            wake = self._wake
        if wake is not None:
            wake()

    def finish(self, error: BaseException | None = None) -> None:
        """Ends the reply (with `error`, which the server reports, if it failed)."""
        with self._lock:
            if self._finished:
                return
            self._finished, self._error = True, error
            wake = self._wake
        if wake is not None:
            wake()
        self._close()

    def cancel(self) -> None:
        self._cancelled = True
        self._close()

    def on_close(self, callback: Callable[[], None]) -> None:
        with self._lock:
            closed = self._closed
            if not closed:
                self._on_close.append(callback)
        if closed:
            callback()

    def set_wake(self, wake: Callable[[], None]) -> None:
        """`wake()` is called (from the producer's thread) whenever a piece or the end
        arrives."""
        with self._lock:
            self._wake = wake

    def drain(self) -> tuple[list[Delta], bool, BaseException | None]:
        """(the pieces that arrived since the last call, whether the reply ended, its
        error)."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
            return items, self._finished, self._error

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            callback()


def reply_deltas(index: int, reply: ChatReply) -> list[Delta]:
    """A whole choice as the pieces of a stream: its text and calls, then its end."""
    return [Delta(index, reply.content or "", reply.tool_calls, reply.logprobs or ()),
            Delta(index, finish_reason=reply.finish_reason,
                  completion_tokens=reply.completion_tokens)]


class Backend(abc.ABC):
    """Something that answers chat-completions requests."""

    max_choices = 16  # the largest n a request may ask for

    @abc.abstractmethod
    def models(self) -> list[str]:
        """The model names ``GET /v1/models`` lists; a request naming another is a 404."""

    @abc.abstractmethod
    def complete(self, request: ChatRequest) -> ChatReply:
        """One choice of the reply to `request`; raises BackendError to answer with an HTTP
        error."""

    def stream(self, request: ChatRequest) -> ReplyStream:
        """The reply to `request` (all ``n`` choices) as a stream. The default calls `complete`
        once per choice, and the stream is whole when this returns; a backend that produces
        its reply piece by piece returns at once and fills the stream as it goes."""
        replies = [self.complete(request) for _ in range(request.n)]
        stream = ReplyStream(replies[0].prompt_tokens)
        for index, reply in enumerate(replies):
            for delta in reply_deltas(index, reply):
                stream.put(delta)
        stream.finish()
        return stream
