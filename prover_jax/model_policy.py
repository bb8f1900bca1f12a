"""A Qwen model as the rollout policy: token streams in, an ``act`` tool call out.

Every episode is one token stream (``Episode.stream``): the prompt (system, tools, task and
generation prompt, rendered with the checkpoint's chat template and tokenized once), then per
turn the reply exactly as sampled and the observation block that follows it
(`models.qwen.chat.AgentFormat`). Nothing is re-rendered or re-tokenized: what the learner
trains on is what the sampler read and wrote, and its log-probs are the learner's old ones.

The environment gets the reply's parsed action: the ``action`` argument of its first ``act``
tool call, or else the reply's text without thoughts (which the environment will usually
reject, as it should; the reply is still trained on as sampled).

The policy keeps one KV cache row per pool slot across turns. A row that already holds an
episode's stream prefills only the new context (the observation block); a row taking a new
episode, or a restored prefix (ProVer's and SPO's continuations), is emptied and prefills the
whole stream, once per distinct stream: the K continuations of one prefix, and the G episodes
of one task, share it. The cache holds the power of two of slots its rows need: it is compacted
and grown as they need more, and compacted and cut when ended episodes and padding leave it
larger (every decode step reads every slot). An episode whose stream would exceed
``max_context`` with a full reply is not continued: `run` ends it as truncated, with its
``overflow`` flag set.

Lengths are bucketed to powers of two, so a rollout compiles ``generate`` only a few times.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from envs.base import Task
from models.qwen import QwenConfig, chat, kv_cache
from models.qwen.chat import END_OF_TURN, AgentFormat
from models.qwen.sampler import generate, sampling_params
from prover_jax.batch import bucket
from prover_jax.rollout import Action, Episode, Policy
from prover_jax.settings import ChatConfig, SamplingConfig
from tpu.mesh import AXES, BATCH_AXES, cache_shardings, row_sharding

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def sampler_mesh(params) -> Mesh | None:
    """The `tpu.mesh` mesh the params are placed on (`tpu.mesh.to_sampler`), or None when they
    are on one device or another mesh."""
    sharding = getattr(jax.tree.leaves(params)[0], "sharding", None)
    if not isinstance(sharding, NamedSharding) or sharding.mesh.size == 1:
        return None
    return sharding.mesh if tuple(sharding.mesh.axis_names) == AXES else None


def parse_action(reply: str) -> str:
    """The ``action`` of the reply's first ``act`` tool call (in the JSON or the XML form,
    `chat.parse_call`), else its text without thoughts."""
    for block in chat.tool_call_blocks(reply):
        call = chat.parse_call(block)
        if call is None or call.name != "act" or not isinstance(call.arguments, dict):
            continue
        if isinstance(call.arguments.get("action"), str):
            return call.arguments["action"]
    return _THINK.sub("", reply).strip()


def next_context(agent_format: AgentFormat, episode: Episode) -> np.ndarray:
    """int32 [C] the tokens an episode's next reply reads after its stream so far: the prompt
    first, then the block after each reply (a prefix's recorded context, where it has one)."""
    if episode.next_context_ids:
        return np.asarray(episode.next_context_ids, np.int32)
    if not episode.actions:
        return agent_format.prompt(episode.observations[0])
    return agent_format.after_reply(episode.actions[-1].token_ids, episode.observations[-1])


def stream_ids(episode: Episode) -> np.ndarray:
    """int32 [L] the episode's token stream through its last reply ([0] without actions)."""
    if not episode.actions:
        return np.zeros(0, np.int32)
    return episode.stream().tokens


def stream_keys(rows: int, streams: dict[int, random.Random]) -> jax.Array:
    """A key array [rows] for `generate`: row r's key drawn from ``streams[r]`` (64 random
    bits), a fixed key for rows without a stream."""
    data = np.zeros((rows, 2), np.uint32)
    for row, stream in streams.items():
        data[row] = divmod(stream.getrandbits(64), 1 << 32)
    return jax.random.wrap_key_data(jnp.asarray(data), impl="threefry2x32")


@dataclasses.dataclass(frozen=True)
class _Held:
    """What one cache row holds: an episode's stream through the reply of its last action."""

    task: Task
    actions: tuple[Action, ...]
    length: int  # tokens of the stream

    def holds(self, episode: Episode) -> bool:
        return (self.task == episode.task and len(self.actions) == len(episode.actions)
                and all(a is b for a, b in zip(self.actions, episode.actions)))


@dataclasses.dataclass
class RolloutStats:
    """Counters of a policy's work since it was made."""

    prefilled: int = 0  # real (unpadded) context tokens written to the cache
    generated: int = 0  # sampled tokens
    calls: int = 0  # `generate` calls
    overflows: int = 0  # episodes ended because their stream would exceed max_context


class ModelPolicy(Policy):
    """Samples actions from a Qwen model (params on device, config, tokenizer).

    The params are laid out for sampling once, here (`sampling_params`: on CPU a per-layer
    copy of the weights), and the KV cache lives as long as the policy, so make one policy per
    weight update and drop it before training.

    Args:
      params, cfg: the model.
      tokenizer: a fast tokenizer with a ChatML chat template.
      system: the system prompt (the environment's instructions).
      sampling: SamplingConfig.
      chat: how the episode is written in the chat template (ChatConfig).

    Raises:
      ValueError: ``max_context`` beyond the model's ``max_position_embeddings``, or a
        tokenizer the stream cannot be cut from (see `AgentFormat`).
    """

    def __init__(self, params, cfg: QwenConfig, tokenizer, system: str,
                 sampling: SamplingConfig | None = None, chat: ChatConfig | None = None):
        self.sampling = sampling or SamplingConfig()
        self.params = sampling_params(
            jax.tree.map(lambda p: p.astype(self.sampling.dtype), params), cfg)
        self.mesh = sampler_mesh(params)
        self.cfg, self.tokenizer, self.system = cfg, tokenizer, system
        chat = chat or ChatConfig()
        self.format = AgentFormat(tokenizer, system, chat.reply, chat.template)
        self.max_context = self.sampling.max_context or cfg.max_position_embeddings
        if self.max_context > cfg.max_position_embeddings:
            raise ValueError(f"max_context={self.max_context} exceeds the model's "
                             f"max_position_embeddings={cfg.max_position_embeddings}")
        self.stop_tokens = jnp.array([self.format.end_of_turn], jnp.int32)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.format.end_of_turn
        self.stats = RolloutStats()
        self._cache: kv_cache.Cache | None = None
        self._held: list[_Held | None] = []

    @property
    def cache_slots(self) -> int:
        """Slots per row of the KV cache kept across turns (0 before the first call)."""
        return 0 if self._cache is None else int(self._cache.valid.shape[1])

    def context(self, episode: Episode) -> np.ndarray:
        """int32 [C] the tokens the episode's next reply reads after its stream so far."""
        return next_context(self.format, episode)

    def prompt(self, episode: Episode) -> np.ndarray:
        """int32 [P] everything the episode's next reply is sampled after."""
        return np.concatenate([stream_ids(episode), self.context(episode)])

    def act(self, episodes: Sequence[Episode], slots, pool, rngs: Sequence[random.Random]
            ) -> list[Action | None]:
        rows = pool.num_slots
        if self._cache is None or len(self._held) != rows:
            self._cache, self._held = None, [None] * rows
        reuse = self.sampling.reuse_cache
        contexts = [self.context(e) for e in episodes]
        new, starts, acting = {}, {}, []
        for episode, slot, context in zip(episodes, slots, contexts):
            held = self._held[slot]
            if reuse and held is not None and held.holds(episode):
                new[slot], starts[slot] = context, held.length
            else:
                new[slot], starts[slot] = np.concatenate([stream_ids(episode), context]), 0
            self._held[slot] = None
            if starts[slot] + len(new[slot]) + self.sampling.max_new_tokens > self.max_context:
                self.stats.overflows += 1
                continue
            acting.append(slot)
        if not acting:
            return [None] * len(episodes)
        continued = {s for s in acting if starts[s] > 0}
        emptied = [row for row in range(rows) if row not in continued]
        for row in emptied:
            self._held[row] = None
        streams = dict(zip(slots, rngs))
        sampled = self._sample(rows, new, starts, emptied if reuse else [],
                               {row: streams[row] for row in acting})
        actions = []
        for episode, slot, context in zip(episodes, slots, contexts):
            if slot not in sampled:
                actions.append(None)
                continue
            ids, logprobs = sampled[slot]
            reply = self.tokenizer.decode(ids, skip_special_tokens=False)
            text = parse_action(reply.removesuffix(END_OF_TURN))
            action = Action(text, tuple(ids), tuple(logprobs), tuple(context.tolist()))
            actions.append(action)
            self._held[slot] = _Held(episode.task, episode.actions + (action,),
                                     starts[slot] + len(new[slot]) + len(ids))
        return actions

    def _sample(self, rows: int, new: dict, starts: dict, emptied: list[int],
                acting: dict[int, random.Random]) -> dict[int, tuple[list[int], list[float]]]:
        """Prefills and samples one reply per acting row, each with a key drawn from the row's
        own stream (`acting`: row -> stream); {row: (ids, logprobs)}.

        `emptied` rows are emptied; those acting start a stream and prefill all of it but its
        last token through `kv_cache.prefill_rows`, once per distinct stream. Every acting row
        then feeds `generate` its remaining new tokens (a fresh row's last token, or the new
        context).
        """
        s = self.sampling
        fresh = [row for row in emptied if row in acting]
        distinct: dict[tuple[int, ...], int] = {}
        for row in fresh:
            distinct.setdefault(tuple(new[row][:-1].tolist()), len(distinct))
        distinct.pop((), None)
        tails = {row: new[row][-1:] if row in fresh else new[row] for row in acting}
        tail_len = bucket(max(len(t) for t in tails.values()), s.min_prompt_tokens)
        head_len = bucket(max((len(d) for d in distinct), default=1), s.min_prompt_tokens)
        head_len = head_len if distinct else 0
        if s.reuse_cache:
            kept = max((starts[row] for row in acting if row not in fresh), default=0)
            self._make_room(rows, emptied, kept, head_len + tail_len + s.max_new_tokens)
        else:
            self._cache = self._empty_cache(rows, tail_len + s.max_new_tokens)
        if distinct:
            self._prefill_shared(rows, distinct, new, fresh, head_len)
        tokens = np.full((rows, tail_len), self.pad_id, np.int32)
        positions = np.full((rows, tail_len), -1, np.int32)
        for row, tail in tails.items():
            begin = starts[row] + len(new[row]) - len(tail)
            tokens[row, tail_len - len(tail):] = tail
            positions[row, tail_len - len(tail):] = np.arange(begin, begin + len(tail))
        self.stats.prefilled += sum(map(len, distinct)) + sum(map(len, tails.values()))
        tokens, positions, keys = self._placed((tokens, positions, stream_keys(rows, acting)))
        out = generate(self.params, self.cfg, tokens, positions, self._cache, keys,
                       max_tokens=s.max_new_tokens, max_new_tokens=jnp.int32(s.max_new_tokens),
                       stop_tokens=self.stop_tokens, temperature=jnp.float32(s.temperature),
                       top_k=jnp.int32(s.top_k), top_p=jnp.float32(s.top_p), pad_id=self.pad_id)
        self._cache = out.cache
        ids, logprobs, lengths = jax.device_get((out.tokens, out.logprobs, out.lengths))
        self.stats.calls += 1
        self.stats.generated += int(lengths.sum())
        return {row: (ids[row, : lengths[row]].tolist(),
                      logprobs[row, : lengths[row]].tolist()) for row in acting}

    def _placed(self, arrays):
        """Device arrays of `arrays` [N, ...]; on a mesh, rows over its batch axes where they
        divide (as `tpu.compile` compiles the sampler)."""
        if self.mesh is None:
            return tuple(jnp.asarray(x) for x in arrays)
        shards = math.prod(self.mesh.shape[a] for a in BATCH_AXES)
        return tuple(jax.device_put(x, row_sharding(self.mesh)) if x.shape[0] % shards == 0
                     else jnp.asarray(x) for x in arrays)

    def _empty_cache(self, rows: int, slots: int) -> kv_cache.Cache:
        """An empty cache in the sampling dtype; on a mesh, its rows over the batch axes
        (`tpu.mesh.cache_shardings`), so each device decodes its share of them."""
        cache = kv_cache.empty(self.cfg, rows, slots, self.sampling.dtype)
        if self.mesh is None:
            return cache
        return jax.device_put(cache, cache_shardings(cache, self.mesh))

    def _make_room(self, rows: int, emptied: list[int], kept: int, needed: int) -> None:
        """Empties rows and makes `needed` free slots after the cache's length, in a cache of
        `bucket(kept + needed)` slots when it can: `kept` is the most slots a row that keeps
        its stream holds. Decode and prefill read every slot of the cache, so one left larger
        than that, by finished episodes or by padding, is compacted and cut down."""
        fits = bucket(kept + needed)
        if self._cache is None or kept == 0:  # no row keeps anything: start afresh
            self._cache = self._empty_cache(rows, fits)
            return
        if emptied:
            self._cache = kv_cache.reset_rows(self._cache,
                                              jnp.asarray(np.isin(np.arange(rows), emptied)))
        slots = self._cache.valid.shape[1]
        if int(self._cache.length) + needed > slots or fits < slots:
            self._cache = kv_cache.compact(self._cache)
            if fits != slots:
                self._cache = kv_cache.resize(self._cache, fits)

    def _prefill_shared(self, rows: int, distinct: dict, new: dict, fresh: list[int],
                        length: int) -> None:
        """Prefills each distinct stream head once and copies it to the rows that share it."""
        count = bucket(len(distinct))
        tokens = np.full((count, length), self.pad_id, np.int32)
        positions = np.full((count, length), -1, np.int32)
        for head, index in distinct.items():
            tokens[index, length - len(head):] = head
            positions[index, length - len(head):] = np.arange(len(head))
        sources = np.full(rows, -1, np.int32)
        for row in fresh:
            sources[row] = distinct.get(tuple(new[row][:-1].tolist()), -1)
        self._cache = kv_cache.prefill_rows(self.params, self.cfg, self._cache,
                                            *self._placed((tokens, positions, sources)))
