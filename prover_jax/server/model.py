"""A local Qwen (a Hugging Face folder or a run directory) behind the OpenAI-compatible server.

``ModelBackend(path)`` renders each request's messages and tools with the checkpoint's chat
template, samples with the project's sampler, and parses Qwen's ``<tool_call>`` blocks into
OpenAI tool calls (a reply whose blocks do not parse is returned as text).

Batching. Requests wait in a bounded queue; one worker thread takes the oldest and every other
waiting request it can share a `generate` call with (the same temperature and top-p, no seed), up
to ``max_batch`` rows, so a judge, a critic and several simulated users asking at once are
answered by one batched decode. A full queue answers 503 with ``Retry-After``; a client that
disconnects frees its place at once. A request with a ``seed`` runs alone, its key drawn from
the seed, so the same request and seed give the same reply. Shapes are bucketed (rows and prompt
lengths to powers of two, the token budget to the next of `TOKEN_BUCKETS`), so a server compiles
a handful of programs, not one per request.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import queue
import re
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from models.qwen import kv_cache
from models.qwen.sampler import generate, sampling_params
from prover_jax import runs
from prover_jax.batch import bucket
from prover_jax.server.backend import Backend, BackendError, ChatReply, ChatRequest, ToolCall

TOKEN_BUCKETS = (16, 64, 256, 1024, 4096)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> tuple[str | None, tuple[ToolCall, ...]]:
    """(content, tool calls) of a Qwen reply: every ``<tool_call>{"name", "arguments"}
    </tool_call>`` block as a ToolCall, the text around them as content (None if empty). A
    block that is not such a JSON object leaves the whole reply as content, with no calls."""
    calls = []
    for block in _TOOL_CALL.findall(text):
        try:
            call = json.loads(block)
        except (ValueError, RecursionError):
            return text, ()
        if not (isinstance(call, dict) and isinstance(call.get("name"), str)):
            return text, ()
        arguments = call.get("arguments", {})
        calls.append(ToolCall(f"call_{uuid.uuid4().hex[:24]}", call["name"],
                              arguments if isinstance(arguments, str)
                              else json.dumps(arguments)))
    if not calls:
        return text, ()
    rest = _TOOL_CALL.sub("", text).strip()
    return rest or None, tuple(calls)


def _text(content: Any) -> str:
    """A message's content as the template's string (OpenAI also sends lists of text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise BackendError(400, f"message content of type {type(content).__name__} is not "
                            "supported")


@dataclasses.dataclass
class _Job:
    request: ChatRequest
    prompt: list[int]
    max_tokens: int
    reply: concurrent.futures.Future

    @property
    def knobs(self) -> tuple[float, float]:
        return (1.0 if self.request.temperature is None else self.request.temperature,
                1.0 if self.request.top_p is None else self.request.top_p)


class ModelBackend(Backend):
    """A local model answering chat completions, batched (see the module docstring).

    Args:
      path: a Hugging Face model folder or a run directory (`prover_jax.runs.load`).
      name: the model name `GET /v1/models` lists (default: the folder's name); requests
        may name any model.
      max_batch: most rows in one `generate` call.
      queue_capacity: most requests queued or being decoded; one more is a 503.
      default_max_tokens: the budget of a request that sets none.
      context: most prompt + completion tokens (default: the model's positions).
    """

    def __init__(self, path: str | Path, name: str | None = None, max_batch: int = 8,
                 queue_capacity: int = 64, default_max_tokens: int = 256,
                 context: int | None = None):
        self.cfg, params, self.tokenizer = runs.load(path)
        self.params = sampling_params(params, self.cfg)
        self.name = name or Path(path).name
        self.max_batch, self.default_max_tokens = max_batch, default_max_tokens
        self.context = context or self.cfg.max_position_embeddings
        self.pad_id = self.tokenizer.pad_token_id or 0
        ends = {self.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
        self._stops = {i for i in ends if isinstance(i, int) and i >= 0}
        self.stop_ids = jnp.asarray(sorted(self._stops), jnp.int32)
        self.generate_calls = 0  # batched decodes run so far (for tests and benchmarks)
        self._slots = threading.Semaphore(queue_capacity)  # requests queued or decoding
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._worker = threading.Thread(target=self._serve, daemon=True, name="model-backend")
        self._worker.start()

    def models(self) -> list[str]:
        return [self.name]

    def complete(self, request: ChatRequest) -> ChatReply:
        return self.submit(request).result()

    def submit(self, request: ChatRequest) -> concurrent.futures.Future:
        """Queues `request`; the future of its ChatReply. Cancelling the future (a client that
        went away) frees its place in the queue at once and its row is never decoded.

        Raises:
          BackendError: 400 for a request that cannot fit the context, 503 when the queue is
            full.
        """
        job = _Job(request, self.prompt_ids(request),
                   request.max_tokens or self.default_max_tokens, concurrent.futures.Future())
        if job.max_tokens < 1:
            raise BackendError(400, "max_tokens must be >= 1")
        if len(job.prompt) + job.max_tokens > self.context:
            raise BackendError(400, f"the prompt ({len(job.prompt)} tokens) and max_tokens "
                                    f"({job.max_tokens}) exceed the context of "
                                    f"{self.context} tokens")
        if not self._slots.acquire(blocking=False):
            raise BackendError(503, "the server is at capacity; retry shortly",
                               headers={"Retry-After": "1"})
        job.reply.add_done_callback(lambda _: self._slots.release())  # done or cancelled
        self._queue.put(job)
        return job.reply

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        """The rendered prompt's token ids, generation prompt included."""
        messages = [{**m, "content": _text(m.get("content"))} for m in request.messages]
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=list(request.tools) or None, add_generation_prompt=True,
                tokenize=False)
        except Exception as e:  # the template rejects the conversation (e.g. a missing field)
            raise BackendError(400, f"the chat template cannot render the messages: {e}") from e
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def warm_up(self, request: ChatRequest) -> None:
        """Compiles the decode of `request`'s prompt and budget bucket at every row bucket up
        to ``max_batch``, so that serving such requests later compiles nothing."""
        job = _Job(request, self.prompt_ids(request),
                   request.max_tokens or self.default_max_tokens, concurrent.futures.Future())
        rows = 1
        while rows <= bucket(self.max_batch):
            self.decode([job] * rows)
            rows *= 2

    def close(self) -> None:
        """Stops the worker after the requests already queued."""
        self._queue.put(None)
        self._worker.join()

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs, waiting = [first], []
            while first.request.seed is None and len(jobs) < self.max_batch:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    waiting.append(job)
                    break
                compatible = job.request.seed is None and job.knobs == first.knobs
                (jobs if compatible else waiting).append(job)
            for job in waiting:  # back in line, for the next call
                self._queue.put(job)
            jobs = [job for job in jobs if job.reply.set_running_or_notify_cancel()]
            if jobs:  # unless every client went away
                self._run(jobs)

    def _run(self, jobs: Sequence[_Job]) -> None:
        try:
            replies = self.decode(jobs)
        except Exception as e:  # a failed decode answers its requests, the server goes on
            for job in jobs:
                job.reply.set_exception(BackendError(500, f"the model failed: {e}"))
            return
        for job, reply in zip(jobs, replies):
            job.reply.set_result(reply)

    def decode(self, jobs: Sequence[_Job]) -> list[ChatReply]:
        """One batched `generate` over the jobs' prompts (rows and lengths bucketed)."""
        rows = bucket(len(jobs))
        length = bucket(max(len(j.prompt) for j in jobs))
        budget = max(j.max_tokens for j in jobs)
        max_tokens = next((b for b in TOKEN_BUCKETS if b >= budget), bucket(budget))
        tokens = np.full((rows, length), self.pad_id, np.int32)
        positions = np.full((rows, length), -1, np.int32)  # -1: padding, and idle rows
        for row, job in enumerate(jobs):
            tokens[row, length - len(job.prompt):] = job.prompt
            positions[row, length - len(job.prompt):] = np.arange(len(job.prompt))
        temperature, top_p = jobs[0].knobs
        seed = jobs[0].request.seed
        key = jax.random.key(seed if seed is not None else self.generate_calls)
        out = generate(self.params, self.cfg, jnp.asarray(tokens), jnp.asarray(positions),
                       kv_cache.empty(self.cfg, rows, length + max_tokens), key,
                       max_tokens=max_tokens, max_new_tokens=jnp.int32(budget),
                       stop_tokens=self.stop_ids, temperature=jnp.float32(temperature),
                       top_p=jnp.float32(top_p), pad_id=self.pad_id)
        self.generate_calls += 1
        sampled, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
        return [self._reply(job, sampled[row, : lengths[row]]) for row, job in enumerate(jobs)]

    def _reply(self, job: _Job, ids: np.ndarray) -> ChatReply:
        ids = ids[: job.max_tokens]
        stopped = len(ids) > 0 and int(ids[-1]) in self._stops
        text = self.tokenizer.decode(ids[:-1] if stopped else ids, skip_special_tokens=False)
        for stop in job.request.stop:
            if stop in text:
                text, stopped = text[: text.index(stop)], True
        content, calls = parse_tool_calls(text)
        finish = "tool_calls" if calls else ("stop" if stopped else "length")
        return ChatReply(content, calls, finish, len(job.prompt), len(ids))
