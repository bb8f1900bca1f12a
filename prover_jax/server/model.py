"""A local Qwen (a Hugging Face folder or a run directory) behind the OpenAI-compatible server.

``ModelBackend(path)`` renders each request's messages and tools with the checkpoint's chat
template (with the backend's ``template_kwargs`` and the request's ``chat_template_kwargs`` over
them), samples with the project's sampler, and parses Qwen's ``<tool_call>`` blocks (either form
`models.qwen.chat.parse_call` reads) into OpenAI tool calls. It serves one model, ``name``: a
request naming another is a 404.

Batching. Requests wait in a bounded queue; one worker thread takes the oldest and every other
waiting request it can share a batch with (the same temperature and top-p, no seed), up to
``max_batch`` rows: a request for ``n`` choices takes n rows, its prompt placed in each. So a
judge, a critic and several simulated users asking at once are answered by one batched decode.
A full queue answers 503 with ``Retry-After``. A request with a ``seed`` runs alone, its rows'
keys drawn from the seed and the choice's index, so the same request and seed give the same
choices. Shapes are bucketed (rows and prompt lengths to powers of two, the token budget to the
next of `TOKEN_BUCKETS`), so a server compiles a handful of programs, not one per request.

Streaming. A batch is decoded in chunks that continue one KV cache (`generate` with
``write_last=False``: each chunk's last token is the next chunk's one-token prompt): the first
chunk is the prefill and one token, each later one `CHUNK_TOKENS` tokens. After each chunk the
new tokens of every row are detokenised and sent on, so the first token reaches a streaming
client after the prefill, whatever its ``max_tokens``. Every request is decoded this way, streamed
or not, so a streamed reply's text and tool calls are exactly the non-streamed reply's for the same
seed (the server assembles the latter from the same pieces). Text that may still become a
``<tool_call>`` block, a stop string or a whole UTF-8 character is held back until it is decided;
a block that parses is sent as one whole tool call, one that does not stays text. Whitespace
touching a parsed block is dropped (what Qwen writes around its calls). A row ends at a stop
token, at a stop string, at its budget, or when its client goes away: a cancelled request's rows
are idle in the next chunk (nothing sampled for them; `abandoned_rows` counts them) and the
batch ends when no row is left. A request that arrives meanwhile joins the running batch at the
next chunk where it can (`joins` counts them): in rows that finished or were spare, with the
batch's temperature and top-p, no seed, and no top log-probs or penalties the batch's program
lacks. Its prompt is prefilled into those rows (`kv_cache.prefill_rows`) while the other rows
keep their cache, which is compacted and grown as the rows need; it decodes token for token
what it would alone. Other requests wait for the next batch.

Log-probs and penalties. ``logprobs`` are those of the distribution each token was drawn from,
before top-p truncation: softmax((logits - penalties) / temperature), temperature 0 read as 1
(the sampler's own log-probs, what an RL learner uses as the behaviour policy);
``top_logprobs`` lists that distribution's most likely tokens. Every token generated is listed
except a final end-of-turn token. ``presence_penalty`` and ``frequency_penalty`` follow
OpenAI's definitions over the tokens the choice generated so far, inside the decode loop
(`models.qwen.sampler.Penalties`); the sampler's extra work (counts, top-k) is compiled in only
for batches that ask for it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import queue
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tokenizers
from transformers.convert_slow_tokenizer import bytes_to_unicode

from models.qwen import kv_cache
from models.qwen.chat import ParsedCall, call_prefix, check_template_arguments, parse_call
from models.qwen.sampler import Penalties, generate, sampling_params
from prover_jax import runs
from prover_jax.batch import bucket
from prover_jax.server.backend import (
    Backend,
    BackendError,
    ChatReply,
    ChatRequest,
    Delta,
    ReplyStream,
    TokenLogprob,
    ToolCall,
)

TOKEN_BUCKETS = (16, 64, 256, 1024, 4096)
CHUNK_TOKENS = 16  # tokens per decode chunk after the first: a host sync and a send per chunk
TOP_LOGPROBS = 20  # alternatives the sampler computes when any row asks (one program)
OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BYTES = {char: byte for byte, char in bytes_to_unicode().items()}


def split_reply(text: str, final: bool = True) -> tuple[str, list[ParsedCall]]:
    """(content, calls) of a Qwen reply, or of the part of one decoded so far.

    Every ``<tool_call>`` block that `parse_call` reads is a call; the text around the blocks is
    the content, less the whitespace touching a parsed block; a block that does not parse stays
    in the content as written. With ``final`` false the text may still grow, and only what is
    decided is returned: the content stops before an unclosed block, before an ending that may
    start one, and before trailing whitespace (a block may follow). The content and calls of a
    longer text then start with these.
    """
    content, calls = [], []
    position, after_call = 0, False
    while True:
        start = text.find(OPEN, position)
        end = text.find(CLOSE, start + len(OPEN)) if start >= 0 else -1
        if end < 0:  # no more whole blocks
            tail = text[position:]
            if not final:
                tail = tail[: start - position] if start >= 0 else tail[: len(tail) - _partial(
                    tail, OPEN)]
                tail = tail.rstrip()
            content.append(tail.lstrip() if after_call else tail)
            return "".join(content), calls
        call = parse_call(text[start + len(OPEN): end])
        before = text[position: start if call is not None else end + len(CLOSE)]
        before = before.lstrip() if after_call else before
        if call is None:
            content.append(before)
        else:
            content.append(before.rstrip())
            calls.append(call)
        position, after_call = end + len(CLOSE), call is not None


def parse_tool_calls(text: str, tools: Sequence[Mapping[str, Any]] = ()
                     ) -> tuple[str | None, tuple[ToolCall, ...]]:
    """(content, tool calls) of a whole Qwen reply (`split_reply`): content None when it is
    empty beside calls; arguments typed by `tools`' schemas (`tool_call`)."""
    content, calls = split_reply(text)
    return (content or None) if calls else content, tuple(tool_call(c, tools) for c in calls)


def tool_call(call: ParsedCall, tools: Sequence[Mapping[str, Any]] = ()) -> ToolCall:
    """The OpenAI tool call of a parsed one, its arguments as JSON text. Qwen3.5 writes every
    argument as text (``<parameter=k>3</parameter>``): a text argument whose schema in the
    request's `tools` is not a string is read as JSON (3, true, [1, 2]), else kept as text."""
    if isinstance(call.arguments, str):
        return ToolCall(f"call_{uuid.uuid4().hex[:24]}", call.name, call.arguments)
    schema = next((t["function"].get("parameters") or {} for t in tools
                   if t["function"]["name"] == call.name), {})
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    typed = {}
    for key, value in call.arguments.items():
        spec = properties.get(key) if isinstance(properties, Mapping) else None
        kind = spec.get("type", "string") if isinstance(spec, Mapping) else "string"
        typed[key] = _json_or_text(value) if isinstance(value, str) and kind != "string" else value
    return ToolCall(f"call_{uuid.uuid4().hex[:24]}", call.name, json.dumps(typed))


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def _partial(text: str, word: str) -> int:
    """Length of the longest proper prefix of `word` that `text` ends with."""
    for k in range(min(len(word) - 1, len(text)), 0, -1):
        if text.endswith(word[:k]):
            return k
    return 0


def _text(content: Any) -> str:
    """A message's content as the template's string (OpenAI also sends lists of text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise BackendError(400, f"message content of type {type(content).__name__} is not "
                            "supported", param="messages")


@dataclasses.dataclass
class _Job:
    request: ChatRequest
    prompt: list[int]
    max_tokens: int
    stream: ReplyStream
    forced: str = ""  # the start of a required call, at the prompt's end (`call_prefix`)

    @property
    def knobs(self) -> tuple[float, float]:
        return (1.0 if self.request.temperature is None else self.request.temperature,
                1.0 if self.request.top_p is None else self.request.top_p)


class _Choice:
    """One row of a batch: its tokens so far, and what of them was sent on."""

    def __init__(self, backend: ModelBackend, job: _Job, index: int):
        self.backend, self.job, self.index = backend, job, index
        self.ids: list[int] = []
        self.logprobs: list[TokenLogprob] = []
        self.sent, self.calls, self.listed = "", 0, 0
        self.done = False

    def feed(self, ids: Sequence[int], logprobs: Sequence[float], top_ids, top_logprobs
             ) -> Delta:
        """Takes a chunk's new tokens (and their log-probs); the piece of the reply they
        decide. Marks the choice done at its end."""
        request, backend = self.job.request, self.backend
        ids = list(ids[: self.job.max_tokens - len(self.ids)])
        if request.logprobs:
            k = request.top_logprobs if top_ids is not None else 0
            self.logprobs += [backend.token_logprob(t, lp, top_ids[i, :k] if k else (),
                                                    top_logprobs[i, :k] if k else ())
                              for i, (t, lp) in enumerate(zip(ids, logprobs))]
        self.ids += ids
        stopped = bool(self.ids) and self.ids[-1] in backend.stop_set
        final = stopped or len(self.ids) >= self.job.max_tokens
        text = self.job.forced + backend.tokenizer.decode(self.ids[:-1] if stopped else self.ids,
                                                          skip_special_tokens=False)
        cuts = [text.find(s) for s in request.stop if s in text]
        if cuts:
            text, stopped, final = text[: min(cuts)], True, True
        if not final:  # a stop string or a UTF-8 character may still be completing
            text = text[: len(text) - max((_partial(text, s) for s in request.stop), default=0)]
            text = text.rstrip("\ufffd")
        content, calls = (text, []) if request.tool_choice == "none" else split_reply(text, final)
        new = content[len(self.sent):] if content.startswith(self.sent) or final else ""
        self.sent += new
        listed = len(self.ids) - (1 if stopped and self.ids[-1] in backend.stop_set else 0)
        delta = Delta(self.index, new, tuple(tool_call(c, request.tools)
                                             for c in calls[self.calls:]),
                      tuple(self.logprobs[self.listed: listed]), None, len(ids))
        self.calls, self.listed = len(calls), max(self.listed, listed)
        if final:
            self.done = True
            finish = "tool_calls" if calls else ("stop" if stopped else "length")
            delta = dataclasses.replace(delta, finish_reason=finish)
        return delta


class ModelBackend(Backend):
    """A local model answering chat completions, batched and streamed (see the module
    docstring).

    Args:
      path: a Hugging Face model folder or a run directory (`prover_jax.runs.load`).
      name: the model name it serves and `GET /v1/models` lists (default: the folder's name).
      max_batch: most rows in one `generate` call (and the largest ``n``).
      queue_capacity: most requests queued or being decoded; one more is a 503.
      default_max_tokens: the budget of a request that sets none.
      context: most prompt + completion tokens (default: the model's positions).
      template_kwargs: default arguments of the chat template (e.g. ``{"enable_thinking":
        False}``), over those of the chat setting stored with the model (`runs.stored_chat`:
        what it was trained with); a request's ``chat_template_kwargs`` go over them.
      join: whether a request that arrives during a batch may join it (False: it waits for
        the next batch).

    Raises:
      ValueError: a template argument the model's chat template does not read.
    """

    def __init__(self, path: str | Path, name: str | None = None, max_batch: int = 8,
                 queue_capacity: int = 64, default_max_tokens: int = 256,
                 context: int | None = None, template_kwargs: Mapping[str, Any] | None = None,
                 join: bool = True):
        self.cfg, params, self.tokenizer = runs.load(path)
        stored = runs.stored_chat(path)
        self.template_kwargs = {**(stored.template if stored else {}), **(template_kwargs or {})}
        check_template_arguments(self.tokenizer, self.template_kwargs)
        self.params = sampling_params(params, self.cfg)
        self.name = name or Path(path).name
        self.max_batch, self.default_max_tokens = max_batch, default_max_tokens
        self.join = join
        self.max_choices = max_batch
        self.context = context or self.cfg.max_position_embeddings
        self.pad_id = self.tokenizer.pad_token_id or 0
        ends = {self.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
        self.stop_set = frozenset(i for i in ends if isinstance(i, int) and i >= 0)
        self.stop_ids = jnp.asarray(sorted(self.stop_set), jnp.int32)
        self._pieces: dict[int, tuple[str, tuple[int, ...]]] = {}
        self._byte_level = isinstance(self.tokenizer.backend_tokenizer.decoder,
                                      tokenizers.decoders.ByteLevel)
        self.generate_calls = 0  # sampler calls (decode chunks) run so far
        self.batches = 0  # batches decoded so far
        self.joins = 0  # requests that joined a running batch
        self.abandoned_rows = 0  # rows stopped because their client went away
        self._slots = threading.Semaphore(queue_capacity)  # requests queued or decoding
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._worker = threading.Thread(target=self._serve, daemon=True, name="model-backend")
        self._worker.start()

    def models(self) -> list[str]:
        return [self.name]

    def complete(self, request: ChatRequest) -> ChatReply:
        """The first choice, whole (for callers in Python; the server streams)."""
        stream = self.stream(request)
        finished = threading.Event()
        stream.on_close(finished.set)
        finished.wait()
        items, _, error = stream.drain()
        if error is not None:
            raise error
        ours = [d for d in items if d.index == 0]
        text = "".join(d.content for d in ours)
        calls = tuple(c for d in ours for c in d.tool_calls)
        return ChatReply((text or None) if calls else text, calls, ours[-1].finish_reason,
                         stream.prompt_tokens, sum(d.completion_tokens for d in ours),
                         tuple(t for d in ours for t in d.logprobs))

    def stream(self, request: ChatRequest) -> ReplyStream:
        """Queues `request`; its reply fills the returned stream as it is decoded. Cancelling
        the stream (a client that went away) frees its place in the queue at once; a queued
        request is then never decoded, a running one's rows stop at the next chunk.

        Raises:
          BackendError: 400 for a request that cannot fit the context or names a template
            argument the template does not read, 503 when the queue is full.
        """
        job = self.job(request)
        if not self._slots.acquire(blocking=False):
            raise BackendError(503, "the server is at capacity; retry shortly",
                               headers={"Retry-After": "1"})
        job.stream.on_close(self._slots.release)  # finished or cancelled
        self._queue.put(job)
        return job.stream

    def job(self, request: ChatRequest) -> _Job:
        """The request's prompt and budget, checked against the context."""
        prompt, forced = self.prompt_ids(request)
        job = _Job(request, prompt, request.max_tokens or self.default_max_tokens,
                   ReplyStream(len(prompt)), forced)
        if job.max_tokens < 1:
            raise BackendError(400, "max_tokens must be >= 1", param="max_tokens")
        if len(job.prompt) + job.max_tokens > self.context:
            raise BackendError(400, f"the prompt ({len(job.prompt)} tokens) and max_tokens "
                                    f"({job.max_tokens}) exceed the context of "
                                    f"{self.context} tokens", param="messages")
        return job

    def prompt_ids(self, request: ChatRequest) -> tuple[list[int], str]:
        """The rendered prompt's token ids, generation prompt included, and what the reply is
        made to start with: nothing, or for ``tool_choice="required"`` the template's opening
        of a call (of ``request.function`` if named, `call_prefix`), whose tokens end the
        prompt. With ``tool_choice="none"`` the tools are not rendered."""
        try:
            check_template_arguments(self.tokenizer, request.template_kwargs)
        except ValueError as e:
            raise BackendError(400, str(e), param="chat_template_kwargs") from e
        messages = [{**m, "content": _text(m.get("content"))} for m in request.messages]
        tools = [] if request.tool_choice == "none" else list(request.tools)
        arguments = {**self.template_kwargs, **request.template_kwargs}
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=tools or None, add_generation_prompt=True, tokenize=False,
                **arguments)
            forced = (call_prefix(self.tokenizer, messages, tools, request.function, **arguments)
                      if request.tool_choice == "required" else "")
        except Exception as e:  # the template rejects the conversation (e.g. a missing field)
            raise BackendError(400, f"the chat template cannot render the messages: {e}",
                               param="messages") from e
        return self.tokenizer(text + forced, add_special_tokens=False)["input_ids"], forced

    def token_logprob(self, token: int, logprob: float, top_ids: Sequence[int],
                      top_logprobs: Sequence[float]) -> TokenLogprob:
        """A token's TokenLogprob, with alternatives."""
        def entry(t: int, lp: float, top: tuple[TokenLogprob, ...] = ()) -> TokenLogprob:
            text, raw = self._piece(int(t))
            return TokenLogprob(text, float(lp), raw, top)

        return entry(token, logprob, tuple(map(entry, top_ids, top_logprobs)))

    def _piece(self, token: int) -> tuple[str, tuple[int, ...]]:
        """A token's text and UTF-8 bytes (a byte-level piece may hold part of a character;
        its text then has U+FFFD where the rest is missing)."""
        if token not in self._pieces:
            self._pieces[token] = self._read_piece(token)
        return self._pieces[token]

    def _read_piece(self, token: int) -> tuple[str, tuple[int, ...]]:
        piece = self.tokenizer.convert_ids_to_tokens(token)
        if self._byte_level and token not in self.tokenizer.added_tokens_decoder and all(
                c in _BYTES for c in piece):
            raw = bytes(_BYTES[c] for c in piece)
        else:
            raw = self.tokenizer.decode([token], skip_special_tokens=False).encode()
        return raw.decode("utf-8", errors="replace"), tuple(raw)

    def warm_up(self, request: ChatRequest) -> None:
        """Compiles the decode of `request`'s prompt and budget bucket at every row bucket up
        to ``max_batch``, so that serving such requests later compiles nothing."""
        rows = 1
        while rows <= bucket(self.max_batch):
            self.decode([self.job(request) for _ in range(rows)])
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
            rows = first.request.n
            while first.request.seed is None and rows < self.max_batch:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    waiting.append(job)
                    break
                compatible = (job.request.seed is None and job.knobs == first.knobs
                              and rows + job.request.n <= self.max_batch)
                (jobs if compatible else waiting).append(job)
                rows += job.request.n if compatible else 0
            for job in waiting:  # back in line, for the next call
                self._queue.put(job)
            jobs = [job for job in jobs if not job.stream.cancelled]
            if jobs:  # unless every client went away
                self._run(jobs)

    def _run(self, jobs: Sequence[_Job]) -> None:
        try:
            self.decode(jobs)
        except Exception as e:  # a failed decode answers its requests, the server goes on
            for job in jobs:
                job.stream.finish(BackendError(500, f"the model failed: {e}"))

    def decode(self, jobs: Sequence[_Job]) -> None:
        """Decodes the jobs' choices as one batch, chunk by chunk, putting each chunk's pieces
        into the jobs' streams and finishing them (rows and lengths bucketed). Between chunks,
        waiting requests the batch can take (`_joining`) join it in the rows that finished
        or were spare: their prompts are prefilled into those rows while the other rows keep
        their place."""
        choices = [_Choice(self, job, i) for job in jobs for i in range(job.request.n)]
        rows = bucket(len(choices))
        length = bucket(max(len(j.prompt) for j in jobs))
        budget = max(j.max_tokens for j in jobs)
        slots = length + next((b for b in TOKEN_BUCKETS if b >= budget), bucket(budget))
        tokens = np.full((rows, length), self.pad_id, np.int32)
        positions = np.full((rows, length), -1, np.int32)  # -1: padding, and idle rows
        for row, choice in enumerate(choices):
            prompt = choice.job.prompt
            tokens[row, length - len(prompt):] = prompt
            positions[row, length - len(prompt):] = np.arange(len(prompt))
        knobs = jobs[0].knobs
        temperature, top_p = knobs
        keys = self._row_keys(choices, rows)
        penalties = self._penalties(choices, rows)
        top = (min(TOP_LOGPROBS, self.cfg.vocab_size)
               if any(c.job.request.top_logprobs for c in choices) else 0)
        cache = kv_cache.empty(self.cfg, rows, slots)
        self.batches += 1
        table: list[_Choice | None] = [*choices, *[None] * (rows - len(choices))]
        offsets = np.zeros(rows, np.int32)  # tokens each row's choice decoded: its keys' place
        first, chunk = True, 1
        while True:
            # numpy scalars: no eager JAX op per call (the host's share of a chunk matters)
            out = generate(self.params, self.cfg, tokens, positions, cache,
                           _chunk_keys(keys, offsets),
                           max_tokens=1 if first else CHUNK_TOKENS,
                           max_new_tokens=np.int32(chunk),
                           stop_tokens=self.stop_ids, temperature=np.float32(temperature),
                           top_p=np.float32(top_p), pad_id=self.pad_id, penalties=penalties,
                           top_logprobs=top, write_last=False)
            self.generate_calls += 1
            first = False
            cache = out.cache
            if penalties is not None:
                penalties = penalties._replace(counts=out.counts)
            ids, logprobs, lengths, following, top_ids, top_lps = jax.device_get(
                (out.tokens, out.logprobs, out.lengths, out.next_positions, out.top_tokens,
                 out.top_logprobs))
            offsets += lengths
            for row, choice in enumerate(table):
                if choice is None or choice.done:
                    continue
                if choice.job.stream.cancelled:  # the client went away: the row stops
                    choice.done = True
                    self.abandoned_rows += 1
                    continue
                n = lengths[row]
                choice.job.stream.put(choice.feed(
                    ids[row, :n].tolist(), logprobs[row, :n].tolist(),
                    None if top_ids is None else top_ids[row, :n],
                    None if top_lps is None else top_lps[row, :n]))
            held = {id(c.job): c.job for c in table if c is not None}
            for job in held.values():
                if all(c.done for c in table if c is not None and c.job is job):
                    job.stream.finish()  # once: a finished stream ignores it
            tokens = np.full((rows, 1), self.pad_id, np.int32)
            positions = np.full((rows, 1), -1, np.int32)
            for row, choice in enumerate(table):  # the last token, not in the cache, goes next
                if choice is not None and not choice.done:
                    tokens[row, 0] = ids[row, lengths[row] - 1]
                    positions[row, 0] = following[row] - 1
            free = [row for row, c in enumerate(table) if c is None or c.done]
            joining = (self._joining(len(free), knobs, top, penalties is not None)
                       if self.join else [])
            if joining:
                self.joins += len(joining)
                joined = [_Choice(self, job, i) for job in joining for i in range(job.request.n)]
                at = free[: len(joined)]
                cache = self._prefill(cache, joined, at, tokens, positions)
                keys = self._joined_keys(keys, at)
                penalties = self._joined_penalties(penalties, joined, at)
                for row, choice in zip(at, joined):
                    table[row] = choice
                    offsets[row] = 0
            live = [row for row, c in enumerate(table) if c is not None and not c.done]
            if not live:
                return
            remaining = max(table[r].job.max_tokens - len(table[r].ids) for r in live)
            chunk = min(CHUNK_TOKENS, remaining)
            cache = kv_cache.with_room(cache, 1 + CHUNK_TOKENS)

    def _joining(self, free: int, knobs: tuple[float, float], top: int, penalties: bool
                 ) -> list[_Job]:
        """Waiting requests a running batch can take into `free` rows: unseeded, with its
        temperature and top-p, and no top log-probs or penalties its program lacks; the
        others go back in line, in order."""
        taken, back = [], []
        while free:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:  # closing: the worker sees it after this batch
                back.append(job)
                break
            request = job.request
            fits = (request.seed is None and job.knobs == knobs and request.n <= free
                    and (top or not request.top_logprobs)
                    and (penalties or not (request.presence_penalty
                                           or request.frequency_penalty)))
            if job.stream.cancelled:
                continue
            if fits:
                taken.append(job)
                free -= request.n
            else:
                back.append(job)
        for job in back:
            self._queue.put(job)
        return taken

    def _prefill(self, cache, joined: Sequence[_Choice], at: Sequence[int], tokens: np.ndarray,
                 positions: np.ndarray):
        """The cache with rows `at` emptied and each joined choice's prompt but its last
        token prefilled into its row (distinct prompts once); the last token goes in `tokens`
        and `positions` [rows, 1] for the next chunk, like a continuing row's."""
        rows = cache.valid.shape[0]
        cache = kv_cache.reset_rows(cache, np.isin(np.arange(rows), at))
        heads = {tuple(c.job.prompt[:-1]): None for c in joined if len(c.job.prompt) > 1}
        if heads:
            index = {head: i for i, head in enumerate(heads)}
            length = bucket(max(map(len, heads)))
            cache = kv_cache.with_room(cache, length + 1 + CHUNK_TOKENS)
            head_tokens = np.full((bucket(len(heads)), length), self.pad_id, np.int32)
            head_positions = np.full(head_tokens.shape, -1, np.int32)
            for head, i in index.items():
                head_tokens[i, length - len(head):] = head
                head_positions[i, length - len(head):] = np.arange(len(head))
            sources = np.full(rows, -1, np.int32)
            for row, choice in zip(at, joined):
                sources[row] = index.get(tuple(choice.job.prompt[:-1]), -1)
            cache = kv_cache.prefill_rows(self.params, self.cfg, cache, head_tokens,
                                          head_positions, sources)
        for row, choice in zip(at, joined):
            tokens[row, 0] = choice.job.prompt[-1]
            positions[row, 0] = len(choice.job.prompt) - 1
        return cache

    def _joined_keys(self, keys: jax.Array, at: Sequence[int]) -> jax.Array:
        """The rows' keys with rows `at` given new ones (from the count of joins so far)."""
        fresh = _split_keys(np.uint32((self.batches + (self.joins << 16)) % 2**32), len(at))
        return keys.at[np.asarray(at)].set(fresh)

    def _joined_penalties(self, penalties: Penalties | None, joined: Sequence[_Choice],
                          at: Sequence[int]) -> Penalties | None:
        """The batch's penalties with rows `at` taken by the joined choices (no tokens counted
        yet)."""
        if penalties is None:
            return None
        rows = np.asarray(at)
        presence, frequency = np.array(penalties.presence), np.array(penalties.frequency)
        presence[rows] = [c.job.request.presence_penalty for c in joined]
        frequency[rows] = [c.job.request.frequency_penalty for c in joined]
        counts = jnp.asarray(penalties.counts).at[rows].set(0)
        return Penalties(counts, presence, frequency)

    def _row_keys(self, choices: Sequence[_Choice], rows: int) -> jax.Array:
        """One key per row: a seeded request's choice i from (seed, i), else from the batch's
        count."""
        seed = choices[0].job.request.seed
        if seed is None:
            return _split_keys(np.uint32(self.batches % 2**32), rows)
        return _seeded_keys(np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32 & 0xFFFFFFFF),
                            rows)

    def _penalties(self, choices: Sequence[_Choice], rows: int) -> Penalties | None:
        """Presence and frequency penalties per row (zero counts), or None when no row has
        any (the sampler then compiles without them)."""
        presence = np.zeros(rows, np.float32)
        frequency = np.zeros(rows, np.float32)
        for row, choice in enumerate(choices):
            presence[row] = choice.job.request.presence_penalty
            frequency[row] = choice.job.request.frequency_penalty
        if not (presence.any() or frequency.any()):
            return None
        return Penalties(np.zeros((rows, self.cfg.vocab_size), np.int32), presence, frequency)


@jax.jit
def _chunk_keys(keys: jax.Array, offsets: jax.Array) -> jax.Array:
    """The rows' keys for a chunk starting at each row's token `offsets` [rows] (the sampler
    folds in the column within the chunk)."""
    return jax.vmap(jax.random.fold_in)(keys, offsets)


@functools.partial(jax.jit, static_argnums=1)
def _split_keys(seed: jax.Array, rows: int) -> jax.Array:
    """`rows` keys split from the key of `seed`."""
    return jax.random.split(jax.random.key(seed), rows)


@functools.partial(jax.jit, static_argnums=2)
def _seeded_keys(low: jax.Array, high: jax.Array, rows: int) -> jax.Array:
    """Row i's key: the key of a 64-bit seed (its two 32-bit halves) folded with i, so choice i
    of a seeded request is the same in any number of rows."""
    key = jax.random.fold_in(jax.random.key(low), high)
    return jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(rows))
